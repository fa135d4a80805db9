#pragma once
// FFN experts (<moecomp/moe/ffn.hpp>): the activation, the views of one expert and of a stack of experts,
// and the forward's parameters. Documentation: docs/moe.md.
//
// An expert in nn.Linear layout: W1 (gate, d_ff x d), optional W3 (up, d_ff x d), W2 (down, d x d_ff), optional
// biases b1, b3 (d_ff) and b2 (d). Gated (GLU, SwiGLU): y = W2 (act(W1 x + b1) * (W3 x + b3)) + b2; plain:
// y = W2 act(W1 x + b1) + b2. Neuron i is row i of W1 / W3 / b1 / b3 and column i of W2. Storage W: float,
// double, bfloat16 or half; the forward accumulates in accumulator_t<W> (float, or double for double).
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>

#include <string>
#include <string_view>

MOECOMP_NAMESPACE_BEGIN
namespace moe {

/// silu: v sigma(v) (SwiGLU's); gelu: v Phi(v), the erf form (torch's default); gelu_tanh: the tanh
/// approximation (torch's approximate="tanh"); relu: max(v, 0).
enum class activation { silu, gelu, gelu_tanh, relu };

inline const char* to_string(activation a) noexcept {
  switch (a) {
    case activation::silu: return "silu";
    case activation::gelu: return "gelu";
    case activation::gelu_tanh: return "gelu_tanh";
    case activation::relu: return "relu";
  }
  return "unknown";
}

/// Parses "silu", "gelu", "gelu_tanh" or "relu"; throws invalid_argument naming them otherwise.
inline activation parse_activation(std::string_view name) {
  for (activation a : {activation::silu, activation::gelu, activation::gelu_tanh, activation::relu})
    if (name == to_string(a)) return a;
  MOECOMP_FAIL(error_kind::invalid_argument, "activation: expected silu, gelu, gelu_tanh or relu, got '",
               std::string(name), "'");
}

/// One expert. w3, b1, b3, b2 may be empty views (not gated; no biases).
template <class W>
struct ffn_expert_view {
  matrix_view<const W> w1;  // d_ff x d
  matrix_view<const W> w3;  // d_ff x d, or empty
  matrix_view<const W> w2;  // d x d_ff
  vector_view<const W> b1, b3, b2;
  index_t d_model() const noexcept { return w1.cols(); }
  index_t d_ff() const noexcept { return w1.rows(); }
  bool gated() const noexcept { return !w3.empty(); }
};

/// One expert's writable storage, the output of permute_neurons and of merging: the pieces of
/// ffn_expert_view, mutable; empty views where the expert has no w3 or no bias.
template <class W>
struct ffn_expert_mutable_view {
  matrix_view<W> w1, w3, w2;
  vector_view<W> b1, b3, b2;
  index_t d_model() const noexcept { return w1.cols(); }
  index_t d_ff() const noexcept { return w1.rows(); }
  bool gated() const noexcept { return !w3.empty(); }
  ffn_expert_view<W> as_const() const noexcept { return {w1, w3, w2, b1, b3, b2}; }
};

/// E experts of one shape: stacks w1 and w3 (E x d_ff x d), w2 (E x d x d_ff); biases as E x d_ff (b1, b3)
/// and E x d (b2) matrices, or empty.
template <class W>
struct ffn_expert_stack_view {
  matrix_stack_view<const W> w1, w3, w2;
  matrix_view<const W> b1, b3, b2;
  index_t experts() const noexcept { return w1.count(); }
  index_t d_model() const noexcept { return w1.cols(); }
  index_t d_ff() const noexcept { return w1.rows(); }
  bool gated() const noexcept { return !w3.empty(); }
  /// Expert e as a view.
  ffn_expert_view<W> expert(index_t e) const {
    ffn_expert_view<W> v{w1.matrix(e), w3.empty() ? matrix_view<const W>() : w3.matrix(e), w2.matrix(e), {}, {}, {}};
    if (!b1.empty()) v.b1 = vector_view<const W>(b1.row_ptr(e), b1.cols());
    if (!b3.empty()) v.b3 = vector_view<const W>(b3.row_ptr(e), b3.cols());
    if (!b2.empty()) v.b2 = vector_view<const W>(b2.row_ptr(e), b2.cols());
    return v;
  }
};

/// E experts' writable storage (the output of merging): the pieces of ffn_expert_stack_view, mutable.
template <class W>
struct ffn_expert_stack_mutable_view {
  matrix_stack_view<W> w1, w3, w2;
  matrix_view<W> b1, b3, b2;
  index_t experts() const noexcept { return w1.count(); }
  index_t d_model() const noexcept { return w1.cols(); }
  index_t d_ff() const noexcept { return w1.rows(); }
  bool gated() const noexcept { return !w3.empty(); }
  /// Expert e as a mutable view.
  ffn_expert_mutable_view<W> expert(index_t e) const {
    ffn_expert_mutable_view<W> v{w1.matrix(e), w3.empty() ? matrix_view<W>() : w3.matrix(e), w2.matrix(e), {}, {}, {}};
    if (!b1.empty()) v.b1 = vector_view<W>(b1.row_ptr(e), b1.cols());
    if (!b3.empty()) v.b3 = vector_view<W>(b3.row_ptr(e), b3.cols());
    if (!b2.empty()) v.b2 = vector_view<W>(b2.row_ptr(e), b2.cols());
    return v;
  }
  ffn_expert_stack_view<W> as_const() const noexcept { return {w1, w3, w2, b1, b3, b2}; }
};

struct ffn_params {
  activation act = activation::silu;
  /// Tokens per tile: each tile's GEMMs run on one thread (results do not depend on the thread count). >= 1.
  index_t token_tile = 256;
};

}  // namespace moe
MOECOMP_NAMESPACE_END
