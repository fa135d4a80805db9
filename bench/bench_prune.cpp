// Magnitude pruning benchmarks at the context's threads: the matrix scope at 0.75 (ResMoE's amount) on
// 4096 x 12288 float32 (one Qwen/Mixtral-scale slice) and bfloat16, and the row and 2:4 scopes on the same
// shape. Counter bytes/s: the matrix read twice (selection, counting) and written once. The side-by-side
// against torch: bench/peers/prune_vs_torch.py.
#include <benchmark/benchmark.h>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/sparse/prune.hpp>

#include <vector>

namespace {

using moecomp::index_t;
namespace sparse = moecomp::sparse;

template <class T, sparse::prune_scope Scope>
void prune(benchmark::State& state) {
  const index_t rows = state.range(0), cols = state.range(1);
  moecomp::random_generator rng(19);
  std::vector<T> w(static_cast<std::size_t>(rows * cols)), out(w.size());
  for (auto& x : w) x = moecomp::convert_to<T>(rng.normal<double>());
  sparse::prune_params p;
  p.scope = Scope;
  if (Scope != sparse::prune_scope::n_of_m) p.sparsity = 0.75;
  const moecomp::host_context ctx;
  for (auto _ : state) {
    const auto r = sparse::prune_magnitude<T>(ctx, p, moecomp::matrix_view<const T>(w.data(), rows, cols),
                                              moecomp::matrix_view<T>(out.data(), rows, cols));
    benchmark::DoNotOptimize(r.kept);
  }
  state.counters["bytes/s"] = benchmark::Counter(3.0 * double(rows * cols) * sizeof(T),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK_TEMPLATE(prune, float, sparse::prune_scope::matrix)->Args({4096, 12288})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(prune, moecomp::bfloat16, sparse::prune_scope::matrix)->Args({4096, 12288})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(prune, float, sparse::prune_scope::row)->Args({4096, 12288})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(prune, float, sparse::prune_scope::n_of_m)->Args({4096, 12288})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
