#pragma once
// The MoE layer's view and parameters (<moecomp/moe/layer.hpp>). Documentation: docs/moe.md.
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/routing_types.hpp>
#include <moecomp/moe/ffn_types.hpp>

#include <cstdint>

MOECOMP_NAMESPACE_BEGIN
namespace moe {

/// A routed MoE layer: the router, the experts, an optional id map and optional shared experts.
template <class W>
struct moe_layer_view {
  using A = accumulator_t<W>;
  matrix_view<const A> router;                // E x d
  vector_view<const A> router_bias;           // E, or empty (DeepSeek-V3's selection bias)
  ffn_expert_stack_view<W> experts;           // E' experts
  vector_view<const std::int64_t> expert_map; // E entries in [0, E'), or empty (identity)
  ffn_expert_stack_view<W> shared;            // shared experts, or an empty stack
  matrix_view<const A> shared_gate;           // 1 x d, or empty
};

struct moe_layer_params {
  gating::routing_params routing;
  ffn_params ffn;
};

}  // namespace moe
MOECOMP_NAMESPACE_END
