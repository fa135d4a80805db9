#pragma once
// Checks for CUDA runtime and cuBLAS calls. A failed call goes through MOECOMP_FAIL with
// error_kind::cuda_error, so it throws moecomp::cuda_error (or reaches the no-exceptions handler, see
// <moecomp/core/error.hpp>) with the call's text, the error's name and description, and file:line:
//   "cudaMallocAsync(&p, bytes, stream) failed: cudaErrorMemoryAllocation (out of memory) at f.cu:12"
//
// This header includes only the CUDA runtime API. MOECOMP_CUBLAS_TRY names cuBLAS functions in its
// expansion, so the file that uses it includes <cublas_v2.h> itself.
#include <moecomp/core/error.hpp>

#include <cuda_runtime_api.h>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

/// Reports a failed CUDA runtime call (out of line from the macro, so every check stays one compare).
inline void fail_cuda_call(cudaError_t status, const char* call, const char* file, int line) {
  MOECOMP_FAIL(error_kind::cuda_error, call, " failed: ", cudaGetErrorName(status), " (", cudaGetErrorString(status),
               ") at ", file, ":", line);
}

}  // namespace detail
MOECOMP_NAMESPACE_END

/// Evaluates a CUDA runtime call once; anything but cudaSuccess fails with error_kind::cuda_error.
#define MOECOMP_CUDA_TRY(call)                                                           \
  do {                                                                                   \
    const cudaError_t moecomp_cuda_status_ = (call);                                     \
    if (MOECOMP_UNLIKELY(moecomp_cuda_status_ != cudaSuccess))                           \
      ::moecomp::detail::fail_cuda_call(moecomp_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)

/// Evaluates a cuBLAS call once; anything but CUBLAS_STATUS_SUCCESS fails with error_kind::cuda_error.
/// Needs <cublas_v2.h> where it is used.
#define MOECOMP_CUBLAS_TRY(call)                                                                           \
  do {                                                                                                     \
    const cublasStatus_t moecomp_cublas_status_ = (call);                                                  \
    if (MOECOMP_UNLIKELY(moecomp_cublas_status_ != CUBLAS_STATUS_SUCCESS))                                 \
      MOECOMP_FAIL(::moecomp::error_kind::cuda_error, #call, " failed: ", cublasGetStatusName(moecomp_cublas_status_), \
                   " (", cublasGetStatusString(moecomp_cublas_status_), ") at ", __FILE__, ":", __LINE__);   \
  } while (0)

/// Checks the launch that was just enqueued (bad configuration, missing kernel image for this GPU).
/// Errors raised while the kernel runs surface later, at the caller's next synchronising call.
#define MOECOMP_CUDA_CHECK_LAUNCH() MOECOMP_CUDA_TRY(cudaGetLastError())
