#pragma once
// The byte layouts of the compact formats (docs/sparse.md, "Formats"): value codecs, the 2:4 group codes,
// and the complete check of untrusted sections. Shared by the encoders, restore and the file reader (through
// the public view_sparse_sections).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/sparse/residual_types.hpp>
#include <moecomp/core/detail/little_endian.hpp>
#include <moecomp/sparse/detail/sparse_element.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {
namespace detail {

using moecomp::detail::load_le;
using moecomp::detail::store_le;

/// The encoders' access to a sparse_matrix's sections.
struct sparse_matrix_access {
  static void reset(sparse_matrix& m, sparse_format format, value_dtype values, index_t rows, index_t cols,
                    std::uint64_t count) {
    const section_lengths s = sparse_section_lengths(format, values, rows, cols, count);
    m.rows_ = rows;
    m.cols_ = cols;
    m.format_ = format;
    m.values_dtype_ = values;
    m.count_ = count;
    m.offsets_.assign(static_cast<std::size_t>(s.offsets), 0);
    m.structure_.assign(static_cast<std::size_t>(s.structure), 0);
    m.values_.assign(static_cast<std::size_t>(s.values), 0);
  }
  static std::uint8_t* offsets(sparse_matrix& m) noexcept { return m.offsets_.data(); }
  static std::uint8_t* structure(sparse_matrix& m) noexcept { return m.structure_.data(); }
  static std::uint8_t* values(sparse_matrix& m) noexcept { return m.values_.data(); }
};

/// Views of checked sections (the public check_sparse_sections makes them).
struct sparse_view_access {
  static sparse_matrix_view make(index_t rows, index_t cols, sparse_format format, value_dtype values,
                                 std::uint64_t count, const std::uint8_t* offsets, const std::uint8_t* structure,
                                 const std::uint8_t* value_bytes) noexcept {
    return sparse_matrix_view(rows, cols, format, values, count, offsets, structure, value_bytes);
  }
};

/// Value codecs, one per value_dtype: the stored bits of a float, and back.
template <value_dtype D>
struct value_codec;
template <>
struct value_codec<value_dtype::float32> {
  static constexpr value_dtype dtype = value_dtype::float32;
  static constexpr std::size_t size = 4;
  static void store(std::uint8_t* values, std::uint64_t k, float v) noexcept {
    store_le<std::uint32_t>(values + 4 * k, moecomp::detail::float_bits(v));
  }
  static float load(const std::uint8_t* values, std::uint64_t k) noexcept {
    return float32_value(load_le<std::uint32_t>(values + 4 * k));
  }
};
template <>
struct value_codec<value_dtype::float16> {
  static constexpr value_dtype dtype = value_dtype::float16;
  static constexpr std::size_t size = 2;
  static void store(std::uint8_t* values, std::uint64_t k, float v) noexcept {
    store_le<std::uint16_t>(values + 2 * k, half::from_float(v));
  }
  /// Stored values are finite (checked), so the branch-free decoder holds (sparse_element.hpp).
  static float load(const std::uint8_t* values, std::uint64_t k) noexcept {
    return float16_value(load_le<std::uint16_t>(values + 2 * k));
  }
};
template <>
struct value_codec<value_dtype::bfloat16> {
  static constexpr value_dtype dtype = value_dtype::bfloat16;
  static constexpr std::size_t size = 2;
  static void store(std::uint8_t* values, std::uint64_t k, float v) noexcept {
    store_le<std::uint16_t>(values + 2 * k, bfloat16::from_float(v));
  }
  static float load(const std::uint8_t* values, std::uint64_t k) noexcept {
    return bfloat16_value(load_le<std::uint16_t>(values + 2 * k));
  }
};

/// Calls body(value_codec<D>{}) for the runtime dtype, so that loops are compiled per dtype.
template <class Body>
decltype(auto) with_value_codec(value_dtype d, Body&& body) {
  switch (d) {
    case value_dtype::float16: return body(value_codec<value_dtype::float16>{});
    case value_dtype::bfloat16: return body(value_codec<value_dtype::bfloat16>{});
    case value_dtype::float32: break;
  }
  return body(value_codec<value_dtype::float32>{});
}

/// Whether the k-th stored value's bits are those of a finite number.
inline bool stored_value_finite(value_dtype d, const std::uint8_t* values, std::uint64_t k) noexcept {
  switch (d) {
    case value_dtype::float32: return (load_le<std::uint32_t>(values + 4 * k) & 0x7f800000u) != 0x7f800000u;
    case value_dtype::float16: return (load_le<std::uint16_t>(values + 2 * k) & 0x7c00u) != 0x7c00u;
    case value_dtype::bfloat16: return (load_le<std::uint16_t>(values + 2 * k) & 0x7f80u) != 0x7f80u;
  }
  return false;
}

/// Whether the entry's bits are not those of +0: such an entry is stored (so that decoding is bit-exact,
/// -0 included).
template <class T>
inline bool entry_stored(T v) noexcept {
  if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, half>) {
    return v.bits != 0;
  } else {
    unsigned char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    for (unsigned char b : bytes)
      if (b != 0) return true;
    return false;
  }
}

inline int popcount8(std::uint8_t b) noexcept {
  int n = 0;
  for (; b != 0; b = static_cast<std::uint8_t>(b & (b - 1))) ++n;
  return n;
}
inline int popcount64(std::uint64_t w) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  return __builtin_popcountll(w);
#else
  int n = 0;
  for (; w != 0; w &= w - 1) ++n;
  return n;
#endif
}

/// The complete check of sections that did not come from an encoder: an empty string if they describe a
/// valid matrix, else what is wrong (one phrase, no function name). Checks the shape limits, the section
/// lengths, and every byte: row offsets from 0, non-decreasing, ending at count; column indices strictly
/// increasing within a row and below cols; bitmap padding bits clear and popcount equal to count; 2:4 codes
/// with two distinct positions in order and clear padding; every value finite.
inline std::string sparse_sections_problem(index_t rows, index_t cols, sparse_format format, value_dtype values_dtype,
                                           std::uint64_t count, const std::uint8_t* offsets, std::uint64_t offsets_length,
                                           const std::uint8_t* structure, std::uint64_t structure_length,
                                           const std::uint8_t* values, std::uint64_t values_length) {
  using moecomp::detail::concat;
  if (format != sparse_format::csr16 && format != sparse_format::bitmap && format != sparse_format::two_of_four)
    return concat("the format code must be 0 (csr16), 1 (bitmap) or 2 (2:4), got ", static_cast<int>(format));
  if (values_dtype != value_dtype::float32 && values_dtype != value_dtype::float16 &&
      values_dtype != value_dtype::bfloat16)
    return concat("the value dtype code must be 0 (fp32), 1 (fp16) or 2 (bf16), got ", static_cast<int>(values_dtype));
  if (!sparse_shape_fits(rows, cols))
    return concat("the shape ", rows, " x ", cols, " is negative or beyond the formats' limit of 2^56 entries");
  const auto size = static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(cols);
  if (count > size) return concat("the stored count ", count, " exceeds the ", size, " entries of the matrix");
  if (format == sparse_format::csr16 && cols > csr16_max_cols)
    return concat("csr16 holds at most ", csr16_max_cols, " columns, got ", cols);
  if (format == sparse_format::two_of_four) {
    if (cols % 4 != 0) return concat("2:4 needs a column count divisible by 4, got ", cols);
    if (count != size / 2) return concat("2:4 stores rows x cols / 2 = ", size / 2, " values, got a count of ", count);
  }
  const section_lengths expected = sparse_section_lengths(format, values_dtype, rows, cols, count);
  const char* names[3] = {"row offsets", "structure", "values"};
  const std::uint64_t got[3] = {offsets_length, structure_length, values_length};
  const std::uint64_t want[3] = {expected.offsets, expected.structure, expected.values};
  const std::uint8_t* data[3] = {offsets, structure, values};
  for (int s = 0; s < 3; ++s) {
    if (got[s] != want[s])
      return concat("the ", names[s], " section must be ", want[s], " bytes for this shape, format and count, got ",
                    got[s]);
    if (want[s] != 0 && data[s] == nullptr) return concat("the ", names[s], " section is null");
  }
  if (format == sparse_format::csr16) {
    if (load_le<std::uint64_t>(offsets) != 0)
      return concat("row offset 0 must be 0, got ", load_le<std::uint64_t>(offsets));
    std::uint64_t previous = 0;
    for (index_t i = 0; i < rows; ++i) {
      const std::uint64_t next = load_le<std::uint64_t>(offsets + 8 * static_cast<std::uint64_t>(i + 1));
      if (next < previous || next > count)
        return concat("row offsets must be non-decreasing from 0 to the count ", count, ", got ", next,
                      " after ", previous, " at row ", i);
      for (std::uint64_t k = previous; k < next; ++k) {
        const std::uint16_t column = load_le<std::uint16_t>(structure + 2 * k);
        if (static_cast<index_t>(column) >= cols)
          return concat("column index ", column, " of row ", i, " is out of range (", cols, " columns)");
        if (k > previous && column <= load_le<std::uint16_t>(structure + 2 * (k - 1)))
          return concat("the column indices of row ", i, " must be strictly increasing, got ", column, " after ",
                        load_le<std::uint16_t>(structure + 2 * (k - 1)));
      }
      previous = next;
    }
    if (previous != count) return concat("the last row offset must be the count ", count, ", got ", previous);
  } else if (format == sparse_format::bitmap) {
    const auto row_bytes = static_cast<std::uint64_t>((cols + 7) / 8);
    const auto tail_bits = static_cast<unsigned>(cols % 8);
    const std::uint8_t padding_mask = tail_bits == 0 ? 0 : static_cast<std::uint8_t>(0xffu << tail_bits);
    std::uint64_t ones = 0;
    for (index_t i = 0; i < rows; ++i) {
      const std::uint8_t* row = structure + static_cast<std::uint64_t>(i) * row_bytes;
      if (row_bytes != 0 && (row[row_bytes - 1] & padding_mask) != 0)
        return concat("the padding bits after column ", cols - 1, " of bitmap row ", i, " must be 0");
      std::uint64_t j = 0;
      for (; j + 8 <= row_bytes; j += 8) ones += static_cast<std::uint64_t>(popcount64(load_le<std::uint64_t>(row + j)));
      for (; j < row_bytes; ++j) ones += static_cast<std::uint64_t>(popcount8(row[j]));
    }
    if (ones != count)
      return concat("the bitmap marks ", ones, " entries but the count of stored values is ", count);
  } else {
    const index_t groups = cols / 4;
    const auto row_bytes = static_cast<std::uint64_t>((groups + 1) / 2);
    for (index_t i = 0; i < rows; ++i) {
      const std::uint8_t* row = structure + static_cast<std::uint64_t>(i) * row_bytes;
      for (index_t g = 0; g < groups; ++g)
        if (!two_of_four_code_valid(two_of_four_code(row, g)))
          return concat("the 2:4 code ", two_of_four_code(row, g), " of row ", i, ", group ", g,
                        " does not name two positions in increasing order");
      if (groups % 2 == 1 && (row[row_bytes - 1] >> 4) != 0)
        return concat("the padding nibble of 2:4 row ", i, " must be 0");
    }
  }
  for (std::uint64_t k = 0; k < count; ++k)
    if (!stored_value_finite(values_dtype, values, k)) return concat("stored value ", k, " is not finite");
  return {};
}

}  // namespace detail
}  // namespace sparse
MOECOMP_NAMESPACE_END
