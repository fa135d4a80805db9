#pragma once
// Compiler and build-mode switches shared by every moecomp header. Plain C++17: no CUDA header here.
#include <moecomp/version.hpp>

// Every public header includes this one before any detail/ header; detail headers refuse to come first
// (core/detail/internal_header.hpp).
#define MOECOMP_PUBLIC_HEADER_INCLUDED 1

// Versioned inline namespace (as CCCL does): two copies of moecomp of different versions linked into one
// program do not collide, and user code keeps writing moecomp::.
#define MOECOMP_ABI_NAMESPACE v0_1
#define MOECOMP_NAMESPACE_BEGIN \
  namespace moecomp {           \
  inline namespace MOECOMP_ABI_NAMESPACE {
#define MOECOMP_NAMESPACE_END \
  }                           \
  }

// Functions that views expose to device code too. Only nvcc (or clang-cuda) sees the attributes.
#if defined(__CUDACC__)
#define MOECOMP_HOST_DEVICE __host__ __device__
#else
#define MOECOMP_HOST_DEVICE
#endif

// Exceptions: on unless the compiler says they are off or the user defines MOECOMP_NO_EXCEPTIONS.
#if !defined(MOECOMP_NO_EXCEPTIONS)
#if !(defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND))
#define MOECOMP_NO_EXCEPTIONS 1
#endif
#endif

#if defined(__GNUC__) || defined(__clang__)
#define MOECOMP_LIKELY(x) __builtin_expect(!!(x), 1)
#define MOECOMP_UNLIKELY(x) __builtin_expect(!!(x), 0)
// A pointer the function's other pointers never alias: lets hot loops vectorise without a runtime check.
#define MOECOMP_RESTRICT __restrict__
#else
#define MOECOMP_LIKELY(x) (x)
#define MOECOMP_UNLIKELY(x) (x)
#define MOECOMP_RESTRICT
#endif

// GCC before 13 warns, falsely, that the placeholder operand of its own AVX-512 intrinsics
// (`_mm512_undefined_*`) "may be used uninitialized" (GCC bug 105593) wherever those intrinsics are inlined,
// which Eigen's AVX-512 packet math does in every GEMM: at -march=x86-64-v4 with -Werror no build survives.
// GCC weighs the pragma state at every location of an inlining chain, so silencing the two warnings around
// moecomp's include of Eigen (core/detail/eigen.hpp) silences them for all code inlined from Eigen,
// whichever function it lands in. Nothing else is silenced, and no other compiler or target is touched.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13 && defined(__AVX512F__)
#define MOECOMP_GCC12_AVX512_WARNINGS_OFF                                 \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define MOECOMP_GCC12_AVX512_WARNINGS_ON _Pragma("GCC diagnostic pop")
#else
#define MOECOMP_GCC12_AVX512_WARNINGS_OFF
#define MOECOMP_GCC12_AVX512_WARNINGS_ON
#endif
