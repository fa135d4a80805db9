#pragma once
// The one host GEMM of moecomp: out = alpha * A B^T over row-major blocks, the shape every GEMM-based
// kernel here needs (Gram tiles, cross terms of squared Euclidean costs).
//
// The kernel is Eigen's GEMM, or, when the including code defines MOECOMP_USE_CBLAS and links a CBLAS,
// cblas_sgemm / cblas_dgemm. moecomp calls it from its own OpenMP-parallel tiles, so that BLAS must be
// thread-safe and run single-threaded inside a parallel region, as OpenBLAS's OpenMP build does (Debian's
// serial OpenBLAS is not thread-safe). moecomp never defines the macro for its consumers.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/core/detail/eigen.hpp>
#include <moecomp/core/views.hpp>

#if defined(MOECOMP_USE_CBLAS)
#include <cblas.h>
#endif
#if defined(_OPENMP)
#include <omp.h>
#endif

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

}  // namespace detail
MOECOMP_NAMESPACE_END
