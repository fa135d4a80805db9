// The arithmetic peak of this CPU, the floor that bench/RESULTS.md states GEMM-bound workloads against:
// float32 fused multiply-adds (16 lanes on AVX-512, 8 on AVX2) and, where the target has AVX512-BF16,
// bfloat16 dot products (vdpbf16ps: 32 products and sums per instruction), on 1 and 2 threads.
//
// Twelve independent accumulators per thread cover the latency of two FMA pipes (4 cycles x 2). They must stay
// in registers: each is made opaque to the optimiser by an empty asm statement that names it as a register
// operand. (An earlier version used a memory clobber, which kept the accumulators in memory and measured the
// store-to-load round trip instead of the FMA units: 2.6x below the peak on the 2-core AMD EPYC.)
#include <benchmark/benchmark.h>

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace {

[[maybe_unused]] constexpr std::size_t accumulators = 12;
[[maybe_unused]] constexpr std::int64_t rounds = 1 << 20;

/// Keeps v in a register and unknown to the optimiser, without touching memory.
template <class V>
inline void opaque(V& v) {
#if defined(__AVX512F__)
  asm volatile("" : "+v"(v));
#else
  asm volatile("" : "+x"(v));
#endif
}

/// The sum of a vector's float lanes (through memory: GCC 12's _mm512_reduce_add_ps warns of an uninitialised
/// operand at -Werror).
template <class V>
float sum_lanes(V v) {
  float lanes[sizeof(V) / sizeof(float)];
  __builtin_memcpy(lanes, &v, sizeof(V));
  float total = 0;
  for (float x : lanes) total += x;
  return total;
}

/// `count` rounds on accumulators that are function parameters (plain locals, so they live in registers; an
/// array's elements stayed in memory and were stored every round); returns their total.
template <class Step, class Sum, class... Acc>
float run_rounds(std::int64_t count, Step step, Sum sum, Acc... acc) {
  for (std::int64_t r = 0; r < count; ++r) {
    ((acc = step(acc)), ...);
    (opaque(acc), ...);
  }
  return (sum(acc) + ...);
}

template <class V, class Step, class Sum, std::size_t... I>
float run_all(std::int64_t count, V start, Step step, Sum sum, std::index_sequence<I...>) {
  return run_rounds(count, step, sum, ((void)I, start)...);
}

/// Runs the rounds and reports GFLOP/s (flops_per_step per accumulator step), summed over the threads.
template <class V, class Step, class Sum>
void measure(benchmark::State& state, V start, Step step, Sum sum, double flops_per_step) {
  for (auto _ : state)
    benchmark::DoNotOptimize(run_all(rounds, start, step, sum, std::make_index_sequence<accumulators>()));
  state.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * static_cast<double>(rounds) * accumulators * flops_per_step / 1e9,
      benchmark::Counter::kIsRate);
}

void fp32_fma(benchmark::State& state) {
#if defined(__AVX512F__)
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  measure(
      state, _mm512_set1_ps(0.001f), [a, b](__m512 c) { return _mm512_fmadd_ps(a, c, b); },
      sum_lanes<__m512>, 32.0);
#elif defined(__FMA__)
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  measure(
      state, _mm256_set1_ps(0.001f), [a, b](__m256 c) { return _mm256_fmadd_ps(a, c, b); },
      sum_lanes<__m256>, 16.0);
#else
  state.SkipWithError("the target has no FMA");
#endif
}

void bf16_dot(benchmark::State& state) {
#if defined(__AVX512BF16__)
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3a83);  // 1.0, ~1e-3
  measure(
      state, _mm512_set1_ps(0.001f), [a, b](__m512 c) { return _mm512_dpbf16_ps(c, a, b); },
      sum_lanes<__m512>, 64.0);
#else
  state.SkipWithError("the target has no AVX512-BF16");
#endif
}

}  // namespace

BENCHMARK(fp32_fma)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(bf16_dot)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK_MAIN();
