#pragma once
// Neuron alignment of FFN experts on the host: match the neurons of one expert to those of another by an exact
// linear assignment, then permute the second into the first's order. Documentation: docs/align.md.
//
//   design_matrix(ctx, expert, out)       out (d_ff x design_width) = [W1 | b1 | W3 | b3 | W2^T], one row per
//                                         neuron (ResMoE's design matrix; the biases and W3 only if present);
//   align_rows(ctx, params, a, b, p)      a: n x f, b: m x f (n <= m) design rows; p[i] = the row of b matched
//                                         to row i of a, minimising sum ||a_i - b_p(i)||^2 (objective weights)
//                                         or maximising sum <a_i, b_p(i)> (inner);
//   align_activations(ctx, a, b, p)       a: tokens x n, b: tokens x m hidden activations; p[i] = the neuron of
//                                         b matched to neuron i of a, maximising the sum of Pearson correlations;
//   pearson_correlation(ctx, a, b, out)   out (n x m) = the Pearson correlations of a's columns with b's (the
//                                         cost matrix of align_activations);
//   align_experts(ctx, params, reference, expert, x, p)
//                                         p[i] = the expert's neuron matched to the reference's neuron i, by
//                                         design rows, or (correlation) by the hidden activations on tokens x;
//   align_stack(ctx, params, stack, reference, x, permutations)
//                                         row e = align_experts(stack[reference], stack[e]), the reference's
//                                         row the identity (to one expert, or to a cluster's dominant one);
//   permute_neurons(ctx, expert, p, out)  out's neuron i = the expert's neuron p[i]: rows of W1, W3, b1, b3 and
//                                         columns of W2 move together, so out computes exactly the same function.
//
// So `permute_neurons(expert, p)` with p from align_experts(reference, expert) puts the expert in the
// reference's neuron order (a gather: numpy's B[p]). The OT module's free-support barycenter returns the
// opposite direction (row i of cloud j goes to barycenter row permutations(j, i), a scatter); its inverse is
// this convention. And p from align_rows(W, base) is exactly residual encoding's permutation (row i of W goes
// to base row p[i], <moecomp/sparse/residual.hpp>).
//
// Method: the cost matrix (n x m, in T: float for float, bfloat16 and half storage, double for double) from the
// shared Gram tiles (squared distances as ||a_i||^2 + ||b_j||^2 - 2 a_i . b_j with the norms in double; inner
// products; correlations after centring and normalising each neuron's activations in double),
// then the exact Jonker-Volgenant assignment (<moecomp/ot/linear_assignment.hpp>, in double on that matrix).
// Cost: 2 n m f flops (f = tokens for correlations), O(n m) memory for the costs plus the design rows, and the
// assignment, O(n^2 m) at worst and far less on these costs in practice. Ties in the assignment go as the
// solver breaks them (docs/linear_assignment.md); the result is bit-identical at any thread count. A constant
// neuron (zero variance over the tokens) has correlation 0 with every neuron.
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/align/align_types.hpp>
#include <moecomp/align/detail/align_checks.hpp>
#include <moecomp/align/detail/align_host.hpp>
#include <moecomp/moe/ffn.hpp>
#include <moecomp/core/detail/ffn_checks.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/traits.hpp>

#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace align {

/// Columns of the expert's design matrix: d (W1) + 1 (b1, if any) + d (W3, if gated) + 1 (b3, if any) + d (W2^T).
template <class W>
index_t design_width(const moe::ffn_expert_view<W>& expert) {
  return detail::design_columns(expert.d_model(), expert.gated(), !expert.b1.empty(), !expert.b3.empty());
}

/// out (d_ff x design_width(expert), float, or double for double storage) = the expert's design rows. Exact
/// (a conversion of each weight). Throws invalid_argument for inconsistent shapes.
template <class W>
void design_matrix(const host_context& ctx, const moe::ffn_expert_view<W>& expert,
                   moecomp::detail::type_identity_t<matrix_view<accumulator_t<W>>> out) {
  constexpr const char* fn = "design_matrix";
  static_assert(moecomp::detail::is_weight_type_v<W>, "design_matrix: W must be float, double, bfloat16 or half");
  moecomp::detail::check_ffn_expert(fn, expert);
  MOECOMP_EXPECTS(out.rows() == expert.d_ff() && out.cols() == design_width(expert), fn, ": out must be ",
                  moecomp::detail::shape_string(expert.d_ff(), design_width(expert)),
                  " (d_ff x the design width), got ", moecomp::detail::shape_string(out.rows(), out.cols()));
  detail::fill_design<W, accumulator_t<W>>(ctx, expert, out);
}

/// p[i] = the row of b matched to row i of a under params.objective (weights or inner; correlation compares
/// activations: use align_activations). a: n x f, b: m x f with n <= m, float or double, finite.
template <class T>
align_result align_rows(const host_context& ctx, const align_params& params,
                        moecomp::detail::type_identity_t<matrix_view<const T>> a,
                        moecomp::detail::type_identity_t<matrix_view<const T>> b, vector_view<index_t> p) {
  static_assert(moecomp::detail::is_real_v<T>, "align_rows: T must be float or double");
  return detail::checked_align_rows<T>(ctx, params.objective, a, b, p);
}

/// p[i] = the neuron (column) of b matched to neuron i of a, maximising the sum of Pearson correlations over the
/// tokens (rows). a: tokens x n, b: tokens x m with n <= m and tokens >= 2, float or double, finite.
template <class T>
align_result align_activations(const host_context& ctx, moecomp::detail::type_identity_t<matrix_view<const T>> a,
                               moecomp::detail::type_identity_t<matrix_view<const T>> b, vector_view<index_t> p) {
  constexpr const char* fn = "align_activations";
  static_assert(moecomp::detail::is_real_v<T>, "align_activations: T must be float or double");
  detail::check_activation_alignment(fn, a.rows(), a.cols(), b.rows(), b.cols(), p.size());
  moecomp::detail::check_finite(fn, "a", a, ctx.threads());
  moecomp::detail::check_finite(fn, "b", b, ctx.threads());
  return detail::align_activations_host<T>(ctx, a, b, p);
}

/// out (n x m) = the Pearson correlations over the tokens (rows) of a's columns (tokens x n) with b's (tokens x m):
/// align_activations' cost matrix, and the correlations merging's fix-dom ranks by. Each column centred and scaled
/// to unit norm (mean and norm in double, the standardised values in T), then one Gram product in T; a constant
/// column correlates 0 with every column. tokens >= 2, finite; out must not overlap a or b.
template <class T>
void pearson_correlation(const host_context& ctx, moecomp::detail::type_identity_t<matrix_view<const T>> a,
                         moecomp::detail::type_identity_t<matrix_view<const T>> b,
                         moecomp::detail::type_identity_t<matrix_view<T>> out) {
  constexpr const char* fn = "pearson_correlation";
  static_assert(moecomp::detail::is_real_v<T>, "pearson_correlation: T must be float or double");
  detail::check_correlation_shapes(fn, a.rows(), a.cols(), b.rows(), b.cols(), out.rows(), out.cols());
  moecomp::detail::check_no_overlap(fn, "out", out, "a", a);
  moecomp::detail::check_no_overlap(fn, "out", out, "b", b);
  moecomp::detail::check_finite(fn, "a", a, ctx.threads());
  moecomp::detail::check_finite(fn, "b", b, ctx.threads());
  detail::pearson_correlation_host<T>(ctx, a, b, out);
}

/// p[i] = the expert's neuron matched to the reference's neuron i (p: d_ff entries). weights / inner compare
/// design rows (x unused, may be empty); correlation compares the hidden activations of both experts on the
/// tokens x (n x d in accumulator_t<W>, n >= 2; params.forward runs them). The experts must have one shape
/// (d_ff, d, gated, the same biases). With bfloat16 experts and ctx.matmul == bf16, weights / inner keep the design
/// rows in bfloat16 and take the cost's cross term from bfloat16 dot products (docs/align.md, "Matmul precision").
template <class W>
align_result align_experts(const host_context& ctx, const align_params& params, const moe::ffn_expert_view<W>& reference,
                           const moe::ffn_expert_view<W>& expert,
                           moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>>> x,
                           vector_view<index_t> p) {
  using A = accumulator_t<W>;
  constexpr const char* fn = "align_experts";
  static_assert(moecomp::detail::is_weight_type_v<W>, "align_experts: W must be float, double, bfloat16 or half");
  moecomp::detail::check_ffn_expert(fn, reference);
  moecomp::detail::check_ffn_expert(fn, expert);
  detail::check_expert_pair_shape(fn, reference, expert);
  MOECOMP_EXPECTS(p.size() == reference.d_ff(), fn, ": permutation must have ", reference.d_ff(),
                  " entries (one per neuron), got ", p.size());
  const index_t d_ff = reference.d_ff();
  if (params.objective == align_objective::correlation) {
    moecomp::detail::check_ffn_params(fn, params.forward);
    MOECOMP_EXPECTS(x.rows() >= 2 && x.cols() == reference.d_model(), fn,
                    ": x must be tokens x d with at least 2 tokens and d = ", reference.d_model(),
                    " for the correlation objective, got ", moecomp::detail::shape_string(x.rows(), x.cols()));
    moecomp::detail::host_workspace<A> ha(ctx, static_cast<std::size_t>(x.rows() * d_ff));
    moecomp::detail::host_workspace<A> hb(ctx, static_cast<std::size_t>(x.rows() * d_ff));
    const matrix_view<A> hav(ha.data(), x.rows(), d_ff, d_ff), hbv(hb.data(), x.rows(), d_ff, d_ff);
    moe::ffn_hidden<W>(ctx, params.forward, reference, x, hav);
    moe::ffn_hidden<W>(ctx, params.forward, expert, x, hbv);
    return align_activations<A>(ctx, hav, hbv, p);
  }
  const index_t f = design_width(reference);
  // The design rows in D, then align_rows' checks and solve. D is the accumulator type, or bfloat16 for bfloat16
  // experts under matmul_precision::bf16: the rows are then the weights as stored, and the cost's cross term
  // comes from bfloat16 dot products (the products are the float path's; only the order of the float sums differs).
  const auto align_designs = [&](auto design_type) {
    using D = typename decltype(design_type)::type;
    moecomp::detail::host_workspace<D> da(ctx, static_cast<std::size_t>(d_ff * f));
    moecomp::detail::host_workspace<D> db(ctx, static_cast<std::size_t>(d_ff * f));
    const matrix_view<D> dav(da.data(), d_ff, f, f), dbv(db.data(), d_ff, f, f);
    detail::fill_design<W, D>(ctx, reference, dav);
    detail::fill_design<W, D>(ctx, expert, dbv);
    return detail::checked_align_rows<D>(ctx, params.objective, dav, dbv, p);
  };
  if constexpr (std::is_same_v<W, bfloat16>)
    if (ctx.matmul == matmul_precision::bf16) return align_designs(moecomp::detail::type_identity<bfloat16>{});
  return align_designs(moecomp::detail::type_identity<A>{});
}

/// Row e of permutations (E x d_ff) = align_experts(stack.expert(reference), stack.expert(e)); the reference's
/// own row is the identity. Returns the summed cost and the first status that is not ok (ok otherwise).
template <class W>
align_result align_stack(const host_context& ctx, const align_params& params, const moe::ffn_expert_stack_view<W>& stack,
                         index_t reference, moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>>> x,
                         matrix_view<index_t> permutations) {
  constexpr const char* fn = "align_stack";
  moecomp::detail::check_ffn_stack(fn, stack);
  MOECOMP_EXPECTS(reference >= 0 && reference < stack.experts(), fn, ": reference must be an expert index in [0, ",
                  stack.experts(), "), got ", reference);
  MOECOMP_EXPECTS(permutations.rows() == stack.experts() && permutations.cols() == stack.d_ff(), fn,
                  ": permutations must be ", moecomp::detail::shape_string(stack.experts(), stack.d_ff()),
                  " (experts x d_ff), got ", moecomp::detail::shape_string(permutations.rows(), permutations.cols()));
  align_result total;
  const index_t d_ff = stack.d_ff();
  // Correlation: the reference's activations once, not once per expert.
  const bool correlation = params.objective == align_objective::correlation;
  using A = accumulator_t<W>;
  moecomp::detail::host_workspace<A> reference_hidden(ctx, correlation ? static_cast<std::size_t>(x.rows() * d_ff) : 0);
  moecomp::detail::host_workspace<A> expert_hidden(ctx, correlation ? static_cast<std::size_t>(x.rows() * d_ff) : 0);
  if (correlation) {
    moecomp::detail::check_ffn_params(fn, params.forward);
    MOECOMP_EXPECTS(x.rows() >= 2 && x.cols() == stack.d_model(), fn,
                    ": x must be tokens x d with at least 2 tokens and d = ", stack.d_model(),
                    " for the correlation objective, got ", moecomp::detail::shape_string(x.rows(), x.cols()));
    moe::ffn_hidden<W>(ctx, params.forward, stack.expert(reference), x,
                       matrix_view<A>(reference_hidden.data(), x.rows(), d_ff, d_ff));
  }
  for (index_t e = 0; e < stack.experts(); ++e) {
    vector_view<index_t> row(permutations.row_ptr(e), d_ff);
    if (e == reference) {
      for (index_t i = 0; i < d_ff; ++i) row[i] = i;
      continue;
    }
    align_result r;
    if (correlation) {
      const matrix_view<A> hb(expert_hidden.data(), x.rows(), d_ff, d_ff);
      moe::ffn_hidden<W>(ctx, params.forward, stack.expert(e), x, hb);
      r = align_activations<A>(ctx, matrix_view<const A>(reference_hidden.data(), x.rows(), d_ff, d_ff), hb, row);
    } else {
      r = align_experts<W>(ctx, params, stack.expert(reference), stack.expert(e), x, row);
    }
    total.cost += r.cost;
    if (total.ok() && !r.ok()) total.status = r.status;
  }
  return total;
}

/// out's neuron i = the expert's neuron p[i] (see above); out has the expert's pieces and shapes and must not
/// overlap it. Exact: values are copied, never converted.
template <class W>
void permute_neurons(const host_context& ctx, const moe::ffn_expert_view<W>& expert, vector_view<const index_t> p,
                     const moe::ffn_expert_mutable_view<W>& out) {
  constexpr const char* fn = "permute_neurons";
  moecomp::detail::check_ffn_expert(fn, expert);
  detail::check_same_expert_shape(fn, expert, out);
  MOECOMP_EXPECTS(p.size() == expert.d_ff(), fn, ": permutation must have ", expert.d_ff(),
                  " entries (one per neuron), got ", p.size());
  moecomp::detail::check_permutation(fn, "permutation", p, expert.d_ff());
  moecomp::detail::check_no_overlap(fn, "out.w1", out.w1, "the expert's w1", expert.w1);
  moecomp::detail::check_no_overlap(fn, "out.w2", out.w2, "the expert's w2", expert.w2);
  if (expert.gated()) moecomp::detail::check_no_overlap(fn, "out.w3", out.w3, "the expert's w3", expert.w3);
  detail::permute_neurons_host<W>(ctx, expert, p, out);
}

}  // namespace align
MOECOMP_NAMESPACE_END
