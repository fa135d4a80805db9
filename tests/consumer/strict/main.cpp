// Entry point of the strict consumer. algorithms.cpp may be compiled for a newer CPU than this machine's
// (by default -march=x86-64-v4, AVX-512), so this file, compiled without -march, first asks the CPU for
// MOECOMP_STRICT_REQUIRED_CPU_FEATURE (a __builtin_cpu_supports name; undefined: run always). Without it the
// program was only compiled, which is what the strict-flags check is about, and exits 77: skipped, for
// tests/consumer/run_consumer.cmake.
#include <cstdio>

int run_all_algorithms();  // algorithms.cpp: 0 when every answer is right

namespace {
constexpr int exit_skipped = 77;

bool cpu_has_required_feature() {
#if !defined(MOECOMP_STRICT_REQUIRED_CPU_FEATURE)
  return true;
#elif defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports(MOECOMP_STRICT_REQUIRED_CPU_FEATURE) != 0;
#else
  return false;  // x86 feature names mean nothing on other architectures
#endif
}
}  // namespace

int main() {
  if (!cpu_has_required_feature()) {
#if defined(MOECOMP_STRICT_REQUIRED_CPU_FEATURE)
    std::printf("CPU lacks %s: compiled only, not run\n", MOECOMP_STRICT_REQUIRED_CPU_FEATURE);
#endif
    return exit_skipped;
  }
  return run_all_algorithms();
}
