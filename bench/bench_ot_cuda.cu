// Device optimal-transport benchmarks (Google Benchmark).
//   sinkhorn_batched_cuda/<T>/batch/n: batch problems of n x n, uniform costs, a fixed 100 iterations
//       (tolerance 0); GPU time by CUDA events (the call is asynchronous). Counter entries/s: 2 batch n^2
//       logsumexp terms per iteration.
//   auction_cuda/n: one n x n assignment of uniform [0, 1) float costs (the issue's 2048 and 14336), wall
//       time of the (synchronising) call, automatic epsilon.
//   barycenter_cuda/n/d/iterations: the ResMoE-size barycenter, k = 8 clouds of n x d float32 synthetic
//       weights (uniform [-1, 1)), init = cloud 0, a fixed number of iterations (tolerance 0); wall time.
// Synthetic data is generated on the device (a hash of the index), so setting up 5.6 GB takes no host time.
#include <benchmark/benchmark.h>
#include <moecomp/cuda/moecomp.cuh>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include "cuda_bench_support.cuh"

#include <cstdint>
#include <string>
#include <vector>

namespace {

using moecomp::index_t;
namespace ot = moecomp::ot;

using moecomp_bench::gpu_session;
using moecomp_bench::have_device;

/// x[i] = low + (high - low) * u(seed, i), u a splitmix64 hash of the index mapped to [0, 1).
template <class T>
__global__ void fill_uniform_kernel(T* x, index_t count, std::uint64_t seed, double low, double high) {
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    std::uint64_t z = seed + 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    const double u = static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
    x[i] = static_cast<T>(low + (high - low) * u);
  }
}

template <class T>
void fill_uniform(const moecomp::cuda_context& ctx, T* x, index_t count, std::uint64_t seed, double low, double high) {
  fill_uniform_kernel<T><<<4096, 256, 0, ctx.stream>>>(x, count, seed, low, high);
  MOECOMP_CUDA_CHECK_LAUNCH();
}

template <class T>
void sinkhorn_batched_cuda(benchmark::State& state) {
  if (!have_device(state)) return;
  const index_t batch = state.range(0), n = state.range(1);
  gpu_session gpu;
  const auto ctx = gpu.context();
  moecomp::device_buffer<T> a(ctx, batch * n), b(ctx, batch * n), costs(ctx, batch * n * n), plans(ctx, batch * n * n);
  fill_uniform(ctx, costs.data(), costs.size(), 1, 0.0, 1.0);
  fill_uniform(ctx, a.data(), a.size(), 2, 1.0 / static_cast<double>(n), 1.0 / static_cast<double>(n));
  fill_uniform(ctx, b.data(), b.size(), 3, 1.0 / static_cast<double>(n), 1.0 / static_cast<double>(n));
  moecomp::device_buffer<ot::sinkhorn_result> results(ctx, batch);
  ot::sinkhorn_params params;
  params.method = ot::sinkhorn_method::log;
  params.reg = 0.05;
  params.tolerance = 0.0;  // a fixed amount of work
  params.max_iterations = 100;
  const std::size_t bytes = ot::sinkhorn_batched_workspace_size<T>(params, batch, n, n);
  moecomp::device_buffer<std::byte> workspace(ctx, static_cast<index_t>(bytes));
  const auto run = [&] {
    ot::sinkhorn_batched(ctx, params, a.view(batch, n), b.view(batch, n), moecomp::split_rows(costs.view(batch * n, n), batch),
                         moecomp::split_rows(plans.view(batch * n, n), batch), results.view(), workspace.view());
  };
  run();
  double total = 0.0;
  for (auto _ : state) {
    const double seconds = gpu.event_time(run);
    state.SetIterationTime(seconds);
    total += seconds;
  }
  const double terms = 2.0 * static_cast<double>(batch) * static_cast<double>(n * n) *
                       static_cast<double>(params.max_iterations) * static_cast<double>(state.iterations());
  if (total > 0) state.counters["entries/s"] = terms / total;
}

void auction_cuda(benchmark::State& state) {
  if (!have_device(state)) return;
  const index_t n = state.range(0);
  gpu_session gpu;
  const auto ctx = gpu.context();
  moecomp::device_buffer<float> cost(ctx, n * n);
  moecomp::device_buffer<index_t> assignment(ctx, n);
  fill_uniform(ctx, cost.data(), cost.size(), 4, 0.0, 1.0);
  const std::size_t bytes = ot::auction_assignment_workspace_size<float>(ot::auction_params{}, n, n);
  moecomp::device_buffer<std::byte> workspace(ctx, static_cast<index_t>(bytes));
  ot::auction_result result;
  const auto run = [&] {
    result = ot::auction_assignment(ctx, ot::auction_params{}, cost.view(n, n), assignment.view(), workspace.view());
  };
  for (auto _ : state) state.SetIterationTime(gpu.wall_time(run));
  state.counters["bids"] = static_cast<double>(result.iterations);
  state.counters["phases"] = result.phases;
  state.counters["gap_bound"] = result.criterion;
  state.counters["cost"] = result.cost;
}

void barycenter_cuda(benchmark::State& state) {
  if (!have_device(state)) return;
  const index_t n = state.range(0), d = state.range(1), iterations = state.range(2), k = 8;
  gpu_session gpu;
  const auto ctx = gpu.context();
  moecomp::device_buffer<float> measures(ctx, k * n * d), barycenter(ctx, n * d);
  moecomp::device_buffer<index_t> permutations(ctx, k * n);
  fill_uniform(ctx, measures.data(), measures.size(), 5, -1.0, 1.0);
  ot::free_support_barycenter_params params;
  params.max_iterations = iterations;
  params.tolerance = 0.0;
  const std::size_t bytes = ot::free_support_barycenter_workspace_size<float>(params, k, n, d);
  moecomp::device_buffer<std::byte> workspace(ctx, static_cast<index_t>(bytes));
  const std::vector<double> weights(static_cast<std::size_t>(k), 1.0 / static_cast<double>(k));
  ot::free_support_barycenter_device_result result;
  const auto run = [&] {
    result = ot::free_support_barycenter(ctx, params, moecomp::split_rows(measures.view(k * n, d).as_const(), k),
                                         moecomp::make_vector_view(weights.data(), k),
                                         measures.view(n, d).as_const(), barycenter.view(n, d), permutations.view(k, n),
                                         workspace.view());
  };
  for (auto _ : state) state.SetIterationTime(gpu.wall_time(run));
  state.counters["iterations"] = static_cast<double>(result.iterations);
  state.counters["bids"] = static_cast<double>(result.bids);
  state.counters["objective"] = result.objective;
  state.counters["gap_bound"] = result.gap_bound;
  state.counters["workspace_GiB"] = static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
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
}

}  // namespace

BENCHMARK_TEMPLATE(sinkhorn_batched_cuda, float)
    ->Args({256, 64})
    ->Args({64, 256})
    ->Args({8, 1024})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(sinkhorn_batched_cuda, double)->Args({64, 256})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(auction_cuda)->Arg(2048)->Arg(14336)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(barycenter_cuda)
    ->Args({2048, 4096, 2})
    ->Args({14336, 12290, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

int main(int argc, char** argv) {
  add_device_context();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
