#pragma once
// The device MoE layer's view (<moecomp/cuda/moe/layer.cuh>): the device twin of <moecomp/moe/layer_types.hpp>'s
// moe_layer_view, every piece in device memory. The parameters are the host's moe_layer_params.
// Documentation: docs/moe.md, "The MoE layer", "Device".
//
// This header needs no CUDA header: the views are plain host types over device addresses.
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/moe/layer_types.hpp>
#include <moecomp/cuda/moe/expert_types.cuh>

#include <cstdint>

MOECOMP_NAMESPACE_BEGIN
namespace moe {

/// A routed MoE layer in device memory: the router, the experts, an optional id map and optional shared experts.
template <class W>
struct moe_layer_device_view {
  using A = accumulator_t<W>;
  matrix_view<const A, device_memory> router;                 // E x d
  vector_view<const A, device_memory> router_bias;            // E, or empty (DeepSeek-V3's selection bias)
  ffn_expert_stack_device_view<W> experts;                    // E' experts
  vector_view<const std::int64_t, device_memory> expert_map;  // E entries in [0, E'), or empty (identity)
  ffn_expert_stack_device_view<W> shared;                     // shared experts, or an empty stack
  matrix_view<const A, device_memory> shared_gate;            // 1 x d, or empty
};

}  // namespace moe
MOECOMP_NAMESPACE_END
