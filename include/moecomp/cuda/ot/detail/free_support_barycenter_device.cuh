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

}  // namespace cuda_detail
}  // namespace ot
MOECOMP_NAMESPACE_END
