#pragma once
// Pearson correlation between the columns of activation matrices, the building block of activation matching
// (align) and of HC-SMoE's fixed-dominant merging (merge): each column centred and scaled to unit norm in
// double, stored as a row, so that one Gram product (gram_tiles.hpp) gives every correlation.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/correlation_rules.hpp>
#include <moecomp/core/detail/parallel.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

/// z (n x tokens) = the columns of h (tokens x n), each centred and scaled to unit norm (mean and norm in
/// double), so that z_i . z_j is Pearson's correlation. A constant column gives a zero row: correlation 0
/// with every neuron (numpy would give NaN). norms, when given, receives each centred column's Euclidean norm.
template <class T>
void standardized_columns(const host_context& ctx, matrix_view<const T> h, matrix_view<T> z,
                          std::vector<double>* norms = nullptr) {
  const index_t tokens = h.rows(), n = h.cols();
  // Means and norms per column from row-wise passes (h is read along its rows, never down a column), over
  // fixed 64-column strips so that the sums are the same at any thread count.
  constexpr index_t strip = 64;
  const index_t strips = (n + strip - 1) / strip;
  std::vector<double> mean(static_cast<std::size_t>(n)), scale(static_cast<std::size_t>(n));
  if (norms) norms->assign(static_cast<std::size_t>(n), 0.0);
  parallel_for(strips, ctx.threads(), [&](index_t s, int) {
    const index_t c0 = s * strip, c1 = std::min(c0 + strip, n);
    double sum[strip] = {}, sum2[strip] = {};
    for (index_t t = 0; t < tokens; ++t) {
      const T* row = h.row_ptr(t);
      for (index_t c = c0; c < c1; ++c) sum[c - c0] += static_cast<double>(row[c]);
    }
    for (index_t c = c0; c < c1; ++c) mean[static_cast<std::size_t>(c)] = sum[c - c0] / static_cast<double>(tokens);
    for (index_t t = 0; t < tokens; ++t) {
      const T* row = h.row_ptr(t);
      for (index_t c = c0; c < c1; ++c)
        sum2[c - c0] += squared_deviation(static_cast<double>(row[c]), mean[static_cast<std::size_t>(c)]);
    }
    for (index_t c = c0; c < c1; ++c) {
      scale[static_cast<std::size_t>(c)] = unit_norm_scale(sum2[c - c0]);
      if (norms) (*norms)[static_cast<std::size_t>(c)] = std::sqrt(sum2[c - c0]);
    }
  });
  // z = the standardised columns as rows, transposed in 64 x 64 blocks.
  const index_t token_blocks = (tokens + strip - 1) / strip;
  parallel_for(strips * token_blocks, ctx.threads(), [&](index_t k, int) {
    const index_t c0 = (k / token_blocks) * strip, t0 = (k % token_blocks) * strip;
    const index_t c1 = std::min(c0 + strip, n), t1 = std::min(t0 + strip, tokens);
    for (index_t c = c0; c < c1; ++c) {
      const double m = mean[static_cast<std::size_t>(c)], sc = scale[static_cast<std::size_t>(c)];
      T* out = z.row_ptr(c);
      for (index_t t = t0; t < t1; ++t) out[t] = static_cast<T>(standardized_value(static_cast<double>(h(t, c)), m, sc));
    }
  });
}

}  // namespace detail
MOECOMP_NAMESPACE_END
