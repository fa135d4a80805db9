#pragma once
// Numerical outcomes. An algorithm that can stop short (iteration limit, no convergence, infeasible
// problem, overflow) reports it in its result struct as a `status` plus the iteration count and the final
// residual, never as an exception and never silently. Exceptions are for misuse only (error.hpp).
#include <moecomp/core/config.hpp>

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

/// Common tail of the result struct of every iterative algorithm.
struct convergence_info {
  moecomp::status status = moecomp::status::ok;
  int iterations = 0;
  double residual = 0.0;  // the quantity the stopping rule tests, at the last iteration
  bool ok() const noexcept { return status == moecomp::status::ok; }
};

MOECOMP_NAMESPACE_END
