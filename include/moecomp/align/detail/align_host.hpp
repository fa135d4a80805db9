#pragma once
// Host implementation of neuron alignment: the design rows, the cost matrices (squared distances, inner products
// and correlations, each from the shared Gram tiles) and the exact assignment.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/align/align_types.hpp>
#include <moecomp/align/detail/align_checks.hpp>
#include <moecomp/align/detail/align_rules.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/correlation.hpp>
#include <moecomp/core/detail/gram_tiles.hpp>
#include <moecomp/core/detail/parallel.hpp>
#include <moecomp/core/detail/row_math.hpp>
#include <moecomp/moe/ffn_types.hpp>
#include <moecomp/ot/linear_assignment.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace align {
namespace detail {

/// out(i, :) = expert's design row of neuron i, converted to T. W1 / W3 rows are copied row by row; W2^T is
/// transposed in 64 x 64 blocks (a column-by-column read of W2 would touch a new cache line per element).
template <class W, class T>
void fill_design(const host_context& ctx, const moe::ffn_expert_view<W>& e, matrix_view<T> out) {
  const index_t d = e.d_model(), d_ff = e.d_ff();
  const auto convert_row = [d](const W* src, T* dst) {
    for (index_t j = 0; j < d; ++j) dst[j] = convert_to<T>(src[j]);
  };
  const design_layout layout = make_design_layout(d, e.gated(), !e.b1.empty(), !e.b3.empty());
  moecomp::detail::parallel_for(d_ff, ctx.threads(), [&](index_t i, int) {
    T* row = out.row_ptr(i);
    convert_row(e.w1.row_ptr(i), row + layout.w1);
    if (layout.b1 >= 0) row[layout.b1] = convert_to<T>(e.b1[i]);
    if (layout.w3 >= 0) convert_row(e.w3.row_ptr(i), row + layout.w3);
    if (layout.b3 >= 0) row[layout.b3] = convert_to<T>(e.b3[i]);
  });
  const index_t down = layout.w2;  // W2^T's first column
  constexpr index_t block = 64;
  const index_t row_blocks = (d_ff + block - 1) / block, col_blocks = (d + block - 1) / block;
  moecomp::detail::parallel_for(row_blocks * col_blocks, ctx.threads(), [&](index_t k, int) {
    const index_t i0 = (k / col_blocks) * block, j0 = (k % col_blocks) * block;
    const index_t i1 = std::min(i0 + block, d_ff), j1 = std::min(j0 + block, d);
    for (index_t i = i0; i < i1; ++i) {
      T* dst = out.row_ptr(i) + down;
      for (index_t j = j0; j < j1; ++j) dst[j] = convert_to<T>(e.w2.row_ptr(j)[i]);
    }
  });
}

/// Squared row norms in double.
template <class T>
std::vector<double> squared_norms(const host_context& ctx, matrix_view<const T> x) {
  std::vector<double> out(static_cast<std::size_t>(x.rows()));
  moecomp::detail::parallel_for(x.rows(), ctx.threads(), [&](index_t i, int) {
    double s = 0;
    const T* row = x.row_ptr(i);
    for (index_t k = 0; k < x.cols(); ++k) s += convert_to<double>(row[k]) * convert_to<double>(row[k]);
    out[static_cast<std::size_t>(i)] = s;
  });
  return out;
}

/// The cost matrix's type for rows of T: T, or float for bfloat16 rows (the bfloat16 GEMM's float sums).
template <class T>
using cost_t = moecomp::detail::gram_value_t<T>;

/// cost (n x m) = ||a_i||^2 + ||b_j||^2 - 2 a_i . b_j, clamped at 0: the norms in double, the cross term from the
/// Gram tiles in cost_t<T>. The assignment depends on the cross term alone (the norms add a constant per row and
/// per column to every assignment's total), so it is exactly as precise as the inner objective's.
template <class T>
void squared_distances(const host_context& ctx, matrix_view<const T> a, matrix_view<const T> b,
                       matrix_view<cost_t<T>> cost) {
  using C = cost_t<T>;
  const std::vector<double> na = squared_norms(ctx, a), nb = squared_norms(ctx, b);
  moecomp::detail::for_each_gram_tile<T>(ctx, a, b, false, [&](index_t row0, index_t col0, matrix_view<const C> tile) {
    for (index_t r = 0; r < tile.rows(); ++r) {
      const double ni = na[static_cast<std::size_t>(row0 + r)];
      const double* nj = nb.data() + col0;
      const C* g = tile.row_ptr(r);
      C* out = cost.row_ptr(row0 + r) + col0;
      for (index_t c = 0; c < tile.cols(); ++c)
        out[c] = static_cast<C>(clamped_squared_distance(ni, nj[c], static_cast<double>(g[c])));
    }
  });
}

/// Solves the assignment on cost (n x m) into p; returns the status (the cost is filled in by the caller).
template <class T>
align_result solve(const host_context& ctx, matrix_view<const T> cost, bool maximize, vector_view<index_t> p) {
  ot::linear_assignment_params lap;
  lap.maximize = maximize;
  const ot::linear_assignment_result r = ot::linear_assignment(ctx, lap, cost, p);
  align_result out;
  out.status = r.status;
  return out;
}

/// Rows of a against rows of b (objective weights or inner). bfloat16 rows (design rows of bfloat16 experts under
/// matmul_precision::bf16) give a float cost matrix from the bfloat16 GEMM.
template <class T>
align_result align_rows_host(const host_context& ctx, align_objective objective, matrix_view<const T> a,
                             matrix_view<const T> b, vector_view<index_t> p) {
  using C = cost_t<T>;
  const index_t n = a.rows(), m = b.rows(), f = a.cols();
  moecomp::detail::host_workspace<C> storage(ctx, static_cast<std::size_t>(n) * static_cast<std::size_t>(m));
  const matrix_view<C> cost(storage.data(), n, m, m);
  const bool maximize = objective == align_objective::inner;
  if (maximize) {
    moecomp::detail::gram_product<T>(ctx, a, b, cost);
  } else {
    squared_distances<T>(ctx, a, b, cost);
  }
  align_result out = solve<C>(ctx, cost, maximize, p);
  if (!out.ok()) return out;
  // The reported objective from the rows themselves, in double (not from the rounded cost entries).
  for (index_t i = 0; i < n; ++i)
    out.cost += maximize ? moecomp::detail::dot(a.row_ptr(i), b.row_ptr(p[i]), f) : moecomp::detail::squared_distance(a.row_ptr(i), b.row_ptr(p[i]), f);
  return out;
}

/// align_rows: its checks (messages named "align_rows", whoever calls), then align_rows_host. T: float, double, or
/// bfloat16 (align_experts' design rows under matmul_precision::bf16).
template <class T>
align_result checked_align_rows(const host_context& ctx, align_objective objective, matrix_view<const T> a,
                                matrix_view<const T> b, vector_view<index_t> p) {
  constexpr const char* fn = "align_rows";
  check_row_objective(fn, objective);
  check_row_alignment(fn, a.rows(), a.cols(), b.rows(), b.cols(), p.size());
  moecomp::detail::check_finite(fn, "a", a, ctx.threads());
  moecomp::detail::check_finite(fn, "b", b, ctx.threads());
  return align_rows_host<T>(ctx, objective, a, b, p);
}

/// The columns of a (tokens x n) and b (tokens x m) centred and scaled to unit norm, stored as rows (n x tokens
/// and m x tokens): their Gram product is the correlation matrix.
template <class T>
struct standardized_pair {
  moecomp::detail::host_workspace<T> za, zb;
  matrix_view<T> a, b;
  standardized_pair(const host_context& ctx, matrix_view<const T> x, matrix_view<const T> y)
      : za(ctx, static_cast<std::size_t>(x.cols()) * static_cast<std::size_t>(x.rows())),
        zb(ctx, static_cast<std::size_t>(y.cols()) * static_cast<std::size_t>(y.rows())),
        a(za.data(), x.cols(), x.rows(), x.rows()),
        b(zb.data(), y.cols(), y.rows(), y.rows()) {
    moecomp::detail::standardized_columns<T>(ctx, x, a);
    moecomp::detail::standardized_columns<T>(ctx, y, b);
  }
};

/// out (n x m) = the Pearson correlations of a's columns (tokens x n) with b's (tokens x m): the Gram product of
/// the standardised columns (align_activations_host's cost matrix).
template <class T>
void pearson_correlation_host(const host_context& ctx, matrix_view<const T> a, matrix_view<const T> b,
                              matrix_view<T> out) {
  const standardized_pair<T> z(ctx, a, b);
  moecomp::detail::gram_product<T>(ctx, z.a, z.b, out);
}

/// Columns (neurons) of activations a against those of b, by Pearson correlation.
template <class T>
align_result align_activations_host(const host_context& ctx, matrix_view<const T> a, matrix_view<const T> b,
                                    vector_view<index_t> p) {
  const index_t tokens = a.rows(), n = a.cols(), m = b.cols();
  const standardized_pair<T> z(ctx, a, b);
  moecomp::detail::host_workspace<T> storage(ctx, static_cast<std::size_t>(n) * static_cast<std::size_t>(m));
  const matrix_view<T> cost(storage.data(), n, m, m);
  moecomp::detail::gram_product<T>(ctx, z.a, z.b, cost);
  align_result out = solve<T>(ctx, cost, true, p);
  if (!out.ok()) return out;
  for (index_t i = 0; i < n; ++i) out.cost += moecomp::detail::dot(z.a.row_ptr(i), z.b.row_ptr(p[i]), tokens);
  return out;
}

/// out's neuron i = in's neuron p[i]: rows of w1, w3, b1, b3 and columns of w2 gathered; b2 copied. Exact.
template <class W>
void permute_neurons_host(const host_context& ctx, const moe::ffn_expert_view<W>& in, vector_view<const index_t> p,
                          const moe::ffn_expert_mutable_view<W>& out) {
  const index_t d_ff = in.d_ff(), d = in.d_model();
  moecomp::detail::parallel_for(d_ff, ctx.threads(), [&](index_t i, int) {
    const index_t s = p[i];
    std::copy(in.w1.row_ptr(s), in.w1.row_ptr(s) + d, out.w1.row_ptr(i));
    if (in.gated()) std::copy(in.w3.row_ptr(s), in.w3.row_ptr(s) + d, out.w3.row_ptr(i));
    if (!in.b1.empty()) out.b1[i] = in.b1[s];
    if (!in.b3.empty()) out.b3[i] = in.b3[s];
  });
  moecomp::detail::parallel_for(d, ctx.threads(), [&](index_t j, int) {
    const W* src = in.w2.row_ptr(j);
    W* dst = out.w2.row_ptr(j);
    for (index_t i = 0; i < d_ff; ++i) dst[i] = src[p[i]];
    if (!in.b2.empty()) out.b2[j] = in.b2[j];
  });
}

}  // namespace detail
}  // namespace align
MOECOMP_NAMESPACE_END
