#pragma once
// Numerical outcomes. An algorithm that can stop short (iteration limit, no convergence, infeasible
// problem, overflow) reports it in its result struct as a `status` plus the iteration count and the final
// residual, never as an exception and never silently. Exceptions are for misuse only (error.hpp).
#include <moecomp/core/config.hpp>

#include <cstdint>

MOECOMP_NAMESPACE_BEGIN

enum class status {
  ok,               // converged / solved exactly
  iteration_limit,  // stopped at max_iter before the stopping rule held; the result is the last iterate
  not_converged,    // stopped for another reason (stagnation) before the stopping rule held
  infeasible,       // the problem has no solution (e.g. unequal masses in exact OT)
  unbounded,        // the objective is unbounded
  numerical_error   // overflow, NaN or inf appeared; the result is the last finite iterate, flagged
};

inline const char* to_string(status s) noexcept {
  switch (s) {
    case status::ok: return "ok";
    case status::iteration_limit: return "iteration_limit";
    case status::not_converged: return "not_converged";
    case status::infeasible: return "infeasible";
    case status::unbounded: return "unbounded";
    case status::numerical_error: return "numerical_error";
  }
  return "unknown";
}

/// What every iterative algorithm reports: the result struct of each one derives from it, so
/// `result.status`, `result.iterations`, `result.criterion` and `result.ok()` read the same everywhere.
/// Each result's documentation says what one iteration and the criterion are for that algorithm.
struct convergence_info {
  /// ok when the stopping rule held (or the problem was solved exactly); otherwise why it stopped.
  moecomp::status status = moecomp::status::ok;
  /// Iterations performed, in the algorithm's own unit (Sinkhorn sweeps, simplex pivots, auction bids, ...).
  std::int64_t iterations = 0;
  /// The quantity the stopping rule tests, at its last evaluation (a marginal error, a displacement, a
  /// duality-gap bound, ...).
  double criterion = 0.0;
  bool ok() const noexcept { return status == moecomp::status::ok; }
};

MOECOMP_NAMESPACE_END
