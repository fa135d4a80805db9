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
#include <moecomp/ot/detail/auction_host.hpp>
#include <moecomp/core/detail/traits.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace ot {

/// Assignment of the n rows to distinct columns by the auction algorithm with epsilon-scaling, within
/// result.criterion = m * (final epsilon) of the optimum (exactly optimal on integer costs when the final epsilon
/// is < 1 / m: the automatic choice for integer costs). cost: n x m, n <= m, float or double, +inf (-inf when
/// maximising) forbidden; row_to_column: length n. Status ok; iteration_limit when params.max_bids stopped
/// it: row_to_column then holds the last complete phase's assignment with its own result.criterion, or all -1 (cost
/// NaN, result.criterion +inf) when no phase completed; infeasible (all -1, cost +inf / -inf). Gauss-Seidel bidding
/// in a FIFO order: deterministic. Workspace O(m); the cost is never copied.
template <class U, std::enable_if_t<moecomp::detail::is_real_input_v<U>, int> = 0>
auction_result auction_assignment(const host_context& ctx, const auction_params& params, matrix_view<U> cost,
                                  vector_view<index_t> row_to_column) {
  using T = std::remove_const_t<U>;
  return detail::solve_auction<T>(ctx, params, matrix_view<const T>(cost), row_to_column, nullptr);
}

/// The same, also returning the final column prices p (length m): bidder i prefers the column minimising
/// C(i, j) + p_j (maximising C(i, j) - p_j when params.maximize); they relate to linear_assignment's column
/// potentials by v = -p (v = p when maximising), up to epsilon. With params.warm_start the prices are read
/// first as the starting point (e.g. the previous solve's output on a nearby problem).
template <class U, std::enable_if_t<moecomp::detail::is_real_input_v<U>, int> = 0>
auction_result auction_assignment(const host_context& ctx, const auction_params& params, matrix_view<U> cost,
                                  vector_view<index_t> row_to_column, vector_view<double> column_price) {
  using T = std::remove_const_t<U>;
  return detail::solve_auction<T>(ctx, params, matrix_view<const T>(cost), row_to_column, &column_price);
}

}  // namespace ot
MOECOMP_NAMESPACE_END
