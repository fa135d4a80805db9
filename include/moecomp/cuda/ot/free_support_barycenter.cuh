#pragma once
// Free-support Wasserstein barycenter on the device, uniform path: the device overload of
// <moecomp/ot/free_support_barycenter.hpp>'s free_support_barycenter (k clouds of n points of mass 1/n,
// barycenter of n points), everything on the GPU: per iteration and cloud the cross term X_j B^T by one
// cuBLAS GEMM in T, an auction for the permutation (warm-started from that cloud's prices of the previous
// iteration), then the weighted mean of the aligned clouds by a gather kernel.
//
// The difference from the host: the host solves every assignment exactly; the device auction is
// epsilon-optimal (<moecomp/cuda/ot/auction_assignment.cuh>), so the returned permutations are within a
// proven bound of optimal for the returned barycenter, and the result carries that bound:
//   objective - sum_j w_j W_2^2(barycenter, cloud j) <= gap_bound = sum_j w_j 2 eps_j
// (eps_j: cloud j's final auction epsilon, automatic range_j / (1e6 n) with range_j the spread of its cross
// term, unless the auction parameters say otherwise). The stopping rules, iteration count, displacement and
// objective formula are the host's; the iterates can differ from the host's where the auction picks another
// near-optimal permutation.
//
// Asynchrony: SYNCHRONISES ctx.stream (the auctions and the stopping rules read scalars back); the
// barycenter and permutations (device views) are ready when it returns. Needs a cuBLAS handle in ctx for
// speed (without one a temporary handle is created for the call).
// Workspace: n^2 + 2 n d elements of T plus about (28 k + 60) n bytes (free_support_barycenter_workspace_size).
// Non-finite input coordinates are not checked on the device: they show up as a non-finite cross term, and
// the result's status is then numerical_error (objective NaN).
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/device_buffer.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/ot/free_support_barycenter_types.hpp>
#include <moecomp/ot/linear_assignment_types.hpp>
#include <moecomp/cuda/core/detail/cublas.cuh>
#include <moecomp/cuda/ot/detail/auction_device.cuh>
#include <moecomp/cuda/ot/detail/free_support_barycenter_device.cuh>
#include <moecomp/cuda/ot/detail/ot_device_common.cuh>
#include <moecomp/ot/detail/free_support_checks.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace ot {

/// The host result plus what the epsilon-optimal device assignments add.
struct free_support_barycenter_device_result : free_support_barycenter_result {
  /// objective minus the optimal objective for the returned barycenter is at most this (+inf unless ok).
  double gap_bound = 0.0;
  /// Auction bids over all iterations and clouds.
  std::int64_t bids = 0;
};

namespace cuda_detail {

inline std::vector<double> checked_weights(const char* function, vector_view<const double> weights) {
  ot::detail::free_support_check_probabilities(function, "weights", weights, /*positive=*/false);
  std::vector<double> w(static_cast<std::size_t>(weights.size()));
  for (index_t j = 0; j < weights.size(); ++j) w[static_cast<std::size_t>(j)] = weights[j];
  return w;
}

/// The host's checks (same messages), plus the device's: the stack at its row stride, int extents.
template <class M, class I, class B, class P>
void check_barycenter_arguments(const char* function, const free_support_barycenter_params& params, const M& measures,
                                const I& init, const B& barycenter, const P& permutations, index_t weights) {
  ot::detail::check_free_support_params(function, params);
  ot::detail::check_uniform_barycenter_shapes(function, measures, init, barycenter, permutations, weights);
  MOECOMP_EXPECTS(measures.count() <= 1 || measures.matrix_stride() == measures.rows() * measures.row_stride(), function,
                  ": measures must be stacked at its row stride on the device (matrix_stride = n * row_stride = ",
                  measures.rows() * measures.row_stride(), "), got matrix_stride ", measures.matrix_stride());
  check_int_extent(function, "k * n", measures.count() * measures.rows());
  check_int_extent(function, "the number of coordinates d", measures.cols());
  check_int_extent(function, "the row stride of measures", measures.row_stride());
}

template <class T>
free_support_barycenter_device_result run_barycenter(const cuda_context& ctx,
                                                     const free_support_barycenter_params& params,
                                                     const auction_params& assignment,
                                                     matrix_view<const T, device_memory> measures, index_t k,
                                                     const std::vector<double>& weights,
                                                     matrix_view<const T, device_memory> init,
                                                     matrix_view<T, device_memory> barycenter,
                                                     matrix_view<index_t, device_memory> permutations,
                                                     std::byte* workspace) {
  constexpr const char* function = "free_support_barycenter";
  const index_t n = init.rows(), d = init.cols();
  const barycenter_plan plan = make_barycenter_plan<T>(function, k, n, d);
  std::byte* base = aligned_base(workspace);
  T* cross = at<T>(base, plan.cross);
  T* x = at<T>(base, plan.current);
  T* x_next = at<T>(base, plan.next);
  double* prices = at<double>(base, plan.prices);
  auto* previous = at<index_t>(base, plan.previous);
  int* source = at<int>(base, plan.source);
  double* row_displacement = at<double>(base, plan.row_displacement);
  double* per_row = at<double>(base, plan.per_row);
  double* per_cloud = at<double>(base, plan.per_cloud);
  double* device_weights = at<double>(base, plan.weights);
  int* changed = at<int>(base, plan.changed);
  const int ni = static_cast<int>(n), ki = static_cast<int>(k);
  const index_t measures_ld = std::max(measures.row_stride(), d);

  const pinned_scalars<auction_readback> readback(1);
  const pinned_scalars<double> scalars(k + 1);
  const pinned_scalars<int> changed_count(1);
  MOECOMP_CUDA_TRY(cudaMemcpyAsync(device_weights, weights.data(), static_cast<std::size_t>(k) * sizeof(double),
                                   cudaMemcpyHostToDevice, ctx.stream));
  moecomp::detail::copy_rows_async<T>(ctx, x, d, init.data(), init.row_stride(), d, n, cudaMemcpyDeviceToDevice);
  fill_zero_kernel<<<grid_for(k * n, auction_block), auction_block, 0, ctx.stream>>>(prices, static_cast<int>(k * n));
  MOECOMP_CUDA_CHECK_LAUNCH();
  // Defined output even when the first round fails: the identity.
  {
    std::vector<index_t> identity(static_cast<std::size_t>(k * n));
    for (index_t j = 0; j < k; ++j)
      for (index_t i = 0; i < n; ++i) identity[static_cast<std::size_t>(j * n + i)] = i;
    moecomp::detail::copy_rows_async<index_t>(ctx, permutations.data(), permutations.row_stride(), identity.data(), n,
                                              n, k, cudaMemcpyHostToDevice);
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));  // `identity` is pageable and about to go
  }

  const moecomp::detail::cublas_session session(ctx);
  free_support_barycenter_device_result result;
  moecomp::status assignment_status = moecomp::status::ok;
  double gap = 0.0;

  // One auction per cloud against barycenter `b`; false when a cross term is not finite or an auction
  // stopped short (the status says which).
  const auto assign_all = [&](const T* b, bool warm) -> bool {
    gap = 0.0;
    for (index_t j = 0; j < k; ++j) {
      const T* cloud = measures.data() + j * n * measures.row_stride();
      if (d > 0) {
        moecomp::detail::gemm_abt(session.handle(), n, n, d, cloud, measures_ld, b, d, cross, n);
      } else {
        MOECOMP_CUDA_TRY(cudaMemsetAsync(cross, 0, static_cast<std::size_t>(n * n) * sizeof(T), ctx.stream));
      }
      const auction_matrix<T> a{cross, n, ni, ni, 1.0};  // maximise the cross term
      const cost_statistics stats = cost_statistics_of<T>(ctx, a, plan.auction, base);
      if (stats.nan != 0 || stats.infinite != 0) {
        assignment_status = moecomp::status::numerical_error;
        return false;
      }
      auction_params p = assignment;
      p.maximize = true;
      p.warm_start = warm;
      const epsilon_schedule schedule = make_epsilon_schedule(p, n, stats.max - stats.min, stats.non_integer == 0);
      const auction_state state = auction_state_at(base, plan.auction, prices + j * n);
      const auction_outcome outcome = run_auction_phases<T>(ctx, p, a, state, schedule, readback);
      result.bids += outcome.bids;
      if (outcome.status != moecomp::status::ok) {
        assignment_status = outcome.status;
        return false;
      }
      gap += weights[static_cast<std::size_t>(j)] * 2.0 * schedule.final;
      auction_finish_kernel<T><<<1, auction_block, 0, ctx.stream>>>(a, state.assigned,
                                                                     permutations.data() + j * permutations.row_stride(),
                                                                     1, per_cloud + k);
      MOECOMP_CUDA_CHECK_LAUNCH();
    }
    return true;
  };

  bool optimal_for_x = false, failed = false;
  result.status = moecomp::status::iteration_limit;
  const unsigned element_grid = grid_for(k * n, auction_block);
  for (index_t iteration = 1; iteration <= params.max_iterations; ++iteration) {
    if (!assign_all(x, /*warm=*/iteration > 1)) {
      failed = true;
      break;
    }
    result.iterations = iteration;
    MOECOMP_CUDA_TRY(cudaMemsetAsync(changed, 0, sizeof(int), ctx.stream));
    count_changes_kernel<<<element_grid, auction_block, 0, ctx.stream>>>(permutations.data(),
                                                                         permutations.row_stride(), previous, ki, ni,
                                                                         changed);
    MOECOMP_CUDA_CHECK_LAUNCH();
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(changed_count.data(), changed, sizeof(int), cudaMemcpyDeviceToHost, ctx.stream));
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
    if (iteration > 1 && changed_count[0] == 0) {
      result.criterion = 0.0;
      result.status = moecomp::status::ok;
      optimal_for_x = true;
      break;
    }
    invert_permutations_kernel<<<element_grid, auction_block, 0, ctx.stream>>>(
        permutations.data(), permutations.row_stride(), ki, ni, source);
    MOECOMP_CUDA_CHECK_LAUNCH();
    const update_args<T> u{measures.data(), measures.row_stride(), source, device_weights, x, x_next,
                           row_displacement, ki, ni, d};
    barycenter_update_kernel<T>
        <<<static_cast<unsigned>(std::min<index_t>(n, moecomp::detail::max_grid_x)), barycenter_block, 0,
           ctx.stream>>>(u);
    MOECOMP_CUDA_CHECK_LAUNCH();
    segment_sums_kernel<<<1, barycenter_block, 0, ctx.stream>>>(row_displacement, n, per_cloud + k);
    MOECOMP_CUDA_CHECK_LAUNCH();
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(scalars.data(), per_cloud + k, sizeof(double), cudaMemcpyDeviceToHost, ctx.stream));
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
    const double displacement = scalars[0];
    std::swap(x, x_next);
    result.criterion = displacement;
    if (!std::isfinite(displacement)) {
      assignment_status = moecomp::status::numerical_error;
      failed = true;
      break;
    }
    optimal_for_x = displacement == 0.0;
    if (displacement <= params.tolerance) {
      result.status = moecomp::status::ok;
      break;
    }
  }
  if (!failed && !optimal_for_x) failed = !assign_all(x, /*warm=*/true);
  if (failed) {
    result.status = assignment_status == moecomp::status::ok ? moecomp::status::numerical_error : assignment_status;
    result.objective = std::numeric_limits<double>::quiet_NaN();
    result.gap_bound = std::numeric_limits<double>::infinity();
  } else {
    matched_distance_kernel<T>
        <<<static_cast<unsigned>(std::min<index_t>(k * n, moecomp::detail::max_grid_x)), barycenter_block, 0,
           ctx.stream>>>(measures.data(), measures.row_stride(), permutations.data(), permutations.row_stride(), x, ki,
                         ni, d, per_row);
    MOECOMP_CUDA_CHECK_LAUNCH();
    segment_sums_kernel<<<static_cast<unsigned>(k), barycenter_block, 0, ctx.stream>>>(per_row, n, per_cloud);
    MOECOMP_CUDA_CHECK_LAUNCH();
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(scalars.data(), per_cloud, static_cast<std::size_t>(k) * sizeof(double),
                                     cudaMemcpyDeviceToHost, ctx.stream));
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
    double total = 0.0;
    for (index_t j = 0; j < k; ++j) total += weights[static_cast<std::size_t>(j)] * (scalars[j] / static_cast<double>(n));
    result.objective = total;
    result.gap_bound = gap;
  }
  moecomp::detail::copy_rows_async<T>(ctx, barycenter.data(), barycenter.row_stride(), x, d, d, n,
                                      cudaMemcpyDeviceToDevice);
  MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
  return result;
}

}  // namespace cuda_detail

/// Workspace bytes for the device free_support_barycenter of k clouds of n points in d dimensions.
template <class T>
std::size_t free_support_barycenter_workspace_size(const free_support_barycenter_params& params, index_t k, index_t n,
                                                   index_t d) {
  cuda_detail::check_device_element_type<T>();
  (void)params;  // the size depends on the shapes only; params is there for the one signature shape
  MOECOMP_EXPECTS(k >= 0 && n >= 0 && d >= 0, "free_support_barycenter_workspace_size: shapes must be non-negative, got k ",
                  k, ", n ", n, ", d ", d);
  return cuda_detail::make_barycenter_plan<T>("free_support_barycenter", k, n, d).bytes;
}

/// Uniform path on the device. measures: a stack of k clouds of n x d, stacked at its row stride (cloud j
/// is rows [j n, (j + 1) n) of one (k n) x d matrix, as a C-contiguous k x n x d array is); weights: k host
/// doubles (>= 0, summing to 1 within 1e-6); init: n x d (may be the same memory as barycenter);
/// barycenter: n x d; permutations: k x n (row i of cloud j goes to barycenter row permutations(j, i)).
/// params.assignment tunes the auctions (maximize and warm_start are set by the barycenter itself).
/// measures and init: const or mutable device views of T.
template <class T, class UM, class UI,
          std::enable_if_t<std::is_same_v<std::remove_const_t<UM>, T> && std::is_same_v<std::remove_const_t<UI>, T>,
                           int> = 0>
free_support_barycenter_device_result free_support_barycenter(
    const cuda_context& ctx, const free_support_barycenter_params& params,
    matrix_stack_view<UM, device_memory> measures, vector_view<const double> weights,
    matrix_view<UI, device_memory> init, matrix_view<T, device_memory> barycenter,
    matrix_view<index_t, device_memory> permutations, vector_view<std::byte, device_memory> workspace) {
  cuda_detail::check_device_element_type<T>();
  constexpr const char* function = "free_support_barycenter";
  const index_t k = measures.count();
  cuda_detail::check_barycenter_arguments(function, params, measures, init, barycenter, permutations, weights.size());
  const std::vector<double> w = cuda_detail::checked_weights(function, weights);
  cuda_detail::check_auction_params(function, params.assignment);
  cuda_detail::check_workspace(function,
                               free_support_barycenter_workspace_size<T>(params, k, init.rows(), init.cols()), workspace);
  const matrix_view<const T, device_memory> stacked = measures.as_const().as_matrix();
  return cuda_detail::run_barycenter<T>(ctx, params, params.assignment, stacked, k, w, init, barycenter, permutations,
                                        workspace.data());
}

/// As above, with the workspace from ctx's allocator.
template <class T, class UM, class UI,
          std::enable_if_t<std::is_same_v<std::remove_const_t<UM>, T> && std::is_same_v<std::remove_const_t<UI>, T>,
                           int> = 0>
free_support_barycenter_device_result free_support_barycenter(
    const cuda_context& ctx, const free_support_barycenter_params& params,
    matrix_stack_view<UM, device_memory> measures, vector_view<const double> weights,
    matrix_view<UI, device_memory> init, matrix_view<T, device_memory> barycenter,
    matrix_view<index_t, device_memory> permutations) {
  cuda_detail::check_device_element_type<T>();
  constexpr const char* function = "free_support_barycenter";
  cuda_detail::check_barycenter_arguments(function, params, measures, init, barycenter, permutations, weights.size());
  (void)cuda_detail::checked_weights(function, weights);
  const cuda_detail::scoped_workspace workspace(
      ctx, free_support_barycenter_workspace_size<T>(params, measures.count(), init.rows(), init.cols()));
  return free_support_barycenter(ctx, params, measures, weights, init, barycenter, permutations, workspace.view());
}

/// Uniform weights w_j = 1/k.
template <class T, class UM, class UI,
          std::enable_if_t<std::is_same_v<std::remove_const_t<UM>, T> && std::is_same_v<std::remove_const_t<UI>, T>,
                           int> = 0>
free_support_barycenter_device_result free_support_barycenter(
    const cuda_context& ctx, const free_support_barycenter_params& params,
    matrix_stack_view<UM, device_memory> measures, matrix_view<UI, device_memory> init,
    matrix_view<T, device_memory> barycenter, matrix_view<index_t, device_memory> permutations) {
  const index_t k = measures.count();
  MOECOMP_EXPECTS(k >= 1, "free_support_barycenter: measures must hold at least one cloud, got 0");
  const std::vector<double> w(static_cast<std::size_t>(k), 1.0 / static_cast<double>(k));
  return free_support_barycenter(ctx, params, measures, vector_view<const double>(w.data(), k), init, barycenter,
                                 permutations);
}

}  // namespace ot
MOECOMP_NAMESPACE_END
