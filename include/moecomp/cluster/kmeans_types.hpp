#pragma once
// Parameters and result of k-means (<moecomp/cluster/kmeans.hpp>). Documentation: docs/kmeans.md.
#include <moecomp/core/error.hpp>
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {

/// How the first centres are chosen.
///  * kmeans_plus_plus: greedy k-means++ with scikit-learn's conventions: the first centre uniformly
///    among the rows, then each next one the best (lowest potential) of `local_trials` D^2-weighted draws.
///  * random_rows: k distinct rows drawn uniformly.
///  * given: the caller's centres (the `centers` argument holds them on entry).
enum class kmeans_init { kmeans_plus_plus, random_rows, given };

inline const char* to_string(kmeans_init i) noexcept {
  switch (i) {
    case kmeans_init::kmeans_plus_plus: return "k-means++";
    case kmeans_init::random_rows: return "random";
    case kmeans_init::given: return "given";
  }
  return "unknown";
}

/// Parses "k-means++", "random" or "given"; throws invalid_argument naming the accepted values otherwise.
inline kmeans_init parse_kmeans_init(std::string_view name) {
  for (kmeans_init i : {kmeans_init::kmeans_plus_plus, kmeans_init::random_rows, kmeans_init::given})
    if (name == to_string(i)) return i;
  MOECOMP_FAIL(error_kind::invalid_argument, "init: expected k-means++, random or given, got '", std::string(name),
               "'");
}

/// Which solver the DEVICE k-means uses for the size-bounded assignment step (the host k-means always uses
/// the network simplex and ignores this choice).
///  * network_simplex: the exact transportation problem, solved on the host by the network simplex (the
///    n x k costs cross to the host every iteration). Any bounds. The default.
///  * device_auction: with equal sizes (size_min == size_max == n / k) the step is the n x n assignment
///    problem of each centre's column replicated n / k times, solved on the device by the auction
///    (<moecomp/cuda/ot/auction_assignment.cuh>): within a reported bound of the optimum, not exact
///    (kmeans_result::assignment_bound). Unequal bounds, or a replicated cost over 2 GiB (n > 16384), run
///    the network simplex instead (docs/kmeans.md, "Device"; run on a GPU or not: docs/cuda.md, "Status on hardware").
enum class kmeans_balanced_solver { network_simplex, device_auction };

inline const char* to_string(kmeans_balanced_solver s) noexcept {
  switch (s) {
    case kmeans_balanced_solver::network_simplex: return "network-simplex";
    case kmeans_balanced_solver::device_auction: return "device-auction";
  }
  return "unknown";
}

/// Parses "network-simplex" or "device-auction"; throws invalid_argument naming the accepted values otherwise.
inline kmeans_balanced_solver parse_kmeans_balanced_solver(std::string_view name) {
  for (kmeans_balanced_solver s : {kmeans_balanced_solver::network_simplex, kmeans_balanced_solver::device_auction})
    if (name == to_string(s)) return s;
  MOECOMP_FAIL(error_kind::invalid_argument, "balanced solver: expected network-simplex or device-auction, got '",
               std::string(name), "'");
}

struct kmeans_params {
  /// k, the number of clusters: 1 <= k <= n.
  index_t clusters = 8;
  kmeans_init init = kmeans_init::kmeans_plus_plus;
  /// Runs from different starts; the lowest inertia wins (ties: the earliest run). >= 1; must be 1 with
  /// init = given (there is one start).
  index_t restarts = 1;
  /// Lloyd iterations per run (scikit-learn's max_iter). >= 1.
  index_t max_iterations = 300;
  /// scikit-learn's tol: a run stops when the squared centre shift summed over the clusters,
  /// sum_j ||c_j(new) - c_j||^2, is <= tolerance x the mean per-feature variance of x. It also stops as
  /// soon as no label changes. >= 0.
  double tolerance = 1e-4;
  /// Seed of moecomp's random_generator; run r draws from stream r.
  std::uint64_t seed = 0;
  /// k-means++ candidates per centre; 0: scikit-learn's 2 + floor(ln k).
  index_t local_trials = 0;
  /// Cluster size bounds, as k-means-constrained's size_min / size_max: every cluster gets between
  /// size_min and size_max rows, and the assignment step becomes the exact transportation problem from the
  /// rows to the centres with those capacities. 0 and 0: no bounds (Lloyd). size_max 0 with size_min > 0
  /// means no upper bound. Equal sizes (the MoEfication split): size_min = size_max = n / k.
  index_t size_min = 0;
  index_t size_max = 0;
  /// The device k-means's solver for the size-bounded step (see kmeans_balanced_solver); the host ignores it.
  kmeans_balanced_solver balanced_solver = kmeans_balanced_solver::network_simplex;
};

/// Whether params ask for size bounds (a constrained assignment step).
inline bool has_size_bounds(const kmeans_params& params) noexcept {
  return params.size_min > 0 || params.size_max > 0;
}

/// k-means++ candidates per centre that params ask for: params.local_trials, or 2 + floor(ln k) when 0
/// (ln k is never within rounding of an integer for k >= 2, so every libm gives the same floor).
inline index_t resolved_local_trials(const kmeans_params& params) {
  if (params.local_trials > 0) return params.local_trials;
  return 2 + static_cast<index_t>(std::floor(std::log(static_cast<double>(params.clusters > 1 ? params.clusters : 1))));
}

/// convergence_info of the winning run: `iterations` counts Lloyd iterations (scikit-learn's n_iter_),
/// `criterion` is the last squared centre shift sum_j ||c_j(new) - c_j||^2, `status` is ok (no label
/// changed, or the shift fell to the tolerance) or iteration_limit.
struct kmeans_result : convergence_info {
  /// sum_i w_i ||x_i - c_label(i)||^2 for the returned labels and centres, in double.
  double inertia = 0;
  /// The run (0-based) whose result was returned.
  index_t best_run = 0;
  /// Empty clusters re-seeded over all iterations of the winning run (0 in the usual case; never with size
  /// bounds, whose assignment fills every cluster).
  index_t reseeded = 0;
  /// With size bounds: the largest duality gap of the winning run's assignment steps, cost - (sum_i u_i +
  /// sum_j b_j v_j) of each exact transportation problem, relative to max(1, cost): 0 up to rounding, a
  /// certificate that every assignment step was optimal. 0 without bounds. With the device auction
  /// (kmeans_balanced_solver::device_auction) the gap of the transportation dual built from the auction's
  /// prices (docs/kmeans.md, "Device"): at most assignment_bound, not 0.
  double assignment_gap = 0;
  /// With the device auction: the largest proven bound of the winning run's assignment steps, n x (final
  /// epsilon) relative to max(1, cost); each step's cost is within it of the optimum, and so is its gap.
  /// 0 when every step was solved exactly (the network simplex, or no bounds).
  double assignment_bound = 0;
};

}  // namespace cluster
MOECOMP_NAMESPACE_END
