// Pairwise distances on the host: closed forms, a brute-force long-double reference across tile
// boundaries, the cancellation guard, determinism across thread counts, and argument errors.
// (test_distance_serial.cpp compiles this same file without OpenMP.)
#include <doctest/doctest.h>

#include "test_support.hpp"
#include <moecomp/moecomp.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

using moecomp::host_context;
using moecomp::host_matrix;
using moecomp::host_vector;
using moecomp::index_t;
namespace distance = moecomp::distance;
using distance::metric;

namespace {

const metric all_metrics[] = {metric::euclidean, metric::sqeuclidean, metric::cosine, metric::correlation};

distance::pairwise_distance_params with_metric(metric m) {
  distance::pairwise_distance_params p;
  p.metric = m;
  return p;
}

/// The definition, evaluated in long double straight from the rows.
template <class T>
long double reference(metric m, const T* x, const T* y, index_t d) {
  long double mx = 0, my = 0;
  if (m == metric::correlation) {
    for (index_t k = 0; k < d; ++k) mx += x[k], my += y[k];
    mx /= d, my /= d;
  }
  long double nx = 0, ny = 0, sq = 0;
  for (index_t k = 0; k < d; ++k) {
    const long double a = x[k] - mx, b = y[k] - my;
    nx += a * a, ny += b * b, sq += (a - b) * (a - b);
  }
  if (m == metric::euclidean) return std::sqrt(sq);
  if (m == metric::sqeuclidean) return sq;
  // 1 - cos in its cancellation-free form ||x/|x| - y/|y|||^2 / 2
  const long double sx = 1.0L / std::sqrt(nx), sy = 1.0L / std::sqrt(ny);
  long double unit = 0;
  for (index_t k = 0; k < d; ++k) {
    const long double diff = (x[k] - mx) * sx - (y[k] - my) * sy;
    unit += diff * diff;
  }
  return unit / 2;
}

template <class T>
host_matrix<T> random_matrix(index_t rows, index_t cols, std::uint64_t seed, T offset = T(0)) {
  host_matrix<T> x(rows, cols);
  moecomp::random_generator rng(seed);
  rng.fill_normal(x.view(), offset, T(1));
  return x;
}

template <class T>
double tolerance() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

template <class T>
void check_close(T got, long double want, const char* what) {
  const double scale = std::max(1.0, static_cast<double>(std::fabs(want)));
  INFO(what << ": got " << got << ", want " << static_cast<double>(want));
  CHECK(std::fabs(static_cast<double>(got) - static_cast<double>(want)) <= tolerance<T>() * scale);
}

}  // namespace

TEST_CASE("closed forms: 3-4-5 triangle, unit vectors, correlation of scaled and reversed rows") {
  const host_context ctx;
  const double points[] = {0, 0, 3, 0, 0, 4};
  const auto x = moecomp::make_matrix_view(points, 3, 2);
  host_vector<double> out(3);

  distance::pairwise_distances_condensed(ctx, with_metric(metric::euclidean), x, out.view());
  CHECK(out[0] == 3.0);
  CHECK(out[1] == 4.0);
  CHECK(out[2] == 5.0);
  distance::pairwise_distances_condensed(ctx, with_metric(metric::sqeuclidean), x, out.view());
  CHECK(out[0] == 9.0);
  CHECK(out[1] == 16.0);
  CHECK(out[2] == 25.0);

  const double directions[] = {1, 0, 0, 1, 1, 1};
  distance::pairwise_distances_condensed(ctx, with_metric(metric::cosine),
                                         moecomp::make_matrix_view(directions, 3, 2), out.view());
  CHECK(out[0] == doctest::Approx(1.0).epsilon(1e-15));
  CHECK(out[1] == doctest::Approx(1.0 - std::sqrt(0.5)).epsilon(1e-14));
  CHECK(out[2] == doctest::Approx(1.0 - std::sqrt(0.5)).epsilon(1e-14));

  const float rows[] = {1, 2, 3, 3, 2, 1, 2, 4, 6};
  host_vector<float> outf(3);
  distance::pairwise_distances_condensed(ctx, with_metric(metric::correlation), moecomp::make_matrix_view(rows, 3, 3),
                                         outf.view());
  CHECK(outf[0] == doctest::Approx(2.0f));  // anti-correlated
  CHECK(outf[1] == 0.0f);                    // same row up to scale: exactly 0 through the direct path
  CHECK(outf[2] == doctest::Approx(2.0f));
}

TEST_CASE("zero rows give NaN for cosine and constant rows NaN for correlation, as scipy") {
  const host_context ctx;
  const double x[] = {0, 0, 0, 1, 2, 3, 2, 2, 2};
  host_vector<double> out(3);
  distance::pairwise_distances_condensed(ctx, with_metric(metric::cosine), moecomp::make_matrix_view(x, 3, 3),
                                         out.view());
  CHECK(std::isnan(out[0]));
  CHECK(std::isnan(out[1]));
  CHECK(out[2] == doctest::Approx(1.0 - 12.0 / (std::sqrt(14.0) * std::sqrt(12.0))));
  distance::pairwise_distances_condensed(ctx, with_metric(metric::correlation), moecomp::make_matrix_view(x, 3, 3),
                                         out.view());
  CHECK(std::isnan(out[0]));  // both constant
  CHECK(std::isnan(out[1]));
  CHECK(std::isnan(out[2]));
  host_matrix<double> square(3, 3);
  distance::pairwise_distances(ctx, with_metric(metric::cosine), moecomp::make_matrix_view(x, 3, 3), square.view());
  CHECK(square(0, 0) == 0.0);  // squareform's diagonal is 0 even for a zero row
}

TEST_CASE_TEMPLATE("all metrics against the long-double definition across tile boundaries", T, float, double) {
  const host_context ctx;
  for (index_t n : {1, 2, 3, 255, 256, 257, 600}) {
    for (index_t d : {1, 7, 300}) {
      const auto x = random_matrix<T>(n, d, 1000 + static_cast<std::uint64_t>(n * 7 + d));
      for (metric m : all_metrics) {
        CAPTURE(n);
        CAPTURE(d);
        CAPTURE(std::string(distance::to_string(m)));
        if (d == 1 && m == metric::correlation) continue;  // every 1-D row is constant
        host_vector<T> condensed(distance::condensed_size(n));
        host_matrix<T> square(n, n);
        distance::pairwise_distances_condensed(ctx, with_metric(m), x.view(), condensed.view());
        distance::pairwise_distances(ctx, with_metric(m), x.view(), square.view());
        index_t bad = 0;
        for (index_t i = 0; i < n; ++i) {
          if (square(i, i) != T(0)) ++bad;
          for (index_t j = i + 1; j < n; ++j) {
            const T value = condensed[distance::condensed_index(n, i, j)];
            const long double want = reference(m, x.view().row_ptr(i), x.view().row_ptr(j), d);
            const double scale = std::max(1.0, static_cast<double>(std::fabs(want)));
            if (!(std::fabs(static_cast<double>(value) - static_cast<double>(want)) <= tolerance<T>() * scale)) ++bad;
            if (square(i, j) != value || square(j, i) != value) ++bad;  // same bits in both forms, symmetric
          }
        }
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE_TEMPLATE("X against Y, strided views, and Y = X reproducing the square form", T, float, double) {
  const host_context ctx;
  const index_t n = 300, m = 270, d = 33;
  // strided: the views cover the first d columns of wider buffers
  auto xbuf = random_matrix<T>(n, d + 5, 11);
  auto ybuf = random_matrix<T>(m, d + 2, 12);
  const auto x = xbuf.view().block(0, 0, n, d);
  const auto y = ybuf.view().block(0, 0, m, d);
  host_matrix<T> outbuf(n, m + 3);
  const auto out = outbuf.view().block(0, 0, n, m);
  for (metric mt : all_metrics) {
    CAPTURE(std::string(distance::to_string(mt)));
    distance::pairwise_distances(ctx, with_metric(mt), x, y, out);
    index_t bad = 0;
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < m; ++j) {
        const long double want = reference(mt, x.row_ptr(i), y.row_ptr(j), d);
        if (!(std::fabs(static_cast<double>(out(i, j)) - static_cast<double>(want)) <=
              tolerance<T>() * std::max(1.0, static_cast<double>(std::fabs(want)))))
          ++bad;
      }
    CHECK(bad == 0);
  }
  // the padding columns of the output buffer are untouched
  for (index_t i = 0; i < n; ++i) CHECK(outbuf(i, m) == T(0));
}

TEST_CASE_TEMPLATE("the cancellation guard keeps near-duplicate rows far from the origin accurate", T, float, double) {
  // Rows = a large common offset + tiny perturbations: the Gram form subtracts numbers ~1e8 apart from
  // distances ~1e-3. Column centring plus the direct recomputation must still give the exact answer.
  const host_context ctx;
  const index_t n = 40, d = 64;
  host_matrix<T> x(n, d);
  moecomp::random_generator rng(5);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < d; ++j) x(i, j) = T(1000) + T(j) + T(1e-2) * rng.normal<T>();
  for (metric m : {metric::euclidean, metric::sqeuclidean, metric::cosine, metric::correlation}) {
    CAPTURE(std::string(distance::to_string(m)));
    host_vector<T> out(distance::condensed_size(n));
    distance::pairwise_distances_condensed(ctx, with_metric(m), x.view(), out.view());
    double worst = 0;
    for (index_t i = 0; i < n; ++i)
      for (index_t j = i + 1; j < n; ++j) {
        const long double want = reference(m, x.view().row_ptr(i), x.view().row_ptr(j), d);
        const double got = static_cast<double>(out[distance::condensed_index(n, i, j)]);
        worst = std::max(worst, std::fabs(got - static_cast<double>(want)) / static_cast<double>(std::fabs(want)));
      }
    // Relative to the distance itself, not to the norms. For cosine/correlation in double the floor is the
    // rounding of 1/||x|| (relative error e becomes e / ||u - v|| here, with ||u - v|| ~ 1e-5); scipy's
    // 1 - cos form loses about 1e-6 relative on the same rows.
    const bool angular = (m == metric::cosine || m == metric::correlation);
    CHECK(worst < (std::is_same_v<T, float> ? 1e-5 : (angular ? 1e-10 : 1e-12)));
  }
}

TEST_CASE("without the guard the Gram form does lose those digits (the guard is not dead code)") {
  const host_context ctx;
  const index_t n = 16, d = 32;
  host_matrix<float> x(n, d);
  moecomp::random_generator rng(6);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < d; ++j) x(i, j) = 1.0f + 1e-4f * rng.normal<float>();
  auto params = with_metric(metric::cosine);
  params.cancellation_threshold = 0.0;
  host_vector<float> raw(distance::condensed_size(n)), guarded(distance::condensed_size(n));
  distance::pairwise_distances_condensed(ctx, params, x.view(), raw.view());
  distance::pairwise_distances_condensed(ctx, with_metric(metric::cosine), x.view(), guarded.view());
  double worst_raw = 0, worst_guarded = 0;
  for (index_t i = 0; i < n; ++i)
    for (index_t j = i + 1; j < n; ++j) {
      const double want = static_cast<double>(reference(metric::cosine, x.view().row_ptr(i), x.view().row_ptr(j), d));
      const index_t k = distance::condensed_index(n, i, j);
      worst_raw = std::max(worst_raw, std::fabs(raw[k] - want) / want);
      worst_guarded = std::max(worst_guarded, std::fabs(guarded[k] - want) / want);
    }
  CHECK(worst_raw > 1e-2);
  CHECK(worst_guarded < 1e-5);
}

TEST_CASE("results are bit-identical run to run, and at 1 and 2 threads (Eigen and CBLAS kernels alike)") {
  // (All forms at 1, 2, 3 and 7 threads: the next test.)
  const auto x = random_matrix<float>(700, 96, 77, 3.0f);
  const index_t size = distance::condensed_size(700);
  host_vector<float> one(size), two(size), again(size);
  for (metric m : all_metrics) {
    CAPTURE(std::string(distance::to_string(m)));
    distance::pairwise_distances_condensed(host_context(1), with_metric(m), x.view(), one.view());
    distance::pairwise_distances_condensed(host_context(2), with_metric(m), x.view(), two.view());
    distance::pairwise_distances_condensed(host_context(2), with_metric(m), x.view(), again.view());
    CHECK(std::memcmp(two.data(), again.data(), sizeof(float) * static_cast<std::size_t>(size)) == 0);
    CHECK(std::memcmp(one.data(), two.data(), sizeof(float) * static_cast<std::size_t>(size)) == 0);
  }
}

TEST_CASE_TEMPLATE("distance: bit-identical at 1, 2, 3 and 7 threads", T, float, double) {
  // docs/distance.md: every 256 x 256 tile is computed by the same single-threaded kernel whatever the thread
  // count, so all three forms give the same bytes for any number of threads. 600 x 300 points make 3 x 3
  // tiles (2 x 3 against y) and more than 65536 entries for the parallel preprocessing; rows clustered around
  // ten centres send one pair in ten through the cancellation guard.
  const index_t n = 600, m = 450, d = 300;
  const auto centres = random_matrix<T>(10, d, 41, T(2));
  auto clustered = [&](index_t rows, std::uint64_t seed) {
    host_matrix<T> x = random_matrix<T>(rows, d, seed);
    for (index_t i = 0; i < rows; ++i)
      for (index_t k = 0; k < d; ++k) x(i, k) = centres(i % 10, k) + T(0.05) * x(i, k);
    return x;
  };
  const host_matrix<T> x = clustered(n, 42), y = clustered(m, 43);
  for (metric mt : all_metrics) {
    CAPTURE(std::string(distance::to_string(mt)));
    moecomp_test::check_same_at_thread_counts([&](const host_context& ctx) {
      host_vector<T> condensed(distance::condensed_size(n));
      host_matrix<T> square(n, n), cross(n, m);
      distance::pairwise_distances_condensed(ctx, with_metric(mt), x.view(), condensed.view());
      distance::pairwise_distances(ctx, with_metric(mt), x.view(), square.view());
      distance::pairwise_distances(ctx, with_metric(mt), x.view(), y.view(), cross.view());
      return std::make_tuple(condensed.storage(), square.storage(), cross.storage());
    });
  }
}

TEST_CASE("empty inputs and zero columns") {
  const host_context ctx;
  host_matrix<double> x0(0, 5);
  host_vector<double> out0(0);
  distance::pairwise_distances_condensed(ctx, {}, x0.view(), out0.view());
  host_matrix<double> x1(1, 5);
  distance::pairwise_distances_condensed(ctx, {}, x1.view(), out0.view());
  host_matrix<double> no_cols(3, 0);
  host_vector<double> out3(3);
  out3[0] = out3[1] = out3[2] = -1;
  distance::pairwise_distances_condensed(ctx, {}, no_cols.view(), out3.view());
  CHECK(out3[0] == 0.0);
  CHECK(out3[2] == 0.0);
}

TEST_CASE("bad shapes are invalid_argument naming the argument and both shapes") {
  const host_context ctx;
  host_matrix<double> x(4, 3), y(5, 2), out(4, 4);
  host_vector<double> condensed(5);
  using moecomp_test::thrown_message;
  const std::string a = thrown_message([&] { distance::pairwise_distances_condensed(ctx, {}, x.view(), condensed.view()); });
  CHECK(a.find("pairwise_distances_condensed: out must have n (n - 1) / 2 = 6 elements") != std::string::npos);
  CHECK(a.find("got 5") != std::string::npos);
  const std::string b = thrown_message([&] { distance::pairwise_distances(ctx, {}, x.view(), y.view(), out.view()); });
  CHECK(b.find("y must have as many columns as x (3), got y of shape 5 x 2") != std::string::npos);
  host_matrix<double> wrong(4, 5);
  const std::string c = thrown_message([&] { distance::pairwise_distances(ctx, {}, x.view(), wrong.view()); });
  CHECK(c.find("out must be 4 x 4") != std::string::npos);
  CHECK(c.find("got 4 x 5") != std::string::npos);
  const std::string d = thrown_message([] { distance::parse_metric("manhattan"); });
  CHECK(d.find("'manhattan'") != std::string::npos);
}
