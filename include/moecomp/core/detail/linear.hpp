#pragma once
// y = x W^T for weights W of any storage type (float, double, bfloat16, half), reading W once: W's rows are
// taken in panels of linear_panel_rows, each converted into a per-thread buffer of the accumulator type A (no
// copy when W is A) and multiplied by one single-threaded GEMM into its block of y's columns. The panels are
// spread over the threads; each block of y is computed by one call of a fixed shape, so y is the same at any
// thread count. At decode sizes (few rows of x) this is the memory-bound pass over W that an MoE layer's
// experts need, without first converting a whole expert. With bfloat16 W and ctx.matmul == bf16, x is
// rounded to bfloat16 once and the panels are multiplied as stored (gemm_abt_bf16): nothing is widened.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/gemm.hpp>
#include <moecomp/core/detail/parallel.hpp>

#include <algorithm>
#include <cstddef>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

/// W rows per panel: 64 rows of a 4096-wide float row are 1 MiB, an L2's worth.
inline constexpr index_t linear_panel_rows = 64;

/// y (m x out, row stride any) = x (m x in) W^T, W out x in; A is float (or double for double weights).
template <class W, class A>
void linear_abt(const host_context& ctx, matrix_view<const A> x, matrix_view<const W> w, matrix_view<A> y) {
  static_assert(std::is_same_v<A, accumulator_t<W>>, "linear_abt: A must be W's accumulator type");
  const index_t m = x.rows(), out = w.rows(), in = w.cols();
  if (m == 0 || out == 0) return;
  const index_t panels = (out + linear_panel_rows - 1) / linear_panel_rows;
  const int threads = static_cast<int>(std::min<index_t>(std::max(ctx.threads(), 1), panels));
  if constexpr (std::is_same_v<W, bfloat16>) {
    if (ctx.matmul == matmul_precision::bf16) {
      host_workspace<bfloat16> narrow(ctx, static_cast<std::size_t>(m * in));
      for (index_t r = 0; r < m; ++r) {
        const A* from = x.row_ptr(r);
        for (index_t j = 0; j < in; ++j) narrow[static_cast<std::size_t>(r * in + j)] = bfloat16(static_cast<float>(from[j]));
      }
      parallel_for(panels, threads, [&](index_t p, int) {
        const index_t first = p * linear_panel_rows, rows = std::min(linear_panel_rows, out - first);
        gemm_abt_bf16(ctx, 1.0f, narrow.data(), in, w.row_ptr(first), w.row_stride(), m, rows, in, y.row_ptr(0) + first,
                      y.row_stride());
      });
      return;
    }
  }
  const std::size_t per_thread = std::is_same_v<W, A> ? 0 : static_cast<std::size_t>(linear_panel_rows * in);
  host_workspace<A> buffers(ctx, per_thread * static_cast<std::size_t>(threads));
  parallel_for(panels, threads, [&](index_t p, int thread) {
    const index_t first = p * linear_panel_rows, rows = std::min(linear_panel_rows, out - first);
    const A* panel = nullptr;
    index_t ld = 0;
    if constexpr (std::is_same_v<W, A>) {
      panel = w.row_ptr(first);
      ld = w.row_stride();
    } else {
      A* buffer = buffers.data() + per_thread * static_cast<std::size_t>(thread);
      for (index_t r = 0; r < rows; ++r) {
        const W* from = w.row_ptr(first + r);
        A* to = buffer + r * in;
        for (index_t j = 0; j < in; ++j) to[j] = convert_to<A>(from[j]);
      }
      panel = buffer;
      ld = in;
    }
    gemm_abt<A>(A(1), x.data(), x.row_stride(), panel, ld, m, rows, in, y.row_ptr(0) + first, y.row_stride());
  });
}

}  // namespace detail
MOECOMP_NAMESPACE_END
