#pragma once
// The argument checks of routing, shared by every layout (and a future device version).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/routing_types.hpp>

#include <cmath>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace gating {
namespace detail {

inline bool fixed_count_rule(routing_rule r) noexcept {
  return r == routing_rule::top_k || r == routing_rule::deepseek_v3 || r == routing_rule::group_limited_greedy;
}

inline void check_routing_params(const char* fn, const routing_params& p, index_t experts, index_t bias_size) {
  MOECOMP_EXPECTS(experts >= 1, fn, ": logits must have at least one expert (column), got 0");
  if (fixed_count_rule(p.rule)) {
    MOECOMP_EXPECTS(p.top_k >= 1 && p.top_k <= experts, fn, ": params.top_k must be in [1, ", experts,
                    "] (the experts), got ", p.top_k);
  } else {
    MOECOMP_EXPECTS(std::isfinite(p.tau) && p.tau >= 0 && p.tau <= 1, fn, ": params.tau must be in [0, 1], got ", p.tau);
    MOECOMP_EXPECTS(p.min_k >= 0 && p.min_k <= experts, fn, ": params.min_k must be in [0, ", experts, "], got ", p.min_k);
    MOECOMP_EXPECTS(p.max_k >= 0 && p.max_k <= experts, fn, ": params.max_k must be in [0, ", experts, "], got ", p.max_k);
    MOECOMP_EXPECTS(p.max_k == 0 || p.min_k <= p.max_k, fn, ": params.min_k must be <= params.max_k (", p.max_k,
                    "), got ", p.min_k);
  }
  if (p.rule == routing_rule::deepseek_v3 || p.rule == routing_rule::group_limited_greedy) {
    MOECOMP_EXPECTS(p.n_group >= 1 && experts % p.n_group == 0, fn, ": params.n_group must divide the ", experts,
                    " experts, got ", p.n_group);
    MOECOMP_EXPECTS(p.topk_group >= 1 && p.topk_group <= p.n_group, fn, ": params.topk_group must be in [1, ",
                    p.n_group, "] (n_group), got ", p.topk_group);
    MOECOMP_EXPECTS(p.topk_group * (experts / p.n_group) >= p.top_k, fn, ": params.top_k must be at most the ",
                    p.topk_group * (experts / p.n_group), " experts of the kept groups, got ", p.top_k);
    MOECOMP_EXPECTS(std::isfinite(p.routed_scaling_factor), fn, ": params.routed_scaling_factor must be finite, got ",
                    p.routed_scaling_factor);
  }
  if (p.rule == routing_rule::deepseek_v3)
    MOECOMP_EXPECTS(experts / p.n_group >= 2, fn, ": deepseek_v3 needs at least 2 experts per group (its group score "
                    "sums the two largest), got ", experts / p.n_group);
  MOECOMP_EXPECTS(bias_size == 0 || (p.rule == routing_rule::deepseek_v3 && bias_size == experts), fn,
                  ": bias (the selection-only correction) must be empty, or have ", experts,
                  " entries with the deepseek_v3 rule, got ", bias_size);
}

/// The bias as a contiguous copy, every entry finite.
template <class A>
std::vector<A> checked_bias(const char* fn, vector_view<const A> bias) {
  std::vector<A> out(static_cast<std::size_t>(bias.size()));
  for (index_t j = 0; j < bias.size(); ++j) {
    MOECOMP_EXPECTS(std::isfinite(static_cast<double>(bias[j])), fn, ": bias must be finite, got ",
                    static_cast<double>(bias[j]), " at ", j);
    out[static_cast<std::size_t>(j)] = bias[j];
  }
  return out;
}

/// The most experts a token can get: top_k for the fixed-count rules, else max_k or every expert.
inline index_t max_experts_per_token(const routing_params& p, index_t experts) noexcept {
  if (fixed_count_rule(p.rule)) return p.top_k;
  return p.max_k > 0 ? p.max_k : experts;
}

}  // namespace detail
}  // namespace gating
MOECOMP_NAMESPACE_END
