// Device log-domain Sinkhorn (batched and single) against a direct double implementation of POT's
// sinkhorn_log written here and, where it exists, the host library's sinkhorn_batched (host_reference.cpp):
// plans, costs, iteration counts, statuses; determinism; the device-results overload; argument checks
// raised before any device work (those pass without a GPU). They need a CUDA device otherwise and run
// under `ctest -L cuda`.
#include <doctest/doctest.h>
#include <moecomp/cuda/moecomp.cuh>

#include "device_test_support.cuh"
#include "host_reference.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using moecomp::index_t;
namespace ot = moecomp::ot;

using moecomp_test::require_device;
using moecomp_test::stream_fixture;

/// batch problems: uniform [0, 1) costs, random positive weights normalised to 1 (in double, then cast).
template <class T>
struct batch_data {
  index_t batch, n, m;
  moecomp::host_matrix<T> a, b, costs;
  batch_data(index_t batch_, index_t n_, index_t m_, std::uint64_t seed)
      : batch(batch_), n(n_), m(m_), a(batch_, n_), b(batch_, m_), costs(batch_ * n_, m_) {
    moecomp::random_generator rng(seed);
    for (index_t p = 0; p < batch; ++p) {
      double sa = 0, sb = 0;
      std::vector<double> wa(static_cast<std::size_t>(n)), wb(static_cast<std::size_t>(m));
      for (auto& w : wa) sa += (w = 0.5 + rng.uniform<double>());
      for (auto& w : wb) sb += (w = 0.5 + rng.uniform<double>());
      for (index_t i = 0; i < n; ++i) a(p, i) = static_cast<T>(wa[static_cast<std::size_t>(i)] / sa);
      for (index_t j = 0; j < m; ++j) b(p, j) = static_cast<T>(wb[static_cast<std::size_t>(j)] / sb);
    }
    for (index_t r = 0; r < batch * n; ++r)
      for (index_t j = 0; j < m; ++j) costs(r, j) = static_cast<T>(rng.uniform<double>());
  }
};

double log_sum_exp(const std::vector<double>& x) {
  double mx = -INFINITY;
  for (double v : x) mx = std::max(mx, v);
  if (mx == -INFINITY) return mx;
  double s = 0;
  for (double v : x) s += std::exp(v - mx);
  return mx + std::log(s);
}

/// POT's sinkhorn_log in double for problem p: plan (n x m, row-major) and result.
template <class T>
ot::sinkhorn_result reference_log(const batch_data<T>& data, index_t p, const ot::sinkhorn_params& params,
                                  std::vector<double>& plan) {
  const index_t n = data.n, m = data.m;
  std::vector<double> u(static_cast<std::size_t>(n), 0.0), v(static_cast<std::size_t>(m), 0.0), t;
  const auto c = [&](index_t i, index_t j) { return static_cast<double>(data.costs(p * n + i, j)) / params.reg; };
  ot::sinkhorn_result r;
  r.status = moecomp::status::iteration_limit;
  index_t it = 0;
  for (; it < params.max_iterations; ++it) {
    for (index_t j = 0; j < m; ++j) {
      t.assign(static_cast<std::size_t>(n), 0.0);
      for (index_t i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = u[static_cast<std::size_t>(i)] - c(i, j);
      v[static_cast<std::size_t>(j)] = std::log(static_cast<double>(data.b(p, j))) - log_sum_exp(t);
    }
    for (index_t i = 0; i < n; ++i) {
      t.assign(static_cast<std::size_t>(m), 0.0);
      for (index_t j = 0; j < m; ++j) t[static_cast<std::size_t>(j)] = v[static_cast<std::size_t>(j)] - c(i, j);
      u[static_cast<std::size_t>(i)] = std::log(static_cast<double>(data.a(p, i))) - log_sum_exp(t);
    }
    if (it % ot::resolved_check_every(params) != 0) continue;
    double err = 0;
    for (index_t j = 0; j < m; ++j) {
      double s = 0;
      for (index_t i = 0; i < n; ++i)
        s += std::exp(u[static_cast<std::size_t>(i)] + v[static_cast<std::size_t>(j)] - c(i, j));
      err += (s - static_cast<double>(data.b(p, j))) * (s - static_cast<double>(data.b(p, j)));
    }
    r.criterion = std::sqrt(err);
    if (r.criterion < params.tolerance) {
      r.status = moecomp::status::ok;
      ++it;
      break;
    }
  }
  r.iterations = it;
  plan.assign(static_cast<std::size_t>(n * m), 0.0);
  r.cost = 0;
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < m; ++j) {
      const double x = std::exp(u[static_cast<std::size_t>(i)] + v[static_cast<std::size_t>(j)] - c(i, j));
      plan[static_cast<std::size_t>(i * m + j)] = x;
      r.cost += x * static_cast<double>(data.costs(p * n + i, j));
    }
  return r;
}

template <class T>
struct device_run {
  moecomp::host_matrix<T> plans;
  std::vector<ot::sinkhorn_result> results;
};

template <class T>
device_run<T> run_device(const moecomp::cuda_context& ctx, const batch_data<T>& data, const ot::sinkhorn_params& params) {
  moecomp::device_buffer<T> a(ctx, data.batch * data.n), b(ctx, data.batch * data.m),
      costs(ctx, data.batch * data.n * data.m), plans(ctx, data.batch * data.n * data.m);
  moecomp::copy_to_device(ctx, data.a.const_view(), a.view(data.batch, data.n));
  moecomp::copy_to_device(ctx, data.b.const_view(), b.view(data.batch, data.m));
  moecomp::copy_to_device(ctx, data.costs.const_view(), costs.view(data.batch * data.n, data.m));
  device_run<T> out{moecomp::host_matrix<T>(data.batch * data.n, data.m),
                    std::vector<ot::sinkhorn_result>(static_cast<std::size_t>(data.batch))};
  ot::sinkhorn_batched(ctx, params, a.view(data.batch, data.n).as_const(), b.view(data.batch, data.m).as_const(),
                       moecomp::split_rows(costs.view(data.batch * data.n, data.m).as_const(), data.batch),
                       moecomp::split_rows(plans.view(data.batch * data.n, data.m), data.batch),
                       moecomp::make_vector_view(out.results.data(), data.batch));
  moecomp::copy_to_host(ctx, plans.view(data.batch * data.n, data.m).as_const(), out.plans.view());
  REQUIRE(cudaStreamSynchronize(ctx.stream) == cudaSuccess);
  return out;
}

ot::sinkhorn_params log_params(double reg) {
  ot::sinkhorn_params p;
  p.reg = reg;
  p.method = ot::sinkhorn_method::log;
  return p;
}

}  // namespace

TEST_CASE_TEMPLATE("device batched log Sinkhorn equals POT's sinkhorn_log", T, float, double) {
  stream_fixture f;
  const moecomp::cuda_context ctx(f.stream);
  const double tol = std::is_same_v<T, double> ? 1e-6 : 1e-3;
  for (const auto& shape : std::vector<std::vector<index_t>>{{1, 1, 1}, {3, 7, 5}, {4, 40, 33}, {2, 70, 130}}) {
    const index_t batch = shape[0], n = shape[1], m = shape[2];
    CAPTURE(n);
    CAPTURE(m);
    const batch_data<T> data(batch, n, m, 17 + static_cast<std::uint64_t>(n));
    const auto params = log_params(0.05);
    const auto got = run_device(ctx, data, params);
    double worst = 0;
    for (index_t p = 0; p < batch; ++p) {
      std::vector<double> plan;
      const ot::sinkhorn_result want = reference_log(data, p, params, plan);
      const ot::sinkhorn_result& r = got.results[static_cast<std::size_t>(p)];
      CHECK(r.iterations == want.iterations);
      CHECK(r.ok() == want.ok());
      CHECK(r.status == want.status);
      CHECK(std::fabs(r.cost - want.cost) <= tol * std::fabs(want.cost) + 1e-12);
      for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < m; ++j) {
          const double w = plan[static_cast<std::size_t>(i * m + j)];
          worst = std::max(worst, std::fabs(static_cast<double>(got.plans(p * n + i, j)) - w) / (w + 1e-300));
        }
    }
    CHECK(worst <= tol);
  }
}

TEST_CASE_TEMPLATE("device batched Sinkhorn equals the host's log method", T, float, double) {
  stream_fixture f;
  const moecomp::cuda_context ctx(f.stream);
  const double tol = std::is_same_v<T, double> ? 1e-6 : 1e-3;
  const batch_data<T> data(5, 24, 31, 99);
  for (const auto method : {ot::sinkhorn_method::log, ot::sinkhorn_method::plain}) {
    auto params = log_params(0.1);
    const auto got = run_device(ctx, data, params);  // device: log domain for both
    params.method = method;
    moecomp::host_matrix<T> host_plans(data.batch * data.n, data.m);
    std::vector<ot::sinkhorn_result> host_results(static_cast<std::size_t>(data.batch));
    moecomp_test::host_sinkhorn_batched<T>(params, data.a.const_view(), data.b.const_view(), data.costs.const_view(),
                                           host_plans.view(), moecomp::make_vector_view(host_results.data(), data.batch));
    for (index_t p = 0; p < data.batch; ++p) {
      const auto& r = got.results[static_cast<std::size_t>(p)];
      const auto& h = host_results[static_cast<std::size_t>(p)];
      CHECK(r.iterations == h.iterations);
      CHECK(r.ok() == h.ok());
      CHECK(std::fabs(r.cost - h.cost) <= tol * std::fabs(h.cost));
    }
    double worst = 0;
    for (index_t r = 0; r < data.batch * data.n; ++r)
      for (index_t j = 0; j < data.m; ++j) {
        const double w = static_cast<double>(host_plans(r, j));
        worst = std::max(worst, std::fabs(static_cast<double>(got.plans(r, j)) - w) / (w + 1e-300));
      }
    CHECK(worst <= tol);
  }
}

TEST_CASE("device Sinkhorn: iteration limit, determinism, device results, single problem") {
  stream_fixture f;
  const moecomp::cuda_context ctx(f.stream);
  const batch_data<double> data(3, 16, 12, 5);
  auto params = log_params(0.01);
  params.max_iterations = 3;
  const auto limited = run_device(ctx, data, params);
  for (const auto& r : limited.results) {
    CHECK(r.status == moecomp::status::iteration_limit);
    CHECK(r.iterations == 3);
    CHECK_FALSE(r.ok());
    CHECK(r.criterion > 0);
  }

  params = log_params(0.05);
  const auto first = run_device(ctx, data, params);
  const auto second = run_device(ctx, data, params);
  bool identical = true;
  for (index_t r = 0; r < data.batch * data.n; ++r)
    for (index_t j = 0; j < data.m; ++j) identical = identical && first.plans(r, j) == second.plans(r, j);
  CHECK(identical);
  for (std::size_t p = 0; p < first.results.size(); ++p) CHECK(first.results[p].cost == second.results[p].cost);

  // results in device memory (asynchronous overload) and the single-problem overload give the same
  moecomp::device_buffer<double> a(ctx, data.batch * data.n), b(ctx, data.batch * data.m),
      costs(ctx, data.batch * data.n * data.m), plans(ctx, data.batch * data.n * data.m);
  moecomp::copy_to_device(ctx, data.a.const_view(), a.view(data.batch, data.n));
  moecomp::copy_to_device(ctx, data.b.const_view(), b.view(data.batch, data.m));
  moecomp::copy_to_device(ctx, data.costs.const_view(), costs.view(data.batch * data.n, data.m));
  moecomp::device_buffer<ot::sinkhorn_result> device_results(ctx, data.batch);
  ot::sinkhorn_batched(ctx, params, a.view(data.batch, data.n), b.view(data.batch, data.m),
                       moecomp::split_rows(costs.view(data.batch * data.n, data.m), data.batch),
                       moecomp::split_rows(plans.view(data.batch * data.n, data.m), data.batch),
                       device_results.view());
  std::vector<ot::sinkhorn_result> copied(static_cast<std::size_t>(data.batch));
  moecomp::copy_to_host(ctx, device_results.view().as_const(), moecomp::make_vector_view(copied.data(), data.batch));
  REQUIRE(cudaStreamSynchronize(f.stream) == cudaSuccess);
  for (std::size_t p = 0; p < copied.size(); ++p) {
    CHECK(copied[p].cost == first.results[p].cost);
    CHECK(copied[p].iterations == first.results[p].iterations);
  }
  const index_t p = 1;
  const auto single = ot::sinkhorn(
      ctx, params, moecomp::make_device_vector_view(a.data() + p * data.n, data.n).as_const(),
      moecomp::make_device_vector_view(b.data() + p * data.m, data.m).as_const(),
      moecomp::make_device_matrix_view(costs.data() + p * data.n * data.m, data.n, data.m).as_const(),
      moecomp::make_device_matrix_view(plans.data(), data.n, data.m));
  CHECK(single.cost == first.results[static_cast<std::size_t>(p)].cost);
  CHECK(single.iterations == first.results[static_cast<std::size_t>(p)].iterations);
}

TEST_CASE("device Sinkhorn rejects bad shapes and parameters before touching the device") {
  const moecomp::cuda_context ctx(nullptr);  // never used: the checks come first
  double* fake = reinterpret_cast<double*>(256);
  const auto a = moecomp::make_device_matrix_view<const double>(fake, 2, 3);
  const auto b = moecomp::make_device_matrix_view<const double>(fake, 2, 4);
  const auto costs = moecomp::make_device_matrix_stack_view<const double>(fake, 2, 3, 4);
  const auto plans = moecomp::make_device_matrix_stack_view<double>(fake, 2, 3, 4);
  std::vector<ot::sinkhorn_result> results(2);
  const auto rv = moecomp::make_vector_view(results.data(), 2);
  auto params = log_params(0.1);
  CHECK_THROWS_AS(ot::sinkhorn_batched(ctx, params, a, b, moecomp::make_device_matrix_stack_view<const double>(fake, 2, 5, 4),
                                       plans, rv),
                  moecomp::invalid_argument);
  CHECK_THROWS_AS(ot::sinkhorn_batched(ctx, params, a, moecomp::make_device_matrix_view<const double>(fake, 3, 4),
                                       costs, plans, rv),
                  moecomp::invalid_argument);
  CHECK_THROWS_AS(ot::sinkhorn_batched(ctx, params, a, b, costs, plans, moecomp::make_vector_view(results.data(), 1)),
                  moecomp::invalid_argument);
  params.method = ot::sinkhorn_method::stabilized;
  CHECK_THROWS_AS(ot::sinkhorn_batched(ctx, params, a, b, costs, plans, rv), moecomp::invalid_argument);
  params = log_params(0.0);
  CHECK_THROWS_AS(ot::sinkhorn_batched(ctx, params, a, b, costs, plans, rv), moecomp::invalid_argument);
  params = log_params(0.1);
  params.check_every = -1;
  CHECK_THROWS_AS(ot::sinkhorn_batched(ctx, params, a, b, costs, plans, rv), moecomp::invalid_argument);
  // a workspace that is too small
  std::byte* fake_bytes = reinterpret_cast<std::byte*>(256);
  CHECK_THROWS_AS(ot::sinkhorn_batched(ctx, log_params(0.1), a, b, costs, plans, rv,
                                       moecomp::make_device_vector_view(fake_bytes, 16)),
                  moecomp::invalid_argument);
}
