// Sinkhorn and the fixed-support barycenter: each method at n = m = 500 and 2000 (reg 1e-2, cost = squared
// Euclidean distances of random 2-D points scaled to [0, 1], random histograms), batched problems, and the
// barycenter of 4 histograms on 1000 points. Counters: iterations of the last run.
#include <benchmark/benchmark.h>

#include <moecomp/core/random.hpp>
#include <moecomp/ot/fixed_support_barycenter.hpp>
#include <moecomp/ot/sinkhorn.hpp>

#include <algorithm>
#include <vector>

using namespace moecomp;

namespace {

struct workload {
  index_t n;
  std::vector<double> a, b, cost, plan;
};

workload make_workload(index_t n, unsigned seed) {
  random_generator gen(seed);
  workload w{n, std::vector<double>(n), std::vector<double>(n), std::vector<double>(n * n), std::vector<double>(n * n)};
  double sa = 0, sb = 0;
  for (auto& x : w.a) sa += (x = gen.uniform<double>());
  for (auto& x : w.b) sb += (x = gen.uniform<double>());
  for (auto& x : w.a) x /= sa;
  for (auto& x : w.b) x /= sb;
  std::vector<double> p(2 * n), q(2 * n);
  for (auto& x : p) x = gen.uniform<double>();
  for (auto& x : q) x = gen.uniform<double>();
  double top = 0;
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j) {
      const double dx = p[2 * i] - q[2 * j], dy = p[2 * i + 1] - q[2 * j + 1];
      top = std::max(top, w.cost[i * n + j] = dx * dx + dy * dy);
    }
  for (auto& c : w.cost) c /= top;
  return w;
}

void sinkhorn_method(benchmark::State& state, ot::sinkhorn_method method, bool float_kernel) {
  workload w = make_workload(state.range(0), 1);
  ot::sinkhorn_params params;
  params.reg = 1e-2;
  params.method = method;
  params.allow_float_kernel = float_kernel;
  ot::sinkhorn_result r;
  for (auto _ : state) {
    r = ot::sinkhorn(host_context(), params, make_vector_view(w.a.data(), w.n), make_vector_view(w.b.data(), w.n),
                     make_matrix_view(w.cost.data(), w.n, w.n), make_matrix_view(w.plan.data(), w.n, w.n));
    benchmark::DoNotOptimize(w.plan.data());
  }
  state.counters["iterations"] = static_cast<double>(r.iterations);
}

void sinkhorn_batched(benchmark::State& state) {
  const index_t batch = state.range(0), n = state.range(1);
  std::vector<double> a(batch * n), b(batch * n), costs(batch * n * n), plans(batch * n * n);
  for (index_t k = 0; k < batch; ++k) {
    workload w = make_workload(n, 10 + static_cast<unsigned>(k));
    std::copy(w.a.begin(), w.a.end(), a.begin() + k * n);
    std::copy(w.b.begin(), w.b.end(), b.begin() + k * n);
    std::copy(w.cost.begin(), w.cost.end(), costs.begin() + k * n * n);
  }
  ot::sinkhorn_params params;
  params.reg = 1e-2;
  params.method = static_cast<ot::sinkhorn_method>(state.range(2));
  std::vector<ot::sinkhorn_result> results(batch);
  for (auto _ : state) {
    ot::sinkhorn_batched(host_context(), params, make_matrix_view(a.data(), batch, n), make_matrix_view(b.data(), batch, n),
                         make_matrix_stack_view(costs.data(), batch, n, n), make_matrix_stack_view(plans.data(), batch, n, n),
                         make_vector_view(results.data(), batch));
    benchmark::DoNotOptimize(plans.data());
  }
}

void barycenter_fixed(benchmark::State& state) {
  const index_t n = state.range(0), k = 4;
  random_generator gen(3);
  std::vector<double> A(n * k), M(n * n), out(n);
  for (index_t h = 0; h < k; ++h) {
    double s = 0;
    for (index_t i = 0; i < n; ++i) s += (A[i * k + h] = gen.uniform(0.05, 1.0));
    for (index_t i = 0; i < n; ++i) A[i * k + h] /= s;
  }
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j) {
      const double d = static_cast<double>(i - j) / static_cast<double>(n - 1);
      M[i * n + j] = d * d;
    }
  ot::fixed_support_barycenter_params params;
  params.reg = 1e-2;
  params.log_domain = state.range(1) != 0;
  ot::fixed_support_barycenter_result r;
  for (auto _ : state) {
    r = ot::fixed_support_barycenter(host_context(), params, make_matrix_view(A.data(), n, k),
                                     make_matrix_view(M.data(), n, n), make_vector_view(out.data(), n));
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["iterations"] = static_cast<double>(r.iterations);
}

}  // namespace

BENCHMARK_CAPTURE(sinkhorn_method, plain, ot::sinkhorn_method::plain, true)->Arg(500)->Arg(2000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(sinkhorn_method, plain_double_kernel, ot::sinkhorn_method::plain, false)->Arg(2000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(sinkhorn_method, log, ot::sinkhorn_method::log, true)->Arg(500)->Arg(2000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(sinkhorn_method, stabilized, ot::sinkhorn_method::stabilized, true)->Arg(500)->Arg(2000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(sinkhorn_method, epsilon_scaling, ot::sinkhorn_method::epsilon_scaling, true)->Arg(500)->Unit(benchmark::kMillisecond)->UseRealTime();
// batch x n, method (0 plain, 1 log)
BENCHMARK(sinkhorn_batched)->Args({64, 100, 0})->Args({64, 100, 1})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(barycenter_fixed)->Args({1000, 0})->Args({1000, 1})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
