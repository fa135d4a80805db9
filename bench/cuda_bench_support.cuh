#pragma once
// Shared by the device benchmarks: skip without a GPU, and a stream + cuBLAS handle + timing events.
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>

#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <chrono>

namespace moecomp_bench {

inline bool have_device(benchmark::State& state) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    state.SkipWithError("no CUDA device");
    return false;
  }
  return true;
}

/// Stream, handle and timing events for one benchmark.
struct gpu_session {
  cudaStream_t stream = nullptr;
  cublasHandle_t handle = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  gpu_session() {
    MOECOMP_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    MOECOMP_CUBLAS_TRY(cublasCreate(&handle));
    MOECOMP_CUBLAS_TRY(cublasSetStream(handle, stream));
    MOECOMP_CUDA_TRY(cudaEventCreate(&start));
    MOECOMP_CUDA_TRY(cudaEventCreate(&stop));
  }
  ~gpu_session() {
    (void)cudaEventDestroy(stop);
    (void)cudaEventDestroy(start);
    (void)cublasDestroy(handle);
    (void)cudaStreamDestroy(stream);
  }
  gpu_session(const gpu_session&) = delete;
  gpu_session& operator=(const gpu_session&) = delete;
  moecomp::cuda_context context() const { return moecomp::cuda_context(stream, handle); }
  /// Seconds of GPU time `enqueue()` takes on the stream.
  template <class F>
  double event_time(F&& enqueue) {
    MOECOMP_CUDA_TRY(cudaEventRecord(start, stream));
    enqueue();
    MOECOMP_CUDA_TRY(cudaEventRecord(stop, stream));
    MOECOMP_CUDA_TRY(cudaEventSynchronize(stop));
    float milliseconds = 0.0f;
    MOECOMP_CUDA_TRY(cudaEventElapsedTime(&milliseconds, start, stop));
    return 1e-3 * static_cast<double>(milliseconds);
  }
  /// Wall seconds of a call that may synchronise (or copy back) itself.
  template <class F>
  double wall_time(F&& call) {
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(stream));
    const auto t0 = std::chrono::steady_clock::now();
    call();
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(stream));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

}  // namespace moecomp_bench
