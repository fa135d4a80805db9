#pragma once
// Deterministic block-wide sum: a fixed shuffle tree inside each warp, then the warp totals summed by
// warp 0 in the same fixed tree. The order of additions depends only on the block size, never on timing,
// so a result is bit-identical from run to run.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

/// Sum of `value` over the 32 lanes of a full warp in a fixed shuffle tree, returned to lane 0 (the other
/// lanes hold partial sums). Every lane must call it.
__device__ __forceinline__ double warp_sum(double value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_down_sync(0xffffffffu, value, offset);
  return value;
}

/// Shared-memory doubles block_sum needs for a block of BlockSize threads.
template <int BlockSize>
inline constexpr int block_sum_scratch = BlockSize / 32 + 1;

/// Sum of `value` over a 1-D block of BlockSize threads (a multiple of 32, at most 1024), returned to every
/// thread. Every thread of the block must call it; `scratch` holds block_sum_scratch<BlockSize> doubles
/// of shared memory and may be reused as soon as the call returns.
template <int BlockSize>
__device__ __forceinline__ double block_sum(double value, double* scratch) {
  static_assert(BlockSize % 32 == 0 && BlockSize >= 32 && BlockSize <= 1024,
                "block_sum: BlockSize must be a multiple of 32 in [32, 1024]");
  constexpr int warps = BlockSize / 32;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  value = warp_sum(value);
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = warp_sum(lane < warps ? scratch[lane] : 0.0);
    if (lane == 0) scratch[warps] = value;
  }
  __syncthreads();
  const double total = scratch[warps];
  __syncthreads();  // everyone has read the total before the caller reuses scratch
  return total;
}

}  // namespace detail
MOECOMP_NAMESPACE_END
