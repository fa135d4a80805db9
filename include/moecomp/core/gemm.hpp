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
#include <moecomp/core/detail/gemm.hpp>

#include <type_traits>

MOECOMP_NAMESPACE_BEGIN

/// The GEMM provider this translation unit was compiled with: "onednn", "cblas" or "eigen".
inline const char* gemm_provider() noexcept { return detail::gemm_provider_name(); }


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
