#pragma once
// Agglomerative hierarchical clustering on the host: scipy.cluster.hierarchy.linkage's seven methods, with
// scipy's algorithms, update formulas and output conventions. Input: points (distances computed by
// moecomp::distance), a condensed distance vector, or a square distance matrix; or points in O(n d) memory
// for single, ward, centroid and median. Output: scipy's (n - 1) x 4 linkage matrix Z (see
// linkage_types.hpp). Documentation: docs/cluster.md.
#include <moecomp/cluster/linkage_from_distances.hpp>
#include <moecomp/cluster/linkage_types.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/distance/pairwise_distance.hpp>
#include <moecomp/distance/distance_types.hpp>
#include <moecomp/cluster/detail/linkage_low_memory.hpp>
#include <moecomp/core/detail/traits.hpp>

#include <algorithm>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {

/// Z of the points' rows: condensed distances with moecomp::distance (params.metric, computed in T), then
/// the linkage in double. points: n x d (n >= 1) of float or double, finite; z: (n - 1) x 4.
/// Workspace: n (n - 1) / 2 doubles plus O(n), and the distance module's O(n d) (docs/cluster.md).
template <class U, std::enable_if_t<moecomp::detail::is_real_input_v<U>, int> = 0>
void linkage(const host_context& ctx, const linkage_params& params, matrix_view<U> points, matrix_view<double> z) {
  using T = std::remove_const_t<U>;
  const index_t n = points.rows();
  detail::check_points_input("linkage", n, points.cols(), params, z);
  const matrix_view<const T> x = points;
  detail::check_finite_points("linkage", x);
  if (n == 1) return;

  const index_t count = distance::condensed_size(n);
  detail::working_distances d(ctx, count);
  double* out = d.data();
  distance::pairwise_distance_params dp;
  dp.metric = params.metric;
  distance::for_each_pairwise_distance<T>(ctx, dp, x, [&](index_t i, index_t j0, const T* values, index_t c_count) {
    double* target = out + distance::condensed_index(n, i, j0);
    for (index_t c = 0; c < c_count; ++c) target[c] = static_cast<double>(values[c]);
  });
  if (const index_t bad = detail::copy_and_find_invalid(ctx, vector_view<const double>(out, count), nullptr);
      bad >= 0) {  // only NaN is possible here: the distances of finite points are never negative
    index_t i, j;
    detail::condensed_pair(n, bad, i, j);
    detail::fail_nan_distance("linkage", params.metric, i, j);
  }
  detail::linkage_on_working_copy(ctx, params.method, n, out, z);
}

/// Z of the points' rows without the distance matrix, in O(n d) memory: single (any metric; Prim with
/// distances computed on the fly), ward, centroid, median (euclidean; cluster centres and sizes). Other
/// methods need the matrix: invalid_argument. Same Z as linkage() up to the rounding of the distances.
template <class U, std::enable_if_t<moecomp::detail::is_real_input_v<U>, int> = 0>
void linkage_low_memory(const host_context& ctx, const linkage_params& params, matrix_view<U> points,
                        matrix_view<double> z) {
  using T = std::remove_const_t<U>;
  const linkage_method m = params.method;
  MOECOMP_EXPECTS(m == linkage_method::single || requires_euclidean(m), "linkage_low_memory: method ",
                  to_string(m), " needs the full distance matrix; use linkage() (low-memory mode supports single, "
                  "ward, centroid and median)");
  const index_t n = points.rows();
  detail::check_points_input("linkage_low_memory", n, points.cols(), params, z);
  const matrix_view<const T> x = points;
  detail::check_finite_points("linkage_low_memory", x);
  if (n == 1) return;

  // Points whose squares would overflow (or underflow) are scaled by a power of two and the heights scaled
  // back, both exactly: ordinary inputs (prescale 1) are untouched (docs/distance.md, "Range").
  const bool euclidean_family =
      params.metric == distance::metric::euclidean || params.metric == distance::metric::sqeuclidean;
  const double prescale =
      euclidean_family ? moecomp::detail::safe_prescale<double>(moecomp::detail::max_magnitude<T>(ctx, x, nullptr),
                                                                x.cols())
                       : 1.0;
  detail::host_workspace<detail::merge_step> steps(ctx, static_cast<std::size_t>(n - 1));
  if (m == linkage_method::single) {
    const detail::point_rows<T> rows(ctx, params.metric, x, prescale);
    if (const index_t bad = rows.first_undefined_row(); bad >= 0)
      detail::fail_nan_distance("linkage_low_memory", params.metric, 0, bad == 0 ? 1 : bad);
    detail::prim_single_linkage(ctx, n, rows, steps.data());
    detail::write_linkage_matrix(ctx, n, steps.data(), true, z);
  } else {
    detail::dispatch_method(m, [&](auto tag) {
      constexpr linkage_method M = decltype(tag)::value;
      if constexpr (requires_euclidean(M)) {
        detail::centroid_oracle<M> oracle(ctx, x, prescale);
        detail::generic_linkage(ctx, n, oracle, steps.data());
        detail::write_linkage_matrix(ctx, n, steps.data(), is_monotone(M), z);
      }
    });
  }
  if (prescale != 1.0) {
    const double unscale = 1.0 / prescale;
    const double factor = params.metric == distance::metric::sqeuclidean ? unscale * unscale : unscale;
    for (index_t i = 0; i < z.rows(); ++i) z(i, 2) *= factor;
  }
}

// Convenience overloads returning Z as an owning (n - 1) x 4 matrix.

template <class U, std::enable_if_t<moecomp::detail::is_real_input_v<U>, int> = 0>
host_matrix<double> linkage(const host_context& ctx, const linkage_params& params, matrix_view<U> points) {
  host_matrix<double> z(std::max<index_t>(points.rows() - 1, 0), 4);
  linkage(ctx, params, points, z.view());
  return z;
}


template <class U, std::enable_if_t<moecomp::detail::is_real_input_v<U>, int> = 0>
host_matrix<double> linkage_low_memory(const host_context& ctx, const linkage_params& params,
                                       matrix_view<U> points) {
  host_matrix<double> z(std::max<index_t>(points.rows() - 1, 0), 4);
  linkage_low_memory(ctx, params, points, z.view());
  return z;
}

}  // namespace cluster
MOECOMP_NAMESPACE_END
