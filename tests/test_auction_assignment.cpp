// The auction solver against the exact Jonker-Volgenant solver: within its gap bound on real costs,
// exact on integer costs, forbidden pairs, the bid limit, warm prices, and bad input.
#include <doctest/doctest.h>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/ot/auction_assignment.hpp>
#include <moecomp/ot/linear_assignment.hpp>

#include "test_support.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

using namespace moecomp;
using moecomp_test::thrown_message;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

template <class T>
host_matrix<T> random_costs(random_generator& g, index_t n, index_t m, bool integer, double scale = 1.0) {
  // integers 0 .. 9, or reals in [-scale, scale) drawn in double
  host_matrix<T> c(n, m);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < m; ++j)
      c(i, j) = integer ? static_cast<T>(g.uniform_index(10)) : static_cast<T>(g.uniform(-scale, scale));
  return c;
}

template <class T>
double exact(const host_matrix<T>& c, bool maximize, status* s = nullptr) {
  std::vector<index_t> cols(static_cast<std::size_t>(c.rows()));
  ot::linear_assignment_params p;
  p.maximize = maximize;
  const auto r = ot::linear_assignment(host_context(1), p, c.view(), make_vector_view(cols.data(), c.rows()));
  if (s) *s = r.status;
  return r.cost;
}

template <class T>
void check_valid(const host_matrix<T>& c, const std::vector<index_t>& cols, double cost) {
  std::vector<int> used(static_cast<std::size_t>(c.cols()), 0);
  double total = 0;
  for (index_t i = 0; i < c.rows(); ++i) {
    const index_t j = cols[static_cast<std::size_t>(i)];
    REQUIRE(j >= 0);
    REQUIRE(j < c.cols());
    CHECK(used[static_cast<std::size_t>(j)]++ == 0);
    total += static_cast<double>(c(i, j));
  }
  CHECK(total == cost);
}

template <class T>
ot::auction_result auction(const host_matrix<T>& c, const ot::auction_params& p, std::vector<index_t>& cols,
                           int threads = 1) {
  cols.assign(static_cast<std::size_t>(c.rows()), -5);
  return ot::auction_assignment(host_context(threads), p, c.view(), make_vector_view(cols.data(), c.rows()));
}

}  // namespace

TEST_CASE_TEMPLATE("auction_assignment: within gap_bound of the optimum on real costs", T, float, double) {
  random_generator g(31);
  for (index_t n : {1, 5, 40, 150})
    for (index_t m : {n, n + 3, 2 * n})
      for (bool maximize : {false, true}) {
        CAPTURE(n);
        CAPTURE(m);
        CAPTURE(maximize);
        const host_matrix<T> c = random_costs<T>(g, n, m, false, 10.0);
        ot::auction_params p;
        p.maximize = maximize;
        std::vector<index_t> cols;
        const ot::auction_result r = auction(c, p, cols);
        REQUIRE(r.status == status::ok);
        check_valid(c, cols, r.cost);
        const double best = exact(c, maximize);
        CHECK(r.criterion > 0);
        CHECK(r.criterion <= 20.0 * 1e-6 * 1.0000001);  // automatic: range 1e-6
        CHECK(std::abs(r.cost - best) <= r.criterion * (1 + 1e-9));
        CHECK(r.phases >= 1);
        CHECK(r.iterations >= m);
        // a coarse final epsilon: a coarser (still valid) bound
        p.epsilon_final = 0.5;
        const ot::auction_result coarse = auction(c, p, cols);
        check_valid(c, cols, coarse.cost);
        CHECK(coarse.criterion == doctest::Approx(0.5 * static_cast<double>(m)));
        CHECK(std::abs(coarse.cost - best) <= coarse.criterion);
      }
}

TEST_CASE("auction_assignment: exact on integer costs when epsilon_final < 1 / m") {
  random_generator g(32);
  for (index_t n : {1, 2, 7, 64, 200})
    for (index_t m : {n, n + 1, 3 * n})
      for (bool maximize : {false, true}) {
        CAPTURE(n);
        CAPTURE(m);
        CAPTURE(maximize);
        const host_matrix<double> c = random_costs<double>(g, n, m, true);
        std::vector<index_t> cols;
        ot::auction_params p;
        p.maximize = maximize;
        const ot::auction_result automatic = auction(c, p, cols);  // automatic epsilon: 1 / (m + 1)
        check_valid(c, cols, automatic.cost);
        CHECK(automatic.cost == exact(c, maximize));
        CHECK(automatic.criterion < 1.0);
        p.epsilon_final = 0.99 / static_cast<double>(m);
        p.epsilon_factor = 0.5;
        const ot::auction_result chosen = auction(c, p, cols);
        check_valid(c, cols, chosen.cost);
        CHECK(chosen.cost == exact(c, maximize));
      }
}

TEST_CASE("auction_assignment: forbidden pairs and infeasible problems") {
  random_generator g(33);
  int feasible = 0, infeasible = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const index_t n = 1 + trial % 6, m = n + trial % 3;
    const bool maximize = trial % 2 == 1;
    host_matrix<double> c = random_costs<double>(g, n, m, true);
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < m; ++j)
        if (g.uniform() < 0.5) c(i, j) = maximize ? -inf : inf;
    status s;
    const double best = exact(c, maximize, &s);
    std::vector<index_t> cols;
    ot::auction_params p;
    p.maximize = maximize;
    const ot::auction_result r = auction(c, p, cols);
    CAPTURE(trial);
    if (s == status::infeasible) {
      CHECK(r.status == status::infeasible);
      CHECK(r.cost == (maximize ? -inf : inf));
      CHECK(std::all_of(cols.begin(), cols.end(), [](index_t j) { return j == -1; }));
      ++infeasible;
    } else {
      REQUIRE(r.status == status::ok);
      check_valid(c, cols, r.cost);
      CHECK(r.cost == best);
      ++feasible;
    }
  }
  CHECK(feasible > 30);
  CHECK(infeasible > 30);
  host_matrix<float> none(2, 2, std::numeric_limits<float>::infinity());
  std::vector<index_t> cols;
  CHECK(auction(none, {}, cols).status == status::infeasible);
}

TEST_CASE("auction_assignment: the bid limit stops it with the last complete phase") {
  random_generator g(34);
  const host_matrix<double> c = random_costs<double>(g, 60, 60, false);
  std::vector<index_t> cols;
  ot::auction_params p;
  const ot::auction_result full = auction(c, p, cols);
  REQUIRE(full.status == status::ok);
  REQUIRE(full.phases >= 3);
  p.max_bids = 10;  // not even one phase
  ot::auction_result r = auction(c, p, cols);
  CHECK(r.status == status::iteration_limit);
  CHECK(r.iterations == 10);
  CHECK(std::isnan(r.cost));
  CHECK(r.criterion == inf);
  CHECK(std::all_of(cols.begin(), cols.end(), [](index_t j) { return j == -1; }));
  p.max_bids = full.iterations - 1;  // the last phase does not finish
  r = auction(c, p, cols);
  CHECK(r.status == status::iteration_limit);
  check_valid(c, cols, r.cost);
  CHECK(r.criterion > full.criterion);
  CHECK(std::abs(r.cost - exact(c, false)) <= r.criterion);
}

TEST_CASE("auction_assignment: warm prices, determinism, small shapes") {
  random_generator g(35);
  host_matrix<double> c = random_costs<double>(g, 100, 100, false);
  std::vector<index_t> cols(100);
  std::vector<double> price(100);
  ot::auction_params p;
  const ot::auction_result cold =
      ot::auction_assignment(host_context(1), p, c.view(), make_vector_view(cols.data(), 100),
                             make_vector_view(price.data(), 100));
  for (index_t i = 0; i < 100; ++i)
    for (index_t j = 0; j < 100; ++j) c(i, j) += g.normal(0.0, 1e-7);
  p.warm_start = true;
  const ot::auction_result warm = ot::auction_assignment(
      host_context(1), p, c.view(), make_vector_view(cols.data(), 100), make_vector_view(price.data(), 100));
  REQUIRE(warm.status == status::ok);
  check_valid(c, cols, warm.cost);
  CHECK(std::abs(warm.cost - exact(c, false)) <= warm.criterion);
  CHECK(warm.iterations < cold.iterations);

  std::vector<index_t> a, b;
  const host_matrix<float> f = random_costs<float>(g, 50, 70, false);
  const auto ra = auction(f, {}, a, 1), rb = auction(f, {}, b, 4);
  CHECK(a == b);
  CHECK(ra.cost == rb.cost);
  CHECK(ra.iterations == rb.iterations);

  host_matrix<double> one(1, 4);
  const double row[] = {2, 1, 1, 3};
  for (index_t j = 0; j < 4; ++j) one(0, j) = row[j];
  std::vector<index_t> oc;
  CHECK(auction(one, {}, oc).cost == 1.0);
  const host_matrix<double> single(1, 1, 4.5);
  CHECK(auction(single, {}, oc).cost == 4.5);
  CHECK(oc == std::vector<index_t>{0});
  const host_matrix<double> empty(0, 3);
  CHECK(auction(empty, {}, oc).status == status::ok);
}

TEST_CASE_TEMPLATE("auction_assignment: bit-identical at 1, 2, 3 and 7 threads", T, float, double) {
  // docs/linear_assignment.md: the bidding order is fixed (FIFO queue) and the host auction is sequential, so
  // assignment, prices and result are bit-identical for every thread count. Real costs and integer costs
  // (exact there), minimised and maximised.
  const index_t n = 200, m = 260;
  for (bool integer : {false, true}) {
    for (bool maximize : {false, true}) {
      CAPTURE(integer);
      CAPTURE(maximize);
      host_matrix<T> c(n, m);
      random_generator rng(integer ? 71 : 72);
      for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < m; ++j)
          c(i, j) = integer ? static_cast<T>(rng.uniform_index(10)) : rng.uniform<T>(T(-10), T(10));
      ot::auction_params p;
      p.maximize = maximize;
      moecomp_test::check_same_at_thread_counts([&](const host_context& ctx) {
        std::vector<index_t> cols(static_cast<std::size_t>(n), -5);
        std::vector<double> price(static_cast<std::size_t>(m));
        const ot::auction_result r = ot::auction_assignment(ctx, p, c.view(), make_vector_view(cols.data(), n),
                                                            make_vector_view(price.data(), m));
        return std::make_tuple(cols, price, r.cost, r.criterion, r.iterations, r.phases, r.status);
      });
    }
  }
}

TEST_CASE("auction_assignment: bad input is rejected with a message naming it") {
  host_matrix<double> c(2, 3, 1.0);
  std::vector<index_t> cols(2);
  const auto out = make_vector_view(cols.data(), 2);
  const host_context ctx(1);
  ot::auction_params p;
  p.epsilon_factor = 1.0;
  CHECK(thrown_message([&] { ot::auction_assignment(ctx, p, c.view(), out); }) ==
        "auction_assignment: params.epsilon_factor must be in (0, 1), got 1");
  p = {};
  p.epsilon_final = -1;
  CHECK(thrown_message([&] { ot::auction_assignment(ctx, p, c.view(), out); }) ==
        "auction_assignment: params.epsilon_final must be finite and >= 0 (0: automatic), got -1");
  p = {};
  p.max_bids = -2;
  CHECK(thrown_message([&] { ot::auction_assignment(ctx, p, c.view(), out); }) ==
        "auction_assignment: params.max_bids must be >= 0 (0: no limit), got -2");
  p = {};
  p.warm_start = true;
  CHECK(thrown_message([&] { ot::auction_assignment(ctx, p, c.view(), out); }).find("needs the overload") !=
        std::string::npos);
  c(0, 1) = std::nan("");
  CHECK(thrown_message([&] { ot::auction_assignment(ctx, {}, c.view(), out); }) ==
        "auction_assignment: cost(0, 1) is NaN; costs must be numbers (+inf marks a forbidden pair)");
  c(0, 1) = 0;
  const host_matrix<double> tall(3, 2, 1.0);
  std::vector<index_t> three(3);
  CHECK(thrown_message([&] { ot::auction_assignment(ctx, {}, tall.view(), make_vector_view(three.data(), 3)); })
            .find("auction_assignment: cost must have no more rows than columns (n <= m), got 3 x 2") == 0);
  std::vector<double> price(2);
  CHECK(thrown_message([&] {
          ot::auction_assignment(ctx, {}, c.view(), out, make_vector_view(price.data(), 2));
        }) == "auction_assignment: column_price must have length m = 3 (the cost's columns), got 2");
}
