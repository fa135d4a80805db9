#pragma once
// Exact optimal transport between two histograms (POT's ot.emd / ot.emd2): the plan P >= 0 with row sums a
// and column sums b that minimises sum_ij cost(i, j) P(i, j), by a primal network simplex in double on the
// complete bipartite graph. Host only. Documentation: docs/emd.md.
#include <moecomp/core/context.hpp>
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/ot/emd_types.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/ot/detail/network_simplex.hpp>
#include <moecomp/ot/detail/emd_host.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace ot {

/// Optimal plan between histograms a (n) and b (m) for cost (n x m); all three of float or double (each
/// const or mutable), computed in double. Masses: finite, >= 0 (zeros allowed), equal sums within
/// params.mass_tolerance (relative). cost: numbers or +inf (forbidden pair); NaN and -inf are refused.
/// plan: n x m, written densely (zeros off the support). result.status: ok, infeasible (forbidden pairs
/// leave no plan) or iteration_limit (docs/emd.md for what the plan then holds).
template <class A, class B, class C, std::enable_if_t<detail::emd_inputs_v<A, B, C>, int> = 0>
emd_result emd(const host_context& ctx, const emd_params& params, vector_view<A> a, vector_view<B> b,
               matrix_view<C> cost, matrix_view<double> plan) {
  using T = std::remove_const_t<A>;
  return detail::emd_dense<T>("emd", ctx, params, a, b, cost, plan, nullptr, nullptr);
}

/// As above, and the dual potentials: u (n), v (m) with u_i + v_j <= cost(i, j), equality where the plan is
/// positive, cost = <a, u> + <b, v>, centred as POT does (<a, u> = <b, v>).
template <class A, class B, class C, std::enable_if_t<detail::emd_inputs_v<A, B, C>, int> = 0>
emd_result emd(const host_context& ctx, const emd_params& params, vector_view<A> a, vector_view<B> b,
               matrix_view<C> cost, matrix_view<double> plan, vector_view<double> u, vector_view<double> v) {
  using T = std::remove_const_t<A>;
  return detail::emd_dense<T>("emd", ctx, params, a, b, cost, plan, &u, &v);
}

/// The plan as a list: entries k < result.nonzeros of rows, cols, mass (sorted by row, then column) are
/// the positive entries of the optimal basic plan, at most n + m - 1 of them; each output must hold at
/// least n + m - 1 entries, and those past result.nonzeros are left untouched.
template <class A, class B, class C, std::enable_if_t<detail::emd_inputs_v<A, B, C>, int> = 0>
emd_result emd_sparse(const host_context& ctx, const emd_params& params, vector_view<A> a, vector_view<B> b,
                      matrix_view<C> cost, vector_view<index_t> rows, vector_view<index_t> cols,
                      vector_view<double> mass) {
  using T = std::remove_const_t<A>;
  return detail::emd_list<T>("emd_sparse", ctx, params, a, b, cost, rows, cols, mass, nullptr, nullptr);
}

/// As above, and the dual potentials u (n), v (m), as for emd.
template <class A, class B, class C, std::enable_if_t<detail::emd_inputs_v<A, B, C>, int> = 0>
emd_result emd_sparse(const host_context& ctx, const emd_params& params, vector_view<A> a, vector_view<B> b,
                      matrix_view<C> cost, vector_view<index_t> rows, vector_view<index_t> cols,
                      vector_view<double> mass, vector_view<double> u, vector_view<double> v) {
  using T = std::remove_const_t<A>;
  return detail::emd_list<T>("emd_sparse", ctx, params, a, b, cost, rows, cols, mass, &u, &v);
}

}  // namespace ot
MOECOMP_NAMESPACE_END
