#pragma once
// e^x in double, written so that compilers vectorise the loops that call it (std::exp does not vectorise
// without -ffast-math): Sinkhorn's kernels, routing's softmax and sigmoid.
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

/// e^x for one double, in a form compilers vectorise inside loops.
inline double exp_vectorizable(double x) noexcept {
  // Clamp to [-1100, 710] so that k below stays within what 2^k1 2^k2 can represent. Done on the bit pattern:
  // a floating-point comparison may trap on NaN, which keeps GCC from vectorising the select unless
  // -fno-trapping-math is given. Unsigned order of negative doubles is the order of their magnitudes; signed
  // order of positive doubles is their order. -1100.0 is 0xc091300000000000, 710.0 is 0x4086300000000000.
  std::uint64_t x_bits;
  std::memcpy(&x_bits, &x, sizeof x);
  x_bits = x_bits > 0xc091300000000000ull ? 0xc091300000000000ull : x_bits;
  std::int64_t x_signed = static_cast<std::int64_t>(x_bits);
  x_signed = x_signed > std::int64_t(0x4086300000000000) ? std::int64_t(0x4086300000000000) : x_signed;
  std::memcpy(&x, &x_signed, sizeof x);
  constexpr double log2e = 1.4426950408889634074;
  constexpr double ln2_hi = 6.93147180369123816490e-01;  // high bits of ln 2 (exact product with small k)
  constexpr double ln2_lo = 1.90821492927058770002e-10;
  constexpr double shifter = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer in the low bits
  const double shifted = x * log2e + shifter;
  const double k = shifted - shifter;
  const double r = (x - k * ln2_hi) - k * ln2_lo;  // |r| <= ln2 / 2
  // Taylor series of e^r to degree 13: truncation error < 5e-18 relative on |r| <= 0.347.
  double p = 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
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
  std::uint64_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  const std::uint64_t k_offset = (bits & ((std::uint64_t(1) << 52) - 1)) - (std::uint64_t(1) << 51) + 2048;
  const std::uint64_t k1_offset = k_offset >> 1;  // floor(k / 2) + 1024
  const std::uint64_t k2_offset = k_offset - k1_offset;
  const std::uint64_t bits1 = (k1_offset - 1024 + 1023) << 52, bits2 = (k2_offset - 1024 + 1023) << 52;
  double scale1, scale2;
  std::memcpy(&scale1, &bits1, sizeof scale1);
  std::memcpy(&scale2, &bits2, sizeof scale2);
  return p * scale1 * scale2;
}

/// y[i] = e^(x[i]) for i < n; x and y must not overlap.
inline void exp_into(const double* MOECOMP_RESTRICT x, double* MOECOMP_RESTRICT y, index_t n) noexcept {
  for (index_t i = 0; i < n; ++i) y[i] = exp_vectorizable(x[i]);
}

}  // namespace detail
MOECOMP_NAMESPACE_END
