// Device tests of the CUDA core: error macros, cuda_context's allocator, device_buffer, host <-> device
// copies. They need a CUDA device and run under `ctest -L cuda`; without one they fail, saying so.
#include <moecomp/cuda/moecomp.cuh>

#include "device_test_support.cuh"

#include <cublas_v2.h>
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace {

using moecomp::index_t;

using moecomp_test::require_device;

/// A non-blocking stream (so nothing here relies on the legacy default stream), destroyed at scope exit.
struct test_stream {
  cudaStream_t stream = nullptr;
  test_stream() { REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess); }
  ~test_stream() { (void)cudaStreamDestroy(stream); }
  test_stream(const test_stream&) = delete;
  test_stream& operator=(const test_stream&) = delete;
};

/// An allocator that records its calls and forwards to cudaMallocAsync / cudaFreeAsync.
struct recording_allocator {
  int allocations = 0, deallocations = 0;
  std::size_t last_bytes = 0, freed_bytes = 0;
  cudaStream_t last_stream = nullptr;
  void* last_pointer = nullptr;
  void* freed_pointer = nullptr;

  static void* allocate(std::size_t bytes, cudaStream_t stream, void* user) {
    auto* self = static_cast<recording_allocator*>(user);
    void* pointer = nullptr;
    MOECOMP_CUDA_TRY(cudaMallocAsync(&pointer, bytes, stream));
    ++self->allocations;
    self->last_bytes = bytes;
    self->last_stream = stream;
    self->last_pointer = pointer;
    return pointer;
  }
  static void deallocate(void* pointer, std::size_t bytes, cudaStream_t stream, void* user) {
    auto* self = static_cast<recording_allocator*>(user);
    ++self->deallocations;
    self->freed_bytes = bytes;
    self->freed_pointer = pointer;
    (void)cudaFreeAsync(pointer, stream);
  }
  moecomp::cuda_allocator callbacks() { return {&allocate, &deallocate, this}; }
};

template <class F>
std::string cuda_error_message(F&& f) {
  try {
    f();
  } catch (const moecomp::cuda_error& e) {
    CHECK(e.kind() == moecomp::error_kind::cuda_error);
    return e.what();
  }
  FAIL("no moecomp::cuda_error was thrown");
  return {};
}

template <class F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const moecomp::invalid_argument& e) {
    return e.what();
  }
  FAIL("no moecomp::invalid_argument was thrown");
  return {};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("MOECOMP_CUDA_TRY and MOECOMP_CUBLAS_TRY name the call, the error and the place") {
  const std::string cuda = cuda_error_message([] { MOECOMP_CUDA_TRY(cudaError_t(cudaErrorInvalidValue)); });
  CHECK(contains(cuda, "cudaError_t(cudaErrorInvalidValue) failed: cudaErrorInvalidValue ("));
  CHECK(contains(cuda, "test_context_cuda.cu:"));

  const std::string cublas =
      cuda_error_message([] { MOECOMP_CUBLAS_TRY(cublasStatus_t(CUBLAS_STATUS_INVALID_VALUE)); });
  CHECK(contains(cublas, "failed: CUBLAS_STATUS_INVALID_VALUE ("));
  CHECK(contains(cublas, "test_context_cuda.cu:"));

  // success passes through silently
  MOECOMP_CUDA_TRY(cudaSuccess);
  MOECOMP_CUBLAS_TRY(CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("a failing allocation through the default allocator is a cuda_error") {
  require_device();
  test_stream s;
  const moecomp::cuda_context ctx(s.stream);
  const std::string message =
      cuda_error_message([&] { (void)ctx.allocate(std::numeric_limits<std::size_t>::max() / 2); });
  CHECK(contains(message, "cudaMallocAsync(&pointer, bytes, stream) failed: cudaError"));  // out of memory
  CHECK(contains(message, "context.cuh:"));
  (void)cudaGetLastError();  // an allocation failure is not sticky; clear it for the next tests
}

TEST_CASE("cuda_context allocates through the caller's allocator, on its stream") {
  require_device();
  test_stream s;
  recording_allocator recorder;
  const moecomp::cuda_context ctx(s.stream, nullptr, recorder.callbacks());

  CHECK(ctx.allocate(0) == nullptr);
  CHECK(recorder.allocations == 0);
  {
    moecomp::device_buffer<float> buffer(ctx, 1000);
    CHECK(recorder.allocations == 1);
    CHECK(recorder.last_bytes == 4000);
    CHECK(recorder.last_stream == s.stream);
    CHECK(buffer.data() == recorder.last_pointer);
    CHECK(buffer.size() == 1000);
    CHECK(buffer.bytes() == 4000);
    CHECK(buffer.stream() == s.stream);
    CHECK(recorder.deallocations == 0);
  }
  CHECK(recorder.deallocations == 1);
  CHECK(recorder.freed_bytes == 4000);
  CHECK(recorder.freed_pointer == recorder.last_pointer);
  REQUIRE(cudaStreamSynchronize(s.stream) == cudaSuccess);

  // half an allocator is a misuse
  moecomp::cuda_allocator half = recorder.callbacks();
  half.deallocate = nullptr;
  const moecomp::cuda_context bad(s.stream, nullptr, half);
  CHECK(contains(invalid_argument_message([&] { (void)bad.allocate(16); }),
                 "allocator.allocate and allocator.deallocate must be set together"));

  // an allocator that returns null is reported
  moecomp::cuda_allocator null_allocator{[](std::size_t, cudaStream_t, void*) -> void* { return nullptr; },
                                         [](void*, std::size_t, cudaStream_t, void*) {}, nullptr};
  const moecomp::cuda_context null_ctx(s.stream, nullptr, null_allocator);
  CHECK(contains(cuda_error_message([&] { (void)null_ctx.allocate(64); }), "returned null for 64 bytes"));
}

TEST_CASE("device_buffer moves, and its views must fit") {
  require_device();
  test_stream s;
  recording_allocator recorder;
  const moecomp::cuda_context ctx(s.stream, nullptr, recorder.callbacks());
  {
    moecomp::device_buffer<double> a(ctx, 24);
    double* pointer = a.data();
    moecomp::device_buffer<double> b(std::move(a));
    CHECK(a.data() == nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
    CHECK(a.empty());
    CHECK(b.data() == pointer);
    moecomp::device_buffer<double> c;
    c = std::move(b);
    CHECK(c.data() == pointer);
    CHECK(recorder.deallocations == 0);

    const auto m = c.view(4, 5, 6);  // the last row ends at 3 * 6 + 5 = 23 <= 24
    CHECK(m.rows() == 4);
    CHECK(m.row_stride() == 6);
    CHECK(c.view(4, 6).cols() == 6);
    CHECK(contains(invalid_argument_message([&] { (void)c.view(4, 7, 7); }), "does not fit in a buffer of 24"));
    CHECK(contains(invalid_argument_message([&] { (void)c.view(5, 5); }), "does not fit in a buffer of 24"));
    CHECK(c.view().size() == 24);
  }
  CHECK(recorder.allocations == 1);
  CHECK(recorder.deallocations == 1);
  REQUIRE(cudaStreamSynchronize(s.stream) == cudaSuccess);
}

TEST_CASE("copy_to_device / copy_to_host honour row and element strides") {
  require_device();
  test_stream s;
  const moecomp::cuda_context ctx(s.stream);
  const index_t rows = 37, cols = 5, host_stride = 8, device_stride = 11;

  std::vector<float> source(static_cast<std::size_t>(rows * host_stride), -1.0f);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) source[static_cast<std::size_t>(i * host_stride + j)] = float(100 * i + j);
  const auto src = moecomp::make_matrix_view<const float>(source.data(), rows, cols, host_stride);

  moecomp::device_buffer<float> device(ctx, rows * device_stride);
  REQUIRE(cudaMemsetAsync(device.data(), 0, device.bytes(), s.stream) == cudaSuccess);
  moecomp::copy_to_device(ctx, src, device.view(rows, cols, device_stride));

  // read back the raw buffer: the copied entries in place, the padding untouched (zero)
  std::vector<float> raw(static_cast<std::size_t>(rows * device_stride), -2.0f);
  moecomp::copy_to_host(ctx, device.view().as_const(), moecomp::make_vector_view(raw.data(), index_t(raw.size())));
  // and back into a third layout
  const index_t back_stride = 6;
  std::vector<float> back(static_cast<std::size_t>(rows * back_stride), 7.0f);
  moecomp::copy_to_host(ctx, device.view(rows, cols, device_stride).as_const(),
                        moecomp::make_matrix_view(back.data(), rows, cols, back_stride));
  REQUIRE(cudaStreamSynchronize(s.stream) == cudaSuccess);

  int wrong = 0;
  for (index_t i = 0; i < rows; ++i) {
    for (index_t j = 0; j < device_stride; ++j) {
      const float expected = j < cols ? float(100 * i + j) : 0.0f;
      wrong += raw[static_cast<std::size_t>(i * device_stride + j)] != expected;
    }
    for (index_t j = 0; j < back_stride; ++j) {
      const float expected = j < cols ? float(100 * i + j) : 7.0f;
      wrong += back[static_cast<std::size_t>(i * back_stride + j)] != expected;
    }
  }
  CHECK(wrong == 0);

  // strided vectors: host stride 3 -> device stride 2 -> host stride 1
  std::vector<double> host_vector(30);
  for (std::size_t k = 0; k < host_vector.size(); ++k) host_vector[k] = double(k);
  moecomp::device_buffer<double> device_vector(ctx, 20);
  const auto dv = moecomp::make_device_vector_view(device_vector.data(), 10, 2);
  moecomp::copy_to_device(ctx, moecomp::make_vector_view<const double>(host_vector.data(), 10, 3), dv);
  std::vector<double> gathered(10, -1.0);
  moecomp::copy_to_host(ctx, dv.as_const(), moecomp::make_vector_view(gathered.data(), 10));
  REQUIRE(cudaStreamSynchronize(s.stream) == cudaSuccess);
  for (std::size_t k = 0; k < gathered.size(); ++k) CHECK(gathered[k] == double(3 * k));

  // shapes must agree
  CHECK(contains(invalid_argument_message([&] {
                   moecomp::copy_to_device(ctx, src, device.view(rows - 1, cols, device_stride));
                 }),
                 "copy_to_device: dst must be 37 x 5 like src, got 36 x 5"));
  CHECK(contains(invalid_argument_message([&] {
                   moecomp::copy_to_host(ctx, dv.as_const(), moecomp::make_vector_view(gathered.data(), 9));
                 }),
                 "copy_to_host: dst must have 10 elements like src, got 9"));

  // empty copies are no-ops
  moecomp::copy_to_device(ctx, moecomp::make_matrix_view<const float>(nullptr, 0, 5, 5),
                          moecomp::make_device_matrix_view<float>(nullptr, 0, 5, 5));
  REQUIRE(cudaStreamSynchronize(s.stream) == cudaSuccess);
}

TEST_CASE("the legacy default stream works when the caller names it") {
  require_device();
  const moecomp::cuda_context ctx(cudaStream_t(0));
  moecomp::device_buffer<int> buffer(ctx, 3);
  const int values[3] = {4, 5, 6};
  moecomp::copy_to_device(ctx, moecomp::make_vector_view(values, 3), buffer.view());
  int out[3] = {0, 0, 0};
  moecomp::copy_to_host(ctx, buffer.view().as_const(), moecomp::make_vector_view(out, 3));
  REQUIRE(cudaStreamSynchronize(ctx.stream) == cudaSuccess);
  CHECK(out[0] == 4);
  CHECK(out[1] == 5);
  CHECK(out[2] == 6);
}
