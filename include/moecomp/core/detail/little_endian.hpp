#pragma once
// Little-endian loads and stores of unsigned integers at any byte address: the byte order of moecomp's
// binary formats (residual sections and files). Plain (unaligned) loads on little-endian hosts, byte
// assembly elsewhere.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
inline constexpr bool host_is_little_endian = true;
#elif defined(_MSC_VER) || defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
inline constexpr bool host_is_little_endian = true;
#else
inline constexpr bool host_is_little_endian = false;
#endif

template <class U>
inline U load_le(const void* p) noexcept {
  static_assert(std::is_unsigned_v<U>, "load_le: U must be an unsigned integer");
  U value;
  if constexpr (host_is_little_endian) {
    std::memcpy(&value, p, sizeof value);
  } else {
    const auto* b = static_cast<const unsigned char*>(p);
    value = 0;
    for (std::size_t i = 0; i < sizeof(U); ++i) value = static_cast<U>(value | (static_cast<U>(b[i]) << (8 * i)));
  }
  return value;
}

template <class U>
inline void store_le(void* p, U value) noexcept {
  static_assert(std::is_unsigned_v<U>, "store_le: U must be an unsigned integer");
  if constexpr (host_is_little_endian) {
    std::memcpy(p, &value, sizeof value);
  } else {
    auto* b = static_cast<unsigned char*>(p);
    for (std::size_t i = 0; i < sizeof(U); ++i) b[i] = static_cast<unsigned char>(value >> (8 * i));
  }
}

}  // namespace detail
MOECOMP_NAMESPACE_END
