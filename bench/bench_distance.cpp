// Pairwise-distance benchmarks. Besides the full pdist, two GEMM figures on the same shapes:
//   gram_upper_tiles: moecomp's GEMM part alone (the tiled upper-triangular Gram, no epilogue work);
//   eigen_gemm:       Eigen's own GEMM computing the whole n x n Gram A A^T (Eigen's OpenMP threads).
// GFLOP/s counts the flops each one actually performs (2 r c d per r x c tile).
#include <benchmark/benchmark.h>
#include <moecomp/moecomp.hpp>

#include <Eigen/Core>

namespace {

using moecomp::index_t;

template <class T>
moecomp::host_matrix<T> points(index_t n, index_t d) {
  moecomp::host_matrix<T> x(n, d);
  moecomp::random_generator rng(2024);
  rng.fill_normal(x.view());
  return x;
}

template <class T>
void pdist(benchmark::State& state, moecomp::distance::metric m) {
  const index_t n = state.range(0), d = state.range(1);
  const auto x = points<T>(n, d);
  moecomp::host_vector<T> out(moecomp::distance::condensed_size(n));
  moecomp::distance::pairwise_distance_params params;
  params.metric = m;
  const moecomp::host_context ctx;
  for (auto _ : state) {
    moecomp::distance::pairwise_distances_condensed(ctx, params, x.view(), out.view());
    benchmark::DoNotOptimize(out.data());
  }
  // flops of the symmetric Gram the result needs: n (n - 1) / 2 pairs x 2 d
  state.counters["GFLOP/s"] = benchmark::Counter(static_cast<double>(n) * static_cast<double>(n - 1) * d,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = ctx.threads();
}

template <class T>
void gram_upper_tiles(benchmark::State& state) {
  const index_t n = state.range(0), d = state.range(1);
  const auto x = points<T>(n, d);
  const moecomp::host_context ctx;
  double flops = 0;
  for (auto _ : state) {
    flops = 0;
    moecomp::detail::for_each_gram_tile<T>(
        ctx, x.view(), x.view(), true, [&](index_t, index_t, moecomp::matrix_view<const T> g) {
          benchmark::DoNotOptimize(g.data());
#pragma omp atomic
          flops += 2.0 * static_cast<double>(g.rows()) * static_cast<double>(g.cols()) * static_cast<double>(d);
        });
  }
  state.counters["GFLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

template <class T>
void eigen_gemm(benchmark::State& state) {
  using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const index_t n = state.range(0), d = state.range(1);
  const auto x = points<T>(n, d);
  Eigen::Map<const matrix> a(x.data(), n, d);
  matrix g(n, n);
  for (auto _ : state) {
    g.noalias() = a * a.transpose();
    benchmark::DoNotOptimize(g.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(d),
                         benchmark::Counter::kIsIterationInvariantRate);
  state.counters["eigen_threads"] = Eigen::nbThreads();
}

using moecomp::distance::metric;
void pdist_float(benchmark::State& state, metric m) { pdist<float>(state, m); }
void pdist_double(benchmark::State& state, metric m) { pdist<double>(state, m); }
BENCHMARK_CAPTURE(pdist_float, euclidean, metric::euclidean)->Args({4096, 1024})->Args({1024, 4096})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(pdist_double, euclidean, metric::euclidean)->Args({4096, 1024})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(pdist_float, cosine, metric::cosine)->Args({4096, 1024})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(pdist_float, correlation, metric::correlation)->Args({4096, 1024})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(gram_upper_tiles, float)->Args({4096, 1024})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(eigen_gemm, float)->Args({4096, 1024})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(gram_upper_tiles, double)->Args({4096, 1024})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(eigen_gemm, double)->Args({4096, 1024})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
