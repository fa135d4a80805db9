#pragma once
// The solver of learned merging's coefficients (the fourth paper's Eq. 7), shared by the host
// (merge/detail/merge_host.hpp) and the device (cuda/merge/detail/learned_device.cuh): the projected-gradient
// loop runs on the host in both, over n <= 64 numbers; only the objective's evaluation (a `Problem` with
// `double evaluate(const std::vector<double>& alpha, std::vector<double>* grad)`) differs. One loop, so the step
// rule, the projection, the iteration cap and the stopping test are the same code on both paths.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/merge/merge_types.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace merge {
namespace detail {

/// The Euclidean projection of v onto the probability simplex (sort-based: Held, Wolfe and Crowder; Duchi et al.).
inline std::vector<double> project_to_simplex(const std::vector<double>& v) {
  std::vector<double> u(v);
  std::sort(u.begin(), u.end(), [](double a, double b) { return a > b; });
  double cumulative = 0, theta = 0;
  for (std::size_t i = 0; i < u.size(); ++i) {
    cumulative += u[i];
    const double t = (cumulative - 1.0) / static_cast<double>(i + 1);
    if (u[i] - t > 0) theta = t;
  }
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = std::max(0.0, v[i] - theta);
  return out;
}

/// The outcome of one group's learning.
struct learned_outcome {
  std::vector<double> alpha;
  double initial = 0, final = 0, last_step = 0;
  std::int64_t iterations = 0;
  bool converged = true;
};

/// Projected gradient descent on L over the simplex of n coefficients from the uniform a, with a backtracking
/// (sufficient-decrease) step: the first step 1 / ||grad||, halved (at most 60 times) until
/// L(next) <= L + <grad, next - a> + ||next - a||^2 / (2 step), doubled after each accepted step; at most
/// params.max_iterations steps; stop when no coefficient moves by more than params.learned_tolerance, or when
/// no trial step descends (a stationary point of the projected problem).
template <class Problem>
learned_outcome projected_gradient(Problem& problem, std::size_t n, const merge_params& params) {
  learned_outcome out;
  out.alpha.assign(n, 1.0 / static_cast<double>(n));
  std::vector<double> grad, next(n);
  double loss = problem.evaluate(out.alpha, &grad);
  out.initial = out.final = loss;
  if (n == 1) return out;
  double norm = 0;
  for (double g : grad) norm += g * g;
  double step = norm > 0 ? 1.0 / std::sqrt(norm) : 1.0;
  out.converged = false;
  for (int it = 0; it < params.max_iterations; ++it) {
    bool accepted = false;
    double moved = 0;
    for (int halving = 0; halving < 60; ++halving) {
      std::vector<double> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = out.alpha[i] - step * grad[i];
      next = project_to_simplex(v);
      double linear = 0, square = 0;
      moved = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double delta = next[i] - out.alpha[i];
        linear += grad[i] * delta;
        square += delta * delta;
        moved = std::max(moved, std::fabs(delta));
      }
      if (moved == 0) break;
      const double trial = problem.evaluate(next, nullptr);
      if (trial <= loss + linear + square / (2 * step)) {
        accepted = true;
        break;
      }
      step *= 0.5;
    }
    if (!accepted) {  // no descent step: a stationary point of the projected problem
      out.converged = true;
      out.last_step = 0;
      break;
    }
    out.alpha = next;
    loss = problem.evaluate(out.alpha, &grad);
    out.final = loss;
    out.last_step = moved;
    ++out.iterations;
    step *= 2;
    if (moved <= params.learned_tolerance) {
      out.converged = true;
      break;
    }
  }
  return out;
}

}  // namespace detail
}  // namespace merge
MOECOMP_NAMESPACE_END
