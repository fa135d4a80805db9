#pragma once
// The GEMM engine behind the pairwise distances and the alignment costs: the Gram matrix A B^T computed tile by tile, each tile
// handed to an epilogue while it is hot in cache. For A against itself only the upper-triangular tiles
// are computed (half the flops). Tiles run in parallel with OpenMP when it is enabled; each tile's GEMM is
// a single-threaded kernel (core/detail/gemm.hpp: the build's provider), so the result does not depend on
// the thread count. bfloat16 operands give float tiles from the bfloat16 GEMM (gemm_abt_bf16: products exact
// in float, float sums), for the callers whose operands are bfloat16 weights under matmul_precision::bf16.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/detail/gemm.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

/// Tile edge: large enough for Eigen's kernel to run near its peak, small enough that the diagonal tiles'
/// wasted half stays a few percent for n in the thousands.
inline constexpr index_t gram_tile_size = 256;

/// The type of a Gram tile of T operands: T, or float for bfloat16.
template <class T>
using gram_value_t = std::conditional_t<std::is_same_v<T, bfloat16>, float, T>;

/// Calls epilogue(row0, col0, tile) for every tile of G = A B^T, where `tile` is a contiguous
/// matrix_view<const gram_value_t<T>> of G(row0 : row0 + r, col0 : col0 + c). With `upper_only` (A and B the
/// same matrix) only tiles with col0 >= row0 are visited. A and B must have the same number of columns.
template <class T, class Epilogue>
void for_each_gram_tile(const host_context& ctx, matrix_view<const T> a, matrix_view<const T> b, bool upper_only,
                        Epilogue&& epilogue) {
  const index_t n = a.rows(), m = b.rows(), d = a.cols();
  const index_t tile = gram_tile_size;
  const index_t row_tiles = (n + tile - 1) / tile, col_tiles = (m + tile - 1) / tile;
  std::vector<std::pair<index_t, index_t>> work;
  work.reserve(static_cast<std::size_t>(row_tiles * col_tiles));
  for (index_t ti = 0; ti < row_tiles; ++ti)
    for (index_t tj = upper_only ? ti : 0; tj < col_tiles; ++tj) work.emplace_back(ti * tile, tj * tile);
  const auto count = static_cast<std::ptrdiff_t>(work.size());
  const int threads = static_cast<int>(std::min<std::ptrdiff_t>(ctx.threads(), std::max<std::ptrdiff_t>(count, 1)));

  using G = gram_value_t<T>;
  auto run_range = [&](G* scratch, std::ptrdiff_t k) {
    const index_t row0 = work[static_cast<std::size_t>(k)].first, col0 = work[static_cast<std::size_t>(k)].second;
    const index_t r = std::min(tile, n - row0), c = std::min(tile, m - col0);
    if constexpr (std::is_same_v<T, bfloat16>) {
      moecomp::detail::gemm_abt_bf16(ctx, 1.0f, a.row_ptr(row0), a.row_stride(), b.row_ptr(col0), b.row_stride(), r, c,
                                     d, scratch, c);
    } else {
      moecomp::detail::gemm_abt(T(1), a.row_ptr(row0), a.row_stride(), b.row_ptr(col0), b.row_stride(), r, c, d,
                                scratch, c);
    }
    epilogue(row0, col0, matrix_view<const G>(scratch, r, c, c));
  };

#if defined(_OPENMP)
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    moecomp::detail::host_workspace<G> scratch(ctx, static_cast<std::size_t>(tile * tile));
#pragma omp for schedule(dynamic, 1)
    for (std::ptrdiff_t k = 0; k < count; ++k) run_range(scratch.data(), k);
  }
#else
  (void)threads;
  moecomp::detail::host_workspace<G> scratch(ctx, static_cast<std::size_t>(tile * tile));
  for (std::ptrdiff_t k = 0; k < count; ++k) run_range(scratch.data(), k);
#endif
}

/// out (n x m) = a b^T, whole, through the Gram tiles (each tile one single-threaded GEMM: thread-count
/// independent). bfloat16 a and b give a float out.
template <class T>
void gram_product(const host_context& ctx, matrix_view<const T> a, matrix_view<const T> b,
                  matrix_view<gram_value_t<T>> out) {
  using G = gram_value_t<T>;
  for_each_gram_tile<T>(ctx, a, b, false, [&](index_t row0, index_t col0, matrix_view<const G> tile) {
    for (index_t r = 0; r < tile.rows(); ++r)
      std::memcpy(out.row_ptr(row0 + r) + col0, tile.row_ptr(r), static_cast<std::size_t>(tile.cols()) * sizeof(G));
  });
}

}  // namespace detail
MOECOMP_NAMESPACE_END
