#pragma once
// The argument checks of the expert-graph partition (<moecomp/similarity/partition.hpp>): parameters, shapes
// and the values of the distance matrix.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/similarity/partition_types.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/checks.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

MOECOMP_NAMESPACE_BEGIN
namespace similarity {
namespace detail {

/// The parameters on their own and against N, the experts (rows of distances).
inline void check_partition_params(const char* fn, const partition_params& params, index_t n) {
  MOECOMP_EXPECTS(params.groups >= 1 && params.groups <= n, fn, ": params.groups must be in [1, N = ", n,
                  "] (N: the rows of distances), got ", params.groups);
  MOECOMP_EXPECTS(params.max_size >= 0, fn, ": params.max_size must be >= 0 (0: no bound), got ", params.max_size);
  MOECOMP_EXPECTS(params.max_size == 0 || params.max_size >= (n + params.groups - 1) / params.groups, fn,
                  ": params.max_size x params.groups must be >= the experts (N = ", n, "), got ", params.max_size,
                  " x ", params.groups);
  MOECOMP_EXPECTS(params.restarts >= 1, fn, ": params.restarts must be >= 1, got ", params.restarts);
  MOECOMP_EXPECTS(params.kicks >= 0, fn, ": params.kicks must be >= 0, got ", params.kicks);
  MOECOMP_EXPECTS(params.exact_limit >= 0 && params.exact_limit <= max_exact_experts, fn,
                  ": params.exact_limit must be in [0, ", max_exact_experts, "], got ", params.exact_limit);
  MOECOMP_EXPECTS(std::isfinite(params.symmetry_tolerance) && params.symmetry_tolerance >= 0, fn,
                  ": params.symmetry_tolerance must be finite and >= 0, got ", params.symmetry_tolerance);
  MOECOMP_EXPECTS(resolved_partition_method(params, n) != partition_method::exact || n <= max_exact_experts, fn,
                  ": params.method must be auto or heuristic for more than ", max_exact_experts,
                  " experts (exact takes O(r 3^N) time), got exact with N = ", n);
}

/// distances square with at least one row, labels one per row.
template <class T>
void check_partition_shapes(const char* fn, matrix_view<const T> distances, vector_view<std::int64_t> labels) {
  MOECOMP_EXPECTS(distances.rows() == distances.cols() && distances.rows() >= 1, fn,
                  ": distances must be square (N x N) with N >= 1, got ",
                  moecomp::detail::shape_string(distances.rows(), distances.cols()));
  MOECOMP_EXPECTS(labels.size() == distances.rows(), fn, ": labels must have ", distances.rows(),
                  " entries (the rows of distances), got ", labels.size());
  moecomp::detail::check_no_overlap(fn, "labels", labels, "distances", distances);
}

/// Every entry finite and >= 0 (the diagonal too, though it never changes which partition is best), and
/// D_ij within params.symmetry_tolerance of D_ji. Messages name the first bad entry in row-major order.
template <class T>
void check_partition_distances(const char* fn, const partition_params& params, matrix_view<const T> d,
                               int threads) {
  moecomp::detail::check_finite(fn, "distances", d, threads);
  const index_t n = d.rows();
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j)
      MOECOMP_EXPECTS(d(i, j) >= T(0), fn, ": distances must be >= 0, got ", static_cast<double>(d(i, j)), " at (", i,
                      ", ", j, ")");
  const double tolerance = params.symmetry_tolerance;
  for (index_t i = 0; i < n; ++i)
    for (index_t j = i + 1; j < n; ++j) {
      const double a = static_cast<double>(d(i, j)), b = static_cast<double>(d(j, i));
      MOECOMP_EXPECTS(std::fabs(a - b) <= tolerance * std::max(a, b), fn,
                      ": distances must be symmetric (|D_ij - D_ji| <= params.symmetry_tolerance = ", tolerance,
                      " x max(D_ij, D_ji)), got ", a, " at (", i, ", ", j, ") and ", b, " at (", j, ", ", i, ")");
    }
}

}  // namespace detail
}  // namespace similarity
MOECOMP_NAMESPACE_END
