// The vectorisable exponential (core/detail/vector_exp.hpp) that routing's softmax and sigmoid use: within
// 2 ulp of the C library's exp over the whole range where e^x is a normal double, exact at 0, underflow
// to subnormals and 0 and overflow to inf as exp's, the clamp harmless, the same bits on every call.
#include <moecomp/core/views.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/core/detail/vector_exp.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace {

/// |a - b| in units in the last place of b (b normal).
double ulps(double a, double b) { return std::fabs(a - b) / (std::nextafter(b, HUGE_VAL) - b); }

}  // namespace

TEST_CASE("vector exp: within 2 ulp of exp wherever e^x is a normal double") {
  moecomp::random_generator rng(3);
  const int n = 200000;
  std::vector<double> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    // a third near 0 (softmax's typical range), the rest over the whole normal range
    x[static_cast<std::size_t>(i)] = i % 3 == 0 ? rng.uniform<double>(-1.0, 1.0) : rng.uniform<double>(-708.0, 709.0);
  }
  moecomp::detail::exp_into(x.data(), y.data(), n);
  double worst = 0;
  for (int i = 0; i < n; ++i) worst = std::max(worst, ulps(y[static_cast<std::size_t>(i)], std::exp(x[static_cast<std::size_t>(i)])));
  MESSAGE("worst error ", worst, " ulp over ", n, " points");
  CHECK(worst <= 2.0);
}

TEST_CASE("vector exp: exact points, underflow, overflow, repeatability") {
  std::vector<double> x = {0.0, -0.0, 1.0, -1.0, -745.2, -800.0, -1e300, 709.0, 710.0, 1e300, -720.0};
  std::vector<double> y(x.size());
  moecomp::detail::exp_into(x.data(), y.data(), static_cast<moecomp::index_t>(x.size()));
  CHECK(y[0] == 1.0);
  CHECK(y[1] == 1.0);
  CHECK(ulps(y[2], std::exp(1.0)) <= 1.0);
  CHECK(ulps(y[3], std::exp(-1.0)) <= 1.0);
  CHECK(y[4] == 0.0);  // below the smallest subnormal
  CHECK(y[5] == 0.0);
  CHECK(y[6] == 0.0);  // clamped, still 0
  CHECK(std::isfinite(y[7]));
  CHECK(ulps(y[7], std::exp(709.0)) <= 2.0);
  CHECK(std::isinf(y[8]));  // e^710 overflows
  CHECK(std::isinf(y[9]));
  // e^-720 is subnormal: the error is then absolute, within a few subnormal steps
  CHECK(y[10] > 0.0);
  CHECK(std::fabs(y[10] - std::exp(-720.0)) <= 4 * std::numeric_limits<double>::denorm_min());
  std::vector<double> again(x.size());  // the same bits on every call
  moecomp::detail::exp_into(x.data(), again.data(), static_cast<moecomp::index_t>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(again[i] == y[i]);
}
