// ResMoE's SVD ablation (--residual svd): sparse::truncated_svd of one design residual at ResMoE's parameter
// budget (keep 0.25, svd_budget_rank), at the embedded model's design shape and two larger ones (d_ff x 3d:
// 64 x 192, 256 x 768, 512 x 1536). One-sided Jacobi in double on the side with fewer columns, serial
// (docs/sparse.md). The side-by-side against numpy's LAPACK (gesdd) is bench/peers/svd_vs_numpy.py, which runs
// this binary.
#include <benchmark/benchmark.h>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/sparse/low_rank.hpp>

#include <vector>

namespace {

using moecomp::index_t;
namespace sparse = moecomp::sparse;

void truncated_svd(benchmark::State& state) {
  const index_t rows = state.range(0), cols = state.range(1);
  const index_t rank = sparse::svd_budget_rank(rows, cols, 0.25);
  moecomp::random_generator rng(5);
  moecomp::host_matrix<float> a(rows, cols);
  moecomp::host_matrix<double> u(rows, rank), v(rank, cols);  // the factors are double
  for (index_t i = 0; i < rows * cols; ++i) a.data()[i] = 0.01f * rng.normal<float>();
  const moecomp::host_context ctx;
  double top = 0;
  for (auto _ : state) {
    const std::vector<double> sigma = sparse::truncated_svd<float>(ctx, a.const_view(), rank, u.view(), v.view());
    top = sigma.front();
    benchmark::DoNotOptimize(u.data());
  }
  state.counters["rank"] = static_cast<double>(rank);
  state.counters["sigma_1"] = top;
}

}  // namespace

BENCHMARK(truncated_svd)->Args({64, 192})->Args({256, 768})->Args({512, 1536})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
