#pragma once
// Device implementation of the FFN expert forward (<moecomp/cuda/moe/expert.cuh>): the host's steps
// (<moecomp/moe/detail/ffn_host.hpp>) with cuBLAS GEMMs and two element-wise kernels whose per-element math is
// the host's (core/detail/activation.hpp).
//
//   weights:  float / double used in place (any row stride); bfloat16 / half converted once per call into
//             the workspace (3 d d_ff floats at most), as on the host;
//   chunks:   ffn_device_chunk_tokens tokens at a time: h = x W1^T (and u = x W3^T) by one GEMM each, the
//             gate kernel h = act(h + b1) * (u + b3), then y = h W2^T by one GEMM and the b2 kernel.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/moe/ffn_types.hpp>
#include <moecomp/cuda/moe/expert_types.cuh>
#include <moecomp/core/detail/activation.hpp>
#include <moecomp/core/detail/ffn_checks.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/kernel.cuh>
#include <moecomp/cuda/core/detail/cublas.cuh>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/cuda/core/detail/workspace.cuh>

#include <cuda_runtime_api.h>

#include <climits>
#include <cstddef>
#include <initializer_list>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace moe {

namespace cuda_detail {

using namespace moecomp::detail;  // the shared device layer

inline constexpr int ffn_block = 256;

/// dst (rows x cols, contiguous) = src (row stride ld) converted to A.
template <class W, class A>
MOECOMP_KERNEL void convert_matrix_kernel(const W* src, index_t ld, index_t rows, index_t cols, A* dst) {
  const index_t total = rows * cols;
  for (index_t k = index_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += index_t(gridDim.x) * blockDim.x) {
    const index_t i = k / cols, j = k - i * cols;
    dst[k] = convert_to<A>(src[i * ld + j]);
  }
}

/// h (rows x d_ff, row stride ldh) = act(h + b1) * (u + b3) gated, act(h + b1) plain, as the host's tile loop.
template <class W, class A>
MOECOMP_KERNEL void gate_kernel(A* h, index_t ldh, const A* u, index_t ldu, index_t rows, index_t d_ff,
                                vector_view<const W, device_memory> b1, vector_view<const W, device_memory> b3,
                                activation act, bool gated) {
  const index_t total = rows * d_ff;
  for (index_t k = index_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += index_t(gridDim.x) * blockDim.x) {
    const index_t r = k / d_ff, j = k - r * d_ff;
    const A bias1 = b1.empty() ? A(0) : convert_to<A>(*b1.ptr(j));
    const A a = moecomp::detail::activate<A>(act, h[r * ldh + j] + bias1);
    if (gated) {
      const A bias3 = b3.empty() ? A(0) : convert_to<A>(*b3.ptr(j));
      h[r * ldh + j] = a * (u[r * ldu + j] + bias3);
    } else {
      h[r * ldh + j] = a;
    }
  }
}

/// y (rows x d, row stride ldy) += b2.
template <class W, class A>
MOECOMP_KERNEL void add_bias_kernel(A* y, index_t ldy, index_t rows, index_t d, vector_view<const W, device_memory> b2) {
  const index_t total = rows * d;
  for (index_t k = index_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += index_t(gridDim.x) * blockDim.x) {
    const index_t r = k / d, j = k - r * d;
    y[r * ldy + j] += convert_to<A>(*b2.ptr(j));
  }
}

/// Where the pieces of the workspace lie.
struct ffn_device_plan {
  index_t chunk = 0;
  std::size_t w1 = 0, w3 = 0, w2 = 0, h = 0, u = 0, bytes = 0;
  bool convert = false, own_hidden = false;
};

/// The workspace of one forward: converted weights (16-bit storage), the hidden chunk (unless the caller's
/// hidden output holds it) and the up-projection chunk (gated).
template <class W, class A = accumulator_t<W>>
ffn_device_plan make_ffn_plan(const char* fn, index_t n, index_t d, index_t d_ff, bool gated, bool own_hidden) {
  ffn_device_plan plan;
  plan.chunk = min_index(n, ffn_device_chunk_tokens);
  plan.convert = !std::is_same_v<W, A>;
  plan.own_hidden = own_hidden;
  workspace_layout layout(fn);
  if (plan.convert) {
    plan.w1 = layout.take(d_ff * d, sizeof(A));
    if (gated) plan.w3 = layout.take(d_ff * d, sizeof(A));
    plan.w2 = layout.take(d * d_ff, sizeof(A));
  }
  if (own_hidden) plan.h = layout.take(plan.chunk * d_ff, sizeof(A));
  if (gated) plan.u = layout.take(plan.chunk * d_ff, sizeof(A));
  plan.bytes = layout.total();
  return plan;
}

/// cuBLAS takes int extents and leading dimensions.
inline void check_cublas_extents(const char* fn, index_t d, index_t d_ff, std::initializer_list<index_t> strides) {
  MOECOMP_EXPECTS(d <= INT_MAX && d_ff <= INT_MAX, fn, ": d and d_ff must be at most ", INT_MAX,
                  " on the device (cuBLAS), got ", d, " and ", d_ff);
  for (index_t s : strides)
    MOECOMP_EXPECTS(s <= INT_MAX, fn, ": row strides must be at most ", INT_MAX, " on the device (cuBLAS), got ", s);
}

/// The host's shape checks (moe/detail/ffn_checks.hpp) on a device expert.
template <class W>
void check_device_expert(const char* fn, const ffn_expert_device_view<W>& e) {
  moecomp::detail::check_ffn_shapes(fn, e.d_ff(), e.d_model(), e.w3.rows(), e.w3.cols(), e.w2.rows(), e.w2.cols(),
                                e.b1.size(), e.b3.size(), e.b2.size(), e.gated());
}

/// Every check of the device ffn_forward, run before any allocation or device work.
template <class W, class A = accumulator_t<W>>
void check_ffn_forward_arguments(const char* fn, const ffn_params& params, const ffn_expert_device_view<W>& expert,
                                 matrix_view<const A, device_memory> x, matrix_view<A, device_memory> y) {
  moecomp::detail::check_ffn_params(fn, params);
  check_device_expert(fn, expert);
  moecomp::detail::check_tokens(fn, expert.d_model(), x.rows(), x.cols(), "y", y.rows(), y.cols(), expert.d_model());
  moecomp::detail::check_no_overlap(fn, "y", y, "x", x);
  check_cublas_extents(fn, expert.d_model(), expert.d_ff(),
                       {x.row_stride(), y.row_stride(), expert.w1.row_stride(), expert.w3.row_stride(),
                        expert.w2.row_stride()});
}

/// A weight matrix as the GEMM reads it: the caller's (A storage) or the converted copy.
template <class W, class A>
matrix_view<const A, device_memory> gemm_weights(const cuda_context& ctx, matrix_view<const W, device_memory> m,
                                                 std::byte* base, std::size_t offset) {
  if constexpr (std::is_same_v<W, A>) {
    (void)ctx;
    (void)base;
    (void)offset;
    return m;
  } else {
    A* out = at<A>(base, offset);
    convert_matrix_kernel<W, A><<<grid_for(m.rows() * m.cols(), ffn_block), ffn_block, 0, ctx.stream>>>(
        m.data(), m.row_stride(), m.rows(), m.cols(), out);
    MOECOMP_CUDA_CHECK_LAUNCH();
    return matrix_view<const A, device_memory>(out, m.rows(), m.cols());
  }
}

/// y (n x d) and/or hidden (n x d_ff) of tokens x, asynchronously on ctx.stream. Either output may be empty.
template <class W, class A = accumulator_t<W>>
void ffn_forward_device(const cuda_context& ctx, const ffn_params& params, const ffn_expert_device_view<W>& e,
                        matrix_view<const A, device_memory> x, matrix_view<A, device_memory> y,
                        matrix_view<A, device_memory> hidden, const ffn_device_plan& plan, std::byte* workspace) {
  const index_t n = x.rows(), d = e.d_model(), d_ff = e.d_ff();
  if (n == 0) return;
  const cublas_session cublas(ctx);
  std::byte* base = aligned_base(workspace);
  const auto w1 = gemm_weights<W, A>(ctx, e.w1, base, plan.w1);
  const auto w3 = e.gated() ? gemm_weights<W, A>(ctx, e.w3, base, plan.w3) : matrix_view<const A, device_memory>();
  const auto w2 = y.empty() ? matrix_view<const A, device_memory>() : gemm_weights<W, A>(ctx, e.w2, base, plan.w2);
  A* u = e.gated() ? at<A>(base, plan.u) : nullptr;
  for (index_t first = 0; first < n; first += plan.chunk) {
    const index_t rows = min_index(plan.chunk, n - first);
    // The hidden chunk: the caller's hidden rows when it asked for them, else the workspace.
    A* h = plan.own_hidden ? at<A>(base, plan.h) : hidden.row_ptr(first);
    const index_t ldh = plan.own_hidden ? d_ff : hidden.row_stride();
    gemm_abt(cublas.handle(), rows, d_ff, d, x.row_ptr(first), x.row_stride(), w1.data(), w1.row_stride(), h, ldh);
    if (e.gated())
      gemm_abt(cublas.handle(), rows, d_ff, d, x.row_ptr(first), x.row_stride(), w3.data(), w3.row_stride(), u, d_ff);
    gate_kernel<W, A><<<grid_for(rows * d_ff, ffn_block), ffn_block, 0, ctx.stream>>>(h, ldh, u, d_ff, rows, d_ff, e.b1,
                                                                                       e.b3, params.act, e.gated());
    MOECOMP_CUDA_CHECK_LAUNCH();
    if (y.empty()) continue;
    gemm_abt(cublas.handle(), rows, d, d_ff, h, ldh, w2.data(), w2.row_stride(), y.row_ptr(first), y.row_stride());
    if (!e.b2.empty()) {
      add_bias_kernel<W, A><<<grid_for(rows * d, ffn_block), ffn_block, 0, ctx.stream>>>(y.row_ptr(first), y.row_stride(),
                                                                                         rows, d, e.b2);
      MOECOMP_CUDA_CHECK_LAUNCH();
    }
  }
}

}  // namespace cuda_detail
}  // namespace moe
MOECOMP_NAMESPACE_END
