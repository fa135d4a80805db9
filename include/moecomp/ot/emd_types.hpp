#pragma once
// Parameters and result of exact optimal transport (<moecomp/ot/emd.hpp>). Documentation: docs/emd.md.
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>

#include <cstdint>

MOECOMP_NAMESPACE_BEGIN
namespace ot {

struct emd_params {
  /// Most simplex pivots (degenerate ones included). Reaching it is reported as status::iteration_limit
  /// with the last basic plan, never silently. POT's default is 100000; ours is far above what the
  /// sizes that fit in memory need (n = m = 1000 takes a few thousand pivots). Must be >= 0.
  std::int64_t max_iterations = 100'000'000;
  /// Accepted relative difference of the total masses: |sum a - sum b| <= mass_tolerance * max(sum a,
  /// sum b). Within it, b is rescaled to sum a (as POT does); beyond it, invalid_argument. In [0, 1).
  double mass_tolerance = 1e-7;
};

/// convergence_info: `iterations` counts simplex pivots; `criterion` is the reduced cost of the arc that
/// would enter next (0 when the plan is optimal: no arc prices out; negative at iteration_limit); `status`
/// is ok (optimal), infeasible (forbidden +inf pairs leave no feasible plan; the plan holds what could be
/// placed) or iteration_limit (stopped at max_iterations; the plan is the last basic one, docs/emd.md).
struct emd_result : convergence_info {
  /// sum_ij cost(i, j) plan(i, j) of the returned plan, in double.
  double cost = 0;
  /// Entries of the plan with positive mass (at most n + m - 1: the plan is a basic solution).
  index_t nonzeros = 0;
};

}  // namespace ot
MOECOMP_NAMESPACE_END
