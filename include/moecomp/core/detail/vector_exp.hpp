#pragma once
// e^x in double, written so that compilers vectorise the loops that call it (std::exp does not vectorise
// without -ffast-math): Sinkhorn's kernels, routing's softmax and sigmoid. One formula serves one double
// (exp_vectorizable, exp_into) and eight vector lanes (exp_lanes, GCC / Clang), with the same bits.
//
// x = k ln2 + r with |r| <= ln2 / 2 (Cody-Waite, two-part ln2); e^r by its degree-13 Taylor polynomial
// (truncation below 5e-18); 2^k applied as two normal powers of two, so results that underflow become
// subnormal or 0 and results that overflow become inf, as exp's do. Within 2 ulp of glibc's exp wherever
// e^x is normal (tests/test_vector_exp.cpp), 0 below about -745, inf above about 709.78. NaN is NOT
// propagated (a NaN argument gives 0 or inf): callers check their operands for NaN themselves. The same x
// gives the same bits on every call and thread; builds with and without FMA may differ in the last bit (the
// compiler may contract the polynomial).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/core/views.hpp>

#include <cstdint>
#include <cstring>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

// Bit casts for one double and, below, for eight lanes at once; by reference, since a by-value 64-byte vector
// changes the ABI below AVX-512 (GCC's -Wpsabi).
inline void to_bits(const double& x, std::uint64_t& bits) noexcept { std::memcpy(&bits, &x, sizeof x); }
inline void from_bits(const std::uint64_t& bits, double& x) noexcept { std::memcpy(&x, &bits, sizeof x); }
inline void to_signed(const std::uint64_t& u, std::int64_t& i) noexcept { i = static_cast<std::int64_t>(u); }
inline void to_unsigned(const std::int64_t& i, std::uint64_t& u) noexcept { u = static_cast<std::uint64_t>(i); }

#if defined(__GNUC__) || defined(__clang__)
#define MOECOMP_HAS_LANES 1
/// Eight doubles as one value (GCC / Clang vector extensions): element-wise arithmetic and comparisons
/// (a true comparison is -1 in the integer lanes), lowered to whatever vector width the target has.
typedef double lanes8 __attribute__((vector_size(64)));
typedef long long int_lanes8 __attribute__((vector_size(64)));
typedef unsigned long long uint_lanes8 __attribute__((vector_size(64)));

inline void load_lanes(lanes8& v, const double* p) noexcept { std::memcpy(&v, p, sizeof v); }
inline void store_lanes(double* p, const lanes8& v) noexcept { std::memcpy(p, &v, sizeof v); }
inline void broadcast(lanes8& v, double x) noexcept { v = lanes8{} + x; }
// Vector casts reinterpret the bits.
inline void to_bits(const lanes8& x, uint_lanes8& bits) noexcept { bits = (uint_lanes8)x; }
inline void from_bits(const uint_lanes8& bits, lanes8& x) noexcept { x = (lanes8)bits; }
inline void to_signed(const uint_lanes8& u, int_lanes8& i) noexcept { i = (int_lanes8)u; }
inline void to_unsigned(const int_lanes8& i, uint_lanes8& u) noexcept { u = (uint_lanes8)i; }
#endif

/// v = e^v for one double (V = double, U = std::uint64_t, S = std::int64_t) or eight lanes (lanes8,
/// uint_lanes8, int_lanes8): one formula, so both give the same bits.
template <class V, class U, class S>
inline void exp_in_place(V& v) noexcept {
  // Clamp to [-1100, 710] so that k below stays within what 2^k1 2^k2 can represent. Done on the bit pattern:
  // a floating-point comparison may trap on NaN, which keeps GCC from vectorising the select unless
  // -fno-trapping-math is given. Unsigned order of negative doubles is the order of their magnitudes; signed
  // order of positive doubles is their order. -1100.0 is 0xc091300000000000, 710.0 is 0x4086300000000000.
  U x_bits;
  to_bits(v, x_bits);
  x_bits = x_bits > 0xc091300000000000ull ? U{} + 0xc091300000000000ull : x_bits;
  S x_signed;
  to_signed(x_bits, x_signed);
  x_signed = x_signed > 0x4086300000000000ll ? S{} + 0x4086300000000000ll : x_signed;
  to_unsigned(x_signed, x_bits);
  V x;
  from_bits(x_bits, x);
  constexpr double log2e = 1.4426950408889634074;
  constexpr double ln2_hi = 6.93147180369123816490e-01;  // high bits of ln 2 (exact product with small k)
  constexpr double ln2_lo = 1.90821492927058770002e-10;
  constexpr double shifter = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer in the low bits
  const V shifted = x * log2e + shifter;
  const V k = shifted - shifter;
  const V r = (x - k * ln2_hi) - k * ln2_lo;  // |r| <= ln2 / 2
  // Taylor series of e^r to degree 13: truncation error < 5e-18 relative on |r| <= 0.347.
  V p = r * (1.0 / 6227020800.0) + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // 2^k as 2^k1 2^k2 with k1 = floor(k / 2): both factors are normal for k in [-1588, 1024]. The low mantissa
  // bits of `shifted` hold k + 2^51; offset by 2048 to keep everything non-negative for the shifts.
  U bits;
  to_bits(shifted, bits);
  const U k_offset = (bits & ((1ull << 52) - 1)) - (1ull << 51) + 2048;
  const U k1_offset = k_offset >> 1;  // floor(k / 2) + 1024
  const U k2_offset = k_offset - k1_offset;
  V scale1, scale2;
  from_bits((k1_offset - 1024 + 1023) << 52, scale1);
  from_bits((k2_offset - 1024 + 1023) << 52, scale2);
  v = p * scale1 * scale2;
}

/// e^x for one double, in a form compilers vectorise inside loops.
inline double exp_vectorizable(double x) noexcept {
  exp_in_place<double, std::uint64_t, std::int64_t>(x);
  return x;
}

/// y[i] = e^(x[i]) for i < n; x and y must not overlap.
inline void exp_into(const double* MOECOMP_RESTRICT x, double* MOECOMP_RESTRICT y, index_t n) noexcept {
  for (index_t i = 0; i < n; ++i) y[i] = exp_vectorizable(x[i]);
}

#if defined(MOECOMP_HAS_LANES)
/// v = e^v, lane by lane (the same bits as exp_vectorizable's).
inline void exp_lanes(lanes8& v) noexcept { exp_in_place<lanes8, uint_lanes8, int_lanes8>(v); }
#endif

}  // namespace detail
MOECOMP_NAMESPACE_END
