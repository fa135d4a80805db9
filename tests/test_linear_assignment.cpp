// Exact linear assignment (Jonker-Volgenant): brute force on tiny problems, planted answers, ties, forbidden
// pairs, duals as an optimality certificate, warm start, the batched form, and bad input.
#include <doctest/doctest.h>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/ot/linear_assignment.hpp>

#include "test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

using namespace moecomp;
using moecomp_test::thrown_message;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

/// Best total over every injective map of the rows into the columns (+inf / -inf when none is finite).
template <class T>
double brute_force(const host_matrix<T>& c, bool maximize) {
  const index_t n = c.rows(), m = c.cols();
  std::vector<int> used(static_cast<std::size_t>(m), 0);
  double best = maximize ? -inf : inf;
  auto rec = [&](auto&& self, index_t i, double sum) -> void {
    if (i == n) {
      best = maximize ? std::max(best, sum) : std::min(best, sum);
      return;
    }
    for (index_t j = 0; j < m; ++j) {
      if (used[static_cast<std::size_t>(j)] || std::isinf(static_cast<double>(c(i, j)))) continue;
      used[static_cast<std::size_t>(j)] = 1;
      self(self, i + 1, sum + static_cast<double>(c(i, j)));
      used[static_cast<std::size_t>(j)] = 0;
    }
  };
  rec(rec, 0, 0.0);
  return best;
}

/// row_to_column is an injective map into [0, m) avoiding forbidden pairs, and `cost` is its total.
template <class T>
void check_assignment(const host_matrix<T>& c, const std::vector<index_t>& cols, double cost) {
  std::vector<int> used(static_cast<std::size_t>(c.cols()), 0);
  double total = 0;
  for (index_t i = 0; i < c.rows(); ++i) {
    const index_t j = cols[static_cast<std::size_t>(i)];
    REQUIRE(j >= 0);
    REQUIRE(j < c.cols());
    CHECK(used[static_cast<std::size_t>(j)] == 0);
    used[static_cast<std::size_t>(j)] = 1;
    CHECK(std::isfinite(static_cast<double>(c(i, j))));
    total += static_cast<double>(c(i, j));
  }
  CHECK(total == cost);
}

/// The duals certify optimality: feasibility on every finite pair, equality on the assigned ones, and for
/// n < m the sign condition with zeros on the unassigned columns.
template <class T>
void check_duals(const host_matrix<T>& c, bool maximize, const std::vector<index_t>& cols,
                 const std::vector<double>& u, const std::vector<double>& v, double tol) {
  const index_t n = c.rows(), m = c.cols();
  const double s = maximize ? -1.0 : 1.0;
  std::vector<int> assigned(static_cast<std::size_t>(m), 0);
  for (index_t i = 0; i < n; ++i) assigned[static_cast<std::size_t>(cols[static_cast<std::size_t>(i)])] = 1;
  int violations = 0, slack = 0;
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < m; ++j) {
      const double cij = static_cast<double>(c(i, j));
      if (std::isinf(cij)) continue;
      const double reduced = s * (cij - u[static_cast<std::size_t>(i)] - v[static_cast<std::size_t>(j)]);
      if (reduced < -tol) ++violations;
      if (cols[static_cast<std::size_t>(i)] == j && std::abs(reduced) > tol) ++slack;
    }
  CHECK(violations == 0);
  CHECK(slack == 0);
  if (n < m)
    for (index_t j = 0; j < m; ++j) {
      const double vj = s * v[static_cast<std::size_t>(j)];
      CHECK(vj <= tol);
      if (!assigned[static_cast<std::size_t>(j)]) CHECK(vj == 0.0);
    }
}

template <class T>
host_matrix<T> random_matrix(random_generator& g, index_t n, index_t m, double lo = 0.0, double hi = 1.0) {
  host_matrix<T> c(n, m);  // uniform in [lo, hi), drawn in double
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < m; ++j) c(i, j) = static_cast<T>(g.uniform(lo, hi));
  return c;
}

template <class T>
host_matrix<T> integer_matrix(random_generator& g, index_t n, index_t m, int values) {
  host_matrix<T> c(n, m);  // integers 0 .. values - 1
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < m; ++j) c(i, j) = static_cast<T>(g.uniform_index(static_cast<std::uint64_t>(values)));
  return c;
}

struct solved {
  ot::linear_assignment_result result;
  std::vector<index_t> cols;
  std::vector<double> u, v;
};

template <class T>
solved solve(const host_matrix<T>& c, bool maximize, int threads = 1) {
  solved s;
  s.cols.assign(static_cast<std::size_t>(c.rows()), -7);
  s.u.assign(static_cast<std::size_t>(c.rows()), 0.0);
  s.v.assign(static_cast<std::size_t>(c.cols()), 0.0);
  ot::linear_assignment_params p;
  p.maximize = maximize;
  s.result = ot::linear_assignment(host_context(threads), p, c.view(), make_vector_view(s.cols.data(), c.rows()),
                                   make_vector_view(s.u.data(), c.rows()), make_vector_view(s.v.data(), c.cols()));
  // the overload without potentials gives the same answer
  std::vector<index_t> plain(static_cast<std::size_t>(c.rows()));
  const auto r = ot::linear_assignment(host_context(threads), p, c.const_view(),
                                       make_vector_view(plain.data(), c.rows()));
  CHECK(r.cost == s.result.cost);
  CHECK(plain == s.cols);
  return s;
}

}  // namespace

TEST_CASE_TEMPLATE("linear_assignment: brute force over every assignment of tiny problems", T, float, double) {
  random_generator g(11);
  for (index_t n = 1; n <= 5; ++n)
    for (index_t m = n; m <= 6; ++m)
      for (int trial = 0; trial < 12; ++trial)
        for (bool maximize : {false, true}) {
          CAPTURE(n);
          CAPTURE(m);
          CAPTURE(trial);
          CAPTURE(maximize);
          // alternate smooth random costs and heavily tied small integers
          const host_matrix<T> c = trial % 2 ? integer_matrix<T>(g, n, m, 3) : random_matrix<T>(g, n, m, -2.0, 5.0);
          const solved s = solve(c, maximize);
          REQUIRE(s.result.status == status::ok);
          check_assignment(c, s.cols, s.result.cost);
          CHECK(s.result.cost == doctest::Approx(brute_force(c, maximize)).epsilon(1e-12));
          check_duals(c, maximize, s.cols, s.u, s.v, 1e-9);
        }
}

TEST_CASE("linear_assignment: a planted permutation is recovered exactly") {
  random_generator g(3);
  for (index_t n : {1, 2, 17, 128, 300}) {
    std::vector<index_t> p(static_cast<std::size_t>(n));
    std::iota(p.begin(), p.end(), 0);
    g.shuffle(p.begin(), p.end());
    host_matrix<double> c = random_matrix<double>(g, n, n, 1.0, 2.0);
    for (index_t i = 0; i < n; ++i) c(i, p[static_cast<std::size_t>(i)]) = 0.5;
    const solved s = solve(c, false);
    CHECK(s.cols == p);
    CHECK(s.result.cost == 0.5 * static_cast<double>(n));
    // the same plant as a maximum
    host_matrix<double> neg(n, n);
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < n; ++j) neg(i, j) = -c(i, j);
    const solved t = solve(neg, true);
    CHECK(t.cols == p);
    CHECK(t.result.cost == -0.5 * static_cast<double>(n));
  }
}

TEST_CASE("linear_assignment: duals certify optimality on larger random and tied problems") {
  random_generator g(5);
  for (index_t n : {50, 200})
    for (index_t m : {n, n + 1, 2 * n})
      for (bool maximize : {false, true}) {
        CAPTURE(n);
        CAPTURE(m);
        CAPTURE(maximize);
        const host_matrix<double> c = random_matrix<double>(g, n, m);
        const solved s = solve(c, maximize);
        REQUIRE(s.result.status == status::ok);
        check_assignment(c, s.cols, s.result.cost);
        check_duals(c, maximize, s.cols, s.u, s.v, 1e-12);
        const host_matrix<float> t = integer_matrix<float>(g, n, m, 4);  // heavy ties, exact arithmetic
        const solved st = solve(t, maximize);
        REQUIRE(st.result.status == status::ok);
        check_assignment(t, st.cols, st.result.cost);
        check_duals(t, maximize, st.cols, st.u, st.v, 0.0);
      }
}

TEST_CASE("linear_assignment: ties are broken deterministically") {
  SUBCASE("all costs equal: a valid assignment, the same one every time") {
    const host_matrix<double> c(6, 6, 2.5);
    const solved s = solve(c, false);
    check_assignment(c, s.cols, s.result.cost);
    CHECK(s.result.cost == 15.0);
    CHECK(solve(c, false, 4).cols == s.cols);
  }
  SUBCASE("one row: the lowest column of the minimum") {
    host_matrix<double> c(1, 5);
    const double row[] = {3, 1, 2, 1, 1};
    for (index_t j = 0; j < 5; ++j) c(0, j) = row[j];
    CHECK(solve(c, false).cols == std::vector<index_t>{1});
    CHECK(solve(c, true).cols == std::vector<index_t>{0});
  }
}

TEST_CASE("linear_assignment: float costs are read as float and solved in double") {
  random_generator g(9);
  const host_matrix<float> c = random_matrix<float>(g, 40, 60);
  host_matrix<double> wide(40, 60);
  for (index_t i = 0; i < 40; ++i)
    for (index_t j = 0; j < 60; ++j) wide(i, j) = c(i, j);
  const solved a = solve(c, false), b = solve(wide, false);
  CHECK(a.cols == b.cols);
  CHECK(a.result.cost == b.result.cost);
}

TEST_CASE("linear_assignment: forbidden pairs and infeasible problems") {
  SUBCASE("feasible with forbidden pairs, against brute force") {
    random_generator g(21);
    int checked = 0;
    for (int trial = 0; trial < 300; ++trial) {
      const index_t n = 1 + trial % 5, m = n + trial % 3;
      for (bool maximize : {false, true}) {
        host_matrix<double> c = random_matrix<double>(g, n, m, -1.0, 1.0);
        for (index_t i = 0; i < n; ++i)
          for (index_t j = 0; j < m; ++j)
            if (g.uniform() < 0.4) c(i, j) = maximize ? -inf : inf;
        const double best = brute_force(c, maximize);
        const solved s = solve(c, maximize);
        CAPTURE(trial);
        if (std::isinf(best)) {
          CHECK(s.result.status == status::infeasible);
          CHECK(s.result.cost == best);
          CHECK(std::all_of(s.cols.begin(), s.cols.end(), [](index_t j) { return j == -1; }));
          CHECK(std::isnan(s.v[0]));
        } else {
          REQUIRE(s.result.status == status::ok);
          check_assignment(c, s.cols, s.result.cost);
          CHECK(s.result.cost == doctest::Approx(best).epsilon(1e-12));
          check_duals(c, maximize, s.cols, s.u, s.v, 1e-9);
          ++checked;
        }
      }
    }
    CHECK(checked > 100);
  }
  SUBCASE("two rows that can only use column 0") {
    host_matrix<double> c(2, 3, inf);
    c(0, 0) = 1;
    c(1, 0) = 2;
    const solved s = solve(c, false);
    CHECK(s.result.status == status::infeasible);
    CHECK(s.result.cost == inf);
    CHECK(s.cols == std::vector<index_t>{-1, -1});
  }
  SUBCASE("a column with no allowed row in a square problem") {
    host_matrix<double> c(3, 3, 1.0);
    for (index_t i = 0; i < 3; ++i) c(i, 1) = inf;
    CHECK(solve(c, false).result.status == status::infeasible);
  }
  SUBCASE("a row with no allowed column") {
    host_matrix<double> c(3, 4, 1.0);
    for (index_t j = 0; j < 4; ++j) c(2, j) = inf;
    CHECK(solve(c, false).result.status == status::infeasible);
  }
}

TEST_CASE("linear_assignment: empty and one-row problems") {
  std::vector<index_t> none;
  const host_matrix<double> empty(0, 0), wide(0, 4);
  auto r = ot::linear_assignment(host_context(1), {}, empty.view(), vector_view<index_t>());
  CHECK(r.status == status::ok);
  CHECK(r.cost == 0.0);
  r = ot::linear_assignment(host_context(1), {}, wide.view(), vector_view<index_t>());
  CHECK(r.cost == 0.0);
  host_matrix<float> one(1, 7);
  for (index_t j = 0; j < 7; ++j) one(0, j) = static_cast<float>((j * 5) % 7);  // 0 5 3 1 6 4 2
  CHECK(solve(one, false).cols == std::vector<index_t>{0});
  CHECK(solve(one, true).cols == std::vector<index_t>{4});
  CHECK(solve(one, true).result.cost == 6.0);
}

TEST_CASE("linear_assignment: strided views") {
  random_generator g(2);
  const host_matrix<double> big = random_matrix<double>(g, 12, 20);
  const host_matrix<double> c = [&] {
    host_matrix<double> s(9, 14);
    for (index_t i = 0; i < 9; ++i)
      for (index_t j = 0; j < 14; ++j) s(i, j) = big(i + 2, j + 3);
    return s;
  }();
  std::vector<index_t> cols(18, -5);
  const auto r = ot::linear_assignment(host_context(1), {}, big.view().block(2, 3, 9, 14),
                                       make_vector_view(cols.data(), 9, 2));
  const solved s = solve(c, false);
  CHECK(r.cost == s.result.cost);
  for (index_t i = 0; i < 9; ++i) CHECK(cols[static_cast<std::size_t>(2 * i)] == s.cols[static_cast<std::size_t>(i)]);
  CHECK(cols[1] == -5);
}

TEST_CASE("linear_assignment: warm start gives the same optimum") {
  random_generator g(17);
  for (bool maximize : {false, true})
    for (index_t n : {30, 150}) {
      CAPTURE(maximize);
      CAPTURE(n);
      host_matrix<double> c = random_matrix<double>(g, n, n);
      solved previous = solve(c, maximize);
      for (int round = 0; round < 4; ++round) {  // a slowly moving problem, as in the free-support barycenter
        for (index_t i = 0; i < n; ++i)
          for (index_t j = 0; j < n; ++j) c(i, j) += g.normal(0.0, 1e-3);
        const solved cold = solve(c, maximize);
        solved warm = previous;
        ot::linear_assignment_params p;
        p.maximize = maximize;
        p.warm_start = true;
        warm.result = ot::linear_assignment(host_context(1), p, c.view(), make_vector_view(warm.cols.data(), n),
                                            make_vector_view(warm.u.data(), n), make_vector_view(warm.v.data(), n));
        REQUIRE(warm.result.status == status::ok);
        check_assignment(c, warm.cols, warm.result.cost);
        CHECK(warm.result.cost == doctest::Approx(cold.result.cost).epsilon(1e-12));
        check_duals(c, maximize, warm.cols, warm.u, warm.v, 1e-12);
        previous = warm;
      }
    }
  SUBCASE("arbitrary potentials and hints are only a starting point") {
    const host_matrix<double> c = integer_matrix<double>(g, 40, 40, 5);
    const solved cold = solve(c, false);
    std::vector<index_t> cols(40);
    std::vector<double> u(40), v(40);
    for (auto& x : v) x = g.uniform(-100.0, 100.0);
    for (auto& x : cols) x = -3 + static_cast<index_t>(g.uniform_index(49));  // -3 .. 45: some out of range
    ot::linear_assignment_params p;
    p.warm_start = true;
    const auto r = ot::linear_assignment(host_context(1), p, c.view(), make_vector_view(cols.data(), 40),
                                         make_vector_view(u.data(), 40), make_vector_view(v.data(), 40));
    CHECK(r.cost == cold.result.cost);
    check_duals(c, false, cols, u, v, 1e-9);
  }
  SUBCASE("rectangular problems start cold and stay exact") {
    const host_matrix<double> c = random_matrix<double>(g, 20, 31);
    const solved cold = solve(c, false);
    std::vector<index_t> cols(20, 0);
    std::vector<double> u(20), v(31, 5.0);
    ot::linear_assignment_params p;
    p.warm_start = true;
    const auto r = ot::linear_assignment(host_context(1), p, c.view(), make_vector_view(cols.data(), 20),
                                         make_vector_view(u.data(), 20), make_vector_view(v.data(), 31));
    CHECK(r.cost == cold.result.cost);
    CHECK(cols == cold.cols);
    check_duals(c, false, cols, u, v, 1e-12);
  }
}

TEST_CASE("linear_assignment_batched: equals one-by-one, for every thread count") {
  random_generator g(8);
  const index_t batch = 37, n = 6, m = 9;
  for (bool maximize : {false, true}) {
    host_matrix<float> costs = integer_matrix<float>(g, batch * n, m, 4);
    costs(3 * n, 0) = maximize ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
    for (index_t j = 0; j < m; ++j)  // problem 5 is infeasible: its first two rows may only use column 2
      for (index_t i = 5 * n; i < 5 * n + 2; ++i)
        if (j != 2) costs(i, j) = maximize ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
    ot::linear_assignment_params p;
    p.maximize = maximize;
    std::vector<index_t> expected(static_cast<std::size_t>(batch * n));
    std::vector<ot::linear_assignment_result> expected_results(static_cast<std::size_t>(batch));
    for (index_t b = 0; b < batch; ++b)
      expected_results[static_cast<std::size_t>(b)] =
          ot::linear_assignment(host_context(1), p, costs.view().row_range(b * n, n),
                                make_vector_view(expected.data() + b * n, n));
    CHECK(expected_results[5].status == status::infeasible);
    for (int threads : {1, 2, 3, 8}) {
      CAPTURE(threads);
      std::vector<index_t> cols(static_cast<std::size_t>(batch * n), -9);
      std::vector<ot::linear_assignment_result> results(static_cast<std::size_t>(batch));
      ot::linear_assignment_batched(host_context(threads), p, split_rows(costs.const_view(), batch),
                                    make_matrix_view(cols.data(), batch, n), make_vector_view(results.data(), batch));
      CHECK(cols == expected);
      for (index_t b = 0; b < batch; ++b) {
        CHECK(results[static_cast<std::size_t>(b)].cost == expected_results[static_cast<std::size_t>(b)].cost);
        CHECK(results[static_cast<std::size_t>(b)].status == expected_results[static_cast<std::size_t>(b)].status);
      }
    }
  }
  // batch 0, and problems with no rows
  ot::linear_assignment_batched(host_context(2), {}, moecomp::matrix_stack_view<const double>(nullptr, 0, 0, 3),
                                matrix_view<index_t>(), vector_view<ot::linear_assignment_result>());
  std::vector<ot::linear_assignment_result> results(4);
  ot::linear_assignment_batched(host_context(2), {}, moecomp::matrix_stack_view<const double>(nullptr, 4, 0, 3),
                                matrix_view<index_t>(nullptr, 4, 0), make_vector_view(results.data(), 4));
  CHECK(results[3].cost == 0.0);
}

namespace {

/// Costs from moecomp's seeded generator: uniform in [0, 1), or integers 0 .. levels - 1 (many ties) when
/// levels > 0.
template <class T>
host_matrix<T> seeded_costs(index_t n, index_t m, std::uint64_t seed, std::uint64_t levels = 0) {
  host_matrix<T> c(n, m);
  random_generator rng(seed);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < m; ++j) c(i, j) = levels > 0 ? static_cast<T>(rng.uniform_index(levels)) : rng.uniform<T>();
  return c;
}

}  // namespace

TEST_CASE_TEMPLATE("linear_assignment: bit-identical at 1, 2, 3 and 7 threads", T, float, double) {
  // docs/linear_assignment.md: the same input gives bit-identical assignment, potentials and cost for every
  // thread count (one problem is solved sequentially; the batched form runs whole problems in parallel, each
  // on one thread). Real costs and integer costs full of ties, minimised and maximised.
  for (std::uint64_t levels : {0, 6}) {
    for (bool maximize : {false, true}) {
      CAPTURE(levels);
      CAPTURE(maximize);
      ot::linear_assignment_params p;
      p.maximize = maximize;
      const host_matrix<T> c = seeded_costs<T>(300, 360, 40 + levels, levels);
      moecomp_test::check_same_at_thread_counts([&](const host_context& ctx) {
        std::vector<index_t> cols(300, -7);
        std::vector<double> u(300), v(360);
        const auto r = ot::linear_assignment(ctx, p, c.view(), make_vector_view(cols.data(), 300),
                                             make_vector_view(u.data(), 300), make_vector_view(v.data(), 360));
        return std::make_tuple(cols, u, v, r.cost, r.status);
      });
      // 40 problems of 30 x 40: more problems than threads, handed out dynamically.
      const index_t batch = 40, n = 30, m = 40;
      const host_matrix<T> costs = seeded_costs<T>(batch * n, m, 50 + levels, levels);
      moecomp_test::check_same_at_thread_counts([&](const host_context& ctx) {
        std::vector<index_t> cols(static_cast<std::size_t>(batch * n), -7);
        std::vector<ot::linear_assignment_result> results(static_cast<std::size_t>(batch));
        ot::linear_assignment_batched(ctx, p, split_rows(costs.view(), batch), make_matrix_view(cols.data(), batch, n),
                                      make_vector_view(results.data(), batch));
        std::vector<double> cost;
        std::vector<status> outcome;
        for (const auto& r : results) cost.push_back(r.cost), outcome.push_back(r.status);
        return std::make_tuple(cols, cost, outcome);
      });
    }
  }
}

TEST_CASE("linear_assignment: the vector kernels equal the scalar ones at every width") {
  random_generator g(6);
  auto small = [&g] { return static_cast<int>(g.uniform_index(4)); };  // 0 .. 3
  for (index_t m : {1, 2, 3, 7, 8, 15, 16, 17, 33, 100}) {
    CAPTURE(m);
    std::vector<float> row(static_cast<std::size_t>(m));
    std::vector<double> v(static_cast<std::size_t>(m)), d(static_cast<std::size_t>(m));
    for (index_t k = 0; k < m; ++k) {
      row[static_cast<std::size_t>(k)] = k % 5 == 4 ? std::numeric_limits<float>::infinity() : static_cast<float>(small());
      v[static_cast<std::size_t>(k)] = k % 7 == 3 ? -inf : small() * 0.5;
      d[static_cast<std::size_t>(k)] = k % 3 == 0 ? inf : small();
    }
    auto relax = [&](auto width) {
      std::vector<double> dd = d;
      std::vector<std::int32_t> pred(static_cast<std::size_t>(m), 9);
      const auto r = ot::detail::relax_argmin<decltype(width)::value, float, false>(row.data(), m, 0.5, v.data(),
                                                                                   dd.data(), pred.data(), 4);
      return std::make_tuple(r.value, r.index, dd, pred);
    };
    auto smallest = [&](auto width, double cap) {
      const auto r = ot::detail::two_smallest<decltype(width)::value, float, true>(row.data(), m, v.data(), cap);
      return std::make_tuple(r.first, r.first_index, r.second, r.second_index);
    };
    const auto reference = relax(std::integral_constant<int, 1>());
    const auto reference2 = smallest(std::integral_constant<int, 1>(), inf);
    const auto reference3 = smallest(std::integral_constant<int, 1>(), 1.0);
    CHECK(reference == relax(std::integral_constant<int, 2>()));
    CHECK(reference == relax(std::integral_constant<int, 4>()));
    CHECK(reference == relax(std::integral_constant<int, 8>()));
    CHECK(reference2 == smallest(std::integral_constant<int, 2>(), inf));
    CHECK(reference2 == smallest(std::integral_constant<int, 4>(), inf));
    CHECK(reference2 == smallest(std::integral_constant<int, 8>(), inf));
    CHECK(reference3 == smallest(std::integral_constant<int, 8>(), 1.0));
  }
}

TEST_CASE("linear_assignment: bad input is rejected with a message naming it") {
  host_matrix<double> c(3, 4, 1.0);
  std::vector<index_t> cols(3);
  std::vector<double> u(3), v(4);
  const host_context ctx(1);
  const auto out = make_vector_view(cols.data(), 3);
  c(1, 2) = std::nan("");
  CHECK(thrown_message([&] { ot::linear_assignment(ctx, {}, c.view(), out); }) ==
        "linear_assignment: cost(1, 2) is NaN; costs must be numbers (+inf marks a forbidden pair)");
  c(1, 2) = -inf;
  CHECK(thrown_message([&] { ot::linear_assignment(ctx, {}, c.view(), out); }) ==
        "linear_assignment: cost(1, 2) is -inf; when minimising only +inf (a forbidden pair) may be infinite");
  c(1, 2) = inf;
  ot::linear_assignment_params maximize;
  maximize.maximize = true;
  CHECK(thrown_message([&] { ot::linear_assignment(ctx, maximize, c.view(), out); }) ==
        "linear_assignment: cost(1, 2) is +inf; when maximising only -inf (a forbidden pair) may be infinite");
  c(1, 2) = 0.0;
  const host_matrix<double> tall(4, 3, 1.0);
  std::vector<index_t> four(4);
  CHECK(thrown_message([&] { ot::linear_assignment(ctx, {}, tall.view(), make_vector_view(four.data(), 4)); }) ==
        "linear_assignment: cost must have no more rows than columns (n <= m), got 4 x 3; pass the transpose to "
        "assign columns to rows");
  CHECK(thrown_message([&] { ot::linear_assignment(ctx, {}, c.view(), make_vector_view(cols.data(), 2)); }) ==
        "linear_assignment: row_to_column must have length n = 3 (the cost's rows), got 2");
  CHECK(thrown_message([&] {
          ot::linear_assignment(ctx, {}, c.view(), out, make_vector_view(u.data(), 3), make_vector_view(v.data(), 3));
        }) == "linear_assignment: column_potential must have length m = 4 (the cost's columns), got 3");
  CHECK(thrown_message([&] {
          ot::linear_assignment(ctx, {}, c.view(), out, make_vector_view(u.data(), 2), make_vector_view(v.data(), 4));
        }) == "linear_assignment: row_potential must have length n = 3 (the cost's rows), got 2");
  ot::linear_assignment_params warm;
  warm.warm_start = true;
  CHECK(thrown_message([&] { ot::linear_assignment(ctx, warm, c.view(), out); }).find("params.warm_start needs") !=
        std::string::npos);
  const host_matrix<double> square(3, 3, 1.0);
  std::vector<double> bad_v{0.0, inf, 0.0};
  CHECK(thrown_message([&] {
          ot::linear_assignment(ctx, warm, square.view(), out, make_vector_view(u.data(), 3),
                                make_vector_view(bad_v.data(), 3));
        }) == "linear_assignment: column_potential(1) is inf; a warm start needs finite potentials");
  std::vector<ot::linear_assignment_result> results(2);
  CHECK(thrown_message([&] {
          ot::linear_assignment_batched(ctx, {}, split_rows(c.view(), 3), make_matrix_view(cols.data(), 3, 1),
                                        make_vector_view(results.data(), 2));
        }) == "linear_assignment_batched: results must have 3 entries (one per cost matrix), got 2");
  CHECK(thrown_message([&] {
          ot::linear_assignment_batched(ctx, {}, split_rows(c.view(), 3), make_matrix_view(cols.data(), 1, 3),
                                        make_vector_view(results.data(), 3));
        }) == "linear_assignment_batched: row_to_column must be 3 x 1 (batch x n), got 1 x 3");
}
