#pragma once
// The vocabulary of <moecomp/io/safetensors.hpp>: the element types a safetensors file may hold, their
// names and sizes, and what the header says about one tensor. Documentation: docs/io.md, "safetensors".
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace io {

/// The dtypes moecomp reads and writes, named as in the header ("F32", "BF16", ...). The reference
/// implementation also knows F4, F6_*, F8_E8M0, F8_*FNUZ and C64; moecomp refuses those files by name.
/// The order is the reference's (increasing alignment), which its writer sorts by.
enum class safetensors_dtype : std::uint8_t {
  boolean,   // BOOL, one byte, 0 or 1
  u8,        // U8
  i8,        // I8
  f8_e5m2,   // F8_E5M2 (float8_e5m2)
  f8_e4m3,   // F8_E4M3 (float8_e4m3, torch's float8_e4m3fn)
  i16,       // I16
  u16,       // U16
  f16,       // F16 (half)
  bf16,      // BF16 (bfloat16)
  i32,       // I32
  u32,       // U32
  f32,       // F32
  f64,       // F64
  i64,       // I64
  u64        // U64
};

inline const char* to_string(safetensors_dtype dtype) noexcept {
  switch (dtype) {
    case safetensors_dtype::boolean: return "BOOL";
    case safetensors_dtype::u8: return "U8";
    case safetensors_dtype::i8: return "I8";
    case safetensors_dtype::f8_e5m2: return "F8_E5M2";
    case safetensors_dtype::f8_e4m3: return "F8_E4M3";
    case safetensors_dtype::i16: return "I16";
    case safetensors_dtype::u16: return "U16";
    case safetensors_dtype::f16: return "F16";
    case safetensors_dtype::bf16: return "BF16";
    case safetensors_dtype::i32: return "I32";
    case safetensors_dtype::u32: return "U32";
    case safetensors_dtype::f32: return "F32";
    case safetensors_dtype::f64: return "F64";
    case safetensors_dtype::i64: return "I64";
    case safetensors_dtype::u64: return "U64";
  }
  return "?";
}

/// The dtype named `text` exactly as the header spells it; nullopt for anything else.
inline std::optional<safetensors_dtype> try_parse_safetensors_dtype(std::string_view text) noexcept {
  for (int code = 0; code <= static_cast<int>(safetensors_dtype::u64); ++code) {
    const auto dtype = static_cast<safetensors_dtype>(code);
    if (text == to_string(dtype)) return dtype;
  }
  return std::nullopt;
}

/// The dtype named `text`; invalid_argument naming the accepted names otherwise.
inline safetensors_dtype parse_safetensors_dtype(std::string_view text) {
  const auto dtype = try_parse_safetensors_dtype(text);
  MOECOMP_EXPECTS(dtype.has_value(), "parse_safetensors_dtype: dtype must be one of BOOL, U8, I8, F8_E5M2, F8_E4M3, "
                  "I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64, got '", text, "'");
  return *dtype;
}

/// Bytes per element.
inline constexpr std::size_t item_size(safetensors_dtype dtype) noexcept {
  switch (dtype) {
    case safetensors_dtype::boolean:
    case safetensors_dtype::u8:
    case safetensors_dtype::i8:
    case safetensors_dtype::f8_e5m2:
    case safetensors_dtype::f8_e4m3: return 1;
    case safetensors_dtype::i16:
    case safetensors_dtype::u16:
    case safetensors_dtype::f16:
    case safetensors_dtype::bf16: return 2;
    case safetensors_dtype::i32:
    case safetensors_dtype::u32:
    case safetensors_dtype::f32: return 4;
    case safetensors_dtype::f64:
    case safetensors_dtype::i64:
    case safetensors_dtype::u64: return 8;
  }
  return 0;
}

/// Whether the dtype holds floating-point values (F8, F16, BF16, F32, F64).
inline constexpr bool is_floating(safetensors_dtype dtype) noexcept {
  return dtype == safetensors_dtype::f8_e5m2 || dtype == safetensors_dtype::f8_e4m3 ||
         dtype == safetensors_dtype::f16 || dtype == safetensors_dtype::bf16 || dtype == safetensors_dtype::f32 ||
         dtype == safetensors_dtype::f64;
}

/// The dtype of a C++ element type: float, double, bfloat16, half, float8_e4m3, float8_e5m2, bool and the
/// fixed-width integers. `value` is absent for any other type.
template <class T>
struct safetensors_dtype_of {};
template <> struct safetensors_dtype_of<bool> { static constexpr safetensors_dtype value = safetensors_dtype::boolean; };
template <> struct safetensors_dtype_of<std::uint8_t> { static constexpr safetensors_dtype value = safetensors_dtype::u8; };
template <> struct safetensors_dtype_of<std::int8_t> { static constexpr safetensors_dtype value = safetensors_dtype::i8; };
template <> struct safetensors_dtype_of<float8_e5m2> { static constexpr safetensors_dtype value = safetensors_dtype::f8_e5m2; };
template <> struct safetensors_dtype_of<float8_e4m3> { static constexpr safetensors_dtype value = safetensors_dtype::f8_e4m3; };
template <> struct safetensors_dtype_of<std::int16_t> { static constexpr safetensors_dtype value = safetensors_dtype::i16; };
template <> struct safetensors_dtype_of<std::uint16_t> { static constexpr safetensors_dtype value = safetensors_dtype::u16; };
template <> struct safetensors_dtype_of<half> { static constexpr safetensors_dtype value = safetensors_dtype::f16; };
template <> struct safetensors_dtype_of<bfloat16> { static constexpr safetensors_dtype value = safetensors_dtype::bf16; };
template <> struct safetensors_dtype_of<std::int32_t> { static constexpr safetensors_dtype value = safetensors_dtype::i32; };
template <> struct safetensors_dtype_of<std::uint32_t> { static constexpr safetensors_dtype value = safetensors_dtype::u32; };
template <> struct safetensors_dtype_of<float> { static constexpr safetensors_dtype value = safetensors_dtype::f32; };
template <> struct safetensors_dtype_of<double> { static constexpr safetensors_dtype value = safetensors_dtype::f64; };
template <> struct safetensors_dtype_of<std::int64_t> { static constexpr safetensors_dtype value = safetensors_dtype::i64; };
template <> struct safetensors_dtype_of<std::uint64_t> { static constexpr safetensors_dtype value = safetensors_dtype::u64; };

namespace detail {
template <class T, class = void>
struct has_safetensors_dtype : std::false_type {};
template <class T>
struct has_safetensors_dtype<T, std::void_t<decltype(safetensors_dtype_of<T>::value)>> : std::true_type {};
}  // namespace detail

/// Whether T is the element type of some safetensors dtype.
template <class T>
inline constexpr bool is_safetensors_element_v = detail::has_safetensors_dtype<std::remove_cv_t<T>>::value;

/// The types converting reads produce: float, double, bfloat16, half.
template <class T>
inline constexpr bool is_safetensors_conversion_target_v = moecomp::detail::is_weight_type_v<T>;

/// What the header says about one tensor. `begin` and `end` are byte offsets into the data section (the
/// bytes after the header), as in the header's "data_offsets".
struct safetensors_tensor_info {
  std::string name;
  safetensors_dtype dtype = safetensors_dtype::f32;
  std::vector<index_t> shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;

  /// The number of elements: the product of the shape (1 for a 0-d tensor).
  index_t size() const noexcept {
    index_t product = 1;
    for (index_t extent : shape) product *= extent;
    return product;
  }
  index_t ndim() const noexcept { return static_cast<index_t>(shape.size()); }
  std::uint64_t bytes() const noexcept { return end - begin; }
};

}  // namespace io
MOECOMP_NAMESPACE_END
