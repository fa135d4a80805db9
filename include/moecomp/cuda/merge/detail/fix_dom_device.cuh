#pragma once
// Device implementation of HC-SMoE's fix-dom merge of one group (<moecomp/cuda/merge/merge.cuh>'s merge_fix_dom):
// the host's steps (<moecomp/merge/detail/merge_host.hpp>, case fix_dom) with
//   - the hidden activations by the device expert forward (moe::cuda_detail::ffn_forward_device, cuBLAS);
//   - the centred norms of every activation column by cub::DeviceSegmentedReduce::Sum in double (the mean,
//     then the centred sum of squares, as the host's standardized_columns);
//   - the correlations by the device align::pearson_correlation (one cuBLAS GEMM on standardised columns),
//     laid out member neuron x dominant neuron so that each member neuron's candidates are one row;
//   - the argmax of each row by cub::DeviceSegmentedReduce::ArgMax over fix_dom_score (the host's per-element
//     rule, merge/detail/fix_dom_rules.hpp; ties to the lowest index, as the host's strict `>` in ascending order);
//   - the combination in the host's order: the (target neuron, source) pairs stably sorted by target
//     (cub::DeviceRadixSort::SortPairs of the sources in (member, neuron) order), each target's range from
//     cub::DeviceHistogram and cub::DeviceScan::ExclusiveSum, then one thread per output element summing the
//     dominant's neuron and its range in that order in double, scaled like the host (x (1 / count) for W1, W3,
//     b1, b3; / count for W2) and rounded once.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/merge/merge_types.hpp>
#include <moecomp/merge/detail/fix_dom_rules.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/correlation_rules.hpp>
#include <moecomp/core/detail/expert_gather.hpp>
#include <moecomp/core/detail/ffn_checks.hpp>
#include <moecomp/cuda/align/align.cuh>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/kernel.cuh>
#include <moecomp/cuda/core/detail/workspace.cuh>
#include <moecomp/cuda/moe/expert.cuh>
#include <moecomp/cuda/moe/expert_types.cuh>
#include <moecomp/cuda/merge/detail/merge_device_checks.cuh>

#include <cub/device/device_histogram.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#include <cuda_runtime_api.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace merge {
namespace cuda_detail {

using moecomp::detail::at;
using moecomp::detail::grid_for;

inline constexpr int fix_dom_block = 256;

// ---- Element functors for CUB (indices over flattened arrays).

/// Column c's token t of h (tokens x cols at row stride ld) as double, flattened k = c * tokens + t.
template <class A>
struct column_value {
  const A* h;
  index_t ld, tokens;
  __host__ __device__ double operator()(index_t k) const {
    const index_t c = k / tokens, t = k - c * tokens;
    return static_cast<double>(h[t * ld + c]);
  }
};

/// The squared deviation of column c's token t from the column's mean (sums[c] / tokens).
template <class A>
struct column_squared_deviation {
  const A* h;
  index_t ld, tokens;
  const double* sums;
  __host__ __device__ double operator()(index_t k) const {
    const index_t c = k / tokens, t = k - c * tokens;
    return moecomp::detail::squared_deviation(static_cast<double>(h[t * ld + c]), sums[c] / static_cast<double>(tokens));
  }
};

/// fix_dom_score of correlation k of the member-neuron x dominant-neuron matrix (d_ff x d_ff, contiguous).
template <class A>
struct score_at {
  const A* corr;
  index_t d_ff;
  const double* squares_dominant;  // centred sums of squares of the dominant's columns
  const double* squares_member;
  double scale, eps;
  __host__ __device__ double operator()(index_t k) const {
    const index_t b = k / d_ff, a = k - b * d_ff;
    return detail::fix_dom_score(static_cast<double>(corr[k]), sqrt(squares_dominant[a]), sqrt(squares_member[b]),
                                 scale, eps);
  }
};

/// i * stride + shift as int64 (segmented sums) or int (the argmax, whose offsets are int).
template <class I>
struct segment_offset {
  index_t stride, shift;
  __host__ __device__ I operator()(index_t i) const { return static_cast<I>(i * stride + shift); }
};

template <class F>
auto indexed(F f) {
  return thrust::make_transform_iterator(thrust::counting_iterator<index_t>(0), f);
}

using argmax_pair = cub::KeyValuePair<int, double>;

// ---- Kernels.

/// out (n x d, contiguous) = rows ids[i] of x (row stride ldx).
template <class A>
MOECOMP_KERNEL void gather_rows_kernel(const A* x, index_t ldx, const index_t* ids, index_t n, index_t d, A* out) {
  const index_t total = n * d;
  for (index_t k = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t i = k / d, c = k - i * d;
    out[k] = x[ids[i] * ldx + c];
  }
}

/// matches (rows x d_ff, contiguous) = the identity in every row; keys (the rows after the first) too.
MOECOMP_KERNEL void identity_matches_kernel(index_t* matches, int* keys, index_t rows, index_t d_ff) {
  const index_t total = rows * d_ff;
  for (index_t k = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t b = k % d_ff;
    matches[k] = b;
    if (k >= d_ff) keys[k - d_ff] = static_cast<int>(b);
  }
}

/// Member j's matches (row j) and sort keys from the argmax of each of its neurons.
MOECOMP_KERNEL void argmax_matches_kernel(const argmax_pair* best, index_t d_ff, index_t* matches_row, int* keys_row) {
  for (index_t b = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < d_ff;
       b += static_cast<index_t>(gridDim.x) * blockDim.x) {
    matches_row[b] = best[b].key;
    keys_row[b] = best[b].key;
  }
}

/// values[q] = first + q: the sources (member position j >= 1, neuron b) as j * d_ff + b, in (j, b) order.
MOECOMP_KERNEL void source_ids_kernel(index_t* values, index_t count, index_t first) {
  for (index_t q = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < count;
       q += static_cast<index_t>(gridDim.x) * blockDim.x)
    values[q] = first + q;
}

/// One piece (W1, W3, W2 or a bias) of the group's members in `ordered` order (the dominant first).
template <class W>
struct member_piece {
  const W* src[moecomp::detail::max_gather_members];
  index_t stride = 0;
  int count = 0;
};

/// Merged element (r, c) of a piece: neuron a = r (neuron_axis 0: W1, W3) or c (1: W2, b1 and b3 as 1 x d_ff
/// rows). The dominant's neuron a, then the sources of a (sorted[offsets[a] .. offsets[a + 1]), member position
/// j = s / d_ff, neuron b = s % d_ff) summed in double in that order, then x (1 / count) or / count (divide),
/// count = 1 + the sources, rounded once to W: the host's fix_dom_combine element for element.
template <class W>
MOECOMP_KERNEL void fix_dom_combine_kernel(member_piece<W> piece, int neuron_axis, bool divide, index_t rows,
                                           index_t cols, const int* offsets, const index_t* sorted, index_t d_ff,
                                           W* out, index_t out_stride) {
  const index_t total = rows * cols;
  for (index_t k = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t r = k / cols, c = k - r * cols;
    const index_t a = neuron_axis == 0 ? r : c;
    double acc = 0;
    acc += convert_to<double>(piece.src[0][r * piece.stride + c]);
    const int q0 = offsets[a], q1 = offsets[a + 1];
    for (int q = q0; q < q1; ++q) {
      const index_t s = sorted[q], j = s / d_ff, b = s - j * d_ff;
      const index_t rr = neuron_axis == 0 ? b : r, cc = neuron_axis == 0 ? c : b;
      acc += convert_to<double>(piece.src[j][rr * piece.stride + cc]);
    }
    const double count = static_cast<double>(1 + (q1 - q0));
    out[r * out_stride + c] = convert_to<W>(divide ? acc / count : acc * (1.0 / count));
  }
}

/// b2 = the members' mean (summed in member order in double, divided by their count, rounded once).
template <class W>
MOECOMP_KERNEL void mean_bias_kernel(member_piece<W> piece, index_t d, W* out) {
  for (index_t c = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < d;
       c += static_cast<index_t>(gridDim.x) * blockDim.x) {
    double acc = 0;
    for (int j = 0; j < piece.count; ++j) acc += convert_to<double>(piece.src[j][c]);
    out[c] = convert_to<W>(acc / static_cast<double>(piece.count));
  }
}

// ---- The workspace plan: built identically by the size query and the calls.

struct fix_dom_plan {
  index_t tokens = 0, n = 0, d = 0, d_ff = 0;
  bool correlate = false;
  std::size_t ids = 0, xf = 0, hd = 0, hj = 0, corr = 0, sums = 0, squares_d = 0, squares_j = 0, best = 0;
  std::size_t matches = 0, keys = 0, sorted_keys = 0, values = 0, sorted_values = 0, counts = 0, offsets = 0;
  std::size_t ffn = 0, ffn_bytes = 0, pearson = 0, pearson_bytes = 0, cub_temp = 0, cub_bytes = 0, bytes = 0;
  moe::cuda_detail::ffn_device_plan ffn_plan;
};

/// Bits of the sort keys (target neurons 0..d_ff-1).
inline int key_bits(index_t d_ff) {
  int bits = 1;
  while ((index_t(1) << bits) < d_ff) ++bits;
  return bits;
}

/// The plan for `tokens` correlation tokens (after the cap), n members, experts of d x d_ff.
template <class W, class A = accumulator_t<W>>
fix_dom_plan make_fix_dom_plan(const char* fn, index_t tokens, index_t n, index_t d, index_t d_ff, bool gated) {
  moecomp::detail::check_int_extents(fn, {{"the number of tokens", tokens},
                                          {"d_ff x d_ff", d_ff * d_ff},
                                          {"(members - 1) x d_ff", (n - 1) * d_ff}});
  fix_dom_plan p;
  p.tokens = tokens;
  p.n = n;
  p.d = d;
  p.d_ff = d_ff;
  p.correlate = tokens >= 2 && n >= 2;
  moecomp::detail::workspace_layout layout(fn);
  const index_t pairs = (n - 1) * d_ff;
  p.matches = layout.take(n * d_ff, sizeof(index_t));
  p.keys = layout.take(pairs, sizeof(int));
  p.sorted_keys = layout.take(pairs, sizeof(int));
  p.values = layout.take(pairs, sizeof(index_t));
  p.sorted_values = layout.take(pairs, sizeof(index_t));
  p.counts = layout.take(d_ff + 1, sizeof(int));
  p.offsets = layout.take(d_ff + 1, sizeof(int));
  std::size_t cub = 0, b = 0;
  if (pairs > 0) {
    MOECOMP_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, b, static_cast<const int*>(nullptr), static_cast<int*>(nullptr),
                                                     static_cast<const index_t*>(nullptr), static_cast<index_t*>(nullptr),
                                                     static_cast<int>(pairs), 0, key_bits(d_ff)));
    cub = std::max(cub, b);
    b = 0;
    MOECOMP_CUDA_TRY(cub::DeviceHistogram::HistogramEven(nullptr, b, static_cast<const int*>(nullptr),
                                                         static_cast<int*>(nullptr), static_cast<int>(d_ff + 1), 0,
                                                         static_cast<int>(d_ff), static_cast<int>(pairs)));
    cub = std::max(cub, b);
  }
  b = 0;
  MOECOMP_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, b, static_cast<const int*>(nullptr), static_cast<int*>(nullptr),
                                                 static_cast<int>(d_ff + 1)));
  cub = std::max(cub, b);
  if (p.correlate) {
    p.ids = layout.take(tokens, sizeof(index_t));
    p.xf = layout.take(tokens * d, sizeof(A));
    p.hd = layout.take(tokens * d_ff, sizeof(A));
    p.hj = layout.take(tokens * d_ff, sizeof(A));
    p.corr = layout.take(d_ff * d_ff, sizeof(A));
    p.sums = layout.take(d_ff, sizeof(double));
    p.squares_d = layout.take(d_ff, sizeof(double));
    p.squares_j = layout.take(d_ff, sizeof(double));
    p.best = layout.take(d_ff, sizeof(argmax_pair));
    p.ffn_plan = moe::cuda_detail::make_ffn_plan<W>(fn, tokens, d, d_ff, gated, false);
    p.ffn_bytes = p.ffn_plan.bytes;
    p.ffn = layout.take(static_cast<index_t>(p.ffn_bytes), 1);
    p.pearson_bytes = align::pearson_correlation_workspace_size<A>(tokens, d_ff, d_ff);
    p.pearson = layout.take(static_cast<index_t>(p.pearson_bytes), 1);
    b = 0;
    MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::Sum(
        nullptr, b, indexed(column_value<A>{nullptr, 1, tokens}), static_cast<double*>(nullptr),
        static_cast<std::int64_t>(d_ff), indexed(segment_offset<index_t>{tokens, 0}),
        indexed(segment_offset<index_t>{tokens, tokens})));
    cub = std::max(cub, b);
    b = 0;
    MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::Sum(
        nullptr, b, indexed(column_squared_deviation<A>{nullptr, 1, tokens, nullptr}), static_cast<double*>(nullptr),
        static_cast<std::int64_t>(d_ff), indexed(segment_offset<index_t>{tokens, 0}),
        indexed(segment_offset<index_t>{tokens, tokens})));
    cub = std::max(cub, b);
    b = 0;
    MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::ArgMax(
        nullptr, b, indexed(score_at<A>{nullptr, d_ff, nullptr, nullptr, 1.0, 0.0}), static_cast<argmax_pair*>(nullptr),
        static_cast<std::int64_t>(d_ff), indexed(segment_offset<int>{d_ff, 0}), indexed(segment_offset<int>{d_ff, d_ff})));
    cub = std::max(cub, b);
  }
  p.cub_bytes = cub;
  p.cub_temp = layout.take(static_cast<index_t>(cub), 1);
  p.bytes = layout.total();
  return p;
}

/// The centred sums of squares of h's columns (tokens x d_ff at row stride ld) into squares; sums: d_ff doubles.
template <class A>
void column_squares(const cuda_context& ctx, const fix_dom_plan& plan, std::byte* temp, const A* h, index_t ld,
                    double* sums, double* squares) {
  std::size_t bytes = plan.cub_bytes;
  const index_t t = plan.tokens;
  MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::Sum(temp, bytes, indexed(column_value<A>{h, ld, t}), sums,
                                                   static_cast<std::int64_t>(plan.d_ff),
                                                   indexed(segment_offset<index_t>{t, 0}),
                                                   indexed(segment_offset<index_t>{t, t}), ctx.stream));
  bytes = plan.cub_bytes;
  MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::Sum(temp, bytes, indexed(column_squared_deviation<A>{h, ld, t, sums}),
                                                   squares, static_cast<std::int64_t>(plan.d_ff),
                                                   indexed(segment_offset<index_t>{t, 0}),
                                                   indexed(segment_offset<index_t>{t, t}), ctx.stream));
}

/// Enqueues one piece's combination (rows x cols output).
template <class W>
void launch_combine(const cuda_context& ctx, const std::vector<const W*>& sources, index_t stride, int neuron_axis,
                    bool divide, index_t rows, index_t cols, const int* offsets, const index_t* sorted, index_t d_ff,
                    W* out, index_t out_stride) {
  if (rows * cols == 0) return;
  member_piece<W> piece;
  piece.count = static_cast<int>(sources.size());
  piece.stride = stride;
  for (std::size_t i = 0; i < sources.size(); ++i) piece.src[i] = sources[i];
  fix_dom_combine_kernel<W><<<grid_for(rows * cols, fix_dom_block), fix_dom_block, 0, ctx.stream>>>(
      piece, neuron_axis, divide, rows, cols, offsets, sorted, d_ff, out, out_stride);
  MOECOMP_CUDA_CHECK_LAUNCH();
}

/// The group's fix-dom merge (arguments checked by the caller): ordered = the members, the dominant first;
/// ids = the correlation tokens (rows of x, after the cap; ignored unless plan.correlate). Asynchronous on
/// ctx.stream apart from the copy of the token ids from pageable host memory.
template <class W, class A = accumulator_t<W>>
void run_fix_dom(const cuda_context& ctx, const merge_params& params, const fix_dom_plan& plan,
                 const moe::ffn_expert_stack_device_view<W>& experts, const std::vector<index_t>& ordered,
                 matrix_view<const A, device_memory> x, const std::vector<index_t>& ids,
                 const moe::ffn_expert_device_mutable_view<W>& out, matrix_view<index_t, device_memory> matches_out,
                 std::byte* workspace) {
  std::byte* base = moecomp::detail::aligned_base(workspace);
  const index_t n = plan.n, d = plan.d, d_ff = plan.d_ff, t = plan.tokens, pairs = (n - 1) * d_ff;
  index_t* matches = at<index_t>(base, plan.matches);
  int* keys = at<int>(base, plan.keys);
  std::byte* temp = at<std::byte>(base, plan.cub_temp);
  // 1. The matching: row 0 (the dominant) is the identity; rows 1.. from the argmax, or the identity.
  const index_t identity_rows = plan.correlate ? 1 : n;
  identity_matches_kernel<<<grid_for(identity_rows * d_ff, fix_dom_block), fix_dom_block, 0,
                                             ctx.stream>>>(matches, keys, identity_rows, d_ff);
  MOECOMP_CUDA_CHECK_LAUNCH();
  if (plan.correlate) {
    index_t* dev_ids = at<index_t>(base, plan.ids);
    // From pageable memory: returns once the ids are staged (the host vector may then go).
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(dev_ids, ids.data(), sizeof(index_t) * static_cast<std::size_t>(t),
                                     cudaMemcpyHostToDevice, ctx.stream));
    A* xf = at<A>(base, plan.xf);
    gather_rows_kernel<A><<<grid_for(t * d, fix_dom_block), fix_dom_block, 0, ctx.stream>>>(x.data(), x.row_stride(),
                                                                                           dev_ids, t, d, xf);
    MOECOMP_CUDA_CHECK_LAUNCH();
    const matrix_view<const A, device_memory> xv(xf, t, d, d);
    const matrix_view<A, device_memory> hd(at<A>(base, plan.hd), t, d_ff, d_ff), hj(at<A>(base, plan.hj), t, d_ff, d_ff);
    const matrix_view<A, device_memory> corr(at<A>(base, plan.corr), d_ff, d_ff, d_ff);
    double* sums = at<double>(base, plan.sums);
    double* squares_d = at<double>(base, plan.squares_d);
    double* squares_j = at<double>(base, plan.squares_j);
    argmax_pair* best = at<argmax_pair>(base, plan.best);
    std::byte* ffn_space = at<std::byte>(base, plan.ffn);
    const vector_view<std::byte, device_memory> pearson_space(at<std::byte>(base, plan.pearson),
                                                              static_cast<index_t>(plan.pearson_bytes));
    moe::cuda_detail::ffn_forward_device<W>(ctx, params.forward, experts.expert(ordered[0]), xv, {}, hd, plan.ffn_plan,
                                            ffn_space);
    column_squares<A>(ctx, plan, temp, hd.data(), d_ff, sums, squares_d);
    const double scale = 1.0 / static_cast<double>(t - 1);
    for (index_t j = 1; j < n; ++j) {
      moe::cuda_detail::ffn_forward_device<W>(ctx, params.forward, experts.expert(ordered[static_cast<std::size_t>(j)]),
                                              xv, {}, hj, plan.ffn_plan, ffn_space);
      column_squares<A>(ctx, plan, temp, hj.data(), d_ff, sums, squares_j);
      // corr[b, a] = r(member neuron b, dominant neuron a): the host's C transposed, one row per member neuron.
      align::pearson_correlation<A>(ctx, hj.as_const(), hd.as_const(), corr, pearson_space);
      std::size_t bytes = plan.cub_bytes;
      MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::ArgMax(
          temp, bytes,
          indexed(score_at<A>{corr.data(), d_ff, squares_d, squares_j, scale, params.correlation_epsilon}), best,
          static_cast<std::int64_t>(d_ff), indexed(segment_offset<int>{d_ff, 0}),
          indexed(segment_offset<int>{d_ff, d_ff}), ctx.stream));
      argmax_matches_kernel<<<grid_for(d_ff, fix_dom_block), fix_dom_block, 0, ctx.stream>>>(
          best, d_ff, matches + j * d_ff, keys + (j - 1) * d_ff);
      MOECOMP_CUDA_CHECK_LAUNCH();
    }
  }
  // 2. Each target neuron's sources in the host's order: stable sort of the (target, j * d_ff + b) pairs.
  int* counts = at<int>(base, plan.counts);
  int* offsets = at<int>(base, plan.offsets);
  index_t* sorted = at<index_t>(base, plan.sorted_values);
  MOECOMP_CUDA_TRY(cudaMemsetAsync(counts, 0, sizeof(int) * static_cast<std::size_t>(d_ff + 1), ctx.stream));
  if (pairs > 0) {
    index_t* values = at<index_t>(base, plan.values);
    int* sorted_keys = at<int>(base, plan.sorted_keys);
    source_ids_kernel<<<grid_for(pairs, fix_dom_block), fix_dom_block, 0, ctx.stream>>>(values, pairs, d_ff);
    MOECOMP_CUDA_CHECK_LAUNCH();
    std::size_t bytes = plan.cub_bytes;
    MOECOMP_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temp, bytes, static_cast<const int*>(keys), sorted_keys,
                                                     static_cast<const index_t*>(values), sorted, static_cast<int>(pairs),
                                                     0, key_bits(d_ff), ctx.stream));
    bytes = plan.cub_bytes;
    MOECOMP_CUDA_TRY(cub::DeviceHistogram::HistogramEven(temp, bytes, static_cast<const int*>(sorted_keys), counts,
                                                         static_cast<int>(d_ff + 1), 0, static_cast<int>(d_ff),
                                                         static_cast<int>(pairs), ctx.stream));
  }
  std::size_t bytes = plan.cub_bytes;
  MOECOMP_CUDA_TRY(cub::DeviceScan::ExclusiveSum(temp, bytes, static_cast<const int*>(counts), offsets,
                                                 static_cast<int>(d_ff + 1), ctx.stream));
  // 3. The merged expert.
  const auto pieces = [&](auto get) {
    std::vector<const W*> v;
    for (index_t e : ordered) v.push_back(get(experts.expert(e)));
    return v;
  };
  const moe::ffn_expert_device_view<W> first = experts.expert(ordered[0]);
  launch_combine<W>(ctx, pieces([](const auto& e) { return e.w1.data(); }), first.w1.row_stride(), 0, false, d_ff, d,
                    offsets, sorted, d_ff, out.w1.data(), out.w1.row_stride());
  if (first.gated())
    launch_combine<W>(ctx, pieces([](const auto& e) { return e.w3.data(); }), first.w3.row_stride(), 0, false, d_ff,
                      d, offsets, sorted, d_ff, out.w3.data(), out.w3.row_stride());
  launch_combine<W>(ctx, pieces([](const auto& e) { return e.w2.data(); }), first.w2.row_stride(), 1, true, d, d_ff,
                    offsets, sorted, d_ff, out.w2.data(), out.w2.row_stride());
  if (!first.b1.empty())
    launch_combine<W>(ctx, pieces([](const auto& e) { return e.b1.data(); }), d_ff, 1, false, 1, d_ff, offsets,
                      sorted, d_ff, out.b1.data(), d_ff);
  if (!first.b3.empty())
    launch_combine<W>(ctx, pieces([](const auto& e) { return e.b3.data(); }), d_ff, 1, false, 1, d_ff, offsets,
                      sorted, d_ff, out.b3.data(), d_ff);
  if (!first.b2.empty()) {
    member_piece<W> piece;
    const std::vector<const W*> src = pieces([](const auto& e) { return e.b2.data(); });
    piece.count = static_cast<int>(src.size());
    for (std::size_t i = 0; i < src.size(); ++i) piece.src[i] = src[i];
    mean_bias_kernel<W><<<grid_for(d, fix_dom_block), fix_dom_block, 0, ctx.stream>>>(piece, d, out.b2.data());
    MOECOMP_CUDA_CHECK_LAUNCH();
  }
  if (!matches_out.empty())
    MOECOMP_CUDA_TRY(cudaMemcpy2DAsync(matches_out.data(), sizeof(index_t) * static_cast<std::size_t>(matches_out.row_stride()),
                                       matches, sizeof(index_t) * static_cast<std::size_t>(d_ff),
                                       sizeof(index_t) * static_cast<std::size_t>(d_ff), static_cast<std::size_t>(n),
                                       cudaMemcpyDeviceToDevice, ctx.stream));
}

/// One group's fix-dom merge for function fn, the arguments checked by the caller (merge_fix_dom, merge_experts): the host's cap
/// of `tokens` (stream `group`), the dominant first, the plan, the run; the report of the one group.
template <class W, class A = accumulator_t<W>>
merge_report fix_dom_group(const char* fn, const cuda_context& ctx, const merge_params& params,
                           const moe::ffn_expert_stack_device_view<W>& experts, vector_view<const index_t> members,
                           index_t dominant, index_t group, matrix_view<const A, device_memory> x,
                           vector_view<const index_t> tokens, const moe::ffn_expert_device_mutable_view<W>& out,
                           matrix_view<index_t, device_memory> matches, vector_view<std::byte, device_memory> workspace) {
  std::vector<index_t> all(static_cast<std::size_t>(tokens.size()));
  for (index_t i = 0; i < tokens.size(); ++i) all[static_cast<std::size_t>(i)] = tokens[i];
  const std::vector<index_t> kept =
      merge::detail::cap_tokens(std::move(all), params.token_cap, params.seed, static_cast<std::uint64_t>(group));
  const std::vector<index_t> ordered = dominant_first(members, dominant);
  const auto plan = make_fix_dom_plan<W>(fn, static_cast<index_t>(kept.size()), members.size(), experts.d_model(),
                                         experts.d_ff(), experts.gated());
  moecomp::detail::check_workspace(fn, plan.bytes, workspace);
  run_fix_dom<W>(ctx, params, plan, experts, ordered, x, kept, out, matches, workspace.data());
  return one_group_report(merge_method::fix_dom, params, experts.experts(), ordered,
                          std::vector<double>(ordered.size(), 1.0 / static_cast<double>(ordered.size())),
                          static_cast<index_t>(kept.size()));
}

}  // namespace cuda_detail
}  // namespace merge
MOECOMP_NAMESPACE_END
