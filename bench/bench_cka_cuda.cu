// Device CKA benchmark (Google Benchmark): cka_matrix_cuda/E/n/d, the all-pairs linear CKA matrix of E
// float32 experts (issue 13's E = 32 x 1024 x 1024 and E = 64 x 2048 x 2048), wall time of the
// (synchronising) call. Without a GPU every case reports "no CUDA device".
#include <benchmark/benchmark.h>
#include <moecomp/cuda/moecomp.cuh>

#include <cuda_runtime_api.h>

#include <cstddef>

#include "cuda_bench_support.cuh"

namespace {

using moecomp::index_t;
namespace sim = moecomp::similarity;

void cka_matrix_cuda(benchmark::State& state) {
  if (!moecomp_bench::have_device(state)) return;
  const index_t e = state.range(0), n = state.range(1), d = state.range(2);
  moecomp_bench::gpu_session gpu;
  const auto ctx = gpu.context();
  moecomp::host_matrix<float> host(n, d);
  moecomp::random_generator rng(17);
  rng.fill_normal(host.view());
  moecomp::device_buffer<float> f(ctx, e * n * d);
  for (index_t a = 0; a < e; ++a)  // the same matrix E times: the work does not depend on the values
    moecomp::copy_to_device(ctx, host.const_view(), moecomp::make_device_matrix_view(f.data() + a * n * d, n, d));
  moecomp::host_matrix<double> out(e, e);
  const sim::cka_params params;
  moecomp::device_buffer<std::byte> ws(ctx, static_cast<index_t>(sim::cka_matrix_workspace_size<float>(params, e, n, d)));
  const auto run = [&] {
    (void)sim::cka_matrix<float>(ctx, params, moecomp::split_rows(f.view(e * n, d).as_const(), e), out.view(), ws.view());
  };
  run();  // warm-up: module load, cuBLAS heuristics
  for (auto _ : state) state.SetIterationTime(gpu.wall_time(run));
}

}  // namespace

BENCHMARK(cka_matrix_cuda)->Args({32, 1024, 1024})->Args({64, 2048, 2048})->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
