#pragma once
// The weighted gather of expert neurons, element by element, shared by the host and the device
// (MOECOMP_HOST_DEVICE): merging's weighted sum of a group's experts (each member's neurons optionally put in
// a reference's order by a permutation) and the device's permute_neurons (one member, coefficient 1, which is
// exact). The device kernels around it are in <moecomp/cuda/core/detail/expert_gather.cuh>; the host tests
// exercise this function directly.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/core/numeric_types.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

/// Members per call: their pointers and coefficients travel by value (a kernel argument: 64 x 24 bytes).
inline constexpr int max_gather_members = 64;

/// One piece (W1, W3, W2 or a bias) of up to max_gather_members experts: member i's matrix at src[i] (row
/// stride `stride`, shared), its coefficient coef[i], and the permutation perm[i] (d_ff neuron ids, or null
/// for the identity).
template <class W>
struct gather_piece {
  const W* src[max_gather_members];
  const index_t* perm[max_gather_members];
  double coef[max_gather_members];
  int count = 0;
  index_t stride = 0;
};

/// out(r, c) = sum_i coef[i] src_i(row, col) in double, in member order, the neuron axis gathered:
/// neuron_axis 0 (neurons are rows: W1, W3) reads src_i(perm_i[r], c); neuron_axis 1 (neurons are columns: W2,
/// and b1 / b3 as 1 x d_ff rows) reads src_i(r, perm_i[c]); neuron_axis -1 (b2) reads src_i(r, c).
template <class W>
MOECOMP_HOST_DEVICE inline double gathered_sum(const gather_piece<W>& p, int neuron_axis, index_t r, index_t c) {
  double acc = 0;
  for (int i = 0; i < p.count; ++i) {
    index_t row = r, col = c;
    if (neuron_axis == 0 && p.perm[i] != nullptr) row = p.perm[i][r];
    if (neuron_axis == 1 && p.perm[i] != nullptr) col = p.perm[i][c];
    acc += p.coef[i] * convert_to<double>(p.src[i][row * p.stride + col]);
  }
  return acc;
}

}  // namespace detail
MOECOMP_NAMESPACE_END
