// The device FFN expert forward (<moecomp/cuda/moe/expert.cuh>) against a direct double loop, as the host's
// tests/test_moe_expert.cpp: every activation, gated or not, with or without biases, float, double, bfloat16 and
// half storage, strided tokens, more tokens than one chunk; the hidden activations feed W2; the stack forward
// equals the per-expert forward; repeated runs give the same bits; caller workspaces. Argument checks run before
// any device work and pass without a GPU. The rest runs under `ctest -L cuda`.
#include <doctest/doctest.h>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/cuda/core/device_buffer.cuh>
#include <moecomp/cuda/moe/expert.cuh>

#include "device_test_support.cuh"

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
