// Neuron alignment of two Qwen-MoE-size experts (d = 2048, d_ff = 1408, SwiGLU: design rows of 6144), the
// issue's workload, with bf16 and float storage:
//  * weights: the design rows, the 1408 x 1408 squared-distance cost (one GEMM), the exact assignment;
//  * inner: the same with inner products;
//  * correlation: both experts' hidden activations on 2048 calibration tokens (the expert forward), the
//    correlation cost, the assignment.
// The second expert is the first with its neurons shuffled and noise of half the weights' size added (related
// experts, as after upcycling, but far from a clean permutation). Counters: flops of the cost GEMM.
// bf16 storage runs twice: with exact products (the design rows widened to float) and with
// host_context::matmul = bf16 (design rows kept bfloat16, bfloat16 dot products; the label says which).
// The side-by-side against numpy + scipy is bench/peers/align_vs_scipy.py.
#include <benchmark/benchmark.h>
#include <moecomp/align/align.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <numeric>
#include <string>
#include <vector>

namespace {

using moecomp::index_t;
namespace align = moecomp::align;
namespace moe = moecomp::moe;

constexpr index_t d = 2048, d_ff = 1408, tokens = 2048;

template <class W>
struct expert_pair {
  std::vector<W> w1[2], w3[2], w2[2];
  moecomp::host_matrix<float> x;
  moe::ffn_expert_view<W> view(int k) const {
    return {moecomp::matrix_view<const W>(w1[k].data(), d_ff, d), moecomp::matrix_view<const W>(w3[k].data(), d_ff, d),
            moecomp::matrix_view<const W>(w2[k].data(), d, d_ff), {}, {}, {}};
  }
};

template <class W>
const expert_pair<W>& the_pair() {
  static const expert_pair<W> pair = [] {
    expert_pair<W> p;
    moecomp::random_generator rng(1);
    std::vector<index_t> q(d_ff);
    std::iota(q.begin(), q.end(), index_t(0));
    rng.shuffle(q.begin(), q.end());
    const float s1 = 1.0f / 45.25f, s2 = 1.0f / 37.5f;  // 1 / sqrt(d), 1 / sqrt(d_ff)
    std::vector<float> w1(d_ff * d), w3(d_ff * d), w2(d * d_ff);
    for (float& v : w1) v = s1 * rng.normal<float>();
    for (float& v : w3) v = s1 * rng.normal<float>();
    for (float& v : w2) v = s2 * rng.normal<float>();
    for (int k = 0; k < 2; ++k) {
      p.w1[k].resize(w1.size());
      p.w3[k].resize(w3.size());
      p.w2[k].resize(w2.size());
    }
    for (index_t i = 0; i < d_ff; ++i) {
      const index_t s = q[static_cast<std::size_t>(i)];
      for (index_t j = 0; j < d; ++j) {
        p.w1[0][i * d + j] = moecomp::convert_to<W>(w1[i * d + j]);
        p.w3[0][i * d + j] = moecomp::convert_to<W>(w3[i * d + j]);
        p.w2[0][j * d_ff + i] = moecomp::convert_to<W>(w2[j * d_ff + i]);
        p.w1[1][i * d + j] = moecomp::convert_to<W>(w1[s * d + j] + 0.5f * s1 * rng.normal<float>());
        p.w3[1][i * d + j] = moecomp::convert_to<W>(w3[s * d + j] + 0.5f * s1 * rng.normal<float>());
        p.w2[1][j * d_ff + i] = moecomp::convert_to<W>(w2[j * d_ff + s] + 0.5f * s2 * rng.normal<float>());
      }
    }
    p.x = moecomp::host_matrix<float>(tokens, d);
    for (float& v : p.x.storage()) v = rng.normal<float>();
    return p;
  }();
  return pair;
}

template <class W>
void BM_align_experts(benchmark::State& state) {
  const auto objective = static_cast<align::align_objective>(state.range(0));
  const expert_pair<W>& pair = the_pair<W>();
  moecomp::host_context ctx;
  ctx.matmul = static_cast<moecomp::matmul_precision>(state.range(1));
  align::align_params params;
  params.objective = objective;
  std::vector<index_t> p(d_ff);
  double cost = 0;
  for (auto _ : state) {
    cost = align::align_experts<W>(ctx, params, pair.view(0), pair.view(1), pair.x.view(),
                                   moecomp::make_vector_view(p.data(), d_ff))
               .cost;
    benchmark::DoNotOptimize(p.data());
  }
  const double f = objective == align::align_objective::correlation ? double(tokens) : 3.0 * d;
  state.counters["cost_gemm_flops"] = benchmark::Counter(2.0 * d_ff * d_ff * f, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["objective"] = cost;
  state.SetLabel(std::string(align::to_string(objective)) + ", matmul " + moecomp::to_string(ctx.matmul));
}

template <moecomp::matmul_precision... Precisions>
void objectives(benchmark::internal::Benchmark* b) {
  for (auto o : {align::align_objective::weights, align::align_objective::inner, align::align_objective::correlation})
    for (auto precision : {Precisions...}) b->Args({static_cast<int>(o), static_cast<int>(precision)});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_TEMPLATE(BM_align_experts, moecomp::bfloat16)
    ->Apply(objectives<moecomp::matmul_precision::exact, moecomp::matmul_precision::bf16>);
BENCHMARK_TEMPLATE(BM_align_experts, float)->Apply(objectives<moecomp::matmul_precision::exact>);

}  // namespace

BENCHMARK_MAIN();
