// Fixed-support entropic barycenter: identical histograms, one-hot weights, symmetry, the log-domain variant,
// determinism, iteration limits and bad-input messages. (The comparison with POT is
// tests/peers/test_barycenter_fixed_pot.py.)
#include "test_support.hpp"

#include <moecomp/core/random.hpp>
#include <moecomp/ot/fixed_support_barycenter.hpp>

#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

using namespace moecomp;
using moecomp_test::thrown_message;

namespace {

/// k random histograms on n points of a line (columns of an n x k row-major matrix) and M = squared distances.
void make_problem(index_t n, index_t k, unsigned seed, std::vector<double>& A, std::vector<double>& M) {
  random_generator gen(seed);
  A.assign(static_cast<std::size_t>(n * k), 0);
  for (index_t h = 0; h < k; ++h) {
    double s = 0;
    for (index_t i = 0; i < n; ++i) s += (A[i * k + h] = gen.uniform(0.05, 1.0));
    for (index_t i = 0; i < n; ++i) A[i * k + h] /= s;
  }
  M.assign(static_cast<std::size_t>(n * n), 0);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j) {
      const double d = static_cast<double>(i - j) / static_cast<double>(n - 1);
      M[i * n + j] = d * d;
    }
}

ot::fixed_support_barycenter_result run(const std::vector<double>& A, const std::vector<double>& M, index_t n, index_t k,
                                        const std::vector<double>& w, const ot::fixed_support_barycenter_params& p,
                                        std::vector<double>& out, int threads = 0) {
  out.assign(static_cast<std::size_t>(n), -1);
  return ot::fixed_support_barycenter(host_context(threads), p, make_matrix_view(A.data(), n, k),
                                      make_matrix_view(M.data(), n, n), make_vector_view(w.data(), k),
                                      make_vector_view(out.data(), n));
}

}  // namespace

TEST_CASE("fixed_support_barycenter: the barycenter of identical histograms is close to that histogram") {
  const index_t n = 30, k = 3;
  std::vector<double> A, M;
  make_problem(n, 1, 1, A, M);
  std::vector<double> same(static_cast<std::size_t>(n * k));
  for (index_t i = 0; i < n; ++i)
    for (index_t h = 0; h < k; ++h) same[i * k + h] = A[i];
  for (bool log_domain : {false, true}) {
    ot::fixed_support_barycenter_params p;
    p.reg = 1e-4;
    p.log_domain = log_domain;
    p.tolerance = 1e-9;
    std::vector<double> out;
    const auto r = run(same, M, n, k, {0.2, 0.3, 0.5}, p, out);
    CHECK(r.ok());
    CHECK(r.status == status::ok);
    // The plans are identical, so the residual is 0 at the first test (iteration 1 -> 2 iterations).
    CHECK(r.iterations == 2);
    double total = 0;
    for (index_t i = 0; i < n; ++i) total += out[i];
    CHECK(total == doctest::Approx(1.0).epsilon(1e-6));
    // At reg 1e-4 on a grid of spacing 1/29, neighbours couple by exp(-1.19e-3 / 1e-4) ~ 7e-6: no blur.
    for (index_t i = 0; i < n; ++i) CHECK(out[i] == doctest::Approx(A[i]).epsilon(1e-3));
  }
}

TEST_CASE("fixed_support_barycenter: one-hot weights give (close to) that histogram") {
  const index_t n = 25, k = 3;
  std::vector<double> A, M;
  make_problem(n, k, 2, A, M);
  for (bool log_domain : {false, true}) {
    ot::fixed_support_barycenter_params p;
    p.reg = 1e-4;
    p.log_domain = log_domain;
    std::vector<double> out;
    // The zero-weight plans converge slowly, and in the plain domain their scalings grow until they overflow
    // (K = exp(-M / 1e-4) spans far more than double's range; this is POT's algorithm, and numerical_error is
    // its documented outcome): over seeds 1..300 of this problem the earliest overflow is at iteration 627, and
    // the old 2000 cap only passed for the sample it was tuned on. The barycenter is settled long before: after
    // 100 iterations it is within 1.1e-5 (relative) of the histogram for every one of those seeds. 200 keeps
    // the check on real work with a 3x margin below any overflow seen.
    p.max_iterations = 200;
    CAPTURE(log_domain);
    const auto r = run(A, M, n, k, {0.0, 1.0, 0.0}, p, out);
    CHECK(r.status != status::numerical_error);
    for (index_t i = 0; i < n; ++i) CHECK(out[i] == doctest::Approx(A[i * k + 1]).epsilon(2e-3));
  }
}

TEST_CASE("fixed_support_barycenter: plain and log domain agree; uniform overload; deterministic") {
  const index_t n = 200, k = 4;
  std::vector<double> A, M;
  make_problem(n, k, 3, A, M);
  ot::fixed_support_barycenter_params p;
  p.reg = 1e-2;
  std::vector<double> plain, logd, uniform, one, two;
  const auto r1 = run(A, M, n, k, {0.25, 0.25, 0.25, 0.25}, p, plain, 1);
  p.log_domain = true;
  const auto r2 = run(A, M, n, k, {0.25, 0.25, 0.25, 0.25}, p, logd);
  CHECK(r1.ok());
  CHECK(r2.ok());
  CHECK(r1.iterations == r2.iterations);
  for (index_t i = 0; i < n; ++i) CHECK(plain[i] == doctest::Approx(logd[i]).epsilon(1e-5));  // log uses log(A + 1e-15), as POT
  p.log_domain = false;
  uniform.resize(n);
  ot::fixed_support_barycenter(host_context(2), p, make_matrix_view(A.data(), n, k), make_matrix_view(M.data(), n, n),
                               make_vector_view(uniform.data(), n));
  CHECK(std::memcmp(uniform.data(), plain.data(), n * sizeof(double)) == 0);
  for (bool log_domain : {false, true}) {
    p.log_domain = log_domain;
    run(A, M, n, k, {0.1, 0.2, 0.3, 0.4}, p, one, 1);
    run(A, M, n, k, {0.1, 0.2, 0.3, 0.4}, p, two, 2);
    CHECK(std::memcmp(one.data(), two.data(), n * sizeof(double)) == 0);
  }
}

namespace {

/// POT's barycenter_sinkhorn written out literally (two products with K per iteration, plain loops).
std::vector<double> reference_barycenter(const std::vector<double>& A, const std::vector<double>& M, index_t n,
                                         index_t k, const std::vector<double>& w, double reg, double tol,
                                         index_t max_iter, index_t& iterations) {
  std::vector<double> K(static_cast<std::size_t>(n * n)), col(n, 0.0), ukv(n * k), u(n * k), x(n * k), bar(n);
  for (index_t e = 0; e < n * n; ++e) K[e] = std::exp(-M[e] / reg);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j) col[j] += K[i * n + j];
  auto product = [&](const std::vector<double>& in, std::vector<double>& out) {
    for (index_t i = 0; i < n; ++i)
      for (index_t h = 0; h < k; ++h) {
        double s = 0;
        for (index_t j = 0; j < n; ++j) s += K[i * n + j] * in[j * k + h];
        out[i * k + h] = s;
      }
  };
  for (index_t j = 0; j < n; ++j)
    for (index_t h = 0; h < k; ++h) x[j * k + h] = A[j * k + h] / col[j];
  product(x, ukv);
  for (index_t i = 0; i < n; ++i) {
    double ml = 0;
    for (index_t h = 0; h < k; ++h) ml += std::log(ukv[i * k + h]);
    for (index_t h = 0; h < k; ++h) u[i * k + h] = std::exp(ml / static_cast<double>(k)) / ukv[i * k + h];
  }
  for (index_t it = 0; it < max_iter; ++it) {
    iterations = it + 1;
    product(u, x);
    for (index_t e = 0; e < n * k; ++e) x[e] = A[e] / x[e];
    product(x, ukv);
    double err = 0;
    for (index_t i = 0; i < n; ++i) {
      double lb = 0, mean = 0, var = 0;
      for (index_t h = 0; h < k; ++h) {
        ukv[i * k + h] *= u[i * k + h];
        lb += w[h] * std::log(ukv[i * k + h]);
        mean += ukv[i * k + h] / static_cast<double>(k);
      }
      for (index_t h = 0; h < k; ++h) var += (ukv[i * k + h] - mean) * (ukv[i * k + h] - mean);
      err += std::sqrt(var / static_cast<double>(k));
      bar[i] = std::exp(lb);
      for (index_t h = 0; h < k; ++h) u[i * k + h] = u[i * k + h] * bar[i] / ukv[i * k + h];
    }
    if (it % 10 == 1 && err < tol) break;
  }
  return bar;
}

}  // namespace

TEST_CASE("fixed_support_barycenter: equals POT's iteration written out, symmetric (one pass) or not (two)") {
  // Odd n (row pairs and vector tails), k = 1 .. 9 (groups of four histograms and remainders).
  for (index_t n : {2, 3, 37, 203})
    for (index_t k : {1, 2, 3, 4, 5, 9})
      for (bool symmetric : {true, false}) {
        std::vector<double> A, M;
        make_problem(n, k, static_cast<unsigned>(7 * n + k), A, M);
        if (!symmetric)  // points of a line against a shifted copy: M_ij != M_ji
          for (index_t i = 0; i < n; ++i)
            for (index_t j = 0; j < n; ++j) {
              const double d = (static_cast<double>(i - j) + 0.3) / static_cast<double>(n);
              M[i * n + j] = d * d;
            }
        std::vector<double> w(static_cast<std::size_t>(k));
        double total = 0;
        for (index_t h = 0; h < k; ++h) total += (w[h] = 1.0 + static_cast<double>(h));
        for (auto& x : w) x /= total;
        ot::fixed_support_barycenter_params p;
        p.reg = 2e-2;
        p.max_iterations = 300;  // (with a non-symmetric K, POT's iteration drifts and overflows eventually)
        index_t want_iterations = 0;
        const std::vector<double> want = reference_barycenter(A, M, n, k, w, p.reg, p.tolerance, p.max_iterations,
                                                              want_iterations);
        std::vector<double> got, again;
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(symmetric);
        const auto r = run(A, M, n, k, w, p, got, 1);
        REQUIRE(r.status != status::numerical_error);
        CHECK(r.iterations == want_iterations);
        double top = 0, diff = 0;
        for (index_t i = 0; i < n; ++i) {
          top = std::max(top, std::fabs(want[i]));
          diff = std::max(diff, std::fabs(got[i] - want[i]));
        }
        CHECK(diff <= 1e-10 * top);
        for (int threads : {2, 3}) {
          run(A, M, n, k, w, p, again, threads);
          CHECK(std::memcmp(got.data(), again.data(), static_cast<std::size_t>(n) * sizeof(double)) == 0);
        }
      }
}

TEST_CASE_TEMPLATE("fixed_support_barycenter: bit-identical at 1, 2, 3 and 7 threads", T, float, double) {
  // docs/sinkhorn.md: every sum has a fixed order (fixed row blocks and panels, accumulators added in block
  // order) whatever the thread count, so the barycenter and the result are bit-identical for any thread
  // count. n = 300 gives more than 2^15 entries of K, where the passes go parallel. A symmetric M takes the
  // fused one-pass iteration, a non-symmetric one the two-pass iteration; log_domain the log-sum-exp passes.
  const index_t n = 300, k = 5;
  random_generator rng(101);
  std::vector<T> A(static_cast<std::size_t>(n * k)), w(static_cast<std::size_t>(k));
  for (index_t h = 0; h < k; ++h) {
    double total = 0;
    std::vector<double> column(static_cast<std::size_t>(n));
    for (auto& x : column) total += (x = rng.uniform(0.05, 1.0));
    for (index_t i = 0; i < n; ++i) A[i * k + h] = static_cast<T>(column[i] / total);
  }
  const double w_all[] = {0.1, 0.3, 0.2, 0.25, 0.15};
  for (index_t h = 0; h < k; ++h) w[h] = static_cast<T>(w_all[h]);
  std::vector<double> xs(static_cast<std::size_t>(2 * n));
  for (auto& x : xs) x = rng.uniform<double>();
  // (symmetric M, log_domain): the log-domain passes do not depend on the symmetry of M.
  for (const auto& config : {std::pair{true, false}, std::pair{false, false}, std::pair{true, true}}) {
    // (not structured bindings: C++17 lambdas cannot capture those)
    const bool symmetric = config.first, log_domain = config.second;
    CAPTURE(symmetric);
    CAPTURE(log_domain);
    std::vector<T> M(static_cast<std::size_t>(n * n));
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < n; ++j) {
        const double dx = xs[2 * i] - xs[2 * j], dy = xs[2 * i + 1] - xs[2 * j + 1] + (symmetric ? 0.0 : 0.05);
        M[i * n + j] = static_cast<T>((dx * dx + dy * dy) / 2);
      }
    ot::fixed_support_barycenter_params p;
    p.reg = 2e-2;
    p.log_domain = log_domain;
    p.max_iterations = 200;  // (the non-symmetric problem stops here)
    moecomp_test::check_same_at_thread_counts([&](const host_context& ctx) {
      std::vector<T> bar(static_cast<std::size_t>(n), T(-1));
      const auto r = ot::fixed_support_barycenter(ctx, p, make_matrix_view(A.data(), n, k),
                                                  make_matrix_view(M.data(), n, n), make_vector_view(w.data(), k),
                                                  make_vector_view(bar.data(), n));
      CHECK(r.status != status::numerical_error);
      std::vector<T> uniform(static_cast<std::size_t>(n), T(-1));  // the overload with weights 1 / k
      if (!log_domain)
        ot::fixed_support_barycenter(ctx, p, make_matrix_view(A.data(), n, k), make_matrix_view(M.data(), n, n),
                                     make_vector_view(uniform.data(), n));
      return std::make_tuple(bar, r.iterations, r.criterion, r.status, uniform);
    });
  }
}

TEST_CASE("fixed_support_barycenter: the iteration limit is reported") {
  const index_t n = 20, k = 2;
  std::vector<double> A, M, out;
  make_problem(n, k, 4, A, M);
  ot::fixed_support_barycenter_params p;
  p.reg = 1e-2;
  p.max_iterations = 3;
  p.tolerance = 0;
  const auto r = run(A, M, n, k, {0.5, 0.5}, p, out);
  CHECK_FALSE(r.ok());
  CHECK(r.status == status::iteration_limit);
  CHECK(r.iterations == 3);
}

TEST_CASE("fixed_support_barycenter: bad input is rejected with a message naming the argument") {
  const index_t n = 5, k = 2;
  std::vector<double> A, M, out(n);
  make_problem(n, k, 5, A, M);
  ot::fixed_support_barycenter_params p;
  p.reg = 0.1;
  auto call = [&](const std::vector<double>& a, const std::vector<double>& w, const ot::fixed_support_barycenter_params& q,
                  index_t m_rows = 5) {
    return thrown_message([&] {
      ot::fixed_support_barycenter(host_context(), q, make_matrix_view(a.data(), n, k),
                                   make_matrix_view(M.data(), m_rows, m_rows), make_vector_view(w.data(), static_cast<index_t>(w.size())),
                                   make_vector_view(out.data(), n));
    });
  };
  auto neg = A;
  neg[3] = -1;
  CHECK(call(neg, {0.5, 0.5}, p).find("column 1 of A must be finite and >= 0, got -1 at index 1") != std::string::npos);
  auto heavy = A;
  for (index_t i = 0; i < n; ++i) heavy[i * k + 1] *= 3;
  CHECK(call(heavy, {0.5, 0.5}, p).find("columns of A must have equal total mass") != std::string::npos);
  CHECK(call(A, {0.5, 0.6}, p).find("weights must sum to 1") != std::string::npos);
  CHECK(call(A, {1.0}, p).find("weights must have size 2") != std::string::npos);
  CHECK(call(A, {0.5, 0.5}, p, 4).find("M must be 5 x 5") != std::string::npos);
  auto q = p;
  q.reg = -1;
  CHECK(call(A, {0.5, 0.5}, q).find("params.reg must be finite and > 0, got -1") != std::string::npos);
}
