// bfloat16 and half: hand-computed bit patterns (exact values, ties to even both ways, overflow,
// subnormals, signed zero, NaN, infinity), exhaustive round trips over all 65536 bit patterns, and
// float -> 16-bit conversion checked against a reference that rounds by searching the sorted table of
// representable values (no bit tricks shared with the implementation).
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/random.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

using moecomp::bfloat16;
using moecomp::half;

namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::uint32_t to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
std::uint16_t h(float x) { return half(x).bits; }
std::uint16_t b(float x) { return bfloat16(x).bits; }
float h2f(std::uint16_t bits) { return static_cast<float>(half::from_bits(bits)); }
float b2f(std::uint16_t bits) { return static_cast<float>(bfloat16::from_bits(bits)); }
bool same_float_bits(float x, float y) { return to_bits(x) == to_bits(y); }

// Value of a binary16 pattern straight from the IEEE 754 definition (finite patterns only).
double half_value_by_definition(std::uint16_t bits) {
  const int sign = bits >> 15;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}
// Value of a bfloat16 pattern from its definition (8-bit exponent, bias 127, 7 mantissa bits).
double bfloat16_value_by_definition(std::uint16_t bits) {
  const int sign = bits >> 15;
  const int exponent = (bits >> 7) & 0xff;
  const int mantissa = bits & 0x7f;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -133) : std::ldexp(128 + mantissa, exponent - 134);
  return sign ? -magnitude : magnitude;
}

// Round-to-nearest-even by table search: `values[k]` is the value of pattern k for the non-negative finite
// patterns, followed by one extra entry, the value the next exponent would have, standing for infinity (so
// that overflow rounds exactly as IEEE 754 says: ties at max + ulp/2 go to the even pattern, infinity).
struct table_rounding {
  std::vector<double> values;
  std::uint16_t infinity_bits;

  std::uint16_t round(float x) const {
    const double a = std::fabs(static_cast<double>(x));
    const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    if (a >= values.back()) return sign | infinity_bits;
    // values[hi - 1] <= a < values[hi]
    const std::size_t hi = static_cast<std::size_t>(std::upper_bound(values.begin(), values.end(), a) - values.begin());
    const std::size_t lo = hi - 1;
    if (a == values[lo]) return static_cast<std::uint16_t>(sign | lo);
    const double midpoint = (values[lo] + values[hi]) / 2;  // exact: 12 (resp. 9) significant bits
    std::size_t k = a < midpoint ? lo : a > midpoint ? hi : (lo % 2 == 0 ? lo : hi);
    return static_cast<std::uint16_t>(sign | (k == values.size() - 1 ? infinity_bits : k));
  }
};

table_rounding half_table() {
  table_rounding t;
  for (std::uint32_t k = 0; k < 0x7c00; ++k) t.values.push_back(half_value_by_definition(static_cast<std::uint16_t>(k)));
  t.values.push_back(65536.0);
  t.infinity_bits = 0x7c00;
  return t;
}
table_rounding bfloat16_table() {
  table_rounding t;
  for (std::uint32_t k = 0; k < 0x7f80; ++k)
    t.values.push_back(bfloat16_value_by_definition(static_cast<std::uint16_t>(k)));
  t.values.push_back(std::ldexp(1.0, 128));
  t.infinity_bits = 0x7f80;
  return t;
}

}  // namespace

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);
static_assert(std::is_trivially_copyable_v<half> && std::is_trivially_copyable_v<bfloat16>);
static_assert(std::is_standard_layout_v<half> && std::is_standard_layout_v<bfloat16>);
// Conversions are explicit both ways: no silent precision loss in overload resolution.
static_assert(!std::is_convertible_v<float, half> && !std::is_convertible_v<half, float>);
static_assert(!std::is_convertible_v<float, bfloat16> && !std::is_convertible_v<bfloat16, float>);
static_assert(std::is_constructible_v<half, float> && std::is_constructible_v<float, half>);
static_assert(std::is_same_v<moecomp::accumulator_t<half>, float>);
static_assert(std::is_same_v<moecomp::accumulator_t<const bfloat16>, float>);
static_assert(std::is_same_v<moecomp::accumulator_t<float>, float>);
static_assert(std::is_same_v<moecomp::accumulator_t<const double>, double>);

TEST_CASE("half: exact values") {
  CHECK(h(0.0f) == 0x0000);
  CHECK(h(1.0f) == 0x3c00);
  CHECK(h(-2.0f) == 0xc000);
  CHECK(h(0.5f) == 0x3800);
  CHECK(h(1.5f) == 0x3e00);
  CHECK(h(65504.0f) == 0x7bff);   // largest finite
  CHECK(h(-65504.0f) == 0xfbff);
  CHECK(h(0x1p-14f) == 0x0400);   // smallest normal
  CHECK(h(0x1p-24f) == 0x0001);   // smallest subnormal
  CHECK(h(0x3ffp-24f) == 0x03ff); // largest subnormal
  CHECK(h(1.0f / 3.0f) == 0x3555);  // (1 + 341/1024) * 2^-2 = 0.333251953125
  CHECK(h(0.1f) == 0x2e66);         // 0.0999755859375
  CHECK(h2f(0x3555) == 0.333251953125f);
  CHECK(h2f(0x2e66) == 0.0999755859375f);
  CHECK(h2f(0x3c00) == 1.0f);
  CHECK(h2f(0x7bff) == 65504.0f);
  CHECK(h2f(0xfbff) == -65504.0f);
  CHECK(h2f(0x0400) == 0x1p-14f);
  CHECK(h2f(0x0001) == 0x1p-24f);
  CHECK(h2f(0x03ff) == 0x3ffp-24f);
  CHECK(h2f(0x8001) == -0x1p-24f);
}

TEST_CASE("half: round to nearest, ties to even, in both directions") {
  // 1 + 2^-11 lies halfway between 1 (0x3c00, even) and 1 + 2^-10 (0x3c01): down to the even one.
  CHECK(h(1.0f + 0x1p-11f) == 0x3c00);
  // 1 + 3 * 2^-11 lies halfway between 0x3c01 (odd) and 0x3c02 (even): up.
  CHECK(h(1.0f + 0x3p-11f) == 0x3c02);
  CHECK(h(-(1.0f + 0x3p-11f)) == 0xbc02);
  // Just off the ties, the nearest wins.
  CHECK(h(1.0f + 0x1p-11f + 0x1p-23f) == 0x3c01);
  CHECK(h(1.0f + 0x1p-11f - 0x1p-23f) == 0x3c00);
  CHECK(h(1.0f + 0x3p-11f - 0x1p-23f) == 0x3c01);
  // Integers where the half ulp is 2: 2049 ties down to 2048 (0x6800), 2051 ties up to 2052 (0x6802).
  CHECK(h(2049.0f) == 0x6800);
  CHECK(h(2051.0f) == 0x6802);
  CHECK(h(2050.0f) == 0x6801);
  // Rounding up carries into the exponent: 2 - 2^-12 is above the midpoint of 0x3fff (2 - 2^-10) and 2.0.
  CHECK(h(2.0f - 0x1p-12f) == 0x4000);
  CHECK(h(2.0f - 0x1p-11f) == 0x4000);  // the tie between 0x3fff (odd) and 0x4000 (even)
  CHECK(h(2.0f - 0x3p-12f) == 0x3fff);
  CHECK(h2f(0x3fff) == 2.0f - 0x1p-10f);
}

TEST_CASE("half: overflow to infinity") {
  CHECK(h(65504.0f) == 0x7bff);
  CHECK(h(65519.99f) == 0x7bff);  // below the midpoint 65520
  CHECK(h(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  CHECK(h(65520.0f) == 0x7c00);   // the midpoint ties to the even pattern, infinity
  CHECK(h(-65520.0f) == 0xfc00);
  CHECK(h(65536.0f) == 0x7c00);
  CHECK(h(1e6f) == 0x7c00);
  CHECK(h(std::numeric_limits<float>::max()) == 0x7c00);
  CHECK(h(-std::numeric_limits<float>::max()) == 0xfc00);
  CHECK(h(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(h(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK(std::isinf(h2f(0x7c00)));
  CHECK(h2f(0x7c00) > 0);
  CHECK(h2f(0xfc00) < 0);
  CHECK(std::isinf(h2f(0xfc00)));
}

TEST_CASE("half: subnormals and underflow") {
  CHECK(h(0x1p-24f) == 0x0001);
  CHECK(h(0x1p-25f) == 0x0000);                            // exactly half the smallest subnormal: ties to 0
  CHECK(h(std::nextafter(0x1p-25f, 1.0f)) == 0x0001);      // just above: up to 2^-24
  CHECK(h(std::nextafter(0x1p-25f, 0.0f)) == 0x0000);
  CHECK(h(0x1p-26f) == 0x0000);
  CHECK(h(0.75f * 0x1p-24f) == 0x0001);                    // rounds up into the subnormal range
  CHECK(h(1.5f * 0x1p-24f) == 0x0002);                     // tie between 1 and 2: even
  CHECK(h(2.5f * 0x1p-24f) == 0x0002);                     // tie between 2 and 3: even
  CHECK(h(2.5f * 0x1p-24f + 0x1p-40f) == 0x0003);
  CHECK(h(1023.5f * 0x1p-24f) == 0x0400);                  // tie between 0x3ff and 0x400: out into the normals
  CHECK(h(std::nextafter(0x1p-14f, 0.0f)) == 0x0400);      // just below the smallest normal rounds up to it
  CHECK(h(1023.25f * 0x1p-24f) == 0x03ff);
  CHECK(h(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(h(std::numeric_limits<float>::min()) == 0x0000);
  CHECK(h(-0x1p-26f) == 0x8000);                           // underflow keeps the sign
  CHECK(h(-0x1p-24f) == 0x8001);
  // And back.
  CHECK(h2f(0x0002) == 0x1p-23f);
  CHECK(h2f(0x0155) == 341.0f * 0x1p-24f);
  CHECK(h2f(0x0200) == 0x1p-15f);
}

TEST_CASE("half: signed zero, infinity and NaN") {
  CHECK(h(-0.0f) == 0x8000);
  CHECK(same_float_bits(h2f(0x8000), -0.0f));
  CHECK(same_float_bits(h2f(0x0000), 0.0f));

  const float quiet = std::numeric_limits<float>::quiet_NaN();
  const std::uint16_t q = h(quiet);
  CHECK((q & 0x7c00) == 0x7c00);
  CHECK((q & 0x03ff) != 0);
  CHECK((q & 0x0200) != 0);  // quiet
  CHECK((h(-quiet) & 0x8000) == 0x8000);
  // A signalling NaN whose payload sits only in the low float bits must not turn into infinity.
  const std::uint16_t s = h(from_bits(0x7f800001u));
  CHECK((s & 0x7c00) == 0x7c00);
  CHECK((s & 0x0200) != 0);
  CHECK(h(from_bits(0xff800001u)) == 0xfe00);
  // The high payload bits survive.
  CHECK(h(from_bits(0x7fc0'2000u)) == (0x7e00 | 0x0001));
  CHECK(std::isnan(h2f(0x7e00)));
  CHECK(std::isnan(h2f(0x7c01)));
  CHECK(std::isnan(h2f(0xfd55)));
  CHECK(std::signbit(h2f(0xfe00)));
}

TEST_CASE("bfloat16: exact values, ties, overflow, subnormals, signed zero, NaN") {
  CHECK(b(1.0f) == 0x3f80);
  CHECK(b(-2.0f) == 0xc000);
  CHECK(b(0.0f) == 0x0000);
  CHECK(b(-0.0f) == 0x8000);
  CHECK(b(0.1f) == 0x3dcd);          // 0x3dcccccd: low half 0xcccd > 0x8000, up
  CHECK(b(3.14159265f) == 0x4049);   // 0x40490fdb: low half 0x0fdb < 0x8000, down
  CHECK(b2f(0x3dcd) == 0.10009765625f);
  CHECK(b2f(0x4049) == 3.140625f);
  // Ties: 0x3f808000 halfway between 0x3f80 (even) and 0x3f81: down; 0x3f818000: up to 0x3f82.
  CHECK(b(from_bits(0x3f808000u)) == 0x3f80);
  CHECK(b(from_bits(0x3f818000u)) == 0x3f82);
  CHECK(b(from_bits(0xbf818000u)) == 0xbf82);
  CHECK(b(from_bits(0x3f808001u)) == 0x3f81);
  CHECK(b(from_bits(0x3f817fffu)) == 0x3f81);
  // Carry into the exponent: 0x3fffc000 rounds up to 2.0.
  CHECK(b(from_bits(0x3fffc000u)) == 0x4000);
  // Overflow: the largest bfloat16 (0x7f7f) stays, the tie above it and FLT_MAX go to infinity.
  CHECK(b(from_bits(0x7f7f0000u)) == 0x7f7f);
  CHECK(b(from_bits(0x7f7f7fffu)) == 0x7f7f);
  CHECK(b(from_bits(0x7f7f8000u)) == 0x7f80);
  CHECK(b(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(b(-std::numeric_limits<float>::max()) == 0xff80);
  CHECK(b(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(b(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(b2f(0x7f7f) == 0x1.fep127f);
  // Subnormals (bfloat16 has float's exponent range, so these are float subnormals).
  CHECK(b(from_bits(0x00010000u)) == 0x0001);  // 2^-133, the smallest
  CHECK(b2f(0x0001) == 0x1p-133f);
  CHECK(b(from_bits(0x00008000u)) == 0x0000);  // half of it: ties to 0
  CHECK(b(from_bits(0x00008001u)) == 0x0001);
  CHECK(b(from_bits(0x00018000u)) == 0x0002);  // tie between 1 and 2: even
  CHECK(b(from_bits(0x007fffffu)) == 0x0080);  // the largest float subnormal rounds out to the smallest normal
  CHECK(b(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(b(-std::numeric_limits<float>::denorm_min()) == 0x8000);
  CHECK(same_float_bits(b2f(0x8000), -0.0f));
  // NaN stays NaN, quiet, with its sign, even when its payload is only in the dropped bits.
  CHECK(b(std::numeric_limits<float>::quiet_NaN()) == 0x7fc0);
  CHECK(b(from_bits(0x7f800001u)) == 0x7fc0);
  CHECK(b(from_bits(0xff800001u)) == 0xffc0);
  CHECK(b(from_bits(0x7fa00000u)) == 0x7fe0);  // signalling with a high payload: quietened, payload kept
  CHECK(std::isnan(b2f(0x7f81)));
  CHECK(std::isinf(b2f(0x7f80)));
}

TEST_CASE("half: every bit pattern decodes to its IEEE value and survives float -> half") {
  int decode_errors = 0;
  int round_trip_errors = 0;
  for (std::uint32_t k = 0; k < 0x10000; ++k) {
    const auto bits = static_cast<std::uint16_t>(k);
    const float f = h2f(bits);
    const bool is_nan = (bits & 0x7c00) == 0x7c00 && (bits & 0x03ff) != 0;
    const bool is_inf = (bits & 0x7fff) == 0x7c00;
    if (is_nan) {
      if (!std::isnan(f) || std::signbit(f) != ((bits & 0x8000) != 0)) ++decode_errors;
      const std::uint16_t back = h(f);
      // NaNs come back as NaN with the same sign and payload, quietened.
      if (back != (bits | 0x0200)) ++round_trip_errors;
      continue;
    }
    if (is_inf) {
      if (!std::isinf(f) || std::signbit(f) != ((bits & 0x8000) != 0)) ++decode_errors;
    } else if (static_cast<double>(f) != half_value_by_definition(bits) ||
               std::signbit(f) != ((bits & 0x8000) != 0)) {
      ++decode_errors;
    }
    if (h(f) != bits) ++round_trip_errors;
  }
  CHECK(decode_errors == 0);
  CHECK(round_trip_errors == 0);
}

TEST_CASE("bfloat16: every bit pattern decodes to its value and survives float -> bfloat16") {
  int decode_errors = 0;
  int round_trip_errors = 0;
  for (std::uint32_t k = 0; k < 0x10000; ++k) {
    const auto bits = static_cast<std::uint16_t>(k);
    const float f = b2f(bits);
    if (to_bits(f) != (k << 16)) ++decode_errors;  // bfloat16 is the upper half of a float, by definition
    const bool is_nan = (bits & 0x7f80) == 0x7f80 && (bits & 0x007f) != 0;
    if (is_nan) {
      if (!std::isnan(f)) ++decode_errors;
      if (b(f) != (bits | 0x0040)) ++round_trip_errors;
      continue;
    }
    if ((bits & 0x7f80) != 0x7f80 && static_cast<double>(f) != bfloat16_value_by_definition(bits)) ++decode_errors;
    if (b(f) != bits) ++round_trip_errors;
  }
  CHECK(decode_errors == 0);
  CHECK(round_trip_errors == 0);
}

TEST_CASE("float -> half and float -> bfloat16 agree with table rounding on millions of floats") {
  const table_rounding half_reference = half_table();
  const table_rounding bfloat16_reference = bfloat16_table();
  long half_mismatches = 0;
  long bfloat16_mismatches = 0;
  long tested = 0;
  std::vector<std::uint32_t> first_mismatches;  // float bit patterns, for the failure message
  auto check_one = [&](float x) {
    if (std::isnan(x)) return;
    ++tested;
    const bool half_ok = h(x) == half_reference.round(x);
    const bool bfloat16_ok = b(x) == bfloat16_reference.round(x);
    half_mismatches += half_ok ? 0 : 1;
    bfloat16_mismatches += bfloat16_ok ? 0 : 1;
    if ((!half_ok || !bfloat16_ok) && first_mismatches.size() < 8) first_mismatches.push_back(to_bits(x));
  };
  // Every rounding boundary of both formats: each representable value, each midpoint between neighbours,
  // and the floats either side of them, with both signs.
  for (const table_rounding* t : {&half_reference, &bfloat16_reference}) {
    for (std::size_t k = 0; k + 1 < t->values.size(); ++k) {
      const auto lo = static_cast<float>(t->values[k]);
      const auto mid = static_cast<float>((t->values[k] + t->values[k + 1]) / 2);
      for (float x : {lo, mid}) {
        for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, std::numeric_limits<float>::infinity())}) {
          check_one(y);
          check_one(-y);
        }
      }
    }
  }
  // Random bit patterns over the whole float range, and densely over half's range.
  moecomp::random_generator engine(20240611);
  for (int i = 0; i < 2'000'000; ++i) {
    const std::uint32_t u = engine.next_u32();
    check_one(from_bits(u));
    // exponent 100 .. 143: from below half's underflow threshold to above its overflow.
    const std::uint32_t exponent = 100 + static_cast<std::uint32_t>((u >> 23) % 44);
    check_one(from_bits((u & 0x807fffffu) | (exponent << 23)));
  }
  INFO("tested ", tested, " floats");
  std::string mismatches;
  for (std::uint32_t u : first_mismatches) mismatches += std::to_string(u) + " ";
  INFO("first mismatching float bit patterns: ", mismatches);
  CHECK(tested > 4'000'000);
  CHECK(half_mismatches == 0);
  CHECK(bfloat16_mismatches == 0);
}

TEST_CASE("convert_to goes through float for the 16-bit types") {
  CHECK(moecomp::convert_to<double>(half::from_bits(0x3555)) == 0.333251953125);
  CHECK(moecomp::convert_to<float>(bfloat16::from_bits(0x3dcd)) == 0.10009765625f);
  CHECK(moecomp::convert_to<half>(1.0).bits == 0x3c00);
  CHECK(moecomp::convert_to<half>(65520.0).bits == 0x7c00);
  CHECK(moecomp::convert_to<bfloat16>(-2).bits == 0xc000);
  CHECK(moecomp::convert_to<half>(bfloat16(0.1f)).bits == h(0.10009765625f));
  CHECK(moecomp::convert_to<int>(2.75) == 2);
  CHECK(moecomp::convert_to<double>(1.5f) == 1.5);
  // Arithmetic is float arithmetic on the converted values.
  const half x(1.5f), y(2.25f);
  CHECK(static_cast<float>(x) * static_cast<float>(y) == 3.375f);
  CHECK(half(static_cast<float>(x) * static_cast<float>(y)).bits == 0x42c0);
}
