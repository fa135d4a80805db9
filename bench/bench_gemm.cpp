// moecomp's GEMM (moecomp::matmul_abt, <moecomp/core/gemm.hpp>) at the shapes of its GEMM-bound algorithms,
// through the provider this binary was built with (bench_gemm: the tool's, bench_gemm_eigen, bench_gemm_cblas):
// k-means' assignment (8192 points x 64 centres x 512 dimensions), Qwen-size alignment (1408 x 1408 x 6144),
// fix-dom's correlations (1408 x 1408 x 8192 tokens) and, in bfloat16, an expert's up projection of a
// 512-token batch (512 x 1408 x 2048). Counter GFLOP/s: 2 n m d per call; compare it with bench_cpu_peak's
// float32 FMA and bfloat16 dot-product peaks of the same session (bench/RESULTS.md, "GEMM providers").
#include <moecomp/core/gemm.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/random.hpp>

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

namespace {

using moecomp::index_t;

template <class T>
void gemm(benchmark::State& state) {
  const index_t n = state.range(0), m = state.range(1), d = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  moecomp::random_generator rng(7);
  std::vector<T> a(static_cast<std::size_t>(n * d)), b(static_cast<std::size_t>(m * d));
  for (auto& v : a) v = moecomp::convert_to<T>(rng.normal<double>());
  for (auto& v : b) v = moecomp::convert_to<T>(rng.normal<double>());
  using Out = moecomp::accumulator_t<T>;
  moecomp::host_matrix<Out> out(n, m);
  const moecomp::host_context ctx(threads);
  for (auto _ : state) {
    moecomp::matmul_abt(ctx, Out(1), moecomp::matrix_view<const T>(a.data(), n, d),
                        moecomp::matrix_view<const T>(b.data(), m, d), out.view());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * double(n) * double(m) * double(d),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(moecomp::gemm_provider()) + ", " + std::to_string(threads) + " thread(s)");
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "m", "d", "threads"});
  for (long threads : {1, 2}) {
    b->Args({8192, 64, 512, threads});      // k-means assignment
    b->Args({1408, 1408, 6144, threads});   // alignment costs
    b->Args({1408, 1408, 8192, threads});   // fix-dom correlations
  }
}

void bf16_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "m", "d", "threads"});
  for (long threads : {1, 2}) {
    b->Args({512, 1408, 2048, threads});    // an expert's up projection, 512 tokens
    b->Args({1408, 1408, 6144, threads});   // alignment costs on bfloat16 design rows
  }
}

}  // namespace

BENCHMARK_TEMPLATE(gemm, float)->Apply(shapes)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(gemm, moecomp::bfloat16)->Apply(bf16_shapes)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
