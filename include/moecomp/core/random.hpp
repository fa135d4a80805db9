#pragma once
// A seeded random generator whose every output is bit-identical on every platform, compiler and standard
// library. The standard distributions (std::normal_distribution, ...) are implementation-defined, so
// moecomp never uses them.
//
// Engine: xoshiro256** (Blackman & Vigna), state seeded by splitmix64 from (seed, stream). Integers are
// exact; uniform reals are k * 2^-53 (double) or k * 2^-24 (float); bounded integers use Lemire's
// unbiased multiply-and-reject; normals use Marsaglia's polar method with moecomp's own logarithm written
// with explicit std::fma, so no compiler contraction or libm difference can change a bit. (Assumes IEEE
// binary64 arithmetic with SSE2-style rounding, as on every x86-64 and AArch64 target.)
#include <moecomp/core/views.hpp>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <utility>

MOECOMP_NAMESPACE_BEGIN

namespace detail {

inline std::uint64_t splitmix64_next(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// High 64 bits of a 64 x 64 -> 128-bit product, in portable C++.
inline std::uint64_t mul_high_u64(std::uint64_t a, std::uint64_t b, std::uint64_t& low) noexcept {
  const std::uint64_t a_lo = a & 0xffffffffull, a_hi = a >> 32;
  const std::uint64_t b_lo = b & 0xffffffffull, b_hi = b >> 32;
  const std::uint64_t lo_lo = a_lo * b_lo;
  const std::uint64_t hi_lo = a_hi * b_lo;
  const std::uint64_t lo_hi = a_lo * b_hi;
  const std::uint64_t hi_hi = a_hi * b_hi;
  const std::uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xffffffffull) + lo_hi;
  low = (cross << 32) | (lo_lo & 0xffffffffull);
  return hi_hi + (hi_lo >> 32) + (cross >> 32);
}

/// Natural logarithm of a positive, finite double, reproducible bit for bit everywhere: exact range
/// reduction x = m 2^e with m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact), then log m = 2 atanh(s) with
/// s = f / (2 + f), written as f - (f^2/2 - s (f^2/2 + R(s^2))) so that the rounding error of s only
/// touches the small correction terms. Every multiply-add is an explicit std::fma (correctly rounded by
/// IEEE 754, unlike a libm log, and immune to -ffp-contract). Measured within 1 ulp of glibc's log, and
/// identical to it for about 96% of inputs (tests/test_random.cpp). Not for 0, negative, inf or NaN.
inline double reproducible_log(double x) noexcept {
  int exponent = 0;
  double m = std::frexp(x, &exponent);  // exact: x = m * 2^exponent, m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2.0;  // exact
    --exponent;
  }
  const double f = m - 1.0;        // exact (Sterbenz), |f| < 0.4143
  const double s = f / (2.0 + f);  // |s| < 0.1716
  const double s2 = s * s;
  // R(s^2) = 2 s^2/3 + 2 s^4/5 + ... + 2 s^24/25; the next term is below 2^-70 relative.
  constexpr double c[] = {2.0 / 25, 2.0 / 23, 2.0 / 21, 2.0 / 19, 2.0 / 17, 2.0 / 15,
                          2.0 / 13, 2.0 / 11, 2.0 / 9,  2.0 / 7,  2.0 / 5,  2.0 / 3};
  double p = c[0];
  for (int i = 1; i < 12; ++i) p = std::fma(p, s2, c[i]);
  const double half_f2 = 0.5 * (f * f);
  const double sum = std::fma(s2, p, half_f2);           // f^2/2 + R
  const double log_m = f - std::fma(-s, sum, half_f2);  // f - (f^2/2 - s (f^2/2 + R)) = 2 atanh(s)
  // ln 2 = ln2_hi + ln2_lo, ln2_hi with 32 significant bits: e * ln2_hi is exact for |e| < 2^21.
  constexpr double ln2_hi = 6.93147180369123816490e-01;
  constexpr double ln2_lo = 1.90821492927058770002e-10;
  const double e = static_cast<double>(exponent);
  return std::fma(e, ln2_hi, std::fma(e, ln2_lo, log_m));
}

}  // namespace detail

class random_generator {
 public:
  using result_type = std::uint64_t;

  /// Generator for `seed`; different `stream`s give independent sequences for the same seed (use one
  /// stream per thread or per restart to stay deterministic under parallelism).
  explicit random_generator(std::uint64_t seed = 0, std::uint64_t stream = 0) noexcept {
    std::uint64_t mix = seed;
    std::uint64_t s = detail::splitmix64_next(mix);
    std::uint64_t t = stream ^ 0x6a09e667f3bcc909ull;
    s ^= detail::splitmix64_next(t);
    for (auto& word : state_) word = detail::splitmix64_next(s);
  }

  static constexpr result_type min() noexcept { return 0; }
  static constexpr result_type max() noexcept { return std::numeric_limits<result_type>::max(); }

  /// Next 64 random bits (xoshiro256**). Also usable as a UniformRandomBitGenerator.
  result_type operator()() noexcept { return next_u64(); }
  std::uint64_t next_u64() noexcept {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }
  std::uint32_t next_u32() noexcept { return static_cast<std::uint32_t>(next_u64() >> 32); }

  /// Uniform integer in [0, bound), unbiased (Lemire). bound must be >= 1.
  std::uint64_t uniform_index(std::uint64_t bound) {
    MOECOMP_EXPECTS(bound >= 1, "random_generator::uniform_index: bound must be >= 1, got ", bound);
    std::uint64_t low = 0;
    std::uint64_t high = detail::mul_high_u64(next_u64(), bound, low);
    if (low < bound) {
      const std::uint64_t threshold = (0 - bound) % bound;
      while (low < threshold) high = detail::mul_high_u64(next_u64(), bound, low);
    }
    return high;
  }

  /// Uniform real in [0, 1): k * 2^-53 for double, k * 2^-24 for float.
  template <class T = double>
  T uniform() noexcept {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "uniform<T>: T is float or double");
    if constexpr (std::is_same_v<T, double>) {
      return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
    } else {
      return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f;
    }
  }
  /// Uniform real in [low, high) for low < high: fma(high - low, u, low), except that a result rounded up
  /// onto `high` (e.g. [1, 2) with u = 1 - 2^-24 in float) becomes the largest T below `high`.
  template <class T = double>
  T uniform(T low, T high) noexcept {
    const T value = std::fma(high - low, uniform<T>(), low);
    return value >= high && low < high ? std::nextafter(high, low) : value;
  }

  /// Standard normal variate (Marsaglia's polar method in double, then rounded to T).
  template <class T = double>
  T normal() noexcept {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "normal<T>: T is float or double");
    if (has_spare_) {
      has_spare_ = false;
      return static_cast<T>(spare_);
    }
    double u = 0, v = 0, s = 0;
    do {
      u = 2.0 * uniform<double>() - 1.0;  // exact
      v = 2.0 * uniform<double>() - 1.0;
      s = std::fma(u, u, v * v);
    } while (s >= 1.0 || s == 0.0 || s < 0x1.0p-1022);
    const double factor = std::sqrt(-2.0 * detail::reproducible_log(s) / s);
    spare_ = v * factor;
    has_spare_ = true;
    return static_cast<T>(u * factor);
  }
  /// Normal variate with the given mean and standard deviation: fma(stddev, z, mean).
  template <class T = double>
  T normal(T mean, T stddev) noexcept {
    return std::fma(stddev, normal<T>(), mean);
  }

  /// Fisher-Yates shuffle of [first, last) with uniform_index.
  template <class RandomIt>
  void shuffle(RandomIt first, RandomIt last) {
    const auto n = static_cast<std::uint64_t>(std::distance(first, last));
    for (std::uint64_t i = n; i > 1; --i) {
      const std::uint64_t j = uniform_index(i);
      using std::swap;
      swap(first[static_cast<std::ptrdiff_t>(i - 1)], first[static_cast<std::ptrdiff_t>(j)]);
    }
  }

  /// Fills a host matrix with uniform values in [low, high), row by row.
  template <class T>
  void fill_uniform(matrix_view<T> out, T low = T(0), T high = T(1)) noexcept {
    for (index_t i = 0; i < out.rows(); ++i)
      for (index_t j = 0; j < out.cols(); ++j) out(i, j) = uniform<T>(low, high);
  }
  /// Fills a host matrix with normal values, row by row.
  template <class T>
  void fill_normal(matrix_view<T> out, T mean = T(0), T stddev = T(1)) noexcept {
    for (index_t i = 0; i < out.rows(); ++i)
      for (index_t j = 0; j < out.cols(); ++j) out(i, j) = normal<T>(mean, stddev);
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  std::uint64_t state_[4]{};
  double spare_ = 0.0;
  bool has_spare_ = false;
};

MOECOMP_NAMESPACE_END
