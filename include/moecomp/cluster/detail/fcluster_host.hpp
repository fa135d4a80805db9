#pragma once
// Internals of <moecomp/cluster/fcluster.hpp>: checking a linkage matrix, its monotone heights, and turning
// a set of performed merges into flat labels. Serial O(n) bookkeeping with workspaces from the context.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {
namespace detail {

using moecomp::detail::host_workspace;

/// Checks that `z` is a well-formed linkage matrix (see validate_linkage) and returns n = rows + 1. Every
/// message starts with `function` so that it names the public call that received z.
inline index_t check_linkage_matrix(const host_context& ctx, matrix_view<const double> z, const char* function) {
  MOECOMP_EXPECTS(z.cols() == 4, function, ": z must be an (n - 1) x 4 linkage matrix, got ",
                  moecomp::detail::shape_string(z.rows(), z.cols()));
  const index_t n = z.rows() + 1;
  // merged_at[c]: the row that merged cluster c, or -1 while c is unused. Clusters 0 .. 2n-2.
  host_workspace<index_t> merged_at(ctx, static_cast<std::size_t>(2 * n - 1));
  for (index_t c = 0; c < 2 * n - 1; ++c) merged_at[static_cast<std::size_t>(c)] = -1;
  auto size_of = [&](index_t c) { return c < n ? 1.0 : z(c - n, 3); };

  for (index_t i = 0; i < n - 1; ++i) {
    const double formed = static_cast<double>(n + i);  // ids available to row i: [0, n + i)
    for (index_t side = 0; side < 2; ++side) {
      const double id = z(i, side);
      // Comparisons first (NaN fails them), then integrality, so the cast below is always defined.
      MOECOMP_EXPECTS(id >= 0 && id < formed && id == std::floor(id), function, ": z row ", i, ": Z(", i, ", ", side,
                      ") = ", id, " is not a cluster formed before row ", i, " (expected an integer in [0, ", n + i,
                      "))");
    }
    const index_t a = static_cast<index_t>(z(i, 0)), b = static_cast<index_t>(z(i, 1));
    MOECOMP_EXPECTS(a < b, function, ": z row ", i, ": Z(", i, ", 0) = ", a, " must be < Z(", i, ", 1) = ", b);
    for (const index_t c : {a, b}) {
      const index_t earlier = merged_at[static_cast<std::size_t>(c)];
      MOECOMP_EXPECTS(earlier < 0, function, ": z row ", i, ": cluster ", c, " is merged a second time (first at row ",
                      earlier, ")");
      merged_at[static_cast<std::size_t>(c)] = i;
    }
    const double height = z(i, 2);
    // +inf is a height linkage() produces (points at infinite distance merge last), so it is valid here.
    MOECOMP_EXPECTS(height >= 0, function, ": z row ", i, ": height Z(", i, ", 2) = ", height,
                    " must be a number >= 0 (+inf allowed)");
    const double expected_size = size_of(a) + size_of(b);
    MOECOMP_EXPECTS(z(i, 3) == expected_size, function, ": z row ", i, ": size Z(", i, ", 3) = ", z(i, 3),
                    " must be the sum of the merged clusters' sizes, ", size_of(a), " + ", size_of(b), " = ",
                    expected_size);
  }
  return n;
}

/// h(i) = max(Z(i, 2), h of the rows that formed its two children): the largest merge height inside the
/// subtree of row i (scipy's maxdists). Children come from earlier rows, so one forward pass suffices.
inline void compute_monotone_heights(matrix_view<const double> z, index_t n, double* heights) {
  for (index_t i = 0; i < n - 1; ++i) {
    double h = z(i, 2);
    for (index_t side = 0; side < 2; ++side) {
      const auto c = static_cast<index_t>(z(i, side));
      if (c >= n && heights[c - n] > h) h = heights[c - n];
    }
    heights[i] = h;
  }
}

/// Labels the points of a cut: the flat clusters are the subtrees of performed rows whose parent row is not
/// performed, plus points whose own merge is not performed. `performed` must be closed under children (a
/// performed row's child rows are performed). Labels are numbered by first appearance over points 0..n-1.
/// Returns the number of clusters.
inline index_t label_cut(const host_context& ctx, matrix_view<const double> z, index_t n,
                         const unsigned char* performed, vector_view<std::int64_t> labels) {
  // top[c]: the flat cluster (a node id) that contains node c. Parents have larger row indices than their
  // children, so one backward pass over the rows reaches every parent before its children.
  host_workspace<index_t> top(ctx, static_cast<std::size_t>(2 * n - 1));
  top[static_cast<std::size_t>(2 * n - 2)] = 2 * n - 2;  // the root (point 0 when n == 1)
  for (index_t i = n - 2; i >= 0; --i) {
    const index_t node = n + i;
    for (index_t side = 0; side < 2; ++side) {
      const auto c = static_cast<index_t>(z(i, side));
      top[static_cast<std::size_t>(c)] = performed[i] ? top[static_cast<std::size_t>(node)] : c;
    }
  }
  host_workspace<std::int64_t> label_of(ctx, static_cast<std::size_t>(2 * n - 1));
  for (index_t c = 0; c < 2 * n - 1; ++c) label_of[static_cast<std::size_t>(c)] = -1;
  std::int64_t next = 0;
  for (index_t p = 0; p < n; ++p) {
    std::int64_t& label = label_of[static_cast<std::size_t>(top[static_cast<std::size_t>(p)])];
    if (label < 0) label = next++;
    labels[p] = label;
  }
  return next;
}

/// fcluster maxclust, arguments checked. Cuts the tree into exactly min(max_clusters, n) flat clusters: performs the first n - min(K, n) merges
/// in the order of their monotone height (monotone_heights), ties broken by row index, and labels points by
/// first appearance. Matches scipy's fcluster(Z, K, 'maxclust') up to relabelling whenever the monotone
/// height at the cut is not tied (scipy 1.10 also errs for K >= n - 1; see the docs). labels: n.
/// Returns the number of clusters, min(K, n).
inline index_t cut_into_clusters(const host_context& ctx, matrix_view<const double> z, index_t n, index_t max_clusters,
                                 vector_view<std::int64_t> labels) {
  const index_t merges = n - std::min(max_clusters, n);

  host_workspace<double> h(ctx, static_cast<std::size_t>(n - 1));
  compute_monotone_heights(z, n, h.data());
  host_workspace<unsigned char> performed(ctx, static_cast<std::size_t>(n - 1));
  // scipy's own linkages give non-decreasing monotone heights (the generic algorithm's included), so the
  // first `merges` rows are the answer without sorting; anything else is ordered by (height, row).
  if (std::is_sorted(h.data(), h.data() + (n - 1))) {
    for (index_t i = 0; i < n - 1; ++i) performed[static_cast<std::size_t>(i)] = i < merges;
  } else {
    host_workspace<index_t> order(ctx, static_cast<std::size_t>(n - 1));
    for (index_t i = 0; i < n - 1; ++i) order[static_cast<std::size_t>(i)] = i;
    const double* hp = h.data();
    std::sort(order.data(), order.data() + (n - 1), [hp](index_t a, index_t b) {
      return hp[a] < hp[b] || (hp[a] == hp[b] && a < b);
    });
    for (index_t k = 0; k < n - 1; ++k)
      performed[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])] = k < merges;
  }
  return label_cut(ctx, z, n, performed.data(), labels);
}

/// fcluster distance, arguments checked. scipy's fcluster(Z, t, 'distance'): points i and j share a cluster exactly when the monotone height of
/// the merge that joins them is <= height, i.e. every merge with monotone height <= height is performed.
/// labels: n, numbered by first appearance. Returns the number of clusters. height must not be NaN.
inline index_t cut_at_height(const host_context& ctx, matrix_view<const double> z, index_t n, double height,
                             vector_view<std::int64_t> labels) {
  host_workspace<double> h(ctx, static_cast<std::size_t>(n - 1));
  compute_monotone_heights(z, n, h.data());
  host_workspace<unsigned char> performed(ctx, static_cast<std::size_t>(n - 1));
  for (index_t i = 0; i < n - 1; ++i) performed[static_cast<std::size_t>(i)] = h[static_cast<std::size_t>(i)] <= height;
  return label_cut(ctx, z, n, performed.data(), labels);
}

}  // namespace detail
}  // namespace cluster
MOECOMP_NAMESPACE_END
