#pragma once
// The per-element rules of routing shared by the host and the device (MOECOMP_HOST_DEVICE): the tie rule of
// every selection, the score functions, when a dynamic rule stops taking experts, and the pieces of the
// DeepSeek group rules (the group score, the masking of dropped groups, the weights' normalisation and scale).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/routing_types.hpp>

#include <cmath>

MOECOMP_NAMESPACE_BEGIN
namespace gating {
namespace detail {

/// Whether expert (score a, index ia) is chosen before (b, ib): the higher score, or the lower index on a tie.
MOECOMP_HOST_DEVICE inline bool chosen_before(double a, index_t ia, double b, index_t ib) noexcept {
  return a > b || (a == b && ia < ib);
}

/// sigmoid(v) = 1 / (1 + e^-v).
MOECOMP_HOST_DEVICE inline double sigmoid(double v) noexcept { return 1.0 / (1.0 + exp(-v)); }

/// Whether a dynamic rule takes the next expert in descending-score order: its score `candidate`, with `taken`
/// experts taken so far whose scores sum to `running`; `total` is the sum of every score and `top` the
/// largest. threshold / threshold_code judge the candidate itself (s >= tau max, s >= (1 - tau) max);
/// cumulative and top_p always take the first and then go on while the share (running / total, all experts
/// when total <= 0) or the running sum has not passed tau. min_k / max_k are applied by the caller.
MOECOMP_HOST_DEVICE inline bool takes_next(routing_rule rule, double tau, double candidate, index_t taken, double running,
                                           double total, double top) noexcept {
  switch (rule) {
    case routing_rule::threshold: return candidate >= tau * top;
    case routing_rule::threshold_code: return candidate >= (1.0 - tau) * top;
    case routing_rule::cumulative: return taken == 0 || !(total > 0) || !(running / total > tau);
    case routing_rule::top_p: return taken == 0 || !(running > tau);
    default: return false;
  }
}

/// The two largest values of a group (a multiset: a repeated maximum is both), -infinity where not yet seen.
struct group_top_two {
  double first, second;
};

/// No value seen yet.
MOECOMP_HOST_DEVICE inline group_top_two empty_top_two() noexcept { return group_top_two{-INFINITY, -INFINITY}; }

/// Adds one value to a group's two largest.
MOECOMP_HOST_DEVICE inline void add_to_top_two(group_top_two& t, double v) noexcept {
  if (v > t.first) {
    t.second = t.first;
    t.first = v;
  } else if (v > t.second) {
    t.second = v;
  }
}

/// The two largest of the union of two parts' values (the warp reduction of the device): the same values as
/// adding every value to one group_top_two, in any order.
MOECOMP_HOST_DEVICE inline group_top_two merge_top_two(const group_top_two& a, const group_top_two& b) noexcept {
  const double high = a.first > b.first ? a.first : b.first, low = a.first > b.first ? b.first : a.first;
  const double seconds = a.second > b.second ? a.second : b.second;
  return group_top_two{high, low > seconds ? low : seconds};
}

/// A group's score: DeepSeek-V3's sum of its two largest (corrected) keys, or DeepSeek-V2's largest score.
MOECOMP_HOST_DEVICE inline double group_score(const group_top_two& t, bool sum_of_two) noexcept {
  return sum_of_two ? t.first + t.second : t.first;
}

/// An expert's key after the group selection: unchanged in a kept group, 0.0 in a dropped one (HF's routers
/// mask with 0.0, not -infinity, so a negative corrected key of a kept group ranks below a dropped group's).
MOECOMP_HOST_DEVICE inline double masked_group_key(double key, bool group_kept) noexcept { return group_kept ? key : 0.0; }

/// A selected expert's final weight under a DeepSeek group rule: its (uncorrected) score `w`, with `sum` the
/// sum of the selected scores in selection order. deepseek_v3: divided by (sum + 1e-20) with renormalize, then
/// times the scaling factor; group_limited_greedy (V2): divided by (sum + 1e-20) when top_k > 1 and renormalize,
/// otherwise times the scaling factor (HF's V2 does one or the other).
MOECOMP_HOST_DEVICE inline double group_rule_weight(routing_rule rule, double w, double sum, index_t top_k,
                                                    bool renormalize, double routed_scaling_factor) noexcept {
  if (rule == routing_rule::deepseek_v3) return (renormalize ? w / (sum + 1e-20) : w) * routed_scaling_factor;
  return top_k > 1 && renormalize ? w / (sum + 1e-20) : w * routed_scaling_factor;
}

}  // namespace detail
}  // namespace gating
MOECOMP_NAMESPACE_END
