#pragma once
// Linear assignment by the auction algorithm with epsilon-scaling, on the host: the same problem as
// <moecomp/ot/linear_assignment.hpp> (n x m cost, n <= m, minimise or maximise, forbidden pairs), solved
// to a proven bound |cost - optimum| <= result.criterion = m * final epsilon (exactly on integer costs with
// epsilon_final < 1 / m, which is the automatic choice for them). The device version, same parameters and
// result, is in <moecomp/cuda/ot/auction_assignment.cuh>. Documentation: docs/linear_assignment.md.
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/ot/linear_assignment_types.hpp>
#include <moecomp/ot/detail/auction_host.hpp>
#include <moecomp/ot/detail/linear_assignment_checks.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

template <class T>
auction_result solve_auction(const host_context& ctx, const auction_params& params, matrix_view<const T> cost,
                             vector_view<index_t> row_to_column, vector_view<double>* column_price) {
  constexpr const char* function = "auction_assignment";
  const index_t n = cost.rows(), m = cost.cols();
  check_assignment_shape(function, n, m, row_to_column.size());
  check_auction_params(function, params);
  MOECOMP_EXPECTS(!params.warm_start || column_price != nullptr, function,
                  ": params.warm_start needs the overload with column_price (the starting prices)");
  if (column_price) check_column_vector(function, "column_price", m, column_price->size());
  check_cost_values<T>(function, cost, params.maximize);
  const double sign = params.maximize ? -1.0 : 1.0;
  auction_result result;
  if (n == 0) return result;

  const auction_cost_summary summary = summarize_auction_costs<T>(cost, params.maximize);
  moecomp::detail::host_workspace<double> v(ctx, static_cast<std::size_t>(m));
  moecomp::detail::host_workspace<std::int32_t> columns(ctx, static_cast<std::size_t>(n));
  for (index_t j = 0; j < m; ++j) {
    if (params.warm_start) {
      const double p = (*column_price)(j);
      MOECOMP_EXPECTS(std::isfinite(p), function, ": column_price(", j, ") is ", p,
                      "; a warm start needs finite prices");
      v[static_cast<std::size_t>(j)] = -p;
    } else {
      v[static_cast<std::size_t>(j)] = 0.0;
    }
  }
  auto fail = [&](status s) {
    for (index_t i = 0; i < n; ++i) row_to_column(i) = -1;
    result.status = s;
    result.cost = s == status::infeasible ? sign * lsa_inf : std::numeric_limits<double>::quiet_NaN();
    result.criterion = lsa_inf;
    return result;
  };
  if (!summary.any_finite()) return fail(status::infeasible);

  const auction_schedule schedule = make_auction_schedule(params, summary, n, m);
  auction_workspace workspace(ctx, m);
  double epsilon_done = lsa_inf;
  const status outcome =
      params.maximize
          ? run_auction<T, true>(cost.data(), cost.row_stride(), n, m, schedule, params.max_bids, v.data(),
                                 workspace, columns.data(), epsilon_done, result.iterations, result.phases)
          : run_auction<T, false>(cost.data(), cost.row_stride(), n, m, schedule, params.max_bids, v.data(),
                                  workspace, columns.data(), epsilon_done, result.iterations, result.phases);
  if (column_price)
    for (index_t j = 0; j < m; ++j) (*column_price)(j) = -v[static_cast<std::size_t>(j)];
  if (!std::isfinite(epsilon_done)) return fail(outcome);  // stopped before any phase completed

  double total = 0.0;
  bool penalised = false;
  for (index_t i = 0; i < n; ++i) {
    const std::int32_t j = columns[static_cast<std::size_t>(i)];
    row_to_column(i) = j;
    const double c = static_cast<double>(cost(i, j));
    penalised = penalised || std::isinf(c);
    total += c;
  }
  // With the penalty chosen by make_auction_schedule, a complete epsilon-optimal assignment uses a
  // forbidden pair only when every assignment does.
  if (penalised) return fail(status::infeasible);
  result.cost = total;
  result.status = outcome;
  result.criterion = static_cast<double>(m) * epsilon_done;
  return result;
}

}  // namespace detail

/// Assignment of the n rows to distinct columns by the auction algorithm with epsilon-scaling, within
/// result.criterion = m * (final epsilon) of the optimum (exactly optimal on integer costs when the final epsilon
/// is < 1 / m: the automatic choice for integer costs). cost: n x m, n <= m, float or double, +inf (-inf when
/// maximising) forbidden; row_to_column: length n. Status ok; iteration_limit when params.max_bids stopped
/// it: row_to_column then holds the last complete phase's assignment with its own result.criterion, or all -1 (cost
/// NaN, result.criterion +inf) when no phase completed; infeasible (all -1, cost +inf / -inf). Gauss-Seidel bidding
/// in a FIFO order: deterministic. Workspace O(m); the cost is never copied.
template <class U, std::enable_if_t<detail::is_real_v<std::remove_const_t<U>>, int> = 0>
auction_result auction_assignment(const host_context& ctx, const auction_params& params, matrix_view<U> cost,
                                  vector_view<index_t> row_to_column) {
  using T = std::remove_const_t<U>;
  return detail::solve_auction<T>(ctx, params, matrix_view<const T>(cost), row_to_column, nullptr);
}

/// The same, also returning the final column prices p (length m): bidder i prefers the column minimising
/// C(i, j) + p_j (maximising C(i, j) - p_j when params.maximize); they relate to linear_assignment's column
/// potentials by v = -p (v = p when maximising), up to epsilon. With params.warm_start the prices are read
/// first as the starting point (e.g. the previous solve's output on a nearby problem).
template <class U, std::enable_if_t<detail::is_real_v<std::remove_const_t<U>>, int> = 0>
auction_result auction_assignment(const host_context& ctx, const auction_params& params, matrix_view<U> cost,
                                  vector_view<index_t> row_to_column, vector_view<double> column_price) {
  using T = std::remove_const_t<U>;
  return detail::solve_auction<T>(ctx, params, matrix_view<const T>(cost), row_to_column, &column_price);
}

}  // namespace ot
MOECOMP_NAMESPACE_END
