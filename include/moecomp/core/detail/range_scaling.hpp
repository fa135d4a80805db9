#pragma once
// Exact power-of-two scaling for computations that square their inputs: squares of values near the top (or
// bottom) of a type's range overflow (or sink into its subnormals) although the results are representable.
// Used by the pairwise distances and the low-memory linkages (docs/distance.md, "Range").
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

/// The power of two that brings `magnitude` (the largest |value| of what is scaled together) into [0.5, 1)
/// when it lies outside the band where squares summed over d coordinates can neither overflow T nor sink
/// into its subnormals; 1 inside the band (and for 0, or a non-finite magnitude, which the checks refuse).
template <class T>
double safe_prescale(double magnitude, index_t d) noexcept {
  if (!(magnitude > 0.0) || !std::isfinite(magnitude)) return 1.0;
  // Differences of two values (up to 2 |x|), squared and summed over d: (2 |x|)^2 d <= max / 4.
  const double high = std::sqrt(static_cast<double>(std::numeric_limits<T>::max()) /
                                (16.0 * static_cast<double>(std::max<index_t>(d, 1))));
  // The largest square keeps every bit of T's precision above the subnormals.
  const double low = std::sqrt(static_cast<double>(std::numeric_limits<T>::min())) *
                     std::ldexp(1.0, std::numeric_limits<T>::digits / 2 + 1);
  if (magnitude >= low && magnitude <= high) return 1.0;
  return std::ldexp(1.0, -(std::ilogb(magnitude) + 1));
}

/// max |x_ij| over x (and y, if given); a max is exact, so the parallel reduction is deterministic.
template <class T>
double max_magnitude(const host_context& ctx, matrix_view<const T> x, const matrix_view<const T>* y) {
  double result = 0.0;
  auto scan = [&](matrix_view<const T> v) {
    const index_t rows = v.rows(), cols = v.cols();
    const int threads = ctx.threads();
    (void)threads;
    double found = 0.0;
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads) if (threads > 1 && rows * cols > 65536) reduction(max : found) \
    schedule(static)
#endif
    for (index_t i = 0; i < rows; ++i) {
      const T* row = v.row_ptr(i);
      double row_max = 0.0;
      for (index_t k = 0; k < cols; ++k) row_max = std::max(row_max, std::abs(static_cast<double>(row[k])));
      found = std::max(found, row_max);
    }
    result = std::max(result, found);
  };
  scan(x);
  if (y) scan(*y);
  return result;
}

}  // namespace detail
MOECOMP_NAMESPACE_END
