#pragma once
// Pieces shared by the two free-support barycenter paths: the GEMM that builds the cross term of the
// squared Euclidean cost, argument checks, and deterministic reductions.
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>

#include <moecomp/core/detail/gemm.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

using moecomp::detail::concat;
using moecomp::detail::host_workspace;
using moecomp::detail::shape_string;

/// Rows of the cost built by one GEMM call. The row tiling is fixed (it does not depend on the thread
/// count), so every cost entry is computed the same way whichever thread computes it.
inline constexpr index_t free_support_cost_rows = 256;

/// Index of the first non-finite element of a matrix (row-major order), or -1.
template <class T>
index_t free_support_first_non_finite(matrix_view<const T> x) {
  for (index_t i = 0; i < x.rows(); ++i) {
    const T* row = x.row_ptr(i);
    for (index_t j = 0; j < x.cols(); ++j)
      if (!std::isfinite(row[j])) return i * x.cols() + j;
  }
  return -1;
}

/// Checks a probability vector: finite, >= 0 (or > 0 when `positive`), sum within 1e-6 of 1.
template <class W>
void free_support_check_probabilities(const char* function, const char* name, vector_view<W> w, bool positive) {
  double sum = 0.0;
  for (index_t i = 0; i < w.size(); ++i) {
    const double v = w[i];
    MOECOMP_EXPECTS(std::isfinite(v) && (positive ? v > 0.0 : v >= 0.0), function, ": ", name, " must be finite and ",
                    positive ? "> 0" : ">= 0", ", got ", v, " at index ", i);
    sum += v;
  }
  MOECOMP_EXPECTS(std::abs(sum - 1.0) <= 1e-6, function, ": ", name, " must sum to 1 (within 1e-6), got ", sum);
}

/// Whether two memory ranges [a, a + na) and [b, b + nb) of the same element type overlap.
template <class A, class B>
bool free_support_overlap(const A* a, index_t na, const B* b, index_t nb) {
  if (na == 0 || nb == 0) return false;
  const auto a0 = reinterpret_cast<std::uintptr_t>(a), b0 = reinterpret_cast<std::uintptr_t>(b);
  const auto a1 = a0 + static_cast<std::uintptr_t>(na) * sizeof(A), b1 = b0 + static_cast<std::uintptr_t>(nb) * sizeof(B);
  return a0 < b1 && b0 < a1;
}

/// Elements a matrix view spans in memory (first to last element).
template <class T>
index_t free_support_span(matrix_view<T> x) {
  return x.empty() ? 0 : (x.rows() - 1) * x.row_stride() + x.cols();
}

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
