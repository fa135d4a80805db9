#pragma once
// Parameters and result of the free-support Wasserstein barycenter (<moecomp/ot/free_support_barycenter.hpp>;
// the uniform path also on CUDA, <moecomp/cuda/ot/free_support_barycenter.cuh>).
//
// Both paths run the fixed-point iteration of Cuturi & Doucet (2014, Algorithm 2 with theta = 1), as POT's
// ot.lp.free_support_barycenter: solve exact OT from the current barycenter support X to every measure, then
// move X to the weighted mean of where its mass went. One iteration = one exact OT per measure + one update.
#include <moecomp/core/status.hpp>
#include <moecomp/ot/linear_assignment_types.hpp>

#include <cstdint>
#include <moecomp/core/views.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace ot {

struct free_support_barycenter_params {
  /// At most this many iterations (barycenter updates); >= 1.
  index_t max_iterations = 100;
  /// POT's stopping rule: stop after the update whose squared displacement ||X_new - X||_F^2 is <= tolerance
  /// (POT loops while displacement > stopThr). The uniform path also stops as soon as no permutation changes
  /// (then the displacement is exactly 0). >= 0.
  double tolerance = 1e-7;
  /// Device path only: tunes the epsilon-optimal auctions (maximize and warm_start are set by the
  /// barycenter itself). The host path solves every assignment exactly and ignores it.
  auction_params assignment{};
};

/// convergence_info: `iterations` counts barycenter updates (POT's iteration count for the same run);
/// `criterion` is ||X_new - X||_F^2 of the last update (0 when the permutations stopped changing);
/// `status` is ok (the stopping rule held), iteration_limit (max_iterations updates were made before it
/// held; the barycenter is the last iterate and the permutations are still optimal for it), or
/// numerical_error (a non-finite value appeared, e.g. overflow in the cost).
struct free_support_barycenter_result : convergence_info {
  /// sum_j w_j W_2^2(barycenter, measure j) for the returned barycenter: exact, because the returned
  /// permutations / plans are optimal for it. Uniform path: sum_j w_j (1/n) sum_i ||x_ji - b_P(j,i)||^2.
  double objective = 0.0;
};

/// The device path's result (<moecomp/cuda/ot/free_support_barycenter.cuh>): the host result plus what the
/// epsilon-optimal device assignments add.
struct free_support_barycenter_device_result : free_support_barycenter_result {
  /// objective minus the optimal objective for the returned barycenter is at most this (+inf unless ok).
  double gap_bound = 0.0;
  /// Auction bids over all iterations and clouds.
  std::int64_t bids = 0;
};

}  // namespace ot
MOECOMP_NAMESPACE_END
