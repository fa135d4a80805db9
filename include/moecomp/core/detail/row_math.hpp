#pragma once
// Exact-as-possible reductions over two rows, accumulated in double in index order: what the modules report as
// an objective (k-means inertia, alignment costs) after a GEMM-based search, recomputed from the rows.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

/// sum_k (a_k - b_k)^2 in double (T any of numeric_types.hpp's).
template <class T>
double squared_distance(const T* a, const T* b, index_t d) noexcept {
  double s = 0;
  for (index_t k = 0; k < d; ++k) {
    const double t = convert_to<double>(a[k]) - convert_to<double>(b[k]);
    s += t * t;
  }
  return s;
}

/// sum_k a_k b_k in double.
template <class T>
double dot(const T* a, const T* b, index_t d) noexcept {
  double s = 0;
  for (index_t k = 0; k < d; ++k) s += convert_to<double>(a[k]) * convert_to<double>(b[k]);
  return s;
}

}  // namespace detail
MOECOMP_NAMESPACE_END
