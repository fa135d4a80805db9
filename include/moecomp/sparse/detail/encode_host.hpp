#pragma once
// Encoding a matrix into a compact format on the host, behind <moecomp/sparse/residual.hpp>.
//
// Two passes over row blocks: the first counts each row's stored entries (bits other than +0) and checks the
// 2:4 limit, the second writes each row into the range its prefix sum gives it. Every row writes only its
// own bytes, so the result is the same at any thread count.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/sparse/residual_types.hpp>
#include <moecomp/core/detail/parallel.hpp>
#include <moecomp/sparse/detail/sparse_layout.hpp>

#include <algorithm>
#include <type_traits>
#include <cstdint>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {
namespace detail {

/// Rows per work item of the row-parallel passes: enough items for dynamic balance, each at least ~64 KiB.
inline index_t sparse_row_block(index_t rows, index_t cols, int threads) {
  const index_t by_threads = (rows + 8 * std::max(threads, 1) - 1) / (8 * std::max(threads, 1));
  const index_t by_size = (index_t{1} << 16) / std::max<index_t>(cols, 1);
  return std::max<index_t>(1, std::min(by_threads, std::max<index_t>(by_size, 1)));
}

/// What the counting pass learns: the stored entries of each row, and the first 2:4 group holding more than
/// two (row -1 if none, or if the columns are not a multiple of 4), and the first entry whose value the value
/// dtype cannot hold (it would round to infinity; row -1 if none).
struct sparse_census {
  std::vector<std::uint64_t> row_counts;
  std::uint64_t total = 0;
  bool two_of_four_possible = false;
  index_t bad_row = -1, bad_group = -1;
  index_t overflow_row = -1, overflow_col = -1;
};

/// Whether v, stored as `values`, stays finite.
inline bool fits_value_dtype(value_dtype values, float v) noexcept {
  switch (values) {
    case value_dtype::float16: return (half::from_float(v) & 0x7c00u) != 0x7c00u;
    case value_dtype::bfloat16: return (bfloat16::from_float(v) & 0x7f80u) != 0x7f80u;
    case value_dtype::float32: break;
  }
  return (moecomp::detail::float_bits(v) & 0x7f800000u) != 0x7f800000u;
}

template <class T>
sparse_census count_stored(const host_context& ctx, matrix_view<const T> r, value_dtype values) {
  const index_t rows = r.rows(), cols = r.cols();
  sparse_census c;
  c.row_counts.assign(static_cast<std::size_t>(rows), 0);
  const bool groups_fit = cols % 4 == 0;
  std::vector<index_t> bad_group(static_cast<std::size_t>(rows), -1), overflow(static_cast<std::size_t>(rows), -1);
  const index_t block = sparse_row_block(rows, cols, ctx.threads());
  const index_t blocks = (rows + block - 1) / block;
  moecomp::detail::parallel_for(blocks, ctx.threads(), [&](index_t b, int) {
    for (index_t i = b * block; i < std::min(rows, (b + 1) * block); ++i) {
      const T* row = r.row_ptr(i);
      std::uint64_t n = 0;
      if (groups_fit) {
        for (index_t g = 0; g < cols / 4; ++g) {
          int in_group = 0;
          for (index_t q = 0; q < 4; ++q) in_group += entry_stored(row[4 * g + q]) ? 1 : 0;
          if (in_group > 2 && bad_group[static_cast<std::size_t>(i)] < 0) bad_group[static_cast<std::size_t>(i)] = g;
          n += static_cast<std::uint64_t>(in_group);
        }
      } else {
        for (index_t j = 0; j < cols; ++j) n += entry_stored(row[j]) ? 1u : 0u;
      }
      c.row_counts[static_cast<std::size_t>(i)] = n;
      // float32 from float / double: only doubles beyond float's range overflow; 16-bit dtypes can.
      if (values != value_dtype::float32 || std::is_same_v<T, double>)
        for (index_t j = 0; j < cols; ++j)
          if (!fits_value_dtype(values, convert_to<float>(row[j]))) {
            overflow[static_cast<std::size_t>(i)] = j;
            break;
          }
    }
  });
  for (index_t i = 0; i < rows; ++i) {
    c.total += c.row_counts[static_cast<std::size_t>(i)];
    if (c.overflow_row < 0 && overflow[static_cast<std::size_t>(i)] >= 0) {
      c.overflow_row = i;
      c.overflow_col = overflow[static_cast<std::size_t>(i)];
    }
    if (c.bad_row < 0 && bad_group[static_cast<std::size_t>(i)] >= 0) {
      c.bad_row = i;
      c.bad_group = bad_group[static_cast<std::size_t>(i)];
    }
  }
  c.two_of_four_possible = groups_fit && c.bad_row < 0;
  return c;
}

/// The smallest format that can hold the census (ties to csr16, then bitmap, then 2:4).
inline sparse_format smallest_format(const sparse_census& c, value_dtype values, index_t rows, index_t cols) {
  sparse_format best = sparse_format::bitmap;
  std::uint64_t best_bytes = sparse_section_lengths(best, values, rows, cols, c.total).total();
  if (cols <= csr16_max_cols) {
    const std::uint64_t bytes = sparse_section_lengths(sparse_format::csr16, values, rows, cols, c.total).total();
    if (bytes <= best_bytes) {
      best = sparse_format::csr16;
      best_bytes = bytes;
    }
  }
  if (c.two_of_four_possible) {
    const auto half = static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(cols) / 2;
    if (sparse_section_lengths(sparse_format::two_of_four, values, rows, cols, half).total() < best_bytes)
      best = sparse_format::two_of_four;
  }
  return best;
}

template <class T, class Codec>
void encode_rows(const host_context& ctx, matrix_view<const T> r, const sparse_census& c, sparse_format format,
                 Codec, sparse_matrix& out) {
  const index_t rows = r.rows(), cols = r.cols();
  std::vector<std::uint64_t> first(static_cast<std::size_t>(rows) + 1, 0);
  for (index_t i = 0; i < rows; ++i)
    first[static_cast<std::size_t>(i) + 1] =
        first[static_cast<std::size_t>(i)] +
        (format == sparse_format::two_of_four ? static_cast<std::uint64_t>(cols / 2) : c.row_counts[static_cast<std::size_t>(i)]);
  std::uint8_t* offsets = sparse_matrix_access::offsets(out);
  std::uint8_t* structure = sparse_matrix_access::structure(out);
  std::uint8_t* values = sparse_matrix_access::values(out);
  if (format == sparse_format::csr16)
    for (index_t i = 0; i <= rows; ++i) store_le<std::uint64_t>(offsets + 8 * i, first[static_cast<std::size_t>(i)]);
  const index_t block = sparse_row_block(rows, cols, ctx.threads());
  const index_t blocks = (rows + block - 1) / block;
  const auto bitmap_row_bytes = static_cast<std::uint64_t>((cols + 7) / 8);
  const auto code_row_bytes = static_cast<std::uint64_t>((cols / 4 + 1) / 2);
  moecomp::detail::parallel_for(blocks, ctx.threads(), [&](index_t b, int) {
    for (index_t i = b * block; i < std::min(rows, (b + 1) * block); ++i) {
      const T* row = r.row_ptr(i);
      std::uint64_t k = first[static_cast<std::size_t>(i)];
      if (format == sparse_format::csr16) {
        for (index_t j = 0; j < cols; ++j)
          if (entry_stored(row[j])) {
            store_le<std::uint16_t>(structure + 2 * k, static_cast<std::uint16_t>(j));
            Codec::store(values, k++, convert_to<float>(row[j]));
          }
      } else if (format == sparse_format::bitmap) {
        std::uint8_t* bits = structure + static_cast<std::uint64_t>(i) * bitmap_row_bytes;
        for (index_t j = 0; j < cols; ++j)
          if (entry_stored(row[j])) {
            bits[j / 8] = static_cast<std::uint8_t>(bits[j / 8] | (1u << (j % 8)));
            Codec::store(values, k++, convert_to<float>(row[j]));
          }
      } else {
        std::uint8_t* codes = structure + static_cast<std::uint64_t>(i) * code_row_bytes;
        for (index_t g = 0; g < cols / 4; ++g) {
          // The stored entries (at most two), then the lowest unstored positions until there are two.
          bool take[4] = {false, false, false, false};
          int taken = 0;
          for (int q = 0; q < 4; ++q)
            if (entry_stored(row[4 * g + q])) take[q] = true, ++taken;
          for (int q = 0; q < 4 && taken < 2; ++q)
            if (!take[q]) take[q] = true, ++taken;
          unsigned code = 0, slot = 0;
          for (unsigned q = 0; q < 4; ++q)
            if (take[q]) {
              code |= q << (2 * slot++);
              Codec::store(values, k++, convert_to<float>(row[4 * g + static_cast<index_t>(q)]));
            }
          codes[g / 2] = static_cast<std::uint8_t>(codes[g / 2] | (code << (4 * (g % 2))));
        }
      }
    }
  });
}

template <class T>
void encode_sparse_host(const host_context& ctx, const encode_params& params, matrix_view<const T> r,
                        sparse_matrix& out) {
  constexpr const char* fn = "encode_sparse";
  const index_t rows = r.rows(), cols = r.cols();
  const sparse_census census = count_stored(ctx, r, params.values);
  MOECOMP_EXPECTS(census.overflow_row < 0, fn, ": r's value ",
                  census.overflow_row < 0 ? 0.0 : convert_to<double>(r(census.overflow_row, census.overflow_col)),
                  " at (", census.overflow_row, ", ", census.overflow_col, ") must fit params.values ",
                  to_string(params.values), " (it rounds to infinity)");
  sparse_format format = params.format;
  if (format == sparse_format::automatic) format = smallest_format(census, params.values, rows, cols);
  if (format == sparse_format::csr16)
    MOECOMP_EXPECTS(cols <= csr16_max_cols, fn, ": params.format csr16 holds at most ", csr16_max_cols,
                    " columns (16-bit indices), got r with ", cols, " (use bitmap)");
  if (format == sparse_format::two_of_four) {
    MOECOMP_EXPECTS(cols % 4 == 0, fn, ": params.format 2:4 needs r's columns to be a multiple of 4, got ", cols);
    MOECOMP_EXPECTS(census.bad_row < 0, fn, ": params.format 2:4 needs at most 2 stored (non-zero) entries in each ",
                    "group of 4, got more in row ", census.bad_row, ", columns ", 4 * census.bad_group, " to ",
                    4 * census.bad_group + 3, " (prune with the 2:4 scope first)");
  }
  const std::uint64_t count = format == sparse_format::two_of_four
                                  ? static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(cols) / 2
                                  : census.total;
  sparse_matrix_access::reset(out, format, params.values, rows, cols, count);
  with_value_codec(params.values, [&](auto codec) { encode_rows<T>(ctx, r, census, format, codec, out); });
}

/// ||full - stored||_F^2 in double, where stored is `pruned` with each entry rounded to the value dtype (pruned
/// entries are 0): the error of pruning plus value rounding. Row sums added in row order.
template <class T>
double encoding_squared_error(const host_context& ctx, matrix_view<const T> full, matrix_view<const T> pruned,
                              value_dtype values) {
  std::vector<double> rows(static_cast<std::size_t>(full.rows()), 0.0);
  with_value_codec(values, [&](auto codec) {
    using Codec = decltype(codec);
    moecomp::detail::parallel_for(full.rows(), ctx.threads(), [&](index_t i, int) {
      double s = 0;
      for (index_t j = 0; j < full.cols(); ++j) {
        double q = 0;
        if (entry_stored(pruned(i, j))) {
          std::uint8_t bytes[4];
          Codec::store(bytes, 0, convert_to<float>(pruned(i, j)));
          q = static_cast<double>(Codec::load(bytes, 0));
        }
        const double d = convert_to<double>(full(i, j)) - q;
        s += d * d;
      }
      rows[static_cast<std::size_t>(i)] = s;
    });
  });
  double total = 0;
  for (double x : rows) total += x;
  return total;
}

}  // namespace detail
}  // namespace sparse
MOECOMP_NAMESPACE_END
