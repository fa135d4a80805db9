#pragma once
// Device routing and dispatch (<moecomp/cuda/gating/routing.cuh>).
//
//   routing: one warp per token. Each lane holds the scores of experts lane, lane + 32, ...; the softmax's max
//            and sum by cub::WarpReduce (in double); then the experts are taken in descending-score order by
//            repeated warp argmax rounds (cub::WarpReduce under the shared tie rule chosen_before), as many as
//            the rule takes (routing_rules.hpp's takes_next for the dynamic rules), any expert count.
//            The DeepSeek group rules (Grouped = true) add, before that: the keys (V3: sigmoid plus the
//            selection bias), each group's score by one warp reduction of the group's two largest keys
//            (routing_rules.hpp's group_top_two, group_score), the topk_group best groups by argmax rounds,
//            the other groups' keys masked to 0.0 (masked_group_key); then top_k rounds on the keys, the
//            weights from the uncorrected scores (group_rule_weight), as the host's group_limited and choose.
//   dispatch: the flat ids sorted by expert with a stable cub::DeviceRadixSort (end_bit = ceil(log2(E + 1))),
//            per-expert counts by cub::DeviceHistogram, offsets by cub::DeviceScan, then one scatter kernel
//            places each pair after its expert's padded offset (capacity: ranks past it are dropped), and a
//            block kernel writes one expert id per block.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/routing_types.hpp>
#include <moecomp/gating/detail/routing_rules.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/kernel.cuh>
#include <moecomp/cuda/core/detail/workspace.cuh>

#include <cub/device/device_histogram.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/warp/warp_reduce.cuh>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>

MOECOMP_NAMESPACE_BEGIN
namespace gating {
namespace cuda_detail {

using namespace moecomp::detail;  // the shared device layer
using gating::detail::chosen_before;
using gating::detail::group_top_two;
using gating::detail::takes_next;

inline constexpr int routing_block = 256;
inline constexpr int routing_warps = routing_block / 32;
/// Experts per lane the routing kernel keeps in registers: E <= 32 x this.
inline constexpr int routing_max_per_lane = 16;
inline constexpr index_t routing_max_experts = 32 * routing_max_per_lane;

struct scored_expert {
  double score;
  int index;
};
struct choose_better {
  __device__ scored_expert operator()(const scored_expert& a, const scored_expert& b) const {
    return chosen_before(b.score, b.index, a.score, a.index) ? b : a;
  }
};
struct sum_op {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct merge_top_two_op {
  __device__ group_top_two operator()(const group_top_two& a, const group_top_two& b) const {
    return gating::detail::merge_top_two(a, b);
  }
};

/// The selection parameters a kernel needs (no host types).
struct routing_kernel_params {
  routing_rule rule;
  score_function scores;
  int top_k, min_k, max_k;
  bool renormalize;
  double tau;
  int n_group, topk_group;         // the DeepSeek group rules
  double routed_scaling_factor;
};

/// The DeepSeek group rules for one token (the calling warp): s holds the lane's scores (experts lane + 32 q),
/// taken marks the lanes' slots past the experts; bias (stride bias_stride) may be null. Writes ids and
/// weights (the row's first top_k slots; the caller fills the rest).
template <class A, class ChoiceStorage, class TwoStorage>
__device__ void group_limited_token(const double (&s)[routing_max_per_lane], bool (&taken)[routing_max_per_lane],
                                    int lane, int experts, const routing_kernel_params& p, const A* bias,
                                    index_t bias_stride, ChoiceStorage& choice_storage, TwoStorage& two_storage,
                                    std::int64_t* ids, A* weights) {
  using warp_choice = cub::WarpReduce<scored_expert>;
  using warp_two = cub::WarpReduce<group_top_two>;
  const int size = experts / p.n_group;
  const bool v3 = p.rule == routing_rule::deepseek_v3;
  double key[routing_max_per_lane];
  bool kept[routing_max_per_lane];
  for (int q = 0; q < routing_max_per_lane; ++q) {
    const int j = lane + 32 * q;
    key[q] = j < experts ? s[q] + (bias != nullptr ? static_cast<double>(bias[j * bias_stride]) : 0.0) : -INFINITY;
    kept[q] = false;
  }
  // Group g's score into lane g % 32's slot g / 32.
  double score[routing_max_per_lane];
  bool group_taken[routing_max_per_lane];
  for (int r = 0; r < routing_max_per_lane; ++r) {
    score[r] = -INFINITY;
    group_taken[r] = lane + 32 * r >= p.n_group;
  }
  for (int g = 0; g < p.n_group; ++g) {
    group_top_two local = gating::detail::empty_top_two();
    for (int q = 0; q < routing_max_per_lane; ++q) {
      const int j = lane + 32 * q;
      if (j < experts && j / size == g) gating::detail::add_to_top_two(local, key[q]);
    }
    const group_top_two all = warp_two(two_storage).Reduce(local, merge_top_two_op{});
    const double value = __shfl_sync(0xffffffffu, gating::detail::group_score(all, v3), 0);
    __syncwarp();
    for (int r = 0; r < routing_max_per_lane; ++r)
      if (lane + 32 * r == g) score[r] = value;
  }
  // The topk_group best groups (score descending, index ascending); their experts' keys are kept.
  for (int round = 0; round < p.topk_group; ++round) {
    scored_expert best{-INFINITY, INT_MAX};
    for (int r = 0; r < routing_max_per_lane; ++r)
      if (!group_taken[r] && chosen_before(score[r], lane + 32 * r, best.score, best.index)) best = {score[r], lane + 32 * r};
    const scored_expert winner = warp_choice(choice_storage).Reduce(best, choose_better{});
    const int group = __shfl_sync(0xffffffffu, winner.index, 0);
    __syncwarp();
    for (int r = 0; r < routing_max_per_lane; ++r)
      if (lane + 32 * r == group) group_taken[r] = true;
    for (int q = 0; q < routing_max_per_lane; ++q)
      if ((lane + 32 * q) / size == group) kept[q] = true;
  }
  for (int q = 0; q < routing_max_per_lane; ++q)
    if (lane + 32 * q < experts) key[q] = gating::detail::masked_group_key(key[q], kept[q]);
  // top_k rounds on the keys; the weights are the uncorrected scores, slot c held by lane c % 32.
  double slot_weight[routing_max_per_lane];
  for (int r = 0; r < routing_max_per_lane; ++r) slot_weight[r] = 0;
  double weight_sum = 0;
  for (int count = 0; count < p.top_k; ++count) {
    scored_expert best{-INFINITY, INT_MAX};
    for (int q = 0; q < routing_max_per_lane; ++q)
      if (!taken[q] && chosen_before(key[q], lane + 32 * q, best.score, best.index)) best = {key[q], lane + 32 * q};
    const scored_expert winner = warp_choice(choice_storage).Reduce(best, choose_better{});
    const int index = __shfl_sync(0xffffffffu, winner.index, 0);
    __syncwarp();
    double w = 0;
    for (int q = 0; q < routing_max_per_lane; ++q)
      if (lane + 32 * q == index) {
        taken[q] = true;
        w = s[q];
      }
    w = __shfl_sync(0xffffffffu, w, index & 31);
    if (lane == 0) ids[count] = index;
    for (int r = 0; r < routing_max_per_lane; ++r)
      if (lane + 32 * r == count) slot_weight[r] = w;
    weight_sum += w;  // in selection order, as the host's sum
  }
  for (int r = 0; r < routing_max_per_lane; ++r)
    if (lane + 32 * r < p.top_k)
      weights[lane + 32 * r] = static_cast<A>(gating::detail::group_rule_weight(
          p.rule, slot_weight[r], weight_sum, p.top_k, p.renormalize, p.routed_scaling_factor));
}

/// One warp per token: ids (T x K, the sentinel E in unused slots) and weights (T x K). Grouped: the DeepSeek
/// group rules (bias: E entries of stride bias_stride, or null); otherwise top_k and the dynamic rules.
template <class A, bool Grouped>
MOECOMP_KERNEL void __launch_bounds__(routing_block)
    routing_kernel(const A* logits, index_t ld, index_t tokens, int experts, routing_kernel_params p, const A* bias,
                   index_t bias_stride, std::int64_t* ids, index_t ids_ld, A* weights, index_t weights_ld, int slots) {
  using warp_choice = cub::WarpReduce<scored_expert>;
  using warp_sum = cub::WarpReduce<double>;
  __shared__ typename warp_choice::TempStorage choice_storage[routing_warps];
  __shared__ typename warp_sum::TempStorage sum_storage[routing_warps];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  for (index_t t = static_cast<index_t>(blockIdx.x) * routing_warps + warp; t < tokens;
       t += static_cast<index_t>(gridDim.x) * routing_warps) {
    double s[routing_max_per_lane];
    bool taken[routing_max_per_lane];
    double local_max = -INFINITY;
    for (int q = 0; q < routing_max_per_lane; ++q) {
      const int j = lane + 32 * q;
      s[q] = j < experts ? static_cast<double>(logits[t * ld + j]) : -INFINITY;
      taken[q] = j >= experts;
      if (j < experts) local_max = fmax(local_max, s[q]);
    }
    if (p.scores == score_function::softmax) {
      const scored_expert top = warp_choice(choice_storage[warp]).Reduce(scored_expert{local_max, lane}, choose_better{});
      const double m = __shfl_sync(0xffffffffu, top.score, 0);
      __syncwarp();
      double local_sum = 0;
      for (int q = 0; q < routing_max_per_lane; ++q)
        if (lane + 32 * q < experts) local_sum += s[q] = exp(s[q] - m);
      const double total = __shfl_sync(0xffffffffu, warp_sum(sum_storage[warp]).Sum(local_sum), 0);
      __syncwarp();
      for (int q = 0; q < routing_max_per_lane; ++q)
        if (lane + 32 * q < experts) s[q] /= total;
    } else if (p.scores == score_function::sigmoid) {
      for (int q = 0; q < routing_max_per_lane; ++q)
        if (lane + 32 * q < experts) s[q] = gating::detail::sigmoid(s[q]);
    }
    if constexpr (Grouped) {
      __shared__ typename cub::WarpReduce<group_top_two>::TempStorage two_storage[routing_warps];
      group_limited_token<A>(s, taken, lane, experts, p, bias, bias_stride, choice_storage[warp], two_storage[warp],
                             ids + t * ids_ld, weights + t * weights_ld);
      for (int q = p.top_k + lane; q < slots; q += 32) {
        ids[t * ids_ld + q] = experts;
        weights[t * weights_ld + q] = A(0);
      }
    } else {
      (void)bias;
      (void)bias_stride;
      double local_total = 0;
      for (int q = 0; q < routing_max_per_lane; ++q)
        if (lane + 32 * q < experts) local_total += s[q];
      const double total = __shfl_sync(0xffffffffu, warp_sum(sum_storage[warp]).Sum(local_total), 0);
      __syncwarp();
      const bool dynamic = p.rule != routing_rule::top_k;
      const int limit = dynamic ? (p.max_k > 0 ? p.max_k : experts) : p.top_k;
      double running = 0, top = 0, weight_sum = 0;
      int count = 0;
      while (count < limit) {
        scored_expert best{-INFINITY, INT_MAX};
        for (int q = 0; q < routing_max_per_lane; ++q)
          if (!taken[q] && chosen_before(s[q], lane + 32 * q, best.score, best.index)) best = {s[q], lane + 32 * q};
        scored_expert winner = warp_choice(choice_storage[warp]).Reduce(best, choose_better{});
        winner.score = __shfl_sync(0xffffffffu, winner.score, 0);
        winner.index = __shfl_sync(0xffffffffu, winner.index, 0);
        __syncwarp();
        if (count == 0) top = winner.score;
        if (dynamic && count >= p.min_k && !takes_next(p.rule, p.tau, winner.score, count, running, total, top)) break;
        if ((winner.index & 31) == lane) taken[winner.index / 32] = true;
        const double w = dynamic && p.rule != routing_rule::top_p ? 1.0 : winner.score;
        if (lane == 0) {
          ids[t * ids_ld + count] = winner.index;
          weights[t * weights_ld + count] = static_cast<A>(w);
        }
        running += winner.score;
        weight_sum += w;
        ++count;
      }
      if (lane == 0) {
        if (!dynamic && p.renormalize)
          for (int q = 0; q < count; ++q)
            weights[t * weights_ld + q] = static_cast<A>(static_cast<double>(weights[t * weights_ld + q]) / weight_sum);
        for (int q = count; q < slots; ++q) {
          ids[t * ids_ld + q] = experts;
          weights[t * weights_ld + q] = A(0);
        }
      }
    }
    __syncwarp();
  }
}

/// keys[p] = ids[p] (int), rows[p] = p.
MOECOMP_KERNEL void flatten_ids_kernel(const std::int64_t* ids, index_t ld, index_t tokens, index_t slots, int* keys,
                                       int* rows) {
  const index_t pairs = tokens * slots;
  for (index_t p = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += static_cast<index_t>(gridDim.x) * blockDim.x) {
    keys[p] = static_cast<int>(ids[(p / slots) * ld + p % slots]);
    rows[p] = static_cast<int>(p);
  }
}

/// kept[e] = min(count, capacity), padded[e] = kept rounded up to the block size.
MOECOMP_KERNEL void padded_counts_kernel(const int* counts, int experts, int block, int capacity, int* kept, int* padded) {
  const int e = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (e >= experts) return;
  const int k = capacity > 0 && counts[e] > capacity ? capacity : counts[e];
  kept[e] = k;
  padded[e] = (k + block - 1) / block * block;
}

/// sorted_token_ids[all] = sentinel; position[all] = -1.
MOECOMP_KERNEL void fill_plan_kernel(std::int64_t* sorted, index_t capacity, std::int64_t sentinel, std::int64_t* position,
                                     index_t pairs) {
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < capacity || i < pairs;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    if (i < capacity) sorted[i] = sentinel;
    if (i < pairs) position[i] = -1;
  }
}

/// Sorted pair i of expert e (rank r = i - count_offsets[e]) goes to padded_offsets[e] + r when r < kept[e].
MOECOMP_KERNEL void scatter_plan_kernel(const int* sorted_keys, const int* sorted_rows, index_t pairs, int experts,
                                        const int* count_offsets, const int* padded_offsets, const int* kept,
                                        std::int64_t* sorted_token_ids, std::int64_t* position) {
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const int e = sorted_keys[i];
    if (e >= experts) continue;  // the sentinel sorts last
    const index_t rank = i - count_offsets[e];
    if (rank >= kept[e]) continue;
    const index_t dest = padded_offsets[e] + rank;
    sorted_token_ids[dest] = sorted_rows[i];
    position[sorted_rows[i]] = dest;
  }
}

/// expert_ids[b] = the expert whose padded run holds block b (binary search on the padded offsets).
MOECOMP_KERNEL void block_experts_kernel(const int* padded_offsets, int experts, int block, index_t blocks,
                                         std::int64_t* expert_ids) {
  for (index_t b = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks;
       b += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t start = b * block;
    int lo = 0, hi = experts - 1;  // the last e with padded_offsets[e] <= start
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (padded_offsets[mid] <= start) lo = mid;
      else hi = mid - 1;
    }
    // Skip experts with empty runs that share the offset.
    while (lo + 1 < experts && padded_offsets[lo + 1] <= start) ++lo;
    expert_ids[b] = lo;
  }
}

/// counts[e] = kept[e] (e < E); offsets[e] = padded_offsets[e] (e <= E), as int64.
MOECOMP_KERNEL void plan_outputs_kernel(const int* kept, const int* padded_offsets, int experts, std::int64_t* counts,
                                        index_t counts_stride, std::int64_t* offsets, index_t offsets_stride) {
  const int e = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (e < experts) counts[e * counts_stride] = kept[e];
  if (e <= experts) offsets[e * offsets_stride] = padded_offsets[e];
}

/// permuted row i = hidden row of sorted pair i's token (0 for padding); one block per row.
template <class T>
MOECOMP_KERNEL void gather_kernel(const std::int64_t* sorted, index_t rows, std::int64_t sentinel, int slots,
                                  const T* hidden, index_t hidden_ld, index_t d, T* permuted, index_t permuted_ld) {
  for (index_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const std::int64_t p = sorted[i];
    for (index_t c = threadIdx.x; c < d; c += blockDim.x)
      permuted[i * permuted_ld + c] = p == sentinel ? T(0) : hidden[(p / slots) * hidden_ld + c];
  }
}

/// out row t = sum over t's slots in order of weight x expert_out row at position[t K + k]; one block per token.
template <class T>
MOECOMP_KERNEL void combine_kernel(const std::int64_t* position, const T* weights, index_t weights_ld, int slots,
                                   index_t tokens, const T* expert_out, index_t expert_ld, index_t d, T* out,
                                   index_t out_ld) {
  for (index_t t = blockIdx.x; t < tokens; t += gridDim.x)
    for (index_t c = threadIdx.x; c < d; c += blockDim.x) {
      T acc = T(0);
      for (int k = 0; k < slots; ++k) {
        const std::int64_t pos = position[t * slots + k];
        if (pos >= 0) acc += weights[t * weights_ld + k] * expert_out[pos * expert_ld + c];
      }
      out[t * out_ld + c] = acc;
    }
}


}  // namespace cuda_detail
}  // namespace gating
MOECOMP_NAMESPACE_END
