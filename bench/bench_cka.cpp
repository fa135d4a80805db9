// CKA benchmarks at the context's threads:
//   cka_pair/<route>/n/d: one linear CKA of two n x d float32 inputs (computed in double), feature and gram
//       routes (the route the shape favours is the faster one);
//   cka_pair_rbf/n/d: one RBF CKA (median heuristic), gram route;
//   cka_matrix/E/n/d: the all-pairs linear CKA matrix of E float32 experts (issue 13's E = 32, n = d = 1024).
//       Counter flops/s: the executed GEMM flops (upper-triangle Gram tiles and their products).
// Side-by-side against numpy: bench/peers/cka_matrix_vs_numpy.py.
#include <benchmark/benchmark.h>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/similarity/cka.hpp>

namespace {

using moecomp::index_t;
namespace sim = moecomp::similarity;

template <sim::cka_route Route>
void cka_pair(benchmark::State& state) {
  const index_t n = state.range(0), d = state.range(1);
  moecomp::host_matrix<float> x(n, d), y(n, d);
  moecomp::random_generator rng(14);
  rng.fill_normal(x.view());
  rng.fill_normal(y.view());
  sim::cka_params p;
  p.route = Route;
  const moecomp::host_context ctx;
  for (auto _ : state) benchmark::DoNotOptimize(sim::cka<float>(ctx, p, x.const_view(), y.const_view()).cka);
}

void cka_pair_rbf(benchmark::State& state) {
  const index_t n = state.range(0), d = state.range(1);
  moecomp::host_matrix<float> x(n, d), y(n, d);
  moecomp::random_generator rng(15);
  rng.fill_normal(x.view());
  rng.fill_normal(y.view());
  sim::cka_params p;
  p.kernel = sim::cka_kernel::rbf;
  const moecomp::host_context ctx;
  for (auto _ : state) benchmark::DoNotOptimize(sim::cka<float>(ctx, p, x.const_view(), y.const_view()).cka);
}

void cka_matrix(benchmark::State& state) {
  const index_t e = state.range(0), n = state.range(1), d = state.range(2);
  moecomp::host_matrix<float> f(e * n, d);
  moecomp::random_generator rng(16);
  rng.fill_normal(f.view());
  moecomp::host_matrix<double> s(e, e);
  const moecomp::host_context ctx;
  for (auto _ : state)
    benchmark::DoNotOptimize(sim::cka_matrix<float>(ctx, sim::cka_params{}, moecomp::split_rows(f.const_view(), e),
                                                    s.view()).undefined_pairs);
  const double tiles = static_cast<double>((n + 255) / 256);
  const double fraction = tiles * (tiles + 1) / 2 / (tiles * tiles);
  const double flops = fraction * (double(e) * 2 * double(n) * double(n) * double(d) + 2 * double(e) * double(e) * double(n) * double(n));
  state.counters["flops/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK_TEMPLATE(cka_pair, sim::cka_route::feature)->Args({2048, 256})->Args({1024, 1024})->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(cka_pair, sim::cka_route::gram)->Args({2048, 256})->Args({1024, 1024})->Unit(benchmark::kMillisecond);
BENCHMARK(cka_pair_rbf)->Args({2048, 256})->Unit(benchmark::kMillisecond);
BENCHMARK(cka_matrix)->Args({32, 1024, 1024})->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
