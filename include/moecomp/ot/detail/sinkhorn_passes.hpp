#pragma once
// The passes over the n x m kernel that every Sinkhorn method is built from. Each iteration is ONE pass
// over the matrix: for row i, s_i = K_i . v, u_i = a_i / s_i, and u_i K_i is added at once to the column
// sums K^T u that the next v needs (and that POT's error, v_j (K^T u)_j - b_j, is made of). The rows are
// cut into a fixed number of blocks that does not depend on the thread count; each block has its own column
// accumulator and the accumulators are added in block order, so results are bit-identical for any number
// of threads. Blocks are handed out on demand (a descheduled thread holds the others up by one block at
// most), in increasing order on even and decreasing order on odd iterations, so that the rows touched last
// (still in the last-level cache) are the first read next.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/vector_exp.hpp>
#include <moecomp/ot/detail/sinkhorn_kernels.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(_OPENMP)
#include <omp.h>
#endif

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

using moecomp::detail::exp_vectorizable;

/// Below this many matrix entries a pass runs on one thread (a parallel region costs microseconds).
constexpr index_t sinkhorn_parallel_min_entries = 1 << 15;
/// Row blocks per matrix: the unit of parallel work and of deterministic column accumulation.
constexpr index_t sinkhorn_max_row_blocks = 32;

/// Runs body(thread, threads) on a team of `threads` threads (one when !parallel). The body is compiled
/// once, inside the OpenMP region, even for a team of one: two inlined copies of it could be contracted
/// into FMAs differently by the compiler, and results would then depend on the thread count.
template <class Body>
void sinkhorn_team(int threads, bool parallel, Body&& body) {
#if defined(_OPENMP)
  const int team = parallel && threads > 1 ? threads : 1;
#pragma omp parallel num_threads(team)
  body(omp_get_thread_num(), omp_get_num_threads());
#else
  (void)threads;
  (void)parallel;
  body(0, 1);
#endif
}

/// Barrier of a team started by sinkhorn_team; nothing for a team of one (which may run inside someone
/// else's parallel loop, e.g. sinkhorn_batched, where a barrier would bind to that loop's region).
inline void sinkhorn_team_barrier(int team_size) {
#if defined(_OPENMP)
  if (team_size > 1) {
#pragma omp barrier
  }
#else
  (void)team_size;
#endif
}

/// Hands out work items 0, 1, 2, ... to the threads of a team in the order they ask (relaxed atomics: the
/// team barrier orders the data). Which thread does an item never changes its result, so a thread that
/// the OS deschedules delays the others by one item at most, and results stay bit-identical.
class work_queue {
 public:
  index_t next() noexcept { return counter_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<index_t> counter_{0};
};

/// Columns per work item of the accumulator reduction.
constexpr index_t sinkhorn_column_chunk = 512;

/// ktu_j = sum over blocks (in block order) of acc_b[j], then column(j, ktu_j); columns in chunks from `queue`.
template <class Blocks, class Column>
void reduce_columns(const Blocks& blocks, const double* acc, work_queue& queue, Column& column) {
  const index_t m = blocks.cols;
  const index_t chunks = (m + sinkhorn_column_chunk - 1) / sinkhorn_column_chunk;
  for (index_t c; (c = queue.next()) < chunks;) {
    const index_t j1 = std::min(m, (c + 1) * sinkhorn_column_chunk);
    for (index_t j = c * sinkhorn_column_chunk; j < j1; ++j) {
      double total = acc[j];
      for (index_t b = 1; b < blocks.count; ++b) total += acc[b * blocks.acc_stride + j];
      column(j, total);
    }
  }
}

/// Fixed row blocks and their column accumulators (one row of acc_stride doubles per block).
struct row_blocks {
  index_t rows = 0, cols = 0, count = 0, acc_stride = 0;
  row_blocks(index_t n, index_t m)
      : rows(n), cols(m), count(std::max<index_t>(1, std::min(n, sinkhorn_max_row_blocks))),
        acc_stride((m + 7) / 8 * 8) {}
  index_t first_row(index_t b) const { return b * rows / count; }
  std::size_t acc_size() const { return static_cast<std::size_t>(count * acc_stride); }
};

inline double scaling_from(double mass, double s) { return mass == 0 ? 0.0 : mass / s; }

/// One Sinkhorn half-and-a-half step on kernel K (stored in T): u_i = a_i / (K v)_i for every row and
/// acc_b = sum over the rows of block b of u_i K_i. Then, column by column, ktu_j = sum_b acc_b[j] and
/// column(j, ktu_j) is called (on the thread that owns column range of j).
template <class T, class Column>
void scaling_pass(int threads, matrix_view<const T> kernel, const double* a, const double* v, double* u,
                  const row_blocks& blocks, double* acc, bool reverse, Column&& column) {
  const index_t n = kernel.rows(), m = kernel.cols();
  const bool parallel = n * m >= sinkhorn_parallel_min_entries;
  work_queue block_queue, column_queue;
  sinkhorn_team(threads, parallel, [&](int t, int nt) {
    (void)t;
    for (index_t step; (step = block_queue.next()) < blocks.count;) {
      const index_t b = reverse ? blocks.count - 1 - step : step;
      double* col = acc + b * blocks.acc_stride;
      for (index_t j = 0; j < m; ++j) col[j] = 0;
      const index_t i1 = blocks.first_row(b + 1);
      index_t i = blocks.first_row(b);
      if (i + 2 <= i1) {
        // Software-pipelined over row pairs: the dot products of pair p + 1 are computed in the loop that
        // adds pair p to the column sums.
        double s0, s1;
        kernel_dot2(kernel.row_ptr(i), kernel.row_ptr(i + 1), v, m, s0, s1);
        for (;; i += 2) {
          const double u0 = scaling_from(a[i], s0), u1 = scaling_from(a[i + 1], s1);
          u[i] = u0;
          u[i + 1] = u1;
          if (i + 4 > i1) {
            kernel_axpy2(col, u0, kernel.row_ptr(i), u1, kernel.row_ptr(i + 1), m);
            i += 2;
            break;
          }
          kernel_axpy2_dot2(col, u0, kernel.row_ptr(i), u1, kernel.row_ptr(i + 1), kernel.row_ptr(i + 2),
                            kernel.row_ptr(i + 3), v, m, s0, s1);
        }
      }
      if (i < i1) {
        const T* k0 = kernel.row_ptr(i);
        const double u0 = scaling_from(a[i], kernel_dot(k0, v, m));
        u[i] = u0;
        kernel_axpy(col, u0, k0, m);
      }
    }
    sinkhorn_team_barrier(nt);
    reduce_columns(blocks, acc, column_queue, column);
  });
}

/// Optional by-products of build_kernel_pass with a float K, used to decide whether the float copy is
/// safe: per block, the column maxima of K and the smallest row maximum. Kept as the bit patterns of the
/// (non-negative) floats, whose int32 order is their order: integer maxima vectorise (a float comparison may
/// trap on NaN, which keeps GCC from vectorising it without -fno-trapping-math).
struct kernel_extent {
  std::int32_t* column_max_bits = nullptr;  // blocks.count x blocks.acc_stride
  std::int32_t* block_min_row_max_bits = nullptr;  // blocks.count
};

/// The float whose bit pattern is `bits`.
inline float float_from_bits(std::int32_t bits) noexcept {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

/// Builds K_ij = exp(-(C_ij - alpha_i - beta_j) / reg) into `kernel` (stored as K: T or float; alpha, beta
/// may be null: zero) and accumulates K^T u0 with u0_i = u_rows[i] (or u_start for every row when u_rows
/// is null), calling column(j, (K^T u0)_j) at the end.
template <class T, class K, class Column>
void build_kernel_pass(int threads, matrix_view<const T> cost, double reg, const double* alpha, const double* beta,
                       matrix_view<K> kernel, double u_start, const double* u_rows, const row_blocks& blocks,
                       double* acc, Column&& column, kernel_extent extent = {}) {
  const index_t n = cost.rows(), m = cost.cols();
  const bool parallel = n * m >= sinkhorn_parallel_min_entries;
  const double scale = -1.0 / reg;
  work_queue block_queue, column_queue;
  sinkhorn_team(threads, parallel, [&](int t, int nt) {
    (void)t;
    for (index_t b; (b = block_queue.next()) < blocks.count;) {
      double* col = acc + b * blocks.acc_stride;
      for (index_t j = 0; j < m; ++j) col[j] = 0;
      std::int32_t* col_max = extent.column_max_bits ? extent.column_max_bits + b * blocks.acc_stride : nullptr;
      if (col_max)
        for (index_t j = 0; j < m; ++j) col_max[j] = 0;
      std::int32_t min_row_max = std::numeric_limits<std::int32_t>::max();
      for (index_t i = blocks.first_row(b); i < blocks.first_row(b + 1); ++i) {
        const T* c = cost.row_ptr(i);
        K* k = kernel.row_ptr(i);
        const double u0 = u_rows ? u_rows[i] : u_start;
        if (alpha == nullptr) {
          for (index_t j = 0; j < m; ++j) {
            const double x = exp_vectorizable(static_cast<double>(c[j]) * scale);
            k[j] = static_cast<K>(x);
            col[j] += u0 * static_cast<double>(k[j]);
          }
        } else {
          const double alpha_i = alpha[i];
          for (index_t j = 0; j < m; ++j) {
            k[j] = static_cast<K>(exp_vectorizable((static_cast<double>(c[j]) - alpha_i - beta[j]) * scale));
            col[j] += u0 * static_cast<double>(k[j]);
          }
        }
        if constexpr (std::is_same_v<K, float>) {
          if (col_max) {
            std::int32_t row_max = 0;
            for (index_t j = 0; j < m; ++j) {
              std::int32_t bits;
              std::memcpy(&bits, k + j, 4);
              col_max[j] = col_max[j] > bits ? col_max[j] : bits;
              row_max = row_max > bits ? row_max : bits;
            }
            min_row_max = std::min(min_row_max, row_max);
          }
        }
      }
      if (extent.block_min_row_max_bits) extent.block_min_row_max_bits[b] = min_row_max;
    }
    sinkhorn_team_barrier(nt);
    reduce_columns(blocks, acc, column_queue, column);
  });
}

/// The plan from scalings and the exact kernel: plan_ij = u_i exp(-C_ij / reg) v_j, written to `plan`; its
/// column sums go to column(j, sum) and <plan, C> is returned (rows summed in order).
template <class T, class Column>
double exact_plan_pass(int threads, matrix_view<const T> cost, double reg, const double* u, const double* v,
                       matrix_view<T> plan, const row_blocks& blocks, double* acc, double* row_cost, Column&& column) {
  const index_t n = cost.rows(), m = cost.cols();
  const bool parallel = n * m >= sinkhorn_parallel_min_entries;
  const double scale = -1.0 / reg;
  work_queue block_queue, column_queue;
  sinkhorn_team(threads, parallel, [&](int t, int nt) {
    (void)t;
    for (index_t b; (b = block_queue.next()) < blocks.count;) {
      double* col = acc + b * blocks.acc_stride;
      for (index_t j = 0; j < m; ++j) col[j] = 0;
      for (index_t i = blocks.first_row(b); i < blocks.first_row(b + 1); ++i) {
        const T* c = cost.row_ptr(i);
        T* p = plan.row_ptr(i);
        const double u_i = u[i];
        for (index_t j = 0; j < m; ++j) {
          const T value = static_cast<T>(u_i * exp_vectorizable(static_cast<double>(c[j]) * scale) * v[j]);
          p[j] = value;
          col[j] += static_cast<double>(value);
        }
        row_cost[i] = kernel_dot(p, c, m);  // a second pass over the row, in L1: 16 partial sums
      }
    }
    sinkhorn_team_barrier(nt);
    reduce_columns(blocks, acc, column_queue, column);
  });
  double total = 0;
  for (index_t i = 0; i < n; ++i) total += row_cost[i];
  return total;
}

/// Below this a row or column sum of exp() is recomputed with an explicit max shift (its terms may have
/// underflowed). Well above the smallest normal number, so what underflowed is negligible above it.
constexpr double sinkhorn_log_sum_floor = 1e-150;

/// log sum_j exp(x_j), shifted by the maximum (-inf when every x_j is -inf).
template <class X>
double log_sum_exp(index_t count, X&& x) {
  double top = -std::numeric_limits<double>::infinity();
  for (index_t j = 0; j < count; ++j) top = std::max(top, x(j));
  if (!(top > -std::numeric_limits<double>::infinity()) || std::isinf(top)) return top;
  double sum = 0;
  for (index_t j = 0; j < count; ++j) sum += exp_vectorizable(x(j) - top);
  return top + std::log(sum);
}

/// One log-domain iteration (POT sinkhorn_log) in one pass over C. With the log scalings u (rows) and v
/// (columns), e_ij = exp(-C_ij / reg + u_i + v_j) is the current plan entry; because v was just fitted to
/// u, e_ij <= b_j, so nothing overflows. Row i: r_i = sum_j e_ij, u_i += log a_i - log r_i (exact log-sum-exp
/// with a max shift when r_i underflows), and e_ij a_i / r_i (the entry with the new u_i) goes to the column
/// sums. column(j, c_j) receives the column sums of the new plan. Rows with a_i = 0 keep u_i = -inf.
template <class T, class Column>
void log_pass(int threads, matrix_view<const T> cost, double reg, const double* a, const double* log_a,
              const double* v, double* u, double* row_buffers, const row_blocks& blocks, double* acc, bool reverse,
              Column&& column) {
  const index_t n = cost.rows(), m = cost.cols();
  const bool parallel = n * m >= sinkhorn_parallel_min_entries;
  const double scale = -1.0 / reg;
  work_queue block_queue, column_queue;
  sinkhorn_team(threads, parallel, [&](int t, int nt) {
    double* e = row_buffers + static_cast<std::size_t>(t) * static_cast<std::size_t>(blocks.acc_stride);
    (void)t;
    for (index_t step; (step = block_queue.next()) < blocks.count;) {
      const index_t b = reverse ? blocks.count - 1 - step : step;
      double* col = acc + b * blocks.acc_stride;
      for (index_t j = 0; j < m; ++j) col[j] = 0;
      for (index_t i = blocks.first_row(b); i < blocks.first_row(b + 1); ++i) {
        if (a[i] == 0) {
          u[i] = -std::numeric_limits<double>::infinity();
          continue;
        }
        const T* c = cost.row_ptr(i);
        const double u_old = u[i];
        double r = 0;
        for (index_t j = 0; j < m; ++j) {
          e[j] = exp_vectorizable(static_cast<double>(c[j]) * scale + u_old + v[j]);
          r += e[j];
        }
        if (r >= sinkhorn_log_sum_floor && r <= std::numeric_limits<double>::max()) {
          u[i] = u_old + log_a[i] - std::log(r);
          const double factor = a[i] / r;
          for (index_t j = 0; j < m; ++j) col[j] += e[j] * factor;
        } else {
          const double lse =
              log_sum_exp(m, [&](index_t j) { return static_cast<double>(c[j]) * scale + v[j]; });
          const double u_new = log_a[i] - lse;  // +inf when the row has no mass at all: flagged by the caller
          u[i] = u_new;
          if (std::isfinite(u_new))
            for (index_t j = 0; j < m; ++j) col[j] += exp_vectorizable(static_cast<double>(c[j]) * scale + u_new + v[j]);
        }
      }
    }
    sinkhorn_team_barrier(nt);
    reduce_columns(blocks, acc, column_queue, column);
  });
}

/// L_j = log sum_i exp(-C_ij / reg + u_i) exactly (max shift) for the columns in [j0, j1).
template <class T>
void column_log_sum_exp(matrix_view<const T> cost, double reg, const double* u, index_t j0, index_t j1, double* top,
                        double* out) {
  const index_t n = cost.rows();
  const double scale = -1.0 / reg;
  const double minus_inf = -std::numeric_limits<double>::infinity();
  for (index_t j = j0; j < j1; ++j) top[j] = minus_inf;
  for (index_t i = 0; i < n; ++i) {
    if (u[i] == minus_inf) continue;
    const T* c = cost.row_ptr(i);
    for (index_t j = j0; j < j1; ++j) top[j] = std::max(top[j], static_cast<double>(c[j]) * scale + u[i]);
  }
  // A column without any finite term is shifted by 0: its sum is then 0 and its result -inf.
  for (index_t j = j0; j < j1; ++j) {
    if (top[j] == minus_inf) top[j] = 0;
    out[j] = 0;
  }
  for (index_t i = 0; i < n; ++i) {
    if (u[i] == minus_inf) continue;
    const T* c = cost.row_ptr(i);
    for (index_t j = j0; j < j1; ++j)
      out[j] += exp_vectorizable(static_cast<double>(c[j]) * scale + u[i] - top[j]);
  }
  for (index_t j = j0; j < j1; ++j) out[j] = out[j] > 0 ? top[j] + std::log(out[j]) : minus_inf;
}

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
