#pragma once
// Expert merging on the host: each group of experts of an MoE layer becomes one expert, and the router keeps
// its E rows with an old-id -> group map (HC-SMoE) or gets one row per group (the fourth paper, M-SMoE).
// Documentation: docs/merge.md.
//
//   routing_frequencies(ctx, k, x, router, f)   f_e = the share of (token, slot) pairs of the top-k of the
//                                               router's logits on tokens x that go to e (HC-SMoE's usage
//                                               frequencies, k = 2 there whatever the model's k); sums to 1.
//   dominant_experts(groups, f, dominants)      each group's member with the largest f (ties: the lowest
//                                               index); the lowest-index member when f is empty.
//   merge_experts(ctx, params, experts, groups, data, out)
//       experts: a stack of E experts (W1, W3: E x d_ff x d; W2: E x d x d_ff; optional biases; float, double,
//                bfloat16 or half storage);
//       groups:  E int64 group ids covering 0..g-1;
//       data:    optional calibration tokens x (T x d), router (E x d), frequencies (E), dominants (g)
//                (merge_data; float, or double for double storage);
//       out:     g merged experts (group-id order), the router rows (g x d, router rules merged_rows and
//                dominant_row), the map (E entries: old id -> group id).
//       Returns the report: the coefficients, and per group the dominant, the tokens used, the relative
//       merge error on them (when x is given) and learned's objective.
//
// The methods (merge_method), for a group G with dominant D:
//   average / uniform   theta = sum_{e in G} theta_e / |G|;
//   frequency           theta = sum f_e theta_e / (sum_{e in G} f_e + params.frequency_epsilon);
//   dominant            theta = theta_D;
//   aligned             theta = mean over e of theta_e with e's neurons in D's order (align_experts, params.align);
//   fix_dom             HC-SMoE fix-dom-same: on the group's tokens (each member's routed tokens concatenated,
//                       capped at params.token_cap), h_e = act(x W1_e^T + b1) * (x W3_e^T + b3); member neuron b
//                       goes to the dominant neuron a maximising cov(h_D[:, a], h_e[:, b]) / (sd_a sd_b + eps)
//                       (ties: the lowest a); merged neuron a = the mean of D's neuron a and the neurons sent to it
//                       (rows of W1, W3, b1, b3; columns of W2); b2 the members' mean;
//   learned             theta = sum a_e theta_e, a on the simplex minimising mean_t ||y_t - f_a(x_t)||^2 over the
//                       group's tokens, y_t the group's original output (the members' outputs weighted by their
//                       router probabilities renormalised over the group; the mean without a router).
// Weights are accumulated in double and rounded once to W. The tokens of a group: those whose top
// params.routing_top_k experts include a member when a router is given, else every token.
//
// Determinism: bit-identical at any thread count; ties go to the lowest index; the token cap draws from
// moecomp's generator (params.seed, stream = the group id). Cost: average, frequency, uniform, dominant O(E d d_ff);
// aligned adds one alignment per member (docs/align.md); fix_dom 2 T d d_ff (2 or 3) flops per member for the
// activations plus 2 T d_ff^2 per non-dominant member for the correlations; learned 2 T d d_ff (2 or 3) per
// member once, then about 8 T d d_ff flops per iteration. The device overloads (merge_experts on device views, and
// the per-group merge_weighted, merge_fix_dom and merge_learned) are in <moecomp/cuda/merge/merge.cuh>.
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/merge/merge_types.hpp>
#include <moecomp/merge/detail/merge_checks.hpp>
#include <moecomp/merge/detail/merge_host.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/ffn_checks.hpp>
#include <moecomp/core/detail/traits.hpp>

#include <cstdint>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace merge {

/// f (E entries) = HC-SMoE's usage frequencies of the router (E x d) on tokens x (T x d, T >= 1), top-k counts
/// over T k. A is float or double.
template <class A>
void routing_frequencies(const host_context& ctx, index_t k, moecomp::detail::type_identity_t<matrix_view<const A>> x,
                         moecomp::detail::type_identity_t<matrix_view<const A>> router, vector_view<double> f) {
  constexpr const char* fn = "routing_frequencies";
  static_assert(moecomp::detail::is_real_v<A>, "routing_frequencies: A must be float or double");
  MOECOMP_EXPECTS(router.rows() >= 1 && router.cols() == x.cols(), fn, ": router must be E x ", x.cols(),
                  " (d, like x) with E >= 1, got ", moecomp::detail::shape_string(router.rows(), router.cols()));
  MOECOMP_EXPECTS(k >= 1 && k <= router.rows(), fn, ": k must be in [1, ", router.rows(), "] (the experts), got ", k);
  MOECOMP_EXPECTS(x.rows() >= 1, fn, ": x must hold at least 1 token, got 0");
  MOECOMP_EXPECTS(f.size() == router.rows(), fn, ": frequencies must have ", router.rows(),
                  " entries (one per expert), got ", f.size());
  moecomp::detail::check_finite(fn, "x", x, ctx.threads());
  moecomp::detail::check_finite(fn, "router", router, ctx.threads());
  detail::routing_frequencies_host<A>(ctx, k, x, router, f);
}

/// The number of groups g of a label vector (E int64 ids covering 0..g-1); throws invalid_argument otherwise.
inline index_t group_count(vector_view<const std::int64_t> groups) {
  return detail::checked_group_count("group_count", groups, groups.size());
}

/// dominants[g] = the member of group g with the largest frequency (ties: the lowest index), or its lowest-index
/// member when frequencies is empty. dominants: group_count(groups) entries.
inline void dominant_experts(vector_view<const std::int64_t> groups, vector_view<const double> frequencies,
                             vector_view<std::int64_t> dominants) {
  constexpr const char* fn = "dominant_experts";
  const index_t g = detail::checked_group_count(fn, groups, groups.size());
  if (!frequencies.empty()) detail::check_frequencies(fn, frequencies, groups.size());
  MOECOMP_EXPECTS(dominants.size() == g, fn, ": dominants must have ", g, " entries (one per group), got ",
                  dominants.size());
  const std::vector<double> f(frequencies.data(), frequencies.data() + frequencies.size());
  const auto members = detail::group_members(groups, g);
  for (index_t k = 0; k < g; ++k) dominants[k] = detail::most_frequent(members[static_cast<std::size_t>(k)], f);
}

/// A per-expert router bias (E entries: Switch's classifier bias, DeepSeek-V3's selection correction) merged as
/// the router rows are: merged[k] = sum over group k's members e of coefficients[e] * bias[e], in double in
/// member order, rounded once to float. coefficients: merge_report::coefficients (E entries); merged: g.
inline void merge_router_bias(vector_view<const std::int64_t> groups, const std::vector<double>& coefficients,
                              vector_view<const float> bias, vector_view<float> merged) {
  constexpr const char* fn = "merge_router_bias";
  const index_t E = groups.size();
  const index_t g = detail::checked_group_count(fn, groups, E);
  MOECOMP_EXPECTS(static_cast<index_t>(coefficients.size()) == E && bias.size() == E, fn,
                  ": coefficients and bias must have one entry per expert (", E, "), got ", coefficients.size(),
                  " and ", bias.size());
  MOECOMP_EXPECTS(merged.size() == g, fn, ": merged must have ", g, " entries (one per group), got ", merged.size());
  std::vector<double> sum(static_cast<std::size_t>(g), 0.0);
  for (index_t e = 0; e < E; ++e)
    sum[static_cast<std::size_t>(groups[e])] += coefficients[static_cast<std::size_t>(e)] * static_cast<double>(bias[e]);
  for (index_t k = 0; k < g; ++k) merged[k] = static_cast<float>(sum[static_cast<std::size_t>(k)]);
}

/// Merges each group of `experts` into one (see above). Throws invalid_argument for misuse: groups not covering
/// 0..g-1, shapes that disagree, negative or non-finite frequencies, a dominant outside its group, a method
/// without the data it needs (fix_dom and learned need x; frequency needs frequencies, or a router and x), a
/// router rule without the router, bad params.
template <class W>
merge_report merge_experts(const host_context& ctx, const merge_params& params,
                           const moe::ffn_expert_stack_view<W>& experts, vector_view<const std::int64_t> groups,
                           const merge_data<accumulator_t<W>>& data, const merge_outputs<W>& out) {
  constexpr const char* fn = "merge_experts";
  static_assert(moecomp::detail::is_weight_type_v<W>, "merge_experts: W must be float, double, bfloat16 or half");
  moecomp::detail::check_ffn_stack(fn, experts);
  const index_t g = detail::checked_group_count(fn, groups, experts.experts());
  detail::check_merge_params(fn, params, experts.experts());
  detail::check_merge_data(fn, params, data, experts.experts(), g, experts.d_model(), groups);
  detail::check_merge_outputs(fn, experts, out, g, resolve_router_rule(params, !data.router.empty()));
  return detail::merge_experts_host<W>(ctx, params, experts, groups, g, data, out);
}

}  // namespace merge
MOECOMP_NAMESPACE_END
