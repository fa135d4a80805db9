// Routing (<moecomp/gating/routing.hpp>): hand-worked tokens for every rule, ties to the lowest expert
// index, the three layouts agreeing (dense, fixed-K with the sentinel E, CSR), min/max k, thread-count
// independence, the argument checks. Against torch and the reference code: tests/peers/test_gate_torch.py.
#include <moecomp/gating/routing.hpp>
#include <moecomp/gating/sadmoe.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using moecomp::index_t;
namespace gating = moecomp::gating;

gating::routing_params rule(gating::routing_rule r, gating::score_function f = gating::score_function::none) {
  gating::routing_params p;
  p.rule = r;
  p.scores = f;
  return p;
}

/// Dense weights of one token of logits.
std::vector<double> route_one(const gating::routing_params& p, std::vector<double> logits, std::vector<double> bias = {}) {
  const auto e = static_cast<index_t>(logits.size());
  std::vector<double> w(logits.size());
  (void)gating::route_dense<double>(moecomp::host_context(1), p, moecomp::make_matrix_view(logits.data(), 1, e),
                                    moecomp::make_vector_view(bias.data(), static_cast<index_t>(bias.size())),
                                    moecomp::make_matrix_view(w.data(), 1, e));
  return w;
}

}  // namespace

TEST_CASE("top-k: the k largest scores, ties to the lowest index, renormalised on request") {
  auto p = rule(gating::routing_rule::top_k);
  p.top_k = 2;
  // Scores 3, 5, 5, 1: experts 1 and 2 (tied with each other, both in); with 3, 5, 3, 3 and k = 2: 1 and 0.
  CHECK(route_one(p, {3, 5, 5, 1}) == std::vector<double>{0, 5, 5, 0});
  CHECK(route_one(p, {3, 5, 3, 3}) == std::vector<double>{3, 5, 0, 0});
  p.renormalize = true;
  CHECK(route_one(p, {3, 5, 3, 3}) == std::vector<double>{3.0 / 8, 5.0 / 8, 0, 0});
  p.scores = gating::score_function::softmax;  // softmax(0, ln 3) = (1/4, 3/4); top-1 of it
  p.top_k = 1;
  p.renormalize = false;
  const auto w = route_one(p, {0.0, std::log(3.0)});
  CHECK(w[0] == 0.0);
  CHECK(w[1] == doctest::Approx(0.75).epsilon(1e-15));
}

TEST_CASE("the dynamic rules: SADMoE's tau (paper and code forms), cumulative share, top-p, min and max k") {
  const std::vector<double> s = {0.1, 0.4, 0.2, 0.3};  // max 0.4
  auto p = rule(gating::routing_rule::threshold);
  p.tau = 0.5;  // s >= 0.2: experts 1, 2, 3, weight 1
  CHECK(route_one(p, s) == std::vector<double>{0, 1, 1, 1});
  p.rule = gating::routing_rule::threshold_code;  // s >= 0.5 x 0.4 = 0.2 as well; tau 0.3 -> s >= 0.28
  p.tau = 0.3;
  CHECK(route_one(p, s) == std::vector<double>{0, 1, 0, 1});
  p.rule = gating::routing_rule::cumulative;  // shares 0.4, 0.7, 0.9: the first above 0.6 is 0.7 (two experts)
  p.tau = 0.6;
  CHECK(route_one(p, s) == std::vector<double>{0, 1, 0, 1});
  p.rule = gating::routing_rule::top_p;  // cumulative 0.4, 0.7: 0.7 crosses 0.5, kept; weights unchanged
  p.tau = 0.5;
  CHECK(route_one(p, s) == std::vector<double>{0, 0.4, 0, 0.3});
  p.rule = gating::routing_rule::threshold;
  p.tau = 1.0;  // only the maximum ...
  p.min_k = 3;  // ... raised to three experts
  CHECK(route_one(p, s) == std::vector<double>{0, 1, 1, 1});
  p.tau = 0.0;  // everyone ...
  p.min_k = 0;
  p.max_k = 2;  // ... cut to the two largest
  CHECK(route_one(p, s) == std::vector<double>{0, 1, 0, 1});
}

TEST_CASE("DeepSeek-V3: the bias steers the choice only; groups by their top-2 sum; weights normalised and scaled") {
  // 4 experts in 2 groups. sigmoid(0) = 0.5 everywhere; the bias makes expert 3 (group 1) the choice.
  auto p = rule(gating::routing_rule::deepseek_v3);
  p.n_group = 2;
  p.topk_group = 1;
  p.top_k = 1;
  p.renormalize = true;
  p.routed_scaling_factor = 2.5;
  const auto w = route_one(p, {0, 0, 0, 0}, {0.0, 0.0, 0.0, 0.1});
  CHECK(w[0] == 0.0);
  CHECK(w[3] == doctest::Approx(2.5).epsilon(1e-15));  // 0.5 / (0.5 + 1e-20) x 2.5: the uncorrected score
}

TEST_CASE_TEMPLATE("the dense, fixed-K and CSR layouts agree, at any thread count", A, float, double) {
  const index_t t = 300, e = 10;
  moecomp::host_matrix<A> logits(t, e);
  moecomp::random_generator rng(5);
  for (index_t i = 0; i < t; ++i)
    for (index_t j = 0; j < e; ++j) logits(i, j) = static_cast<A>(rng.normal<double>());
  auto p = rule(gating::routing_rule::top_p, gating::score_function::softmax);
  p.tau = 0.8;
  const index_t k = gating::max_experts_per_token(p, e);
  CHECK(k == e);
  moecomp::host_matrix<A> dense(t, e), dense3(t, e), fixed_w(t, k);
  moecomp::host_matrix<std::int64_t> fixed_ids(t, k);
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(t + 1)), ids(static_cast<std::size_t>(t * k));
  std::vector<A> weights(ids.size());
  const moecomp::vector_view<const A> no_bias;
  const auto r1 = gating::route_dense<A>(moecomp::host_context(1), p, logits.const_view(), no_bias, dense.view());
  (void)gating::route_dense<A>(moecomp::host_context(3), p, logits.const_view(), no_bias, dense3.view());
  const auto r2 = gating::route_fixed<A>(moecomp::host_context(2), p, logits.const_view(), no_bias, fixed_ids.view(),
                                         fixed_w.view());
  const auto r3 = gating::route_csr<A>(moecomp::host_context(2), p, logits.const_view(), no_bias,
                                       moecomp::make_vector_view(offsets.data(), t + 1),
                                       moecomp::make_vector_view(ids.data(), t * k),
                                       moecomp::make_vector_view(weights.data(), t * k));
  CHECK(r1.selected == r2.selected);
  CHECK(r1.selected == r3.selected);
  CHECK(offsets[static_cast<std::size_t>(t)] == r1.selected);
  for (index_t i = 0; i < t; ++i) {
    index_t used = 0;
    for (index_t q = 0; q < k; ++q) {
      const std::int64_t id = fixed_ids(i, q);
      if (id == e) {  // the sentinel: weight 0, and every later slot unused too
        CHECK(fixed_w(i, q) == A(0));
        continue;
      }
      ++used;
      CHECK(dense(i, id) == fixed_w(i, q));
      CHECK(ids[static_cast<std::size_t>(offsets[static_cast<std::size_t>(i)] + q)] == id);
    }
    CHECK(offsets[static_cast<std::size_t>(i + 1)] - offsets[static_cast<std::size_t>(i)] == used);
    for (index_t j = 0; j < e; ++j) CHECK(dense(i, j) == dense3(i, j));
  }
  CHECK(r1.experts_per_token_mean == doctest::Approx(double(r1.selected) / double(t)));
}

TEST_CASE("top-k and the tau rules select exactly what a full sort selects, ties included") {
  // The fast selection ranks only the experts at or above a bound; here every choice is checked against a
  // stable sort of (score descending, index ascending) of the same logits, on data with many exact ties
  // (logits on a grid of 5 values) and without, for expert counts that k does and does not divide, k past
  // 64 and k = E. Score "none" makes the reference's scores the logits themselves; softmax and sigmoid are
  // increasing, so they select the same experts from these well-separated logits.
  moecomp::random_generator rng(17);
  for (const index_t e : {1, 7, 16, 64, 130}) {
    for (const bool grid : {true, false}) {
      const index_t t = 120;
      moecomp::host_matrix<double> logits(t, e);
      for (index_t i = 0; i < t; ++i)
        for (index_t j = 0; j < e; ++j)
          logits(i, j) = grid ? static_cast<double>(rng.uniform_index(5)) - 2.0 : rng.normal<double>();
      auto reference = [&](index_t i) {
        std::vector<index_t> order(static_cast<std::size_t>(e));
        for (index_t j = 0; j < e; ++j) order[static_cast<std::size_t>(j)] = j;
        std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) { return logits(i, a) > logits(i, b); });
        return order;
      };
      for (const auto f : {gating::score_function::none, gating::score_function::softmax, gating::score_function::sigmoid}) {
        for (const index_t k : {index_t(1), index_t(3), index_t(8), index_t(65), e}) {
          if (k > e) continue;
          auto p = rule(gating::routing_rule::top_k, f);
          p.top_k = k;
          moecomp::host_matrix<std::int64_t> ids(t, k);
          moecomp::host_matrix<double> w(t, k);
          (void)gating::route_fixed<double>(moecomp::host_context(2), p, logits.const_view(), {}, ids.view(), w.view());
          for (index_t i = 0; i < t; ++i) {
            const auto order = reference(i);
            for (index_t q = 0; q < k; ++q) {
              CAPTURE(e);
              CAPTURE(k);
              CAPTURE(i);
              CHECK(ids(i, q) == order[static_cast<std::size_t>(q)]);
            }
          }
        }
        for (const auto r : {gating::routing_rule::threshold, gating::routing_rule::threshold_code}) {
          for (const index_t max_k : {index_t(0), index_t(2)}) {
            auto p = rule(r, f);
            p.tau = 0.3;
            p.max_k = std::min(max_k, e);
            p.min_k = std::min(index_t(2), p.max_k > 0 ? p.max_k : e);
            const index_t k = gating::max_experts_per_token(p, e);
            moecomp::host_matrix<std::int64_t> ids(t, k);
            moecomp::host_matrix<double> w(t, k);
            (void)gating::route_fixed<double>(moecomp::host_context(1), p, logits.const_view(), {}, ids.view(), w.view());
            for (index_t i = 0; i < t; ++i) {
              // The reference: the sorted prefix whose scores pass the rule's bound, then min_k and max_k.
              const auto order = reference(i);
              std::vector<double> s(static_cast<std::size_t>(e));
              double top = -1e300;
              for (index_t j = 0; j < e; ++j) {
                const double v = logits(i, j);
                s[static_cast<std::size_t>(j)] = f == gating::score_function::sigmoid ? 1.0 / (1.0 + std::exp(-v)) : v;
                top = std::max(top, s[static_cast<std::size_t>(j)]);
              }
              if (f == gating::score_function::softmax) {  // s_i >= c max s  <=>  e^(l_i - max l) >= c
                for (auto& v : s) v = std::exp(v - top);
                top = 1.0;
              }
              const double bound = (r == gating::routing_rule::threshold ? p.tau : 1.0 - p.tau) * top;
              index_t taken = 0;
              while (taken < e && s[static_cast<std::size_t>(order[static_cast<std::size_t>(taken)])] >= bound) ++taken;
              taken = std::max(taken, p.min_k);
              if (p.max_k > 0) taken = std::min(taken, p.max_k);
              for (index_t q = 0; q < k; ++q) {
                CAPTURE(e);
                CAPTURE(i);
                CHECK(ids(i, q) == (q < taken ? order[static_cast<std::size_t>(q)] : e));
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("float logits give the double path's answers bit for bit (the AVX-512 selection path)") {
  // On AVX-512 targets float logits take routing_simd.hpp's vector selection (top-k with k <= 16, the
  // threshold rules on raw logits, and a dense threshold row with no ranking); double logits always take the
  // portable path. Both select on the same values and compute weights in double, so the float answers must be
  // the double answers rounded once: ids equal, weights equal to float(double weight). The data has exact ties
  // (a grid of 5 values), +0.0 against -0.0 (equal, so the lower index wins), rows where every expert ties
  // (more than 16 candidates: the vector path hands the token to the portable one), expert counts below, at
  // and above 16, logits on the float rounding of a threshold, and 300 tokens (a partial tile and a partial block of 16) on 1 and 2 threads.
  // (Renormalising raw logits can divide by a zero sum: NaN on both paths, which counts as agreement.)
  auto same = [](float x, double reference) {
    return x == static_cast<float>(reference) || (std::isnan(x) && std::isnan(reference));
  };
  moecomp::random_generator rng(23);
  const index_t t = 300;
  for (const index_t e : {2, 7, 16, 33, 64, 100}) {
    moecomp::host_matrix<float> logits(t, e);
    moecomp::host_matrix<double> wide(t, e);
    for (index_t i = 0; i < t; ++i)
      for (index_t j = 0; j < e; ++j) {
        // the fifth kind puts logits on float(tau * top) for tau = 0.3 and 0.7 (the paper's and the code's
        // bounds), which round below the double bound and must not pass, and on the float just above
        const float near_bound[4] = {1.5f, static_cast<float>(0.3 * 1.5), static_cast<float>(0.7 * 1.5),
                                     std::nextafter(static_cast<float>(0.3 * 1.5), 2.0f)};
        const int kind = static_cast<int>(i % 5);
        logits(i, j) = kind == 0   ? static_cast<float>(rng.normal<double>())
                       : kind == 1 ? static_cast<float>(rng.uniform_index(5)) - 2.0f
                       : kind == 2 ? (rng.uniform_index(2) == 0 ? -0.0f : 0.0f) - static_cast<float>(rng.uniform_index(2))
                       : kind == 3 ? 1.5f  // every expert ties
                                   : (j < 4 ? near_bound[j] : -2.0f);
        wide(i, j) = static_cast<double>(logits(i, j));
      }
    std::vector<gating::routing_params> cases;
    for (const auto f : {gating::score_function::none, gating::score_function::softmax, gating::score_function::sigmoid})
      for (const bool renormalize : {false, true})
        for (const index_t k : {index_t(1), index_t(2), index_t(3), index_t(5), index_t(8), index_t(16), e}) {
          if (k > e) continue;
          auto p = rule(gating::routing_rule::top_k, f);
          p.top_k = k;
          p.renormalize = renormalize;
          cases.push_back(p);
        }
    for (const auto r : {gating::routing_rule::threshold, gating::routing_rule::threshold_code})
      for (const double tau : {0.0, 0.3, 0.9, 1.0})
        for (const index_t min_k : {index_t(0), index_t(2)})
          for (const index_t max_k : {index_t(0), index_t(3)}) {
            auto p = rule(r);
            p.tau = tau;
            p.min_k = std::min(min_k, e);
            p.max_k = std::min(max_k, e);
            cases.push_back(p);
          }
    for (const auto& p : cases) {
      CAPTURE(e);
      const std::string rule_name = gating::to_string(p.rule), score_name = gating::to_string(p.scores);
      CAPTURE(rule_name);
      CAPTURE(score_name);
      CAPTURE(p.renormalize);
      CAPTURE(p.top_k);
      CAPTURE(p.tau);
      CAPTURE(p.min_k);
      CAPTURE(p.max_k);
      const index_t k = gating::max_experts_per_token(p, e);
      for (const int threads : {1, 2}) {
        const moecomp::host_context ctx(threads);
        moecomp::host_matrix<float> dense(t, e), fixed_w(t, k);
        moecomp::host_matrix<double> dense_ref(t, e), fixed_w_ref(t, k);
        moecomp::host_matrix<std::int64_t> fixed_ids(t, k), fixed_ids_ref(t, k);
        const auto r = gating::route_dense<float>(ctx, p, logits.const_view(), {}, dense.view());
        const auto r_ref = gating::route_dense<double>(ctx, p, wide.const_view(), {}, dense_ref.view());
        (void)gating::route_fixed<float>(ctx, p, logits.const_view(), {}, fixed_ids.view(), fixed_w.view());
        (void)gating::route_fixed<double>(ctx, p, wide.const_view(), {}, fixed_ids_ref.view(), fixed_w_ref.view());
        CHECK(r.selected == r_ref.selected);
        CHECK(r.min_experts == r_ref.min_experts);
        CHECK(r.max_experts == r_ref.max_experts);
        index_t mismatches = 0, first_row = -1;
        for (index_t i = 0; i < t; ++i) {
          const index_t before = mismatches;
          for (index_t j = 0; j < e; ++j) mismatches += same(dense(i, j), dense_ref(i, j)) ? 0 : 1;
          for (index_t q = 0; q < k; ++q) {
            mismatches += fixed_ids(i, q) == fixed_ids_ref(i, q) ? 0 : 1;
            mismatches += same(fixed_w(i, q), fixed_w_ref(i, q)) ? 0 : 1;
          }
          if (first_row < 0 && mismatches > before) first_row = i;
        }
        CAPTURE(first_row);
        CHECK(mismatches == 0);
      }
    }
  }
}

TEST_CASE("routing: bad input is refused with a message naming the argument") {
  std::vector<double> logits(4 * 6, 0.0), out(4 * 6);
  const auto l = moecomp::make_matrix_view(static_cast<const double*>(logits.data()), 4, 6);
  const auto w = moecomp::make_matrix_view(out.data(), 4, 6);
  const moecomp::host_context ctx(1);
  const moecomp::vector_view<const double> none;
  auto p = rule(gating::routing_rule::top_k);
  p.top_k = 7;
  CHECK_THROWS_WITH_AS(gating::route_dense<double>(ctx, p, l, none, w),
                       "route_dense: params.top_k must be in [1, 6] (the experts), got 7", moecomp::invalid_argument);
  p = rule(gating::routing_rule::threshold);
  p.tau = -0.1;
  CHECK_THROWS_WITH_AS(gating::route_dense<double>(ctx, p, l, none, w), "route_dense: params.tau must be in [0, 1], got -0.1",
                       moecomp::invalid_argument);
  p = rule(gating::routing_rule::deepseek_v3);
  p.n_group = 4;
  p.top_k = 1;
  CHECK_THROWS_WITH_AS(gating::route_dense<double>(ctx, p, l, none, w),
                       "route_dense: params.n_group must divide the 6 experts, got 4", moecomp::invalid_argument);
  logits[9] = std::nan("");
  p = rule(gating::routing_rule::top_k);
  CHECK_THROWS_WITH_AS(gating::route_dense<double>(ctx, p, l, none, w), "route_dense: logits must be finite, got nan at (1, 3)",
                       moecomp::invalid_argument);
  CHECK(gating::parse_routing_rule("top_p") == gating::routing_rule::top_p);
}

TEST_CASE("SADMoE extras: the square Hoyer measure and the Appendix B FLOPs model by closed form") {
  // Hoyer: n for equal magnitudes, 1 for a single non-zero, 0 for a zero row (the 1e-15 guard).
  const std::vector<double> a = {1, -1, 1, -1, 0, 0, 3, 0, 0, 0, 0, 0};
  std::vector<double> h(3);
  gating::square_hoyer<double>(moecomp::host_context(2), moecomp::make_matrix_view(a.data(), 3, 4),
                               moecomp::make_vector_view(h.data(), 3));
  CHECK(h[0] == doctest::Approx(4.0).epsilon(1e-14));
  CHECK(h[1] == doctest::Approx(1.0).epsilon(1e-14));
  CHECK(h[2] == 0.0);
  // d = 768, e = 4, n = 128 experts, k = 8, router width 128: ratio = k / n + d_h (1 + n / d) / (2 e d).
  const auto c = gating::dynamic_k_flops(768, 4.0, 128, 8.0, 128);
  CHECK(c.ffn == 2.0 * 4 * 768 * 768);
  CHECK(c.expert == doctest::Approx(c.ffn / 128));
  CHECK(c.router == 128.0 * (768 + 128));
  CHECK(c.ratio == doctest::Approx(8.0 / 128 + 128.0 * (1 + 128.0 / 768) / (2 * 4 * 768)).epsilon(1e-14));
  CHECK_THROWS_WITH_AS(gating::dynamic_k_flops(768, 4.0, 128, 200.0, 128), "dynamic_k_flops: k must be in [0, 128], got 200",
                       moecomp::invalid_argument);
}

TEST_CASE("DeepSeek group rules: the shared MOECOMP_HOST_DEVICE pieces (group score, masking, weights)") {
  namespace rules = moecomp::gating::detail;
  // A group's two largest, a repeated maximum counting twice; V3 sums them, V2 takes the largest.
  rules::group_top_two t = rules::empty_top_two();
  for (double v : {3.0, 1.0, 3.0, -2.0}) rules::add_to_top_two(t, v);
  CHECK(t.first == 3.0);
  CHECK(t.second == 3.0);
  CHECK(rules::group_score(t, true) == 6.0);
  CHECK(rules::group_score(t, false) == 3.0);
  // Merging any split of the values (the device's warp reduction) gives the sequential result.
  moecomp::random_generator rng(21);
  for (int trial = 0; trial < 2000; ++trial) {
    const auto n = static_cast<index_t>(1 + rng.uniform_index(12));
    std::vector<double> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = static_cast<double>(rng.uniform_index(5)) - 2.0;  // many ties
    rules::group_top_two all = rules::empty_top_two(), merged = rules::empty_top_two();
    for (double x : v) rules::add_to_top_two(all, x);
    for (index_t first = 0; first < n;) {  // random parts
      const index_t len = std::min<index_t>(n - first, static_cast<index_t>(1 + rng.uniform_index(4)));
      rules::group_top_two part = rules::empty_top_two();
      for (index_t j = first; j < first + len; ++j) rules::add_to_top_two(part, v[static_cast<std::size_t>(j)]);
      merged = trial % 2 ? rules::merge_top_two(merged, part) : rules::merge_top_two(part, merged);
      first += len;
    }
    std::vector<double> sorted = v;
    std::sort(sorted.begin(), sorted.end(), [](double a, double b) { return a > b; });
    CHECK(all.first == sorted[0]);
    CHECK(all.second == (n > 1 ? sorted[1] : -static_cast<double>(INFINITY)));
    CHECK(merged.first == all.first);
    CHECK(merged.second == all.second);
  }
  // Dropped groups' keys become 0.0 (HF's mask), kept keys stay, negative ones too.
  CHECK(rules::masked_group_key(-0.5, false) == 0.0);
  CHECK(rules::masked_group_key(-0.5, true) == -0.5);
  CHECK(rules::masked_group_key(0.7, true) == 0.7);
  // The weights: V3 normalises (with renormalize) and then scales; V2 does one or the other.
  const double w = 0.3, sum = 0.8;
  CHECK(rules::group_rule_weight(gating::routing_rule::deepseek_v3, w, sum, 4, true, 2.5) == w / (sum + 1e-20) * 2.5);
  CHECK(rules::group_rule_weight(gating::routing_rule::deepseek_v3, w, sum, 4, false, 2.5) == w * 2.5);
  CHECK(rules::group_rule_weight(gating::routing_rule::group_limited_greedy, w, sum, 4, true, 2.5) == w / (sum + 1e-20));
  CHECK(rules::group_rule_weight(gating::routing_rule::group_limited_greedy, w, sum, 1, true, 2.5) == w * 2.5);
  CHECK(rules::group_rule_weight(gating::routing_rule::group_limited_greedy, w, sum, 4, false, 2.5) == w * 2.5);
  // route_fixed's DeepSeek-V3 token equals a transcription built from these pieces: 8 experts, 4 groups of 2,
  // 2 kept (groups 1 and 3), top-4, a bias that makes a kept key negative: it ranks below the dropped groups'
  // 0.0 keys, so the fourth expert is expert 0 of a dropped group (HF's mask), with its own score as weight.
  const std::vector<double> logits = {2.0, -1.0, 0.5, 0.4, -3.0, -2.5, 1.0, 1.2};
  const std::vector<double> bias = {0.0, -1.2, 0.1, 0.0, 0.0, 0.0, 0.0, -0.9};
  auto p = rule(gating::routing_rule::deepseek_v3);
  p.n_group = 4;
  p.topk_group = 2;
  p.top_k = 4;
  p.renormalize = true;
  p.routed_scaling_factor = 2.0;
  std::vector<std::int64_t> ids(4);
  std::vector<double> weights(4);
  (void)gating::route_fixed<double>(moecomp::host_context(1), p, moecomp::make_matrix_view(logits.data(), 1, 8),
                                    moecomp::make_vector_view(bias.data(), 8), moecomp::make_matrix_view(ids.data(), 1, 4),
                                    moecomp::make_matrix_view(weights.data(), 1, 4));
  std::vector<double> s(8), key(8), score(4);
  for (std::size_t j = 0; j < 8; ++j) {
    s[j] = 1.0 / (1.0 + std::exp(-logits[j]));
    key[j] = s[j] + bias[j];
  }
  for (std::size_t g = 0; g < 4; ++g) {
    rules::group_top_two two = rules::empty_top_two();
    rules::add_to_top_two(two, key[2 * g]);
    rules::add_to_top_two(two, key[2 * g + 1]);
    score[g] = rules::group_score(two, true);
  }
  std::vector<std::size_t> groups = {0, 1, 2, 3};
  std::stable_sort(groups.begin(), groups.end(), [&](std::size_t a, std::size_t b) { return score[a] > score[b]; });
  for (std::size_t j = 0; j < 8; ++j)
    key[j] = rules::masked_group_key(key[j], j / 2 == groups[0] || j / 2 == groups[1]);
  std::vector<std::size_t> order = {0, 1, 2, 3, 4, 5, 6, 7};
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return key[a] > key[b]; });
  CHECK(order[0] == 6);
  CHECK(order[1] == 2);
  CHECK(order[2] == 3);
  CHECK(order[3] == 0);
  const double total = s[order[0]] + s[order[1]] + s[order[2]] + s[order[3]];
  for (std::size_t q = 0; q < 4; ++q) {
    CHECK(ids[q] == static_cast<std::int64_t>(order[q]));
    CHECK(weights[q] == doctest::Approx(rules::group_rule_weight(p.rule, s[order[q]], total, 4, true, 2.0)).epsilon(1e-14));
  }
}
