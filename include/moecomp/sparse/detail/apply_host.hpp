#pragma once
// The shared-base apply on the host, behind <moecomp/sparse/apply.hpp>:
//   1. y = x B^T over all routed rows at once (core's linear_abt: B read once, in panels);
//   2. for every (expert, block of 64 residual rows) work item, y(t, o) += sum_k R_e(o, k) x(t, k) for the rows t
//      of that expert: each residual row's stored entries are read once and applied to all of the expert's
//      rows together, from a transposed copy of those rows (x^T, so that the rows of one column are adjacent).
// Every y entry is written by one work item with a fixed order of additions: the same at any thread count.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/sparse/residual_types.hpp>
#include <moecomp/core/detail/linear.hpp>
#include <moecomp/core/detail/parallel.hpp>
#include <moecomp/sparse/detail/bitmap_simd.hpp>
#include <moecomp/sparse/detail/restore_host.hpp>
#include <moecomp/sparse/detail/sparse_layout.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {
namespace detail {

/// Residual rows per work item.
inline constexpr index_t apply_row_block = 64;

/// Experts with at least this many rows take the dense path: their residual rows decoded into a dense panel
/// and multiplied by one GEMM (GEMM speed on 4x the entries beats the scalar sparse loop from here on, measured
/// on the Mixtral shape); fewer rows take the sparse path. The path depends on the rows only.
inline constexpr index_t apply_dense_min_rows = 4;
/// The same for bitmap residuals where the AVX-512 kernel runs (16 positions per expand): it stays ahead of
/// the dense panels up to here.
inline constexpr index_t apply_dense_min_rows_simd = 32;

/// Residual rows per dense panel: about 256 KiB of floats.
inline index_t apply_panel_rows(index_t in) noexcept {
  return std::max<index_t>(1, std::min<index_t>(apply_row_block, (index_t{1} << 16) / std::max<index_t>(in, 1)));
}

/// Calls f(column, value) for the stored entries of row o, in column order.
template <class Codec, class F>
inline void for_each_stored(const sparse_matrix_view& r, const std::vector<std::uint64_t>& bitmap_starts, index_t o,
                            F&& f) {
  row_cursor c = row_start(r, bitmap_starts, o);
  const std::uint8_t* values = r.values();
  if (r.format() == sparse_format::csr16) {
    for (; c.k < c.end; ++c.k) f(static_cast<std::uint64_t>(load_le<std::uint16_t>(r.structure() + 2 * c.k)), Codec::load(values, c.k));
  } else if (r.format() == sparse_format::bitmap) {
    const index_t cols = r.cols();
    const auto row_bytes = static_cast<std::uint64_t>((cols + 7) / 8);
    const std::uint8_t* bits = r.structure() + static_cast<std::uint64_t>(o) * row_bytes;
    for (index_t w0 = 0; w0 < cols; w0 += 64) {
      const index_t width = std::min<index_t>(64, cols - w0);
      std::uint64_t word = 0;
      if (width == 64) {
        word = load_le<std::uint64_t>(bits + w0 / 8);
      } else {
        for (index_t b = 0; b < (width + 7) / 8; ++b) word |= static_cast<std::uint64_t>(bits[w0 / 8 + b]) << (8 * b);
      }
      for (; word != 0; word &= word - 1) f(static_cast<std::uint64_t>(w0) + trailing_zeros(word), Codec::load(values, c.k++));
    }
  } else {
    const std::uint8_t* codes = r.structure() + static_cast<std::uint64_t>(o) * static_cast<std::uint64_t>((r.cols() / 4 + 1) / 2);
    for (index_t g = 0; g < r.cols() / 4; ++g) {
      const unsigned code = two_of_four_code(codes, g);
      f(static_cast<std::uint64_t>(4 * g + (code & 3u)), Codec::load(values, c.k));
      f(static_cast<std::uint64_t>(4 * g + (code >> 2)), Codec::load(values, c.k + 1));
      c.k += 2;
    }
  }
}

/// Interleaved partial sums per token: entry number q adds into lane q mod 4, so that consecutive entries do
/// not wait on one another's additions; the lanes are summed at the end in order. A fixed order: the result
/// does not depend on the threads.
inline constexpr int apply_lanes = 4;

/// out[t] = sum over row o's stored entries (column k, value v) of v * xt[k * m + t0 + t], for the M tokens
/// t0 .. t0 + M - 1 (xt holds m tokens per column).
template <int M, class A, class Codec>
inline void residual_row_product(const sparse_matrix_view& r, const std::vector<std::uint64_t>& bitmap_starts,
                                 index_t o, const A* xt, index_t m, index_t t0, A* out) {
  A lanes[apply_lanes][M] = {};
  unsigned q = 0;
  for_each_stored<Codec>(r, bitmap_starts, o, [&](std::uint64_t column, float value) {
    const A v = static_cast<A>(value);
    const A* xk = xt + column * static_cast<std::uint64_t>(m) + static_cast<std::uint64_t>(t0);
    A* lane = lanes[q++ % apply_lanes];
    for (int t = 0; t < M; ++t) lane[t] += v * xk[t];
  });
  for (int t = 0; t < M; ++t) {
    A sum = lanes[0][t];
    for (int l = 1; l < apply_lanes; ++l) sum += lanes[l][t];
    out[t] = sum;
  }
}

/// out[t] for all m tokens, in chunks of up to 8 (each chunk one pass over the row's entries).
template <class A, class Codec>
inline void residual_row_products(const sparse_matrix_view& r, const std::vector<std::uint64_t>& bitmap_starts,
                                  index_t o, const A* xt, index_t m, A* out) {
  for (index_t t0 = 0; t0 < m; t0 += 8) {
    switch (std::min<index_t>(8, m - t0)) {
      case 1: residual_row_product<1, A, Codec>(r, bitmap_starts, o, xt, m, t0, out + t0); break;
      case 2: residual_row_product<2, A, Codec>(r, bitmap_starts, o, xt, m, t0, out + t0); break;
      case 3: residual_row_product<3, A, Codec>(r, bitmap_starts, o, xt, m, t0, out + t0); break;
      case 4: residual_row_product<4, A, Codec>(r, bitmap_starts, o, xt, m, t0, out + t0); break;
      case 5: residual_row_product<5, A, Codec>(r, bitmap_starts, o, xt, m, t0, out + t0); break;
      case 6: residual_row_product<6, A, Codec>(r, bitmap_starts, o, xt, m, t0, out + t0); break;
      case 7: residual_row_product<7, A, Codec>(r, bitmap_starts, o, xt, m, t0, out + t0); break;
      default: residual_row_product<8, A, Codec>(r, bitmap_starts, o, xt, m, t0, out + t0); break;
    }
  }
}

/// How an expert's residual meets its rows: the scalar row products (few rows), the AVX-512 bitmap kernel
/// (float, bitmap, fewer than apply_dense_min_rows_simd rows), or dense decoded panels and a GEMM (many rows).
/// It depends on the format and the rows only, never on the threads.
enum class apply_path { rows_scalar, bitmap_lanes, dense_panels };

template <class A>
apply_path choose_apply_path(const sparse_matrix_view& r, index_t m) noexcept {
#if MOECOMP_SPARSE_AVX512
  if constexpr (std::is_same_v<A, float>)
    if (r.format() == sparse_format::bitmap && m < apply_dense_min_rows_simd) return apply_path::bitmap_lanes;
#endif
  (void)r;
  return m < apply_dense_min_rows ? apply_path::rows_scalar : apply_path::dense_panels;
}

/// y (n x out) = x (n x in) (B + R_e)^T for the rows of each expert e (offsets[e] .. offsets[e + 1]).
template <class W, class A>
void shared_base_apply_host(const host_context& ctx, matrix_view<const A> x, matrix_view<const W> base,
                            const std::vector<sparse_matrix_view>& residuals, const index_t* offsets,
                            matrix_view<A> y) {
  const index_t n = x.rows(), in = base.cols(), out = base.rows();
  const auto experts = static_cast<index_t>(residuals.size());
  moecomp::detail::linear_abt<W, A>(ctx, x, base, y);
  if (n == 0 || out == 0) return;
  std::vector<apply_path> paths(static_cast<std::size_t>(experts));
  bool any_scalar = false, any_dense = false;
  index_t widest = 0;
  for (index_t e = 0; e < experts; ++e) {
    const index_t m = offsets[e + 1] - offsets[e];
    paths[static_cast<std::size_t>(e)] = choose_apply_path<A>(residuals[static_cast<std::size_t>(e)], m);
    any_scalar = any_scalar || (m > 0 && paths[static_cast<std::size_t>(e)] == apply_path::rows_scalar);
    any_dense = any_dense || (m > 0 && paths[static_cast<std::size_t>(e)] == apply_path::dense_panels);
    widest = std::max(widest, m);
  }
  // x^T for the experts on the scalar path: the expert's rows of column k adjacent, at xt + offsets[e] * in
  // + k * m_e (the other paths read x as it is).
  std::vector<A> xt(any_scalar ? static_cast<std::size_t>(n * in) : 0);
  if (any_scalar)
    moecomp::detail::parallel_for(experts, ctx.threads(), [&](index_t e, int) {
      if (paths[static_cast<std::size_t>(e)] != apply_path::rows_scalar) return;
      const index_t first = offsets[e], m = offsets[e + 1] - first;
      A* block = xt.data() + first * in;
      for (index_t t = 0; t < m; ++t) {
        const A* row = x.row_ptr(first + t);
        for (index_t k = 0; k < in; ++k) block[k * m + t] = row[k];
      }
    });
  std::vector<std::vector<std::uint64_t>> bitmap_starts(static_cast<std::size_t>(experts));
  std::vector<index_t> item_expert, item_block;
  const index_t blocks = (out + apply_row_block - 1) / apply_row_block;
  for (index_t e = 0; e < experts; ++e) {
    if (offsets[e + 1] == offsets[e]) continue;
    const sparse_matrix_view& r = residuals[static_cast<std::size_t>(e)];
    if (r.format() == sparse_format::bitmap) bitmap_starts[static_cast<std::size_t>(e)] = bitmap_row_starts(ctx, r);
    for (index_t b = 0; b < blocks; ++b) {
      item_expert.push_back(e);
      item_block.push_back(b);
    }
  }
  const int threads = std::max(ctx.threads(), 1);
  // Per thread: the row sums (widest), and for the dense path a panel of residual rows and its product.
  const index_t panel_rows = apply_panel_rows(in);
  const std::size_t per_thread = static_cast<std::size_t>(widest) +
                                 (any_dense ? static_cast<std::size_t>(panel_rows * in + widest * panel_rows) : 0);
  std::vector<std::vector<A>> scratch(static_cast<std::size_t>(threads), std::vector<A>(per_thread));
  moecomp::detail::parallel_for(static_cast<index_t>(item_expert.size()), threads, [&](index_t item, int thread) {
    const index_t e = item_expert[static_cast<std::size_t>(item)], b = item_block[static_cast<std::size_t>(item)];
    const index_t first = offsets[e], m = offsets[e + 1] - first;
    const sparse_matrix_view& r = residuals[static_cast<std::size_t>(e)];
    const std::vector<std::uint64_t>& starts = bitmap_starts[static_cast<std::size_t>(e)];
    A* acc = scratch[static_cast<std::size_t>(thread)].data();
    const index_t o_end = std::min(out, (b + 1) * apply_row_block);
    with_value_codec(r.values_dtype(), [&](auto codec) {
      using Codec = decltype(codec);
      const apply_path path = paths[static_cast<std::size_t>(e)];
#if MOECOMP_SPARSE_AVX512
      if constexpr (std::is_same_v<A, float>) {
        if (path == apply_path::bitmap_lanes) {
          for (index_t o = b * apply_row_block; o < o_end; ++o) {
            const std::uint64_t k = starts[static_cast<std::size_t>(o)];
            for (index_t t0 = 0; t0 < m; t0 += 8) {
              const float* xr = x.row_ptr(first + t0);
              float* sums = acc + t0;
              switch (std::min<index_t>(8, m - t0)) {
                case 1: bitmap_row_product<1, Codec::dtype>(r, o, k, xr, x.row_stride(), sums); break;
                case 2: bitmap_row_product<2, Codec::dtype>(r, o, k, xr, x.row_stride(), sums); break;
                case 3: bitmap_row_product<3, Codec::dtype>(r, o, k, xr, x.row_stride(), sums); break;
                case 4: bitmap_row_product<4, Codec::dtype>(r, o, k, xr, x.row_stride(), sums); break;
                case 5: bitmap_row_product<5, Codec::dtype>(r, o, k, xr, x.row_stride(), sums); break;
                case 6: bitmap_row_product<6, Codec::dtype>(r, o, k, xr, x.row_stride(), sums); break;
                case 7: bitmap_row_product<7, Codec::dtype>(r, o, k, xr, x.row_stride(), sums); break;
                default: bitmap_row_product<8, Codec::dtype>(r, o, k, xr, x.row_stride(), sums); break;
              }
            }
            for (index_t t = 0; t < m; ++t) y(first + t, o) += acc[t];
          }
          return;
        }
      }
#endif
      if (path == apply_path::rows_scalar) {
        const A* block = xt.data() + first * in;
        for (index_t o = b * apply_row_block; o < o_end; ++o) {
          residual_row_products<A, Codec>(r, starts, o, block, m, acc);
          for (index_t t = 0; t < m; ++t) y(first + t, o) += acc[t];
        }
        return;
      }
      // Many rows: the residual rows decoded into a dense panel, then one GEMM with the expert's rows.
      A* panel = acc + widest;
      A* product = panel + panel_rows * in;
      for (index_t o0 = b * apply_row_block; o0 < o_end; o0 += panel_rows) {
        const index_t rows = std::min(panel_rows, o_end - o0);
        for (index_t q = 0; q < rows; ++q) {
          A* row = panel + q * in;
          std::fill(row, row + in, A(0));
          row_cursor cursor = row_start(r, starts, o0 + q);
          add_sparse_chunk<A, Codec, true>(r, o0 + q, 0, in, cursor, row);
        }
        moecomp::detail::gemm_abt<A>(A(1), x.row_ptr(first), x.row_stride(), panel, in, m, rows, in, product, rows);
        for (index_t t = 0; t < m; ++t)
          for (index_t q = 0; q < rows; ++q) y(first + t, o0 + q) += product[t * rows + q];
      }
    });
  });
}

}  // namespace detail
}  // namespace sparse
MOECOMP_NAMESPACE_END
