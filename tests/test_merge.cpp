// Expert merging (<moecomp/merge/merge.hpp>): each method against its definition written out here (average,
// uniform, frequency with HC-SMoE's epsilon, dominant, aligned, fix-dom's planted matchings, learned's objective
// and analytic gradient), the router rules, the HC-SMoE id-map layer forward after merging, bf16 storage,
// thread-count independence and the argument checks. The peer (numpy transcriptions of HC-SMoE's freq and
// fix-dom-same, the fourth paper's router merge and the aligned average) is tests/peers/test_merge_numpy.py.
#include <moecomp/merge/merge.hpp>
#include <moecomp/core/detail/expert_gather.hpp>
#include <moecomp/moe/ffn.hpp>
#include <moecomp/moe/layer.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <cmath>
#include <numeric>
#include <vector>

namespace {

using moecomp::host_context;
using moecomp::host_matrix;
using moecomp::host_vector;
using moecomp::index_t;
using moecomp_test::random_permutation;
namespace merge = moecomp::merge;
namespace moe = moecomp::moe;

constexpr index_t d = 16, d_ff = 24;

/// E experts of storage W in stacks (gated, optionally with biases), filled from moecomp's generator.
template <class W>
struct stack {
  index_t experts;
  bool biases;
  host_matrix<W> w1, w3, w2, b1, b3, b2;
  stack(index_t e, std::uint64_t seed, bool with_biases = false)
      : experts(e), biases(with_biases), w1(e * d_ff, d), w3(e * d_ff, d), w2(e * d, d_ff),
        b1(with_biases ? e : 0, d_ff), b3(with_biases ? e : 0, d_ff), b2(with_biases ? e : 0, d) {
    moecomp::random_generator rng(seed);
    const auto fill = [&](host_matrix<W>& m, double scale) {
      for (index_t i = 0; i < m.rows() * m.cols(); ++i) m.data()[i] = moecomp::convert_to<W>(scale * rng.normal<double>());
    };
    fill(w1, 1 / std::sqrt(double(d)));
    fill(w3, 1 / std::sqrt(double(d)));
    fill(w2, 1 / std::sqrt(double(d_ff)));
    fill(b1, 0.1);
    fill(b3, 0.1);
    fill(b2, 0.1);
  }
  moe::ffn_expert_stack_view<W> view() const {
    return {moecomp::make_matrix_stack_view<const W>(w1.data(), experts, d_ff, d),
            moecomp::make_matrix_stack_view<const W>(w3.data(), experts, d_ff, d),
            moecomp::make_matrix_stack_view<const W>(w2.data(), experts, d, d_ff), b1.view(), b3.view(), b2.view()};
  }
  moe::ffn_expert_stack_mutable_view<W> mutable_view() {
    return {moecomp::make_matrix_stack_view<W>(w1.data(), experts, d_ff, d),
            moecomp::make_matrix_stack_view<W>(w3.data(), experts, d_ff, d),
            moecomp::make_matrix_stack_view<W>(w2.data(), experts, d, d_ff), b1.view(), b3.view(), b2.view()};
  }
  /// Expert e's neuron i replaced by expert `from`'s neuron q[i] (permute_neurons' convention).
  void set_permuted(index_t e, index_t from, const std::vector<index_t>& q) {
    for (index_t i = 0; i < d_ff; ++i) {
      const index_t s = q[static_cast<std::size_t>(i)];
      for (index_t k = 0; k < d; ++k) {
        w1(e * d_ff + i, k) = w1(from * d_ff + s, k);
        w3(e * d_ff + i, k) = w3(from * d_ff + s, k);
      }
      for (index_t k = 0; k < d; ++k) w2(e * d + k, i) = w2(from * d + k, s);
      if (biases) {
        b1(e, i) = b1(from, s);
        b3(e, i) = b3(from, s);
      }
    }
    if (biases)
      for (index_t k = 0; k < d; ++k) b2(e, k) = b2(from, k);
  }
};

template <class W>
struct merged {
  index_t groups;
  stack<W> out;
  host_matrix<moecomp::accumulator_t<W>> router;
  host_vector<std::int64_t> map;
  merged(index_t g, index_t experts, bool biases, bool router_rows)
      : groups(g), out(g, 0, biases), router(router_rows ? g : 0, d), map(experts) {}
  merge::merge_outputs<W> outputs() { return {out.mutable_view(), router.view(), map.view()}; }
};

host_matrix<float> random_tokens(index_t n, std::uint64_t seed) {
  moecomp::random_generator rng(seed);
  host_matrix<float> x(n, d);
  for (index_t i = 0; i < n * d; ++i) x.data()[i] = rng.normal<float>();
  return x;
}

host_matrix<float> random_router(index_t experts, std::uint64_t seed) {
  moecomp::random_generator rng(seed);
  host_matrix<float> r(experts, d);
  for (index_t i = 0; i < experts * d; ++i) r.data()[i] = 0.5f * rng.normal<float>();
  return r;
}

template <class T>
std::vector<T> values(const host_matrix<T>& m) {
  return std::vector<T>(m.data(), m.data() + m.rows() * m.cols());
}

moecomp::vector_view<const std::int64_t> labels_view(const std::vector<std::int64_t>& g) {
  return moecomp::make_vector_view<const std::int64_t>(g.data(), static_cast<index_t>(g.size()));
}

/// The largest |got - sum_i c_i w_i| over a weight stack's group matrices, the sum in double.
template <class W>
double weighted_gap(const host_matrix<W>& in, const host_matrix<W>& out, index_t rows, index_t g,
                    const std::vector<std::pair<index_t, double>>& terms) {
  double gap = 0;
  for (index_t r = 0; r < rows; ++r)
    for (index_t k = 0; k < in.cols(); ++k) {
      double want = 0;
      for (const auto& t : terms) want += t.second * moecomp::convert_to<double>(in(t.first * rows + r, k));
      gap = std::max(gap, std::fabs(moecomp::convert_to<double>(out(g * rows + r, k)) - want));
    }
  return gap;
}

}  // namespace

TEST_CASE("average and uniform merge each group into the mean of its experts; the map is the group labels") {
  const stack<float> s(5, 1, /*biases=*/true);
  const std::vector<std::int64_t> groups{1, 0, 1, 2, 1};
  merged<float> m(3, 5, true, false);
  merge::merge_params params;
  params.method = merge::merge_method::average;
  const merge::merge_report report = merge::merge_experts<float>(host_context(1), params, s.view(), labels_view(groups), {}, m.outputs());
  CHECK(report.ok());
  CHECK(report.router == merge::router_rule::id_map);
  const std::vector<std::pair<index_t, double>> g1{{0, 1 / 3.0}, {2, 1 / 3.0}, {4, 1 / 3.0}};
  CHECK(weighted_gap(s.w1, m.out.w1, d_ff, 1, g1) < 1e-7);
  CHECK(weighted_gap(s.w3, m.out.w3, d_ff, 1, g1) < 1e-7);
  CHECK(weighted_gap(s.w2, m.out.w2, d, 1, g1) < 1e-7);
  CHECK(weighted_gap(s.b1, m.out.b1, 1, 1, g1) < 1e-7);
  CHECK(weighted_gap(s.b2, m.out.b2, 1, 1, g1) < 1e-7);
  // A singleton stays bit-identical.
  CHECK(weighted_gap(s.w1, m.out.w1, d_ff, 0, {{1, 1.0}}) == 0);
  CHECK(weighted_gap(s.w2, m.out.w2, d, 2, {{3, 1.0}}) == 0);
  for (index_t e = 0; e < 5; ++e) CHECK(m.map[e] == groups[static_cast<std::size_t>(e)]);
  CHECK(report.coefficients == std::vector<double>{1 / 3.0, 1.0, 1 / 3.0, 1.0, 1 / 3.0});

  // uniform: the same experts, and (automatically) the router rows merged with the same coefficients.
  const host_matrix<float> router = random_router(5, 2);
  merged<float> u(3, 5, true, true);
  params.method = merge::merge_method::uniform;
  merge::merge_data<float> data;
  data.router = router.view();
  const merge::merge_report ur = merge::merge_experts<float>(host_context(1), params, s.view(), labels_view(groups), data, u.outputs());
  CHECK(ur.router == merge::router_rule::merged_rows);
  CHECK(values(u.out.w1) == values(m.out.w1));
  CHECK(weighted_gap(router, u.router, 1, 1, g1) < 1e-7);
  CHECK(weighted_gap(router, u.router, 1, 2, {{3, 1.0}}) == 0);
}

TEST_CASE("frequency follows HC-SMoE: sum f W / (sum f + 1e-7); a group of unused experts becomes zero") {
  const stack<float> s(4, 3);
  const std::vector<std::int64_t> groups{0, 0, 1, 2};
  const std::vector<double> f{0.5, 0.25, 0.25, 0.0};
  merged<float> m(3, 4, false, false);
  merge::merge_params params;
  params.method = merge::merge_method::frequency;
  merge::merge_data<float> data;
  data.frequencies = moecomp::make_vector_view<const double>(f.data(), 4);
  const merge::merge_report report = merge::merge_experts<float>(host_context(1), params, s.view(), labels_view(groups), data, m.outputs());
  REQUIRE(report.ok());
  const double z0 = 0.75 + 1e-7;
  CHECK(weighted_gap(s.w1, m.out.w1, d_ff, 0, {{0, 0.5 / z0}, {1, 0.25 / z0}}) < 1e-7);
  CHECK(weighted_gap(s.w2, m.out.w2, d, 0, {{0, 0.5 / z0}, {1, 0.25 / z0}}) < 1e-7);
  // A used singleton: W f / (f + 1e-7), not exactly W.
  CHECK(weighted_gap(s.w3, m.out.w3, d_ff, 1, {{2, 0.25 / (0.25 + 1e-7)}}) < 1e-7);
  // The unused singleton is zeroed (HC-SMoE does not special-case it).
  for (index_t i = 0; i < d_ff * d; ++i) CHECK(m.out.w1.data()[2 * d_ff * d + i] == 0.0f);
  CHECK(report.coefficients[0] == doctest::Approx(0.5 / z0).epsilon(1e-15));
  CHECK(report.coefficients[3] == 0.0);
  // The dominants: the most frequent member, ties to the lowest index.
  CHECK(report.groups[0].dominant == 0);
  const std::vector<double> tied{0.25, 0.25, 0.25, 0.25};
  std::vector<std::int64_t> dom(3);
  merge::dominant_experts(labels_view(groups), moecomp::make_vector_view<const double>(tied.data(), 4),
                          moecomp::make_vector_view(dom.data(), 3));
  CHECK(dom == std::vector<std::int64_t>{0, 2, 3});
}

TEST_CASE("routing_frequencies counts the router's top-k selections and normalises them to sum 1") {
  const host_matrix<float> x = random_tokens(200, 4), router = random_router(6, 5);
  std::vector<double> f(6);
  merge::routing_frequencies<float>(host_context(1), 2, x.view(), router.view(), moecomp::make_vector_view(f.data(), 6));
  std::vector<double> want(6, 0.0);
  for (index_t t = 0; t < 200; ++t) {
    std::vector<std::pair<double, index_t>> logits;
    for (index_t e = 0; e < 6; ++e) {
      double z = 0;
      for (index_t k = 0; k < d; ++k) z += double(x(t, k)) * double(router(e, k));
      logits.push_back({-z, e});
    }
    std::sort(logits.begin(), logits.end());
    want[static_cast<std::size_t>(logits[0].second)] += 1.0 / 400;
    want[static_cast<std::size_t>(logits[1].second)] += 1.0 / 400;
  }
  for (std::size_t e = 0; e < 6; ++e) CHECK(f[e] == doctest::Approx(want[e]).epsilon(1e-12));
}

TEST_CASE("dominant keeps the most frequent member bit for bit, with its router row (M-SMoE)") {
  const stack<moecomp::bfloat16> s(4, 6, true);
  const std::vector<std::int64_t> groups{0, 1, 0, 1};
  const std::vector<double> f{0.1, 0.2, 0.4, 0.3};
  const host_matrix<float> router = random_router(4, 7);
  merged<moecomp::bfloat16> m(2, 4, true, true);
  merge::merge_params params;
  params.method = merge::merge_method::dominant;
  merge::merge_data<float> data;
  data.frequencies = moecomp::make_vector_view<const double>(f.data(), 4);
  data.router = router.view();
  const merge::merge_report report =
      merge::merge_experts<moecomp::bfloat16>(host_context(1), params, s.view(), labels_view(groups), data, m.outputs());
  CHECK(report.router == merge::router_rule::dominant_row);
  CHECK(report.groups[0].dominant == 2);
  CHECK(report.groups[1].dominant == 3);
  CHECK(weighted_gap(s.w1, m.out.w1, d_ff, 0, {{2, 1.0}}) == 0);
  CHECK(weighted_gap(s.w2, m.out.w2, d, 1, {{3, 1.0}}) == 0);
  CHECK(weighted_gap(s.b2, m.out.b2, 1, 1, {{3, 1.0}}) == 0);
  CHECK(weighted_gap(router, m.router, 1, 0, {{2, 1.0}}) == 0);
  CHECK(weighted_gap(router, m.router, 1, 1, {{3, 1.0}}) == 0);
}

TEST_CASE("bf16 storage: the merged weights are the double mean rounded once to bf16") {
  const stack<moecomp::bfloat16> s(3, 8);
  const std::vector<std::int64_t> groups{0, 0, 0};
  merged<moecomp::bfloat16> m(1, 3, false, false);
  merge::merge_experts<moecomp::bfloat16>(host_context(1), merge::merge_params{}, s.view(), labels_view(groups), {}, m.outputs());
  std::size_t wrong = 0;
  for (index_t i = 0; i < d_ff * d; ++i) {
    const double mean = (moecomp::convert_to<double>(s.w1.data()[i]) + moecomp::convert_to<double>(s.w1.data()[d_ff * d + i]) +
                         moecomp::convert_to<double>(s.w1.data()[2 * d_ff * d + i])) / 3;
    wrong += moecomp::convert_to<double>(m.out.w1.data()[i]) != moecomp::convert_to<double>(moecomp::convert_to<moecomp::bfloat16>(mean));
  }
  CHECK(wrong == 0);
}

TEST_CASE("aligned: a row-permuted copy of the dominant is put back in its order, so the mean is the dominant") {
  stack<float> s(3, 9, true);
  const std::vector<index_t> q = random_permutation(d_ff, 10);
  s.set_permuted(1, 0, q);  // expert 1 = expert 0 with its neurons shuffled
  const std::vector<std::int64_t> groups{0, 0, 1};
  for (auto objective : {moecomp::align::align_objective::weights, moecomp::align::align_objective::inner,
                         moecomp::align::align_objective::correlation}) {
    CAPTURE(moecomp::align::to_string(objective));
    merged<float> m(2, 3, true, false);
    merge::merge_params params;
    params.method = merge::merge_method::aligned;
    params.align.objective = objective;
    const host_matrix<float> x = random_tokens(300, 11);
    merge::merge_data<float> data;
    data.x = x.view();
    const merge::merge_report report = merge::merge_experts<float>(host_context(1), params, s.view(), labels_view(groups), data, m.outputs());
    REQUIRE(report.ok());
    CHECK(weighted_gap(s.w1, m.out.w1, d_ff, 0, {{0, 1.0}}) < 1e-6);
    CHECK(weighted_gap(s.w3, m.out.w3, d_ff, 0, {{0, 1.0}}) < 1e-6);
    CHECK(weighted_gap(s.w2, m.out.w2, d, 0, {{0, 1.0}}) < 1e-6);
    CHECK(weighted_gap(s.b1, m.out.b1, 1, 0, {{0, 1.0}}) < 1e-6);
    CHECK(report.groups[0].error < 1e-10);  // the merged expert computes the group's function
  }
}

TEST_CASE("align_members: each member is put in its dominant's neuron order before frequency, uniform or learned") {
  // Expert 1 is expert 0 with its neurons shuffled, in one group; expert 2 alone: aligned, expert 1 equals
  // expert 0, so any coefficient merge of the pair (c0 + c1 = 1) gives expert 0 back.
  stack<float> s(3, 9, true);
  s.set_permuted(1, 0, random_permutation(d_ff, 10));
  const std::vector<std::int64_t> groups{0, 0, 1};
  const host_matrix<float> x = random_tokens(300, 11), router = random_router(3, 12);
  merge::merge_data<float> data;
  data.x = x.view();
  data.router = router.view();
  const std::vector<std::int64_t> dominant{0, 2};
  data.dominants = moecomp::make_vector_view<const std::int64_t>(dominant.data(), 2);
  for (auto method : {merge::merge_method::frequency, merge::merge_method::uniform, merge::merge_method::learned}) {
    CAPTURE(merge::to_string(method));
    merged<float> m(2, 3, true, false);
    merge::merge_params params;
    params.method = method;
    params.align_members = true;
    params.router = merge::router_rule::id_map;
    const merge::merge_report report = merge::merge_experts<float>(host_context(2), params, s.view(), labels_view(groups), data, m.outputs());
    REQUIRE(report.ok());
    const double c0 = report.coefficients[0], c1 = report.coefficients[1];
    CHECK(c0 + c1 == doctest::Approx(1.0).epsilon(1e-6));
    CHECK(c1 > 0.05);  // the copy takes part
    CHECK(weighted_gap(s.w1, m.out.w1, d_ff, 0, {{0, 1.0}}) < 1e-5);
    CHECK(weighted_gap(s.w3, m.out.w3, d_ff, 0, {{0, 1.0}}) < 1e-5);
    CHECK(weighted_gap(s.w2, m.out.w2, d, 0, {{0, 1.0}}) < 1e-5);
    CHECK(weighted_gap(s.b1, m.out.b1, 1, 0, {{0, 1.0}}) < 1e-5);
    // Without alignment the shuffled copy blurs the dominant's neurons (learned then drops the copy instead).
    params.align_members = false;
    merged<float> plain(2, 3, true, false);
    merge::merge_experts<float>(host_context(2), params, s.view(), labels_view(groups), data, plain.outputs());
    if (method != merge::merge_method::learned) CHECK(weighted_gap(s.w1, plain.out.w1, d_ff, 0, {{0, 1.0}}) > 1e-2);
  }
  merge::merge_params bad;
  bad.align_members = true;
  bad.router = merge::router_rule::id_map;
  for (auto method : {merge::merge_method::aligned, merge::merge_method::fix_dom, merge::merge_method::dominant}) {
    bad.method = method;
    merged<float> m(2, 3, true, false);
    CHECK(moecomp_test::thrown_message([&] {
            merge::merge_experts<float>(host_context(1), bad, s.view(), labels_view(groups), data, m.outputs());
          }).find("params.align_members must be false with method " + std::string(merge::to_string(method))) != std::string::npos);
  }
}

TEST_CASE("fix-dom matches each member neuron to its most correlated dominant neuron and averages per match") {
  stack<float> s(3, 12);
  const std::vector<index_t> q = random_permutation(d_ff, 13);
  s.set_permuted(1, 0, q);  // a permuted copy: every neuron finds its twin (correlation 1)
  const std::vector<std::int64_t> groups{0, 0, 1};
  const host_matrix<float> x = random_tokens(400, 14);
  merged<float> m(2, 3, false, false);
  merge::merge_params params;
  params.method = merge::merge_method::fix_dom;
  merge::merge_data<float> data;
  data.x = x.view();
  const merge::merge_report report = merge::merge_experts<float>(host_context(1), params, s.view(), labels_view(groups), data, m.outputs());
  REQUIRE(report.ok());
  CHECK(report.groups[0].dominant == 0);
  CHECK(report.groups[0].tokens == 400);
  CHECK(weighted_gap(s.w1, m.out.w1, d_ff, 0, {{0, 1.0}}) < 1e-6);
  CHECK(weighted_gap(s.w2, m.out.w2, d, 0, {{0, 1.0}}) < 1e-6);

  // Many-to-one: a member whose neurons are all copies of dominant neuron 3 (scaled, so correlation 1): every
  // one goes to neuron 3, which becomes the mean of 1 + d_ff rows; every other dominant neuron is unchanged.
  stack<float> t(2, 15);
  for (index_t i = 0; i < d_ff; ++i)
    for (index_t k = 0; k < d; ++k) {
      t.w1(d_ff + i, k) = t.w1(3, k);
      t.w3(d_ff + i, k) = t.w3(3, k) * float(1 + i % 3);
    }
  const std::vector<std::int64_t> one{0, 0};
  merged<float> n(1, 2, false, false);
  const merge::merge_report r2 = merge::merge_experts<float>(host_context(1), params, t.view(), labels_view(one), data, n.outputs());
  REQUIRE(r2.ok());
  for (index_t a = 0; a < d_ff; ++a) {
    CAPTURE(a);
    for (index_t k = 0; k < d; ++k) {
      double want3 = t.w3(a, k), want2 = t.w2(k, a);
      if (a == 3) {
        want3 = t.w3(3, k);
        want2 = t.w2(k, 3);
        for (index_t i = 0; i < d_ff; ++i) {
          want3 += t.w3(d_ff + i, k);
          want2 += t.w2(d + k, i);
        }
        want3 /= 1 + d_ff;
        want2 /= 1 + d_ff;
      }
      CHECK(double(n.out.w3(a, k)) == doctest::Approx(want3).epsilon(1e-6));
      CHECK(double(n.out.w2(k, a)) == doctest::Approx(want2).epsilon(1e-6));
    }
  }
}

TEST_CASE("fix-dom's group tokens: each member's routed tokens, concatenated, capped by a seeded draw") {
  const stack<float> s(4, 16);
  const std::vector<std::int64_t> groups{0, 1, 0, 1};
  const host_matrix<float> x = random_tokens(500, 17), router = random_router(4, 18);
  merge::merge_params params;
  params.method = merge::merge_method::fix_dom;
  params.token_cap = 100;
  merge::merge_data<float> data;
  data.x = x.view();
  data.router = router.view();
  merged<float> m(2, 4, false, false);
  const merge::merge_report report = merge::merge_experts<float>(host_context(1), params, s.view(), labels_view(groups), data, m.outputs());
  REQUIRE(report.ok());
  // The reported tokens are the group's distinct routed tokens (capped): with top-2 of 4 every token reaches
  // at least one of two groups' members... each group gets some, and never more than the cap.
  for (const auto& g : report.groups) CHECK((g.tokens > 0 && g.tokens <= 100));
  moecomp_test::check_same_at_thread_counts([&](const host_context& ctx) {
    merged<float> mm(2, 4, false, false);
    merge::merge_experts<float>(ctx, params, s.view(), labels_view(groups), data, mm.outputs());
    return std::make_tuple(values(mm.out.w1), values(mm.out.w3), values(mm.out.w2));
  });
}

TEST_CASE("learned coefficients stay on the simplex, lower the objective, and use the analytic gradient") {
  const stack<float> s(3, 19, true);
  const host_matrix<float> x = random_tokens(256, 20), router = random_router(3, 21);
  // The gradient against central differences of the objective, for each activation.
  for (auto act : {moe::activation::silu, moe::activation::gelu, moe::activation::gelu_tanh}) {
    CAPTURE(moe::to_string(act));
    moe::ffn_params forward;
    forward.act = act;
    const host_context ctx(1);
    const std::vector<index_t> members{0, 1, 2};
    const auto sv = s.view();
    const auto y = merge::detail::group_target<float, float>(ctx, forward, sv, members, x.view(), {}, nullptr);
    std::vector<index_t> ids(256);
    std::iota(ids.begin(), ids.end(), index_t(0));
    merge::detail::learned_problem<float> problem(ctx, forward, sv, members, x.view(), y.data());
    const std::vector<double> alpha{0.5, 0.3, 0.2};
    std::vector<double> grad;
    problem.evaluate(alpha, &grad);
    for (std::size_t i = 0; i < 3; ++i) {
      std::vector<double> up = alpha, down = alpha;
      up[i] += 1e-3;
      down[i] -= 1e-3;
      const double numeric = (problem.evaluate(up, nullptr) - problem.evaluate(down, nullptr)) / 2e-3;
      CHECK(grad[i] == doctest::Approx(numeric).epsilon(2e-3));
    }
  }
  const std::vector<std::int64_t> groups{0, 0, 0};
  merge::merge_params params;
  params.method = merge::merge_method::learned;
  merge::merge_data<float> data;
  data.x = x.view();
  data.router = router.view();
  merged<float> m(1, 3, true, true);
  const merge::merge_report report = merge::merge_experts<float>(host_context(1), params, s.view(), labels_view(groups), data, m.outputs());
  CHECK(report.router == merge::router_rule::merged_rows);
  const auto& g = report.groups[0];
  CHECK(g.iterations >= 1);
  CHECK(g.objective_final < g.objective_initial);
  double total = 0;
  for (double c : report.coefficients) {
    CHECK(c >= 0);
    total += c;
  }
  CHECK(total == doctest::Approx(1.0).epsilon(1e-12));
  // The merged expert is sum a_e theta_e, and the router row too.
  std::vector<std::pair<index_t, double>> terms;
  for (index_t e = 0; e < 3; ++e) terms.push_back({e, report.coefficients[static_cast<std::size_t>(e)]});
  CHECK(weighted_gap(s.w1, m.out.w1, d_ff, 0, terms) < 1e-6);
  CHECK(weighted_gap(router, m.router, 1, 0, terms) < 1e-6);
  // The reported error is the final objective relative to the target's energy (same tokens, same expert up to
  // the rounding of the merged weights to float).
  CHECK(std::isfinite(g.error));
  CHECK(g.error < 1);
  moecomp_test::check_same_at_thread_counts([&](const host_context& ctx) {
    merged<float> mm(1, 3, true, true);
    const auto r = merge::merge_experts<float>(ctx, params, s.view(), labels_view(groups), data, mm.outputs());
    return std::make_tuple(values(mm.out.w1), values(mm.router), r.coefficients);
  });
}

TEST_CASE("the HC-SMoE layer after merging: softmax top-k over the E original logits, the merged expert per slot") {
  const stack<float> s(6, 22);
  const std::vector<std::int64_t> groups{0, 1, 0, 2, 1, 0};
  const host_matrix<float> x = random_tokens(64, 23), router = random_router(6, 24);
  merged<float> m(3, 6, false, false);
  merge::merge_params params;
  params.method = merge::merge_method::average;
  merge::merge_experts<float>(host_context(1), params, s.view(), labels_view(groups), {}, m.outputs());
  moe::moe_layer_view<float> layer;
  layer.router = router.view();
  layer.experts = m.out.view();
  layer.expert_map = m.map.view();
  moe::moe_layer_params lp;
  lp.routing.top_k = 2;
  lp.routing.renormalize = true;
  host_matrix<float> y(64, d);
  moe::moe_layer_forward<float>(host_context(1), lp, layer, x.view(), y.view());
  // The id-map semantics by hand: softmax over all 6 logits, top-2, renormalised, merged expert map[e] per slot
  // (two slots in one group call that expert twice, with total weight 1).
  host_matrix<float> fx(1, d);
  double worst = 0;
  for (index_t t = 0; t < 64; ++t) {
    std::vector<double> z(6);
    for (index_t e = 0; e < 6; ++e) {
      z[static_cast<std::size_t>(e)] = 0;
      for (index_t k = 0; k < d; ++k) z[static_cast<std::size_t>(e)] += double(x(t, k)) * double(router(e, k));
    }
    std::vector<index_t> order(6);
    std::iota(order.begin(), order.end(), index_t(0));
    std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) { return z[static_cast<std::size_t>(a)] > z[static_cast<std::size_t>(b)]; });
    const double w0 = 1, w1 = std::exp(z[static_cast<std::size_t>(order[1])] - z[static_cast<std::size_t>(order[0])]);
    std::vector<double> want(d, 0.0);
    for (int slot = 0; slot < 2; ++slot) {
      const index_t g = static_cast<index_t>(groups[static_cast<std::size_t>(order[static_cast<std::size_t>(slot)])]);
      moe::ffn_forward<float>(host_context(1), moe::ffn_params{}, m.out.view().expert(g),
                              moecomp::make_matrix_view<const float>(x.data() + t * d, 1, d), fx.view());
      const double w = (slot == 0 ? w0 : w1) / (w0 + w1);
      for (index_t k = 0; k < d; ++k) want[static_cast<std::size_t>(k)] += w * double(fx(0, k));
    }
    for (index_t k = 0; k < d; ++k) worst = std::max(worst, std::fabs(double(y(t, k)) - want[static_cast<std::size_t>(k)]));
  }
  CHECK(worst < 1e-5);
}

TEST_CASE("bad input is refused with a message naming the argument") {
  using moecomp_test::thrown_message;
  const stack<float> s(4, 25);
  const host_context ctx(1);
  merge::merge_params params;
  merged<float> m(2, 4, false, false);
  const auto run = [&](const std::vector<std::int64_t>& g, const merge::merge_data<float>& data, merged<float>& out) {
    merge::merge_experts<float>(ctx, params, s.view(), labels_view(g), data, out.outputs());
  };
  CHECK(thrown_message([&] { run({0, 2, 0, 2}, {}, m); }).find("groups must cover every id in 0..2") != std::string::npos);
  CHECK(thrown_message([&] { run({0, 1, 0}, {}, m); }).find("groups must have 4 entries") != std::string::npos);
  CHECK(thrown_message([&] { run({0, 1, -1, 0}, {}, m); }).find("groups entries must be group ids") != std::string::npos);
  merged<float> wrong(3, 4, false, false);
  CHECK(thrown_message([&] { run({0, 1, 0, 1}, {}, wrong); }).find("out.experts.w1 must be 2 x") != std::string::npos);
  params.method = merge::merge_method::frequency;
  const std::vector<double> short_f{0.5, 0.5}, negative{0.5, -0.1, 0.3, 0.3};
  merge::merge_data<float> data;
  data.frequencies = moecomp::make_vector_view<const double>(short_f.data(), 2);
  CHECK(thrown_message([&] { run({0, 1, 0, 1}, data, m); }).find("frequencies must have 4 entries") != std::string::npos);
  data.frequencies = moecomp::make_vector_view<const double>(negative.data(), 4);
  CHECK(thrown_message([&] { run({0, 1, 0, 1}, data, m); }).find("frequencies must be finite and >= 0, got -0.1 at expert 1") !=
        std::string::npos);
  CHECK(thrown_message([&] { run({0, 1, 0, 1}, {}, m); }).find("method frequency needs frequencies") != std::string::npos);
  params.method = merge::merge_method::fix_dom;
  CHECK(thrown_message([&] { run({0, 1, 0, 1}, {}, m); }).find("method fix-dom needs calibration tokens x, got none") !=
        std::string::npos);
  params.method = merge::merge_method::learned;
  CHECK(thrown_message([&] { run({0, 1, 0, 1}, {}, m); }).find("method learned needs calibration tokens x") != std::string::npos);
  params.method = merge::merge_method::uniform;
  params.router = merge::router_rule::merged_rows;  // explicit: automatic keeps the id map without a router
  CHECK(thrown_message([&] { run({0, 1, 0, 1}, {}, m); }).find("router rule merged needs the router") != std::string::npos);
  params.router = merge::router_rule::automatic;
  params.method = merge::merge_method::average;
  const std::vector<std::int64_t> dom{1, 1};
  data = {};
  data.dominants = moecomp::make_vector_view<const std::int64_t>(dom.data(), 2);
  CHECK(thrown_message([&] { run({0, 1, 0, 1}, data, m); }).find("dominants entry 0 must be a member of group 0, got expert 1") !=
        std::string::npos);
  const host_matrix<float> x(10, d + 1);
  data = {};
  data.x = x.view();
  CHECK(thrown_message([&] { run({0, 1, 0, 1}, data, m); }).find("x must be tokens x 16") != std::string::npos);
  CHECK(thrown_message([] { merge::parse_merge_method("mean"); }).find("average, frequency, uniform") != std::string::npos);
}

TEST_CASE("the per-element weighted gather shared with the device: sum_i c_i src_i at the gathered neuron, in double") {
  // Two 3 x 4 "W1" pieces (neurons are rows) and their permutations; the same as W2-like pieces (neurons are
  // columns) and as b2 (no gather).
  const std::vector<float> a{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, b{100, 101, 102, 103, 104, 105,
                                                                     106, 107, 108, 109, 110, 111};
  const std::vector<index_t> pa{2, 0, 1}, pb{1, 2, 0}, pc{3, 2, 1, 0};
  moecomp::detail::gather_piece<float> piece;
  piece.count = 2;
  piece.stride = 4;
  piece.src[0] = a.data();
  piece.src[1] = b.data();
  piece.coef[0] = 0.25;
  piece.coef[1] = 0.75;
  piece.perm[0] = pa.data();
  piece.perm[1] = pb.data();
  // Row 0, column 3: a(pa[0] = 2, 3) = 11, b(pb[0] = 1, 3) = 107.
  CHECK(moecomp::detail::gathered_sum(piece, 0, 0, 3) == 0.25 * 11 + 0.75 * 107);
  CHECK(moecomp::detail::gathered_sum(piece, -1, 2, 1) == 0.25 * 9 + 0.75 * 109);
  piece.perm[0] = pc.data();
  piece.perm[1] = nullptr;  // the identity
  CHECK(moecomp::detail::gathered_sum(piece, 1, 1, 0) == 0.25 * 7 + 0.75 * 104);
}

TEST_CASE("fix_dom_score, the token cap and the learned solver shared with the device merges") {
  namespace md = moecomp::merge::detail;
  // r s / (s + eps) with s = (norm_a / (tokens - 1)) norm_b: the host's and the device's argmax read this.
  const double s = 2.0 * 0.25 * 3.0;
  CHECK(md::fix_dom_score(0.5, 2.0, 3.0, 0.25, 1e-7) == 0.5 * (s / (s + 1e-7)));
  CHECK(md::fix_dom_score(0.5, 2.0, 3.0, 0.25, 0.0) == 0.5);
  CHECK(md::fix_dom_score(0.0, 0.0, 3.0, 0.25, 1e-7) == 0.0);  // a constant neuron: 0 with everything
  CHECK(md::fix_dom_score(0.0, 0.0, 3.0, 0.25, 0.0) == -HUGE_VAL);  // NaN (eps 0): never the argmax
  // capped_count is what cap_tokens keeps; a draw on positions picks the same positions as on any values.
  std::vector<index_t> tokens(50), positions(50);
  std::iota(positions.begin(), positions.end(), index_t(0));
  for (index_t i = 0; i < 50; ++i) tokens[static_cast<std::size_t>(i)] = 3 * i + 1;
  for (const index_t cap : {index_t(0), index_t(10), index_t(50), index_t(80)}) {
    const auto kept = md::cap_tokens(tokens, cap, 4, 2), at = md::cap_tokens(positions, cap, 4, 2);
    CHECK(static_cast<index_t>(kept.size()) == md::capped_count(50, cap));
    REQUIRE(kept.size() == at.size());
    for (std::size_t i = 0; i < kept.size(); ++i) CHECK(kept[i] == tokens[static_cast<std::size_t>(at[i])]);
  }
  // The solver on a quadratic over the simplex, L(a) = ||a - c||^2 with c outside it: the projection of c.
  struct quadratic {
    std::vector<double> c;
    double evaluate(const std::vector<double>& a, std::vector<double>* grad) const {
      double l = 0;
      if (grad) grad->assign(a.size(), 0.0);
      for (std::size_t i = 0; i < a.size(); ++i) {
        l += (a[i] - c[i]) * (a[i] - c[i]);
        if (grad) (*grad)[i] = 2 * (a[i] - c[i]);
      }
      return l;
    }
  } problem{{0.9, 0.5, -0.2}};
  merge::merge_params params;
  params.max_iterations = 200;
  params.learned_tolerance = 1e-12;
  const md::learned_outcome out = md::projected_gradient(problem, 3, params);
  const std::vector<double> expected = md::project_to_simplex(problem.c);  // (0.7, 0.3, 0)
  CHECK(out.converged);
  CHECK(out.final <= out.initial);
  for (std::size_t i = 0; i < 3; ++i) CHECK(out.alpha[i] == doctest::Approx(expected[i]).epsilon(1e-9));
  CHECK(expected[0] == doctest::Approx(0.7));
  CHECK(expected[2] == 0.0);
}
