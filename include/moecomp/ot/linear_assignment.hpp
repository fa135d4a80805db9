#pragma once
// Exact linear assignment on the host: scipy.optimize.linear_sum_assignment's problem (rectangular n <= m,
// minimise or maximise, +inf / -inf as forbidden pairs) solved by the Jonker-Volgenant shortest augmenting
// path algorithm with LAPJV's initialisation; dual potentials, warm start, and a batched form for many
// small problems. Documentation: docs/linear_assignment.md. The auction solver (approximate, with a proven
// gap bound; also on the GPU) is in <moecomp/ot/auction_assignment.hpp>.
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/ot/linear_assignment_types.hpp>
#include <moecomp/ot/detail/linear_assignment_checks.hpp>
#include <moecomp/ot/detail/linear_assignment_jv.hpp>
#include <moecomp/ot/detail/linear_assignment_jv.hpp>
#include <moecomp/core/detail/traits.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace ot {

/// Exact minimum (or with params.maximize, maximum) of sum_i C(i, row_to_column[i]) over assignments of the
/// n rows to distinct columns. cost: n x m, n <= m, float or double (read in its type, computed in double);
/// +inf entries (-inf when maximising) are forbidden pairs, NaN and the other infinity are rejected.
/// row_to_column: length n, receives the column of each row. status::infeasible (and row_to_column all -1)
/// when every complete assignment uses a forbidden pair. Workspace: O(n + m); the cost is never copied.
template <class U, std::enable_if_t<moecomp::detail::is_real_input_v<U>, int> = 0>
linear_assignment_result linear_assignment(const host_context& ctx, const linear_assignment_params& params,
                                           matrix_view<U> cost, vector_view<index_t> row_to_column) {
  using T = std::remove_const_t<U>;
  return detail::solve_assignment<T>(ctx, "linear_assignment", params, matrix_view<const T>(cost), row_to_column,
                                     nullptr, nullptr);
}

/// The same, also returning the optimal dual potentials (in double): row_potential u (length n) and
/// column_potential v (length m) with u_i + v_j <= C(i, j) for every finite pair and equality on the
/// assigned pairs (>= and equality when maximising). Rectangular problems (n < m) get the LP dual of
/// "each column at most once": v_j <= 0 (>= 0 when maximising) and v_j = 0 on the m - n unassigned columns.
/// Infeasible problems: both filled with NaN.
///
/// Warm start (params.warm_start, square problems): column_potential is read as the starting potentials
/// (finite, the caller's sign, e.g. the previous solve's output) and row_to_column as a hint (entries
/// outside [0, m) and repeated columns are ignored): a row keeps its hinted column, or else its best one,
/// when that column is a tight minimum of C(i, j) - v_j and still free; the other rows are solved as usual.
/// The answer is exact whatever was read; only the time depends on it. Rectangular problems start cold.
template <class U, std::enable_if_t<moecomp::detail::is_real_input_v<U>, int> = 0>
linear_assignment_result linear_assignment(const host_context& ctx, const linear_assignment_params& params,
                                           matrix_view<U> cost, vector_view<index_t> row_to_column,
                                           vector_view<double> row_potential, vector_view<double> column_potential) {
  using T = std::remove_const_t<U>;
  return detail::solve_assignment<T>(ctx, "linear_assignment", params, matrix_view<const T>(cost), row_to_column,
                                     &row_potential, &column_potential);
}

/// A batch of independent problems of one shape n x m (the batch rule, docs/index.md): costs is a stack of
/// batch n x m matrices, row_to_column (batch x n) and results (batch) hold one problem per row / entry;
/// the batch size is costs.count() and the others must agree. Problems run in parallel over ctx.threads()
/// (OpenMP); each is solved sequentially, so the answer is the same for every thread count.
/// params.warm_start is not available here (there are no potentials to read).
template <class U, std::enable_if_t<moecomp::detail::is_real_input_v<U>, int> = 0>
void linear_assignment_batched(const host_context& ctx, const linear_assignment_params& params,
                               matrix_stack_view<U> costs, matrix_view<index_t> row_to_column,
                               vector_view<linear_assignment_result> results) {
  using T = std::remove_const_t<U>;
  constexpr const char* function = "linear_assignment_batched";
  const index_t batch = costs.count(), n = costs.rows(), m = costs.cols();
  MOECOMP_EXPECTS(results.size() == batch, function, ": results must have ", batch, " entries (one per cost matrix), got ",
                  results.size());
  MOECOMP_EXPECTS(!params.warm_start, function, ": params.warm_start is not supported (no potentials to read)");
  MOECOMP_EXPECTS(n <= m, function, ": each problem must have no more rows than columns (n <= m), got ",
                  moecomp::detail::shape_string(n, m), " per problem");
  MOECOMP_EXPECTS(row_to_column.rows() == batch && row_to_column.cols() == n, function, ": row_to_column must be ",
                  moecomp::detail::shape_string(batch, n), " (batch x n), got ",
                  moecomp::detail::shape_string(row_to_column.rows(), row_to_column.cols()));
  const matrix_stack_view<const T> all = costs;
  for (index_t b = 0; b < batch; ++b)
    detail::check_cost_values<T>(function, all[b], params.maximize, moecomp::detail::concat("costs[", b, "]").c_str());
  if (batch == 0) return;
  detail::check_assignment_shape(function, n, m, n);
  const int threads = static_cast<int>(std::min<index_t>(ctx.threads(), batch));
  // One workspace per thread, allocated before the parallel region (nothing in the region can throw).
  const std::size_t doubles = static_cast<std::size_t>(4 * m), ints = static_cast<std::size_t>(4 * m + 3 * n);
  moecomp::detail::host_workspace<double> dbl(ctx, doubles * static_cast<std::size_t>(threads));
  moecomp::detail::host_workspace<std::int32_t> in(ctx, ints * static_cast<std::size_t>(threads));
  auto solve_problem = [&](index_t b, int thread) {
    double* p = dbl.data() + doubles * static_cast<std::size_t>(thread);
    std::int32_t* q = in.data() + ints * static_cast<std::size_t>(thread);
    const detail::jv_arrays a{p, p + m, p + 2 * m, p + 3 * m, q, q + m, q + 2 * m, q + 3 * m, q + 3 * m + n,
                              q + 3 * m + 2 * n};
    const matrix_view<const T> cost = all[b];
    const vector_view<index_t> out = n > 0 ? row_to_column.row(b) : vector_view<index_t>();
    const status outcome = detail::run_jv<T>(cost, params.maximize, false, a);
    results(b) = detail::finish_assignment<T>(cost, params.maximize, outcome, a, out, nullptr, nullptr);
  };
#if defined(_OPENMP)
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    {
      const int thread = omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
      for (index_t b = 0; b < batch; ++b) solve_problem(b, thread);
    }
    return;
  }
#endif
  for (index_t b = 0; b < batch; ++b) solve_problem(b, 0);
}

}  // namespace ot
MOECOMP_NAMESPACE_END
