#pragma once
// Device implementation of the MoE layer forward (<moecomp/cuda/moe/layer.cuh>): the host's steps
// (<moecomp/moe/detail/layer_host.hpp>) with cuBLAS, the device routing and dispatch
// (<moecomp/cuda/gating/routing.cuh>) and the device expert forward (cuda/moe/detail/expert_device.cuh).
//
//   logits = x router^T (one cuBLAS GEMM); route_fixed into ids / weights (T x K); one kernel maps the router
//   ids through expert_map (the sentinel E becomes E') and counts each token's slots; CUB's min / max of
//   those counts; the dispatch plan (block size 1, no capacity; synchronises); the plan's counts and offsets
//   copied back (synchronises); gather; each expert with tokens runs ffn_forward_device on its contiguous run
//   of gathered rows; the combine (each token's slots in order); the shared experts on every token, each
//   added with the per-token sigmoid gate (one warp per token, the dot product in double) or 1.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/dispatch_types.hpp>
#include <moecomp/gating/routing_types.hpp>
#include <moecomp/moe/layer_types.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/kernel.cuh>
#include <moecomp/cuda/gating/routing.cuh>
#include <moecomp/cuda/moe/expert_types.cuh>
#include <moecomp/cuda/moe/layer_types.cuh>
#include <moecomp/cuda/moe/detail/expert_device.cuh>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/ffn_checks.hpp>
#include <moecomp/cuda/core/detail/cublas.cuh>
#include <moecomp/cuda/core/detail/workspace.cuh>

#include <cub/device/device_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace moe {

namespace cuda_detail {

inline constexpr int layer_block = 256;

/// Per token t (one thread): its slots' router ids mapped to the stack (map may be null: the identity; the
/// sentinel `experts` becomes `mapped_sentinel`) in place, and how many slots hold an expert.
MOECOMP_KERNEL void map_ids_kernel(std::int64_t* ids, index_t ld, index_t tokens, int slots, std::int64_t experts,
                                   const std::int64_t* map, index_t map_stride, std::int64_t mapped_sentinel,
                                   int* per_token) {
  for (index_t t = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens;
       t += static_cast<index_t>(gridDim.x) * blockDim.x) {
    int count = 0;
    for (int k = 0; k < slots; ++k) {
      const std::int64_t id = ids[t * ld + k];
      if (id == experts) {
        ids[t * ld + k] = mapped_sentinel;
      } else {
        ++count;
        if (map != nullptr) ids[t * ld + k] = map[id * map_stride];
      }
    }
    per_token[t] = count;
  }
}

/// gate[t] = sigmoid(x_t . shared_gate) in double, one warp per token (the dot product by cub::WarpReduce).
template <class A>
MOECOMP_KERNEL void __launch_bounds__(layer_block)
    shared_gate_kernel(const A* x, index_t ldx, index_t tokens, index_t d, const A* gate,
                       double* out) {
  constexpr int warps = layer_block / 32;
  using warp_sum = cub::WarpReduce<double>;
  __shared__ typename warp_sum::TempStorage storage[warps];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  for (index_t t = static_cast<index_t>(blockIdx.x) * warps + warp; t < tokens;
       t += static_cast<index_t>(gridDim.x) * warps) {
    double local = 0;
    for (index_t c = lane; c < d; c += 32)
      local += static_cast<double>(x[t * ldx + c]) * static_cast<double>(gate[c]);
    const double z = warp_sum(storage[warp]).Sum(local);
    if (lane == 0) out[t] = 1.0 / (1.0 + exp(-z));
    __syncwarp();
  }
}

/// y (T x d) += gate[t] (or 1 when gate is null) times shared_out row t, as the host: A(g) * value.
template <class A>
MOECOMP_KERNEL void add_shared_kernel(A* y, index_t ldy, index_t tokens, index_t d, const double* gate, const A* out,
                                      index_t ldo) {
  const index_t total = tokens * d;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t t = i / d, c = i - t * d;
    const A g = gate != nullptr ? static_cast<A>(gate[t]) : A(1);
    y[t * ldy + c] += g * out[t * ldo + c];
  }
}

/// A device stack's shapes (the host's check_ffn_stack on the device views) and the device forward's limits.
template <class W>
void check_device_stack(const char* fn, const ffn_expert_stack_device_view<W>& s) {
  moecomp::detail::check_ffn_stack(fn, s);
  check_device_expert(fn, s.expert(0));
  check_cublas_extents(fn, s.d_model(), s.d_ff(), {s.w1.row_stride(), s.w3.row_stride(), s.w2.row_stride()});
}

/// Every check of the device layer forward that needs no device memory read (the map's entries are checked
/// by the caller after a copy).
template <class W, class A = accumulator_t<W>>
void check_layer_arguments(const char* fn, const moe_layer_params& params, const moe_layer_device_view<W>& layer,
                           matrix_view<const A, device_memory> x, matrix_view<A, device_memory> y) {
  const index_t t = x.rows(), d = x.cols(), e = layer.router.rows(), e_out = layer.experts.experts();
  moecomp::detail::check_ffn_params(fn, params.ffn);
  check_device_stack(fn, layer.experts);
  MOECOMP_EXPECTS(layer.router.cols() == d && layer.experts.d_model() == d, fn, ": router and experts must have d = ",
                  d, " (the columns of x), got ", layer.router.cols(), " and ", layer.experts.d_model());
  MOECOMP_EXPECTS(y.rows() == t && y.cols() == d, fn, ": y must be ", moecomp::detail::shape_string(t, d), ", got ",
                  moecomp::detail::shape_string(y.rows(), y.cols()));
  moecomp::detail::check_no_overlap(fn, "y", y, "x", x);
  if (layer.expert_map.empty())
    MOECOMP_EXPECTS(e_out == e, fn, ": experts must hold one expert per router row (", e, ") without expert_map, got ",
                    e_out);
  else
    MOECOMP_EXPECTS(layer.expert_map.size() == e, fn, ": expert_map must have ", e, " entries (router rows), got ",
                    layer.expert_map.size());
  if (!layer.shared.w1.empty()) {
    check_device_stack(fn, layer.shared);
    MOECOMP_EXPECTS(layer.shared.d_model() == d, fn, ": shared experts must have d = ", d, ", got ",
                    layer.shared.d_model());
  }
  MOECOMP_EXPECTS(layer.shared_gate.empty() || (layer.shared_gate.rows() == 1 && layer.shared_gate.cols() == d), fn,
                  ": shared_gate must be empty or 1 x ", d, ", got ",
                  moecomp::detail::shape_string(layer.shared_gate.rows(), layer.shared_gate.cols()));
  MOECOMP_EXPECTS(t <= static_cast<index_t>(INT_MAX) && e <= static_cast<index_t>(INT_MAX), fn,
                  ": the tokens and router rows must be at most ", INT_MAX, " on the device (cuBLAS), got ", t, " and ",
                  e);
  check_cublas_extents(fn, d, 1, {x.row_stride(), y.row_stride(), layer.router.row_stride()});
  // The routing parameters and the bias (route_fixed checks them again, before any device work too).
  gating::detail::check_routing_params(fn, params.routing, e, layer.router_bias.size());
  MOECOMP_EXPECTS(e <= gating::cuda_detail::routing_max_experts, fn, ": the router must have at most ",
                  gating::cuda_detail::routing_max_experts, " experts (rows) on the device, got ", e);
}

/// Where the pieces of the layer's workspace lie.
struct layer_device_plan {
  index_t slots = 0;
  std::size_t logits = 0, ids = 0, weights = 0, per_token = 0, extremes = 0, reduce = 0, sorted = 0, expert_ids = 0,
              counts = 0, offsets = 0, position = 0, dispatch = 0, gathered = 0, out = 0, ffn = 0, shared_out = 0,
              gate = 0, bytes = 0;
  std::size_t reduce_bytes = 0, dispatch_bytes = 0;
  ffn_device_plan expert_plan, shared_plan;
};

/// The workspace of one forward of T tokens.
template <class W, class A = accumulator_t<W>>
layer_device_plan make_layer_plan(const char* fn, const moe_layer_params& params, const moe_layer_device_view<W>& layer,
                                  index_t t) {
  layer_device_plan plan;
  const index_t e = layer.router.rows(), e_out = layer.experts.experts(), d = layer.experts.d_model();
  const index_t k = gating::detail::max_experts_per_token(params.routing, e), pairs = t * k;
  plan.slots = k;
  moecomp::detail::workspace_layout layout(fn);
  plan.logits = layout.take(t * e, sizeof(A));
  plan.ids = layout.take(pairs, sizeof(std::int64_t));
  plan.weights = layout.take(pairs, sizeof(A));
  plan.per_token = layout.take(t, sizeof(int));
  plan.extremes = layout.take(2, sizeof(int));
  std::size_t need = 0;
  MOECOMP_CUDA_TRY(cub::DeviceReduce::Min(nullptr, need, static_cast<const int*>(nullptr), static_cast<int*>(nullptr),
                                          static_cast<int>(t)));
  plan.reduce_bytes = need;
  MOECOMP_CUDA_TRY(cub::DeviceReduce::Max(nullptr, need, static_cast<const int*>(nullptr), static_cast<int*>(nullptr),
                                          static_cast<int>(t)));
  plan.reduce_bytes = std::max(plan.reduce_bytes, need);
  plan.reduce = layout.take(static_cast<index_t>(plan.reduce_bytes), 1);
  plan.sorted = layout.take(pairs, sizeof(std::int64_t));
  plan.expert_ids = layout.take(pairs, sizeof(std::int64_t));
  plan.counts = layout.take(e_out, sizeof(std::int64_t));
  plan.offsets = layout.take(e_out + 1, sizeof(std::int64_t));
  plan.position = layout.take(pairs, sizeof(std::int64_t));
  plan.dispatch_bytes = gating::dispatch_plan_workspace_size(e_out, t, k);
  plan.dispatch = layout.take(static_cast<index_t>(plan.dispatch_bytes), 1);
  plan.gathered = layout.take(pairs * d, sizeof(A));
  plan.out = layout.take(pairs * d, sizeof(A));
  // One expert runs at a time on the stream: the experts' and the shared experts' scratch share one piece.
  plan.expert_plan = make_ffn_plan<W>(fn, pairs, d, layer.experts.d_ff(), layer.experts.gated(), true);
  std::size_t ffn_bytes = plan.expert_plan.bytes;
  const bool has_shared = !layer.shared.w1.empty();
  if (has_shared) {
    plan.shared_plan = make_ffn_plan<W>(fn, t, d, layer.shared.d_ff(), layer.shared.gated(), true);
    ffn_bytes = std::max(ffn_bytes, plan.shared_plan.bytes);
    plan.shared_out = layout.take(t * d, sizeof(A));
    if (!layer.shared_gate.empty()) plan.gate = layout.take(t, sizeof(double));
  }
  plan.ffn = layout.take(static_cast<index_t>(ffn_bytes), 1);
  plan.bytes = layout.total();
  return plan;
}

/// The forward (arguments checked, the workspace checked): see <moecomp/cuda/moe/layer.cuh>.
template <class W, class A = accumulator_t<W>>
gating::routing_result moe_layer_forward_device(const cuda_context& ctx, const moe_layer_params& params,
                                                const moe_layer_device_view<W>& layer,
                                                matrix_view<const A, device_memory> x, matrix_view<A, device_memory> y,
                                                const layer_device_plan& plan, std::byte* workspace) {
  using moecomp::detail::at;
  using moecomp::detail::grid_for;
  constexpr const char* fn = "moe_layer_forward";
  const index_t t = x.rows(), d = x.cols(), e = layer.router.rows(), e_out = layer.experts.experts(), k = plan.slots;
  gating::routing_result result;
  result.tokens = t;
  // The map's entries, checked on the host (one small copy; synchronises).
  if (!layer.expert_map.empty()) {
    std::vector<std::int64_t> map(static_cast<std::size_t>(e));
    MOECOMP_CUDA_TRY(cudaMemcpy2DAsync(map.data(), sizeof(std::int64_t), layer.expert_map.data(),
                                       static_cast<std::size_t>(layer.expert_map.stride()) * sizeof(std::int64_t),
                                       sizeof(std::int64_t), static_cast<std::size_t>(e), cudaMemcpyDeviceToHost,
                                       ctx.stream));
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
    for (index_t j = 0; j < e; ++j)
      MOECOMP_EXPECTS(map[static_cast<std::size_t>(j)] >= 0 && map[static_cast<std::size_t>(j)] < e_out, fn,
                      ": expert_map entries must be in [0, ", e_out, ") (the stack's experts), got ",
                      map[static_cast<std::size_t>(j)], " at ", j);
  }
  if (t == 0) return result;
  std::byte* base = moecomp::detail::aligned_base(workspace);
  A* logits = at<A>(base, plan.logits);
  std::int64_t* ids = at<std::int64_t>(base, plan.ids);
  A* weights = at<A>(base, plan.weights);
  int* per_token = at<int>(base, plan.per_token);
  int* extremes = at<int>(base, plan.extremes);
  // Route.
  {
    const moecomp::detail::cublas_session cublas(ctx);
    moecomp::detail::gemm_abt(cublas.handle(), t, e, d, x.data(), x.row_stride(), layer.router.data(),
                              layer.router.row_stride(), logits, e);
  }
  gating::route_fixed<A>(ctx, params.routing, matrix_view<const A, device_memory>(logits, t, e), layer.router_bias,
                         matrix_view<std::int64_t, device_memory>(ids, t, k), matrix_view<A, device_memory>(weights, t, k));
  map_ids_kernel<<<grid_for(t, layer_block), layer_block, 0, ctx.stream>>>(
      ids, k, t, static_cast<int>(k), e, layer.expert_map.empty() ? nullptr : layer.expert_map.data(),
      layer.expert_map.stride(), e_out, per_token);
  MOECOMP_CUDA_CHECK_LAUNCH();
  std::size_t bytes = plan.reduce_bytes;
  MOECOMP_CUDA_TRY(cub::DeviceReduce::Min(at<std::byte>(base, plan.reduce), bytes, per_token, extremes,
                                          static_cast<int>(t), ctx.stream));
  bytes = plan.reduce_bytes;
  MOECOMP_CUDA_TRY(cub::DeviceReduce::Max(at<std::byte>(base, plan.reduce), bytes, per_token, extremes + 1,
                                          static_cast<int>(t), ctx.stream));
  // Dispatch (synchronises).
  const gating::device_dispatch_plan dispatch{
      vector_view<std::int64_t, device_memory>(at<std::int64_t>(base, plan.sorted), t * k),
      vector_view<std::int64_t, device_memory>(at<std::int64_t>(base, plan.expert_ids), t * k),
      vector_view<std::int64_t, device_memory>(at<std::int64_t>(base, plan.counts), e_out),
      vector_view<std::int64_t, device_memory>(at<std::int64_t>(base, plan.offsets), e_out + 1),
      vector_view<std::int64_t, device_memory>(at<std::int64_t>(base, plan.position), t * k)};
  const index_t rows = gating::make_dispatch_plan(
      ctx, gating::dispatch_params{}, e_out, matrix_view<const std::int64_t, device_memory>(ids, t, k), dispatch,
      vector_view<std::byte, device_memory>(at<std::byte>(base, plan.dispatch), static_cast<index_t>(plan.dispatch_bytes)));
  // Each expert's run, and the experts-per-token extremes (synchronises).
  std::vector<std::int64_t> counts(static_cast<std::size_t>(e_out)), offsets(static_cast<std::size_t>(e_out + 1));
  int extremes_host[2] = {0, 0};
  MOECOMP_CUDA_TRY(cudaMemcpyAsync(counts.data(), dispatch.counts.data(), counts.size() * sizeof(std::int64_t),
                                   cudaMemcpyDeviceToHost, ctx.stream));
  MOECOMP_CUDA_TRY(cudaMemcpyAsync(offsets.data(), dispatch.offsets.data(), offsets.size() * sizeof(std::int64_t),
                                   cudaMemcpyDeviceToHost, ctx.stream));
  MOECOMP_CUDA_TRY(cudaMemcpyAsync(extremes_host, extremes, sizeof(extremes_host), cudaMemcpyDeviceToHost, ctx.stream));
  MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
  result.selected = rows;
  result.experts_per_token_mean = static_cast<double>(rows) / static_cast<double>(t);
  result.min_experts = extremes_host[0];
  result.max_experts = extremes_host[1];
  // Gather, the experts, combine.
  const matrix_view<A, device_memory> gathered(at<A>(base, plan.gathered), rows, d), out(at<A>(base, plan.out), rows, d);
  gating::dispatch_gather<A>(ctx, dispatch, t, k, x, gathered);
  std::byte* ffn_workspace = base + plan.ffn;
  for (index_t j = 0; j < e_out; ++j) {
    const index_t n = counts[static_cast<std::size_t>(j)], first = offsets[static_cast<std::size_t>(j)];
    if (n == 0) continue;
    ffn_forward_device<W>(ctx, params.ffn, layer.experts.expert(j),
                          matrix_view<const A, device_memory>(gathered.row_ptr(first), n, d, d),
                          matrix_view<A, device_memory>(out.row_ptr(first), n, d, d), {}, plan.expert_plan,
                          ffn_workspace);
  }
  gating::dispatch_combine<A>(ctx, dispatch, out.as_const(), matrix_view<const A, device_memory>(weights, t, k), y);
  // Shared experts on every token.
  if (!layer.shared.w1.empty()) {
    double* gate = nullptr;
    if (!layer.shared_gate.empty()) {
      gate = at<double>(base, plan.gate);
      shared_gate_kernel<A><<<grid_for(t, layer_block / 32), layer_block, 0, ctx.stream>>>(
          x.data(), x.row_stride(), t, d, layer.shared_gate.data(), gate);
      MOECOMP_CUDA_CHECK_LAUNCH();
    }
    const matrix_view<A, device_memory> shared_out(at<A>(base, plan.shared_out), t, d);
    for (index_t s = 0; s < layer.shared.experts(); ++s) {
      ffn_forward_device<W>(ctx, params.ffn, layer.shared.expert(s), x, shared_out, {}, plan.shared_plan,
                            ffn_workspace);
      add_shared_kernel<A><<<grid_for(t * d, layer_block), layer_block, 0, ctx.stream>>>(
          y.data(), y.row_stride(), t, d, gate, shared_out.data(), d);
      MOECOMP_CUDA_CHECK_LAUNCH();
    }
  }
  return result;
}

}  // namespace cuda_detail
}  // namespace moe
MOECOMP_NAMESPACE_END
