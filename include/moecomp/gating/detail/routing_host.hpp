#pragma once
// Routing on the host, behind <moecomp/gating/routing.hpp>: one token at a time (tokens in parallel), scores
// in double, the selection as a prefix of the experts ordered by (score descending, index ascending).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/routing_types.hpp>
#include <moecomp/gating/detail/routing_rules.hpp>
#include <moecomp/core/detail/parallel.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace gating {
namespace detail {

/// One token's selection: `count` experts in `ids` (selection order) with `weights`.
struct token_choice {
  std::vector<double> scores, keys;
  std::vector<index_t> order, ids;
  std::vector<double> weights;
  index_t count = 0;
};

/// scores = f(logits) in double (softmax with the maximum subtracted first).
template <class A>
void score_row(score_function f, const A* logits, index_t e, std::vector<double>& scores) {
  scores.resize(static_cast<std::size_t>(e));
  if (f == score_function::softmax) {
    double top = -std::numeric_limits<double>::infinity(), total = 0;
    for (index_t j = 0; j < e; ++j) top = std::max(top, static_cast<double>(logits[j]));
    for (index_t j = 0; j < e; ++j) total += scores[static_cast<std::size_t>(j)] = std::exp(static_cast<double>(logits[j]) - top);
    for (double& s : scores) s /= total;
  } else if (f == score_function::sigmoid) {
    for (index_t j = 0; j < e; ++j) scores[static_cast<std::size_t>(j)] = sigmoid(static_cast<double>(logits[j]));
  } else {
    for (index_t j = 0; j < e; ++j) scores[static_cast<std::size_t>(j)] = static_cast<double>(logits[j]);
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

/// The group-limited selection of DeepSeek-V2 / V3 on `key` (V3: corrected scores): the topk_group best
/// groups by their score (V3: the sum of the group's two largest keys; V2: its largest), then the top_k best
/// keys, the other groups' keys masked to 0.0 as HF's routers do.
inline void group_limited(const routing_params& p, std::vector<double>& key, bool sum_of_two, token_choice& c) {
  const auto e = static_cast<index_t>(key.size()), size = e / p.n_group;
  std::vector<double> group_score(static_cast<std::size_t>(p.n_group));
  for (index_t g = 0; g < p.n_group; ++g) {
    double first = -std::numeric_limits<double>::infinity(), second = first;
    for (index_t j = g * size; j < (g + 1) * size; ++j) {
      const double v = key[static_cast<std::size_t>(j)];
      if (v > first) {
        second = first;
        first = v;
      } else if (v > second) {
        second = v;
      }
    }
    group_score[static_cast<std::size_t>(g)] = sum_of_two ? first + second : first;
  }
  std::vector<index_t> groups;
  best_by_key(group_score, p.topk_group, groups);
  std::vector<char> kept(static_cast<std::size_t>(p.n_group), 0);
  for (index_t q = 0; q < p.topk_group; ++q) kept[static_cast<std::size_t>(groups[static_cast<std::size_t>(q)])] = 1;
  for (index_t j = 0; j < e; ++j)
    if (!kept[static_cast<std::size_t>(j / size)]) key[static_cast<std::size_t>(j)] = 0.0;
  best_by_key(key, p.top_k, c.order);
}

/// Selects one token's experts into c.ids / c.weights (c.count of them).
template <class A>
void choose(const routing_params& p, const A* logits, index_t e, const A* bias, token_choice& c) {
  const score_function f = p.rule == routing_rule::deepseek_v3 ? score_function::sigmoid : p.scores;
  score_row(f, logits, e, c.scores);
  c.ids.clear();
  c.weights.clear();
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
    case routing_rule::top_k:
      best_by_key(c.scores, p.top_k, c.order);
      take_prefix(p.top_k, false);
      if (p.renormalize) normalise(0.0);
      return;
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

/// Routes every token; `emit(token, choice)` writes the outputs. Returns the counts.
template <class A, class Emit>
routing_result route_host(const host_context& ctx, const routing_params& p, matrix_view<const A> logits,
                          const A* bias, Emit&& emit) {
  const index_t t_count = logits.rows(), e = logits.cols();
  const int threads = std::max(1, ctx.threads());
  std::vector<token_choice> scratch(static_cast<std::size_t>(threads));
  std::vector<index_t> counts(static_cast<std::size_t>(t_count));
  moecomp::detail::parallel_for(t_count, threads, [&](index_t t, int thread) {
    token_choice& c = scratch[static_cast<std::size_t>(thread)];
    choose(p, logits.row_ptr(t), e, bias, c);
    counts[static_cast<std::size_t>(t)] = c.count;
    emit(t, c);
  });
  routing_result r;
  r.tokens = t_count;
  r.min_experts = t_count > 0 ? std::numeric_limits<index_t>::max() : 0;
  for (index_t k : counts) {
    r.selected += k;
    r.min_experts = std::min(r.min_experts, k);
    r.max_experts = std::max(r.max_experts, k);
  }
  r.experts_per_token_mean = t_count > 0 ? static_cast<double>(r.selected) / static_cast<double>(t_count) : 0.0;
  return r;
}

}  // namespace detail
}  // namespace gating
MOECOMP_NAMESPACE_END
