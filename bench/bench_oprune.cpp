// O-prune's subset search (compress --method prune --criterion output) through compress::compress_layer: one
// Mixtral-layout layer of E = 16 float32 experts of 256 x 512 (top-2, softmax, renormalised) on 256 calibration
// tokens, N = 8 kept, so all C(16, 8) = 12,870 subsets are searched; and E = 8 -> 4 (70 subsets). The time is the
// whole compress_layer (expert outputs, the search, the pruned layer's error); counter subsets/s. The side-by-side
// against a torch transcription of the reference's loop: bench/peers/oprune_vs_torch.py.
#include <benchmark/benchmark.h>
#include <moecomp/compress/compress.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <vector>

namespace {

using moecomp::index_t;
namespace compress = moecomp::compress;

void output_subsets(benchmark::State& state) {
  const index_t E = state.range(0), N = state.range(1), H = 512, I = 256, T = 256;
  moecomp::model::moe_model m;
  m.family = "mixtral";
  m.num_experts = E;
  m.top_k = 2;
  m.hidden_size = H;
  m.expert_size = I;
  m.normalize_top_k = true;
  moecomp::random_generator rng(23);
  const auto normal = [&](std::vector<float>& v, index_t n, float scale) {
    v.resize(static_cast<std::size_t>(n));
    for (float& x : v) x = scale * rng.normal<float>();
  };
  std::vector<float> w1, w3, w2, router, x;
  normal(w1, E * I * H, 0.04f);
  normal(w3, E * I * H, 0.04f);
  normal(w2, E * H * I, 0.06f);
  normal(router, E * H, 0.3f);
  normal(x, T * H, 1.0f);
  compress::moe_layer_weights_view w;
  w.experts = {moecomp::make_matrix_stack_view<const float>(w1.data(), E, I, H),
               moecomp::make_matrix_stack_view<const float>(w3.data(), E, I, H),
               moecomp::make_matrix_stack_view<const float>(w2.data(), E, H, I), {}, {}, {}};
  w.router = moecomp::matrix_view<const float>(router.data(), E, H);
  compress::compress_params p;
  p.method = compress::method::prune;
  p.criterion = compress::prune_criterion::output;
  p.experts = N;
  p = compress::resolved_params(p, m, /*calibrated=*/true, moecomp::io::safetensors_dtype::f32);
  const moecomp::host_context ctx;
  index_t subsets = 1;
  for (index_t k = 1; k <= N; ++k) subsets = subsets * (E - N + k) / k;
  for (auto _ : state) {
    compress::layer_report report;
    const compress::compressed_layer c =
        compress::compress_layer(ctx, p, m, w, moecomp::matrix_view<const float>(x.data(), T, H), {}, report);
    benchmark::DoNotOptimize(c.slots.data());
  }
  state.counters["subsets/s"] = benchmark::Counter(static_cast<double>(subsets), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK(output_subsets)->Args({8, 4})->Args({16, 8})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
