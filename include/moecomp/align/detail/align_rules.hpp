#pragma once
// The per-element rules of neuron alignment, shared by the host (align_host.hpp) and the device
// (cuda/align/detail/align_device.cuh): MOECOMP_HOST_DEVICE, so the host tests exercise what the device kernels
// run. Everything in double; the design-row layout in index arithmetic.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/core/views.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace align {
namespace detail {

/// Where the pieces of a design row [W1 | b1 | W3 | b3 | W2^T] start: w1 at 0, then b1 (if any), w3 (gated), b3
/// (if any) and W2^T last; an absent piece starts at -1; `width` is the row's length. The host's fill_design and
/// design_width and the device's design kernels all use this layout.
struct design_layout {
  index_t d = 0, w1 = 0, b1 = -1, w3 = -1, b3 = -1, w2 = 0, width = 0;
};

MOECOMP_HOST_DEVICE inline design_layout make_design_layout(index_t d, bool gated, bool has_b1, bool has_b3) noexcept {
  design_layout l;
  l.d = d;
  index_t c = d;  // after W1
  if (has_b1) l.b1 = c++;
  if (gated) {
    l.w3 = c;
    c += d;
    if (has_b3) l.b3 = c++;
  }
  l.w2 = c;
  l.width = c + d;
  return l;
}

/// Columns of the design row [W1 | b1 | W3 | b3 | W2^T]: d for each weight, 1 for each bias present.
MOECOMP_HOST_DEVICE inline index_t design_columns(index_t d, bool gated, bool has_b1, bool has_b3) noexcept {
  return make_design_layout(d, gated, has_b1, has_b3).width;
}

/// The pieces of a design row.
enum class design_piece { w1, b1, w3, b3, w2 };

/// The piece that column c (0 <= c < layout.width) of a design row comes from, and in `k` its index there: the
/// column of W1 / W3 (row i of the expert's W1 / W3), 0 for a bias (entry i), or the row of W2 (W2[k, i]).
MOECOMP_HOST_DEVICE inline design_piece design_source(const design_layout& l, index_t c, index_t& k) noexcept {
  if (c >= l.w2) {
    k = c - l.w2;
    return design_piece::w2;
  }
  if (c < l.d) {
    k = c;
    return design_piece::w1;
  }
  k = 0;
  if (c == l.b1) return design_piece::b1;
  if (c == l.b3) return design_piece::b3;
  k = c - l.w3;
  return design_piece::w3;
}

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
