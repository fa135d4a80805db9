#pragma once
// Host implementation of neuron alignment: the design rows, the cost matrices (squared distances through the
// distance module, inner products and correlations through the shared Gram tiles) and the exact assignment.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/align/align_types.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/gram_tiles.hpp>
#include <moecomp/core/detail/parallel.hpp>
#include <moecomp/distance/pairwise_distance.hpp>
#include <moecomp/moe/ffn_types.hpp>
#include <moecomp/ot/linear_assignment.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace align {
namespace detail {

/// Columns of the design row [W1 | b1 | W3 | b3 | W2^T]: d for each weight, 1 for each bias present.
inline index_t design_columns(index_t d, bool gated, bool has_b1, bool has_b3) noexcept {
  return d + (has_b1 ? 1 : 0) + (gated ? d + (has_b3 ? 1 : 0) : 0) + d;
}

/// out(i, :) = expert's design row of neuron i, converted to T.
template <class W, class T>
void fill_design(const host_context& ctx, const moe::ffn_expert_view<W>& e, matrix_view<T> out) {
  const index_t d = e.d_model();
  moecomp::detail::parallel_for(e.d_ff(), ctx.threads(), [&](index_t i, int) {
    T* row = out.row_ptr(i);
    for (index_t j = 0; j < d; ++j) *row++ = convert_to<T>(e.w1(i, j));
    if (!e.b1.empty()) *row++ = convert_to<T>(e.b1[i]);
    if (e.gated()) {
      for (index_t j = 0; j < d; ++j) *row++ = convert_to<T>(e.w3(i, j));
      if (!e.b3.empty()) *row++ = convert_to<T>(e.b3[i]);
    }
    for (index_t j = 0; j < d; ++j) *row++ = convert_to<T>(e.w2(j, i));
  });
}

/// cost (n x m) = a b^T through the Gram tiles (each tile one single-threaded GEMM: thread-count independent).
template <class T>
void inner_products(const host_context& ctx, matrix_view<const T> a, matrix_view<const T> b, matrix_view<T> cost) {
  moecomp::detail::for_each_gram_tile<T>(ctx, a, b, false, [&](index_t row0, index_t col0, matrix_view<const T> tile) {
    for (index_t r = 0; r < tile.rows(); ++r)
      std::memcpy(cost.row_ptr(row0 + r) + col0, tile.row_ptr(r), static_cast<std::size_t>(tile.cols()) * sizeof(T));
  });
}

/// z (n x tokens) = the columns of h (tokens x n), each centred and scaled to unit norm (mean and norm in
/// double), so that z_i . z_j is Pearson's correlation. A constant column gives a zero row: correlation 0
/// with every neuron (numpy would give NaN).
template <class T>
void standardized_columns(const host_context& ctx, matrix_view<const T> h, matrix_view<T> z) {
  const index_t tokens = h.rows();
  moecomp::detail::parallel_for(h.cols(), ctx.threads(), [&](index_t i, int) {
    double mean = 0;
    for (index_t t = 0; t < tokens; ++t) mean += static_cast<double>(h(t, i));
    mean /= static_cast<double>(tokens);
    double norm2 = 0;
    for (index_t t = 0; t < tokens; ++t) {
      const double v = static_cast<double>(h(t, i)) - mean;
      norm2 += v * v;
    }
    const double scale = norm2 > 0 ? 1.0 / std::sqrt(norm2) : 0.0;
    T* row = z.row_ptr(i);
    for (index_t t = 0; t < tokens; ++t) row[t] = static_cast<T>((static_cast<double>(h(t, i)) - mean) * scale);
  });
}

template <class T>
double row_dot(const T* x, const T* y, index_t f) noexcept {
  double s = 0;
  for (index_t k = 0; k < f; ++k) s += static_cast<double>(x[k]) * static_cast<double>(y[k]);
  return s;
}

template <class T>
double row_squared_distance(const T* x, const T* y, index_t f) noexcept {
  double s = 0;
  for (index_t k = 0; k < f; ++k) {
    const double diff = static_cast<double>(x[k]) - static_cast<double>(y[k]);
    s += diff * diff;
  }
  return s;
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

/// Rows of a against rows of b (objective weights or inner).
template <class T>
align_result align_rows_host(const host_context& ctx, align_objective objective, matrix_view<const T> a,
                             matrix_view<const T> b, vector_view<index_t> p) {
  const index_t n = a.rows(), m = b.rows(), f = a.cols();
  moecomp::detail::host_workspace<T> storage(ctx, static_cast<std::size_t>(n) * static_cast<std::size_t>(m));
  const matrix_view<T> cost(storage.data(), n, m, m);
  const bool maximize = objective == align_objective::inner;
  if (maximize) {
    inner_products<T>(ctx, a, b, cost);
  } else {
    distance::pairwise_distance_params params;
    params.metric = distance::metric::sqeuclidean;
    distance::pairwise_distances(ctx, params, a, b, cost);
  }
  align_result out = solve<T>(ctx, cost, maximize, p);
  if (!out.ok()) return out;
  // The reported objective from the rows themselves, in double (not from the rounded cost entries).
  for (index_t i = 0; i < n; ++i)
    out.cost += maximize ? row_dot(a.row_ptr(i), b.row_ptr(p[i]), f) : row_squared_distance(a.row_ptr(i), b.row_ptr(p[i]), f);
  return out;
}

/// Columns (neurons) of activations a against those of b, by Pearson correlation.
template <class T>
align_result align_activations_host(const host_context& ctx, matrix_view<const T> a, matrix_view<const T> b,
                                    vector_view<index_t> p) {
  const index_t tokens = a.rows(), n = a.cols(), m = b.cols();
  moecomp::detail::host_workspace<T> za(ctx, static_cast<std::size_t>(n) * static_cast<std::size_t>(tokens));
  moecomp::detail::host_workspace<T> zb(ctx, static_cast<std::size_t>(m) * static_cast<std::size_t>(tokens));
  const matrix_view<T> zav(za.data(), n, tokens, tokens), zbv(zb.data(), m, tokens, tokens);
  standardized_columns<T>(ctx, a, zav);
  standardized_columns<T>(ctx, b, zbv);
  moecomp::detail::host_workspace<T> storage(ctx, static_cast<std::size_t>(n) * static_cast<std::size_t>(m));
  const matrix_view<T> cost(storage.data(), n, m, m);
  inner_products<T>(ctx, zav, zbv, cost);
  align_result out = solve<T>(ctx, cost, true, p);
  if (!out.ok()) return out;
  for (index_t i = 0; i < n; ++i) out.cost += row_dot(zav.row_ptr(i), zbv.row_ptr(p[i]), tokens);
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
