#pragma once
// The argument checks of neuron alignment, shared by the host (align/align.hpp) and the device
// (cuda/align/align.cuh).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/align/align_types.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/moe/ffn_types.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace align {
namespace detail {

using moecomp::detail::shape_string;

/// align_rows compares rows by weights or inner; correlation compares activations (align_activations).
inline void check_row_objective(const char* fn, align_objective objective) {
  MOECOMP_EXPECTS(objective != align_objective::correlation, fn,
                  ": params.objective must be weights or inner (correlation compares activations: align_activations),"
                  " got correlation");
}

/// a: n x f and b: m x f design rows with n <= m, p: n entries.
inline void check_row_alignment(const char* fn, index_t a_rows, index_t a_cols, index_t b_rows, index_t b_cols,
                                index_t p_size) {
  MOECOMP_EXPECTS(a_rows >= 1 && a_cols >= 1, fn, ": a must have at least one row and one column, got ",
                  shape_string(a_rows, a_cols));
  MOECOMP_EXPECTS(b_cols == a_cols, fn, ": b must have ", a_cols, " columns like a, got ", shape_string(b_rows, b_cols));
  MOECOMP_EXPECTS(b_rows >= a_rows, fn, ": b must have at least a's ", a_rows,
                  " rows (each row of a gets a distinct row of b), got ", b_rows);
  MOECOMP_EXPECTS(p_size == a_rows, fn, ": permutation must have ", a_rows, " entries (one per row of a), got ", p_size);
}

/// a: tokens x n and b: tokens x m activations with n <= m and at least two tokens, p: n entries.
inline void check_activation_alignment(const char* fn, index_t a_rows, index_t a_cols, index_t b_rows,
                                       index_t b_cols, index_t p_size) {
  MOECOMP_EXPECTS(a_rows >= 2 && a_cols >= 1, fn,
                  ": a must be tokens x neurons with at least 2 tokens and 1 neuron, got ", shape_string(a_rows, a_cols));
  MOECOMP_EXPECTS(b_rows == a_rows, fn, ": b must have a's ", a_rows, " tokens (rows), got ", shape_string(b_rows, b_cols));
  MOECOMP_EXPECTS(b_cols >= a_cols, fn, ": b must have at least a's ", a_cols,
                  " neurons (columns; each neuron of a gets a distinct neuron of b), got ", b_cols);
  MOECOMP_EXPECTS(p_size == a_cols, fn, ": permutation must have ", a_cols, " entries (one per neuron of a), got ",
                  p_size);
}

/// a: tokens x n and b: tokens x m activations with at least two tokens and one neuron each; out: n x m.
inline void check_correlation_shapes(const char* fn, index_t a_rows, index_t a_cols, index_t b_rows, index_t b_cols,
                                     index_t out_rows, index_t out_cols) {
  MOECOMP_EXPECTS(a_rows >= 2 && a_cols >= 1, fn,
                  ": a must be tokens x neurons with at least 2 tokens and 1 neuron, got ", shape_string(a_rows, a_cols));
  MOECOMP_EXPECTS(b_rows == a_rows && b_cols >= 1, fn, ": b must have a's ", a_rows,
                  " tokens (rows) and at least 1 neuron, got ", shape_string(b_rows, b_cols));
  MOECOMP_EXPECTS(out_rows == a_cols && out_cols == b_cols, fn, ": out must be ", shape_string(a_cols, b_cols),
                  " (a's neurons x b's neurons), got ", shape_string(out_rows, out_cols));
}

/// The output of permute_neurons has exactly the input expert's pieces and shapes.
/// align_experts' two experts (host or device views): one shape, the same biases.
template <class Reference, class Expert>
void check_expert_pair_shape(const char* fn, const Reference& reference, const Expert& expert) {
  MOECOMP_EXPECTS(expert.d_ff() == reference.d_ff() && expert.d_model() == reference.d_model() &&
                      expert.gated() == reference.gated() && expert.b1.empty() == reference.b1.empty() &&
                      expert.b3.empty() == reference.b3.empty(),
                  fn, ": expert must have the reference's shape (d_ff ", reference.d_ff(), ", d ", reference.d_model(),
                  reference.gated() ? ", gated" : ", not gated", ", the same biases), got d_ff ", expert.d_ff(), ", d ",
                  expert.d_model(), expert.gated() ? ", gated" : ", not gated");
}

template <class W>
void check_same_expert_shape(const char* fn, const moe::ffn_expert_view<W>& in, const moe::ffn_expert_mutable_view<W>& out) {
  const auto same = [&](const char* name, index_t r, index_t c, index_t want_r, index_t want_c) {
    MOECOMP_EXPECTS(r == want_r && c == want_c, fn, ": out.", name, " must be ", shape_string(want_r, want_c),
                    " like the expert's, got ", shape_string(r, c));
  };
  same("w1", out.w1.rows(), out.w1.cols(), in.w1.rows(), in.w1.cols());
  same("w3", out.w3.rows(), out.w3.cols(), in.w3.rows(), in.w3.cols());
  same("w2", out.w2.rows(), out.w2.cols(), in.w2.rows(), in.w2.cols());
  same("b1", out.b1.size(), 1, in.b1.size(), 1);
  same("b3", out.b3.size(), 1, in.b3.size(), 1);
  same("b2", out.b2.size(), 1, in.b2.size(), 1);
}

}  // namespace detail
}  // namespace align
MOECOMP_NAMESPACE_END
