// Merging a group of 4 Qwen-MoE-size experts (d = 2048, d_ff = 1408, SwiGLU), the workload:
//  * fix_dom: HC-SMoE's fixed-dominant merge on 8192 calibration tokens (all of them the group's: no router):
//    the 4 experts' hidden activations (2 GEMMs each), 3 correlation GEMMs of 1408 x 1408 over the tokens,
//    the many-to-one matching and the averaging;
//  * average: the mean of the 4 experts (memory-bound: 4 x 3 x d x d_ff weights read, 3 x d x d_ff written);
//  * learned: the fourth paper's learned coefficients on 2048 tokens (20 projected-gradient iterations at most).
// Float and bf16 storage. Counters: the GEMM flops of fix_dom. The side-by-side against a numpy/torch
// transcription of HC-SMoE's code is bench/peers/merge_vs_torch.py.
#include <benchmark/benchmark.h>
#include <moecomp/merge/merge.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <vector>

namespace {

using moecomp::index_t;
namespace merge = moecomp::merge;
namespace moe = moecomp::moe;

constexpr index_t d = 2048, d_ff = 1408, experts = 4, tokens = 8192;

template <class W>
struct group {
  std::vector<W> w1, w3, w2;
  moecomp::host_matrix<float> x;
  moe::ffn_expert_stack_view<W> view() const {
    return {moecomp::make_matrix_stack_view<const W>(w1.data(), experts, d_ff, d),
            moecomp::make_matrix_stack_view<const W>(w3.data(), experts, d_ff, d),
            moecomp::make_matrix_stack_view<const W>(w2.data(), experts, d, d_ff), {}, {}, {}};
  }
};

template <class W>
const group<W>& the_group() {
  static const group<W> g = [] {
    group<W> p;
    moecomp::random_generator rng(1);
    const float s1 = 1.0f / 45.25f, s2 = 1.0f / 37.5f;  // 1 / sqrt(d), 1 / sqrt(d_ff)
    p.w1.resize(experts * d_ff * d);
    p.w3.resize(p.w1.size());
    p.w2.resize(p.w1.size());
    for (W& v : p.w1) v = moecomp::convert_to<W>(s1 * rng.normal<float>());
    for (W& v : p.w3) v = moecomp::convert_to<W>(s1 * rng.normal<float>());
    for (W& v : p.w2) v = moecomp::convert_to<W>(s2 * rng.normal<float>());
    p.x = moecomp::host_matrix<float>(tokens, d);
    for (float& v : p.x.storage()) v = rng.normal<float>();
    return p;
  }();
  return g;
}

template <class W>
void BM_merge_group(benchmark::State& state) {
  const auto method = static_cast<merge::merge_method>(state.range(0));
  const group<W>& g = the_group<W>();
  const moecomp::host_context ctx;
  merge::merge_params params;
  params.method = method;
  params.max_iterations = 20;
  params.report_errors = false;  // the merge alone, as the reference code does it
  std::vector<W> o1(d_ff * d), o3(d_ff * d), o2(d * d_ff);
  std::vector<std::int64_t> labels(experts, 0), map(experts);
  const merge::merge_outputs<W> out{{moecomp::make_matrix_stack_view(o1.data(), 1, d_ff, d),
                                     moecomp::make_matrix_stack_view(o3.data(), 1, d_ff, d),
                                     moecomp::make_matrix_stack_view(o2.data(), 1, d, d_ff), {}, {}, {}},
                                    {},
                                    moecomp::make_vector_view(map.data(), experts)};
  merge::merge_data<float> data;
  const index_t used = method == merge::merge_method::learned ? 2048 : tokens;
  if (method != merge::merge_method::average) data.x = moecomp::matrix_view<const float>(g.x.data(), used, d);
  params.router = merge::router_rule::id_map;
  for (auto _ : state) {
    merge::merge_experts<W>(ctx, params, g.view(), moecomp::make_vector_view<const std::int64_t>(labels.data(), experts),
                            data, out);
    benchmark::DoNotOptimize(o1.data());
  }
  if (method == merge::merge_method::fix_dom)
    state.counters["gemm_flops"] = benchmark::Counter(
        experts * 2.0 * 2.0 * tokens * d * d_ff + (experts - 1) * 2.0 * tokens * d_ff * d_ff,
        benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(merge::to_string(method));
}

void methods(benchmark::internal::Benchmark* b) {
  for (auto m : {merge::merge_method::average, merge::merge_method::fix_dom, merge::merge_method::learned})
    b->Arg(static_cast<int>(m));
  b->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1)->Repetitions(2);
}

BENCHMARK_TEMPLATE(BM_merge_group, float)->Apply(methods);
BENCHMARK_TEMPLATE(BM_merge_group, moecomp::bfloat16)->Apply(methods);

}  // namespace

BENCHMARK_MAIN();
