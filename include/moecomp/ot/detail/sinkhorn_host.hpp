#pragma once
// Host drivers of the four Sinkhorn methods (POT 0.8.2 conventions, see docs/sinkhorn.md). The kernel
// K = exp(-C / reg) lives in the caller's plan buffer until the last step scales it into the plan, so a
// solve needs only O(n + m) workspace besides the column accumulators.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/ot/detail/sinkhorn_passes.hpp>
#include <moecomp/ot/sinkhorn_types.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <moecomp/ot/detail/sinkhorn_checks.hpp>
#include <memory>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

/// Scaling vectors and scratch of one solve (all double).
struct sinkhorn_workspace {
  sinkhorn_workspace(const host_context& ctx, index_t n, index_t m, int threads)
      : blocks(n, m),
        storage(ctx, static_cast<std::size_t>(6 * n + 8 * m) + blocks.acc_size() +
                         static_cast<std::size_t>(threads) * static_cast<std::size_t>(blocks.acc_stride)) {
    double* p = storage.data();
    auto take = [&p](index_t count) {
      double* q = p;
      p += count;
      return q;
    };
    a = take(n), log_a = take(n), u = take(n), u_prev = take(n), alpha = take(n), row_work = take(n);
    b = take(m), log_b = take(m), v = take(m), v_prev = take(m), v_next = take(m), beta = take(m), terms = take(m),
    col_work = take(m);
    acc = take(static_cast<index_t>(blocks.acc_size()));
    row_buffers = p;
  }
  row_blocks blocks;
  moecomp::detail::host_workspace<double> storage;
  double *a, *log_a, *u, *u_prev, *alpha, *row_work;
  double *b, *log_b, *v, *v_prev, *v_next, *beta, *terms, *col_work;
  double* acc;
  double* row_buffers;
};

inline bool all_finite(const double* x, index_t count) {
  for (index_t i = 0; i < count; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

/// Finite except where the mass is zero (there the log scaling is -inf by construction).
inline bool all_finite_on_support(const double* x, const double* mass, index_t count) {
  for (index_t i = 0; i < count; ++i)
    if (mass[i] > 0 && !std::isfinite(x[i])) return false;
  return true;
}

inline double sum_in_order(const double* x, index_t count) {
  double s = 0;
  for (index_t i = 0; i < count; ++i) s += x[i];
  return s;
}

inline double max_abs(const double* x, index_t count) {
  double top = 0;
  for (index_t i = 0; i < count; ++i) top = std::max(top, std::fabs(x[i]));
  return top;
}

/// plan_ij = u_i K_ij v_j in place (the kernel is in `plan`); returns <plan, C> summed row by row in order.
template <class T>
double scale_kernel_into_plan(int threads, matrix_view<const T> cost, const double* u, const double* v,
                              matrix_view<T> plan, double* row_cost) {
  const index_t n = plan.rows(), m = plan.cols();
  (void)threads;
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads) if (threads > 1 && n * m >= sinkhorn_parallel_min_entries) schedule(static)
#endif
  for (index_t i = 0; i < n; ++i) {
    T* p = plan.row_ptr(i);
    const T* c = cost.row_ptr(i);
    const double u_i = u[i];
    for (index_t j = 0; j < m; ++j) {
      const T value = static_cast<T>(u_i * static_cast<double>(p[j]) * v[j]);
      p[j] = value;
    }
    row_cost[i] = kernel_dot(p, c, m);  // a second pass over the row, in L1: 16 partial sums
  }
  return sum_in_order(row_cost, n);
}

/// plan_ij = exp(-C_ij / reg + u_i + v_j) from log scalings; returns <plan, C>.
template <class T>
double log_plan(int threads, matrix_view<const T> cost, double reg, const double* u, const double* v,
                matrix_view<T> plan, double* row_cost) {
  const index_t n = plan.rows(), m = plan.cols();
  const double scale = -1.0 / reg;
  (void)threads;
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads) if (threads > 1 && n * m >= sinkhorn_parallel_min_entries) schedule(static)
#endif
  for (index_t i = 0; i < n; ++i) {
    T* p = plan.row_ptr(i);
    const T* c = cost.row_ptr(i);
    const double u_i = u[i];
    for (index_t j = 0; j < m; ++j) {
      const T value = static_cast<T>(exp_vectorizable(static_cast<double>(c[j]) * scale + u_i + v[j]));
      p[j] = value;
    }
    row_cost[i] = kernel_dot(p, c, m);  // a second pass over the row, in L1: 16 partial sums
  }
  return sum_in_order(row_cost, n);
}

struct scaling_outcome {
  index_t iterations = 0;
  double error = 1;  // POT starts its error at 1
  bool converged = false;
  bool numerical_error = false;
};

/// A non-finite u at iteration end: back to the previous iterate (kept in u_prev / v_prev), flagged.
inline void roll_back_iterate(sinkhorn_workspace& ws, index_t n, index_t m, scaling_outcome& out) {
  std::copy(ws.u_prev, ws.u_prev + n, ws.u);
  std::copy(ws.v_prev, ws.v_prev + m, ws.v);
  out.numerical_error = true;
}

/// POT's stopping test at iteration `it` (every check period: the error from `terms`); true when converged.
inline bool check_converged(const sinkhorn_params& p, index_t it, const double* terms, index_t m,
                            scaling_outcome& out) {
  if (it % resolved_check_every(p) != 0) return false;
  out.error = std::sqrt(sum_in_order(terms, m));
  out.converged = out.error < p.tolerance;
  return out.converged;
}

/// POT sinkhorn_knopp's loop from iteration `first` on kernel K (T or float), with v_next = b / K^T u
/// already computed. On return ws.u / ws.v are the scalings of the plan to report.
template <class K>
scaling_outcome plain_loop(int threads, const sinkhorn_params& p, matrix_view<const K> kernel, sinkhorn_workspace& ws,
                           index_t first, scaling_outcome out) {
  const index_t n = kernel.rows(), m = kernel.cols();
  const double* b = ws.b;
  double* terms = ws.terms;
  for (index_t it = first; it < p.max_iterations; ++it) {
    out.iterations = it + 1;
    // v = b / K^T u: a zero column sum or an overflow is a numerical error of this iteration (as in POT);
    // the previous iterate is kept, and flagged.
    if (!all_finite(ws.v_next, m)) {
      out.numerical_error = true;
      return out;
    }
    std::swap(ws.v, ws.v_next);
    std::swap(ws.v_prev, ws.v_next);  // v_prev <- old v, v_next <- scratch
    std::copy(ws.u, ws.u + n, ws.u_prev);
    const double* v = ws.v;
    double* vn = ws.v_next;
    scaling_pass(threads, kernel, ws.a, v, ws.u, ws.blocks, ws.acc, (it & 1) != 0, [=](index_t j, double ktu) {
      const double r = v[j] * ktu - b[j];
      terms[j] = r * r;
      vn[j] = scaling_from(b[j], ktu);
    });
    if (!all_finite(ws.u, n)) {
      roll_back_iterate(ws, n, m, out);
      return out;
    }
    if (check_converged(p, it, terms, m, out)) return out;
  }
  return out;
}

/// Smallest number of kernel entries for which the float copy of K pays (below, K sits in L2 anyway).
constexpr index_t sinkhorn_float_kernel_min_entries = index_t(1) << 18;

/// POT sinkhorn_knopp. Returns true when the plan (and result.cost / marginal error) were already written
/// (float-kernel path); otherwise `plan` holds K and ws.u / ws.v the scalings.
template <class T>
bool plain_iterations(const host_context& ctx, int threads, const sinkhorn_params& p, matrix_view<const T> cost,
                      matrix_view<T> plan, sinkhorn_workspace& ws, scaling_outcome& out, double& plan_cost) {
  const index_t n = plan.rows(), m = plan.cols();
  const double* b = ws.b;
  for (index_t i = 0; i < n; ++i) ws.u[i] = 1.0 / static_cast<double>(n);
  for (index_t j = 0; j < m; ++j) ws.v[j] = 1.0 / static_cast<double>(m);
  double* v_next = ws.v_next;
  const auto fit_v = [=](index_t j, double ktu) { v_next[j] = scaling_from(b[j], ktu); };
  if (std::is_same_v<T, double> && p.allow_float_kernel && n * m >= sinkhorn_float_kernel_min_entries) {
    moecomp::detail::host_workspace<float> kernel_f(ctx, static_cast<std::size_t>(n * m));
    moecomp::detail::host_workspace<std::int32_t> column_max(ctx, ws.blocks.acc_size());
    moecomp::detail::host_workspace<std::int32_t> row_max(ctx, static_cast<std::size_t>(ws.blocks.count));
    const matrix_view<float> kf(kernel_f.data(), n, m);
    build_kernel_pass(threads, cost, p.reg, nullptr, nullptr, kf, 1.0 / static_cast<double>(n), nullptr, ws.blocks,
                      ws.acc, fit_v, kernel_extent{column_max.data(), row_max.data()});
    // Every row and column of the float K must have an entry well inside float's range: then no dot product
    // loses its leading terms to underflow, and no column sum overflows.
    bool safe = true;
    for (index_t blk = 0; blk < ws.blocks.count; ++blk)
      safe = safe && float_from_bits(row_max[static_cast<std::size_t>(blk)]) >= 1e-30f;
    for (index_t j = 0; j < m && safe; ++j) {
      std::int32_t top = 0;
      for (index_t blk = 0; blk < ws.blocks.count; ++blk)
        top = std::max(top, column_max[static_cast<std::size_t>(blk * ws.blocks.acc_stride + j)]);
      safe = float_from_bits(top) >= 1e-30f && float_from_bits(top) <= 1e30f;
    }
    if (safe) {
      out = plain_loop<float>(threads, p, kf, ws, 0, scaling_outcome{});
      // The plan, its cost and its error from the exact kernel.
      double* terms = ws.terms;
      plan_cost = exact_plan_pass(threads, cost, p.reg, ws.u, ws.v, plan, ws.blocks, ws.acc, ws.u_prev,
                                  [=](index_t j, double colsum) { terms[j] = (colsum - b[j]) * (colsum - b[j]); });
      const double exact_error = std::sqrt(sum_in_order(terms, m));
      const bool exact_converged = exact_error < p.tolerance;
      if (out.numerical_error || !out.converged || exact_converged || out.iterations == p.max_iterations) {
        out.error = exact_error;
        out.converged = out.converged && exact_converged;
        return true;
      }
      // The float iterate met the tolerance but the exact plan does not: go on in double from here.
      out.converged = false;
      out.error = exact_error;
      const double* u = ws.u;
      build_kernel_pass(threads, cost, p.reg, nullptr, nullptr, plan, 0.0, u, ws.blocks, ws.acc, fit_v);
      out = plain_loop<T>(threads, p, plan, ws, out.iterations, out);
      return false;
    }
  }
  build_kernel_pass(threads, cost, p.reg, nullptr, nullptr, plan, 1.0 / static_cast<double>(n), nullptr, ws.blocks,
                    ws.acc, fit_v);
  out = plain_loop<T>(threads, p, plan, ws, 0, scaling_outcome{});
  return false;
}

/// POT sinkhorn_stabilized at regularisation `reg`, starting from the absorbed potentials alpha, beta
/// (updated in place by absorptions). On return `plan` holds K(alpha, beta) and ws.u, ws.v the scalings.
template <class T>
scaling_outcome stabilized_iterations(int threads, double reg, index_t max_iterations, double tolerance,
                                      index_t check_every, double tau, matrix_view<const T> cost, matrix_view<T> plan,
                                      sinkhorn_workspace& ws) {
  const index_t n = plan.rows(), m = plan.cols();
  const double* b = ws.b;
  double* terms = ws.terms;
  for (index_t i = 0; i < n; ++i) ws.u[i] = 1.0 / static_cast<double>(n);
  for (index_t j = 0; j < m; ++j) ws.v[j] = 1.0 / static_cast<double>(m);
  {
    double* vn = ws.v_next;
    build_kernel_pass(threads, cost, reg, ws.alpha, ws.beta, plan, 1.0 / static_cast<double>(n), nullptr, ws.blocks, ws.acc,
                      [=](index_t j, double ktu) { vn[j] = scaling_from(b[j], ktu); });
  }
  scaling_outcome out;
  const matrix_view<const T> kernel = plan;
  // After an absorption the iteration continues from u = 1/n, v = 1/m as in POT, but the plan of that state
  // is the new kernel itself (u = v = 1): that is what is reported if the run ends there.
  auto report_kernel_as_plan = [&] {
    std::fill(ws.u, ws.u + n, 1.0);
    std::fill(ws.v, ws.v + m, 1.0);
  };
  bool absorbed_last = false;
  for (index_t it = 0; it < max_iterations; ++it) {
    out.iterations = it + 1;
    if (!all_finite(ws.v_next, m)) {
      if (absorbed_last) report_kernel_as_plan();
      out.numerical_error = true;
      return out;
    }
    const bool absorbed_before = absorbed_last;
    absorbed_last = false;
    std::swap(ws.v, ws.v_next);
    std::swap(ws.v_prev, ws.v_next);
    std::copy(ws.u, ws.u + n, ws.u_prev);
    {
      const double* v = ws.v;
      double* vn = ws.v_next;
      scaling_pass(threads, kernel, ws.a, v, ws.u, ws.blocks, ws.acc, (it & 1) != 0, [=](index_t j, double ktu) {
        const double r = v[j] * ktu - b[j];
        terms[j] = r * r;
        vn[j] = scaling_from(b[j], ktu);
      });
    }
    if (!all_finite(ws.u, n)) {
      roll_back_iterate(ws, n, m, out);
      if (absorbed_before) report_kernel_as_plan();
      return out;
    }
    if (max_abs(ws.u, n) > tau || max_abs(ws.v, m) > tau) {
      // Absorb the scalings into the kernel (alpha += reg log u, beta += reg log v) and restart from
      // u = 1/n, v = 1/m, as POT does; the error tested at this iteration is then POT's, of that state.
      for (index_t i = 0; i < n; ++i) {
        ws.alpha[i] += reg * std::log(ws.u[i]);
        ws.u[i] = 1.0 / static_cast<double>(n);
      }
      for (index_t j = 0; j < m; ++j) {
        ws.beta[j] += reg * std::log(ws.v[j]);
        ws.v[j] = 1.0 / static_cast<double>(m);
      }
      const double v0 = 1.0 / static_cast<double>(m);
      double* vn = ws.v_next;
      build_kernel_pass(threads, cost, reg, ws.alpha, ws.beta, plan, 1.0 / static_cast<double>(n), nullptr, ws.blocks, ws.acc,
                        [=](index_t j, double ktu) {
                          const double r = v0 * ktu - b[j];
                          terms[j] = r * r;
                          vn[j] = scaling_from(b[j], ktu);
                        });
      absorbed_last = true;
    }
    if (it % check_every == 0) out.error = std::sqrt(sum_in_order(terms, m));
    if (out.error <= tolerance) {
      out.converged = true;
      break;
    }
  }
  if (absorbed_last) report_kernel_as_plan();
  return out;
}

/// POT sinkhorn_log. On return ws.u, ws.v are the log scalings of the plan to report.
template <class T>
scaling_outcome log_iterations(int threads, const sinkhorn_params& p, matrix_view<const T> cost, sinkhorn_workspace& ws) {
  const index_t n = cost.rows(), m = cost.cols();
  const double minus_inf = -std::numeric_limits<double>::infinity();
  const double* b = ws.b;
  const double* log_b = ws.log_b;
  double* terms = ws.terms;
  for (index_t i = 0; i < n; ++i) ws.u[i] = 0;
  for (index_t j = 0; j < m; ++j) ws.v[j] = 0;
  // First v = log b - logsumexp_i(-C_ij / reg + 0), exactly, columns split over the threads.
  {
    const bool parallel = n * m >= sinkhorn_parallel_min_entries;
    sinkhorn_team(threads, parallel, [&](int t, int nt) {
      const index_t j0 = static_cast<index_t>(t) * m / nt, j1 = static_cast<index_t>(t + 1) * m / nt;
      column_log_sum_exp(cost, p.reg, ws.u, j0, j1, ws.col_work, ws.v_next);
    });
    for (index_t j = 0; j < m; ++j) ws.v_next[j] = b[j] == 0 ? minus_inf : log_b[j] - ws.v_next[j];
  }
  scaling_outcome out;
  for (index_t it = 0; it < p.max_iterations; ++it) {
    out.iterations = it + 1;
    if (!all_finite_on_support(ws.v_next, b, m)) {
      out.numerical_error = true;
      return out;
    }
    std::swap(ws.v, ws.v_next);
    std::swap(ws.v_prev, ws.v_next);
    std::copy(ws.u, ws.u + n, ws.u_prev);
    const double* v = ws.v;
    double* vn = ws.v_next;
    log_pass(threads, cost, p.reg, ws.a, ws.log_a, v, ws.u, ws.row_buffers, ws.blocks, ws.acc, (it & 1) != 0,
             [=](index_t j, double colsum) {
               const double r = colsum - b[j];
               terms[j] = r * r;
               if (b[j] == 0) {
                 vn[j] = minus_inf;
               } else if (colsum >= sinkhorn_log_sum_floor && colsum <= std::numeric_limits<double>::max()) {
                 vn[j] = v[j] + log_b[j] - std::log(colsum);
               } else {
                 vn[j] = std::numeric_limits<double>::quiet_NaN();  // recomputed exactly below
               }
             });
    // Columns whose sum underflowed: v = log b - logsumexp_i(-C_ij / reg + u_i) with an explicit max shift
    // (ws.beta is free scratch in the log method).
    index_t flagged = 0;
    for (index_t j = 0; j < m; ++j) flagged += std::isnan(vn[j]) ? 1 : 0;
    if (flagged > 0) {
      if (flagged * 16 > m) {
        column_log_sum_exp(cost, p.reg, ws.u, 0, m, ws.col_work, ws.beta);
        for (index_t j = 0; j < m; ++j)
          if (std::isnan(vn[j])) vn[j] = log_b[j] - ws.beta[j];
      } else {
        for (index_t j = 0; j < m; ++j)
          if (std::isnan(vn[j])) {
            column_log_sum_exp(cost, p.reg, ws.u, j, j + 1, ws.col_work, ws.beta);
            vn[j] = log_b[j] - ws.beta[j];
          }
      }
    }
    if (!all_finite_on_support(ws.u, ws.a, n)) {
      roll_back_iterate(ws, n, m, out);
      return out;
    }
    if (check_converged(p, it, terms, m, out)) return out;
  }
  return out;
}

/// Solves one problem into `plan`; potentials (f, g) go to ws.row_work / ws.col_work when wanted.
template <class T>
sinkhorn_result solve_one(const host_context& ctx, int threads, const sinkhorn_params& p, matrix_view<const T> cost, matrix_view<T> plan,
                          sinkhorn_workspace& ws, bool want_potentials) {
  const index_t n = cost.rows(), m = cost.cols();
  sinkhorn_result result;
  scaling_outcome outcome;
  double reg_used = p.reg;
  bool log_domain = false;
  bool plan_written = false;
  for (index_t i = 0; i < n; ++i) ws.alpha[i] = 0;
  for (index_t j = 0; j < m; ++j) ws.beta[j] = 0;
  switch (p.method) {
    case sinkhorn_method::plain:
      plan_written = plain_iterations(ctx, threads, p, cost, plan, ws, outcome, result.cost);
      break;
    case sinkhorn_method::log:
      outcome = log_iterations(threads, p, cost, ws);
      log_domain = true;
      break;
    case sinkhorn_method::stabilized:
      outcome = stabilized_iterations(threads, p.reg, p.max_iterations, p.tolerance, resolved_check_every(p),
                                      p.absorb_threshold, cost, plan, ws);
      break;
    case sinkhorn_method::epsilon_scaling: {
      const index_t outer_max = std::max<index_t>(35, p.max_iterations);  // POT: max(numItermin, numItermax)
      double error = 1;
      for (index_t it = 0; it < outer_max; ++it) {
        outcome.iterations = it + 1;
        reg_used = (p.epsilon_start - p.reg) * std::exp(-p.epsilon_decay * static_cast<double>(it)) + p.reg;
        const scaling_outcome inner =
            stabilized_iterations(threads, reg_used, p.inner_iterations, 1e-9, p.inner_check_every,
                                  p.absorb_threshold, cost, plan, ws);
        if (inner.numerical_error) {
          outcome.numerical_error = true;
          break;
        }
        if (it % resolved_check_every(p) == 0) {
          // ||P^T 1 - b||^2 + ||P 1 - a||^2 of the current plan u_i K_ij v_j.
          for (index_t j = 0; j < m; ++j) ws.terms[j] = 0;
          double rows = 0;
          for (index_t i = 0; i < n; ++i) {
            const T* k = plan.row_ptr(i);
            double s = 0;
            for (index_t j = 0; j < m; ++j) {
              const double x = ws.u[i] * static_cast<double>(k[j]) * ws.v[j];
              s += x;
              ws.terms[j] += x;
            }
            rows += (s - ws.a[i]) * (s - ws.a[i]);
          }
          double cols = 0;
          for (index_t j = 0; j < m; ++j) cols += (ws.terms[j] - ws.b[j]) * (ws.terms[j] - ws.b[j]);
          error = cols + rows;
        }
        outcome.error = error;
        if (error <= p.tolerance && it > 35) {
          outcome.converged = true;
          break;
        }
        if (it + 1 < outer_max) {  // warm start of the next step: absorb the scalings
          for (index_t i = 0; i < n; ++i) ws.alpha[i] += reg_used * std::log(ws.u[i]);
          for (index_t j = 0; j < m; ++j) ws.beta[j] += reg_used * std::log(ws.v[j]);
        }
      }
      break;
    }
  }
  result.iterations = outcome.iterations;
  result.criterion = outcome.error;
  result.status = outcome.numerical_error ? status::numerical_error
                  : outcome.converged     ? status::ok
                                          : status::iteration_limit;
  if (want_potentials) {
    // f_i = alpha_i + reg log u_i, g_j = beta_j + reg log v_j (log scalings already for the log method).
    for (index_t i = 0; i < n; ++i)
      ws.row_work[i] = log_domain ? p.reg * ws.u[i] : ws.alpha[i] + reg_used * std::log(ws.u[i]);
    for (index_t j = 0; j < m; ++j)
      ws.col_work[j] = log_domain ? p.reg * ws.v[j] : ws.beta[j] + reg_used * std::log(ws.v[j]);
  }
  if (!plan_written)
    result.cost = log_domain ? log_plan(threads, cost, p.reg, ws.u, ws.v, plan, ws.u_prev)
                           : scale_kernel_into_plan(threads, cost, ws.u, ws.v, plan, ws.u_prev);
  return result;
}


/// Checks one host problem; returns whether its cost has forbidden (+inf) pairs.
template <class T>
bool check_sinkhorn_problem(const char* function, vector_view<const T> a, vector_view<const T> b,
                            matrix_view<const T> cost, matrix_view<T> plan, int threads = 1) {
  MOECOMP_EXPECTS(a.size() >= 1, function, ": a must have at least one entry, got size ", a.size());
  MOECOMP_EXPECTS(b.size() >= 1, function, ": b must have at least one entry, got size ", b.size());
  MOECOMP_EXPECTS(cost.rows() == a.size() && cost.cols() == b.size(), function, ": cost must be ",
                  moecomp::detail::shape_string(a.size(), b.size()), " (size of a x size of b), got ",
                  moecomp::detail::shape_string(cost.rows(), cost.cols()));
  MOECOMP_EXPECTS(plan.rows() == a.size() && plan.cols() == b.size(), function, ": plan must be ",
                  moecomp::detail::shape_string(a.size(), b.size()), " like cost, got ",
                  moecomp::detail::shape_string(plan.rows(), plan.cols()));
  MOECOMP_EXPECTS(!moecomp::detail::views_overlap(plan, cost), function,
                  ": plan must not overlap cost (it is used as workspace)");
  const double sum_a = check_histogram(function, "a", a.size(), [&](index_t i) { return a(i); });
  const double sum_b = check_histogram(function, "b", b.size(), [&](index_t i) { return b(i); });
  check_equal_mass<T>(function, sum_a, sum_b);
  return check_cost_with_forbidden_pairs(function, "cost", cost, threads);
}

template <class T>
void load_histograms(vector_view<const T> a, vector_view<const T> b, sinkhorn_workspace& ws) {
  for (index_t i = 0; i < a.size(); ++i) {
    ws.a[i] = static_cast<double>(a(i));
    ws.log_a[i] = std::log(ws.a[i]);
  }
  for (index_t j = 0; j < b.size(); ++j) {
    ws.b[j] = static_cast<double>(b(j));
    ws.log_b[j] = std::log(ws.b[j]);
  }
}

template <class T>
sinkhorn_result sinkhorn_host(const host_context& ctx, const sinkhorn_params& params, vector_view<const T> a,
                              vector_view<const T> b, matrix_view<const T> cost, matrix_view<T> plan,
                              vector_view<T>* f, vector_view<T>* g) {
  check_sinkhorn_element_type<T>();
  check_sinkhorn_params("sinkhorn", params);
  const bool forbidden_pairs = check_sinkhorn_problem("sinkhorn", a, b, cost, plan, ctx.threads());
  if (f != nullptr) {
    MOECOMP_EXPECTS(f->size() == a.size(), "sinkhorn: f must have size ", a.size(), " (size of a), got ", f->size());
    MOECOMP_EXPECTS(g->size() == b.size(), "sinkhorn: g must have size ", b.size(), " (size of b), got ", g->size());
  }
  const int threads = ctx.threads();
  sinkhorn_workspace ws(ctx, a.size(), b.size(), threads);
  load_histograms(a, b, ws);
  sinkhorn_result result = solve_one(ctx, threads, params, cost, plan, ws, f != nullptr);
  if (forbidden_pairs) result.cost = cost_over_allowed_pairs(matrix_view<const T>(plan), cost);
  if (f != nullptr) {
    for (index_t i = 0; i < a.size(); ++i) (*f)(i) = static_cast<T>(ws.row_work[i]);
    for (index_t j = 0; j < b.size(); ++j) (*g)(j) = static_cast<T>(ws.col_work[j]);
  }
  return result;
}

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
