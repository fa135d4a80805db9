// The device neuron alignment (<moecomp/cuda/align/align.cuh>): align_rows, align_activations and
// pearson_correlation against the host's (host_reference.cpp) on seeded data from moecomp's generator: planted
// permutations recovered exactly (the host's p), the reported costs equal to the host's to rounding, the
// correlation matrix equal to the host's to 1e-5 (float) and 1e-12 (double), run-to-run bit-identical results,
// row-strided inputs and outputs, a caller's workspace. align_experts (float, bfloat16, half and double storage)
// and align_stack (float, bfloat16, half), under weights, inner and correlation, against the host's
// (align_reference.cpp) on stacks whose experts are noisy neuron permutations of one reference: the planted
// permutations recovered exactly, the host's p and cost, a caller's workspace. Argument checks run before any
// device work and pass without a GPU. The rest runs under `ctest -L cuda`; it has not run on a GPU yet
// (compiled, not run on hardware; docs/cuda.md).
#include <doctest/doctest.h>
#include <moecomp/core/random.hpp>
#include <moecomp/cuda/align/align.cuh>
#include <moecomp/cuda/core/device_buffer.cuh>

#include "align_reference.hpp"
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

namespace {

/// A gated stack of E experts with b1, b3 and b2 in storage W: expert `reference` random; every other expert e has
/// neuron planted[e][i] = the reference's neuron i plus noise (5%), so align_experts(reference, e) = planted[e]
/// (by a wide margin under every objective); planted[reference] is the identity.
template <class W>
struct planted_stack {
  index_t experts, d, d_ff, reference;
  std::vector<W> w1, w3, w2, b1, b3, b2;
  std::vector<std::vector<index_t>> planted;
  planted_stack(index_t e, index_t d_, index_t d_ff_, index_t ref, std::uint64_t seed)
      : experts(e), d(d_), d_ff(d_ff_), reference(ref) {
    moecomp::random_generator rng(seed);
    const auto draw = [&](double scale) { return scale * rng.normal<double>(); };
    std::vector<double> r1(static_cast<std::size_t>(d_ff * d)), r3(r1.size()), r2(r1.size()),
        rb1(static_cast<std::size_t>(d_ff)), rb3(rb1.size());
    for (double& v : r1) v = draw(0.5);
    for (double& v : r3) v = draw(0.5);
    for (double& v : r2) v = draw(0.5);
    for (double& v : rb1) v = draw(0.2);
    for (double& v : rb3) v = draw(0.2);
    const std::size_t per = static_cast<std::size_t>(d_ff * d);
    w1.resize(per * static_cast<std::size_t>(e));
    w3.resize(w1.size());
    w2.resize(w1.size());
    b1.resize(static_cast<std::size_t>(d_ff * e));
    b3.resize(b1.size());
    b2.resize(static_cast<std::size_t>(d * e));
    for (index_t x = 0; x < e; ++x) {
      std::vector<index_t> q(static_cast<std::size_t>(d_ff));
      std::iota(q.begin(), q.end(), index_t(0));
      if (x != ref) q = permutation(d_ff, seed + 10 + static_cast<std::uint64_t>(x));
      const double noise = x == ref ? 0.0 : 0.05;
      W* e1 = w1.data() + per * static_cast<std::size_t>(x);
      W* e3 = w3.data() + per * static_cast<std::size_t>(x);
      W* e2 = w2.data() + per * static_cast<std::size_t>(x);
      for (index_t i = 0; i < d_ff; ++i) {
        const index_t to = q[static_cast<std::size_t>(i)];
        for (index_t k = 0; k < d; ++k) {
          const std::size_t src = static_cast<std::size_t>(i * d + k);
          e1[to * d + k] = moecomp::convert_to<W>(r1[src] + noise * draw(0.5));
          e3[to * d + k] = moecomp::convert_to<W>(r3[src] + noise * draw(0.5));
          e2[k * d_ff + to] = moecomp::convert_to<W>(r2[src] + noise * draw(0.5));  // W2[k, i] = r2[i * d + k]
        }
        b1[static_cast<std::size_t>(x * d_ff + to)] = moecomp::convert_to<W>(rb1[static_cast<std::size_t>(i)] + noise * draw(0.2));
        b3[static_cast<std::size_t>(x * d_ff + to)] = moecomp::convert_to<W>(rb3[static_cast<std::size_t>(i)] + noise * draw(0.2));
      }
      for (index_t k = 0; k < d; ++k) b2[static_cast<std::size_t>(x * d + k)] = moecomp::convert_to<W>(draw(0.1));
      planted.push_back(q);
    }
  }
  moecomp::moe::ffn_expert_stack_view<W> host() const {
    moecomp::moe::ffn_expert_stack_view<W> s;
    s.w1 = moecomp::matrix_stack_view<const W>(w1.data(), experts, d_ff, d, d, d_ff * d);
    s.w3 = moecomp::matrix_stack_view<const W>(w3.data(), experts, d_ff, d, d, d_ff * d);
    s.w2 = moecomp::matrix_stack_view<const W>(w2.data(), experts, d, d_ff, d_ff, d * d_ff);
    s.b1 = moecomp::matrix_view<const W>(b1.data(), experts, d_ff);
    s.b3 = moecomp::matrix_view<const W>(b3.data(), experts, d_ff);
    s.b2 = moecomp::matrix_view<const W>(b2.data(), experts, d);
    return s;
  }
};

/// planted_stack's arrays on the device and the stack view over them.
template <class W>
struct device_stack {
  moecomp::device_buffer<W> w1, w3, w2, b1, b3, b2;
  moecomp::moe::ffn_expert_stack_device_view<W> view;
  device_stack(const moecomp::cuda_context& ctx, const planted_stack<W>& h)
      : w1(to_device(ctx, h.w1, 1, static_cast<index_t>(h.w1.size()), static_cast<index_t>(h.w1.size()))),
        w3(to_device(ctx, h.w3, 1, static_cast<index_t>(h.w3.size()), static_cast<index_t>(h.w3.size()))),
        w2(to_device(ctx, h.w2, 1, static_cast<index_t>(h.w2.size()), static_cast<index_t>(h.w2.size()))),
        b1(to_device(ctx, h.b1, 1, static_cast<index_t>(h.b1.size()), static_cast<index_t>(h.b1.size()))),
        b3(to_device(ctx, h.b3, 1, static_cast<index_t>(h.b3.size()), static_cast<index_t>(h.b3.size()))),
        b2(to_device(ctx, h.b2, 1, static_cast<index_t>(h.b2.size()), static_cast<index_t>(h.b2.size()))) {
    const index_t e = h.experts, d = h.d, d_ff = h.d_ff;
    view.w1 = moecomp::matrix_stack_view<const W, moecomp::device_memory>(w1.data(), e, d_ff, d, d, d_ff * d);
    view.w3 = moecomp::matrix_stack_view<const W, moecomp::device_memory>(w3.data(), e, d_ff, d, d, d_ff * d);
    view.w2 = moecomp::matrix_stack_view<const W, moecomp::device_memory>(w2.data(), e, d, d_ff, d_ff, d * d_ff);
    view.b1 = dmatrix<const W>(b1.data(), e, d_ff);
    view.b3 = dmatrix<const W>(b3.data(), e, d_ff);
    view.b2 = dmatrix<const W>(b2.data(), e, d);
  }
};

/// Calibration tokens (n x d, in A) for the correlation objective.
template <class A>
std::vector<A> tokens_of(index_t n, index_t d, std::uint64_t seed) {
  moecomp::random_generator rng(seed);
  std::vector<A> x(static_cast<std::size_t>(n * d));
  for (A& v : x) v = static_cast<A>(rng.normal<double>());
  return x;
}

/// The reported cost's agreement with the host's: design rows are converted identically (only the summation
/// order differs); activations come from other GEMM kernels.
template <class A>
double cost_tolerance(align::align_objective objective) {
  if (objective != align::align_objective::correlation) return 1e-10;
  return sizeof(A) == sizeof(float) ? 1e-5 : 1e-10;
}

constexpr align::align_objective all_objectives[] = {align::align_objective::weights, align::align_objective::inner,
                                                     align::align_objective::correlation};

}  // namespace

TEST_CASE("device align_experts and align_stack: argument checks run before any device work") {
  const moecomp::cuda_context ctx(nullptr);  // never used: the checks come first
  float storage[4096] = {0};
  index_t ids[64] = {0};
  constexpr index_t d = 3, d_ff = 4;
  using dexpert = moecomp::moe::ffn_expert_device_view<float>;
  const dexpert e{dmatrix<const float>(storage, d_ff, d), dmatrix<const float>(storage + 64, d_ff, d),
                  dmatrix<const float>(storage + 128, d, d_ff), {}, {}, {}};
  const dexpert wider{dmatrix<const float>(storage, 5, d), dmatrix<const float>(storage + 64, 5, d),
                      dmatrix<const float>(storage + 128, d, 5), {}, {}, {}};
  dexpert biased = e;
  biased.b1 = dvector<const float>(storage + 256, d_ff);
  const dmatrix<const float> none, x(storage + 512, 8, d), one_token(storage + 512, 1, d);
  const dvector<index_t> p(ids, d_ff), short_p(ids, d_ff - 1);
  const align::align_params weights = with_objective(align::align_objective::weights),
                            correlation = with_objective(align::align_objective::correlation);
  CHECK_THROWS_WITH_AS(align::align_experts<float>(ctx, weights, e, wider, none, p),
                       "align_experts: expert must have the reference's shape (d_ff 4, d 3, gated, the same biases), "
                       "got d_ff 5, d 3, gated",
                       moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(align::align_experts<float>(ctx, weights, e, biased, none, p),
                       "align_experts: expert must have the reference's shape (d_ff 4, d 3, gated, the same biases), "
                       "got d_ff 4, d 3, gated",
                       moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(align::align_experts<float>(ctx, weights, e, e, none, short_p),
                       "align_experts: permutation must have 4 entries (one per neuron), got 3", moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(align::align_experts<float>(ctx, correlation, e, e, one_token, p),
                       "align_experts: x must be tokens x d with at least 2 tokens and d = 3 for the correlation "
                       "objective, got 1 x 3",
                       moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(align::align_experts<float>(ctx, correlation, e, e, dmatrix<const float>(storage + 512, 8, 2), p),
                       "align_experts: x must be tokens x d with at least 2 tokens and d = 3 for the correlation "
                       "objective, got 8 x 2",
                       moecomp::invalid_argument);
  // A caller's workspace too small is refused only after the size query (CUB's), which needs a device: not here.

  moecomp::moe::ffn_expert_stack_device_view<float> s;
  s.w1 = moecomp::matrix_stack_view<const float, moecomp::device_memory>(storage, 2, d_ff, d, d, d_ff * d);
  s.w3 = moecomp::matrix_stack_view<const float, moecomp::device_memory>(storage + 64, 2, d_ff, d, d, d_ff * d);
  s.w2 = moecomp::matrix_stack_view<const float, moecomp::device_memory>(storage + 128, 2, d, d_ff, d_ff, d * d_ff);
  const dmatrix<index_t> perms(ids, 2, d_ff);
  CHECK_THROWS_WITH_AS(align::align_stack<float>(ctx, weights, s, 2, none, perms),
                       "align_stack: reference must be an expert index in [0, 2), got 2", moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(align::align_stack<float>(ctx, weights, s, 0, none, dmatrix<index_t>(ids, 3, d_ff)),
                       "align_stack: permutations must be 2 x 4 (experts x d_ff), got 3 x 4", moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(align::align_stack<float>(ctx, correlation, s, 0, one_token, perms),
                       "align_stack: x must be tokens x d with at least 2 tokens and d = 3 for the correlation "
                       "objective, got 1 x 3",
                       moecomp::invalid_argument);
  auto short_stack = s;
  short_stack.w2 = moecomp::matrix_stack_view<const float, moecomp::device_memory>(storage + 128, 1, d, d_ff, d_ff, d * d_ff);
  CHECK_THROWS_WITH_AS(align::align_stack<float>(ctx, weights, short_stack, 0, none, perms),
                       "align_stack: w2 must hold 2 experts like w1, got 1", moecomp::invalid_argument);
  auto biased_stack = s;
  biased_stack.b1 = dmatrix<const float>(storage + 256, 1, d_ff);
  CHECK_THROWS_WITH_AS(align::align_stack<float>(ctx, weights, biased_stack, 0, none, perms),
                       "align_stack: b1 must have one row per expert (2), got 1", moecomp::invalid_argument);
  (void)x;
}

TEST_CASE_TEMPLATE("device align_experts recovers planted neuron permutations as the host does", W, float,
                   moecomp::bfloat16, moecomp::half, double) {
  using A = moecomp::accumulator_t<W>;
  device_fixture fx;
  const auto ctx = fx.context();
  const planted_stack<W> h(2, 16, 40, 0, 31);
  const device_stack<W> dev(ctx, h);
  constexpr index_t tokens = 96;
  const std::vector<A> hx = tokens_of<A>(tokens, h.d, 32);
  const auto dx = to_device(ctx, hx, tokens, h.d, h.d + 3);  // row-strided tokens
  const auto hs = h.host();
  moecomp::device_buffer<index_t> dp(ctx, h.d_ff);
  for (const auto objective : all_objectives) {
    CAPTURE(align::to_string(objective));
    const align::align_params params = with_objective(objective);
    const bool correlation = objective == align::align_objective::correlation;
    const moecomp::matrix_view<const A> hxv = correlation ? moecomp::make_matrix_view<const A>(hx.data(), tokens, h.d)
                                                          : moecomp::matrix_view<const A>();
    const dmatrix<const A> dxv = correlation ? dx.view(tokens, h.d, h.d + 3) : dmatrix<const A>();
    std::vector<index_t> host_p(static_cast<std::size_t>(h.d_ff), -1);
    const align::align_result host = moecomp_test::host_align_experts<W>(params, hs.expert(0), hs.expert(1), hxv,
                                                                        moecomp::make_vector_view(host_p.data(), h.d_ff));
    REQUIRE(host.ok());
    REQUIRE(host_p == h.planted[1]);
    const align::align_result r =
        align::align_experts<W>(ctx, params, dev.view.expert(0), dev.view.expert(1), dxv, dp.view());
    CHECK(r.ok());
    CHECK(to_host(ctx, dp) == h.planted[1]);
    CHECK(r.cost == doctest::Approx(host.cost).epsilon(cost_tolerance<A>(objective)));
    // A caller's workspace: the same answer, bit for bit; one byte short is refused.
    const std::size_t bytes = align::align_experts_workspace_size<W>(params, dev.view.expert(0), correlation ? tokens : 0);
    moecomp::device_buffer<std::byte> w(ctx, static_cast<index_t>(bytes));
    const align::align_result again =
        align::align_experts<W>(ctx, params, dev.view.expert(0), dev.view.expert(1), dxv, dp.view(), w.view());
    CHECK(to_host(ctx, dp) == h.planted[1]);
    CHECK(std::memcmp(&again.cost, &r.cost, sizeof(double)) == 0);
    CHECK_THROWS_WITH_AS(align::align_experts<W>(ctx, params, dev.view.expert(0), dev.view.expert(1), dxv, dp.view(),
                                                 w.view().subview(0, w.size() - 1)),
                         doctest::Contains("align_experts: workspace must have at least"), moecomp::invalid_argument);
  }
}

TEST_CASE_TEMPLATE("device align_stack aligns every expert to the reference as the host does", W, float,
                   moecomp::bfloat16, moecomp::half) {
  using A = moecomp::accumulator_t<W>;
  device_fixture fx;
  const auto ctx = fx.context();
  const planted_stack<W> h(4, 12, 36, 2, 41);
  const device_stack<W> dev(ctx, h);
  constexpr index_t tokens = 80;
  const std::vector<A> hx = tokens_of<A>(tokens, h.d, 42);
  const auto dx = to_device(ctx, hx, tokens, h.d, h.d);
  const auto hs = h.host();
  const index_t e = h.experts, d_ff = h.d_ff, ld = d_ff + 2;  // row-strided permutations
  moecomp::device_buffer<index_t> dperm(ctx, e * ld);
  std::vector<index_t> expected;
  for (const auto& q : h.planted) expected.insert(expected.end(), q.begin(), q.end());
  for (const auto objective : all_objectives) {
    CAPTURE(align::to_string(objective));
    const align::align_params params = with_objective(objective);
    const bool correlation = objective == align::align_objective::correlation;
    const moecomp::matrix_view<const A> hxv = correlation ? moecomp::make_matrix_view<const A>(hx.data(), tokens, h.d)
                                                          : moecomp::matrix_view<const A>();
    const dmatrix<const A> dxv = correlation ? dx.view(tokens, h.d) : dmatrix<const A>();
    std::vector<index_t> host_perm(static_cast<std::size_t>(e * d_ff), -1);
    const align::align_result host = moecomp_test::host_align_stack<W>(
        params, hs, h.reference, hxv, moecomp::make_matrix_view(host_perm.data(), e, d_ff));
    REQUIRE(host.ok());
    REQUIRE(host_perm == expected);
    const auto read = [&] {
      std::vector<index_t> got(static_cast<std::size_t>(e * d_ff));
      moecomp::copy_to_host(ctx, dperm.view(e, d_ff, ld).as_const(), moecomp::make_matrix_view(got.data(), e, d_ff));
      fx.sync();
      return got;
    };
    const align::align_result r = align::align_stack<W>(ctx, params, dev.view, h.reference, dxv, dperm.view(e, d_ff, ld));
    CHECK(r.ok());
    CHECK(read() == expected);
    CHECK(r.cost == doctest::Approx(host.cost).epsilon(cost_tolerance<A>(objective)));
    const std::size_t bytes = align::align_stack_workspace_size<W>(params, dev.view, correlation ? tokens : 0);
    moecomp::device_buffer<std::byte> w(ctx, static_cast<index_t>(bytes));
    const align::align_result again =
        align::align_stack<W>(ctx, params, dev.view, h.reference, dxv, dperm.view(e, d_ff, ld), w.view());
    CHECK(read() == expected);
    CHECK(std::memcmp(&again.cost, &r.cost, sizeof(double)) == 0);
  }
}
