// Expert-graph partition benchmarks (Eq. 5 of the CKA expert-merging paper): the exact subset programme at
// N = 12, 14, 16 with r = 4 (O(r 3^N)), and the heuristic at N = 64, r = 16 (10 starts, 20 kicks each), at the
// context's threads. Counters: the objective (Eq. 5), its lower bound, and W with its bound.
#include <benchmark/benchmark.h>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/similarity/partition.hpp>

#include <cstdint>

namespace {

using moecomp::index_t;
namespace similarity = moecomp::similarity;

/// Symmetric uniform distances in [0, 1) with a zero diagonal, as 1 - CKA would give.
moecomp::host_matrix<double> distances(index_t n, std::uint64_t seed) {
  moecomp::host_matrix<double> d(n, n);
  moecomp::random_generator rng(seed);
  for (index_t i = 0; i < n; ++i) {
    d(i, i) = 0;
    for (index_t j = i + 1; j < n; ++j) d(i, j) = d(j, i) = rng.uniform<double>();
  }
  return d;
}

/// args: n, r, method (0 exact, 1 heuristic).
void partition(benchmark::State& state) {
  const index_t n = state.range(0);
  similarity::partition_params p;
  p.groups = state.range(1);
  p.method = state.range(2) == 0 ? similarity::partition_method::exact : similarity::partition_method::heuristic;
  const auto d = distances(n, 17);
  moecomp::host_vector<std::int64_t> labels(n);
  const moecomp::host_context ctx;
  similarity::partition_result r;
  for (auto _ : state) {
    r = similarity::partition_experts<double>(ctx, p, d.const_view(), labels.view());
    benchmark::DoNotOptimize(r.objective);
  }
  state.counters["objective"] = r.objective;
  state.counters["lower_bound"] = r.lower_bound;
  state.counters["W"] = r.within;
  state.counters["W_bound"] = r.within_lower_bound;
  state.counters["optimal"] = r.optimal ? 1 : 0;
}

}  // namespace

BENCHMARK(partition)
    ->ArgNames({"n", "r", "heuristic"})
    ->Args({12, 4, 0})
    ->Args({14, 4, 0})
    ->Args({16, 4, 0})
    ->Args({16, 4, 1})
    ->Args({64, 16, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_MAIN();
