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
#include <moecomp/sparse/detail/encode_host.hpp>
#include <moecomp/sparse/detail/sparse_layout.hpp>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {
namespace detail {

/// The type a restore adds in: double if the base or the output is double, float otherwise.
template <class Tb, class To>
using restore_accumulator_t =
    std::conditional_t<std::is_same_v<Tb, double> || std::is_same_v<To, double>, double, float>;

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

/// Adds row s of r into acc (cols entries), or with Assign, writes its stored values over acc (decoding:
/// bit-exact, -0 included, which 0 + -0 would not be).
template <class Acc, class Codec, bool Assign>
inline void add_sparse_row(const sparse_matrix_view& r, const std::vector<std::uint64_t>& bitmap_starts, index_t s,
                           Acc* acc) {
  const std::uint8_t* values = r.values();
  const index_t cols = r.cols();
  if (r.format() == sparse_format::csr16) {
    const std::uint64_t begin = load_le<std::uint64_t>(r.offsets() + 8 * static_cast<std::uint64_t>(s));
    const std::uint64_t end = load_le<std::uint64_t>(r.offsets() + 8 * static_cast<std::uint64_t>(s + 1));
    const std::uint8_t* columns = r.structure();
    for (std::uint64_t k = begin; k < end; ++k)
      put<Assign>(acc[load_le<std::uint16_t>(columns + 2 * k)], static_cast<Acc>(Codec::load(values, k)));
  } else if (r.format() == sparse_format::bitmap) {
    const auto row_bytes = static_cast<std::uint64_t>((cols + 7) / 8);
    const std::uint8_t* bits = r.structure() + static_cast<std::uint64_t>(s) * row_bytes;
    std::uint64_t k = bitmap_starts[static_cast<std::size_t>(s)];
    std::uint64_t j = 0;
    for (; j + 8 <= row_bytes; j += 8)
      for (std::uint64_t word = load_le<std::uint64_t>(bits + j); word != 0; word &= word - 1)
        put<Assign>(acc[8 * j + trailing_zeros(word)], static_cast<Acc>(Codec::load(values, k++)));
    for (; j < row_bytes; ++j)
      for (std::uint64_t byte = bits[j]; byte != 0; byte &= byte - 1)
        put<Assign>(acc[8 * j + trailing_zeros(byte)], static_cast<Acc>(Codec::load(values, k++)));
  } else {
    const index_t groups = cols / 4;
    const std::uint8_t* codes = r.structure() + static_cast<std::uint64_t>(s) * static_cast<std::uint64_t>((groups + 1) / 2);
    std::uint64_t k = static_cast<std::uint64_t>(s) * static_cast<std::uint64_t>(cols / 2);
    for (index_t g = 0; g < groups; ++g) {
      const unsigned code = two_of_four_code(codes, g);
      put<Assign>(acc[4 * g + (code & 3u)], static_cast<Acc>(Codec::load(values, k)));
      put<Assign>(acc[4 * g + (code >> 2)], static_cast<Acc>(Codec::load(values, k + 1)));
      k += 2;
    }
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
  std::vector<std::vector<Acc>> scratch(std::is_same_v<To, Acc> ? 0 : static_cast<std::size_t>(threads));
  const index_t block = sparse_row_block(rows, cols, threads);
  with_value_codec(r.values_dtype(), [&](auto codec) {
    using Codec = decltype(codec);
    moecomp::detail::parallel_for((rows + block - 1) / block, threads, [&](index_t b, int thread) {
      Acc* acc = nullptr;
      if constexpr (!std::is_same_v<To, Acc>) {
        std::vector<Acc>& mine = scratch[static_cast<std::size_t>(thread)];
        if (mine.size() != static_cast<std::size_t>(cols)) mine.assign(static_cast<std::size_t>(cols), Acc(0));
        acc = mine.data();
      }
      for (index_t i = b * block; i < std::min(rows, (b + 1) * block); ++i) {
        const index_t s = permutation != nullptr ? permutation[i] : i;
        if constexpr (std::is_same_v<To, Acc>) acc = out.row_ptr(i);
        if (base != nullptr) {
          const Tb* from = base->row_ptr(s);
          for (index_t j = 0; j < cols; ++j) acc[j] = convert_to<Acc>(from[j]);
        } else {
          std::fill(acc, acc + cols, Acc(0));
        }
        if (base != nullptr)
          add_sparse_row<Acc, Codec, false>(r, bitmap_starts, s, acc);
        else
          add_sparse_row<Acc, Codec, true>(r, bitmap_starts, s, acc);
        if constexpr (!std::is_same_v<To, Acc>) {
          To* to = out.row_ptr(i);
          for (index_t j = 0; j < cols; ++j) to[j] = convert_to<To>(acc[j]);
        }
      }
    });
  });
}

}  // namespace detail
}  // namespace sparse
MOECOMP_NAMESPACE_END
