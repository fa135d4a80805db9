// Linear assignment benchmarks: the exact Jonker-Volgenant solver on uniform random costs (float64 and
// float32), a warm start on a slightly moved problem (the free-support barycenter's situation), the
// auction solver, and the batched form. Side-by-side figures against scipy: bench/peers/assign_vs_scipy.py.
#include <benchmark/benchmark.h>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/ot/auction_assignment.hpp>
#include <moecomp/ot/linear_assignment.hpp>

#include <vector>

namespace {

using moecomp::index_t;
namespace ot = moecomp::ot;

template <class T>
moecomp::host_matrix<T> uniform_costs(index_t n, index_t m, std::uint64_t seed = 7) {
  moecomp::host_matrix<T> c(n, m);
  moecomp::random_generator rng(seed);
  rng.fill_uniform(c.view());
  return c;
}

template <class T>
void jv(benchmark::State& state) {
  const index_t n = state.range(0);
  const auto c = uniform_costs<T>(n, n);
  moecomp::host_vector<index_t> cols(n);
  const moecomp::host_context ctx(1);
  for (auto _ : state) {
    const auto r = ot::linear_assignment(ctx, {}, c.view(), cols.view());
    benchmark::DoNotOptimize(r.cost);
  }
}

/// Rectangular: n rows into 2 n columns.
void jv_rectangular(benchmark::State& state) {
  const index_t n = state.range(0);
  const auto c = uniform_costs<double>(n, 2 * n);
  moecomp::host_vector<index_t> cols(n);
  const moecomp::host_context ctx(1);
  for (auto _ : state) {
    const auto r = ot::linear_assignment(ctx, {}, c.view(), cols.view());
    benchmark::DoNotOptimize(r.cost);
  }
}

/// Squared distances between two point clouds that move by 1e-4 of their spread between solves: cold
/// solve of the moved problem (arg 1 = 0) against a warm start from the previous potentials (arg 1 = 1).
void jv_moving_points(benchmark::State& state) {
  const index_t n = state.range(0), d = 16;
  const bool warm = state.range(1) != 0;
  moecomp::host_matrix<double> a(n, d), b(n, d), step(n, d);
  moecomp::random_generator rng(3);
  rng.fill_normal(a.view());
  rng.fill_normal(b.view());
  rng.fill_normal(step.view(), 0.0, 1e-4);
  auto costs = [&](const moecomp::host_matrix<double>& x) {
    moecomp::host_matrix<double> c(n, n);
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < n; ++j) {
        double s = 0;
        for (index_t k = 0; k < d; ++k) s += (x(i, k) - b(j, k)) * (x(i, k) - b(j, k));
        c(i, j) = s;
      }
    return c;
  };
  const auto before = costs(a);
  for (index_t i = 0; i < n; ++i)
    for (index_t k = 0; k < d; ++k) a(i, k) += step(i, k);
  const auto after = costs(a);
  const moecomp::host_context ctx(1);
  moecomp::host_vector<index_t> cols0(n), cols(n);
  moecomp::host_vector<double> u0(n), v0(n), u(n), v(n);
  ot::linear_assignment(ctx, {}, before.view(), cols0.view(), u0.view(), v0.view());
  ot::linear_assignment_params p;
  p.warm_start = warm;
  for (auto _ : state) {
    state.PauseTiming();
    cols.storage() = cols0.storage();
    v.storage() = v0.storage();
    state.ResumeTiming();
    const auto r = ot::linear_assignment(ctx, p, after.view(), cols.view(), u.view(), v.view());
    benchmark::DoNotOptimize(r.cost);
  }
}

void auction(benchmark::State& state) {
  const index_t n = state.range(0);
  const auto c = uniform_costs<double>(n, n);
  moecomp::host_vector<index_t> cols(n);
  const moecomp::host_context ctx(1);
  for (auto _ : state) {
    const auto r = ot::auction_assignment(ctx, {}, c.view(), cols.view());
    benchmark::DoNotOptimize(r.cost);
    state.counters["bids"] = static_cast<double>(r.iterations);
  }
}

/// arg 0 problems of 64 x 64 (the size of per-layer expert matchings), all threads.
void batched(benchmark::State& state) {
  const index_t batch = state.range(0), n = 64;
  const auto c = uniform_costs<float>(batch * n, n);
  moecomp::host_vector<index_t> cols(batch * n);
  std::vector<ot::linear_assignment_result> results(static_cast<std::size_t>(batch));
  const moecomp::host_context ctx(static_cast<int>(state.range(1)));
  for (auto _ : state) {
    ot::linear_assignment_batched(ctx, {}, split_rows(c.view(), batch), moecomp::make_matrix_view(cols.data(), batch, n),
                                  moecomp::make_vector_view(results.data(), batch));
    benchmark::DoNotOptimize(results.data());
  }
}

}  // namespace

BENCHMARK_TEMPLATE(jv, double)->Arg(512)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(jv, float)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(jv_rectangular)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(jv_moving_points)->Args({1024, 0})->Args({1024, 1})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(auction)->Arg(512)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(batched)->Args({1024, 1})->Args({1024, 0})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
