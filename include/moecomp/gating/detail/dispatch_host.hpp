#pragma once
// The dispatch plan on the host, behind <moecomp/gating/dispatch.hpp>: a stable counting sort of the
// (token, slot) pairs by expert (O(T K + E chunks), chunks of pairs in parallel), the padding, the capacity, the gather and the combine.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/dispatch_types.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/parallel.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace gating {
namespace detail {

/// Builds the plan of a T x K id layout with E experts into `plan`, reusing its storage. Throws
/// invalid_argument for ids outside [0, E] or bad parameters, before writing anything.
///
/// Two parallel passes over chunks of the flat pairs: (1) validate and count each chunk's pairs per expert;
/// then, serially per expert, where each chunk's pairs of that expert start in the expert's flat order; (2)
/// place every pair at its rank. A pair's rank is its index among its expert's pairs in flat order whatever
/// the chunking, so the plan is the stable counting sort's at any thread count.
inline void make_dispatch_plan_host(const host_context& ctx, const dispatch_params& params, index_t experts,
                                    matrix_view<const std::int64_t> ids, dispatch_plan& plan) {
  constexpr const char* fn = "make_dispatch_plan";
  MOECOMP_EXPECTS(experts >= 1, fn, ": experts must be >= 1, got ", experts);
  MOECOMP_EXPECTS(params.block_size >= 1, fn, ": params.block_size must be >= 1, got ", params.block_size);
  MOECOMP_EXPECTS(params.capacity >= 0, fn, ": params.capacity must be >= 0 (0: no limit), got ", params.capacity);
  const index_t t_count = ids.rows(), k = ids.cols(), pairs = t_count * k;
  const auto e_count = static_cast<std::size_t>(experts);
  // Chunks of whole tokens, about 16384 pairs each: enough work per task, few per-chunk histograms.
  const index_t chunk_tokens = std::max<index_t>(1, 16384 / std::max<index_t>(k, 1));
  const index_t chunks = t_count > 0 ? (t_count + chunk_tokens - 1) / chunk_tokens : 0;
  // A thread per 2^18 pairs at most: below that, waking a second thread costs more than it saves (measured:
  // 16384 x 8 pairs take 0.84 ms on one thread, 1.4 ms on two).
  const int threads = static_cast<int>(std::min<index_t>(std::max(1, ctx.threads()), pairs / (index_t(1) << 18) + 1));
  // start[c * (E + 1) + e]: chunk c's count of expert e (pass 1), then its first rank (the sentinel E counted
  // too, never placed).
  std::vector<std::int64_t> start(static_cast<std::size_t>(chunks) * (e_count + 1), 0);
  std::vector<index_t> first_bad(static_cast<std::size_t>(chunks), pairs);
  moecomp::detail::parallel_for(chunks, threads, [&](index_t c, int) {
    std::int64_t* count = start.data() + static_cast<std::size_t>(c) * (e_count + 1);
    const index_t t_end = std::min(t_count, (c + 1) * chunk_tokens);
    for (index_t t = c * chunk_tokens; t < t_end; ++t) {
      const std::int64_t* row = ids.row_ptr(t);
      for (index_t q = 0; q < k; ++q) {
        const std::int64_t e = row[q];
        if (MOECOMP_UNLIKELY(e < 0 || e > experts)) {
          first_bad[static_cast<std::size_t>(c)] = t * k + q;
          return;
        }
        ++count[e];
      }
    }
  });
  for (const index_t p : first_bad)
    MOECOMP_EXPECTS(p == pairs, fn, ": ids must be expert ids in [0, ", experts, "] (", experts,
                    ": an unused slot), got ", ids(p / k, p % k), " at (", p / k, ", ", p % k, ")");
  plan.counts.assign(e_count, 0);
  plan.offsets.assign(e_count + 1, 0);
  plan.dropped = 0;
  for (std::size_t e = 0; e < e_count; ++e) {
    std::int64_t total = 0;
    for (index_t c = 0; c < chunks; ++c) {
      std::int64_t& cell = start[static_cast<std::size_t>(c) * (e_count + 1) + e];
      const std::int64_t n = cell;
      cell = total;
      total += n;
    }
    const std::int64_t kept = params.capacity > 0 ? std::min<std::int64_t>(total, params.capacity) : total;
    plan.counts[e] = kept;
    plan.dropped += static_cast<index_t>(total - kept);
    const std::int64_t padded = (kept + params.block_size - 1) / params.block_size * params.block_size;
    plan.offsets[e + 1] = plan.offsets[e] + padded;
  }
  plan.num_tokens_post_pad = plan.offsets[e_count];
  plan.sorted_token_ids.resize(static_cast<std::size_t>(plan.num_tokens_post_pad));
  plan.position.resize(static_cast<std::size_t>(pairs));
  const std::int64_t* offsets = plan.offsets.data();
  std::int64_t* position = plan.position.data();
  std::int64_t* sorted = plan.sorted_token_ids.data();
  const std::int64_t capacity = params.capacity > 0 ? params.capacity : std::numeric_limits<std::int64_t>::max();
  moecomp::detail::parallel_for(chunks, threads, [&](index_t c, int) {
    std::int64_t* rank = start.data() + static_cast<std::size_t>(c) * (e_count + 1);
    const index_t t_end = std::min(t_count, (c + 1) * chunk_tokens);
    for (index_t t = c * chunk_tokens; t < t_end; ++t) {
      const std::int64_t* row = ids.row_ptr(t);
      for (index_t q = 0; q < k; ++q) {
        const std::int64_t e = row[q], p = t * k + q;
        const std::int64_t r = rank[e]++;
        if (e == experts || r >= capacity) {
          position[p] = -1;
          continue;
        }
        const std::int64_t at = offsets[e] + r;
        position[p] = at;
        sorted[at] = p;
      }
    }
  });
  const std::int64_t block = params.block_size;
  plan.expert_ids.resize(static_cast<std::size_t>(plan.num_tokens_post_pad / block));
  std::int64_t* expert_ids = plan.expert_ids.data();
  for (std::size_t e = 0; e < e_count; ++e) {
    const std::int64_t begin = offsets[e], used = begin + plan.counts[e], end = offsets[e + 1];
    for (std::int64_t i = used; i < end; ++i) sorted[i] = pairs;  // the padding's sentinel
    for (std::int64_t b = begin / block; b < end / block; ++b)
      expert_ids[b] = static_cast<std::int64_t>(e);  // offsets are multiples of B
  }
}

/// permuted (num_tokens_post_pad x d): row i = hidden row of the token of sorted pair i, 0 for padding.
template <class T>
void dispatch_gather_host(const host_context& ctx, const dispatch_plan& plan, index_t k, matrix_view<const T> hidden,
                     matrix_view<T> permuted) {
  constexpr const char* fn = "dispatch_gather";
  MOECOMP_EXPECTS(permuted.rows() == plan.num_tokens_post_pad && permuted.cols() == hidden.cols(), fn,
                  ": permuted must be ", moecomp::detail::shape_string(plan.num_tokens_post_pad, hidden.cols()),
                  ", got ", moecomp::detail::shape_string(permuted.rows(), permuted.cols()));
  MOECOMP_EXPECTS(hidden.rows() * k == static_cast<index_t>(plan.position.size()), fn, ": hidden must have ",
                  static_cast<index_t>(plan.position.size()) / (k > 0 ? k : 1), " rows (the tokens), got ", hidden.rows());
  const std::int64_t sentinel = static_cast<std::int64_t>(plan.position.size());
  moecomp::detail::parallel_for(permuted.rows(), ctx.threads(), [&](index_t i, int) {
    const std::int64_t p = plan.sorted_token_ids[static_cast<std::size_t>(i)];
    T* out = permuted.row_ptr(i);
    if (p == sentinel) {
      for (index_t c = 0; c < hidden.cols(); ++c) out[c] = T(0);
      return;
    }
    const T* in = hidden.row_ptr(p / k);
    for (index_t c = 0; c < hidden.cols(); ++c) out[c] = in[c];
  });
}

/// out (T x d): row t = sum over t's kept slots k, in slot order, of weights(t, k) x expert_out row of (t, k).
template <class T>
void dispatch_combine_host(const host_context& ctx, const dispatch_plan& plan, matrix_view<const T> expert_out,
                      matrix_view<const T> weights, matrix_view<T> out) {
  constexpr const char* fn = "dispatch_combine";
  const index_t t_count = weights.rows(), k = weights.cols();
  MOECOMP_EXPECTS(t_count * k == static_cast<index_t>(plan.position.size()), fn, ": weights must be T x K with T K = ",
                  static_cast<index_t>(plan.position.size()), " (the plan's pairs), got ",
                  moecomp::detail::shape_string(t_count, k));
  MOECOMP_EXPECTS(expert_out.rows() == plan.num_tokens_post_pad, fn, ": expert_out must have ", plan.num_tokens_post_pad,
                  " rows (num_tokens_post_pad), got ", expert_out.rows());
  MOECOMP_EXPECTS(out.rows() == t_count && out.cols() == expert_out.cols(), fn, ": out must be ",
                  moecomp::detail::shape_string(t_count, expert_out.cols()), ", got ",
                  moecomp::detail::shape_string(out.rows(), out.cols()));
  moecomp::detail::parallel_for(t_count, ctx.threads(), [&](index_t t, int) {
    T* o = out.row_ptr(t);
    for (index_t c = 0; c < out.cols(); ++c) o[c] = T(0);
    for (index_t q = 0; q < k; ++q) {
      const std::int64_t pos = plan.position[static_cast<std::size_t>(t * k + q)];
      if (pos < 0) continue;
      const T w = weights(t, q);
      const T* row = expert_out.row_ptr(pos);
      for (index_t c = 0; c < out.cols(); ++c) o[c] += w * row[c];
    }
  });
}

}  // namespace detail
}  // namespace gating
MOECOMP_NAMESPACE_END
