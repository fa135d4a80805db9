// The device FFN expert forward (<moecomp/cuda/moe/expert.cuh>) against a direct double loop, as the host's
// tests/test_moe_expert.cpp: every activation, gated or not, with or without biases, float, double, bfloat16 and
// half storage, strided tokens, more tokens than one chunk; the hidden activations feed W2; the stack forward
// equals the per-expert forward; repeated runs give the same bits; caller workspaces. And the device MoE layer
// forward against the host's (Mixtral-like, Qwen2-like with a gated shared expert, DeepSeek-V3 / V2, an
// expert_map; compiled, not yet run on hardware). Argument checks run before any device work and pass without a
// GPU. The rest runs under `ctest -L cuda`.
#include <doctest/doctest.h>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/cuda/core/device_buffer.cuh>
#include <moecomp/cuda/moe/expert.cuh>
#include <moecomp/cuda/moe/layer.cuh>

#include "device_test_support.cuh"
#include "layer_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace {

using moecomp::index_t;
namespace moe = moecomp::moe;
using moecomp_test::device_fixture;
using moecomp_test::dmatrix;
using moecomp_test::dvector;

/// An expert with host storage in W and its exact values in double (W's rounding of the draws).
template <class W>
struct expert_data {
  index_t d, d_ff;
  bool gated, biases;
  std::vector<double> w1, w3, w2, b1, b3, b2;
  std::vector<W> s1, s3, s2, c1, c3, c2;
  expert_data(index_t d_, index_t d_ff_, bool gated_, bool biases_, std::uint64_t seed)
      : d(d_), d_ff(d_ff_), gated(gated_), biases(biases_) {
    moecomp::random_generator rng(seed);
    auto draw = [&](std::vector<double>& v, std::vector<W>& s, index_t count, double scale) {
      for (index_t i = 0; i < count; ++i) {
        s.push_back(moecomp::convert_to<W>(scale * rng.normal<double>()));
        v.push_back(moecomp::convert_to<double>(s.back()));
      }
    };
    draw(w1, s1, d_ff * d, 1.0 / std::sqrt(double(d)));
    if (gated) draw(w3, s3, d_ff * d, 1.0 / std::sqrt(double(d)));
    draw(w2, s2, d * d_ff, 1.0 / std::sqrt(double(d_ff)));
    if (biases) {
      draw(b1, c1, d_ff, 0.5);
      if (gated) draw(b3, c3, d_ff, 0.5);
      draw(b2, c2, d, 0.5);
    }
  }
};

/// The expert's weights copied to the device, and its device view.
template <class W>
struct device_expert {
  moecomp::device_buffer<W> w1, w3, w2, b1, b3, b2;
  moe::ffn_expert_device_view<W> view;
  device_expert(const moecomp::cuda_context& ctx, const expert_data<W>& e)
      : w1(ctx, e.d_ff * e.d), w3(ctx, e.gated ? e.d_ff * e.d : 0), w2(ctx, e.d * e.d_ff),
        b1(ctx, e.biases ? e.d_ff : 0), b3(ctx, e.biases && e.gated ? e.d_ff : 0), b2(ctx, e.biases ? e.d : 0) {
    auto put = [&](const std::vector<W>& host, moecomp::device_buffer<W>& dev) {
      if (!host.empty())
        moecomp::copy_to_device(ctx, moecomp::make_vector_view(host.data(), static_cast<index_t>(host.size())), dev.view());
    };
    put(e.s1, w1);
    put(e.s3, w3);
    put(e.s2, w2);
    put(e.c1, b1);
    put(e.c3, b3);
    put(e.c2, b2);
    view.w1 = w1.view(e.d_ff, e.d);
    if (e.gated) view.w3 = w3.view(e.d_ff, e.d);
    view.w2 = w2.view(e.d, e.d_ff);
    if (e.biases) {
      view.b1 = b1.view();
      if (e.gated) view.b3 = b3.view();
      view.b2 = b2.view();
    }
  }
};

double activation_reference(moe::activation a, double v) {
  switch (a) {
    case moe::activation::silu: return v / (1 + std::exp(-v));
    case moe::activation::gelu: return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    case moe::activation::gelu_tanh:
      return 0.5 * v * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    case moe::activation::relu: return std::max(v, 0.0);
  }
  return v;
}

/// Hidden activations (d_ff) and output (d) of token x, directly, in double.
template <class W>
void direct(const expert_data<W>& e, moe::activation act, const double* x, std::vector<double>& h,
            std::vector<double>& y) {
  h.assign(static_cast<std::size_t>(e.d_ff), 0.0);
  y.assign(static_cast<std::size_t>(e.d), 0.0);
  for (index_t i = 0; i < e.d_ff; ++i) {
    const auto ii = static_cast<std::size_t>(i);
    double g = e.biases ? e.b1[ii] : 0.0, u = e.biases && e.gated ? e.b3[ii] : 0.0;
    for (index_t j = 0; j < e.d; ++j) {
      g += e.w1[static_cast<std::size_t>(i * e.d + j)] * x[j];
      if (e.gated) u += e.w3[static_cast<std::size_t>(i * e.d + j)] * x[j];
    }
    h[ii] = activation_reference(act, g) * (e.gated ? u : 1.0);
  }
  for (index_t o = 0; o < e.d; ++o) {
    double s = e.biases ? e.b2[static_cast<std::size_t>(o)] : 0.0;
    for (index_t i = 0; i < e.d_ff; ++i)
      s += e.w2[static_cast<std::size_t>(o * e.d_ff + i)] * h[static_cast<std::size_t>(i)];
    y[static_cast<std::size_t>(o)] = s;
  }
}

template <class A>
moecomp::host_matrix<A> tokens(index_t n, index_t d, std::uint64_t seed) {
  moecomp::host_matrix<A> x(n, d);
  moecomp::random_generator rng(seed);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < d; ++j) x(i, j) = static_cast<A>(rng.normal<double>());
  return x;
}

/// Largest |got - reference| over the rows `step` apart, relative to the largest |reference|.
template <class A, class W>
double relative_error(const expert_data<W>& e, moe::activation act, const moecomp::host_matrix<A>& x,
                      const moecomp::host_matrix<A>& got, bool hidden, index_t step) {
  double worst = 0, scale = 0;
  std::vector<double> xt(static_cast<std::size_t>(e.d)), h, y;
  for (index_t t = 0; t < x.rows(); t += step) {
    for (index_t j = 0; j < e.d; ++j) xt[static_cast<std::size_t>(j)] = static_cast<double>(x(t, j));
    direct(e, act, xt.data(), h, y);
    const auto& ref = hidden ? h : y;
    for (index_t o = 0; o < got.cols(); ++o) {
      worst = std::max(worst, std::abs(static_cast<double>(got(t, o)) - ref[static_cast<std::size_t>(o)]));
      scale = std::max(scale, std::abs(ref[static_cast<std::size_t>(o)]));
    }
  }
  return worst / scale;
}

constexpr moe::activation all_activations[] = {moe::activation::silu, moe::activation::gelu,
                                               moe::activation::gelu_tanh, moe::activation::relu};

}  // namespace

TEST_CASE("device ffn: argument checks run before any device work") {
  const moecomp::cuda_context ctx(nullptr);  // never used: the checks come first
  // Views over host storage posing as device memory: never dereferenced, the checks come first.
  float storage[512] = {0};
  moe::ffn_expert_device_view<float> e;
  e.w1 = dmatrix<const float>(storage, 12, 8);
  e.w2 = dmatrix<const float>(storage + 96, 8, 12);
  const auto x = dmatrix<const float>(storage + 192, 5, 8);
  const auto y = dmatrix<float>(storage + 240, 5, 8);
  const auto wrong = dmatrix<float>(storage + 240, 5, 7);
  const moe::ffn_params p;
  CHECK_THROWS_WITH_AS(moe::ffn_forward<float>(ctx, p, e, x, wrong), "ffn_forward: y must be 5 x 8, got 5 x 7",
                       moecomp::invalid_argument);
  auto bad = e;
  bad.w2 = dmatrix<const float>(storage + 96, 12, 8);
  CHECK_THROWS_WITH_AS(moe::ffn_forward<float>(ctx, p, bad, x, y),
                       "ffn_forward: w2 must be 8 x 12 (d x d_ff, nn.Linear layout), got 12 x 8",
                       moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(moe::ffn_forward<float>(ctx, p, e, x, dmatrix<float>(storage + 192, 5, 8)),
                       "ffn_forward: y must not overlap x", moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(moe::ffn_hidden<float>(ctx, p, e, x, dmatrix<float>(storage + 300, 5, 8)),
                       "ffn_hidden: hidden must be 5 x 12, got 5 x 8", moecomp::invalid_argument);
  const std::size_t need = moe::ffn_forward_workspace_size<float>(p, 5, 8, 12, false);
  CHECK(need > 0);  // the hidden chunk (float weights are used in place)
  CHECK_THROWS_WITH_AS(moe::ffn_forward<float>(ctx, p, e, x, y, dvector<std::byte>()),
                       doctest::Contains("ffn_forward: workspace must have at least"), moecomp::invalid_argument);
  CHECK(moe::ffn_forward_workspace_size<moecomp::bfloat16>(p, 5, 8, 12, true) >
        moe::ffn_forward_workspace_size<float>(p, 5, 8, 12, true));  // + the converted weights
  moe::ffn_params zero_tile;
  zero_tile.token_tile = 0;
  CHECK_THROWS_WITH_AS(moe::ffn_forward<float>(ctx, zero_tile, e, x, y),
                       "ffn_forward: params.token_tile must be >= 1, got 0", moecomp::invalid_argument);
}

TEST_CASE_TEMPLATE("device ffn_forward equals the direct computation for every activation, gated or not, with or "
                   "without biases",
                   W, double, float, moecomp::bfloat16, moecomp::half) {
  using A = moecomp::accumulator_t<W>;
  device_fixture f;
  const auto ctx = f.context();
  // The weights are W's own values, so only the accumulation's rounding remains (float for every storage but
  // double). cuBLAS's default math mode: no TF32.
  const double tol = std::is_same_v<W, double> ? 1e-12 : 2e-5;
  const index_t n = 300, d = 24, d_ff = 40, ld = 29;  // tokens at a row stride > d
  const auto x = tokens<A>(n, d, 1);
  moecomp::device_buffer<A> dx(ctx, n * ld), dy(ctx, n * d), dh(ctx, n * d_ff);
  moecomp::copy_to_device(ctx, x.const_view(), dx.view(n, d, ld));
  for (bool gated : {true, false})
    for (bool biases : {false, true}) {
      const expert_data<W> e(d, d_ff, gated, biases, 2);
      const device_expert<W> de(ctx, e);
      for (moe::activation act : all_activations) {
        CAPTURE(moe::to_string(act));
        CAPTURE(gated);
        CAPTURE(biases);
        moe::ffn_params p;
        p.act = act;
        moecomp::host_matrix<A> y(n, d), h(n, d_ff);
        moe::ffn_forward<W>(ctx, p, de.view, dx.view(n, d, ld), dy.view(n, d));
        moe::ffn_hidden<W>(ctx, p, de.view, dx.view(n, d, ld), dh.view(n, d_ff));
        moecomp::copy_to_host(ctx, dy.view(n, d).as_const(), y.view());
        moecomp::copy_to_host(ctx, dh.view(n, d_ff).as_const(), h.view());
        f.sync();
        CHECK(relative_error(e, act, x, y, false, 7) <= tol);
        CHECK(relative_error(e, act, x, h, true, 7) <= tol);
      }
    }
}

TEST_CASE("device ffn_forward: more tokens than one chunk, repeated runs bit-identical, a caller's workspace") {
  device_fixture f;
  const auto ctx = f.context();
  const index_t n = moe::ffn_device_chunk_tokens + 100, d = 8, d_ff = 16;
  const expert_data<moecomp::bfloat16> e(d, d_ff, true, true, 3);
  const device_expert<moecomp::bfloat16> de(ctx, e);
  const auto x = tokens<float>(n, d, 4);
  moecomp::device_buffer<float> dx(ctx, n * d), dy(ctx, n * d);
  moecomp::copy_to_device(ctx, x.const_view(), dx.view(n, d));
  const moe::ffn_params p;
  moecomp::host_matrix<float> y1(n, d), y2(n, d);
  moe::ffn_forward<moecomp::bfloat16>(ctx, p, de.view, dx.view(n, d), dy.view(n, d));
  moecomp::copy_to_host(ctx, dy.view(n, d).as_const(), y1.view());
  moecomp::device_buffer<std::byte> ws(
      ctx, static_cast<index_t>(moe::ffn_forward_workspace_size<moecomp::bfloat16>(p, n, d, d_ff, true)));
  moe::ffn_forward<moecomp::bfloat16>(ctx, p, de.view, dx.view(n, d), dy.view(n, d), ws.view());
  moecomp::copy_to_host(ctx, dy.view(n, d).as_const(), y2.view());
  f.sync();
  CHECK(relative_error(e, moe::activation::silu, x, y1, false, 97) <= 2e-5);
  // Rows of the second chunk too.
  CHECK(relative_error(e, moe::activation::silu, x, y1, false, n - 1) <= 2e-5);
  CHECK(std::equal(y1.data(), y1.data() + n * d, y2.data()));
}

TEST_CASE("device ffn_stack_forward: each expert's output, as the single-expert forward") {
  device_fixture f;
  const auto ctx = f.context();
  const index_t experts = 3, n = 50, d = 12, d_ff = 20;
  std::vector<expert_data<float>> host;
  std::vector<float> w1, w3, w2, b1, b3, b2;
  for (index_t a = 0; a < experts; ++a) {
    host.emplace_back(d, d_ff, true, true, 60 + static_cast<std::uint64_t>(a));
    const auto& e = host.back();
    w1.insert(w1.end(), e.s1.begin(), e.s1.end());
    w3.insert(w3.end(), e.s3.begin(), e.s3.end());
    w2.insert(w2.end(), e.s2.begin(), e.s2.end());
    b1.insert(b1.end(), e.c1.begin(), e.c1.end());
    b3.insert(b3.end(), e.c3.begin(), e.c3.end());
    b2.insert(b2.end(), e.c2.begin(), e.c2.end());
  }
  auto upload = [&](const std::vector<float>& v) {
    moecomp::device_buffer<float> b(ctx, static_cast<index_t>(v.size()));
    moecomp::copy_to_device(ctx, moecomp::make_vector_view(v.data(), static_cast<index_t>(v.size())), b.view());
    return b;
  };
  const auto d1 = upload(w1), d3 = upload(w3), d2 = upload(w2), e1 = upload(b1), e3 = upload(b3), e2 = upload(b2);
  moe::ffn_expert_stack_device_view<float> stack;
  stack.w1 = moecomp::make_device_matrix_stack_view(d1.data(), experts, d_ff, d);
  stack.w3 = moecomp::make_device_matrix_stack_view(d3.data(), experts, d_ff, d);
  stack.w2 = moecomp::make_device_matrix_stack_view(d2.data(), experts, d, d_ff);
  stack.b1 = e1.view(experts, d_ff);
  stack.b3 = e3.view(experts, d_ff);
  stack.b2 = e2.view(experts, d);
  const auto x = tokens<float>(n, d, 61);
  moecomp::device_buffer<float> dx(ctx, n * d), dys(ctx, experts * n * d), dy(ctx, n * d);
  moecomp::copy_to_device(ctx, x.const_view(), dx.view(n, d));
  moe::ffn_params p;
  p.act = moe::activation::gelu;
  moe::ffn_stack_forward<float>(ctx, p, stack, dx.view(n, d),
                                moecomp::make_device_matrix_stack_view(dys.data(), experts, n, d));
  moecomp::host_matrix<float> all(experts * n, d), one(n, d);
  moecomp::copy_to_host(ctx, dys.view(experts * n, d).as_const(), all.view());
  for (index_t a = 0; a < experts; ++a) {
    moe::ffn_forward<float>(ctx, p, stack.expert(a), dx.view(n, d), dy.view(n, d));
    moecomp::copy_to_host(ctx, dy.view(n, d).as_const(), one.view());
    f.sync();
    CHECK(std::equal(one.data(), one.data() + n * d, all.data() + a * n * d));
    CHECK(relative_error(host[static_cast<std::size_t>(a)], p.act, x, one, false, 1) <= 2e-5);
  }
}

// ---- The device MoE layer forward (<moecomp/cuda/moe/layer.cuh>) against the host's moe_layer_forward
// (layer_reference.cpp). Compiled, not yet run on hardware. Tokens and router rows are multiples of 1/8 and
// 1/16 small enough that x router^T is exact in float under any summation order: the host's and cuBLAS's
// logits are the same bits, so both sides route alike (ties included) and only the experts' GEMMs differ.

namespace {

/// A stack of `count` experts in W (host storage) and its device copy.
template <class W>
struct layer_stack {
  index_t count = 0, d = 0, d_ff = 0;
  std::vector<W> w1, w3, w2;
  moecomp::device_buffer<W> d1, d3, d2;
  layer_stack(const moecomp::cuda_context& ctx, index_t count_, index_t d_, index_t d_ff_, std::uint64_t seed)
      : count(count_), d(d_), d_ff(d_ff_) {
    moecomp::random_generator rng(seed);
    auto draw = [&](std::vector<W>& v, index_t n, double scale) {
      for (index_t i = 0; i < n; ++i) v.push_back(moecomp::convert_to<W>(scale * rng.normal<double>()));
    };
    draw(w1, count * d_ff * d, 1.0 / std::sqrt(double(d)));
    draw(w3, count * d_ff * d, 1.0 / std::sqrt(double(d)));
    draw(w2, count * d * d_ff, 1.0 / std::sqrt(double(d_ff)));
    auto put = [&](const std::vector<W>& v, moecomp::device_buffer<W>& b) {
      b = moecomp::device_buffer<W>(ctx, static_cast<index_t>(v.size()));
      moecomp::copy_to_device(ctx, moecomp::make_vector_view(v.data(), static_cast<index_t>(v.size())), b.view());
    };
    put(w1, d1);
    put(w3, d3);
    put(w2, d2);
  }
  moe::ffn_expert_stack_view<W> host() const {
    moe::ffn_expert_stack_view<W> s;
    s.w1 = moecomp::make_matrix_stack_view(w1.data(), count, d_ff, d);
    s.w3 = moecomp::make_matrix_stack_view(w3.data(), count, d_ff, d);
    s.w2 = moecomp::make_matrix_stack_view(w2.data(), count, d, d_ff);
    return s;
  }
  moe::ffn_expert_stack_device_view<W> device() const {
    moe::ffn_expert_stack_device_view<W> s;
    s.w1 = moecomp::make_device_matrix_stack_view(static_cast<const W*>(d1.data()), count, d_ff, d);
    s.w3 = moecomp::make_device_matrix_stack_view(static_cast<const W*>(d3.data()), count, d_ff, d);
    s.w2 = moecomp::make_device_matrix_stack_view(static_cast<const W*>(d2.data()), count, d, d_ff);
    return s;
  }
};

/// n x m float values k / denominator with k an integer in [-limit, limit] (exactly representable).
std::vector<float> grid_values(index_t n, index_t m, double denominator, int limit, std::uint64_t seed) {
  moecomp::random_generator rng(seed);
  std::vector<float> v(static_cast<std::size_t>(n * m));
  for (auto& x : v)
    x = static_cast<float>((static_cast<double>(rng.uniform_index(static_cast<std::uint64_t>(2 * limit + 1))) - limit) /
                           denominator);
  return v;
}

std::vector<float> device_copy_of(const moecomp::device_buffer<float>& b, index_t n, const device_fixture& f) {
  std::vector<float> out(static_cast<std::size_t>(n));
  moecomp::copy_to_host(f.context(), b.view().as_const().subview(0, n), moecomp::make_vector_view(out.data(), n));
  f.sync();
  return out;
}

struct layer_case {
  index_t tokens = 96, d = 32, d_ff = 48, experts = 8, stack = 8, shared = 0, shared_d_ff = 64;
  bool gate = false, bias = false;
  std::vector<std::int64_t> map;
  moe::moe_layer_params params;
};

/// Runs one layer on the host and on the device (both workspace overloads) and compares: y to 1e-5 relative
/// (to the larger of |y| and the output's RMS), the routing counts exactly, the two device runs bit for bit.
template <class W>
void check_layer(const layer_case& c, std::uint64_t seed) {
  device_fixture f;
  const auto ctx = f.context();
  const index_t t = c.tokens, d = c.d, e = c.experts;
  const auto x = grid_values(t, d, 8.0, 16, seed);
  const auto router = grid_values(e, d, 16.0, 8, seed + 1);
  const auto gate = grid_values(1, d, 64.0, 8, seed + 2);
  std::vector<float> bias;
  moecomp::random_generator rng(seed + 3);
  if (c.bias)
    for (index_t j = 0; j < e; ++j) bias.push_back(static_cast<float>(0.5 * rng.normal<double>()));
  const layer_stack<W> experts(ctx, c.stack, d, c.d_ff, seed + 4);
  const layer_stack<W> shared(ctx, std::max<index_t>(c.shared, 1), d, c.shared_d_ff, seed + 5);
  auto upload = [&](const auto& v) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    moecomp::device_buffer<T> b(ctx, std::max<index_t>(static_cast<index_t>(v.size()), 1));
    if (!v.empty()) moecomp::copy_to_device(ctx, moecomp::make_vector_view(v.data(), static_cast<index_t>(v.size())), b.view());
    return b;
  };
  const auto dx = upload(x), drouter = upload(router), dgate = upload(gate), dbias = upload(bias);
  const auto dmap = upload(c.map);
  moe::moe_layer_view<W> host;
  host.router = moecomp::make_matrix_view(router.data(), e, d);
  host.experts = experts.host();
  moe::moe_layer_device_view<W> dev;
  dev.router = moecomp::matrix_view<const float, moecomp::device_memory>(drouter.data(), e, d);
  dev.experts = experts.device();
  if (c.bias) {
    host.router_bias = moecomp::make_vector_view(bias.data(), e);
    dev.router_bias = moecomp::vector_view<const float, moecomp::device_memory>(dbias.data(), e);
  }
  if (!c.map.empty()) {
    host.expert_map = moecomp::make_vector_view(c.map.data(), e);
    dev.expert_map = moecomp::vector_view<const std::int64_t, moecomp::device_memory>(dmap.data(), e);
  }
  if (c.shared > 0) {
    host.shared = shared.host();
    dev.shared = shared.device();
    if (c.gate) {
      host.shared_gate = moecomp::make_matrix_view(gate.data(), 1, d);
      dev.shared_gate = moecomp::matrix_view<const float, moecomp::device_memory>(dgate.data(), 1, d);
    }
  }
  std::vector<float> y_host(static_cast<std::size_t>(t * d));
  const auto r_host = moecomp_test::host_moe_layer_forward<W>(c.params, host, moecomp::make_matrix_view(x.data(), t, d),
                                                              moecomp::make_matrix_view(y_host.data(), t, d));
  moecomp::device_buffer<float> dy1(ctx, t * d), dy2(ctx, t * d);
  const auto xv = moecomp::matrix_view<const float, moecomp::device_memory>(dx.data(), t, d);
  const auto r1 = moe::moe_layer_forward<W>(ctx, c.params, dev, xv, dy1.view(t, d));
  moecomp::device_buffer<std::byte> ws(ctx, static_cast<index_t>(moe::moe_layer_forward_workspace_size<W>(c.params, dev, t)));
  const auto r2 = moe::moe_layer_forward<W>(ctx, c.params, dev, xv, dy2.view(t, d), ws.view());
  const auto y1 = device_copy_of(dy1, t * d, f), y2 = device_copy_of(dy2, t * d, f);
  CHECK(r1.tokens == r_host.tokens);
  CHECK(r1.selected == r_host.selected);
  CHECK(r1.min_experts == r_host.min_experts);
  CHECK(r1.max_experts == r_host.max_experts);
  CHECK(r1.experts_per_token_mean == r_host.experts_per_token_mean);
  CHECK(r2.selected == r1.selected);
  double rms = 0;
  for (float v : y_host) rms += double(v) * double(v);
  rms = std::sqrt(rms / static_cast<double>(y_host.size()));
  REQUIRE(rms > 0);
  index_t bad = 0;
  for (std::size_t i = 0; i < y_host.size(); ++i)
    if (!(std::abs(double(y1[i]) - double(y_host[i])) <= 1e-5 * std::max(rms, std::abs(double(y_host[i]))))) ++bad;
  CHECK(bad == 0);
  CHECK(y1 == y2);  // the allocator and the caller's workspace: the same bits
}

}  // namespace

TEST_CASE("device moe_layer_forward: argument checks run before any device work") {
  const moecomp::cuda_context ctx(nullptr);
  float storage[512] = {0};
  moe::moe_layer_device_view<float> layer;
  layer.router = moecomp::matrix_view<const float, moecomp::device_memory>(storage, 4, 8);
  layer.experts.w1 = moecomp::make_device_matrix_stack_view(static_cast<const float*>(storage), 4, 6, 8);
  layer.experts.w2 = moecomp::make_device_matrix_stack_view(static_cast<const float*>(storage), 4, 8, 6);
  const auto x = moecomp::matrix_view<const float, moecomp::device_memory>(storage, 5, 8);
  moe::moe_layer_params p;
  CHECK_THROWS_WITH_AS(moe::moe_layer_forward<float>(ctx, p, layer, x,
                                                     moecomp::matrix_view<float, moecomp::device_memory>(storage + 64, 5, 7)),
                       "moe_layer_forward: y must be 5 x 8, got 5 x 7", moecomp::invalid_argument);
  const auto y = moecomp::matrix_view<float, moecomp::device_memory>(storage + 64, 5, 8);
  std::int64_t map_storage[4] = {0, 0, 0, 0};
  layer.expert_map = moecomp::vector_view<const std::int64_t, moecomp::device_memory>(map_storage, 3);
  CHECK_THROWS_WITH_AS(moe::moe_layer_forward<float>(ctx, p, layer, x, y),
                       "moe_layer_forward: expert_map must have 4 entries (router rows), got 3", moecomp::invalid_argument);
  layer.expert_map = {};
  layer.router_bias = moecomp::vector_view<const float, moecomp::device_memory>(storage, 4);  // top_k takes no bias
  CHECK_THROWS_AS(moe::moe_layer_forward<float>(ctx, p, layer, x, y), moecomp::invalid_argument);
  layer.router_bias = {};
  p.routing.top_k = 5;
  CHECK_THROWS_WITH_AS(moe::moe_layer_forward<float>(ctx, p, layer, x, y),
                       "moe_layer_forward: params.top_k must be in [1, 4] (the experts), got 5", moecomp::invalid_argument);
  p.routing.top_k = 2;
  layer.shared_gate = moecomp::matrix_view<const float, moecomp::device_memory>(storage, 1, 7);
  CHECK_THROWS_WITH_AS(moe::moe_layer_forward<float>(ctx, p, layer, x, y),
                       "moe_layer_forward: shared_gate must be empty or 1 x 8, got 1 x 7", moecomp::invalid_argument);
}

TEST_CASE("device moe_layer_forward equals the host's: Mixtral-like top-2, float and bfloat16 weights") {
  layer_case c;
  c.params.routing.top_k = 2;
  c.params.routing.renormalize = true;
  check_layer<float>(c, 100);
  check_layer<moecomp::bfloat16>(c, 110);
  c.tokens = 1;  // decode: one token
  check_layer<float>(c, 120);
}

TEST_CASE("device moe_layer_forward equals the host's: Qwen2-MoE-like top-4 with a gated shared expert") {
  layer_case c;
  c.experts = c.stack = 16;
  c.shared = 1;
  c.gate = true;
  c.params.routing.top_k = 4;
  c.params.routing.renormalize = false;
  check_layer<float>(c, 200);
  c.gate = false;  // two shared experts, no gate (DeepSeek's form)
  c.shared = 2;
  check_layer<float>(c, 210);
}

TEST_CASE("device moe_layer_forward equals the host's: DeepSeek-V3 with bias, groups and scaling") {
  layer_case c;
  c.experts = c.stack = 32;
  c.shared = 1;
  c.bias = true;
  c.params.routing.rule = moecomp::gating::routing_rule::deepseek_v3;
  c.params.routing.n_group = 4;
  c.params.routing.topk_group = 2;
  c.params.routing.top_k = 4;
  c.params.routing.renormalize = true;
  c.params.routing.routed_scaling_factor = 2.5;
  check_layer<float>(c, 300);
  c.bias = false;  // DeepSeek-V2's rule
  c.params.routing.rule = moecomp::gating::routing_rule::group_limited_greedy;
  c.params.routing.scores = moecomp::gating::score_function::softmax;
  c.params.routing.renormalize = false;
  check_layer<float>(c, 310);
}

TEST_CASE("device moe_layer_forward equals the host's: an HC-SMoE expert_map and a dynamic-k rule") {
  layer_case c;
  c.stack = 3;
  c.map = {0, 1, 1, 2, 0, 2, 1, 0};  // slots of one token in one group each add their weight
  c.params.routing.top_k = 3;
  c.params.routing.renormalize = true;
  check_layer<float>(c, 400);
  c.params.routing.rule = moecomp::gating::routing_rule::threshold;
  c.params.routing.scores = moecomp::gating::score_function::softmax;
  c.params.routing.tau = 0.3;
  c.params.routing.max_k = 4;
  check_layer<float>(c, 410);
}
