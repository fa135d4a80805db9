#pragma once
// Groupings of experts (or any items) given as labels, with HC-SMoE's conventions: groups are numbered by
// first appearance, and a group's representative ("dominant") expert is the member nearest the group's mean
// feature, lowest index on ties. Documentation: docs/cluster.md ("Groupings").
//
// A grouping is a label vector of n values in [0, k) in which every value 0 .. k-1 is used (k = max + 1):
// what fcluster and relabel_by_first_appearance produce. Host-only serial
// bookkeeping; the context supplies the workspace allocator and its thread count is not used.
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cluster/detail/fcluster_host.hpp>
#include <moecomp/cluster/detail/grouping_host.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {

/// The number of groups k = max label + 1, after checking that labels form a grouping (every label in
/// [0, k) is used; otherwise invalid_argument naming the first bad label or the empty group). 0 for n = 0.
inline index_t group_count(const host_context& ctx, vector_view<const std::int64_t> labels) {
  return detail::check_grouping(ctx, labels, "group_count");
}

/// Renumbers arbitrary label values (any int64, e.g. scipy's 1-based labels) by first appearance: the
/// label of item 0 becomes 0, the next new value met becomes 1, and so on. Items with equal labels keep
/// equal labels. `relabelled` (n) may be the same memory as `labels`. Returns the number of groups.
/// O(n log n).
inline index_t relabel_by_first_appearance(const host_context& ctx, vector_view<const std::int64_t> labels,
                                           vector_view<std::int64_t> relabelled) {
  const index_t n = labels.size();
  MOECOMP_EXPECTS(relabelled.size() == n, "relabel_by_first_appearance: relabelled must have n = ", n,
                  " elements like labels, got ", relabelled.size());
  // Items sorted by (label, index): each run of equal labels starts with its first appearance.
  detail::host_workspace<index_t> order(ctx, static_cast<std::size_t>(n));
  for (index_t p = 0; p < n; ++p) order[static_cast<std::size_t>(p)] = p;
  std::sort(order.data(), order.data() + n, [&labels](index_t a, index_t b) {
    return labels[a] < labels[b] || (labels[a] == labels[b] && a < b);
  });
  // first_of[p]: the first item carrying p's label. New numbers go to first items in index order.
  detail::host_workspace<index_t> first_of(ctx, static_cast<std::size_t>(n));
  for (index_t s = 0; s < n;) {
    const index_t run_first = order[static_cast<std::size_t>(s)];
    index_t e = s;
    for (; e < n && labels[order[static_cast<std::size_t>(e)]] == labels[run_first]; ++e)
      first_of[static_cast<std::size_t>(order[static_cast<std::size_t>(e)])] = run_first;
    s = e;
  }
  // An item is the first of its group iff first_of[p] == p; since first_of[p] <= p, the group's number is
  // already assigned when a later member is reached. order[] is reused to hold the new number of each first.
  std::int64_t next = 0;
  for (index_t p = 0; p < n; ++p) {
    const index_t f = first_of[static_cast<std::size_t>(p)];
    if (f == p) order[static_cast<std::size_t>(p)] = next++;
    relabelled[p] = order[static_cast<std::size_t>(f)];
  }
  return next;
}

/// The members of each group in CSR form: members[offsets[g] .. offsets[g + 1]) are the items of group g in
/// ascending order. labels: a grouping of n items into k groups; offsets: k + 1; members: n.
inline void group_members(const host_context& ctx, vector_view<const std::int64_t> labels,
                          vector_view<index_t> offsets, vector_view<index_t> members) {
  const index_t n = labels.size();
  detail::host_workspace<index_t> counts(ctx, static_cast<std::size_t>(n));
  const index_t k = detail::check_grouping(ctx, labels, "group_members", counts.data());
  MOECOMP_EXPECTS(offsets.size() == k + 1, "group_members: offsets must have k + 1 = ", k + 1,
                  " elements for the k = ", k, " groups of labels, got ", offsets.size());
  MOECOMP_EXPECTS(members.size() == n, "group_members: members must have n = ", n, " elements like labels, got ",
                  members.size());
  offsets[0] = 0;
  for (index_t g = 0; g < k; ++g) offsets[g + 1] = offsets[g] + counts[static_cast<std::size_t>(g)];
  // counts[] becomes each group's fill position; items are visited in ascending order.
  for (index_t g = 0; g < k; ++g) counts[static_cast<std::size_t>(g)] = offsets[g];
  for (index_t p = 0; p < n; ++p) members[counts[static_cast<std::size_t>(labels[p])]++] = p;
}

/// The same representatives from the items' condensed Euclidean distances (scipy's pdist order, n(n-1)/2
/// entries) instead of their features, for features too large to hold (an expert's flattened weights): the
/// member nearest the group's mean feature is the member with the least sum of squared distances to the group's
/// members, since ||f_i - mean||^2 = (1/|G|) sum_j ||f_i - f_j||^2 - (a constant of the group). Lowest index on
/// ties. Sums in double; O(n^2) time. Equal to group_representatives on the features up to rounding.
inline void group_representatives_from_distances(const host_context& ctx, vector_view<const double> condensed,
                                                 vector_view<const std::int64_t> labels,
                                                 vector_view<index_t> representatives) {
  const index_t n = labels.size();
  MOECOMP_EXPECTS(condensed.size() == n * (n - 1) / 2, "group_representatives_from_distances: condensed must have ",
                  "n (n - 1) / 2 = ", n * (n - 1) / 2, " entries for the ", n, " labels, got ", condensed.size());
  const index_t k = detail::check_grouping(ctx, labels, "group_representatives_from_distances");
  MOECOMP_EXPECTS(representatives.size() == k, "group_representatives_from_distances: representatives must have k = ",
                  k, " elements (one per group of labels), got ", representatives.size());
  detail::representatives_from_condensed(ctx, condensed, labels, representatives);
}

/// HC-SMoE's representative ("dominant") member of each group: representatives[g] = the item p of group g
/// whose feature row is nearest to the group's mean feature (Euclidean distance; means and squared
/// distances accumulated in double), the lowest index on ties. features: n x d (float, double, bfloat16 or
/// half; finite), labels: a grouping of the n rows into k groups, representatives: k. O(n d) time, O(k d)
/// workspace.
template <class U>
void group_representatives(const host_context& ctx, matrix_view<U> features, vector_view<const std::int64_t> labels,
                           vector_view<index_t> representatives) {
  using T = std::remove_const_t<U>;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bfloat16> ||
                    std::is_same_v<T, half>,
                "group_representatives: features must be float, double, bfloat16 or half");
  const index_t n = features.rows(), d = features.cols();
  MOECOMP_EXPECTS(labels.size() == n, "group_representatives: labels must have one entry per feature row (", n,
                  "), got ", labels.size());
  detail::host_workspace<index_t> counts(ctx, static_cast<std::size_t>(n));
  const index_t k = detail::check_grouping(ctx, labels, "group_representatives", counts.data());
  MOECOMP_EXPECTS(representatives.size() == k, "group_representatives: representatives must have k = ", k,
                  " elements (one per group of labels), got ", representatives.size());

  const auto kd = static_cast<std::size_t>(k) * static_cast<std::size_t>(d);
  detail::host_workspace<double> mean(ctx, kd);
  for (std::size_t e = 0; e < kd; ++e) mean[e] = 0;
  for (index_t p = 0; p < n; ++p) {
    double* m = mean.data() + static_cast<std::size_t>(labels[p]) * static_cast<std::size_t>(d);
    for (index_t j = 0; j < d; ++j) {
      const double x = detail::feature_as_double(features(p, j));
      MOECOMP_EXPECTS(std::isfinite(x), "group_representatives: features(", p, ", ", j, ") = ", x,
                      "; finite values are required");
      m[j] += x;
    }
  }
  for (index_t g = 0; g < k; ++g) {
    double* m = mean.data() + static_cast<std::size_t>(g) * static_cast<std::size_t>(d);
    const auto size = static_cast<double>(counts[static_cast<std::size_t>(g)]);
    for (index_t j = 0; j < d; ++j) m[j] /= size;
  }

  detail::host_workspace<double> best(ctx, static_cast<std::size_t>(k));
  for (index_t g = 0; g < k; ++g) representatives[g] = -1;
  for (index_t p = 0; p < n; ++p) {  // ascending p with a strict comparison: the lowest index wins ties
    const auto g = static_cast<std::size_t>(labels[p]);
    const double* m = mean.data() + g * static_cast<std::size_t>(d);
    double dist = 0;
    for (index_t j = 0; j < d; ++j) {
      const double diff = detail::feature_as_double(features(p, j)) - m[j];
      dist += diff * diff;
    }
    if (representatives[static_cast<index_t>(g)] < 0 || dist < best[g]) {
      best[g] = dist;
      representatives[static_cast<index_t>(g)] = p;
    }
  }
}

}  // namespace cluster
MOECOMP_NAMESPACE_END
