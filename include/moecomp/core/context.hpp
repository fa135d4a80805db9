#pragma once
// The host context: everything an algorithm may need from its caller besides parameters and data.
// It holds no global state and owns nothing; copy it freely. The CUDA context is in
// <moecomp/cuda/core/context.cuh>.
#include <moecomp/core/error.hpp>

#include <cstddef>
#include <limits>
#include <new>
#include <string>
#include <string_view>

#if defined(_OPENMP)
#include <omp.h>
#endif

MOECOMP_NAMESPACE_BEGIN

/// Optional host allocator for workspaces. Either both functions are set or neither (then moecomp uses
/// aligned operator new). `allocate` must return memory aligned to at least `alignment` or throw.
struct host_allocator {
  void* (*allocate)(std::size_t bytes, std::size_t alignment, void* user_data) = nullptr;
  void (*deallocate)(void* pointer, std::size_t bytes, std::size_t alignment, void* user_data) = nullptr;
  void* user_data = nullptr;
};

/// How products with 16-bit weights are computed (docs/core.md, "Matmul precision").
/// - exact: the weights are widened to the accumulator type (float) and multiplied with the float
///   activations in float: the only rounding is the float sums'. The default.
/// - bf16: where the weights are bfloat16, the activations are rounded to bfloat16 too and the products run
///   as bfloat16 dot products with float sums (oneDNN's AVX512_BF16 kernels under MOECOMP_USE_ONEDNN, the
///   float GEMM on widened operands elsewhere). No weight is widened or copied. Other weight types: exact.
enum class matmul_precision { exact, bf16 };

inline const char* to_string(matmul_precision p) noexcept {
  switch (p) {
    case matmul_precision::exact: return "exact";
    case matmul_precision::bf16: return "bf16";
  }
  return "unknown";
}

/// Parses "exact" or "bf16"; throws invalid_argument naming them otherwise.
inline matmul_precision parse_matmul_precision(std::string_view name) {
  for (matmul_precision p : {matmul_precision::exact, matmul_precision::bf16})
    if (name == to_string(p)) return p;
  MOECOMP_FAIL(error_kind::invalid_argument, "matmul_precision: expected exact or bf16, got '", std::string(name), "'");
}

struct host_context {
  /// Threads for moecomp's own parallel loops, which exist only when moecomp is built with OpenMP (link
  /// moecomp::openmp). 0: OpenMP's default (omp_get_max_threads()); 1: serial. No thread pool is kept
  /// between calls, and no global OpenMP setting is changed.
  int num_threads = 0;
  /// Workspace allocator; default aligned operator new.
  host_allocator allocator{};
  /// How products with bfloat16 weights are computed: exact (float, the default) or bf16 dot products.
  matmul_precision matmul = matmul_precision::exact;

  host_context() = default;
  explicit host_context(int threads) : num_threads(threads) {
    MOECOMP_EXPECTS(threads >= 0, "host_context: num_threads must be >= 0, got ", threads);
  }

  /// The number of threads a parallel loop of this call will use.
  int threads() const noexcept {
#if defined(_OPENMP)
    return num_threads > 0 ? num_threads : omp_get_max_threads();
#else
    return 1;
#endif
  }

  void* allocate(std::size_t bytes, std::size_t alignment = 64) const {
    MOECOMP_EXPECTS((allocator.allocate == nullptr) == (allocator.deallocate == nullptr),
                    "host_context: allocator.allocate and allocator.deallocate must be set together");
    // Aligned operator new is undefined for other alignments, and custom allocators may assume it too.
    MOECOMP_EXPECTS(alignment != 0 && (alignment & (alignment - 1)) == 0,
                    "host_context::allocate: alignment must be a power of two, got ", alignment);
    if (bytes == 0) return nullptr;
    if (allocator.allocate) return allocator.allocate(bytes, alignment, allocator.user_data);
    return ::operator new(bytes, std::align_val_t(alignment));
  }
  void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = 64) const noexcept {
    if (pointer == nullptr) return;
    if (allocator.deallocate) {
      allocator.deallocate(pointer, bytes, alignment, allocator.user_data);
    } else {
      ::operator delete(pointer, std::align_val_t(alignment));
    }
  }
};

namespace detail {

/// A typed scratch array from the context's allocator, freed at scope exit.
template <class T>
class host_workspace {
 public:
  host_workspace(const host_context& ctx, std::size_t count) : ctx_(&ctx), count_(count) {
    MOECOMP_EXPECTS(count <= std::numeric_limits<std::size_t>::max() / sizeof(T),
                    "host_workspace: ", count, " elements of ", sizeof(T), " bytes overflow size_t");
    data_ = static_cast<T*>(ctx.allocate(count * sizeof(T), alignof(T) > 64 ? alignof(T) : 64));
  }
  ~host_workspace() { ctx_->deallocate(data_, count_ * sizeof(T), alignof(T) > 64 ? alignof(T) : 64); }
  host_workspace(const host_workspace&) = delete;
  host_workspace& operator=(const host_workspace&) = delete;
  /// Movable, so that a helper can return its buffer; the moved-from workspace is empty.
  host_workspace(host_workspace&& other) noexcept : ctx_(other.ctx_), count_(other.count_), data_(other.data_) {
    other.count_ = 0;
    other.data_ = nullptr;
  }
  host_workspace& operator=(host_workspace&& other) noexcept {
    if (this != &other) {
      ctx_->deallocate(data_, count_ * sizeof(T), alignof(T) > 64 ? alignof(T) : 64);
      ctx_ = other.ctx_;
      count_ = other.count_;
      data_ = other.data_;
      other.count_ = 0;
      other.data_ = nullptr;
    }
    return *this;
  }
  T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return count_; }
  T& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  const host_context* ctx_;
  std::size_t count_;
  T* data_ = nullptr;
};

}  // namespace detail

MOECOMP_NAMESPACE_END
