#pragma once
// Parameters and result of the expert-graph partition (<moecomp/similarity/partition.hpp>). Documentation:
// docs/partition.md.
//
// Problem (Eq. 5 of "Diversifying the expert knowledge for task-agnostic pruning in sparse MoE"): split the N
// experts into r disjoint non-empty groups V_1 .. V_r minimising
//   sum_i ( sum_{j,k in V_i} D_jk - sum_{t != i} sum_{j in V_i, k in V_t} D_jk ).
// Both sums run over ordered pairs, so with W = sum_i sum_{j<k in V_i} D_jk (within-group total) and
// T = sum_{j<k} D_jk (all pairs, a constant) the objective is 2 W + trace(D) - 2 (T - W) = 4 W - 2 T + trace(D):
// minimising Eq. 5 is minimising W.
#include <moecomp/core/error.hpp>
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>

#include <cstdint>
#include <string>
#include <string_view>

MOECOMP_NAMESPACE_BEGIN
namespace similarity {

/// exact: dynamic programming over subsets, a proven optimum (N <= max_exact_experts). heuristic: seeded
/// starts and local search, with a lower bound. automatic: exact up to params.exact_limit experts, heuristic
/// above (resolved_partition_method).
enum class partition_method { automatic, exact, heuristic };

inline const char* to_string(partition_method m) noexcept {
  switch (m) {
    case partition_method::automatic: return "auto";
    case partition_method::exact: return "exact";
    case partition_method::heuristic: return "heuristic";
  }
  return "unknown";
}

/// Parses "auto", "exact" or "heuristic"; throws invalid_argument naming the accepted values otherwise.
inline partition_method parse_partition_method(std::string_view name) {
  for (partition_method m : {partition_method::automatic, partition_method::exact, partition_method::heuristic})
    if (name == to_string(m)) return m;
  MOECOMP_FAIL(error_kind::invalid_argument, "method: expected auto, exact or heuristic, got '", std::string(name),
               "'");
}

/// The largest N the exact solver accepts: its tables take about 20 x 2^N bytes and its time is O(r 3^N).
inline constexpr index_t max_exact_experts = 20;

struct partition_params {
  /// r, the number of groups: 1 <= r <= N. Required (the default 0 is refused).
  index_t groups = 0;
  /// At most this many experts per group; 0: no bound. groups x max_size must be >= N.
  index_t max_size = 0;
  partition_method method = partition_method::automatic;
  /// Heuristic: independent starts; start 0 is agglomerative, starts 1.. are random balanced assignments.
  /// The lowest within-group total wins (ties: the earliest start). >= 1.
  index_t restarts = 10;
  /// Heuristic: perturbation rounds per start (a few random swaps, then local search again; kept only when
  /// better). >= 0.
  index_t kicks = 20;
  /// Seed of moecomp's random_generator; start s draws from stream s.
  std::uint64_t seed = 0;
  /// automatic: exact when N <= exact_limit. 0 <= exact_limit <= max_exact_experts.
  index_t exact_limit = 16;
  /// D must be symmetric: |D_ij - D_ji| <= symmetry_tolerance x max(|D_ij|, |D_ji|); the solver then uses
  /// the mean of the two. 0: exactly symmetric. Finite, >= 0.
  double symmetry_tolerance = 1e-6;
};

/// The method a call with these params runs on N experts: params.method, or for automatic exact when
/// N <= params.exact_limit and heuristic otherwise.
constexpr partition_method resolved_partition_method(const partition_params& params, index_t n) noexcept {
  if (params.method != partition_method::automatic) return params.method;
  return n <= params.exact_limit ? partition_method::exact : partition_method::heuristic;
}

/// convergence_info: `status` is always ok (both methods stop by their own rule); `iterations` counts the
/// exact solver's (subset, group) transitions, or the improving moves, swaps and accepted kicks of the
/// heuristic's winning start; `criterion` is the gap objective - lower_bound (0 when optimal).
struct partition_result : convergence_info {
  /// Eq. 5 for the returned labels, as the paper writes it: 4 W - 2 T + trace(D).
  double objective = 0;
  /// W: the sum of D_jk over the unordered pairs j < k in the same group (summed in row-major order).
  double within = 0;
  /// T: the sum of D_jk over all pairs j < k.
  double total = 0;
  /// A lower bound on Eq. 5 over all partitions satisfying the parameters: equal to objective when optimal,
  /// else 4 within_lower_bound - 2 T + trace(D).
  double lower_bound = 0;
  /// The same bound on W (docs/partition.md, "Lower bound").
  double within_lower_bound = 0;
  /// Proven optimal: the exact solver ran, the partition is the only one (r = 1 or r = N), or the bound meets
  /// the objective.
  bool optimal = false;
  /// The method that ran (exact or heuristic, never automatic).
  partition_method method = partition_method::exact;
  /// Heuristic: the start (0-based) whose result was returned; 0 for the exact solver.
  index_t best_restart = 0;
};

}  // namespace similarity
MOECOMP_NAMESPACE_END
