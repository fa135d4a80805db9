// k-means benchmarks: Lloyd iterations from fixed starts (issue 12's workload, 8192 x 512 float32, k = 64,
// and a float64 one), k-means++ initialisation alone, at the context's threads. Counter flops/s: the
// assignment's 2 n k d flops per iteration. Side-by-side figures against scikit-learn and faiss:
// bench/peers/kmeans_vs_sklearn_faiss.py.
#include <benchmark/benchmark.h>
#include <moecomp/cluster/kmeans.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <cstdint>

namespace {

using moecomp::index_t;
namespace cluster = moecomp::cluster;

/// args: n, d, k. Exactly 20 Lloyd iterations (tol 0) from k rows of the data.
template <class T>
void lloyd(benchmark::State& state) {
  const index_t n = state.range(0), d = state.range(1), k = state.range(2), iterations = 20;
  moecomp::host_matrix<T> x(n, d);
  moecomp::random_generator rng(12);
  rng.fill_normal(x.view());
  moecomp::host_matrix<T> start(k, d), centers(k, d);
  for (index_t j = 0; j < k; ++j)
    for (index_t c = 0; c < d; ++c) start(j, c) = x(j * (n / k), c);
  moecomp::host_vector<std::int64_t> labels(n);
  moecomp::host_vector<index_t> sizes(k);
  cluster::kmeans_params p;
  p.clusters = k;
  p.init = cluster::kmeans_init::given;
  p.max_iterations = iterations;
  p.tolerance = 0;
  const moecomp::host_context ctx;
  for (auto _ : state) {
    centers = start;
    const auto r = cluster::kmeans<T>(ctx, p, x.const_view(), centers.view(), labels.view(), sizes.view());
    benchmark::DoNotOptimize(r.inertia);
  }
  state.counters["flops/s"] = benchmark::Counter(2.0 * double(n) * double(k) * double(d) * double(iterations),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

/// k-means++ initialisation (one Lloyd iteration after it): args n, d, k.
void plus_plus(benchmark::State& state) {
  const index_t n = state.range(0), d = state.range(1), k = state.range(2);
  moecomp::host_matrix<float> x(n, d), centers(k, d);
  moecomp::random_generator rng(13);
  rng.fill_normal(x.view());
  moecomp::host_vector<std::int64_t> labels(n);
  moecomp::host_vector<index_t> sizes(k);
  cluster::kmeans_params p;
  p.clusters = k;
  p.max_iterations = 1;
  const moecomp::host_context ctx;
  for (auto _ : state) {
    const auto r = cluster::kmeans<float>(ctx, p, x.const_view(), centers.view(), labels.view(), sizes.view());
    benchmark::DoNotOptimize(r.inertia);
  }
}

}  // namespace

BENCHMARK_TEMPLATE(lloyd, float)->Args({8192, 512, 64})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(lloyd, double)->Args({8192, 512, 64})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(plus_plus)->Args({8192, 512, 64})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
