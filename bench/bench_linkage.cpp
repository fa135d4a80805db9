// Linkage benchmarks: points -> Z (distances + merge loop) and condensed -> Z (merge loop alone), for the
// methods HC-SMoE compares and ward. Side-by-side figures against scipy and fastcluster:
// bench/peers/linkage_vs_fastcluster.py.
#include <benchmark/benchmark.h>
#include <moecomp/moecomp.hpp>

namespace {

using moecomp::index_t;
namespace cluster = moecomp::cluster;

moecomp::host_matrix<double> points(index_t n, index_t d) {
  moecomp::host_matrix<double> x(n, d);
  moecomp::random_generator rng(7);
  rng.fill_normal(x.view());
  return x;
}

/// Points -> Z, through linkage() (O(n^2) memory) or linkage_low_memory() (O(n d)).
void points_to_z(benchmark::State& state, cluster::linkage_method method, bool low_memory) {
  const index_t n = state.range(0), d = state.range(1);
  const auto x = points(n, d);
  moecomp::host_matrix<double> z(n - 1, 4);
  cluster::linkage_params params;
  params.method = method;
  const moecomp::host_context ctx;
  for (auto _ : state) {
    if (low_memory) {
      cluster::linkage_low_memory(ctx, params, x.view(), z.view());
    } else {
      cluster::linkage(ctx, params, x.view(), z.view());
    }
    benchmark::DoNotOptimize(z.data());
  }
}
void from_points(benchmark::State& state, cluster::linkage_method method) { points_to_z(state, method, false); }
void low_memory(benchmark::State& state, cluster::linkage_method method) { points_to_z(state, method, true); }

void from_condensed(benchmark::State& state, cluster::linkage_method method) {
  const index_t n = state.range(0);
  const auto x = points(n, 16);
  moecomp::host_vector<double> y(moecomp::distance::condensed_size(n));
  moecomp::distance::pairwise_distances_condensed(moecomp::host_context{}, {}, x.view(), y.view());
  moecomp::host_matrix<double> z(n - 1, 4);
  cluster::linkage_params params;
  params.method = method;
  const moecomp::host_context ctx;
  for (auto _ : state) {
    cluster::linkage_condensed(ctx, params, y.const_view(), z.view());
    benchmark::DoNotOptimize(z.data());
  }
}

using cluster::linkage_method;
BENCHMARK_CAPTURE(from_points, average, linkage_method::average)->Args({4000, 64})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(from_points, single, linkage_method::single)->Args({4000, 64})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(from_points, complete, linkage_method::complete)->Args({4000, 64})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(from_points, ward, linkage_method::ward)->Args({4000, 64})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(from_condensed, average, linkage_method::average)->Arg(2000)->Arg(8000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(from_condensed, complete, linkage_method::complete)->Arg(8000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(from_condensed, ward, linkage_method::ward)->Arg(8000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(from_condensed, single, linkage_method::single)->Arg(8000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(from_condensed, centroid, linkage_method::centroid)->Arg(8000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(low_memory, ward, linkage_method::ward)->Args({4000, 64})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(low_memory, single, linkage_method::single)->Args({4000, 64})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
