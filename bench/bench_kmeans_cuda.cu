// Device k-means benchmarks (Google Benchmark), the host bench_kmeans.cpp's workloads:
//   lloyd_cuda/n/d/k: Lloyd on n x d normal float32 data, exactly 20 iterations (tolerance 0) from the first
//       k rows; wall time of the (synchronising) call. Counter assign_GFLOP/s: 2 n k d flops per iteration.
//   balanced_cuda/n/d/k: the same with equal sizes n / k (the MoEfication split's size: 11008 x 4096 into
//       64), at most 10 iterations; its transportation problems are solved on the host.
// Without a GPU every case reports "no CUDA device".
#include <benchmark/benchmark.h>
#include <moecomp/cuda/moecomp.cuh>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda_bench_support.cuh"

namespace {

using moecomp::index_t;
namespace cluster = moecomp::cluster;

using moecomp_bench::gpu_session;
using moecomp_bench::have_device;

moecomp::device_buffer<float> device_normal(const moecomp::cuda_context& ctx, index_t n, index_t d) {
  moecomp::host_matrix<float> x(n, d);
  moecomp::random_generator rng(2024);
  for (index_t i = 0; i < n; ++i)
    for (index_t c = 0; c < d; ++c) x(i, c) = static_cast<float>(rng.normal<double>());
  moecomp::device_buffer<float> buffer(ctx, n * d);
  moecomp::copy_to_device(ctx, x.const_view(), buffer.view(n, d));
  MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
  return buffer;
}

void run_kmeans(benchmark::State& state, bool balanced) {
  if (!have_device(state)) return;
  const index_t n = state.range(0), d = state.range(1), k = state.range(2);
  gpu_session gpu;
  const auto ctx = gpu.context();
  const auto x = device_normal(ctx, n, d);
  moecomp::device_buffer<float> centers(ctx, k * d);
  moecomp::device_buffer<std::int64_t> labels(ctx, n);
  moecomp::device_buffer<index_t> sizes(ctx, k);
  cluster::kmeans_params params;
  params.clusters = k;
  params.init = cluster::kmeans_init::given;
  params.tolerance = 0;
  params.max_iterations = balanced ? 10 : 20;
  if (balanced) params.size_min = params.size_max = n / k;
  moecomp::device_buffer<std::byte> workspace(
      ctx, static_cast<index_t>(cluster::kmeans_workspace_size<float>(params, n, d)));
  double seconds = 0;
  index_t iterations = 0;
  const auto run = [&] {
    const auto r = cluster::kmeans(ctx, params, x.view(n, d), moecomp::vector_view<const float, moecomp::device_memory>(),
                                   centers.view(k, d), labels.view(), sizes.view(), workspace.view());
    iterations = r.iterations;
  };
  const auto restart = [&] {
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(centers.data(), x.data(), sizeof(float) * static_cast<std::size_t>(k * d),
                                     cudaMemcpyDeviceToDevice, gpu.stream));
  };
  restart();
  run();  // warm-up: module load, cuBLAS heuristics
  for (auto _ : state) {
    restart();
    const double t = gpu.wall_time(run);
    seconds += t;
    state.SetIterationTime(t);
  }
  state.counters["iterations"] = static_cast<double>(iterations);
  if (seconds > 0)
    state.counters["assign_GFLOP/s"] = 2.0 * static_cast<double>(n * k * d) * static_cast<double>(iterations + 1) *
                                       static_cast<double>(state.iterations()) / seconds * 1e-9;
}

void lloyd_cuda(benchmark::State& state) { run_kmeans(state, false); }
void balanced_cuda(benchmark::State& state) { run_kmeans(state, true); }

}  // namespace

BENCHMARK(lloyd_cuda)->Args({8192, 512, 64})->Args({65536, 1024, 256})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(balanced_cuda)->Args({11008, 4096, 64})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
