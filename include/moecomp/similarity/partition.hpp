#pragma once
// The expert-graph partition of "Diversifying the expert knowledge for task-agnostic pruning in sparse MoE"
// (its Eq. 5) on the host: split N experts into r groups of similar experts, given their distances.
// Documentation: docs/partition.md.
//
//   distances (N x N, float or double): finite, >= 0, symmetric within params.symmetry_tolerance (the mean of
//   D_ij and D_ji is used); the diagonal is never needed (it adds trace(D) to Eq. 5 whatever the groups);
//   labels (N): the group of each expert, 0 .. r-1, numbered in order of each group's smallest member
//   (labels[0] == 0).
//
// Eq. 5 sums ordered pairs: sum_i (sum_{j,k in V_i} D_jk - sum_{t != i} sum_{j in V_i, k in V_t} D_jk)
// = 4 W - 2 T + trace(D), with W the within-group total over unordered pairs and T the total over all pairs,
// so the call minimises W: a min-sum partition into exactly r non-empty groups (of at most params.max_size).
//  * exact (N <= params.exact_limit = 16 by default, at most 20): dynamic programming over subsets, O(r 3^N)
//    time (about 15 ms at N = 16, r = 4) and about 20 x 2^N bytes; a proven optimum. Ties (equal computed W):
//    the group of expert 0 is the one that, of two candidates, holds the smallest expert in which they
//    differ; then the same for the group of the smallest expert left, and so on.
//  * heuristic (any N): params.restarts starts (agglomerative, then random balanced ones), local search by
//    single moves and pairwise swaps, params.kicks perturbation rounds per start; O(n^3) for the
//    agglomerative start, O(n^2) per local-search pass. Reports a lower bound; `optimal` when it meets W.
// Deterministic for a seed (start s draws from stream s of moecomp's random_generator) and bit-identical at
// any thread count. Host only.
#include <moecomp/similarity/partition_types.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/similarity/detail/partition_checks.hpp>
#include <moecomp/similarity/detail/partition_host.hpp>
#include <moecomp/core/detail/traits.hpp>

#include <cstdint>

MOECOMP_NAMESPACE_BEGIN
namespace similarity {

/// Partitions the experts into params.groups groups minimising Eq. 5 (see above). Throws invalid_argument for
/// a non-square, non-finite, negative or asymmetric distance matrix, groups outside [1, N], an infeasible
/// max_size, or labels of the wrong length.
template <class T>
partition_result partition_experts(const host_context& ctx, const partition_params& params,
                                   moecomp::detail::type_identity_t<matrix_view<const T>> distances,
                                   vector_view<std::int64_t> labels) {
  static_assert(moecomp::detail::is_real_v<T>, "partition_experts: T must be float or double");
  constexpr const char* fn = "partition_experts";
  detail::check_partition_shapes<T>(fn, distances, labels);
  detail::check_partition_params(fn, params, distances.rows());
  detail::check_partition_distances<T>(fn, params, distances, ctx.threads());
  return detail::partition_host<T>(ctx, params, distances, labels);
}

}  // namespace similarity
MOECOMP_NAMESPACE_END
