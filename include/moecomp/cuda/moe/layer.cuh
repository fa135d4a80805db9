#pragma once
// The MoE layer forward on the device: the device overload of <moecomp/moe/layer.hpp>'s moe_layer_forward,
// taking a cuda_context and a moe_layer_device_view (<moecomp/cuda/moe/layer_types.cuh>). The host's layer,
// step for step (docs/moe.md, "The MoE layer", "Device"):
//
//   x: T x d tokens (A = accumulator_t<W>: float, or double for double storage), device memory; router E x d,
//   optional router_bias (E, DeepSeek-V3's selection bias), experts a stack of E' experts in W (float, double,
//   bfloat16, half), optional expert_map (E entries, router id -> stack index: HC-SMoE's merged layer; empty:
//   the identity, E' = E), optional shared experts with the optional 1 x d sigmoid gate (Qwen2-MoE);
//   y_t = sum over t's selected slots k of w_tk f_{map(e_tk)}(x_t) + sum_s g_t f^shared_s(x_t), T x d in A.
//
// Method: logits = x router^T by one cuBLAS GEMM; the device route_fixed (every rule, the DeepSeek group rules
// included, <moecomp/cuda/gating/routing.cuh>) into the fixed-K layout; the router ids mapped through expert_map
// by one kernel (two slots of a token mapped to one merged expert each add their weight); the device dispatch
// plan (CUB radix sort, histogram, scan); the gather; each expert with tokens runs the device expert forward
// (<moecomp/cuda/moe/expert.cuh>: cuBLAS GEMMs) on its contiguous run of gathered rows, one expert after the
// other; the combine (each token's slots in order, no atomics); each shared expert on every token, added with
// g_t = sigmoid(x_t . shared_gate) (dot product in double, one warp per token) or 1. No hand-written sort,
// scan or GEMM.
// Precision: as the device expert forward (cuBLAS in A under the handle's math mode); the routing as the
// device route_fixed (CUDA's exp: weights within a few ulp of the host's). Results agree with the host's
// moe_layer_forward to rounding, not bit for bit.
// Asynchrony: SYNCHRONISES ctx.stream two times (the dispatch plan's total; the per-expert counts and the
// experts-per-token extremes, which the host loop over experts needs), three with an expert_map (its entries
// are copied back and range-checked before any device work). The work after the last synchronisation (gather,
// experts, combine, shared experts) is asynchronous: y is ready after the caller synchronises the stream.
// Returns the routing counts as the host (tokens, selected pairs, mean, min and max experts per token).
// Workspace: moe_layer_forward_workspace_size bytes, or from ctx's allocator: the logits (T E), ids and weights
// (T K), the plan (3 T K + 2 E' + 1 int64 and CUB's scratch), the gathered rows and the experts' outputs
// (2 T K d in A), one expert forward's scratch (as ffn_forward_workspace_size for T K rows, or T for the shared
// experts), and T d (+ T doubles with a gate) for the shared experts.
// Determinism: no atomics; cuBLAS GEMMs and CUB's radix sort and reductions are run-to-run deterministic on one
// GPU with one stream, so repeated calls give the same bits.
// Checks: the host's (shapes, the map's range, the routing parameters), plus cuBLAS's int limits and at most
// 512 router experts (the device routing's bound); values are not checked.
//
// Tests: tests/cuda/test_moe_expert_cuda.cu's layer cases. Whether they have run on a GPU: docs/cuda.md, "Status on hardware".
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/routing_types.hpp>
#include <moecomp/moe/layer_types.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/gating/routing.cuh>
#include <moecomp/cuda/moe/expert.cuh>
#include <moecomp/cuda/moe/expert_types.cuh>
#include <moecomp/cuda/moe/layer_types.cuh>
#include <moecomp/cuda/moe/detail/layer_device.cuh>
#include <moecomp/core/detail/traits.hpp>

#include <climits>
#include <cstddef>

MOECOMP_NAMESPACE_BEGIN
namespace moe {

/// Workspace bytes of the device moe_layer_forward of `tokens` tokens through `layer` (its shapes only).
template <class W>
std::size_t moe_layer_forward_workspace_size(const moe_layer_params& params, const moe_layer_device_view<W>& layer,
                                             index_t tokens) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "moe_layer_forward_workspace_size";
  moecomp::detail::check_ffn_params(fn, params.ffn);
  cuda_detail::check_device_stack(fn, layer.experts);
  if (!layer.shared.w1.empty()) cuda_detail::check_device_stack(fn, layer.shared);
  gating::detail::check_routing_params(fn, params.routing, layer.router.rows(), layer.router_bias.size());
  MOECOMP_EXPECTS(tokens >= 0 && tokens <= static_cast<index_t>(INT_MAX), fn, ": tokens must be in [0, ", INT_MAX,
                  "] on the device, got ", tokens);
  return cuda_detail::make_layer_plan<W>(fn, params, layer, tokens).bytes;
}

/// Runs the layer (see above) on device tokens x into device y (T x d), with a caller's workspace; returns the
/// routing counts. Throws invalid_argument for inconsistent shapes, a map entry outside the stack, bad routing
/// parameters or a small workspace, before any kernel runs (the map's entries are read back first).
template <class W>
gating::routing_result moe_layer_forward(
    const cuda_context& ctx, const moe_layer_params& params, const moe_layer_device_view<W>& layer,
    moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>, device_memory>> x,
    moecomp::detail::type_identity_t<matrix_view<accumulator_t<W>, device_memory>> y,
    vector_view<std::byte, device_memory> workspace) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "moe_layer_forward";
  cuda_detail::check_layer_arguments<W>(fn, params, layer, x, y);
  const auto plan = cuda_detail::make_layer_plan<W>(fn, params, layer, x.rows());
  moecomp::detail::check_workspace(fn, plan.bytes, workspace);
  return cuda_detail::moe_layer_forward_device<W>(ctx, params, layer, x, y, plan, workspace.data());
}

/// As above, with the workspace from ctx's allocator.
template <class W>
gating::routing_result moe_layer_forward(
    const cuda_context& ctx, const moe_layer_params& params, const moe_layer_device_view<W>& layer,
    moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>, device_memory>> x,
    moecomp::detail::type_identity_t<matrix_view<accumulator_t<W>, device_memory>> y) {
  moecomp::detail::check_device_element_type<accumulator_t<W>>();
  constexpr const char* fn = "moe_layer_forward";
  cuda_detail::check_layer_arguments<W>(fn, params, layer, x, y);  // before the allocation
  const auto plan = cuda_detail::make_layer_plan<W>(fn, params, layer, x.rows());
  const moecomp::detail::scoped_workspace workspace(ctx, plan.bytes);
  return cuda_detail::moe_layer_forward_device<W>(ctx, params, layer, x, y, plan, workspace.data());
}

}  // namespace moe
MOECOMP_NAMESPACE_END
