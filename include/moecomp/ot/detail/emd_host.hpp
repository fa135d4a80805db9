#pragma once
// Exact optimal transport on the host, behind <moecomp/ot/emd.hpp>: the checks, the network simplex solve and the output of the basic plan.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/ot/emd_types.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/ot/detail/network_simplex.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

using moecomp::detail::is_real_v;

/// a, b and cost: views of one element type (float or double), each const or mutable.
template <class A, class B, class C>
inline constexpr bool emd_inputs_v = is_real_v<std::remove_const_t<A>> &&
                                     std::is_same_v<std::remove_const_t<A>, std::remove_const_t<B>> &&
                                     std::is_same_v<std::remove_const_t<A>, std::remove_const_t<C>>;

struct basic_entry {
  index_t row, col;
  double mass;
};

/// Checks the inputs, solves, and hands the positive basic entries (sorted by row, then column) to `emit`.
/// u and v are filled when not null.
/// `begin()` runs once after the checks and the solve, before the entries.
template <class T, class Begin, class Emit>
emd_result solve_emd(const char* fn, const host_context& ctx, const emd_params& params, vector_view<const T> a,
                     vector_view<const T> b, matrix_view<const T> cost, const vector_view<double>* u,
                     const vector_view<double>* v, Begin&& begin, Emit&& emit) {
  const index_t n = cost.rows(), m = cost.cols();
  MOECOMP_EXPECTS(params.max_iterations >= 0, fn, ": params.max_iterations must be >= 0, got ",
                  params.max_iterations);
  MOECOMP_EXPECTS(params.mass_tolerance >= 0 && params.mass_tolerance < 1, fn,
                  ": params.mass_tolerance must be in [0, 1), got ", params.mass_tolerance);
  MOECOMP_EXPECTS(n >= 1 && m >= 1, fn, ": cost must have at least one row and one column, got ",
                  moecomp::detail::shape_string(n, m));
  MOECOMP_EXPECTS(n + m < std::numeric_limits<std::int32_t>::max(), fn, ": cost is too large (",
                  moecomp::detail::shape_string(n, m), "): n + m must stay below 2^31 - 1");
  MOECOMP_EXPECTS(a.size() == n, fn, ": a must have ", n, " entries (the rows of cost, ",
                  moecomp::detail::shape_string(n, m), "), got ", a.size());
  MOECOMP_EXPECTS(b.size() == m, fn, ": b must have ", m, " entries (the columns of cost, ",
                  moecomp::detail::shape_string(n, m), "), got ", b.size());
  if (u) MOECOMP_EXPECTS(u->size() == n, fn, ": u must have ", n, " entries (the size of a), got ", u->size());
  if (v) MOECOMP_EXPECTS(v->size() == m, fn, ": v must have ", m, " entries (the size of b), got ", v->size());

  moecomp::detail::host_workspace<double> supply(ctx, static_cast<std::size_t>(n)),
      demand(ctx, static_cast<std::size_t>(m));
  const double sum_a = moecomp::detail::check_masses(fn, "a", n, [&](index_t i) { return a[i]; });
  const double sum_b = moecomp::detail::check_masses(fn, "b", m, [&](index_t j) { return b[j]; });
  moecomp::detail::check_equal_totals(fn, sum_a, sum_b, params.mass_tolerance);
  for (index_t i = 0; i < n; ++i) supply[static_cast<std::size_t>(i)] = static_cast<double>(a[i]);
  for (index_t j = 0; j < m; ++j) demand[static_cast<std::size_t>(j)] = static_cast<double>(b[j]);
  // Within the tolerance, b is rescaled to a's mass (POT does the same).
  if (sum_b > 0 && sum_b != sum_a)
    for (index_t j = 0; j < m; ++j) demand[static_cast<std::size_t>(j)] *= sum_a / sum_b;
  for (index_t i = 0; i < n; ++i) {
    const T* row = cost.row_ptr(i);
    bool bad = false;
    for (index_t j = 0; j < m; ++j) bad |= !(row[j] > -std::numeric_limits<T>::infinity());
    if (MOECOMP_UNLIKELY(bad))
      for (index_t j = 0; j < m; ++j)
        MOECOMP_EXPECTS(row[j] > -std::numeric_limits<T>::infinity(), fn, ": cost(", i, ", ", j, ") is ",
                        static_cast<double>(row[j]), "; entries must be numbers, +inf marks a forbidden pair");
  }

  transport_simplex<T> simplex(ctx, cost, supply.data(), demand.data(), sum_a);
  simplex.solve(params.max_iterations);

  emd_result result;
  result.status = simplex.status();
  result.iterations = simplex.iterations();
  result.criterion = simplex.entering_reduced_cost();
  moecomp::detail::host_workspace<basic_entry> entries(ctx, static_cast<std::size_t>(n + m));
  std::size_t count = 0;
  simplex.for_each_basic_arc([&](index_t i, index_t j, double x) {
    if (x > 0) entries[count++] = basic_entry{i, j, x};
  });
  std::sort(entries.data(), entries.data() + count, [](const basic_entry& l, const basic_entry& r) {
    return l.row != r.row ? l.row < r.row : l.col < r.col;
  });
  begin();
  double total = 0;
  for (std::size_t k = 0; k < count; ++k) {
    const basic_entry& e = entries[k];
    total += static_cast<double>(cost(e.row, e.col)) * e.mass;
    emit(k, e);
  }
  result.cost = total;
  result.nonzeros = static_cast<index_t>(count);

  if (u || v) {
    // u_i = -pi_i, v_j = pi_j: u_i + v_j <= c_ij, with equality on the plan's support.
    moecomp::detail::host_workspace<double> du(ctx, static_cast<std::size_t>(n)), dv(ctx, static_cast<std::size_t>(m));
    for (index_t i = 0; i < n; ++i) du[static_cast<std::size_t>(i)] = -simplex.row_potential(i);
    for (index_t j = 0; j < m; ++j) dv[static_cast<std::size_t>(j)] = simplex.column_potential(j);
    // Rows and columns of zero mass took no part: give them the largest dual that stays feasible.
    for (index_t i = 0; i < n; ++i) {
      if (supply[static_cast<std::size_t>(i)] > 0) continue;
      double best = std::numeric_limits<double>::infinity();
      for (index_t j = 0; j < m; ++j)
        if (demand[static_cast<std::size_t>(j)] > 0)
          best = std::min(best, static_cast<double>(cost(i, j)) - dv[static_cast<std::size_t>(j)]);
      du[static_cast<std::size_t>(i)] = std::isfinite(best) ? best : 0.0;
    }
    for (index_t j = 0; j < m; ++j) {
      if (demand[static_cast<std::size_t>(j)] > 0) continue;
      double best = std::numeric_limits<double>::infinity();
      for (index_t i = 0; i < n; ++i) best = std::min(best, static_cast<double>(cost(i, j)) - du[static_cast<std::size_t>(i)]);
      dv[static_cast<std::size_t>(j)] = std::isfinite(best) ? best : 0.0;
    }
    // POT's centring: shift u up and v down by one constant so that <a, u> = <b, v>.
    if (sum_a > 0) {
      double au = 0, bv = 0;
      for (index_t i = 0; i < n; ++i) au += supply[static_cast<std::size_t>(i)] * du[static_cast<std::size_t>(i)];
      for (index_t j = 0; j < m; ++j) bv += demand[static_cast<std::size_t>(j)] * dv[static_cast<std::size_t>(j)];
      const double shift = (bv - au) / (2 * sum_a);
      for (index_t i = 0; i < n; ++i) du[static_cast<std::size_t>(i)] += shift;
      for (index_t j = 0; j < m; ++j) dv[static_cast<std::size_t>(j)] -= shift;
    }
    if (u)
      for (index_t i = 0; i < n; ++i) (*u)[i] = du[static_cast<std::size_t>(i)];
    if (v)
      for (index_t j = 0; j < m; ++j) (*v)[j] = dv[static_cast<std::size_t>(j)];
  }
  return result;
}

inline void check_plan_shape(const char* fn, index_t n, index_t m, const matrix_view<double>& plan) {
  MOECOMP_EXPECTS(plan.rows() == n && plan.cols() == m, fn, ": plan must be ", moecomp::detail::shape_string(n, m),
                  " like cost, got ", moecomp::detail::shape_string(plan.rows(), plan.cols()));
}

inline void check_sparse_capacity(const char* fn, index_t n, index_t m, const vector_view<index_t>& rows,
                                  const vector_view<index_t>& cols, const vector_view<double>& mass) {
  const index_t need = n + m - 1;
  MOECOMP_EXPECTS(rows.size() >= need, fn, ": rows must hold at least n + m - 1 = ", need, " entries, got ",
                  rows.size());
  MOECOMP_EXPECTS(cols.size() >= need, fn, ": cols must hold at least n + m - 1 = ", need, " entries, got ",
                  cols.size());
  MOECOMP_EXPECTS(mass.size() >= need, fn, ": mass must hold at least n + m - 1 = ", need, " entries, got ",
                  mass.size());
}

/// Dense-plan solve: validates, solves, zeroes `plan` and writes the support.
template <class T>
emd_result emd_dense(const char* fn, const host_context& ctx, const emd_params& params, vector_view<const T> a,
                     vector_view<const T> b, matrix_view<const T> cost, matrix_view<double> plan,
                     const vector_view<double>* u, const vector_view<double>* v) {
  check_plan_shape(fn, cost.rows(), cost.cols(), plan);
  return solve_emd<T>(
      fn, ctx, params, a, b, cost, u, v,
      [&] {
        for (index_t i = 0; i < plan.rows(); ++i) std::fill(plan.row_ptr(i), plan.row_ptr(i) + plan.cols(), 0.0);
      },
      [&](std::size_t, const basic_entry& e) { plan(e.row, e.col) = e.mass; });
}

/// List-plan solve: validates, solves, writes the positive basic entries.
template <class T>
emd_result emd_list(const char* fn, const host_context& ctx, const emd_params& params, vector_view<const T> a,
                    vector_view<const T> b, matrix_view<const T> cost, vector_view<index_t> rows,
                    vector_view<index_t> cols, vector_view<double> mass, const vector_view<double>* u,
                    const vector_view<double>* v) {
  check_sparse_capacity(fn, cost.rows(), cost.cols(), rows, cols, mass);
  return solve_emd<T>(fn, ctx, params, a, b, cost, u, v, [] {}, [&](std::size_t k, const basic_entry& e) {
    rows[static_cast<index_t>(k)] = e.row;
    cols[static_cast<index_t>(k)] = e.col;
    mass[static_cast<index_t>(k)] = e.mass;
  });
}

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
