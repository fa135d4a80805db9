#pragma once
// The dispatch plan of routed tokens on the host (issue 16): the (token, slot) pairs of a fixed-K routing
// layout sorted by expert, stable, with per-expert counts and offsets, padding to a block size with vLLM's
// moe_align_block_size semantics, a per-expert capacity with deterministic dropping, and the gather and
// combine that move hidden states into expert order and back. Documentation: docs/gating.md, "Dispatch".
//
//   ids: T x K expert ids (int64; the sentinel E marks an unused slot, never dispatched).
//   Pair p = t K + k (flat). Sorted order: by expert, then by flat index (a stable counting sort, O(T K + E)).
//   Padding (block_size B >= 1): expert e's run is padded with the sentinel T K to a multiple of B; every block
//   of B entries belongs to one expert (expert_ids, one per block); the padded total is num_tokens_post_pad.
//   With B = 1 there is no padding and expert_ids gives the expert of each sorted pair.
//   Capacity C (0: none): an expert keeps its first C pairs in flat order (earlier tokens first, GShard); the
//   others are dropped (not in the plan; position -1).
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/dispatch_types.hpp>
#include <moecomp/gating/detail/dispatch_host.hpp>

#include <cstdint>

MOECOMP_NAMESPACE_BEGIN
namespace gating {

/// Builds the plan of a T x K id layout with E experts into `plan`, reusing its storage (an engine's step
/// allocates nothing once the plan has grown). The counting runs over chunks of pairs on ctx's threads; the
/// plan is the same at any thread count. Throws invalid_argument for ids outside [0, E] or bad parameters,
/// before changing `plan`.
inline void make_dispatch_plan(const host_context& ctx, const dispatch_params& params, index_t experts,
                               matrix_view<const std::int64_t> ids, dispatch_plan& plan) {
  detail::make_dispatch_plan_host(ctx, params, experts, ids, plan);
}

/// The same, returning a new plan (one thread).
inline dispatch_plan make_dispatch_plan(const dispatch_params& params, index_t experts,
                                        matrix_view<const std::int64_t> ids) {
  dispatch_plan plan;
  detail::make_dispatch_plan_host(host_context(1), params, experts, ids, plan);
  return plan;
}

/// permuted (num_tokens_post_pad x d): row i = the hidden row of the token of sorted pair i, 0 for padding
/// (k: the layout's K).
template <class T>
void dispatch_gather(const host_context& ctx, const dispatch_plan& plan, index_t k, matrix_view<const T> hidden,
                     matrix_view<T> permuted) {
  detail::dispatch_gather_host<T>(ctx, plan, k, hidden, permuted);
}

/// out (T x d): row t = the sum over t's kept slots k, in slot order, of weights(t, k) times the expert_out
/// row of pair (t, k). Deterministic: each token's sum runs in slot order.
template <class T>
void dispatch_combine(const host_context& ctx, const dispatch_plan& plan, matrix_view<const T> expert_out,
                      matrix_view<const T> weights, matrix_view<T> out) {
  detail::dispatch_combine_host<T>(ctx, plan, expert_out, weights, out);
}

}  // namespace gating
MOECOMP_NAMESPACE_END
