// FFN expert forward benchmarks at the context's threads: one Qwen-MoE-size SwiGLU expert (d = 2048,
// d_ff = 1408) on 512 and 8192 tokens, float and bfloat16 storage (bfloat16 converted to float once per
// call). Counter flops/s: 6 n d d_ff (three GEMMs).
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

}  // namespace

BENCHMARK_TEMPLATE(ffn_forward, float)->Arg(512)->Arg(8192)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(ffn_forward, moecomp::bfloat16)->Arg(512)->Arg(8192)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
