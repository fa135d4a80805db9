#pragma once
// DLPack <-> moecomp views, without copies. Documentation: docs/interop.md.
//
//   moecomp::as_matrix_view<T>(tensor)                 2-D DLTensor in host-readable memory -> matrix_view<T>
//   moecomp::as_matrix_view<T, device_memory>(tensor)  2-D DLTensor in CUDA memory -> device matrix_view<T>
//   moecomp::as_vector_view<T[, Space]>(tensor)        the same for 1-D tensors
//   moecomp::to_dltensor(view, shape, strides[, device]) a DLTensor describing a view; shape and strides
//                                                      are caller-owned arrays the DLTensor points into
//
// Works with the DLTensor of every DLPack release from 0.6 (Debian's libdlpack-dev) to 1.x: only the
// fields common to all of them are used, device types are compared as plain ints (kDLCUDA was kDLGPU
// before 0.6), and no CUDA header is needed. DLManagedTensor(Versioned) ownership is the caller's: take
// `&managed->dl_tensor`, keep the managed tensor alive while the view is used, call its deleter after.
//
// T is chosen by the caller (DLPack carries no const): the dtype must match it exactly (float32, float64,
// int32, int64, bfloat16 -> moecomp::bfloat16, float16 -> moecomp::half; lanes 1); use const T for a
// tensor you must not write. Every rejection throws moecomp::invalid_argument naming the function, the
// DLTensor field, and the expected and actual values.
#include <moecomp/core/error.hpp>
#include <moecomp/core/memory_space.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/interop/detail/strided_view.hpp>

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace interop {

/// DLPack device types moecomp understands (DLDeviceType values, stable across DLPack releases).
namespace dl_device {
inline constexpr int cpu = 1;            // kDLCPU
inline constexpr int cuda = 2;           // kDLCUDA (kDLGPU before DLPack 0.6)
inline constexpr int cuda_host = 3;      // kDLCUDAHost: pinned host memory (cudaMallocHost)
inline constexpr int cuda_managed = 13;  // kDLCUDAManaged: unified memory (cudaMallocManaged)
}  // namespace dl_device

/// DLPack data type codes (DLDataTypeCode values).
namespace dl_code {
inline constexpr int signed_int = 0;    // kDLInt
inline constexpr int unsigned_int = 1;  // kDLUInt
inline constexpr int floating = 2;      // kDLFloat
inline constexpr int bfloat = 4;        // kDLBfloat
}  // namespace dl_code

/// The DLDataType of an element type (const ignored); a static_assert for types DLPack cannot name here.
template <class T>
constexpr DLDataType dlpack_dtype() noexcept {
  using U = std::remove_cv_t<T>;
  static_assert(std::is_same_v<U, float> || std::is_same_v<U, double> || std::is_same_v<U, std::int32_t> ||
                    std::is_same_v<U, std::int64_t> || std::is_same_v<U, bfloat16> || std::is_same_v<U, half>,
                "moecomp DLPack interop: the element type must be float, double, int32_t, int64_t, "
                "moecomp::bfloat16 or moecomp::half");
  DLDataType dtype{};
  dtype.lanes = 1;
  dtype.bits = static_cast<std::uint8_t>(8 * sizeof(U));
  if constexpr (std::is_same_v<U, bfloat16>) {
    dtype.code = static_cast<std::uint8_t>(dl_code::bfloat);
  } else if constexpr (std::is_integral_v<U>) {
    dtype.code = static_cast<std::uint8_t>(dl_code::signed_int);
  } else {
    dtype.code = static_cast<std::uint8_t>(dl_code::floating);  // float, double, half
  }
  return dtype;
}

/// A DLDataType in words: "float16 (code 2, bits 16, lanes 1)"; with `detailed` false only "float16".
inline std::string dlpack_dtype_string(DLDataType dtype, bool detailed = true) {
  const char* family = nullptr;
  switch (dtype.code) {
    case 0:
      family = "int";
      break;
    case 1:
      family = "uint";
      break;
    case 2:
      family = "float";
      break;
    case 3:
      family = "opaque handle";
      break;
    case 4:
      family = "bfloat";
      break;
    case 5:
      family = "complex";
      break;
    case 6:
      family = "bool";
      break;
    default:
      family = "unknown";
      break;
  }
  std::string name =
      (dtype.code == 3 || dtype.code > 6) ? std::string(family) : ::moecomp::detail::concat(family, int(dtype.bits));
  if (dtype.lanes != 1) name += ::moecomp::detail::concat("x", int(dtype.lanes));
  if (!detailed) return name;
  return ::moecomp::detail::concat(name, " (code ", int(dtype.code), ", bits ", int(dtype.bits), ", lanes ",
                                   int(dtype.lanes), ")");
}

/// A device type in words: "CPU (1)", "CUDA (2)", ...
inline std::string dlpack_device_string(int device_type) {
  const char* name = "unknown";
  switch (device_type) {
    case 1:
      name = "CPU";
      break;
    case 2:
      name = "CUDA";
      break;
    case 3:
      name = "CUDAHost";
      break;
    case 4:
      name = "OpenCL";
      break;
    case 7:
      name = "Vulkan";
      break;
    case 8:
      name = "Metal";
      break;
    case 9:
      name = "VPI";
      break;
    case 10:
      name = "ROCM";
      break;
    case 11:
      name = "ROCMHost";
      break;
    case 12:
      name = "ExtDev";
      break;
    case 13:
      name = "CUDAManaged";
      break;
    case 14:
      name = "OneAPI";
      break;
    case 15:
      name = "WebGPU";
      break;
    case 16:
      name = "Hexagon";
      break;
    default:
      break;
  }
  return ::moecomp::detail::concat(name, " (", device_type, ")");
}

/// True when memory of this DLPack device type can be used as `Space`: the host reads CPU, CUDAHost and
/// CUDAManaged memory; CUDA kernels read CUDA and CUDAManaged memory.
template <class Space>
constexpr bool dlpack_device_is_accessible(int device_type) noexcept {
  if constexpr (std::is_same_v<Space, host_memory>) {
    return device_type == dl_device::cpu || device_type == dl_device::cuda_host ||
           device_type == dl_device::cuda_managed;
  } else {
    return device_type == dl_device::cuda || device_type == dl_device::cuda_managed;
  }
}

namespace detail {

template <class Space>
constexpr const char* accepted_devices() noexcept {
  if constexpr (std::is_same_v<Space, host_memory>) {
    return "CPU (1), CUDAHost (3) or CUDAManaged (13)";
  } else {
    return "CUDA (2) or CUDAManaged (13)";
  }
}

/// The checks both directions share: device, dtype, rank, shape; returns the first element's address.
template <class T, class Space>
T* checked_dlpack_data(const char* function, const DLTensor& tensor, int expected_ndim) {
  static_assert(is_memory_space_v<Space>, "moecomp DLPack interop: Space must be host_memory or device_memory");
  const int device_type = static_cast<int>(tensor.device.device_type);
  MOECOMP_EXPECTS(dlpack_device_is_accessible<Space>(device_type), function, ": DLTensor device_type is ",
                  dlpack_device_string(device_type), ", which a ", Space::name, "_memory view cannot use; expected ",
                  accepted_devices<Space>());
  const DLDataType expected = dlpack_dtype<T>();
  MOECOMP_EXPECTS(
      tensor.dtype.code == expected.code && tensor.dtype.bits == expected.bits && tensor.dtype.lanes == expected.lanes,
      function, ": DLTensor dtype is ", dlpack_dtype_string(tensor.dtype), ", expected ",
      dlpack_dtype_string(expected, false));
  MOECOMP_EXPECTS(tensor.ndim == expected_ndim, function, ": DLTensor ndim must be ", expected_ndim, ", got ",
                  tensor.ndim);
  MOECOMP_EXPECTS(tensor.shape != nullptr, function, ": DLTensor shape is null");
  for (int axis = 0; axis < expected_ndim; ++axis) {
    MOECOMP_EXPECTS(tensor.shape[axis] >= 0, function, ": DLTensor shape[", axis, "] must be >= 0, got ",
                    tensor.shape[axis]);
  }
  // byte_offset applies to the pointer value only: nothing is dereferenced, so device pointers are fine.
  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(tensor.data) + tensor.byte_offset;
  MOECOMP_EXPECTS(address % alignof(T) == 0, function, ": DLTensor data + byte_offset (", tensor.byte_offset,
                  ") must be aligned to ", alignof(T), " bytes for ", dlpack_dtype_string(expected, false),
                  ", got address 0x", moecomp::detail::hex_text(address));
  if (tensor.data == nullptr) return nullptr;  // empty tensors may have no data
  return reinterpret_cast<T*>(static_cast<char*>(tensor.data) + tensor.byte_offset);
}

template <class Space>
DLDevice default_dlpack_device() noexcept {
  DLDevice device{};
  device.device_type = static_cast<DLDeviceType>(std::is_same_v<Space, host_memory> ? dl_device::cpu : dl_device::cuda);
  device.device_id = 0;
  return device;
}

/// The DLTensor describing `ndim`-dimensional data of T in `Space`, with the caller's shape and strides
/// arrays; the device must suit the memory space.
template <class T, class Space>
DLTensor described_tensor(const T* data, int ndim, std::int64_t* shape, std::int64_t* strides, DLDevice device) {
  MOECOMP_EXPECTS(dlpack_device_is_accessible<Space>(static_cast<int>(device.device_type)), "to_dltensor: device_type ",
                  dlpack_device_string(static_cast<int>(device.device_type)), " cannot describe a ", Space::name,
                  "_memory view; expected ", accepted_devices<Space>());
  DLTensor tensor{};
  tensor.data = const_cast<void*>(static_cast<const void*>(data));
  tensor.device = device;
  tensor.ndim = ndim;
  tensor.dtype = dlpack_dtype<T>();
  tensor.shape = shape;
  tensor.strides = strides;
  tensor.byte_offset = 0;
  return tensor;
}

}  // namespace detail
}  // namespace interop

/// 2-D DLTensor -> matrix_view<T, Space>. Space host_memory (default) takes kDLCPU, kDLCUDAHost and
/// kDLCUDAManaged; device_memory takes kDLCUDA and kDLCUDAManaged (the view does not record device_id:
/// use a context on that device). Null strides mean compact row-major; otherwise strides[1] must be 1 and
/// strides[0] >= cols, in elements (the stride of an extent-1 axis is ignored). byte_offset is applied.
template <class T, class Space = host_memory>
matrix_view<T, Space> as_matrix_view(const DLTensor& tensor) {
  T* data = interop::detail::checked_dlpack_data<T, Space>("as_matrix_view", tensor, 2);
  const index_t rows = tensor.shape[0], cols = tensor.shape[1];
  const index_t row_stride = tensor.strides ? tensor.strides[0] : cols;
  const index_t col_stride = tensor.strides ? tensor.strides[1] : 1;
  return interop::detail::matrix_from_strides<T, Space>("as_matrix_view", "DLTensor", data, rows, cols, row_stride,
                                                        col_stride);
}

/// 3-D DLTensor (E x rows x cols, e.g. a torch stack of expert weights) -> matrix_stack_view<T, Space>, with
/// the device, dtype, alignment and byte_offset rules of as_matrix_view. Null strides mean C-contiguous;
/// otherwise strides[2] must be 1, strides[1] >= cols and strides[0] >= rows * strides[1], in elements (the
/// stride of an extent-1 axis is ignored).
template <class T, class Space = host_memory>
matrix_stack_view<T, Space> as_matrix_stack_view(const DLTensor& tensor) {
  T* data = interop::detail::checked_dlpack_data<T, Space>("as_matrix_stack_view", tensor, 3);
  const index_t count = tensor.shape[0], rows = tensor.shape[1], cols = tensor.shape[2];
  const index_t matrix_stride = tensor.strides ? tensor.strides[0] : rows * cols;
  const index_t row_stride = tensor.strides ? tensor.strides[1] : cols;
  const index_t col_stride = tensor.strides ? tensor.strides[2] : 1;
  return interop::detail::stack_from_strides<T, Space>("as_matrix_stack_view", "DLTensor", data, count, rows, cols,
                                                       matrix_stride, row_stride, col_stride);
}

/// 1-D DLTensor -> vector_view<T, Space> with strides[0] (1 when strides is null); the same device, dtype,
/// alignment and byte_offset rules as as_matrix_view.
template <class T, class Space = host_memory>
vector_view<T, Space> as_vector_view(const DLTensor& tensor) {
  T* data = interop::detail::checked_dlpack_data<T, Space>("as_vector_view", tensor, 1);
  return interop::detail::vector_from_stride<T, Space>("as_vector_view", "DLTensor", data, tensor.shape[0],
                                                       tensor.strides ? tensor.strides[0] : 1);
}

/// A DLTensor describing `view`: shape {rows, cols} and strides {row_stride, 1} (always explicit) are
/// written into the caller's arrays, which must outlive the DLTensor, as must the viewed memory. The
/// device is kDLCPU / device 0 for host views and kDLCUDA / device 0 for device views unless given;
/// byte_offset is 0. A DLTensor made from a const view must not be written through by its receiver.
template <class T, class Space>
DLTensor to_dltensor(matrix_view<T, Space> view, std::int64_t (&shape)[2], std::int64_t (&strides)[2],
                     DLDevice device = interop::detail::default_dlpack_device<Space>()) {
  shape[0] = view.rows();
  shape[1] = view.cols();
  strides[0] = view.row_stride() >= view.cols() ? view.row_stride() : view.cols();  // a default view has 0
  strides[1] = 1;
  return interop::detail::described_tensor<T, Space>(view.data(), 2, shape, strides, device);
}

/// A DLTensor describing a stack view: shape {count, rows, cols}, strides {matrix_stride, row_stride, 1};
/// as the matrix overload. A gathered stack (matrix_stack_view::is_gathered) has no such strides: invalid_argument.
template <class T, class Space>
DLTensor to_dltensor(matrix_stack_view<T, Space> view, std::int64_t (&shape)[3], std::int64_t (&strides)[3],
                     DLDevice device = interop::detail::default_dlpack_device<Space>()) {
  MOECOMP_EXPECTS(!view.is_gathered(), "to_dltensor: view must be a strided stack, got a gathered stack of ", view.count(),
                  " matrices (a DLTensor has one stride per dimension)");
  shape[0] = view.count();
  shape[1] = view.rows();
  shape[2] = view.cols();
  strides[1] = view.row_stride() >= view.cols() ? view.row_stride() : view.cols();  // a default view has 0
  strides[0] = view.matrix_stride() >= view.rows() * strides[1] ? view.matrix_stride() : view.rows() * strides[1];
  strides[2] = 1;
  return interop::detail::described_tensor<T, Space>(view.data(), 3, shape, strides, device);
}

/// A DLTensor describing a vector view: shape {size}, strides {stride}; as the matrix overload.
template <class T, class Space>
DLTensor to_dltensor(vector_view<T, Space> view, std::int64_t (&shape)[1], std::int64_t (&strides)[1],
                     DLDevice device = interop::detail::default_dlpack_device<Space>()) {
  shape[0] = view.size();
  strides[0] = view.stride();
  return interop::detail::described_tensor<T, Space>(view.data(), 1, shape, strides, device);
}

MOECOMP_NAMESPACE_END
