#pragma once
// Expert representations on the host, behind <moecomp/moe/features.hpp>.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/moe/ffn_types.hpp>
#include <moecomp/moe/detail/ffn_host.hpp>
#include <moecomp/core/detail/gemm.hpp>
#include <moecomp/core/detail/parallel.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace moe {
namespace detail {

using moecomp::detail::host_workspace;

/// Row e = concat(flatten(W1_e), flatten(W2_e), flatten(W3_e)), each row-major, converted to A.
template <class W, class A = accumulator_t<W>>
void vectorized_weights_host(const ffn_expert_stack_view<W>& stack, matrix_view<A> out) {
  const index_t d_ff = stack.d_ff(), d = stack.d_model(), block = d_ff * d;
  for (index_t e = 0; e < stack.experts(); ++e) {
    A* row = out.row_ptr(e);
    const ffn_expert_view<W> x = stack.expert(e);
    for (index_t i = 0; i < d_ff; ++i)
      for (index_t j = 0; j < d; ++j) row[i * d + j] = convert_to<A>(x.w1(i, j));
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d_ff; ++j) row[block + i * d_ff + j] = convert_to<A>(x.w2(i, j));
    if (stack.gated())
      for (index_t i = 0; i < d_ff; ++i)
        for (index_t j = 0; j < d; ++j) row[2 * block + i * d + j] = convert_to<A>(x.w3(i, j));
  }
}

/// Row e = flatten(W2_e (W1_e o W3_e)) (d x d, row-major), or flatten(W2_e W1_e) without W3: one GEMM per
/// expert on (W1 o W3)^T, experts in parallel.
template <class W, class A = accumulator_t<W>>
void surrogate_weights_host(const host_context& ctx, const ffn_expert_stack_view<W>& stack, matrix_view<A> out) {
  const index_t d_ff = stack.d_ff(), d = stack.d_model(), e_count = stack.experts();
  const int threads = static_cast<int>(std::min<index_t>(std::max(1, ctx.threads()), e_count));
  const std::size_t per_thread = static_cast<std::size_t>(d * d_ff) * 2;
  host_workspace<A> scratch(ctx, per_thread * static_cast<std::size_t>(threads));
  moecomp::detail::parallel_for(e_count, threads, [&](index_t e, int thread) {
    A* mt = scratch.data() + per_thread * static_cast<std::size_t>(thread);  // (W1 o W3)^T: d x d_ff
    A* w2 = mt + d * d_ff;                                                   // W2 in A: d x d_ff
    const ffn_expert_view<W> x = stack.expert(e);
    for (index_t i = 0; i < d_ff; ++i)
      for (index_t j = 0; j < d; ++j) {
        const A g = convert_to<A>(x.w1(i, j));
        mt[j * d_ff + i] = stack.gated() ? g * convert_to<A>(x.w3(i, j)) : g;
      }
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d_ff; ++j) w2[i * d_ff + j] = convert_to<A>(x.w2(i, j));
    moecomp::detail::gemm_abt<A>(A(1), w2, d_ff, mt, d_ff, d, d, d_ff, out.row_ptr(e), d);
  });
}

/// Row e = the mean over the tokens of expert e's output (in double, tokens in order).
template <class W, class A = accumulator_t<W>>
void mean_outputs_host(const host_context& ctx, const ffn_params& params,
                       const ffn_expert_stack_view<W>& stack, matrix_view<const A> x, matrix_view<A> out) {
  const index_t n = x.rows(), d = stack.d_model();
  host_workspace<A> y(ctx, static_cast<std::size_t>(n * d));
  std::vector<double> sum(static_cast<std::size_t>(d));
  for (index_t e = 0; e < stack.experts(); ++e) {
    ffn_forward_host<W>(ctx, params, stack.expert(e), x, matrix_view<A>(y.data(), n, d), {});
    std::fill(sum.begin(), sum.end(), 0.0);
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < d; ++j) sum[static_cast<std::size_t>(j)] += static_cast<double>(y[static_cast<std::size_t>(i * d + j)]);
    for (index_t j = 0; j < d; ++j) out(e, j) = static_cast<A>(sum[static_cast<std::size_t>(j)] / static_cast<double>(n));
  }
}

/// out(t, e) = ||f_e(x_t)||_2 in double, one expert at a time.
template <class W, class A = accumulator_t<W>>
void output_norms_host(const host_context& ctx, const ffn_params& params, const ffn_expert_stack_view<W>& stack,
                       matrix_view<const A> x, matrix_view<A> out) {
  const index_t n = x.rows(), d = stack.d_model();
  host_workspace<A> y(ctx, static_cast<std::size_t>(n * d));
  for (index_t e = 0; e < stack.experts(); ++e) {
    ffn_forward_host<W>(ctx, params, stack.expert(e), x, matrix_view<A>(y.data(), n, d), {});
    for (index_t t = 0; t < n; ++t) {
      double s = 0;
      for (index_t j = 0; j < d; ++j) s += static_cast<double>(y[static_cast<std::size_t>(t * d + j)]) * static_cast<double>(y[static_cast<std::size_t>(t * d + j)]);
      out(t, e) = static_cast<A>(std::sqrt(s));
    }
  }
}

/// logits (n x E) = x router^T (+ bias), in row tiles of 256 tokens.
template <class A>
void router_logits_host(const host_context& ctx, matrix_view<const A> x, matrix_view<const A> router,
                        vector_view<const A> bias, matrix_view<A> logits) {
  const index_t n = x.rows(), e = router.rows(), d = x.cols(), tile = 256;
  moecomp::detail::parallel_for((n + tile - 1) / tile, ctx.threads(), [&](index_t t, int) {
    const index_t first = t * tile, rows = std::min(tile, n - first);
    moecomp::detail::gemm_abt<A>(A(1), x.row_ptr(first), x.row_stride(), router.data(), router.row_stride(), rows, e, d,
                                 logits.row_ptr(first), logits.row_stride());
    if (!bias.empty())
      for (index_t r = 0; r < rows; ++r)
        for (index_t j = 0; j < e; ++j) logits(first + r, j) += bias[j];
  });
}

/// expert_weight_distances after its checks. Per chunk of 2^14 entries (in parallel over chunks), each pair's sum
/// of squared differences starts at 0 and adds the entries in increasing order, each square rounded before it is
/// added; the chunks' sums are then added in chunk order. From 16 experts on, the entries are widened to double in
/// blocks of 64 entries x E experts (transposed, so that for expert a and entry j the pairs (a, b > a) are
/// consecutive and one SIMD instruction advances several pairs' sums by one entry each); below, one pair at a time.
/// Either way every pair's additions are the same, in the same order.
template <class W>
void expert_weight_distances_host(const host_context& ctx, const ffn_expert_stack_view<W>& stack,
                                  vector_view<double> distances) {
  const index_t E = stack.experts(), pairs = E * (E - 1) / 2;
  struct piece {
    const matrix_stack_view<const W>* matrices;  // each matrix contiguous (strided or gathered stack)
    index_t size;                                // entries per expert
  };
  std::vector<piece> pieces;  // vectorized_weights' order: W1, W2, W3
  for (const auto* v : {&stack.w1, &stack.w2, &stack.w3})
    if (!v->empty()) pieces.push_back({v, v->rows() * v->cols()});
  // across_pairs: from this many experts on, SIMD runs across pairs (below it, a row has too few pairs to fill
  // a vector, and one pair at a time is faster).
  constexpr index_t chunk = index_t{1} << 14, block = 64, across_pairs = 16;
  std::vector<index_t> first_chunk{0};  // chunk numbers where each piece starts
  for (const piece& p : pieces) first_chunk.push_back(first_chunk.back() + (p.size + chunk - 1) / chunk);
  const index_t chunks = first_chunk.back();
  std::vector<double> partial(static_cast<std::size_t>(chunks * pairs), 0.0);
  // Pair (a, b) of a < b at first_pair[a] + b - a - 1 (scipy's condensed order).
  std::vector<index_t> first_pair(static_cast<std::size_t>(E) + 1, 0);
  for (index_t a = 0; a < E; ++a) first_pair[static_cast<std::size_t>(a) + 1] = first_pair[static_cast<std::size_t>(a)] + E - a - 1;
  const int threads = ctx.threads();
  const index_t per_thread = (block + 1) * std::max(E, block);
  std::vector<double> widened(static_cast<std::size_t>(threads) * static_cast<std::size_t>(per_thread));
  moecomp::detail::parallel_for(chunks, threads, [&](index_t c, int thread) {
    std::size_t k = 0;
    while (c >= first_chunk[k + 1]) ++k;
    const piece& p = pieces[k];
    const index_t begin = (c - first_chunk[k]) * chunk, end = std::min(p.size, begin + chunk);
    double* out = partial.data() + c * pairs;
    double* x = widened.data() + static_cast<std::size_t>(thread) * static_cast<std::size_t>(per_thread);  // [j][e]
    double* squares = x + block * std::max(E, block);  // across pairs: E entries; one pair at a time: block
    for (index_t j0 = begin; j0 < end; j0 += block) {
      const index_t n = std::min(block, end - j0);
      if (E < across_pairs) {  // few pairs a row: one pair at a time, over the block's entries
        for (index_t a = 0; a + 1 < E; ++a)
          for (index_t b = a + 1; b < E; ++b) {
            const W* u = p.matrices->matrix_ptr(a) + j0;
            const W* v = p.matrices->matrix_ptr(b) + j0;
            for (index_t j = 0; j < n; ++j) {
              const double diff = convert_to<double>(u[j]) - convert_to<double>(v[j]);
              squares[j] = diff * diff;
            }
            double& sum = out[first_pair[static_cast<std::size_t>(a)] + b - a - 1];
            for (index_t j = 0; j < n; ++j) sum += squares[j];
          }
        continue;
      }
      for (index_t e = 0; e < E; ++e) {
        const W* from = p.matrices->matrix_ptr(e) + j0;
        for (index_t j = 0; j < n; ++j) x[j * E + e] = convert_to<double>(from[j]);
      }
      for (index_t a = 0; a + 1 < E; ++a) {
        double* sums = out + first_pair[static_cast<std::size_t>(a)] - a - 1;  // sums[b]: pair (a, b)
        for (index_t j = 0; j < n; ++j) {
          const double* row = x + j * E;
          const double xa = row[a];
          // The square is rounded before it is added (two loops, so that no compiler fuses them into an FMA): the
          // bits then do not depend on the compiler's FMA contraction (or on -mtune, which decides it for GCC).
          for (index_t b = a + 1; b < E; ++b) squares[b] = (xa - row[b]) * (xa - row[b]);
          for (index_t b = a + 1; b < E; ++b) sums[b] += squares[b];
        }
      }
    }
  });
  for (index_t pair = 0; pair < pairs; ++pair) distances[pair] = 0.0;
  for (index_t c = 0; c < chunks; ++c)
    for (index_t pair = 0; pair < pairs; ++pair) distances[pair] += partial[static_cast<std::size_t>(c * pairs + pair)];
  for (index_t pair = 0; pair < pairs; ++pair) distances[pair] = std::sqrt(distances[pair]);
}

}  // namespace detail
}  // namespace moe
MOECOMP_NAMESPACE_END
