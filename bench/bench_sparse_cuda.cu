// Device sparse benchmark (Google Benchmark), issue 15's workloads on the GPU:
//  * prune_cuda: magnitude pruning of the ResMoE Mixtral design matrix, 14336 x 12288 float32, at 0.75 (wall
//    time of the synchronising call);
//  * restore_cuda: W = B + R for one Mixtral W1, 14336 x 4096, bf16 base and output, a 25%-dense bitmap residual
//    with bf16 values (GPU time; bytes/s counts base + residual read and output written);
//  * sparse_matmul_cuda/T: y += x R^T with that residual for T = 1, 8, 64 tokens (GPU time).
// Without a GPU every case reports "no CUDA device". The residual's sections are made here, not by the host
// encoder: the work does not depend on which entries are stored, only on how many.
#include <benchmark/benchmark.h>
#include <moecomp/core/random.hpp>
#include <moecomp/cuda/core/device_buffer.cuh>
#include <moecomp/cuda/sparse/prune.cuh>
#include <moecomp/cuda/sparse/residual.cuh>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "cuda_bench_support.cuh"

namespace {

using moecomp::index_t;
namespace sparse = moecomp::sparse;

constexpr index_t d_ff = 14336, d_model = 4096;

/// A rows x cols bitmap residual with about `density` of its entries stored, bf16 values, in device memory.
struct device_bitmap {
  moecomp::device_buffer<std::uint64_t> starts;
  moecomp::device_buffer<std::uint8_t> bits;
  moecomp::device_buffer<std::uint16_t> values;
  sparse::sparse_matrix_device_view view;
  device_bitmap(const moecomp::cuda_context& ctx, index_t rows, index_t cols, double density) {
    const index_t row_bytes = (cols + 7) / 8;
    std::vector<std::uint8_t> host_bits(static_cast<std::size_t>(rows * row_bytes), 0);
    moecomp::random_generator rng(5);
    std::uint64_t count = 0;
    for (index_t i = 0; i < rows; ++i)
      for (index_t j = 0; j < cols; ++j)
        if (rng.uniform<double>() < density) {
          host_bits[static_cast<std::size_t>(i * row_bytes + j / 8)] |= static_cast<std::uint8_t>(1u << (j % 8));
          ++count;
        }
    std::vector<std::uint16_t> host_values(count, moecomp::bfloat16(0.01f).bits);
    starts = moecomp::device_buffer<std::uint64_t>(ctx, rows + 1);
    bits = moecomp::device_buffer<std::uint8_t>(ctx, rows * row_bytes);
    values = moecomp::device_buffer<std::uint16_t>(ctx, static_cast<index_t>(count));
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(bits.data(), host_bits.data(), host_bits.size(), cudaMemcpyHostToDevice, ctx.stream));
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(values.data(), host_values.data(), 2 * count, cudaMemcpyHostToDevice, ctx.stream));
    sparse::bitmap_row_starts(ctx, rows, cols, bits.data(), starts.view());
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
    view.rows = rows;
    view.cols = cols;
    view.format = sparse::sparse_format::bitmap;
    view.values = sparse::value_dtype::bfloat16;
    view.count = count;
    view.row_offsets = starts.data();
    view.structure = bits.data();
    view.value_bytes = values.data();
  }
};

void prune_cuda(benchmark::State& state) {
  if (!moecomp_bench::have_device(state)) return;
  const index_t rows = d_ff, cols = 3 * d_model;
  moecomp_bench::gpu_session gpu;
  const auto ctx = gpu.context();
  std::vector<float> host(static_cast<std::size_t>(rows * cols));
  moecomp::random_generator rng(3);
  for (float& v : host) v = rng.normal<float>();
  moecomp::device_buffer<float> w(ctx, rows * cols), out(ctx, rows * cols);
  MOECOMP_CUDA_TRY(cudaMemcpyAsync(w.data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice, ctx.stream));
  sparse::prune_params params;
  params.sparsity = 0.75;
  moecomp::device_buffer<std::byte> ws(ctx, static_cast<index_t>(sparse::prune_magnitude_workspace_size<float>(params, rows, cols)));
  const auto run = [&] { (void)sparse::prune_magnitude<float>(ctx, params, w.view(rows, cols).as_const(), out.view(rows, cols), ws.view()); };
  run();
  for (auto _ : state) state.SetIterationTime(gpu.wall_time(run));
  state.SetBytesProcessed(state.iterations() * rows * cols * 4);
}

void restore_cuda(benchmark::State& state) {
  if (!moecomp_bench::have_device(state)) return;
  moecomp_bench::gpu_session gpu;
  const auto ctx = gpu.context();
  const device_bitmap r(ctx, d_ff, d_model, 0.25);
  moecomp::device_buffer<moecomp::bfloat16> base(ctx, d_ff * d_model), out(ctx, d_ff * d_model);
  MOECOMP_CUDA_TRY(cudaMemsetAsync(base.data(), 0, base.bytes(), ctx.stream));
  const auto run = [&] {
    sparse::restore_dense<moecomp::bfloat16, moecomp::bfloat16>(ctx, base.view(d_ff, d_model), r.view, out.view(d_ff, d_model));
  };
  run();
  for (auto _ : state) state.SetIterationTime(gpu.event_time(run));
  const auto bytes = 2 * base.bytes() + r.bits.bytes() + r.values.bytes() + r.starts.bytes();
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
}

void sparse_matmul_cuda(benchmark::State& state) {
  if (!moecomp_bench::have_device(state)) return;
  const index_t tokens = state.range(0);
  moecomp_bench::gpu_session gpu;
  const auto ctx = gpu.context();
  const device_bitmap r(ctx, d_ff, d_model, 0.25);
  moecomp::device_buffer<float> x(ctx, tokens * d_model), y(ctx, tokens * d_ff);
  MOECOMP_CUDA_TRY(cudaMemsetAsync(x.data(), 0, x.bytes(), ctx.stream));
  MOECOMP_CUDA_TRY(cudaMemsetAsync(y.data(), 0, y.bytes(), ctx.stream));
  const auto run = [&] { sparse::sparse_matmul<float>(ctx, x.view(tokens, d_model).as_const(), r.view, y.view(tokens, d_ff), true); };
  run();
  for (auto _ : state) state.SetIterationTime(gpu.event_time(run));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(r.bits.bytes() + r.values.bytes()));
}

}  // namespace

BENCHMARK(prune_cuda)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(restore_cuda)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(sparse_matmul_cuda)->Arg(1)->Arg(8)->Arg(64)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
