#pragma once
// Linkage of a condensed or square distance matrix, behind <moecomp/cluster/linkage_from_distances.hpp>: the working copy and the method dispatch.
#include <moecomp/core/detail/internal_header.hpp>
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

#include <algorithm>
#include <cmath>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {
namespace detail {

/// Runs `method` on a condensed working copy `d` of n >= 2 points (destroyed) and writes Z.
inline void linkage_on_working_copy(const host_context& ctx, linkage_method method, index_t n, double* d,
                                    matrix_view<double> z) {
  host_workspace<merge_step> steps(ctx, static_cast<std::size_t>(n - 1));
  if (method == linkage_method::single) {
    host_workspace<index_t> row_base(ctx, static_cast<std::size_t>(n));
    fill_row_bases(n, row_base.data());
    const condensed_rows<double> rows{vector_view<const double>(d, distance::condensed_size(n)), row_base.data(),
                                      ctx.threads()};
    prim_single_linkage(ctx, n, rows, steps.data());
    write_linkage_matrix(ctx, n, steps.data(), true, z);
    return;
  }
  // Ward, centroid and median square the distances in their updates: distances beyond about 1e153 (or below
  // 1e-146) are first scaled by an exact power of two, which every update formula carries through (they are
  // homogeneous of degree 1), and the heights are scaled back. Ordinary distances (prescale 1) are untouched.
  const index_t count = distance::condensed_size(n);
  double prescale = 1.0;
  if (requires_euclidean(method)) {
    double largest = 0.0;
    for (index_t k = 0; k < count; ++k)
      if (std::isfinite(d[k])) largest = std::max(largest, d[k]);
    prescale = moecomp::detail::safe_prescale<double>(largest, 1);
    if (prescale != 1.0)
      for (index_t k = 0; k < count; ++k) d[k] *= prescale;
  }
  dispatch_method(method, [&](auto tag) {
    constexpr linkage_method M = decltype(tag)::value;
    if constexpr (is_monotone(M)) {
      nn_chain_linkage<M>(ctx, n, d, steps.data());
    } else {
      condensed_oracle<M> oracle(ctx, n, d);
      generic_linkage(ctx, n, oracle, steps.data());
    }
    write_linkage_matrix(ctx, n, steps.data(), is_monotone(M), z);
  });
  if (prescale != 1.0)
    for (index_t i = 0; i < z.rows(); ++i) z(i, 2) /= prescale;
}

inline const char* undefined_distance_reason(distance::metric m) noexcept {
  switch (m) {
    case distance::metric::cosine: return "an all-zero row has no direction";
    case distance::metric::correlation: return "a constant row has no direction";
    default: break;
  }
  return "the squared distance overflowed";
}

[[noreturn]] inline void fail_nan_distance(const char* function, distance::metric m, index_t i, index_t j) {
  MOECOMP_FAIL(error_kind::invalid_argument, function, ": the ", distance::to_string(m), " distance between points ",
               i, " and ", j, " is NaN (", undefined_distance_reason(m), ")");
}

}  // namespace detail
}  // namespace cluster
MOECOMP_NAMESPACE_END
