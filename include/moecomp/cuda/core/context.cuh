#pragma once
// The CUDA context: what a device algorithm needs from its caller besides parameters and data. Like the
// host context (<moecomp/core/context.hpp>) it owns nothing and holds no global state; copy it freely.
//
//  * stream: every kernel, copy, allocation and cuBLAS call of an algorithm is enqueued on it, and the
//    algorithm returns as soon as the work is enqueued. moecomp never uses a stream the caller did not
//    name: there is no default constructor. Passing 0 (the legacy default stream) or
//    cudaStreamPerThread is allowed, and is then the caller's explicit choice.
//  * cublas_handle: an optional cuBLAS handle the caller owns (cublasHandle_t is cublasContext*). With
//    none, an algorithm that needs cuBLAS creates a handle for the call and destroys it before returning;
//    cublasDestroy synchronises the device, so that path is slow and not asynchronous: pass a handle
//    for anything but one-off calls. See docs/cuda.md for what moecomp does to a borrowed handle.
//  * allocator: stream-ordered allocation callbacks for workspaces; default cudaMallocAsync /
//    cudaFreeAsync on the stream.
//
// This header needs the CUDA runtime API only; cuBLAS's handle type is declared, not included.
#include <moecomp/core/error.hpp>
#include <moecomp/cuda/core/error.cuh>

#include <cuda_runtime_api.h>

#include <cstddef>

// cuBLAS's opaque handle type: cublasHandle_t is `struct cublasContext*` (cublas_api.h).
struct cublasContext;

MOECOMP_NAMESPACE_BEGIN

/// Stream-ordered device allocator. Either both functions are set or neither (then cudaMallocAsync /
/// cudaFreeAsync on the context's stream).
///  * `allocate(bytes, stream, user_data)` returns device memory usable by work enqueued on `stream`
///    from now on, aligned to at least 256 bytes (as cudaMalloc), or throws / returns null on failure.
///  * `deallocate(pointer, bytes, stream, user_data)` is called right after the last work using the
///    memory has been enqueued on `stream`, usually before that work has run: the allocator must not hand
///    the memory to anyone else until the stream has passed this point (cudaFreeAsync and stream-ordered
///    pools do this; a plain cudaFree is also correct, because it synchronises). It must not throw.
struct cuda_allocator {
  void* (*allocate)(std::size_t bytes, cudaStream_t stream, void* user_data) = nullptr;
  void (*deallocate)(void* pointer, std::size_t bytes, cudaStream_t stream, void* user_data) = nullptr;
  void* user_data = nullptr;
};

struct cuda_context {
  /// The stream all work is enqueued on (not owned).
  cudaStream_t stream;
  /// Optional caller-owned cuBLAS handle (not owned); null: a temporary handle per call (slow).
  cublasContext* cublas_handle = nullptr;
  /// Workspace allocator; default cudaMallocAsync / cudaFreeAsync on `stream`.
  cuda_allocator allocator{};

  cuda_context() = delete;
  explicit cuda_context(cudaStream_t work_stream, cublasContext* handle = nullptr, cuda_allocator alloc = {}) noexcept
      : stream(work_stream), cublas_handle(handle), allocator(alloc) {}

  /// `bytes` of device memory, stream-ordered on `stream`; null for 0 bytes. Fails with cuda_error.
  void* allocate(std::size_t bytes) const {
    MOECOMP_EXPECTS((allocator.allocate == nullptr) == (allocator.deallocate == nullptr),
                    "cuda_context: allocator.allocate and allocator.deallocate must be set together");
    if (bytes == 0) return nullptr;
    void* pointer = nullptr;
    if (allocator.allocate) {
      pointer = allocator.allocate(bytes, stream, allocator.user_data);
      if (pointer == nullptr)
        MOECOMP_FAIL(error_kind::cuda_error, "cuda_context: allocator.allocate returned null for ", bytes, " bytes");
    } else {
      MOECOMP_CUDA_TRY(cudaMallocAsync(&pointer, bytes, stream));
    }
    return pointer;
  }

  /// Returns memory from allocate(bytes), stream-ordered: work already enqueued on `stream` may still
  /// use it. Never throws (a failure here cannot be reported; a later CUDA call will see a sticky error).
  void deallocate(void* pointer, std::size_t bytes) const noexcept {
    if (pointer == nullptr) return;
    if (allocator.deallocate) {
      allocator.deallocate(pointer, bytes, stream, allocator.user_data);
    } else {
      (void)cudaFreeAsync(pointer, stream);
    }
  }
};

MOECOMP_NAMESPACE_END
