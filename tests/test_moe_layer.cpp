// The MoE layer forward (<moecomp/moe/layer.hpp>) against a dense reference that runs every expert on every
// token and weights it by the dense routing weights: Mixtral-style top-2, DeepSeek-V3 with its bias and a
// shared expert, Qwen2-MoE-style top-4 with a sigmoid-gated shared expert, a dynamic rule, and HC-SMoE's
// merged layer (the router kept, old ids mapped to merged experts, two slots in one group adding up), in
// float and with bfloat16 weights.
#include <moecomp/moe/layer.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

using moecomp::index_t;
namespace moe = moecomp::moe;
namespace gating = moecomp::gating;

template <class W>
struct stack_data {
  index_t e, d, d_ff;
  std::vector<W> w1, w3, w2;
  stack_data(index_t e_, index_t d_, index_t d_ff_, std::uint64_t seed) : e(e_), d(d_), d_ff(d_ff_) {
    moecomp::random_generator rng(seed);
    auto fill = [&](std::vector<W>& v, index_t n, double scale) {
      for (index_t i = 0; i < n; ++i) v.push_back(moecomp::convert_to<W>(scale * rng.normal<double>()));
    };
    fill(w1, e * d_ff * d, 1 / std::sqrt(double(d)));
    fill(w3, e * d_ff * d, 1 / std::sqrt(double(d)));
    fill(w2, e * d * d_ff, 1 / std::sqrt(double(d_ff)));
  }
  moe::ffn_expert_stack_view<W> view() const {
    return {moecomp::make_matrix_stack_view(w1.data(), e, d_ff, d), moecomp::make_matrix_stack_view(w3.data(), e, d_ff, d),
            moecomp::make_matrix_stack_view(w2.data(), e, d, d_ff), {}, {}, {}};
  }
};

/// The dense reference: route_dense weights times every (mapped) expert's output, plus the shared experts.
template <class W>
std::vector<float> dense_reference(const moe::moe_layer_params& p, const moe::moe_layer_view<W>& layer,
                                   const moecomp::host_matrix<float>& x) {
  const moecomp::host_context ctx(1);
  const index_t t = x.rows(), d = x.cols(), e = layer.router.rows();
  moecomp::host_matrix<float> logits(t, e), w(t, e), out(t, d);
  moe::router_logits<float>(ctx, x.const_view(), layer.router, {}, logits.view());
  (void)gating::route_dense<float>(ctx, p.routing, logits.const_view(), layer.router_bias, w.view());
  std::vector<float> y(static_cast<std::size_t>(t * d), 0.0f);
  for (index_t j = 0; j < e; ++j) {
    const index_t target = layer.expert_map.empty() ? j : layer.expert_map[j];
    moe::ffn_forward<W>(ctx, p.ffn, layer.experts.expert(target), x.const_view(), out.view());
    for (index_t i = 0; i < t; ++i)
      for (index_t c = 0; c < d; ++c) y[static_cast<std::size_t>(i * d + c)] += w(i, j) * out(i, c);
  }
  for (index_t s = 0; s < (layer.shared.w1.empty() ? 0 : layer.shared.experts()); ++s) {
    moe::ffn_forward<W>(ctx, p.ffn, layer.shared.expert(s), x.const_view(), out.view());
    for (index_t i = 0; i < t; ++i) {
      double g = 1;
      if (!layer.shared_gate.empty()) {
        double z = 0;
        for (index_t c = 0; c < d; ++c) z += double(x(i, c)) * double(layer.shared_gate(0, c));
        g = 1 / (1 + std::exp(-z));
      }
      for (index_t c = 0; c < d; ++c) y[static_cast<std::size_t>(i * d + c)] += float(g) * out(i, c);
    }
  }
  return y;
}

template <class W>
void check_layer(const moe::moe_layer_params& p, const moe::moe_layer_view<W>& layer, const moecomp::host_matrix<float>& x) {
  moecomp::host_matrix<float> y(x.rows(), x.cols());
  const auto r = moe::moe_layer_forward<W>(moecomp::host_context(2), p, layer, x.const_view(), y.view());
  CHECK(r.tokens == x.rows());
  const auto ref = dense_reference<W>(p, layer, x);
  double worst = 0, scale = 0;
  for (index_t i = 0; i < x.rows(); ++i)
    for (index_t c = 0; c < x.cols(); ++c) {
      worst = std::max(worst, std::abs(double(y(i, c)) - double(ref[static_cast<std::size_t>(i * x.cols() + c)])));
      scale = std::max(scale, std::abs(double(ref[static_cast<std::size_t>(i * x.cols() + c)])));
    }
  CHECK(worst <= 1e-5 * scale);
}

}  // namespace

TEST_CASE_TEMPLATE("moe_layer_forward equals the dense reference for the published layer shapes", W, float,
                   moecomp::bfloat16) {
  const index_t e = 8, d = 24, d_ff = 32, t = 200;
  const stack_data<W> experts(e, d, d_ff, 1), shared(1, d, 2 * d_ff, 2);
  moecomp::host_matrix<float> x(t, d), router(e, d), gate(1, d);
  moecomp::random_generator rng(3);
  rng.fill_normal(x.view());
  rng.fill_normal(router.view());
  rng.fill_normal(gate.view());
  moe::moe_layer_view<W> layer{router.const_view(), {}, experts.view(), {}, {}, {}};
  moe::moe_layer_params p;
  SUBCASE("Mixtral: softmax, top-2, renormalised") {
    p.routing.top_k = 2;
    p.routing.renormalize = true;
    check_layer(p, layer, x);
  }
  SUBCASE("Qwen2-MoE: top-4 without renormalisation, a sigmoid-gated shared expert") {
    p.routing.top_k = 4;
    layer.shared = shared.view();
    layer.shared_gate = gate.const_view();
    check_layer(p, layer, x);
  }
  SUBCASE("DeepSeek-V3: sigmoid, a selection bias, groups, scaling, an ungated shared expert") {
    p.routing.rule = gating::routing_rule::deepseek_v3;
    p.routing.n_group = 4;
    p.routing.topk_group = 2;
    p.routing.top_k = 2;
    p.routing.renormalize = true;
    p.routing.routed_scaling_factor = 2.5;
    const std::vector<float> bias = {0.1f, -0.2f, 0.0f, 0.3f, -0.1f, 0.2f, 0.0f, 0.05f};
    layer.router_bias = moecomp::make_vector_view(bias.data(), e);
    layer.shared = shared.view();
    check_layer(p, layer, x);
  }
  SUBCASE("SADMoE dynamic-k on softmax scores") {
    p.routing.rule = gating::routing_rule::threshold;
    p.routing.scores = gating::score_function::softmax;
    p.routing.tau = 0.4;
    check_layer(p, layer, x);
  }
  SUBCASE("HC-SMoE: the router kept, eight ids mapped to three merged experts") {
    const stack_data<W> merged(3, d, d_ff, 4);
    const std::vector<std::int64_t> map = {0, 0, 1, 2, 1, 2, 0, 1};
    layer.experts = merged.view();
    layer.expert_map = moecomp::make_vector_view(map.data(), e);
    p.routing.top_k = 2;
    p.routing.renormalize = true;
    check_layer(p, layer, x);
  }
}

TEST_CASE("moe_layer_forward: bad input is refused with a message naming the argument") {
  const stack_data<float> experts(4, 8, 16, 5);
  moecomp::host_matrix<float> x(10, 8), y(10, 8), router(5, 8);
  moe::moe_layer_view<float> layer{router.const_view(), {}, experts.view(), {}, {}, {}};
  CHECK_THROWS_WITH_AS(moe::moe_layer_forward<float>(moecomp::host_context(1), moe::moe_layer_params{}, layer,
                                                     x.const_view(), y.view()),
                       "moe_layer_forward: experts must hold one expert per router row (5) without expert_map, got 4",
                       moecomp::invalid_argument);
  const std::vector<std::int64_t> map = {0, 1, 2, 3, 4};
  layer.expert_map = moecomp::make_vector_view(map.data(), 5);
  CHECK_THROWS_WITH_AS(moe::moe_layer_forward<float>(moecomp::host_context(1), moe::moe_layer_params{}, layer,
                                                     x.const_view(), y.view()),
                       "moe_layer_forward: expert_map entries must be in [0, 4) (the stack's experts), got 4 at 4",
                       moecomp::invalid_argument);
}
