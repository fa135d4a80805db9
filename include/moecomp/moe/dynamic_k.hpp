#pragma once
// A dense FFN split into experts (cluster::moefication_split) run with a trained router (gating::train_router):
// SADMoE's inference (its Sec. 3.4). Each token's experts are chosen on the router's scores R(z) by top-k or by
// dynamic-k (expert i runs iff R(z)_i >= tau max_j R(z)_j, with optional min-k / max-k), only those experts run,
// and their outputs are summed with weight 1 (the split FFN's output is the sum of its experts'). The cost per
// token is SADMoE's Appendix B for the measured mean k. Host only. Documentation: docs/moe.md ("Dynamic-k").
//
//   x: T x d tokens (A = accumulator_t<W>); experts: the split's E experts of s neurons each (W); router: the
//   trained weights (w1 d_h x d, w2 E x d_h, optional biases, A); y: T x d.
//
// Example: the layer at tau = 0.3 (dynamic-k), its mean experts per token and FLOPs ratio:
//
//   moe::dynamic_k_params p;
//   p.routing.rule = gating::routing_rule::threshold;
//   p.routing.tau = 0.3;
//   const moe::dynamic_k_result r = moe::dynamic_k_forward<float>(ctx, p, experts, router, x, y.view());
//   // r.mean_experts, r.cost.ratio
//
// Deterministic at any thread count: the scores by the router's fixed tiles, each expert's forward in index
// order, its outputs added to its tokens' rows in that order.
#include <moecomp/core/context.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/router_training.hpp>
#include <moecomp/gating/routing.hpp>
#include <moecomp/gating/sadmoe.hpp>
#include <moecomp/moe/ffn.hpp>
#include <moecomp/moe/ffn_types.hpp>
#include <moecomp/moe/detail/dynamic_k_host.hpp>

#include <cstdint>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace moe {

/// How the experts of each token are chosen and run. routing: rule top_k (top_k experts by score) or threshold
/// (SADMoE's dynamic-k: tau, min_k, max_k; also threshold_code, D2DMoE's code form, and cumulative); its score
/// function is applied to the router's scores (none, the default here, uses them as they are). objective: how the
/// router was trained (its scores are |u| or sigmoid(u)). ffn: the experts' activation.
struct dynamic_k_params {
  gating::routing_params routing = default_routing();
  gating::router_objective objective = gating::router_objective::output_norm;
  ffn_params ffn;
  static gating::routing_params default_routing() {
    gating::routing_params r;
    r.rule = gating::routing_rule::threshold;
    r.scores = gating::score_function::none;
    r.tau = 0.5;
    return r;
  }
};

/// The routing counts and the cost model: mean_experts = k, the mean selected experts per token; cost =
/// gating::dynamic_k_flops(d, e', E, k, d_h) with e' = (gated ? 3/2 : 1) (E s) / d, so that the dense FFN's
/// cost counts its 2 or 3 matrices (Appendix B writes it for 2).
struct dynamic_k_result {
  double mean_experts = 0;
  index_t min_experts = 0, max_experts = 0;
  gating::dynamic_k_cost cost;
};

/// Runs the split FFN on x with the router (see above). invalid_argument for shapes that disagree or bad
/// routing parameters.
template <class W>
dynamic_k_result dynamic_k_forward(const host_context& ctx, const dynamic_k_params& params,
                                   const ffn_expert_stack_view<W>& experts,
                                   const gating::router_weights_view<const accumulator_t<W>>& router,
                                   moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>>> x,
                                   moecomp::detail::type_identity_t<matrix_view<accumulator_t<W>>> y) {
  using A = accumulator_t<W>;
  constexpr const char* fn = "dynamic_k_forward";
  moecomp::detail::check_ffn_stack(fn, experts);
  const index_t T = x.rows(), H = experts.d_model(), E = experts.experts();
  MOECOMP_EXPECTS(x.cols() == H && y.rows() == T && y.cols() == H, fn, ": x and y must be T x ", H,
                  " (the experts' d), got ", moecomp::detail::shape_string(x.rows(), x.cols()), " and ",
                  moecomp::detail::shape_string(y.rows(), y.cols()));
  MOECOMP_EXPECTS(router.w2.rows() == E && router.w1.cols() == H, fn, ": router must score the ", E,
                  " experts from d = ", H, " inputs, got w1 ", moecomp::detail::shape_string(router.w1.rows(), router.w1.cols()),
                  " and w2 ", moecomp::detail::shape_string(router.w2.rows(), router.w2.cols()));
  gating::router_training_params rp;
  rp.objective = params.objective;
  host_matrix<A> scores(T, E);
  gating::router_scores<A>(ctx, rp, router, x, scores.view());
  const index_t K = gating::max_experts_per_token(params.routing, E);
  host_matrix<std::int64_t> ids(T, K);
  host_matrix<A> weights(T, K);
  const gating::routing_result routed = gating::route_fixed<A>(ctx, params.routing, scores.const_view(),
                                                               vector_view<const A>(), ids.view(), weights.view());
  detail::run_selected_experts<W, A>(ctx, params.ffn, experts, detail::tokens_of_experts(ids.const_view(), E), x, y);
  dynamic_k_result r;
  r.mean_experts = routed.experts_per_token_mean;
  r.min_experts = routed.min_experts;
  r.max_experts = routed.max_experts;
  const double neurons = static_cast<double>(E) * static_cast<double>(experts.d_ff());
  const double expansion = (experts.gated() ? 1.5 : 1.0) * neurons / static_cast<double>(H);
  r.cost = gating::dynamic_k_flops(H, expansion, E, r.mean_experts, router.w1.rows());
  return r;
}

}  // namespace moe
MOECOMP_NAMESPACE_END
