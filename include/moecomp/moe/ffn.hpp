#pragma once
// The FFN expert forward on the host: one expert, or each expert of a stack, on a batch of tokens.
// Documentation: docs/moe.md.
//
//   expert: W1 (d_ff x d), optional W3 (d_ff x d), W2 (d x d_ff), optional b1, b3 (d_ff), b2 (d), storage W in
//           float, double, bfloat16 or half (<moecomp/moe/ffn_types.hpp>);
//   x: n x d tokens in A = accumulator_t<W> (float; double for double storage);
//   y = W2 (act(W1 x + b1) * (W3 x + b3)) + b2 (gated) or W2 act(W1 x + b1) + b2, n x d in A;
//   hidden: the n x d_ff activations fed to W2 (for alignment by activations).
//
// Method: up to params.token_tile tokens, the weights read once in 64-row panels spread over the threads
// (each panel converted to float for 16-bit storage, then one GEMM); more tokens, tiles of params.token_tile
// tokens, each on one thread: x W1^T (and x W3^T) by one GEMM each, the activation and gate, then h W2^T by one
// GEMM, 16-bit weights converted to float once per call (a copy of 3 d d_ff floats per expert at most); float /
// double weights are used in place (any row stride). The path depends on the token count only.
// Precision: float accumulation for float, bfloat16 and half storage; double for double. Deterministic:
// bit-identical at any thread count (fixed tiles, single-threaded GEMMs). Cost: 2 n d d_ff (2 or 3) flops.
// The device overloads (ffn_forward, ffn_hidden, ffn_stack_forward on device views) are in
// <moecomp/cuda/moe/expert.cuh>.
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/moe/ffn_types.hpp>
#include <moecomp/core/detail/ffn_checks.hpp>
#include <moecomp/moe/detail/ffn_host.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/traits.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace moe {

/// y = the expert's output on tokens x (see above). Throws invalid_argument for inconsistent shapes.
template <class W>
void ffn_forward(const host_context& ctx, const ffn_params& params, const ffn_expert_view<W>& expert,
                 moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>>> x,
                 moecomp::detail::type_identity_t<matrix_view<accumulator_t<W>>> y) {
  constexpr const char* fn = "ffn_forward";
  moecomp::detail::check_ffn_params(fn, params);
  moecomp::detail::check_ffn_expert(fn, expert);
  moecomp::detail::check_tokens(fn, expert.d_model(), x.rows(), x.cols(), "y", y.rows(), y.cols(), expert.d_model());
  moecomp::detail::check_no_overlap(fn, "y", y, "x", x);
  detail::ffn_forward_host<W>(ctx, params, expert, x, y, {});
}

/// The hidden activations h (n x d_ff) that the expert feeds to W2.
template <class W>
void ffn_hidden(const host_context& ctx, const ffn_params& params, const ffn_expert_view<W>& expert,
                moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>>> x,
                moecomp::detail::type_identity_t<matrix_view<accumulator_t<W>>> hidden) {
  constexpr const char* fn = "ffn_hidden";
  moecomp::detail::check_ffn_params(fn, params);
  moecomp::detail::check_ffn_expert(fn, expert);
  moecomp::detail::check_tokens(fn, expert.d_model(), x.rows(), x.cols(), "hidden", hidden.rows(), hidden.cols(),
                       expert.d_ff());
  detail::ffn_forward_host<W>(ctx, params, expert, x, {}, hidden);
}

/// Every expert of a stack on the same tokens: y[e] = expert e's output (y: E x n x d).
template <class W>
void ffn_stack_forward(const host_context& ctx, const ffn_params& params, const ffn_expert_stack_view<W>& stack,
                       moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>>> x,
                       moecomp::detail::type_identity_t<matrix_stack_view<accumulator_t<W>>> y) {
  constexpr const char* fn = "ffn_stack_forward";
  moecomp::detail::check_ffn_params(fn, params);
  moecomp::detail::check_ffn_stack(fn, stack);
  MOECOMP_EXPECTS(y.count() == stack.experts(), fn, ": y must hold ", stack.experts(), " outputs (one per expert), got ",
                  y.count());
  moecomp::detail::check_tokens(fn, stack.d_model(), x.rows(), x.cols(), "each output", y.rows(), y.cols(), stack.d_model());
  for (index_t e = 0; e < stack.experts(); ++e) detail::ffn_forward_host<W>(ctx, params, stack.expert(e), x, y.matrix(e), {});
}

}  // namespace moe
MOECOMP_NAMESPACE_END
