#pragma once
// Magnitude pruning on the device: the device overload of <moecomp/sparse/prune.hpp>'s prune_magnitude, with
// the same counts (torch's round(amount x size), half to even), the same kept set and the same tie rule (ties
// at the threshold go to the lowest flat index), so the result equals the host's bit for bit.
// Documentation: docs/sparse.md, "Magnitude pruning", "Device".
//
//   w, out: rows x cols in device memory (float, double, bfloat16 or half; out may be w itself: in place);
//   params: scope matrix (the whole matrix, torch's l1_unstructured: ResMoE) or n_of_m (N:M, 2:4 by default,
//   m <= 64). The row and column_block scopes are host-only for now (invalid_argument).
//
// Method (matrix scope): an exact radix select of the kept-th largest magnitude, built from CUB: one
// cub::DeviceHistogram pass per 8-bit digit of the magnitude's bits (4 for float, 2 for 16-bit types, 8 for
// double), each over the entries' digits through a transform iterator, and the digit picked on the host from
// the 256 counts. When only some of the entries equal to the threshold are kept, a second select of the same
// kind over their storage offsets finds the last one kept. Then one element-wise kernel. No sort (CCCL 3.0 has no
// DeviceTopK), no per-entry workspace; O(size) per pass.
// N:M: one thread per run, the host's rule (stable order: larger magnitude first, then lower index).
//
// Asynchrony: SYNCHRONISES ctx.stream after every histogram (it reads back 256 counts) and at the end (it
// returns the counts and the threshold). Workspace: prune_magnitude_workspace_size bytes (the histogram, CUB's
// temporary storage, the N:M block minima), or ctx's allocator; 2 KiB of pinned host memory per call.
// Determinism: integer histograms and an element-wise write: bit-identical to the host and run to run.
// Checks: parameters and shapes on the host, as the host's; the VALUES are not checked on the device (the host
// refuses non-finite values; here a NaN competes by its bits, above infinity).
//
// Tests: tests/cuda/test_sparse_cuda.cu. Whether it has run on a GPU: docs/cuda.md, "Status on hardware".
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/sparse/prune_types.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/sparse/detail/prune_checks.hpp>
#include <moecomp/cuda/core/detail/workspace.cuh>
#include <moecomp/cuda/sparse/detail/prune_device.cuh>

#include <cstddef>
#include <cstdint>
#include <limits>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {

namespace cuda_detail {

/// The device's limits on top of check_prune_params.
inline void check_device_prune_params(const char* fn, const prune_params& params, index_t rows, index_t cols) {
  detail::check_prune_params(fn, params, rows, cols);
  MOECOMP_EXPECTS(params.scope == prune_scope::matrix || params.scope == prune_scope::n_of_m, fn,
                  ": params.scope must be matrix or n_of_m on the device (row and column_block are host-only for now), "
                  "got ", to_string(params.scope));
  MOECOMP_EXPECTS(params.scope != prune_scope::n_of_m || params.m <= n_of_m_max_m, fn, ": params.m must be at most ",
                  n_of_m_max_m, " on the device, got ", params.m);
}

/// Every check of a device prune_magnitude call except the workspace's (so the allocating overload can check
/// before it asks CUB for sizes).
template <class T>
void check_prune_arguments(const char* fn, const prune_params& params, matrix_view<const T, device_memory> w,
                           matrix_view<T, device_memory> out) {
  check_device_prune_params(fn, params, w.rows(), w.cols());
  detail::check_prune_output(fn, w, out);
}

struct prune_workspace {
  std::size_t histogram = 0, temp = 0, block_min = 0, smallest = 0, temp_bytes = 0, total = 0;
};

template <class T>
prune_workspace plan_prune_workspace(const char* fn, const prune_params& params, index_t rows, index_t cols,
                                     index_t row_stride) {
  prune_workspace p;
  moecomp::detail::workspace_layout layout(fn);
  p.histogram = layout.take(radix_bins, sizeof(histogram_counter));
  if (rows * cols > 0) {
    if (params.scope == prune_scope::matrix) {
      p.temp_bytes = matrix_select_temp_bytes<T>(rows, cols, row_stride);
    } else {
      const unsigned blocks = n_of_m_blocks(rows, cols, params.m);
      p.temp_bytes = n_of_m_temp_bytes(blocks);
      p.block_min = layout.take(static_cast<index_t>(blocks), sizeof(std::uint64_t));
      p.smallest = layout.take(1, sizeof(std::uint64_t));
    }
  }
  p.temp = layout.take(static_cast<index_t>(p.temp_bytes), 1);
  p.total = layout.total();
  return p;
}

}  // namespace cuda_detail

/// Workspace bytes for the device prune_magnitude of a rows x cols matrix of T.
template <class T>
std::size_t prune_magnitude_workspace_size(const prune_params& params, index_t rows, index_t cols) {
  constexpr const char* fn = "prune_magnitude_workspace_size";
  static_assert(moecomp::detail::is_weight_type_v<T>, "prune_magnitude: T must be float, double, bfloat16 or half");
  moecomp::detail::check_extents(fn, {{"rows", rows}, {"cols", cols}});
  cuda_detail::check_device_prune_params(fn, params, rows, cols);
  return cuda_detail::plan_prune_workspace<T>(fn, params, rows, cols, cols).total;
}

/// Prunes w into out on the device (see above); returns the counts and the threshold (the smallest kept
/// magnitude, +inf when nothing is kept), as the host's.
template <class T>
prune_result prune_magnitude(const cuda_context& ctx, const prune_params& params,
                             moecomp::detail::type_identity_t<matrix_view<const T, device_memory>> w,
                             matrix_view<T, device_memory> out, vector_view<std::byte, device_memory> workspace) {
  using namespace cuda_detail;
  using key = typename detail::magnitude_key<T>::type;
  constexpr const char* fn = "prune_magnitude";
  static_assert(moecomp::detail::is_weight_type_v<T>, "prune_magnitude: T must be float, double, bfloat16 or half");
  const index_t rows = w.rows(), cols = w.cols(), size = rows * cols;
  check_prune_arguments<T>(fn, params, w, out);
  const prune_workspace plan = plan_prune_workspace<T>(fn, params, rows, cols, w.row_stride());
  moecomp::detail::check_workspace(fn, plan.total, workspace);
  prune_result result;
  result.threshold = std::numeric_limits<double>::infinity();
  if (size == 0) return result;
  std::byte* base = moecomp::detail::aligned_base(workspace.data());
  void* temp = base + plan.temp;
  std::size_t temp_bytes = plan.temp_bytes;

  if (params.scope == prune_scope::n_of_m) {
    const unsigned blocks = n_of_m_blocks(rows, cols, params.m);
    auto* block_min = moecomp::detail::at<std::uint64_t>(base, plan.block_min);
    auto* smallest = moecomp::detail::at<std::uint64_t>(base, plan.smallest);
    n_of_m_prune_kernel<T><<<blocks, prune_block, 0, ctx.stream>>>(w.data(), w.row_stride(), out.data(),
                                                                     out.row_stride(), rows, cols, params.n, params.m,
                                                                     block_min);
    MOECOMP_CUDA_TRY(cudaGetLastError());
    MOECOMP_CUDA_TRY(cub::DeviceReduce::Min(temp, temp_bytes, block_min, smallest, static_cast<int>(blocks), ctx.stream));
    moecomp::detail::pinned_scalars<std::uint64_t> host_smallest(1);
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(host_smallest.data(), smallest, sizeof(std::uint64_t), cudaMemcpyDeviceToHost,
                                     ctx.stream));
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
    result.kept = rows * (cols / params.m) * params.n;
    if (host_smallest[0] != ~std::uint64_t(0))
      result.threshold = detail::magnitude_key<T>::value(static_cast<key>(host_smallest[0]));
  } else {
    auto* d_histogram = moecomp::detail::at<histogram_counter>(base, plan.histogram);
    moecomp::detail::pinned_scalars<histogram_counter> h_histogram(radix_bins);
    result.kept = kept_count(params, size);
    detail::threshold_rule<key> rule;
    rule.keep_none = result.kept == 0;
    if (result.kept > 0) {
      index_t remaining = result.kept, equal = 0;
      rule.threshold = radix_select<key>(
          ctx, static_cast<int>(8 * sizeof(key)) - 1, true, remaining, equal, d_histogram, h_histogram.data(),
          [&](const detail::radix_digit_rule<key>& digits) {
            histogram_pass(temp, temp_bytes, magnitude_digit_iterator<T>(w.data(), magnitude_digit<T>{digits}),
                           d_histogram, 1 << digits.width, rows, cols, w.row_stride(), ctx.stream);
          });
      rule.last_tie = std::numeric_limits<index_t>::max();
      if (remaining < equal) {
        // Only the first `remaining` ties (by storage offset, which orders like the flat index) are kept.
        const auto last_offset = static_cast<std::uint64_t>((rows - 1) * w.row_stride() + cols - 1);
        int offset_bits = 1;
        while (offset_bits < 63 && (last_offset >> offset_bits) != 0) ++offset_bits;
        index_t rank = remaining, ties = 0;
        rule.last_tie = static_cast<index_t>(radix_select<std::uint64_t>(
            ctx, offset_bits, false, rank, ties, d_histogram, h_histogram.data(),
            [&](const detail::radix_digit_rule<std::uint64_t>& digits) {
              tie_offset_digit<T> samples;
              samples.w = w.data();
              samples.threshold = rule.threshold;
              samples.rule = digits;
              histogram_pass(temp, temp_bytes, tie_offset_iterator<T>(thrust::counting_iterator<index_t>(0), samples),
                             d_histogram, 1 << digits.width, rows, cols, w.row_stride(), ctx.stream);
            }));
      }
      result.threshold = detail::magnitude_key<T>::value(rule.threshold);
    }
    threshold_prune_kernel<T><<<moecomp::detail::grid_for(size, prune_block), prune_block, 0, ctx.stream>>>(
        w.data(), w.row_stride(), out.data(), out.row_stride(), rows, cols, rule);
    MOECOMP_CUDA_TRY(cudaGetLastError());
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
  }
  result.pruned = size - result.kept;
  return result;
}

/// prune_magnitude with the workspace from ctx's allocator.
template <class T>
prune_result prune_magnitude(const cuda_context& ctx, const prune_params& params,
                             moecomp::detail::type_identity_t<matrix_view<const T, device_memory>> w,
                             matrix_view<T, device_memory> out) {
  cuda_detail::check_prune_arguments<T>("prune_magnitude", params, w, out);
  moecomp::detail::scoped_workspace workspace(
      ctx, cuda_detail::plan_prune_workspace<T>("prune_magnitude", params, w.rows(), w.cols(), w.row_stride()).total);
  return prune_magnitude<T>(ctx, params, w, out, workspace.view());
}

/// In place.
template <class T>
prune_result prune_magnitude(const cuda_context& ctx, const prune_params& params, matrix_view<T, device_memory> w) {
  return prune_magnitude<T>(ctx, params, matrix_view<const T, device_memory>(w), w);
}

}  // namespace sparse
MOECOMP_NAMESPACE_END
