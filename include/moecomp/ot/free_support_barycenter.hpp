#pragma once
// Free-support Wasserstein barycenter: the n support points X of a barycenter of k discrete measures under
// the squared Euclidean cost,
//
//     min_X  sum_j w_j W_2^2(sum_l b_l delta_{X_l}, measure_j),
//
// by the fixed-point iteration of Cuturi & Doucet (2014) that POT's ot.lp.free_support_barycenter runs:
// exact OT from X to every measure, then X <- sum_j w_j diag(1/b) T_j X_j. Documentation: docs/barycenter.md.
//
//  * free_support_barycenter: the uniform fast path (ResMoE's barycenter expert). k clouds of n points of
//    equal mass, barycenter of n points of equal mass: every exact OT is one linear assignment (Birkhoff),
//    solved exactly, warm-started from the previous iteration's potentials, against a cost whose only
//    varying part, -X_j X^T, is one GEMM. Outputs the barycenter and the k permutations.
//  * free_support_barycenter_weighted: measures of any sizes and masses, barycenter of m points with given
//    masses b; exact OT by the network simplex (<moecomp/ot/emd.hpp>).
#include <moecomp/ot/free_support_barycenter_types.hpp>
#include <moecomp/ot/detail/free_support_uniform.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/ot/detail/free_support_weighted.hpp>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace ot {

namespace detail {
/// Keeps an argument out of template deduction, so a mutable view converts to the const view declared.
template <class X>
using free_support_nondeduced = moecomp::detail::type_identity_t<X>;

}  // namespace detail

/// Uniform path. `measures` is a stack of k clouds of n points in d dimensions (k x n x d); each point has
/// mass 1/n. `weights` (k, >= 0, summing to 1 within 1e-6) weigh the clouds. `init` (n x d) is the starting
/// support (ResMoE: cloud 0). Outputs: `barycenter` (n x d; may be the same memory as init, must not overlap
/// `measures`) and `permutations` (k x n): row i of cloud j goes to barycenter row permutations(j, i). The
/// permutations are exactly optimal for the returned barycenter, so
/// result.objective = sum_j w_j (1/n) sum_i ||x_ji - b_P(j,i)||^2 = sum_j w_j W_2^2(barycenter, cloud j).
/// Bit-identical results for any thread count; T is float or double (GEMM and cost in T, sums in double).
template <class T>
free_support_barycenter_result free_support_barycenter(
    const host_context& ctx, const free_support_barycenter_params& params,
    detail::free_support_nondeduced<matrix_stack_view<const T>> measures, vector_view<const double> weights,
    detail::free_support_nondeduced<matrix_view<const T>> init, matrix_view<T> barycenter,
    matrix_view<index_t> permutations) {
  static_assert(moecomp::detail::is_real_v<T>,
                "free_support_barycenter: the barycenter must be a mutable float or double view");
  constexpr const char* fn = "free_support_barycenter";
  detail::check_free_support_params(fn, params);
  detail::check_uniform_barycenter_shapes(fn, measures, init, barycenter, permutations, weights.size());
  const index_t k = measures.count();
  detail::free_support_check_probabilities(fn, "weights", weights, /*positive=*/false);
  for (index_t j = 0; j < k; ++j)
    moecomp::detail::check_finite(fn, moecomp::detail::concat("measures[", j, "]").c_str(), measures[j]);
  moecomp::detail::check_finite(fn, "init", init);
  moecomp::detail::host_workspace<double> w(ctx, static_cast<std::size_t>(k));
  for (index_t j = 0; j < k; ++j) w[static_cast<std::size_t>(j)] = weights[j];
  return detail::free_support_uniform<T>(ctx, params, measures, w.data(), init, barycenter, permutations);
}

/// Uniform path with uniform weights w_j = 1/k.
template <class T>
free_support_barycenter_result free_support_barycenter(
    const host_context& ctx, const free_support_barycenter_params& params,
    detail::free_support_nondeduced<matrix_stack_view<const T>> measures,
    detail::free_support_nondeduced<matrix_view<const T>> init, matrix_view<T> barycenter,
    matrix_view<index_t> permutations) {
  const index_t k = measures.count();
  MOECOMP_EXPECTS(k >= 1, "free_support_barycenter: measures must hold at least one cloud, got 0");
  moecomp::detail::host_workspace<double> w(ctx, static_cast<std::size_t>(k));
  std::fill(w.data(), w.data() + k, 1.0 / static_cast<double>(k));
  return free_support_barycenter<T>(ctx, params, measures, vector_view<const double>(w.data(), k), init, barycenter,
                                    permutations);
}

/// General path (POT's free_support_barycenter): measure j has support measures[j] (n_j x d, any n_j >= 1)
/// and masses measure_masses[j] (n_j, >= 0, sum 1); `weights` (k, >= 0, sum 1); `init` (m x d) and
/// `barycenter_masses` b (m, > 0, sum 1) describe the barycenter. Each iteration solves k exact OT problems
/// (network simplex, squared Euclidean cost in double) and sets X <- sum_j w_j diag(1/b) T_j X_j. The plans
/// are optimal for the returned barycenter: result.objective = sum_j w_j <T_j, M_j(barycenter)>.
/// Bit-identical results for any thread count.
template <class T>
free_support_barycenter_result free_support_barycenter_weighted(
    const host_context& ctx, const free_support_barycenter_params& params,
    const std::vector<matrix_view<const T>>& measures, const std::vector<vector_view<const double>>& measure_masses,
    vector_view<const double> weights, detail::free_support_nondeduced<matrix_view<const T>> init,
    vector_view<const double> barycenter_masses, detail::free_support_nondeduced<matrix_view<T>> barycenter) {
  static_assert(moecomp::detail::is_real_v<T>,
                "free_support_barycenter_weighted: T must be float or double");
  constexpr const char* fn = "free_support_barycenter_weighted";
  detail::check_free_support_params(fn, params);
  const auto k = static_cast<index_t>(measures.size());
  MOECOMP_EXPECTS(k >= 1, fn, ": measures must hold at least one measure, got 0");
  MOECOMP_EXPECTS(static_cast<index_t>(measure_masses.size()) == k, fn, ": measure_masses must hold k = ", k,
                  " mass vectors like measures, got ", measure_masses.size());
  const index_t m = init.rows(), d = init.cols();
  MOECOMP_EXPECTS(m >= 1, fn, ": init must have at least one row, got ", detail::shape_string(m, d));
  MOECOMP_EXPECTS(barycenter.rows() == m && barycenter.cols() == d, fn, ": barycenter must be ",
                  detail::shape_string(m, d), " like init, got ", detail::shape_string(barycenter.rows(), barycenter.cols()));
  MOECOMP_EXPECTS(weights.size() == k, fn, ": weights must have k = ", k, " entries, got ", weights.size());
  detail::free_support_check_probabilities(fn, "weights", weights, /*positive=*/false);
  MOECOMP_EXPECTS(barycenter_masses.size() == m, fn, ": barycenter_masses must have m = ", m,
                  " entries (init's rows), got ", barycenter_masses.size());
  detail::free_support_check_probabilities(fn, "barycenter_masses", barycenter_masses, /*positive=*/true);
  moecomp::detail::check_finite(fn, "init", init);
  for (index_t j = 0; j < k; ++j) {
    const matrix_view<const T>& x = measures[static_cast<std::size_t>(j)];
    const std::string name = detail::concat("measures[", j, "]");
    MOECOMP_EXPECTS(x.rows() >= 1 && x.cols() == d, fn, ": ", name, " must be n_j x ", d,
                    " with n_j >= 1 (init has ", d, " columns), got ", detail::shape_string(x.rows(), x.cols()));
    MOECOMP_EXPECTS(measure_masses[static_cast<std::size_t>(j)].size() == x.rows(), fn, ": measure_masses[", j,
                    "] must have ", x.rows(), " entries like ", name, ", got ",
                    measure_masses[static_cast<std::size_t>(j)].size());
    detail::free_support_check_probabilities(fn, detail::concat("measure_masses[", j, "]").c_str(),
                                     measure_masses[static_cast<std::size_t>(j)], /*positive=*/false);
    moecomp::detail::check_finite(fn, name.c_str(), x);
    moecomp::detail::check_no_overlap(fn, "barycenter", barycenter, name.c_str(), x);
  }
  return detail::free_support_weighted<T>(ctx, params, measures, measure_masses, weights, init, barycenter_masses,
                                          barycenter);
}

/// General path with uniform weights w_j = 1/k.
template <class T>
free_support_barycenter_result free_support_barycenter_weighted(
    const host_context& ctx, const free_support_barycenter_params& params,
    const std::vector<matrix_view<const T>>& measures, const std::vector<vector_view<const double>>& measure_masses,
    detail::free_support_nondeduced<matrix_view<const T>> init, vector_view<const double> barycenter_masses,
    detail::free_support_nondeduced<matrix_view<T>> barycenter) {
  const std::size_t k = measures.size();
  moecomp::detail::host_workspace<double> w(ctx, k);
  std::fill(w.data(), w.data() + k, k ? 1.0 / static_cast<double>(k) : 0.0);
  return free_support_barycenter_weighted<T>(ctx, params, measures, measure_masses,
                                             vector_view<const double>(w.data(), static_cast<index_t>(k)), init,
                                             barycenter_masses, barycenter);
}

}  // namespace ot
MOECOMP_NAMESPACE_END
