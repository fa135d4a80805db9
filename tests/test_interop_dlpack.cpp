// DLPack <-> moecomp views: no copies (same pointers and strides), element agreement, every dtype,
// device rules, byte_offset, every rejection with its message, and DLTensors describing views. Device
// tensors are only described here (fake addresses), never dereferenced.
#include <moecomp/interop/dlpack.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using moecomp::device_memory;
using moecomp::host_memory;
using moecomp::index_t;
using moecomp::matrix_view;
using moecomp::vector_view;

using moecomp_test::thrown_message;

DLDataType dtype(int code, int bits, int lanes = 1) {
  DLDataType t{};
  t.code = static_cast<std::uint8_t>(code);
  t.bits = static_cast<std::uint8_t>(bits);
  t.lanes = static_cast<std::uint16_t>(lanes);
  return t;
}

DLTensor tensor(void* data, int device_type, DLDataType type, int ndim, std::int64_t* shape,
                std::int64_t* strides = nullptr, std::uint64_t byte_offset = 0) {
  DLTensor t{};
  t.data = data;
  t.device.device_type = static_cast<DLDeviceType>(device_type);
  t.device.device_id = 0;
  t.ndim = ndim;
  t.dtype = type;
  t.shape = shape;
  t.strides = strides;
  t.byte_offset = byte_offset;
  return t;
}

const DLDataType f32 = dtype(kDLFloat, 32);

// A device address that is never dereferenced (aligned for every element type).
template <class T>
T* fake_device_pointer() {
  return reinterpret_cast<T*>(std::uintptr_t{0x7f0000001000});
}

}  // namespace

// The DLPack device and type codes moecomp uses agree with the header's enums.
static_assert(moecomp::interop::dl_device::cpu == kDLCPU);
static_assert(moecomp::interop::dl_device::cuda == kDLCUDA);
static_assert(moecomp::interop::dl_device::cuda_host == kDLCUDAHost);
static_assert(moecomp::interop::dl_device::cuda_managed == kDLCUDAManaged);
static_assert(moecomp::interop::dl_code::bfloat == kDLBfloat);
static_assert(moecomp::interop::dlpack_device_is_accessible<host_memory>(kDLCUDAHost));
static_assert(!moecomp::interop::dlpack_device_is_accessible<host_memory>(kDLCUDA));
static_assert(moecomp::interop::dlpack_device_is_accessible<device_memory>(kDLCUDAManaged));
static_assert(!moecomp::interop::dlpack_device_is_accessible<device_memory>(kDLCUDAHost));

TEST_CASE("dlpack: element types map to exact DLDataTypes") {
  auto same = [](DLDataType a, int code, int bits) { return a.code == code && a.bits == bits && a.lanes == 1; };
  CHECK(same(moecomp::interop::dlpack_dtype<float>(), kDLFloat, 32));
  CHECK(same(moecomp::interop::dlpack_dtype<const double>(), kDLFloat, 64));
  CHECK(same(moecomp::interop::dlpack_dtype<std::int32_t>(), kDLInt, 32));
  CHECK(same(moecomp::interop::dlpack_dtype<std::int64_t>(), kDLInt, 64));
  CHECK(same(moecomp::interop::dlpack_dtype<moecomp::bfloat16>(), kDLBfloat, 16));
  CHECK(same(moecomp::interop::dlpack_dtype<moecomp::half>(), kDLFloat, 16));
  CHECK(moecomp::interop::dlpack_dtype_string(dtype(kDLFloat, 16)) == "float16 (code 2, bits 16, lanes 1)");
  CHECK(moecomp::interop::dlpack_dtype_string(dtype(kDLUInt, 8, 4)) == "uint8x4 (code 1, bits 8, lanes 4)");
  CHECK(moecomp::interop::dlpack_dtype_string(dtype(kDLBfloat, 16), false) == "bfloat16");
  CHECK(moecomp::interop::dlpack_dtype_string(dtype(kDLComplex, 64), false) == "complex64");
  CHECK(moecomp::interop::dlpack_dtype_string(dtype(kDLOpaqueHandle, 64), false) == "opaque handle");
}

TEST_CASE("dlpack: compact host float32 tensor -> matrix_view, same memory") {
  std::vector<float> buffer(12);
  for (std::size_t k = 0; k < buffer.size(); ++k) buffer[k] = static_cast<float>(k);
  std::int64_t shape[2] = {3, 4};
  const DLTensor t = tensor(buffer.data(), kDLCPU, f32, 2, shape);
  auto v = moecomp::as_matrix_view<float>(t);
  static_assert(std::is_same_v<decltype(v), matrix_view<float, host_memory>>);
  CHECK(v.data() == buffer.data());
  CHECK(v.rows() == 3);
  CHECK(v.cols() == 4);
  CHECK(v.row_stride() == 4);
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 4; ++j) CHECK(v(i, j) == static_cast<float>(i * 4 + j));
  v(1, 2) = -3.0f;
  CHECK(buffer[6] == -3.0f);

  auto cv = moecomp::as_matrix_view<const float>(t);
  static_assert(std::is_same_v<decltype(cv), matrix_view<const float>>);
  CHECK(cv.data() == buffer.data());

  // Pinned and managed memory are host-readable too.
  for (int device : {int(kDLCUDAHost), int(kDLCUDAManaged)}) {
    const DLTensor other = tensor(buffer.data(), device, f32, 2, shape);
    CHECK(moecomp::as_matrix_view<float>(other).data() == buffer.data());
  }
}

TEST_CASE("dlpack: explicit strides and byte_offset") {
  std::vector<double> buffer(40);
  for (std::size_t k = 0; k < buffer.size(); ++k) buffer[k] = static_cast<double>(k);
  std::int64_t shape[2] = {3, 4};
  std::int64_t strides[2] = {7, 1};
  // Start at row 1, column 2 of a 5 x 7 parent: byte_offset = (7 + 2) * sizeof(double).
  const DLTensor t = tensor(buffer.data(), kDLCPU, dtype(kDLFloat, 64), 2, shape, strides, 9 * sizeof(double));
  auto v = moecomp::as_matrix_view<const double>(t);
  CHECK(v.data() == buffer.data() + 9);
  CHECK(v.row_stride() == 7);
  CHECK(v(0, 0) == 9.0);
  CHECK(v(2, 3) == 9.0 + 14.0 + 3.0);

  // Strides of extent-1 axes are never used (PyTorch reports anything there): ignored.
  std::int64_t column_shape[2] = {3, 1};
  std::int64_t column_strides[2] = {7, 5};
  auto column = moecomp::as_matrix_view<double>(
      tensor(buffer.data(), kDLCPU, dtype(kDLFloat, 64), 2, column_shape, column_strides));
  CHECK(column.row_stride() == 7);
  CHECK(column(2, 0) == 14.0);
  std::int64_t row_shape[2] = {1, 4};
  std::int64_t row_strides[2] = {0, 1};
  auto row =
      moecomp::as_matrix_view<double>(tensor(buffer.data(), kDLCPU, dtype(kDLFloat, 64), 2, row_shape, row_strides));
  CHECK(row.row_stride() == 4);

  // Empty tensors may have no data.
  std::int64_t empty_shape[2] = {0, 4};
  auto empty = moecomp::as_matrix_view<float>(tensor(nullptr, kDLCPU, f32, 2, empty_shape));
  CHECK(empty.empty());
  CHECK(empty.cols() == 4);
}

TEST_CASE("dlpack: every supported dtype") {
  std::int64_t shape[2] = {2, 2};
  std::vector<std::int32_t> i32{1, -2, 3, -4};
  CHECK(moecomp::as_matrix_view<std::int32_t>(tensor(i32.data(), kDLCPU, dtype(kDLInt, 32), 2, shape))(1, 1) == -4);
  std::vector<std::int64_t> i64{5, 6, 7, 1LL << 40};
  CHECK(moecomp::as_matrix_view<std::int64_t>(tensor(i64.data(), kDLCPU, dtype(kDLInt, 64), 2, shape))(1, 1) ==
        (1LL << 40));
  std::vector<moecomp::bfloat16> bf{moecomp::bfloat16(1.5f), moecomp::bfloat16(-2.0f), moecomp::bfloat16(0.25f),
                                    moecomp::bfloat16(8.0f)};
  auto bv = moecomp::as_matrix_view<const moecomp::bfloat16>(tensor(bf.data(), kDLCPU, dtype(kDLBfloat, 16), 2, shape));
  static_assert(std::is_same_v<decltype(bv), matrix_view<const moecomp::bfloat16>>);
  CHECK(static_cast<float>(bv(0, 0)) == 1.5f);
  CHECK(static_cast<float>(bv(1, 1)) == 8.0f);
  std::vector<moecomp::half> fp16{moecomp::half(1.0f), moecomp::half(-0.5f), moecomp::half(3.0f),
                                  moecomp::half(65504.0f)};
  auto hv = moecomp::as_matrix_view<moecomp::half>(tensor(fp16.data(), kDLCPU, dtype(kDLFloat, 16), 2, shape));
  CHECK(static_cast<float>(hv(0, 1)) == -0.5f);
  CHECK(static_cast<float>(hv(1, 1)) == 65504.0f);
}

TEST_CASE("dlpack: rejections name the field, the expected and the actual value") {
  std::vector<float> buffer(64, 0.0f);
  std::int64_t shape[2] = {3, 4};

  // dtype: code, bits and lanes must all match.
  CHECK(thrown_message([&] {
          (void)moecomp::as_matrix_view<float>(tensor(buffer.data(), kDLCPU, dtype(kDLFloat, 16), 2, shape));
        }) == "as_matrix_view: DLTensor dtype is float16 (code 2, bits 16, lanes 1), expected float32");
  CHECK(thrown_message([&] {
          (void)moecomp::as_matrix_view<float>(tensor(buffer.data(), kDLCPU, dtype(kDLFloat, 32, 4), 2, shape));
        }) == "as_matrix_view: DLTensor dtype is float32x4 (code 2, bits 32, lanes 4), expected float32");
  CHECK(thrown_message([&] {
          (void)moecomp::as_matrix_view<moecomp::half>(tensor(buffer.data(), kDLCPU, dtype(kDLBfloat, 16), 2, shape));
        }) == "as_matrix_view: DLTensor dtype is bfloat16 (code 4, bits 16, lanes 1), expected float16");
  CHECK(thrown_message([&] {
          (void)moecomp::as_matrix_view<std::int32_t>(tensor(buffer.data(), kDLCPU, dtype(kDLUInt, 32), 2, shape));
        }) == "as_matrix_view: DLTensor dtype is uint32 (code 1, bits 32, lanes 1), expected int32");
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view<double>(tensor(buffer.data(), kDLCPU, f32, 2, shape)); }) ==
        "as_matrix_view: DLTensor dtype is float32 (code 2, bits 32, lanes 1), expected float64");

  // ndim.
  std::int64_t shape3[3] = {2, 3, 4};
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view<float>(tensor(buffer.data(), kDLCPU, f32, 3, shape3)); }) ==
        "as_matrix_view: DLTensor ndim must be 2, got 3");
  CHECK(thrown_message([&] { (void)moecomp::as_vector_view<float>(tensor(buffer.data(), kDLCPU, f32, 2, shape)); }) ==
        "as_vector_view: DLTensor ndim must be 1, got 2");

  // shape.
  std::int64_t negative[2] = {3, -2};
  CHECK(thrown_message([&] {
          (void)moecomp::as_matrix_view<float>(tensor(buffer.data(), kDLCPU, f32, 2, negative));
        }) == "as_matrix_view: DLTensor shape[1] must be >= 0, got -2");
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view<float>(tensor(buffer.data(), kDLCPU, f32, 2, nullptr)); }) ==
        "as_matrix_view: DLTensor shape is null");

  // strides.
  std::int64_t gapped[2] = {8, 2};
  CHECK(thrown_message([&] {
          (void)moecomp::as_matrix_view<float>(tensor(buffer.data(), kDLCPU, f32, 2, shape, gapped));
        }) == "as_matrix_view: DLTensor inner (column) stride must be 1, got strides (8, 2) for shape 3 x 4");
  std::int64_t overlapping[2] = {3, 1};
  CHECK(thrown_message([&] {
          (void)moecomp::as_matrix_view<float>(tensor(buffer.data(), kDLCPU, f32, 2, shape, overlapping));
        }) == "as_matrix_view: DLTensor row stride must be >= cols (4), got strides (3, 1) for shape 3 x 4");
  std::int64_t column_major[2] = {1, 3};
  CHECK(thrown_message([&] {
          (void)moecomp::as_matrix_view<float>(tensor(buffer.data(), kDLCPU, f32, 2, shape, column_major));
        }) ==
        "as_matrix_view: DLTensor is column-major (strides (1, 3) for shape 3 x 4); a matrix_view needs row-major "
        "rows with inner stride 1");

  // data.
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view<float>(tensor(nullptr, kDLCPU, f32, 2, shape)); }) ==
        "as_matrix_view: DLTensor data is null but shape is 3 x 4");
  const std::string misaligned = thrown_message(
      [&] { (void)moecomp::as_matrix_view<float>(tensor(buffer.data(), kDLCPU, f32, 2, shape, nullptr, 2)); });
  CHECK(misaligned.rfind("as_matrix_view: DLTensor data + byte_offset (2) must be aligned to 4 bytes for float32, got "
                         "address 0x",
                         0) == 0);
  const std::string misaligned_data = thrown_message([&] {
    (void)moecomp::as_matrix_view<float>(tensor(reinterpret_cast<char*>(buffer.data()) + 1, kDLCPU, f32, 2, shape));
  });
  CHECK(misaligned_data.rfind("as_matrix_view: DLTensor data + byte_offset (0) must be aligned to 4 bytes", 0) == 0);

  // device.
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view<float>(tensor(buffer.data(), kDLCUDA, f32, 2, shape)); }) ==
        "as_matrix_view: DLTensor device_type is CUDA (2), which a host_memory view cannot use; expected CPU (1), "
        "CUDAHost (3) or CUDAManaged (13)");
  CHECK(
      thrown_message([&] { (void)moecomp::as_matrix_view<float>(tensor(buffer.data(), kDLOpenCL, f32, 2, shape)); }) ==
      "as_matrix_view: DLTensor device_type is OpenCL (4), which a host_memory view cannot use; expected CPU (1), "
      "CUDAHost (3) or CUDAManaged (13)");
  CHECK(thrown_message([&] {
          (void)moecomp::as_matrix_view<float, device_memory>(tensor(buffer.data(), kDLCPU, f32, 2, shape));
        }) ==
        "as_matrix_view: DLTensor device_type is CPU (1), which a device_memory view cannot use; expected CUDA (2) "
        "or CUDAManaged (13)");
  CHECK(thrown_message([&] {
          (void)moecomp::as_matrix_view<float, device_memory>(tensor(buffer.data(), kDLCUDAHost, f32, 2, shape));
        }) ==
        "as_matrix_view: DLTensor device_type is CUDAHost (3), which a device_memory view cannot use; expected CUDA "
        "(2) or CUDAManaged (13)");
}

TEST_CASE("dlpack: CUDA tensors -> device views (described, never dereferenced)") {
  std::int64_t shape[2] = {1000, 64};
  std::int64_t strides[2] = {128, 1};
  float* device_data = fake_device_pointer<float>();
  const DLTensor t = tensor(device_data, kDLCUDA, f32, 2, shape, strides, 64 * sizeof(float));
  auto v = moecomp::as_matrix_view<const float, device_memory>(t);
  static_assert(std::is_same_v<decltype(v), matrix_view<const float, device_memory>>);
  CHECK(v.data() == device_data + 64);
  CHECK(v.rows() == 1000);
  CHECK(v.cols() == 64);
  CHECK(v.row_stride() == 128);
  CHECK(v.row_ptr(2) == device_data + 64 + 256);

  // Managed memory is usable as either.
  const DLTensor managed = tensor(device_data, kDLCUDAManaged, f32, 2, shape);
  CHECK(moecomp::as_matrix_view<float, device_memory>(managed).data() == device_data);
  CHECK(moecomp::as_matrix_view<float, host_memory>(managed).data() == device_data);

  std::int64_t vector_shape[1] = {500};
  std::int64_t vector_strides[1] = {2};
  auto dv = moecomp::as_vector_view<moecomp::bfloat16, device_memory>(
      tensor(fake_device_pointer<moecomp::bfloat16>(), kDLCUDA, dtype(kDLBfloat, 16), 1, vector_shape, vector_strides));
  static_assert(std::is_same_v<decltype(dv), vector_view<moecomp::bfloat16, device_memory>>);
  CHECK(dv.size() == 500);
  CHECK(dv.stride() == 2);
  CHECK(dv.ptr(3) == fake_device_pointer<moecomp::bfloat16>() + 6);
}

TEST_CASE("dlpack: 1-D tensors -> vector_view") {
  std::vector<std::int64_t> buffer{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::int64_t shape[1] = {4};
  const DLTensor compact = tensor(buffer.data(), kDLCPU, dtype(kDLInt, 64), 1, shape, nullptr, sizeof(std::int64_t));
  auto v = moecomp::as_vector_view<std::int64_t>(compact);
  static_assert(std::is_same_v<decltype(v), vector_view<std::int64_t>>);
  CHECK(v.data() == buffer.data() + 1);
  CHECK(v.stride() == 1);
  CHECK(v(3) == 4);

  std::int64_t strides[1] = {3};
  auto s =
      moecomp::as_vector_view<const std::int64_t>(tensor(buffer.data(), kDLCPU, dtype(kDLInt, 64), 1, shape, strides));
  CHECK(s.stride() == 3);
  CHECK(s(3) == 9);

  std::int64_t backwards[1] = {-1};
  CHECK(thrown_message([&] {
          (void)moecomp::as_vector_view<std::int64_t>(
              tensor(buffer.data(), kDLCPU, dtype(kDLInt, 64), 1, shape, backwards));
        }) == "as_vector_view: DLTensor stride must be >= 1, got -1 for size 4");
  CHECK(thrown_message([&] {
          (void)moecomp::as_vector_view<std::int32_t>(tensor(buffer.data(), kDLCPU, dtype(kDLInt, 64), 1, shape));
        }) == "as_vector_view: DLTensor dtype is int64 (code 0, bits 64, lanes 1), expected int32");
}

TEST_CASE("dlpack: to_dltensor describes a view, and reads back as the same view") {
  std::vector<float> buffer(3 * 6);
  const matrix_view<float> v(buffer.data(), 3, 4, 6);
  std::int64_t shape[2] = {-1, -1};
  std::int64_t strides[2] = {-1, -1};
  const DLTensor t = moecomp::to_dltensor(v, shape, strides);
  CHECK(t.data == buffer.data());
  CHECK(t.ndim == 2);
  CHECK(t.shape == shape);
  CHECK(t.strides == strides);
  CHECK(shape[0] == 3);
  CHECK(shape[1] == 4);
  CHECK(strides[0] == 6);
  CHECK(strides[1] == 1);
  CHECK(t.byte_offset == 0);
  CHECK(int(t.device.device_type) == kDLCPU);
  CHECK(t.device.device_id == 0);
  CHECK(int(t.dtype.code) == kDLFloat);
  CHECK(int(t.dtype.bits) == 32);
  CHECK(int(t.dtype.lanes) == 1);
  auto back = moecomp::as_matrix_view<float>(t);
  CHECK(back.data() == v.data());
  CHECK(back.rows() == 3);
  CHECK(back.cols() == 4);
  CHECK(back.row_stride() == 6);

  // A const view: same pointer (DLPack has no const; the receiver must not write).
  const matrix_view<const float> cv = v;
  const DLTensor ct = moecomp::to_dltensor(cv, shape, strides);
  CHECK(ct.data == buffer.data());
  CHECK(moecomp::as_matrix_view<const float>(ct).data() == buffer.data());

  // Device views default to kDLCUDA device 0; an explicit device is checked against the memory space.
  const auto dv = moecomp::make_device_matrix_view(fake_device_pointer<moecomp::half>(), 8, 16);
  const DLTensor dt = moecomp::to_dltensor(dv, shape, strides);
  CHECK(int(dt.device.device_type) == kDLCUDA);
  CHECK(int(dt.dtype.code) == kDLFloat);
  CHECK(int(dt.dtype.bits) == 16);
  CHECK(moecomp::as_matrix_view<moecomp::half, device_memory>(dt).data() == dv.data());
  DLDevice managed{};
  managed.device_type = kDLCUDAManaged;
  managed.device_id = 1;
  const DLTensor mt = moecomp::to_dltensor(dv, shape, strides, managed);
  CHECK(int(mt.device.device_type) == kDLCUDAManaged);
  CHECK(mt.device.device_id == 1);
  DLDevice cpu{};
  cpu.device_type = kDLCPU;
  CHECK(thrown_message([&] { (void)moecomp::to_dltensor(dv, shape, strides, cpu); }) ==
        "to_dltensor: device_type CPU (1) cannot describe a device_memory view; expected CUDA (2) or CUDAManaged (13)");
  DLDevice cuda{};
  cuda.device_type = kDLCUDA;
  CHECK(thrown_message([&] { (void)moecomp::to_dltensor(v, shape, strides, cuda); }) ==
        "to_dltensor: device_type CUDA (2) cannot describe a host_memory view; expected CPU (1), CUDAHost (3) or "
        "CUDAManaged (13)");

  // Vectors.
  std::vector<double> values{1, 2, 3, 4, 5, 6};
  std::int64_t vshape[1] = {0};
  std::int64_t vstrides[1] = {0};
  const DLTensor vt = moecomp::to_dltensor(moecomp::make_vector_view(values.data(), 3, 2), vshape, vstrides);
  CHECK(vt.ndim == 1);
  CHECK(vshape[0] == 3);
  CHECK(vstrides[0] == 2);
  CHECK(int(vt.dtype.bits) == 64);
  auto vback = moecomp::as_vector_view<double>(vt);
  CHECK(vback(2) == 5.0);

  // A default (empty) view has row stride 0; its DLTensor still has a valid stride.
  const DLTensor et = moecomp::to_dltensor(matrix_view<float>(), shape, strides);
  CHECK(shape[0] == 0);
  CHECK(strides[0] == 0);
  CHECK(moecomp::as_matrix_view<float>(et).empty());
}

// ----------------------------------------------------------------------------- rank 3: stacks of experts

TEST_CASE("dlpack: a 3-D tensor is a stack of matrices (torch.stack of expert weights)") {
  // 2 experts of 3 x 4, C-contiguous (null strides), as torch hands them over.
  std::vector<float> buffer(24);
  for (std::size_t k = 0; k < buffer.size(); ++k) buffer[k] = static_cast<float>(k);
  std::int64_t shape[3] = {2, 3, 4};
  const auto stack = moecomp::as_matrix_stack_view<float>(tensor(buffer.data(), kDLCPU, f32, 3, shape));
  CHECK(stack.count() == 2);
  CHECK(stack.rows() == 3);
  CHECK(stack.cols() == 4);
  CHECK(stack.matrix_stride() == 12);
  CHECK(stack(1, 2, 3) == 23.0f);
  // Explicit strides: every other expert of a 4 x 3 x 4 buffer, rows padded to 5 (a sliced, padded tensor).
  std::vector<float> big(4 * 3 * 5);
  for (std::size_t k = 0; k < big.size(); ++k) big[k] = static_cast<float>(k);
  std::int64_t strided_shape[3] = {2, 3, 4}, strides[3] = {30, 5, 1};
  const auto every_other = moecomp::as_matrix_stack_view<const float>(tensor(big.data(), kDLCPU, f32, 3, strided_shape, strides));
  CHECK(every_other.matrix_stride() == 30);
  CHECK(every_other.row_stride() == 5);
  CHECK(every_other(1, 2, 3) == 30.0f + 10.0f + 3.0f);
  // The round trip: a stack view described as a DLTensor and read back.
  std::int64_t out_shape[3], out_strides[3];
  const DLTensor described = moecomp::to_dltensor(every_other, out_shape, out_strides);
  CHECK(described.ndim == 3);
  CHECK(out_shape[0] == 2);
  CHECK(out_strides[0] == 30);
  CHECK(out_strides[1] == 5);
  CHECK(out_strides[2] == 1);
  const auto back = moecomp::as_matrix_stack_view<const float>(described);
  CHECK(back.data() == every_other.data());
  CHECK(back(1, 1, 1) == every_other(1, 1, 1));
  // A gathered stack has no one matrix stride to describe.
  const float* matrices[] = {every_other.matrix_ptr(1), every_other.matrix_ptr(0)};
  const moecomp::matrix_stack_view<const float> gathered(matrices, 2, 3, 4, 5);
  CHECK(thrown_message([&] { (void)moecomp::to_dltensor(gathered, out_shape, out_strides); }) ==
        "to_dltensor: view must be a strided stack, got a gathered stack of 2 matrices (a DLTensor has one stride per "
        "dimension)");
}

TEST_CASE("dlpack: bfloat16 and device stacks") {
  std::vector<moecomp::bfloat16> weights(2 * 2 * 3);
  for (std::size_t k = 0; k < weights.size(); ++k) weights[k] = moecomp::bfloat16(static_cast<float>(k) * 0.5f);
  std::int64_t shape[3] = {2, 2, 3};
  const auto bf16 = moecomp::as_matrix_stack_view<moecomp::bfloat16>(
      tensor(weights.data(), kDLCPU, dtype(kDLBfloat, 16), 3, shape));
  CHECK(static_cast<float>(bf16(1, 1, 2)) == 5.5f);
  // A float32 tensor is not a bf16 stack.
  std::vector<float> floats(12);
  CHECK(thrown_message([&] {
          (void)moecomp::as_matrix_stack_view<moecomp::bfloat16>(tensor(floats.data(), kDLCPU, f32, 3, shape));
        }) == "as_matrix_stack_view: DLTensor dtype is float32 (code 2, bits 32, lanes 1), expected bfloat16");
  // Device memory: a device stack view (never dereferenced), and a refusal for host views.
  std::int64_t device_shape[3] = {8, 16, 32};
  const auto on_device = moecomp::as_matrix_stack_view<float, device_memory>(
      tensor(fake_device_pointer<float>(), kDLCUDA, f32, 3, device_shape));
  CHECK(on_device.matrix_ptr(1) == fake_device_pointer<float>() + 16 * 32);
  CHECK(thrown_message([&] {
          (void)moecomp::as_matrix_stack_view<float>(tensor(fake_device_pointer<float>(), kDLCUDA, f32, 3, device_shape));
        }).find("as_matrix_stack_view: DLTensor device_type is") == 0);
}

TEST_CASE("dlpack: 3-D tensors a stack view cannot express are refused, naming the problem") {
  std::vector<float> buffer(64);
  std::int64_t shape2[2] = {4, 4};
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_stack_view<float>(tensor(buffer.data(), kDLCPU, f32, 2, shape2)); }) ==
        "as_matrix_stack_view: DLTensor ndim must be 3, got 2");
  // Experts that overlap: a matrix stride smaller than one matrix.
  std::int64_t shape[3] = {2, 3, 4}, overlapping[3] = {6, 4, 1};
  CHECK(thrown_message([&] {
          (void)moecomp::as_matrix_stack_view<float>(tensor(buffer.data(), kDLCPU, f32, 3, shape, overlapping));
        }) == "as_matrix_stack_view: DLTensor matrix stride (first axis) must be >= rows * row stride (12) so that "
              "matrices do not overlap, got 6 for shape 2 x 3 x 4");
  // A transposed last pair of axes (torch's .transpose(1, 2)): the inner stride is not 1.
  std::int64_t transposed[3] = {12, 1, 3};
  CHECK(thrown_message([&] {
          (void)moecomp::as_matrix_stack_view<float>(tensor(buffer.data(), kDLCPU, f32, 3, shape, transposed));
        }).find("as_matrix_stack_view: DLTensor is column-major") == 0);
  // An extent of 1 ignores its stride, as torch allows any there.
  std::int64_t one_shape[3] = {1, 3, 4}, any[3] = {1, 4, 1};
  CHECK(moecomp::as_matrix_stack_view<float>(tensor(buffer.data(), kDLCPU, f32, 3, one_shape, any)).count() == 1);
}
