// Routing and dispatch benchmarks at the context's threads (issue 16's workloads): 16384 tokens x 64
// experts, softmax + top-8 + renormalise (Mixtral-style) and SADMoE's tau rule (tau 0.5, raw scores), in the
// fixed-K layout and in the dense layout; the dispatch plan of 16384 x top-8 ids with and without block padding (a reused plan, and a
// new one per call). The side-by-side against torch: bench/peers/gating_vs_torch.py.
#include <benchmark/benchmark.h>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/gating/dispatch.hpp>
#include <moecomp/gating/routing.hpp>

#include <cstdint>
#include <vector>

namespace {

using moecomp::index_t;
namespace gating = moecomp::gating;

/// The benchmarks' logits (16384 x 64, normal) and parameters: softmax + top-8 + renormalise, or tau 0.5 on
/// the raw scores.
moecomp::host_matrix<float> bench_logits() {
  moecomp::host_matrix<float> logits(16384, 64);
  moecomp::random_generator rng(20);
  rng.fill_normal(logits.view());
  return logits;
}
gating::routing_params bench_params(gating::routing_rule rule) {
  gating::routing_params p;
  p.rule = rule;
  p.top_k = 8;
  p.renormalize = true;
  p.tau = 0.5;
  p.scores = rule == gating::routing_rule::top_k ? gating::score_function::softmax : gating::score_function::none;
  return p;
}

void route(benchmark::State& state, gating::routing_rule rule) {
  const moecomp::host_matrix<float> logits = bench_logits();
  const index_t t = logits.rows(), e = logits.cols();
  const gating::routing_params p = bench_params(rule);
  const index_t k = gating::max_experts_per_token(p, e);
  moecomp::host_matrix<std::int64_t> ids(t, k);
  moecomp::host_matrix<float> weights(t, k);
  const moecomp::host_context ctx;
  for (auto _ : state)
    benchmark::DoNotOptimize(
        gating::route_fixed<float>(ctx, p, logits.const_view(), {}, ids.view(), weights.view()).selected);
}
void route_top8(benchmark::State& state) { route(state, gating::routing_rule::top_k); }
void route_tau(benchmark::State& state) { route(state, gating::routing_rule::threshold); }

// The dense T x E layout, as `moecomp gate` writes it and the torch peer computes it.
void route_dense_layout(benchmark::State& state, gating::routing_rule rule) {
  const moecomp::host_matrix<float> logits = bench_logits();
  moecomp::host_matrix<float> weights(logits.rows(), logits.cols());
  const gating::routing_params p = bench_params(rule);
  const moecomp::host_context ctx;
  for (auto _ : state)
    benchmark::DoNotOptimize(gating::route_dense<float>(ctx, p, logits.const_view(), {}, weights.view()).selected);
}
void route_top8_dense(benchmark::State& state) { route_dense_layout(state, gating::routing_rule::top_k); }
void route_tau_dense(benchmark::State& state) { route_dense_layout(state, gating::routing_rule::threshold); }

void dispatch(benchmark::State& state) {
  const index_t t = 16384, k = 8, e = 64;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(t * k));
  moecomp::random_generator rng(21);
  for (auto& id : ids) id = static_cast<std::int64_t>(rng.uniform_index(e));
  gating::dispatch_params p;
  p.block_size = state.range(0);
  const moecomp::host_context ctx;
  gating::dispatch_plan plan;  // reused from step to step, as an engine would
  for (auto _ : state) {
    gating::make_dispatch_plan(ctx, p, e, moecomp::make_matrix_view(ids.data(), t, k), plan);
    benchmark::DoNotOptimize(plan.num_tokens_post_pad);
  }
}

void dispatch_fresh_plan(benchmark::State& state) {  // a new plan (fresh allocations) every call
  const index_t t = 16384, k = 8, e = 64;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(t * k));
  moecomp::random_generator rng(21);
  for (auto& id : ids) id = static_cast<std::int64_t>(rng.uniform_index(e));
  for (auto _ : state)
    benchmark::DoNotOptimize(
        gating::make_dispatch_plan(gating::dispatch_params{}, e, moecomp::make_matrix_view(ids.data(), t, k)).num_tokens_post_pad);
}

}  // namespace

BENCHMARK(route_top8)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(route_tau)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(route_top8_dense)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(route_tau_dense)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(dispatch)->Arg(1)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(dispatch_fresh_plan)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
