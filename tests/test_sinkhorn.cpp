// Sinkhorn: closed forms, marginals at convergence, agreement of the four methods, the log domain where the
// plain method underflows, iteration limits, batched == one by one, determinism across thread counts, and
// bad-input messages. (The comparison with POT itself is tests/peers/test_sinkhorn_pot.py.)
#include "test_support.hpp"

#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/ot/detail/sinkhorn_kernels.hpp>
#include <moecomp/ot/sinkhorn.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

using namespace moecomp;
using moecomp_test::thrown_message;

namespace {

struct problem {
  index_t n, m;
  std::vector<double> a, b, cost;
};

/// Random histograms and squared Euclidean costs between random 2-D points, scaled to [0, 1].
problem random_problem(index_t n, index_t m, unsigned seed) {
  random_generator gen(seed);
  problem p{n, m, std::vector<double>(n), std::vector<double>(m), std::vector<double>(n * m)};
  double sa = 0, sb = 0;
  for (auto& x : p.a) sa += (x = gen.uniform<double>() + 0.1);
  for (auto& x : p.b) sb += (x = gen.uniform<double>() + 0.1);
  for (auto& x : p.a) x /= sa;
  for (auto& x : p.b) x /= sb;
  std::vector<double> xs(2 * n), ys(2 * m);
  for (auto& x : xs) x = gen.uniform<double>();
  for (auto& y : ys) y = gen.uniform<double>();
  double top = 0;
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < m; ++j) {
      const double dx = xs[2 * i] - ys[2 * j], dy = xs[2 * i + 1] - ys[2 * j + 1];
      p.cost[i * m + j] = dx * dx + dy * dy;
      top = std::max(top, p.cost[i * m + j]);
    }
  for (auto& c : p.cost) c /= top;
  return p;
}

ot::sinkhorn_result solve(const problem& p, const ot::sinkhorn_params& params, std::vector<double>& plan,
                          int threads = 0) {
  plan.assign(static_cast<std::size_t>(p.n * p.m), -1.0);
  return ot::sinkhorn(host_context(threads), params, make_vector_view(p.a.data(), p.n), make_vector_view(p.b.data(), p.m),
                      make_matrix_view(p.cost.data(), p.n, p.m), make_matrix_view(plan.data(), p.n, p.m));
}

double max_marginal_error(const problem& p, const std::vector<double>& plan) {
  double worst = 0;
  for (index_t i = 0; i < p.n; ++i) {
    double s = 0;
    for (index_t j = 0; j < p.m; ++j) s += plan[i * p.m + j];
    worst = std::max(worst, std::fabs(s - p.a[i]));
  }
  for (index_t j = 0; j < p.m; ++j) {
    double s = 0;
    for (index_t i = 0; i < p.n; ++i) s += plan[i * p.m + j];
    worst = std::max(worst, std::fabs(s - p.b[j]));
  }
  return worst;
}

double max_relative_difference(const std::vector<double>& x, const std::vector<double>& y) {
  double top = 0, diff = 0;
  for (std::size_t k = 0; k < x.size(); ++k) {
    top = std::max(top, std::fabs(y[k]));
    diff = std::max(diff, std::fabs(x[k] - y[k]));
  }
  return diff / top;
}

const ot::sinkhorn_method all_methods[] = {ot::sinkhorn_method::plain, ot::sinkhorn_method::log,
                                           ot::sinkhorn_method::stabilized, ot::sinkhorn_method::epsilon_scaling};

}  // namespace

TEST_CASE("sinkhorn: method names round-trip") {
  for (auto m : all_methods) CHECK(ot::parse_sinkhorn_method(ot::to_string(m)) == m);
  CHECK(thrown_message([] { (void)ot::parse_sinkhorn_method("greenkhorn"); }).find("greenkhorn") != std::string::npos);
}

TEST_CASE("sinkhorn: one source (n = 1) or one target (m = 1) gives the only feasible plan") {
  for (auto method : all_methods) {
    ot::sinkhorn_params params;
    params.reg = 0.1;
    params.method = method;
    problem row{1, 4, {1.0}, {0.1, 0.2, 0.3, 0.4}, {0.5, 0.1, 0.9, 0.3}};
    std::vector<double> plan;
    const auto r = solve(row, params, plan);
    CHECK(r.ok());
    for (index_t j = 0; j < 4; ++j) CHECK(plan[j] == doctest::Approx(row.b[j]).epsilon(1e-9));
    problem col{3, 1, {0.2, 0.5, 0.3}, {1.0}, {0.4, 0.0, 2.0}};
    const auto r2 = solve(col, params, plan);
    CHECK(r2.ok());
    for (index_t i = 0; i < 3; ++i) CHECK(plan[i] == doctest::Approx(col.a[i]).epsilon(1e-9));
    CHECK(r2.cost == doctest::Approx(0.2 * 0.4 + 0.5 * 0.0 + 0.3 * 2.0).epsilon(1e-9));
  }
}

TEST_CASE("sinkhorn: a constant cost gives a b^T exactly; a large reg tends to a b^T") {
  problem p = random_problem(7, 5, 1);
  for (auto& c : p.cost) c = 0.25;
  for (auto method : all_methods) {
    ot::sinkhorn_params params;
    params.reg = 0.05;
    params.method = method;
    std::vector<double> plan;
    const auto r = solve(p, params, plan);
    CHECK(r.ok());
    CHECK(r.status == status::ok);
    for (index_t i = 0; i < p.n; ++i)
      for (index_t j = 0; j < p.m; ++j) CHECK(plan[i * p.m + j] == doctest::Approx(p.a[i] * p.b[j]).epsilon(1e-12));
    CHECK(r.cost == doctest::Approx(0.25).epsilon(1e-12));
  }
  problem q = random_problem(6, 8, 2);
  ot::sinkhorn_params params;
  params.reg = 1e4;
  std::vector<double> plan;
  solve(q, params, plan);
  for (index_t i = 0; i < q.n; ++i)
    for (index_t j = 0; j < q.m; ++j) CHECK(plan[i * q.m + j] == doctest::Approx(q.a[i] * q.b[j]).epsilon(1e-4));
}

TEST_CASE("sinkhorn: marginals hold at convergence and the four methods agree") {
  const problem p = random_problem(40, 30, 3);
  std::vector<double> reference;
  for (auto method : all_methods) {
    ot::sinkhorn_params params;
    params.reg = 0.05;
    params.method = method;
    std::vector<double> plan;
    std::vector<double> f(p.n), g(p.m);
    const auto r = ot::sinkhorn(host_context(), params, make_vector_view(p.a.data(), p.n),
                                make_vector_view(p.b.data(), p.m), make_matrix_view(p.cost.data(), p.n, p.m),
                                make_matrix_view((plan.resize(p.n * p.m), plan.data()), p.n, p.m),
                                make_vector_view(f.data(), p.n), make_vector_view(g.data(), p.m));
    INFO(ot::to_string(method));
    CHECK(r.ok());
    CHECK(r.status == status::ok);
    CHECK(max_marginal_error(p, plan) < 1e-8);
    // plan_ij = exp((f_i + g_j - C_ij) / reg)
    for (index_t i = 0; i < p.n; i += 7)
      for (index_t j = 0; j < p.m; j += 5)
        CHECK(plan[i * p.m + j] ==
              doctest::Approx(std::exp((f[i] + g[j] - p.cost[i * p.m + j]) / params.reg)).epsilon(1e-9));
    double cost = 0;
    for (std::size_t k = 0; k < plan.size(); ++k) cost += plan[k] * p.cost[k];
    CHECK(r.cost == doctest::Approx(cost).epsilon(1e-12));
    if (reference.empty())
      reference = plan;
    else
      CHECK(max_relative_difference(plan, reference) < 1e-6);
  }
}

TEST_CASE("sinkhorn kernels: the vector loops give the scalar loops' results bit for bit, at every length") {
  // The scalar reference: 16 partial sums (lane l takes j = l mod 16), added in sum16's tree order, then the
  // tail; column sums with one multiply-add per row in row order (multiply_add: fused exactly when the
  // library's loops are).
  const auto dot_reference = [](const float* x, const double* y, index_t m) {
    double p[16] = {};
    index_t j = 0;
    for (; j + 16 <= m; j += 16)
      for (int l = 0; l < 16; ++l) p[l] = ot::detail::multiply_add(static_cast<double>(x[j + l]), y[j + l], p[l]);
    double s = ot::detail::sum16(p);
    for (; j < m; ++j) s = ot::detail::multiply_add(static_cast<double>(x[j]), y[j], s);
    return s;
  };
  random_generator rng(7);
  for (index_t m : {0, 1, 5, 15, 16, 17, 31, 33, 48, 100, 2000}) {
    std::vector<float> rows(static_cast<std::size_t>(4 * m + 1));
    std::vector<double> v(static_cast<std::size_t>(m + 1)), col(static_cast<std::size_t>(m + 1)), expected;
    for (auto& x : rows) x = rng.uniform<float>();
    for (auto& x : v) x = rng.uniform<double>(0.5, 2.0);
    for (auto& x : col) x = rng.uniform<double>();
    const float *x0 = rows.data(), *x1 = x0 + m, *z0 = x1 + m, *z1 = z0 + m;
    const double u0 = 0.75, u1 = 1.0 / 3.0;
    expected = col;
    for (index_t j = 0; j < m; ++j) {
      expected[j] = ot::detail::multiply_add(u0, static_cast<double>(x0[j]), expected[j]);
      expected[j] = ot::detail::multiply_add(u1, static_cast<double>(x1[j]), expected[j]);
    }
    INFO("m = " << m);
    double s0 = -1, s1 = -1;
    ot::detail::kernel_dot2(z0, z1, v.data(), m, s0, s1);
    CHECK(s0 == dot_reference(z0, v.data(), m));
    CHECK(s1 == dot_reference(z1, v.data(), m));
    CHECK(ot::detail::kernel_dot(z0, v.data(), m) == dot_reference(z0, v.data(), m));
    std::vector<double> fused = col;
    double t0 = -1, t1 = -1;
    ot::detail::kernel_axpy2_dot2(fused.data(), u0, x0, u1, x1, z0, z1, v.data(), m, t0, t1);
    CHECK(t0 == s0);
    CHECK(t1 == s1);
    CHECK(std::memcmp(fused.data(), expected.data(), static_cast<std::size_t>(m) * sizeof(double)) == 0);
    std::vector<double> plain = col;
    ot::detail::kernel_axpy2(plain.data(), u0, x0, u1, x1, m);
    CHECK(std::memcmp(plain.data(), expected.data(), static_cast<std::size_t>(m) * sizeof(double)) == 0);
    CHECK(fused[static_cast<std::size_t>(m)] == col[static_cast<std::size_t>(m)]);  // nothing past the end
  }
}

TEST_CASE("sinkhorn: the float copy of K matches the double iteration to 1e-6 and meets the tolerance exactly") {
  const problem p = random_problem(601, 503, 4);  // 3e5 entries: the float-kernel path; odd sizes
  ot::sinkhorn_params params;
  params.reg = 1e-2;
  std::vector<double> mixed, mixed_serial, exact;
  const auto r1 = solve(p, params, mixed, 2);
  // The float path too is bit-identical for any thread count (row blocks, pipelined row pairs, odd tails).
  const auto r1_serial = solve(p, params, mixed_serial, 1);
  CHECK(std::memcmp(mixed.data(), mixed_serial.data(), mixed.size() * sizeof(double)) == 0);
  CHECK(r1.cost == r1_serial.cost);
  CHECK(r1.iterations == r1_serial.iterations);
  params.allow_float_kernel = false;
  const auto r2 = solve(p, params, exact);
  CHECK(r1.ok());
  CHECK(r2.ok());
  CHECK(r1.criterion < params.tolerance);
  CHECK(max_relative_difference(mixed, exact) < 1e-6);
  CHECK(std::abs(r1.iterations - r2.iterations) <= ot::resolved_check_every(params));
}

TEST_CASE("sinkhorn: at reg = 1e-3 the log domain stays finite where the plain method underflows") {
  problem p = random_problem(30, 20, 5);
  // Row 0 is far from every target: exp(-C / reg) underflows to 0 on its whole row.
  for (index_t j = 0; j < p.m; ++j) p.cost[j] = 0.9 + 0.1 * static_cast<double>(j) / p.m;
  ot::sinkhorn_params params;
  params.reg = 1e-3;
  std::vector<double> plan;
  const auto plain = solve(p, params, plan);
  CHECK(plain.status == status::numerical_error);
  CHECK_FALSE(plain.ok());
  params.method = ot::sinkhorn_method::log;
  params.max_iterations = 5000;
  const auto log = solve(p, params, plan);
  CHECK(log.status != status::numerical_error);
  for (double x : plan) CHECK(std::isfinite(x));
  double row0 = 0;
  for (index_t j = 0; j < p.m; ++j) row0 += plan[j];
  CHECK(row0 == doctest::Approx(p.a[0]).epsilon(1e-6));
}

TEST_CASE("sinkhorn: check_every 0 is POT's period per method; explicit periods are used as given") {
  static_assert(ot::sinkhorn_params{}.check_every == 0);
  ot::sinkhorn_params params;
  params.method = ot::sinkhorn_method::plain;
  CHECK(ot::resolved_check_every(params) == 10);
  params.method = ot::sinkhorn_method::log;
  CHECK(ot::resolved_check_every(params) == 10);
  params.method = ot::sinkhorn_method::stabilized;
  CHECK(ot::resolved_check_every(params) == 20);
  params.method = ot::sinkhorn_method::epsilon_scaling;
  CHECK(ot::resolved_check_every(params) == 10);
  params.check_every = 7;
  CHECK(ot::resolved_check_every(params) == 7);
  // Stabilized stops only at a checked iteration: with the default period the count is 1 + a multiple of 20,
  // the same as with an explicit 20, and an explicit 10 stops at a multiple of 10 no later.
  const problem p = random_problem(30, 40, 11);
  std::vector<double> plan;
  params = {};
  params.reg = 0.05;
  params.method = ot::sinkhorn_method::stabilized;
  const ot::sinkhorn_result by_default = solve(p, params, plan);
  params.check_every = 20;
  const ot::sinkhorn_result twenty = solve(p, params, plan);
  params.check_every = 10;
  const ot::sinkhorn_result ten = solve(p, params, plan);
  REQUIRE(by_default.ok());
  CHECK(by_default.iterations == twenty.iterations);
  CHECK((by_default.iterations - 1) % 20 == 0);
  CHECK((ten.iterations - 1) % 10 == 0);
  CHECK(ten.iterations <= by_default.iterations);
  CHECK(by_default.iterations - ten.iterations < 20);
  params.method = ot::sinkhorn_method::plain;
  params.check_every = 0;
  CHECK((solve(p, params, plan).iterations - 1) % 10 == 0);
}

TEST_CASE("sinkhorn: the iteration limit is reported, not hidden") {
  const problem p = random_problem(25, 25, 6);
  for (auto method : all_methods) {
    ot::sinkhorn_params params;
    params.reg = 1e-2;
    params.method = method;
    params.max_iterations = method == ot::sinkhorn_method::epsilon_scaling ? 35 : 3;
    params.tolerance = 0;
    std::vector<double> plan;
    const auto r = solve(p, params, plan);
    INFO(ot::to_string(method));
    CHECK_FALSE(r.ok());
    CHECK(r.status == status::iteration_limit);
    CHECK(r.iterations == params.max_iterations);
  }
}

TEST_CASE("sinkhorn: zero masses give zero rows and columns") {
  problem p = random_problem(8, 6, 7);
  p.a[2] = 0;
  p.b[4] = 0;
  double sa = 0, sb = 0;
  for (double x : p.a) sa += x;
  for (double x : p.b) sb += x;
  for (auto& x : p.a) x /= sa;
  for (auto& x : p.b) x /= sb;
  for (auto method : all_methods) {
    ot::sinkhorn_params params;
    params.reg = 0.05;
    params.method = method;
    std::vector<double> plan;
    const auto r = solve(p, params, plan);
    INFO(ot::to_string(method));
    CHECK(r.ok());
    for (index_t j = 0; j < p.m; ++j) CHECK(plan[2 * p.m + j] == 0.0);
    for (index_t i = 0; i < p.n; ++i) CHECK(plan[i * p.m + 4] == 0.0);
    CHECK(max_marginal_error(p, plan) < 1e-8);
  }
}

TEST_CASE("sinkhorn: bit-identical for any thread count, and batched == one by one") {
  const problem p = random_problem(300, 260, 8);
  for (auto method : all_methods) {
    ot::sinkhorn_params params;
    params.reg = 0.02;
    params.method = method;
    std::vector<double> one, two, four;
    const auto r1 = solve(p, params, one, 1);
    const auto r2 = solve(p, params, two, 2);
    const auto r4 = solve(p, params, four, 4);
    INFO(ot::to_string(method));
    CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(double)) == 0);
    CHECK(std::memcmp(one.data(), four.data(), one.size() * sizeof(double)) == 0);
    CHECK(r1.iterations == r2.iterations);
    CHECK(r1.cost == r4.cost);
  }
  // Three problems of one shape.
  const index_t batch = 3, n = 20, m = 15;
  std::vector<double> a(batch * n), b(batch * m), costs(batch * n * m), plans(batch * n * m);
  std::vector<problem> ps;
  for (index_t k = 0; k < batch; ++k) {
    ps.push_back(random_problem(n, m, 20 + static_cast<unsigned>(k)));
    std::copy(ps[k].a.begin(), ps[k].a.end(), a.begin() + k * n);
    std::copy(ps[k].b.begin(), ps[k].b.end(), b.begin() + k * m);
    std::copy(ps[k].cost.begin(), ps[k].cost.end(), costs.begin() + k * n * m);
  }
  for (auto method : all_methods) {
    ot::sinkhorn_params params;
    params.reg = 0.05;
    params.method = method;
    std::vector<ot::sinkhorn_result> results(batch);
    ot::sinkhorn_batched(host_context(2), params, make_matrix_view(a.data(), batch, n), make_matrix_view(b.data(), batch, m),
                         make_matrix_stack_view(costs.data(), batch, n, m), make_matrix_stack_view(plans.data(), batch, n, m),
                         make_vector_view(results.data(), batch));
    for (index_t k = 0; k < batch; ++k) {
      std::vector<double> plan;
      const auto r = solve(ps[k], params, plan, 1);
      CHECK(std::memcmp(plan.data(), plans.data() + k * n * m, plan.size() * sizeof(double)) == 0);
      CHECK(r.iterations == results[k].iterations);
      CHECK(r.cost == results[k].cost);
    }
  }
}

namespace {

/// As random_problem, from moecomp's seeded generator, in T: random histograms (two masses zero) and squared
/// distances between random 2-D points scaled to [0, 1], with a few forbidden pairs (+inf).
template <class T>
struct seeded_problem {
  index_t n, m;
  std::vector<T> a, b, cost;
  seeded_problem(index_t rows, index_t cols, std::uint64_t seed)
      : n(rows), m(cols), a(static_cast<std::size_t>(rows)), b(static_cast<std::size_t>(cols)),
        cost(static_cast<std::size_t>(rows * cols)) {
    random_generator rng(seed);
    std::vector<double> da(a.size()), db(b.size());
    std::vector<double> xs(static_cast<std::size_t>(2 * n)), ys(static_cast<std::size_t>(2 * m));
    for (auto& x : da) x = rng.uniform(0.1, 1.1);
    for (auto& x : db) x = rng.uniform(0.1, 1.1);
    da[3] = db[5] = 0;
    double sa = 0, sb = 0;
    for (double x : da) sa += x;
    for (double x : db) sb += x;
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<T>(da[i] / sa);
    for (std::size_t j = 0; j < b.size(); ++j) b[j] = static_cast<T>(db[j] / sb);
    for (auto& x : xs) x = rng.uniform<double>();
    for (auto& y : ys) y = rng.uniform<double>();
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < m; ++j) {
        const double dx = xs[2 * i] - ys[2 * j], dy = xs[2 * i + 1] - ys[2 * j + 1];
        cost[i * m + j] = static_cast<T>((dx * dx + dy * dy) / 2);
      }
    for (index_t k = 0; k < 5; ++k)
      cost[rng.uniform_index(static_cast<std::uint64_t>(n * m))] = std::numeric_limits<T>::infinity();
  }
  vector_view<const T> av() const { return make_vector_view(a.data(), n); }
  vector_view<const T> bv() const { return make_vector_view(b.data(), m); }
};

}  // namespace

TEST_CASE_TEMPLATE("sinkhorn: bit-identical at 1, 2, 3 and 7 threads", T, float, double) {
  // docs/sinkhorn.md: rows are cut into at most 32 fixed blocks whatever the thread count, each block has its
  // own column accumulator, and the accumulators are added in block order, so plan, potentials and result
  // are bit-identical for any thread count. Passes run in parallel from 2^15 entries, the plain method's float
  // copy of K (double input) from 2^18, hence 600 x 480 for plain and 256 x 200 for the slower methods.
  for (auto method : all_methods) {
    INFO(ot::to_string(method));
    const bool plain = method == ot::sinkhorn_method::plain;
    const seeded_problem<T> p(plain ? 600 : 256, plain ? 480 : 200, 81);
    ot::sinkhorn_params params;
    params.reg = 0.02;
    params.method = method;
    params.inner_iterations = 20;  // epsilon_scaling
    moecomp_test::check_same_at_thread_counts([&](const host_context& ctx) {
      std::vector<T> plan(static_cast<std::size_t>(p.n * p.m), T(-1)), f(static_cast<std::size_t>(p.n)),
          g(static_cast<std::size_t>(p.m));
      const ot::sinkhorn_result r =
          ot::sinkhorn(ctx, params, p.av(), p.bv(), make_matrix_view(p.cost.data(), p.n, p.m),
                       make_matrix_view(plan.data(), p.n, p.m), make_vector_view(f.data(), p.n),
                       make_vector_view(g.data(), p.m));
      CHECK(r.ok());
      return std::make_tuple(plan, f, g, r.cost, r.criterion, r.iterations, r.ok(), r.status);
    });
  }
}

TEST_CASE_TEMPLATE("sinkhorn_batched: bit-identical at 1, 2, 3 and 7 threads", T, float, double) {
  // Each problem is solved on one thread, handed out dynamically: 11 problems, more than 7 threads.
  const index_t batch = 11, n = 70, m = 60;
  std::vector<T> a, b, costs;
  for (index_t k = 0; k < batch; ++k) {
    const seeded_problem<T> p(n, m, 90 + static_cast<std::uint64_t>(k));
    a.insert(a.end(), p.a.begin(), p.a.end());
    b.insert(b.end(), p.b.begin(), p.b.end());
    costs.insert(costs.end(), p.cost.begin(), p.cost.end());
  }
  for (auto method : all_methods) {
    INFO(ot::to_string(method));
    ot::sinkhorn_params params;
    params.reg = 0.02;
    params.method = method;
    moecomp_test::check_same_at_thread_counts([&](const host_context& ctx) {
      std::vector<T> plans(costs.size(), T(-1));
      std::vector<ot::sinkhorn_result> results(static_cast<std::size_t>(batch));
      ot::sinkhorn_batched(ctx, params, make_matrix_view(a.data(), batch, n), make_matrix_view(b.data(), batch, m),
                           make_matrix_stack_view(costs.data(), batch, n, m), make_matrix_stack_view(plans.data(), batch, n, m),
                           make_vector_view(results.data(), batch));
      std::vector<double> cost, error;
      std::vector<index_t> iterations;
      std::vector<status> outcome;
      for (const auto& r : results)
        cost.push_back(r.cost), error.push_back(r.criterion), iterations.push_back(r.iterations),
            outcome.push_back(r.status);
      return std::make_tuple(plans, cost, error, iterations, outcome);
    });
  }
}

TEST_CASE("sinkhorn: float inputs") {
  const problem p = random_problem(30, 25, 9);
  std::vector<float> a(p.a.begin(), p.a.end()), b(p.b.begin(), p.b.end()), c(p.cost.begin(), p.cost.end()), plan(30 * 25);
  std::vector<double> reference;
  ot::sinkhorn_params params;
  params.reg = 0.05;
  params.tolerance = 1e-6;
  solve(p, params, reference);
  for (auto method : all_methods) {
    params.method = method;
    const auto r = ot::sinkhorn(host_context(), params, make_vector_view(a.data(), 30), make_vector_view(b.data(), 25),
                                make_matrix_view(c.data(), 30, 25), make_matrix_view(plan.data(), 30, 25));
    CHECK(r.ok());
    for (std::size_t k = 0; k < plan.size(); ++k) CHECK(plan[k] == doctest::Approx(reference[k]).epsilon(1e-3));
  }
}

TEST_CASE("sinkhorn: +inf costs forbid their pairs, in every method, and the cost sums the allowed pairs") {
  // a = (1/2, 1/2), b = (1/2, 1/2) and pair (0, 1) forbidden: the only feasible plan moves a_0 to b_0, so
  // a_1 splits evenly, and every method must converge to [[1/2, 0], [0, 1/2]]... up to entropic blur on the
  // allowed pairs, which with cost 0 on the diagonal and 1 on (1, 0) and a small reg is below 1e-12.
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> a = {0.5, 0.5}, b = {0.5, 0.5};
  const std::vector<double> cost = {0.0, inf, 1.0, 0.0};
  for (const auto method : {ot::sinkhorn_method::plain, ot::sinkhorn_method::log, ot::sinkhorn_method::stabilized,
                            ot::sinkhorn_method::epsilon_scaling}) {
    CAPTURE(ot::to_string(method));
    ot::sinkhorn_params params;
    params.reg = 0.02;
    params.method = method;
    std::vector<double> plan(4, -1.0);
    const ot::sinkhorn_result r =
        ot::sinkhorn(host_context(), params, make_vector_view(a.data(), 2), make_vector_view(b.data(), 2),
                     make_matrix_view(cost.data(), 2, 2), make_matrix_view(plan.data(), 2, 2));
    CHECK(r.status == moecomp::status::ok);
    CHECK(plan[1] == 0.0);  // exactly: exp(-inf) = 0 in every form of the kernel
    CHECK(plan[0] == doctest::Approx(0.5).epsilon(1e-9));
    CHECK(plan[3] == doctest::Approx(0.5).epsilon(1e-9));
    CHECK(std::isfinite(r.cost));
    CHECK(r.cost == doctest::Approx(plan[2] * 1.0).epsilon(1e-12));
  }
}

TEST_CASE("sinkhorn: bad input is rejected with a message naming the argument") {
  const problem p = random_problem(4, 3, 10);
  std::vector<double> plan(12);
  auto call = [&](std::vector<double> a, std::vector<double> b, ot::sinkhorn_params params, index_t plan_rows = 4) {
    return thrown_message([&] {
      ot::sinkhorn(host_context(), params, make_vector_view(a.data(), static_cast<index_t>(a.size())),
                   make_vector_view(b.data(), static_cast<index_t>(b.size())), make_matrix_view(p.cost.data(), 4, 3),
                   make_matrix_view(plan.data(), plan_rows, 3));
    });
  };
  ot::sinkhorn_params ok;
  ok.reg = 0.1;
  std::vector<double> a = p.a, b = p.b;
  auto neg = a;
  neg[1] = -0.1;
  CHECK(call(neg, b, ok).find("sinkhorn: a must be finite and >= 0, got -0.1 at index 1") != std::string::npos);
  auto nan = b;
  nan[0] = std::nan("");
  CHECK(call(a, nan, ok).find("sinkhorn: b must be finite and >= 0") != std::string::npos);
  auto heavy = a;
  for (auto& x : heavy) x *= 2;
  CHECK(call(heavy, b, ok).find("a and b must have equal total mass") != std::string::npos);
  ot::sinkhorn_params bad = ok;
  bad.reg = 0;
  CHECK(call(a, b, bad).find("params.reg must be finite and > 0, got 0") != std::string::npos);
  bad = ok;
  bad.check_every = -1;
  CHECK(call(a, b, bad).find("params.check_every must be >= 1, or 0 for POT's period of the method, got -1") !=
        std::string::npos);
  CHECK(call({0.5, 0.5}, b, ok).find("cost must be 2 x 3") != std::string::npos);
  CHECK(call(a, b, ok, 2).find("plan must be 4 x 3") != std::string::npos);
  auto cost_message = [&](const std::vector<double>& cost) {
    return thrown_message([&] {
      ot::sinkhorn(host_context(), ok, make_vector_view(a.data(), 4), make_vector_view(b.data(), 3),
                   make_matrix_view(cost.data(), 4, 3), make_matrix_view(plan.data(), 4, 3));
    });
  };
  // +inf forbids a pair; NaN, -inf, and a row or column forbidden everywhere are misuse.
  std::vector<double> bad_cost = p.cost;
  bad_cost[5] = std::numeric_limits<double>::quiet_NaN();
  CHECK(cost_message(bad_cost).find("cost must hold numbers or +inf (a forbidden pair), got nan at (1, 2)") !=
        std::string::npos);
  bad_cost[5] = -std::numeric_limits<double>::infinity();
  CHECK(cost_message(bad_cost).find("got -inf at (1, 2)") != std::string::npos);
  bad_cost = p.cost;
  for (int j = 0; j < 3; ++j) bad_cost[static_cast<std::size_t>(2 * 3 + j)] = std::numeric_limits<double>::infinity();
  CHECK(cost_message(bad_cost).find("cost row 2 is +inf (forbidden) everywhere") != std::string::npos);
  bad_cost = p.cost;
  for (int i = 0; i < 4; ++i) bad_cost[static_cast<std::size_t>(i * 3 + 1)] = std::numeric_limits<double>::infinity();
  CHECK(cost_message(bad_cost).find("cost column 1 is +inf (forbidden) everywhere") != std::string::npos);
  std::vector<double> shared = p.cost;
  CHECK(thrown_message([&] {
          ot::sinkhorn(host_context(), ok, make_vector_view(a.data(), 4), make_vector_view(b.data(), 3),
                       make_matrix_view(shared.data(), 4, 3), make_matrix_view(shared.data(), 4, 3));
        }).find("plan must not overlap cost") != std::string::npos);
}
