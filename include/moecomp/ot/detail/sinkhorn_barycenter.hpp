#pragma once
// Host implementation of the fixed-support entropic barycenter: POT 0.8.2 ot.bregman.barycenter with
// method 'sinkhorn' (barycenter_sinkhorn) and 'sinkhorn_log' (_barycenter_sinkhorn_log). Every product with
// K is computed row by row with a fixed summation order, rows in parallel: bit-identical for any thread count.
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/ot/detail/sinkhorn_host.hpp>
#include <moecomp/ot/detail/sinkhorn_passes.hpp>
#include <moecomp/ot/fixed_support_barycenter_types.hpp>

#include <cmath>
#include <limits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

/// out (n x k, row-major) = K in, K (n x n) stored in T, in (n x k row-major).
template <class T>
void apply_kernel(int threads, matrix_view<const T> kernel, const double* in, index_t k, double* out) {
  const index_t n = kernel.rows();
  (void)threads;
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads) if (threads > 1 && n * n * k >= sinkhorn_parallel_min_entries) schedule(static)
#endif
  for (index_t i = 0; i < n; ++i) {
    const T* row = kernel.row_ptr(i);
    double* o = out + i * k;
    for (index_t h = 0; h < k; ++h) o[h] = 0;
    if (k == 4) {  // the common small case, kept in registers
      double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (index_t j = 0; j < n; ++j) {
        const double x = static_cast<double>(row[j]);
        s0 += x * in[4 * j];
        s1 += x * in[4 * j + 1];
        s2 += x * in[4 * j + 2];
        s3 += x * in[4 * j + 3];
      }
      o[0] = s0, o[1] = s1, o[2] = s2, o[3] = s3;
    } else {
      for (index_t j = 0; j < n; ++j) {
        const double x = static_cast<double>(row[j]);
        for (index_t h = 0; h < k; ++h) o[h] += x * in[j * k + h];
      }
    }
  }
}

/// sum_i std_h(x_ih) (population standard deviation over the k columns, as numpy's std).
inline double sum_of_row_std(const double* x, index_t n, index_t k) {
  double total = 0;
  for (index_t i = 0; i < n; ++i) {
    double mean = 0;
    for (index_t h = 0; h < k; ++h) mean += x[i * k + h];
    mean /= static_cast<double>(k);
    double var = 0;
    for (index_t h = 0; h < k; ++h) var += (x[i * k + h] - mean) * (x[i * k + h] - mean);
    total += std::sqrt(var / static_cast<double>(k));
  }
  return total;
}

/// POT barycenter_sinkhorn. A: n x k (histograms as columns), weights: k, out: the barycenter (n).
template <class T>
fixed_support_barycenter_result barycenter_bregman(const host_context& ctx, const fixed_support_barycenter_params& p,
                                                   matrix_view<const T> A, matrix_view<const T> M,
                                                   const double* weights, double* out) {
  const int threads = ctx.threads();
  const index_t n = A.rows(), k = A.cols();
  const std::size_t nk = static_cast<std::size_t>(n * k);
  moecomp::detail::host_workspace<T> kernel_storage(ctx, static_cast<std::size_t>(n * n));
  moecomp::detail::host_workspace<double> scratch(ctx, 5 * nk + 2 * static_cast<std::size_t>(n));
  const matrix_view<T> kernel(kernel_storage.data(), n, n);
  double* a = scratch.data();  // A as double, n x k
  double* u = a + nk;
  double* x = u + nk;  // K u, then A / (K u)
  double* ukv = x + nk;
  double* u_next = ukv + nk;
  double* bar = u_next + nk;
  double* col = bar + n;
  for (index_t i = 0; i < n; ++i)
    for (index_t h = 0; h < k; ++h) a[i * k + h] = static_cast<double>(A(i, h));
  const double scale = -1.0 / p.reg;
  (void)threads;
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads) if (threads > 1 && n * n >= sinkhorn_parallel_min_entries) schedule(static)
#endif
  for (index_t i = 0; i < n; ++i) {
    const T* m = M.row_ptr(i);
    T* kr = kernel.row_ptr(i);
    for (index_t j = 0; j < n; ++j) kr[j] = static_cast<T>(exp_vectorizable(static_cast<double>(m[j]) * scale));
  }
  // Column sums of K in row order.
  for (index_t j = 0; j < n; ++j) col[j] = 0;
  for (index_t i = 0; i < n; ++i) {
    const T* kr = kernel.row_ptr(i);
    for (index_t j = 0; j < n; ++j) col[j] += static_cast<double>(kr[j]);
  }
  // UKv = K (A / colsum K); u = geometric mean over the columns of UKv / UKv.
  for (index_t j = 0; j < n; ++j)
    for (index_t h = 0; h < k; ++h) x[j * k + h] = a[j * k + h] / col[j];
  const matrix_view<const T> kc = kernel;
  apply_kernel(threads, kc, x, k, ukv);
  for (index_t i = 0; i < n; ++i) {
    double mean_log = 0;
    for (index_t h = 0; h < k; ++h) mean_log += std::log(ukv[i * k + h]);
    const double gm = std::exp(mean_log / static_cast<double>(k));
    for (index_t h = 0; h < k; ++h) u[i * k + h] = gm / ukv[i * k + h];
  }
  fixed_support_barycenter_result result;
  result.residual = 1;
  bool have_bar = false;
  for (index_t it = 0; it < p.max_iterations; ++it) {
    result.iterations = it + 1;
    apply_kernel(threads, kc, u, k, x);
    for (std::size_t e = 0; e < nk; ++e) x[e] = a[e] / x[e];
    apply_kernel(threads, kc, x, k, ukv);
    bool finite = true;
    for (index_t i = 0; i < n; ++i) {
      double log_bar = 0;
      for (index_t h = 0; h < k; ++h) {
        ukv[i * k + h] *= u[i * k + h];
        log_bar += weights[h] * std::log(ukv[i * k + h]);
      }
      const double g = std::exp(log_bar);
      for (index_t h = 0; h < k; ++h) {
        u_next[i * k + h] = u[i * k + h] * g / ukv[i * k + h];
        finite = finite && std::isfinite(u_next[i * k + h]);
      }
      finite = finite && std::isfinite(g);
      col[i] = g;
    }
    if (!finite) {
      result.status = status::numerical_error;
      break;
    }
    std::copy(col, col + n, bar);
    have_bar = true;
    std::copy(u_next, u_next + nk, u);
    if (it % 10 == 1) {
      result.residual = sum_of_row_std(ukv, n, k);
      if (result.residual < p.tolerance) {
        result.converged = true;
        break;
      }
    }
  }
  if (!have_bar) {  // failed at the first iteration: the initial geometric barycenter of UKv is the iterate
    for (index_t i = 0; i < n; ++i) bar[i] = std::numeric_limits<double>::quiet_NaN();
  }
  if (result.status != status::numerical_error)
    result.status = result.converged ? status::ok : status::iteration_limit;
  std::copy(bar, bar + n, out);
  return result;
}

/// POT _barycenter_sinkhorn_log (ot.bregman.barycenter(method='sinkhorn_log')).
template <class T>
fixed_support_barycenter_result barycenter_bregman_log(const host_context& ctx,
                                                       const fixed_support_barycenter_params& p,
                                                       matrix_view<const T> A, matrix_view<const T> M,
                                                       const double* weights, double* out) {
  const int threads = ctx.threads();
  const index_t n = A.rows(), k = A.cols();
  const std::size_t nk = static_cast<std::size_t>(n * k);
  // Column-major (k x n) internally: one contiguous vector per histogram.
  moecomp::detail::host_workspace<double> scratch(ctx, 4 * nk + 3 * static_cast<std::size_t>(n) +
                                                           static_cast<std::size_t>(threads) * static_cast<std::size_t>(n));
  double* log_a = scratch.data();
  double* g = log_a + nk;
  double* f = g + nk;
  double* log_ku = f + nk;
  double* log_bar = log_ku + nk;
  double* bar = log_bar + n;
  double* top = bar + n;
  for (index_t h = 0; h < k; ++h)
    for (index_t i = 0; i < n; ++i) {
      log_a[h * n + i] = std::log(static_cast<double>(A(i, h)) + 1e-15);  // POT: log(A + 1e-15)
      g[h * n + i] = 0;
    }
  const double scale = -1.0 / p.reg;
  const bool parallel = n * n >= sinkhorn_parallel_min_entries;
  fixed_support_barycenter_result result;
  result.residual = 1;
  bool have_bar = false;
  for (index_t it = 0; it < p.max_iterations; ++it) {
    result.iterations = it + 1;
    for (index_t i = 0; i < n; ++i) log_bar[i] = 0;
    for (index_t h = 0; h < k; ++h) {
      const double* gh = g + h * n;
      double* fh = f + h * n;
      const double* lah = log_a + h * n;
      double* kuh = log_ku + h * n;
      sinkhorn_team(threads, parallel, [&](int t, int nt) {
        const index_t i0 = static_cast<index_t>(t) * n / nt, i1 = static_cast<index_t>(t + 1) * n / nt;
        for (index_t i = i0; i < i1; ++i) {
          const T* m = M.row_ptr(i);
          fh[i] = lah[i] - log_sum_exp(n, [&](index_t j) { return static_cast<double>(m[j]) * scale + gh[j]; });
        }
        sinkhorn_team_barrier(nt);
        column_log_sum_exp(M, p.reg, fh, i0, i1, top + static_cast<std::size_t>(t) * static_cast<std::size_t>(n), kuh);
      });
      for (index_t j = 0; j < n; ++j) log_bar[j] += weights[h] * kuh[j];
    }
    bool finite = true;
    for (std::size_t e = 0; e < nk; ++e) finite = finite && std::isfinite(log_ku[e]) && std::isfinite(f[e]);
    if (!finite) {
      result.status = status::numerical_error;
      break;
    }
    for (index_t j = 0; j < n; ++j) bar[j] = std::exp(log_bar[j]);
    have_bar = true;
    if (it % 10 == 1) {
      double total = 0;
      for (index_t j = 0; j < n; ++j) {
        double mean = 0;
        for (index_t h = 0; h < k; ++h) mean += std::exp(g[h * n + j] + log_ku[h * n + j]);
        mean /= static_cast<double>(k);
        double var = 0;
        for (index_t h = 0; h < k; ++h) {
          const double d = std::exp(g[h * n + j] + log_ku[h * n + j]) - mean;
          var += d * d;
        }
        total += std::sqrt(var / static_cast<double>(k));
      }
      result.residual = total;
      if (total < p.tolerance) {
        result.converged = true;
        break;
      }
    }
    for (index_t h = 0; h < k; ++h)
      for (index_t j = 0; j < n; ++j) g[h * n + j] = log_bar[j] - log_ku[h * n + j];
  }
  if (!have_bar)
    for (index_t i = 0; i < n; ++i) bar[i] = std::numeric_limits<double>::quiet_NaN();
  if (result.status != status::numerical_error)
    result.status = result.converged ? status::ok : status::iteration_limit;
  std::copy(bar, bar + n, out);
  return result;
}

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
