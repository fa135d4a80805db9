#pragma once
// Routing on the host, behind <moecomp/gating/routing.hpp>: one token at a time (tiles of tokens in parallel),
// scores in double, the selection as a prefix of the experts ordered by (score descending, index ascending):
// top-k and the threshold rules rank only the experts that can be selected, the other rules sort.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/routing_types.hpp>
#include <moecomp/gating/detail/routing_rules.hpp>
#include <moecomp/gating/detail/routing_simd.hpp>
#include <moecomp/core/detail/parallel.hpp>
#include <moecomp/core/detail/lanes.hpp>
#include <moecomp/core/detail/vector_exp.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace gating {
namespace detail {

/// Tokens per block of select_block (and the most experts it selects per token).
constexpr index_t select_block_size = 16;

/// select_block's per-block state.
struct alignas(64) select_block_scratch {
#if MOECOMP_GATING_AVX512
  lane_candidates candidates[select_block_size];
#endif
  float bound[select_block_size];
  bool served[select_block_size];
  index_t taken[select_block_size];
  index_t order[select_block_size * select_block_size];
  double keys[select_block_size * select_block_size], weights[select_block_size * select_block_size];
};

/// One token's selection: `count` experts in `ids` (selection order) with `weights`; the rest is scratch.
/// One per thread, each on its own cache lines (the vectors' headers change with every token).
struct alignas(64) token_choice {
  std::vector<double> scores, keys, candidate_scores, logit_keys;
  std::vector<index_t> order, ids, candidates;
  std::vector<double> weights;
  index_t count = 0;
  select_block_scratch block;
};

/// The largest of x[0..n), n >= 1, in eight independent lanes combined in a fixed order (vectorisable; the
/// same value as a serial maximum, since max is exact).
inline double max_of(const double* x, index_t n) noexcept {
  double lane[8];
  for (int q = 0; q < 8; ++q) lane[q] = x[0];
  index_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int q = 0; q < 8; ++q) lane[q] = x[j + q] > lane[q] ? x[j + q] : lane[q];
  for (int q = 0; q < 8 && j + q < n; ++q) lane[q] = x[j + q] > lane[q] ? x[j + q] : lane[q];
  double top = lane[0];
  for (int q = 1; q < 8; ++q) top = lane[q] > top ? lane[q] : top;
  return top;
}

/// The sum of x[0..n) in eight lanes (entry j into lane j mod 8), the lanes added in order: a fixed
/// association, so the same bits on every call, thread count and vector width.
inline double sum_of(const double* x, index_t n) noexcept {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  index_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int q = 0; q < 8; ++q) lane[q] += x[j + q];
  for (int q = 0; q < 8 && j + q < n; ++q) lane[q] += x[j + q];
  double total = 0;
  for (int q = 0; q < 8; ++q) total += lane[q];
  return total;
}

/// scores = f(logits) in double: softmax (the maximum subtracted first; e^x times the reciprocal of their
/// sum, summed as sum_of) or sigmoid, with the vectorised exponential of core/detail/vector_exp.hpp, or the
/// logits themselves.
template <class A>
void score_row(score_function f, const A* logits, index_t e, std::vector<double>& scores, std::vector<double>& scratch) {
  scores.resize(static_cast<std::size_t>(e));
  double* s = scores.data();
  if (f == score_function::none) {
    for (index_t j = 0; j < e; ++j) s[j] = static_cast<double>(logits[j]);
    return;
  }
  scratch.resize(static_cast<std::size_t>(e));
  double* x = scratch.data();
  for (index_t j = 0; j < e; ++j) x[j] = static_cast<double>(logits[j]);
  if (f == score_function::softmax) {
    const double top = max_of(x, e);
    for (index_t j = 0; j < e; ++j) x[j] -= top;
    moecomp::detail::exp_into(x, s, e);
    const double scale = 1.0 / sum_of(s, e);  // a multiply per score instead of a division: within 1.5 ulp
    for (index_t j = 0; j < e; ++j) s[j] *= scale;
  } else {
    for (index_t j = 0; j < e; ++j) x[j] = -x[j];
    moecomp::detail::exp_into(x, s, e);
    for (index_t j = 0; j < e; ++j) s[j] = 1.0 / (1.0 + s[j]);
  }
}

/// The first `count` of the ids ordered by (key descending, index ascending), into order.
inline void best_by_key(const std::vector<double>& key, index_t count, std::vector<index_t>& order) {
  order.resize(key.size());
  for (std::size_t j = 0; j < key.size(); ++j) order[j] = static_cast<index_t>(j);
  auto better = [&](index_t a, index_t b) {
    return chosen_before(key[static_cast<std::size_t>(a)], a, key[static_cast<std::size_t>(b)], b);
  };
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(count), order.end(), better);
}

/// The candidates above which ranking is slower than sorting.
constexpr index_t max_ranked_candidates = 64;

/// The experts j with key[j] >= bound, in index order, into c.candidates (and their keys into
/// c.candidate_scores); returns how many. Branch-free, so unpredictable outcomes cost nothing.
inline index_t gather_candidates(const double* key, index_t e, double bound, token_choice& c) {
  c.candidates.resize(static_cast<std::size_t>(e));
  c.candidate_scores.resize(static_cast<std::size_t>(e));
  index_t* ids = c.candidates.data();
  double* values = c.candidate_scores.data();
  index_t count = 0;
  for (index_t j = 0; j < e; ++j) {
    ids[count] = j;
    values[count] = key[j];
    count += key[j] >= bound ? 1 : 0;
  }
  return count;
}

/// Of `count` candidates (c.candidates, c.candidate_scores, in index order), the first `take` in the order of
/// chosen_before into c.order[0..take): a candidate's rank is the number chosen before it, a permutation since
/// the order is total. Candidates are in index order, so on equal keys the earlier one is chosen first.
/// O(count^2) comparisons, branch-free (eight candidates at a time with the vector lanes), for
/// count <= max_ranked_candidates.
inline void rank_candidates(index_t count, index_t take, token_choice& c) {
  const double* values = c.candidate_scores.data();
  c.order.resize(static_cast<std::size_t>(take + 1));  // slot `take` takes the unselected, without a branch
  for (index_t a = 0; a < count; a += 8) {
    const index_t width = std::min<index_t>(8, count - a);
    long long rank[8];
#if defined(MOECOMP_HAS_LANES)
    using moecomp::detail::int_lanes8;
    using moecomp::detail::lanes8;
    lanes8 mine = {0, 0, 0, 0, 0, 0, 0, 0};
    for (index_t q = 0; q < width; ++q) mine[q] = values[a + q];
    const int_lanes8 position = int_lanes8{0, 1, 2, 3, 4, 5, 6, 7} + static_cast<long long>(a);
    int_lanes8 before = {0, 0, 0, 0, 0, 0, 0, 0};  // a true comparison is -1
    for (index_t b = 0; b < count; ++b) {
      const lanes8 other = lanes8{} + values[b];
      before -= (int_lanes8)(other > mine) | ((int_lanes8)(other == mine) & (int_lanes8)(position > static_cast<long long>(b)));
    }
    for (int q = 0; q < 8; ++q) rank[q] = before[q];
#else
    for (index_t q = 0; q < width; ++q) {
      rank[q] = 0;
      for (index_t b = 0; b < count; ++b)
        rank[q] += values[b] > values[a + q] || (values[b] == values[a + q] && b < a + q) ? 1 : 0;
    }
#endif
    for (index_t q = 0; q < width; ++q) {
      const auto r = static_cast<index_t>(rank[q]);
      c.order[static_cast<std::size_t>(r < take ? r : take)] = c.candidates[static_cast<std::size_t>(a + q)];
    }
  }
}

/// The top `k` experts by (key descending, index ascending) into c.order[0..k). A lower bound of the k-th
/// largest key is the smallest of k disjoint groups' maxima (experts j = g mod k form group g): only keys
/// at or above it can be selected, typically a few more than k, and those are ranked. Falls back to a
/// partial sort when too many tie at the bound.
inline void top_k_of(const double* key, index_t e, index_t k, token_choice& c) {
  double group_max[64];
  if (k <= 64 && k < e) {
    for (index_t g = 0; g < k; ++g) group_max[g] = key[g];
    for (index_t j = k; j < e; j += k) {
      const index_t width = std::min(k, e - j);
      for (index_t g = 0; g < width; ++g) group_max[g] = key[j + g] > group_max[g] ? key[j + g] : group_max[g];
    }
    double bound = group_max[0];
    for (index_t g = 1; g < k; ++g) bound = group_max[g] < bound ? group_max[g] : bound;
    const index_t count = gather_candidates(key, e, bound, c);
    if (count <= max_ranked_candidates) {
      rank_candidates(count, k, c);
      return;
    }
  }
  c.keys.assign(key, key + e);
  best_by_key(c.keys, k, c.order);
}

/// The logits of one token as double keys into c.logit_keys (top-k selects on them).
template <class A>
void logits_as_keys(const A* logits, index_t e, token_choice& c) {
  c.logit_keys.resize(static_cast<std::size_t>(e));
  for (index_t j = 0; j < e; ++j) c.logit_keys[static_cast<std::size_t>(j)] = static_cast<double>(logits[j]);
}

/// The group-limited selection of DeepSeek-V2 / V3 on `key` (V3: corrected scores): the topk_group best
/// groups by their score (V3: the sum of the group's two largest keys; V2: its largest), then the top_k best
/// keys, the other groups' keys masked to 0.0 as HF's routers do.
inline void group_limited(const routing_params& p, std::vector<double>& key, bool sum_of_two, token_choice& c) {
  const auto e = static_cast<index_t>(key.size()), size = e / p.n_group;
  std::vector<double> group_scores(static_cast<std::size_t>(p.n_group));
  for (index_t g = 0; g < p.n_group; ++g) {
    group_top_two best = empty_top_two();  // the rules the device shares (routing_rules.hpp)
    for (index_t j = g * size; j < (g + 1) * size; ++j) add_to_top_two(best, key[static_cast<std::size_t>(j)]);
    group_scores[static_cast<std::size_t>(g)] = group_score(best, sum_of_two);
  }
  std::vector<index_t> groups;
  best_by_key(group_scores, p.topk_group, groups);
  std::vector<char> kept(static_cast<std::size_t>(p.n_group), 0);
  for (index_t q = 0; q < p.topk_group; ++q) kept[static_cast<std::size_t>(groups[static_cast<std::size_t>(q)])] = 1;
  for (index_t j = 0; j < e; ++j)
    key[static_cast<std::size_t>(j)] =
        masked_group_key(key[static_cast<std::size_t>(j)], kept[static_cast<std::size_t>(j / size)] != 0);
  best_by_key(key, p.top_k, c.order);
}

/// Selects one token's experts into c.ids / c.weights (c.count of them).
template <class A>
void choose(const routing_params& p, const A* logits, index_t e, const A* bias, token_choice& c) {
  const score_function f = p.rule == routing_rule::deepseek_v3 ? score_function::sigmoid : p.scores;
  c.ids.clear();
  c.weights.clear();
  if (p.rule == routing_rule::top_k) {
    // Selection on the logits: softmax and sigmoid are increasing, so these are the experts of the exact
    // scores (rounded scores could tie where the logits do not). Weights need only the selected scores, and
    // the full softmax only when not renormalised (its denominator).
    logits_as_keys(logits, e, c);
    top_k_of(c.logit_keys.data(), e, p.top_k, c);
    const index_t k = p.top_k;
    c.weights.resize(static_cast<std::size_t>(k));
    c.ids.resize(static_cast<std::size_t>(k));
    double* w = c.weights.data();
    for (index_t q = 0; q < k; ++q) {
      c.ids[static_cast<std::size_t>(q)] = c.order[static_cast<std::size_t>(q)];
      w[q] = static_cast<double>(logits[c.order[static_cast<std::size_t>(q)]]);
    }
    c.count = k;
    if (f == score_function::softmax && !p.renormalize) {
      score_row(f, logits, e, c.scores, c.keys);
      for (index_t q = 0; q < k; ++q) w[q] = c.scores[static_cast<std::size_t>(c.ids[static_cast<std::size_t>(q)])];
      return;
    }
    if (f != score_function::none) {
      c.keys.resize(static_cast<std::size_t>(k));
      const double shift = f == score_function::softmax ? w[0] : 0.0;  // w[0]: the largest logit
      for (index_t q = 0; q < k; ++q) c.keys[static_cast<std::size_t>(q)] = f == score_function::softmax ? w[q] - shift : -w[q];
      moecomp::detail::exp_into(c.keys.data(), w, k);
      if (f == score_function::sigmoid)
        for (index_t q = 0; q < k; ++q) w[q] = 1.0 / (1.0 + w[q]);
    }
    if (p.renormalize) {
      double total = 0;
      for (index_t q = 0; q < k; ++q) total += w[q];
      for (index_t q = 0; q < k; ++q) w[q] /= total;
    }
    return;
  }
  score_row(f, logits, e, c.scores, c.keys);
  auto take_prefix = [&](index_t k, bool unit_weight) {
    for (index_t q = 0; q < k; ++q) {
      const index_t j = c.order[static_cast<std::size_t>(q)];
      c.ids.push_back(j);
      c.weights.push_back(unit_weight ? 1.0 : c.scores[static_cast<std::size_t>(j)]);
    }
    c.count = k;
  };
  auto normalise = [&](double extra) {
    double total = 0;
    for (double w : c.weights) total += w;
    for (double& w : c.weights) w /= total + extra;
  };
  switch (p.rule) {
    case routing_rule::deepseek_v3: {
      c.keys = c.scores;
      if (bias)
        for (index_t j = 0; j < e; ++j) c.keys[static_cast<std::size_t>(j)] += static_cast<double>(bias[j]);
      group_limited(p, c.keys, true, c);
      take_prefix(p.top_k, false);  // the uncorrected sigmoid scores
      if (p.renormalize) normalise(1e-20);
      for (double& w : c.weights) w *= p.routed_scaling_factor;
      return;
    }
    case routing_rule::group_limited_greedy: {
      c.keys = c.scores;
      group_limited(p, c.keys, false, c);
      take_prefix(p.top_k, false);
      if (p.top_k > 1 && p.renormalize) normalise(1e-20);  // DeepSeek-V2: normalise, or else scale
      else
        for (double& w : c.weights) w *= p.routed_scaling_factor;
      return;
    }
    default: break;
  }
  // The threshold rules select {i : s_i >= bound} (their test is monotone in the score): gather those and
  // rank them, unless min_k asks for more or too many pass.
  if (p.rule == routing_rule::threshold || p.rule == routing_rule::threshold_code) {
    const double top = max_of(c.scores.data(), e);
    const double bound = p.rule == routing_rule::threshold ? p.tau * top : (1.0 - p.tau) * top;
    const index_t count = gather_candidates(c.scores.data(), e, bound, c);
    if (count >= p.min_k && count <= max_ranked_candidates) {
      const index_t k = p.max_k > 0 ? std::min(count, p.max_k) : count;
      rank_candidates(count, k, c);
      take_prefix(k, true);
      return;
    }
  }
  // The dynamic rules: a prefix of the experts by descending score, as long as the rule takes the next one.
  best_by_key(c.scores, e, c.order);
  index_t k = 0;
  const double top = c.scores[static_cast<std::size_t>(c.order[0])];
  double total = 0, running = 0;
  for (double s : c.scores) total += s;
  while (k < e) {
    const double candidate = c.scores[static_cast<std::size_t>(c.order[static_cast<std::size_t>(k)])];
    if (!takes_next(p.rule, p.tau, candidate, k, running, total, top)) break;
    running += candidate;
    ++k;
  }
  if (p.min_k > 0) k = std::max(k, std::min(p.min_k, e));
  if (p.max_k > 0) k = std::min(k, p.max_k);
  take_prefix(k, p.rule != routing_rule::top_p);
}

/// Whether select_block serves these parameters: float logits on an AVX-512 target, and either the top-k
/// rule with k <= 16 below e and weights from the selected logits alone (not the unrenormalised softmax,
/// whose denominator needs every expert), or a threshold rule on the raw logits.
template <class A>
bool select_block_applies(const routing_params& p, index_t e) noexcept {
#if MOECOMP_GATING_AVX512
  if (!std::is_same_v<A, float>) return false;
  if (p.rule == routing_rule::top_k)
    return p.top_k <= select_block_size && p.top_k < e && !(p.scores == score_function::softmax && !p.renormalize);
  return (p.rule == routing_rule::threshold || p.rule == routing_rule::threshold_code) && p.scores == score_function::none;
#else
  (void)p, (void)e;
  return false;
#endif
}

/// Top-k or a threshold rule (select_block_applies) for the n <= select_block_size tokens first .. first +
/// n - 1, in phases over the block (bounds, then candidates, then ranks, then one run of exponentials) so
/// that the tokens' long dependency chains overlap; `each(token, choice)` gets every token in order. Every
/// token gets choose()'s ids and weights, bit for bit: the same selection, and the same double arithmetic on
/// the same values in the same order (the exponential is element-wise). A token the vector path cannot
/// serve (more than 16 candidates at its bound, fewer than min_k above a threshold, a threshold outside the
/// float range) goes through choose().
template <class A, class Each>
void select_block(const routing_params& p, matrix_view<const A> logits, index_t first, index_t n, token_choice& c,
                  Each&& each) {
#if MOECOMP_GATING_AVX512
  if constexpr (std::is_same_v<A, float>) {
    const index_t e = logits.cols();
    const bool top_k = p.rule == routing_rule::top_k;
    select_block_scratch& s = c.block;
    for (index_t b = 0; b < n; ++b) {
      const float* x = logits.row_ptr(first + b);
      if (top_k) {
        s.bound[b] = simd_top_k_bound(x, e, p.top_k);
        s.served[b] = true;
      } else {
        const double top = static_cast<double>(simd_max(x, e));
        s.served[b] = float_at_or_above(p.rule == routing_rule::threshold ? p.tau * top : (1.0 - p.tau) * top, s.bound[b]);
      }
    }
    for (index_t b = 0; b < n; ++b) {
      if (s.served[b]) s.candidates[b] = simd_gather_candidates(logits.row_ptr(first + b), e, s.bound[b]);
      else s.candidates[b].count = 17;  // defined, and too many for the vector ranking
    }
    for (index_t b = 0; b < n; ++b) {
      index_t* order = s.order + b * select_block_size;
      const index_t count = s.candidates[b].count;
      s.served[b] = s.served[b] && count <= 16 && (top_k || count >= p.min_k);
      s.taken[b] = !s.served[b] ? 0 : top_k ? p.top_k : p.max_k > 0 ? std::min(count, p.max_k) : count;
      if (s.served[b]) simd_order_candidates(s.candidates[b], s.taken[b], order);
    }
    double* w = s.weights;
    if (top_k) {
      const index_t k = p.top_k;
      for (index_t b = 0; b < n; ++b)
        for (index_t q = 0; q < k; ++q)  // a token not served reads expert 0: a placeholder
          w[b * k + q] = s.served[b] ? static_cast<double>(logits(first + b, s.order[b * select_block_size + q])) : 0.0;
      if (p.scores != score_function::none) {
        for (index_t b = 0; b < n; ++b) {
          const double shift = p.scores == score_function::softmax ? w[b * k] : 0.0;  // the largest logit
          for (index_t q = 0; q < k; ++q)
            s.keys[b * k + q] = p.scores == score_function::softmax ? w[b * k + q] - shift : -w[b * k + q];
        }
        moecomp::detail::exp_into(s.keys, w, n * k);
        if (p.scores == score_function::sigmoid)
          for (index_t q = 0; q < n * k; ++q) w[q] = 1.0 / (1.0 + w[q]);
      }
      if (p.renormalize)
        for (index_t b = 0; b < n; ++b) {
          double total = 0;
          for (index_t q = 0; q < k; ++q) total += w[b * k + q];
          for (index_t q = 0; q < k; ++q) w[b * k + q] /= total;
        }
    }
    for (index_t b = 0; b < n; ++b) {
      if (!s.served[b]) {
        choose(p, logits.row_ptr(first + b), e, static_cast<const A*>(nullptr), c);
      } else {
        const index_t k = s.taken[b];
        c.ids.assign(s.order + b * select_block_size, s.order + b * select_block_size + k);
        if (top_k) c.weights.assign(w + b * k, w + (b + 1) * k);
        else c.weights.assign(static_cast<std::size_t>(k), 1.0);
        c.count = k;
      }
      each(first + b, c);
    }
    return;
  }
#endif
  (void)p, (void)logits, (void)first, (void)n, (void)c, (void)each;
}

/// Whether threshold_dense_row serves these parameters: float logits on an AVX-512 target, a threshold rule
/// on the raw logits, and no min_k (a row that needs more than pass is ranked by choose()).
template <class A>
bool threshold_dense_applies(const routing_params& p) noexcept {
  return MOECOMP_GATING_AVX512 && std::is_same_v<A, float> && p.scores == score_function::none && p.min_k == 0 &&
         (p.rule == routing_rule::threshold || p.rule == routing_rule::threshold_code);
}

/// A threshold rule's dense row straight from the logits: 1 where x_j >= bound, else 0, with no ranking (the
/// dense layout has no selection order). Returns how many passed, or -1 where choose() must take the token
/// (the bound outside the float range, or more passing than max_k, which keeps only the best max_k).
template <class A>
index_t threshold_dense_row(const routing_params& p, const A* x, index_t e, A* row) noexcept {
  const index_t max_k = p.max_k;  // read once: the row's stores could alias p as far as the compiler knows
#if MOECOMP_GATING_AVX512
  if constexpr (std::is_same_v<A, float>) {
    const double top = static_cast<double>(simd_max(x, e));
    float bound = 0;
    if (!float_at_or_above(p.rule == routing_rule::threshold ? p.tau * top : (1.0 - p.tau) * top, bound)) return -1;
    const __m512 b = _mm512_set1_ps(bound), ones = _mm512_set1_ps(1.0f);
    index_t count = 0;
    for (index_t j = 0; j < e; j += 16) {
      const __mmask16 valid = first_lanes(e - j);
      const __mmask16 pass = _mm512_mask_cmp_ps_mask(valid, _mm512_maskz_loadu_ps(valid, x + j), b, _CMP_GE_OQ);
      count += _mm_popcnt_u32(pass);
      _mm512_mask_storeu_ps(row + j, valid, _mm512_maskz_mov_ps(pass, ones));
    }
    return max_k > 0 && count > max_k ? -1 : count;  // choose() then rewrites the row
  }
#endif
  (void)p, (void)x, (void)e, (void)row, (void)max_k;
  return -1;
}

/// Routes every token; `emit(token, choice)` writes the outputs. Returns the counts. `dense`, when given, is
/// the dense output that emit writes: rows the threshold rules can write directly (threshold_dense_row) skip
/// the selection order and emit.
template <class A, class Emit>
routing_result route_host(const host_context& ctx, const routing_params& p, matrix_view<const A> logits,
                          const A* bias, Emit&& emit, matrix_view<A> dense = {}) {
  const index_t t_count = logits.rows(), e = logits.cols();
  const int threads = std::max(1, ctx.threads());
  std::vector<token_choice> scratch(static_cast<std::size_t>(threads));
  // Tiles of tokens per task: a token's work is far below the cost of scheduling it alone. Each tile keeps
  // its own counts (selected pairs, fewest and most experts), combined in tile order.
  constexpr index_t tile = 256;
  const index_t tiles = (t_count + tile - 1) / tile;
  struct tile_counts {
    index_t selected = 0, fewest = std::numeric_limits<index_t>::max(), most = 0;
  };
  std::vector<tile_counts> counts(static_cast<std::size_t>(tiles));
  moecomp::detail::parallel_for(tiles, threads, [&](index_t b, int thread) {
    token_choice& c = scratch[static_cast<std::size_t>(thread)];
    tile_counts mine;  // written back once: neighbouring tiles' counts share cache lines
    auto record = [&](index_t t, const token_choice& choice) {
      mine.selected += choice.count;
      mine.fewest = std::min(mine.fewest, choice.count);
      mine.most = std::max(mine.most, choice.count);
      emit(t, choice);
    };
    const index_t end = std::min(t_count, (b + 1) * tile);
    if (dense.rows() == t_count && dense.cols() == e && threshold_dense_applies<A>(p)) {
      for (index_t t = b * tile; t < end; ++t) {
        const index_t count = threshold_dense_row(p, logits.row_ptr(t), e, dense.row_ptr(t));
        if (count >= 0) {
          mine.selected += count;
          mine.fewest = std::min(mine.fewest, count);
          mine.most = std::max(mine.most, count);
        } else {
          choose(p, logits.row_ptr(t), e, bias, c);
          record(t, c);
        }
      }
    } else if (select_block_applies<A>(p, e)) {
      for (index_t t = b * tile; t < end; t += select_block_size)
        select_block(p, logits, t, std::min(select_block_size, end - t), c, record);
    } else {
      for (index_t t = b * tile; t < end; ++t) {
        choose(p, logits.row_ptr(t), e, bias, c);
        record(t, c);
      }
    }
    counts[static_cast<std::size_t>(b)] = mine;
  });
  routing_result r;
  r.tokens = t_count;
  r.min_experts = t_count > 0 ? std::numeric_limits<index_t>::max() : 0;
  for (const tile_counts& n : counts) {
    r.selected += n.selected;
    r.min_experts = std::min(r.min_experts, n.fewest);
    r.max_experts = std::max(r.max_experts, n.most);
  }
  r.experts_per_token_mean = t_count > 0 ? static_cast<double>(r.selected) / static_cast<double>(t_count) : 0.0;
  return r;
}

}  // namespace detail
}  // namespace gating
MOECOMP_NAMESPACE_END
