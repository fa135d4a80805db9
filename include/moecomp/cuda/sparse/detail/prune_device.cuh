#pragma once
// The kernels and the host driver behind <moecomp/cuda/sparse/prune.cuh>.
//
// Matrix scope: an MSD radix select of the kept-th largest magnitude key with 8-bit digits, one
// cub::DeviceHistogram pass per digit (the samples are the entries' digits through a transform iterator; an
// entry whose key no longer shares the fixed top digits maps to -1, outside the histogram's range, and is not
// counted), each histogram read back to pick the digit on the host (pick_digit, the host's rule). If fewer of
// the keys equal to the threshold are kept than exist, a second select of the same kind over their storage
// offsets (ascending) finds the last tie kept, so ties go to the lowest flat index as on the host. Then one
// element-wise kernel writes the result (threshold_kept). No sort, no per-entry workspace.
// N:M: one thread per run of m entries (n_of_m_kept, the host's rule), the smallest kept key by cub::BlockReduce
// and cub::DeviceReduce.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/sparse/prune_types.hpp>
#include <moecomp/sparse/detail/sparse_element.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/kernel.cuh>
#include <moecomp/cuda/core/detail/workspace.cuh>

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_histogram.cuh>
#include <cub/device/device_reduce.cuh>
#include <cuda/functional>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cstddef>
#include <cstdint>
#include <limits>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {
namespace cuda_detail {

inline constexpr int radix_bins = 1 << detail::radix_digit_bits;
using histogram_counter = unsigned long long;
inline constexpr int prune_block = 256;
/// The most blocks the N:M kernel uses (grid-stride beyond), so the per-block minima stay small.
inline constexpr index_t n_of_m_max_blocks = 4096;
/// The longest N:M run the device handles (one thread keeps a run in registers / local memory).
inline constexpr index_t n_of_m_max_m = 64;

/// The value select's samples: the digit of an entry's magnitude key.
template <class T>
struct magnitude_digit {
  using key = typename detail::magnitude_key<T>::type;
  detail::radix_digit_rule<key> rule;
  __host__ __device__ int operator()(T v) const { return rule(detail::magnitude_key<T>::of(v)); }
};

/// The tie select's samples: the digit of a storage offset whose entry's key equals the threshold, else -1.
template <class T>
struct tie_offset_digit {
  using key = typename detail::magnitude_key<T>::type;
  const T* w = nullptr;
  key threshold = 0;
  detail::radix_digit_rule<std::uint64_t> rule;
  __host__ __device__ int operator()(index_t offset) const {
    if (detail::magnitude_key<T>::of(w[offset]) != threshold) return -1;
    return rule(static_cast<std::uint64_t>(offset));
  }
};

template <class T>
using magnitude_digit_iterator = thrust::transform_iterator<magnitude_digit<T>, const T*>;
template <class T>
using tie_offset_iterator = thrust::transform_iterator<tie_offset_digit<T>, thrust::counting_iterator<index_t>>;

/// One histogram of `bins` digits over the rows x cols entries (row stride in entries) of the samples.
template <class Samples>
void histogram_pass(void* temp, std::size_t& temp_bytes, Samples samples, histogram_counter* histogram, int bins,
                    index_t rows, index_t cols, index_t row_stride, cudaStream_t stream) {
  MOECOMP_CUDA_TRY(cub::DeviceHistogram::HistogramEven(temp, temp_bytes, samples, histogram, bins + 1, 0, bins, cols,
                                                       rows, static_cast<std::size_t>(row_stride) * sizeof(int),
                                                       stream));
}

/// The CUB temporary storage the matrix scope's passes need at most.
template <class T>
std::size_t matrix_select_temp_bytes(index_t rows, index_t cols, index_t row_stride) {
  std::size_t a = 0, b = 0;
  histogram_pass(nullptr, a, magnitude_digit_iterator<T>(static_cast<const T*>(nullptr), magnitude_digit<T>{}), nullptr,
                 radix_bins, rows, cols, row_stride, nullptr);
  histogram_pass(nullptr, b, tie_offset_iterator<T>(thrust::counting_iterator<index_t>(0), tie_offset_digit<T>{}),
                 nullptr, radix_bins, rows, cols, row_stride, nullptr);
  return a > b ? a : b;
}

/// The radix select with histogram(rule) enqueueing the CUB histogram of the keys' digits into d_histogram;
/// each is read back into h_histogram (SYNCHRONISES) for the host's digit pick (radix_select_loop).
template <class Key, class Histogram>
Key radix_select(const cuda_context& ctx, int total_bits, bool descending, index_t& remaining, index_t& equal,
                 histogram_counter* d_histogram, histogram_counter* h_histogram, Histogram&& histogram) {
  return detail::radix_select_loop<Key>(
      total_bits, descending, remaining, equal, [&](const detail::radix_digit_rule<Key>& rule) {
        histogram(rule);
        MOECOMP_CUDA_TRY(cudaMemcpyAsync(h_histogram, d_histogram,
                                         sizeof(histogram_counter) * (std::size_t(1) << rule.width),
                                         cudaMemcpyDeviceToHost, ctx.stream));
        MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
        return static_cast<const histogram_counter*>(h_histogram);
      });
}

/// out(i, j) = w(i, j) where threshold_kept, else +0; in place when out is w (each entry is read, then written,
/// by one thread).
template <class T>
MOECOMP_KERNEL void __launch_bounds__(prune_block)
    threshold_prune_kernel(const T* w, index_t w_stride, T* out, index_t out_stride, index_t rows, index_t cols,
                           detail::threshold_rule<typename detail::magnitude_key<T>::type> rule) {
  const index_t total = rows * cols;
  for (index_t k = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t i = k / cols, j = k % cols, offset = i * w_stride + j;
    const T v = w[offset];
    out[i * out_stride + j] = detail::threshold_kept(rule, detail::magnitude_key<T>::of(v), offset) ? v : T{};
  }
}

/// N:M: each thread prunes whole runs (a copy of the run first, so that in-place works); every block writes the
/// smallest kept key of its runs to block_min[blockIdx.x] (all ones when it kept nothing).
template <class T>
MOECOMP_KERNEL void __launch_bounds__(prune_block)
    n_of_m_prune_kernel(const T* w, index_t w_stride, T* out, index_t out_stride, index_t rows, index_t cols,
                        index_t n, index_t m, std::uint64_t* block_min) {
  using block_reduce = cub::BlockReduce<std::uint64_t, prune_block>;
  __shared__ typename block_reduce::TempStorage reduce_storage;
  const index_t runs_per_row = cols / m, runs = rows * runs_per_row;
  std::uint64_t smallest = ~std::uint64_t(0);
  T run[n_of_m_max_m];
  for (index_t g = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < runs;
       g += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t i = g / runs_per_row, j0 = (g % runs_per_row) * m;
    for (index_t q = 0; q < m; ++q) run[q] = w[i * w_stride + j0 + q];
    for (index_t q = 0; q < m; ++q) {
      const bool keep = detail::n_of_m_kept(run, m, n, q);
      out[i * out_stride + j0 + q] = keep ? run[q] : T{};
      if (keep) {
        const std::uint64_t k = detail::magnitude_key<T>::of(run[q]);
        smallest = k < smallest ? k : smallest;
      }
    }
  }
  const std::uint64_t block_smallest = block_reduce(reduce_storage).Reduce(smallest, cuda::minimum<>{});
  if (threadIdx.x == 0) block_min[blockIdx.x] = block_smallest;
}

/// The blocks the N:M kernel runs.
inline unsigned n_of_m_blocks(index_t rows, index_t cols, index_t m) {
  return moecomp::detail::grid_for(rows * (cols / m), prune_block, n_of_m_max_blocks);
}

/// The CUB temporary storage of the N:M minimum.
inline std::size_t n_of_m_temp_bytes(unsigned blocks) {
  std::size_t bytes = 0;
  MOECOMP_CUDA_TRY(cub::DeviceReduce::Min(nullptr, bytes, static_cast<const std::uint64_t*>(nullptr),
                                          static_cast<std::uint64_t*>(nullptr), static_cast<int>(blocks)));
  return bytes;
}

}  // namespace cuda_detail
}  // namespace sparse
MOECOMP_NAMESPACE_END
