#pragma once
// Device workspaces, shared by every device algorithm: a layout that places each piece on a 256-byte
// boundary (the total carries 256 bytes of slack, so a caller's workspace needs no particular alignment),
// the check of a caller's workspace, a workspace from the context's allocator for one call, pinned host
// memory for the scalars an iterative algorithm reads back, and the element-type check.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

inline constexpr std::size_t workspace_alignment = 256;

/// Device algorithms compute in float or double.
template <class T>
constexpr void check_device_element_type() {
  static_assert(moecomp::detail::is_real_v<T>,
                "moecomp: the element type of a device algorithm must be float or double");
}

/// Byte offsets of the pieces of a workspace; `function` names the caller in overflow messages.
class workspace_layout {
 public:
  explicit workspace_layout(const char* function) : function_(function) {}
  /// Reserves count * element_size bytes on the next 256-byte boundary and returns their offset.
  std::size_t take(index_t count, std::size_t element_size) {
    const std::size_t max = std::numeric_limits<std::size_t>::max() / 2;
    MOECOMP_EXPECTS(count >= 0 && static_cast<std::size_t>(count) <= max / element_size, function_,
                    ": the workspace size overflows std::size_t (", count, " elements of ", element_size, " bytes)");
    const std::size_t offset = cursor_;
    const std::size_t bytes = static_cast<std::size_t>(count) * element_size;
    MOECOMP_EXPECTS(bytes <= max - offset, function_, ": the workspace size overflows std::size_t");
    cursor_ = (offset + bytes + workspace_alignment - 1) / workspace_alignment * workspace_alignment;
    return offset;
  }
  /// Bytes a caller must provide: the pieces plus the alignment slack (0 when nothing was taken).
  std::size_t total() const noexcept { return cursor_ == 0 ? 0 : cursor_ + workspace_alignment; }

 private:
  const char* function_;
  std::size_t cursor_ = 0;
};

/// The first 256-byte boundary at or after `workspace` (the layout's slack makes room for it).
inline std::byte* aligned_base(std::byte* workspace) {
  const auto address = reinterpret_cast<std::uintptr_t>(workspace);
  return workspace + ((workspace_alignment - address % workspace_alignment) % workspace_alignment);
}

/// The piece at byte `offset` of an aligned base, as P*.
template <class P>
P* at(std::byte* base, std::size_t offset) {
  return reinterpret_cast<P*>(base + offset);
}

/// A caller's workspace: contiguous and at least `needed` bytes.
inline void check_workspace(const char* function, std::size_t needed, vector_view<std::byte, device_memory> workspace) {
  MOECOMP_EXPECTS(workspace.is_contiguous(), function, ": workspace must be contiguous (stride 1), got stride ",
                  workspace.stride());
  MOECOMP_EXPECTS(static_cast<std::size_t>(workspace.size()) >= needed, function, ": workspace must have at least ",
                  needed, " bytes (see ", function, "_workspace_size), got ", workspace.size());
}

/// Workspace from the context's allocator for one call, returned (stream-ordered) at scope exit.
class scoped_workspace {
 public:
  scoped_workspace(const cuda_context& ctx, std::size_t bytes) : ctx_(ctx), bytes_(bytes) {
    data_ = static_cast<std::byte*>(ctx_.allocate(bytes));
  }
  ~scoped_workspace() { ctx_.deallocate(data_, bytes_); }
  scoped_workspace(const scoped_workspace&) = delete;
  scoped_workspace& operator=(const scoped_workspace&) = delete;
  std::byte* data() const noexcept { return data_; }
  vector_view<std::byte, device_memory> view() const {
    return bytes_ == 0 ? vector_view<std::byte, device_memory>()
                       : vector_view<std::byte, device_memory>(data_, static_cast<index_t>(bytes_));
  }

 private:
  cuda_context ctx_;
  std::size_t bytes_;
  std::byte* data_ = nullptr;
};

/// Pinned host memory for scalars copied back while an algorithm runs (pageable memory would make
/// cudaMemcpyAsync synchronous in a less predictable way); freed at scope exit.
template <class P>
class pinned_scalars {
 public:
  explicit pinned_scalars(index_t count) : count_(count) {
    MOECOMP_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&data_), static_cast<std::size_t>(count) * sizeof(P)));
  }
  ~pinned_scalars() {
    if (data_ != nullptr) (void)cudaFreeHost(data_);
  }
  pinned_scalars(const pinned_scalars&) = delete;
  pinned_scalars& operator=(const pinned_scalars&) = delete;
  P* data() const noexcept { return data_; }
  P& operator[](index_t i) const noexcept { return data_[i]; }
  index_t size() const noexcept { return count_; }

 private:
  P* data_ = nullptr;
  index_t count_ = 0;
};

}  // namespace detail
MOECOMP_NAMESPACE_END
