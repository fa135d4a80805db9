// Exact optimal transport (network simplex): closed forms, brute force, optimality certificates (dual
// feasibility + complementary slackness + strong duality), forbidden pairs, degeneracy, iteration limit,
// float input, bad input messages, determinism.
#include <doctest/doctest.h>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/ot/emd.hpp>

#include "test_support.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>
#include <vector>

namespace {

using moecomp::host_matrix;
using moecomp::host_vector;
using moecomp::index_t;
namespace ot = moecomp::ot;

const double inf = std::numeric_limits<double>::infinity();

struct problem {
  std::vector<double> a, b, c;  // c row-major n x m
  index_t n = 0, m = 0;
  moecomp::vector_view<const double> av() const { return {a.data(), n}; }
  moecomp::vector_view<const double> bv() const { return {b.data(), m}; }
  moecomp::matrix_view<const double> cv() const { return {c.data(), n, m}; }
};

struct solution {
  ot::emd_result result;
  host_matrix<double> plan;
  host_vector<double> u, v;
};

solution solve(const problem& p, ot::emd_params params = {}) {
  solution s{{}, host_matrix<double>(p.n, p.m), host_vector<double>(p.n), host_vector<double>(p.m)};
  s.result = ot::emd(moecomp::host_context{}, params, p.av(), p.bv(), p.cv(), s.plan.view(), s.u.view(), s.v.view());
  return s;
}

double uniform(moecomp::random_generator& rng) { return rng.uniform<double>(0.0, 1.0); }

problem random_problem(std::uint64_t seed, index_t n, index_t m, double zero_fraction = 0) {
  moecomp::random_generator rng(seed);
  problem p;
  p.n = n;
  p.m = m;
  std::vector<double> x(static_cast<std::size_t>(2 * n)), y(static_cast<std::size_t>(2 * m));
  for (auto& t : x) t = uniform(rng);
  for (auto& t : y) t = uniform(rng);
  p.a.resize(static_cast<std::size_t>(n));
  p.b.resize(static_cast<std::size_t>(m));
  for (auto& t : p.a) t = uniform(rng) < zero_fraction ? 0.0 : uniform(rng);
  for (auto& t : p.b) t = uniform(rng) < zero_fraction ? 0.0 : uniform(rng);
  if (std::accumulate(p.a.begin(), p.a.end(), 0.0) == 0) p.a[0] = 1;
  if (std::accumulate(p.b.begin(), p.b.end(), 0.0) == 0) p.b[0] = 1;
  const double sa = std::accumulate(p.a.begin(), p.a.end(), 0.0), sb = std::accumulate(p.b.begin(), p.b.end(), 0.0);
  for (auto& t : p.a) t /= sa;
  for (auto& t : p.b) t /= sb;
  p.c.resize(static_cast<std::size_t>(n * m));
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < m; ++j) {
      const double dx = x[static_cast<std::size_t>(2 * i)] - y[static_cast<std::size_t>(2 * j)],
                   dy = x[static_cast<std::size_t>(2 * i + 1)] - y[static_cast<std::size_t>(2 * j + 1)];
      p.c[static_cast<std::size_t>(i * m + j)] = dx * dx + dy * dy;
    }
  return p;
}

/// Optimality certificate: the plan is feasible (marginals to 1e-12 of the mass, nonnegative, zero on
/// forbidden pairs), u + v <= c everywhere (to `tol`), equality where the plan is positive, the reported cost
/// is <c, P>, and equals <a, u> + <b, v> (strong duality), and the duals are centred (<a, u> = <b, v>).
void check_optimal(const problem& p, const solution& s, double tol = 1e-12) {
  REQUIRE(s.result.status == moecomp::status::ok);
  const double mass = std::accumulate(p.a.begin(), p.a.end(), 0.0);
  const double sb = std::accumulate(p.b.begin(), p.b.end(), 0.0);
  double scale = 0;
  for (double c : p.c)
    if (std::isfinite(c)) scale = std::max(scale, std::abs(c));
  scale = std::max(scale, 1e-300);
  double cost = 0, au = 0, bv = 0;
  index_t positive = 0;
  for (index_t i = 0; i < p.n; ++i) {
    double row = 0;
    for (index_t j = 0; j < p.m; ++j) {
      const double x = s.plan(i, j), c = p.c[static_cast<std::size_t>(i * p.m + j)];
      CHECK(x >= 0);
      row += x;
      if (x > 0) {
        ++positive;
        REQUIRE(std::isfinite(c));
        cost += c * x;
        CHECK(std::abs(s.u[i] + s.v[j] - c) <= tol * scale);
      }
      if (std::isfinite(c)) CHECK(s.u[i] + s.v[j] <= c + tol * scale);
    }
    CHECK(std::abs(row - p.a[static_cast<std::size_t>(i)]) <= 1e-12 * mass);
  }
  for (index_t j = 0; j < p.m; ++j) {
    double col = 0;
    for (index_t i = 0; i < p.n; ++i) col += s.plan(i, j);
    CHECK(std::abs(col - p.b[static_cast<std::size_t>(j)] * mass / sb) <= 1e-12 * mass);
  }
  for (index_t i = 0; i < p.n; ++i) au += p.a[static_cast<std::size_t>(i)] * s.u[i];
  for (index_t j = 0; j < p.m; ++j) bv += p.b[static_cast<std::size_t>(j)] * mass / sb * s.v[j];
  CHECK(s.result.nonzeros == positive);
  CHECK(positive <= p.n + p.m - 1);
  CHECK(std::abs(s.result.cost - cost) <= 1e-12 * std::max(std::abs(cost), 1e-300) + 1e-15 * scale * mass);
  CHECK(std::abs(au + bv - cost) <= tol * scale * mass);
  CHECK(std::abs(au - bv) <= tol * scale * mass);
}

}  // namespace

TEST_CASE("emd: 1-D transport between sorted histograms is the monotone (north-west corner) plan") {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    moecomp::random_generator rng(seed);
    problem p;
    p.n = 17;
    p.m = 11;
    std::vector<double> x(17), y(11);
    for (auto& t : x) t = uniform(rng);
    for (auto& t : y) t = uniform(rng);
    std::sort(x.begin(), x.end());
    std::sort(y.begin(), y.end());
    for (index_t i = 0; i < p.n; ++i) p.a.push_back(0.1 + uniform(rng));
    for (index_t j = 0; j < p.m; ++j) p.b.push_back(0.1 + uniform(rng));
    const double sa = std::accumulate(p.a.begin(), p.a.end(), 0.0), sb = std::accumulate(p.b.begin(), p.b.end(), 0.0);
    for (auto& t : p.a) t /= sa;
    for (auto& t : p.b) t *= 1 / sb;
    for (index_t i = 0; i < p.n; ++i)
      for (index_t j = 0; j < p.m; ++j) {
        const double d = x[static_cast<std::size_t>(i)] - y[static_cast<std::size_t>(j)];
        p.c.push_back(d * d);  // strictly Monge: the monotone plan is the unique optimum
      }
    const double scale_b = std::accumulate(p.a.begin(), p.a.end(), 0.0) / std::accumulate(p.b.begin(), p.b.end(), 0.0);
    // North-west corner rule.
    std::vector<double> nw(static_cast<std::size_t>(p.n * p.m), 0.0), ra = p.a, rb = p.b;
    for (auto& t : rb) t *= scale_b;
    index_t i = 0, j = 0;
    while (i < p.n && j < p.m) {
      const double t = std::min(ra[static_cast<std::size_t>(i)], rb[static_cast<std::size_t>(j)]);
      nw[static_cast<std::size_t>(i * p.m + j)] += t;
      ra[static_cast<std::size_t>(i)] -= t;
      rb[static_cast<std::size_t>(j)] -= t;
      if (ra[static_cast<std::size_t>(i)] <= 1e-15) ++i; else ++j;
    }
    const solution s = solve(p);
    check_optimal(p, s);
    for (index_t r = 0; r < p.n; ++r)
      for (index_t c = 0; c < p.m; ++c) CHECK(s.plan(r, c) == doctest::Approx(nw[static_cast<std::size_t>(r * p.m + c)]).epsilon(1e-9));
  }
}

TEST_CASE("emd: identity-like cost 1 - [i == j] gives cost 1 - sum_i min(a_i, b_i)") {
  moecomp::random_generator rng(9);
  problem p;
  p.n = p.m = 12;
  for (index_t i = 0; i < 12; ++i) p.a.push_back(uniform(rng));
  for (index_t i = 0; i < 12; ++i) p.b.push_back(uniform(rng));
  const double sa = std::accumulate(p.a.begin(), p.a.end(), 0.0), sb = std::accumulate(p.b.begin(), p.b.end(), 0.0);
  for (auto& t : p.a) t /= sa;
  for (auto& t : p.b) t /= sb;
  for (index_t i = 0; i < 12; ++i)
    for (index_t j = 0; j < 12; ++j) p.c.push_back(i == j ? 0.0 : 1.0);
  const solution s = solve(p);
  check_optimal(p, s);
  double overlap = 0;
  for (index_t i = 0; i < 12; ++i) overlap += std::min(p.a[static_cast<std::size_t>(i)], p.b[static_cast<std::size_t>(i)]);
  CHECK(s.result.cost == doctest::Approx(1 - overlap).epsilon(1e-12));
  for (index_t i = 0; i < 12; ++i)
    CHECK(s.plan(i, i) == doctest::Approx(std::min(p.a[static_cast<std::size_t>(i)], p.b[static_cast<std::size_t>(i)])).epsilon(1e-12));

  // Equal histograms under a zero-diagonal cost: the identity plan, cost 0.
  problem q = p;
  q.b = q.a;
  const solution t = solve(q);
  check_optimal(q, t);
  CHECK(t.result.cost == 0.0);
  for (index_t i = 0; i < 12; ++i) CHECK(t.plan(i, i) == q.a[static_cast<std::size_t>(i)]);
}

TEST_CASE("emd: a single row or a single column has only one plan") {
  problem p = random_problem(4, 1, 9);
  solution s = solve(p);
  check_optimal(p, s);
  double cost = 0;
  for (index_t j = 0; j < 9; ++j) {
    CHECK(s.plan(0, j) == doctest::Approx(p.b[static_cast<std::size_t>(j)]).epsilon(1e-14));
    cost += p.b[static_cast<std::size_t>(j)] * p.c[static_cast<std::size_t>(j)];
  }
  CHECK(s.result.cost == doctest::Approx(cost).epsilon(1e-14));

  problem q = random_problem(5, 7, 1);
  s = solve(q);
  check_optimal(q, s);
  for (index_t i = 0; i < 7; ++i) CHECK(s.plan(i, 0) == doctest::Approx(q.a[static_cast<std::size_t>(i)]).epsilon(1e-14));

  problem one = random_problem(6, 1, 1);
  s = solve(one);
  CHECK(s.plan(0, 0) == 1.0);
  CHECK(s.result.cost == one.c[0]);
  CHECK(s.result.iterations == 0);
}

TEST_CASE("emd: uniform masses on n points = the best permutation (brute force, n <= 7)") {
  for (index_t n = 2; n <= 7; ++n) {
    for (std::uint64_t seed = 0; seed < 4; ++seed) {
      moecomp::random_generator rng(100 * static_cast<std::uint64_t>(n) + seed);
      problem p;
      p.n = p.m = n;
      p.a.assign(static_cast<std::size_t>(n), 1.0 / static_cast<double>(n));
      p.b = p.a;
      for (index_t k = 0; k < n * n; ++k) p.c.push_back(uniform(rng));
      std::vector<index_t> perm(static_cast<std::size_t>(n));
      std::iota(perm.begin(), perm.end(), 0);
      double best = inf;
      std::vector<index_t> best_perm;
      do {
        double c = 0;
        for (index_t i = 0; i < n; ++i) c += p.c[static_cast<std::size_t>(i * n + perm[static_cast<std::size_t>(i)])];
        if (c < best) {
          best = c;
          best_perm = perm;
        }
      } while (std::next_permutation(perm.begin(), perm.end()));
      const solution s = solve(p);
      check_optimal(p, s);
      CHECK(s.result.cost == doctest::Approx(best / static_cast<double>(n)).epsilon(1e-13));
      // Random real costs: the optimal permutation is unique, and the plan is that permutation over n.
      for (index_t i = 0; i < n; ++i)
        CHECK(s.plan(i, best_perm[static_cast<std::size_t>(i)]) == doctest::Approx(1.0 / static_cast<double>(n)).epsilon(1e-13));
    }
  }
}

TEST_CASE("emd: random problems carry an optimality certificate (square, rectangular, zero masses)") {
  const index_t sizes[][2] = {{2, 3}, {5, 5}, {13, 40}, {40, 13}, {64, 64}, {150, 90}, {200, 200}};
  std::uint64_t seed = 11;
  for (const auto& sz : sizes)
    for (double zeros : {0.0, 0.3}) {
      CAPTURE(sz[0]);
      CAPTURE(sz[1]);
      CAPTURE(zeros);
      const problem p = random_problem(seed++, sz[0], sz[1], zeros);
      const solution s = solve(p);
      check_optimal(p, s, 1e-11);
      // Zero-mass rows and columns carry nothing.
      for (index_t i = 0; i < p.n; ++i)
        if (p.a[static_cast<std::size_t>(i)] == 0)
          for (index_t j = 0; j < p.m; ++j) CHECK(s.plan(i, j) == 0.0);
    }
}

TEST_CASE("emd: degenerate problems (integer costs, equal masses) terminate with a certificate") {
  for (std::uint64_t seed = 0; seed < 6; ++seed) {
    moecomp::random_generator rng(seed);
    problem p;
    p.n = 30 + static_cast<index_t>(seed);
    p.m = 30;
    p.a.assign(static_cast<std::size_t>(p.n), 1.0);
    p.b.assign(static_cast<std::size_t>(p.m), static_cast<double>(p.n) / 30.0);
    for (index_t k = 0; k < p.n * p.m; ++k) p.c.push_back(std::floor(3 * uniform(rng)));
    const solution s = solve(p);
    check_optimal(p, s);
  }
  // All costs equal: every plan is optimal; the cost is exactly that constant.
  problem flat;
  flat.n = flat.m = 25;
  flat.a.assign(25, 0.04);
  flat.b.assign(25, 0.04);
  flat.c.assign(625, 2.0);
  const solution s = solve(flat);
  check_optimal(flat, s);
  CHECK(s.result.cost == doctest::Approx(2.0).epsilon(1e-14));
}

TEST_CASE("emd: forbidden pairs (+inf): feasible problems avoid them, infeasible ones say so") {
  // Lower-triangular allowed set (i >= j) with decreasing supplies: feasible.
  problem p = random_problem(21, 20, 20);
  for (index_t i = 0; i < 20; ++i)
    for (index_t j = i + 1; j < 20; ++j) p.c[static_cast<std::size_t>(i * 20 + j)] = inf;
  p.a.assign(20, 0.05);
  p.b.assign(20, 0.05);
  solution s = solve(p);
  check_optimal(p, s);
  for (index_t i = 0; i < 20; ++i)
    for (index_t j = i + 1; j < 20; ++j) CHECK(s.plan(i, j) == 0.0);

  // Random 40% forbidden, still feasible (each row keeps many allowed columns): certificate holds.
  problem q = random_problem(22, 50, 40);
  moecomp::random_generator rng(5);
  for (index_t i = 0; i < 50; ++i)
    for (index_t j = 0; j < 40; ++j)
      if ((i + j) % 7 != 0 && uniform(rng) < 0.4) q.c[static_cast<std::size_t>(i * 40 + j)] = inf;
  s = solve(q);
  check_optimal(q, s, 1e-10);

  // The greedy start takes the cheap pair (0, 0) and leaves row 1 stranded: the big-M artificial start takes
  // over and still finds the only feasible plan.
  problem g;
  g.n = g.m = 2;
  g.a = {0.5, 0.5};
  g.b = {0.5, 0.5};
  g.c = {0.0, 3.0, 1.0, inf};
  {
    const moecomp::host_context ctx;
    ot::detail::transport_simplex<double> simplex(ctx, g.cv(), g.a.data(), g.b.data(), 1.0);
    simplex.solve(100);
    CHECK(simplex.used_artificial_start());
    CHECK(simplex.status() == moecomp::status::ok);
  }
  s = solve(g);
  check_optimal(g, s);
  CHECK(s.result.cost == 2.0);
  CHECK(s.plan(0, 1) == 0.5);
  CHECK(s.plan(1, 0) == 0.5);
  // A larger one: a band of allowed pairs where the cheapest pairs lead the greedy start astray.
  problem band = random_problem(24, 40, 40);
  band.a.assign(40, 1.0 / 40);
  band.b.assign(40, 1.0 / 40);
  for (index_t i = 0; i < 40; ++i)
    for (index_t j = 0; j < 40; ++j)
      if (j != i && j != (i + 1) % 40) band.c[static_cast<std::size_t>(i * 40 + j)] = inf;
  s = solve(band);
  check_optimal(band, s, 1e-10);

  // Hall's condition fails: rows 0 and 1 may only use column 0, which cannot take both.
  problem r;
  r.n = r.m = 2;
  r.a = {0.5, 0.5};
  r.b = {0.5, 0.5};
  r.c = {1.0, inf, 2.0, inf};
  s = solve(r);
  CHECK(s.result.status == moecomp::status::infeasible);
  // A row with every pair forbidden.
  problem z = random_problem(23, 4, 5);
  for (index_t j = 0; j < 5; ++j) z.c[static_cast<std::size_t>(2 * 5 + j)] = inf;
  s = solve(z);
  CHECK(s.result.status == moecomp::status::infeasible);
  // ... unless that row has zero mass.
  z.a[2] = 0;
  const double sa = std::accumulate(z.a.begin(), z.a.end(), 0.0);
  for (auto& t : z.a) t /= sa;
  s = solve(z);
  check_optimal(z, s);
}

TEST_CASE("emd: sparse plan equals the dense plan, with the same duals") {
  const problem p = random_problem(31, 60, 45, 0.2);
  const solution s = solve(p);
  const index_t cap = p.n + p.m - 1;
  host_vector<index_t> rows(cap), cols(cap);
  host_vector<double> mass(cap), u(p.n), v(p.m);
  const ot::emd_result r = ot::emd_sparse(moecomp::host_context{}, ot::emd_params{}, p.av(), p.bv(), p.cv(), rows.view(),
                                          cols.view(), mass.view(), u.view(), v.view());
  CHECK(r.status == moecomp::status::ok);
  CHECK(r.cost == s.result.cost);
  CHECK(r.iterations == s.result.iterations);
  REQUIRE(r.nonzeros == s.result.nonzeros);
  double total = 0;
  for (index_t k = 0; k < r.nonzeros; ++k) {
    CHECK(mass[k] > 0);
    CHECK(s.plan(rows[k], cols[k]) == mass[k]);
    if (k > 0) CHECK((rows[k - 1] < rows[k] || (rows[k - 1] == rows[k] && cols[k - 1] < cols[k])));
    total += mass[k];
  }
  CHECK(total == doctest::Approx(1.0).epsilon(1e-13));
  for (index_t i = 0; i < p.n; ++i) CHECK(u[i] == s.u[i]);
  for (index_t j = 0; j < p.m; ++j) CHECK(v[j] == s.v[j]);
  // Without duals too.
  const ot::emd_result r2 = ot::emd_sparse(moecomp::host_context{}, ot::emd_params{}, p.av(), p.bv(), p.cv(),
                                           rows.view(), cols.view(), mass.view());
  CHECK(r2.cost == r.cost);
}

TEST_CASE("emd: the iteration limit is reported, with a feasible plan and its cost") {
  const problem p = random_problem(41, 80, 70);
  const solution full = solve(p);
  REQUIRE(full.result.iterations > 10);
  ot::emd_params params;
  params.max_iterations = 5;
  const solution s = solve(p, params);
  CHECK(s.result.status == moecomp::status::iteration_limit);
  CHECK_FALSE(s.result.ok());
  CHECK(s.result.iterations == 5);
  // The criterion is the reduced cost of the arc that would have entered next: negative when stopped
  // short, exactly 0 at the optimum (no arc prices out).
  CHECK(s.result.criterion < 0);
  CHECK(full.result.ok());
  CHECK(full.result.criterion == 0);
  double cost = 0;
  for (index_t i = 0; i < p.n; ++i) {
    double row = 0;
    for (index_t j = 0; j < p.m; ++j) {
      CHECK(s.plan(i, j) >= 0);
      row += s.plan(i, j);
      cost += s.plan(i, j) * p.c[static_cast<std::size_t>(i * p.m + j)];
    }
    CHECK(std::abs(row - p.a[static_cast<std::size_t>(i)]) <= 1e-12);
  }
  CHECK(s.result.cost == doctest::Approx(cost).epsilon(1e-12));
  CHECK(s.result.cost >= full.result.cost);
  // max_iterations = 0 still answers ok when the start is already optimal (one row: one plan).
  params.max_iterations = 0;
  const solution one = solve(random_problem(42, 1, 6), params);
  CHECK(one.result.status == moecomp::status::ok);
  // ... and reports the limit otherwise.
  CHECK(solve(p, params).result.status == moecomp::status::iteration_limit);
}

TEST_CASE("emd: float input is computed in double") {
  const problem p = random_problem(51, 40, 30);
  std::vector<float> af(p.a.begin(), p.a.end()), bf(p.b.begin(), p.b.end()), cf(p.c.begin(), p.c.end());
  // The same problem in double, from the float values.
  problem q;
  q.n = p.n;
  q.m = p.m;
  q.a.assign(af.begin(), af.end());
  q.b.assign(bf.begin(), bf.end());
  q.c.assign(cf.begin(), cf.end());
  const solution sd = solve(q);
  host_matrix<double> plan(p.n, p.m);
  const ot::emd_result r = ot::emd(moecomp::host_context{}, ot::emd_params{}, moecomp::vector_view<float>(af.data(), p.n),
                                   moecomp::vector_view<const float>(bf.data(), p.m),
                                   moecomp::matrix_view<float>(cf.data(), p.n, p.m), plan.view());
  CHECK(r.status == moecomp::status::ok);
  CHECK(r.cost == sd.result.cost);
  for (index_t i = 0; i < p.n; ++i)
    for (index_t j = 0; j < p.m; ++j) CHECK(plan(i, j) == sd.plan(i, j));
}

TEST_CASE("emd: masses equal within the tolerance are accepted, b rescaled to a's sum") {
  problem p = random_problem(61, 10, 12);
  for (auto& t : p.b) t *= 1 + 5e-8;
  const solution s = solve(p);
  check_optimal(p, s);
}

TEST_CASE("emd: bad input is refused with a message naming the argument") {
  using moecomp_test::thrown_message;
  const problem p = random_problem(71, 4, 3);
  host_matrix<double> plan(4, 3);
  const moecomp::host_context ctx;
  const auto run = [&](const problem& q) {
    host_matrix<double> out(q.n, q.m);
    ot::emd(ctx, ot::emd_params{}, q.av(), q.bv(), q.cv(), out.view());
  };
  problem unequal = p;
  unequal.b[0] += 0.01;
  std::string msg = thrown_message([&] { run(unequal); });
  CHECK(msg.find("emd: a and b must have equal total mass") != std::string::npos);
  CHECK(msg.find("sum(b) = 1.01") != std::string::npos);

  problem negative = p;
  negative.a[2] = -0.1;
  msg = thrown_message([&] { run(negative); });
  CHECK(msg.find("a must be finite and >= 0, got -0.1 at index 2") != std::string::npos);

  problem nan_mass = p;
  nan_mass.b[1] = std::nan("");
  CHECK(thrown_message([&] { run(nan_mass); }).find("b must be finite and >= 0, got nan at index 1") != std::string::npos);

  problem nan_cost = p;
  nan_cost.c[1 * 3 + 2] = std::nan("");
  msg = thrown_message([&] { run(nan_cost); });
  CHECK(msg.find("cost(1, 2) is nan") != std::string::npos);
  problem minus_inf = p;
  minus_inf.c[0] = -inf;
  CHECK(thrown_message([&] { run(minus_inf); }).find("cost(0, 0) is -inf") != std::string::npos);

  msg = thrown_message([&] {
    ot::emd(ctx, ot::emd_params{}, p.av(), moecomp::vector_view<const double>(p.b.data(), 2), p.cv(), plan.view());
  });
  CHECK(msg == "emd: b must have 3 entries (the columns of cost, 4 x 3), got 2");
  msg = thrown_message([&] {
    ot::emd(ctx, ot::emd_params{}, moecomp::vector_view<const double>(p.a.data(), 3), p.bv(), p.cv(), plan.view());
  });
  CHECK(msg == "emd: a must have 4 entries (the rows of cost, 4 x 3), got 3");
  host_matrix<double> wrong(3, 4);
  msg = thrown_message([&] { ot::emd(ctx, ot::emd_params{}, p.av(), p.bv(), p.cv(), wrong.view()); });
  CHECK(msg == "emd: plan must be 4 x 3 like cost, got 3 x 4");
  host_vector<double> u(3), v(3);
  msg = thrown_message([&] { ot::emd(ctx, ot::emd_params{}, p.av(), p.bv(), p.cv(), plan.view(), u.view(), v.view()); });
  CHECK(msg == "emd: u must have 4 entries (the size of a), got 3");
  host_vector<index_t> rows(5), cols(6);
  host_vector<double> mass(6);
  msg = thrown_message(
      [&] { ot::emd_sparse(ctx, ot::emd_params{}, p.av(), p.bv(), p.cv(), rows.view(), cols.view(), mass.view()); });
  CHECK(msg == "emd_sparse: rows must hold at least n + m - 1 = 6 entries, got 5");
  ot::emd_params bad;
  bad.max_iterations = -1;
  msg = thrown_message([&] { ot::emd(ctx, bad, p.av(), p.bv(), p.cv(), plan.view()); });
  CHECK(msg == "emd: params.max_iterations must be >= 0, got -1");
}

TEST_CASE("emd: all-zero masses give the zero plan") {
  problem p = random_problem(81, 3, 4);
  p.a.assign(3, 0.0);
  p.b.assign(4, 0.0);
  const solution s = solve(p);
  CHECK(s.result.status == moecomp::status::ok);
  CHECK(s.result.cost == 0.0);
  CHECK(s.result.nonzeros == 0);
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 4; ++j) CHECK(s.plan(i, j) == 0.0);
}

TEST_CASE("emd: deterministic, whatever the thread count") {
  const problem p = random_problem(91, 120, 100, 0.1);
  const solution s1 = solve(p), s2 = solve(p);
  host_matrix<double> plan(p.n, p.m);
  const ot::emd_result r = ot::emd(moecomp::host_context(2), ot::emd_params{}, p.av(), p.bv(), p.cv(), plan.view());
  CHECK(s1.result.cost == s2.result.cost);
  CHECK(s1.result.iterations == s2.result.iterations);
  CHECK(r.cost == s1.result.cost);
  CHECK(r.iterations == s1.result.iterations);
  for (index_t i = 0; i < p.n; ++i)
    for (index_t j = 0; j < p.m; ++j) {
      CHECK(s1.plan(i, j) == s2.plan(i, j));
      CHECK(plan(i, j) == s1.plan(i, j));
    }
}

TEST_CASE_TEMPLATE("emd: bit-identical at 1, 2, 3 and 7 threads", T, float, double) {
  // docs/emd.md: the network simplex is single-threaded and breaks ties by lowest index, so the plan, the duals
  // and the result are bit-identical for any thread setting; the sparse form too. Some masses are zero.
  const problem p = random_problem(93, 300, 250, 0.1);
  const index_t n = p.n, m = p.m;
  const std::vector<T> a(p.a.begin(), p.a.end()), b(p.b.begin(), p.b.end()), c(p.c.begin(), p.c.end());
  const moecomp::vector_view<const T> av(a.data(), n), bv(b.data(), m);
  const moecomp::matrix_view<const T> cv(c.data(), n, m);
  moecomp_test::check_same_at_thread_counts([&](const moecomp::host_context& ctx) {
    host_matrix<double> plan(n, m);
    host_vector<double> u(n), v(m);
    const ot::emd_result r = ot::emd(ctx, ot::emd_params{}, av, bv, cv, plan.view(), u.view(), v.view());
    CHECK(r.ok());
    return std::make_tuple(plan.storage(), u.storage(), v.storage(), r.cost, r.iterations, r.nonzeros, r.status);
  });
  moecomp_test::check_same_at_thread_counts([&](const moecomp::host_context& ctx) {
    host_vector<index_t> rows(n + m - 1), cols(n + m - 1);
    host_vector<double> mass(n + m - 1), u(n), v(m);
    const ot::emd_result r =
        ot::emd_sparse(ctx, ot::emd_params{}, av, bv, cv, rows.view(), cols.view(), mass.view(), u.view(), v.view());
    return std::make_tuple(rows.storage(), cols.storage(), mass.storage(), u.storage(), v.storage(), r.cost,
                           r.iterations, r.nonzeros);
  });
}

TEST_CASE("emd: the spanning tree stays strongly feasible and consistent after every pivot") {
  // A random problem with zero masses, and a highly degenerate one (integer costs, equal masses).
  problem degenerate;
  degenerate.n = degenerate.m = 24;
  degenerate.a.assign(24, 1.0 / 24);
  degenerate.b = degenerate.a;
  moecomp::random_generator rng(3);
  for (index_t k = 0; k < 24 * 24; ++k) degenerate.c.push_back(std::floor(4 * uniform(rng)));
  for (const problem& p : {random_problem(101, 40, 30, 0.2), degenerate}) {
    const moecomp::host_context ctx;  // outlives the solver's workspaces
    ot::detail::transport_simplex<double> simplex(ctx, p.cv(), p.a.data(), p.b.data(), 1.0);
    simplex.solve(1000000);
    REQUIRE(simplex.status() == moecomp::status::ok);
    const std::int64_t pivots = simplex.iterations();
    for (std::int64_t limit = 0; limit <= pivots; ++limit) {
      simplex.solve(limit);
      CAPTURE(limit);
      CHECK(simplex.check_invariants() == "");
    }
  }
}
