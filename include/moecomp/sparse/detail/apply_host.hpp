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
#include <moecomp/sparse/detail/restore_host.hpp>
#include <moecomp/sparse/detail/sparse_layout.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {
namespace detail {

/// Residual rows per work item of the sparse pass.
inline constexpr index_t apply_row_block = 64;

/// acc[t] += sum over row o's stored entries (column k, value v) of v * xt[k * m + t], t < m.
template <class A, class Codec>
inline void residual_row_product(const sparse_matrix_view& r, const std::vector<std::uint64_t>& bitmap_starts,
                                 index_t o, const A* xt, index_t m, A* acc) {
  row_cursor c = row_start(r, bitmap_starts, o);
  const std::uint8_t* values = r.values();
  auto add = [&](std::uint64_t column, std::uint64_t k) {
    const A v = static_cast<A>(Codec::load(values, k));
    const A* xk = xt + column * static_cast<std::uint64_t>(m);
    for (index_t t = 0; t < m; ++t) acc[t] += v * xk[t];
  };
  if (r.format() == sparse_format::csr16) {
    for (; c.k < c.end; ++c.k) add(load_le<std::uint16_t>(r.structure() + 2 * c.k), c.k);
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
      for (; word != 0; word &= word - 1) add(static_cast<std::uint64_t>(w0) + trailing_zeros(word), c.k++);
    }
  } else {
    const std::uint8_t* codes = r.structure() + static_cast<std::uint64_t>(o) * static_cast<std::uint64_t>((r.cols() / 4 + 1) / 2);
    for (index_t g = 0; g < r.cols() / 4; ++g) {
      const unsigned code = two_of_four_code(codes, g);
      add(static_cast<std::uint64_t>(4 * g + (code & 3u)), c.k);
      add(static_cast<std::uint64_t>(4 * g + (code >> 2)), c.k + 1);
      c.k += 2;
    }
  }
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
  // x^T per expert: the expert's rows of column k adjacent, at xt + offsets[e] * in + k * m_e.
  std::vector<A> xt(static_cast<std::size_t>(n * in));
  moecomp::detail::parallel_for(experts, ctx.threads(), [&](index_t e, int) {
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
  index_t widest = 0;
  for (index_t e = 0; e < experts; ++e) widest = std::max(widest, offsets[e + 1] - offsets[e]);
  const int threads = std::max(ctx.threads(), 1);
  std::vector<std::vector<A>> sums(static_cast<std::size_t>(threads), std::vector<A>(static_cast<std::size_t>(widest)));
  moecomp::detail::parallel_for(static_cast<index_t>(item_expert.size()), threads, [&](index_t item, int thread) {
    const index_t e = item_expert[static_cast<std::size_t>(item)], b = item_block[static_cast<std::size_t>(item)];
    const index_t first = offsets[e], m = offsets[e + 1] - first;
    const sparse_matrix_view& r = residuals[static_cast<std::size_t>(e)];
    const A* block = xt.data() + first * in;
    A* acc = sums[static_cast<std::size_t>(thread)].data();
    with_value_codec(r.values_dtype(), [&](auto codec) {
      using Codec = decltype(codec);
      for (index_t o = b * apply_row_block; o < std::min(out, (b + 1) * apply_row_block); ++o) {
        std::fill(acc, acc + m, A(0));
        residual_row_product<A, Codec>(r, bitmap_starts[static_cast<std::size_t>(e)], o, block, m, acc);
        for (index_t t = 0; t < m; ++t) y(first + t, o) += acc[t];
      }
    });
  });
}

}  // namespace detail
}  // namespace sparse
MOECOMP_NAMESPACE_END
