// Device CKA against the host's (host_reference.cpp): one pair on both routes, linear and RBF (median
// heuristic and explicit sigma), biased and debiased; the all-pairs matrix; undefined inputs reported the
// same way; bit-identical repeated runs; caller workspaces. Argument checks run before any device work and
// pass without a GPU; the rest runs under `ctest -L cuda`.
#include <doctest/doctest.h>
#include <moecomp/cuda/moecomp.cuh>

#include "device_test_support.cuh"
#include "host_reference.hpp"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace {

using moecomp::index_t;
namespace sim = moecomp::similarity;
using moecomp_test::device_fixture;

template <class T>
moecomp::host_matrix<T> normal_matrix(index_t rows, index_t cols, std::uint64_t seed, double offset = 0) {
  moecomp::host_matrix<T> m(rows, cols);
  moecomp::random_generator rng(seed);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) m(i, j) = static_cast<T>(offset + rng.normal<double>());
  return m;
}

template <class T>
moecomp::device_buffer<T> upload(const moecomp::cuda_context& ctx, const moecomp::host_matrix<T>& m, index_t ld) {
  moecomp::device_buffer<T> b(ctx, m.rows() * ld);
  moecomp::copy_to_device(ctx, m.const_view(), b.view(m.rows(), m.cols(), ld));
  return b;
}

template <class T>
constexpr double tolerance() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-11;
}

sim::cka_params params_of(sim::cka_kernel kernel, bool unbiased, sim::cka_route route, double sigma = 0) {
  sim::cka_params p;
  p.kernel = kernel;
  p.unbiased = unbiased;
  p.route = route;
  p.sigma = sigma;
  return p;
}

}  // namespace

TEST_CASE("device cka: argument checks run before any device work") {
  const moecomp::cuda_context ctx(nullptr);  // never used: the checks come first
  float storage[64] = {0};
  const auto x = moecomp::matrix_view<const float, moecomp::device_memory>(storage, 10, 3);
  const auto y = moecomp::matrix_view<const float, moecomp::device_memory>(storage, 9, 3);
  CHECK_THROWS_WITH_AS(sim::cka<float>(ctx, sim::cka_params{}, x, y),
                       "cka: x and y must have the same number of samples (rows), got 10 and 9",
                       moecomp::invalid_argument);
  double out_storage[6] = {0};
  CHECK_THROWS_WITH_AS(sim::cka_matrix<float>(ctx, sim::cka_params{}, moecomp::split_rows(x, 2),
                                              moecomp::make_matrix_view(out_storage, 2, 3)),
                       "cka_matrix: out must be 2 x 2 (experts x experts), got 2 x 3", moecomp::invalid_argument);
}

TEST_CASE_TEMPLATE("device cka equals the host's for every kernel, route and estimator", T, float, double) {
  device_fixture fixture;
  const moecomp::cuda_context ctx(fixture.stream, fixture.handle);
  const index_t n = 300;
  const auto x = normal_matrix<T>(n, 20, 1, 1e3);  // an offset: the centring is exercised
  const auto y = normal_matrix<T>(n, 35, 2);
  const auto dx = upload(ctx, x, 24);
  const auto dy = upload(ctx, y, 35);
  for (auto kernel : {sim::cka_kernel::linear, sim::cka_kernel::rbf})
    for (bool unbiased : {false, true})
      for (auto route : {sim::cka_route::feature, sim::cka_route::gram})
        for (double sigma : {0.0, 7.0}) {
          if (kernel == sim::cka_kernel::rbf ? route == sim::cka_route::feature : sigma > 0) continue;
          const auto params = params_of(kernel, unbiased, route, sigma);
          const auto host = moecomp_test::host_cka<T>(params, x.const_view(), y.const_view());
          const auto device = sim::cka<T>(ctx, params, dx.view(n, 20, 24).as_const(), dy.view(n, 35).as_const());
          CHECK(device.status == host.status);
          CHECK(device.route == host.route);
          CHECK(std::abs(device.cka - host.cka) <= tolerance<T>());
          CHECK(std::abs(device.hsic_xy - host.hsic_xy) <= tolerance<T>() * std::abs(host.hsic_xy));
          CHECK(std::abs(device.sigma_x - host.sigma_x) <= tolerance<T>() * host.sigma_x);
        }
}

TEST_CASE_TEMPLATE("device cka_matrix equals the host's, repeats bit for bit, takes a caller workspace", T, float,
                   double) {
  device_fixture fixture;
  const moecomp::cuda_context ctx(fixture.stream, fixture.handle);
  const index_t e = 4, n = 260, d = 16;
  const auto stacked = normal_matrix<T>(e * n, d, 3);
  const auto device_stack = upload(ctx, stacked, d);
  // both routes: the gram route's Grams come from one strided-batched GEMM (the inputs share a width)
  for (auto kernel : {sim::cka_kernel::linear, sim::cka_kernel::rbf})
    for (bool unbiased : {false, true})
      for (auto route : {sim::cka_route::feature, sim::cka_route::gram}) {
        if (kernel == sim::cka_kernel::rbf && route == sim::cka_route::feature) continue;
        const auto params = params_of(kernel, unbiased, route);
        moecomp::host_matrix<double> host(e, e), first(e, e), second(e, e);
        (void)moecomp_test::host_cka_matrix<T>(params, moecomp::split_rows(stacked.const_view(), e), host.view());
        const auto stack = moecomp::split_rows(device_stack.view(e * n, d).as_const(), e);
        const auto r = sim::cka_matrix<T>(ctx, params, stack, first.view());
        CHECK(r.ok());
        moecomp::device_buffer<std::byte> ws(ctx, static_cast<index_t>(sim::cka_matrix_workspace_size<T>(params, e, n, d)));
        (void)sim::cka_matrix<T>(ctx, params, stack, second.view(), ws.view());
        for (index_t a = 0; a < e; ++a)
          for (index_t b = 0; b < e; ++b) {
            CHECK(std::abs(first(a, b) - host(a, b)) <= tolerance<T>());
            CHECK(second(a, b) == first(a, b));
          }
      }
}

TEST_CASE("device cka reports a constant input as the host does") {
  device_fixture fixture;
  const moecomp::cuda_context ctx(fixture.stream, fixture.handle);
  moecomp::host_matrix<double> constant(20, 2);
  for (index_t i = 0; i < 20; ++i) constant(i, 0) = constant(i, 1) = 4.0;
  const auto y = normal_matrix<double>(20, 3, 4);
  const auto dc = upload(ctx, constant, 2);
  const auto dy = upload(ctx, y, 3);
  const auto r = sim::cka<double>(ctx, sim::cka_params{}, dc.view(20, 2).as_const(), dy.view(20, 3).as_const());
  CHECK(r.status == sim::cka_status::constant_input);
  CHECK(r.cka == 0.0);
}
