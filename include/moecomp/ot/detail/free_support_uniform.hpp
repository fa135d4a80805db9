#pragma once
// The uniform fast path of the free-support barycenter: k clouds of n points each, every point of mass
// 1/n, barycenter of n points of mass 1/n. The exact OT plans between two such measures include a
// permutation (Birkhoff), so each OT is one linear assignment and the barycenter update
// X <- sum_j w_j diag(1/b) T_j X_j becomes X(l) = sum_j w_j x_{j, source_j(l)}.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/ot/detail/free_support_common.hpp>
#include <moecomp/ot/free_support_barycenter_types.hpp>
#include <moecomp/ot/linear_assignment.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

template <class T>
class uniform_barycenter_solver {
 public:
  uniform_barycenter_solver(const host_context& ctx, matrix_stack_view<const T> measures, index_t k, const double* weights,
                            index_t n)
      : ctx_(ctx),
        measures_(measures),
        k_(k),
        n_(n),
        d_(measures.cols()),
        weights_(weights),
        threads_(std::max(1, ctx.threads())),
        slots_(static_cast<index_t>(std::min<index_t>(threads_, k))),
        costs_(ctx, static_cast<std::size_t>(slots_ * n * n)),
        permutation_(ctx, static_cast<std::size_t>(k * n)),
        source_(ctx, static_cast<std::size_t>(k * n)),
        row_potential_(ctx, static_cast<std::size_t>(k * n)),
        column_potential_(ctx, static_cast<std::size_t>(k * n)),
        round_ok_(ctx, static_cast<std::size_t>(k)) {
    // Defined output even when the first round fails.
    for (index_t j = 0; j < k; ++j)
      for (index_t i = 0; i < n; ++i) permutation_[static_cast<std::size_t>(j * n + i)] = i;
  }

  index_t* permutation() const { return permutation_.data(); }

  matrix_view<const T> cloud(index_t j) const { return measures_[j]; }

  /// One exact assignment per cloud against `barycenter` (n x d, contiguous); the permutations land in
  /// permutation(). False when a cost entry was not finite or an assignment did not solve.
  bool assign_all(const T* barycenter, bool warm_start) {
#if defined(_OPENMP)
    if (slots_ > 1 && slots_ == static_cast<index_t>(threads_)) {
      // At least as many clouds as threads: each thread builds and solves whole clouds, one cost buffer
      // per thread, clouds handed out dynamically (a cloud's result does not depend on its thread).
#pragma omp parallel num_threads(threads_)
      {
        T* cost = costs_.data() + static_cast<index_t>(omp_get_thread_num()) * n_ * n_;
        host_context single = single_thread_context();
#pragma omp for schedule(dynamic, 1)
        for (index_t j = 0; j < k_; ++j) {
          for (index_t row0 = 0; row0 < n_; row0 += free_support_cost_rows) build_cost_rows(j, row0, barycenter, cost);
          round_ok_[static_cast<std::size_t>(j)] = solve(single, j, cost, warm_start);
        }
      }
      return all_ok();
    }
    if (threads_ > 1) {
      // Fewer clouds than threads (one cloud included): all clouds' costs at once, their GEMM tiles spread
      // over the threads, then one assignment per thread.
      const index_t tiles = (n_ + free_support_cost_rows - 1) / free_support_cost_rows;
#pragma omp parallel num_threads(threads_)
      {
#pragma omp for schedule(dynamic, 1)
        for (index_t item = 0; item < k_ * tiles; ++item) {
          const index_t j = item / tiles;
          build_cost_rows(j, (item % tiles) * free_support_cost_rows, barycenter, costs_.data() + j * n_ * n_);
        }
        host_context single = single_thread_context();
#pragma omp for schedule(dynamic, 1)
        for (index_t j = 0; j < k_; ++j)
          round_ok_[static_cast<std::size_t>(j)] = solve(single, j, costs_.data() + j * n_ * n_, warm_start);
      }
      return all_ok();
    }
#endif
    for (index_t j = 0; j < k_; ++j) {
      for (index_t row0 = 0; row0 < n_; row0 += free_support_cost_rows)
        build_cost_rows(j, row0, barycenter, costs_.data());
      round_ok_[static_cast<std::size_t>(j)] = solve(ctx_, j, costs_.data(), warm_start);
    }
    return all_ok();
  }

  /// next(l) = sum_j w_j x_{j, source_j(l)}, summed over j in order, in double; returns ||next - current||_F^2.
  double update(const T* current, T* next) {
    for (index_t j = 0; j < k_; ++j) {
      const index_t* p = permutation_.data() + j * n_;
      index_t* s = source_.data() + j * n_;
      for (index_t i = 0; i < n_; ++i) s[p[i]] = i;
    }
    host_workspace<double> row_displacement(ctx_, static_cast<std::size_t>(n_));
    const auto rows = static_cast<std::ptrdiff_t>(n_);
    auto update_row = [&](double* acc, std::ptrdiff_t l) {
      std::fill(acc, acc + d_, 0.0);
      for (index_t j = 0; j < k_; ++j) {
        const double w = weights_[j];
        const T* x = measures_.row_ptr(j, source_[static_cast<std::size_t>(j * n_ + l)]);
        for (index_t c = 0; c < d_; ++c) acc[c] += w * static_cast<double>(x[c]);
      }
      T* out = next + l * d_;
      const T* old = current + l * d_;
      double moved = 0.0;
      for (index_t c = 0; c < d_; ++c) {
        out[c] = static_cast<T>(acc[c]);
        const double delta = static_cast<double>(out[c]) - static_cast<double>(old[c]);
        moved += delta * delta;
      }
      row_displacement[static_cast<std::size_t>(l)] = moved;
    };
    // One accumulator row per thread, allocated here: nothing inside the parallel region may throw.
    host_workspace<double> acc(ctx_, static_cast<std::size_t>(threads_ * d_));
#if defined(_OPENMP)
#pragma omp parallel num_threads(threads_) if (threads_ > 1 && n_ * d_ * k_ > 65536)
    {
      double* mine = acc.data() + static_cast<index_t>(omp_get_thread_num()) * d_;
#pragma omp for schedule(static)
      for (std::ptrdiff_t l = 0; l < rows; ++l) update_row(mine, l);
    }
#else
    for (std::ptrdiff_t l = 0; l < rows; ++l) update_row(acc.data(), l);
#endif
    double total = 0.0;
    for (index_t l = 0; l < n_; ++l) total += row_displacement[static_cast<std::size_t>(l)];
    return total;
  }

  /// sum_j w_j (1/n) sum_i ||x_ji - b_P(j,i)||^2, each cloud summed in double, clouds added in order.
  double objective(const T* barycenter) const {
    host_workspace<double> per_cloud(ctx_, static_cast<std::size_t>(k_));
    const auto clouds = static_cast<std::ptrdiff_t>(k_);
    auto cloud_cost = [&](std::ptrdiff_t j) {
      double total = 0.0;
      const index_t* p = permutation_.data() + j * n_;
      for (index_t i = 0; i < n_; ++i) {
        const T* x = measures_.row_ptr(j, i);
        const T* b = barycenter + p[i] * d_;
        double row = 0.0;
        for (index_t c = 0; c < d_; ++c) {
          const double delta = static_cast<double>(x[c]) - static_cast<double>(b[c]);
          row += delta * delta;
        }
        total += row;
      }
      per_cloud[static_cast<std::size_t>(j)] = total;
    };
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads_) schedule(static) if (threads_ > 1 && k_ > 1)
    for (std::ptrdiff_t j = 0; j < clouds; ++j) cloud_cost(j);
#else
    for (std::ptrdiff_t j = 0; j < clouds; ++j) cloud_cost(j);
#endif
    double total = 0.0;
    for (index_t j = 0; j < k_; ++j) total += weights_[j] * (per_cloud[static_cast<std::size_t>(j)] / static_cast<double>(n_));
    return total;
  }

 private:
  host_context single_thread_context() const {
    host_context single(1);
    single.allocator = ctx_.allocator;
    return single;
  }

  /// Rows [row0, row0 + 256) of cost_j = -(X_j B^T): for a permutation, sum_i ||x_i - b_P(i)||^2 =
  /// sum ||x_i||^2 + sum ||b_l||^2 - 2 sum x_i . b_P(i), and the first two sums do not depend on P, so
  /// minimising the cross term alone gives the same optimal permutations (and avoids the cancellation of
  /// the norms).
  void build_cost_rows(index_t j, index_t row0, const T* barycenter, T* cost) const {
    const index_t rows = std::min(free_support_cost_rows, n_ - row0);
    const matrix_view<const T> x = cloud(j);
    moecomp::detail::gemm_abt<T>(T(-1), x.row_ptr(row0), x.row_stride(), barycenter, d_, rows, n_, d_,
                                 cost + row0 * n_, n_);
  }

  bool solve(const host_context& ctx, index_t j, const T* cost, bool warm_start) {
    for (index_t e = 0; e < n_ * n_; ++e)
      if (!std::isfinite(cost[e])) return false;  // overflow in the cross term
    linear_assignment_params params;
    params.warm_start = warm_start;
    const linear_assignment_result r = linear_assignment(
        ctx, params, matrix_view<const T>(cost, n_, n_, n_), vector_view<index_t>(permutation_.data() + j * n_, n_),
        vector_view<double>(row_potential_.data() + j * n_, n_),
        vector_view<double>(column_potential_.data() + j * n_, n_));
    return r.status == moecomp::status::ok;
  }

  bool all_ok() const {
    for (index_t j = 0; j < k_; ++j)
      if (!round_ok_[static_cast<std::size_t>(j)]) return false;
    return true;
  }

  const host_context& ctx_;
  matrix_stack_view<const T> measures_;
  index_t k_, n_, d_;
  const double* weights_;
  int threads_;
  index_t slots_;
  host_workspace<T> costs_;
  host_workspace<index_t> permutation_, source_;
  host_workspace<double> row_potential_, column_potential_;
  host_workspace<char> round_ok_;
};

/// The uniform path; arguments already checked.
template <class T>
free_support_barycenter_result free_support_uniform(const host_context& ctx,
                                                    const free_support_barycenter_params& params,
                                                    matrix_stack_view<const T> measures, const double* weights,
                                                    matrix_view<const T> init, matrix_view<T> barycenter,
                                                    matrix_view<index_t> permutations) {
  const index_t k = measures.count(), n = init.rows(), d = init.cols();
  free_support_barycenter_result result;
  uniform_barycenter_solver<T> solver(ctx, measures, k, weights, n);
  host_workspace<T> current(ctx, static_cast<std::size_t>(n * d)), next(ctx, static_cast<std::size_t>(n * d));
  host_workspace<index_t> previous(ctx, static_cast<std::size_t>(k * n));
  for (index_t i = 0; i < n; ++i) std::copy(init.row_ptr(i), init.row_ptr(i) + d, current.data() + i * d);
  T* x = current.data();
  T* x_next = next.data();
  const std::size_t perm_bytes = static_cast<std::size_t>(k * n) * sizeof(index_t);

  // The permutations in the solver are optimal for `x` whenever `optimal_for_x` holds.
  bool optimal_for_x = false;
  bool failed = false;
  result.status = moecomp::status::iteration_limit;
  for (index_t iteration = 1; iteration <= params.max_iterations; ++iteration) {
    if (iteration > 1) std::memcpy(previous.data(), solver.permutation(), perm_bytes);
    if (!solver.assign_all(x, /*warm_start=*/iteration > 1)) {
      failed = true;
      break;
    }
    result.iterations = iteration;
    if (iteration > 1 && std::memcmp(previous.data(), solver.permutation(), perm_bytes) == 0) {
      // Same permutations as for the update that produced x: that update would reproduce x bit for bit.
      result.criterion = 0.0;
      result.status = moecomp::status::ok;
      optimal_for_x = true;
      break;
    }
    const double displacement = solver.update(x, x_next);
    result.criterion = displacement;
    if (!std::isfinite(displacement)) {  // keep the last finite iterate
      failed = true;
      break;
    }
    std::swap(x, x_next);
    optimal_for_x = displacement == 0.0;
    if (displacement <= params.tolerance) {
      result.status = moecomp::status::ok;
      break;
    }
  }
  // Make the returned permutations optimal for the returned barycenter (one more round of assignments
  // when the last update moved it; not counted as an iteration).
  if (!failed && !optimal_for_x) failed = !solver.assign_all(x, /*warm_start=*/true);
  if (failed) {
    result.status = moecomp::status::numerical_error;
    result.objective = std::numeric_limits<double>::quiet_NaN();
  } else {
    result.objective = solver.objective(x);
  }
  for (index_t i = 0; i < n; ++i) std::copy(x + i * d, x + (i + 1) * d, barycenter.row_ptr(i));
  for (index_t j = 0; j < k; ++j)
    std::copy(solver.permutation() + j * n, solver.permutation() + (j + 1) * n, permutations.row_ptr(j));
  return result;
}

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
