#pragma once
// Argument checks shared by the assignment solvers (Jonker-Volgenant, auction; host and device): shapes
// and the cost's values, with messages that name the function, the argument, and what was expected.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/core/views.hpp>

#include <cstdint>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

using moecomp::detail::is_real_v;

/// n <= m, both addressable by the solvers' 32-bit indices, and an output of n entries.
inline void check_assignment_shape(const char* function, index_t n, index_t m, index_t output_size,
                                   const char* output_name = "row_to_column") {
  MOECOMP_EXPECTS(n <= m, function, ": cost must have no more rows than columns (n <= m), got ",
                  moecomp::detail::shape_string(n, m), "; pass the transpose to assign columns to rows");
  MOECOMP_EXPECTS(m < std::numeric_limits<std::int32_t>::max(), function,
                  ": cost must have fewer than 2^31 - 1 columns, got ", m);
  MOECOMP_EXPECTS(output_size == n, function, ": ", output_name, " must have length n = ", n,
                  " (the cost's rows), got ", output_size);
}

/// Column-potential-like vectors: length m.
inline void check_column_vector(const char* function, const char* name, index_t m, index_t size) {
  MOECOMP_EXPECTS(size == m, function, ": ", name, " must have length m = ", m, " (the cost's columns), got ",
                  size);
}

/// Rejects NaN anywhere and the infinity of the wrong sign: +inf marks a forbidden pair when minimising,
/// -inf when maximising; the other infinity would make the objective unbounded.
template <class T>
void check_cost_values(const char* function, matrix_view<const T> cost, bool maximize, const char* name = "cost") {
  const T rejected = maximize ? std::numeric_limits<T>::infinity() : -std::numeric_limits<T>::infinity();
  const index_t m = cost.cols();
  for (index_t i = 0; i < cost.rows(); ++i) {
    const T* row = cost.row_ptr(i);
    int bad = 0;
    for (index_t k = 0; k < m; ++k) bad |= static_cast<int>(row[k] != row[k]) | static_cast<int>(row[k] == rejected);
    if (MOECOMP_LIKELY(bad == 0)) continue;
    for (index_t k = 0; k < m; ++k) {
      MOECOMP_EXPECTS(row[k] == row[k], function, ": ", name, "(", i, ", ", k,
                      ") is NaN; costs must be numbers (", maximize ? "-inf" : "+inf", " marks a forbidden pair)");
      MOECOMP_EXPECTS(row[k] != rejected, function, ": ", name, "(", i, ", ", k, ") is ", maximize ? "+inf" : "-inf",
                      "; when ", maximize ? "maximising" : "minimising", " only ", maximize ? "-inf" : "+inf",
                      " (a forbidden pair) may be infinite");
    }
  }
}

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
