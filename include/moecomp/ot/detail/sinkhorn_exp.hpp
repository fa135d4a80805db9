#pragma once
// exp(x) in double, written so that compilers vectorise loops that call it (std::exp does not vectorise
// without -ffast-math). Accuracy: about 1 ulp over the normal range; subnormal results are produced (as
// std::exp does), exp(x) = 0 below about -745 and for -inf, +inf above about 709.78. NaN is NOT propagated
// (a NaN argument gives 0 or +inf): callers check their operands for NaN themselves.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>

#include <cstdint>
#include <cstring>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

inline double exp_vectorizable(double x) noexcept {
  // Clamp to [-1100, 710] so that k below stays within what 2^k1 * 2^k2 can represent. Done on the bit
  // pattern: a floating-point comparison may trap on NaN, which keeps GCC from vectorising the select
  // unless -fno-trapping-math is given. Unsigned order of negative doubles is the order of their magnitudes;
  // signed order of positive doubles is their order.
  std::uint64_t x_bits;  // -1100.0 is 0xc091300000000000, 710.0 is 0x4086300000000000
  std::memcpy(&x_bits, &x, 8);
  x_bits = x_bits > 0xc091300000000000ull ? 0xc091300000000000ull : x_bits;
  std::int64_t x_signed = static_cast<std::int64_t>(x_bits);
  x_signed = x_signed > std::int64_t(0x4086300000000000) ? std::int64_t(0x4086300000000000) : x_signed;
  std::memcpy(&x, &x_signed, 8);
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
  // 2^k as 2^k1 * 2^k2 with k1 = floor(k / 2): both factors are normal for k in [-1588, 1024].
  std::uint64_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  // The low mantissa bits hold k + 2^51; offset by 2048 to keep everything non-negative for the shifts.
  const std::uint64_t k_offset = (bits & ((std::uint64_t(1) << 52) - 1)) - (std::uint64_t(1) << 51) + 2048;
  const std::uint64_t k1_offset = k_offset >> 1;            // floor(k / 2) + 1024
  const std::uint64_t k2_offset = k_offset - k1_offset;     // k - floor(k / 2) + 1024
  const std::uint64_t bits1 = (k1_offset - 1024 + 1023) << 52;
  const std::uint64_t bits2 = (k2_offset - 1024 + 1023) << 52;
  double scale1, scale2;
  std::memcpy(&scale1, &bits1, sizeof scale1);
  std::memcpy(&scale2, &bits2, sizeof scale2);
  return p * scale1 * scale2;
}

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
