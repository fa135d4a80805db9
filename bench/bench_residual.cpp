// Residual benchmarks at the context's threads, on one Mixtral expert matrix (4096 x 14336) at ResMoE's 25%
// kept with fp16 values (2:4 keeps 50%):
//  * restore W = B + R for each format, float32 base and output, and bfloat16 base and output;
//  * the floor: a parallel copy of the same output bytes from a buffer of the base's size (the restore must
//    also read the base and the residual, so it moves more than the copy; bytes/s counts what it moves);
//  * encode_residual (R = W - B, prune at 0.75, encode) for the bitmap.
// Counter bytes/s: base read + residual read + output written (copy: read + written).
#include <benchmark/benchmark.h>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/sparse/prune.hpp>
#include <moecomp/sparse/residual.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace {

using moecomp::index_t;
namespace sparse = moecomp::sparse;

constexpr index_t rows = 4096, cols = 14336;

template <class T>
std::vector<T> normal_values(index_t count, std::uint64_t seed, double scale) {
  moecomp::random_generator rng(seed);
  std::vector<T> v(static_cast<std::size_t>(count));
  for (auto& x : v) x = moecomp::convert_to<T>(scale * rng.normal<double>());
  return v;
}

/// The residual of the benchmark: 25% of N(0, 0.01) kept (bitmap / csr16), or 2 of every 4 (2:4).
const sparse::sparse_matrix& residual(sparse::sparse_format f) {
  static sparse::sparse_matrix cache[3];
  sparse::sparse_matrix& r = cache[static_cast<int>(f)];
  if (r.rows() == 0) {
    const std::vector<float> w = normal_values<float>(rows * cols, 5, 0.01);
    std::vector<float> pruned(w.size());
    sparse::prune_params p;
    if (f == sparse::sparse_format::two_of_four) {
      p.scope = sparse::prune_scope::n_of_m;
    } else {
      p.sparsity = 0.75;
    }
    const moecomp::host_context ctx;
    sparse::prune_magnitude<float>(ctx, p, moecomp::matrix_view<const float>(w.data(), rows, cols),
                                   moecomp::matrix_view<float>(pruned.data(), rows, cols));
    sparse::encode_params e;
    e.format = f;
    e.values = sparse::value_dtype::float16;
    sparse::encode_sparse<float>(ctx, e, moecomp::matrix_view<const float>(pruned.data(), rows, cols), r);
  }
  return r;
}

template <class T, sparse::sparse_format F>
void restore(benchmark::State& state) {
  const sparse::sparse_matrix& r = residual(F);
  const std::vector<T> base = normal_values<T>(rows * cols, 6, 1.0);
  std::vector<T> out(base.size());
  const moecomp::host_context ctx;
  for (auto _ : state) {
    sparse::restore_dense<T, T>(ctx, moecomp::matrix_view<const T>(base.data(), rows, cols), r.view(),
                                moecomp::matrix_view<T>(out.data(), rows, cols));
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["bytes/s"] = benchmark::Counter(2.0 * double(rows * cols) * sizeof(T) + double(r.bytes()),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["residual_bits_per_weight"] = r.bits_per_weight();
}

/// The copy floor: the output's bytes copied by the same number of threads, in 1 MiB pieces.
template <class T>
void copy_floor(benchmark::State& state) {
  const std::vector<T> from = normal_values<T>(rows * cols, 6, 1.0);
  std::vector<T> to(from.size());
  const auto bytes = static_cast<index_t>(from.size() * sizeof(T));
  const index_t piece = index_t{1} << 20, pieces = (bytes + piece - 1) / piece;
  const moecomp::host_context ctx;
  for (auto _ : state) {
#if defined(_OPENMP)
#pragma omp parallel for num_threads(ctx.threads()) schedule(static)
#endif
    for (index_t k = 0; k < pieces; ++k)
      std::memcpy(reinterpret_cast<char*>(to.data()) + k * piece, reinterpret_cast<const char*>(from.data()) + k * piece,
                  static_cast<std::size_t>(std::min(piece, bytes - k * piece)));
    benchmark::DoNotOptimize(to.data());
  }
  state.counters["bytes/s"] = benchmark::Counter(2.0 * double(bytes), benchmark::Counter::kIsIterationInvariantRate);
}

void encode_residual_bitmap(benchmark::State& state) {
  const std::vector<float> base = normal_values<float>(rows * cols, 6, 1.0);
  std::vector<float> w = base;
  const std::vector<float> delta = normal_values<float>(rows * cols, 7, 0.01);
  for (std::size_t k = 0; k < w.size(); ++k) w[k] += delta[k];
  sparse::residual_params p;
  p.prune.sparsity = 0.75;
  p.encode.format = sparse::sparse_format::bitmap;
  p.encode.values = sparse::value_dtype::float16;
  const moecomp::host_context ctx;
  sparse::sparse_matrix r;
  for (auto _ : state) {
    const auto info = sparse::encode_residual<float>(ctx, p, moecomp::matrix_view<const float>(base.data(), rows, cols),
                                                     moecomp::matrix_view<const float>(w.data(), rows, cols), {}, r);
    benchmark::DoNotOptimize(info.bytes);
  }
}

}  // namespace

BENCHMARK_TEMPLATE(copy_floor, float)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(restore, float, sparse::sparse_format::bitmap)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(restore, float, sparse::sparse_format::csr16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(restore, float, sparse::sparse_format::two_of_four)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(copy_floor, moecomp::bfloat16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(restore, moecomp::bfloat16, sparse::sparse_format::bitmap)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(restore, moecomp::bfloat16, sparse::sparse_format::csr16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(restore, moecomp::bfloat16, sparse::sparse_format::two_of_four)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(encode_residual_bitmap)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
