#pragma once
// Parameters and result of entropic optimal transport (<moecomp/ot/sinkhorn.hpp>; the device version is in
// <moecomp/cuda/ot/sinkhorn.cuh>). Documentation: docs/sinkhorn.md.
//
// Problem: min_P <P, C> + reg * sum_ij P_ij (log P_ij - 1) subject to P 1 = a, P^T 1 = b, P >= 0.
// Its solution is P = diag(u) K diag(v) with K = exp(-C / reg), or in the log domain
// P_ij = exp((f_i + g_j - C_ij) / reg). The four methods are those of POT 0.8.2's ot.sinkhorn.
#include <moecomp/core/error.hpp>
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>

#include <string>
#include <string_view>

MOECOMP_NAMESPACE_BEGIN
namespace ot {

/// plain = POT sinkhorn_knopp, log = sinkhorn_log, stabilized = sinkhorn_stabilized,
/// epsilon_scaling = sinkhorn_epsilon_scaling.
enum class sinkhorn_method { plain, log, stabilized, epsilon_scaling };

inline const char* to_string(sinkhorn_method m) noexcept {
  switch (m) {
    case sinkhorn_method::plain: return "plain";
    case sinkhorn_method::log: return "log";
    case sinkhorn_method::stabilized: return "stabilized";
    case sinkhorn_method::epsilon_scaling: return "epsilon_scaling";
  }
  return "unknown";
}

/// Parses a method name; throws invalid_argument naming the accepted values otherwise.
inline sinkhorn_method parse_sinkhorn_method(std::string_view name) {
  const sinkhorn_method all[] = {sinkhorn_method::plain, sinkhorn_method::log, sinkhorn_method::stabilized,
                                 sinkhorn_method::epsilon_scaling};
  for (sinkhorn_method m : all)
    if (name == to_string(m)) return m;
  MOECOMP_FAIL(error_kind::invalid_argument, "method: expected plain, log, stabilized or epsilon_scaling, got '",
               std::string(name), "'");
}

struct sinkhorn_params {
  /// Absolute entropic regularisation (POT's `reg`); must be > 0 and finite.
  double reg = 0;
  sinkhorn_method method = sinkhorn_method::plain;
  /// Iteration cap (POT numItermax). For epsilon_scaling it caps the outer (epsilon) steps and is raised to
  /// at least 35, as POT does (max(numItermin = 35, numItermax)).
  index_t max_iterations = 1000;
  /// Stop when the marginal error falls below this (POT stopThr). plain / log / stabilized: ||P^T 1 - b||_2,
  /// tested with `<` (plain, log) or `<=` (stabilized) as POT does; epsilon_scaling:
  /// ||P^T 1 - b||_2^2 + ||P 1 - a||_2^2 <= tolerance.
  double tolerance = 1e-9;
  /// The error is evaluated at iterations 0, check_every, 2 check_every, ... For epsilon_scaling it is the
  /// outer check period. 0 (the default) means POT's period for the chosen method, see
  /// resolved_check_every: 10 for plain, log and epsilon_scaling, 20 for stabilized. Values >= 1 are used
  /// as given; negative values are rejected.
  index_t check_every = 0;
  /// stabilized / epsilon_scaling: absorb the scalings into the kernel when max |u| or max |v| exceeds tau
  /// (POT tau).
  double absorb_threshold = 1e3;
  /// epsilon_scaling: outer step k uses reg_k = (epsilon_start - reg) exp(-epsilon_decay k) + reg
  /// (POT epsilon0 = 1e4 and exp(-k)).
  double epsilon_start = 1e4;
  double epsilon_decay = 1.0;
  /// epsilon_scaling: stabilized iterations per outer step (POT numInnerItermax); the inner error is checked
  /// every inner_check_every iterations against 1e-9 (POT passes print_period = 20 and stopThr = 1e-9).
  index_t inner_iterations = 100;
  index_t inner_check_every = 20;
  /// plain, double input: iterate on a float copy of K (half the bytes per iteration, and small enough to
  /// stay in the last-level cache), while the stopping test, the plan and its error use the exact double
  /// kernel; if the exact error has not met the tolerance when the float iterate says so, the iteration goes
  /// on in double. Used only when every row and column of K has an entry >= 1e-30 and K <= 1e30 (no float
  /// underflow or overflow that matters) and the matrix has at least 2^18 entries. false: iterate in double.
  bool allow_float_kernel = true;
};

/// POT 0.8.2's error period for a method: sinkhorn_knopp and sinkhorn_log test every 10 iterations,
/// sinkhorn_stabilized every 20 (print_period), sinkhorn_epsilon_scaling every 10 outer steps (print_period).
constexpr index_t pot_check_every(sinkhorn_method m) noexcept { return m == sinkhorn_method::stabilized ? 20 : 10; }

/// The error period the solvers use: params.check_every when >= 1, else pot_check_every(params.method).
constexpr index_t resolved_check_every(const sinkhorn_params& params) noexcept {
  return params.check_every >= 1 ? params.check_every : pot_check_every(params.method);
}

/// convergence_info: `iterations` counts one v update plus one u update (POT's log['niter'] is this minus
/// one; epsilon_scaling: outer steps); `criterion` is the marginal error last evaluated (see
/// sinkhorn_params::tolerance); `status` is ok, iteration_limit (stopped at max_iterations), or
/// numerical_error (zero division, overflow or NaN appeared: the plan is the last finite iterate, flagged;
/// POT would warn and return it silently).
struct sinkhorn_result : convergence_info {
  /// <P, C> of the returned plan.
  double cost = 0;
};

}  // namespace ot
MOECOMP_NAMESPACE_END
