#pragma once
// Device implementation of the auction assignment (<moecomp/cuda/ot/auction_assignment.cuh>), also used by
// the device free-support barycenter.
//
// Problem: rows i < n (persons) to columns j < m (objects), n <= m, benefit s C(i, j) (s = -1 to minimise,
// +1 to maximise). The rectangular problem is made square by m - n dummy rows of benefit 0, which changes
// no optimum (a dummy row takes whatever column is left) and keeps the bound m * epsilon of eps-complementary
// slackness, the host's gap bound.
//
// Jacobi auction with epsilon scaling (Bertsekas): in every round each unassigned row, one warp per row,
// finds its best value v1 = max_j (benefit - price_j) at the lowest such column j1 and the second best v2,
// and bids price_j1 + v1 - v2 + epsilon on j1. Every object then goes to its highest bidder, ties to the
// lowest row: the highest bid is found with atomicMax on an order-preserving 64-bit encoding of the double
// bid, then the lowest row bidding exactly that with atomicMin. Both are exact, so the outcome does not
// depend on timing: the whole auction is deterministic. The evicted owner becomes unassigned. A phase ends
// when every row is assigned; the next phase keeps the prices, multiplies epsilon by epsilon_factor
// and starts from no assignment.
//
// The host reads the number of unassigned rows after every few rounds (the rounds in between cost nothing
// once all are assigned), so the auction SYNCHRONISES ctx.stream.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/detail/block_reduce.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/kernel.cuh>
#include <moecomp/cuda/ot/detail/ot_device_common.cuh>
#include <moecomp/ot/linear_assignment_types.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/core/detail/traits.hpp>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace cuda_detail {

inline constexpr int auction_block = 256;
inline constexpr int no_winner = INT_MAX;

/// Order-preserving map of a double onto unsigned 64-bit integers (larger double, larger key; every key > 0
/// for a non-NaN double, so 0 means "no bid").
__device__ __forceinline__ unsigned long long order_key(double x) {
  const auto bits = static_cast<unsigned long long>(__double_as_longlong(x));
  return (bits >> 63) != 0 ? ~bits : bits | 0x8000000000000000ULL;
}

/// Device state of one auction: per column the price, owner, highest bid key and winning row; per row
/// (real and dummy) the assigned column and the last bid; two counters.
struct auction_state {
  double* price;               // m
  int* owner;                  // m, row or -1
  int* assigned;               // m rows (n real + m - n dummy), column or -1
  double* bid_value;           // m rows
  int* bid_object;             // m rows
  unsigned long long* best;    // m, order_key of the highest bid this round, 0: none
  int* winner;                 // m, lowest row bidding `best`, no_winner: none
  int* unassigned;             // 1
  unsigned long long* bids;    // 1
};

template <class T>
struct auction_matrix {
  const T* cost;  // n x m, row stride ld
  index_t ld;
  int n, m;
  double sign;  // benefit = sign * cost
};

/// Per-block statistics of the finite entries: minimum, maximum, and counts of non-integers, infinities,
/// NaN.
struct cost_statistics {
  double min;
  double max;
  unsigned long long non_integer;
  unsigned long long infinite;
  unsigned long long nan;
};

template <class T>
MOECOMP_KERNEL void __launch_bounds__(auction_block)
    cost_statistics_kernel(const auction_matrix<T> a, cost_statistics* partial) {
  __shared__ double mins[auction_block], maxs[auction_block];
  __shared__ unsigned long long counts[3][auction_block];
  double lo = INFINITY, hi = -INFINITY;
  unsigned long long non_integer = 0, infinite = 0, nan = 0;
  for (index_t i = blockIdx.x; i < a.n; i += gridDim.x) {
    const T* row = a.cost + i * a.ld;
    for (index_t j = threadIdx.x; j < a.m; j += auction_block) {
      const double v = static_cast<double>(row[j]);
      if (isnan(v)) {
        ++nan;
      } else if (isinf(v)) {
        ++infinite;
      } else {
        lo = fmin(lo, v);
        hi = fmax(hi, v);
        if (v != floor(v)) ++non_integer;
      }
    }
  }
  const int t = static_cast<int>(threadIdx.x);
  mins[t] = lo;
  maxs[t] = hi;
  counts[0][t] = non_integer;
  counts[1][t] = infinite;
  counts[2][t] = nan;
  __syncthreads();
  for (int half = auction_block / 2; half > 0; half >>= 1) {
    if (t < half) {
      mins[t] = fmin(mins[t], mins[t + half]);
      maxs[t] = fmax(maxs[t], maxs[t + half]);
      for (int c = 0; c < 3; ++c) counts[c][t] += counts[c][t + half];
    }
    __syncthreads();
  }
  if (t == 0) partial[blockIdx.x] = cost_statistics{mins[0], maxs[0], counts[0][0], counts[1][0], counts[2][0]};
}

/// Start of a phase: nothing assigned, no bids pending, every row unassigned.
MOECOMP_KERNEL void auction_reset_kernel(const auction_state s, int m) {
  for (int j = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); j < m;
       j += static_cast<int>(gridDim.x * blockDim.x)) {
    s.owner[j] = -1;
    s.assigned[j] = -1;
    s.best[j] = 0;
    s.winner[j] = no_winner;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *s.unassigned = m;
}

/// Best value, its lowest column, and the second best value.
struct best_two {
  double v1;
  int j1;
  double v2;
};

__device__ __forceinline__ void offer(best_two& b, double v, int j) {
  if (v > b.v1 || (v == b.v1 && j < b.j1)) {
    b.v2 = b.v1;
    b.v1 = v;
    b.j1 = j;
  } else if (v > b.v2) {
    b.v2 = v;
  }
}

__device__ __forceinline__ best_two merge(best_two a, best_two b) {
  // exact: the maximum, the lowest column attaining it, the largest of the rest
  if (a.v1 > b.v1 || (a.v1 == b.v1 && a.j1 < b.j1)) return {a.v1, a.j1, fmax(a.v2, b.v1)};
  return {b.v1, b.j1, fmax(b.v2, a.v1)};
}

/// One warp per unassigned row: its bid.
template <class T>
MOECOMP_KERNEL void __launch_bounds__(auction_block)
    auction_bid_kernel(const auction_matrix<T> a, const auction_state s, double epsilon) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warps_per_block = auction_block / 32;
  const int m = a.m;
  for (int i = static_cast<int>(blockIdx.x) * warps_per_block + (static_cast<int>(threadIdx.x) >> 5); i < m;
       i += static_cast<int>(gridDim.x) * warps_per_block) {
    if (s.assigned[i] >= 0) continue;  // uniform over the warp
    best_two b{-INFINITY, INT_MAX, -INFINITY};
    if (i < a.n) {
      const T* row = a.cost + static_cast<index_t>(i) * a.ld;
      for (int j = lane; j < m; j += 32) offer(b, a.sign * static_cast<double>(row[j]) - s.price[j], j);
    } else {
      for (int j = lane; j < m; j += 32) offer(b, -s.price[j], j);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      best_two other;
      other.v1 = __shfl_down_sync(0xffffffffu, b.v1, offset);
      other.j1 = __shfl_down_sync(0xffffffffu, b.j1, offset);
      other.v2 = __shfl_down_sync(0xffffffffu, b.v2, offset);
      b = merge(b, other);
    }
    if (lane == 0) {
      const int j = b.j1;
      // one column only: no competitor, the smallest raise that keeps eps-complementary slackness
      const double raise = b.v2 == -INFINITY ? epsilon : (b.v1 - b.v2) + epsilon;
      const double bid = s.price[j] + raise;
      s.bid_value[i] = bid;
      s.bid_object[i] = j;
      atomicMax(s.best + j, order_key(bid));
      atomicAdd(s.bids, 1ULL);
    }
  }
}

/// Each bidding row whose bid equals its object's highest bid competes for the lowest row index.
MOECOMP_KERNEL void auction_resolve_kernel(const auction_state s, int m) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < m;
       i += static_cast<int>(gridDim.x * blockDim.x)) {
    if (s.assigned[i] >= 0) continue;
    const int j = s.bid_object[i];
    if (order_key(s.bid_value[i]) == s.best[j]) atomicMin(s.winner + j, i);
  }
}

/// Each object with a winner: the winner takes it at its bid, the previous owner is evicted.
MOECOMP_KERNEL void auction_assign_kernel(const auction_state s, int m) {
  for (int j = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); j < m;
       j += static_cast<int>(gridDim.x * blockDim.x)) {
    const int w = s.winner[j];
    if (w == no_winner) continue;
    const int old = s.owner[j];
    if (old >= 0) {
      s.assigned[old] = -1;
    } else {
      atomicSub(s.unassigned, 1);
    }
    s.owner[j] = w;
    s.assigned[w] = j;
    s.price[j] = s.bid_value[w];
    s.winner[j] = no_winner;
    s.best[j] = 0;
  }
}

/// row_to_column[i] = assigned column of row i (-1 if none) for the n real rows, and the total cost in
/// double through block_sum (one block; a fixed order).
template <class T>
MOECOMP_KERNEL void __launch_bounds__(auction_block)
    auction_finish_kernel(const auction_matrix<T> a, const int* assigned, index_t* row_to_column,
                          index_t row_to_column_stride, double* total) {
  __shared__ double scratch[moecomp::detail::block_sum_scratch<auction_block>];
  double sum = 0.0;
  for (int i = static_cast<int>(threadIdx.x); i < a.n; i += auction_block) {
    const int j = assigned[i];
    if (row_to_column != nullptr) row_to_column[static_cast<index_t>(i) * row_to_column_stride] = j;
    if (j >= 0) sum += static_cast<double>(a.cost[static_cast<index_t>(i) * a.ld + j]);
  }
  sum = moecomp::detail::block_sum<auction_block>(sum, scratch);
  if (threadIdx.x == 0) *total = sum;
}

MOECOMP_KERNEL void fill_zero_kernel(double* x, int count) {
  for (int j = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); j < count;
       j += static_cast<int>(gridDim.x * blockDim.x))
    x[j] = 0.0;
}

inline constexpr int statistics_blocks = 512;

/// Workspace of one auction of m columns (prices included only when `own_prices`).
struct auction_plan {
  std::size_t price = 0, owner = 0, assigned = 0, bid_value = 0, bid_object = 0, best = 0, winner = 0;
  std::size_t counters = 0, bids = 0, statistics = 0, total = 0;
  bool own_prices = true;
  std::size_t bytes = 0;
};

inline auction_plan make_auction_plan(const char* function, index_t m, bool own_prices, workspace_layout& layout) {
  auction_plan plan;
  plan.own_prices = own_prices;
  if (own_prices) plan.price = layout.take(m, sizeof(double));
  plan.owner = layout.take(m, sizeof(int));
  plan.assigned = layout.take(m, sizeof(int));
  plan.bid_value = layout.take(m, sizeof(double));
  plan.bid_object = layout.take(m, sizeof(int));
  plan.best = layout.take(m, sizeof(unsigned long long));
  plan.winner = layout.take(m, sizeof(int));
  plan.counters = layout.take(1, sizeof(int));
  plan.bids = layout.take(1, sizeof(unsigned long long));
  plan.statistics = layout.take(statistics_blocks, sizeof(cost_statistics));
  plan.total = layout.take(1, sizeof(double));
  (void)function;
  return plan;
}

inline auction_state auction_state_at(std::byte* base, const auction_plan& plan, double* prices) {
  return {plan.own_prices ? at<double>(base, plan.price) : prices,
          at<int>(base, plan.owner),
          at<int>(base, plan.assigned),
          at<double>(base, plan.bid_value),
          at<int>(base, plan.bid_object),
          at<unsigned long long>(base, plan.best),
          at<int>(base, plan.winner),
          at<int>(base, plan.counters),
          at<unsigned long long>(base, plan.bids)};
}

/// The scalars the host reads back while the auction runs (pinned).
struct auction_readback {
  int unassigned;
  int pad;
  unsigned long long bids;
  double total;
};

/// The auction's launches cap their grids at 2^16 blocks.
inline constexpr index_t auction_max_grid = index_t(1) << 16;

/// The epsilon schedule the host solver uses, from the statistics of the finite costs.
struct epsilon_schedule {
  double initial;
  double final;
};

inline epsilon_schedule make_epsilon_schedule(const auction_params& params, index_t m, double range, bool integer) {
  const double span = range > 0 ? range : 1.0;
  double final_eps = params.epsilon_final;
  if (final_eps == 0.0)
    final_eps = integer ? 1.0 / static_cast<double>(m + 1) : span / (1e6 * static_cast<double>(m));
  double initial = params.epsilon_initial;
  if (initial == 0.0) {
    initial = span / 4;
    if (params.warm_start)
      initial = std::min(initial, final_eps / (params.epsilon_factor * params.epsilon_factor));
  }
  return {std::max(initial, final_eps), final_eps};
}

/// Statistics of the costs (one pass, read back: synchronises).
template <class T>
cost_statistics cost_statistics_of(const cuda_context& ctx, const auction_matrix<T>& a, const auction_plan& plan,
                                   std::byte* base) {
  auto* partial = at<cost_statistics>(base, plan.statistics);
  const auto blocks = static_cast<unsigned>(std::max<index_t>(1, std::min<index_t>(a.n, statistics_blocks)));
  cost_statistics_kernel<T><<<blocks, auction_block, 0, ctx.stream>>>(a, partial);
  MOECOMP_CUDA_CHECK_LAUNCH();
  std::vector<cost_statistics> host(blocks);
  MOECOMP_CUDA_TRY(cudaMemcpyAsync(host.data(), partial, blocks * sizeof(cost_statistics), cudaMemcpyDeviceToHost,
                                   ctx.stream));
  MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
  cost_statistics total{INFINITY, -INFINITY, 0, 0, 0};
  for (const auto& p : host) {
    total.min = std::min(total.min, p.min);
    total.max = std::max(total.max, p.max);
    total.non_integer += p.non_integer;
    total.infinite += p.infinite;
    total.nan += p.nan;
  }
  return total;
}

/// The device auction takes finite costs only.
inline void check_finite_costs(const char* function, const cost_statistics& stats) {
  MOECOMP_EXPECTS(stats.nan == 0, function, ": cost must not contain NaN, got ", stats.nan, " NaN entries");
  MOECOMP_EXPECTS(stats.infinite == 0, function,
                  ": cost must be finite on the device (forbidden pairs, +-inf, need the host solver), got ",
                  stats.infinite, " infinite entries");
}

struct auction_outcome {
  moecomp::status status = moecomp::status::ok;
  std::int64_t bids = 0;
  int phases = 0;
  double final_epsilon = 0.0;
};

/// Runs every phase of the auction on `a` with state `s` (prices as found there: zero them first for a cold
/// start). Synchronises ctx.stream after every batch of rounds.
template <class T>
auction_outcome run_auction_phases(const cuda_context& ctx, const auction_params& params, const auction_matrix<T>& a,
                                   const auction_state& s, const epsilon_schedule& schedule,
                                   const pinned_scalars<auction_readback>& readback) {
  auction_outcome outcome;
  outcome.final_epsilon = schedule.final;
  const int m = a.m;
  const unsigned column_grid = grid_for(m, auction_block, auction_max_grid);
  const unsigned bid_grid = grid_for(m, auction_block / 32, auction_max_grid);
  MOECOMP_CUDA_TRY(cudaMemsetAsync(s.bids, 0, sizeof(unsigned long long), ctx.stream));
  double epsilon = schedule.initial;
  for (;;) {
    ++outcome.phases;
    auction_reset_kernel<<<column_grid, auction_block, 0, ctx.stream>>>(s, m);
    MOECOMP_CUDA_CHECK_LAUNCH();
    int rounds = 1;
    for (;;) {
      for (int r = 0; r < rounds; ++r) {
        auction_bid_kernel<T><<<bid_grid, auction_block, 0, ctx.stream>>>(a, s, epsilon);
        MOECOMP_CUDA_CHECK_LAUNCH();
        auction_resolve_kernel<<<column_grid, auction_block, 0, ctx.stream>>>(s, m);
        MOECOMP_CUDA_CHECK_LAUNCH();
        auction_assign_kernel<<<column_grid, auction_block, 0, ctx.stream>>>(s, m);
        MOECOMP_CUDA_CHECK_LAUNCH();
      }
      MOECOMP_CUDA_TRY(cudaMemcpyAsync(&readback[0].unassigned, s.unassigned, sizeof(int), cudaMemcpyDeviceToHost,
                                       ctx.stream));
      MOECOMP_CUDA_TRY(cudaMemcpyAsync(&readback[0].bids, s.bids, sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                       ctx.stream));
      MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
      const std::int64_t bids_before = outcome.bids;
      outcome.bids = static_cast<std::int64_t>(readback[0].bids);
      if (readback[0].unassigned == 0) break;
      // Every round with an unassigned row places a bid; no new bid means the auction cannot progress, so
      // report it instead of waiting forever.
      if (outcome.bids == bids_before && bids_before > 0) {
        outcome.status = moecomp::status::not_converged;
        return outcome;
      }
      if (params.max_bids > 0 && outcome.bids >= params.max_bids) {
        outcome.status = moecomp::status::iteration_limit;
        return outcome;
      }
      rounds = std::min(rounds * 2, 64);
    }
    if (epsilon <= schedule.final) break;
    epsilon = std::max(epsilon * params.epsilon_factor, schedule.final);
  }
  return outcome;
}

inline void check_auction_params(const char* function, const auction_params& params) {
  MOECOMP_EXPECTS(params.epsilon_final >= 0 && std::isfinite(params.epsilon_final), function,
                  ": params.epsilon_final must be >= 0 and finite (0: automatic), got ", params.epsilon_final);
  MOECOMP_EXPECTS(params.epsilon_initial >= 0 && std::isfinite(params.epsilon_initial), function,
                  ": params.epsilon_initial must be >= 0 and finite (0: automatic), got ", params.epsilon_initial);
  MOECOMP_EXPECTS(params.epsilon_factor > 0 && params.epsilon_factor < 1, function,
                  ": params.epsilon_factor must be in (0, 1), got ", params.epsilon_factor);
  MOECOMP_EXPECTS(params.max_bids >= 0, function, ": params.max_bids must be >= 0 (0: no limit), got ",
                  params.max_bids);
}


inline auction_plan make_assignment_plan(index_t m, bool own_prices, std::size_t& bytes) {
  workspace_layout layout("auction_assignment");
  auction_plan plan = make_auction_plan("auction_assignment", m, own_prices, layout);
  bytes = layout.total();
  return plan;
}

template <class C>
void check_assignment_shapes(const char* function, const C& cost, index_t row_to_column, index_t prices) {
  const index_t n = cost.rows(), m = cost.cols();
  MOECOMP_EXPECTS(n <= m, function, ": cost must have at most as many rows as columns (n <= m), got ",
                  moecomp::detail::shape_string(n, m));
  MOECOMP_EXPECTS(row_to_column == n, function, ": row_to_column must have ", n, " elements (one per cost row), got ",
                  row_to_column);
  MOECOMP_EXPECTS(prices < 0 || prices == m, function, ": column_price must have ", m,
                  " elements (one per cost column), got ", prices);
  check_int_extent(function, "the number of columns", m);
}

/// The whole device auction on cost (n x m); `prices`: the caller's column prices, or null (own, zeroed).
template <class T>
auction_result run_assignment(const cuda_context& ctx, const auction_params& params,
                              matrix_view<const T, device_memory> cost, vector_view<index_t, device_memory> row_to_column,
                              double* prices, std::byte* workspace) {
  constexpr const char* function = "auction_assignment";
  const index_t n = cost.rows(), m = cost.cols();
  auction_result result;
  std::size_t bytes = 0;
  const auction_plan plan = make_assignment_plan(m, prices == nullptr, bytes);
  std::byte* base = aligned_base(workspace);
  const auction_state state = auction_state_at(base, plan, prices);
  const auction_matrix<T> a{cost.data(), cost.row_stride(), static_cast<int>(n), static_cast<int>(m),
                            params.maximize ? 1.0 : -1.0};
  const cost_statistics stats = cost_statistics_of<T>(ctx, a, plan, base);
  check_finite_costs(function, stats);
  const bool integer = stats.non_integer == 0;
  const double range = n > 0 ? stats.max - stats.min : 0.0;
  const epsilon_schedule schedule = make_epsilon_schedule(params, m, range, integer);
  if (prices == nullptr || !params.warm_start) {
    fill_zero_kernel<<<grid_for(m, auction_block, auction_max_grid), auction_block, 0, ctx.stream>>>(state.price, static_cast<int>(m));
    MOECOMP_CUDA_CHECK_LAUNCH();
  }
  const pinned_scalars<auction_readback> readback(1);
  const auction_outcome outcome = run_auction_phases<T>(ctx, params, a, state, schedule, readback);
  auto* total = at<double>(base, plan.total);
  auction_finish_kernel<T><<<1, auction_block, 0, ctx.stream>>>(a, state.assigned, row_to_column.data(),
                                                                 row_to_column.stride(), total);
  MOECOMP_CUDA_CHECK_LAUNCH();
  MOECOMP_CUDA_TRY(cudaMemcpyAsync(&readback[0].total, total, sizeof(double), cudaMemcpyDeviceToHost, ctx.stream));
  MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
  result.cost = readback[0].total;
  result.iterations = outcome.bids;
  result.phases = outcome.phases;
  result.status = outcome.status;
  result.criterion = outcome.status == moecomp::status::ok ? static_cast<double>(m) * schedule.final
                                                           : std::numeric_limits<double>::infinity();
  return result;
}

}  // namespace cuda_detail
}  // namespace ot
MOECOMP_NAMESPACE_END
