// Device pairwise-distance benchmarks (Google Benchmark), timed with CUDA events on the context's stream
// (manual time: the GPU time of one call, from the first enqueued kernel to the last).
//   pdist_cuda:   pairwise_distances_condensed, euclidean, float (scipy pdist on the GPU);
//   square_cuda:  pairwise_distances, x against itself, n x n square output;
//   cublas_sgemm: cuBLAS SGEMM of the full n x n Gram A A^T on the same shape, for comparison.
// Counters:
//   GFLOP/s:           the flops the result needs, as in bench_distance.cpp: n (n - 1) / 2 pairs x 2 d
//                      for the distances; 2 n^2 d (what it performs) for SGEMM;
//   gemm_equiv_GFLOP/s (distances only): 2 n^2 d per call, i.e. the rate a full-Gram GEMM would need to
//                      finish in the same time; compare it with cublas_sgemm's GFLOP/s.
// The distance calls use a caller-owned cuBLAS handle and a caller-provided workspace (the hot path).
#include <benchmark/benchmark.h>
#include <moecomp/cuda/moecomp.cuh>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cuda_bench_support.cuh"

#include <cstddef>
#include <string>
#include <vector>

namespace {

using moecomp::index_t;
namespace dist = moecomp::distance;

using moecomp_bench::gpu_session;
using moecomp_bench::have_device;

/// n x d uniform [-1, 1) points on the device.
moecomp::device_buffer<float> device_points(const moecomp::cuda_context& ctx, index_t n, index_t d) {
  moecomp::host_matrix<float> x(n, d);
  moecomp::random_generator rng(2024);
  rng.fill_uniform(x.view(), -1.0f, 1.0f);
  moecomp::device_buffer<float> buffer(ctx, n * d);
  moecomp::copy_to_device(ctx, x.const_view(), buffer.view(n, d));
  MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
  return buffer;
}

void set_counters(benchmark::State& state, double seconds, double useful_flops, double gemm_flops) {
  const double iterations = static_cast<double>(state.iterations());
  if (seconds <= 0.0) return;
  state.counters["GFLOP/s"] = useful_flops * iterations / seconds * 1e-9;
  if (gemm_flops > 0.0) state.counters["gemm_equiv_GFLOP/s"] = gemm_flops * iterations / seconds * 1e-9;
}

void pdist_cuda(benchmark::State& state) {
  if (!have_device(state)) return;
  const index_t n = state.range(0), d = state.range(1);
  gpu_session gpu;
  const auto ctx = gpu.context();
  const auto x = device_points(ctx, n, d);
  moecomp::device_buffer<float> out(ctx, dist::condensed_size(n));
  dist::pairwise_distance_params params;  // euclidean
  const std::size_t bytes = dist::pairwise_distances_condensed_workspace_size<float>(params, n, d);
  moecomp::device_buffer<std::byte> workspace(ctx, static_cast<index_t>(bytes));
  const auto run = [&] { dist::pairwise_distances_condensed(ctx, params, x.view(n, d), out.view(), workspace.view()); };
  run();  // warm-up: module load, cuBLAS heuristics
  double total = 0.0;
  for (auto _ : state) {
    const double seconds = gpu.event_time(run);
    state.SetIterationTime(seconds);
    total += seconds;
  }
  const double nd = static_cast<double>(n), dd = static_cast<double>(d);
  set_counters(state, total, nd * (nd - 1.0) * dd, 2.0 * nd * nd * dd);
  state.counters["workspace_MiB"] = static_cast<double>(bytes) / (1024.0 * 1024.0);
}

void square_cuda(benchmark::State& state) {
  if (!have_device(state)) return;
  const index_t n = state.range(0), d = state.range(1);
  gpu_session gpu;
  const auto ctx = gpu.context();
  const auto x = device_points(ctx, n, d);
  moecomp::device_buffer<float> out(ctx, n * n);
  dist::pairwise_distance_params params;  // euclidean
  const std::size_t bytes = dist::pairwise_distances_workspace_size<float>(params, n, n, d);
  moecomp::device_buffer<std::byte> workspace(ctx, static_cast<index_t>(bytes));
  const auto run = [&] { dist::pairwise_distances(ctx, params, x.view(n, d), out.view(n, n), workspace.view()); };
  run();
  double total = 0.0;
  for (auto _ : state) {
    const double seconds = gpu.event_time(run);
    state.SetIterationTime(seconds);
    total += seconds;
  }
  const double nd = static_cast<double>(n), dd = static_cast<double>(d);
  set_counters(state, total, nd * (nd - 1.0) * dd, 2.0 * nd * nd * dd);
  state.counters["workspace_MiB"] = static_cast<double>(bytes) / (1024.0 * 1024.0);
}

void cublas_sgemm(benchmark::State& state) {
  if (!have_device(state)) return;
  const index_t n = state.range(0), d = state.range(1);
  gpu_session gpu;
  const auto ctx = gpu.context();
  const auto x = device_points(ctx, n, d);
  moecomp::device_buffer<float> gram(ctx, n * n);
  const float one = 1.0f, zero = 0.0f;
  const int ni = static_cast<int>(n), di = static_cast<int>(d);
  // row-major G = X X^T is column-major G^T = (X^T)^T X^T: the stored d x n matrix transposed, times itself
  const auto run = [&] {
    MOECOMP_CUBLAS_TRY(
        cublasSgemm(gpu.handle, CUBLAS_OP_T, CUBLAS_OP_N, ni, ni, di, &one, x.data(), di, x.data(), di, &zero,
                    gram.data(), ni));
  };
  run();
  double total = 0.0;
  for (auto _ : state) {
    const double seconds = gpu.event_time(run);
    state.SetIterationTime(seconds);
    total += seconds;
  }
  const double nd = static_cast<double>(n), dd = static_cast<double>(d);
  set_counters(state, total, 2.0 * nd * nd * dd, 0.0);
}

void add_device_context() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    benchmark::AddCustomContext("cuda_device", "none");
    return;
  }
  int device = 0;
  cudaDeviceProp properties{};
  if (cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&properties, device) == cudaSuccess) {
    benchmark::AddCustomContext("cuda_device", properties.name);
    benchmark::AddCustomContext("cuda_sm", std::to_string(properties.major) + std::to_string(properties.minor));
  }
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) benchmark::AddCustomContext("cuda_runtime", std::to_string(runtime));
}

}  // namespace

BENCHMARK(pdist_cuda)->Args({4096, 1024})->Args({14336, 4096})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(square_cuda)->Args({4096, 1024})->Args({14336, 4096})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(cublas_sgemm)->Args({4096, 1024})->Args({14336, 4096})->UseManualTime()->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  add_device_context();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
