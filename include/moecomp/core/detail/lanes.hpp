#pragma once
// Eight doubles (or 64-bit integers) as one value, with GCC / Clang vector extensions: element-wise arithmetic
// and comparisons (a true comparison is -1 in the integer lanes), lowered to whatever vector width the target
// has. MOECOMP_HAS_LANES says they exist; code that uses them keeps a plain loop for other compilers. Passed
// by reference only: a by-value 64-byte vector changes the ABI below AVX-512 (GCC's -Wpsabi).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

#if defined(__GNUC__) || defined(__clang__)
#define MOECOMP_HAS_LANES 1
typedef double lanes8 __attribute__((vector_size(64)));
typedef long long int_lanes8 __attribute__((vector_size(64)));
#endif

}  // namespace detail
MOECOMP_NAMESPACE_END
