#pragma once
// k-means by Lloyd's algorithm on the host: scikit-learn's KMeans(algorithm="lloyd") with its conventions
// (greedy k-means++, tol scaled by the mean per-feature variance, stop when no label changes, a final
// assignment when it stops on the shift), deterministic and bit-identical at any thread count.
// Documentation: docs/kmeans.md.
//
//   x (n x d, float or double), optional sample weights (n, finite, >= 0, positive total);
//   centers (k x d): the initial centres on entry when params.init is given, the final centres on exit;
//   labels (n): the cluster of each row, 0 .. k - 1; sizes (k): rows per cluster.
//
// The assignment step compares ||c_j||^2 - 2 x_i . c_j from one GEMM per 256-row tile (ties to the lowest
// j); with size bounds (params.size_min / size_max, balanced k-means) it is the exact transportation problem
// from the rows to the centres, solved by the network simplex (<moecomp/ot/emd.hpp>), its duality gap
// reported. The centre update sums each cluster's rows in double in row order. Empty clusters take the rows
// farthest from their centres (docs/kmeans.md). Cost per iteration: 2 n k d flops of GEMM plus O(n d).
#include <moecomp/cluster/kmeans_types.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cluster/detail/kmeans_checks.hpp>
#include <moecomp/cluster/detail/kmeans_host.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/traits.hpp>

#include <cstdint>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {

/// Lloyd's k-means with sample weights (see above). Throws invalid_argument for bad shapes or parameters,
/// non-finite x, weights or given centres, or n < k.
template <class T>
kmeans_result kmeans(const host_context& ctx, const kmeans_params& params,
                     moecomp::detail::type_identity_t<matrix_view<const T>> x,
                     moecomp::detail::type_identity_t<vector_view<const T>> sample_weight, matrix_view<T> centers,
                     vector_view<std::int64_t> labels, vector_view<index_t> sizes) {
  static_assert(moecomp::detail::is_real_v<T>, "kmeans: T must be float or double");
  constexpr const char* fn = "kmeans";
  const index_t n = x.rows(), d = x.cols(), k = params.clusters;
  detail::check_kmeans_params(fn, params, n, d);
  detail::check_kmeans_shapes(fn, params, n, d, centers, labels, sizes, sample_weight.size());
  moecomp::detail::check_no_overlap(fn, "centers", centers, "x", x);
  moecomp::detail::check_finite(fn, "x", x, ctx.threads());
  if (params.init == kmeans_init::given)
    moecomp::detail::check_finite(fn, "centers (the given initial centres)", matrix_view<const T>(centers));
  moecomp::detail::host_workspace<T> weights(ctx, sample_weight.empty() ? 0 : static_cast<std::size_t>(n));
  if (!sample_weight.empty()) {
    const double total = moecomp::detail::check_masses(fn, "sample_weight", sample_weight);
    moecomp::detail::check_positive_total(fn, "sample_weight", total);
    for (index_t i = 0; i < n; ++i) weights[static_cast<std::size_t>(i)] = sample_weight[i];
  }
  const detail::kmeans_data<T> data{x, sample_weight.empty() ? nullptr : weights.data(), n, d, k};
  return detail::kmeans_host<T>(ctx, params, data, centers, labels, sizes);
}

/// Unit sample weights.
template <class T>
kmeans_result kmeans(const host_context& ctx, const kmeans_params& params,
                     moecomp::detail::type_identity_t<matrix_view<const T>> x, matrix_view<T> centers,
                     vector_view<std::int64_t> labels, vector_view<index_t> sizes) {
  return kmeans<T>(ctx, params, x, vector_view<const T>(), centers, labels, sizes);
}

}  // namespace cluster
MOECOMP_NAMESPACE_END
