#pragma once
// Flat clusters and cophenetic distances from a linkage matrix Z (scipy's format, see linkage_types.hpp):
// scipy.cluster.hierarchy's fcluster(Z, t, 'maxclust' or 'distance'), cophenet(Z) and
// maxdists(Z). Documentation: docs/cluster.md ("Flat clusters").
//
// All functions are host-only, serial bookkeeping (O(n) or O(n^2)); the context supplies the workspace
// allocator and its thread count is not used. Every function validates Z first (validate_linkage).
// Labels are 0-based and numbered by first appearance: point 0 has label 0, the next point in a new cluster
// has label 1, and so on.
#include <moecomp/cluster/linkage_types.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/distance/distance_types.hpp>
#include <moecomp/cluster/detail/fcluster_host.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {

/// Throws invalid_argument naming the row and the problem unless z is an (n - 1) x 4 linkage matrix
/// (n >= 1) where each row i merges two integer ids Z(i, 0) < Z(i, 1), each a point (< n) or a cluster formed
/// by an earlier row (n + j, j < i) and not merged before, at a height Z(i, 2) >= 0 (+inf included: linkage
/// merges points at infinite distance last; NaN is refused), into a cluster of size Z(i, 3) = the sum of the
/// two sizes. Heights need not be monotone (centroid, median).
inline void validate_linkage(const host_context& ctx, matrix_view<const double> z) {
  detail::check_linkage_matrix(ctx, z, "validate_linkage");
}

/// heights(i) = max(Z(i, 2), heights of the rows that formed its children): the largest height inside the
/// subtree of row i (scipy's maxdists). Equal to Z(:, 2) for monotone linkages. heights: n - 1.
inline void monotone_heights(const host_context& ctx, matrix_view<const double> z, vector_view<double> heights) {
  const index_t n = detail::check_linkage_matrix(ctx, z, "monotone_heights");
  MOECOMP_EXPECTS(heights.size() == n - 1, "monotone_heights: heights must have n - 1 = ", n - 1,
                  " elements (one per row of z), got ", heights.size());
  detail::host_workspace<double> h(ctx, static_cast<std::size_t>(n - 1));
  detail::compute_monotone_heights(z, n, h.data());
  for (index_t i = 0; i < n - 1; ++i) heights[i] = h[static_cast<std::size_t>(i)];
}

/// scipy's fcluster(Z, t, criterion): flat clusters of the tree, labels (n) numbered by first appearance;
/// returns the number of clusters.
///  * maxclust: exactly min(params.max_clusters, n) clusters: the first n - min(K, n) merges in the order of
///    their monotone height (monotone_heights), ties broken by row index. Matches scipy's
///    fcluster(Z, K, 'maxclust') up to relabelling whenever the monotone height at the cut is not tied
///    (scipy 1.10 also errs for K >= n - 1; see the docs).
///  * distance: points i and j share a cluster exactly when the monotone height of the merge that joins them
///    is <= params.height, i.e. every merge with monotone height <= height is performed.
inline index_t fcluster(const host_context& ctx, const fcluster_params& params, matrix_view<const double> z,
                        vector_view<std::int64_t> labels) {
  const index_t n = detail::check_linkage_matrix(ctx, z, "fcluster");
  MOECOMP_EXPECTS(labels.size() == n, "fcluster: labels must have n = ", n, " elements (rows of z + 1), got ",
                  labels.size());
  if (params.criterion == fcluster_criterion::maxclust) {
    MOECOMP_EXPECTS(params.max_clusters >= 1, "fcluster: params.max_clusters must be >= 1, got ", params.max_clusters);
    return detail::cut_into_clusters(ctx, z, n, params.max_clusters, labels);
  }
  MOECOMP_EXPECTS(!std::isnan(params.height), "fcluster: params.height must not be NaN");
  return detail::cut_at_height(ctx, z, n, params.height, labels);
}

/// scipy's cophenet(Z): condensed[condensed_index(n, i, j)] = Z(r, 2) for the row r that first joins points
/// i and j (the raw height, not the monotone one, as scipy). condensed: n (n - 1) / 2, scipy pdist order.
/// O(n^2) time, O(n) workspace: each row writes the pairs across its two children, walking linked lists of
/// their points.
inline void cophenetic_distances(const host_context& ctx, matrix_view<const double> z, vector_view<double> condensed) {
  const index_t n = detail::check_linkage_matrix(ctx, z, "cophenetic_distances");
  MOECOMP_EXPECTS(condensed.size() == distance::condensed_size(n), "cophenetic_distances: condensed must have ",
                  "n (n - 1) / 2 = ", distance::condensed_size(n), " elements for n = ", n, ", got ", condensed.size());
  // Each node's points form a singly linked list through next[]; a merge concatenates its children's lists.
  detail::host_workspace<index_t> next(ctx, static_cast<std::size_t>(n));
  detail::host_workspace<index_t> first(ctx, static_cast<std::size_t>(2 * n - 1));
  detail::host_workspace<index_t> last(ctx, static_cast<std::size_t>(2 * n - 1));
  for (index_t p = 0; p < n; ++p) {
    next[static_cast<std::size_t>(p)] = -1;
    first[static_cast<std::size_t>(p)] = last[static_cast<std::size_t>(p)] = p;
  }
  for (index_t r = 0; r < n - 1; ++r) {
    const auto a = static_cast<std::size_t>(z(r, 0)), b = static_cast<std::size_t>(z(r, 1));
    const double height = z(r, 2);
    for (index_t p = first[a]; p >= 0; p = next[static_cast<std::size_t>(p)])
      for (index_t q = first[b]; q >= 0; q = next[static_cast<std::size_t>(q)])
        condensed[p < q ? distance::condensed_index(n, p, q) : distance::condensed_index(n, q, p)] = height;
    next[static_cast<std::size_t>(last[a])] = first[b];
    first[static_cast<std::size_t>(n + r)] = first[a];
    last[static_cast<std::size_t>(n + r)] = last[b];
  }
}

}  // namespace cluster
MOECOMP_NAMESPACE_END
