#pragma once
// The Jonker-Volgenant solver (Jonker & Volgenant 1987, "LAPJV") on one dense n x m cost, n <= m, always
// minimising c = s C (s = -1 when maximising). Phases:
//  1. initialisation, square problems only: column reduction (v_j = min_i c_ij; each column offers itself to
//     its lowest minimising row, a row keeps its lowest column), then reduction transfer (a row that got
//     exactly one column lowers that column's potential to its second-best reduced cost);
//     rectangular problems start from v = 0, which keeps the LP optimality conditions of n < m (below);
//     a warm start reads v instead and keeps every row whose hinted (or best) column is a tight minimum;
//  2. augmenting row reduction, two passes (an auction with epsilon = 0 over the free rows);
//  3. a shortest augmenting path (Dijkstra on reduced costs) for each row still free.
// Invariant of phases 1-2: an assigned row is assigned to a column minimising c_ij - v_j. The Dijkstra scans
// every column each step (no column list, so the loop is contiguous and vectorises), finished columns being
// masked out with vw_j = -inf and d_j = +inf; ties go to the lowest column.
//
// Rectangular problems: the LP dual of "each row once, each column at most once" has v_j <= 0 with v_j = 0
// on unassigned columns. Starting from v = 0, potentials only ever decrease, and only on columns that are
// or become assigned (assigned columns stay assigned), so the final potentials satisfy it.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/ot/detail/linear_assignment_kernels.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <moecomp/ot/linear_assignment_types.hpp>
#include <moecomp/ot/detail/linear_assignment_checks.hpp>
#include <cmath>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

/// The solver's O(n + m) arrays; see jv_workspace.
struct jv_arrays {
  double* v;            // m: column potentials, minimisation sign
  double* vw;           // m: v with finished columns set to -inf (Dijkstra)
  double* d;            // m: tentative distances, +inf once finished (Dijkstra)
  double* done_d;       // m: distances of the finished columns, in finishing order
  std::int32_t* pred;   // m: row through which a column was reached
  std::int32_t* y;      // m: row assigned to a column, -1
  std::int32_t* done;   // m: finished columns, in finishing order
  std::int32_t* x;      // n: column assigned to a row, -1
  std::int32_t* free_rows;  // n
  std::int32_t* count;  // n: column-reduction matches; on a warm start, the hinted column of each row
};

/// Scratch memory of one solve: 4 m doubles and 4 m + 3 n 32-bit integers.
class jv_workspace {
 public:
  jv_workspace(const host_context& ctx, index_t n, index_t m)
      : doubles_(ctx, static_cast<std::size_t>(4 * m)), ints_(ctx, static_cast<std::size_t>(4 * m + 3 * n)) {
    double* p = doubles_.data();
    std::int32_t* q = ints_.data();
    arrays_ = {p, p + m, p + 2 * m, p + 3 * m, q, q + m, q + 2 * m, q + 3 * m, q + 3 * m + n, q + 3 * m + 2 * n};
  }
  const jv_arrays& arrays() const noexcept { return arrays_; }

 private:
  moecomp::detail::host_workspace<double> doubles_;
  moecomp::detail::host_workspace<std::int32_t> ints_;
  jv_arrays arrays_{};
};

template <class T, bool Negate>
class jv_solver {
 public:
  jv_solver(const T* cost, index_t row_stride, index_t n, index_t m, const jv_arrays& a) noexcept
      : c_(cost), stride_(row_stride), n_(n), m_(m), a_(a) {}

  /// Solves; on `warm`, a_.v holds the starting potentials and a_.count the hinted columns (-1: none).
  /// Returns infeasible when some row cannot be assigned without a forbidden pair.
  status solve(bool warm) noexcept {
    std::fill(a_.x, a_.x + n_, -1);
    std::fill(a_.y, a_.y + m_, -1);
    if (n_ == 0) return status::ok;
    index_t free_count = 0;
    bool feasible;
    if (n_ == m_ && warm) {
      feasible = warm_initialisation(free_count);
    } else if (n_ == m_) {
      feasible = column_reduction(free_count);
    } else {
      std::fill(a_.v, a_.v + m_, 0.0);
      for (index_t i = 0; i < n_; ++i) a_.free_rows[i] = static_cast<std::int32_t>(i);
      free_count = n_;
      feasible = true;
    }
    if (feasible) feasible = augmenting_row_reduction(free_count);
    for (index_t t = 0; feasible && t < free_count; ++t) feasible = augment(a_.free_rows[t]);
    return feasible ? status::ok : status::infeasible;
  }

  double cost(index_t i, index_t j) const noexcept { return signed_cost<Negate>(c_[i * stride_ + j]); }

 private:
  const T* row(index_t i) const noexcept { return c_ + i * stride_; }

  void assign(std::int32_t i, std::int32_t j) noexcept {
    a_.x[i] = j;
    a_.y[j] = i;
  }

  bool warm_initialisation(index_t& free_count) noexcept {
    for (index_t i = 0; i < n_; ++i) {
      const two_smallest_result r = two_smallest<MOECOMP_LSA_LANES, T, Negate>(row(i), m_, a_.v, lsa_inf);
      if (r.first_index < 0) return false;  // a row with no finite cost
      const std::int32_t hint = a_.count[i];
      if (hint >= 0 && a_.y[hint] < 0 && cost(i, hint) - a_.v[hint] <= r.first) {
        assign(static_cast<std::int32_t>(i), hint);
      } else if (a_.y[r.first_index] < 0) {
        assign(static_cast<std::int32_t>(i), static_cast<std::int32_t>(r.first_index));
      } else {
        a_.free_rows[free_count++] = static_cast<std::int32_t>(i);
      }
    }
    return true;
  }

  bool column_reduction(index_t& free_count) noexcept {
    std::fill(a_.v, a_.v + m_, lsa_inf);
    std::fill(a_.pred, a_.pred + m_, -1);
    for (index_t i = 0; i < n_; ++i)
      column_min_update<MOECOMP_LSA_LANES, T, Negate>(row(i), m_, a_.v, a_.pred, static_cast<std::int32_t>(i));
    std::fill(a_.count, a_.count + n_, 0);
    for (index_t j = 0; j < m_; ++j) {
      const std::int32_t i = a_.pred[j];
      if (i < 0) return false;  // a column with no finite cost: no complete assignment exists
      if (a_.x[i] < 0) assign(i, static_cast<std::int32_t>(j));
      ++a_.count[i];
    }
    for (index_t i = 0; i < n_; ++i) {
      if (a_.count[i] == 0) {
        a_.free_rows[free_count++] = static_cast<std::int32_t>(i);
      } else if (a_.count[i] == 1) {  // reduction transfer
        const std::int32_t j = a_.x[i];
        const two_smallest_result r = two_smallest<MOECOMP_LSA_LANES, T, Negate>(row(i), m_, a_.v, lsa_inf);
        const double next = r.first_index == j ? r.second : r.first;
        if (next < lsa_inf) a_.v[j] -= next;
      }
    }
    return true;
  }

  bool augmenting_row_reduction(index_t& free_count) noexcept {
    // Each step is one O(m) row scan; a cap keeps a run of tiny price steps from stalling (the rows left
    // over simply go to the shortest-path phase, which is exact on its own).
    index_t budget = 8 * n_ + 64;
    for (int pass = 0; pass < 2 && free_count > 0; ++pass) {
      const index_t previous = free_count;
      index_t k = 0;
      free_count = 0;
      while (k < previous) {
        if (budget-- <= 0) {
          while (k < previous) a_.free_rows[free_count++] = a_.free_rows[k++];
          return true;
        }
        const std::int32_t i = a_.free_rows[k++];
        const two_smallest_result r = two_smallest<MOECOMP_LSA_LANES, T, Negate>(row(i), m_, a_.v, lsa_inf);
        if (r.first_index < 0) return false;  // a row with no finite cost
        std::int32_t j = static_cast<std::int32_t>(r.first_index);
        std::int32_t displaced = a_.y[j];
        const bool strict = r.first < r.second && r.second < lsa_inf;
        if (strict) {
          a_.v[j] -= r.second - r.first;
        } else if (displaced >= 0 && r.second_index >= 0) {  // a tie: take the second column instead
          j = static_cast<std::int32_t>(r.second_index);
          displaced = a_.y[j];
        }
        if (displaced >= 0) a_.x[displaced] = -1;
        assign(i, j);
        if (displaced >= 0) {
          if (strict)
            a_.free_rows[--k] = displaced;  // try it again at once: its potentials just changed
          else
            a_.free_rows[free_count++] = displaced;
        }
      }
    }
    return true;
  }

  bool augment(std::int32_t start) noexcept {
    std::memcpy(a_.vw, a_.v, static_cast<std::size_t>(m_) * sizeof(double));
    std::fill(a_.d, a_.d + m_, lsa_inf);
    index_t finished = 0;
    argmin_result r = relax_argmin<MOECOMP_LSA_LANES, T, Negate>(row(start), m_, 0.0, a_.vw, a_.d, a_.pred, start);
    std::int32_t sink;
    double shortest;
    for (;;) {
      if (r.index < 0) return false;  // no augmenting path through finite costs
      const std::int32_t j = static_cast<std::int32_t>(r.index);
      shortest = r.value;
      a_.done[finished] = j;
      a_.done_d[finished] = shortest;
      ++finished;
      a_.d[j] = lsa_inf;
      a_.vw[j] = -lsa_inf;
      const std::int32_t i = a_.y[j];
      if (i < 0) {
        sink = j;
        break;
      }
      const double h = cost(i, j) - a_.v[j] - shortest;
      r = relax_argmin<MOECOMP_LSA_LANES, T, Negate>(row(i), m_, h, a_.vw, a_.d, a_.pred, i);
    }
    for (index_t t = 0; t + 1 < finished; ++t) a_.v[a_.done[t]] += a_.done_d[t] - shortest;
    for (std::int32_t j = sink;;) {
      const std::int32_t i = a_.pred[j];
      const std::int32_t previous = a_.x[i];
      assign(i, j);
      if (i == start) break;
      j = previous;
    }
    return true;
  }

  const T* c_;
  index_t stride_, n_, m_;
  jv_arrays a_;
};

/// Solves with the sign chosen at run time; a.x / a.v hold the answer (minimisation sign).
template <class T>
status run_jv(matrix_view<const T> cost, bool maximize, bool warm, const jv_arrays& a) noexcept {
  if (maximize) return jv_solver<T, true>(cost.data(), cost.row_stride(), cost.rows(), cost.cols(), a).solve(warm);
  return jv_solver<T, false>(cost.data(), cost.row_stride(), cost.rows(), cost.cols(), a).solve(warm);
}


/// Writes the answer of a finished solve: row_to_column (all -1 when infeasible), the total in the
/// caller's sign, and the potentials when asked for.
template <class T>
linear_assignment_result finish_assignment(matrix_view<const T> cost, bool maximize, status outcome,
                                           const jv_arrays& a, vector_view<index_t> row_to_column,
                                           vector_view<double>* row_potential, vector_view<double>* column_potential) {
  const index_t n = cost.rows(), m = cost.cols();
  linear_assignment_result result;
  result.status = outcome;
  const double sign = maximize ? -1.0 : 1.0;
  if (outcome != status::ok) {
    for (index_t i = 0; i < n; ++i) row_to_column(i) = -1;
    result.cost = sign * lsa_inf;
    if (row_potential)
      for (index_t i = 0; i < n; ++i) (*row_potential)(i) = std::numeric_limits<double>::quiet_NaN();
    if (column_potential)
      for (index_t j = 0; j < m; ++j) (*column_potential)(j) = std::numeric_limits<double>::quiet_NaN();
    return result;
  }
  double total = 0.0;
  for (index_t i = 0; i < n; ++i) {
    row_to_column(i) = a.x[i];
    total += static_cast<double>(cost(i, a.x[i]));
  }
  result.cost = total;
  // Internally the problem is min sum (s C); the caller's potentials are s times the internal ones.
  if (row_potential)
    for (index_t i = 0; i < n; ++i)
      (*row_potential)(i) = sign * (sign * static_cast<double>(cost(i, a.x[i])) - a.v[a.x[i]]);
  if (column_potential)
    for (index_t j = 0; j < m; ++j) (*column_potential)(j) = sign * a.v[j];
  return result;
}

template <class T>
linear_assignment_result solve_assignment(const host_context& ctx, const char* function,
                                          const linear_assignment_params& params, matrix_view<const T> cost,
                                          vector_view<index_t> row_to_column, vector_view<double>* row_potential,
                                          vector_view<double>* column_potential) {
  const index_t n = cost.rows(), m = cost.cols();
  check_assignment_shape(function, n, m, row_to_column.size());
  if (row_potential) {
    MOECOMP_EXPECTS(row_potential->size() == n, function, ": row_potential must have length n = ", n,
                    " (the cost's rows), got ", row_potential->size());
    check_column_vector(function, "column_potential", m, column_potential->size());
  }
  MOECOMP_EXPECTS(!params.warm_start || column_potential != nullptr, function,
                  ": params.warm_start needs the overload with row_potential and column_potential (the column "
                  "potentials are the starting point)");
  check_cost_values<T>(function, cost, params.maximize);
  const bool warm = params.warm_start && n == m;  // rectangular problems start cold (docs: warm start)
  const double sign = params.maximize ? -1.0 : 1.0;
  jv_workspace workspace(ctx, n, m);
  const jv_arrays& a = workspace.arrays();
  if (warm) {
    for (index_t j = 0; j < m; ++j) {
      const double vj = (*column_potential)(j);
      MOECOMP_EXPECTS(std::isfinite(vj), function, ": column_potential(", j, ") is ", vj,
                      "; a warm start needs finite potentials");
      a.v[j] = sign * vj;
    }
    for (index_t i = 0; i < n; ++i) {
      const index_t hint = row_to_column(i);
      a.count[i] = hint >= 0 && hint < m ? static_cast<std::int32_t>(hint) : -1;
    }
  }
  const status outcome = run_jv<T>(cost, params.maximize, warm, a);
  return finish_assignment<T>(cost, params.maximize, outcome, a, row_to_column, row_potential, column_potential);
}

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
