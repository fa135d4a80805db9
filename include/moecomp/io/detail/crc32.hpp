#pragma once
// CRC-32 as zlib, gzip and PNG compute it (polynomial 0xEDB88320 reflected, initial and final XOR
// 0xFFFFFFFF), so that Python's zlib.crc32 checks moecomp's files. Slicing by 8 bytes, tables built at
// compile time.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/core/detail/little_endian.hpp>

#include <array>
#include <cstddef>
#include <cstdint>

MOECOMP_NAMESPACE_BEGIN
namespace io {
namespace detail {

using crc32_tables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr crc32_tables make_crc32_tables() {
  crc32_tables t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) != 0 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[0][i] = c;
  }
  for (std::size_t s = 1; s < 8; ++s)
    for (std::size_t i = 0; i < 256; ++i) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xffu];
  return t;
}

inline constexpr crc32_tables crc32_table = make_crc32_tables();

/// Continues a CRC-32 over `size` more bytes (start with crc = 0): crc32(crc32(0, a), b) == crc32(0, a + b).
inline std::uint32_t crc32(std::uint32_t crc, const std::uint8_t* data, std::size_t size) noexcept {
  std::uint32_t c = ~crc;
  const auto& t = crc32_table;
  for (; size >= 8; size -= 8, data += 8) {
    const std::uint32_t lo = moecomp::detail::load_le<std::uint32_t>(data) ^ c;
    const std::uint32_t hi = moecomp::detail::load_le<std::uint32_t>(data + 4);
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][hi & 0xff] ^
        t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
  }
  for (; size > 0; --size, ++data) c = t[0][(c ^ *data) & 0xffu] ^ (c >> 8);
  return ~c;
}

}  // namespace detail
}  // namespace io
MOECOMP_NAMESPACE_END
