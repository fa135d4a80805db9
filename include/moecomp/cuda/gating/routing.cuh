#pragma once
// Routing and dispatch on the device: the device overloads of <moecomp/gating/routing.hpp>'s route_fixed and
// <moecomp/gating/dispatch.hpp>'s make_dispatch_plan, dispatch_gather and dispatch_combine.
//
// route_fixed: one warp per token, scores (softmax by warp reductions in double, sigmoid, none) and the
// experts taken in descending-score order by warp argmax rounds under the shared tie rule (lowest index on
// ties), any expert count up to 512; the rules top_k and the dynamic ones (threshold, threshold_code,
// cumulative, top_p, with min_k / max_k) through the same MOECOMP_HOST_DEVICE rules as the host, and the
// DeepSeek group rules: deepseek_v3 (sigmoid scores plus the optional selection-only bias, a group's score the
// sum of its two largest corrected keys) and group_limited_greedy (V2: params.scores, a group's score its
// largest), each group's score by one warp reduction, the topk_group best groups by argmax rounds, the other
// groups' keys masked to 0.0 as HF's routers do, then top_k rounds, the weights from the uncorrected scores
// normalised with + 1e-20 and scaled as on the host (the group score, the masking and the weight rule are
// gating/detail/routing_rules.hpp's functions, which the host's group_limited runs too). Cost per token of
// the group rules: n_group + topk_group + top_k warp reductions.
// make_dispatch_plan: a stable cub::DeviceRadixSort of the flat ids (end_bit = ceil(log2(E + 1))),
// cub::DeviceHistogram counts, cub::DeviceScan offsets, a scatter kernel with the capacity, a kernel for the
// per-block expert ids; no hand-written sort or scan.
//
// Asynchrony: route_fixed, dispatch_gather and dispatch_combine are asynchronous on ctx.stream (no result
// read back; routing counts are not computed here). make_dispatch_plan SYNCHRONISES (it returns
// num_tokens_post_pad). Workspace: make_dispatch_plan's from dispatch_plan_workspace_size, or ctx's
// allocator. Determinism: no floating-point atomics; the combine sums each token's slots in order.
//
// Tests: tests/cuda/test_gating_cuda.cu. Which of its cases have run on a GPU: docs/cuda.md, "Status on hardware".
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/dispatch_types.hpp>
#include <moecomp/gating/routing_types.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/device_buffer.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/gating/detail/routing_checks.hpp>
#include <moecomp/cuda/gating/detail/routing_device.cuh>
#include <moecomp/core/detail/traits.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>

MOECOMP_NAMESPACE_BEGIN
namespace gating {

/// Fixed-K routing on the device (see above): logits T x E, bias (E entries with deepseek_v3: the selection-only
/// correction; else empty), ids and weights T x K (K >= max_experts_per_token), all device memory. The bias is
/// not checked for finiteness on the device (nor are the logits).
template <class A, class UL, std::enable_if_t<moecomp::detail::is_input_of_v<UL, A>, int> = 0>
void route_fixed(const cuda_context& ctx, const routing_params& params, matrix_view<UL, device_memory> logits,
                 moecomp::detail::type_identity_t<vector_view<const A, device_memory>> bias,
                 matrix_view<std::int64_t, device_memory> ids, matrix_view<A, device_memory> weights) {
  moecomp::detail::check_device_element_type<A>();
  constexpr const char* fn = "route_fixed";
  const index_t t = logits.rows(), e = logits.cols(), k = ids.cols();
  detail::check_routing_params(fn, params, e, bias.size());
  MOECOMP_EXPECTS(e <= cuda_detail::routing_max_experts, fn, ": logits must have at most ",
                  cuda_detail::routing_max_experts, " experts (columns) on the device, got ", e);
  MOECOMP_EXPECTS(ids.rows() == t && k >= detail::max_experts_per_token(params, e), fn, ": ids must be ", t,
                  " x K with K >= ", detail::max_experts_per_token(params, e), ", got ",
                  moecomp::detail::shape_string(ids.rows(), ids.cols()));
  MOECOMP_EXPECTS(weights.rows() == t && weights.cols() == k, fn, ": weights must be ",
                  moecomp::detail::shape_string(t, k), " like ids, got ",
                  moecomp::detail::shape_string(weights.rows(), weights.cols()));
  MOECOMP_EXPECTS(k <= static_cast<index_t>(INT_MAX), fn, ": ids must have at most ", INT_MAX,
                  " columns on the device, got ", k);
  if (t == 0) return;
  const bool grouped = params.rule == routing_rule::deepseek_v3 || params.rule == routing_rule::group_limited_greedy;
  const cuda_detail::routing_kernel_params p{params.rule,
                                             params.rule == routing_rule::deepseek_v3 ? score_function::sigmoid
                                                                                      : params.scores,
                                             static_cast<int>(params.top_k),
                                             static_cast<int>(params.min_k),
                                             static_cast<int>(params.max_k),
                                             params.renormalize,
                                             params.tau,
                                             static_cast<int>(params.n_group),
                                             static_cast<int>(params.topk_group),
                                             params.routed_scaling_factor};
  const auto grid = moecomp::detail::grid_for(t, cuda_detail::routing_warps);
  const A* b = bias.empty() ? nullptr : bias.data();
  if (grouped)
    cuda_detail::routing_kernel<A, true><<<grid, cuda_detail::routing_block, 0, ctx.stream>>>(
        logits.data(), logits.row_stride(), t, static_cast<int>(e), p, b, bias.stride(), ids.data(), ids.row_stride(),
        weights.data(), weights.row_stride(), static_cast<int>(k));
  else
    cuda_detail::routing_kernel<A, false><<<grid, cuda_detail::routing_block, 0, ctx.stream>>>(
        logits.data(), logits.row_stride(), t, static_cast<int>(e), p, b, bias.stride(), ids.data(), ids.row_stride(),
        weights.data(), weights.row_stride(), static_cast<int>(k));
  MOECOMP_CUDA_TRY(cudaGetLastError());
}

/// As above without a bias (every rule but a biased deepseek_v3).
template <class A, class UL, std::enable_if_t<moecomp::detail::is_input_of_v<UL, A>, int> = 0>
void route_fixed(const cuda_context& ctx, const routing_params& params, matrix_view<UL, device_memory> logits,
                 matrix_view<std::int64_t, device_memory> ids, matrix_view<A, device_memory> weights) {
  route_fixed<A>(ctx, params, logits, vector_view<const A, device_memory>(), ids, weights);
}

/// The device plan's arrays (device memory, caller-owned): sorted_token_ids and position hold at least
/// T K + E (block_size - 1) and T K entries; expert_ids at least that capacity / block_size; counts E; offsets
/// E + 1.
struct device_dispatch_plan {
  vector_view<std::int64_t, device_memory> sorted_token_ids, expert_ids, counts, offsets, position;
};

/// Workspace bytes for make_dispatch_plan on T x K ids with E experts.
inline std::size_t dispatch_plan_workspace_size(index_t experts, index_t tokens, index_t slots) {
  const index_t pairs = tokens * slots;
  moecomp::detail::workspace_layout layout("dispatch_plan_workspace_size");
  (void)layout.take(4 * pairs, sizeof(int));
  (void)layout.take(6 * (experts + 1), sizeof(int));
  std::size_t bytes = 0, need = 0;
  int end_bit = 1;
  while ((index_t(1) << end_bit) < experts + 1) ++end_bit;
  MOECOMP_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, need, static_cast<const int*>(nullptr),
                                                   static_cast<int*>(nullptr), static_cast<const int*>(nullptr),
                                                   static_cast<int*>(nullptr), static_cast<int>(pairs), 0, end_bit));
  bytes = std::max(bytes, need);
  MOECOMP_CUDA_TRY(cub::DeviceHistogram::HistogramEven(nullptr, need, static_cast<const int*>(nullptr),
                                                       static_cast<int*>(nullptr), static_cast<int>(experts + 1), 0,
                                                       static_cast<int>(experts), static_cast<int>(pairs)));
  bytes = std::max(bytes, need);
  MOECOMP_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, need, static_cast<const int*>(nullptr),
                                                 static_cast<int*>(nullptr), static_cast<int>(experts + 1)));
  bytes = std::max(bytes, need);
  (void)layout.take(static_cast<index_t>(bytes), 1);
  return layout.total();
}

/// The dispatch plan of device ids (T x K, the sentinel E in unused slots; ids are NOT range-checked on the
/// device) into `plan`; returns num_tokens_post_pad (SYNCHRONISES).
inline index_t make_dispatch_plan(const cuda_context& ctx, const dispatch_params& params, index_t experts,
                                  matrix_view<const std::int64_t, device_memory> ids, const device_dispatch_plan& plan,
                                  vector_view<std::byte, device_memory> workspace) {
  using namespace cuda_detail;
  constexpr const char* fn = "make_dispatch_plan";
  const index_t t = ids.rows(), k = ids.cols(), pairs = t * k;
  MOECOMP_EXPECTS(experts >= 1 && params.block_size >= 1 && params.capacity >= 0, fn,
                  ": experts and params.block_size must be >= 1 and params.capacity >= 0, got ", experts, ", ",
                  params.block_size, " and ", params.capacity);
  MOECOMP_EXPECTS(pairs + experts * params.block_size <= static_cast<index_t>(INT_MAX), fn,
                  ": T K + E block_size must be at most ", INT_MAX, " on the device");
  const index_t capacity = pairs + experts * (params.block_size - 1);
  MOECOMP_EXPECTS(plan.sorted_token_ids.size() >= capacity && plan.position.size() >= pairs &&
                      plan.expert_ids.size() >= capacity / params.block_size && plan.counts.size() >= experts &&
                      plan.offsets.size() >= experts + 1,
                  fn, ": the plan's arrays are too small: sorted_token_ids needs ", capacity, ", position ", pairs,
                  ", expert_ids ", capacity / params.block_size, ", counts ", experts, ", offsets ", experts + 1);
  const std::size_t needed = dispatch_plan_workspace_size(experts, t, k);
  check_workspace(fn, needed, workspace);
  std::byte* base = aligned_base(workspace.data());
  workspace_layout layout(fn);
  int* keys = at<int>(base, layout.take(4 * pairs, sizeof(int)));
  int* rows = keys + pairs;
  int* sorted_keys = rows + pairs;
  int* sorted_rows = sorted_keys + pairs;
  int* small = at<int>(base, layout.take(6 * (experts + 1), sizeof(int)));
  int* counts = small;
  int* kept = counts + (experts + 1);
  int* padded = kept + (experts + 1);
  int* count_offsets = padded + (experts + 1);
  int* padded_offsets = count_offsets + (experts + 1);
  std::byte* temp = base + layout.take(0, 1);
  const std::size_t temp_bytes = needed - static_cast<std::size_t>(temp - workspace.data());
  int end_bit = 1;
  while ((index_t(1) << end_bit) < experts + 1) ++end_bit;
  if (pairs > 0) {
    flatten_ids_kernel<<<grid_for(pairs, routing_block), routing_block, 0, ctx.stream>>>(ids.data(), ids.row_stride(), t, k, keys, rows);
    MOECOMP_CUDA_TRY(cudaGetLastError());
  }
  std::size_t bytes = temp_bytes;
  MOECOMP_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temp, bytes, keys, sorted_keys, rows, sorted_rows,
                                                   static_cast<int>(pairs), 0, end_bit, ctx.stream));
  bytes = temp_bytes;
  MOECOMP_CUDA_TRY(cub::DeviceHistogram::HistogramEven(temp, bytes, keys, counts, static_cast<int>(experts + 1), 0,
                                                       static_cast<int>(experts), static_cast<int>(pairs), ctx.stream));
  padded_counts_kernel<<<grid_for(experts, routing_block), routing_block, 0, ctx.stream>>>(
      counts, static_cast<int>(experts), static_cast<int>(params.block_size), static_cast<int>(params.capacity), kept,
      padded);
  MOECOMP_CUDA_TRY(cudaGetLastError());
  // Offsets over E + 1 entries: the last (a zero past the counts) gives the totals.
  MOECOMP_CUDA_TRY(cudaMemsetAsync(padded + experts, 0, sizeof(int), ctx.stream));
  MOECOMP_CUDA_TRY(cudaMemsetAsync(counts + experts, 0, sizeof(int), ctx.stream));
  bytes = temp_bytes;
  MOECOMP_CUDA_TRY(cub::DeviceScan::ExclusiveSum(temp, bytes, counts, count_offsets, static_cast<int>(experts + 1), ctx.stream));
  bytes = temp_bytes;
  MOECOMP_CUDA_TRY(cub::DeviceScan::ExclusiveSum(temp, bytes, padded, padded_offsets, static_cast<int>(experts + 1), ctx.stream));
  fill_plan_kernel<<<grid_for(capacity > pairs ? capacity : pairs, routing_block), routing_block, 0, ctx.stream>>>(
      plan.sorted_token_ids.data(), capacity, pairs, plan.position.data(), pairs);
  MOECOMP_CUDA_TRY(cudaGetLastError());
  if (pairs > 0) {
    scatter_plan_kernel<<<grid_for(pairs, routing_block), routing_block, 0, ctx.stream>>>(
        sorted_keys, sorted_rows, pairs, static_cast<int>(experts), count_offsets, padded_offsets, kept,
        plan.sorted_token_ids.data(), plan.position.data());
    MOECOMP_CUDA_TRY(cudaGetLastError());
  }
  int total = 0;
  MOECOMP_CUDA_TRY(cudaMemcpyAsync(&total, padded_offsets + experts, sizeof(int), cudaMemcpyDeviceToHost, ctx.stream));
  MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
  const index_t blocks = total / params.block_size;
  if (blocks > 0) {
    block_experts_kernel<<<grid_for(blocks, routing_block), routing_block, 0, ctx.stream>>>(
        padded_offsets, static_cast<int>(experts), static_cast<int>(params.block_size), blocks, plan.expert_ids.data());
    MOECOMP_CUDA_TRY(cudaGetLastError());
  }
  plan_outputs_kernel<<<grid_for(experts + 1, routing_block), routing_block, 0, ctx.stream>>>(
      kept, padded_offsets, static_cast<int>(experts), plan.counts.data(), plan.counts.stride(), plan.offsets.data(),
      plan.offsets.stride());
  MOECOMP_CUDA_TRY(cudaGetLastError());
  return total;
}

/// As above, with the workspace from ctx's allocator.
inline index_t make_dispatch_plan(const cuda_context& ctx, const dispatch_params& params, index_t experts,
                                  matrix_view<const std::int64_t, device_memory> ids, const device_dispatch_plan& plan) {
  const moecomp::detail::scoped_workspace workspace(ctx, dispatch_plan_workspace_size(experts, ids.rows(), ids.cols()));
  return make_dispatch_plan(ctx, params, experts, ids, plan, workspace.view());
}

/// permuted (rows x d) row i = the hidden row of sorted pair i's token, 0 for padding (rows: the plan's
/// num_tokens_post_pad; k: the layout's K). Asynchronous.
template <class T>
void dispatch_gather(const cuda_context& ctx, const device_dispatch_plan& plan, index_t tokens, index_t k,
                     matrix_view<const T, device_memory> hidden, matrix_view<T, device_memory> permuted) {
  moecomp::detail::check_device_element_type<T>();
  MOECOMP_EXPECTS(hidden.rows() == tokens && permuted.cols() == hidden.cols() &&
                      permuted.rows() <= plan.sorted_token_ids.size(),
                  "dispatch_gather: hidden must be ", tokens, " x d and permuted at most ", plan.sorted_token_ids.size(),
                  " x d, got ", moecomp::detail::shape_string(hidden.rows(), hidden.cols()), " and ",
                  moecomp::detail::shape_string(permuted.rows(), permuted.cols()));
  if (permuted.rows() == 0) return;
  cuda_detail::gather_kernel<T><<<static_cast<unsigned>(std::min<index_t>(permuted.rows(), moecomp::detail::max_grid_x)), 256, 0,
                                  ctx.stream>>>(plan.sorted_token_ids.data(), permuted.rows(), tokens * k,
                                                static_cast<int>(k), hidden.data(), hidden.row_stride(), hidden.cols(),
                                                permuted.data(), permuted.row_stride());
  MOECOMP_CUDA_TRY(cudaGetLastError());
}

/// out (T x d) row t = the sum over t's slots, in slot order, of weights(t, k) times the expert_out row of pair
/// (t, k). Asynchronous; deterministic.
template <class T>
void dispatch_combine(const cuda_context& ctx, const device_dispatch_plan& plan,
                      matrix_view<const T, device_memory> expert_out, matrix_view<const T, device_memory> weights,
                      matrix_view<T, device_memory> out) {
  moecomp::detail::check_device_element_type<T>();
  MOECOMP_EXPECTS(out.rows() == weights.rows() && out.cols() == expert_out.cols() &&
                      weights.rows() * weights.cols() <= plan.position.size(),
                  "dispatch_combine: out must be T x d with weights T x K, got ",
                  moecomp::detail::shape_string(out.rows(), out.cols()), " and ",
                  moecomp::detail::shape_string(weights.rows(), weights.cols()));
  if (out.rows() == 0) return;
  cuda_detail::combine_kernel<T><<<static_cast<unsigned>(std::min<index_t>(out.rows(), moecomp::detail::max_grid_x)), 256, 0, ctx.stream>>>(
      plan.position.data(), weights.data(), weights.row_stride(), static_cast<int>(weights.cols()), out.rows(),
      expert_out.data(), expert_out.row_stride(), out.cols(), out.data(), out.row_stride());
  MOECOMP_CUDA_TRY(cudaGetLastError());
}

}  // namespace gating
MOECOMP_NAMESPACE_END
