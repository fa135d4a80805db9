#pragma once
// cuBLAS for every device algorithm: the session that borrows (or creates) a handle for one call and leaves a
// caller's handle as it found it, and the one GEMM shape the algorithms need, row-major A B^T (as the host's
// core/detail/gemm.hpp).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

/// The cuBLAS handle of one call: the caller's, or a temporary one. A caller's handle is left as it was
/// found: its stream and pointer mode are changed only if they differ from what the call needs, and
/// restored by the destructor (also when a later step throws).
class cublas_session {
 public:
  explicit cublas_session(const cuda_context& ctx) {
    if (ctx.cublas_handle != nullptr) {
      handle_ = ctx.cublas_handle;
    } else {
      MOECOMP_CUBLAS_TRY(cublasCreate(&owned_.handle));
      handle_ = owned_.handle;
    }
    restore_.handle = handle_;
    cudaStream_t current_stream = nullptr;
    MOECOMP_CUBLAS_TRY(cublasGetStream(handle_, &current_stream));
    if (current_stream != ctx.stream) {
      MOECOMP_CUBLAS_TRY(cublasSetStream(handle_, ctx.stream));
      restore_.stream = current_stream;
      restore_.restore_stream = true;
    }
    cublasPointerMode_t current_mode = CUBLAS_POINTER_MODE_HOST;
    MOECOMP_CUBLAS_TRY(cublasGetPointerMode(handle_, &current_mode));
    if (current_mode != CUBLAS_POINTER_MODE_HOST) {
      MOECOMP_CUBLAS_TRY(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
      restore_.pointer_mode = current_mode;
      restore_.restore_pointer_mode = true;
    }
  }
  cublas_session(const cublas_session&) = delete;
  cublas_session& operator=(const cublas_session&) = delete;

  cublasHandle_t handle() const noexcept { return handle_; }

 private:
  struct owned_handle {
    cublasHandle_t handle = nullptr;
    ~owned_handle() {
      if (handle != nullptr) (void)cublasDestroy(handle);  // synchronises the device (documented)
    }
  };
  struct state_restorer {
    cublasHandle_t handle = nullptr;
    bool restore_stream = false, restore_pointer_mode = false;
    cudaStream_t stream = nullptr;
    cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
    ~state_restorer() {
      if (restore_pointer_mode) (void)cublasSetPointerMode(handle, pointer_mode);
      if (restore_stream) (void)cublasSetStream(handle, stream);
    }
  };
  owned_handle owned_;     // declared first: destroyed after the state is restored
  state_restorer restore_;
  cublasHandle_t handle_ = nullptr;
};

/// Row-major G (p x w, row stride ldg) = A (p x d, row stride lda) times B^T (B: w x d, row stride ldb).
/// cuBLAS is column-major: a row-major matrix is its transpose there, so this is the column-major
/// G^T (w x p) = B (as op T of the stored d x w) times A (the stored d x p).
inline void gemm_abt(cublasHandle_t handle, index_t p, index_t w, index_t d, const float* a, index_t lda,
                      const float* b, index_t ldb, float* g, index_t ldg) {
  const float one = 1.0f, zero = 0.0f;
  MOECOMP_CUBLAS_TRY(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w), static_cast<int>(p),
                                 static_cast<int>(d), &one, b, static_cast<int>(ldb), a, static_cast<int>(lda), &zero,
                                 g, static_cast<int>(ldg)));
}
inline void gemm_abt(cublasHandle_t handle, index_t p, index_t w, index_t d, const double* a, index_t lda,
                      const double* b, index_t ldb, double* g, index_t ldg) {
  const double one = 1.0, zero = 0.0;
  MOECOMP_CUBLAS_TRY(cublasDgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w), static_cast<int>(p),
                                 static_cast<int>(d), &one, b, static_cast<int>(ldb), a, static_cast<int>(lda), &zero,
                                 g, static_cast<int>(ldg)));
}

/// Row-major G (p x w, row stride ldg) = A^T B, A: t x p (row stride lda), B: t x w (row stride ldb). Column-major
/// that is G^T (w x p) = B' A'^T with B' the stored w x t and A' the stored p x t.
inline void gemm_atb(cublasHandle_t handle, index_t p, index_t w, index_t t, const float* a, index_t lda,
                     const float* b, index_t ldb, float* g, index_t ldg) {
  const float one = 1.0f, zero = 0.0f;
  MOECOMP_CUBLAS_TRY(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(w), static_cast<int>(p),
                                 static_cast<int>(t), &one, b, static_cast<int>(ldb), a, static_cast<int>(lda), &zero,
                                 g, static_cast<int>(ldg)));
}
inline void gemm_atb(cublasHandle_t handle, index_t p, index_t w, index_t t, const double* a, index_t lda,
                     const double* b, index_t ldb, double* g, index_t ldg) {
  const double one = 1.0, zero = 0.0;
  MOECOMP_CUBLAS_TRY(cublasDgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(w), static_cast<int>(p),
                                 static_cast<int>(t), &one, b, static_cast<int>(ldb), a, static_cast<int>(lda), &zero,
                                 g, static_cast<int>(ldg)));
}

/// gemm_abt over `batches` problems at once (cublas<t>gemmStridedBatched): problem k reads A and B at
/// k * stride_ab elements from a and b and writes G at k * stride_g. One launch fills the GPU where each
/// problem alone is too small to (a thin product with a long inner dimension, say).
inline void gemm_abt_batched(cublasHandle_t handle, index_t p, index_t w, index_t d, const float* a, index_t lda,
                             const float* b, index_t ldb, index_t stride_ab, float* g, index_t ldg, index_t stride_g,
                             index_t batches) {
  const float one = 1.0f, zero = 0.0f;
  MOECOMP_CUBLAS_TRY(cublasSgemmStridedBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w),
                                               static_cast<int>(p), static_cast<int>(d), &one, b, static_cast<int>(ldb),
                                               static_cast<long long>(stride_ab), a, static_cast<int>(lda),
                                               static_cast<long long>(stride_ab), &zero, g, static_cast<int>(ldg),
                                               static_cast<long long>(stride_g), static_cast<int>(batches)));
}
inline void gemm_abt_batched(cublasHandle_t handle, index_t p, index_t w, index_t d, const double* a, index_t lda,
                             const double* b, index_t ldb, index_t stride_ab, double* g, index_t ldg, index_t stride_g,
                             index_t batches) {
  const double one = 1.0, zero = 0.0;
  MOECOMP_CUBLAS_TRY(cublasDgemmStridedBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w),
                                               static_cast<int>(p), static_cast<int>(d), &one, b, static_cast<int>(ldb),
                                               static_cast<long long>(stride_ab), a, static_cast<int>(lda),
                                               static_cast<long long>(stride_ab), &zero, g, static_cast<int>(ldg),
                                               static_cast<long long>(stride_g), static_cast<int>(batches)));
}

}  // namespace detail
MOECOMP_NAMESPACE_END
