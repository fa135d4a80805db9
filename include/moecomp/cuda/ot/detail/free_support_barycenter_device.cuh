#pragma once
// Device implementation of the uniform free-support barycenter (<moecomp/cuda/ot/free_support_barycenter.cuh>).
// The host's iteration (<moecomp/ot/detail/free_support_uniform.hpp>) with the exact assignment replaced
// by the device auction:
//   repeat: for every cloud j, cross_j = X_j B^T (cuBLAS GEMM in T) and an auction maximising the cross
//           term (the norms do not depend on the permutation), warm-started from cloud j's prices of the
//           previous iteration; stop if no permutation changed; B <- sum_j w_j x_{j, source_j(l)} (gather
//           kernel, sums over j in order in double); stop if ||B_new - B||_F^2 <= tolerance;
//   then one more round of auctions when the last update moved B, and the objective.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/detail/block_reduce.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/kernel.cuh>
#include <moecomp/cuda/core/detail/cublas.cuh>
#include <moecomp/cuda/ot/detail/auction_device.cuh>
#include <moecomp/cuda/ot/detail/ot_device_common.cuh>
#include <moecomp/ot/free_support_barycenter_types.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <moecomp/core/error.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/device_buffer.cuh>
#include <moecomp/ot/linear_assignment_types.hpp>
#include <moecomp/ot/detail/free_support_checks.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace cuda_detail {

inline constexpr int barycenter_block = 256;

/// changed += number of i with current[i] != previous[i]; then previous = current.
MOECOMP_KERNEL void count_changes_kernel(const index_t* current, index_t current_ld, index_t* previous, int k, int n,
                                         int* changed) {
  const index_t total = static_cast<index_t>(k) * n;
  int local = 0;
  for (index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t j = e / n, i = e - j * n;
    const index_t value = current[j * current_ld + i];
    if (value != previous[e]) ++local;
    previous[e] = value;
  }
  if (local != 0) atomicAdd(changed, local);  // an integer count: the total does not depend on the order
}

/// source[j n + P(j, i)] = i.
MOECOMP_KERNEL void invert_permutations_kernel(const index_t* permutations, index_t ld, int k, int n, int* source) {
  const index_t total = static_cast<index_t>(k) * n;
  for (index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t j = e / n, i = e - j * n;
    source[j * n + permutations[j * ld + i]] = static_cast<int>(i);
  }
}

template <class T>
struct update_args {
  const T* measures;  // cloud j row i at measures[(j n + i) * measures_ld]
  index_t measures_ld;
  const int* source;
  const double* weights;  // k
  const T* current;       // n x d, row stride d
  T* next;
  double* row_displacement;  // n
  int k, n;
  index_t d;
};

/// One block per barycenter row l: next(l) = sum_j w_j x_{j, source_j(l)} (j in order, in double), and
/// ||next(l) - current(l)||^2 through block_sum.
template <class T>
MOECOMP_KERNEL void __launch_bounds__(barycenter_block) barycenter_update_kernel(const update_args<T> args) {
  __shared__ double scratch[moecomp::detail::block_sum_scratch<barycenter_block>];
  for (index_t l = blockIdx.x; l < args.n; l += gridDim.x) {
    double moved = 0.0;
    for (index_t c = threadIdx.x; c < args.d; c += barycenter_block) {
      double acc = 0.0;
      for (int j = 0; j < args.k; ++j) {
        const index_t row = static_cast<index_t>(j) * args.n + args.source[static_cast<index_t>(j) * args.n + l];
        acc += args.weights[j] * static_cast<double>(args.measures[row * args.measures_ld + c]);
      }
      const T value = static_cast<T>(acc);
      args.next[l * args.d + c] = value;
      const double delta = static_cast<double>(value) - static_cast<double>(args.current[l * args.d + c]);
      moved += delta * delta;
    }
    moved = moecomp::detail::block_sum<barycenter_block>(moved, scratch);
    if (threadIdx.x == 0) args.row_displacement[l] = moved;
  }
}

/// One block per (cloud j, row i): ||x_ji - b_P(j,i)||^2 in double.
template <class T>
MOECOMP_KERNEL void __launch_bounds__(barycenter_block)
    matched_distance_kernel(const T* measures, index_t measures_ld, const index_t* permutations, index_t perm_ld,
                            const T* barycenter, int k, int n, index_t d, double* per_row) {
  __shared__ double scratch[moecomp::detail::block_sum_scratch<barycenter_block>];
  const index_t total = static_cast<index_t>(k) * n;
  for (index_t e = blockIdx.x; e < total; e += gridDim.x) {
    const index_t j = e / n, i = e - j * n;
    const T* x = measures + e * measures_ld;
    const T* b = barycenter + permutations[j * perm_ld + i] * d;
    double sum = 0.0;
    for (index_t c = threadIdx.x; c < d; c += barycenter_block) {
      const double delta = static_cast<double>(x[c]) - static_cast<double>(b[c]);
      sum += delta * delta;
    }
    sum = moecomp::detail::block_sum<barycenter_block>(sum, scratch);
    if (threadIdx.x == 0) per_row[e] = sum;
  }
}

/// Block g sums values[g * count, (g + 1) * count) into out[g] (fixed order through block_sum).
MOECOMP_KERNEL void __launch_bounds__(barycenter_block)
    segment_sums_kernel(const double* values, index_t count, double* out) {
  __shared__ double scratch[moecomp::detail::block_sum_scratch<barycenter_block>];
  const double* segment = values + static_cast<index_t>(blockIdx.x) * count;
  double sum = 0.0;
  for (index_t e = threadIdx.x; e < count; e += barycenter_block) sum += segment[e];
  sum = moecomp::detail::block_sum<barycenter_block>(sum, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = sum;
}

/// Workspace of the device barycenter.
struct barycenter_plan {
  std::size_t cross = 0, current = 0, next = 0, prices = 0, previous = 0, source = 0, row_displacement = 0;
  std::size_t per_row = 0, per_cloud = 0, weights = 0, changed = 0;
  auction_plan auction;
  std::size_t bytes = 0;
};

template <class T>
barycenter_plan make_barycenter_plan(const char* function, index_t k, index_t n, index_t d) {
  barycenter_plan plan;
  workspace_layout layout(function);
  MOECOMP_EXPECTS(n <= std::numeric_limits<index_t>::max() / std::max<index_t>(n, d), function, ": ", n, " points of ",
                  d, " coordinates overflow the index type");
  plan.cross = layout.take(n * n, sizeof(T));
  plan.current = layout.take(n * d, sizeof(T));
  plan.next = layout.take(n * d, sizeof(T));
  plan.prices = layout.take(k * n, sizeof(double));
  plan.previous = layout.take(k * n, sizeof(index_t));
  plan.source = layout.take(k * n, sizeof(int));
  plan.row_displacement = layout.take(n, sizeof(double));
  plan.per_row = layout.take(k * n, sizeof(double));
  plan.per_cloud = layout.take(k + 1, sizeof(double));
  plan.weights = layout.take(k, sizeof(double));
  plan.changed = layout.take(1, sizeof(int));
  plan.auction = make_auction_plan(function, n, /*own_prices=*/false, layout);
  plan.bytes = layout.total();
  return plan;
}


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
  fill_zero_kernel<<<grid_for(k * n, auction_block, auction_max_grid), auction_block, 0, ctx.stream>>>(prices, static_cast<int>(k * n));
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
  const unsigned element_grid = grid_for(k * n, auction_block, auction_max_grid);
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
}  // namespace ot
MOECOMP_NAMESPACE_END
