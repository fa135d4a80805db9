#pragma once
// Host implementation of the fixed-support entropic barycenter: POT 0.8.2 ot.bregman.barycenter with
// method 'sinkhorn' (barycenter_sinkhorn) and 'sinkhorn_log' (_barycenter_sinkhorn_log). Every sum has a
// fixed order that does not depend on how rows are shared among threads: bit-identical for any thread count.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/ot/detail/sinkhorn_host.hpp>
#include <moecomp/ot/detail/sinkhorn_passes.hpp>
#include <moecomp/ot/fixed_support_barycenter_types.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>
#include <moecomp/ot/detail/sinkhorn_checks.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

/// Row blocks of the one-pass iteration (fixed: the unit of deterministic accumulation, not of threads).
constexpr index_t barycenter_row_blocks = 16;

#if (defined(__GNUC__) || defined(__clang__)) && defined(__AVX__) && !defined(MOECOMP_BARYCENTER_SCALAR)
/// Four doubles, one AVX register. The compiler's own vectoriser turns the register-blocked loops below into
/// shuffles and spills, so the blocking is written with explicit vectors (without AVX, a 32-byte vector
/// type would change the calling convention: the portable stand-in below is used instead).
typedef double barycenter_vec __attribute__((vector_size(32)));

template <class T>
inline barycenter_vec barycenter_load(const T* p) {
  if constexpr (std::is_same_v<T, double>) {
    barycenter_vec v;
    std::memcpy(&v, p, sizeof v);
    return v;
  } else {
    typedef float four_floats __attribute__((vector_size(16)));
    four_floats f;
    std::memcpy(&f, p, sizeof f);
    return __builtin_convertvector(f, barycenter_vec);
  }
}
inline barycenter_vec barycenter_splat(double x) { return barycenter_vec{x, x, x, x}; }
inline void barycenter_store(double* p, barycenter_vec v) { std::memcpy(p, &v, sizeof v); }
#else
/// Portable stand-in: the same four lanes, the same order of operations.
struct barycenter_vec {
  double l[4];
  double operator[](int i) const { return l[i]; }
  barycenter_vec operator*(const barycenter_vec& o) const {
    return {{l[0] * o.l[0], l[1] * o.l[1], l[2] * o.l[2], l[3] * o.l[3]}};
  }
  barycenter_vec operator+(const barycenter_vec& o) const {
    return {{l[0] + o.l[0], l[1] + o.l[1], l[2] + o.l[2], l[3] + o.l[3]}};
  }
  barycenter_vec& operator+=(const barycenter_vec& o) { return *this = *this + o; }
};
template <class T>
inline barycenter_vec barycenter_load(const T* p) {
  return {{static_cast<double>(p[0]), static_cast<double>(p[1]), static_cast<double>(p[2]), static_cast<double>(p[3])}};
}
inline barycenter_vec barycenter_splat(double x) { return {{x, x, x, x}}; }
inline void barycenter_store(double* p, barycenter_vec v) { std::memcpy(p, v.l, sizeof v.l); }
#endif

/// Rows of K per panel: a panel's rows are read from memory by its dot products, then again (from L1/L2) by its
/// accumulator updates. (Tiling the columns as well measured no better on a 2-core EPYC: within noise.)
constexpr index_t barycenter_panel_rows = 8;

/// Lane sums p_h += K_r0[j0:j1] * U_h[j0:j1], q_h += K_r1[j0:j1] * U_h[j0:j1] (four lanes each, j1 - j0 a
/// multiple of 4) for H <= 4 histograms: 2 H independent vector accumulators, enough to keep both FMA pipes
/// busy. Lane l sums the columns j = l mod 4 in increasing order whatever the tiling.
template <int H, class T>
inline void barycenter_dot2(const T* k0, const T* k1, const double* u, index_t ld, index_t j0, index_t j1,
                            double* p, double* q) {
  barycenter_vec pv[H], qv[H];
  for (int h = 0; h < H; ++h) pv[h] = barycenter_load(p + 4 * h), qv[h] = barycenter_load(q + 4 * h);
  for (index_t j = j0; j < j1; j += 4) {
    const barycenter_vec c0 = barycenter_load(k0 + j), c1 = barycenter_load(k1 + j);
    for (int h = 0; h < H; ++h) {
      const barycenter_vec x = barycenter_load(u + h * ld + j);
      pv[h] += c0 * x;
      qv[h] += c1 * x;
    }
  }
  for (int h = 0; h < H; ++h) barycenter_store(p + 4 * h, pv[h]), barycenter_store(q + 4 * h, qv[h]);
}

/// acc_h[j0:j1] += x0_h K_r0[j0:j1] + x1_h K_r1[j0:j1] for H <= 4 histograms (rows of acc, stride ld).
template <int H, class T>
inline void barycenter_axpy2(const T* k0, const T* k1, const double* x0, const double* x1, double* acc, index_t ld,
                             index_t j0, index_t j1) {
  barycenter_vec a0[H], a1[H];
  for (int h = 0; h < H; ++h) a0[h] = barycenter_splat(x0[h]), a1[h] = barycenter_splat(x1[h]);
  index_t j = j0;
  for (; j + 4 <= j1; j += 4) {
    const barycenter_vec c0 = barycenter_load(k0 + j), c1 = barycenter_load(k1 + j);
    for (int h = 0; h < H; ++h) {
      barycenter_vec t = barycenter_load(acc + h * ld + j);
      t += c0 * a0[h] + c1 * a1[h];
      barycenter_store(acc + h * ld + j, t);
    }
  }
  for (; j < j1; ++j) {
    const double c0 = static_cast<double>(k0[j]), c1 = static_cast<double>(k1[j]);
    for (int h = 0; h < H; ++h) acc[h * ld + j] += c0 * x0[h] + c1 * x1[h];
  }
}

/// s[r k + h] = K_{i0 + r} . U_h for the rows r < rows (<= barycenter_panel_rows) of a panel and all k
/// histograms (histogram-major, stride ld). lanes: barycenter_panel_rows x k x 4 doubles of scratch.
template <class T>
void barycenter_panel_dots(matrix_view<const T> kernel, index_t i0, index_t rows, const double* u, index_t ld,
                           index_t k, double* lanes, double* s) {
  const index_t n = kernel.cols(), n4 = n / 4 * 4;
  for (index_t e = 0; e < barycenter_panel_rows * k * 4; ++e) lanes[e] = 0;
  for (index_t r = 0; r < rows; r += 2) {  // an odd last row is paired with itself (into a spare slot)
    const T* k0 = kernel.row_ptr(i0 + r);
    const T* k1 = kernel.row_ptr(i0 + std::min(r + 1, rows - 1));
    double* p = lanes + r * k * 4;
    double* q = p + k * 4;
    index_t h = 0;
    for (; h + 4 <= k; h += 4) barycenter_dot2<4>(k0, k1, u + h * ld, ld, 0, n4, p + 4 * h, q + 4 * h);
    switch (k - h) {
      case 3: barycenter_dot2<3>(k0, k1, u + h * ld, ld, 0, n4, p + 4 * h, q + 4 * h); break;
      case 2: barycenter_dot2<2>(k0, k1, u + h * ld, ld, 0, n4, p + 4 * h, q + 4 * h); break;
      case 1: barycenter_dot2<1>(k0, k1, u + h * ld, ld, 0, n4, p + 4 * h, q + 4 * h); break;
      default: break;
    }
  }
  for (index_t r = 0; r < rows; ++r) {
    const T* kr = kernel.row_ptr(i0 + r);
    for (index_t h = 0; h < k; ++h) {
      const double* v = lanes + (r * k + h) * 4;
      double total = (v[0] + v[2]) + (v[1] + v[3]);
      for (index_t j = n4; j < n; ++j) total += static_cast<double>(kr[j]) * u[h * ld + j];
      s[r * k + h] = total;
    }
  }
}

/// acc_h += sum over the panel's rows r, in order (pairs), of x[r k + h] K_{i0 + r}.
template <class T>
void barycenter_panel_axpy(matrix_view<const T> kernel, index_t i0, index_t rows, const double* x, const double* zeros,
                           double* acc, index_t ld, index_t k) {
  const index_t n = kernel.cols();
  for (index_t r = 0; r < rows; r += 2) {  // an odd last row is paired with a zero row
    const bool pair = r + 1 < rows;
    const T* k0 = kernel.row_ptr(i0 + r);
    const T* k1 = kernel.row_ptr(i0 + (pair ? r + 1 : r));
    const double* x0 = x + r * k;
    const double* x1 = pair ? x0 + k : zeros;
    index_t h = 0;
    for (; h + 4 <= k; h += 4) barycenter_axpy2<4>(k0, k1, x0 + h, x1 + h, acc + h * ld, ld, 0, n);
    switch (k - h) {
      case 3: barycenter_axpy2<3>(k0, k1, x0 + h, x1 + h, acc + h * ld, ld, 0, n); break;
      case 2: barycenter_axpy2<2>(k0, k1, x0 + h, x1 + h, acc + h * ld, ld, 0, n); break;
      case 1: barycenter_axpy2<1>(k0, k1, x0 + h, x1 + h, acc + h * ld, ld, 0, n); break;
      default: break;
    }
  }
}

/// True when K_ij == K_ji bit for bit (then K^T x = K x exactly and one pass per iteration suffices).
/// Tiled so that the transposed reads stay in cache.
template <class T>
bool exactly_symmetric(matrix_view<const T> kernel) {
  const index_t n = kernel.rows(), tile = 64;
  for (index_t i0 = 0; i0 < n; i0 += tile)
    for (index_t j0 = i0; j0 < n; j0 += tile)
      for (index_t i = i0; i < std::min(n, i0 + tile); ++i)
        for (index_t j = std::max(j0, i + 1); j < std::min(n, j0 + tile); ++j)
          if (!(kernel(i, j) == kernel(j, i))) return false;
  return true;
}

/// The O(n k) part of an iteration for points j in [j0, j1), given y = K (A / K u) (histogram-major, stride
/// ld): UKv_hj = u_hj y_hj, bar_j = exp(sum_h w_h log UKv_hj), spread_j = std_h UKv_hj (population, as numpy)
/// when wanted, and u_hj <- u_hj bar_j / UKv_hj (POT's order of operations). Returns false when a new u or
/// bar is not finite.
inline bool barycenter_update(index_t k, index_t ld, const double* weights, const double* y, double* u, double* bar,
                              double* spread, index_t j0, index_t j1) {
  bool finite = true;
  for (index_t j = j0; j < j1; ++j) {
    double log_bar = 0;
    for (index_t h = 0; h < k; ++h) log_bar += weights[h] * std::log(u[h * ld + j] * y[h * ld + j]);
    const double g = std::exp(log_bar);
    if (spread) {
      double mean = 0;
      for (index_t h = 0; h < k; ++h) mean += u[h * ld + j] * y[h * ld + j];
      mean /= static_cast<double>(k);
      double var = 0;
      for (index_t h = 0; h < k; ++h) {
        const double d = u[h * ld + j] * y[h * ld + j] - mean;
        var += d * d;
      }
      spread[j] = std::sqrt(var / static_cast<double>(k));
    }
    for (index_t h = 0; h < k; ++h) {
      const double ukv = u[h * ld + j] * y[h * ld + j];
      u[h * ld + j] = u[h * ld + j] * g / ukv;
      finite = finite && std::isfinite(u[h * ld + j]);
    }
    finite = finite && std::isfinite(g);
    bar[j] = g;
  }
  return finite;
}

/// Per-thread scratch of barycenter_bregman: panel lanes (4 per row and histogram), the panel's K u and
/// A / K u, and a row of zeros.
inline std::size_t barycenter_thread_doubles(index_t k) {
  return static_cast<std::size_t>((4 * barycenter_panel_rows + 2 * barycenter_panel_rows + 1) * k);
}

/// POT barycenter_sinkhorn. A: n x k (histograms as columns), weights: k, out: the barycenter (n).
///
/// POT computes K u, then K (A / K u): two products of K with an n x k block per iteration. Here each is one
/// pass over the rows of K that serves all k histograms at once (two rows x up to four histograms per
/// register block, vectorised along the rows). When K is exactly symmetric (M is), K (A / K u) =
/// K^T (A / K u), and the two products fuse into ONE pass: rows i, i+1 give (K u)_i, hence x_i = A_i / (K u)_i,
/// and x_i K_i is added at once to a per-block accumulator of K^T x while the rows are still in cache; the
/// fixed blocks' accumulators are then added in block order. Either way every sum has a fixed order that
/// does not depend on the thread count.
template <class T>
fixed_support_barycenter_result barycenter_bregman(const host_context& ctx, const fixed_support_barycenter_params& p,
                                                   matrix_view<const T> A, matrix_view<const T> M,
                                                   const double* weights, double* out) {
  const int threads = std::max(1, ctx.threads());
  const index_t n = A.rows(), k = A.cols();
  const index_t ld = (n + 7) / 8 * 8;
  const index_t blocks = std::max<index_t>(1, std::min<index_t>(n / 2, barycenter_row_blocks));
  const index_t chunks = (n + sinkhorn_column_chunk - 1) / sinkhorn_column_chunk;
  const std::size_t nk = static_cast<std::size_t>(k * ld);
  moecomp::detail::host_workspace<T> kernel_storage(ctx, static_cast<std::size_t>(n * n));
  const matrix_view<T> kernel(kernel_storage.data(), n, n);
  const matrix_view<const T> kc = kernel;
  moecomp::detail::host_workspace<double> row_sums(ctx, static_cast<std::size_t>(ld));
  const double scale = -1.0 / p.reg;
  {
    work_queue rows;
    sinkhorn_team(threads, n * n >= sinkhorn_parallel_min_entries, [&](int, int) {
      for (index_t i; (i = rows.next()) < n;) {
        const T* m = M.row_ptr(i);
        T* kr = kernel.row_ptr(i);
        for (index_t j = 0; j < n; ++j) kr[j] = static_cast<T>(exp_vectorizable(static_cast<double>(m[j]) * scale));
        double lanes[16] = {};
        index_t j = 0;
        for (; j + 16 <= n; j += 16)
          for (int l = 0; l < 16; ++l) lanes[l] += static_cast<double>(kr[j + l]);
        double s = sum16(lanes);
        for (; j < n; ++j) s += static_cast<double>(kr[j]);
        row_sums.data()[i] = s;
      }
    });
  }
  const bool one_pass = exactly_symmetric(kc);
  const std::size_t products = one_pass ? static_cast<std::size_t>(blocks) : 2;
  moecomp::detail::host_workspace<double> scratch(ctx, (2 + products) * nk + 4 * static_cast<std::size_t>(ld) +
                                                           barycenter_thread_doubles(k) * static_cast<std::size_t>(threads));
  double* a = scratch.data();  // the histograms, histogram-major (k x ld), zero padded
  double* u = a + nk;          // the scalings, histogram-major
  double* acc = u + nk;        // one pass: blocks x (k x ld) accumulators; two passes: x = A / K u, then y
  double* y = one_pass ? acc : acc + nk;  // K x (one pass: block 0's accumulator after the reduction)
  double* bar = acc + products * nk;
  double* last_bar = bar + ld;
  double* spread = last_bar + ld;
  double* col = spread + ld;
  double* thread_scratch = col + ld;
  std::fill(thread_scratch, thread_scratch + barycenter_thread_doubles(k) * static_cast<std::size_t>(threads), 0.0);
  moecomp::detail::host_workspace<unsigned char> chunk_finite(ctx, static_cast<std::size_t>(chunks));
  std::fill(chunk_finite.data(), chunk_finite.data() + chunks, static_cast<unsigned char>(1));
  for (std::size_t e = 0; e < (2 + products) * nk; ++e) a[e] = 0;
  for (index_t i = 0; i < n; ++i)
    for (index_t h = 0; h < k; ++h) a[h * ld + i] = static_cast<double>(A(i, h));
  const bool parallel = n * n * k >= sinkhorn_parallel_min_entries;

  // result = K in (histogram-major), panels of rows from `panels`.
  const index_t panel_count = (n + barycenter_panel_rows - 1) / barycenter_panel_rows;
  auto product = [&](const double* in, double* result, double* lanes, double* s, work_queue& panels) {
    for (index_t q; (q = panels.next()) < panel_count;) {
      const index_t i0 = q * barycenter_panel_rows, rows = std::min(barycenter_panel_rows, n - i0);
      barycenter_panel_dots(kc, i0, rows, in, ld, k, lanes, s);
      for (index_t r = 0; r < rows; ++r)
        for (index_t h = 0; h < k; ++h) result[h * ld + i0 + r] = s[r * k + h];
    }
  };

  // Start (POT): UKv = K (A / colsum K); u = geometric mean over the histograms of UKv / UKv. Column sums of
  // a symmetric K are its row sums; otherwise they are added row after row.
  if (one_pass) {
    std::copy(row_sums.data(), row_sums.data() + n, col);
  } else {
    for (index_t j = 0; j < n; ++j) col[j] = 0;
    for (index_t i = 0; i < n; ++i) {
      const T* kr = kc.row_ptr(i);
      for (index_t j = 0; j < n; ++j) col[j] += static_cast<double>(kr[j]);
    }
  }
  double* start_x = acc;
  double* start_y = acc + nk;  // (both paths have room for two k x ld arrays here)
  if (one_pass && blocks < 2) start_y = u;
  for (index_t h = 0; h < k; ++h)
    for (index_t j = 0; j < n; ++j) start_x[h * ld + j] = a[h * ld + j] / col[j];
  {
    work_queue pairs;
    sinkhorn_team(threads, parallel, [&](int t, int) {
      double* lanes = thread_scratch + barycenter_thread_doubles(k) * static_cast<std::size_t>(t);
      product(start_x, start_y, lanes, lanes + 4 * barycenter_panel_rows * k, pairs);
    });
  }
  for (index_t i = 0; i < n; ++i) {
    double mean_log = 0;
    for (index_t h = 0; h < k; ++h) mean_log += std::log(start_y[h * ld + i]);
    const double gm = std::exp(mean_log / static_cast<double>(k));
    for (index_t h = 0; h < k; ++h) u[h * ld + i] = gm / start_y[h * ld + i];
  }
  for (std::size_t e = 0; e < products * nk; ++e) acc[e] = 0;

  fixed_support_barycenter_result result;
  result.criterion = 1;
  bool converged = false;
  bool have_bar = false;
  for (index_t it = 0; it < p.max_iterations; ++it) {
    result.iterations = it + 1;
    const bool check = it % 10 == 1;  // POT: ii % 10 == 1
    work_queue first, second, columns;
    sinkhorn_team(threads, parallel, [&](int t, int nt) {
      double* lanes = thread_scratch + barycenter_thread_doubles(k) * static_cast<std::size_t>(t);
      double* sums = lanes + 4 * barycenter_panel_rows * k;  // (K u) of the panel's rows, row-major
      double* x = sums + barycenter_panel_rows * k;          // A / K u of the panel's rows, row-major
      const double* zeros = x + barycenter_panel_rows * k;
      if (one_pass) {
        for (index_t b; (b = first.next()) < blocks;) {
          double* acc_b = acc + static_cast<std::size_t>(b) * nk;
          for (std::size_t e = 0; e < nk; ++e) acc_b[e] = 0;
          const index_t r1 = (b + 1) * n / blocks;
          for (index_t i0 = b * n / blocks; i0 < r1; i0 += barycenter_panel_rows) {
            const index_t rows = std::min(barycenter_panel_rows, r1 - i0);
            barycenter_panel_dots(kc, i0, rows, u, ld, k, lanes, sums);
            for (index_t r = 0; r < rows; ++r)
              for (index_t h = 0; h < k; ++h) x[r * k + h] = a[h * ld + i0 + r] / sums[r * k + h];
            barycenter_panel_axpy(kc, i0, rows, x, zeros, acc_b, ld, k);
          }
        }
        sinkhorn_team_barrier(nt);
        for (index_t c; (c = columns.next()) < chunks;) {
          const index_t j0 = c * sinkhorn_column_chunk, j1 = std::min(n, j0 + sinkhorn_column_chunk);
          for (index_t h = 0; h < k; ++h)
            for (index_t j = j0; j < j1; ++j) {
              double total = acc[h * ld + j];
              for (index_t b = 1; b < blocks; ++b) total += acc[static_cast<std::size_t>(b) * nk + h * ld + j];
              y[h * ld + j] = total;
            }
          chunk_finite[static_cast<std::size_t>(c)] =
              barycenter_update(k, ld, weights, y, u, bar, check ? spread : nullptr, j0, j1);
        }
      } else {
        double* x_all = acc;
        for (index_t q; (q = first.next()) < panel_count;) {
          const index_t i0 = q * barycenter_panel_rows, rows = std::min(barycenter_panel_rows, n - i0);
          barycenter_panel_dots(kc, i0, rows, u, ld, k, lanes, sums);
          for (index_t r = 0; r < rows; ++r)
            for (index_t h = 0; h < k; ++h) x_all[h * ld + i0 + r] = a[h * ld + i0 + r] / sums[r * k + h];
        }
        sinkhorn_team_barrier(nt);
        product(x_all, y, lanes, sums, second);
        sinkhorn_team_barrier(nt);
        for (index_t c; (c = columns.next()) < chunks;) {
          const index_t j0 = c * sinkhorn_column_chunk, j1 = std::min(n, j0 + sinkhorn_column_chunk);
          chunk_finite[static_cast<std::size_t>(c)] =
              barycenter_update(k, ld, weights, y, u, bar, check ? spread : nullptr, j0, j1);
        }
      }
    });
    bool finite = true;
    for (index_t c = 0; c < chunks; ++c) finite = finite && chunk_finite[static_cast<std::size_t>(c)] != 0;
    if (!finite) {
      result.status = status::numerical_error;
      break;
    }
    std::swap(bar, last_bar);
    have_bar = true;
    if (check) {
      double total = 0;
      for (index_t j = 0; j < n; ++j) total += spread[j];
      result.criterion = total;
      if (total < p.tolerance) {
        converged = true;
        break;
      }
    }
  }
  if (!have_bar)  // failed at the first iteration
    for (index_t i = 0; i < n; ++i) last_bar[i] = std::numeric_limits<double>::quiet_NaN();
  if (result.status != status::numerical_error)
    result.status = converged ? status::ok : status::iteration_limit;
  std::copy(last_bar, last_bar + n, out);
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
  result.criterion = 1;
  bool converged = false;
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
      result.criterion = total;
      if (total < p.tolerance) {
        converged = true;
        break;
      }
    }
    for (index_t h = 0; h < k; ++h)
      for (index_t j = 0; j < n; ++j) g[h * n + j] = log_bar[j] - log_ku[h * n + j];
  }
  if (!have_bar)
    for (index_t i = 0; i < n; ++i) bar[i] = std::numeric_limits<double>::quiet_NaN();
  if (result.status != status::numerical_error)
    result.status = converged ? status::ok : status::iteration_limit;
  std::copy(bar, bar + n, out);
  return result;
}


template <class T>
fixed_support_barycenter_result fixed_support_barycenter_host(const host_context& ctx,
                                                              const fixed_support_barycenter_params& p,
                                                              matrix_view<const T> A, matrix_view<const T> M,
                                                              vector_view<const double> weights,
                                                              vector_view<T> barycenter) {
  constexpr const char* fn = "fixed_support_barycenter";
  check_sinkhorn_element_type<T>();
  MOECOMP_EXPECTS(std::isfinite(p.reg) && p.reg > 0, fn, ": params.reg must be finite and > 0, got ", p.reg);
  MOECOMP_EXPECTS(p.max_iterations >= 1, fn, ": params.max_iterations must be >= 1, got ", p.max_iterations);
  MOECOMP_EXPECTS(std::isfinite(p.tolerance) && p.tolerance >= 0, fn,
                  ": params.tolerance must be finite and >= 0, got ", p.tolerance);
  const index_t n = A.rows(), k = A.cols();
  MOECOMP_EXPECTS(n >= 1 && k >= 1, fn, ": A must be n x k with n, k >= 1 (histograms as columns), got ",
                  moecomp::detail::shape_string(n, k));
  MOECOMP_EXPECTS(M.rows() == n && M.cols() == n, fn, ": M must be ", moecomp::detail::shape_string(n, n),
                  " (n = rows of A), got ", moecomp::detail::shape_string(M.rows(), M.cols()));
  MOECOMP_EXPECTS(barycenter.size() == n, fn, ": barycenter must have size ", n, " (rows of A), got ",
                  barycenter.size());
  MOECOMP_EXPECTS(weights.size() == k, fn, ": weights must have size ", k,
                  " (columns of A), got ", weights.size());
  double first_mass = 0;
  for (index_t h = 0; h < k; ++h) {
    const std::string name = "column " + std::to_string(h) + " of A";
    const double mass = check_histogram(fn, name.c_str(), n, [&](index_t i) { return A(i, h); });
    if (h == 0) first_mass = mass;
    MOECOMP_EXPECTS(std::fabs(mass - first_mass) <= mass_tolerance<T>() * std::max(mass, first_mass), fn,
                    ": the columns of A must have equal total mass, got ", first_mass, " (column 0) and ", mass,
                    " (column ", h, ")");
  }
  const double weight_sum =
      moecomp::detail::check_masses(fn, "weights", weights);
  moecomp::detail::check_sums_to_one(fn, "weights", weight_sum);
  check_finite_cost(fn, "M", M);
  moecomp::detail::host_workspace<double> out(ctx, static_cast<std::size_t>(n));
  const fixed_support_barycenter_result result =
      p.log_domain ? barycenter_bregman_log(ctx, p, A, M, weights.data(), out.data())
                   : barycenter_bregman(ctx, p, A, M, weights.data(), out.data());
  for (index_t i = 0; i < n; ++i) barycenter(i) = static_cast<T>(out[static_cast<std::size_t>(i)]);
  return result;
}

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
