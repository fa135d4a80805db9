#pragma once
// The per-element rules of routing shared by the host and the device (MOECOMP_HOST_DEVICE): the tie rule of
// every selection, the score functions, and when a dynamic rule stops taking experts.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/routing_types.hpp>

#include <cmath>

MOECOMP_NAMESPACE_BEGIN
namespace gating {
namespace detail {

/// Whether expert (score a, index ia) is chosen before (b, ib): the higher score, or the lower index on a tie.
MOECOMP_HOST_DEVICE inline bool chosen_before(double a, index_t ia, double b, index_t ib) noexcept {
  return a > b || (a == b && ia < ib);
}

/// sigmoid(v) = 1 / (1 + e^-v).
MOECOMP_HOST_DEVICE inline double sigmoid(double v) noexcept { return 1.0 / (1.0 + exp(-v)); }

/// Whether a dynamic rule takes the next expert in descending-score order: its score `candidate`, with `taken`
/// experts taken so far whose scores sum to `running`; `total` is the sum of every score and `top` the
/// largest. threshold / threshold_code judge the candidate itself (s >= tau max, s >= (1 - tau) max);
/// cumulative and top_p always take the first and then go on while the share (running / total, all experts
/// when total <= 0) or the running sum has not passed tau. min_k / max_k are applied by the caller.
MOECOMP_HOST_DEVICE inline bool takes_next(routing_rule rule, double tau, double candidate, index_t taken, double running,
                                           double total, double top) noexcept {
  switch (rule) {
    case routing_rule::threshold: return candidate >= tau * top;
    case routing_rule::threshold_code: return candidate >= (1.0 - tau) * top;
    case routing_rule::cumulative: return taken == 0 || !(total > 0) || !(running / total > tau);
    case routing_rule::top_p: return taken == 0 || !(running > tau);
    default: return false;
  }
}

}  // namespace detail
}  // namespace gating
MOECOMP_NAMESPACE_END
