#pragma once
// Parameters and results of the linear assignment solvers: the exact Jonker-Volgenant solver
// (<moecomp/ot/linear_assignment.hpp>) and the auction solver (<moecomp/ot/auction_assignment.hpp>; its
// device version is in <moecomp/cuda/ot/auction_assignment.cuh>). Documentation: docs/linear_assignment.md.
//
// Problem: cost C is n x m with n <= m. Choose a column col(i) for every row, all different, minimising
// (or with `maximize`, maximising) sum_i C(i, col(i)). +inf entries (-inf when maximising) are forbidden
// pairs; NaN is rejected.
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>

#include <cstdint>

MOECOMP_NAMESPACE_BEGIN
namespace ot {

struct linear_assignment_params {
  /// Maximise the total instead of minimising it (scipy's maximize=True).
  bool maximize = false;
  /// Read the column potentials (and row_to_column as a hint) as a starting point: see
  /// linear_assignment's potentials overload. The answer is exact either way; only the time changes.
  bool warm_start = false;
};

struct linear_assignment_result {
  /// sum_i C(i, row_to_column[i]) accumulated in double in row order; +inf (-inf when maximising) when the
  /// problem is infeasible.
  double cost = 0.0;
  /// ok, or infeasible when no complete assignment avoids the forbidden pairs (row_to_column is then all -1).
  /// The solver is direct (one shortest augmenting path per row, exact), not iterative, so there is no
  /// convergence_info: the answer is optimal whenever it is ok.
  moecomp::status status = moecomp::status::ok;
  bool ok() const noexcept { return status == moecomp::status::ok; }
};

struct auction_params {
  bool maximize = false;
  /// Final epsilon of the epsilon-scaling. 0: automatic: 1 / (m + 1) when every finite cost is an integer
  /// (then the answer is exactly optimal), otherwise range / (1e6 m), range = max - min finite cost
  /// (then cost - optimum <= 1e-6 range).
  double epsilon_final = 0.0;
  /// First epsilon. 0: automatic: range / 4, or with warm_start the smaller of range / 4 and
  /// epsilon_final / epsilon_factor^2 (warm prices are already close, so large steps would only undo them).
  double epsilon_initial = 0.0;
  /// Each phase multiplies epsilon by this factor, in (0, 1).
  double epsilon_factor = 0.2;
  /// Stop after this many bids in total (status iteration_limit). 0: no limit.
  std::int64_t max_bids = 0;
  /// Read column_price as the starting prices (overload with column_price only).
  bool warm_start = false;
};

/// convergence_info: `iterations` counts the bids made over all phases (the unit of max_bids);
/// `criterion` is the proven bound |cost - optimum| <= criterion = m * final epsilon (+inf unless status
/// is ok); `status` is ok, iteration_limit (max_bids reached; unassigned rows hold -1) or infeasible.
struct auction_result : convergence_info {
  /// sum_i C(i, row_to_column[i]) in double, as linear_assignment_result::cost.
  double cost = 0.0;
  /// Epsilon-scaling phases run.
  int phases = 0;
};

}  // namespace ot
MOECOMP_NAMESPACE_END
