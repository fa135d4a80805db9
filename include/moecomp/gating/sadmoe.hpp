#pragma once
// SADMoE's extras (issue 16): the square Hoyer sparsity measure of activations and the FLOPs model of its
// Appendix B (a dense FFN against dynamic-k experts). The router training targets (each expert's output norm
// per token) are moe::expert_output_norms (<moecomp/moe/features.hpp>). Documentation: docs/gating.md.
#include <moecomp/core/context.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/parallel.hpp>
#include <moecomp/core/detail/traits.hpp>

#include <cmath>

MOECOMP_NAMESPACE_BEGIN
namespace gating {

/// out[t] = (sum_i |a_ti|)^2 / (sum_i a_ti^2 + 1e-15), D2DMoE's square Hoyer measure per row (token), in
/// double, entries in order: n for a dense row of equal magnitudes, 1 for a single non-zero.
template <class A>
void square_hoyer(const host_context& ctx, moecomp::detail::type_identity_t<matrix_view<const A>> activations,
                  vector_view<double> out) {
  MOECOMP_EXPECTS(out.size() == activations.rows(), "square_hoyer: out must have ", activations.rows(),
                  " entries (the rows of activations), got ", out.size());
  moecomp::detail::parallel_for(activations.rows(), ctx.threads(), [&](index_t t, int) {
    double l1 = 0, l2 = 0;
    for (index_t i = 0; i < activations.cols(); ++i) {
      const double v = static_cast<double>(activations(t, i));
      l1 += std::abs(v);
      l2 += v * v;
    }
    out[t] = l1 * l1 / (l2 + 1e-15);
  });
}

/// SADMoE Appendix B, per token, counting multiply-accumulates as the paper does (biases and activations
/// left out): a dense FFN of d_model -> e d_model -> d_model costs C_FFN = 2 e d^2; one of n experts
/// C_E = 2 e d^2 / n; the two-layer router d -> d_h -> n costs C_R = d_h (d + n); dynamic-k with k experts
/// C_dynk = k C_E + C_R; ratio = C_dynk / C_FFN = k / n + d_h (1 + n / d) / (2 e d).
struct dynamic_k_cost {
  double ffn = 0, expert = 0, router = 0, dynamic_k = 0, ratio = 0;
};

/// k may be fractional (a mean over tokens). Throws invalid_argument for non-positive sizes or k outside
/// [0, n].
inline dynamic_k_cost dynamic_k_flops(index_t d_model, double expansion, index_t experts, double k,
                                      index_t router_hidden) {
  constexpr const char* fn = "dynamic_k_flops";
  MOECOMP_EXPECTS(d_model >= 1 && experts >= 1 && router_hidden >= 0, fn,
                  ": d_model and experts must be >= 1 and router_hidden >= 0, got ", d_model, ", ", experts, " and ",
                  router_hidden);
  MOECOMP_EXPECTS(std::isfinite(expansion) && expansion > 0, fn, ": expansion must be > 0, got ", expansion);
  MOECOMP_EXPECTS(k >= 0 && k <= static_cast<double>(experts), fn, ": k must be in [0, ", experts, "], got ", k);
  const double d = static_cast<double>(d_model), n = static_cast<double>(experts), h = static_cast<double>(router_hidden);
  dynamic_k_cost c;
  c.ffn = 2 * expansion * d * d;
  c.expert = c.ffn / n;
  c.router = h * (d + n);
  c.dynamic_k = k * c.expert + c.router;
  c.ratio = c.dynamic_k / c.ffn;
  return c;
}

}  // namespace gating
MOECOMP_NAMESPACE_END
