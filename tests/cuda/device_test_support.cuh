#pragma once
// Shared by the device tests: the "needs a GPU" guard, RAII streams / cuBLAS handles, and short names for
// device views.
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/context.cuh>

#include <doctest/doctest.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

namespace moecomp_test {

template <class T>
using dmatrix = moecomp::matrix_view<T, moecomp::device_memory>;
template <class T>
using dvector = moecomp::vector_view<T, moecomp::device_memory>;

/// Fails the test case with a message that says what is missing; the argument checks that run before any
/// device work do not call it, so they pass on a machine without a GPU.
inline void require_device() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  REQUIRE_MESSAGE((e == cudaSuccess && count > 0), "these tests need a CUDA device (cudaGetDeviceCount returned ",
                  std::string(cudaGetErrorName(e)), ", ", count, " devices): run them with `ctest -L cuda` on a GPU");
}

/// A non-blocking stream, destroyed at scope exit.
struct stream_fixture {
  cudaStream_t stream = nullptr;
  stream_fixture() {
    require_device();
    REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  }
  ~stream_fixture() { (void)cudaStreamDestroy(stream); }
  stream_fixture(const stream_fixture&) = delete;
  stream_fixture& operator=(const stream_fixture&) = delete;
};

/// A non-blocking stream and a cuBLAS handle bound to it, destroyed at scope exit.
struct device_fixture {
  cudaStream_t stream = nullptr;
  cublasHandle_t handle = nullptr;
  device_fixture() {
    require_device();
    REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasSetStream(handle, stream) == CUBLAS_STATUS_SUCCESS);
  }
  ~device_fixture() {
    (void)cublasDestroy(handle);
    (void)cudaStreamDestroy(stream);
  }
  device_fixture(const device_fixture&) = delete;
  device_fixture& operator=(const device_fixture&) = delete;
  moecomp::cuda_context context() const { return moecomp::cuda_context(stream, handle); }
  void sync() const { REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess); }
};

}  // namespace moecomp_test
