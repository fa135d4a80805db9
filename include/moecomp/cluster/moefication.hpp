#pragma once
// The MoEfication split of a dense FFN into E equal experts (SADMoE, MoEfication, D2DMoE): the rows of W1
// (the gate projection for GLU FFNs), each L2-normalised, are clustered by balanced k-means into E groups of
// exactly d_ff / E neurons, and each group becomes one expert, its neurons kept in increasing original
// index. Documentation: docs/kmeans.md ("The MoEfication split").
//
// Neuron i of the dense FFN is row i of W1 (and W3, b1, b3) and column i of W2 (nn.Linear layout: W1, W3
// are d_ff x d, W2 is d x d_ff). With every expert switched on, the experts' summed outputs equal the dense
// FFN's output: a permutation of the hidden units changes nothing. The FFN's output bias b2 is not split:
// it stays with the caller, added once.
#include <moecomp/cluster/kmeans.hpp>
#include <moecomp/cluster/kmeans_types.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/checks.hpp>

#include <cmath>
#include <cstdint>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {

/// The dense FFN to split: w1 (d_ff x d; the gate rows for GLU), optional w3 (d_ff x d, the up projection),
/// w2 (d x d_ff), optional biases b1, b3 (d_ff). Empty views for the absent parts.
template <class T>
struct dense_ffn_view {
  matrix_view<const T> w1, w3, w2;
  vector_view<const T> b1, b3;
};

/// Where the experts go: stacks of E experts of s = d_ff / E neurons. w1, w3: E x s x d; w2: E x d x s;
/// b1, b3: E x s; router (the MoEfication router's initialisation, each expert's centre of normalised
/// rows): E x d; labels (d_ff): the expert of each neuron; permutation (d_ff): new position p holds
/// original neuron permutation(p), expert e at positions [e s, (e + 1) s). Empty views where the FFN has
/// no such part (w3, b1, b3).
template <class T>
struct expert_stack_outputs {
  matrix_stack_view<T> w1, w3, w2;
  matrix_view<T> b1, b3;
  matrix_view<T> router;
  vector_view<std::int64_t> labels;
  vector_view<index_t> permutation;
};

/// Splits `ffn` into params.clusters experts by balanced k-means on its L2-normalised w1 rows (the size
/// bounds of params are set to d_ff / E each; every other field of params is used as given). Returns the
/// clustering's result. Throws invalid_argument for bad shapes, d_ff not a multiple of E, non-finite
/// weights or a zero w1 row (it has no direction).
template <class T>
kmeans_result moefication_split(const host_context& ctx, const kmeans_params& params, const dense_ffn_view<T>& ffn,
                                const expert_stack_outputs<T>& out) {
  static_assert(moecomp::detail::is_real_v<T>, "moefication_split: T must be float or double");
  constexpr const char* fn = "moefication_split";
  using moecomp::detail::shape_string;
  const index_t d_ff = ffn.w1.rows(), d = ffn.w1.cols(), experts = params.clusters;
  MOECOMP_EXPECTS(experts >= 1, fn, ": params.clusters (the number of experts) must be >= 1, got ", experts);
  MOECOMP_EXPECTS(d_ff >= 1 && d >= 1, fn, ": w1 must be d_ff x d with both >= 1, got ", shape_string(d_ff, d));
  MOECOMP_EXPECTS(d_ff % experts == 0, fn, ": the neurons (rows of w1, ", d_ff,
                  ") must be a multiple of params.clusters (", experts, ")");
  const index_t s = d_ff / experts;
  const bool glu = !ffn.w3.empty();
  MOECOMP_EXPECTS(!glu || (ffn.w3.rows() == d_ff && ffn.w3.cols() == d), fn, ": w3 must be ", shape_string(d_ff, d),
                  " like w1, got ", shape_string(ffn.w3.rows(), ffn.w3.cols()));
  MOECOMP_EXPECTS(ffn.w2.rows() == d && ffn.w2.cols() == d_ff, fn, ": w2 must be ", shape_string(d, d_ff),
                  " (d x d_ff), got ", shape_string(ffn.w2.rows(), ffn.w2.cols()));
  MOECOMP_EXPECTS(ffn.b1.empty() || ffn.b1.size() == d_ff, fn, ": b1 must be empty or have ", d_ff, " entries, got ",
                  ffn.b1.size());
  MOECOMP_EXPECTS(ffn.b3.empty() || (glu && ffn.b3.size() == d_ff), fn, ": b3 must be empty or, with w3, have ", d_ff,
                  " entries, got ", ffn.b3.size());
  auto check_stack = [&](const char* name, const matrix_stack_view<T>& v, bool wanted, index_t rows, index_t cols) {
    if (!wanted) {
      MOECOMP_EXPECTS(v.empty(), fn, ": out.", name, " must be empty: the FFN has no ", name);
      return;
    }
    MOECOMP_EXPECTS(v.count() == experts && v.rows() == rows && v.cols() == cols, fn, ": out.", name,
                    " must be a stack of ", experts, " matrices of ", shape_string(rows, cols), ", got ", v.count(),
                    " of ", shape_string(v.rows(), v.cols()));
  };
  check_stack("w1", out.w1, true, s, d);
  check_stack("w3", out.w3, glu, s, d);
  check_stack("w2", out.w2, true, d, s);
  auto check_matrix = [&](const char* name, const matrix_view<T>& v, bool wanted, index_t rows, index_t cols) {
    if (!wanted) {
      MOECOMP_EXPECTS(v.empty(), fn, ": out.", name, " must be empty: the FFN has no ", name);
      return;
    }
    MOECOMP_EXPECTS(v.rows() == rows && v.cols() == cols, fn, ": out.", name, " must be ", shape_string(rows, cols),
                    ", got ", shape_string(v.rows(), v.cols()));
  };
  check_matrix("b1", out.b1, !ffn.b1.empty(), experts, s);
  check_matrix("b3", out.b3, !ffn.b3.empty(), experts, s);
  check_matrix("router", out.router, true, experts, d);
  MOECOMP_EXPECTS(out.labels.size() == d_ff, fn, ": out.labels must have ", d_ff, " entries, got ", out.labels.size());
  MOECOMP_EXPECTS(out.permutation.size() == d_ff, fn, ": out.permutation must have ", d_ff, " entries, got ",
                  out.permutation.size());
  moecomp::detail::check_finite(fn, "w1", ffn.w1);
  if (glu) moecomp::detail::check_finite(fn, "w3", ffn.w3);
  moecomp::detail::check_finite(fn, "w2", ffn.w2);

  // The normalised rows, in T (each norm in double).
  moecomp::detail::host_workspace<T> unit(ctx, static_cast<std::size_t>(d_ff * d));
  for (index_t i = 0; i < d_ff; ++i) {
    const T* row = ffn.w1.row_ptr(i);
    double norm = 0;
    for (index_t j = 0; j < d; ++j) norm += static_cast<double>(row[j]) * static_cast<double>(row[j]);
    norm = std::sqrt(norm);
    MOECOMP_EXPECTS(norm > 0, fn, ": w1 row ", i, " is zero: a neuron without a direction cannot be clustered");
    for (index_t j = 0; j < d; ++j) unit[static_cast<std::size_t>(i * d + j)] = static_cast<T>(row[j] / norm);
  }
  kmeans_params balanced = params;
  balanced.size_min = balanced.size_max = s;
  moecomp::detail::host_workspace<index_t> sizes(ctx, static_cast<std::size_t>(experts));
  const kmeans_result result =
      kmeans<T>(ctx, balanced, matrix_view<const T>(unit.data(), d_ff, d), out.router, out.labels,
                vector_view<index_t>(sizes.data(), experts));
  // Expert e's neurons in increasing original index.
  moecomp::detail::host_workspace<index_t> fill(ctx, static_cast<std::size_t>(experts));
  for (index_t e = 0; e < experts; ++e) fill[static_cast<std::size_t>(e)] = 0;
  for (index_t i = 0; i < d_ff; ++i) {
    const auto e = static_cast<index_t>(out.labels[i]);
    const index_t r = fill[static_cast<std::size_t>(e)]++;
    out.permutation[e * s + r] = i;
    std::copy(ffn.w1.row_ptr(i), ffn.w1.row_ptr(i) + d, out.w1.row_ptr(e, r));
    if (glu) std::copy(ffn.w3.row_ptr(i), ffn.w3.row_ptr(i) + d, out.w3.row_ptr(e, r));
    for (index_t j = 0; j < d; ++j) out.w2(e, j, r) = ffn.w2(j, i);
    if (!ffn.b1.empty()) out.b1(e, r) = ffn.b1[i];
    if (!ffn.b3.empty()) out.b3(e, r) = ffn.b3[i];
  }
  return result;
}

}  // namespace cluster
MOECOMP_NAMESPACE_END
