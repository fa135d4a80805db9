// SADMoE's router and dynamic-k inference: the router learns a planted teacher of its own architecture (the
// validation loss falls tenfold, the top-1 expert agrees), its initialisation follows torch.nn.Linear's bounds,
// training is bit-identical at any thread count, and the split FFN run with it is the dense FFN when every
// expert runs (tau = 0, or top-k = E), never runs more experts as tau rises, and costs what Appendix B says.
// The exact comparison with torch is tests/peers/test_train_router_torch.py.
#include <moecomp/cluster/moefication.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/gating/router_training.hpp>
#include <moecomp/moe/dynamic_k.hpp>
#include <moecomp/moe/ffn.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <cmath>
#include <cstring>
#include <vector>

using namespace moecomp;
using moecomp_test::thrown_message;

namespace {

host_matrix<double> random_matrix(index_t r, index_t c, std::uint64_t seed, double scale = 1.0) {
  random_generator rng(seed);
  host_matrix<double> m(r, c);
  for (index_t i = 0; i < r; ++i)
    for (index_t j = 0; j < c; ++j) m(i, j) = scale * rng.normal<double>();
  return m;
}

/// Targets from a teacher router of the trained architecture: y = |W2* relu(W1* z)|.
host_matrix<double> teacher_targets(const host_matrix<double>& z, index_t hidden, index_t experts) {
  const host_matrix<double> w1 = random_matrix(hidden, z.cols(), 11, 1.0 / std::sqrt(static_cast<double>(z.cols())));
  const host_matrix<double> w2 = random_matrix(experts, hidden, 12, 1.0 / std::sqrt(static_cast<double>(hidden)));
  host_matrix<double> y(z.rows(), experts);
  gating::router_training_params p;
  p.hidden = hidden;
  const gating::router_weights_view<const double> teacher{w1.const_view(), {}, w2.const_view(), {}};
  gating::router_scores<double>(host_context(1), p, teacher, z.const_view(), y.view());
  return y;
}

}  // namespace

TEST_CASE("train_router learns a planted teacher router") {
  const index_t T = 2000, d = 12, n = 8, h = 16;
  const host_matrix<double> z = random_matrix(T, d, 1);
  const host_matrix<double> y = teacher_targets(z, h, n);
  gating::router_training_params p;
  p.hidden = h;
  p.epochs = 30;
  p.learning_rate = 3e-3;
  p.batch_size = 32;
  p.schedule = gating::lr_schedule::cosine;
  host_matrix<double> w1(h, d), w2(n, h);
  const gating::router_weights_view<double> w{w1.view(), {}, w2.view(), {}};
  gating::init_router_weights(p, 3, w);
  // The untrained router's validation loss (the last 200 tokens), for scale.
  host_matrix<double> scores(200, n);
  gating::router_scores<double>(host_context(1), p, {w1.const_view(), {}, w2.const_view(), {}},
                                z.const_view().row_range(1800, 200), scores.view());
  double initial = 0;
  for (index_t t = 0; t < 200; ++t)
    for (index_t e = 0; e < n; ++e) initial += (scores(t, e) - y(1800 + t, e)) * (scores(t, e) - y(1800 + t, e));
  initial /= 200.0 * n;
  const gating::router_training_result r = gating::train_router<double>(host_context(2), p, z.const_view(), y.const_view(), w);
  REQUIRE(r.ok());
  CHECK(r.training_tokens == 1800);
  CHECK(r.validation_tokens == 200);
  CHECK(r.iterations == 30 * 57);  // ceil(1800 / 32) steps per epoch
  CHECK(r.logged_steps.size() == 30);
  CHECK(r.validation_loss.back() < initial / 10);
  CHECK(r.validation_loss.back() < r.validation_loss.front());
  CHECK(r.validation_mse == doctest::Approx(r.validation_loss.back()).epsilon(1e-12));
  CHECK(r.top1_agreement > 0.7);  // chance: 1 in 8
}

TEST_CASE("init_router_weights: torch.nn.Linear's bounds, the same weights for the same seed") {
  gating::router_training_params p;
  p.hidden = 32;
  p.bias = true;
  host_matrix<float> w1(32, 100), w2(7, 32), a1(32, 100), a2(7, 32);
  host_vector<float> b1(32), b2(7), c1(32), c2(7);
  gating::init_router_weights<float>(p, 9, {w1.view(), b1.view(), w2.view(), b2.view()});
  gating::init_router_weights<float>(p, 9, {a1.view(), c1.view(), a2.view(), c2.view()});
  double most1 = 0, most2 = 0;
  for (index_t k = 0; k < w1.size(); ++k) most1 = std::max(most1, std::abs(static_cast<double>(w1.data()[k])));
  for (index_t k = 0; k < w2.size(); ++k) most2 = std::max(most2, std::abs(static_cast<double>(w2.data()[k])));
  CHECK(most1 <= 0.1);                      // 1 / sqrt(100)
  CHECK(most1 > 0.09);                      // 3200 draws come close to the bound
  CHECK(most2 <= 1.0 / std::sqrt(32.0));
  CHECK(std::memcmp(w1.data(), a1.data(), sizeof(float) * 3200) == 0);
  CHECK(std::memcmp(b2.data(), c2.data(), sizeof(float) * 7) == 0);
}

TEST_CASE("train_router: bit-identical weights at any thread count, shuffled or not") {
  const index_t T = 700, d = 40, n = 24, h = 20;
  const host_matrix<double> zd = random_matrix(T, d, 5);
  const host_matrix<double> yd = teacher_targets(zd, h, n);
  host_matrix<float> z(T, d), y(T, n);
  for (index_t k = 0; k < z.size(); ++k) z.data()[k] = static_cast<float>(zd.data()[k]);
  for (index_t k = 0; k < y.size(); ++k) y.data()[k] = static_cast<float>(yd.data()[k]);
  for (bool shuffle : {true, false}) {
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3, 7}) {
      gating::router_training_params p;
      p.hidden = h;
      p.bias = true;
      p.epochs = 3;
      p.shuffle = shuffle;
      p.max_grad_norm = 1.0;
      host_matrix<float> w1(h, d), w2(n, h);
      host_vector<float> b1(h), b2(n);
      const gating::router_weights_view<float> w{w1.view(), b1.view(), w2.view(), b2.view()};
      gating::init_router_weights(p, 1, w);
      gating::train_router<float>(host_context(threads), p, z.const_view(), y.const_view(), w);
      std::vector<float> all(w1.data(), w1.data() + w1.size());
      all.insert(all.end(), w2.data(), w2.data() + w2.size());
      all.insert(all.end(), b1.data(), b1.data() + h);
      results.push_back(all);
    }
    for (std::size_t k = 1; k < results.size(); ++k) CHECK(results[k] == results[0]);
  }
}

TEST_CASE("train_router: misuse is refused naming the parameter") {
  const host_matrix<double> z = random_matrix(100, 4, 1), y = random_matrix(100, 3, 2);
  gating::router_training_params p;
  p.hidden = 5;
  host_matrix<double> w1(5, 4), w2(3, 5);
  const gating::router_weights_view<double> w{w1.view(), {}, w2.view(), {}};
  p.batch_size = 95;  // 90 training tokens
  CHECK(thrown_message([&] { gating::train_router<double>(host_context(1), p, z.const_view(), y.const_view(), w); })
            .find("must fill at least one batch") != std::string::npos);
  p.batch_size = 10;
  p.objective = gating::router_objective::moefication;  // y has negative entries
  CHECK(thrown_message([&] { gating::train_router<double>(host_context(1), p, z.const_view(), y.const_view(), w); })
            .find(">= 0 for the moefication objective") != std::string::npos);
  p.objective = gating::router_objective::output_norm;
  p.hidden = 6;
  CHECK(thrown_message([&] { gating::train_router<double>(host_context(1), p, z.const_view(), y.const_view(), w); })
            .find("weights.w1 must be 6 x 4") != std::string::npos);
}

TEST_CASE("dynamic_k_forward: all experts give the dense FFN; fewer as tau rises; Appendix B's cost") {
  const index_t d = 16, d_ff = 64, E = 8, T = 300, h = 12;
  const host_matrix<double> w1 = random_matrix(d_ff, d, 21, 0.3), w3 = random_matrix(d_ff, d, 22, 0.3),
                            w2 = random_matrix(d, d_ff, 23, 0.3), x = random_matrix(T, d, 24);
  // The split: E experts of 8 neurons.
  host_matrix<double> e1(d_ff, d), e3(d_ff, d), e2(E * d, d_ff / E), router(E, d);
  host_vector<std::int64_t> labels(d_ff);
  host_vector<index_t> perm(d_ff);
  cluster::kmeans_params kp;
  kp.clusters = E;
  cluster::moefication_split<double>(host_context(1), kp, {w1.const_view(), w3.const_view(), w2.const_view(), {}, {}},
                                     {split_rows(e1.view(), E), split_rows(e3.view(), E), split_rows(e2.view(), E), {},
                                      {}, router.view(), labels.view(), perm.view()});
  const moe::ffn_expert_stack_view<double> experts{split_rows(e1.const_view(), E), split_rows(e3.const_view(), E),
                                                   split_rows(e2.const_view(), E), {}, {}, {}};
  host_matrix<double> dense(T, d);
  moe::ffn_forward<double>(host_context(1), moe::ffn_params{}, {w1.const_view(), w3.const_view(), w2.const_view(), {}, {}, {}},
                           x.const_view(), dense.view());
  const host_matrix<double> r1 = random_matrix(h, d, 25, 0.3), r2 = random_matrix(E, h, 26, 0.3);
  const gating::router_weights_view<const double> trained{r1.const_view(), {}, r2.const_view(), {}};
  auto worst = [&](const host_matrix<double>& y) {
    double w = 0;
    for (index_t k = 0; k < y.size(); ++k) w = std::max(w, std::abs(y.data()[k] - dense.data()[k]));
    return w;
  };
  moe::dynamic_k_params p;
  p.routing.tau = 0.0;  // every score >= 0 = 0 max: every expert runs
  host_matrix<double> y(T, d);
  moe::dynamic_k_result r = moe::dynamic_k_forward<double>(host_context(2), p, experts, trained, x.const_view(), y.view());
  CHECK(r.mean_experts == 8.0);
  CHECK(worst(y) < 1e-12);
  // Appendix B with all 8 experts: the dense FFN's cost plus the router's.
  const double ffn_cost = 3.0 * d * d_ff, router_cost = h * (d + E);
  CHECK(r.cost.ratio == doctest::Approx(1.0 + router_cost / ffn_cost).epsilon(1e-12));
  p.routing.rule = gating::routing_rule::top_k;
  p.routing.top_k = E;
  r = moe::dynamic_k_forward<double>(host_context(1), p, experts, trained, x.const_view(), y.view());
  CHECK(worst(y) < 1e-12);
  p.routing.rule = gating::routing_rule::threshold;
  double previous = 9;
  for (double tau : {0.1, 0.3, 0.5, 0.8, 1.0}) {
    p.routing.tau = tau;
    r = moe::dynamic_k_forward<double>(host_context(1), p, experts, trained, x.const_view(), y.view());
    CHECK(r.mean_experts <= previous);
    CHECK(r.min_experts >= 1);
    CHECK(r.cost.ratio == doctest::Approx(r.mean_experts / E + router_cost / ffn_cost).epsilon(1e-12));
    previous = r.mean_experts;
  }
  CHECK(previous == 1.0);  // tau = 1: the top expert alone (ties aside)
}
