#pragma once
// The auction algorithm (Bertsekas 1979, with epsilon-scaling, Bertsekas & Castanon 1991) on the host,
// Gauss-Seidel: one bidder at a time from a FIFO queue. Minimisation form with internal cost c = s C
// (s = -1 when maximising) and potentials v = -price: bidder i takes the column j1 minimising c_ij - v_j
// (lowest index on ties) and lowers v_j1 by (second - first) + epsilon, displacing j1's previous owner.
// A complete assignment at the end of a phase is epsilon-complementary-slack, so its total is within
// (number of bidders) * epsilon of the optimum.
//
// Rectangular problems (n < m) get m - n virtual bidders whose costs are all zero: the square problem has
// the same optimum, and the bound stays m * epsilon. Forbidden pairs cost a finite penalty P larger than
// any feasible total can make up for (see auction_schedule), so the bidding always ends; an assignment that
// still uses a penalised pair proves the problem infeasible. Each phase starts with every bidder unassigned
// and the prices of the previous phase.
//
// The schedule and the cost summary are shared with the CUDA port (<moecomp/cuda/ot/auction_assignment.cuh>).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/ot/detail/linear_assignment_kernels.hpp>
#include <moecomp/ot/linear_assignment_types.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <moecomp/ot/detail/linear_assignment_checks.hpp>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

/// What the auction's schedule needs to know about the cost, in the internal (minimisation) sign.
struct auction_cost_summary {
  double lowest = lsa_inf;    // smallest finite c
  double highest = -lsa_inf;  // largest finite c
  bool all_integer = true;    // every finite cost is an integer
  bool any_forbidden = false;
  bool any_finite() const noexcept { return lowest <= highest; }
};

template <class T>
auction_cost_summary summarize_auction_costs(matrix_view<const T> cost, bool maximize) noexcept {
  auction_cost_summary s;
  const double sign = maximize ? -1.0 : 1.0;
  for (index_t i = 0; i < cost.rows(); ++i) {
    const T* row = cost.row_ptr(i);
    for (index_t k = 0; k < cost.cols(); ++k) {
      const double c = sign * static_cast<double>(row[k]);
      if (!std::isfinite(c)) {
        s.any_forbidden = true;
        continue;
      }
      s.lowest = std::min(s.lowest, c);
      s.highest = std::max(s.highest, c);
      s.all_integer = s.all_integer && c == std::floor(c);
    }
  }
  return s;
}

/// The resolved epsilons and the penalty of forbidden pairs (+inf when there are none).
struct auction_schedule {
  double epsilon_initial;
  double epsilon_final;
  double factor;
  double penalty;
};

inline void check_auction_params(const char* function, const auction_params& p) {
  MOECOMP_EXPECTS(std::isfinite(p.epsilon_final) && p.epsilon_final >= 0, function,
                  ": params.epsilon_final must be finite and >= 0 (0: automatic), got ", p.epsilon_final);
  MOECOMP_EXPECTS(std::isfinite(p.epsilon_initial) && p.epsilon_initial >= 0, function,
                  ": params.epsilon_initial must be finite and >= 0 (0: automatic), got ", p.epsilon_initial);
  MOECOMP_EXPECTS(p.epsilon_factor > 0 && p.epsilon_factor < 1, function,
                  ": params.epsilon_factor must be in (0, 1), got ", p.epsilon_factor);
  MOECOMP_EXPECTS(p.max_bids >= 0, function, ": params.max_bids must be >= 0 (0: no limit), got ", p.max_bids);
}

inline auction_schedule make_auction_schedule(const auction_params& p, const auction_cost_summary& s, index_t n,
                                              index_t m) noexcept {
  const double range = s.any_finite() ? s.highest - s.lowest : 0.0;
  const double scale = range > 0 ? range : std::max(s.any_finite() ? std::abs(s.highest) : 0.0, 1.0);
  auction_schedule r{};
  r.factor = p.epsilon_factor;
  if (p.epsilon_final > 0)
    r.epsilon_final = p.epsilon_final;
  else
    r.epsilon_final = s.all_integer ? 1.0 / static_cast<double>(m + 1) : scale / (1e6 * static_cast<double>(m));
  if (p.epsilon_initial > 0)
    r.epsilon_initial = p.epsilon_initial;
  else if (p.warm_start)
    r.epsilon_initial = std::min(scale / 4, r.epsilon_final / (r.factor * r.factor));
  else
    r.epsilon_initial = scale / 4;
  r.epsilon_initial = std::max(r.epsilon_initial, r.epsilon_final);
  // Any assignment through a penalised pair costs more than any feasible one plus the slack of any phase:
  // P + (n - 1) lowest > n highest + m epsilon_initial.
  r.penalty = s.any_forbidden
                  ? s.highest + static_cast<double>(n) * range + static_cast<double>(m) * r.epsilon_initial + 1.0
                  : lsa_inf;
  return r;
}

/// The auction's O(m) arrays.
class auction_workspace {
 public:
  auction_workspace(const host_context& ctx, index_t m)
      : ints_(ctx, static_cast<std::size_t>(3 * m)), zeros_(ctx, static_cast<std::size_t>(m)) {}
  std::int32_t* owner() const noexcept { return ints_.data(); }               // m: bidder holding a column
  std::int32_t* holding() const noexcept { return ints_.data() + size(); }   // m: column held by a bidder
  std::int32_t* queue() const noexcept { return ints_.data() + 2 * size(); }  // m: bidders waiting
  double* zeros() const noexcept { return zeros_.data(); }                      // m: the virtual bidders' row
 private:
  index_t size() const noexcept { return static_cast<index_t>(zeros_.size()); }
  moecomp::detail::host_workspace<std::int32_t> ints_;
  moecomp::detail::host_workspace<double> zeros_;
};

/// Runs the phases. v: m potentials (in/out). Writes the last complete phase's columns of the n real
/// rows into `columns` and returns its epsilon through `epsilon_done` (+inf when no phase completed).
template <class T, bool Negate>
status run_auction(const T* cost, index_t row_stride, index_t n, index_t m, const auction_schedule& sched,
                   std::int64_t max_bids, double* v, const auction_workspace& w, std::int32_t* columns,
                   double& epsilon_done, std::int64_t& bids, int& phases) noexcept {
  std::int32_t* owner = w.owner();
  std::int32_t* holding = w.holding();
  std::int32_t* queue = w.queue();
  double* zeros = w.zeros();
  std::fill(zeros, zeros + m, 0.0);
  epsilon_done = lsa_inf;
  bids = 0;
  phases = 0;
  double epsilon = sched.epsilon_initial;
  for (;;) {
    ++phases;
    std::fill(owner, owner + m, -1);
    std::fill(holding, holding + m, -1);
    for (index_t i = 0; i < m; ++i) queue[i] = static_cast<std::int32_t>(i);
    index_t head = 0, waiting = m;
    while (waiting > 0) {
      if (max_bids > 0 && bids >= max_bids) return status::iteration_limit;
      const std::int32_t i = queue[head];
      head = head + 1 == m ? 0 : head + 1;
      --waiting;
      two_smallest_result r;
      if (i < n)
        r = two_smallest<MOECOMP_LSA_LANES, T, Negate>(cost + i * row_stride, m, v, sched.penalty);
      else
        r = two_smallest<MOECOMP_LSA_LANES, double, false>(zeros, m, v, sched.penalty);
      const std::int32_t j = static_cast<std::int32_t>(r.first_index);
      const double second = r.second_index >= 0 ? r.second : r.first;  // one column: bid epsilon
      v[j] -= (second - r.first) + epsilon;
      const std::int32_t previous = owner[j];
      owner[j] = i;
      holding[i] = j;
      if (previous >= 0) {
        holding[previous] = -1;
        queue[(head + waiting) % m] = previous;
        ++waiting;
      }
      ++bids;
    }
    std::copy(holding, holding + n, columns);
    epsilon_done = epsilon;
    if (epsilon <= sched.epsilon_final) return status::ok;
    epsilon = std::max(epsilon * sched.factor, sched.epsilon_final);
  }
}


template <class T>
auction_result solve_auction(const host_context& ctx, const auction_params& params, matrix_view<const T> cost,
                             vector_view<index_t> row_to_column, vector_view<double>* column_price) {
  constexpr const char* function = "auction_assignment";
  const index_t n = cost.rows(), m = cost.cols();
  check_assignment_shape(function, n, m, row_to_column.size());
  check_auction_params(function, params);
  MOECOMP_EXPECTS(!params.warm_start || column_price != nullptr, function,
                  ": params.warm_start needs the overload with column_price (the starting prices)");
  if (column_price) check_column_vector(function, "column_price", m, column_price->size());
  check_cost_values<T>(function, cost, params.maximize);
  const double sign = params.maximize ? -1.0 : 1.0;
  auction_result result;
  if (n == 0) return result;

  const auction_cost_summary summary = summarize_auction_costs<T>(cost, params.maximize);
  moecomp::detail::host_workspace<double> v(ctx, static_cast<std::size_t>(m));
  moecomp::detail::host_workspace<std::int32_t> columns(ctx, static_cast<std::size_t>(n));
  for (index_t j = 0; j < m; ++j) {
    if (params.warm_start) {
      const double p = (*column_price)(j);
      MOECOMP_EXPECTS(std::isfinite(p), function, ": column_price(", j, ") is ", p,
                      "; a warm start needs finite prices");
      v[static_cast<std::size_t>(j)] = -p;
    } else {
      v[static_cast<std::size_t>(j)] = 0.0;
    }
  }
  auto fail = [&](status s) {
    for (index_t i = 0; i < n; ++i) row_to_column(i) = -1;
    result.status = s;
    result.cost = s == status::infeasible ? sign * lsa_inf : std::numeric_limits<double>::quiet_NaN();
    result.criterion = lsa_inf;
    return result;
  };
  if (!summary.any_finite()) return fail(status::infeasible);

  const auction_schedule schedule = make_auction_schedule(params, summary, n, m);
  auction_workspace workspace(ctx, m);
  double epsilon_done = lsa_inf;
  const status outcome =
      params.maximize
          ? run_auction<T, true>(cost.data(), cost.row_stride(), n, m, schedule, params.max_bids, v.data(),
                                 workspace, columns.data(), epsilon_done, result.iterations, result.phases)
          : run_auction<T, false>(cost.data(), cost.row_stride(), n, m, schedule, params.max_bids, v.data(),
                                  workspace, columns.data(), epsilon_done, result.iterations, result.phases);
  if (column_price)
    for (index_t j = 0; j < m; ++j) (*column_price)(j) = -v[static_cast<std::size_t>(j)];
  if (!std::isfinite(epsilon_done)) return fail(outcome);  // stopped before any phase completed

  double total = 0.0;
  bool penalised = false;
  for (index_t i = 0; i < n; ++i) {
    const std::int32_t j = columns[static_cast<std::size_t>(i)];
    row_to_column(i) = j;
    const double c = static_cast<double>(cost(i, j));
    penalised = penalised || std::isinf(c);
    total += c;
  }
  // With the penalty chosen by make_auction_schedule, a complete epsilon-optimal assignment uses a
  // forbidden pair only when every assignment does.
  if (penalised) return fail(status::infeasible);
  result.cost = total;
  result.status = outcome;
  result.criterion = static_cast<double>(m) * epsilon_done;
  return result;
}

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
