#pragma once
// ResMoE's compact residuals on the device: the device overloads of <moecomp/sparse/residual.hpp>'s
// restore_dense and decode_sparse, the sparse-times-dense product that the shared-base apply is built from, and
// device_sparse_matrix, which puts a host matrix's sections in device memory. The formats, the neuron order and
// the arithmetic are the host's (docs/sparse.md, "Device").
//
//   device_sparse_matrix d(ctx, host_matrix.view());                       // copy the sections (+ bitmap row starts)
//   restore_dense<bfloat16, bfloat16>(ctx, base, d.view(), out, permutation);   // W = B + R, in W's neuron order
//   sparse_matmul<float>(ctx, x, d.view(), y, true);                        // y += x R^T (tokens x out)
//
// restore_dense: out(i, :) = base(p(i), :) + r(p(i), :), the sum in float (double if base or out is double),
// rounded once to out's type: bit-identical to the host's restore_dense. One block per output row, one pass:
// the base row is read and out written coalesced; csr16 writes its stored entries after the base row (a block
// barrier between), bitmap finds each value by a block scan of the row's bits, 2:4 element-wise.
// decode_sparse: the same with no base (the stored values, +0 elsewhere), bit-exact as on the host.
// sparse_matmul: y(t, i) = sum_j x(t, j) r(i, j) (+ y(t, i) when accumulate), x: tokens x cols, y: tokens x rows,
// in float or double; for decode batch sizes (one warp per sparse row, 8 tokens per pass over the row, x read
// from L1/L2). Summation order differs from the host's shared_base_apply: equal to about 1e-6 relative in
// float, not bit for bit. The shared-base layer on the device is one cuBLAS GEMM with the base over all routed
// tokens (moe::ffn_forward's GEMMs, or the caller's) followed by sparse_matmul(accumulate = true) on each
// expert's rows; moecomp does not package that layer on the device yet.
//
// Asynchrony: restore_dense, decode_sparse and sparse_matmul are asynchronous on ctx.stream; the
// device_sparse_matrix constructor enqueues its copies and the row-start passes on ctx.stream and returns (the
// host sections must stay unchanged until the stream has passed the copies: pinned memory is copied
// asynchronously). Workspace: only bitmap_row_starts (bitmap_row_starts_workspace_size bytes, or ctx's
// allocator). Determinism: no atomics; fixed reduction orders; bit-identical run to run.
// Checks: shapes, formats and alignments on the host; the sections' bytes are trusted (check them on the host
// first, as view_sparse_sections and the file reader do) and the permutation's values are not checked (they
// are device memory): entries outside [0, rows) read out of bounds.
//
// Tests: tests/cuda/test_sparse_cuda.cu. Whether it has run on a GPU: docs/cuda.md, "Status on hardware".
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/sparse/residual_types.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/device_buffer.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/cuda/core/detail/workspace.cuh>
#include <moecomp/cuda/sparse/detail/sparse_device.cuh>

#include <cstddef>
#include <cstdint>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {

namespace cuda_detail {
/// The checks of both bitmap_row_starts overloads, before any CUDA call.
inline void check_row_starts_arguments(const char* fn, index_t rows, index_t cols, const std::uint8_t* bits,
                                       vector_view<std::uint64_t, device_memory> starts) {
  MOECOMP_EXPECTS(sparse_shape_fits(rows, cols), fn, ": the shape must have fewer than 2^56 entries, got ",
                  moecomp::detail::shape_string(rows, cols));
  MOECOMP_EXPECTS(starts.size() == rows + 1 && starts.is_contiguous(), fn, ": starts must be contiguous with ",
                  rows + 1, " entries (rows + 1), got ", starts.size());
  MOECOMP_EXPECTS(bits != nullptr || rows * cols == 0, fn, ": bits must not be null");
}
}  // namespace cuda_detail

/// Workspace bytes for bitmap_row_starts of a rows x cols bitmap.
inline std::size_t bitmap_row_starts_workspace_size(index_t rows, index_t cols) {
  MOECOMP_EXPECTS(sparse_shape_fits(rows, cols), "bitmap_row_starts_workspace_size: the shape must have fewer than "
                  "2^56 entries, got ", moecomp::detail::shape_string(rows, cols));
  return cuda_detail::plan_row_starts(rows, cols).total;
}

/// starts (rows + 1 entries, device memory) = the index of each bitmap row's first stored value, then the
/// count: the popcounts of the rows (cub::DeviceSegmentedReduce) and their scan (cub::DeviceScan).
/// `bits` holds rows x ceil(cols / 8) bytes in device memory.
inline void bitmap_row_starts(const cuda_context& ctx, index_t rows, index_t cols, const std::uint8_t* bits,
                              vector_view<std::uint64_t, device_memory> starts,
                              vector_view<std::byte, device_memory> workspace) {
  constexpr const char* fn = "bitmap_row_starts";
  cuda_detail::check_row_starts_arguments(fn, rows, cols, bits, starts);
  const cuda_detail::row_starts_layout plan = cuda_detail::plan_row_starts(rows, cols);
  moecomp::detail::check_workspace(fn, plan.total, workspace);
  if (rows == 0) {
    MOECOMP_CUDA_TRY(cudaMemsetAsync(starts.data(), 0, sizeof(std::uint64_t), ctx.stream));
    return;
  }
  std::byte* base = moecomp::detail::aligned_base(workspace.data());
  std::size_t temp_bytes = plan.temp_bytes;
  cuda_detail::bitmap_row_starts_passes(base + plan.temp, temp_bytes, rows, cols, bits,
                                        moecomp::detail::at<std::uint64_t>(base, plan.counts), starts.data(),
                                        ctx.stream);
}

/// bitmap_row_starts with the workspace from ctx's allocator.
inline void bitmap_row_starts(const cuda_context& ctx, index_t rows, index_t cols, const std::uint8_t* bits,
                              vector_view<std::uint64_t, device_memory> starts) {
  cuda_detail::check_row_starts_arguments("bitmap_row_starts", rows, cols, bits, starts);
  moecomp::detail::scoped_workspace workspace(ctx, bitmap_row_starts_workspace_size(rows, cols));
  bitmap_row_starts(ctx, rows, cols, bits, starts, workspace.view());
}

/// A sparse matrix's sections in device memory (owning), copied from a host matrix that is valid (an encoder's
/// output or a checked view: view_sparse_sections, read_residual_file). For bitmap matrices the row starts are
/// computed on the device.
class device_sparse_matrix {
 public:
  device_sparse_matrix() = default;
  device_sparse_matrix(const cuda_context& ctx, const sparse_matrix_view& host)
      : rows_(host.rows()), cols_(host.cols()), format_(host.format()), values_dtype_(host.values_dtype()),
        count_(host.count()) {
    const section_lengths s = host.lengths();
    if (format_ == sparse_format::csr16 || format_ == sparse_format::bitmap)
      offsets_ = device_buffer<std::uint64_t>(ctx, rows_ + 1);
    structure_ = device_buffer<std::uint8_t>(ctx, static_cast<index_t>(s.structure));
    values_ = device_buffer<std::uint8_t>(ctx, static_cast<index_t>(s.values));
    if (format_ == sparse_format::csr16 && s.offsets != 0)
      MOECOMP_CUDA_TRY(cudaMemcpyAsync(offsets_.data(), host.offsets(), s.offsets, cudaMemcpyHostToDevice, ctx.stream));
    if (s.structure != 0)
      MOECOMP_CUDA_TRY(
          cudaMemcpyAsync(structure_.data(), host.structure(), s.structure, cudaMemcpyHostToDevice, ctx.stream));
    if (s.values != 0)
      MOECOMP_CUDA_TRY(cudaMemcpyAsync(values_.data(), host.values(), s.values, cudaMemcpyHostToDevice, ctx.stream));
    if (format_ == sparse_format::bitmap) bitmap_row_starts(ctx, rows_, cols_, structure_.data(), offsets_.view());
  }

  sparse_matrix_device_view view() const noexcept {
    sparse_matrix_device_view v;
    v.rows = rows_;
    v.cols = cols_;
    v.format = format_;
    v.values = values_dtype_;
    v.count = count_;
    v.row_offsets = offsets_.data();
    v.structure = structure_.data();
    v.value_bytes = values_.data();
    return v;
  }
  index_t rows() const noexcept { return rows_; }
  index_t cols() const noexcept { return cols_; }
  /// Device bytes held: the sections plus, for bitmap, the row starts.
  std::size_t bytes() const noexcept { return offsets_.bytes() + structure_.bytes() + values_.bytes(); }

 private:
  index_t rows_ = 0, cols_ = 0;
  sparse_format format_ = sparse_format::csr16;
  value_dtype values_dtype_ = value_dtype::float32;
  std::uint64_t count_ = 0;
  device_buffer<std::uint64_t> offsets_;
  device_buffer<std::uint8_t> structure_, values_;
};

namespace cuda_detail {

/// The host-side checks of a device view: a known format and dtype, the formats' shape limits, and non-null,
/// aligned sections.
inline void check_device_sparse(const char* fn, const sparse_matrix_device_view& r) {
  MOECOMP_EXPECTS(r.format == sparse_format::csr16 || r.format == sparse_format::bitmap ||
                      r.format == sparse_format::two_of_four,
                  fn, ": r.format must be csr16, bitmap or 2:4, got ", to_string(r.format));
  MOECOMP_EXPECTS(r.values == value_dtype::float32 || r.values == value_dtype::float16 ||
                      r.values == value_dtype::bfloat16,
                  fn, ": r.values must be fp32, fp16 or bf16, got code ", static_cast<int>(r.values));
  MOECOMP_EXPECTS(sparse_shape_fits(r.rows, r.cols), fn, ": r must have fewer than 2^56 entries, got ",
                  moecomp::detail::shape_string(r.rows, r.cols));
  MOECOMP_EXPECTS(r.format != sparse_format::csr16 || r.cols <= csr16_max_cols, fn, ": csr16 holds at most ",
                  csr16_max_cols, " columns, got ", r.cols);
  MOECOMP_EXPECTS(r.format != sparse_format::two_of_four || r.cols % 4 == 0, fn,
                  ": 2:4 needs a column count divisible by 4, got ", r.cols);
  if (r.rows * r.cols == 0) return;
  MOECOMP_EXPECTS(r.format == sparse_format::two_of_four || r.row_offsets != nullptr, fn,
                  ": r.row_offsets must be set for ", to_string(r.format),
                  r.format == sparse_format::bitmap ? " (the row starts: bitmap_row_starts)" : "");
  MOECOMP_EXPECTS(r.structure != nullptr && (r.count == 0 || r.value_bytes != nullptr), fn,
                  ": r.structure and r.value_bytes must not be null");
  MOECOMP_EXPECTS(reinterpret_cast<std::uintptr_t>(r.row_offsets) % alignof(std::uint64_t) == 0 &&
                      reinterpret_cast<std::uintptr_t>(r.value_bytes) % value_size(r.values) == 0 &&
                      (r.format != sparse_format::csr16 || reinterpret_cast<std::uintptr_t>(r.structure) % 2 == 0),
                  fn, ": r's sections must be aligned to their element sizes (8-byte offsets, 2-byte column indices, "
                  "the values' size)");
}

}  // namespace cuda_detail

/// out = base + r with rows permuted (see above); base, r, out and permutation (rows entries, or empty for the
/// identity) in device memory. Tb and To: float, double, bfloat16 or half, independently.
template <class Tb, class To>
void restore_dense(const cuda_context& ctx, moecomp::detail::type_identity_t<matrix_view<const Tb, device_memory>> base,
                   const sparse_matrix_device_view& r, matrix_view<To, device_memory> out,
                   vector_view<const index_t, device_memory> permutation = vector_view<const index_t, device_memory>()) {
  constexpr const char* fn = "restore_dense";
  static_assert(moecomp::detail::is_weight_type_v<Tb> && moecomp::detail::is_weight_type_v<To>,
                "restore_dense: the base and output types must be float, double, bfloat16 or half");
  cuda_detail::check_device_sparse(fn, r);
  MOECOMP_EXPECTS(base.rows() == r.rows && base.cols() == r.cols, fn, ": base must be ",
                  moecomp::detail::shape_string(r.rows, r.cols), " like the residual, got ",
                  moecomp::detail::shape_string(base.rows(), base.cols()));
  MOECOMP_EXPECTS(out.rows() == r.rows && out.cols() == r.cols, fn, ": out must be ",
                  moecomp::detail::shape_string(r.rows, r.cols), " like the residual, got ",
                  moecomp::detail::shape_string(out.rows(), out.cols()));
  MOECOMP_EXPECTS(permutation.size() == 0 || (permutation.size() == r.rows && permutation.is_contiguous()), fn,
                  ": permutation must be empty or contiguous with ", r.rows, " entries (one per row), got ",
                  permutation.size());
  moecomp::detail::check_no_overlap(fn, "out", out, "base", base);
  if (r.rows * r.cols == 0) return;
  cuda_detail::restore_kernel<Tb, To>
      <<<moecomp::detail::grid_for(r.rows, 1), cuda_detail::restore_block, 0, ctx.stream>>>(
          r, base.data(), base.row_stride(), permutation.size() != 0 ? permutation.data() : nullptr, out.data(),
          out.row_stride());
  MOECOMP_CUDA_TRY(cudaGetLastError());
}

/// out = r decoded: the stored values, +0 elsewhere (bit-exact against the values as stored).
template <class T>
void decode_sparse(const cuda_context& ctx, const sparse_matrix_device_view& r, matrix_view<T, device_memory> out) {
  constexpr const char* fn = "decode_sparse";
  static_assert(moecomp::detail::is_weight_type_v<T>, "decode_sparse: T must be float, double, bfloat16 or half");
  cuda_detail::check_device_sparse(fn, r);
  MOECOMP_EXPECTS(out.rows() == r.rows && out.cols() == r.cols, fn, ": out must be ",
                  moecomp::detail::shape_string(r.rows, r.cols), " like the residual, got ",
                  moecomp::detail::shape_string(out.rows(), out.cols()));
  if (r.rows * r.cols == 0) return;
  cuda_detail::restore_kernel<T, T><<<moecomp::detail::grid_for(r.rows, 1), cuda_detail::restore_block, 0, ctx.stream>>>(
      r, nullptr, 0, nullptr, out.data(), out.row_stride());
  MOECOMP_CUDA_TRY(cudaGetLastError());
}

/// y = x r^T, or y += x r^T with accumulate (see above): x tokens x r.cols, y tokens x r.rows, A float or
/// double, all device memory; y must not overlap x.
template <class A>
void sparse_matmul(const cuda_context& ctx, moecomp::detail::type_identity_t<matrix_view<const A, device_memory>> x,
                   const sparse_matrix_device_view& r, matrix_view<A, device_memory> y, bool accumulate = false) {
  constexpr const char* fn = "sparse_matmul";
  moecomp::detail::check_device_element_type<A>();
  cuda_detail::check_device_sparse(fn, r);
  MOECOMP_EXPECTS(x.cols() == r.cols, fn, ": x must have ", r.cols, " columns (r's), got ", x.cols());
  MOECOMP_EXPECTS(y.rows() == x.rows() && y.cols() == r.rows, fn, ": y must be ",
                  moecomp::detail::shape_string(x.rows(), r.rows), " (tokens x r's rows), got ",
                  moecomp::detail::shape_string(y.rows(), y.cols()));
  moecomp::detail::check_no_overlap(fn, "y", y, "x", x);
  if (x.rows() == 0 || r.rows == 0) return;
  cuda_detail::sparse_matmul_kernel<A>
      <<<moecomp::detail::grid_for(r.rows, cuda_detail::spmm_warps), cuda_detail::spmm_block, 0, ctx.stream>>>(
          r, x.data(), x.row_stride(), x.rows(), y.data(), y.row_stride(), accumulate);
  MOECOMP_CUDA_TRY(cudaGetLastError());
}

}  // namespace sparse
MOECOMP_NAMESPACE_END
