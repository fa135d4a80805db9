// Free-support barycenter benchmarks: the uniform fast path on the POT comparison workload (8 clouds x 512
// points x 770 dims, float64, init = cloud 0, at most 10 iterations), a ResMoE-shaped case (experts that are
// noisy permuted copies of one dense FFN, float32), the cost GEMM alone (the floor of one iteration), and the
// general (network simplex) path. Side by side with POT: bench/peers/barycenter_vs_pot.py.
#include <benchmark/benchmark.h>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/ot/free_support_barycenter.hpp>

#include <numeric>
#include <vector>

namespace {

using moecomp::host_matrix;
using moecomp::index_t;
namespace ot = moecomp::ot;

template <class T>
host_matrix<T> normal_points(index_t rows, index_t cols, std::uint64_t seed) {
  host_matrix<T> x(rows, cols);
  moecomp::random_generator rng(seed);
  rng.fill_normal(x.view());
  return x;
}

/// k experts as design matrices (one row per neuron): a shared base, rows shuffled per expert, plus noise
/// of relative size `noise` (upcycled experts after fine-tuning).
template <class T>
host_matrix<T> upcycled_experts(index_t k, index_t n, index_t d, double noise) {
  const auto base = normal_points<T>(n, d, 1);
  host_matrix<T> x(k * n, d);
  moecomp::random_generator rng(2);
  std::vector<index_t> order(static_cast<std::size_t>(n));
  for (index_t j = 0; j < k; ++j) {
    std::iota(order.begin(), order.end(), index_t(0));
    rng.shuffle(order.begin(), order.end());
    for (index_t i = 0; i < n; ++i)
      for (index_t c = 0; c < d; ++c)
        x(j * n + i, c) = base(order[static_cast<std::size_t>(i)], c) + static_cast<T>(noise * rng.normal());
  }
  return x;
}

template <class T>
void run_uniform(benchmark::State& state, const host_matrix<T>& x, index_t k, index_t max_iterations) {
  const index_t n = x.rows() / k, d = x.cols();
  const moecomp::matrix_view<const T> init = x.view().row_range(0, n);
  host_matrix<T> b(n, d);
  host_matrix<index_t> p(k, n);
  ot::free_support_barycenter_params params;
  params.max_iterations = max_iterations;
  ot::free_support_barycenter_result r;
  for (auto _ : state) {
    r = ot::free_support_barycenter<T>(moecomp::host_context{}, params, split_rows(x.view(), k), init, b.view(), p.view());
    benchmark::DoNotOptimize(b.data());
  }
  state.counters["iterations"] = static_cast<double>(r.iterations);
  state.counters["objective"] = r.objective;
}

/// The POT comparison workload: 8 x 512 x 770, float64, standard normal clouds, at most 10 iterations.
void uniform_pot_workload(benchmark::State& state) {
  const index_t k = 8, n = state.range(0), d = state.range(1);
  run_uniform(state, normal_points<double>(k * n, d, 3), k, 10);
}

/// ResMoE-shaped: 8 upcycled experts, design rows [W1 | W3 | W2^T] of width 3 h + 2, float32.
void uniform_resmoe_shaped(benchmark::State& state) {
  const index_t k = 8, n = state.range(0), d = state.range(1);
  run_uniform(state, upcycled_experts<float>(k, n, d, 0.3), k, 100);
}

/// One iteration's GEMM floor: the k cross terms X_j B^T (n x d x n each), nothing else.
void cost_gemm_only(benchmark::State& state) {
  const index_t k = 8, n = state.range(0), d = state.range(1);
  const auto x = normal_points<double>(k * n, d, 3);
  host_matrix<double> cost(n, n);
  for (auto _ : state) {
    for (index_t j = 0; j < k; ++j)
      moecomp::detail::gemm_abt<double>(-1.0, x.view().row_ptr(j * n), d, x.data(), d, n, n, d, cost.data(), n);
    benchmark::DoNotOptimize(cost.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * k * n * n * d * state.iterations() * 1e-9, benchmark::Counter::kIsRate);
}

/// The general path (network simplex per measure) on measures of different sizes.
void weighted_path(benchmark::State& state) {
  const index_t k = 4, m = state.range(0), d = state.range(1);
  std::vector<host_matrix<double>> clouds;
  std::vector<std::vector<double>> masses;
  std::vector<moecomp::matrix_view<const double>> views;
  std::vector<moecomp::vector_view<const double>> mass_views;
  for (index_t j = 0; j < k; ++j) {
    const index_t n = m + 16 * j;
    clouds.push_back(normal_points<double>(n, d, 10 + static_cast<std::uint64_t>(j)));
    masses.emplace_back(static_cast<std::size_t>(n), 1.0 / static_cast<double>(n));
  }
  for (index_t j = 0; j < k; ++j) {
    views.push_back(clouds[static_cast<std::size_t>(j)].view());
    mass_views.emplace_back(masses[static_cast<std::size_t>(j)].data(), clouds[static_cast<std::size_t>(j)].rows());
  }
  const std::vector<double> b(static_cast<std::size_t>(m), 1.0 / static_cast<double>(m));
  host_matrix<double> out(m, d);
  ot::free_support_barycenter_params params;
  params.max_iterations = 10;
  ot::free_support_barycenter_result r;
  for (auto _ : state) {
    r = ot::free_support_barycenter_weighted<double>(moecomp::host_context{}, params, views, mass_views, views[0],
                                                     moecomp::vector_view<const double>(b.data(), m), out.view());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["iterations"] = static_cast<double>(r.iterations);
}

BENCHMARK(uniform_pot_workload)->Args({512, 770})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(cost_gemm_only)->Args({512, 770})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(uniform_resmoe_shaped)->Args({1024, 1538})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(weighted_path)->Args({256, 32})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
