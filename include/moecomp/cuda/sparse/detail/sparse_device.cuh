#pragma once
// The kernels behind <moecomp/cuda/sparse/residual.cuh>: the bitmap row starts (CUB segmented sums and a scan),
// restore (one block per output row, one pass), and the sparse-times-dense product for decode batch sizes (one
// warp per sparse row). The per-element rules (value decoders, 2:4 slots, bitmap bits) are the host's
// (<moecomp/sparse/detail/sparse_element.hpp>).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/sparse/residual_types.hpp>
#include <moecomp/sparse/detail/sparse_element.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/kernel.cuh>
#include <moecomp/cuda/core/detail/workspace.cuh>

#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>
#include <cub/warp/warp_scan.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {

/// A sparse matrix in device memory: the three sections of a format (docs/sparse.md, "Formats") as the host's
/// sparse_matrix holds them, in device memory, plus the bitmap's row starts. Made by device_sparse_matrix, or
/// by a caller that copied checked sections to the device (then `row_offsets` of a bitmap matrix must hold its
/// row starts: bitmap_row_starts computes them).
///  * csr16: row_offsets = rows + 1 uint64 offsets; structure = count uint16 column indices (2-byte aligned);
///  * bitmap: row_offsets = rows + 1 row starts (the index of each row's first stored value, then count);
///    structure = rows x ceil(cols / 8) bytes of bits;
///  * two_of_four: row_offsets unused; structure = rows x ceil(cols / 8) bytes of 4-bit codes;
///  * value_bytes: count values of the `values` dtype, aligned to their size.
struct sparse_matrix_device_view {
  index_t rows = 0, cols = 0;
  sparse_format format = sparse_format::csr16;
  value_dtype values = value_dtype::float32;
  std::uint64_t count = 0;
  const std::uint64_t* row_offsets = nullptr;
  const std::uint8_t* structure = nullptr;
  const void* value_bytes = nullptr;
};

namespace cuda_detail {

inline constexpr int restore_block = 256;
inline constexpr int spmm_block = 256;
inline constexpr int spmm_warps = spmm_block / 32;
/// Tokens one warp accumulates at a time (registers per lane); more tokens re-read the row, from L1/L2.
inline constexpr int spmm_token_tile = 8;

/// Stored value k as a float (device memory is little-endian, like the format).
__device__ inline float stored_value(const void* values, value_dtype dtype, std::uint64_t k) {
  switch (dtype) {
    case value_dtype::float16: return detail::float16_value(static_cast<const std::uint16_t*>(values)[k]);
    case value_dtype::bfloat16: return detail::bfloat16_value(static_cast<const std::uint16_t*>(values)[k]);
    case value_dtype::float32: break;
  }
  return detail::float32_value(static_cast<const std::uint32_t*>(values)[k]);
}

/// The number of stored entries a bitmap byte marks.
struct byte_popcount {
  const std::uint8_t* bits;
  __host__ __device__ std::uint64_t operator()(index_t k) const {
#if defined(__CUDA_ARCH__)
    return static_cast<std::uint64_t>(__popc(bits[k]));
#else
    std::uint64_t n = 0;
    for (unsigned b = bits[k]; b != 0; b &= b - 1) ++n;
    return n;
#endif
  }
};

/// The first byte of bitmap row i.
struct row_byte_offset {
  index_t row_bytes;
  __host__ __device__ index_t operator()(index_t i) const { return i * row_bytes; }
};

using popcount_iterator = thrust::transform_iterator<byte_popcount, thrust::counting_iterator<index_t>>;
using row_offset_iterator = thrust::transform_iterator<row_byte_offset, thrust::counting_iterator<index_t>>;

/// The two CUB passes of the row starts: per-row popcounts (segmented sums), then their inclusive scan. With
/// null temporary storage they set `temp_bytes` to what they need (CUB's convention) and do nothing else.
inline void bitmap_row_starts_passes(void* temp, std::size_t& temp_bytes, index_t rows, index_t cols,
                                     const std::uint8_t* bits, std::uint64_t* counts, std::uint64_t* starts,
                                     cudaStream_t stream) {
  const index_t row_bytes = (cols + 7) / 8;
  const popcount_iterator ones(thrust::counting_iterator<index_t>(0), byte_popcount{bits});
  const row_offset_iterator begins(thrust::counting_iterator<index_t>(0), row_byte_offset{row_bytes});
  const row_offset_iterator ends(thrust::counting_iterator<index_t>(1), row_byte_offset{row_bytes});
  if (temp == nullptr) {
    std::size_t reduce_bytes = 0, scan_bytes = 0;
    MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::Sum(nullptr, reduce_bytes, ones, counts, rows, begins, ends, stream));
    MOECOMP_CUDA_TRY(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, counts, starts + 1, rows, stream));
    temp_bytes = reduce_bytes > scan_bytes ? reduce_bytes : scan_bytes;
    return;
  }
  MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::Sum(temp, temp_bytes, ones, counts, rows, begins, ends, stream));
  MOECOMP_CUDA_TRY(cudaMemsetAsync(starts, 0, sizeof(std::uint64_t), stream));
  MOECOMP_CUDA_TRY(cub::DeviceScan::InclusiveSum(temp, temp_bytes, counts, starts + 1, rows, stream));
}

/// Where bitmap_row_starts puts its pieces in a workspace: the row counts, then CUB's temporary storage.
struct row_starts_layout {
  std::size_t counts = 0, temp = 0, temp_bytes = 0, total = 0;
};
inline row_starts_layout plan_row_starts(index_t rows, index_t cols) {
  row_starts_layout p;
  moecomp::detail::workspace_layout layout("bitmap_row_starts_workspace_size");
  p.counts = layout.take(rows, sizeof(std::uint64_t));
  if (rows > 0) bitmap_row_starts_passes(nullptr, p.temp_bytes, rows, cols, nullptr, nullptr, nullptr, nullptr);
  p.temp = layout.take(static_cast<index_t>(p.temp_bytes), 1);
  p.total = layout.total();
  return p;
}

/// The restore of one entry: base + stored value in Acc, rounded once to To (base absent: the value itself, so
/// that decoding is bit-exact, -0 included; an entry not stored: the base, or +0).
template <class Tb, class To>
__device__ inline To restored(const Tb* base_row, index_t j, bool stored, float value) {
  using Acc = detail::restore_accumulator_t<Tb, To>;
  if (base_row == nullptr) return stored ? convert_to<To>(static_cast<Acc>(value)) : To{};
  const Acc b = convert_to<Acc>(base_row[j]);
  return convert_to<To>(stored ? b + static_cast<Acc>(value) : b);
}

/// out(i, :) = base(p(i), :) + r(p(i), :): one block per output row (grid-stride over rows). csr16 writes the
/// base row, then (after a barrier) the stored entries; bitmap walks the row in tiles of one column per thread
/// with a block scan of the bits for the value indices; 2:4 is element-wise. Reads and writes of the dense rows
/// are coalesced.
template <class Tb, class To>
MOECOMP_KERNEL void __launch_bounds__(restore_block)
    restore_kernel(sparse_matrix_device_view r, const Tb* base, index_t base_stride, const index_t* permutation,
                   To* out, index_t out_stride) {
  using block_scan = cub::BlockScan<std::uint32_t, restore_block>;
  __shared__ typename block_scan::TempStorage scan_storage;
  const index_t cols = r.cols;
  const auto tid = static_cast<index_t>(threadIdx.x);
  for (index_t i = blockIdx.x; i < r.rows; i += gridDim.x) {
    const index_t s = permutation != nullptr ? permutation[i] : i;
    const Tb* base_row = base != nullptr ? base + s * base_stride : nullptr;
    To* out_row = out + i * out_stride;
    if (r.format == sparse_format::csr16) {
      for (index_t j = tid; j < cols; j += restore_block) out_row[j] = restored<Tb, To>(base_row, j, false, 0.0f);
      __syncthreads();  // the stored entries overwrite what the first pass wrote
      const auto* columns = reinterpret_cast<const std::uint16_t*>(r.structure);
      for (std::uint64_t k = r.row_offsets[s] + threadIdx.x; k < r.row_offsets[s + 1]; k += restore_block) {
        const index_t j = columns[k];
        out_row[j] = restored<Tb, To>(base_row, j, true, stored_value(r.value_bytes, r.values, k));
      }
      __syncthreads();
    } else if (r.format == sparse_format::bitmap) {
      const std::uint8_t* bits = r.structure + s * ((cols + 7) / 8);
      std::uint64_t next = r.row_offsets[s];
      for (index_t c0 = 0; c0 < cols; c0 += restore_block) {
        const index_t j = c0 + tid;
        const bool stored = j < cols && detail::bitmap_bit(bits, j);
        std::uint32_t before = 0, tile_total = 0;
        block_scan(scan_storage).ExclusiveSum(stored ? 1u : 0u, before, tile_total);
        if (j < cols)
          out_row[j] = restored<Tb, To>(base_row, j, stored,
                                        stored ? stored_value(r.value_bytes, r.values, next + before) : 0.0f);
        next += tile_total;
        __syncthreads();  // scan_storage is reused by the next tile
      }
    } else {
      const std::uint8_t* codes = r.structure + s * ((cols / 4 + 1) / 2);
      const auto first = static_cast<std::uint64_t>(s) * static_cast<std::uint64_t>(cols / 2);
      for (index_t j = tid; j < cols; j += restore_block) {
        const int slot = detail::two_of_four_slot(detail::two_of_four_code(codes, j / 4), static_cast<unsigned>(j % 4));
        out_row[j] = restored<Tb, To>(
            base_row, j, slot >= 0,
            slot >= 0 ? stored_value(r.value_bytes, r.values, first + static_cast<std::uint64_t>(2 * (j / 4) + slot))
                      : 0.0f);
      }
    }
  }
}

/// y(t, row) (+)= sum_j x(t, j) r(row, j) for every token t: one warp per sparse row (grid-stride), lanes
/// striding over the row's stored entries, spmm_token_tile tokens at a time, each token's sum reduced over the
/// warp in a fixed order (deterministic). x is read by column index from L1/L2.
template <class A>
MOECOMP_KERNEL void __launch_bounds__(spmm_block)
    sparse_matmul_kernel(sparse_matrix_device_view r, const A* x, index_t x_stride, index_t tokens, A* y,
                         index_t y_stride, bool accumulate) {
  using warp_reduce = cub::WarpReduce<A>;
  using warp_scan = cub::WarpScan<std::uint32_t>;
  __shared__ typename warp_reduce::TempStorage reduce_storage[spmm_warps];
  __shared__ typename warp_scan::TempStorage scan_storage[spmm_warps];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const index_t cols = r.cols;
  const auto warps_total = static_cast<index_t>(gridDim.x) * spmm_warps;
  for (index_t row = static_cast<index_t>(blockIdx.x) * spmm_warps + warp; row < r.rows; row += warps_total) {
    for (index_t t0 = 0; t0 < tokens; t0 += spmm_token_tile) {
      const int tile = static_cast<int>(tokens - t0 < spmm_token_tile ? tokens - t0 : spmm_token_tile);
      const A* xt = x + t0 * x_stride;
      A acc[spmm_token_tile];
      for (int t = 0; t < spmm_token_tile; ++t) acc[t] = A(0);
      const auto add = [&](index_t j, float value) {
        for (int t = 0; t < spmm_token_tile; ++t)
          if (t < tile) acc[t] += static_cast<A>(value) * xt[t * x_stride + j];
      };
      if (r.format == sparse_format::csr16) {
        const auto* columns = reinterpret_cast<const std::uint16_t*>(r.structure);
        for (std::uint64_t k = r.row_offsets[row] + static_cast<std::uint64_t>(lane); k < r.row_offsets[row + 1]; k += 32)
          add(columns[k], stored_value(r.value_bytes, r.values, k));
      } else if (r.format == sparse_format::bitmap) {
        // Each lane takes 32 columns per round (one 32-bit word of the row); a warp scan of the words' popcounts
        // gives each lane the index of its first value.
        const std::uint8_t* bits = r.structure + row * ((cols + 7) / 8);
        std::uint64_t next = r.row_offsets[row];
        for (index_t c0 = 0; c0 < cols; c0 += 32 * 32) {
          const index_t w0 = c0 + 32 * static_cast<index_t>(lane);
          std::uint32_t word = 0;
          for (int b = 0; b < 4; ++b)
            if (w0 + 8 * b < cols) word |= static_cast<std::uint32_t>(bits[(w0 + 8 * b) / 8]) << (8 * b);
          std::uint32_t before = 0, round_total = 0;
          warp_scan(scan_storage[warp]).ExclusiveSum(static_cast<std::uint32_t>(__popc(word)), before, round_total);
          std::uint64_t k = next + before;
          for (; word != 0; word &= word - 1)
            add(w0 + (__ffs(static_cast<int>(word)) - 1), stored_value(r.value_bytes, r.values, k++));
          next += round_total;
        }
      } else {
        const std::uint8_t* codes = r.structure + row * ((cols / 4 + 1) / 2);
        const auto first = static_cast<std::uint64_t>(row) * static_cast<std::uint64_t>(cols / 2);
        for (index_t g = lane; g < cols / 4; g += 32) {
          const unsigned code = detail::two_of_four_code(codes, g);
          const std::uint64_t k = first + 2 * static_cast<std::uint64_t>(g);
          add(4 * g + (code & 3u), stored_value(r.value_bytes, r.values, k));
          add(4 * g + (code >> 2), stored_value(r.value_bytes, r.values, k + 1));
        }
      }
      for (int t = 0; t < tile; ++t) {
        const A sum = warp_reduce(reduce_storage[warp]).Sum(acc[t]);
        if (lane == 0) {
          A* target = y + (t0 + t) * y_stride + row;
          *target = accumulate ? *target + sum : sum;
        }
        __syncwarp();  // reduce_storage is reused by the next token
      }
    }
  }
}

}  // namespace cuda_detail
}  // namespace sparse
MOECOMP_NAMESPACE_END
