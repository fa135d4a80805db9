// k-means (Lloyd): a hand-computed run, planted clusters, scikit-learn's stopping rules, empty-cluster
// re-seeding, k-means++ and random starts, restarts, sample weights, determinism across thread counts, and
// bad input; balanced k-means; the MoEfication split. The agreement with scikit-learn, scipy and POT is
// tests/peers/test_kmeans_sklearn.py.
#include <moecomp/cluster/kmeans.hpp>
#include <moecomp/cluster/moefication.hpp>
#include <moecomp/cluster/detail/kmeans_rules.hpp>
#include <moecomp/cluster/detail/kmeans_balanced_auction.hpp>
#include <moecomp/cluster/detail/kmeans_transport.hpp>
#include <moecomp/ot/auction_assignment.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace cluster = moecomp::cluster;
using moecomp::host_context;
using moecomp::host_matrix;
using moecomp::host_vector;
using moecomp::index_t;
using moecomp::matrix_view;
using moecomp::vector_view;
using moecomp_test::thrown_message;

namespace {

template <class T>
struct fit {
  host_matrix<T> centers;
  host_vector<std::int64_t> labels;
  host_vector<index_t> sizes;
  cluster::kmeans_result result;
};

template <class T>
fit<T> run(const host_context& ctx, const cluster::kmeans_params& params, const host_matrix<T>& x,
           const host_matrix<T>* start = nullptr, const std::vector<T>* weights = nullptr) {
  fit<T> out{host_matrix<T>(params.clusters, x.cols()), host_vector<std::int64_t>(x.rows()),
             host_vector<index_t>(params.clusters), {}};
  if (start) out.centers = *start;
  const vector_view<const T> w =
      weights ? vector_view<const T>(weights->data(), static_cast<index_t>(weights->size())) : vector_view<const T>();
  out.result = cluster::kmeans<T>(ctx, params, x.const_view(), w, out.centers.view(), out.labels.view(), out.sizes.view());
  return out;
}

/// `clusters` blobs of `per` points in d dimensions, centre c at 10 c along every axis, unit noise.
template <class T>
host_matrix<T> blobs(index_t clusters, index_t per, index_t d, std::uint64_t seed) {
  host_matrix<T> x(clusters * per, d);
  moecomp::random_generator rng(seed);
  for (index_t c = 0; c < clusters; ++c)
    for (index_t p = 0; p < per; ++p)
      for (index_t j = 0; j < d; ++j) x(c * per + p, j) = static_cast<T>(10.0 * static_cast<double>(c) + rng.normal<double>());
  return x;
}

cluster::kmeans_params given(index_t k) {
  cluster::kmeans_params p;
  p.clusters = k;
  p.init = cluster::kmeans_init::given;
  return p;
}

}  // namespace

TEST_CASE("kmeans: one Lloyd run computed by hand") {
  // Points 0, 1, 2 and 10, 11 on a line, starting centres 0 and 1. Iteration 1: {0} and {1, 2, 10, 11}
  // (2 is closer to 1), centres 0 and 6. Iteration 2: {0, 1, 2} and {10, 11},
  // centres 1 and 10.5. Iteration 3: no label changes: stop, ok, 3 iterations (scikit-learn's n_iter_).
  host_matrix<double> x(5, 1);
  const double values[] = {0, 1, 2, 10, 11};
  for (index_t i = 0; i < 5; ++i) x(i, 0) = values[i];
  host_matrix<double> start(2, 1);
  start(0, 0) = 0;
  start(1, 0) = 1;
  auto params = given(2);
  params.tolerance = 0;
  const fit<double> f = run(host_context(1), params, x, &start);
  CHECK(f.centers(0, 0) == 1.0);
  CHECK(f.centers(1, 0) == 10.5);
  CHECK(std::vector<std::int64_t>(f.labels.data(), f.labels.data() + 5) == std::vector<std::int64_t>{0, 0, 0, 1, 1});
  CHECK(f.sizes[0] == 3);
  CHECK(f.sizes[1] == 2);
  CHECK(f.result.ok());
  CHECK(f.result.iterations == 3);
  CHECK(f.result.criterion == 0.0);
  CHECK(f.result.inertia == 1.0 + 0.0 + 1.0 + 0.25 + 0.25);
  // With a tolerance: the shifts are 25 (iteration 1) and 1 + 4.5^2 = 21.25 (iteration 2), and the
  // tolerance is scaled by the variance of x (22.16): tol 1.1 (24.376) stops at iteration 2 on the shift,
  // and the final assignment still matches the centres.
  params.tolerance = 1.1;
  const fit<double> early = run(host_context(1), params, x, &start);
  CHECK(early.result.iterations == 2);
  CHECK(early.result.criterion == 21.25);
  CHECK(early.result.ok());
  CHECK(std::vector<std::int64_t>(early.labels.data(), early.labels.data() + 5) ==
        std::vector<std::int64_t>{0, 0, 0, 1, 1});
  // One iteration allowed: the limit is reported.
  params.tolerance = 0;
  params.max_iterations = 1;
  const fit<double> limited = run(host_context(1), params, x, &start);
  CHECK(limited.result.status == moecomp::status::iteration_limit);
  CHECK(limited.centers(1, 0) == 6.0);
}

TEST_CASE_TEMPLATE("kmeans: planted blobs are recovered from k-means++ and from random rows", T, float, double) {
  const auto x = blobs<T>(4, 50, 3, 11);
  for (auto init : {cluster::kmeans_init::kmeans_plus_plus, cluster::kmeans_init::random_rows}) {
    CAPTURE(std::string(cluster::to_string(init)));
    cluster::kmeans_params p;
    p.clusters = 4;
    p.init = init;
    // A random start puts the 4 centres in 4 different blobs with probability (150 100 50) / (199 198 197),
    // about 1 in 10: random rows need many restarts (scikit-learn runs 10), k-means++ almost never more
    // than one.
    p.restarts = init == cluster::kmeans_init::random_rows ? 40 : 2;
    p.seed = 3;
    const fit<T> f = run(host_context(), p, x);
    // Every blob is one cluster, of 50 points.
    std::set<std::int64_t> seen;
    for (index_t c = 0; c < 4; ++c) {
      const std::int64_t label = f.labels[c * 50];
      for (index_t q = 0; q < 50; ++q) CHECK(f.labels[c * 50 + q] == label);
      seen.insert(label);
      CHECK(f.sizes[label] == 50);
    }
    CHECK(seen.size() == 4);
    // The inertia is the one of the returned centres and labels.
    double inertia = 0;
    for (index_t i = 0; i < x.rows(); ++i)
      for (index_t j = 0; j < 3; ++j) {
        const double t = static_cast<double>(x(i, j)) - static_cast<double>(f.centers(f.labels[i], j));
        inertia += t * t;
      }
    CHECK(f.result.inertia == doctest::Approx(inertia).epsilon(1e-12));
    CHECK(f.result.ok());
  }
}

TEST_CASE("kmeans: restarts keep the lowest inertia, and run r is reproducible from (seed, r)") {
  const auto x = blobs<double>(6, 20, 2, 5);
  cluster::kmeans_params p;
  p.clusters = 6;
  p.init = cluster::kmeans_init::random_rows;
  p.seed = 9;
  p.restarts = 8;
  const fit<double> best = run(host_context(), p, x);
  double lowest = std::numeric_limits<double>::infinity();
  for (index_t r = 0; r < 8; ++r) {
    // A single run with the same seed reproduces run 0 only; the restarts use streams 0 .. 7, so compare
    // inertias through the one-run fits of each stream's start.
    cluster::kmeans_params one = p;
    one.restarts = r + 1;
    lowest = std::min(lowest, run(host_context(), one, x).result.inertia);
  }
  CHECK(best.result.inertia == lowest);
  CHECK(best.result.best_run >= 0);
  CHECK(best.result.best_run < 8);
  // Same seed, same answer.
  const fit<double> again = run(host_context(), p, x);
  CHECK(again.centers.storage() == best.centers.storage());
}

TEST_CASE("kmeans rules (shared with the device): the argmin's winner does not depend on the reduction order") {
  // The device reduces each row's scores in a warp tree; the host loops over j. Both use
  // lowest_score_then_index, which must pick the lowest index among tied minima in any order.
  namespace rules = moecomp::cluster::detail;
  using scored = rules::scored_index<float>;
  const std::vector<float> scores = {3.f, 1.f, 2.f, 1.f, 5.f, 1.f, 4.f, 2.f};
  const rules::lowest_score_then_index op;
  scored loop = {scores[0], 0};
  for (index_t j = 1; j < static_cast<index_t>(scores.size()); ++j) loop = op(loop, scored{scores[j], j});
  CHECK(loop.index == 1);
  CHECK(loop.score == 1.f);
  // A pairwise tree (as a warp shuffle reduces) and the reversed order give the same winner.
  std::vector<scored> level;
  for (index_t j = 0; j < static_cast<index_t>(scores.size()); ++j) level.push_back({scores[j], j});
  while (level.size() > 1) {
    std::vector<scored> next;
    for (std::size_t e = 0; e < level.size(); e += 2) next.push_back(op(level[e + 1], level[e]));
    level = next;
  }
  CHECK(level[0].index == 1);
  scored reversed = {scores.back(), static_cast<index_t>(scores.size()) - 1};
  for (index_t j = static_cast<index_t>(scores.size()) - 2; j >= 0; --j) reversed = op(reversed, scored{scores[j], j});
  CHECK(reversed.index == 1);
  // The GEMM-form distance clamps cancellation at 0, and a zero-weight cluster's centre stays at its sum 0.
  CHECK(rules::gemm_form_distance(-2.f * 4.f, 4.f, 3.9999f) == 0.0);
  CHECK(rules::gemm_form_distance(-2.0 * 1.0, 4.0, 1.0) == 3.0);
  CHECK(rules::centre_coordinate<float>(0.0, 0.0) == 0.f);
  CHECK(rules::centre_coordinate<double>(6.0, 3.0) == 2.0);
}

TEST_CASE("kmeans: an empty cluster takes the row farthest from its centre") {
  // Rows 0, 1, 2, 3 and 100 on a line; start centres 0, 1 and 1000. Nothing is closest to 1000: the row
  // farthest from its centre (100, assigned to centre 1, distance 99^2) re-seeds cluster 2.
  host_matrix<double> x(5, 1);
  const double values[] = {0, 1, 2, 3, 100};
  for (index_t i = 0; i < 5; ++i) x(i, 0) = values[i];
  host_matrix<double> start(3, 1);
  start(0, 0) = 0;
  start(1, 0) = 1;
  start(2, 0) = 1000;
  const fit<double> f = run(host_context(), given(3), x, &start);
  CHECK(f.result.reseeded >= 1);
  CHECK(f.labels[4] == 2);
  CHECK(f.centers(2, 0) == 100.0);
  CHECK(f.sizes[2] == 1);
  CHECK(f.result.ok());
}

TEST_CASE("kmeans: sample weights move the centres as repeated rows would") {
  // Weight 3 on a row is the same problem as the row written three times.
  const auto x = blobs<double>(2, 10, 2, 21);
  host_matrix<double> repeated(x.rows() + 2, 2);
  std::vector<double> w(static_cast<std::size_t>(x.rows()), 1.0);
  w[0] = 3.0;
  for (index_t i = 0; i < x.rows(); ++i)
    for (index_t j = 0; j < 2; ++j) repeated(i, j) = x(i, j);
  for (index_t j = 0; j < 2; ++j) repeated(x.rows(), j) = repeated(x.rows() + 1, j) = x(0, j);
  host_matrix<double> start(2, 2);
  for (index_t j = 0; j < 2; ++j) {
    start(0, j) = x(0, j);
    start(1, j) = x(15, j);
  }
  const fit<double> weighted = run(host_context(), given(2), x, &start, &w);
  const fit<double> copies = run(host_context(), given(2), repeated, &start);
  for (index_t c = 0; c < 2; ++c)
    for (index_t j = 0; j < 2; ++j) CHECK(weighted.centers(c, j) == doctest::Approx(copies.centers(c, j)).epsilon(1e-14));
  CHECK(weighted.result.inertia == doctest::Approx(copies.result.inertia).epsilon(1e-12));
}

TEST_CASE("kmeans: k-means++ starts from distinct rows, and with k = n from every row") {
  const auto x = blobs<double>(3, 4, 2, 31);
  cluster::kmeans_params p;
  p.clusters = 12;
  p.max_iterations = 1;
  const fit<double> f = run(host_context(), p, x);
  // With as many clusters as rows, each row is its own cluster: inertia 0.
  CHECK(f.result.inertia == 0.0);
  for (index_t c = 0; c < 12; ++c) CHECK(f.sizes[c] == 1);
  CHECK(cluster::resolved_local_trials(p) == 2 + 2);  // floor(ln 12) = 2
  p.clusters = 1;
  CHECK(cluster::resolved_local_trials(p) == 2);
  p.local_trials = 7;
  CHECK(cluster::resolved_local_trials(p) == 7);
}

TEST_CASE_TEMPLATE("kmeans: bit-identical at 1, 2, 3 and 7 threads", T, float, double) {
  // 1100 rows: five GEMM tiles; 130 columns: three column blocks in the update.
  const auto x = blobs<T>(5, 220, 130, 41);
  cluster::kmeans_params p;
  p.clusters = 5;
  p.restarts = 2;
  p.seed = 4;
  moecomp_test::check_same_at_thread_counts([&](const host_context& ctx) {
    const fit<T> f = run(ctx, p, x);
    return std::make_tuple(f.centers.storage(), std::vector<std::int64_t>(f.labels.data(), f.labels.data() + x.rows()),
                           f.result.inertia, f.result.iterations, f.result.criterion, f.result.best_run);
  });
}

TEST_CASE("kmeans: bad input is refused with a message naming the argument") {
  const auto x = blobs<double>(2, 3, 2, 1);
  host_matrix<double> c(2, 2);
  host_vector<std::int64_t> labels(6);
  host_vector<index_t> sizes(2);
  const host_context ctx;
  auto call = [&](cluster::kmeans_params p, const host_matrix<double>& data, host_matrix<double>& centers,
                  std::vector<double> w = {}) {
    return thrown_message([&] {
      cluster::kmeans<double>(ctx, p, data.const_view(),
                              vector_view<const double>(w.empty() ? nullptr : w.data(), static_cast<index_t>(w.size())),
                              centers.view(), labels.view(), sizes.view());
    });
  };
  cluster::kmeans_params p;
  p.clusters = 2;
  p.clusters = 0;
  CHECK(call(p, x, c) == "kmeans: params.clusters must be >= 1, got 0");
  p.clusters = 7;
  host_matrix<double> c7(7, 2);
  CHECK(call(p, x, c7) == "kmeans: x must have at least params.clusters = 7 rows, got 6");
  p.clusters = 2;
  host_matrix<double> wrong(3, 2);
  CHECK(call(p, x, wrong) == "kmeans: centers must be 2 x 2 (params.clusters x the columns of x), got 3 x 2");
  p.tolerance = -1;
  CHECK(call(p, x, c) == "kmeans: params.tolerance must be finite and >= 0, got -1");
  p.tolerance = 1e-4;
  p.init = cluster::kmeans_init::given;
  p.restarts = 3;
  CHECK(call(p, x, c) == "kmeans: params.restarts must be 1 with init given (one start), got 3");
  p.restarts = 1;
  c(1, 0) = std::nan("");
  CHECK(call(p, x, c) == "kmeans: centers (the given initial centres) must be finite, got nan at (1, 0)");
  p.init = cluster::kmeans_init::kmeans_plus_plus;
  auto bad = x;
  bad(4, 1) = std::numeric_limits<double>::infinity();
  CHECK(call(p, bad, c) == "kmeans: x must be finite, got inf at (4, 1)");
  CHECK(call(p, x, c, {1, 1, 1}) == "kmeans: sample_weight must be empty (unit weights) or have 6 entries, got 3");
  CHECK(call(p, x, c, {1, 1, -1, 1, 1, 1}) == "kmeans: sample_weight must be finite and >= 0, got -1 at index 2");
  CHECK(call(p, x, c, {0, 0, 0, 0, 0, 0}) == "kmeans: sample_weight must have a positive total mass, got 0");
  CHECK(cluster::parse_kmeans_init("random") == cluster::kmeans_init::random_rows);
  CHECK(thrown_message([] { cluster::parse_kmeans_init("kmeans++"); }) ==
        "init: expected k-means++, random or given, got 'kmeans++'");
}

TEST_CASE("balanced kmeans: exact sizes, an optimal assignment at every step, a non-increasing objective") {
  // 3 blobs of 40, 20 and 60 points into 3 clusters of exactly 40: the big blob must give 20 points away.
  host_matrix<double> x(120, 2);
  moecomp::random_generator rng(51);
  const index_t per[] = {40, 20, 60};
  index_t row = 0;
  for (index_t c = 0; c < 3; ++c)
    for (index_t p = 0; p < per[c]; ++p, ++row)
      for (index_t j = 0; j < 2; ++j) x(row, j) = 8.0 * static_cast<double>(c) + rng.normal<double>();
  cluster::kmeans_params p;
  p.clusters = 3;
  p.size_min = p.size_max = 40;
  p.restarts = 3;
  const fit<double> f = run(host_context(), p, x);
  for (index_t c = 0; c < 3; ++c) CHECK(f.sizes[c] == 40);
  CHECK(f.result.assignment_gap <= 1e-12);
  CHECK(f.result.ok());
  // The objective never increases: run one more iteration at a time from the same start.
  double previous = std::numeric_limits<double>::infinity();
  host_matrix<double> start(3, 2);
  for (index_t j = 0; j < 3; ++j)
    for (index_t t = 0; t < 2; ++t) start(j, t) = x(j * 37, t);
  auto q = given(3);
  q.size_min = q.size_max = 40;
  q.tolerance = 0;
  for (index_t iterations = 1; iterations <= 8; ++iterations) {
    q.max_iterations = iterations;
    const fit<double> step = run(host_context(), q, x, &start);
    CHECK(step.result.inertia <= previous * (1 + 1e-15));
    previous = step.result.inertia;
    for (index_t c = 0; c < 3; ++c) CHECK(step.sizes[c] == 40);
  }
}

TEST_CASE("balanced kmeans: size bounds as k-means-constrained's size_min / size_max") {
  const auto x = blobs<double>(2, 30, 3, 61);  // two blobs of 30
  cluster::kmeans_params p;
  p.clusters = 3;
  p.size_min = 15;
  p.size_max = 25;
  const fit<double> f = run(host_context(), p, x);
  index_t total = 0;
  for (index_t c = 0; c < 3; ++c) {
    CHECK(f.sizes[c] >= 15);
    CHECK(f.sizes[c] <= 25);
    total += f.sizes[c];
  }
  CHECK(total == 60);
  CHECK(f.result.assignment_gap <= 1e-12);
  // Only a lower bound: size_max 0.
  p.size_max = 0;
  p.size_min = 5;
  const fit<double> lower = run(host_context(), p, x);
  for (index_t c = 0; c < 3; ++c) CHECK(lower.sizes[c] >= 5);
  // Infeasible bounds are misuse.
  p.size_min = 21;
  CHECK(thrown_message([&] { run(host_context(), p, x); }) ==
        "kmeans: params.size_min x params.clusters must be <= the rows of x (60), got 21 x 3");
  p.size_min = 0;
  p.size_max = 19;
  CHECK(thrown_message([&] { run(host_context(), p, x); }) ==
        "kmeans: params.size_max x params.clusters must be >= the rows of x (60), got 19 x 3");
  p.size_min = 10;
  p.size_max = 9;
  CHECK(thrown_message([&] { run(host_context(), p, x); }) ==
        "kmeans: params.size_max must be >= params.size_min (10), got 9");
}

// --------------------------------------------------------------------------- the MoEfication split

namespace {

double silu(double v) { return v / (1.0 + std::exp(-v)); }

/// y = W2 (silu(W1 x + b1) * (W3 x + b3)) (GLU) or W2 silu(W1 x + b1), in double, for one input x.
template <class T>
std::vector<double> ffn_output(matrix_view<const T> w1, matrix_view<const T> w3, matrix_view<const T> w2,
                               vector_view<const T> b1, vector_view<const T> b3, const std::vector<double>& x) {
  const index_t hidden = w1.rows(), d = w1.cols();
  std::vector<double> h(static_cast<std::size_t>(hidden)), y(static_cast<std::size_t>(w2.rows()), 0.0);
  for (index_t i = 0; i < hidden; ++i) {
    double g = b1.empty() ? 0.0 : static_cast<double>(b1[i]), u = b3.empty() ? 0.0 : static_cast<double>(b3[i]);
    for (index_t j = 0; j < d; ++j) {
      g += static_cast<double>(w1(i, j)) * x[static_cast<std::size_t>(j)];
      if (!w3.empty()) u += static_cast<double>(w3(i, j)) * x[static_cast<std::size_t>(j)];
    }
    h[static_cast<std::size_t>(i)] = w3.empty() ? silu(g) : silu(g) * u;
  }
  for (index_t o = 0; o < w2.rows(); ++o)
    for (index_t i = 0; i < hidden; ++i) y[static_cast<std::size_t>(o)] += static_cast<double>(w2(o, i)) * h[static_cast<std::size_t>(i)];
  return y;
}

}  // namespace

TEST_CASE_TEMPLATE("moefication_split: equal experts whose summed outputs are the dense FFN's", T, float, double) {
  const index_t d = 16, d_ff = 96, experts = 6, s = d_ff / experts;
  moecomp::random_generator rng(71);
  host_matrix<T> w1(d_ff, d), w3(d_ff, d), w2(d, d_ff);
  host_vector<T> b1(d_ff), b3(d_ff);
  rng.fill_normal(w1.view());
  rng.fill_normal(w3.view());
  rng.fill_normal(w2.view());
  for (index_t i = 0; i < d_ff; ++i) {
    b1[i] = static_cast<T>(rng.normal<double>());
    b3[i] = static_cast<T>(rng.normal<double>());
  }
  for (bool glu : {true, false}) {
    CAPTURE(glu);
    host_matrix<T> e1(experts * s, d), e3(glu ? experts * s : 0, d), e2(experts * d, s), eb1(experts, s),
        eb3(glu ? experts : 0, s), router(experts, d);
    host_vector<std::int64_t> labels(d_ff);
    host_vector<index_t> perm(d_ff);
    const cluster::dense_ffn_view<T> ffn{w1.const_view(), glu ? w3.const_view() : matrix_view<const T>(), w2.const_view(),
                                         b1.const_view(), glu ? b3.const_view() : vector_view<const T>()};
    const cluster::expert_stack_outputs<T> out{
        moecomp::split_rows(e1.view(), experts),
        glu ? moecomp::split_rows(e3.view(), experts) : moecomp::matrix_stack_view<T>(),
        moecomp::split_rows(e2.view(), experts),
        eb1.view(),
        glu ? eb3.view() : matrix_view<T>(),
        router.view(),
        labels.view(),
        perm.view()};
    cluster::kmeans_params p;
    p.clusters = experts;
    p.restarts = 2;
    const cluster::kmeans_result r = cluster::moefication_split<T>(host_context(), p, ffn, out);
    CHECK(r.assignment_gap <= 1e-9);
    // The permutation visits every neuron once, expert by expert, each in increasing original index.
    std::vector<index_t> seen(perm.data(), perm.data() + d_ff);
    std::sort(seen.begin(), seen.end());
    for (index_t i = 0; i < d_ff; ++i) CHECK(seen[static_cast<std::size_t>(i)] == i);
    for (index_t e = 0; e < experts; ++e)
      for (index_t q = 0; q < s; ++q) {
        CHECK(labels[perm[e * s + q]] == e);
        if (q > 0) CHECK(perm[e * s + q] > perm[e * s + q - 1]);
      }
    // Every expert switched on: the summed expert outputs are the dense output, to rounding.
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<double> x(static_cast<std::size_t>(d));
      for (auto& v : x) v = rng.normal<double>();
      const std::vector<double> dense = ffn_output<T>(ffn.w1, ffn.w3, ffn.w2, ffn.b1, ffn.b3, x);
      std::vector<double> summed(static_cast<std::size_t>(d), 0.0);
      for (index_t e = 0; e < experts; ++e) {
        const std::vector<double> y = ffn_output<T>(
            out.w1[e], glu ? matrix_view<const T>(out.w3[e]) : matrix_view<const T>(), out.w2[e], out.b1.row(e),
            glu ? vector_view<const T>(out.b3.row(e)) : vector_view<const T>(), x);
        for (index_t o = 0; o < d; ++o) summed[static_cast<std::size_t>(o)] += y[static_cast<std::size_t>(o)];
      }
      for (index_t o = 0; o < d; ++o)
        CHECK(summed[static_cast<std::size_t>(o)] == doctest::Approx(dense[static_cast<std::size_t>(o)]).epsilon(1e-12));
    }
    // The router rows are the experts' centres of normalised gate rows: unit-ish, one per expert.
    for (index_t e = 0; e < experts; ++e) {
      double norm = 0;
      for (index_t j = 0; j < d; ++j) norm += static_cast<double>(router(e, j)) * static_cast<double>(router(e, j));
      CHECK(norm <= 1.0 + 1e-6);
      CHECK(norm > 0.0);
    }
  }
}

TEST_CASE("moefication_split: bad input is refused with a message naming the argument") {
  host_matrix<double> w1(10, 4, 1.0), w2(4, 10, 1.0);
  host_matrix<double> e1(10, 4), e2(2 * 4, 5), router(2, 4);
  host_vector<std::int64_t> labels(10);
  host_vector<index_t> perm(10);
  cluster::kmeans_params p;
  p.clusters = 3;
  const cluster::dense_ffn_view<double> ffn{w1.const_view(), {}, w2.const_view(), {}, {}};
  const cluster::expert_stack_outputs<double> out{moecomp::split_rows(e1.view(), 2), {}, moecomp::split_rows(e2.view(), 2),
                                                  {}, {}, router.view(), labels.view(), perm.view()};
  CHECK(thrown_message([&] { cluster::moefication_split<double>(host_context(), p, ffn, out); }) ==
        "moefication_split: the neurons (rows of w1, 10) must be a multiple of params.clusters (3)");
  p.clusters = 2;
  w1(7, 0) = w1(7, 1) = w1(7, 2) = w1(7, 3) = 0.0;
  CHECK(thrown_message([&] { cluster::moefication_split<double>(host_context(), p, ffn, out); }) ==
        "moefication_split: w1 row 7 is zero: a neuron without a direction cannot be clustered");
  w1(7, 0) = std::nan("");
  CHECK(thrown_message([&] { cluster::moefication_split<double>(host_context(), p, ffn, out); }) ==
        "moefication_split: w1 must be finite, got nan at (7, 0)");
}

TEST_CASE("balanced kmeans step as a replicated assignment (the device auction's reduction, on the host)") {
  // The equal-size transportation problem (n points, k centres of capacity c = n / k) solved two ways: the
  // network simplex of the k-means step, and the host auction on the n x n cost of each centre's column
  // replicated c times, mapped back by q / c; then the transportation dual built from the auction's prices
  // (kmeans_balanced_auction.hpp, the functions the device kernels run) must certify the auction's cost
  // within its bound n x (final epsilon).
  namespace kd = cluster::detail;
  const index_t n = 60, k = 4, c = n / k, d = 3;
  for (const bool integer_costs : {false, true}) {
    CAPTURE(integer_costs);
    moecomp::random_generator rng(integer_costs ? 77 : 71);
    // Overlapping points and centres, so the capacities bind.
    std::vector<double> cost(static_cast<std::size_t>(n * k));
    host_matrix<double> x(n, d), centres(k, d);
    for (index_t i = 0; i < n; ++i)
      for (index_t t = 0; t < d; ++t) x(i, t) = rng.normal<double>() + (i % 3 == 0 ? 2.0 : 0.0);
    for (index_t j = 0; j < k; ++j)
      for (index_t t = 0; t < d; ++t) centres(j, t) = 0.5 * rng.normal<double>();
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < k; ++j) {
        double s = 0;
        for (index_t t = 0; t < d; ++t) s += (x(i, t) - centres(j, t)) * (x(i, t) - centres(j, t));
        cost[static_cast<std::size_t>(i * k + j)] = integer_costs ? std::round(10.0 * s) : s;
      }
    // The exact step: the network simplex.
    const host_context ctx;
    kd::size_bounded_transport transport(ctx, n, k, c, c);
    for (index_t i = 0; i < n; ++i)
      std::copy(cost.begin() + i * k, cost.begin() + (i + 1) * k, transport.cost_row(i));
    std::vector<std::int64_t> exact_labels(static_cast<std::size_t>(n), -1);
    CHECK(transport.solve(ctx, exact_labels.data()) <= 1e-12);
    double optimum = 0;
    for (index_t i = 0; i < n; ++i)
      optimum += cost[static_cast<std::size_t>(i * k + exact_labels[static_cast<std::size_t>(i)])];
    // The reduction: the replicated cost, the host auction, the labels q / c.
    host_matrix<double> replicated(n, n);
    for (index_t i = 0; i < n; ++i)
      for (index_t q = 0; q < n; ++q) replicated(i, q) = kd::replicated_cost(cost.data(), k, c, i, q);
    host_vector<index_t> columns(n);
    host_vector<double> prices(n);
    const moecomp::ot::auction_result r = moecomp::ot::auction_assignment(
        ctx, moecomp::ot::auction_params{}, replicated.const_view(), columns.view(), prices.view());
    REQUIRE(r.ok());
    std::vector<index_t> sizes(static_cast<std::size_t>(k), 0);
    double auction_cost = 0;
    for (index_t i = 0; i < n; ++i) {
      const index_t label = kd::replicated_centre(columns[i], c);
      REQUIRE(label >= 0);
      REQUIRE(label < k);
      ++sizes[static_cast<std::size_t>(label)];
      auction_cost += cost[static_cast<std::size_t>(i * k + label)];
    }
    for (index_t j = 0; j < k; ++j) CHECK(sizes[static_cast<std::size_t>(j)] == c);  // exact sizes
    CHECK(auction_cost == doctest::Approx(r.cost).epsilon(1e-12));
    CHECK(auction_cost >= optimum - 1e-9 * optimum);                 // no better than the optimum
    CHECK(auction_cost - optimum <= r.criterion + 1e-9 * optimum);   // within the auction's bound
    if (integer_costs) CHECK(auction_cost == optimum);               // exact on integer costs
    // The certificate: v_j = -(mean of centre j's copies' prices), u_i = min_j (C_ij - v_j).
    std::vector<double> v(static_cast<std::size_t>(k));
    for (index_t j = 0; j < k; ++j) v[static_cast<std::size_t>(j)] = kd::centre_potential(prices.data(), j, c);
    double row_sum = 0;
    for (index_t i = 0; i < n; ++i) {
      const double u = kd::row_potential(cost.data() + i * k, v.data(), k);
      for (index_t j = 0; j < k; ++j)  // (u, v) is feasible
        CHECK(u + v[static_cast<std::size_t>(j)] <= cost[static_cast<std::size_t>(i * k + j)] + 1e-12 * optimum);
      row_sum += u;
    }
    const double dual = kd::balanced_dual(row_sum, v.data(), k, c);
    CHECK(dual <= optimum + 1e-9 * optimum);                       // weak duality
    CHECK(r.cost - dual >= -1e-9 * optimum);
    CHECK(r.cost - dual <= r.criterion + 1e-9 * optimum);          // the gap is within the bound
    const double gap = kd::relative_gap(r.cost, dual);
    CHECK(gap <= r.criterion / std::max(1.0, r.cost) + 1e-9);
  }
  // Which steps the device sends to the auction: equal sizes, asked for, within the memory limit.
  cluster::kmeans_params p;
  p.clusters = 4;
  p.size_min = p.size_max = 15;
  CHECK_FALSE(kd::uses_balanced_auction(p, 60));  // the default: the network simplex
  p.balanced_solver = cluster::kmeans_balanced_solver::device_auction;
  CHECK(kd::uses_balanced_auction(p, 60));
  p.size_max = 20;
  CHECK_FALSE(kd::uses_balanced_auction(p, 60));  // unequal bounds: the host network simplex
  p.clusters = 8;
  p.size_min = p.size_max = 2048;
  CHECK(kd::uses_balanced_auction(p, 16384));     // 2 GiB of doubles: the limit
  p.clusters = 5;
  p.size_min = p.size_max = 3277;
  CHECK_FALSE(kd::uses_balanced_auction(p, 16385));
  CHECK(std::string(cluster::to_string(cluster::kmeans_balanced_solver::device_auction)) == "device-auction");
  CHECK(cluster::parse_kmeans_balanced_solver("network-simplex") == cluster::kmeans_balanced_solver::network_simplex);
  CHECK(cluster::parse_kmeans_balanced_solver("device-auction") == cluster::kmeans_balanced_solver::device_auction);
  CHECK(thrown_message([] { cluster::parse_kmeans_balanced_solver("auction"); }) ==
        "balanced solver: expected network-simplex or device-auction, got 'auction'");
}
