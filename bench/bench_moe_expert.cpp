// FFN expert forward benchmarks at the context's threads: one Qwen-MoE-size SwiGLU expert (d = 2048,
// d_ff = 1408) on 512 and 8192 tokens, float and bfloat16 storage (bfloat16 converted to float once per
// call). Counter flops/s: 6 n d d_ff (three GEMMs).
// expert_weight_distances (HC-SMoE's weight features): E bf16 SwiGLU experts of 512 x 1024, E = 8 (one pair at a
// time) and 64 (across pairs), as a gathered stack (how compress reads a checkpoint in place). Counter
// entries/s: the pairs times the 3 d d_ff entries each compares.
#include <moecomp/moe/features.hpp>
#include <benchmark/benchmark.h>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/moe/ffn.hpp>

#include <vector>

namespace {

using moecomp::index_t;
namespace moe = moecomp::moe;

template <class W>
void ffn_forward(benchmark::State& state) {
  const index_t n = state.range(0), d = 2048, d_ff = 1408;
  moecomp::random_generator rng(18);
  auto draw = [&](index_t count, double scale) {
    std::vector<W> v(static_cast<std::size_t>(count));
    for (auto& x : v) x = moecomp::convert_to<W>(scale * rng.normal<double>());
    return v;
  };
  const auto w1 = draw(d_ff * d, 0.02), w3 = draw(d_ff * d, 0.02), w2 = draw(d * d_ff, 0.02);
  moe::ffn_expert_view<W> e;
  e.w1 = moecomp::matrix_view<const W>(w1.data(), d_ff, d);
  e.w3 = moecomp::matrix_view<const W>(w3.data(), d_ff, d);
  e.w2 = moecomp::matrix_view<const W>(w2.data(), d, d_ff);
  moecomp::host_matrix<float> x(n, d), y(n, d);
  rng.fill_normal(x.view());
  const moecomp::host_context ctx;
  for (auto _ : state) {
    moe::ffn_forward<W>(ctx, moe::ffn_params{}, e, x.const_view(), y.view());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["flops/s"] = benchmark::Counter(6.0 * double(n) * double(d) * double(d_ff),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void expert_weight_distances(benchmark::State& state) {
  using moecomp::bfloat16;
  const index_t E = state.range(0), d = 1024, d_ff = 512, matrix = d * d_ff;
  moecomp::random_generator rng(36);
  std::vector<std::vector<bfloat16>> w(static_cast<std::size_t>(3 * E));  // each matrix its own allocation
  std::vector<const bfloat16*> t1, t3, t2;
  for (index_t m = 0; m < 3 * E; ++m) {
    auto& v = w[static_cast<std::size_t>(m)];
    v.resize(static_cast<std::size_t>(matrix));
    for (auto& x : v) x = bfloat16(0.02f * rng.normal<float>());
    (m % 3 == 0 ? t1 : m % 3 == 1 ? t3 : t2).push_back(v.data());
  }
  const moe::ffn_expert_stack_view<bfloat16> stack{moecomp::matrix_stack_view<const bfloat16>(t1.data(), E, d_ff, d, d),
                                                   moecomp::matrix_stack_view<const bfloat16>(t3.data(), E, d_ff, d, d),
                                                   moecomp::matrix_stack_view<const bfloat16>(t2.data(), E, d, d_ff, d_ff),
                                                   {}, {}, {}};
  std::vector<double> distances(static_cast<std::size_t>(E * (E - 1) / 2));
  const moecomp::host_context ctx;
  for (auto _ : state) {
    moe::expert_weight_distances<bfloat16>(ctx, stack, moecomp::make_vector_view(distances.data(), E * (E - 1) / 2));
    benchmark::DoNotOptimize(distances.data());
  }
  state.counters["entries/s"] = benchmark::Counter(double(E * (E - 1) / 2) * 3.0 * double(matrix),
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK(expert_weight_distances)->Arg(8)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(ffn_forward, float)->Arg(512)->Arg(8192)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(ffn_forward, moecomp::bfloat16)->Arg(512)->Arg(8192)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
