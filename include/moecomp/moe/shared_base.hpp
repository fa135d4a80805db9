#pragma once
// ResMoE's layer on the host: FFN experts stored as one shared base expert (the Wasserstein barycenter) plus
// each expert's sparse residual, encoded from ResMoE's design matrix and run without materialising any expert.
// Documentation: docs/moe.md, "Shared-base experts (ResMoE)".
//
//   encode_expert_residual: the expert's design matrix [W1 | W3 | W2^T] (one row per neuron) minus the base's,
//     rows permuted into the base's order (row i of the expert goes to base row permutation[i], the OT
//     module's convention), pruned as ONE matrix by params.prune (ResMoE: l1_unstructured at 0.75 on the
//     whole design matrix; column_block with block d prunes each piece separately), then split back into the
//     three residuals in nn.Linear layout (W1: d_ff x d, W3: d_ff x d, W2: d x d_ff) and encoded by
//     params.encode. Reports the pruning, the bytes and the expert's squared approximation error (Appendix A.6).
//   expert_design_residual / encode_design_residual: the two halves of encode_expert_residual (the design
//     residual alone; a design residual pruned by any rule split and encoded), for ResMoE's ablations.
//   shared_base_ffn_forward: y = W2_e (act(W1_e x) * (W3_e x)) with W_e = B + R_e, for the rows of each expert
//     (grouped by expert_offsets, as shared_base_apply), by three shared-base applies: every base read once
//     per call, each residual only for the experts with rows.
//
// Experts with biases are refused (Mixtral, Qwen-MoE, DeepSeek-MoE, OLMoE and Switch experts have none). The
// layer runs in the base's neuron order, which leaves its outputs unchanged (the FFN does not depend on the
// order of its neurons). Deterministic at any thread count.
#include <moecomp/core/context.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/moe/ffn_types.hpp>
#include <moecomp/sparse/apply.hpp>
#include <moecomp/sparse/prune.hpp>
#include <moecomp/sparse/residual.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/parallel.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/core/detail/activation.hpp>
#include <moecomp/core/detail/ffn_checks.hpp>

#include <type_traits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace moe {

/// One expert's residuals in the base's neuron order, nn.Linear layout (w3 empty for a plain FFN).
struct expert_residual {
  sparse::sparse_matrix w1, w3, w2;
};

struct expert_residual_info {
  sparse::prune_result pruned;   ///< over the whole design matrix
  std::uint64_t bytes = 0;       ///< the three residuals' sections
  double bits_per_weight = 0;    ///< 8 x bytes over the expert's weight count
  double squared_error = 0;      ///< ||T W - (B + R)||_F^2 over all three matrices (ResMoE's Appendix A.6)
};

/// A layer of experts sharing base weights: the bases in nn.Linear layout and E residuals of each.
template <class W>
struct shared_base_ffn_view {
  matrix_view<const W> w1, w3, w2;  ///< d_ff x d, d_ff x d (or empty), d x d_ff
  std::vector<sparse::sparse_matrix_view> r1, r3, r2;  ///< E each (r3 empty when w3 is)
  index_t experts() const noexcept { return static_cast<index_t>(r1.size()); }
  bool gated() const noexcept { return !w3.empty(); }
};

namespace detail {

template <class W>
void check_bias_free(const char* fn, const char* name, const ffn_expert_view<W>& e) {
  MOECOMP_EXPECTS(e.b1.empty() && e.b3.empty() && e.b2.empty(), fn, ": ", name,
                  " must have no biases (shared-base experts are bias-free), got ", e.b1.size() + e.b3.size() + e.b2.size(),
                  " bias entries");
}

}  // namespace detail

// ---- the design residual and its encoding, apart (ResMoE's ablations compress it other ways) ----

namespace detail {

/// D(p(i), :) = [W1(i, :) | W3(i, :) | W2(:, i)^T] - the base's row p(i), in A (no checks: the callers check).
template <class W, class A>
void fill_design_residual(const host_context& ctx, const ffn_expert_view<W>& base, const ffn_expert_view<W>& expert,
                          vector_view<const index_t> permutation, matrix_view<A> fv) {
  const index_t d_ff = base.d_ff(), d = base.d_model(), pieces = base.gated() ? 3 : 2;
  moecomp::detail::parallel_for(d_ff, ctx.threads(), [&](index_t i, int) {
    const index_t s = permutation.size() != 0 ? permutation[i] : i;
    A* row = fv.row_ptr(s);
    for (index_t j = 0; j < d; ++j) row[j] = convert_to<A>(expert.w1(i, j)) - convert_to<A>(base.w1(s, j));
    if (base.gated())
      for (index_t j = 0; j < d; ++j) row[d + j] = convert_to<A>(expert.w3(i, j)) - convert_to<A>(base.w3(s, j));
    A* down = row + (pieces - 1) * d;
    for (index_t j = 0; j < d; ++j) down[j] = convert_to<A>(expert.w2(j, i)) - convert_to<A>(base.w2(j, s));
  });
}

}  // namespace detail

/// The expert's design residual alone (d_ff x (2 or 3) d, base's neuron order; see encode_expert_residual),
/// with encode_expert_residual's checks.
template <class W>
host_matrix<std::conditional_t<std::is_same_v<W, double>, double, float>> expert_design_residual(
    const host_context& ctx, const ffn_expert_view<W>& base, const ffn_expert_view<W>& expert,
    vector_view<const index_t> permutation) {
  constexpr const char* fn = "expert_design_residual";
  using A = std::conditional_t<std::is_same_v<W, double>, double, float>;
  moecomp::detail::check_ffn_expert(fn, base);
  moecomp::detail::check_ffn_expert(fn, expert);
  detail::check_bias_free(fn, "base", base);
  detail::check_bias_free(fn, "expert", expert);
  const index_t d_ff = base.d_ff(), d = base.d_model();
  MOECOMP_EXPECTS(expert.d_ff() == d_ff && expert.d_model() == d && expert.gated() == base.gated(), fn,
                  ": expert must have the base's shape (d_ff ", d_ff, ", d ", d, base.gated() ? ", gated" : ", not gated",
                  "), got d_ff ", expert.d_ff(), ", d ", expert.d_model(), expert.gated() ? ", gated" : ", not gated");
  MOECOMP_EXPECTS(permutation.size() == 0 || permutation.size() == d_ff, fn, ": permutation must be empty or have ",
                  d_ff, " entries (one per neuron), got ", permutation.size());
  moecomp::detail::check_permutation(fn, "permutation", permutation, d_ff);
  host_matrix<A> full(d_ff, (base.gated() ? 3 : 2) * d);
  detail::fill_design_residual<W, A>(ctx, base, expert, permutation, full.view());
  return full;
}

/// Splits a (pruned) design residual d_ff x (2 or 3) d back into W1's, W3's (gated) and W2's residuals in
/// nn.Linear layout and encodes each by `params` into out; returns their bytes.
template <class A>
std::uint64_t encode_design_residual(const host_context& ctx, const sparse::encode_params& params,
                                     moecomp::detail::type_identity_t<matrix_view<const A>> pruned, index_t d, bool gated,
                                     expert_residual& out) {
  const index_t pieces = gated ? 3 : 2, d_ff = pruned.rows();
  MOECOMP_EXPECTS(pruned.cols() == pieces * d, "encode_design_residual: pruned must have ", pieces * d, " columns, got ",
                  pruned.cols());
  const auto piece = [&](index_t k) {
    return matrix_view<const A>(pruned.data() + k * d, d_ff, d, pruned.row_stride());
  };
  sparse::encode_sparse<A>(ctx, params, piece(0), out.w1);
  if (gated) {
    sparse::encode_sparse<A>(ctx, params, piece(1), out.w3);
  } else {
    out.w3 = sparse::sparse_matrix();
  }
  host_matrix<A> down(d, d_ff);  // W2's residual back in nn.Linear layout
  const matrix_view<const A> down_t = piece(pieces - 1);
  for (index_t i = 0; i < d_ff; ++i)
    for (index_t j = 0; j < d; ++j) down(j, i) = down_t(i, j);
  sparse::encode_sparse<A>(ctx, params, down.const_view(), out.w2);
  return out.w1.bytes() + out.w3.bytes() + out.w2.bytes();
}

/// Encodes `expert` against `base` (see above) into out. Throws invalid_argument for shapes that differ, biases,
/// a bad permutation or bad parameters.
template <class W>
expert_residual_info encode_expert_residual(const host_context& ctx, const sparse::residual_params& params,
                                            const ffn_expert_view<W>& base, const ffn_expert_view<W>& expert,
                                            vector_view<const index_t> permutation, expert_residual& out) {
  constexpr const char* fn = "encode_expert_residual";
  using A = std::conditional_t<std::is_same_v<W, double>, double, float>;
  moecomp::detail::check_ffn_expert(fn, base);
  moecomp::detail::check_ffn_expert(fn, expert);
  detail::check_bias_free(fn, "base", base);
  detail::check_bias_free(fn, "expert", expert);
  const index_t d_ff = base.d_ff(), d = base.d_model();
  MOECOMP_EXPECTS(expert.d_ff() == d_ff && expert.d_model() == d && expert.gated() == base.gated(), fn,
                  ": expert must have the base's shape (d_ff ", d_ff, ", d ", d, base.gated() ? ", gated" : ", not gated",
                  "), got d_ff ", expert.d_ff(), ", d ", expert.d_model(), expert.gated() ? ", gated" : ", not gated");
  MOECOMP_EXPECTS(permutation.size() == 0 || permutation.size() == d_ff, fn, ": permutation must be empty or have ",
                  d_ff, " entries (one per neuron), got ", permutation.size());
  moecomp::detail::check_permutation(fn, "permutation", permutation, d_ff);
  // Checked here so that a bad weight is named as the caller knows it, not by its design-matrix position.
  const ffn_expert_view<W>* owners[2] = {&base, &expert};
  const char* names[2][3] = {{"base.w1", "base.w3", "base.w2"}, {"expert.w1", "expert.w3", "expert.w2"}};
  for (int k = 0; k < 2; ++k) {
    moecomp::detail::check_finite(fn, names[k][0], owners[k]->w1, ctx.threads());
    if (owners[k]->gated()) moecomp::detail::check_finite(fn, names[k][1], owners[k]->w3, ctx.threads());
    moecomp::detail::check_finite(fn, names[k][2], owners[k]->w2, ctx.threads());
  }
  const index_t pieces = base.gated() ? 3 : 2, width = pieces * d;
  if (params.encode.format == sparse::sparse_format::two_of_four)
    MOECOMP_EXPECTS(params.prune.scope == sparse::prune_scope::n_of_m && params.prune.m == 4 && params.prune.n <= 2,
                    fn, ": params.encode.format 2:4 needs params.prune to be N:M pruning with m = 4 and n <= 2");
  host_matrix<A> full(d_ff, width), pruned(d_ff, width);
  detail::fill_design_residual<W, A>(ctx, base, expert, permutation, full.view());
  expert_residual_info info;
  info.pruned = sparse::prune_magnitude<A>(ctx, params.prune, full.const_view(), pruned.view());
  info.squared_error = sparse::stored_squared_error<A>(ctx, full.const_view(), pruned.const_view(), params.encode.values);
  info.bytes = encode_design_residual<A>(ctx, params.encode, pruned.const_view(), d, base.gated(), out);
  info.bits_per_weight = 8.0 * static_cast<double>(info.bytes) / static_cast<double>(d_ff * width);
  return info;
}

/// y = the shared-base experts' outputs on their rows (see above): x and y n x d in accumulator_t<W>, rows
/// grouped by expert_offsets (E + 1 entries from 0 to n). Throws invalid_argument for inconsistent shapes.
template <class W>
void shared_base_ffn_forward(const host_context& ctx, const ffn_params& params, const shared_base_ffn_view<W>& layer,
                             moecomp::detail::type_identity_t<matrix_view<const accumulator_t<W>>> x,
                             vector_view<const index_t> expert_offsets,
                             moecomp::detail::type_identity_t<matrix_view<accumulator_t<W>>> y) {
  constexpr const char* fn = "shared_base_ffn_forward";
  using A = accumulator_t<W>;
  using moecomp::detail::shape_string;
  static_assert(moecomp::detail::is_weight_type_v<W>, "shared_base_ffn_forward: W must be float, double, bfloat16 or half");
  moecomp::detail::check_ffn_params(fn, params);
  const index_t d_ff = layer.w1.rows(), d = layer.w1.cols(), n = x.rows();
  moecomp::detail::check_ffn_shapes(fn, d_ff, d, layer.w3.rows(), layer.w3.cols(), layer.w2.rows(), layer.w2.cols(), 0, 0, 0,
                           layer.gated());
  MOECOMP_EXPECTS(static_cast<index_t>(layer.r2.size()) == layer.experts() &&
                      static_cast<index_t>(layer.r3.size()) == (layer.gated() ? layer.experts() : 0),
                  fn, ": layer must hold ", layer.experts(), " residuals of each matrix (r1, r2", layer.gated() ? ", r3" : "",
                  "), got ", layer.r1.size(), ", ", layer.r2.size(), " and ", layer.r3.size());
  moecomp::detail::check_tokens(fn, d, n, x.cols(), "y", y.rows(), y.cols(), d);
  // Every residual's shape before any work (the applies check the offsets and the rest again).
  const auto check_residuals = [&](const char* name, const std::vector<sparse::sparse_matrix_view>& r, index_t rows,
                                   index_t cols) {
    for (std::size_t e = 0; e < r.size(); ++e)
      MOECOMP_EXPECTS(r[e].rows() == rows && r[e].cols() == cols, fn, ": layer.", name, "[", e, "] must be ",
                      shape_string(rows, cols), " like its base, got ", shape_string(r[e].rows(), r[e].cols()));
  };
  check_residuals("r1", layer.r1, d_ff, d);
  check_residuals("r3", layer.r3, d_ff, d);
  check_residuals("r2", layer.r2, d, d_ff);
  MOECOMP_EXPECTS(expert_offsets.size() == layer.experts() + 1 && expert_offsets[0] == 0 &&
                      expert_offsets[expert_offsets.size() - 1] == n,
                  fn, ": expert_offsets must have ", layer.experts() + 1, " entries from 0 to the ", n, " rows of x");
  moecomp::detail::check_no_overlap(fn, "y", y, "x", x);
  host_matrix<A> h(n, d_ff), u(layer.gated() ? n : 0, d_ff);
  sparse::shared_base_apply<W>(ctx, x, layer.w1, layer.r1, expert_offsets, h.view());
  if (layer.gated()) sparse::shared_base_apply<W>(ctx, x, layer.w3, layer.r3, expert_offsets, u.view());
  matrix_view<A> hv = h.view();
  moecomp::detail::parallel_for(n, ctx.threads(), [&](index_t t, int) {
    A* hr = hv.row_ptr(t);
    const A* ur = layer.gated() ? u.data() + t * d_ff : nullptr;
    for (index_t j = 0; j < d_ff; ++j) {
      const A a = moecomp::detail::activate<A>(params.act, hr[j]);
      hr[j] = ur != nullptr ? a * ur[j] : a;
    }
  });
  sparse::shared_base_apply<W>(ctx, h.const_view(), layer.w2, layer.r2, expert_offsets, y);
}

}  // namespace moe
MOECOMP_NAMESPACE_END
