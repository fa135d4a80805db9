#pragma once
// Entropic Wasserstein barycenter of k histograms on one fixed support of n points (POT 0.8.2
// ot.bregman.barycenter, methods 'sinkhorn' and 'sinkhorn_log'), on the host. Documentation: docs/sinkhorn.md.
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/ot/fixed_support_barycenter_types.hpp>
#include <moecomp/ot/detail/fixed_support_barycenter_host.hpp>
#include <moecomp/ot/detail/sinkhorn_checks.hpp>
#include <moecomp/ot/detail/fixed_support_barycenter_host.hpp>

#include <cmath>
#include <type_traits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace ot {

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
