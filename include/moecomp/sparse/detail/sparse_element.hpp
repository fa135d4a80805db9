#pragma once
// The per-element rules of the sparse module, written once for the host and the device (MOECOMP_HOST_DEVICE):
// the magnitude key that pruning compares, the N:M keep rule, the radix-select step, the stored value decoders,
// and the 2:4 and bitmap structure lookups. The host code (prune_host.hpp, sparse_layout.hpp, restore_host.hpp)
// and the device kernels (<moecomp/cuda/sparse/>) call the same functions, so tests/test_prune.cpp and
// tests/test_residual.cpp exercise the device's per-element logic on the host.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {
namespace detail {

/// The unsigned key of |v|: its bit pattern without the sign. For finite values the integer order of the keys
/// is the order of the magnitudes (+0 and -0 share key 0).
template <class T>
struct magnitude_key;
template <>
struct magnitude_key<float> {
  using type = std::uint32_t;
  MOECOMP_HOST_DEVICE static type of(float v) noexcept { return moecomp::detail::float_bits(v) & 0x7fffffffu; }
  /// The magnitude a key stands for.
  MOECOMP_HOST_DEVICE static double value(type k) noexcept { return static_cast<double>(moecomp::detail::bits_float(k)); }
};
template <>
struct magnitude_key<double> {
  using type = std::uint64_t;
  MOECOMP_HOST_DEVICE static type of(double v) noexcept {
#if defined(__CUDA_ARCH__)
    const auto b = static_cast<std::uint64_t>(__double_as_longlong(v));
#else
    std::uint64_t b;
    std::memcpy(&b, &v, sizeof b);
#endif
    return b & 0x7fffffffffffffffull;
  }
  MOECOMP_HOST_DEVICE static double value(type k) noexcept {
#if defined(__CUDA_ARCH__)
    return __longlong_as_double(static_cast<long long>(k));
#else
    double v;
    std::memcpy(&v, &k, sizeof v);
    return v;
#endif
  }
};
template <>
struct magnitude_key<bfloat16> {
  using type = std::uint16_t;
  MOECOMP_HOST_DEVICE static type of(bfloat16 v) noexcept { return static_cast<std::uint16_t>(v.bits & 0x7fffu); }
  MOECOMP_HOST_DEVICE static double value(type k) noexcept {
    return static_cast<double>(moecomp::detail::bits_float(static_cast<std::uint32_t>(k) << 16));
  }
};
template <>
struct magnitude_key<half> {
  using type = std::uint16_t;
  MOECOMP_HOST_DEVICE static type of(half v) noexcept { return static_cast<std::uint16_t>(v.bits & 0x7fffu); }
  MOECOMP_HOST_DEVICE static double value(type k) noexcept { return static_cast<double>(half::to_float(k)); }
};

/// The type a restore adds in, on the host and the device: double if the base or the output is double, float
/// otherwise.
template <class Tb, class To>
using restore_accumulator_t =
    std::conditional_t<std::is_same_v<Tb, double> || std::is_same_v<To, double>, double, float>;

/// N:M pruning keeps entry q of a run of m entries when fewer than n entries of the run come before it in the
/// order "larger magnitude first, then lower index" (so ties go to the lowest index, as a stable sort would).
template <class T>
MOECOMP_HOST_DEVICE inline bool n_of_m_kept(const T* run, index_t m, index_t n, index_t q) noexcept {
  using key = typename magnitude_key<T>::type;
  const key mine = magnitude_key<T>::of(run[q]);
  index_t before = 0;
  for (index_t j = 0; j < m; ++j) {
    const key other = magnitude_key<T>::of(run[j]);
    before += (other > mine || (other == mine && j < q)) ? 1 : 0;
  }
  return before < n;
}

/// The matrix scope's keep rule as the device applies it, after its radix selects: every key above the
/// threshold key, and of the keys equal to it those at storage offsets up to last_tie (the ties' cut, found by a
/// second select over their offsets, so that the lowest flat indices win); nothing when keep_none.
template <class Key>
struct threshold_rule {
  Key threshold = 0;
  index_t last_tie = 0;
  bool keep_none = false;
};
template <class Key>
MOECOMP_HOST_DEVICE inline bool threshold_kept(const threshold_rule<Key>& rule, Key key, index_t offset) noexcept {
  if (rule.keep_none) return false;
  return key > rule.threshold || (key == rule.threshold && offset <= rule.last_tie);
}

/// One pass of an MSD radix select over `total_bits`-bit keys: a key's digit at `shift` (`width` bits), or -1
/// when its top `fixed_bits` differ from prefix's (it no longer competes). The device feeds these digits to
/// cub::DeviceHistogram, whose range [0, 2^width) drops the -1s.
template <class Key>
struct radix_digit_rule {
  Key prefix = 0;
  int total_bits = 0, fixed_bits = 0, shift = 0, width = 0;
  MOECOMP_HOST_DEVICE int operator()(Key k) const noexcept {
    if (fixed_bits > 0 && (k >> (total_bits - fixed_bits)) != (prefix >> (total_bits - fixed_bits))) return -1;
    return static_cast<int>((k >> shift) & ((Key(1) << width) - 1));
  }
};

/// One step of an MSD radix select over a histogram of `bins` digit counts. Largest first (descending): the
/// digit, from the top, at which the running count reaches `remaining`; smallest first: the same from the
/// bottom. The counts of the digits passed over are subtracted from `remaining`, which becomes the rank of the
/// answer among the keys with that digit. remaining must be in [1, sum of counts].
template <class Count>
MOECOMP_HOST_DEVICE inline std::uint32_t pick_digit(const Count* counts, std::uint32_t bins, bool descending,
                                                    index_t& remaining) noexcept {
  for (std::uint32_t step = 0; step < bins; ++step) {
    const std::uint32_t digit = descending ? bins - 1 - step : step;
    const auto count = static_cast<index_t>(counts[digit]);
    if (count >= remaining) return digit;
    remaining -= count;
  }
  return descending ? 0u : bins - 1;  // unreachable when remaining is in range
}

/// The MSD radix select, digit by digit from the top (radix_digit_bits per pass): counts(rule) returns the
/// 2^rule.width digit counts of the keys under `rule` (on the device a CUB histogram read back, in the host
/// tests a loop). Returns the key of rank `remaining` (1-based, largest first when descending); `remaining`
/// ends as that key's rank among the keys equal to it, `equal` as their number.
inline constexpr int radix_digit_bits = 8;
template <class Key, class Counts>
Key radix_select_loop(int total_bits, bool descending, index_t& remaining, index_t& equal, Counts&& counts) {
  radix_digit_rule<Key> rule;
  rule.total_bits = total_bits;
  while (rule.fixed_bits < total_bits) {
    rule.width = total_bits - rule.fixed_bits < radix_digit_bits ? total_bits - rule.fixed_bits : radix_digit_bits;
    rule.shift = total_bits - rule.fixed_bits - rule.width;
    const auto* histogram = counts(static_cast<const radix_digit_rule<Key>&>(rule));
    const std::uint32_t digit = pick_digit(histogram, std::uint32_t(1) << rule.width, descending, remaining);
    equal = static_cast<index_t>(histogram[digit]);
    rule.prefix = static_cast<Key>(rule.prefix | (static_cast<Key>(digit) << rule.shift));
    rule.fixed_bits += rule.width;
  }
  return rule.prefix;
}

/// Stored value decoders: the float a stored value's bits stand for. Stored values are finite (checked when
/// sections are read), so the fp16 decoder can be branch-free: the half's exponent and mantissa placed in a
/// float's bits are the value times 2^-112, subnormals included, exactly.
MOECOMP_HOST_DEVICE inline float float32_value(std::uint32_t bits) noexcept { return moecomp::detail::bits_float(bits); }
MOECOMP_HOST_DEVICE inline float float16_value(std::uint32_t bits) noexcept {
  const float magnitude = moecomp::detail::bits_float((bits & 0x7fffu) << 13) * 0x1p112f;
  return moecomp::detail::bits_float(moecomp::detail::float_bits(magnitude) | ((bits & 0x8000u) << 16));
}
MOECOMP_HOST_DEVICE inline float bfloat16_value(std::uint32_t bits) noexcept {
  return moecomp::detail::bits_float((bits & 0xffffu) << 16);
}

/// The 2:4 code of a group (4 bits): positions a < b of its two stored values, a in bits 0-1, b in bits 2-3.
/// Group g of a row is the nibble g % 2 (low nibble first) of the row's byte g / 2.
MOECOMP_HOST_DEVICE inline unsigned two_of_four_code(const std::uint8_t* row_codes, index_t group) noexcept {
  return (row_codes[group / 2] >> (4 * (group % 2))) & 0xfu;
}
MOECOMP_HOST_DEVICE inline bool two_of_four_code_valid(unsigned code) noexcept { return (code & 3u) < (code >> 2); }
/// Which of its group's two stored values position `position` (0..3) holds under `code`: 0 or 1, -1 for none.
MOECOMP_HOST_DEVICE inline int two_of_four_slot(unsigned code, unsigned position) noexcept {
  return position == (code & 3u) ? 0 : (position == (code >> 2) ? 1 : -1);
}

/// Whether column j of a bitmap row is stored (bit j % 8 of byte j / 8, least significant bit first).
MOECOMP_HOST_DEVICE inline bool bitmap_bit(const std::uint8_t* row_bits, index_t j) noexcept {
  return ((row_bits[j >> 3] >> (j & 7)) & 1u) != 0;
}

}  // namespace detail
}  // namespace sparse
MOECOMP_NAMESPACE_END
