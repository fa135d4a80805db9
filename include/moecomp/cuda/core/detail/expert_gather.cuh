#pragma once
// The device side of the weighted gather of expert neurons (<moecomp/core/detail/expert_gather.hpp>): one
// element-wise kernel per piece (W1, W3, W2, b1, b3, b2), each thread one output element, and the host code
// that fills the by-value member tables. Used by merging's weighted sum and the device permute_neurons.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/expert_gather.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/kernel.cuh>
#include <moecomp/cuda/moe/expert_types.cuh>

#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

inline constexpr int gather_block = 256;

/// out(r, c) = gathered_sum(piece, axis, r, c) rounded to W, for every element of the rows x cols output.
template <class W>
MOECOMP_KERNEL void gather_piece_kernel(gather_piece<W> piece, int axis, index_t rows, index_t cols, W* out,
                                        index_t out_stride) {
  const index_t total = rows * cols;
  for (index_t k = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t r = k / cols, c = k % cols;
    out[r * out_stride + c] = convert_to<W>(gathered_sum(piece, axis, r, c));
  }
}

/// Enqueues one piece on ctx.stream: sources[i] (row stride `stride`), coefficients[i], permutation rows
/// (perm_base + i * perm_stride, or none when perm_base is null) into out (rows x cols, row stride out_stride).
template <class W>
void launch_gather_piece(const cuda_context& ctx, const std::vector<const W*>& sources, index_t stride,
                         const std::vector<double>& coefficients, const index_t* perm_base, index_t perm_stride,
                         int axis, index_t rows, index_t cols, W* out, index_t out_stride) {
  if (rows * cols == 0) return;
  gather_piece<W> piece;
  piece.count = static_cast<int>(sources.size());
  piece.stride = stride;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    piece.src[i] = sources[i];
    piece.coef[i] = coefficients[i];
    piece.perm[i] = perm_base ? perm_base + static_cast<index_t>(i) * perm_stride : nullptr;
  }
  gather_piece_kernel<W><<<grid_for(rows * cols, gather_block), gather_block, 0, ctx.stream>>>(
      piece, axis, rows, cols, out, out_stride);
  MOECOMP_CUDA_CHECK_LAUNCH();
}

/// The expert `out` = sum_i coefficients[i] experts[i] with expert i's neurons gathered by permutation row i
/// (perm_base + i * perm_stride, or in place when perm_base is null): W1 / W3 rows and b1 / b3 entries
/// gathered, W2 columns gathered, b2 summed as is. Shapes checked by the caller.
template <class W>
void gather_experts(const cuda_context& ctx, const std::vector<moe::ffn_expert_device_view<W>>& experts,
                    const std::vector<double>& coefficients, const index_t* perm_base, index_t perm_stride,
                    const moe::ffn_expert_device_mutable_view<W>& out) {
  const auto pieces = [&](auto get) {
    std::vector<const W*> v;
    for (const auto& e : experts) v.push_back(get(e));
    return v;
  };
  const auto& first = experts.front();
  const index_t d = first.d_model(), d_ff = first.d_ff();
  launch_gather_piece<W>(ctx, pieces([](const auto& e) { return e.w1.data(); }), first.w1.row_stride(), coefficients,
                         perm_base, perm_stride, 0, d_ff, d, out.w1.data(), out.w1.row_stride());
  if (first.gated())
    launch_gather_piece<W>(ctx, pieces([](const auto& e) { return e.w3.data(); }), first.w3.row_stride(),
                           coefficients, perm_base, perm_stride, 0, d_ff, d, out.w3.data(), out.w3.row_stride());
  launch_gather_piece<W>(ctx, pieces([](const auto& e) { return e.w2.data(); }), first.w2.row_stride(), coefficients,
                         perm_base, perm_stride, 1, d, d_ff, out.w2.data(), out.w2.row_stride());
  // Biases as 1-row matrices with unit column stride (vector views of a stack's rows are contiguous).
  if (!first.b1.empty())
    launch_gather_piece<W>(ctx, pieces([](const auto& e) { return e.b1.data(); }), d_ff, coefficients, perm_base,
                           perm_stride, 1, 1, d_ff, out.b1.data(), d_ff);
  if (!first.b3.empty())
    launch_gather_piece<W>(ctx, pieces([](const auto& e) { return e.b3.data(); }), d_ff, coefficients, perm_base,
                           perm_stride, 1, 1, d_ff, out.b3.data(), d_ff);
  if (!first.b2.empty())
    launch_gather_piece<W>(ctx, pieces([](const auto& e) { return e.b2.data(); }), d, coefficients, nullptr, 0, -1, 1,
                           d, out.b2.data(), d);
}

}  // namespace detail
MOECOMP_NAMESPACE_END
