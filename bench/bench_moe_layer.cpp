// The MoE layer forward at Qwen-MoE size (issue 16's workload): 512 tokens, 60 SwiGLU experts of d = 2048,
// d_ff = 1408, softmax top-4 without renormalisation, plus a sigmoid-gated shared expert of d_ff = 5632, in
// bfloat16 weights with exact products (widened to float) and with bf16 products (ctx.matmul, bfloat16 dot
// products), and float (weights and tokens). Counter flops/s: the routed experts' 6 T K d d_ff plus
// the shared expert's 6 T d d_ff_shared. The side-by-side against the HF-style torch loop over experts:
// bench/peers/moe_layer_vs_torch.py.
#include <moecomp/core/gemm.hpp>
#include <moecomp/moe/layer.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/random.hpp>

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

namespace {

using moecomp::index_t;
namespace moe = moecomp::moe;

template <class W, moecomp::matmul_precision Precision = moecomp::matmul_precision::exact>
void moe_layer(benchmark::State& state) {
  const index_t t = 512, d = 2048, d_ff = 1408, e = 60, k = 4, d_shared = 5632;
  moecomp::random_generator rng(22);
  auto draw = [&](index_t count) {
    std::vector<W> v(static_cast<std::size_t>(count));
    for (auto& x : v) x = moecomp::convert_to<W>(0.02 * rng.normal<double>());
    return v;
  };
  const auto w1 = draw(e * d_ff * d), w3 = draw(e * d_ff * d), w2 = draw(e * d * d_ff);
  const auto s1 = draw(d_shared * d), s3 = draw(d_shared * d), s2 = draw(d * d_shared);
  moecomp::host_matrix<float> router(e, d), gate(1, d), x(t, d), y(t, d);
  rng.fill_normal(router.view(), 0.0f, 0.02f);
  rng.fill_normal(gate.view(), 0.0f, 0.02f);
  rng.fill_normal(x.view());
  moe::moe_layer_view<W> layer;
  layer.router = router.const_view();
  layer.experts = {moecomp::make_matrix_stack_view(w1.data(), e, d_ff, d), moecomp::make_matrix_stack_view(w3.data(), e, d_ff, d),
                   moecomp::make_matrix_stack_view(w2.data(), e, d, d_ff), {}, {}, {}};
  layer.shared = {moecomp::make_matrix_stack_view(s1.data(), 1, d_shared, d), moecomp::make_matrix_stack_view(s3.data(), 1, d_shared, d),
                  moecomp::make_matrix_stack_view(s2.data(), 1, d, d_shared), {}, {}, {}};
  layer.shared_gate = gate.const_view();
  moe::moe_layer_params p;
  p.routing.rule = moecomp::gating::routing_rule::top_k;
  p.routing.scores = moecomp::gating::score_function::softmax;
  p.routing.top_k = k;
  moecomp::host_context ctx;
  ctx.matmul = Precision;
  for (auto _ : state) {
    benchmark::DoNotOptimize(moe::moe_layer_forward<W>(ctx, p, layer, x.const_view(), y.view()).selected);
  }
  state.counters["flops/s"] = benchmark::Counter(6.0 * double(t) * double(d) * (double(k * d_ff) + double(d_shared)),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string("gemm ") + moecomp::gemm_provider() + ", matmul " + moecomp::to_string(Precision));
}

}  // namespace

BENCHMARK_TEMPLATE(moe_layer, moecomp::bfloat16)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_TEMPLATE(moe_layer, moecomp::bfloat16, moecomp::matmul_precision::bf16)
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_TEMPLATE(moe_layer, float)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_MAIN();
