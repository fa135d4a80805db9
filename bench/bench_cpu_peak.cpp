// The arithmetic peak of this CPU, the floor that bench/RESULTS.md states GEMM-bound workloads against:
// float32 fused multiply-adds (16 lanes on AVX-512, 8 on AVX2) and, where the target has AVX512-BF16,
// bfloat16 dot products (vdpbf16ps: 32 products and sums per instruction), on 1 and 2 threads. Twelve
// independent accumulators per thread cover the FMA latency; nothing touches memory.
#include <benchmark/benchmark.h>

#include <immintrin.h>

#include <cstdint>

namespace {

[[maybe_unused]] constexpr int accumulators = 12;
[[maybe_unused]] constexpr std::int64_t rounds = 1 << 20;

void fp32_fma(benchmark::State& state) {
#if defined(__AVX512F__)
  using vec = __m512;
  constexpr int lanes = 16;
  auto fma = [](vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); };
  auto set1 = [](float v) { return _mm512_set1_ps(v); };
#elif defined(__FMA__)
  using vec = __m256;
  constexpr int lanes = 8;
  auto fma = [](vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); };
  auto set1 = [](float v) { return _mm256_set1_ps(v); };
#else
  state.SkipWithError("the target has no FMA");
  return;
#endif
#if defined(__AVX512F__) || defined(__FMA__)
  vec acc[accumulators];
  for (int i = 0; i < accumulators; ++i) acc[i] = set1(0.001f * static_cast<float>(i));
  const vec a = set1(0.999f), b = set1(1e-3f);
  for (auto _ : state) {
    for (std::int64_t r = 0; r < rounds; ++r) {
      for (int i = 0; i < accumulators; ++i) acc[i] = fma(a, acc[i], b);
      benchmark::ClobberMemory();
    }
  }
  for (int i = 0; i < accumulators; ++i) benchmark::DoNotOptimize(acc[i]);
  // this thread's flops over the run's time, summed over the threads
  state.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * static_cast<double>(rounds) * accumulators * lanes * 2 / 1e9,
      benchmark::Counter::kIsRate);
#endif
}

void bf16_dot(benchmark::State& state) {
#if defined(__AVX512BF16__)
  __m512 acc[accumulators];
  for (int i = 0; i < accumulators; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3a83);  // 1.0, ~1e-3
  for (auto _ : state) {
    for (std::int64_t r = 0; r < rounds; ++r) {
      for (int i = 0; i < accumulators; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
      benchmark::ClobberMemory();
    }
  }
  for (int i = 0; i < accumulators; ++i) benchmark::DoNotOptimize(acc[i]);
  state.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * static_cast<double>(rounds) * accumulators * 64 / 1e9,
      benchmark::Counter::kIsRate);
#else
  state.SkipWithError("the target has no AVX512-BF16");
#endif
}

}  // namespace

BENCHMARK(fp32_fma)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(bf16_dot)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK_MAIN();
