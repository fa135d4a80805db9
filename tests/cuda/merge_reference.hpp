#pragma once
// The host's expert merging (<moecomp/merge/merge.hpp>), compiled by the C++ compiler in merge_reference.cpp, for
// tests/cuda/test_merge_cuda.cu to compare against (the .cu files include no host algorithm headers).
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/merge/merge_types.hpp>
#include <moecomp/moe/ffn_types.hpp>

#include <cstdint>
#include <vector>

namespace moecomp_test {

/// The host merge_experts on one thread.
template <class W>
moecomp::merge::merge_report host_merge_experts(const moecomp::merge::merge_params& params,
                                                const moecomp::moe::ffn_expert_stack_view<W>& experts,
                                                moecomp::vector_view<const std::int64_t> groups,
                                                const moecomp::merge::merge_data<moecomp::accumulator_t<W>>& data,
                                                const moecomp::merge::merge_outputs<W>& out);

/// The host merge's fix-dom matching of one group without a router (every row of x once, then the token cap
/// drawn with stream `group`): `ordered` the members, the dominant first; returns members x d_ff, row i member
/// i's matching (row 0 the identity), exactly as merge_experts computes it.
template <class W>
std::vector<moecomp::index_t> host_fix_dom_matches(const moecomp::merge::merge_params& params,
                                                   const moecomp::moe::ffn_expert_stack_view<W>& experts,
                                                   const std::vector<moecomp::index_t>& ordered, moecomp::index_t group,
                                                   moecomp::matrix_view<const moecomp::accumulator_t<W>> x);

/// The host merge's learned inputs for one group routed by `router` (top params.routing_top_k of the softmax over
/// its E rows): the group's tokens (routed to at least one member, each once, ascending, before the cap) and
/// each token's router probability of each member (tokens x members.size(), columns in `members`' order).
void host_group_routes(const moecomp::merge::merge_params& params, moecomp::matrix_view<const float> x,
                       moecomp::matrix_view<const float> router, const std::vector<moecomp::index_t>& members,
                       std::vector<moecomp::index_t>& tokens, std::vector<double>& weights);

}  // namespace moecomp_test
