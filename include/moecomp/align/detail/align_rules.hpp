#pragma once
// The per-element rules of neuron alignment, shared by the host (align_host.hpp) and the device
// (cuda/align/detail/align_device.cuh): MOECOMP_HOST_DEVICE, so the host tests exercise what the device kernels
// run. Everything in double.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace align {
namespace detail {

/// ||a_i - b_j||^2 = ||a_i||^2 + ||b_j||^2 - 2 a_i . b_j from the squared norms and the cross term, clamped at 0
/// (rounding of the cross term can make it slightly negative).
MOECOMP_HOST_DEVICE inline double clamped_squared_distance(double norm_a, double norm_b, double cross) noexcept {
  const double v = norm_a + norm_b - 2.0 * cross;
  return v > 0 ? v : 0.0;
}

/// One term of the reported objective at a matched pair: (a_k - b_k)^2 for the weights objective (squared
/// distances), a_k b_k for inner products and for correlations of standardised activations.
MOECOMP_HOST_DEVICE inline double objective_term(double a, double b, bool squared_distance) noexcept {
  if (squared_distance) {
    const double t = a - b;
    return t * t;
  }
  return a * b;
}

}  // namespace detail
}  // namespace align
MOECOMP_NAMESPACE_END
