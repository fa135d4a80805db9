#pragma once
// Compiler and build-mode switches shared by every moecomp header. Plain C++17: no CUDA header here.
#include <moecomp/version.hpp>

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
#else
#define MOECOMP_LIKELY(x) (x)
#define MOECOMP_UNLIKELY(x) (x)
#endif
