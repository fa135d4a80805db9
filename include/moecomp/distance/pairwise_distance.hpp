#pragma once
// Pairwise distances between the rows of matrices, on the host: scipy.spatial.distance.pdist / cdist /
// squareform semantics for euclidean, sqeuclidean, cosine and correlation, computed through a GEMM.
// The device overloads (same names, device views, cuda_context) are in
// <moecomp/cuda/distance/pairwise_distance.cuh>. Documentation: docs/distance.md.
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/distance/distance_types.hpp>
#include <moecomp/distance/detail/pairwise_distance_host.hpp>
#include <moecomp/distance/detail/shape_checks.hpp>
#include <moecomp/core/detail/traits.hpp>

#include <memory>
#include <type_traits>
#include <utility>

MOECOMP_NAMESPACE_BEGIN
namespace distance {

/// out(i, j) = dist(x_i, y_j). x: n x d, y: m x d, out: n x m. `x` and `y` may be const or mutable views
/// of T (float or double); out must not overlap them.
template <class T, class U, class V,
          std::enable_if_t<moecomp::detail::is_input_of_v<U, T> && moecomp::detail::is_input_of_v<V, T>,
                           int> = 0>
void pairwise_distances(const host_context& ctx, const pairwise_distance_params& params, matrix_view<U> x,
                        matrix_view<V> y, matrix_view<T> out) {
  detail::check_element_type<T>();
  detail::check_cross_shapes(x, y, out);
  const matrix_view<const T> xc = x, yc = y;
  detail::compute<T>(ctx, params, xc, &yc, [&](index_t i, index_t j0, const T* values, index_t count) {
    T* row = out.row_ptr(i) + j0;
    for (index_t c = 0; c < count; ++c) row[c] = values[c];
  });
}

/// out(i, j) = dist(x_i, x_j): the n x n square form, exactly symmetric with an exact zero diagonal.
template <class T, class U, std::enable_if_t<moecomp::detail::is_input_of_v<U, T>, int> = 0>
void pairwise_distances(const host_context& ctx, const pairwise_distance_params& params, matrix_view<U> x,
                        matrix_view<T> out) {
  detail::check_element_type<T>();
  detail::check_square_shape(x, out);
  for (index_t i = 0; i < x.rows(); ++i) out(i, i) = T(0);
  const matrix_view<const T> xc = x;
  detail::compute<T>(ctx, params, xc, nullptr, [&](index_t i, index_t j0, const T* values, index_t count) {
    T* row = out.row_ptr(i) + j0;
    for (index_t c = 0; c < count; ++c) row[c] = values[c];
    for (index_t c = 0; c < count; ++c) out(j0 + c, i) = values[c];
  });
}

/// The condensed form (scipy pdist): out[condensed_index(n, i, j)] = dist(x_i, x_j) for i < j, length
/// n (n - 1) / 2.
template <class T, class U, std::enable_if_t<moecomp::detail::is_input_of_v<U, T>, int> = 0>
void pairwise_distances_condensed(const host_context& ctx, const pairwise_distance_params& params,
                                  matrix_view<U> x, vector_view<T> out) {
  detail::check_element_type<T>();
  const index_t n = x.rows();
  detail::check_condensed_size(x, out);
  const matrix_view<const T> xc = x;
  detail::compute<T>(ctx, params, xc, nullptr, [&](index_t i, index_t j0, const T* values, index_t count) {
    T* first = out.ptr(condensed_index(n, i, j0));  // a row's pairs are consecutive in scipy's order
    const index_t stride = out.stride();
    for (index_t c = 0; c < count; ++c) first[c * stride] = values[c];
  });
}

/// The distances dist(x_i, x_j), i < j, handed to `sink(i, j0, values, count)` one row segment at a time
/// (values[c] = dist(x_i, x_{j0 + c}) as T, j0 > i) instead of being stored: for consumers that keep them
/// in a form of their own (cluster::linkage keeps them in double). Segments are disjoint and arrive from
/// several threads at once; their values are those of pairwise_distances_condensed, bit for bit, whatever
/// the thread count.
template <class T, class U, class Sink, std::enable_if_t<moecomp::detail::is_input_of_v<U, T>, int> = 0>
void for_each_pairwise_distance(const host_context& ctx, const pairwise_distance_params& params, matrix_view<U> x,
                                Sink&& sink) {
  detail::check_element_type<T>();
  const matrix_view<const T> xc = x;
  detail::compute<T>(ctx, params, xc, nullptr, std::forward<Sink>(sink));
}

}  // namespace distance
MOECOMP_NAMESPACE_END
