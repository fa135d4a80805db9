#pragma once
// Parameters and result of the entropic barycenter of histograms on one fixed support
// (<moecomp/ot/fixed_support_barycenter.hpp>). Documentation: docs/sinkhorn.md.
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace ot {

struct fixed_support_barycenter_params {
  /// Absolute entropic regularisation (POT's reg); must be > 0 and finite.
  double reg = 0;
  /// POT ot.bregman.barycenter defaults: numItermax 10000, stopThr 1e-4.
  index_t max_iterations = 10000;
  /// Stop when sum_i std_k(column marginals of the k plans) < tolerance, tested at iterations 1, 11, 21, ...
  double tolerance = 1e-4;
  /// false: iterative Bregman projections on K = exp(-M / reg) (POT method 'sinkhorn');
  /// true: the same iteration on log scalings (POT method 'sinkhorn_log'), stable for small reg.
  bool log_domain = false;
};

/// convergence_info: `iterations` as POT's log['niter'] + 1; `criterion` is the stopping quantity last
/// evaluated (sum_i std_k of the plans' column marginals); `status` is ok, iteration_limit, or
/// numerical_error (zero division, overflow or NaN: the barycenter is the last finite iterate, flagged).
struct fixed_support_barycenter_result : convergence_info {};

}  // namespace ot
MOECOMP_NAMESPACE_END
