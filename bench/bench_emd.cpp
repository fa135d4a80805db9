// Exact optimal transport (network simplex) benchmarks: random masses, squared Euclidean cost between random
// 2-D points (the workload of bench/peers/emd_vs_pot.py), square and rectangular. The "pivots" counter is the
// simplex iteration count. Side-by-side figures against POT: bench/peers/emd_vs_pot.py.
#include <benchmark/benchmark.h>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/ot/emd.hpp>

namespace {

using moecomp::index_t;

struct workload {
  moecomp::host_vector<double> a, b;
  moecomp::host_matrix<double> cost;
};

workload make_workload(index_t n, index_t m) {
  moecomp::random_generator rng(17);
  moecomp::host_matrix<double> x(n, 2), y(m, 2);
  rng.fill_uniform(x.view());
  rng.fill_uniform(y.view());
  workload w{moecomp::host_vector<double>(n), moecomp::host_vector<double>(m), moecomp::host_matrix<double>(n, m)};
  double sa = 0, sb = 0;
  for (index_t i = 0; i < n; ++i) sa += (w.a[i] = rng.uniform<double>(0.0, 1.0));
  for (index_t j = 0; j < m; ++j) sb += (w.b[j] = rng.uniform<double>(0.0, 1.0));
  for (index_t i = 0; i < n; ++i) w.a[i] /= sa;
  for (index_t j = 0; j < m; ++j) w.b[j] /= sb;
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < m; ++j) {
      const double dx = x(i, 0) - y(j, 0), dy = x(i, 1) - y(j, 1);
      w.cost(i, j) = dx * dx + dy * dy;
    }
  return w;
}

void dense_plan(benchmark::State& state) {
  const index_t n = state.range(0), m = state.range(1);
  const workload w = make_workload(n, m);
  moecomp::host_matrix<double> plan(n, m);
  const moecomp::host_context ctx(1);
  moecomp::ot::emd_result r;
  for (auto _ : state) {
    r = moecomp::ot::emd(ctx, moecomp::ot::emd_params{}, w.a.const_view(), w.b.const_view(), w.cost.const_view(),
                         plan.view());
    benchmark::DoNotOptimize(plan.data());
  }
  state.counters["pivots"] = static_cast<double>(r.iterations);
}

void sparse_plan(benchmark::State& state) {
  const index_t n = state.range(0), m = state.range(1);
  const workload w = make_workload(n, m);
  moecomp::host_vector<index_t> rows(n + m - 1), cols(n + m - 1);
  moecomp::host_vector<double> mass(n + m - 1);
  const moecomp::host_context ctx(1);
  moecomp::ot::emd_result r;
  for (auto _ : state) {
    r = moecomp::ot::emd_sparse(ctx, moecomp::ot::emd_params{}, w.a.const_view(), w.b.const_view(),
                                w.cost.const_view(), rows.view(), cols.view(), mass.view());
    benchmark::DoNotOptimize(mass.data());
  }
  state.counters["pivots"] = static_cast<double>(r.iterations);
}

}  // namespace

BENCHMARK(dense_plan)->Args({200, 200})->Args({1000, 1000})->Args({1000, 500})->Args({200, 1000})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(sparse_plan)->Args({1000, 1000})->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
