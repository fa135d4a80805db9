#pragma once
// The one host GEMM of moecomp: out = alpha * A B^T over row-major blocks, the shape every GEMM-based
// kernel here needs (Gram tiles, cross terms of squared Euclidean costs, expert forwards), for float and
// double operands and for bfloat16 operands with a float result.
//
// The provider is chosen by the including program (docs/building.md, "GEMM providers"), never by moecomp
// for its consumers:
// - Eigen's GEMM, the default: header-only.
// - MOECOMP_USE_ONEDNN (link oneDNN, Debian's libdnnl-dev): oneDNN's matmul for float and bfloat16
//   (core/detail/gemm_onednn.hpp), its kernel chosen at run time for the CPU; double stays with the next.
// - MOECOMP_USE_CBLAS (link a CBLAS): cblas_sgemm / cblas_dgemm. moecomp calls it from its own
//   OpenMP-parallel tiles, so that BLAS must be thread-safe and run single-threaded inside a parallel
//   region, as OpenBLAS's OpenMP build does (Debian's serial OpenBLAS is not thread-safe).
// bfloat16 operands without oneDNN are widened to float (exact) and multiplied by the float provider: the
// same contract (products exact in float, sums in float), another summation order.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/core/detail/eigen.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/parallel.hpp>

#if defined(MOECOMP_USE_CBLAS)
#include <cblas.h>
#endif
#if defined(MOECOMP_USE_ONEDNN)
#include <moecomp/core/detail/gemm_onednn.hpp>
#endif
#if defined(_OPENMP)
#include <omp.h>
#endif

#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>

#include <algorithm>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

/// gemm_abt's kernel call, whatever threads it may use.
template <class T>
void gemm_abt_kernel(T alpha, const T* a, index_t lda, const T* b, index_t ldb, index_t r, index_t c, index_t d, T* out,
              index_t ldo) {
  static_assert(moecomp::detail::is_real_v<T>, "gemm_abt: T must be float or double");
  using map_out =
      Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Eigen::OuterStride<>>;
  using map_in =
      Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Eigen::OuterStride<>>;
  if (r == 0 || c == 0) return;
  if (d == 0) {
    map_out(out, r, c, Eigen::OuterStride<>(ldo)).setZero();
    return;
  }
#if defined(MOECOMP_USE_ONEDNN)
  if constexpr (std::is_same_v<T, float>) {
    moecomp::detail::onednn_gemm_abt<float>(alpha, a, lda, b, ldb, r, c, d, out, ldo);
    return;
  }
#endif
#if defined(MOECOMP_USE_CBLAS)
  constexpr index_t int_max = std::numeric_limits<int>::max();
  if (r <= int_max && c <= int_max && d <= int_max && lda <= int_max && ldb <= int_max && ldo <= int_max) {
    const auto ri = static_cast<int>(r), ci = static_cast<int>(c), di = static_cast<int>(d);
    if constexpr (std::is_same_v<T, float>) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ri, ci, di, alpha, a, static_cast<int>(lda), b,
                  static_cast<int>(ldb), 0.0f, out, static_cast<int>(ldo));
    } else {
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ri, ci, di, alpha, a, static_cast<int>(lda), b,
                  static_cast<int>(ldb), 0.0, out, static_cast<int>(ldo));
    }
    return;
  }
#endif
  map_in a_block(a, r, d, Eigen::OuterStride<>(lda));
  map_in b_block(b, c, d, Eigen::OuterStride<>(ldb));
  map_out(out, r, c, Eigen::OuterStride<>(ldo)).noalias() = (alpha * a_block) * b_block.transpose();
}

/// out (r x c, row stride ldo) = alpha * A B^T, with A r x d (row stride lda) and B c x d (row stride ldb).
/// The scalar folds into the GEMM (no extra pass; alpha = 1 is exact). d = 0 writes zeros.
///
/// Always one thread: moecomp parallelises over GEMM calls, never inside one, so that every entry is
/// summed the same way at any thread count. Inside an active parallel region Eigen and the OpenMP BLAS
/// run serially by themselves; outside one (num_threads = 1) they would split the product over
/// omp_get_max_threads() threads with other block sizes, and the sums would change in the last bit. A
/// one-thread region whose thread count is set to 1 makes them serial there too, without touching the
/// caller's settings (the count belongs to that region only).
template <class T>
void gemm_abt(T alpha, const T* a, index_t lda, const T* b, index_t ldb, index_t r, index_t c, index_t d, T* out,
              index_t ldo) {
#if defined(_OPENMP)
  if (!omp_in_parallel() && omp_get_max_threads() > 1) {
#pragma omp parallel num_threads(1)
    {
      omp_set_num_threads(1);
      gemm_abt_kernel(alpha, a, lda, b, ldb, r, c, d, out, ldo);
    }
    return;
  }
#endif
  gemm_abt_kernel(alpha, a, lda, b, ldb, r, c, d, out, ldo);
}

/// The name of the float GEMM provider this translation unit was compiled with: "onednn", "cblas" or "eigen".
inline const char* gemm_provider_name() noexcept {
#if defined(MOECOMP_USE_ONEDNN)
  return "onednn";
#elif defined(MOECOMP_USE_CBLAS)
  return "cblas";
#else
  return "eigen";
#endif
}

/// Rows of each operand widened per step of the portable bfloat16 GEMM (its float buffers: 2 x 256 x d).
inline constexpr index_t gemm_bf16_panel_rows = 256;

/// out (r x c, row stride ldo) = alpha * A B^T with bfloat16 A (r x d) and B (c x d) and a float result:
/// products exact in float, sums in float. One thread, like gemm_abt. With oneDNN these are its bfloat16
/// dot products (vdpbf16ps on AVX512_BF16, which flushes subnormal inputs and products to zero); otherwise
/// panels of both operands are widened to float (exact) and multiplied by gemm_abt<float>.
inline void gemm_abt_bf16(const host_context& ctx, float alpha, const bfloat16* a, index_t lda, const bfloat16* b,
                          index_t ldb, index_t r, index_t c, index_t d, float* out, index_t ldo) {
  if (r == 0 || c == 0) return;
#if defined(MOECOMP_USE_ONEDNN)
  if (d > 0) {  // one thread: onednn_gemm_abt sets oneDNN's thread count to 1 around the call
    moecomp::detail::onednn_gemm_abt<bfloat16>(alpha, a, lda, b, ldb, r, c, d, out, ldo);
    return;
  }
#endif
  if (d == 0) {
    gemm_abt<float>(alpha, nullptr, 0, nullptr, 0, r, c, 0, out, ldo);
    return;
  }
  const index_t panel = gemm_bf16_panel_rows;
  host_workspace<float> a_wide(ctx, static_cast<std::size_t>(std::min(panel, r) * d));
  host_workspace<float> b_wide(ctx, static_cast<std::size_t>(std::min(panel, c) * d));
  for (index_t j0 = 0; j0 < c; j0 += panel) {
    const index_t cols = std::min(panel, c - j0);
    for (index_t j = 0; j < cols; ++j)
      for (index_t k = 0; k < d; ++k) b_wide[static_cast<std::size_t>(j * d + k)] = static_cast<float>(b[(j0 + j) * ldb + k]);
    for (index_t i0 = 0; i0 < r; i0 += panel) {
      const index_t rows = std::min(panel, r - i0);
      if (j0 == 0 || r > panel) {
        for (index_t i = 0; i < rows; ++i)
          for (index_t k = 0; k < d; ++k)
            a_wide[static_cast<std::size_t>(i * d + k)] = static_cast<float>(a[(i0 + i) * lda + k]);
      }
      gemm_abt<float>(alpha, a_wide.data(), d, b_wide.data(), d, rows, cols, d, out + i0 * ldo + j0, ldo);
    }
  }
}

/// Rows and columns of out per tile of matmul_abt (each tile is one single-threaded provider call).
inline constexpr index_t gemm_tile_rows = 256, gemm_tile_cols = 512;

/// matmul_abt's checks and tiles: call(a rows, b rows, r, c, out block) for each tile of out, over the threads.
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
MOECOMP_NAMESPACE_END
