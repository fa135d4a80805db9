#pragma once
// Restore on the host, behind <moecomp/sparse/residual.hpp>: out(i, :) = base(p(i), :) + r(p(i), :), one
// streaming pass over row blocks. Each output row is built in the accumulation type (in place when the output
// is that type, else in a per-thread row) and written once; rows are independent, so the result is the same
// at any thread count.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/sparse/residual_types.hpp>
#include <moecomp/core/detail/parallel.hpp>
#include <moecomp/sparse/detail/bitmap_simd.hpp>
#include <moecomp/sparse/detail/encode_host.hpp>
#include <moecomp/sparse/detail/sparse_layout.hpp>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {
namespace detail {

template <bool Assign, class Acc>
inline void put(Acc& target, Acc value) noexcept {
  if constexpr (Assign)
    target = value;
  else
    target += value;
}

/// The index of the lowest set bit of a non-zero word.
inline std::uint64_t trailing_zeros(std::uint64_t word) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  return static_cast<std::uint64_t>(__builtin_ctzll(word));
#else
  std::uint64_t n = 0;
  for (; (word & 1u) == 0; word >>= 1) ++n;
  return n;
#endif
}

/// The first stored value of each bitmap row (rows + 1 entries), from the rows' popcounts.
inline std::vector<std::uint64_t> bitmap_row_starts(const host_context& ctx, const sparse_matrix_view& r) {
  const index_t rows = r.rows();
  const auto row_bytes = static_cast<std::uint64_t>((r.cols() + 7) / 8);
  std::vector<std::uint64_t> starts(static_cast<std::size_t>(rows) + 1, 0);
  const index_t block = sparse_row_block(rows, r.cols(), ctx.threads());
  moecomp::detail::parallel_for((rows + block - 1) / block, ctx.threads(), [&](index_t b, int) {
    for (index_t i = b * block; i < std::min(rows, (b + 1) * block); ++i) {
      const std::uint8_t* row = r.structure() + static_cast<std::uint64_t>(i) * row_bytes;
      std::uint64_t ones = 0, j = 0;
      for (; j + 8 <= row_bytes; j += 8) ones += static_cast<std::uint64_t>(popcount64(load_le<std::uint64_t>(row + j)));
      for (; j < row_bytes; ++j) ones += static_cast<std::uint64_t>(popcount8(row[j]));
      starts[static_cast<std::size_t>(i) + 1] = ones;
    }
  });
  for (index_t i = 0; i < rows; ++i) starts[static_cast<std::size_t>(i) + 1] += starts[static_cast<std::size_t>(i)];
  return starts;
}

/// The columns restore handles at a time: the base's chunk is read, the residual's entries in it added, and
/// the chunk written, so that the memory streams and the scattered adds overlap instead of alternating per row.
inline constexpr index_t restore_chunk = 512;

/// Where a row's stored values begin and, for csr16, end.
struct row_cursor {
  std::uint64_t k = 0, end = 0;
};

inline row_cursor row_start(const sparse_matrix_view& r, const std::vector<std::uint64_t>& bitmap_starts, index_t s) {
  row_cursor c;
  if (r.format() == sparse_format::csr16) {
    c.k = load_le<std::uint64_t>(r.offsets() + 8 * static_cast<std::uint64_t>(s));
    c.end = load_le<std::uint64_t>(r.offsets() + 8 * static_cast<std::uint64_t>(s + 1));
  } else if (r.format() == sparse_format::bitmap) {
    c.k = bitmap_starts[static_cast<std::size_t>(s)];
  } else {
    c.k = static_cast<std::uint64_t>(s) * static_cast<std::uint64_t>(r.cols() / 2);
  }
  return c;
}

/// Adds (or with Assign, writes: decoding is then bit-exact, -0 included, which 0 + -0 would not be) the
/// stored values of row s in columns [c0, c0 + n) into acc, which holds those columns (acc[0] is column c0).
/// c0 is a multiple of restore_chunk; the cursor advances past them.
template <class Acc, class Codec, bool Assign>
inline void add_sparse_chunk(const sparse_matrix_view& r, index_t s, index_t c0, index_t n, row_cursor& c, Acc* acc) {
  const std::uint8_t* values = r.values();
  if (r.format() == sparse_format::csr16) {
    const std::uint8_t* columns = r.structure();
    const auto limit = static_cast<std::uint64_t>(c0 + n);
    for (; c.k < c.end; ++c.k) {
      const std::uint64_t column = load_le<std::uint16_t>(columns + 2 * c.k);
      if (column >= limit) break;
      put<Assign>(acc[column - static_cast<std::uint64_t>(c0)], static_cast<Acc>(Codec::load(values, c.k)));
    }
  } else if (r.format() == sparse_format::bitmap) {
    const auto row_bytes = static_cast<std::uint64_t>((r.cols() + 7) / 8);
    const std::uint8_t* bits = r.structure() + static_cast<std::uint64_t>(s) * row_bytes + static_cast<std::uint64_t>(c0 / 8);
    for (index_t w0 = 0; w0 < n; w0 += 64) {
      const index_t width = std::min<index_t>(64, n - w0);
      std::uint64_t word = 0;
      if (width == 64) {
        word = load_le<std::uint64_t>(bits + w0 / 8);
      } else {
        for (index_t b = 0; b < (width + 7) / 8; ++b) word |= static_cast<std::uint64_t>(bits[w0 / 8 + b]) << (8 * b);
      }
      for (; word != 0; word &= word - 1)
        put<Assign>(acc[static_cast<std::uint64_t>(w0) + trailing_zeros(word)], static_cast<Acc>(Codec::load(values, c.k++)));
    }
  } else {
    const std::uint8_t* codes = r.structure() + static_cast<std::uint64_t>(s) * static_cast<std::uint64_t>((r.cols() / 4 + 1) / 2);
    for (index_t g = c0 / 4; g < (c0 + n) / 4; ++g) {
      const unsigned code = two_of_four_code(codes, g);
      Acc* group = acc + (4 * g - c0);
      put<Assign>(group[code & 3u], static_cast<Acc>(Codec::load(values, c.k)));
      put<Assign>(group[code >> 2], static_cast<Acc>(Codec::load(values, c.k + 1)));
      c.k += 2;
    }
  }
}

/// to[j] = the Acc value converted to To; bfloat16 without a branch, so that the loop vectorises.
template <class To, class Acc>
inline void store_chunk(const Acc* acc, To* to, index_t n) noexcept {
  if constexpr (std::is_same_v<To, bfloat16> && std::is_same_v<Acc, float>) {
    for (index_t j = 0; j < n; ++j) {
      const std::uint32_t u = moecomp::detail::float_bits(acc[j]);
      const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
      const std::uint32_t nan = (u >> 16) | 0x40u;
      to[j].bits = static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
    }
  } else {
    for (index_t j = 0; j < n; ++j) to[j] = convert_to<To>(acc[j]);
  }
}

/// out(i, :) = base(p(i), :) + r(p(i), :) (base absent: 0), p the identity when permutation is null.
template <class Tb, class To>
void restore_host(const host_context& ctx, const matrix_view<const Tb>* base, const sparse_matrix_view& r,
                  const index_t* permutation, matrix_view<To> out) {
  using Acc = restore_accumulator_t<Tb, To>;
  const index_t rows = r.rows(), cols = r.cols();
  const std::vector<std::uint64_t> bitmap_starts =
      r.format() == sparse_format::bitmap ? bitmap_row_starts(ctx, r) : std::vector<std::uint64_t>();
  const int threads = std::max(ctx.threads(), 1);
  const index_t block = sparse_row_block(rows, cols, threads);
  with_value_codec(r.values_dtype(), [&](auto codec) {
    using Codec = decltype(codec);
    moecomp::detail::parallel_for((rows + block - 1) / block, threads, [&](index_t b, int) {
      alignas(64) Acc scratch[restore_chunk];

      for (index_t i = b * block; i < std::min(rows, (b + 1) * block); ++i) {
        const index_t s = permutation != nullptr ? permutation[i] : i;
        row_cursor cursor = row_start(r, bitmap_starts, s);
        To* to_row = out.row_ptr(i);
        const Tb* from_row = base != nullptr ? base->row_ptr(s) : nullptr;
#if MOECOMP_SPARSE_AVX512
        if constexpr (bitmap_restore_simd_v<Tb, To>) {
          if (r.format() == sparse_format::bitmap) {
            restore_bitmap_row<Codec::dtype, Tb, To>(r, s, cursor.k, from_row, to_row);
            continue;
          }
        }
#endif
        for (index_t c0 = 0; c0 < cols; c0 += restore_chunk) {
          const index_t n = std::min(restore_chunk, cols - c0);
          Acc* acc = scratch;
          if constexpr (std::is_same_v<To, Acc>) acc = to_row + c0;
          if (from_row != nullptr) {
            for (index_t j = 0; j < n; ++j) acc[j] = convert_to<Acc>(from_row[c0 + j]);
            add_sparse_chunk<Acc, Codec, false>(r, s, c0, n, cursor, acc);
          } else {
            for (index_t j = 0; j < n; ++j) acc[j] = Acc(0);
            add_sparse_chunk<Acc, Codec, true>(r, s, c0, n, cursor, acc);
          }
          if constexpr (!std::is_same_v<To, Acc>) store_chunk<To, Acc>(acc, to_row + c0, n);
        }
      }
    });
  });
}

}  // namespace detail
}  // namespace sparse
MOECOMP_NAMESPACE_END
