#pragma once
// The exact transportation problem behind a k-means assignment step with size bounds, shared by the host
// and the device k-means (the device forms the costs, the host solves). Rows are the points (supply 1
// each), columns the clusters: with equal bounds (size_min = size_max = s) k columns of demand s;
// otherwise k columns of demand size_min plus k of demand size_max - size_min, and one more row, a dummy
// source of the k size_max - n units of capacity left unused, which may serve only the second k columns
// (at cost 0; +inf elsewhere). Integer supplies and demands make the optimal basic plan integral, so each
// point's unit goes to exactly one cluster. Solved by the network simplex (<moecomp/ot/emd.hpp>).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/ot/emd.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {
namespace detail {

struct size_bounded_transport {
  index_t n, k, size_min, size_max, rows, cols;
  moecomp::detail::host_workspace<double> cost, a, b, u, v, mass;
  moecomp::detail::host_workspace<index_t> plan_rows, plan_cols;

  size_bounded_transport(const host_context& ctx, index_t points, index_t clusters, index_t lo, index_t hi)
      : n(points),
        k(clusters),
        size_min(lo),
        size_max(hi),
        rows(lo == hi ? points : points + 1),
        cols(lo == hi ? clusters : 2 * clusters),
        cost(ctx, static_cast<std::size_t>(rows * cols)),
        a(ctx, static_cast<std::size_t>(rows)),
        b(ctx, static_cast<std::size_t>(cols)),
        u(ctx, static_cast<std::size_t>(rows)),
        v(ctx, static_cast<std::size_t>(cols)),
        mass(ctx, static_cast<std::size_t>(rows + cols)),
        plan_rows(ctx, static_cast<std::size_t>(rows + cols)),
        plan_cols(ctx, static_cast<std::size_t>(rows + cols)) {
    for (index_t i = 0; i < n; ++i) a[static_cast<std::size_t>(i)] = 1.0;
    for (index_t j = 0; j < k; ++j) b[static_cast<std::size_t>(j)] = static_cast<double>(size_min);
    if (rows > n) {
      a[static_cast<std::size_t>(n)] = static_cast<double>(k * size_max - n);
      for (index_t j = 0; j < k; ++j) b[static_cast<std::size_t>(k + j)] = static_cast<double>(size_max - size_min);
      for (index_t j = 0; j < cols; ++j)
        cost[static_cast<std::size_t>(n * cols + j)] = j < k ? std::numeric_limits<double>::infinity() : 0.0;
    }
  }

  /// Point i's costs: the caller fills the first k entries (w_i ||x_i - c_j||^2) before solve.
  double* cost_row(index_t i) noexcept { return cost.data() + i * cols; }
  /// Row stride of the cost rows (cols: k, or 2k with the second k filled by solve).
  index_t cost_stride() const noexcept { return cols; }

  /// Solves the problem for the costs filled in; writes each point's cluster to labels and returns the
  /// duality gap cost - (sum_i a_i u_i + sum_j b_j v_j) relative to max(1, cost).
  double solve(const host_context& ctx, std::int64_t* labels) {
    if (cols > k)
      for (index_t i = 0; i < n; ++i) std::copy(cost_row(i), cost_row(i) + k, cost_row(i) + k);
    ot::emd_params params;
    params.mass_tolerance = 0;
    const ot::emd_result r = ot::emd_sparse(
        ctx, params, vector_view<const double>(a.data(), rows), vector_view<const double>(b.data(), cols),
        matrix_view<const double>(cost.data(), rows, cols), vector_view<index_t>(plan_rows.data(), rows + cols),
        vector_view<index_t>(plan_cols.data(), rows + cols), vector_view<double>(mass.data(), rows + cols),
        vector_view<double>(u.data(), rows), vector_view<double>(v.data(), cols));
    MOECOMP_ENSURES(r.ok(), "kmeans: the size-bounded assignment step ended ", to_string(r.status));
    for (index_t e = 0; e < r.nonzeros; ++e) {
      const index_t i = plan_rows[static_cast<std::size_t>(e)];
      if (i < n) labels[i] = plan_cols[static_cast<std::size_t>(e)] % k;
    }
    double dual = 0;
    for (index_t i = 0; i < rows; ++i) dual += a[static_cast<std::size_t>(i)] * u[static_cast<std::size_t>(i)];
    for (index_t j = 0; j < cols; ++j) dual += b[static_cast<std::size_t>(j)] * v[static_cast<std::size_t>(j)];
    return std::abs(r.cost - dual) / std::max(1.0, std::abs(r.cost));
  }
};

}  // namespace detail
}  // namespace cluster
MOECOMP_NAMESPACE_END
