#pragma once
// The MoE layer forward on the host: gating, dispatch, each expert's FFN on its tokens, combine, plus shared
// experts (issue 16). Documentation: docs/moe.md, "The MoE layer".
//
//   x: T x d tokens (A = accumulator_t<W>); router: E x d (A), optional router_bias (DeepSeek-V3's selection
//   bias); experts: a stack of E' FFN experts in W; expert_map: optional E entries, router expert id ->
//   expert index in the stack (HC-SMoE's merged layer keeps the router and maps old ids to merged experts;
//   empty: the identity, E' = E); shared: optional stack of shared experts, each applied to every token,
//   scaled by sigmoid(x . shared_gate) when shared_gate (1 x d, Qwen2-MoE) is given (DeepSeek: no gate).
//
//   y_t = sum over t's selected slots k of w_tk f_{map(e_tk)}(x_t) + sum_s g_t f^shared_s(x_t).
//
// Method: logits x router^T by GEMM, routing (<moecomp/gating/routing.hpp>, params.routing) into the fixed-K
// layout, the dispatch plan (<moecomp/gating/dispatch.hpp>), then per expert one forward on its contiguous run
// of gathered tokens (grouped by expert), then the deterministic combine. Two slots of one token mapped to the
// same merged expert each contribute their weight (so the expert's output counts with their total weight).
// Deterministic at any thread count.
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/dispatch.hpp>
#include <moecomp/gating/routing.hpp>
#include <moecomp/moe/features.hpp>
#include <moecomp/moe/ffn.hpp>
#include <moecomp/moe/ffn_types.hpp>
#include <moecomp/moe/layer_types.hpp>
#include <moecomp/moe/detail/layer_host.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace moe {

/// Runs the layer (see above); returns the routing counts. Throws invalid_argument for inconsistent shapes,
/// a map entry outside the stack, or bad routing parameters.
template <class W>
gating::routing_result moe_layer_forward(const host_context& ctx, const moe_layer_params& params,
                                         const moe_layer_view<W>& layer,
                                         moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>>> x,
                                         moecomp::detail::type_identity_t<matrix_view<accumulator_t<W>>> y) {
  return detail::moe_layer_forward_host<W>(ctx, params, layer, x, y);
}

}  // namespace moe
MOECOMP_NAMESPACE_END
