#pragma once
// The general path of the free-support barycenter (POT's free_support_barycenter): measures of any sizes
// and masses, exact OT by the network simplex, X <- sum_j w_j diag(1/b) T_j X_j.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/ot/detail/free_support_common.hpp>
#include <moecomp/ot/emd.hpp>
#include <moecomp/ot/free_support_barycenter_types.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

template <class T>
class weighted_barycenter_solver {
 public:
  weighted_barycenter_solver(const host_context& ctx, const std::vector<matrix_view<const T>>& measures,
                             const std::vector<vector_view<const double>>& masses, vector_view<const double> b)
      : ctx_(ctx),
        measures_(measures),
        masses_(masses),
        b_(b),
        k_(static_cast<index_t>(measures.size())),
        m_(b.size()),
        d_(measures.front().cols()),
        widest_(widest(measures)),
        team_(static_cast<int>(std::min<index_t>(std::max(1, ctx.threads()), k_))),
        capacity_(m_ + widest_ - 1),
        costs_(ctx, static_cast<std::size_t>(team_ * m_ * widest_)),
        grams_(ctx, static_cast<std::size_t>(team_ * std::min(free_support_cost_rows, m_) * widest_)),
        norms_(ctx, static_cast<std::size_t>(team_ * widest_)),
        plan_rows_(ctx, static_cast<std::size_t>(k_ * capacity_)),
        plan_cols_(ctx, static_cast<std::size_t>(k_ * capacity_)),
        plan_mass_(ctx, static_cast<std::size_t>(k_ * capacity_)),
        nonzeros_(ctx, static_cast<std::size_t>(k_)),
        plan_cost_(ctx, static_cast<std::size_t>(k_)),
        outcome_(ctx, static_cast<std::size_t>(k_)) {}

  /// Exact OT from (x, b) to every measure, plans kept as lists. False when a cost was not finite or a
  /// solve did not end optimal (status() says which).
  bool transport_all(const T* x) {
#if defined(_OPENMP)
    if (team_ > 1) {
#pragma omp parallel num_threads(team_)
      {
        host_context single(1);
        single.allocator = ctx_.allocator;
        const auto slot = static_cast<index_t>(omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
        for (index_t j = 0; j < k_; ++j) solve_one(single, slot, x, j);
      }
    } else
#endif
    {
      for (index_t j = 0; j < k_; ++j) solve_one(ctx_, 0, x, j);
    }
    status_ = moecomp::status::ok;
    for (index_t j = 0; j < k_; ++j)
      if (outcome_[static_cast<std::size_t>(j)] != moecomp::status::ok) {
        status_ = outcome_[static_cast<std::size_t>(j)];
        return false;
      }
    return true;
  }

  moecomp::status status() const { return status_; }

  /// next = sum_j w_j diag(1/b) T_j X_j (measures in order, summed in double); returns ||next - x||_F^2.
  double update(const double* weights, const T* x, T* next) const {
    host_workspace<double> acc(ctx_, static_cast<std::size_t>(m_ * d_));
    std::fill(acc.data(), acc.data() + m_ * d_, 0.0);
    for (index_t j = 0; j < k_; ++j) {
      const matrix_view<const T>& y = measures_[static_cast<std::size_t>(j)];
      const index_t first = j * capacity_;
      for (index_t e = first; e < first + nonzeros_[static_cast<std::size_t>(j)]; ++e) {
        const index_t r = plan_rows_[static_cast<std::size_t>(e)];
        const double scale = weights[j] * plan_mass_[static_cast<std::size_t>(e)] / b_[r];
        const T* yc = y.row_ptr(plan_cols_[static_cast<std::size_t>(e)]);
        double* out = acc.data() + r * d_;
        for (index_t c = 0; c < d_; ++c) out[c] += scale * static_cast<double>(yc[c]);
      }
    }
    double moved = 0.0;
    for (index_t e = 0; e < m_ * d_; ++e) {
      next[e] = static_cast<T>(acc[static_cast<std::size_t>(e)]);
      const double delta = static_cast<double>(next[e]) - static_cast<double>(x[e]);
      moved += delta * delta;
    }
    return moved;
  }

  /// sum_j w_j <T_j, M_j(x)> of the current plans (x: the support they were solved for).
  double objective(const double* weights) const {
    double total = 0.0;
    for (index_t j = 0; j < k_; ++j) total += weights[j] * plan_cost_[static_cast<std::size_t>(j)];
    return total;
  }

 private:
  static index_t widest(const std::vector<matrix_view<const T>>& measures) {
    index_t w = 0;
    for (const auto& y : measures) w = std::max(w, y.rows());
    return w;
  }

  double squared_norm(const T* v) const {
    double s = 0.0;
    for (index_t c = 0; c < d_; ++c) s += static_cast<double>(v[c]) * static_cast<double>(v[c]);
    return s;
  }

  void solve_one(const host_context& solve_ctx, index_t slot, const T* x, index_t j) {
    const matrix_view<const T>& y = measures_[static_cast<std::size_t>(j)];
    const index_t n = y.rows();
    double* cost = costs_.data() + slot * m_ * widest_;
    T* gram = grams_.data() + slot * std::min(free_support_cost_rows, m_) * widest_;
    double* y_norm = norms_.data() + slot * widest_;
    for (index_t c = 0; c < n; ++c) y_norm[c] = squared_norm(y.row_ptr(c));
    // M(r, c) = ||x_r||^2 + ||y_c||^2 - 2 x_r . y_c, clamped at 0 (POT's ot.dist), the cross term by GEMM in T.
    bool finite = true;
    for (index_t row0 = 0; row0 < m_; row0 += free_support_cost_rows) {
      const index_t rows = std::min(free_support_cost_rows, m_ - row0);
      moecomp::detail::gemm_abt<T>(T(1), x + row0 * d_, d_, y.data(), y.row_stride(), rows, n, d_, gram, n);
      for (index_t r = 0; r < rows; ++r) {
        const double x_norm = squared_norm(x + (row0 + r) * d_);
        double* out = cost + (row0 + r) * n;
        const T* g = gram + r * n;
        for (index_t c = 0; c < n; ++c) {
          out[c] = std::max(0.0, x_norm + y_norm[c] - 2.0 * static_cast<double>(g[c]));
          finite = finite && std::isfinite(out[c]);
        }
      }
    }
    if (!finite) {  // overflow in the cost
      outcome_[static_cast<std::size_t>(j)] = moecomp::status::numerical_error;
      return;
    }
    index_t* rows = plan_rows_.data() + j * capacity_;
    index_t* cols = plan_cols_.data() + j * capacity_;
    double* mass = plan_mass_.data() + j * capacity_;
    const index_t room = m_ + n - 1;
    emd_params params;
    params.mass_tolerance = 1e-5;  // each mass vector was checked to sum to 1 within 1e-6
    const emd_result r = emd_sparse(solve_ctx, params, b_, masses_[static_cast<std::size_t>(j)],
                                    matrix_view<const double>(cost, m_, n, n), vector_view<index_t>(rows, room),
                                    vector_view<index_t>(cols, room), vector_view<double>(mass, room));
    outcome_[static_cast<std::size_t>(j)] = r.status;
    nonzeros_[static_cast<std::size_t>(j)] = r.nonzeros;
    // The transport cost from the points directly (no norm cancellation), in double.
    double total = 0.0;
    for (index_t e = 0; e < r.nonzeros; ++e) {
      const T* xr = x + rows[e] * d_;
      const T* yc = y.row_ptr(cols[e]);
      double dist = 0.0;
      for (index_t c = 0; c < d_; ++c) {
        const double delta = static_cast<double>(xr[c]) - static_cast<double>(yc[c]);
        dist += delta * delta;
      }
      total += mass[e] * dist;
    }
    plan_cost_[static_cast<std::size_t>(j)] = total;
  }

  const host_context& ctx_;
  const std::vector<matrix_view<const T>>& measures_;
  const std::vector<vector_view<const double>>& masses_;
  vector_view<const double> b_;
  index_t k_, m_, d_, widest_;
  int team_;
  index_t capacity_;
  host_workspace<double> costs_;
  host_workspace<T> grams_;
  host_workspace<double> norms_;
  host_workspace<index_t> plan_rows_, plan_cols_;
  host_workspace<double> plan_mass_;
  host_workspace<index_t> nonzeros_;
  host_workspace<double> plan_cost_;
  host_workspace<moecomp::status> outcome_;
  moecomp::status status_ = moecomp::status::ok;
};

/// The general path; arguments already checked.
template <class T>
free_support_barycenter_result free_support_weighted(const host_context& ctx,
                                                     const free_support_barycenter_params& params,
                                                     const std::vector<matrix_view<const T>>& measures,
                                                     const std::vector<vector_view<const double>>& measure_masses,
                                                     vector_view<const double> weights, matrix_view<const T> init,
                                                     vector_view<const double> barycenter_masses,
                                                     matrix_view<T> barycenter) {
  const index_t m = init.rows(), d = init.cols(), k = static_cast<index_t>(measures.size());
  host_workspace<double> w(ctx, static_cast<std::size_t>(k));
  for (index_t j = 0; j < k; ++j) w[static_cast<std::size_t>(j)] = weights[j];
  weighted_barycenter_solver<T> solver(ctx, measures, measure_masses, barycenter_masses);
  host_workspace<T> first(ctx, static_cast<std::size_t>(m * d)), second(ctx, static_cast<std::size_t>(m * d));
  T* current = first.data();
  T* next = second.data();
  for (index_t i = 0; i < m; ++i) std::copy(init.row_ptr(i), init.row_ptr(i) + d, current + i * d);

  free_support_barycenter_result result;
  result.status = moecomp::status::iteration_limit;
  bool optimal_for_x = false, failed = false;
  for (index_t iteration = 1; iteration <= params.max_iterations; ++iteration) {
    if (!solver.transport_all(current)) {
      failed = true;
      break;
    }
    result.iterations = iteration;
    const double displacement = solver.update(w.data(), current, next);
    result.criterion = displacement;
    if (!std::isfinite(displacement)) {  // keep the last finite iterate
      failed = true;
      break;
    }
    std::swap(current, next);
    // With displacement 0 the plans just solved were computed for the barycenter being returned.
    optimal_for_x = displacement == 0.0;
    if (displacement <= params.tolerance) {
      result.status = moecomp::status::ok;
      break;
    }
  }
  if (!failed && !optimal_for_x) failed = !solver.transport_all(current);
  if (failed) {
    result.status = solver.status() == moecomp::status::ok ? moecomp::status::numerical_error : solver.status();
    result.objective = std::numeric_limits<double>::quiet_NaN();
  } else {
    result.objective = solver.objective(w.data());
  }
  for (index_t i = 0; i < m; ++i) std::copy(current + i * d, current + (i + 1) * d, barycenter.row_ptr(i));
  return result;
}

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
