#pragma once
// Argument checks of Sinkhorn and the fixed-support barycenter, shared by the host and device overloads.
// Every message names the function and the argument and gives the expected and the actual value.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/ot/sinkhorn_types.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

using moecomp::detail::is_input_of_v;

template <class T>
constexpr void check_sinkhorn_element_type() {
  static_assert(moecomp::detail::is_real_v<T>,
                "moecomp::ot: Sinkhorn and barycenters support float and double");
}

inline void check_sinkhorn_params(const char* function, const sinkhorn_params& p) {
  MOECOMP_EXPECTS(std::isfinite(p.reg) && p.reg > 0, function, ": params.reg must be finite and > 0, got ", p.reg);
  MOECOMP_EXPECTS(p.max_iterations >= 1, function, ": params.max_iterations must be >= 1, got ", p.max_iterations);
  MOECOMP_EXPECTS(std::isfinite(p.tolerance) && p.tolerance >= 0, function,
                  ": params.tolerance must be finite and >= 0, got ", p.tolerance);
  MOECOMP_EXPECTS(p.check_every >= 0, function,
                  ": params.check_every must be >= 1, or 0 for POT's period of the method, got ", p.check_every);
  if (p.method == sinkhorn_method::stabilized || p.method == sinkhorn_method::epsilon_scaling)
    MOECOMP_EXPECTS(p.absorb_threshold > 0 && !std::isnan(p.absorb_threshold), function,
                    ": params.absorb_threshold must be > 0, got ", p.absorb_threshold);
  if (p.method == sinkhorn_method::epsilon_scaling) {
    MOECOMP_EXPECTS(std::isfinite(p.epsilon_start) && p.epsilon_start >= p.reg, function,
                    ": params.epsilon_start must be finite and >= params.reg (", p.reg, "), got ", p.epsilon_start);
    MOECOMP_EXPECTS(std::isfinite(p.epsilon_decay) && p.epsilon_decay > 0, function,
                    ": params.epsilon_decay must be finite and > 0, got ", p.epsilon_decay);
    MOECOMP_EXPECTS(p.inner_iterations >= 1, function, ": params.inner_iterations must be >= 1, got ",
                    p.inner_iterations);
    MOECOMP_EXPECTS(p.inner_check_every >= 1, function, ": params.inner_check_every must be >= 1, got ",
                    p.inner_check_every);
  }
}

/// Masses must be finite and >= 0 with a positive total; returns the total (in double).
template <class Get>
double check_histogram(const char* function, const char* name, index_t size, Get&& get) {
  const double total = moecomp::detail::check_masses(function, name, size, get);
  moecomp::detail::check_positive_total(function, name, total);
  return total;
}

/// Relative tolerance on |sum a - sum b|: rounding of the caller's normalisation in T.
template <class T>
constexpr double mass_tolerance() {
  return std::max(1e-6, 64.0 * static_cast<double>(std::numeric_limits<T>::epsilon()));
}

template <class T>
void check_equal_mass(const char* function, double sum_a, double sum_b) {
  moecomp::detail::check_equal_totals(function, sum_a, sum_b, mass_tolerance<T>());
}

using moecomp::detail::first_non_finite_row;

/// Every entry of a host cost matrix is finite; the message names the first bad entry in row-major order
/// (whatever the thread count: the rows are scanned in parallel, the lowest bad row is reported).
template <class T>
void check_finite_cost(const char* function, const char* name, matrix_view<T> cost, int threads = 1) {
  moecomp::detail::check_finite(function, name, cost, threads);
}

/// A host cost in which +inf marks a forbidden pair (its plan entry is 0, as POT's exp(-inf) gives): NaN and
/// -inf are refused at the first such entry, and so is a row or a column that forbids every pair (its mass,
/// or its 0 / 0 scaling, would have nowhere to go). Returns whether any +inf is present. All-finite costs
/// (the common case) cost one vectorised scan, as check_finite_cost.
template <class T>
bool check_cost_with_forbidden_pairs(const char* function, const char* name, matrix_view<T> cost, int threads = 1) {
  const index_t n = cost.rows(), m = cost.cols();
  const index_t first_bad_row = first_non_finite_row(cost, threads);
  if (first_bad_row == n) return false;
  for (index_t i = first_bad_row; i < n; ++i) {
    const T* row = cost.row_ptr(i);
    bool allowed = false;
    for (index_t j = 0; j < m; ++j) {
      const double x = static_cast<double>(row[j]);
      MOECOMP_EXPECTS(x == x && x > -std::numeric_limits<double>::infinity(), function, ": ", name,
                      " must hold numbers or +inf (a forbidden pair), got ", x, " at (", i, ", ", j, ")");
      allowed = allowed || std::isfinite(x);
    }
    MOECOMP_EXPECTS(allowed, function, ": ", name, " row ", i, " is +inf (forbidden) everywhere: that row's mass has "
                    "nowhere to go");
  }
  for (index_t j = 0; j < m; ++j) {
    bool allowed = false;
    for (index_t i = 0; i < n && !allowed; ++i) allowed = std::isfinite(static_cast<double>(cost(i, j)));
    MOECOMP_EXPECTS(allowed, function, ": ", name, " column ", j, " is +inf (forbidden) everywhere: no mass can "
                    "reach it");
  }
  return true;
}

/// <plan, cost> over the allowed pairs only (a forbidden pair's plan entry is 0, and 0 * inf would be NaN),
/// rows summed in order.
template <class T>
double cost_over_allowed_pairs(matrix_view<const T> plan, matrix_view<const T> cost) {
  double total = 0.0;
  for (index_t i = 0; i < plan.rows(); ++i) {
    const T* p = plan.row_ptr(i);
    const T* c = cost.row_ptr(i);
    double row = 0.0;
    for (index_t j = 0; j < plan.cols(); ++j)
      if (std::isfinite(static_cast<double>(c[j]))) row += static_cast<double>(p[j]) * static_cast<double>(c[j]);
    total += row;
  }
  return total;
}

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
