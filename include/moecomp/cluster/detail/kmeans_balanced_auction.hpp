#pragma once
// The equal-size k-means assignment step as a linear assignment problem, shared by the device k-means
// (kmeans_balanced_solver::device_auction, <moecomp/cuda/cluster/kmeans.cuh>) and the host tests that check
// the reduction with the host auction (tests/test_kmeans.cpp), so both run these functions.
//
// Reduction. With size_min = size_max = c and n = k c, the transportation problem from the n points (supply
// 1) to the k centres (demand c) on the n x k costs C is the n x n assignment problem whose column q is a
// copy of centre q / c (each centre's column replicated c times, copies adjacent): a perfect matching gives
// every centre exactly c points, and every balanced labelling is such a matching, at the same cost.
//
// Certificate. The auction ends with column prices p (benefit units: a row prefers the column minimising
// C(i, q / c) + p_q) in eps-complementary slackness, which bounds cost - D_assign <= n eps, where D_assign =
// sum_i min_q (C(i, q / c) + p_q) - sum_q p_q is the assignment dual of the potentials v'_q = -p_q. The
// transportation dual is built from the mean price of each centre's copies:
//     v_j = -(1/c) sum_{r < c} p_{j c + r},   u_i = min_j (C(i, j) - v_j),   D = sum_i u_i + c sum_j v_j.
// (u, v) is feasible (u_i + v_j <= C(i, j) by construction), so D <= optimum <= cost (weak duality), and
// D >= D_assign (min_j (C_ij + mean_r p_jr) >= min_{j,r} (C_ij + p_jr), and c sum_j v_j = -sum_q p_q), so
// the gap cost - D lies in [0, n eps] in exact arithmetic: a certificate computed from the step's own
// output, reported as |cost - D| / max(1, |cost|) like the network simplex's gap.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/cluster/kmeans_types.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/core/views.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {
namespace detail {

/// The most bytes the replicated n x n cost (doubles) may take on the device: 2 GiB, n <= 16384. Larger
/// equal-size problems go to the host network simplex (documented in docs/kmeans.md, "Device").
inline constexpr std::size_t balanced_auction_max_cost_bytes = std::size_t(1) << 31;

/// Whether the device k-means runs the equal-size step as a device auction: asked for, equal bounds (c = n / k
/// copies per centre, n = k c), and the replicated cost within balanced_auction_max_cost_bytes.
inline bool uses_balanced_auction(const kmeans_params& params, index_t n) noexcept {
  if (params.balanced_solver != kmeans_balanced_solver::device_auction) return false;
  const index_t k = params.clusters;
  if (params.size_min <= 0 || params.size_max != params.size_min || k * params.size_min != n) return false;
  return static_cast<std::size_t>(n) <= balanced_auction_max_cost_bytes / sizeof(double) / static_cast<std::size_t>(n);
}

/// The centre of column q of the replicated cost (copies of a centre adjacent).
MOECOMP_HOST_DEVICE inline index_t replicated_centre(index_t column, index_t copies) noexcept {
  return column / copies;
}

/// Entry (i, q) of the replicated cost, from the n x k costs (row stride k).
MOECOMP_HOST_DEVICE inline double replicated_cost(const double* cost, index_t k, index_t copies, index_t i,
                                                  index_t column) noexcept {
  return cost[i * k + replicated_centre(column, copies)];
}

/// Centre j's transportation potential from the auction's column prices (benefit units, n of them):
/// v_j = -(mean of its c copies' prices), summed in copy order in double.
MOECOMP_HOST_DEVICE inline double centre_potential(const double* prices, index_t centre, index_t copies) noexcept {
  double sum = 0;
  for (index_t r = 0; r < copies; ++r) sum += prices[centre * copies + r];
  return -sum / static_cast<double>(copies);
}

/// Row i's potential given the centres' potentials: u_i = min_j (C(i, j) - v_j), j in increasing order.
MOECOMP_HOST_DEVICE inline double row_potential(const double* cost_row, const double* centre_potentials,
                                                index_t k) noexcept {
  double best = cost_row[0] - centre_potentials[0];
  for (index_t j = 1; j < k; ++j) {
    const double t = cost_row[j] - centre_potentials[j];
    if (t < best) best = t;
  }
  return best;
}

/// The transportation dual D = sum_i u_i + c sum_j v_j from the summed row potentials and the k centre
/// potentials (on the host: k is small).
inline double balanced_dual(double row_potential_sum, const double* centre_potentials, index_t k, index_t copies) {
  double centres = 0;
  for (index_t j = 0; j < k; ++j) centres += centre_potentials[j];
  return row_potential_sum + static_cast<double>(copies) * centres;
}

/// cost - dual relative to max(1, |cost|), as the network simplex's assignment_gap.
inline double relative_gap(double cost, double dual) {
  return std::abs(cost - dual) / std::max(1.0, std::abs(cost));
}

}  // namespace detail
}  // namespace cluster
MOECOMP_NAMESPACE_END
