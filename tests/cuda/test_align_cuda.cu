// The device neuron alignment (<moecomp/cuda/align/align.cuh>): align_rows, align_activations and
// pearson_correlation against the host's (host_reference.cpp) on seeded data from moecomp's generator: planted
// permutations recovered exactly (the host's p), the reported costs equal to the host's to rounding, the
// correlation matrix equal to the host's to 1e-5 (float) and 1e-12 (double), run-to-run bit-identical results,
// row-strided inputs and outputs, a caller's workspace. Argument checks run before any device work and pass
// without a GPU. The rest runs under `ctest -L cuda`; it has not run on a GPU yet (docs/cuda.md).
#include <doctest/doctest.h>
#include <moecomp/core/random.hpp>
#include <moecomp/cuda/align/align.cuh>
#include <moecomp/cuda/core/device_buffer.cuh>

#include "device_test_support.cuh"
#include "host_reference.hpp"

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

namespace {

using moecomp::index_t;
namespace align = moecomp::align;
using moecomp_test::device_fixture;
using moecomp_test::dmatrix;
using moecomp_test::dvector;

/// A random permutation of 0..m-1 from moecomp's generator.
std::vector<index_t> permutation(index_t m, std::uint64_t seed) {
  std::vector<index_t> q(static_cast<std::size_t>(m));
  std::iota(q.begin(), q.end(), index_t(0));
  moecomp::random_generator rng(seed);
  rng.shuffle(q.begin(), q.end());
  return q;
}

/// n rows of f values, each of unit norm, so that a row's best match under both objectives is its own noisy copy
/// (||x - y||^2 = 2 - 2 x . y, and x . y <= 1 with equality only at y = x).
std::vector<double> unit_rows(index_t n, index_t f, moecomp::random_generator& rng) {
  std::vector<double> x(static_cast<std::size_t>(n * f));
  for (index_t i = 0; i < n; ++i) {
    double s = 0;
    for (index_t k = 0; k < f; ++k) {
      const double v = rng.normal<double>();
      x[static_cast<std::size_t>(i * f + k)] = v;
      s += v * v;
    }
    for (index_t k = 0; k < f; ++k) x[static_cast<std::size_t>(i * f + k)] /= std::sqrt(s);
  }
  return x;
}

template <class T>
std::vector<T> as(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}

/// A device copy of a host rows x cols matrix at row stride ld >= cols (the padding left uninitialised).
template <class T>
moecomp::device_buffer<T> to_device(const moecomp::cuda_context& ctx, const std::vector<T>& host, index_t rows,
                                    index_t cols, index_t ld) {
  moecomp::device_buffer<T> d(ctx, rows * ld);
  moecomp::copy_to_device(ctx, moecomp::make_matrix_view<const T>(host.data(), rows, cols), d.view(rows, cols, ld));
  return d;
}

std::vector<index_t> to_host(const moecomp::cuda_context& ctx, const moecomp::device_buffer<index_t>& d) {
  std::vector<index_t> h(static_cast<std::size_t>(d.size()));
  moecomp::copy_to_host(ctx, d.view(), moecomp::make_vector_view(h.data(), d.size()));
  REQUIRE(cudaStreamSynchronize(ctx.stream) == cudaSuccess);
  return h;
}

align::align_params with_objective(align::align_objective objective) {
  align::align_params params;
  params.objective = objective;
  return params;
}

/// Activations (tokens x n) and their planted partner (tokens x m): b's neuron q[i] = 2 a's neuron i + 1 plus a
/// little noise, b's other neurons independent; a's last neuron and b's last are constant (correlation 0).
struct activations {
  index_t tokens, n, m;
  std::vector<double> a, b;
  std::vector<index_t> planted;
  activations(index_t t, index_t n_, index_t m_, std::uint64_t seed) : tokens(t), n(n_), m(m_) {
    moecomp::random_generator rng(seed);
    a.resize(static_cast<std::size_t>(t * n));
    b.resize(static_cast<std::size_t>(t * m));
    for (double& v : a) v = 3.0 + rng.normal<double>();  // an offset: the centring matters
    for (double& v : b) v = rng.normal<double>();
    const std::vector<index_t> q = permutation(m, seed + 1);
    planted.assign(q.begin(), q.begin() + n);
    for (index_t k = 0; k < t; ++k) {
      a[static_cast<std::size_t>(k * n + n - 1)] = 5.0;
      for (index_t i = 0; i + 1 < n; ++i)
        b[static_cast<std::size_t>(k * m + planted[static_cast<std::size_t>(i)])] =
            2.0 * a[static_cast<std::size_t>(k * n + i)] + 1.0 + 0.05 * rng.normal<double>();
    }
    // The constant neuron of a correlates 0 with everything: its match is any free neuron; plant the constant one
    // of b there so the optimum is unique up to zero-correlation ties, which the test does not compare.
    for (index_t k = 0; k < t; ++k) b[static_cast<std::size_t>(k * m + planted[static_cast<std::size_t>(n - 1)])] = -2.0;
  }
};

template <class T>
double tolerance() {
  return sizeof(T) == sizeof(float) ? 1e-5 : 1e-12;
}

}  // namespace

TEST_CASE("device align_rows, align_activations and pearson_correlation: argument checks run before any device work") {
  const moecomp::cuda_context ctx(nullptr);  // never used: the checks come first
  float storage[4096] = {0};
  index_t ids[16] = {0};
  const dmatrix<const float> a(storage, 4, 3), b(storage + 64, 5, 3), few(storage + 128, 3, 3);
  const dvector<index_t> p4(ids, 4), p3(ids, 3);
  CHECK_THROWS_WITH_AS(align::align_rows<float>(ctx, with_objective(align::align_objective::correlation), a, b, p4),
                       "align_rows: params.objective must be weights or inner (correlation compares activations: "
                       "align_activations), got correlation",
                       moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(align::align_rows<float>(ctx, {}, a, few, p4),
                       "align_rows: b must have at least a's 4 rows (each row of a gets a distinct row of b), got 3",
                       moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(align::align_rows<float>(ctx, {}, a, dmatrix<const float>(storage + 64, 5, 2), p4),
                       "align_rows: b must have 3 columns like a, got 5 x 2", moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(align::align_rows<float>(ctx, {}, a, b, p3),
                       "align_rows: permutation must have 4 entries (one per row of a), got 3", moecomp::invalid_argument);
  const index_t huge = index_t(INT_MAX) + 1;
  CHECK_THROWS_WITH_AS(align::align_rows<float>(ctx, {}, dmatrix<const float>(storage, 1, 3, huge), dmatrix<const float>(storage + 64, 1, 3),
                                                dvector<index_t>(ids, 1)),
                       "align_rows: a's row stride must be at most 2147483647 on the device, got 2147483648",
                       moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(align::align_activations<float>(ctx, dmatrix<const float>(storage, 1, 3), b, p3),
                       "align_activations: a must be tokens x neurons with at least 2 tokens and 1 neuron, got 1 x 3",
                       moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(align::align_activations<float>(ctx, dmatrix<const float>(storage, 5, 4), b, p4),
                       "align_activations: b must have at least a's 4 neurons (columns; each neuron of a gets a distinct "
                       "neuron of b), got 3",
                       moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(align::align_activations<float>(ctx, a, b, p3),
                       "align_activations: b must have a's 4 tokens (rows), got 5 x 3", moecomp::invalid_argument);
  const dmatrix<float> out(storage + 1024, 3, 3), wide(storage + 1024, 3, 5);
  CHECK_THROWS_WITH_AS(align::pearson_correlation<float>(ctx, b, dmatrix<const float>(storage + 256, 5, 5), out),
                       "pearson_correlation: out must be 3 x 5 (a's neurons x b's neurons), got 3 x 3",
                       moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(align::pearson_correlation<float>(ctx, dmatrix<const float>(storage + 1024, 5, 3),
                                                         dmatrix<const float>(storage + 256, 5, 5), wide),
                       "pearson_correlation: out must not overlap a", moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(align::pearson_correlation<float>(ctx, b, dmatrix<const float>(storage + 256, 4, 5), wide),
                       "pearson_correlation: b must have a's 5 tokens (rows) and at least 1 neuron, got 4 x 5",
                       moecomp::invalid_argument);
}

TEST_CASE_TEMPLATE("device align_rows recovers a planted permutation and reports the host's cost", T, float, double) {
  device_fixture fx;
  const auto ctx = fx.context();
  constexpr index_t n = 48, m = 64, f = 40, lda = f + 3, ldb = f + 5;
  moecomp::random_generator rng(7);
  const std::vector<double> a = unit_rows(n, f, rng), extra = unit_rows(m, f, rng);
  // b's row q[i] = a's row i plus noise of 1e-3 (renormalised); b's other rows independent.
  const std::vector<index_t> q = permutation(m, 8);
  std::vector<double> b = extra;
  for (index_t i = 0; i < n; ++i) {
    double s = 0;
    double* row = b.data() + q[static_cast<std::size_t>(i)] * f;
    for (index_t k = 0; k < f; ++k) {
      row[k] = a[static_cast<std::size_t>(i * f + k)] + 1e-3 * rng.normal<double>();
      s += row[k] * row[k];
    }
    for (index_t k = 0; k < f; ++k) row[k] /= std::sqrt(s);
  }
  const std::vector<index_t> planted(q.begin(), q.begin() + n);
  const std::vector<T> ha = as<T>(a), hb = as<T>(b);
  const auto da = to_device(ctx, ha, n, f, lda), db = to_device(ctx, hb, m, f, ldb);
  const dmatrix<const T> av = da.view(n, f, lda), bv = db.view(m, f, ldb);
  moecomp::device_buffer<index_t> dp(ctx, n);
  for (const auto objective : {align::align_objective::weights, align::align_objective::inner}) {
    CAPTURE(align::to_string(objective));
    const align::align_params params = with_objective(objective);
    std::vector<index_t> host_p(n, -1);
    const align::align_result host = moecomp_test::host_align_rows<T>(
        params, moecomp::make_matrix_view<const T>(ha.data(), n, f), moecomp::make_matrix_view<const T>(hb.data(), m, f),
        moecomp::make_vector_view(host_p.data(), n));
    REQUIRE(host.ok());
    REQUIRE(host_p == planted);
    const align::align_result r = align::align_rows<T>(ctx, params, av, bv, dp.view());
    CHECK(r.ok());
    CHECK(to_host(ctx, dp) == planted);
    CHECK(r.cost == doctest::Approx(host.cost).epsilon(1e-10));
    // A caller's workspace: the same answer, bit for bit; one byte short is refused.
    const std::size_t bytes = align::align_rows_workspace_size<T>(params, n, m, f);
    moecomp::device_buffer<std::byte> w(ctx, static_cast<index_t>(bytes));
    const align::align_result again = align::align_rows<T>(ctx, params, av, bv, dp.view(), w.view());
    CHECK(to_host(ctx, dp) == planted);
    CHECK(std::memcmp(&again.cost, &r.cost, sizeof(double)) == 0);
    CHECK_THROWS_WITH_AS(align::align_rows<T>(ctx, params, av, bv, dp.view(), w.view().subview(0, w.size() - 1)),
                         doctest::Contains("align_rows: workspace must have at least"), moecomp::invalid_argument);
  }
}

TEST_CASE_TEMPLATE("device pearson_correlation equals the host's; a constant neuron correlates 0", T, float, double) {
  device_fixture fx;
  const auto ctx = fx.context();
  const activations h(300, 24, 40, 11);
  const std::vector<T> ha = as<T>(h.a), hb = as<T>(h.b);
  const index_t tokens = h.tokens, n = h.n, m = h.m, ldo = m + 5;
  std::vector<T> expected(static_cast<std::size_t>(n * m));
  moecomp_test::host_pearson_correlation<T>(moecomp::make_matrix_view<const T>(ha.data(), tokens, n),
                                            moecomp::make_matrix_view<const T>(hb.data(), tokens, m),
                                            moecomp::make_matrix_view(expected.data(), n, m));
  const auto da = to_device(ctx, ha, tokens, n, n + 1), db = to_device(ctx, hb, tokens, m, m);
  moecomp::device_buffer<T> dout(ctx, n * ldo);
  std::vector<T> got(static_cast<std::size_t>(n * m)), twice(got.size());
  for (std::vector<T>* into : {&got, &twice}) {
    align::pearson_correlation<T>(ctx, da.view(tokens, n, n + 1), db.view(tokens, m), dout.view(n, m, ldo));
    moecomp::copy_to_host(ctx, dout.view(n, m, ldo).as_const(), moecomp::make_matrix_view(into->data(), n, m));
    fx.sync();
  }
  double worst = 0;
  for (std::size_t k = 0; k < got.size(); ++k)
    worst = std::fmax(worst, std::fabs(static_cast<double>(got[k]) - static_cast<double>(expected[k])));
  CHECK(worst <= tolerance<T>());
  CHECK(std::memcmp(got.data(), twice.data(), sizeof(T) * got.size()) == 0);  // run to run, bit for bit
  for (index_t j = 0; j < m; ++j) CHECK(got[static_cast<std::size_t>((n - 1) * m + j)] == T(0));
  for (index_t i = 0; i + 1 < n; ++i)  // the planted partners: correlation near 1
    CHECK(static_cast<double>(got[static_cast<std::size_t>(i * m + h.planted[static_cast<std::size_t>(i)])]) > 0.99);
  // A caller's workspace gives the same bits.
  moecomp::device_buffer<std::byte> w(ctx, static_cast<index_t>(align::pearson_correlation_workspace_size<T>(tokens, n, m)));
  align::pearson_correlation<T>(ctx, da.view(tokens, n, n + 1), db.view(tokens, m), dout.view(n, m, ldo), w.view());
  moecomp::copy_to_host(ctx, dout.view(n, m, ldo).as_const(), moecomp::make_matrix_view(twice.data(), n, m));
  fx.sync();
  CHECK(std::memcmp(got.data(), twice.data(), sizeof(T) * got.size()) == 0);
}

TEST_CASE_TEMPLATE("device align_activations recovers the planted neurons and reports the host's summed correlation", T,
                   float, double) {
  device_fixture fx;
  const auto ctx = fx.context();
  const activations h(256, 32, 45, 21);
  const std::vector<T> ha = as<T>(h.a), hb = as<T>(h.b);
  const index_t tokens = h.tokens, n = h.n, m = h.m;
  std::vector<index_t> host_p(n, -1);
  const align::align_result host = moecomp_test::host_align_activations<T>(
      moecomp::make_matrix_view<const T>(ha.data(), tokens, n), moecomp::make_matrix_view<const T>(hb.data(), tokens, m),
      moecomp::make_vector_view(host_p.data(), n));
  REQUIRE(host.ok());
  const auto da = to_device(ctx, ha, tokens, n, n), db = to_device(ctx, hb, tokens, m, m + 2);
  moecomp::device_buffer<index_t> dp(ctx, n);
  const align::align_result r = align::align_activations<T>(ctx, da.view(tokens, n), db.view(tokens, m, m + 2), dp.view());
  CHECK(r.ok());
  const std::vector<index_t> p = to_host(ctx, dp);
  // Every neuron but the constant one (correlation 0 with all: any free neuron is optimal) is planted.
  for (index_t i = 0; i + 1 < n; ++i) {
    CAPTURE(i);
    CHECK(p[static_cast<std::size_t>(i)] == h.planted[static_cast<std::size_t>(i)]);
    CHECK(host_p[static_cast<std::size_t>(i)] == h.planted[static_cast<std::size_t>(i)]);
  }
  CHECK(r.cost == doctest::Approx(host.cost).epsilon(tolerance<T>()));
  const std::size_t bytes = align::align_activations_workspace_size<T>(tokens, n, m);
  moecomp::device_buffer<std::byte> w(ctx, static_cast<index_t>(bytes));
  const align::align_result again =
      align::align_activations<T>(ctx, da.view(tokens, n), db.view(tokens, m, m + 2), dp.view(), w.view());
  CHECK(to_host(ctx, dp) == p);
  CHECK(std::memcmp(&again.cost, &r.cost, sizeof(double)) == 0);
  CHECK_THROWS_WITH_AS(align::align_activations<T>(ctx, da.view(tokens, n), db.view(tokens, m, m + 2), dp.view(),
                                                   w.view().subview(0, w.size() - 1)),
                       doctest::Contains("align_activations: workspace must have at least"), moecomp::invalid_argument);
}
