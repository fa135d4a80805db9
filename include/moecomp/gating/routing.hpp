#pragma once
// Routing on the host: every published rule (<moecomp/gating/routing_types.hpp>: top-k, DeepSeek-V3,
// DeepSeek-V2's group-limited greedy, SADMoE's dynamic-k in the paper's and D2DMoE's forms, D2DMoE's
// cumulative share, top-p), in three output layouts. Documentation: docs/gating.md.
//
//   logits: T x E (float or double), finite; bias: E entries (deepseek_v3's selection-only correction) or
//   empty. Scores are computed in double (softmax with the maximum subtracted). Ties go to the lowest expert
//   index, everywhere. Tokens run in parallel; results do not depend on the thread count.
//
//   route_dense: weights (T x E), 0 for unselected experts;
//   route_fixed: ids (T x K, int64) and weights (T x K), K >= max_experts_per_token; a token's experts in
//                selection order (descending score), unused slots the sentinel id E with weight 0 (vLLM's
//                layout);
//   route_csr:   offsets (T + 1), ids and weights of every selected pair, token by token.
// Each returns the experts-per-token counts. Cost: O(T E log k) (fixed-count rules) or O(T E log E).
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/routing_types.hpp>
#include <moecomp/gating/detail/routing_checks.hpp>
#include <moecomp/gating/detail/routing_host.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/traits.hpp>

#include <cstdint>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace gating {

/// The most experts one token can get under params with E experts (the fixed layout's minimum K).
inline index_t max_experts_per_token(const routing_params& params, index_t experts) noexcept {
  return detail::max_experts_per_token(params, experts);
}

/// Dense T x E weights.
template <class A>
routing_result route_dense(const host_context& ctx, const routing_params& params,
                           moecomp::detail::type_identity_t<matrix_view<const A>> logits,
                           moecomp::detail::type_identity_t<vector_view<const A>> bias,
                           moecomp::detail::type_identity_t<matrix_view<A>> weights) {
  static_assert(moecomp::detail::is_real_v<A>, "route_dense: A must be float or double");
  constexpr const char* fn = "route_dense";
  detail::check_routing_params(fn, params, logits.cols(), bias.size());
  MOECOMP_EXPECTS(weights.rows() == logits.rows() && weights.cols() == logits.cols(), fn, ": weights must be ",
                  moecomp::detail::shape_string(logits.rows(), logits.cols()), " like logits, got ",
                  moecomp::detail::shape_string(weights.rows(), weights.cols()));
  moecomp::detail::check_finite(fn, "logits", logits, ctx.threads());
  const std::vector<A> dense_bias = detail::checked_bias(fn, bias);
  return detail::route_host<A>(ctx, params, logits, dense_bias.empty() ? nullptr : dense_bias.data(),
                               [&](index_t t, const detail::token_choice& c) {
                                 A* row = weights.row_ptr(t);
                                 for (index_t j = 0; j < logits.cols(); ++j) row[j] = A(0);
                                 for (index_t q = 0; q < c.count; ++q)
                                   row[c.ids[static_cast<std::size_t>(q)]] = static_cast<A>(c.weights[static_cast<std::size_t>(q)]);
                               },
                               weights);
}

/// Fixed-K layout: ids (T x K) and weights (T x K), the sentinel E with weight 0 in unused slots.
template <class A>
routing_result route_fixed(const host_context& ctx, const routing_params& params,
                           moecomp::detail::type_identity_t<matrix_view<const A>> logits,
                           moecomp::detail::type_identity_t<vector_view<const A>> bias, matrix_view<std::int64_t> ids,
                           moecomp::detail::type_identity_t<matrix_view<A>> weights) {
  static_assert(moecomp::detail::is_real_v<A>, "route_fixed: A must be float or double");
  constexpr const char* fn = "route_fixed";
  const index_t e = logits.cols(), k = ids.cols();
  detail::check_routing_params(fn, params, e, bias.size());
  MOECOMP_EXPECTS(ids.rows() == logits.rows() && k >= max_experts_per_token(params, e), fn, ": ids must be ",
                  logits.rows(), " x K with K >= ", max_experts_per_token(params, e),
                  " (the most experts a token can get), got ", moecomp::detail::shape_string(ids.rows(), ids.cols()));
  MOECOMP_EXPECTS(weights.rows() == ids.rows() && weights.cols() == k, fn, ": weights must be ",
                  moecomp::detail::shape_string(ids.rows(), k), " like ids, got ",
                  moecomp::detail::shape_string(weights.rows(), weights.cols()));
  moecomp::detail::check_finite(fn, "logits", logits, ctx.threads());
  const std::vector<A> dense_bias = detail::checked_bias(fn, bias);
  return detail::route_host<A>(ctx, params, logits, dense_bias.empty() ? nullptr : dense_bias.data(),
                               [&](index_t t, const detail::token_choice& c) {
                                 for (index_t q = 0; q < k; ++q) {
                                   const bool used = q < c.count;
                                   ids(t, q) = used ? c.ids[static_cast<std::size_t>(q)] : e;
                                   weights(t, q) = used ? static_cast<A>(c.weights[static_cast<std::size_t>(q)]) : A(0);
                                 }
                               });
}

/// CSR layout: offsets (T + 1); ids and weights hold at least the selected pairs (T x
/// max_experts_per_token suffices); token t's experts are ids[offsets[t] .. offsets[t + 1]).
template <class A>
routing_result route_csr(const host_context& ctx, const routing_params& params,
                         moecomp::detail::type_identity_t<matrix_view<const A>> logits,
                         moecomp::detail::type_identity_t<vector_view<const A>> bias, vector_view<std::int64_t> offsets,
                         vector_view<std::int64_t> ids, moecomp::detail::type_identity_t<vector_view<A>> weights) {
  constexpr const char* fn = "route_csr";
  const index_t t_count = logits.rows(), e = logits.cols();
  detail::check_routing_params(fn, params, e, bias.size());
  MOECOMP_EXPECTS(offsets.size() == t_count + 1, fn, ": offsets must have ", t_count + 1, " entries (tokens + 1), got ",
                  offsets.size());
  const index_t k = max_experts_per_token(params, e);
  std::vector<std::int64_t> fixed_ids(static_cast<std::size_t>(t_count * k));
  std::vector<A> fixed_weights(fixed_ids.size());
  const routing_result r = route_fixed<A>(ctx, params, logits, bias, make_matrix_view(fixed_ids.data(), t_count, k),
                                          make_matrix_view(fixed_weights.data(), t_count, k));
  MOECOMP_EXPECTS(ids.size() >= r.selected && weights.size() >= r.selected, fn,
                  ": ids and weights must hold the ", r.selected, " selected pairs, got ", ids.size(), " and ",
                  weights.size());
  index_t next = 0;
  offsets[0] = 0;
  for (index_t t = 0; t < t_count; ++t) {
    for (index_t q = 0; q < k && fixed_ids[static_cast<std::size_t>(t * k + q)] != e; ++q, ++next) {
      ids[next] = fixed_ids[static_cast<std::size_t>(t * k + q)];
      weights[next] = fixed_weights[static_cast<std::size_t>(t * k + q)];
    }
    offsets[t + 1] = next;
  }
  return r;
}

}  // namespace gating
MOECOMP_NAMESPACE_END
