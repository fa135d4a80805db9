#pragma once
// Floating-point storage types usable in plain host C++ (no CUDA headers): bfloat16 and half (IEEE
// binary16) store bits and convert to and from float with round-to-nearest-even; arithmetic is done by
// converting to float (moecomp accumulates half-precision data in float). Both are standard layout,
// trivially copyable and 2 bytes, so device buffers of __nv_bfloat16 / __half can be viewed as bfloat16 /
// half and back without copies. float8_e4m3 and float8_e5m2, the FP8 formats of checkpoints, only decode.
#include <moecomp/core/config.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN

namespace detail {
MOECOMP_HOST_DEVICE inline std::uint32_t float_bits(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
MOECOMP_HOST_DEVICE inline float bits_float(std::uint32_t u) noexcept {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace detail

/// bfloat16: 1 sign, 8 exponent, 7 mantissa bits (the upper half of a float).
struct bfloat16 {
  std::uint16_t bits = 0;

  bfloat16() = default;
  /// Round to nearest even; NaN stays NaN (quiet), overflow rounds to infinity as IEEE does.
  MOECOMP_HOST_DEVICE explicit bfloat16(float value) noexcept : bits(from_float(value)) {}
  MOECOMP_HOST_DEVICE explicit operator float() const noexcept {
    return detail::bits_float(static_cast<std::uint32_t>(bits) << 16);
  }
  MOECOMP_HOST_DEVICE static bfloat16 from_bits(std::uint16_t b) noexcept {
    bfloat16 h;
    h.bits = b;
    return h;
  }
  MOECOMP_HOST_DEVICE static std::uint16_t from_float(float value) noexcept {
    const std::uint32_t u = detail::float_bits(value);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
    const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>((u + rounding) >> 16);
  }
};

/// half: IEEE 754 binary16, 1 sign, 5 exponent, 10 mantissa bits, with subnormals.
struct half {
  std::uint16_t bits = 0;

  half() = default;
  /// Round to nearest even, with subnormals; overflow gives infinity; NaN stays NaN (quiet).
  MOECOMP_HOST_DEVICE explicit half(float value) noexcept : bits(from_float(value)) {}
  MOECOMP_HOST_DEVICE explicit operator float() const noexcept { return to_float(bits); }
  MOECOMP_HOST_DEVICE static half from_bits(std::uint16_t b) noexcept {
    half h;
    h.bits = b;
    return h;
  }

  MOECOMP_HOST_DEVICE static std::uint16_t from_float(float value) noexcept {
    const std::uint32_t u = detail::float_bits(value);
    const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
    const std::uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
    if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
    if (a >= 0x38800000u) {  // normal half: rebias exponent 127 -> 15, round the 13 dropped bits to even
      const std::uint32_t rebased = a - 0x38000000u;
      const std::uint32_t rounded = rebased + 0x0fffu + ((rebased >> 13) & 1u);
      return static_cast<std::uint16_t>(sign | (rounded >> 13));
    }
    if (a < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25): signed zero
    // subnormal half: value = mantissa * 2^-24, mantissa = round(a_real * 2^24)
    const std::uint32_t exponent = a >> 23;                      // 102 .. 112
    const std::uint32_t mantissa = (a & 0x7fffffu) | 0x800000u;  // with the implicit bit
    const std::uint32_t shift = 126u - exponent;                 // 14 .. 24
    const std::uint32_t half_ulp = 1u << (shift - 1);
    std::uint32_t result = mantissa >> shift;
    const std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
    if (remainder > half_ulp || (remainder == half_ulp && (result & 1u))) ++result;
    return static_cast<std::uint16_t>(sign | result);
  }

  MOECOMP_HOST_DEVICE static float to_float(std::uint16_t h) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exponent = (h >> 10) & 0x1fu;
    std::uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1fu) return detail::bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
    if (exponent != 0) return detail::bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
    if (mantissa == 0) return detail::bits_float(sign);
    // subnormal: normalise into a float
    std::uint32_t e = 113u;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    return detail::bits_float(sign | (e << 23) | ((mantissa & 0x3ffu) << 13));
  }
};

/// float8_e4m3: the OCP FP8 E4M3 format as torch's float8_e4m3fn and safetensors' F8_E4M3 store it: 1 sign,
/// 4 exponent (bias 7), 3 mantissa bits, subnormals, no infinity; S.1111.111 is NaN; the largest value is 448.
/// Storage only: it converts to float exactly (every value is a float), not from it.
struct float8_e4m3 {
  std::uint8_t bits = 0;

  MOECOMP_HOST_DEVICE static float8_e4m3 from_bits(std::uint8_t b) noexcept {
    float8_e4m3 f;
    f.bits = b;
    return f;
  }
  MOECOMP_HOST_DEVICE explicit operator float() const noexcept { return to_float(bits); }
  MOECOMP_HOST_DEVICE static float to_float(std::uint8_t b) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(b & 0x80u) << 24;
    const std::uint32_t exponent = (b >> 3) & 0xfu;
    const std::uint32_t mantissa = b & 0x7u;
    if (exponent == 0xfu && mantissa == 0x7u) return detail::bits_float(sign | 0x7fc00000u);  // NaN
    if (exponent != 0) return detail::bits_float(sign | ((exponent + 120u) << 23) | (mantissa << 20));
    // zero or subnormal: mantissa * 2^-9, exact in float
    return detail::bits_float(sign | detail::float_bits(static_cast<float>(mantissa) * 0.001953125f));
  }
};

/// float8_e5m2: the OCP FP8 E5M2 format (torch's float8_e5m2, safetensors' F8_E5M2): 1 sign, 5 exponent
/// (bias 15), 2 mantissa bits, subnormals, infinities and NaNs as in IEEE 754; the largest finite value is
/// 57344. Storage only: it converts to float exactly, not from it.
struct float8_e5m2 {
  std::uint8_t bits = 0;

  MOECOMP_HOST_DEVICE static float8_e5m2 from_bits(std::uint8_t b) noexcept {
    float8_e5m2 f;
    f.bits = b;
    return f;
  }
  MOECOMP_HOST_DEVICE explicit operator float() const noexcept { return to_float(bits); }
  /// E5M2 is the upper byte of an IEEE binary16, so the conversion is half's.
  MOECOMP_HOST_DEVICE static float to_float(std::uint8_t b) noexcept {
    return half::to_float(static_cast<std::uint16_t>(static_cast<std::uint16_t>(b) << 8));
  }
};

static_assert(sizeof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16> && std::is_standard_layout_v<bfloat16>);
static_assert(sizeof(half) == 2 && std::is_trivially_copyable_v<half> && std::is_standard_layout_v<half>);
static_assert(sizeof(float8_e4m3) == 1 && std::is_trivially_copyable_v<float8_e4m3>);
static_assert(sizeof(float8_e5m2) == 1 && std::is_trivially_copyable_v<float8_e5m2>);

namespace detail {
/// The element types of weights: float, double, bfloat16 or half (const or not).
template <class T>
inline constexpr bool is_weight_type_v =
    std::is_same_v<std::remove_cv_t<T>, float> || std::is_same_v<std::remove_cv_t<T>, double> ||
    std::is_same_v<std::remove_cv_t<T>, bfloat16> || std::is_same_v<std::remove_cv_t<T>, half>;
}  // namespace detail

/// The type moecomp accumulates a storage type in: float for bfloat16 / half, the type itself otherwise.
template <class T>
struct accumulator {
  using type = T;
};
template <>
struct accumulator<bfloat16> {
  using type = float;
};
template <>
struct accumulator<half> {
  using type = float;
};
template <class T>
using accumulator_t = typename accumulator<std::remove_cv_t<T>>::type;

/// Converts any supported element type to float / double and back (through float for 16-bit types).
template <class To, class From>
MOECOMP_HOST_DEVICE inline To convert_to(From value) noexcept {
  using F = std::remove_cv_t<From>;
  if constexpr (std::is_same_v<F, bfloat16> || std::is_same_v<F, half>) {
    return convert_to<To>(static_cast<float>(value));
  } else if constexpr (std::is_same_v<To, bfloat16> || std::is_same_v<To, half>) {
    return To(static_cast<float>(value));
  } else {
    return static_cast<To>(value);
  }
}

MOECOMP_NAMESPACE_END
