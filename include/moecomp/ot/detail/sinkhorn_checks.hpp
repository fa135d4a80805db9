#pragma once
// Argument checks of Sinkhorn and the fixed-support barycenter, shared by the host and device overloads.
// Every message names the function and the argument and gives the expected and the actual value.
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
template <class T, class Get>
double check_histogram(const char* function, const char* name, index_t size, Get&& get) {
  double total = 0;
  for (index_t i = 0; i < size; ++i) {
    const double x = static_cast<double>(get(i));
    MOECOMP_EXPECTS(std::isfinite(x) && x >= 0, function, ": ", name, " must hold finite masses >= 0, got ", x,
                    " at index ", i);
    total += x;
  }
  MOECOMP_EXPECTS(total > 0, function, ": ", name, " must have a positive total mass, got ", total);
  return total;
}

/// Relative tolerance on |sum a - sum b|: rounding of the caller's normalisation in T.
template <class T>
constexpr double mass_tolerance() {
  return std::max(1e-6, 64.0 * static_cast<double>(std::numeric_limits<T>::epsilon()));
}

template <class T>
void check_equal_mass(const char* function, double sum_a, double sum_b) {
  MOECOMP_EXPECTS(std::fabs(sum_a - sum_b) <= mass_tolerance<T>() * std::max(sum_a, sum_b), function,
                  ": a and b must have equal total mass (relative difference <= ", mass_tolerance<T>(),
                  "), got sum(a) = ", sum_a, " and sum(b) = ", sum_b);
}

/// Whether x[0..count) are all finite. Branch-free on the bit patterns (the exponent field is all ones
/// exactly for inf and NaN) so that it vectorises: the check reads the whole cost matrix.
template <class T>
bool row_is_finite(const T* x, index_t count) noexcept {
  if constexpr (std::is_same_v<std::remove_const_t<T>, double> || std::is_same_v<std::remove_const_t<T>, float>) {
    using bits_type = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
    constexpr bits_type exponent = sizeof(T) == 8 ? bits_type(0x7ff0000000000000ull) : bits_type(0x7f800000u);
    bits_type bad = 0;
    for (index_t j = 0; j < count; ++j) {
      bits_type bits;
      std::memcpy(&bits, x + j, sizeof bits);
      bad |= (bits & exponent) == exponent;
    }
    return bad == 0;
  } else {
    for (index_t j = 0; j < count; ++j)
      if (!std::isfinite(static_cast<double>(x[j]))) return false;
    return true;
  }
}

/// Below this many entries the finite check runs on one thread.
constexpr index_t finite_check_parallel_min_entries = index_t(1) << 18;

/// The lowest row of a host matrix holding a non-finite entry, or rows() when there is none. Rows are scanned
/// in parallel; the minimum does not depend on the thread count.
template <class T, class Space>
index_t first_non_finite_row(matrix_view<T, Space> cost, int threads) {
  const index_t n = cost.rows(), m = cost.cols();
  index_t first_bad_row = n;
  (void)threads;
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads) if (threads > 1 && n * m >= finite_check_parallel_min_entries) \
    reduction(min : first_bad_row) schedule(static)
#endif
  for (index_t i = 0; i < n; ++i)
    if (!row_is_finite(cost.row_ptr(i), m)) first_bad_row = std::min(first_bad_row, i);
  return first_bad_row;
}

/// Every entry of a host cost matrix is finite; the message names the first bad entry in row-major order
/// (whatever the thread count: the rows are scanned in parallel, the lowest bad row is reported).
template <class T, class Space>
void check_finite_cost(const char* function, const char* name, matrix_view<T, Space> cost, int threads = 1) {
  const index_t m = cost.cols();
  const index_t first_bad_row = first_non_finite_row(cost, threads);
  if (first_bad_row == cost.rows()) return;
  const T* row = cost.row_ptr(first_bad_row);
  for (index_t j = 0; j < m; ++j)
    MOECOMP_EXPECTS(std::isfinite(static_cast<double>(row[j])), function, ": ", name, " must be finite, got ",
                    static_cast<double>(row[j]), " at (", first_bad_row, ", ", j, ")");
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

/// True when the memory spanned by the two matrices intersects.
template <class T, class U, class Space>
bool spans_overlap(matrix_view<T, Space> x, matrix_view<U, Space> y) {
  if (x.empty() || y.empty()) return false;
  const auto x_first = reinterpret_cast<std::uintptr_t>(x.data());
  const auto x_last = reinterpret_cast<std::uintptr_t>(x.row_ptr(x.rows() - 1) + x.cols());
  const auto y_first = reinterpret_cast<std::uintptr_t>(y.data());
  const auto y_last = reinterpret_cast<std::uintptr_t>(y.row_ptr(y.rows() - 1) + y.cols());
  return x_first < y_last && y_first < x_last;
}

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
