#pragma once
// The per-element rules of Pearson correlation between activation columns, shared by the host
// (core/detail/correlation.hpp) and the device (cuda/align/detail/align_device.cuh): MOECOMP_HOST_DEVICE, so the
// host tests exercise what the device kernels run. Everything in double.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>

#include <cmath>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

/// (x - mean)^2: one term of a column's centred sum of squares.
MOECOMP_HOST_DEVICE inline double squared_deviation(double x, double mean) noexcept {
  const double v = x - mean;
  return v * v;
}

/// 1 / ||x - mean|| from the centred sum of squares; 0 for a constant column, whose standardised values are then
/// all 0: correlation 0 with every column (numpy gives NaN).
MOECOMP_HOST_DEVICE inline double unit_norm_scale(double centred_squares) noexcept {
  return centred_squares > 0 ? 1.0 / sqrt(centred_squares) : 0.0;
}

/// One standardised activation: centred, then scaled to the column's unit norm.
MOECOMP_HOST_DEVICE inline double standardized_value(double x, double mean, double scale) noexcept {
  return (x - mean) * scale;
}

}  // namespace detail
MOECOMP_NAMESPACE_END
