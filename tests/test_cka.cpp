// HSIC and CKA (<moecomp/similarity/cka.hpp>): a value computed by hand; the invariances CKA is known for
// (orthogonal transforms, isotropic scaling, translation); the two routes agreeing; float32 inputs at
// hazardous offsets and scales giving the clean answer; undefined cases reported, never NaN; the minibatch
// accumulator independent of how the stream is chunked; the all-pairs matrix equal to pair-by-pair CKAs;
// thread-count independence; and the argument checks. The reference formulas themselves (Kornblith et
// al.) are checked through the tool in tests/peers/test_cka_numpy.py.
#include <moecomp/similarity/cka.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using moecomp::index_t;
namespace sim = moecomp::similarity;

template <class T>
moecomp::host_matrix<T> normal_matrix(index_t rows, index_t cols, std::uint64_t seed) {
  moecomp::host_matrix<T> m(rows, cols);
  moecomp::random_generator rng(seed);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) m(i, j) = static_cast<T>(rng.normal<double>());
  return m;
}

/// y = x A + noise: related to x, so the CKA is well inside (0, 1).
template <class T>
moecomp::host_matrix<T> related(const moecomp::host_matrix<T>& x, index_t cols, double noise, std::uint64_t seed) {
  const auto a = normal_matrix<double>(x.cols(), cols, seed);
  const auto e = normal_matrix<double>(x.rows(), cols, seed + 1);
  moecomp::host_matrix<T> y(x.rows(), cols);
  for (index_t i = 0; i < x.rows(); ++i)
    for (index_t j = 0; j < cols; ++j) {
      double s = noise * e(i, j);
      for (index_t c = 0; c < x.cols(); ++c) s += static_cast<double>(x(i, c)) * a(c, j);
      y(i, j) = static_cast<T>(s);
    }
  return y;
}

/// A random orthogonal d x d matrix: Gram-Schmidt on normal columns (in double).
moecomp::host_matrix<double> orthogonal(index_t d, std::uint64_t seed) {
  auto q = normal_matrix<double>(d, d, seed);
  for (index_t j = 0; j < d; ++j) {
    for (index_t k = 0; k < j; ++k) {
      double dot = 0;
      for (index_t i = 0; i < d; ++i) dot += q(i, j) * q(i, k);
      for (index_t i = 0; i < d; ++i) q(i, j) -= dot * q(i, k);
    }
    double norm = 0;
    for (index_t i = 0; i < d; ++i) norm += q(i, j) * q(i, j);
    for (index_t i = 0; i < d; ++i) q(i, j) /= std::sqrt(norm);
  }
  return q;
}

/// c (x Q) + shift, in double.
moecomp::host_matrix<double> transformed(const moecomp::host_matrix<double>& x, const moecomp::host_matrix<double>& q,
                                         double c, double shift) {
  moecomp::host_matrix<double> y(x.rows(), x.cols());
  for (index_t i = 0; i < x.rows(); ++i)
    for (index_t j = 0; j < x.cols(); ++j) {
      double s = 0;
      for (index_t k = 0; k < x.cols(); ++k) s += x(i, k) * q(k, j);
      y(i, j) = c * s + shift;
    }
  return y;
}

template <class T>
sim::cka_result run(const sim::cka_params& params, const moecomp::host_matrix<T>& x, const moecomp::host_matrix<T>& y,
                    int threads = 1) {
  return sim::cka<T>(moecomp::host_context(threads), params, x.const_view(), y.const_view());
}

sim::cka_params params_of(sim::cka_kernel kernel, bool unbiased, sim::cka_route route = sim::cka_route::automatic) {
  sim::cka_params p;
  p.kernel = kernel;
  p.unbiased = unbiased;
  p.route = route;
  return p;
}

}  // namespace

TEST_CASE("cka: a one-feature example by hand") {
  // x = (1, 2, 3, 4): centred c = (-1.5, -0.5, 0.5, 1.5), H K H = c c^T, <c c^T, c c^T> = (c.c)^2 = 25, so the
  // biased HSIC(x, x) = 25 / (n - 1)^2 = 25 / 9. y = 2 x + 7 has the same centred Gram times 4: HSIC(x, y) =
  // 4 x 25 / 9, HSIC(y, y) = 16 x 25 / 9; CKA = 1.
  moecomp::host_matrix<double> x(4, 1), y(4, 1);
  for (index_t i = 0; i < 4; ++i) {
    x(i, 0) = static_cast<double>(i + 1);
    y(i, 0) = 2.0 * x(i, 0) + 7.0;
  }
  for (auto route : {sim::cka_route::feature, sim::cka_route::gram}) {
    const auto r = run(params_of(sim::cka_kernel::linear, false, route), x, y);
    CHECK(r.ok());
    CHECK(r.route == route);
    CHECK(r.hsic_xx == doctest::Approx(25.0 / 9).epsilon(1e-14));
    CHECK(r.hsic_xy == doctest::Approx(100.0 / 9).epsilon(1e-14));
    CHECK(r.hsic_yy == doctest::Approx(400.0 / 9).epsilon(1e-14));
    CHECK(r.cka == doctest::Approx(1.0).epsilon(1e-14));
  }
}

TEST_CASE("cka: orthogonal transforms, isotropic scaling and translation give CKA = 1") {
  const auto x = normal_matrix<double>(64, 12, 3);
  const auto q = orthogonal(12, 4);
  const auto y = transformed(x, q, 3.5, -20.0);
  for (auto kernel : {sim::cka_kernel::linear, sim::cka_kernel::rbf})
    for (bool unbiased : {false, true}) {
      CAPTURE(sim::to_string(kernel));
      CAPTURE(unbiased);
      const auto r = run(params_of(kernel, unbiased), x, y);
      CHECK(r.ok());
      CHECK(r.cka == doctest::Approx(1.0).epsilon(1e-12));
      if (kernel == sim::cka_kernel::rbf)  // the median heuristic scales with the data
        CHECK(r.sigma_y == doctest::Approx(3.5 * r.sigma_x).epsilon(1e-12));
    }
}

TEST_CASE_TEMPLATE("cka: the feature and gram routes agree, biased and debiased", T, float, double) {
  for (const auto& shape : {std::vector<index_t>{80, 10, 6}, std::vector<index_t>{30, 50, 70}}) {
    const auto x = normal_matrix<T>(shape[0], shape[1], 5);
    const auto y = related(x, shape[2], 1.0, 6);
    for (bool unbiased : {false, true}) {
      const auto f = run(params_of(sim::cka_kernel::linear, unbiased, sim::cka_route::feature), x, y);
      const auto g = run(params_of(sim::cka_kernel::linear, unbiased, sim::cka_route::gram), x, y);
      const auto a = run(params_of(sim::cka_kernel::linear, unbiased), x, y);
      CHECK(f.cka == doctest::Approx(g.cka).epsilon(1e-12));  // both in double whatever T
      CHECK(f.hsic_xy == doctest::Approx(g.hsic_xy).epsilon(1e-12));
      CHECK(f.hsic_xx == doctest::Approx(g.hsic_xx).epsilon(1e-12));
      // automatic takes the cheaper: feature when the features are fewer than the samples
      CHECK(a.route == (shape[1] < shape[0] ? sim::cka_route::feature : sim::cka_route::gram));
    }
  }
}

TEST_CASE("cka: float32 features at a 1e4 offset or scaled by 1e-6 and 1e6 give the clean CKA, never NaN") {
  // Clean data on a 1/64 grid, so that x + 1e4 is exact in float32: what is tested is the computation.
  auto clean_x = normal_matrix<double>(200, 16, 7);
  for (index_t i = 0; i < clean_x.rows(); ++i)
    for (index_t j = 0; j < clean_x.cols(); ++j) clean_x(i, j) = std::round(clean_x(i, j) * 64) / 64;
  auto clean_y = related(clean_x, 12, 1.0, 8);
  for (index_t i = 0; i < clean_y.rows(); ++i)
    for (index_t j = 0; j < clean_y.cols(); ++j) clean_y(i, j) = std::round(clean_y(i, j) * 64) / 64;
  for (bool unbiased : {false, true})
    for (auto kernel : {sim::cka_kernel::linear, sim::cka_kernel::rbf}) {
      const double reference = run(params_of(kernel, unbiased), clean_x, clean_y).cka;
      struct hazard {
        const char* name;
        double offset, scale;
      };
      for (const hazard& h : {hazard{"offset 1e4", 1e4, 1.0}, hazard{"scale 1e-6", 0.0, 1e-6}, hazard{"scale 1e6", 0.0, 1e6}}) {
        const double offset = h.offset, scale = h.scale;
        CAPTURE(h.name);
        CAPTURE(unbiased);
        CAPTURE(sim::to_string(kernel));
        moecomp::host_matrix<float> x(clean_x.rows(), clean_x.cols()), y(clean_y.rows(), clean_y.cols());
        for (index_t i = 0; i < x.rows(); ++i) {
          for (index_t j = 0; j < x.cols(); ++j) x(i, j) = static_cast<float>(clean_x(i, j) * scale + offset);
          for (index_t j = 0; j < y.cols(); ++j) y(i, j) = static_cast<float>(clean_y(i, j) * scale + offset);
        }
        const auto r = run(params_of(kernel, unbiased), x, y);
        CHECK(std::isfinite(r.cka));
        CHECK(std::abs(r.cka - reference) <= 1e-5);
      }
    }
}

TEST_CASE("cka: undefined cases are reported in the status with value 0, never NaN nor an exception") {
  const auto y = normal_matrix<double>(20, 3, 9);
  moecomp::host_matrix<double> constant(20, 2);
  for (index_t i = 0; i < 20; ++i) constant(i, 0) = constant(i, 1) = 4.0;
  for (auto kernel : {sim::cka_kernel::linear, sim::cka_kernel::rbf}) {
    const auto r = run(params_of(kernel, false), constant, y);
    CHECK(r.status == sim::cka_status::constant_input);
    CHECK(r.cka == 0.0);
    CHECK_FALSE(r.ok());
  }
  // More than half the pairs at distance 0: the median heuristic gives sigma = 0.
  moecomp::host_matrix<double> mostly_equal(20, 2);
  for (index_t i = 0; i < 20; ++i) mostly_equal(i, 0) = mostly_equal(i, 1) = i < 16 ? 1.0 : static_cast<double>(i);
  const auto z = run(params_of(sim::cka_kernel::rbf, false), mostly_equal, y);
  CHECK(z.status == sim::cka_status::zero_median);
  CHECK(z.cka == 0.0);
  // The unbiased HSIC of (0, 0, 0, 1) with itself is 0: its U-centred Gram vanishes.
  moecomp::host_matrix<double> spike(4, 1), other(4, 1);
  for (index_t i = 0; i < 4; ++i) {
    spike(i, 0) = i == 3 ? 1.0 : 0.0;
    other(i, 0) = static_cast<double>(i * i);
  }
  const auto u = run(params_of(sim::cka_kernel::linear, true), spike, other);
  CHECK(u.status == sim::cka_status::non_positive_self_hsic);
  CHECK(u.cka == 0.0);
  CHECK(std::abs(u.hsic_xx) <= 1e-15);
}

TEST_CASE("minibatch_cka: the value does not depend on how the token stream is chunked") {
  const index_t n = 300, batch = 50;
  const auto x = normal_matrix<double>(n, 8, 10);
  const auto y = related(x, 5, 2.0, 11);
  const moecomp::host_context ctx(1);
  const auto params = params_of(sim::cka_kernel::linear, true);
  auto feed = [&](const std::vector<index_t>& chunks) {
    sim::minibatch_cka<double> acc(ctx, params, batch, 8, 5);
    index_t first = 0;
    for (index_t c : chunks) {
      acc.add(x.const_view().row_range(first, c), y.const_view().row_range(first, c));
      first += c;
    }
    return std::make_pair(acc.result(), acc.batches());
  };
  const auto whole = feed({n});
  const auto pieces = feed({7, 13, 1, 29, 100, 0, 150});
  const auto batches = feed({50, 50, 50, 50, 50, 50});
  CHECK(whole.second == 6);
  CHECK(pieces.first.cka == whole.first.cka);  // bit for bit
  CHECK(batches.first.cka == whole.first.cka);
  // The definition: summed unbiased HSICs over the six batches.
  double xy = 0, xx = 0, yy = 0;
  for (index_t b = 0; b < n / batch; ++b) {
    const auto r = sim::cka<double>(ctx, params, x.const_view().row_range(b * batch, batch),
                                    y.const_view().row_range(b * batch, batch));
    xy += r.hsic_xy;
    xx += r.hsic_xx;
    yy += r.hsic_yy;
  }
  CHECK(whole.first.cka == doctest::Approx(xy / std::sqrt(xx * yy)).epsilon(1e-14));
  // One batch holding every token is the full computation: debiased CKA.
  sim::minibatch_cka<double> full(ctx, params, n, 8, 5);
  full.add(x.const_view(), y.const_view());
  CHECK(full.result().cka == doctest::Approx(sim::cka<double>(ctx, params, x.const_view(), y.const_view()).cka).epsilon(1e-14));
  // An incomplete batch waits.
  sim::minibatch_cka<double> acc(ctx, params, batch, 8, 5);
  acc.add(x.const_view().row_range(0, 70), y.const_view().row_range(0, 70));
  CHECK(acc.batches() == 1);
  CHECK(acc.pending() == 20);
}

TEST_CASE_TEMPLATE("cka_matrix equals the pair-by-pair CKAs, for every kernel and route, at any thread count", T,
                   float, double) {
  const index_t e = 5, n = 300, d = 24;  // n > 256: more than one Gram tile
  const auto base = normal_matrix<T>(n, d, 12);
  moecomp::host_vector<T> storage(e * n * d);
  for (index_t a = 0; a < e; ++a) {
    const auto f = related(base, d, 0.3 * static_cast<double>(a + 1), 13 + static_cast<std::uint64_t>(a));
    for (index_t i = 0; i < n; ++i)
      for (index_t c = 0; c < d; ++c) storage[(a * n + i) * d + c] = f(i, c);
  }
  const auto stack = moecomp::make_matrix_stack_view(static_cast<const T*>(storage.data()), e, n, d);
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  for (auto kernel : {sim::cka_kernel::linear, sim::cka_kernel::rbf})
    for (bool unbiased : {false, true})
      for (auto route : {sim::cka_route::feature, sim::cka_route::gram}) {
        if (kernel == sim::cka_kernel::rbf && route == sim::cka_route::feature) continue;
        CAPTURE(sim::to_string(kernel));
        CAPTURE(unbiased);
        CAPTURE(sim::to_string(route));
        const auto params = params_of(kernel, unbiased, route);
        moecomp::host_matrix<double> s1(e, e), s3(e, e);
        const auto r = sim::cka_matrix<T>(moecomp::host_context(1), params, stack, s1.view());
        CHECK(r.ok());
        CHECK(r.route == route);
        (void)sim::cka_matrix<T>(moecomp::host_context(3), params, stack, s3.view());
        for (index_t a = 0; a < e; ++a)
          for (index_t b = 0; b < e; ++b) {
            CHECK(s3(a, b) == s1(a, b));
            CHECK(s1(a, b) == s1(b, a));
            const double pair =
                sim::cka<T>(moecomp::host_context(1), params, stack.matrix(a), stack.matrix(b)).cka;
            CHECK(std::abs(s1(a, b) - pair) <= tol);
          }
      }
}

TEST_CASE("cka: the same result at 1, 2 and 3 threads") {
  const auto x = normal_matrix<double>(700, 40, 20);
  const auto y = related(x, 30, 1.0, 21);
  for (auto route : {sim::cka_route::feature, sim::cka_route::gram}) {
    const auto one = run(params_of(sim::cka_kernel::linear, true, route), x, y, 1);
    for (int threads : {2, 3}) {
      const auto r = run(params_of(sim::cka_kernel::linear, true, route), x, y, threads);
      CHECK(r.cka == one.cka);
      CHECK(r.hsic_xy == one.hsic_xy);
    }
  }
}

TEST_CASE("cka: bad input is refused with a message naming the argument") {
  const auto x = normal_matrix<double>(10, 3, 30);
  const auto y9 = normal_matrix<double>(9, 3, 31);
  const moecomp::host_context ctx(1);
  sim::cka_params p;
  CHECK_THROWS_WITH_AS(sim::cka<double>(ctx, p, x.const_view(), y9.const_view()),
                       "cka: x and y must have the same number of samples (rows), got 10 and 9",
                       moecomp::invalid_argument);
  p.unbiased = true;
  CHECK_THROWS_WITH_AS(sim::cka<double>(ctx, p, x.const_view().row_range(0, 3), x.const_view().row_range(0, 3)),
                       "cka: the inputs must have at least 4 samples (rows) for the unbiased HSIC, got 3",
                       moecomp::invalid_argument);
  p = {};
  p.threshold = 0;
  CHECK_THROWS_WITH_AS(sim::cka<double>(ctx, p, x.const_view(), x.const_view()),
                       "cka: params.threshold must be finite and > 0, got 0", moecomp::invalid_argument);
  p = {};
  p.kernel = sim::cka_kernel::rbf;
  p.route = sim::cka_route::feature;
  CHECK_THROWS_AS(sim::cka<double>(ctx, p, x.const_view(), x.const_view()), moecomp::invalid_argument);
  auto bad = x;
  bad(4, 2) = std::nan("");
  CHECK_THROWS_WITH_AS(sim::cka<double>(ctx, sim::cka_params{}, bad.const_view(), x.const_view()),
                       "cka: x must be finite, got nan at (4, 2)", moecomp::invalid_argument);
  moecomp::host_matrix<double> out(2, 3);
  CHECK_THROWS_WITH_AS(sim::cka_matrix<double>(ctx, sim::cka_params{}, moecomp::split_rows(x.const_view(), 2), out.view()),
                       "cka_matrix: out must be 2 x 2 (experts x experts), got 2 x 3", moecomp::invalid_argument);
  CHECK(sim::parse_cka_kernel("rbf") == sim::cka_kernel::rbf);
  CHECK_THROWS_WITH_AS(sim::parse_cka_kernel("poly"), "kernel: expected linear or rbf, got 'poly'",
                       moecomp::invalid_argument);
}
