#pragma once
// Agglomerative hierarchical clustering of a distance matrix (condensed or square) on the host: the part of
// <moecomp/cluster/linkage.hpp> that needs no distance computation, and therefore no Eigen. The CUDA
// overload (<moecomp/cuda/cluster/linkage.cuh>) includes this header alone. Documentation: docs/cluster.md.
#include <moecomp/cluster/linkage_types.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/distance/distance_types.hpp>
#include <moecomp/cluster/detail/linkage_common.hpp>
#include <moecomp/cluster/detail/linkage_generic.hpp>
#include <moecomp/cluster/detail/linkage_mst.hpp>
#include <moecomp/cluster/detail/linkage_nn_chain.hpp>
#include <moecomp/core/detail/range_scaling.hpp>
#include <moecomp/cluster/detail/linkage_from_distances_host.hpp>
#include <moecomp/core/detail/traits.hpp>

#include <algorithm>
#include <cmath>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {

/// Z of a condensed distance vector (scipy pdist order) of length n (n - 1) / 2, float or double, any
/// stride; entries must be >= 0 (+inf allowed), never NaN. params.metric is ignored. Length 0 means n = 1.
/// Workspace: n (n - 1) / 2 doubles (none for single) plus O(n).
template <class U, std::enable_if_t<moecomp::detail::is_real_input_v<U>, int> = 0>
void linkage_condensed(const host_context& ctx, const linkage_params& params, vector_view<U> condensed,
                       matrix_view<double> z) {
  using T = std::remove_const_t<U>;
  const index_t length = condensed.size();
  const index_t n = detail::points_from_condensed_length(length);
  if (MOECOMP_UNLIKELY(n < 0)) {
    index_t below = 1;
    while (distance::condensed_size(below + 1) < length) ++below;
    MOECOMP_FAIL(error_kind::invalid_argument,
                 "linkage_condensed: condensed must have n (n - 1) / 2 elements for some number of points n, got ",
                 length, " (", distance::condensed_size(below), " would be n = ", below, ", ",
                 distance::condensed_size(below + 1), " would be n = ", below + 1, ")");
  }
  detail::check_z_shape("linkage_condensed", n, z);
  const vector_view<const T> v = condensed;
  const bool single = params.method == linkage_method::single;  // Prim only reads: no working copy
  detail::working_distances d(ctx, single ? 0 : length);
  if (const index_t bad = detail::copy_and_find_invalid(ctx, v, single ? nullptr : d.data()); bad >= 0) {
    index_t i, j;
    detail::condensed_pair(n, bad, i, j);
    detail::check_distance_value("linkage_condensed", static_cast<double>(v[bad]), [&] {
      return moecomp::detail::concat("condensed[", bad, "] (the distance between points ", i, " and ", j, ")");
    });
  }
  if (n == 1) return;
  if (single) {
    detail::host_workspace<index_t> row_base(ctx, static_cast<std::size_t>(n));
    detail::fill_row_bases(n, row_base.data());
    detail::host_workspace<detail::merge_step> steps(ctx, static_cast<std::size_t>(n - 1));
    detail::prim_single_linkage(ctx, n, detail::condensed_rows<T>{v, row_base.data(), ctx.threads()}, steps.data());
    detail::write_linkage_matrix(ctx, n, steps.data(), true, z);
    return;
  }
  detail::linkage_on_working_copy(ctx, params.method, n, d.data(), z);
}

/// Z of an n x n distance matrix (n >= 1): exactly symmetric, zero diagonal, entries >= 0 (+inf allowed),
/// never NaN; float or double. params.metric is ignored. Workspace as linkage_condensed.
template <class U, std::enable_if_t<moecomp::detail::is_real_input_v<U>, int> = 0>
void linkage_square(const host_context& ctx, const linkage_params& params, matrix_view<U> square,
                    matrix_view<double> z) {
  using T = std::remove_const_t<U>;
  const index_t n = square.rows();
  MOECOMP_EXPECTS(n >= 1 && square.cols() == n, "linkage_square: square must be n x n with n >= 1, got ",
                  moecomp::detail::shape_string(n, square.cols()));
  detail::check_z_shape("linkage_square", n, z);
  const matrix_view<const T> s = square;
  if (!detail::is_valid_square(ctx, s)) {  // find and name the first offending entry in row-major order
    for (index_t i = 0; i < n; ++i) {
      for (index_t j = 0; j < n; ++j) {
        const double value = static_cast<double>(s(i, j));
        detail::check_distance_value("linkage_square", value,
                                     [&] { return moecomp::detail::concat("square(", i, ", ", j, ")"); });
        MOECOMP_EXPECTS(i != j || value == 0.0, "linkage_square: the diagonal must be 0, got square(", i, ", ", i,
                        ") = ", value);
        if (j > i) {
          const double mirror = static_cast<double>(s(j, i));
          detail::check_distance_value("linkage_square", mirror,
                                       [&] { return moecomp::detail::concat("square(", j, ", ", i, ")"); });
          MOECOMP_EXPECTS(value == mirror, "linkage_square: square must be symmetric, got square(", i, ", ", j,
                          ") = ", value, " but square(", j, ", ", i, ") = ", mirror);
        }
      }
    }
  }
  if (n == 1) return;
  if (params.method == linkage_method::single) {
    detail::host_workspace<detail::merge_step> steps(ctx, static_cast<std::size_t>(n - 1));
    detail::prim_single_linkage(ctx, n, detail::square_rows<T>{s, ctx.threads()}, steps.data());
    detail::write_linkage_matrix(ctx, n, steps.data(), true, z);
    return;
  }
  detail::working_distances d(ctx, distance::condensed_size(n));
  double* out = d.data();
  for (index_t i = 0; i < n; ++i) {
    const T* row = s.row_ptr(i);
    for (index_t j = i + 1; j < n; ++j) *out++ = static_cast<double>(row[j]);
  }
  detail::linkage_on_working_copy(ctx, params.method, n, d.data(), z);
}

// Convenience overloads returning Z as an owning (n - 1) x 4 matrix.

template <class U, std::enable_if_t<moecomp::detail::is_real_input_v<U>, int> = 0>
host_matrix<double> linkage_condensed(const host_context& ctx, const linkage_params& params,
                                      vector_view<U> condensed) {
  const index_t n = detail::points_from_condensed_length(condensed.size());
  host_matrix<double> z(std::max<index_t>(n - 1, 0), 4);
  linkage_condensed(ctx, params, condensed, z.view());
  return z;
}

template <class U, std::enable_if_t<moecomp::detail::is_real_input_v<U>, int> = 0>
host_matrix<double> linkage_square(const host_context& ctx, const linkage_params& params, matrix_view<U> square) {
  host_matrix<double> z(std::max<index_t>(square.rows() - 1, 0), 4);
  linkage_square(ctx, params, square, z.view());
  return z;
}

}  // namespace cluster
MOECOMP_NAMESPACE_END
