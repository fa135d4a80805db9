#pragma once
// out = alpha * A B^T on the host, the GEMM every GEMM-bound algorithm of moecomp runs on, for callers that
// need the product itself (and for the benches that measure it). Documentation: docs/core.md, "GEMM".
//
// The provider is the including program's choice (docs/building.md, "GEMM providers"): Eigen's GEMM by
// default, oneDNN's matmul under MOECOMP_USE_ONEDNN, a CBLAS under MOECOMP_USE_CBLAS. The output is cut into
// fixed tiles of gemm_tile_rows x gemm_tile_cols entries, each one single-threaded provider call, spread over
// ctx's threads: the same bytes at any thread count (not across providers: each sums in its own order).
//
// Example:
//   moecomp::host_context ctx;                               // OpenMP's threads
//   moecomp::matmul_abt<float>(ctx, 1.0f, a, b, out);        // a: n x d, b: m x d, out: n x m
//   moecomp::matmul_abt(ctx, 1.0f, a_bf16, b_bf16, out);      // bfloat16 operands, float result
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/gemm.hpp>
#include <moecomp/core/detail/parallel.hpp>

#include <algorithm>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN

/// Rows and columns of out per tile (each tile is one single-threaded provider call).
inline constexpr index_t gemm_tile_rows = 256, gemm_tile_cols = 512;

/// The GEMM provider this translation unit was compiled with: "onednn", "cblas" or "eigen".
inline const char* gemm_provider() noexcept { return detail::gemm_provider_name(); }

namespace detail {
template <class In, class Out, class Call>
void matmul_abt_tiles(const char* fn, const host_context& ctx, matrix_view<const In> a, matrix_view<const In> b,
                      matrix_view<Out> out, Call&& call) {
  MOECOMP_EXPECTS(a.cols() == b.cols(), fn, ": a and b must have the same columns, got ", a.cols(), " and ", b.cols());
  MOECOMP_EXPECTS(out.rows() == a.rows() && out.cols() == b.rows(), fn, ": out must be ",
                  shape_string(a.rows(), b.rows()), " (a's rows by b's rows), got ", shape_string(out.rows(), out.cols()));
  const index_t row_tiles = (a.rows() + gemm_tile_rows - 1) / gemm_tile_rows;
  const index_t col_tiles = (b.rows() + gemm_tile_cols - 1) / gemm_tile_cols;
  parallel_for(row_tiles * col_tiles, ctx.threads(), [&](index_t t, int) {
    const index_t i0 = (t / col_tiles) * gemm_tile_rows, j0 = (t % col_tiles) * gemm_tile_cols;
    call(a.row_ptr(i0), b.row_ptr(j0), std::min(gemm_tile_rows, a.rows() - i0), std::min(gemm_tile_cols, b.rows() - j0),
         out.row_ptr(i0) + j0);
  });
}
}  // namespace detail

/// out (n x m) = alpha * a b^T, with a n x d and b m x d (float or double, any row strides); d = 0 writes zeros.
/// [in] a, b; [out] out, which must not overlap them. Sums in T, in the provider's order.
template <class T>
void matmul_abt(const host_context& ctx, T alpha, matrix_view<const T> a, matrix_view<const T> b, matrix_view<T> out) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "matmul_abt: T must be float or double");
  detail::matmul_abt_tiles<T, T>("matmul_abt", ctx, a, b, out, [&](const T* ap, const T* bp, index_t r, index_t c, T* op) {
    detail::gemm_abt<T>(alpha, ap, a.row_stride(), bp, b.row_stride(), r, c, a.cols(), op, out.row_stride());
  });
}

/// out (n x m, float) = alpha * a b^T with bfloat16 a (n x d) and b (m x d): products exact in float, sums in
/// float (oneDNN's bfloat16 dot products under MOECOMP_USE_ONEDNN, which flush subnormals to zero; else the
/// float provider on widened operands). [in] a, b; [out] out.
inline void matmul_abt(const host_context& ctx, float alpha, matrix_view<const bfloat16> a, matrix_view<const bfloat16> b,
                       matrix_view<float> out) {
  detail::matmul_abt_tiles<bfloat16, float>(
      "matmul_abt", ctx, a, b, out, [&](const bfloat16* ap, const bfloat16* bp, index_t r, index_t c, float* op) {
        detail::gemm_abt_bf16(ctx, alpha, ap, a.row_stride(), bp, b.row_stride(), r, c, a.cols(), op, out.row_stride());
      });
}

MOECOMP_NAMESPACE_END
