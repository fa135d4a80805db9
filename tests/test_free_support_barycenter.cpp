// Free-support Wasserstein barycenters on the host: k = 1, planted permutations, weights (1, 0), the 1-D
// closed form (weighted mean of the sorted clouds), optimality of the returned permutations for the returned
// barycenter (re-solved), thread-count determinism, float and double, the general path against the uniform
// path and against hand-computed answers, the iteration count and stopping rule, and bad input. (The
// comparison with POT itself is tests/peers/test_barycenter_free_pot.py.)
#include <doctest/doctest.h>

#include "test_support.hpp"
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/ot/free_support_barycenter.hpp>
#include <moecomp/ot/linear_assignment.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

using moecomp::host_context;
using moecomp::host_matrix;
using moecomp::host_vector;
using moecomp::index_t;
using moecomp::matrix_view;
using moecomp::vector_view;
using moecomp_test::thrown_message;
namespace ot = moecomp::ot;

namespace {

using moecomp_test::random_permutation;

template <class T>
host_matrix<T> random_points(index_t rows, index_t cols, std::uint64_t seed) {
  host_matrix<T> x(rows, cols);
  moecomp::random_generator rng(seed);
  rng.fill_normal(x.view());
  return x;
}

template <class T>
struct run_output {
  host_matrix<T> barycenter;
  host_matrix<index_t> permutations;
  ot::free_support_barycenter_result result;
};

template <class T>
run_output<T> run_uniform(const host_matrix<T>& measures, index_t k, const std::vector<double>& weights,
                          const host_matrix<T>& init, ot::free_support_barycenter_params params = {},
                          int threads = 0) {
  run_output<T> out{host_matrix<T>(init.rows(), init.cols()), host_matrix<index_t>(k, init.rows()), {}};
  out.result = ot::free_support_barycenter(host_context(threads), params, split_rows(measures.view(), k),
                                           vector_view<const double>(weights.data(), k), init.view(),
                                           out.barycenter.view(), out.permutations.view());
  return out;
}

template <class T>
host_matrix<T> rows_of(const host_matrix<T>& x, index_t first, index_t count) {
  host_matrix<T> out(count, x.cols());
  for (index_t i = 0; i < count; ++i)
    for (index_t c = 0; c < x.cols(); ++c) out(i, c) = x(first + i, c);
  return out;
}

/// sum_i ||x_i - b_p(i)||^2 in double.
template <class T>
double assignment_cost(matrix_view<const T> x, matrix_view<const T> b, const index_t* p) {
  double total = 0.0;
  for (index_t i = 0; i < x.rows(); ++i)
    for (index_t c = 0; c < x.cols(); ++c) {
      const double delta = double(x(i, c)) - double(b(p[i], c));
      total += delta * delta;
    }
  return total;
}

/// Checks that every returned permutation is optimal for the returned barycenter by solving the
/// assignment again from scratch on an independently built squared Euclidean cost (in double).
template <class T>
void check_permutations_optimal(const host_matrix<T>& measures, index_t k, const run_output<T>& out,
                                const std::vector<double>& weights) {
  const index_t n = out.barycenter.rows(), d = out.barycenter.cols();
  double objective = 0.0;
  for (index_t j = 0; j < k; ++j) {
    host_matrix<double> cost(n, n);
    for (index_t i = 0; i < n; ++i)
      for (index_t l = 0; l < n; ++l) {
        double s = 0.0;
        for (index_t c = 0; c < d; ++c) {
          const double delta = double(measures(j * n + i, c)) - double(out.barycenter(l, c));
          s += delta * delta;
        }
        cost(i, l) = s;
      }
    host_vector<index_t> p(n);
    host_vector<double> u(n), v(n);
    const auto solved = ot::linear_assignment(host_context(1), ot::linear_assignment_params{}, cost.const_view(),
                                              p.view(), u.view(), v.view());
    REQUIRE(solved.status == moecomp::status::ok);
    // The returned permutation is a permutation ...
    std::vector<char> seen(static_cast<std::size_t>(n), 0);
    double ours = 0.0;
    for (index_t i = 0; i < n; ++i) {
      const index_t l = out.permutations(j, i);
      REQUIRE(l >= 0);
      REQUIRE(l < n);
      CHECK(!seen[static_cast<std::size_t>(l)]);
      seen[static_cast<std::size_t>(l)] = 1;
      ours += cost(i, l);
    }
    // ... and as cheap as the optimum (to rounding of the cost the permutation was chosen on: double, or
    // float dot products for float input).
    const double rtol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
    CHECK(ours <= solved.cost * (1 + rtol) + 1e-12);
    objective += weights[static_cast<std::size_t>(j)] * ours / double(n);

    // Exactly: a cold solve on the very cost the library assigns on (-X_j B^T, same GEMM and row tiling)
    // has the same total as the returned permutation, to the last bit (the optimum is unique here).
    host_matrix<T> cross(n, n);
    for (index_t row0 = 0; row0 < n; row0 += ot::detail::free_support_cost_rows)
      moecomp::detail::gemm_abt<T>(T(-1), &measures(j * n + row0, 0), d, out.barycenter.data(), d,
                                   std::min(ot::detail::free_support_cost_rows, n - row0), n, d, &cross(row0, 0), n);
    const auto exact = ot::linear_assignment(host_context(1), ot::linear_assignment_params{}, cross.const_view(),
                                             p.view(), u.view(), v.view());
    double ours_cross = 0.0;
    for (index_t i = 0; i < n; ++i) ours_cross += double(cross(i, out.permutations(j, i)));
    CHECK(ours_cross == exact.cost);
  }
  CHECK(out.result.objective == doctest::Approx(objective).epsilon(1e-12));
}

}  // namespace

TEST_CASE("free_support_barycenter: one cloud is its own barycenter") {
  const auto x = random_points<double>(40, 7, 1);
  const auto out = run_uniform(x, 1, {1.0}, x);
  CHECK(out.result.status == moecomp::status::ok);
  CHECK(out.result.iterations == 1);
  CHECK(out.result.criterion == 0.0);
  CHECK(out.result.objective == 0.0);
  for (index_t i = 0; i < x.rows(); ++i) {
    CHECK(out.permutations(0, i) == i);
    for (index_t c = 0; c < x.cols(); ++c) CHECK(out.barycenter(i, c) == x(i, c));
  }
  // From another start the barycenter is the cloud again, in the order the first assignment chose.
  const auto start = random_points<double>(40, 7, 2);
  const auto moved = run_uniform(x, 1, {1.0}, start);
  CHECK(moved.result.status == moecomp::status::ok);
  CHECK(moved.result.objective == 0.0);
  for (index_t i = 0; i < x.rows(); ++i)
    for (index_t c = 0; c < x.cols(); ++c) CHECK(moved.barycenter(moved.permutations(0, i), c) == x(i, c));
}

TEST_CASE("free_support_barycenter: identical clouds in planted orders are recovered exactly") {
  const index_t k = 5, n = 64, d = 12;
  const auto base = random_points<double>(n, d, 3);
  host_matrix<double> measures(k * n, d);
  std::vector<std::vector<index_t>> planted;  // cloud j row i = base row planted[j][i]
  for (index_t j = 0; j < k; ++j) {
    planted.push_back(random_permutation(n, 100 + static_cast<std::uint64_t>(j)));
    for (index_t i = 0; i < n; ++i)
      for (index_t c = 0; c < d; ++c) measures(j * n + i, c) = base(planted.back()[static_cast<std::size_t>(i)], c);
  }
  const auto init = rows_of(measures, 0, n);  // cloud 0, as ResMoE
  const std::vector<double> w(k, 1.0 / k);
  const auto out = run_uniform(measures, k, w, init);
  CHECK(out.result.status == moecomp::status::ok);
  CHECK(out.result.objective <= 1e-24);
  for (index_t j = 0; j < k; ++j)
    for (index_t i = 0; i < n; ++i) {
      // Cloud j's row i is base row planted[j][i], which is cloud 0's row planted[0]^-1(...): the
      // barycenter keeps cloud 0's order, so P(j, i) is where that base row sits in cloud 0.
      const index_t base_row = planted[static_cast<std::size_t>(j)][static_cast<std::size_t>(i)];
      const index_t expected = std::find(planted[0].begin(), planted[0].end(), base_row) - planted[0].begin();
      CHECK(out.permutations(j, i) == expected);
    }
  for (index_t l = 0; l < n; ++l)
    for (index_t c = 0; c < d; ++c) CHECK(out.barycenter(l, c) == doctest::Approx(init(l, c)).epsilon(1e-14));
}

TEST_CASE("free_support_barycenter: weights (1, 0) return the first cloud") {
  const index_t n = 30, d = 5;
  const auto measures = random_points<double>(2 * n, d, 4);
  const auto init = rows_of(measures, 0, n);
  const auto out = run_uniform(measures, 2, {1.0, 0.0}, init);
  CHECK(out.result.status == moecomp::status::ok);
  CHECK(out.result.objective == 0.0);
  for (index_t i = 0; i < n; ++i) {
    CHECK(out.permutations(0, i) == i);
    for (index_t c = 0; c < d; ++c) CHECK(out.barycenter(i, c) == init(i, c));
  }
  check_permutations_optimal(measures, 2, out, {1.0, 0.0});
}

TEST_CASE("free_support_barycenter: 1-D closed form, the weighted mean of the sorted clouds") {
  const index_t k = 3, n = 50;
  const auto measures = random_points<double>(k * n, 1, 5);
  const std::vector<double> w = {0.2, 0.5, 0.3};
  const auto out = run_uniform(measures, k, w, rows_of(measures, 0, n));
  CHECK(out.result.status == moecomp::status::ok);
  CHECK(out.result.iterations == 2);  // one move, then a round that changes no permutation
  std::vector<double> expected(static_cast<std::size_t>(n), 0.0);
  std::vector<std::vector<double>> sorted(k);
  for (index_t j = 0; j < k; ++j) {
    for (index_t i = 0; i < n; ++i) sorted[j].push_back(measures(j * n + i, 0));
    std::sort(sorted[j].begin(), sorted[j].end());
    for (index_t i = 0; i < n; ++i) expected[static_cast<std::size_t>(i)] += w[j] * sorted[j][static_cast<std::size_t>(i)];
  }
  std::vector<double> got;
  for (index_t i = 0; i < n; ++i) got.push_back(out.barycenter(i, 0));
  std::sort(got.begin(), got.end());
  double objective = 0.0;
  for (index_t i = 0; i < n; ++i) {
    CHECK(got[static_cast<std::size_t>(i)] == doctest::Approx(expected[static_cast<std::size_t>(i)]).epsilon(1e-14));
    for (index_t j = 0; j < k; ++j) {
      const double delta = sorted[j][static_cast<std::size_t>(i)] - expected[static_cast<std::size_t>(i)];
      objective += w[j] * delta * delta / n;
    }
  }
  CHECK(out.result.objective == doctest::Approx(objective).epsilon(1e-12));
  // The assignments are monotone: the i-th smallest point of every cloud goes to the i-th smallest row.
  for (index_t j = 0; j < k; ++j)
    for (index_t i = 0; i < n; ++i) {
      const double x = measures(j * n + i, 0);
      const auto rank = std::lower_bound(sorted[j].begin(), sorted[j].end(), x) - sorted[j].begin();
      CHECK(out.barycenter(out.permutations(j, i), 0) == got[static_cast<std::size_t>(rank)]);
    }
}

TEST_CASE("free_support_barycenter: returned permutations are optimal for the returned barycenter") {
  const index_t k = 4, n = 48, d = 6;
  const auto measures = random_points<double>(k * n, d, 6);
  const auto init = random_points<double>(n, d, 7);  // not a cloud: several moves
  const std::vector<double> w = {0.1, 0.4, 0.3, 0.2};
  for (index_t max_iterations : {1, 2, 100}) {
    CAPTURE(max_iterations);
    ot::free_support_barycenter_params params;
    params.max_iterations = max_iterations;
    params.tolerance = 0.0;
    const auto out = run_uniform(measures, k, w, init, params);
    CHECK(out.result.iterations <= max_iterations);
    if (max_iterations == 1) {
      CHECK(out.result.status == moecomp::status::iteration_limit);
      CHECK(out.result.criterion > 0.0);
    }
    if (max_iterations == 100) {
      CHECK(out.result.status == moecomp::status::ok);
      CHECK(out.result.criterion == 0.0);
    }
    check_permutations_optimal(measures, k, out, w);
  }
}

TEST_CASE("free_support_barycenter: objective never increases with more iterations") {
  const index_t k = 6, n = 32, d = 4;
  const auto measures = random_points<double>(k * n, d, 8);
  const auto init = rows_of(measures, 0, n);
  const std::vector<double> w(k, 1.0 / k);
  double previous = std::numeric_limits<double>::infinity();
  for (index_t it = 1; it <= 8; ++it) {
    ot::free_support_barycenter_params params;
    params.max_iterations = it;
    params.tolerance = 0.0;
    const auto out = run_uniform(measures, k, w, init, params);
    CHECK(out.result.objective <= previous * (1 + 1e-14));
    previous = out.result.objective;
  }
}

TEST_CASE("free_support_barycenter: tolerance stops at POT's rule") {
  const index_t k = 3, n = 40, d = 3;
  const auto measures = random_points<double>(k * n, d, 9);
  const auto init = random_points<double>(n, d, 10);
  const std::vector<double> w(k, 1.0 / k);
  ot::free_support_barycenter_params loose;
  loose.tolerance = 1e300;  // POT: displacement <= stopThr after the first update -> stop
  const auto out = run_uniform(measures, k, w, init, loose);
  CHECK(out.result.iterations == 1);
  CHECK(out.result.status == moecomp::status::ok);
  CHECK(out.result.criterion > 0.0);
  check_permutations_optimal(measures, k, out, w);
}

TEST_CASE("free_support_barycenter: bit-identical for any thread count, with and without weights") {
  // One cloud (the GEMM tiles then spread over the threads) ...
  {
    const auto x = random_points<double>(300, 9, 18);
    const auto start = random_points<double>(300, 9, 19);
    const auto serial = run_uniform(x, 1, {1.0}, start, {}, 1);
    for (int threads : {2, 4}) {
      const auto other = run_uniform(x, 1, {1.0}, start, {}, threads);
      CHECK(other.barycenter.storage() == serial.barycenter.storage());
      CHECK(other.permutations.storage() == serial.permutations.storage());
    }
  }
  // ... and five (whole clouds per thread, or tiles when the threads outnumber the clouds).
  const index_t k = 5, n = 300, d = 9;  // n > 256: more than one GEMM row tile per cloud
  const auto measures = random_points<double>(k * n, d, 11);
  const auto init = rows_of(measures, 0, n);
  const std::vector<double> w(k, 1.0 / k);
  const auto reference = run_uniform(measures, k, w, init, {}, 1);
  for (int threads : {2, 3, 8}) {
    CAPTURE(threads);
    const auto other = run_uniform(measures, k, w, init, {}, threads);
    CHECK(other.result.objective == reference.result.objective);
    CHECK(other.result.iterations == reference.result.iterations);
    CHECK(std::memcmp(other.barycenter.storage().data(), reference.barycenter.storage().data(),
                      sizeof(double) * static_cast<std::size_t>(n * d)) == 0);
    CHECK(other.permutations.storage() == reference.permutations.storage());
  }
  host_matrix<double> b(n, d);
  host_matrix<index_t> p(k, n);
  const auto uniform = ot::free_support_barycenter(host_context(2), {}, split_rows(measures.view(), k), init.view(), b.view(),
                                                    p.view());
  CHECK(uniform.objective == reference.result.objective);
  CHECK(p.storage() == reference.permutations.storage());
}

TEST_CASE_TEMPLATE("free_support_barycenter: bit-identical at 1, 2, 3 and 7 threads", T, float, double) {
  // docs/barycenter.md: each cloud's cost is built with the same fixed 256-row tiling whichever thread builds
  // it, each assignment is sequential, and the update sums the clouds in order, so barycenter, permutations
  // and result are bit-identical for any thread count. k = 5 clouds give whole clouds per thread at 2 and 3
  // threads and GEMM tiles spread over the threads at 7; k = 2 gives tiles from 3 threads on. n > 256 makes
  // several tiles per cloud, and n d k > 65536 a parallel update.
  for (const auto& shape : {std::tuple<index_t, index_t, index_t>{5, 400, 40}, {2, 600, 64}}) {
    // (not structured bindings: C++17 lambdas cannot capture those)
    const index_t k = std::get<0>(shape), n = std::get<1>(shape), d = std::get<2>(shape);
    CAPTURE(k);
    const auto measures = random_points<T>(k * n, d, 201 + static_cast<std::uint64_t>(k));
    const auto init = random_points<T>(n, d, 211 + static_cast<std::uint64_t>(k));
    std::vector<double> w(static_cast<std::size_t>(k));
    for (index_t j = 0; j < k; ++j) w[static_cast<std::size_t>(j)] = double(j + 1) / double(k * (k + 1) / 2);
    moecomp_test::check_same_at_thread_counts([&](const host_context& ctx) {
      host_matrix<T> b(n, d), uniform_b(n, d);
      host_matrix<index_t> p(k, n), uniform_p(k, n);
      const auto r = ot::free_support_barycenter(ctx, {}, split_rows(measures.view(), k), vector_view<const double>(w.data(), k),
                                                 init.view(), b.view(), p.view());
      CHECK(r.status == moecomp::status::ok);
      const auto u = ot::free_support_barycenter(ctx, {}, split_rows(measures.view(), k), init.view(), uniform_b.view(),
                                                 uniform_p.view());
      return std::make_tuple(b.storage(), p.storage(), r.objective, r.iterations, r.criterion, r.status,
                             uniform_b.storage(), uniform_p.storage(), u.objective, u.iterations);
    });
  }
}

TEST_CASE_TEMPLATE("free_support_barycenter_weighted: bit-identical at 1, 2, 3 and 7 threads", T, float, double) {
  // The general path solves its k exact OT problems in parallel (one per thread, handed out dynamically, each
  // sequential) and sums the update over the measures in order: the same promise. Measures of different sizes
  // and random masses; 4 measures, so 7 threads leave some idle.
  const index_t k = 4, m = 200, d = 8;
  std::vector<host_matrix<T>> points;
  std::vector<std::vector<double>> masses;
  moecomp::random_generator rng(221);
  for (index_t j = 0; j < k; ++j) {
    const index_t n_j = 150 + 40 * j;
    points.push_back(random_points<T>(n_j, d, 230 + static_cast<std::uint64_t>(j)));
    std::vector<double> a(static_cast<std::size_t>(n_j));
    double total = 0;
    for (auto& x : a) total += (x = rng.uniform(0.1, 1.0));
    for (auto& x : a) x /= total;
    masses.push_back(a);
  }
  std::vector<matrix_view<const T>> measures;
  std::vector<vector_view<const double>> measure_masses;
  for (index_t j = 0; j < k; ++j) {
    measures.push_back(points[static_cast<std::size_t>(j)].view());
    measure_masses.emplace_back(masses[static_cast<std::size_t>(j)].data(), points[static_cast<std::size_t>(j)].rows());
  }
  const auto init = random_points<T>(m, d, 240);
  const std::vector<double> b_mass(static_cast<std::size_t>(m), 1.0 / m), w = {0.1, 0.2, 0.3, 0.4};
  moecomp_test::check_same_at_thread_counts([&](const host_context& ctx) {
    host_matrix<T> b(m, d);
    const auto r = ot::free_support_barycenter_weighted<T>(ctx, {}, measures, measure_masses,
                                                           vector_view<const double>(w.data(), k), init.view(),
                                                           vector_view<const double>(b_mass.data(), m), b.view());
    CHECK(r.status == moecomp::status::ok);
    return std::make_tuple(b.storage(), r.objective, r.iterations, r.criterion, r.status);
  });
}

TEST_CASE("free_support_barycenter: float follows double") {
  const index_t k = 4, n = 64, d = 16;
  const auto xd = random_points<double>(k * n, d, 12);
  host_matrix<float> xf(k * n, d);
  for (index_t i = 0; i < k * n; ++i)
    for (index_t c = 0; c < d; ++c) xf(i, c) = static_cast<float>(xd(i, c));
  host_matrix<double> xd_rounded(k * n, d);  // the same points as the float input, in double
  for (index_t i = 0; i < k * n; ++i)
    for (index_t c = 0; c < d; ++c) xd_rounded(i, c) = xf(i, c);
  const std::vector<double> w(k, 1.0 / k);
  const auto od = run_uniform(xd_rounded, k, w, rows_of(xd_rounded, 0, n));
  const auto of = run_uniform(xf, k, w, rows_of(xf, 0, n));
  CHECK(of.result.status == moecomp::status::ok);
  CHECK(of.result.iterations == od.result.iterations);
  CHECK(of.permutations.storage() == od.permutations.storage());  // well-separated random data: same choices
  CHECK(of.result.objective == doctest::Approx(od.result.objective).epsilon(1e-6));
  for (index_t l = 0; l < n; ++l)
    for (index_t c = 0; c < d; ++c) CHECK(of.barycenter(l, c) == doctest::Approx(od.barycenter(l, c)).epsilon(1e-5));
  check_permutations_optimal(xf, k, of, w);
}

TEST_CASE("free_support_barycenter_weighted: agrees with the uniform path on uniform input") {
  const index_t k = 4, n = 40, d = 5;
  const auto measures = random_points<double>(k * n, d, 13);
  const auto init = random_points<double>(n, d, 14);
  const std::vector<double> w = {0.4, 0.3, 0.2, 0.1};
  ot::free_support_barycenter_params params;
  params.tolerance = 0.0;
  const auto uniform = run_uniform(measures, k, w, init, params);

  std::vector<matrix_view<const double>> clouds;
  std::vector<double> mass(static_cast<std::size_t>(n), 1.0 / n);
  std::vector<vector_view<const double>> masses;
  for (index_t j = 0; j < k; ++j) {
    clouds.push_back(measures.view().row_range(j * n, n));
    masses.emplace_back(mass.data(), n);
  }
  host_matrix<double> b(n, d);
  const auto general = ot::free_support_barycenter_weighted(host_context(), params, clouds, masses,
                                                            vector_view<const double>(w.data(), k), init.view(),
                                                            vector_view<const double>(mass.data(), n), b.view());
  CHECK(general.status == moecomp::status::ok);
  CHECK(general.iterations == uniform.result.iterations);
  CHECK(general.objective == doctest::Approx(uniform.result.objective).epsilon(1e-12));
  for (index_t l = 0; l < n; ++l)
    for (index_t c = 0; c < d; ++c) CHECK(b(l, c) == doctest::Approx(uniform.barycenter(l, c)).epsilon(1e-12));
  // Thread-count determinism of the general path.
  host_matrix<double> b1(n, d);
  const auto serial = ot::free_support_barycenter_weighted(host_context(1), params, clouds, masses,
                                                           vector_view<const double>(w.data(), k), init.view(),
                                                           vector_view<const double>(mass.data(), n), b1.view());
  CHECK(serial.objective == general.objective);
  CHECK(b1.storage() == b.storage());
}

TEST_CASE("free_support_barycenter_weighted: hand-computed answers") {
  SUBCASE("two Dirac measures: the weighted mean") {
    const double y1[] = {0.0, 0.0}, y2[] = {2.0, 4.0}, x0[] = {7.0, -1.0}, one = 1.0;
    const std::vector<matrix_view<const double>> measures = {matrix_view<const double>(y1, 1, 2),
                                                             matrix_view<const double>(y2, 1, 2)};
    const std::vector<vector_view<const double>> masses = {vector_view<const double>(&one, 1),
                                                           vector_view<const double>(&one, 1)};
    const double w[] = {0.25, 0.75};
    double b[2];
    const auto r = ot::free_support_barycenter_weighted(host_context(), {}, measures, masses,
                                                        vector_view<const double>(w, 2), matrix_view<const double>(x0, 1, 2),
                                                        vector_view<const double>(&one, 1), matrix_view<double>(b, 1, 2));
    CHECK(r.status == moecomp::status::ok);
    CHECK(r.iterations == 2);
    CHECK(b[0] == 1.5);
    CHECK(b[1] == 3.0);
    CHECK(r.objective == doctest::Approx(0.25 * (1.5 * 1.5 + 9.0) + 0.75 * (0.25 + 1.0)));
  }
  SUBCASE("1-D measures of different sizes: averaged quantiles") {
    const double y1[] = {4.0, 1.0, 3.0, 2.0};       // masses 1/4: lower half {1, 2}, upper half {3, 4}
    const double y2[] = {10.0, -2.0};                // masses 1/2
    const double y3[] = {0.0, 6.0, 1.0};             // masses 0.5, 0.25, 0.25: lower half {0}, upper {1, 6}
    const double a1[] = {0.25, 0.25, 0.25, 0.25}, a2[] = {0.5, 0.5}, a3[] = {0.5, 0.25, 0.25};
    const std::vector<matrix_view<const double>> measures = {matrix_view<const double>(y1, 4, 1),
                                                             matrix_view<const double>(y2, 2, 1),
                                                             matrix_view<const double>(y3, 3, 1)};
    const std::vector<vector_view<const double>> masses = {vector_view<const double>(a1, 4),
                                                           vector_view<const double>(a2, 2),
                                                           vector_view<const double>(a3, 3)};
    const double x0[] = {5.0, -5.0}, bm[] = {0.5, 0.5};
    double b[2];
    const auto r = ot::free_support_barycenter_weighted(host_context(), {}, measures, masses,
                                                        matrix_view<const double>(x0, 2, 1),
                                                        vector_view<const double>(bm, 2), matrix_view<double>(b, 2, 1));
    CHECK(r.status == moecomp::status::ok);
    // Row 0 started high, so it takes the upper halves.
    CHECK(b[0] == doctest::Approx((3.5 + 10.0 + 3.5) / 3));
    CHECK(b[1] == doctest::Approx((1.5 - 2.0 + 0.0) / 3));
  }
}

TEST_CASE("free_support_barycenter: bad input") {
  const index_t k = 2, n = 5, d = 3;
  auto measures = random_points<double>(k * n, d, 15);
  auto init = rows_of(measures, 0, n);
  host_matrix<double> b(n, d);
  host_matrix<index_t> p(k, n);
  const std::vector<double> w = {0.5, 0.5};
  // The clouds come as a stack of k matrices of n x d (here k row blocks of one (k n) x d matrix).
  auto call = [&](const host_matrix<double>& x, index_t kk, const std::vector<double>& ww, const host_matrix<double>& x0,
                  host_matrix<double>& out, host_matrix<index_t>& perms, ot::free_support_barycenter_params params = {}) {
    return thrown_message([&] {
      const auto clouds = kk == 0 ? moecomp::matrix_stack_view<const double>(nullptr, 0, n, d)
                                  : split_rows(x.view(), kk);
      ot::free_support_barycenter(host_context(), params, clouds,
                                  vector_view<const double>(ww.data(), static_cast<index_t>(ww.size())), x0.view(),
                                  out.view(), perms.view());
    });
  };
  const auto short_clouds = random_points<double>(k * (n - 1), d, 17);
  CHECK(call(short_clouds, k, w, init, b, p).find("measures must be clouds of init's shape 5 x 3, got 2 of 4 x 3") !=
        std::string::npos);
  CHECK(call(measures, 0, {}, init, b, p).find("measures must hold at least one cloud, got 0") != std::string::npos);
  CHECK(call(measures, k, {0.5}, init, b, p).find("weights must have k = 2 entries, got 1") != std::string::npos);
  CHECK(call(measures, k, {1.5, -0.5}, init, b, p).find("weights must be finite and >= 0, got -0.5 at index 1") !=
        std::string::npos);
  CHECK(call(measures, k, {0.5, 0.6}, init, b, p).find("weights must sum to 1") != std::string::npos);
  const auto wide_init = random_points<double>(n, d + 1, 16);
  CHECK(call(measures, k, w, wide_init, b, p).find("measures must be clouds of init's shape 5 x 4, got 2 of 5 x 3") != std::string::npos);
  host_matrix<double> small_b(n - 1, d);
  CHECK(call(measures, k, w, init, small_b, p).find("barycenter must be 5 x 3 like init, got 4 x 3") !=
        std::string::npos);
  host_matrix<index_t> small_p(k, n + 1);
  CHECK(call(measures, k, w, init, b, small_p).find("permutations must be k x n = 2 x 5, got 2 x 6") !=
        std::string::npos);
  ot::free_support_barycenter_params bad;
  bad.max_iterations = 0;
  CHECK(call(measures, k, w, init, b, p, bad).find("params.max_iterations must be >= 1, got 0") != std::string::npos);
  bad = {};
  bad.tolerance = std::nan("");
  CHECK(call(measures, k, w, init, b, p, bad).find("params.tolerance must be >= 0") != std::string::npos);
  measures(7, 1) = std::nan("");
  CHECK(call(measures, k, w, init, b, p).find("measures[1] must be finite, got nan at (2, 1)") != std::string::npos);
  measures(7, 1) = 0.0;
  init(2, 2) = std::numeric_limits<double>::infinity();
  CHECK(call(measures, k, w, init, b, p).find("init must be finite, got inf at (2, 2)") != std::string::npos);

  // The general path.
  init = rows_of(measures, 0, n);
  std::vector<double> mass(static_cast<std::size_t>(n), 1.0 / n), bad_mass = mass;
  bad_mass[1] = -bad_mass[1];
  const std::vector<matrix_view<const double>> clouds = {measures.view().row_range(0, n),
                                                         measures.view().row_range(n, n)};
  auto general = [&](const std::vector<vector_view<const double>>& masses, const std::vector<double>& bm,
                     const std::vector<matrix_view<const double>>& xs) {
    return thrown_message([&] {
      ot::free_support_barycenter_weighted(host_context(), {}, xs, masses, vector_view<const double>(w.data(), 2),
                                           init.view(), vector_view<const double>(bm.data(), static_cast<index_t>(bm.size())),
                                           b.view());
    });
  };
  const vector_view<const double> good(mass.data(), n);
  CHECK(general({good}, mass, clouds).find("measure_masses must hold k = 2 mass vectors like measures, got 1") !=
        std::string::npos);
  CHECK(general({good, vector_view<const double>(bad_mass.data(), n)}, mass, clouds)
            .find("measure_masses[1] must be finite and >= 0") != std::string::npos);
  CHECK(general({good, good}, std::vector<double>(n, 0.1), clouds).find("barycenter_masses must sum to 1") !=
        std::string::npos);
  std::vector<double> zero_mass = mass;
  zero_mass[0] = 0.0;
  zero_mass[1] *= 2;
  CHECK(general({good, good}, zero_mass, clouds).find("barycenter_masses must be finite and > 0, got 0 at index 0") !=
        std::string::npos);
  const auto narrow = random_points<double>(n, d - 1, 17);
  CHECK(general({good, good}, mass, {clouds[0], narrow.view()})
            .find("measures[1] must be n_j x 3 with n_j >= 1 (init has 3 columns), got 5 x 2") != std::string::npos);
}

TEST_CASE("free_support_barycenter: overflow is a status, not an exception") {
  const index_t k = 2, n = 4, d = 2;
  host_matrix<double> measures(k * n, d, 1e200);
  for (index_t i = 0; i < k * n; ++i) measures(i, 0) = 1e200 * double(i + 1);
  const auto init = rows_of(measures, 0, n);
  const auto out = run_uniform(measures, k, {0.5, 0.5}, init);
  CHECK(out.result.status == moecomp::status::numerical_error);
  CHECK(std::isnan(out.result.objective));
}
