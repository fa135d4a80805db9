#pragma once
// Parameters and result of routing (<moecomp/gating/routing.hpp>): which experts each token goes to, and
// with what weight. Documentation: docs/gating.md.
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>

#include <string>
#include <string_view>

MOECOMP_NAMESPACE_BEGIN
namespace gating {

/// What the router's logits become before a rule reads them.
enum class score_function { softmax, sigmoid, none };

inline const char* to_string(score_function f) noexcept {
  switch (f) {
    case score_function::softmax: return "softmax";
    case score_function::sigmoid: return "sigmoid";
    case score_function::none: return "none";
  }
  return "unknown";
}

/// Parses "softmax", "sigmoid" or "none"; throws invalid_argument otherwise.
inline score_function parse_score_function(std::string_view name) {
  for (score_function f : {score_function::softmax, score_function::sigmoid, score_function::none})
    if (name == to_string(f)) return f;
  MOECOMP_FAIL(error_kind::invalid_argument, "scores: expected softmax, sigmoid or none, got '", std::string(name), "'");
}

/// The selection rules (ties always to the lowest expert index):
///  * top_k: the k largest scores; weights the scores, renormalised to sum 1 when params.renormalize
///    (Mixtral, Qwen2-MoE's norm_topk_prob, Switch with k = 1, OLMoE);
///  * deepseek_v3: sigmoid scores plus a selection-only correction bias; group score = the sum of the two
///    largest corrected scores of each of n_group groups; the topk_group best groups; the k largest
///    corrected scores among their experts; weights the uncorrected scores (normalised when renormalize,
///    over their sum + 1e-20 as HF), times routed_scaling_factor;
///  * group_limited_greedy (DeepSeek-V2): group score = the largest score of the group; then as above
///    without correction;
///  * threshold: SADMoE's dynamic-k, expert i selected iff s_i >= tau max_j s_j (weight 1);
///  * threshold_code: D2DMoE's code form of it, s_i >= (1 - tau) max_j s_j (weight 1);
///  * cumulative: D2DMoE's dynk, the fewest largest scores whose share of the total exceeds tau (weight 1);
///  * top_p: Huang et al. 2024, the largest scores until their cumulative sum reaches p, the crossing one
///    included; weights the scores, not renormalised.
/// The dynamic rules (threshold, threshold_code, cumulative, top_p) honour min_k / max_k.
enum class routing_rule { top_k, deepseek_v3, group_limited_greedy, threshold, threshold_code, cumulative, top_p };

inline const char* to_string(routing_rule r) noexcept {
  switch (r) {
    case routing_rule::top_k: return "top_k";
    case routing_rule::deepseek_v3: return "deepseek_v3";
    case routing_rule::group_limited_greedy: return "group_limited_greedy";
    case routing_rule::threshold: return "threshold";
    case routing_rule::threshold_code: return "threshold_code";
    case routing_rule::cumulative: return "cumulative";
    case routing_rule::top_p: return "top_p";
  }
  return "unknown";
}

inline routing_rule parse_routing_rule(std::string_view name) {
  for (routing_rule r : {routing_rule::top_k, routing_rule::deepseek_v3, routing_rule::group_limited_greedy,
                         routing_rule::threshold, routing_rule::threshold_code, routing_rule::cumulative,
                         routing_rule::top_p})
    if (name == to_string(r)) return r;
  MOECOMP_FAIL(error_kind::invalid_argument,
               "rule: expected top_k, deepseek_v3, group_limited_greedy, threshold, threshold_code, cumulative or "
               "top_p, got '",
               std::string(name), "'");
}

struct routing_params {
  routing_rule rule = routing_rule::top_k;
  score_function scores = score_function::softmax;
  /// top_k, deepseek_v3, group_limited_greedy: experts per token, 1 <= k <= E.
  index_t top_k = 2;
  /// Normalise the selected weights to sum 1 (top_k, deepseek_v3, group_limited_greedy).
  bool renormalize = false;
  /// threshold, threshold_code, cumulative: tau in [0, 1]. top_p: p in [0, 1].
  double tau = 0.5;
  /// deepseek_v3, group_limited_greedy: n_group groups of E / n_group experts, the topk_group best kept.
  index_t n_group = 1, topk_group = 1;
  /// deepseek_v3, group_limited_greedy: the weights' factor.
  double routed_scaling_factor = 1.0;
  /// Dynamic rules: at least min_k and at most max_k experts per token (0: no bound).
  index_t min_k = 0, max_k = 0;
};

/// Experts per token over the batch.
struct routing_result {
  index_t tokens = 0;
  index_t selected = 0;  // (token, expert) pairs
  double experts_per_token_mean = 0;
  index_t min_experts = 0, max_experts = 0;
};

}  // namespace gating
MOECOMP_NAMESPACE_END
