#pragma once
// Entropic Wasserstein barycenter of k histograms on one fixed support of n points (POT 0.8.2
// ot.bregman.barycenter, methods 'sinkhorn' and 'sinkhorn_log'), on the host. Documentation: docs/sinkhorn.md.
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/ot/fixed_support_barycenter_types.hpp>
#include <moecomp/ot/detail/fixed_support_barycenter_host.hpp>
#include <moecomp/ot/detail/sinkhorn_checks.hpp>

#include <cmath>
#include <type_traits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

template <class T>
fixed_support_barycenter_result fixed_support_barycenter_host(const host_context& ctx,
                                                              const fixed_support_barycenter_params& p,
                                                              matrix_view<const T> A, matrix_view<const T> M,
                                                              vector_view<const double> weights,
                                                              vector_view<T> barycenter) {
  constexpr const char* fn = "fixed_support_barycenter";
  check_sinkhorn_element_type<T>();
  MOECOMP_EXPECTS(std::isfinite(p.reg) && p.reg > 0, fn, ": params.reg must be finite and > 0, got ", p.reg);
  MOECOMP_EXPECTS(p.max_iterations >= 1, fn, ": params.max_iterations must be >= 1, got ", p.max_iterations);
  MOECOMP_EXPECTS(std::isfinite(p.tolerance) && p.tolerance >= 0, fn,
                  ": params.tolerance must be finite and >= 0, got ", p.tolerance);
  const index_t n = A.rows(), k = A.cols();
  MOECOMP_EXPECTS(n >= 1 && k >= 1, fn, ": A must be n x k with n, k >= 1 (histograms as columns), got ",
                  moecomp::detail::shape_string(n, k));
  MOECOMP_EXPECTS(M.rows() == n && M.cols() == n, fn, ": M must be ", moecomp::detail::shape_string(n, n),
                  " (n = rows of A), got ", moecomp::detail::shape_string(M.rows(), M.cols()));
  MOECOMP_EXPECTS(barycenter.size() == n, fn, ": barycenter must have size ", n, " (rows of A), got ",
                  barycenter.size());
  MOECOMP_EXPECTS(weights.size() == k, fn, ": weights must have size ", k,
                  " (columns of A), got ", weights.size());
  double first_mass = 0;
  for (index_t h = 0; h < k; ++h) {
    const std::string name = "column " + std::to_string(h) + " of A";
    const double mass = check_histogram(fn, name.c_str(), n, [&](index_t i) { return A(i, h); });
    if (h == 0) first_mass = mass;
    MOECOMP_EXPECTS(std::fabs(mass - first_mass) <= mass_tolerance<T>() * std::max(mass, first_mass), fn,
                    ": the columns of A must have equal total mass, got ", first_mass, " (column 0) and ", mass,
                    " (column ", h, ")");
  }
  const double weight_sum =
      moecomp::detail::check_masses(fn, "weights", weights);
  moecomp::detail::check_sums_to_one(fn, "weights", weight_sum);
  check_finite_cost(fn, "M", M);
  moecomp::detail::host_workspace<double> out(ctx, static_cast<std::size_t>(n));
  const fixed_support_barycenter_result result =
      p.log_domain ? barycenter_bregman_log(ctx, p, A, M, weights.data(), out.data())
                   : barycenter_bregman(ctx, p, A, M, weights.data(), out.data());
  for (index_t i = 0; i < n; ++i) barycenter(i) = static_cast<T>(out[static_cast<std::size_t>(i)]);
  return result;
}

}  // namespace detail

/// Barycenter of the k histograms in the columns of A (n x k, POT's layout) for the cost M (n x n) between
/// support points, with barycentric weights (k, >= 0, summing to 1): the histogram minimising
/// sum_h w_h W_reg(barycenter, A_h), by iterative Bregman projections. Output: barycenter (n).
template <class T, class U, class V, class W,
          std::enable_if_t<detail::is_input_of_v<U, T> && detail::is_input_of_v<V, T> && detail::is_input_of_v<W, T>,
                           int> = 0>
fixed_support_barycenter_result fixed_support_barycenter(const host_context& ctx,
                                                         const fixed_support_barycenter_params& params,
                                                         matrix_view<U> A, matrix_view<V> M, vector_view<W> weights,
                                                         vector_view<T> barycenter) {
  moecomp::detail::host_workspace<double> w(ctx, static_cast<std::size_t>(weights.size()));
  for (index_t h = 0; h < weights.size(); ++h) w[static_cast<std::size_t>(h)] = static_cast<double>(weights(h));
  return detail::fixed_support_barycenter_host<T>(ctx, params, A, M, vector_view<const double>(w.data(), weights.size()),
                                                  barycenter);
}

/// Uniform weights 1 / k.
template <class T, class U, class V,
          std::enable_if_t<detail::is_input_of_v<U, T> && detail::is_input_of_v<V, T>, int> = 0>
fixed_support_barycenter_result fixed_support_barycenter(const host_context& ctx,
                                                         const fixed_support_barycenter_params& params,
                                                         matrix_view<U> A, matrix_view<V> M, vector_view<T> barycenter) {
  moecomp::detail::host_workspace<double> w(ctx, static_cast<std::size_t>(A.cols()));
  std::fill(w.data(), w.data() + A.cols(), A.cols() > 0 ? 1.0 / static_cast<double>(A.cols()) : 0.0);
  return detail::fixed_support_barycenter_host<T>(ctx, params, A, M, vector_view<const double>(w.data(), A.cols()),
                                                  barycenter);
}

}  // namespace ot
MOECOMP_NAMESPACE_END
