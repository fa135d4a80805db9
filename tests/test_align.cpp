// Neuron alignment (<moecomp/align/align.hpp>): the design rows; planted permutations recovered exactly by each
// objective (weights, inner, correlation), from float, double and bf16 storage, to one reference or for a whole
// stack; permuting neurons keeps the expert's function; the reported costs against their definitions;
// thread-count independence; the argument checks; pearson_correlation against its definition; the per-element
// rules the device kernels share (align/detail/align_rules.hpp, core/detail/correlation_rules.hpp). The peer
// (numpy + scipy.optimize.linear_sum_assignment) is tests/peers/test_align_scipy.py.
#include <moecomp/align/align.hpp>
#include <moecomp/moe/ffn.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <cmath>
#include <numeric>
#include <vector>

namespace {

using moecomp_test::random_permutation;

using moecomp::host_context;
using moecomp::host_matrix;
using moecomp::host_vector;
using moecomp::index_t;
namespace align = moecomp::align;
namespace moe = moecomp::moe;

constexpr index_t d = 24, d_ff = 40;

/// An expert with storage W, optionally gated and with biases.
template <class W>
struct expert {
  host_matrix<W> w1, w3, w2;
  host_vector<W> b1, b3, b2;
  moe::ffn_expert_view<W> view() const {
    return {w1.view(), w3.view(), w2.view(), b1.view(), b3.view(), b2.view()};
  }
  moe::ffn_expert_mutable_view<W> mutable_view() {
    return {w1.view(), w3.view(), w2.view(), b1.view(), b3.view(), b2.view()};
  }
};

template <class W>
expert<W> random_expert(std::uint64_t seed, bool gated = true, bool biases = false) {
  moecomp::random_generator rng(seed);
  expert<W> e{host_matrix<W>(d_ff, d), gated ? host_matrix<W>(d_ff, d) : host_matrix<W>(),
              host_matrix<W>(d, d_ff), host_vector<W>(biases ? d_ff : 0), host_vector<W>(biases && gated ? d_ff : 0),
              host_vector<W>(biases ? d : 0)};
  const auto fill = [&](W* data, index_t count, double scale) {
    for (index_t i = 0; i < count; ++i) data[i] = moecomp::convert_to<W>(scale * rng.normal<double>());
  };
  fill(e.w1.data(), d_ff * d, 1.0 / std::sqrt(double(d)));
  if (gated) fill(e.w3.data(), d_ff * d, 1.0 / std::sqrt(double(d)));
  fill(e.w2.data(), d * d_ff, 1.0 / std::sqrt(double(d_ff)));
  fill(e.b1.data(), e.b1.size(), 0.1);
  fill(e.b3.data(), e.b3.size(), 0.1);
  fill(e.b2.data(), e.b2.size(), 0.1);
  return e;
}

std::vector<index_t> inverse_of(const std::vector<index_t>& p) {
  std::vector<index_t> inverse(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) inverse[static_cast<std::size_t>(p[i])] = static_cast<index_t>(i);
  return inverse;
}

moecomp::vector_view<const index_t> view_of(const std::vector<index_t>& p) {
  return moecomp::make_vector_view<const index_t>(p.data(), static_cast<index_t>(p.size()));
}

/// expert e with neuron i replaced by neuron q[i] (permute_neurons' convention), written out by hand, plus
/// Gaussian noise of size `noise` on every weight.
template <class W>
expert<W> shuffled(const expert<W>& e, const std::vector<index_t>& q, double noise, std::uint64_t seed) {
  moecomp::random_generator rng(seed);
  expert<W> out = e;
  const auto jitter = [&](W w) { return moecomp::convert_to<W>(static_cast<float>(w) + noise * rng.normal<double>()); };
  for (index_t i = 0; i < d_ff; ++i) {
    const index_t s = q[static_cast<std::size_t>(i)];
    for (index_t j = 0; j < d; ++j) {
      out.w1(i, j) = jitter(e.w1(s, j));
      if (e.w3.rows() != 0) out.w3(i, j) = jitter(e.w3(s, j));
      out.w2(j, i) = jitter(e.w2(j, s));
    }
    if (e.b1.size() != 0) out.b1[i] = jitter(e.b1[s]);
    if (e.b3.size() != 0) out.b3[i] = jitter(e.b3[s]);
  }
  return out;
}

host_matrix<float> tokens(index_t n, std::uint64_t seed) {
  moecomp::random_generator rng(seed);
  host_matrix<float> x(n, d);
  for (index_t i = 0; i < n * d; ++i) x.data()[i] = static_cast<float>(rng.normal<double>());
  return x;
}

template <class W>
std::vector<index_t> aligned(const align::align_params& params, const expert<W>& reference, const expert<W>& other,
                             const host_matrix<float>& x, align::align_result* result = nullptr) {
  std::vector<index_t> p(d_ff, -1);
  const align::align_result r = align::align_experts<W>(host_context(2), params, reference.view(), other.view(), x.view(),
                                                        moecomp::make_vector_view(p.data(), d_ff));
  CHECK(r.ok());
  if (result) *result = r;
  return p;
}

align::align_params with_objective(align::align_objective objective) {
  align::align_params params;
  params.objective = objective;
  return params;
}

}  // namespace

TEST_CASE("the design matrix is [W1 | b1 | W3 | b3 | W2^T], one row per neuron") {
  const expert<float> e = random_expert<float>(1, /*gated=*/true, /*biases=*/true);
  CHECK(align::design_width(e.view()) == 3 * d + 2);
  host_matrix<float> rows(d_ff, 3 * d + 2);
  align::design_matrix<float>(host_context(2), e.view(), rows.view());
  for (index_t i : {index_t(0), index_t(17), d_ff - 1}) {
    CAPTURE(i);
    CHECK(rows(i, 0) == e.w1(i, 0));
    CHECK(rows(i, d - 1) == e.w1(i, d - 1));
    CHECK(rows(i, d) == e.b1[i]);
    CHECK(rows(i, d + 1) == e.w3(i, 0));
    CHECK(rows(i, 2 * d + 1) == e.b3[i]);
    CHECK(rows(i, 2 * d + 2) == e.w2(0, i));
    CHECK(rows(i, 3 * d + 1) == e.w2(d - 1, i));
  }
  const expert<moecomp::bfloat16> plain = random_expert<moecomp::bfloat16>(2, /*gated=*/false);
  CHECK(align::design_width(plain.view()) == 2 * d);
  host_matrix<float> plain_rows(d_ff, 2 * d);
  align::design_matrix<moecomp::bfloat16>(host_context(1), plain.view(), plain_rows.view());
  CHECK(plain_rows(5, 3) == static_cast<float>(plain.w1(5, 3)));
  CHECK(plain_rows(5, d + 7) == static_cast<float>(plain.w2(7, 5)));
}

TEST_CASE("a planted permutation is recovered exactly by every objective") {
  // other = the reference with its neurons shuffled by q and noised: other's neuron i is the reference's q[i],
  // so the reference's neuron r is other's neuron q^-1[r], and permute_neurons(other, p) undoes the shuffle.
  const expert<float> reference = random_expert<float>(3, true, true);
  const std::vector<index_t> q = random_permutation(d_ff, 4);
  const expert<float> other = shuffled(reference, q, 0.02, 5);
  const host_matrix<float> x = tokens(256, 6);
  for (align::align_objective objective :
       {align::align_objective::weights, align::align_objective::inner, align::align_objective::correlation}) {
    CAPTURE(align::to_string(objective));
    CHECK(aligned(with_objective(objective), reference, other, x) == inverse_of(q));
  }
}

TEST_CASE("a planted permutation is recovered from bf16 and double storage, and plain (not gated) experts") {
  const std::vector<index_t> q = random_permutation(d_ff, 7);
  const host_matrix<float> x = tokens(256, 8);
  const expert<moecomp::bfloat16> ref16 = random_expert<moecomp::bfloat16>(9);
  CHECK(aligned(with_objective(align::align_objective::weights), ref16, shuffled(ref16, q, 0.02, 10), x) == inverse_of(q));
  CHECK(aligned(with_objective(align::align_objective::correlation), ref16, shuffled(ref16, q, 0.02, 10), x) ==
        inverse_of(q));
  const expert<float> plain = random_expert<float>(11, /*gated=*/false, /*biases=*/true);
  CHECK(aligned(with_objective(align::align_objective::inner), plain, shuffled(plain, q, 0.02, 12), x) == inverse_of(q));

  const expert<double> ref64 = random_expert<double>(13);
  const expert<double> other64 = shuffled(ref64, q, 0.02, 14);
  std::vector<index_t> p(d_ff);
  host_matrix<double> x64(256, d);
  for (index_t i = 0; i < 256 * d; ++i) x64.data()[i] = static_cast<double>(x.data()[i]);
  const align::align_result r = align::align_experts<double>(host_context(2), with_objective(align::align_objective::correlation),
                                                             ref64.view(), other64.view(), x64.view(),
                                                             moecomp::make_vector_view(p.data(), d_ff));
  CHECK(r.ok());
  CHECK(p == inverse_of(q));
  CHECK(r.cost > 0.95 * d_ff);  // nearly perfectly correlated neurons
  CHECK(r.cost <= d_ff + 1e-9);
}

TEST_CASE("permuting neurons keeps the function: hidden activations move with the neurons, outputs stay") {
  const expert<float> e = random_expert<float>(15, true, true);
  const std::vector<index_t> q = random_permutation(d_ff, 16);
  expert<float> out = random_expert<float>(99, true, true);
  align::permute_neurons<float>(host_context(2), e.view(), view_of(q), out.mutable_view());
  const host_matrix<float> x = tokens(300, 17);  // past one token tile: both forward paths
  host_matrix<float> h(300, d_ff), moved(300, d_ff), hp(300, d_ff), y(300, d), yp(300, d);
  moe::ffn_hidden<float>(host_context(2), {}, e.view(), x.view(), h.view());
  moe::ffn_hidden<float>(host_context(2), {}, out.view(), x.view(), hp.view());
  for (index_t t = 0; t < 300; ++t)
    for (index_t i = 0; i < d_ff; ++i) moved(t, i) = h(t, q[static_cast<std::size_t>(i)]);
  // Not bit for bit: the GEMM kernel sums a neuron's dot product in another order when it lands in the last,
  // narrower block of columns (here neurons 32..39), and W2's sum over neurons runs in another order.
  CHECK(moecomp_test::max_relative_error(hp, moved) < 1e-6);
  moe::ffn_forward<float>(host_context(2), {}, e.view(), x.view(), y.view());
  moe::ffn_forward<float>(host_context(2), {}, out.view(), x.view(), yp.view());
  CHECK(moecomp_test::max_relative_error(yp, y) < 1e-6);
}

TEST_CASE("with exact arithmetic (relu, small dyadic weights and tokens) the permuted expert's outputs are identical") {
  moecomp::random_generator rng(18);
  expert<float> e = random_expert<float>(19, true, true);
  const auto dyadic = [&](float* data, index_t count) {
    for (index_t i = 0; i < count; ++i) data[i] = static_cast<float>(static_cast<int>(rng.uniform_index(17)) - 8) / 8;
  };
  dyadic(e.w1.data(), d_ff * d);
  dyadic(e.w3.data(), d_ff * d);
  dyadic(e.w2.data(), d * d_ff);
  dyadic(e.b1.data(), d_ff);
  dyadic(e.b3.data(), d_ff);
  dyadic(e.b2.data(), d);
  host_matrix<float> x(64, d);
  dyadic(x.data(), 64 * d);
  const std::vector<index_t> q = random_permutation(d_ff, 20);
  expert<float> out = e;
  align::permute_neurons<float>(host_context(1), e.view(), view_of(q), out.mutable_view());
  moe::ffn_params relu;
  relu.act = moe::activation::relu;
  host_matrix<float> y(64, d), yp(64, d);
  moe::ffn_forward<float>(host_context(1), relu, e.view(), x.view(), y.view());
  moe::ffn_forward<float>(host_context(1), relu, out.view(), x.view(), yp.view());
  CHECK(moecomp_test::detail::differing_entries(y.storage(), yp.storage()) == 0);
}

TEST_CASE("permute_neurons copies bf16 weights bit for bit, and the inverse permutation restores the expert") {
  const expert<moecomp::bfloat16> e = random_expert<moecomp::bfloat16>(21, true, true);
  const std::vector<index_t> q = random_permutation(d_ff, 22);
  expert<moecomp::bfloat16> once = e, back = e;
  align::permute_neurons<moecomp::bfloat16>(host_context(2), e.view(), view_of(q), once.mutable_view());
  align::permute_neurons<moecomp::bfloat16>(host_context(2), once.view(), view_of(inverse_of(q)), back.mutable_view());
  bool same = true;
  for (index_t i = 0; i < d_ff * d; ++i) same = same && back.w1.data()[i].bits == e.w1.data()[i].bits &&
                                               back.w3.data()[i].bits == e.w3.data()[i].bits &&
                                               back.w2.data()[i].bits == e.w2.data()[i].bits;
  for (index_t i = 0; i < d_ff; ++i) same = same && back.b1[i].bits == e.b1[i].bits && back.b3[i].bits == e.b3[i].bits;
  CHECK(same);
  CHECK(once.w2(3, 7).bits == e.w2(3, q[7]).bits);
  CHECK(once.b2[5].bits == e.b2[5].bits);
}

TEST_CASE("align_rows: squared distances minimised, inner products maximised, rectangular b, costs as defined") {
  // 3 x 2 rows of a, 4 of b: brute force over the 24 injective maps is the reference.
  const double a_values[] = {0, 0, 4, 0, 0, 3};
  const double b_values[] = {4.5, 0, 0, 2, -1, 0, 0, 0.5};
  const moecomp::matrix_view<const double> a(a_values, 3, 2, 2), b(b_values, 4, 2, 2);
  std::vector<index_t> p(3);
  const align::align_result r = align::align_rows<double>(host_context(1), {}, a, b, moecomp::make_vector_view(p.data(), 3));
  CHECK(r.ok());
  CHECK(p == std::vector<index_t>{3, 0, 1});  // 0.25 + 0.25 + 1
  CHECK(r.cost == doctest::Approx(1.5).epsilon(1e-15));
  const align::align_result inner =
      align::align_rows<double>(host_context(1), with_objective(align::align_objective::inner), a, b,
                                moecomp::make_vector_view(p.data(), 3));
  // a_0 = 0 contributes 0 wherever it goes; a_1 -> b_0 (18), a_2 -> b_1 (6).
  CHECK(p[1] == 0);
  CHECK(p[2] == 1);
  CHECK(inner.cost == doctest::Approx(24).epsilon(1e-15));
}

TEST_CASE("align_activations: a constant neuron correlates 0 with everything (no NaN), and the sum is reported") {
  host_matrix<double> a(5, 2), b(5, 2);
  const double t[] = {1, 2, 4, 8, 16};
  for (index_t k = 0; k < 5; ++k) {
    a(k, 0) = t[k];
    a(k, 1) = 3;  // constant
    b(k, 0) = 7;  // constant
    b(k, 1) = 2 * t[k] + 1;
  }
  std::vector<index_t> p(2);
  const align::align_result r = align::align_activations<double>(host_context(1), a.view(), b.view(),
                                                                 moecomp::make_vector_view(p.data(), 2));
  CHECK(r.ok());
  CHECK(p == std::vector<index_t>{1, 0});
  CHECK(r.cost == doctest::Approx(1.0).epsilon(1e-14));
}

TEST_CASE("pearson_correlation: the correlation matrix of align_activations, against the definition") {
  // 50 tokens; a's neurons: two random ones, one constant; b's: an affine copy of a's first, an independent one,
  // a negated copy of a's second (a large offset: the centring runs in double), a constant one.
  moecomp::random_generator rng(70);
  constexpr index_t tokens = 50;
  host_matrix<double> a(tokens, 3), b(tokens, 4);
  for (index_t k = 0; k < tokens; ++k) {
    a(k, 0) = rng.normal<double>();
    a(k, 1) = rng.normal<double>();
    a(k, 2) = -1.5;
    b(k, 0) = 3 * a(k, 0) + 7;
    b(k, 1) = rng.normal<double>();
    b(k, 2) = 1e6 - a(k, 1);
    b(k, 3) = 4;
  }
  // The definition: covariance over the product of the standard deviations, 0 when either is 0.
  const auto corr = [&](const host_matrix<double>& x, index_t i, const host_matrix<double>& y, index_t j) {
    double mx = 0, my = 0;
    for (index_t k = 0; k < tokens; ++k) {
      mx += x(k, i);
      my += y(k, j);
    }
    mx /= tokens;
    my /= tokens;
    double sxy = 0, sxx = 0, syy = 0;
    for (index_t k = 0; k < tokens; ++k) {
      sxy += (x(k, i) - mx) * (y(k, j) - my);
      sxx += (x(k, i) - mx) * (x(k, i) - mx);
      syy += (y(k, j) - my) * (y(k, j) - my);
    }
    return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0.0;
  };
  host_matrix<double> out(3, 4);
  align::pearson_correlation<double>(host_context(2), a.view(), b.view(), out.view());
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 4; ++j) {
      CAPTURE(i);
      CAPTURE(j);
      CHECK(out(i, j) == doctest::Approx(corr(a, i, b, j)).epsilon(1e-9).scale(1));
    }
  CHECK(out(0, 0) == doctest::Approx(1).epsilon(1e-12));
  CHECK(out(1, 2) == doctest::Approx(-1).epsilon(1e-9));
  for (index_t j = 0; j < 4; ++j) CHECK(out(2, j) == 0.0);  // constant neurons: exactly 0, never NaN
  for (index_t i = 0; i < 3; ++i) CHECK(out(i, 3) == 0.0);
  // align_activations reports the sum of these at its p.
  std::vector<index_t> p(3);
  const align::align_result r = align::align_activations<double>(host_context(1), a.view(), b.view(),
                                                                 moecomp::make_vector_view(p.data(), 3));
  double sum = 0;
  for (index_t i = 0; i < 3; ++i) sum += out(i, p[static_cast<std::size_t>(i)]);
  CHECK(p[0] == 0);
  CHECK(p[1] != 2);  // maximising: the negated copy (-1) is the worst partner for a's second neuron
  CHECK(r.cost == doctest::Approx(sum).epsilon(1e-12));
  using moecomp_test::thrown_message;
  host_matrix<double> small(2, 4), wrong(3, 3);
  CHECK(thrown_message([&] { align::pearson_correlation<double>(host_context(1), a.view(), b.view(), wrong.view()); }) ==
        "pearson_correlation: out must be 3 x 4 (a's neurons x b's neurons), got 3 x 3");
  CHECK(thrown_message([&] { align::pearson_correlation<double>(host_context(1), a.view(), small.view(), out.view()); }) ==
        "pearson_correlation: b must have a's 50 tokens (rows) and at least 1 neuron, got 2 x 4");
  host_matrix<double> alias(tokens, 4);
  CHECK(thrown_message([&] {
          align::pearson_correlation<double>(host_context(1), alias.view(), b.view(),
                                             moecomp::matrix_view<double>(alias.data(), 4, 4, 4));
        }) == "pearson_correlation: out must not overlap a");
}

TEST_CASE("the per-element rules the device kernels share with the host") {
  namespace ad = moecomp::align::detail;
  namespace cd = moecomp::detail;
  // Squared distance from norms and the cross term, clamped at 0 (rounding can make it negative).
  CHECK(ad::clamped_squared_distance(25, 4, 3) == 23);
  CHECK(ad::clamped_squared_distance(1, 1, 1 + 1e-15) == 0.0);
  CHECK(ad::clamped_squared_distance(1, 1, 1.5) == 0.0);
  CHECK(ad::clamped_squared_distance(NAN, 1, 0) == 0.0);  // as the host's std::max(0.0, v)
  // The objective's terms: (a - b)^2 for weights, a b otherwise.
  CHECK(ad::objective_term(3, 5, true) == 4);
  CHECK(ad::objective_term(-3, 5, true) == 64);
  CHECK(ad::objective_term(3, 5, false) == 15);
  // The correlation's standardisation: deviations, the unit-norm scale (0 for a constant column), the value.
  CHECK(cd::squared_deviation(7, 4) == 9);
  CHECK(cd::squared_deviation(1, 4) == 9);
  CHECK(cd::unit_norm_scale(16) == 0.25);
  CHECK(cd::unit_norm_scale(0) == 0.0);
  CHECK(cd::unit_norm_scale(-1e-300) == 0.0);
  CHECK(cd::standardized_value(7, 4, 0.25) == 0.75);
  CHECK(cd::standardized_value(4, 4, 0) == 0.0);
  // Together they give unit-norm, zero-mean columns: x = {1, 2, 3, 6}, mean 3, centred squares 4 + 1 + 0 + 9.
  const double x[] = {1, 2, 3, 6};
  double squares = 0;
  for (double v : x) squares += cd::squared_deviation(v, 3);
  const double scale = cd::unit_norm_scale(squares);
  double norm = 0, total = 0;
  for (double v : x) {
    const double z = cd::standardized_value(v, 3, scale);
    norm += z * z;
    total += z;
  }
  CHECK(norm == doctest::Approx(1).epsilon(1e-15));
  CHECK(total == doctest::Approx(0).scale(1).epsilon(1e-15));
}

TEST_CASE("align_stack: every expert to one reference (the reference's row the identity)") {
  const expert<float> reference = random_expert<float>(23);
  std::vector<expert<float>> members;
  std::vector<std::vector<index_t>> shuffles;
  for (int k = 0; k < 3; ++k) {
    shuffles.push_back(random_permutation(d_ff, 30 + k));
    members.push_back(shuffled(reference, shuffles.back(), 0.02, 40 + k));
  }
  // The stack: member 0, the reference, member 1, member 2.
  const index_t experts = 4;
  host_matrix<float> w1(experts * d_ff, d), w3(experts * d_ff, d), w2(experts * d, d_ff);
  const expert<float>* order[] = {&members[0], &reference, &members[1], &members[2]};
  for (index_t e = 0; e < experts; ++e) {
    std::copy(order[e]->w1.data(), order[e]->w1.data() + d_ff * d, w1.data() + e * d_ff * d);
    std::copy(order[e]->w3.data(), order[e]->w3.data() + d_ff * d, w3.data() + e * d_ff * d);
    std::copy(order[e]->w2.data(), order[e]->w2.data() + d * d_ff, w2.data() + e * d * d_ff);
  }
  moe::ffn_expert_stack_view<float> stack;
  stack.w1 = moecomp::matrix_stack_view<const float>(w1.data(), experts, d_ff, d);
  stack.w3 = moecomp::matrix_stack_view<const float>(w3.data(), experts, d_ff, d);
  stack.w2 = moecomp::matrix_stack_view<const float>(w2.data(), experts, d, d_ff);
  host_matrix<index_t> perms(experts, d_ff);
  const host_matrix<float> none;
  const align::align_result r = align::align_stack<float>(host_context(2), {}, stack, 1, none.view(), perms.view());
  CHECK(r.ok());
  const std::vector<index_t> rows[] = {inverse_of(shuffles[0]), {}, inverse_of(shuffles[1]), inverse_of(shuffles[2])};
  for (index_t e = 0; e < experts; ++e) {
    CAPTURE(e);
    std::vector<index_t> got(perms.data() + e * d_ff, perms.data() + (e + 1) * d_ff);
    if (e == 1) {
      for (index_t i = 0; i < d_ff; ++i) CHECK(got[static_cast<std::size_t>(i)] == i);
    } else {
      CHECK(got == rows[e]);
    }
  }
  // By activation correlation on tokens (the reference's activations computed once): the same permutations.
  const host_matrix<float> x = tokens(256, 44);
  host_matrix<index_t> by_correlation(experts, d_ff);
  const align::align_result rc = align::align_stack<float>(
      host_context(2), with_objective(align::align_objective::correlation), stack, 1, x.view(), by_correlation.view());
  CHECK(rc.ok());
  CHECK(rc.cost > 0.95 * 3 * d_ff);
  CHECK(by_correlation.storage() == perms.storage());
  CHECK(moecomp_test::thrown_message([&] {
          align::align_stack<float>(host_context(1), with_objective(align::align_objective::correlation), stack, 1,
                                    none.view(), by_correlation.view());
        }) == "align_stack: x must be tokens x d with at least 2 tokens and d = 24 for the correlation objective, got 0 x 0");
}

TEST_CASE("alignment is bit-identical at any thread count") {
  const expert<float> reference = random_expert<float>(50);
  const expert<float> other = random_expert<float>(51);  // unrelated: a hard, tie-free problem
  const host_matrix<float> x = tokens(200, 52);
  for (align::align_objective objective :
       {align::align_objective::weights, align::align_objective::inner, align::align_objective::correlation}) {
    CAPTURE(align::to_string(objective));
    moecomp_test::check_same_at_thread_counts([&](const host_context& ctx) {
      std::vector<index_t> p(d_ff);
      const align::align_result r = align::align_experts<float>(ctx, with_objective(objective), reference.view(),
                                                                other.view(), x.view(),
                                                                moecomp::make_vector_view(p.data(), d_ff));
      return std::make_tuple(p, std::vector<double>{r.cost});
    });
  }
}

TEST_CASE("alignment refuses mismatched shapes, missing tokens, wrong objectives and non-permutations") {
  using moecomp_test::thrown_message;
  const expert<float> e = random_expert<float>(60), plain = random_expert<float>(61, false);
  std::vector<index_t> p(d_ff);
  const auto pv = moecomp::make_vector_view(p.data(), d_ff);
  const host_matrix<float> none, few = tokens(1, 62);
  CHECK(thrown_message([&] { align::align_experts<float>(host_context(1), {}, e.view(), plain.view(), none.view(), pv); }) ==
        "align_experts: expert must have the reference's shape (d_ff 40, d 24, gated, the same biases), got d_ff 40, "
        "d 24, not gated");
  CHECK(thrown_message([&] {
          align::align_experts<float>(host_context(1), with_objective(align::align_objective::correlation), e.view(),
                                      e.view(), few.view(), pv);
        }) == "align_experts: x must be tokens x d with at least 2 tokens and d = 24 for the correlation objective, got 1 x 24");
  CHECK(thrown_message([&] {
          align::align_experts<float>(host_context(1), {}, e.view(), e.view(), none.view(),
                                      moecomp::make_vector_view(p.data(), 3));
        }) == "align_experts: permutation must have 40 entries (one per neuron), got 3");
  host_matrix<float> a(4, 3), b(3, 3), c(4, 2);
  std::vector<index_t> q(4);
  const auto qv = moecomp::make_vector_view(q.data(), 4);
  CHECK(thrown_message([&] { align::align_rows<float>(host_context(1), {}, a.view(), b.view(), qv); }) ==
        "align_rows: b must have at least a's 4 rows (each row of a gets a distinct row of b), got 3");
  CHECK(thrown_message([&] { align::align_rows<float>(host_context(1), {}, a.view(), c.view(), qv); }) ==
        "align_rows: b must have 3 columns like a, got 4 x 2");
  CHECK(thrown_message([&] {
          align::align_rows<float>(host_context(1), with_objective(align::align_objective::correlation), a.view(),
                                   a.view(), qv);
        }).find("params.objective must be weights or inner") != std::string::npos);
  a(2, 1) = NAN;
  CHECK(thrown_message([&] { align::align_rows<float>(host_context(1), {}, a.view(), a.view(), qv); }) ==
        "align_rows: a must be finite, got nan at (2, 1)");
  CHECK(thrown_message([&] { align::align_activations<float>(host_context(1), few.view(), few.view(), qv); })
            .find("at least 2 tokens") != std::string::npos);
  expert<float> out = e;
  std::vector<index_t> twice(d_ff, 0);
  CHECK(thrown_message([&] {
          align::permute_neurons<float>(host_context(1), e.view(), view_of(twice), out.mutable_view());
        }) == "permute_neurons: permutation must be a permutation of 0..39, got 0 twice (at 0 and 1)");
  expert<float> wrong = plain;
  CHECK(thrown_message([&] {
          align::permute_neurons<float>(host_context(1), e.view(), view_of(random_permutation(d_ff, 1)),
                                        wrong.mutable_view());
        }) == "permute_neurons: out.w3 must be 40 x 24 like the expert's, got 0 x 0");
  CHECK(thrown_message([&] { align::parse_align_objective("cosine"); }) ==
        "objective: expected weights, inner or correlation, got 'cosine'");
}

TEST_CASE("the design-row column mapping the device kernels use (align_rules.hpp) is design_matrix's") {
  // Every column of every layout (gated or not, with or without b1 / b3), element for element, in bf16 storage.
  for (const bool gated : {true, false})
    for (const bool biases : {true, false}) {
      CAPTURE(gated);
      CAPTURE(biases);
      const expert<moecomp::bfloat16> e = random_expert<moecomp::bfloat16>(gated ? 5 : 6, gated, biases);
      const align::detail::design_layout layout = align::detail::make_design_layout(d, gated, biases, biases && gated);
      REQUIRE(layout.width == align::design_width(e.view()));
      host_matrix<float> rows(d_ff, layout.width);
      align::design_matrix<moecomp::bfloat16>(host_context(1), e.view(), rows.view());
      index_t mismatches = 0;
      for (index_t i = 0; i < d_ff; ++i)
        for (index_t c = 0; c < layout.width; ++c) {
          index_t k = -1;
          float want = 0;
          switch (align::detail::design_source(layout, c, k)) {
            case align::detail::design_piece::w1: want = moecomp::convert_to<float>(e.w1(i, k)); break;
            case align::detail::design_piece::b1: want = moecomp::convert_to<float>(e.b1[i]); break;
            case align::detail::design_piece::w3: want = moecomp::convert_to<float>(e.w3(i, k)); break;
            case align::detail::design_piece::b3: want = moecomp::convert_to<float>(e.b3[i]); break;
            case align::detail::design_piece::w2: want = moecomp::convert_to<float>(e.w2(k, i)); break;
          }
          if (rows(i, c) != want) ++mismatches;
        }
      CHECK(mismatches == 0);
      CHECK(layout.b1 == (biases ? d : -1));
      CHECK(layout.w3 == (gated ? d + (biases ? 1 : 0) : -1));
      CHECK(layout.w2 == layout.width - d);
    }
}
