#pragma once
// Host implementation of the pairwise distances. Every metric is reduced to squared Euclidean distance
// between preprocessed rows a_i = (x_i - o_i - mu) * s_i:
//   euclidean, sqeuclidean: o_i = 0, s_i = 1, mu = column mean (translation invariance; shrinks the
//                           norms the Gram form subtracts, and with them its cancellation error)
//   cosine:                 o_i = 0, s_i = 1 / ||x_i||, so 1 - cos = ||a_i - a_j||^2 / 2
//   correlation:            o_i = mean(x_i), s_i = 1 / ||x_i - o_i||, then as cosine
// then ||a_i - b_j||^2 = ||a_i||^2 + ||b_j||^2 - 2 a_i.b_j with the Gram matrix from a tiled GEMM, and
// pairs where that form cancels are recomputed directly from x in double.
//
// Range: squares of values near the top (or bottom) of T's range overflow (or underflow) although the
// distances themselves are representable. So inputs whose magnitudes leave a safe band are first scaled by
// a power of two, exactly: the Euclidean metrics by one factor for all rows (their distances scale with it
// and are scaled back), cosine and correlation by one factor per row (they do not depend on it). Inside
// the band nothing is scaled, so ordinary inputs give bit for bit what they gave before.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/detail/range_scaling.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/core/detail/gram_tiles.hpp>
#include <moecomp/distance/distance_types.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace distance {
namespace detail {

/// Preprocessed rows of one input: a (rows x d, contiguous), ||a_i||^2, and the (o_i, s_i) that map x_i
/// to a_i without the column shift (used by the direct recomputation).
/// The values a_i = ((x_i p_i - o_i) s_i) of one input, with p_i the power-of-two prescale (1 unless the row's
/// magnitudes leave the safe band), o_i the offset in prescaled units and s_i the scale after it.
template <class T>
struct prepared_rows {
  prepared_rows(const host_context& ctx, index_t rows, index_t cols)
      : values(ctx, static_cast<std::size_t>(rows * cols)),
        norm2(ctx, static_cast<std::size_t>(rows)),
        prescale(ctx, static_cast<std::size_t>(rows)),
        offset(ctx, static_cast<std::size_t>(rows)),
        scale(ctx, static_cast<std::size_t>(rows)),
        rows_(rows),
        cols_(cols) {}
  matrix_view<const T> view() const { return {values.data(), rows_, cols_, cols_}; }

  moecomp::detail::host_workspace<T> values;
  moecomp::detail::host_workspace<double> norm2;
  moecomp::detail::host_workspace<double> prescale;
  moecomp::detail::host_workspace<double> offset;
  moecomp::detail::host_workspace<double> scale;
  index_t rows_, cols_;
};

using moecomp::detail::max_magnitude;
using moecomp::detail::safe_prescale;

/// Column mean of x (and of y, if given, as one set), of the values times `prescale`: the shift for the
/// Euclidean metrics.
template <class T>
void column_mean(matrix_view<const T> x, const matrix_view<const T>* y, double prescale, double* mean) {
  const index_t d = x.cols();
  for (index_t k = 0; k < d; ++k) mean[k] = 0.0;
  index_t total = 0;
  auto accumulate = [&](matrix_view<const T> v) {
    for (index_t i = 0; i < v.rows(); ++i) {
      const T* row = v.row_ptr(i);
      for (index_t k = 0; k < d; ++k) mean[k] += static_cast<double>(row[k]) * prescale;
    }
    total += v.rows();
  };
  accumulate(x);
  if (y) accumulate(*y);
  if (total > 0)
    for (index_t k = 0; k < d; ++k) mean[k] /= static_cast<double>(total);
}

/// Fills `out` from x. The Euclidean metrics pass the column mean `shift` and their one `euclidean_prescale`
/// (both in prescaled units); cosine and correlation pick a prescale per row.
template <class T>
void prepare(const host_context& ctx, metric m, matrix_view<const T> x, const double* shift, double euclidean_prescale,
             prepared_rows<T>& out) {
  const index_t n = x.rows(), d = x.cols();
  const bool normalise = (m == metric::cosine || m == metric::correlation);
  const int threads = ctx.threads();
  (void)threads;
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads) if (threads > 1 && n * d > 65536) schedule(static)
#endif
  for (index_t i = 0; i < n; ++i) {
    const T* row = x.row_ptr(i);
    double prescale = euclidean_prescale, offset = 0.0, scale = 1.0;
    if (normalise) {
      double row_max = 0.0;
      for (index_t k = 0; k < d; ++k) row_max = std::max(row_max, std::abs(static_cast<double>(row[k])));
      prescale = safe_prescale<double>(row_max, d);
    }
    if (m == metric::correlation) {
      for (index_t k = 0; k < d; ++k) offset += static_cast<double>(row[k]) * prescale;
      offset = d > 0 ? offset / static_cast<double>(d) : 0.0;
    }
    if (normalise) {
      double sum = 0.0;
      for (index_t k = 0; k < d; ++k) {
        const double v = static_cast<double>(row[k]) * prescale - offset;
        sum += v * v;
      }
      // scipy gives NaN for a zero (cosine) or constant (correlation) row: so do we, through a NaN scale
      scale = sum > 0.0 ? 1.0 / std::sqrt(sum) : std::numeric_limits<double>::quiet_NaN();
    }
    T* a = out.values.data() + i * d;
    double norm2 = 0.0;
    for (index_t k = 0; k < d; ++k) {
      const double shifted = static_cast<double>(row[k]) * prescale - offset - (shift ? shift[k] : 0.0);
      a[k] = static_cast<T>(shifted * scale);
      norm2 += static_cast<double>(a[k]) * static_cast<double>(a[k]);
    }
    out.norm2[static_cast<std::size_t>(i)] = norm2;
    out.prescale[static_cast<std::size_t>(i)] = prescale;
    out.offset[static_cast<std::size_t>(i)] = offset;
    out.scale[static_cast<std::size_t>(i)] = scale;
  }
}

/// ||(x_i p_i - o_i) s_i - (y_j p_j - o_j) s_j||^2 in double, straight from the input rows.
template <class T>
double direct_squared_distance(const T* x, double px, double ox, double sx, const T* y, double py, double oy, double sy,
                               index_t d) {
  double sum = 0.0;
  for (index_t k = 0; k < d; ++k) {
    const double diff = (static_cast<double>(x[k]) * px - ox) * sx - (static_cast<double>(y[k]) * py - oy) * sy;
    sum += diff * diff;
  }
  return sum;
}

/// Turns squared distances into the metric's values, in place over a row segment (vectorisable loops).
/// `unscale` undoes the Euclidean prescale p: the distances were computed between p x_i and p x_j.
inline void finish_row(metric m, double* values, index_t count, double unscale = 1.0) noexcept {
  switch (m) {
    case metric::euclidean:
      for (index_t c = 0; c < count; ++c) values[c] = std::sqrt(values[c]);
      if (unscale != 1.0)
        for (index_t c = 0; c < count; ++c) values[c] *= unscale;
      break;
    case metric::sqeuclidean:
      if (unscale != 1.0)
        for (index_t c = 0; c < count; ++c) values[c] = values[c] * unscale * unscale;
      break;
    case metric::cosine:
    case metric::correlation:
      for (index_t c = 0; c < count; ++c) values[c] *= 0.5;
      break;
  }
}

/// Runs the whole computation. `store_row(i, j0, values, count)` receives the distances of pairs
/// (i, j0), ..., (i, j0 + count - 1) as T; with `symmetric` only pairs with i < j are produced.
template <class T, class StoreRow>
void compute(const host_context& ctx, const pairwise_distance_params& params, matrix_view<const T> x,
             const matrix_view<const T>* y, StoreRow&& store_row) {
  const bool symmetric = (y == nullptr);
  const index_t d = x.cols();
  const metric m = params.metric;
  const double threshold = effective_cancellation_threshold<T>(params);

  moecomp::detail::host_workspace<double> shift(ctx, static_cast<std::size_t>(d));
  const bool euclidean_family = (m == metric::euclidean || m == metric::sqeuclidean);
  // One power of two for all rows of the Euclidean metrics (1 for ordinary inputs), undone at the end.
  const double prescale = euclidean_family ? safe_prescale<T>(max_magnitude(ctx, x, y), d) : 1.0;
  if (euclidean_family) column_mean(x, y, prescale, shift.data());

  prepared_rows<T> px(ctx, x.rows(), d);
  prepare(ctx, m, x, euclidean_family ? shift.data() : nullptr, prescale, px);
  std::unique_ptr<prepared_rows<T>> py_storage;
  if (!symmetric) {
    py_storage = std::make_unique<prepared_rows<T>>(ctx, y->rows(), d);
    prepare(ctx, m, *y, euclidean_family ? shift.data() : nullptr, prescale, *py_storage);
  }
  const double unscale = 1.0 / prescale;  // exact: a power of two
  const prepared_rows<T>& py = symmetric ? px : *py_storage;
  const matrix_view<const T> yv = symmetric ? x : *y;

  moecomp::detail::for_each_gram_tile<T>(
      ctx, px.view(), py.view(), symmetric, [&](index_t row0, index_t col0, matrix_view<const T> gram) {
        double squared[moecomp::detail::gram_tile_size];
        T values[moecomp::detail::gram_tile_size];
        const double* nb = py.norm2.data() + col0;
        for (index_t r = 0; r < gram.rows(); ++r) {
          const index_t i = row0 + r;
          const double na = px.norm2[static_cast<std::size_t>(i)];
          const index_t c_begin = symmetric ? std::max<index_t>(0, i + 1 - col0) : 0;
          const index_t count = gram.cols() - c_begin;
          if (count <= 0) continue;
          const T* g = gram.row_ptr(r) + c_begin;
          const double* nbr = nb + c_begin;
          for (index_t c = 0; c < count; ++c) squared[c] = na + nbr[c] - 2.0 * static_cast<double>(g[c]);
          // The guard: recompute directly where the Gram form may have cancelled (rare on spread data).
          for (index_t c = 0; c < count; ++c) {
            if (squared[c] < threshold * (na + nbr[c])) {
              const index_t j = col0 + c_begin + c;
              squared[c] = direct_squared_distance(
                  x.row_ptr(i), px.prescale[static_cast<std::size_t>(i)], px.offset[static_cast<std::size_t>(i)],
                  px.scale[static_cast<std::size_t>(i)], yv.row_ptr(j), py.prescale[static_cast<std::size_t>(j)],
                  py.offset[static_cast<std::size_t>(j)], py.scale[static_cast<std::size_t>(j)], d);
            } else if (!(squared[c] >= 0.0) && squared[c] == squared[c]) {
              squared[c] = 0.0;  // only reachable with threshold 0: clamp cancellation below zero
            }
          }
          finish_row(m, squared, count, unscale);
          for (index_t c = 0; c < count; ++c) values[c] = static_cast<T>(squared[c]);
          store_row(i, col0 + c_begin, static_cast<const T*>(values), count);
        }
      });
}

template <class T>
constexpr void check_element_type() {
  static_assert(moecomp::detail::is_real_v<T>,
                "moecomp::distance: the element type must be float or double");
}

}  // namespace detail
}  // namespace distance
MOECOMP_NAMESPACE_END
