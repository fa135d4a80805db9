// FFN experts (<moecomp/moe/ffn.hpp>) and expert representations (<moecomp/moe/features.hpp>): the forward
// against a direct double loop for every activation, gated or not, with or without biases; bfloat16 and half
// storage within their precision; thread-count independence; permuting neurons leaves the output unchanged;
// the representations against their definitions; the argument checks. The numpy transcriptions of the
// representations are checked through the tool in tests/peers/test_expert_features_numpy.py.
#include <moecomp/moe/features.hpp>
#include <moecomp/moe/ffn.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

namespace {

using moecomp::index_t;
namespace moe = moecomp::moe;

/// An expert with owned storage in W, its weights drawn in double (scaled so activations are O(1)).
template <class W>
struct expert_data {
  index_t d, d_ff;
  bool gated, biases;
  std::vector<double> w1, w3, w2, b1, b3, b2;  // the exact values (W's rounding of the draws)
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
  moe::ffn_expert_view<W> view() const {
    moe::ffn_expert_view<W> v;
    v.w1 = moecomp::matrix_view<const W>(s1.data(), d_ff, d);
    if (gated) v.w3 = moecomp::matrix_view<const W>(s3.data(), d_ff, d);
    v.w2 = moecomp::matrix_view<const W>(s2.data(), d, d_ff);
    if (biases) {
      v.b1 = moecomp::vector_view<const W>(c1.data(), d_ff);
      if (gated) v.b3 = moecomp::vector_view<const W>(c3.data(), d_ff);
      v.b2 = moecomp::vector_view<const W>(c2.data(), d);
    }
    return v;
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

/// The expert's output on token x, directly, in double.
template <class W>
std::vector<double> direct(const expert_data<W>& e, moe::activation act, const double* x) {
  std::vector<double> h(static_cast<std::size_t>(e.d_ff)), y(static_cast<std::size_t>(e.d));
  for (index_t i = 0; i < e.d_ff; ++i) {
    double g = e.biases ? e.b1[static_cast<std::size_t>(i)] : 0.0, u = e.biases && e.gated ? e.b3[static_cast<std::size_t>(i)] : 0.0;
    for (index_t j = 0; j < e.d; ++j) {
      g += e.w1[static_cast<std::size_t>(i * e.d + j)] * x[j];
      if (e.gated) u += e.w3[static_cast<std::size_t>(i * e.d + j)] * x[j];
    }
    h[static_cast<std::size_t>(i)] = activation_reference(act, g) * (e.gated ? u : 1.0);
  }
  for (index_t o = 0; o < e.d; ++o) {
    double s = e.biases ? e.b2[static_cast<std::size_t>(o)] : 0.0;
    for (index_t i = 0; i < e.d_ff; ++i) s += e.w2[static_cast<std::size_t>(o * e.d_ff + i)] * h[static_cast<std::size_t>(i)];
    y[static_cast<std::size_t>(o)] = s;
  }
  return y;
}

template <class A>
moecomp::host_matrix<A> tokens(index_t n, index_t d, std::uint64_t seed) {
  moecomp::host_matrix<A> x(n, d);
  moecomp::random_generator rng(seed);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < d; ++j) x(i, j) = static_cast<A>(rng.normal<double>());
  return x;
}

constexpr moe::activation all_activations[] = {moe::activation::silu, moe::activation::gelu,
                                               moe::activation::gelu_tanh, moe::activation::relu};

}  // namespace

TEST_CASE("activations: the formulas at a few points") {
  using moecomp::detail::activate;
  CHECK(activate<double>(moe::activation::silu, 0.0) == 0.0);
  CHECK(activate<double>(moe::activation::silu, 2.0) == doctest::Approx(2.0 / (1 + std::exp(-2.0))).epsilon(1e-15));
  CHECK(activate<double>(moe::activation::gelu, 1.0) == doctest::Approx(0.8413447460685429).epsilon(1e-14));
  CHECK(activate<double>(moe::activation::gelu_tanh, 1.0) == doctest::Approx(0.8411919906082768).epsilon(1e-14));
  CHECK(activate<float>(moe::activation::relu, -3.0f) == 0.0f);
  CHECK(moe::parse_activation("gelu_tanh") == moe::activation::gelu_tanh);
  CHECK_THROWS_WITH_AS(moe::parse_activation("tanh"), "activation: expected silu, gelu, gelu_tanh or relu, got 'tanh'",
                       moecomp::invalid_argument);
}

TEST_CASE_TEMPLATE("ffn_forward equals the direct computation for every activation, gated or not, with or without biases",
                   W, double, float, moecomp::bfloat16, moecomp::half) {
  using A = moecomp::accumulator_t<W>;
  // The weights are W's own values, so only the accumulation's rounding remains: float accumulation for the
  // 16-bit types and float.
  const double tol = std::is_same_v<W, double> ? 1e-12 : 2e-5;
  const index_t n = 300, d = 24, d_ff = 40;  // 300 tokens: two tiles
  const auto x = tokens<A>(n, d, 1);
  for (bool gated : {true, false})
    for (bool biases : {false, true}) {
      const expert_data<W> e(d, d_ff, gated, biases, 2);
      for (moe::activation act : all_activations) {
        CAPTURE(moe::to_string(act));
        CAPTURE(gated);
        CAPTURE(biases);
        moe::ffn_params p;
        p.act = act;
        moecomp::host_matrix<A> y(n, d);
        moe::ffn_forward<W>(moecomp::host_context(2), p, e.view(), x.const_view(), y.view());
        double worst = 0, scale = 0;
        for (index_t t = 0; t < n; t += 7) {
          std::vector<double> xt(static_cast<std::size_t>(d));
          for (index_t j = 0; j < d; ++j) xt[static_cast<std::size_t>(j)] = static_cast<double>(x(t, j));
          const auto ref = direct(e, act, xt.data());
          for (index_t o = 0; o < d; ++o) {
            worst = std::max(worst, std::abs(static_cast<double>(y(t, o)) - ref[static_cast<std::size_t>(o)]));
            scale = std::max(scale, std::abs(ref[static_cast<std::size_t>(o)]));
          }
        }
        CHECK(worst <= tol * scale);
      }
    }
}

TEST_CASE("ffn_forward: the same bits at 1, 2 and 3 threads, and ffn_hidden feeds W2") {
  const index_t n = 700, d = 32, d_ff = 48;  // 700 tokens: three tiles, the last one partial
  const expert_data<float> e(d, d_ff, true, true, 3);
  const auto x = tokens<float>(n, d, 4);
  moe::ffn_params p;
  moecomp::host_matrix<float> y1(n, d), h1(n, d_ff), h(n, d_ff);
  moe::ffn_forward<float>(moecomp::host_context(1), p, e.view(), x.const_view(), y1.view());
  moe::ffn_hidden<float>(moecomp::host_context(1), p, e.view(), x.const_view(), h1.view());
  for (int threads : {2, 3}) {
    CAPTURE(threads);
    moecomp::host_matrix<float> y(n, d);
    moe::ffn_forward<float>(moecomp::host_context(threads), p, e.view(), x.const_view(), y.view());
    CHECK(std::equal(y1.data(), y1.data() + n * d, y.data()));
    moe::ffn_hidden<float>(moecomp::host_context(threads), p, e.view(), x.const_view(), h.view());
    CHECK(std::equal(h1.data(), h1.data() + n * d_ff, h.data()));
  }
  // 16-bit storage goes through the same tiles.
  const expert_data<moecomp::bfloat16> b(d, d_ff, true, false, 3);
  moecomp::host_matrix<float> b1(n, d), b3(n, d);
  moe::ffn_forward<moecomp::bfloat16>(moecomp::host_context(1), p, b.view(), x.const_view(), b1.view());
  moe::ffn_forward<moecomp::bfloat16>(moecomp::host_context(3), p, b.view(), x.const_view(), b3.view());
  CHECK(std::equal(b1.data(), b1.data() + n * d, b3.data()));
  // y = h W2^T + b2, by hand for a few tokens.
  for (index_t t : {index_t(0), index_t(350), index_t(699)})
    for (index_t o = 0; o < d; ++o) {
      double s = e.b2[static_cast<std::size_t>(o)];
      for (index_t i = 0; i < d_ff; ++i) s += e.w2[static_cast<std::size_t>(o * d_ff + i)] * static_cast<double>(h(t, i));
      CHECK(static_cast<double>(y1(t, o)) == doctest::Approx(s).epsilon(1e-5));
    }
}

TEST_CASE("ffn_forward: permuting the neurons (rows of W1, W3, b1, b3 with the columns of W2) keeps the output") {
  const index_t n = 64, d = 16, d_ff = 24;
  const expert_data<float> e(d, d_ff, true, true, 5);
  std::vector<index_t> perm(static_cast<std::size_t>(d_ff));
  std::iota(perm.begin(), perm.end(), index_t(0));
  moecomp::random_generator rng(6);
  rng.shuffle(perm.begin(), perm.end());
  expert_data<float> q = e;
  for (index_t i = 0; i < d_ff; ++i) {
    const auto src = static_cast<std::size_t>(perm[static_cast<std::size_t>(i)]);
    for (index_t j = 0; j < d; ++j) {
      q.s1[static_cast<std::size_t>(i * d + j)] = e.s1[src * static_cast<std::size_t>(d) + static_cast<std::size_t>(j)];
      q.s3[static_cast<std::size_t>(i * d + j)] = e.s3[src * static_cast<std::size_t>(d) + static_cast<std::size_t>(j)];
      q.s2[static_cast<std::size_t>(j * d_ff + i)] = e.s2[static_cast<std::size_t>(j * d_ff) + src];
    }
    q.c1[static_cast<std::size_t>(i)] = e.c1[src];
    q.c3[static_cast<std::size_t>(i)] = e.c3[src];
  }
  const auto x = tokens<float>(n, d, 7);
  moecomp::host_matrix<float> y(n, d), yq(n, d);
  moe::ffn_forward<float>(moecomp::host_context(1), moe::ffn_params{}, e.view(), x.const_view(), y.view());
  moe::ffn_forward<float>(moecomp::host_context(1), moe::ffn_params{}, q.view(), x.const_view(), yq.view());
  for (index_t t = 0; t < n; ++t)
    for (index_t o = 0; o < d; ++o) CHECK(yq(t, o) == doctest::Approx(y(t, o)).epsilon(1e-5));
}

TEST_CASE("expert representations: vectorised and surrogate weights, mean outputs and router logits by definition") {
  const index_t e = 3, d = 4, d_ff = 5, n = 10;
  std::vector<expert_data<double>> experts;
  for (index_t a = 0; a < e; ++a) experts.emplace_back(d, d_ff, true, false, 10 + static_cast<std::uint64_t>(a));
  std::vector<double> w1, w3, w2;
  for (const auto& x : experts) {
    w1.insert(w1.end(), x.s1.begin(), x.s1.end());
    w3.insert(w3.end(), x.s3.begin(), x.s3.end());
    w2.insert(w2.end(), x.s2.begin(), x.s2.end());
  }
  moe::ffn_expert_stack_view<double> stack{moecomp::make_matrix_stack_view(static_cast<const double*>(w1.data()), e, d_ff, d),
                                           moecomp::make_matrix_stack_view(static_cast<const double*>(w3.data()), e, d_ff, d),
                                           moecomp::make_matrix_stack_view(static_cast<const double*>(w2.data()), e, d, d_ff),
                                           {}, {}, {}};
  const moecomp::host_context ctx(2);
  moecomp::host_matrix<double> v(e, moe::vectorized_weights_size(stack));
  moe::vectorized_weights<double>(stack, v.view());
  CHECK(v.cols() == 3 * d_ff * d);
  // Every entry: W1 row-major, then W2 row-major, then W3 row-major, copied exactly.
  for (index_t a = 0; a < e; ++a) {
    const auto base = static_cast<std::size_t>(a * d_ff * d);
    for (index_t k = 0; k < d_ff * d; ++k) {
      const auto i = static_cast<std::size_t>(k);
      CHECK(v(a, k) == w1[base + i]);
      CHECK(v(a, d_ff * d + k) == w2[base + i]);
      CHECK(v(a, 2 * d_ff * d + k) == w3[base + i]);
    }
  }
  moecomp::host_matrix<double> s(e, d * d);
  moe::surrogate_weights<double>(ctx, stack, s.view());
  for (index_t a = 0; a < e; ++a)
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j) {
        double ref = 0;  // (W2 (W1 o W3))_ij
        for (index_t k = 0; k < d_ff; ++k)
          ref += w2[static_cast<std::size_t>(a * d * d_ff + i * d_ff + k)] * w1[static_cast<std::size_t>(a * d_ff * d + k * d + j)] *
                 w3[static_cast<std::size_t>(a * d_ff * d + k * d + j)];
        CHECK(s(a, i * d + j) == doctest::Approx(ref).epsilon(1e-13));
      }
  const auto x = tokens<double>(n, d, 20);
  moecomp::host_matrix<double> mean(e, d);
  moecomp::host_vector<double> outs(e * n * d);
  moe::expert_mean_outputs<double>(ctx, moe::ffn_params{}, stack, x.const_view(), mean.view());
  moe::ffn_stack_forward<double>(ctx, moe::ffn_params{}, stack, x.const_view(),
                                 moecomp::make_matrix_stack_view(outs.data(), e, n, d));
  for (index_t a = 0; a < e; ++a)
    for (index_t j = 0; j < d; ++j) {
      double m = 0;
      for (index_t t = 0; t < n; ++t) m += outs[(a * n + t) * d + j];
      CHECK(mean(a, j) == doctest::Approx(m / double(n)).epsilon(1e-13));
    }
  moecomp::host_matrix<double> norms(n, e);
  moe::expert_output_norms<double>(ctx, moe::ffn_params{}, stack, x.const_view(), norms.view());
  for (index_t a = 0; a < e; ++a)
    for (index_t t = 0; t < n; ++t) {
      double s = 0;
      for (index_t j = 0; j < d; ++j) s += outs[(a * n + t) * d + j] * outs[(a * n + t) * d + j];
      CHECK(norms(t, a) == doctest::Approx(std::sqrt(s)).epsilon(1e-13));
    }
  const auto router = tokens<double>(e, d, 21);
  const std::vector<double> bias = {0.5, -1.0, 2.0};
  moecomp::host_matrix<double> logits(n, e);
  moe::router_logits<double>(ctx, x.const_view(), router.const_view(), moecomp::make_vector_view(bias.data(), e), logits.view());
  for (index_t t = 0; t < n; ++t)
    for (index_t a = 0; a < e; ++a) {
      double ref = bias[static_cast<std::size_t>(a)];
      for (index_t j = 0; j < d; ++j) ref += x(t, j) * router(a, j);
      CHECK(logits(t, a) == doctest::Approx(ref).epsilon(1e-13));
    }
}

TEST_CASE_TEMPLATE("expert_weight_distances: the distances of the vectorised weights, from strided or gathered stacks", W,
                   float, moecomp::bfloat16) {
  // 18,200 entries a matrix: two chunks of the 2^14 the sums are split into, and a partial block of 64. 5 experts
  // take the one-pair-at-a-time path, 17 the path across pairs.
  const index_t d = 130, d_ff = 140;
  for (const index_t e : {index_t{5}, index_t{17}}) {
    CAPTURE(e);
    std::vector<expert_data<W>> experts;
    for (index_t a = 0; a < e; ++a) experts.emplace_back(d, d_ff, true, false, 40 + static_cast<std::uint64_t>(a));
    std::vector<W> w1, w3, w2;
    for (const auto& x : experts) {
      w1.insert(w1.end(), x.s1.begin(), x.s1.end());
      w3.insert(w3.end(), x.s3.begin(), x.s3.end());
      w2.insert(w2.end(), x.s2.begin(), x.s2.end());
    }
    const moe::ffn_expert_stack_view<W> strided{moecomp::make_matrix_stack_view(static_cast<const W*>(w1.data()), e, d_ff, d),
                                                moecomp::make_matrix_stack_view(static_cast<const W*>(w3.data()), e, d_ff, d),
                                                moecomp::make_matrix_stack_view(static_cast<const W*>(w2.data()), e, d, d_ff),
                                                {}, {}, {}};
    // The same experts, each matrix in its own allocation (as a checkpoint's tensors are), addressed by tables.
    std::vector<const W*> t1, t3, t2;
    for (const auto& x : experts) {
      t1.push_back(x.s1.data());
      t3.push_back(x.s3.data());
      t2.push_back(x.s2.data());
    }
    const moe::ffn_expert_stack_view<W> gathered{moecomp::matrix_stack_view<const W>(t1.data(), e, d_ff, d, d),
                                                 moecomp::matrix_stack_view<const W>(t3.data(), e, d_ff, d, d),
                                                 moecomp::matrix_stack_view<const W>(t2.data(), e, d, d_ff, d_ff),
                                                 {}, {}, {}};
    std::vector<double> a(static_cast<std::size_t>(e * (e - 1) / 2)), b(a.size()), one_thread(a.size());
    moe::expert_weight_distances<W>(moecomp::host_context(2), strided, moecomp::make_vector_view(a.data(), e * (e - 1) / 2));
    moe::expert_weight_distances<W>(moecomp::host_context(2), gathered, moecomp::make_vector_view(b.data(), e * (e - 1) / 2));
    moe::expert_weight_distances<W>(moecomp::host_context(1), gathered,
                                    moecomp::make_vector_view(one_thread.data(), e * (e - 1) / 2));
    CHECK(a == b);  // the same bits
    CHECK(b == one_thread);
    // The documented order, transcribed: per chunk of 2^14 entries of W1, W2, W3 (vectorized_weights' order), each
    // pair's squares summed in entry order from 0; the chunks' sums added in chunk order; the same bits.
    std::vector<double> ordered(a.size(), 0.0);
    {
      std::size_t pair = 0;
      for (index_t i = 0; i < e; ++i)
        for (index_t j = i + 1; j < e; ++j, ++pair) {
          const auto& x = experts[static_cast<std::size_t>(i)];
          const auto& y = experts[static_cast<std::size_t>(j)];
          for (const auto& [u, v] : {std::make_pair(&x.w1, &y.w1), std::make_pair(&x.w2, &y.w2), std::make_pair(&x.w3, &y.w3)}) {
            // Each square rounded on its own (stored first, so that no compiler fuses it into the sum as an FMA).
            std::vector<double> squares(u->size());
            for (std::size_t k = 0; k < u->size(); ++k) squares[k] = ((*u)[k] - (*v)[k]) * ((*u)[k] - (*v)[k]);
            for (std::size_t c0 = 0; c0 < u->size(); c0 += 16384) {
              double sum = 0;
              for (std::size_t k = c0; k < std::min(u->size(), c0 + 16384); ++k) sum += squares[k];
              ordered[pair] += sum;
            }
          }
          ordered[pair] = std::sqrt(ordered[pair]);
        }
    }
    CHECK(b == ordered);
    // By definition, in scipy's pdist order: ||w_i - w_j|| over W1, W3, W2's exact (stored) values.
    std::size_t pair = 0;
    for (index_t i = 0; i < e; ++i)
      for (index_t j = i + 1; j < e; ++j, ++pair) {
        double sum = 0;
        const auto& x = experts[static_cast<std::size_t>(i)];
        const auto& y = experts[static_cast<std::size_t>(j)];
        for (std::size_t k = 0; k < x.w1.size(); ++k)
          sum += (x.w1[k] - y.w1[k]) * (x.w1[k] - y.w1[k]) + (x.w3[k] - y.w3[k]) * (x.w3[k] - y.w3[k]) +
                 (x.w2[k] - y.w2[k]) * (x.w2[k] - y.w2[k]);
        CHECK(b[pair] == doctest::Approx(std::sqrt(sum)).epsilon(1e-13));
      }
  }
}

TEST_CASE("ffn and representations: bad input is refused with a message naming the argument") {
  const expert_data<float> e(8, 12, true, false, 30);
  auto v = e.view();
  const auto x = tokens<float>(5, 8, 31);
  moecomp::host_matrix<float> y(5, 8), wrong(5, 7);
  const moecomp::host_context ctx(1);
  CHECK_THROWS_WITH_AS(moe::ffn_forward<float>(ctx, moe::ffn_params{}, v, x.const_view(), wrong.view()),
                       "ffn_forward: y must be 5 x 8, got 5 x 7", moecomp::invalid_argument);
  auto bad_w2 = v;
  bad_w2.w2 = moecomp::matrix_view<const float>(e.s2.data(), 12, 8);
  CHECK_THROWS_WITH_AS(moe::ffn_forward<float>(ctx, moe::ffn_params{}, bad_w2, x.const_view(), y.view()),
                       "ffn_forward: w2 must be 8 x 12 (d x d_ff, nn.Linear layout), got 12 x 8", moecomp::invalid_argument);
  const auto x7 = tokens<float>(5, 7, 32);
  CHECK_THROWS_WITH_AS(moe::ffn_forward<float>(ctx, moe::ffn_params{}, v, x7.const_view(), y.view()),
                       "ffn_forward: x must have 8 columns (the experts' d), got 5 x 7", moecomp::invalid_argument);
  moe::ffn_params p;
  p.token_tile = 0;
  CHECK_THROWS_WITH_AS(moe::ffn_forward<float>(ctx, p, v, x.const_view(), y.view()),
                       "ffn_forward: params.token_tile must be >= 1, got 0", moecomp::invalid_argument);
  moe::ffn_expert_stack_view<float> stack{moecomp::make_matrix_stack_view(e.s1.data(), 1, 12, 8), {},
                                          moecomp::make_matrix_stack_view(e.s2.data(), 1, 8, 12), {}, {}, {}};
  moecomp::host_matrix<float> s_wrong(1, 60);
  CHECK_THROWS_WITH_AS(moe::surrogate_weights<float>(ctx, stack, s_wrong.view()),
                       "surrogate_weights: out must be 1 x 64 (experts x d^2), got 1 x 60", moecomp::invalid_argument);
}

TEST_CASE_TEMPLATE("surrogate weights on a hand-computed example: W2 (W1 o W3), and W2 W1 without W3", W, float, double,
                   moecomp::bfloat16, moecomp::half) {
  using A = moecomp::accumulator_t<W>;
  // Small integers: exact in every storage type and every accumulation.
  //   W1 = [1 2; 3 4], W3 = [5 6; 7 8], W1 o W3 = [5 12; 21 32], W2 = [1 0; 2 1]
  //   W2 (W1 o W3) = [5 12; 2*5+21 2*12+32] = [5 12; 31 56];   W2 W1 = [1 2; 2+3 4+4] = [1 2; 5 8].
  auto stored = [](std::initializer_list<double> v) {
    std::vector<W> out;
    for (double x : v) out.push_back(moecomp::convert_to<W>(x));
    return out;
  };
  const auto w1 = stored({1, 2, 3, 4}), w3 = stored({5, 6, 7, 8}), w2 = stored({1, 0, 2, 1});
  moe::ffn_expert_stack_view<W> gated{moecomp::make_matrix_stack_view(w1.data(), 1, 2, 2),
                                      moecomp::make_matrix_stack_view(w3.data(), 1, 2, 2),
                                      moecomp::make_matrix_stack_view(w2.data(), 1, 2, 2), {}, {}, {}};
  moecomp::host_matrix<A> s(1, 4);
  moe::surrogate_weights<W>(moecomp::host_context(1), gated, s.view());
  CHECK(std::vector<A>(s.data(), s.data() + 4) == std::vector<A>{5, 12, 31, 56});
  auto plain = gated;
  plain.w3 = {};
  moe::surrogate_weights<W>(moecomp::host_context(1), plain, s.view());
  CHECK(std::vector<A>(s.data(), s.data() + 4) == std::vector<A>{1, 2, 5, 8});
}

TEST_CASE("surrogate weights ignore the order of the neurons and do not depend on the thread count") {
  const index_t e = 5, d = 6, d_ff = 9;
  std::vector<float> w1, w3, w2;
  moecomp::random_generator rng(40);
  for (index_t i = 0; i < e * d_ff * d; ++i) {
    w1.push_back(rng.normal<float>());
    w3.push_back(rng.normal<float>());
    w2.push_back(rng.normal<float>());
  }
  auto stack_of = [&](const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c) {
    return moe::ffn_expert_stack_view<float>{moecomp::make_matrix_stack_view(a.data(), e, d_ff, d),
                                             moecomp::make_matrix_stack_view(b.data(), e, d_ff, d),
                                             moecomp::make_matrix_stack_view(c.data(), e, d, d_ff), {}, {}, {}};
  };
  moecomp::host_matrix<float> s1(e, d * d), s3(e, d * d), sp(e, d * d);
  moe::surrogate_weights<float>(moecomp::host_context(1), stack_of(w1, w3, w2), s1.view());
  moe::surrogate_weights<float>(moecomp::host_context(3), stack_of(w1, w3, w2), s3.view());
  CHECK(std::equal(s1.data(), s1.data() + e * d * d, s3.data()));
  // Reverse every expert's neurons: rows of W1 and W3, columns of W2.
  std::vector<float> p1 = w1, p3 = w3, p2 = w2;
  for (index_t a = 0; a < e; ++a)
    for (index_t i = 0; i < d_ff; ++i)
      for (index_t j = 0; j < d; ++j) {
        const auto to = static_cast<std::size_t>((a * d_ff + i) * d + j);
        const auto from = static_cast<std::size_t>((a * d_ff + (d_ff - 1 - i)) * d + j);
        p1[to] = w1[from];
        p3[to] = w3[from];
        p2[static_cast<std::size_t>((a * d + j) * d_ff + i)] = w2[static_cast<std::size_t>((a * d + j) * d_ff + (d_ff - 1 - i))];
      }
  moe::surrogate_weights<float>(moecomp::host_context(2), stack_of(p1, p3, p2), sp.view());
  for (index_t a = 0; a < e; ++a)
    for (index_t k = 0; k < d * d; ++k) CHECK(sp(a, k) == doctest::Approx(s1(a, k)).epsilon(1e-5));
}

TEST_CASE("ffn stacks and representations: more bad input, each message naming the argument") {
  const expert_data<float> e(8, 12, true, false, 50);
  const auto x = tokens<float>(5, 8, 51);
  const moecomp::host_context ctx(1);
  const moe::ffn_params p;
  // A stack of two experts whose W2 holds one.
  std::vector<float> w1(2 * 12 * 8, 0.5f), w2(12 * 8, 0.5f);
  moe::ffn_expert_stack_view<float> stack{moecomp::make_matrix_stack_view(static_cast<const float*>(w1.data()), 2, 12, 8),
                                          {},
                                          moecomp::make_matrix_stack_view(static_cast<const float*>(w2.data()), 1, 8, 12),
                                          {}, {}, {}};
  moecomp::host_matrix<float> mean(2, 8);
  CHECK_THROWS_WITH_AS(moe::expert_mean_outputs<float>(ctx, p, stack, x.const_view(), mean.view()),
                       "expert_mean_outputs: w2 must hold 2 experts like w1, got 1", moecomp::invalid_argument);
  // b3 without w3.
  auto plain = e.view();
  plain.w3 = {};
  const std::vector<float> b3(12, 1.0f);
  plain.b3 = moecomp::make_vector_view(b3.data(), 12);
  moecomp::host_matrix<float> y(5, 8);
  CHECK_THROWS_WITH_AS(moe::ffn_forward<float>(ctx, p, plain, x.const_view(), y.view()),
                       "ffn_forward: b3 must be empty or have 12 entries (d_ff) with w3, got 12 without w3",
                       moecomp::invalid_argument);
  // The output may not overlap the tokens.
  moecomp::host_matrix<float> xy = tokens<float>(5, 8, 52);
  CHECK_THROWS_WITH_AS(moe::ffn_forward<float>(ctx, p, e.view(), xy.const_view(), xy.view()),
                       "ffn_forward: y must not overlap x", moecomp::invalid_argument);
  // Mean outputs need tokens; router bias one entry per expert.
  const moecomp::host_matrix<float> none(0, 8);
  const std::vector<float> w2_two(2 * 8 * 12, 0.5f);
  stack.w2 = moecomp::make_matrix_stack_view(w2_two.data(), 2, 8, 12);
  CHECK_THROWS_WITH_AS(moe::expert_mean_outputs<float>(ctx, p, stack, none.const_view(), mean.view()),
                       "expert_mean_outputs: x must hold at least one token, got 0", moecomp::invalid_argument);
  const auto router = tokens<float>(3, 8, 53);
  const std::vector<float> bias(2, 0.0f);
  moecomp::host_matrix<float> logits(5, 3);
  CHECK_THROWS_WITH_AS(moe::router_logits<float>(ctx, x.const_view(), router.const_view(),
                                                 moecomp::make_vector_view(bias.data(), 2), logits.view()),
                       "router_logits: bias must be empty or have 3 entries (experts), got 2", moecomp::invalid_argument);
  moecomp::host_matrix<float> v_wrong(2, 10);
  CHECK_THROWS_WITH_AS(moe::vectorized_weights<float>(stack, v_wrong.view()),
                       "vectorized_weights: out must be 2 x 192 (experts x (2 or 3) d_ff d), got 2 x 10",
                       moecomp::invalid_argument);
}
