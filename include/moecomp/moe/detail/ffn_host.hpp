#pragma once
// The expert forward on the host, behind <moecomp/moe/ffn.hpp>: up to one tile of tokens, the weights in panels
// over the threads; more, token tiles, each on one thread, two or three single-threaded GEMMs per tile in the
// accumulator type, the activation and gate in between.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/moe/ffn_types.hpp>
#include <moecomp/core/detail/activation.hpp>
#include <moecomp/core/detail/gemm.hpp>
#include <moecomp/core/detail/linear.hpp>
#include <moecomp/core/detail/parallel.hpp>

#include <algorithm>
#include <cstddef>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace moe {
namespace detail {

using moecomp::detail::host_workspace;

/// Whether the expert forward multiplies bfloat16 weights as they are (ctx.matmul == bf16), rather than
/// widening them to A.
template <class W>
bool ffn_bf16_products(const host_context& ctx) noexcept {
  return std::is_same_v<std::remove_cv_t<W>, bfloat16> && ctx.matmul == matmul_precision::bf16;
}

/// One expert's weights in the accumulator type A: views of the caller's memory when W is A, else a
/// converted copy (3 d d_ff elements of A at most) made once per call; without `widen` (bfloat16 products)
/// only the biases are converted and w1, w3, w2 stay empty.
template <class W, class A = accumulator_t<W>>
class expert_weights {
 public:
  /// The number of A elements of the converted copy (0 when W is A or nothing is widened).
  static std::size_t copy_size(const ffn_expert_view<W>& e, bool widen = true) noexcept {
    return std::is_same_v<W, A> || !widen ? 0
                                          : static_cast<std::size_t>(e.d_ff() * e.d_model() * (e.gated() ? 3 : 2));
  }
  /// Elements of the caller's storage: the converted copy and the biases.
  static std::size_t storage_size(const ffn_expert_view<W>& e, bool widen = true) noexcept {
    return copy_size(e, widen) + static_cast<std::size_t>(2 * e.d_ff() + e.d_model());
  }
  /// storage: storage_size(e, widen) elements (nothing is then allocated), or null to allocate from ctx.
  expert_weights(const host_context& ctx, const ffn_expert_view<W>& e, A* storage = nullptr, bool widen = true)
      : copy_(ctx, storage ? 0 : copy_size(e, widen)),
        biases_(ctx, storage ? 0 : static_cast<std::size_t>(2 * e.d_ff() + e.d_model())) {
    const index_t d_ff = e.d_ff(), d = e.d_model();
    if constexpr (std::is_same_v<W, A>) {
      (void)storage;
      (void)widen;
      w1 = e.w1;
      w3 = e.w3;
      w2 = e.w2;
    } else if (widen) {
      A* p = storage ? storage : copy_.data();
      w1 = convert(e.w1, p);
      p += d_ff * d;
      w2 = convert(e.w2, p);
      p += d_ff * d;
      if (e.gated()) w3 = convert(e.w3, p);
    }
    A* b = storage ? storage + copy_size(e, widen) : biases_.data();
    for (index_t i = 0; i < d_ff; ++i) {
      b[i] = e.b1.empty() ? A(0) : convert_to<A>(e.b1[i]);
      b[d_ff + i] = e.b3.empty() ? A(0) : convert_to<A>(e.b3[i]);
    }
    for (index_t i = 0; i < d; ++i) b[2 * d_ff + i] = e.b2.empty() ? A(0) : convert_to<A>(e.b2[i]);
    b1 = b;
    b3 = b + d_ff;
    b2 = b + 2 * d_ff;
  }
  matrix_view<const A> w1, w3, w2;
  const A *b1, *b3, *b2;

 private:
  static matrix_view<const A> convert(matrix_view<const W> m, A* out) {
    for (index_t i = 0; i < m.rows(); ++i)
      for (index_t j = 0; j < m.cols(); ++j) out[i * m.cols() + j] = convert_to<A>(m(i, j));
    return matrix_view<const A>(out, m.rows(), m.cols());
  }
  host_workspace<A> copy_, biases_;
};

/// Scratch A elements one thread needs for a tile of `tile` tokens (with bf16 products, also the tile's
/// tokens and hidden activations rounded to bfloat16, two to an A element).
template <class W>
std::size_t ffn_tile_scratch(const ffn_expert_view<W>& e, index_t tile, bool bf16_products = false) noexcept {
  const auto wide = static_cast<std::size_t>(tile * e.d_ff()) * (e.gated() ? 2 : 1);
  return wide + (bf16_products ? (static_cast<std::size_t>(tile * (e.d_model() + e.d_ff())) + 1) / 2 : 0);
}

/// Rows [first, first + rows) of the forward (rows <= tile) on the calling thread: y and, when not empty, the
/// hidden activations; scratch holds ffn_tile_scratch(expert, tile, bf16 products) elements. With bf16
/// products (bfloat16 W, ctx.matmul == bf16) the tokens and the hidden activations are rounded to bfloat16
/// and multiplied with the weights as stored; otherwise by w's widened copies.
template <class W, class A>
void ffn_forward_tile(const host_context& ctx, const ffn_params& params, const ffn_expert_view<W>& expert,
                      const expert_weights<W, A>& w, matrix_view<const A> x, matrix_view<A> y, matrix_view<A> hidden,
                      index_t first, index_t rows, A* scratch) {
  const index_t d = expert.d_model(), d_ff = expert.d_ff();
  A* h = scratch;
  A* u = h + rows * d_ff;
  [[maybe_unused]] bfloat16* narrow = nullptr;  // bf16 products: the tile's tokens, then its hidden activations
  if constexpr (std::is_same_v<W, bfloat16>) {
    if (ffn_bf16_products<W>(ctx)) {
      narrow = reinterpret_cast<bfloat16*>(u + (expert.gated() ? rows * d_ff : 0));
      for (index_t r = 0; r < rows; ++r) {
        const A* xr = x.row_ptr(first + r);
        for (index_t c = 0; c < d; ++c) narrow[r * d + c] = bfloat16(static_cast<float>(xr[c]));
      }
      moecomp::detail::gemm_abt_bf16(ctx, 1.0f, narrow, d, expert.w1.data(), expert.w1.row_stride(), rows, d_ff, d, h,
                                     d_ff);
      if (expert.gated())
        moecomp::detail::gemm_abt_bf16(ctx, 1.0f, narrow, d, expert.w3.data(), expert.w3.row_stride(), rows, d_ff, d,
                                       u, d_ff);
    }
  }
  if (narrow == nullptr) {
    moecomp::detail::gemm_abt<A>(A(1), x.row_ptr(first), x.row_stride(), w.w1.data(), w.w1.row_stride(), rows, d_ff,
                                 d, h, d_ff);
    if (expert.gated())
      moecomp::detail::gemm_abt<A>(A(1), x.row_ptr(first), x.row_stride(), w.w3.data(), w.w3.row_stride(), rows,
                                   d_ff, d, u, d_ff);
  }
  for (index_t r = 0; r < rows; ++r) {
    A* hr = h + r * d_ff;
    const A* ur = u + r * d_ff;
    for (index_t j = 0; j < d_ff; ++j) {
      const A a = moecomp::detail::activate<A>(params.act, hr[j] + w.b1[j]);
      hr[j] = expert.gated() ? a * (ur[j] + w.b3[j]) : a;
    }
    if (!hidden.empty()) std::copy(hr, hr + d_ff, hidden.row_ptr(first + r));
  }
  if (y.empty()) return;
  if constexpr (std::is_same_v<W, bfloat16>) {
    if (narrow != nullptr) {
      for (index_t i = 0; i < rows * d_ff; ++i) narrow[i] = bfloat16(static_cast<float>(h[i]));
      moecomp::detail::gemm_abt_bf16(ctx, 1.0f, narrow, d_ff, expert.w2.data(), expert.w2.row_stride(), rows, d, d_ff,
                                     y.row_ptr(first), y.row_stride());
    }
  }
  if (narrow == nullptr)
    moecomp::detail::gemm_abt<A>(A(1), h, d_ff, w.w2.data(), w.w2.row_stride(), rows, d, d_ff, y.row_ptr(first),
                                 y.row_stride());
  for (index_t r = 0; r < rows; ++r) {
    A* yr = y.row_ptr(first + r);
    for (index_t j = 0; j < d; ++j) yr[j] += w.b2[j];
  }
}

/// One tile's worth of tokens (n <= token_tile): the weights read once, in panels spread over the threads
/// (core's linear_abt), instead of converting the whole expert and running the tile on one thread. This is
/// the decode-size path: memory-bound on the weights, with every thread streaming them.
template <class W, class A>
void ffn_forward_panels(const host_context& ctx, const ffn_params& params, const ffn_expert_view<W>& expert,
                        matrix_view<const A> x, matrix_view<A> y, matrix_view<A> hidden) {
  const index_t n = x.rows(), d = expert.d_model(), d_ff = expert.d_ff();
  host_workspace<A> scratch(ctx, static_cast<std::size_t>(n * d_ff) * (expert.gated() ? 2 : 1));
  const matrix_view<A> h(scratch.data(), n, d_ff, d_ff);
  const matrix_view<A> u(expert.gated() ? scratch.data() + n * d_ff : nullptr, expert.gated() ? n : 0, d_ff, d_ff);
  moecomp::detail::linear_abt<W, A>(ctx, x, expert.w1, h);
  if (expert.gated()) moecomp::detail::linear_abt<W, A>(ctx, x, expert.w3, u);
  for (index_t r = 0; r < n; ++r) {
    A* hr = h.row_ptr(r);
    for (index_t j = 0; j < d_ff; ++j) {
      const A a = moecomp::detail::activate<A>(params.act, hr[j] + (expert.b1.empty() ? A(0) : convert_to<A>(expert.b1[j])));
      hr[j] = expert.gated() ? a * (u(r, j) + (expert.b3.empty() ? A(0) : convert_to<A>(expert.b3[j]))) : a;
    }
    if (!hidden.empty()) std::copy(hr, hr + d_ff, hidden.row_ptr(r));
  }
  if (y.empty()) return;
  moecomp::detail::linear_abt<W, A>(ctx, matrix_view<const A>(h), expert.w2, y);
  if (!expert.b2.empty())
    for (index_t r = 0; r < n; ++r)
      for (index_t j = 0; j < d; ++j) y(r, j) += convert_to<A>(expert.b2[j]);
}

/// y (n x d) and, when hidden is not null, the hidden activations h (n x d_ff) of tokens x (n x d). At most one
/// tile of tokens: the panel path (all threads on the weights); more: tiles of tokens over the threads, the
/// weights converted once. The path depends on n only, so results do not depend on the thread count.
template <class W, class A = accumulator_t<W>>
void ffn_forward_host(const host_context& ctx, const ffn_params& params, const ffn_expert_view<W>& expert,
                      matrix_view<const A> x, matrix_view<A> y, matrix_view<A> hidden) {
  const index_t n = x.rows(), tile = params.token_tile;
  if (n == 0) return;
  if (n <= tile) {
    ffn_forward_panels<W, A>(ctx, params, expert, x, y, hidden);
    return;
  }
  const bool bf16 = ffn_bf16_products<W>(ctx);
  const expert_weights<W, A> w(ctx, expert, nullptr, !bf16);
  const int threads = std::max(1, ctx.threads());
  const index_t tiles = (n + tile - 1) / tile;
  const int used = static_cast<int>(std::min<index_t>(threads, tiles));
  const std::size_t per_thread = ffn_tile_scratch(expert, tile, bf16);
  host_workspace<A> scratch(ctx, per_thread * static_cast<std::size_t>(used));
  moecomp::detail::parallel_for(tiles, used, [&](index_t t, int thread) {
    const index_t first = t * tile, rows = std::min(tile, n - first);
    ffn_forward_tile<W, A>(ctx, params, expert, w, x, y, hidden, first, rows,
                           scratch.data() + per_thread * static_cast<std::size_t>(thread));
  });
}

}  // namespace detail
}  // namespace moe
MOECOMP_NAMESPACE_END
