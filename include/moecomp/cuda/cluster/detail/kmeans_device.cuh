#pragma once
// Device implementation of k-means (<moecomp/cuda/cluster/kmeans.cuh>): the host's Lloyd iteration
// (<moecomp/cluster/detail/kmeans_host.hpp>) with every pass over the data on the GPU.
//
//   assignment: per row tile, G = X C^T by cuBLAS, then one warp per row takes the argmin of
//               ||c_j||^2 - 2 G_ij with cub::WarpReduce under the shared tie rule (kmeans_rules.hpp), and
//               counts the labels that changed;
//   update:     cub::DeviceHistogram counts the rows per cluster, cub::DeviceScan gives the offsets and
//               cub::DeviceRadixSort (stable) lists each cluster's rows in increasing row order; one block
//               per (cluster, column block) then sums its rows in that order in double, as the host does,
//               and writes the new centre and its share of the squared shift;
//   re-seeding: the rows' squared distances to their centres (one thread per row, in column order, as the
//               host), sorted descending by cub::DeviceRadixSort (stable: ties to the lowest row);
//   balanced:   the costs are formed on the device; by default the exact transportation problem is solved on
//               the host by the network simplex (kmeans_transport.hpp) and the labels go back up; with
//               kmeans_balanced_solver::device_auction and equal sizes it stays on the device: the n x n cost
//               of each centre's column replicated c = n / k times is gathered, solved by the device auction
//               (<moecomp/cuda/ot/auction_assignment.cuh>), the columns mapped back to centres (q / c), and
//               the transportation dual built from the prices (kmeans_balanced_auction.hpp);
//   k-means++:  the distances and potentials on the device (cuBLAS, cub::DeviceScan,
//               cub::DeviceSegmentedReduce), the draws on the host from the same generator streams.
// The host reads back a few scalars per iteration (the changed count, the cluster sizes, the shift), so a
// fit synchronises the stream once per iteration.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/cluster/kmeans_types.hpp>
#include <moecomp/cluster/detail/kmeans_rules.hpp>
#include <moecomp/cluster/detail/kmeans_transport.hpp>
#include <moecomp/cluster/detail/kmeans_balanced_auction.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/kernel.cuh>
#include <moecomp/cuda/core/detail/block_reduce.cuh>
#include <moecomp/cuda/core/detail/cublas.cuh>
#include <moecomp/cuda/core/detail/workspace.cuh>
#include <moecomp/cuda/ot/auction_assignment.cuh>

#include <cub/device/device_histogram.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {
namespace cuda_detail {

using namespace moecomp::detail;  // the shared device layer: cuda/core/detail, core/detail
using cluster::detail::assignment_score;
using cluster::detail::beats;
using cluster::detail::centre_coordinate;
using cluster::detail::gemm_form_distance;
using cluster::detail::lowest_score_then_index;
using cluster::detail::scored_index;
using cluster::detail::size_bounded_transport;

inline constexpr int kmeans_block = 256;
inline constexpr int kmeans_warps_per_block = kmeans_block / 32;
/// Elements of the GEMM tile (rows x max(k, trials)): bounds the workspace whatever n is.
inline constexpr index_t kmeans_tile_elements = index_t(1) << 24;

/// The shapes of one fit and where its pieces lie in the workspace.
struct kmeans_plan {
  index_t n = 0, d = 0, k = 0, trials = 0, tile_rows = 0, column_blocks = 0;
  int sort_bits = 1;
  bool plus_plus = false, bounded = false;
  bool auction = false;  // the equal-size step by the device auction (kmeans_balanced_auction.hpp)
  index_t copies = 0;    // with auction: c = n / k, the copies of each centre's column
  std::size_t x_norms = 0, center_norms = 0, centers = 0, next_centers = 0, best_centers = 0, tile = 0;
  std::size_t labels = 0, best_labels = 0, keys = 0, sorted_keys = 0, row_ids = 0, sorted_rows = 0;
  std::size_t counts = 0, offsets = 0, shift_parts = 0, row_values = 0, sorted_values = 0;
  std::size_t cumulative = 0, trial_dist = 0, weighted = 0, candidates = 0, candidate_norms = 0, candidate_ids = 0;
  std::size_t targets = 0, segment_offsets = 0, potentials = 0, bounded_costs = 0, reseed_pairs = 0;
  std::size_t column_stats = 0, cub_temp = 0, cub_temp_bytes = 0, bytes = 0;
  std::size_t replicated = 0, prices = 0, columns = 0, centre_potentials = 0, dual_sum = 0;
  std::size_t auction_workspace = 0, auction_workspace_bytes = 0;
};

/// Bytes of CUB temporary storage the fit's calls need (the largest of them): a query, no launch.
template <class T>
std::size_t cub_temp_bytes(index_t n, index_t k, index_t trials, int sort_bits) {
  const int count = static_cast<int>(n);
  std::size_t bytes = 0, need = 0;
  MOECOMP_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, need, static_cast<const int*>(nullptr),
                                                   static_cast<int*>(nullptr), static_cast<const int*>(nullptr),
                                                   static_cast<int*>(nullptr), count, 0, sort_bits));
  bytes = std::max(bytes, need);
  MOECOMP_CUDA_TRY(cub::DeviceRadixSort::SortPairsDescending(nullptr, need, static_cast<const double*>(nullptr),
                                                             static_cast<double*>(nullptr),
                                                             static_cast<const int*>(nullptr),
                                                             static_cast<int*>(nullptr), count));
  bytes = std::max(bytes, need);
  MOECOMP_CUDA_TRY(cub::DeviceHistogram::HistogramEven(nullptr, need, static_cast<const int*>(nullptr),
                                                       static_cast<int*>(nullptr), static_cast<int>(k + 1), 0,
                                                       static_cast<int>(k), count));
  bytes = std::max(bytes, need);
  MOECOMP_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, need, static_cast<const int*>(nullptr),
                                                 static_cast<int*>(nullptr), static_cast<int>(k)));
  bytes = std::max(bytes, need);
  MOECOMP_CUDA_TRY(cub::DeviceReduce::Sum(nullptr, need, static_cast<const double*>(nullptr),
                                          static_cast<double*>(nullptr), count));
  bytes = std::max(bytes, need);
  if (trials > 0) {
    MOECOMP_CUDA_TRY(cub::DeviceScan::InclusiveSum(nullptr, need, static_cast<const double*>(nullptr),
                                                   static_cast<double*>(nullptr), count));
    bytes = std::max(bytes, need);
    MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::Sum(nullptr, need, static_cast<const double*>(nullptr),
                                                     static_cast<double*>(nullptr), static_cast<int>(trials),
                                                     static_cast<const int*>(nullptr),
                                                     static_cast<const int*>(nullptr) + 1));
    bytes = std::max(bytes, need);
  }
  return bytes;
}

template <class T>
kmeans_plan make_kmeans_plan(const char* function, const kmeans_params& params, index_t n, index_t d) {
  kmeans_plan p;
  p.n = n;
  p.d = d;
  p.k = params.clusters;
  MOECOMP_EXPECTS(n <= static_cast<index_t>(INT_MAX) && d <= static_cast<index_t>(INT_MAX), function,
                  ": the rows and columns of x must be at most ", INT_MAX, " on the device, got ",
                  moecomp::detail::shape_string(n, d));
  p.plus_plus = params.init == kmeans_init::kmeans_plus_plus;
  p.bounded = has_size_bounds(params);
  p.trials = p.plus_plus ? resolved_local_trials(params) : 0;
  const index_t width = std::max<index_t>(p.k, p.trials);
  p.tile_rows = std::max<index_t>(1, std::min<index_t>(n, kmeans_tile_elements / std::max<index_t>(1, width)));
  p.column_blocks = ceil_div(d, kmeans_block);
  while ((index_t(1) << p.sort_bits) < p.k) ++p.sort_bits;
  workspace_layout layout(function);
  p.x_norms = layout.take(n, sizeof(T));
  p.center_norms = layout.take(p.k, sizeof(T));
  p.centers = layout.take(p.k * d, sizeof(T));
  p.next_centers = layout.take(p.k * d, sizeof(T));
  p.best_centers = layout.take(p.k * d, sizeof(T));
  p.tile = layout.take(p.tile_rows * width, sizeof(T));
  p.labels = layout.take(n, sizeof(std::int64_t));
  p.best_labels = layout.take(n, sizeof(std::int64_t));
  p.keys = layout.take(n, sizeof(int));
  p.sorted_keys = layout.take(n, sizeof(int));
  p.row_ids = layout.take(n, sizeof(int));
  p.sorted_rows = layout.take(n, sizeof(int));
  p.counts = layout.take(p.k + 1, sizeof(int));  // the sizes, then the changed-label count
  p.offsets = layout.take(p.k, sizeof(int));
  p.shift_parts = layout.take(p.k * p.column_blocks, sizeof(double));
  p.row_values = layout.take(n, sizeof(double));
  p.sorted_values = layout.take(n, sizeof(double));
  p.reseed_pairs = layout.take(2 * p.k, sizeof(int));
  p.column_stats = layout.take(d, sizeof(double));
  if (p.plus_plus) {
    p.cumulative = layout.take(n, sizeof(double));
    p.trial_dist = layout.take(p.trials * n, sizeof(double));
    p.weighted = layout.take(p.trials * n, sizeof(double));
    p.candidates = layout.take(p.trials * d, sizeof(T));
    p.candidate_norms = layout.take(p.trials, sizeof(T));
    p.candidate_ids = layout.take(p.trials, sizeof(int));
    p.targets = layout.take(p.trials, sizeof(double));
    p.segment_offsets = layout.take(p.trials + 1, sizeof(int));
    p.potentials = layout.take(p.trials, sizeof(double));
  }
  if (p.bounded) p.bounded_costs = layout.take(n * p.k, sizeof(double));
  p.auction = p.bounded && cluster::detail::uses_balanced_auction(params, n);
  if (p.auction) {
    p.copies = n / p.k;
    p.replicated = layout.take(n * n, sizeof(double));  // <= balanced_auction_max_cost_bytes
    p.prices = layout.take(n, sizeof(double));
    p.columns = layout.take(n, sizeof(index_t));
    p.centre_potentials = layout.take(p.k, sizeof(double));
    p.dual_sum = layout.take(1, sizeof(double));
    p.auction_workspace_bytes = ot::auction_assignment_workspace_size<double>(ot::auction_params{}, n, n);
    p.auction_workspace = layout.take(static_cast<index_t>(p.auction_workspace_bytes), 1);
  }
  p.cub_temp_bytes = cub_temp_bytes<T>(n, p.k, p.trials, p.sort_bits);
  p.cub_temp = layout.take(static_cast<index_t>(p.cub_temp_bytes), 1);
  p.bytes = layout.total();
  return p;
}

/// The input of one fit on the device.
template <class T>
struct device_data {
  const T* x;
  index_t x_ld;
  const T* weights;  // null: unit weights
  index_t weights_stride;
  index_t n, d, k;
};

template <class T>
__device__ __forceinline__ double weight_of(const device_data<T>& data, index_t i) {
  return data.weights ? static_cast<double>(data.weights[i * data.weights_stride]) : 1.0;
}

/// out[i] = ||row i||^2, summed in double in column order (one thread per row, as the host), rounded to T.
template <class T>
MOECOMP_KERNEL void __launch_bounds__(kmeans_block)
    squared_row_norms_kernel(const T* m, index_t ld, index_t rows, index_t cols, T* out) {
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const T* r = m + i * ld;
    double s = 0;
    for (index_t c = 0; c < cols; ++c) s += static_cast<double>(r[c]) * static_cast<double>(r[c]);
    out[i] = static_cast<T>(s);
  }
}

/// One warp per row of the tile: the argmin over the centres of assignment_score(-2 G_ij, ||c_j||^2) under
/// the shared tie rule; writes the label (int64 and int) and counts the labels that changed.
template <class T>
MOECOMP_KERNEL void __launch_bounds__(kmeans_block)
    argmin_kernel(const T* tile, index_t rows, index_t k, const T* center_norms, index_t first, std::int64_t* labels,
                  int* keys, int* changed) {
  using warp_reduce = cub::WarpReduce<scored_index<T>>;
  __shared__ typename warp_reduce::TempStorage storage[kmeans_warps_per_block];
  __shared__ int block_changed;
  if (threadIdx.x == 0) block_changed = 0;
  __syncthreads();
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const index_t warps_total = static_cast<index_t>(gridDim.x) * kmeans_warps_per_block;
  for (index_t r = static_cast<index_t>(blockIdx.x) * kmeans_warps_per_block + warp; r < rows; r += warps_total) {
    scored_index<T> best{static_cast<T>(INFINITY), k};  // <cmath>'s constant: usable in device code
    for (index_t j = lane; j < k; j += 32) {
      const T score = assignment_score(T(-2) * tile[r * k + j], center_norms[j]);
      if (beats(score, j, best.score, best.index)) best = {score, j};
    }
    const scored_index<T> winner = warp_reduce(storage[warp]).Reduce(best, lowest_score_then_index{});
    if (lane == 0) {
      // A row whose scores are all NaN (non-finite x) goes to cluster 0; the inertia then shows the NaN.
      const index_t label = winner.index < k ? winner.index : 0;
      const index_t i = first + r;
      if (labels[i] != label) atomicAdd(&block_changed, 1);  // an integer count: order does not matter
      labels[i] = label;
      keys[i] = static_cast<int>(label);
    }
    __syncwarp();
  }
  __syncthreads();
  if (threadIdx.x == 0 && block_changed != 0) atomicAdd(changed, block_changed);
}

/// rows[i] = i.
MOECOMP_KERNEL void iota_kernel(int* rows, index_t n) {
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<index_t>(gridDim.x) * blockDim.x)
    rows[i] = static_cast<int>(i);
}

/// One block per (cluster j, column block): the weighted sum of the cluster's rows (listed in increasing row
/// order from offsets[j]), in double and in that order as the host sums, the new centre coordinate, and the
/// block's part of the squared shift. The cluster weight is summed in the same order by every thread.
/// Re-seeded rows: pairs (row, cluster) whose row moves from its cluster to an empty one (host's rule).
template <class T>
MOECOMP_KERNEL void __launch_bounds__(kmeans_block)
    update_centres_kernel(const device_data<T> data, const int* sorted_rows, const int* offsets, const int* counts,
                          const T* centers, T* next_centers, double* shift_parts, index_t column_blocks) {
  __shared__ double scratch[block_sum_scratch<kmeans_block>];
  const index_t j = blockIdx.x, b = blockIdx.y;
  const index_t c = b * kmeans_block + threadIdx.x;
  const int begin = offsets[j], end = begin + counts[j];
  double sum = 0, weight = 0;
  for (int p = begin; p < end; ++p) {
    const index_t i = sorted_rows[p];
    const double w = weight_of(data, i);
    weight += w;
    if (c < data.d) sum += w * static_cast<double>(data.x[i * data.x_ld + c]);
  }
  double moved = 0;
  if (c < data.d) {
    const T updated = centre_coordinate<T>(sum, weight);
    const double delta = static_cast<double>(updated) - static_cast<double>(centers[j * data.d + c]);
    moved = delta * delta;
    next_centers[j * data.d + c] = updated;
  }
  moved = block_sum<kmeans_block>(moved, scratch);
  if (threadIdx.x == 0) shift_parts[j * column_blocks + b] = moved;
}

/// out[i] = w_i ||x_i - c_label(i)||^2 (weighted) or the plain squared distance, in double, column order.
template <class T>
MOECOMP_KERNEL void __launch_bounds__(kmeans_block)
    row_distance_kernel(const device_data<T> data, const T* centers, const std::int64_t* labels, bool weighted,
                        double* out) {
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < data.n;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const T* x = data.x + i * data.x_ld;
    const T* c = centers + labels[i] * data.d;
    double s = 0;
    for (index_t col = 0; col < data.d; ++col) {
      const double t = static_cast<double>(x[col]) - static_cast<double>(c[col]);
      s += t * t;
    }
    out[i] = weighted ? weight_of(data, i) * s : s;
  }
}

/// keys[pairs[2 e]] = pairs[2 e + 1] for the `count` re-seeded rows.
MOECOMP_KERNEL void move_rows_kernel(const int* pairs, int count, int* keys) {
  const int e = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (e < count) keys[pairs[2 * e]] = pairs[2 * e + 1];
}

/// The balanced step's costs: cost(i, j) = w_i gemm_form_distance(-2 G_ij, ||x_i||^2, ||c_j||^2).
template <class T>
MOECOMP_KERNEL void __launch_bounds__(kmeans_block)
    bounded_cost_kernel(const device_data<T> data, const T* tile, index_t rows, index_t first, const T* x_norms,
                        const T* center_norms, double* cost) {
  const index_t total = rows * data.k;
  for (index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t r = e / data.k, j = e - r * data.k, i = first + r;
    cost[i * data.k + j] = weight_of(data, i) * gemm_form_distance(T(-2) * tile[e], x_norms[i], center_norms[j]);
  }
}

/// The equal-size step's n x n assignment cost: entry (i, q) = cost(i, q / c), each centre's column
/// replicated c times (kmeans_balanced_auction.hpp).
MOECOMP_KERNEL void __launch_bounds__(kmeans_block)
    replicate_cost_kernel(const double* cost, index_t n, index_t k, index_t copies, double* out) {
  const index_t total = n * n;
  for (index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t i = e / n, q = e - i * n;
    out[e] = cluster::detail::replicated_cost(cost, k, copies, i, q);
  }
}

/// The auction's columns to labels (q / c), as int64 and int keys; counts the labels that changed.
MOECOMP_KERNEL void auction_labels_kernel(const index_t* columns, index_t n, index_t copies, std::int64_t* labels,
                                          int* keys, int* changed) {
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t label = cluster::detail::replicated_centre(columns[i], copies);
    if (labels[i] != label) atomicAdd(changed, 1);  // an integer count: order does not matter
    labels[i] = label;
    keys[i] = static_cast<int>(label);
  }
}

/// v_j = -(mean price of centre j's copies), one thread per centre (the shared rule, copy order).
MOECOMP_KERNEL void centre_potentials_kernel(const double* prices, index_t k, index_t copies, double* v) {
  for (index_t j = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < k;
       j += static_cast<index_t>(gridDim.x) * blockDim.x)
    v[j] = cluster::detail::centre_potential(prices, j, copies);
}

/// u_i = min_j (C(i, j) - v_j), one thread per row (the shared rule, centre order).
MOECOMP_KERNEL void row_potentials_kernel(const double* cost, index_t n, index_t k, const double* v, double* u) {
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<index_t>(gridDim.x) * blockDim.x)
    u[i] = cluster::detail::row_potential(cost + i * k, v, k);
}

/// k-means++: dist(t, i) = min(closest_i, gemm_form_distance(...)) for the tile's rows and every candidate,
/// and weighted(t, i) = w_i dist(t, i); with `first_centre` (one point, no closest yet) closest_i itself.
template <class T>
MOECOMP_KERNEL void __launch_bounds__(kmeans_block)
    candidate_distance_kernel(const device_data<T> data, const T* tile, index_t rows, index_t first, index_t count,
                              const T* x_norms, const T* point_norms, const double* closest, bool first_centre,
                              double* dist, double* weighted) {
  const index_t total = rows * count;
  for (index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t r = e / count, t = e - r * count, i = first + r;
    double v = gemm_form_distance(T(-2) * tile[e], x_norms[i], point_norms[t]);
    if (!first_centre && closest[i] < v) v = closest[i];
    dist[t * data.n + i] = v;
    weighted[t * data.n + i] = weight_of(data, i) * v;
  }
}

/// ids[t] = searchsorted(cumulative, targets[t]) (side left), clipped to n - 1, as scikit-learn.
MOECOMP_KERNEL void draw_candidates_kernel(const double* cumulative, index_t n, const double* targets, index_t trials,
                                           int* ids) {
  const index_t t = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= trials) return;
  index_t lo = 0, hi = n;
  const double target = targets[t];
  while (lo < hi) {
    const index_t mid = lo + (hi - lo) / 2;
    if (cumulative[mid] < target) lo = mid + 1;
    else hi = mid;
  }
  ids[t] = static_cast<int>(lo < n ? lo : n - 1);
}

/// out row r = x row ids[r] (out: count x d, contiguous).
template <class T>
MOECOMP_KERNEL void gather_rows_kernel(const T* x, index_t ld, const int* ids, index_t count, index_t d, T* out) {
  const index_t total = count * d;
  for (index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t r = e / d, c = e - r * d;
    out[e] = x[static_cast<index_t>(ids[r]) * ld + c];
  }
}

/// dst[i * stride] = src[i] with a type conversion (labels and sizes into the caller's views).
template <class To, class From>
MOECOMP_KERNEL void strided_convert_kernel(const From* src, index_t count, To* dst, index_t stride) {
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<index_t>(gridDim.x) * blockDim.x)
    dst[i * stride] = static_cast<To>(src[i]);
}

/// Column variances (population): one thread per column, the rows in order, two passes, in double, as the
/// host's scaled_tolerance.
template <class T>
MOECOMP_KERNEL void __launch_bounds__(kmeans_block)
    column_variance_kernel(const T* x, index_t ld, index_t n, index_t d, double* out) {
  for (index_t c = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < d;
       c += static_cast<index_t>(gridDim.x) * blockDim.x) {
    double mean = 0;
    for (index_t i = 0; i < n; ++i) mean += static_cast<double>(x[i * ld + c]);
    mean /= static_cast<double>(n);
    double var = 0;
    for (index_t i = 0; i < n; ++i) {
      const double t = static_cast<double>(x[i * ld + c]) - mean;
      var += t * t;
    }
    out[c] = var / static_cast<double>(n);
  }
}

/// One fit: the plan, the workspace pieces, the cuBLAS session and the pinned read-backs.
template <class T>
class device_kmeans {
 public:
  device_kmeans(const cuda_context& ctx, const kmeans_params& params, const device_data<T>& data,
                const kmeans_plan& plan, std::byte* workspace)
      : ctx_(ctx),
        params_(params),
        data_(data),
        plan_(plan),
        base_(aligned_base(workspace)),
        blas_(ctx),
        pinned_ints_(2 * plan.k + 1),
        pinned_doubles_(std::max<index_t>(std::max<index_t>(plan.k * plan.column_blocks, plan.k + 1),
                                          std::max<index_t>(plan.trials, 1))) {}

  kmeans_result fit(matrix_view<T, device_memory> centers, vector_view<std::int64_t, device_memory> labels,
                    vector_view<index_t, device_memory> sizes) {
    const index_t n = plan_.n, d = plan_.d, k = plan_.k;
    squared_row_norms_kernel<T><<<grid_for(n, kmeans_block), kmeans_block, 0, ctx_.stream>>>(data_.x, data_.x_ld, n, d,
                                                                                piece<T>(plan_.x_norms));
    MOECOMP_CUDA_TRY(cudaGetLastError());
    iota_kernel<<<grid_for(n, kmeans_block), kmeans_block, 0, ctx_.stream>>>(piece<int>(plan_.row_ids), n);
    MOECOMP_CUDA_TRY(cudaGetLastError());
    scaled_tolerance_ = params_.tolerance == 0 ? 0.0 : params_.tolerance * mean_column_variance();
    if (plan_.bounded && !plan_.auction) {
      transport_.emplace(host_, n, k, params_.size_min, params_.size_max > 0 ? params_.size_max : n);
      host_labels_.assign(static_cast<std::size_t>(n), -1);
    }
    kmeans_result best;
    for (index_t run = 0; run < params_.restarts; ++run) {
      random_generator rng(params_.seed, static_cast<std::uint64_t>(run));
      switch (params_.init) {
        case kmeans_init::given:
          copy_rows_async<T>(ctx_, piece<T>(plan_.centers), d, centers.data(), centers.row_stride(), d, k,
                             cudaMemcpyDeviceToDevice);
          break;
        case kmeans_init::random_rows: random_rows_init(rng); break;
        case kmeans_init::kmeans_plus_plus: plus_plus_init(rng); break;
      }
      kmeans_result r = lloyd_run();
      r.best_run = run;
      if (run == 0 || r.inertia < best.inertia) {
        best = r;
        copy_async(piece<T>(plan_.best_centers), piece<T>(plan_.centers), k * d);
        copy_async(piece<std::int64_t>(plan_.best_labels), piece<std::int64_t>(plan_.labels), n);
      }
    }
    copy_rows_async<T>(ctx_, centers.data(), centers.row_stride(), piece<T>(plan_.best_centers), d, d, k,
                       cudaMemcpyDeviceToDevice);
    strided_convert_kernel<std::int64_t, std::int64_t><<<grid_for(n, kmeans_block), kmeans_block, 0, ctx_.stream>>>(
        piece<std::int64_t>(plan_.best_labels), n, labels.data(), labels.stride());
    MOECOMP_CUDA_TRY(cudaGetLastError());
    labels_to_keys(piece<std::int64_t>(plan_.best_labels));
    histogram();
    strided_convert_kernel<index_t, int><<<grid_for(k, kmeans_block), kmeans_block, 0, ctx_.stream>>>(piece<int>(plan_.counts), k,
                                                                                         sizes.data(), sizes.stride());
    MOECOMP_CUDA_TRY(cudaGetLastError());
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
    return best;
  }

 private:
  template <class P>
  P* piece(std::size_t offset) const {
    return at<P>(base_, offset);
  }

  template <class P>
  void copy_async(P* dst, const P* src, index_t count) {
    MOECOMP_CUDA_TRY(
        cudaMemcpyAsync(dst, src, sizeof(P) * static_cast<std::size_t>(count), cudaMemcpyDeviceToDevice, ctx_.stream));
  }

  std::byte* cub_temp() const { return piece<std::byte>(plan_.cub_temp); }

  double mean_column_variance() {
    const index_t d = plan_.d;
    column_variance_kernel<T><<<grid_for(d, kmeans_block), kmeans_block, 0, ctx_.stream>>>(data_.x, data_.x_ld, plan_.n, d,
                                                                              piece<double>(plan_.column_stats));
    MOECOMP_CUDA_TRY(cudaGetLastError());
    std::vector<double> host(static_cast<std::size_t>(d));
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(host.data(), piece<double>(plan_.column_stats), sizeof(double) * d,
                                     cudaMemcpyDeviceToHost, ctx_.stream));
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
    double total = 0;
    for (double v : host) total += v;
    return total / static_cast<double>(d);
  }

  void labels_to_keys(const std::int64_t* labels) {
    strided_convert_kernel<int, std::int64_t><<<grid_for(plan_.n, kmeans_block), kmeans_block, 0, ctx_.stream>>>(
        labels, plan_.n, piece<int>(plan_.keys), 1);
    MOECOMP_CUDA_TRY(cudaGetLastError());
  }

  /// counts = rows per cluster of the keys.
  void histogram() {
    std::size_t bytes = plan_.cub_temp_bytes;
    MOECOMP_CUDA_TRY(cub::DeviceHistogram::HistogramEven(cub_temp(), bytes, piece<int>(plan_.keys),
                                                         piece<int>(plan_.counts), static_cast<int>(plan_.k + 1), 0,
                                                         static_cast<int>(plan_.k), static_cast<int>(plan_.n),
                                                         ctx_.stream));
  }

  void center_norms() {
    squared_row_norms_kernel<T><<<grid_for(plan_.k, kmeans_block), kmeans_block, 0, ctx_.stream>>>(
        piece<T>(plan_.centers), plan_.d, plan_.k, plan_.d, piece<T>(plan_.center_norms));
    MOECOMP_CUDA_TRY(cudaGetLastError());
  }

  /// G = X[first : first + rows] P^T into the tile (rows x count).
  void tile_gemm(index_t first, index_t rows, const T* points, index_t count) {
    gemm_abt(blas_.handle(), rows, count, plan_.d, data_.x + first * data_.x_ld, data_.x_ld, points, plan_.d,
             piece<T>(plan_.tile), count);
  }

  /// The assignment step without bounds: labels, keys and, in counts[k], the labels that changed.
  void assign() {
    center_norms();
    int* changed = piece<int>(plan_.counts) + plan_.k;
    MOECOMP_CUDA_TRY(cudaMemsetAsync(changed, 0, sizeof(int), ctx_.stream));
    for (index_t first = 0; first < plan_.n; first += plan_.tile_rows) {
      const index_t rows = std::min(plan_.tile_rows, plan_.n - first);
      tile_gemm(first, rows, piece<T>(plan_.centers), plan_.k);
      argmin_kernel<T><<<grid_for(rows, kmeans_warps_per_block), kmeans_block, 0, ctx_.stream>>>(
          piece<T>(plan_.tile), rows, plan_.k, piece<T>(plan_.center_norms), first, piece<std::int64_t>(plan_.labels),
          piece<int>(plan_.keys), changed);
      MOECOMP_CUDA_TRY(cudaGetLastError());
    }
  }

  /// The size-bounded step's costs, w_i ||x_i - c_j||^2 (n x k doubles), into bounded_costs.
  double* form_bounded_costs() {
    const index_t n = plan_.n, k = plan_.k;
    center_norms();
    double* costs = piece<double>(plan_.bounded_costs);
    for (index_t first = 0; first < n; first += plan_.tile_rows) {
      const index_t rows = std::min(plan_.tile_rows, n - first);
      tile_gemm(first, rows, piece<T>(plan_.centers), k);
      bounded_cost_kernel<T><<<grid_for(rows * k, kmeans_block), kmeans_block, 0, ctx_.stream>>>(
          data_, piece<T>(plan_.tile), rows, first, piece<T>(plan_.x_norms), piece<T>(plan_.center_norms), costs);
      MOECOMP_CUDA_TRY(cudaGetLastError());
    }
    return costs;
  }

  /// The equal-size step on the device (kmeans_balanced_auction.hpp): the replicated n x n cost, the device
  /// auction (cold start, automatic epsilon schedule), the labels q / c with the changed count in counts[k],
  /// and the certificate. Returns the relative gap of the transportation dual built from the prices;
  /// `bound` gets the auction's proven bound n x (final epsilon) relative to max(1, cost).
  double assign_balanced_auction(double& bound) {
    const index_t n = plan_.n, k = plan_.k, c = plan_.copies;
    const double* costs = form_bounded_costs();
    double* replicated = piece<double>(plan_.replicated);
    replicate_cost_kernel<<<grid_for(n * n, kmeans_block), kmeans_block, 0, ctx_.stream>>>(costs, n, k, c, replicated);
    MOECOMP_CUDA_TRY(cudaGetLastError());
    double* prices = piece<double>(plan_.prices);
    index_t* columns = piece<index_t>(plan_.columns);
    const ot::auction_result r = ot::auction_assignment(
        ctx_, ot::auction_params{}, matrix_view<const double, device_memory>(replicated, n, n),
        vector_view<index_t, device_memory>(columns, n), vector_view<double, device_memory>(prices, n),
        vector_view<std::byte, device_memory>(piece<std::byte>(plan_.auction_workspace),
                                              static_cast<index_t>(plan_.auction_workspace_bytes)));
    MOECOMP_ENSURES(r.ok(), "kmeans: the device auction of the equal-size assignment step ended ", to_string(r.status));
    int* changed = piece<int>(plan_.counts) + k;
    MOECOMP_CUDA_TRY(cudaMemsetAsync(changed, 0, sizeof(int), ctx_.stream));
    auction_labels_kernel<<<grid_for(n, kmeans_block), kmeans_block, 0, ctx_.stream>>>(
        columns, n, c, piece<std::int64_t>(plan_.labels), piece<int>(plan_.keys), changed);
    MOECOMP_CUDA_TRY(cudaGetLastError());
    double* v = piece<double>(plan_.centre_potentials);
    centre_potentials_kernel<<<grid_for(k, kmeans_block), kmeans_block, 0, ctx_.stream>>>(prices, k, c, v);
    MOECOMP_CUDA_TRY(cudaGetLastError());
    double* u = piece<double>(plan_.row_values);  // free during the assignment step
    row_potentials_kernel<<<grid_for(n, kmeans_block), kmeans_block, 0, ctx_.stream>>>(costs, n, k, v, u);
    MOECOMP_CUDA_TRY(cudaGetLastError());
    std::size_t bytes = plan_.cub_temp_bytes;
    MOECOMP_CUDA_TRY(cub::DeviceReduce::Sum(cub_temp(), bytes, static_cast<const double*>(u),
                                            piece<double>(plan_.dual_sum), static_cast<int>(n), ctx_.stream));
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(pinned_doubles_.data(), v, sizeof(double) * static_cast<std::size_t>(k),
                                     cudaMemcpyDeviceToHost, ctx_.stream));
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(pinned_doubles_.data() + k, piece<double>(plan_.dual_sum), sizeof(double),
                                     cudaMemcpyDeviceToHost, ctx_.stream));
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
    const double dual = cluster::detail::balanced_dual(pinned_doubles_[k], pinned_doubles_.data(), k, c);
    bound = r.criterion / std::max(1.0, std::abs(r.cost));
    return cluster::detail::relative_gap(r.cost, dual);
  }

  /// The assignment step with size bounds: the costs on the device, the exact transportation problem on
  /// the host, the labels back up. Returns the relative duality gap; `changed` gets the labels that moved.
  double assign_bounded(index_t& changed) {
    const index_t n = plan_.n, k = plan_.k;
    const double* costs = form_bounded_costs();
    size_bounded_transport& transport = *transport_;
    copy_rows_async<double>(ctx_, transport.cost_row(0), transport.cost_stride(), costs, k, k, n,
                            cudaMemcpyDeviceToHost);
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
    host_previous_ = host_labels_;
    const double gap = transport.solve(host_, host_labels_.data());
    changed = 0;
    for (std::size_t i = 0; i < host_labels_.size(); ++i) changed += host_labels_[i] != host_previous_[i];
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(piece<std::int64_t>(plan_.labels), host_labels_.data(),
                                     sizeof(std::int64_t) * static_cast<std::size_t>(n), cudaMemcpyHostToDevice,
                                     ctx_.stream));
    labels_to_keys(piece<std::int64_t>(plan_.labels));
    return gap;
  }

  /// k distinct rows, the host's partial Fisher-Yates shuffle (the same draws), gathered on the device.
  void random_rows_init(random_generator& rng) {
    const index_t n = plan_.n, k = plan_.k;
    std::vector<index_t> pick(static_cast<std::size_t>(n));
    for (index_t i = 0; i < n; ++i) pick[static_cast<std::size_t>(i)] = i;
    int* ids = pinned_ints_.data();
    for (index_t j = 0; j < k; ++j) {
      const auto r = j + static_cast<index_t>(rng.uniform_index(static_cast<std::uint64_t>(n - j)));
      std::swap(pick[static_cast<std::size_t>(j)], pick[static_cast<std::size_t>(r)]);
      ids[j] = static_cast<int>(pick[static_cast<std::size_t>(j)]);
    }
    int* device_ids = piece<int>(plan_.reseed_pairs);
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(device_ids, ids, sizeof(int) * static_cast<std::size_t>(k), cudaMemcpyHostToDevice,
                                     ctx_.stream));
    gather_rows_kernel<T><<<grid_for(k * plan_.d, kmeans_block), kmeans_block, 0, ctx_.stream>>>(
        data_.x, data_.x_ld, device_ids, k, plan_.d, piece<T>(plan_.centers));
    MOECOMP_CUDA_TRY(cudaGetLastError());
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));  // the pinned ids are reused
  }

  /// Distances of every row to `count` points (their norms computed here) against closest, through the
  /// tile; dist and weighted (count x n) as candidate_distance_kernel writes them.
  void distances_to(const T* points, T* point_norms, index_t count, bool first_centre) {
    squared_row_norms_kernel<T><<<grid_for(count, kmeans_block), kmeans_block, 0, ctx_.stream>>>(points, plan_.d, count, plan_.d,
                                                                                    point_norms);
    MOECOMP_CUDA_TRY(cudaGetLastError());
    for (index_t first = 0; first < plan_.n; first += plan_.tile_rows) {
      const index_t rows = std::min(plan_.tile_rows, plan_.n - first);
      tile_gemm(first, rows, points, count);
      candidate_distance_kernel<T><<<grid_for(rows * count, kmeans_block), kmeans_block, 0, ctx_.stream>>>(
          data_, piece<T>(plan_.tile), rows, first, count, piece<T>(plan_.x_norms), point_norms,
          piece<double>(plan_.cumulative), first_centre, piece<double>(plan_.trial_dist),
          piece<double>(plan_.weighted));
      MOECOMP_CUDA_TRY(cudaGetLastError());
    }
  }

  /// Greedy k-means++ with the host's draws: the potentials and the cumulative sums come from CUB on the
  /// device (their rounding can differ from the host's sequential sums, and with it a draw near a
  /// boundary), the choice of the best candidate on the host.
  void plus_plus_init(random_generator& rng) {
    const index_t n = plan_.n, d = plan_.d, k = plan_.k, trials = plan_.trials;
    T* centers = piece<T>(plan_.centers);
    double* closest = piece<double>(plan_.sorted_values);  // free during initialisation
    double* cumulative = piece<double>(plan_.cumulative);
    double* potentials = piece<double>(plan_.potentials);
    const auto first = static_cast<index_t>(rng.uniform_index(static_cast<std::uint64_t>(n)));
    copy_rows_async<T>(ctx_, centers, d, data_.x + first * data_.x_ld, data_.x_ld, d, 1, cudaMemcpyDeviceToDevice);
    distances_to(centers, piece<T>(plan_.candidate_norms), 1, true);
    copy_async(closest, piece<double>(plan_.trial_dist), n);
    std::size_t bytes = plan_.cub_temp_bytes;
    MOECOMP_CUDA_TRY(cub::DeviceReduce::Sum(cub_temp(), bytes, piece<double>(plan_.weighted), potentials,
                                            static_cast<int>(n), ctx_.stream));
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(pinned_doubles_.data(), potentials, sizeof(double), cudaMemcpyDeviceToHost,
                                     ctx_.stream));
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
    double potential = pinned_doubles_[0];
    std::vector<int> segment_offsets(static_cast<std::size_t>(trials + 1));
    for (index_t t = 0; t <= trials; ++t) segment_offsets[static_cast<std::size_t>(t)] = static_cast<int>(t * n);
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(piece<int>(plan_.segment_offsets), segment_offsets.data(),
                                     sizeof(int) * segment_offsets.size(), cudaMemcpyHostToDevice, ctx_.stream));
    std::vector<double> targets(static_cast<std::size_t>(trials));
    for (index_t c = 1; c < k; ++c) {
      // The running sum of w_i closest_i (the weighted row of the last choice, or of the first centre).
      bytes = plan_.cub_temp_bytes;
      MOECOMP_CUDA_TRY(cub::DeviceScan::InclusiveSum(cub_temp(), bytes, piece<double>(plan_.weighted) + best_ * n,
                                                     cumulative, static_cast<int>(n), ctx_.stream));
      for (index_t t = 0; t < trials; ++t) targets[static_cast<std::size_t>(t)] = rng.uniform<double>() * potential;
      MOECOMP_CUDA_TRY(cudaMemcpyAsync(piece<double>(plan_.targets), targets.data(), sizeof(double) * trials,
                                       cudaMemcpyHostToDevice, ctx_.stream));
      draw_candidates_kernel<<<grid_for(trials, kmeans_block), kmeans_block, 0, ctx_.stream>>>(
          cumulative, n, piece<double>(plan_.targets), trials, piece<int>(plan_.candidate_ids));
      MOECOMP_CUDA_TRY(cudaGetLastError());
      gather_rows_kernel<T><<<grid_for(trials * d, kmeans_block), kmeans_block, 0, ctx_.stream>>>(
          data_.x, data_.x_ld, piece<int>(plan_.candidate_ids), trials, d, piece<T>(plan_.candidates));
      MOECOMP_CUDA_TRY(cudaGetLastError());
      // closest must not change while the candidates' kernel reads it: it lives in cumulative's neighbour.
      copy_async(cumulative, closest, n);
      distances_to(piece<T>(plan_.candidates), piece<T>(plan_.candidate_norms), trials, false);
      bytes = plan_.cub_temp_bytes;
      MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::Sum(
          cub_temp(), bytes, piece<double>(plan_.weighted), potentials, static_cast<int>(trials),
          piece<int>(plan_.segment_offsets), piece<int>(plan_.segment_offsets) + 1, ctx_.stream));
      MOECOMP_CUDA_TRY(cudaMemcpyAsync(pinned_doubles_.data(), potentials, sizeof(double) * trials,
                                       cudaMemcpyDeviceToHost, ctx_.stream));
      MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
      index_t best = 0;
      double best_potential = std::numeric_limits<double>::infinity();
      for (index_t t = 0; t < trials; ++t)
        if (pinned_doubles_[t] < best_potential) {  // ties: the earliest draw
          best_potential = pinned_doubles_[t];
          best = t;
        }
      potential = best_potential;
      best_ = best;
      copy_async(closest, piece<double>(plan_.trial_dist) + best * n, n);
      copy_async(centers + c * d, piece<T>(plan_.candidates) + best * d, d);
    }
    best_ = 0;
  }

  /// The sizes and changed count of the keys into pinned memory (synchronises).
  void read_counts(bool with_changed) {
    histogram();
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(pinned_ints_.data(), piece<int>(plan_.counts),
                                     sizeof(int) * static_cast<std::size_t>(plan_.k + (with_changed ? 1 : 0)),
                                     cudaMemcpyDeviceToHost, ctx_.stream));
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
  }

  /// The host's re-seeding rule: each empty cluster, in increasing index, takes one of the rows farthest
  /// from their centres (largest first, ties to the lowest row). Moves those rows' keys; returns the count.
  index_t reseed_empty_clusters() {
    const index_t n = plan_.n, k = plan_.k;
    std::vector<int> empty_clusters;
    for (index_t j = 0; j < k; ++j)
      if (pinned_ints_[j] == 0) empty_clusters.push_back(static_cast<int>(j));
    if (empty_clusters.empty()) return 0;
    const auto empty = static_cast<index_t>(empty_clusters.size());
    row_distance_kernel<T><<<grid_for(n, kmeans_block), kmeans_block, 0, ctx_.stream>>>(
        data_, piece<T>(plan_.centers), piece<std::int64_t>(plan_.labels), false, piece<double>(plan_.row_values));
    MOECOMP_CUDA_TRY(cudaGetLastError());
    std::size_t bytes = plan_.cub_temp_bytes;
    MOECOMP_CUDA_TRY(cub::DeviceRadixSort::SortPairsDescending(
        cub_temp(), bytes, piece<double>(plan_.row_values), piece<double>(plan_.sorted_values), piece<int>(plan_.row_ids),
        piece<int>(plan_.sorted_rows), static_cast<int>(n), 0, static_cast<int>(sizeof(double) * 8), ctx_.stream));
    int* pairs = pinned_ints_.data() + k + 1;  // room for k ints after the counts: empty <= k - 1
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(pairs, piece<int>(plan_.sorted_rows), sizeof(int) * static_cast<std::size_t>(empty),
                                     cudaMemcpyDeviceToHost, ctx_.stream));
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
    std::vector<int> moves(static_cast<std::size_t>(2 * empty));
    for (index_t e = 0; e < empty; ++e) {
      moves[static_cast<std::size_t>(2 * e)] = pairs[e];
      moves[static_cast<std::size_t>(2 * e + 1)] = empty_clusters[static_cast<std::size_t>(e)];
    }
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(piece<int>(plan_.reseed_pairs), moves.data(), sizeof(int) * moves.size(),
                                     cudaMemcpyHostToDevice, ctx_.stream));
    move_rows_kernel<<<grid_for(empty, kmeans_block), kmeans_block, 0, ctx_.stream>>>(piece<int>(plan_.reseed_pairs),
                                                                        static_cast<int>(empty), piece<int>(plan_.keys));
    MOECOMP_CUDA_TRY(cudaGetLastError());
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));  // moves is a host vector
    return empty;
  }

  /// The centre update from the keys: rows sorted by cluster (stable), offsets, the sums, the shift.
  double update_centres() {
    const index_t n = plan_.n, k = plan_.k, d = plan_.d;
    histogram();
    std::size_t bytes = plan_.cub_temp_bytes;
    MOECOMP_CUDA_TRY(cub::DeviceScan::ExclusiveSum(cub_temp(), bytes, piece<int>(plan_.counts),
                                                   piece<int>(plan_.offsets), static_cast<int>(k), ctx_.stream));
    bytes = plan_.cub_temp_bytes;
    MOECOMP_CUDA_TRY(cub::DeviceRadixSort::SortPairs(cub_temp(), bytes, piece<int>(plan_.keys),
                                                     piece<int>(plan_.sorted_keys), piece<int>(plan_.row_ids),
                                                     piece<int>(plan_.sorted_rows), static_cast<int>(n), 0,
                                                     plan_.sort_bits, ctx_.stream));
    const dim3 grid(static_cast<unsigned>(k), static_cast<unsigned>(plan_.column_blocks));
    update_centres_kernel<T><<<grid, kmeans_block, 0, ctx_.stream>>>(
        data_, piece<int>(plan_.sorted_rows), piece<int>(plan_.offsets), piece<int>(plan_.counts),
        piece<T>(plan_.centers), piece<T>(plan_.next_centers), piece<double>(plan_.shift_parts), plan_.column_blocks);
    MOECOMP_CUDA_TRY(cudaGetLastError());
    copy_async(piece<T>(plan_.centers), piece<T>(plan_.next_centers), k * d);
    const index_t parts = k * plan_.column_blocks;
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(pinned_doubles_.data(), piece<double>(plan_.shift_parts),
                                     sizeof(double) * static_cast<std::size_t>(parts), cudaMemcpyDeviceToHost,
                                     ctx_.stream));
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
    double shift = 0;
    for (index_t p = 0; p < parts; ++p) shift += pinned_doubles_[p];
    return shift;
  }

  /// One Lloyd run from the centres in the workspace (the host's lloyd_run, step for step).
  kmeans_result lloyd_run() {
    const index_t n = plan_.n;
    kmeans_result result;
    result.status = status::iteration_limit;
    bool labels_settled = false;
    MOECOMP_CUDA_TRY(cudaMemsetAsync(piece<std::int64_t>(plan_.labels), 0xff, sizeof(std::int64_t) * n, ctx_.stream));
    if (plan_.bounded && !plan_.auction) std::fill(host_labels_.begin(), host_labels_.end(), -1);
    auto assign_step = [&]() -> index_t {
      if (plan_.auction) {
        double bound = 0;
        result.assignment_gap = std::max(result.assignment_gap, assign_balanced_auction(bound));
        result.assignment_bound = std::max(result.assignment_bound, bound);
        read_counts(true);
        return pinned_ints_[plan_.k];
      }
      if (plan_.bounded) {
        index_t changed = 0;
        result.assignment_gap = std::max(result.assignment_gap, assign_bounded(changed));
        read_counts(false);
        return changed;
      }
      assign();
      read_counts(true);
      return pinned_ints_[plan_.k];
    };
    for (index_t it = 0; it < params_.max_iterations; ++it) {
      const index_t changed = assign_step();
      const index_t moved = reseed_empty_clusters();
      result.reseeded += moved;
      const double shift = update_centres();
      result.iterations = it + 1;
      result.criterion = shift;
      if (it > 0 && changed == 0) {
        result.status = status::ok;
        labels_settled = true;
        break;
      }
      if (shift <= scaled_tolerance_) {
        result.status = status::ok;
        break;
      }
    }
    if (!labels_settled) (void)assign_step();
    row_distance_kernel<T><<<grid_for(n, kmeans_block), kmeans_block, 0, ctx_.stream>>>(
        data_, piece<T>(plan_.centers), piece<std::int64_t>(plan_.labels), true, piece<double>(plan_.row_values));
    MOECOMP_CUDA_TRY(cudaGetLastError());
    std::size_t bytes = plan_.cub_temp_bytes;
    double* inertia = piece<double>(plan_.shift_parts);
    MOECOMP_CUDA_TRY(cub::DeviceReduce::Sum(cub_temp(), bytes, piece<double>(plan_.row_values), inertia,
                                            static_cast<int>(n), ctx_.stream));
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(pinned_doubles_.data(), inertia, sizeof(double), cudaMemcpyDeviceToHost,
                                     ctx_.stream));
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
    result.inertia = pinned_doubles_[0];
    if (!std::isfinite(result.inertia)) result.status = status::numerical_error;
    return result;
  }

  cuda_context ctx_;
  kmeans_params params_;
  device_data<T> data_;
  kmeans_plan plan_;
  std::byte* base_;
  cublas_session blas_;
  pinned_scalars<int> pinned_ints_;
  pinned_scalars<double> pinned_doubles_;
  double scaled_tolerance_ = 0;
  index_t best_ = 0;  // k-means++: the candidate chosen last
  host_context host_;  // the host solver's allocations (declared before the transport, which keeps a pointer)
  std::optional<size_bounded_transport> transport_;
  std::vector<std::int64_t> host_labels_, host_previous_;
};

}  // namespace cuda_detail
}  // namespace cluster
MOECOMP_NAMESPACE_END
