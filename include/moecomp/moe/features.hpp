#pragma once
// Expert representations for similarity (docs/expert_features.md), from a stack of E FFN experts
// (<moecomp/moe/ffn_types.hpp>: nn.Linear layout, float, double, bfloat16 or half storage; outputs in
// A = accumulator_t<W>, float or double):
//
//   expert outputs on a shared token set   ffn_stack_forward (<moecomp/moe/ffn.hpp>) (E x n x d), the input of cka_matrix;
//   mean outputs (HC-SMoE)                 expert_mean_outputs: row e = mean_t f_e(x_t)          (E x d)
//   router logits                          router_logits: x Wg^T + bias                          (n x E)
//   vectorised weights (fourth paper)      vectorized_weights: row e = concat(W1, W2, W3)        (E x (2|3) d_ff d)
//   surrogate weights (fourth paper)       surrogate_weights: row e = flatten(W2 (W1 o W3))      (E x d^2)
//
// The surrogate: the paper writes f(x) = theta2 (sigma(theta1 x) . theta3 x) and the surrogate weights
// theta2 (theta1 . theta3); "." is the elementwise product there (the gate times the up projection), so
// theta1 . theta3 is the d_ff x d Hadamard product W1 o W3, and theta2 (d x d_ff) times it is a d x d map: the
// expert with its gate activation taken as linear and the two projections of each neuron merged (W2 W1
// without W3). It is the same size for every expert of a model, whatever d_ff, which is why the paper finds
// it "more flexible with model size".
// Deterministic at any thread count; host only.
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/moe/ffn_types.hpp>
#include <moecomp/core/detail/ffn_checks.hpp>
#include <moecomp/moe/detail/features_host.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/traits.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace moe {

/// Features per expert of vectorized_weights: d_ff d (2, or 3 with W3).
template <class W>
index_t vectorized_weights_size(const ffn_expert_stack_view<W>& stack) noexcept {
  return stack.d_ff() * stack.d_model() * (stack.gated() ? 3 : 2);
}

/// out (E x vectorized_weights_size): row e = concat(flatten(W1_e), flatten(W2_e), flatten(W3_e)).
template <class W>
void vectorized_weights(const ffn_expert_stack_view<W>& stack,
                        moecomp::detail::type_identity_t<matrix_view<accumulator_t<W>>> out) {
  constexpr const char* fn = "vectorized_weights";
  moecomp::detail::check_ffn_stack(fn, stack);
  MOECOMP_EXPECTS(out.rows() == stack.experts() && out.cols() == vectorized_weights_size(stack), fn, ": out must be ",
                  moecomp::detail::shape_string(stack.experts(), vectorized_weights_size(stack)),
                  " (experts x (2 or 3) d_ff d), got ", moecomp::detail::shape_string(out.rows(), out.cols()));
  detail::vectorized_weights_host<W>(stack, out);
}

/// The Euclidean distances between the experts' vectorized_weights rows, condensed in scipy's pdist order
/// (distances: E (E - 1) / 2), computed from the stacks of any weight type (float, double, bfloat16, half; each
/// entry widened to double) directly, each expert's matrices contiguous (a strided stack, or a gathered one read in
/// place from a checkpoint): no E x 3 d_ff d feature matrix (at Mixtral's shape, 5.6 GB) and no copy of it. The stacks are read in chunks of 2^14 entries once for all pairs;
/// each chunk's per-pair sums of squares (double) are added in chunk order, so the result is bit-identical at any
/// thread count. O(E^2 d_ff d) time, O(E^2 d_ff d / 2^14) doubles of workspace. HC-SMoE's and the CKA merge's
/// "weights" similarity (compress). Host only.
template <class W = float>
void expert_weight_distances(const host_context& ctx, const ffn_expert_stack_view<W>& stack,
                             vector_view<double> distances) {
  constexpr const char* fn = "expert_weight_distances";
  moecomp::detail::check_ffn_stack(fn, stack);
  const index_t E = stack.experts();
  MOECOMP_EXPECTS(distances.size() == E * (E - 1) / 2, fn, ": distances must have E (E - 1) / 2 = ", E * (E - 1) / 2,
                  " entries, got ", distances.size());
  MOECOMP_EXPECTS(stack.w1.matrices_contiguous() && stack.w2.matrices_contiguous() &&
                      (stack.w3.empty() || stack.w3.matrices_contiguous()),
                  fn, ": each expert's matrices must be contiguous (row_stride == cols)");
  detail::expert_weight_distances_host(ctx, stack, distances);
}

/// out (E x d^2): row e = flatten(W2_e (W1_e o W3_e)), row-major d x d (W2_e W1_e without W3).
template <class W>
void surrogate_weights(const host_context& ctx, const ffn_expert_stack_view<W>& stack,
                       moecomp::detail::type_identity_t<matrix_view<accumulator_t<W>>> out) {
  constexpr const char* fn = "surrogate_weights";
  moecomp::detail::check_ffn_stack(fn, stack);
  const index_t d = stack.d_model();
  MOECOMP_EXPECTS(out.rows() == stack.experts() && out.cols() == d * d, fn, ": out must be ",
                  moecomp::detail::shape_string(stack.experts(), d * d), " (experts x d^2), got ",
                  moecomp::detail::shape_string(out.rows(), out.cols()));
  detail::surrogate_weights_host<W>(ctx, stack, out);
}

/// out (E x d): row e = the mean of expert e's outputs over the tokens x (n x d, n >= 1).
template <class W>
void expert_mean_outputs(const host_context& ctx, const ffn_params& params,
                         const ffn_expert_stack_view<W>& stack,
                         moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>>> x,
                         moecomp::detail::type_identity_t<matrix_view<accumulator_t<W>>> out) {
  constexpr const char* fn = "expert_mean_outputs";
  moecomp::detail::check_ffn_params(fn, params);
  moecomp::detail::check_ffn_stack(fn, stack);
  MOECOMP_EXPECTS(x.rows() >= 1, fn, ": x must hold at least one token, got 0");
  MOECOMP_EXPECTS(x.cols() == stack.d_model(), fn, ": x must have ", stack.d_model(), " columns (the experts' d), got ",
                  moecomp::detail::shape_string(x.rows(), x.cols()));
  MOECOMP_EXPECTS(out.rows() == stack.experts() && out.cols() == stack.d_model(), fn, ": out must be ",
                  moecomp::detail::shape_string(stack.experts(), stack.d_model()), " (experts x d), got ",
                  moecomp::detail::shape_string(out.rows(), out.cols()));
  detail::mean_outputs_host<W>(ctx, params, stack, x, out);
}

/// out (n x E): out(t, e) = ||f_e(x_t)||_2, each expert's output norm per token: D2DMoE's router training
/// targets (SADMoE's router regresses them). In double from the forward's outputs.
template <class W>
void expert_output_norms(const host_context& ctx, const ffn_params& params, const ffn_expert_stack_view<W>& stack,
                         moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>>> x,
                         moecomp::detail::type_identity_t<matrix_view<accumulator_t<W>>> out) {
  constexpr const char* fn = "expert_output_norms";
  moecomp::detail::check_ffn_params(fn, params);
  moecomp::detail::check_ffn_stack(fn, stack);
  MOECOMP_EXPECTS(x.cols() == stack.d_model(), fn, ": x must have ", stack.d_model(), " columns (the experts' d), got ",
                  moecomp::detail::shape_string(x.rows(), x.cols()));
  MOECOMP_EXPECTS(out.rows() == x.rows() && out.cols() == stack.experts(), fn, ": out must be ",
                  moecomp::detail::shape_string(x.rows(), stack.experts()), " (tokens x experts), got ",
                  moecomp::detail::shape_string(out.rows(), out.cols()));
  detail::output_norms_host<W>(ctx, params, stack, x, out);
}

/// logits (n x E) = x (n x d) router^T (router: E x d) + bias (E entries, or empty).
template <class A>
void router_logits(const host_context& ctx, moecomp::detail::type_identity_t<matrix_view<const A>> x,
                   moecomp::detail::type_identity_t<matrix_view<const A>> router,
                   moecomp::detail::type_identity_t<vector_view<const A>> bias,
                   moecomp::detail::type_identity_t<matrix_view<A>> logits) {
  static_assert(moecomp::detail::is_real_v<A>, "router_logits: A must be float or double");
  constexpr const char* fn = "router_logits";
  MOECOMP_EXPECTS(router.cols() == x.cols(), fn, ": router must have ", x.cols(), " columns (d, like x), got ",
                  moecomp::detail::shape_string(router.rows(), router.cols()));
  MOECOMP_EXPECTS(bias.empty() || bias.size() == router.rows(), fn, ": bias must be empty or have ", router.rows(),
                  " entries (experts), got ", bias.size());
  MOECOMP_EXPECTS(logits.rows() == x.rows() && logits.cols() == router.rows(), fn, ": logits must be ",
                  moecomp::detail::shape_string(x.rows(), router.rows()), ", got ",
                  moecomp::detail::shape_string(logits.rows(), logits.cols()));
  detail::router_logits_host<A>(ctx, x, router, bias, logits);
}

}  // namespace moe
MOECOMP_NAMESPACE_END
