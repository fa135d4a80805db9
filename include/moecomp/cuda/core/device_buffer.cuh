#pragma once
// Owning device memory and host <-> device copies, for callers, tests and tools. Algorithms never take a
// device_buffer: they take device views, so callers keep their own memory (a PyTorch tensor, a buffer
// from an inference engine's pool) and hand moecomp views of it.
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/core/detail/traits.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <limits>
#include <type_traits>
#include <utility>

MOECOMP_NAMESPACE_BEGIN

/// `size` elements of T in device memory from a context's allocator, allocated and freed in stream order
/// on that context's stream. The contents start uninitialised. Move-only. The context's stream and
/// allocator are copied in, so the buffer may outlive the cuda_context object (not the stream).
template <class T>
class device_buffer {
  static_assert(std::is_trivially_copyable_v<T> && !std::is_const_v<T>,
                "device_buffer: T must be a non-const trivially copyable type");
  static_assert(alignof(T) <= 256, "device_buffer: T's alignment exceeds the allocator's 256-byte guarantee");

 public:
  device_buffer() noexcept = default;
  device_buffer(const cuda_context& ctx, index_t size) : stream_(ctx.stream), allocator_(ctx.allocator) {
    MOECOMP_EXPECTS(size >= 0, "device_buffer: size must be >= 0, got ", size);
    MOECOMP_EXPECTS(static_cast<std::size_t>(size) <= std::numeric_limits<std::size_t>::max() / sizeof(T),
                    "device_buffer: ", size, " elements of ", sizeof(T), " bytes overflow std::size_t");
    data_ = static_cast<T*>(ctx.allocate(static_cast<std::size_t>(size) * sizeof(T)));
    size_ = size;
  }
  ~device_buffer() { release(); }

  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        stream_(other.stream_),
        allocator_(other.allocator_) {}
  device_buffer& operator=(device_buffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      stream_ = other.stream_;
      allocator_ = other.allocator_;
    }
    return *this;
  }

  T* data() const noexcept { return data_; }
  index_t size() const noexcept { return size_; }
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(size_) * sizeof(T); }
  bool empty() const noexcept { return size_ == 0; }
  /// The stream the memory was allocated on and will be freed on.
  cudaStream_t stream() const noexcept { return stream_; }

  /// The whole buffer as a contiguous device vector.
  device_vector_view<T> view() noexcept { return size_ == 0 ? device_vector_view<T>() : device_vector_view<T>(data_, size_, 1); }
  device_vector_view<const T> view() const noexcept {
    return size_ == 0 ? device_vector_view<const T>() : device_vector_view<const T>(data_, size_, 1);
  }
  /// The first rows x cols elements as a contiguous row-major device matrix.
  device_matrix_view<T> view(index_t rows, index_t cols) { return view(rows, cols, cols); }
  device_matrix_view<const T> view(index_t rows, index_t cols) const { return view(rows, cols, cols); }
  /// A rows x cols device matrix with rows `row_stride` elements apart; it must fit in the buffer.
  device_matrix_view<T> view(index_t rows, index_t cols, index_t row_stride) {
    check_fits(rows, cols, row_stride);
    return {data_, rows, cols, row_stride};
  }
  device_matrix_view<const T> view(index_t rows, index_t cols, index_t row_stride) const {
    check_fits(rows, cols, row_stride);
    return {data_, rows, cols, row_stride};
  }

 private:
  void check_fits(index_t rows, index_t cols, index_t row_stride) const {
    MOECOMP_EXPECTS(rows >= 0 && cols >= 0 && row_stride >= cols, "device_buffer::view: invalid shape ",
                    detail::shape_string(rows, cols), " with row_stride ", row_stride);
    // the last row ends at (rows - 1) * row_stride + cols; compared without overflow
    MOECOMP_EXPECTS(rows == 0 || cols == 0 ||
                        (cols <= size_ && rows - 1 <= (size_ - cols) / row_stride),
                    "device_buffer::view: ", detail::shape_string(rows, cols), " with row_stride ", row_stride,
                    " does not fit in a buffer of ", size_, " elements");
  }
  void release() noexcept {
    if (data_ != nullptr) cuda_context(stream_, nullptr, allocator_).deallocate(data_, bytes());
    data_ = nullptr;
    size_ = 0;
  }

  T* data_ = nullptr;
  index_t size_ = 0;
  cudaStream_t stream_ = nullptr;
  cuda_allocator allocator_{};
};

namespace detail {

/// Copies `height` rows of `width` elements, rows `*_pitch` elements apart, on ctx.stream.
template <class T>
void copy_rows_async(const cuda_context& ctx, T* dst, index_t dst_pitch, const T* src, index_t src_pitch, index_t width,
                     index_t height, cudaMemcpyKind kind) {
  if (width == 0 || height == 0) return;
  const bool contiguous = height == 1 || (dst_pitch == width && src_pitch == width);
  if (contiguous) {
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(width * height) * sizeof(T), kind, ctx.stream));
  } else {
    MOECOMP_CUDA_TRY(cudaMemcpy2DAsync(dst, static_cast<std::size_t>(dst_pitch) * sizeof(T), src,
                                       static_cast<std::size_t>(src_pitch) * sizeof(T),
                                       static_cast<std::size_t>(width) * sizeof(T), static_cast<std::size_t>(height),
                                       kind, ctx.stream));
  }
}

template <class U, class T>
inline constexpr bool is_copy_source_v = moecomp::detail::is_input_of_v<U, T> && !std::is_const_v<T>;

}  // namespace detail

// Copies between host and device views of equal shape, enqueued on ctx.stream; row and element strides
// are honoured (cudaMemcpy2DAsync). The function returns once the copy is enqueued: keep the source
// unchanged and alive, and read a host destination only after synchronising the stream. With pageable
// (not pinned) host memory the CUDA runtime may complete the copy before returning; with pinned memory
// (cudaMallocHost / cudaHostRegister) it is truly asynchronous.

/// Host matrix -> device matrix of the same shape.
template <class T, class U, std::enable_if_t<detail::is_copy_source_v<U, T>, int> = 0>
void copy_to_device(const cuda_context& ctx, matrix_view<U, host_memory> src, matrix_view<T, device_memory> dst) {
  MOECOMP_EXPECTS(src.rows() == dst.rows() && src.cols() == dst.cols(), "copy_to_device: dst must be ",
                  detail::shape_string(src.rows(), src.cols()), " like src, got ",
                  detail::shape_string(dst.rows(), dst.cols()));
  detail::copy_rows_async<T>(ctx, dst.data(), dst.row_stride(), src.data(), src.row_stride(), src.cols(), src.rows(),
                             cudaMemcpyHostToDevice);
}

/// Host vector -> device vector of the same size.
template <class T, class U, std::enable_if_t<detail::is_copy_source_v<U, T>, int> = 0>
void copy_to_device(const cuda_context& ctx, vector_view<U, host_memory> src, vector_view<T, device_memory> dst) {
  MOECOMP_EXPECTS(src.size() == dst.size(), "copy_to_device: dst must have ", src.size(),
                  " elements like src, got ", dst.size());
  detail::copy_rows_async<T>(ctx, dst.data(), dst.stride(), src.data(), src.stride(), 1, src.size(),
                             cudaMemcpyHostToDevice);
}

/// Device matrix -> host matrix of the same shape.
template <class T, class U, std::enable_if_t<detail::is_copy_source_v<U, T>, int> = 0>
void copy_to_host(const cuda_context& ctx, matrix_view<U, device_memory> src, matrix_view<T, host_memory> dst) {
  MOECOMP_EXPECTS(src.rows() == dst.rows() && src.cols() == dst.cols(), "copy_to_host: dst must be ",
                  detail::shape_string(src.rows(), src.cols()), " like src, got ",
                  detail::shape_string(dst.rows(), dst.cols()));
  detail::copy_rows_async<T>(ctx, dst.data(), dst.row_stride(), src.data(), src.row_stride(), src.cols(), src.rows(),
                             cudaMemcpyDeviceToHost);
}

/// Device vector -> host vector of the same size.
template <class T, class U, std::enable_if_t<detail::is_copy_source_v<U, T>, int> = 0>
void copy_to_host(const cuda_context& ctx, vector_view<U, device_memory> src, vector_view<T, host_memory> dst) {
  MOECOMP_EXPECTS(src.size() == dst.size(), "copy_to_host: dst must have ", src.size(), " elements like src, got ",
                  dst.size());
  detail::copy_rows_async<T>(ctx, dst.data(), dst.stride(), src.data(), src.stride(), 1, src.size(),
                             cudaMemcpyDeviceToHost);
}

MOECOMP_NAMESPACE_END
