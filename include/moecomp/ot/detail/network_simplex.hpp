#pragma once
// Primal network simplex on the dense transportation problem (docs/emd.md).
//
// Nodes: rows 0 .. n-1 (supplies a), columns n .. n+m-1 (demands b), and an artificial root n+m. Arcs:
// every finite pair row i -> column j with cost c_ij (implicit: the graph is the cost matrix itself), and
// artificial arcs between the root and single nodes. Only the n + m spanning-tree arcs carry state; a
// non-tree arc is at flow 0. The tree is stored per node, for the arc to its parent: parent, flow on that
// arc, depth, and a preorder "thread" (doubly linked), so a subtree is the run of thread successors deeper
// than its root. Potentials pi make every tree arc tight: c_ij + pi_i - pi_j = 0.
//
// Anti-cycling: the tree is kept strongly feasible (every zero-flow tree arc points towards the root), by
// taking as leaving arc the last blocking arc met when walking the pivot cycle in its orientation from the
// apex (Cunningham's rule). Rows and columns of zero mass carry no flow in any plan and are left out.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#if defined(__GNUC__) || defined(__clang__) || defined(_MSC_VER)
#define MOECOMP_EMD_RESTRICT __restrict
#else
#define MOECOMP_EMD_RESTRICT
#endif

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

/// min over k < count of (double(c[k]) - p[k]), the part of a reduced cost that varies along a cost row,
/// and in `where` the first k attaining it (-1 when count is 0). Vector minima over chunks of 64, then a
/// short search inside the best chunk.
template <class C>
inline double row_segment_argmin(const C* MOECOMP_EMD_RESTRICT c, const double* MOECOMP_EMD_RESTRICT p,
                                 std::int64_t count, std::int64_t& where) noexcept {
  constexpr std::int64_t chunk = 64;
  constexpr int lanes = 8;
  double best = std::numeric_limits<double>::infinity();
  std::int64_t best_chunk = -1;
  where = -1;
  std::int64_t k = 0;
  for (; k + chunk <= count; k += chunk) {
    double lane_min[lanes];
    for (int l = 0; l < lanes; ++l) lane_min[l] = std::numeric_limits<double>::infinity();
    for (std::int64_t q = 0; q < chunk; q += lanes)
      for (int l = 0; l < lanes; ++l) {
        const double r = static_cast<double>(c[k + q + l]) - p[k + q + l];
        lane_min[l] = r < lane_min[l] ? r : lane_min[l];
      }
    double m = lane_min[0];
    for (int l = 1; l < lanes; ++l) m = lane_min[l] < m ? lane_min[l] : m;
    if (m < best) {
      best = m;
      best_chunk = k;
    }
  }
  if (best_chunk >= 0) {
    std::int64_t q = best_chunk;
    while (!(static_cast<double>(c[q]) - p[q] == best)) ++q;
    where = q;
  }
  for (; k < count; ++k) {
    const double r = static_cast<double>(c[k]) - p[k];
    if (r < best) {
      best = r;
      where = k;
    }
  }
  return best;
}

/// One solve. `supply` (n) and `demand` (m) are nonnegative doubles with equal sums (`mass`); `cost` is
/// n x m, finite or +inf (a forbidden pair), never NaN or -inf.
template <class C>
class transport_simplex {
 public:
  using node = std::int32_t;

  transport_simplex(const host_context& ctx, matrix_view<const C> cost, const double* supply, const double* demand,
                    double mass)
      : n_(cost.rows()),
        m_(cost.cols()),
        root_(static_cast<node>(n_ + m_)),
        cost_(cost),
        supply_(supply),
        demand_(demand),
        // Leftovers of the greedy start below this are rounding, not mass (they are far below the 1e-12
        // relative marginal accuracy the plan promises).
        mass_tolerance_(1e-13 * mass),
        parent_(ctx, count(n_ + m_ + 1)),
        thread_(ctx, count(n_ + m_ + 1)),
        rev_thread_(ctx, count(n_ + m_ + 1)),
        depth_(ctx, count(n_ + m_ + 1)),
        kind_(ctx, count(n_ + m_ + 1)),
        flow_(ctx, count(n_ + m_ + 1)),
        pi_(ctx, count(n_ + m_ + 1)),
        scratch_a_(ctx, count(n_ + m_ + 1)),
        scratch_b_(ctx, count(n_ + m_ + 1)),
        stem_(ctx, count(n_ + m_ + 1)),
        seq_(ctx, count(n_ + m_ + 1)) {
    // Block pricing: about sqrt(arcs) arcs per block, as LEMON and POT, but at least a cost row so a block
    // is one or more long vector runs.
    const double arcs = static_cast<double>(n_) * static_cast<double>(m_);
    block_ = std::max<std::int64_t>(static_cast<std::int64_t>(std::sqrt(arcs)), std::min<std::int64_t>(m_, 64));
    block_ = std::max<std::int64_t>(block_, 1);
  }

  /// Runs the simplex from a greedy basis (or an all-artificial one when forbidden pairs defeat the greedy
  /// start) until no arc prices out or `max_iterations` pivots were made.
  void solve(std::int64_t max_iterations) {
    for (index_t u = 0; u < n_ + m_ + 1; ++u) {
      parent_[u] = -1;
      kind_[u] = tree_arc;
      flow_[u] = 0;
      depth_[u] = 0;
    }
    used_artificial_start_ = !greedy_start();
    if (used_artificial_start_) artificial_start();
    compute_potentials();
    // Inactive columns never price out: -inf potential makes c_ij + pi_i - pi_j = +inf.
    for (index_t j = 0; j < m_; ++j)
      if (!(demand_[j] > 0)) pi_[n_ + j] = -std::numeric_limits<double>::infinity();

    iterations_ = 0;
    entering_reduced_cost_ = 0;
    status_ = moecomp::status::ok;
    const std::int64_t refresh = 2 * (n_ + m_) + 16;
    for (;;) {
      index_t in_row = 0, in_col = 0;
      double reduced = 0;
      if (!find_entering(in_row, in_col, reduced)) break;
      if (iterations_ >= max_iterations) {
        status_ = moecomp::status::iteration_limit;
        entering_reduced_cost_ = reduced;
        break;
      }
      pivot(static_cast<node>(in_row), static_cast<node>(n_ + in_col), reduced);
      ++iterations_;
      // Potentials drift by rounding as the pivots add to them; recomputing them from the tree now and then
      // keeps tree arcs' reduced costs at rounding level.
      if (iterations_ % refresh == 0) compute_potentials();
    }
    compute_potentials();
    if (status_ == moecomp::status::ok && artificial_flow() > mass_tolerance_) status_ = moecomp::status::infeasible;
  }

  moecomp::status status() const noexcept { return status_; }
  std::int64_t iterations() const noexcept { return iterations_; }
  /// Reduced cost of the arc that would have entered next: 0 when solve() found none (optimal), negative
  /// when it stopped at max_iterations.
  double entering_reduced_cost() const noexcept { return entering_reduced_cost_; }
  bool used_artificial_start() const noexcept { return used_artificial_start_; }

  /// Calls f(i, j, flow) for each real tree arc (at most n + m - 1), in node order.
  template <class F>
  void for_each_basic_arc(F&& f) const {
    for (index_t u = 0; u < n_ + m_; ++u) {
      const node p = parent_[u];
      if (p < 0 || p == root_) continue;
      if (u < n_)
        f(u, static_cast<index_t>(p) - n_, flow_[u]);
      else
        f(static_cast<index_t>(p), u - n_, flow_[u]);
    }
  }

  /// Potentials: pi_i of row i, pi_j of column j (c_ij + pi_i - pi_j >= 0, = 0 on tree arcs); only for
  /// rows and columns of positive mass.
  double row_potential(index_t i) const noexcept { return pi_[i]; }
  double column_potential(index_t j) const noexcept { return pi_[n_ + j]; }

  /// Total flow on artificial arcs (mass that could not be placed on allowed pairs).
  double artificial_flow() const noexcept {
    double total = 0;
    for (index_t u = 0; u < n_ + m_; ++u)
      if (parent_[u] == root_) total += flow_[u];
    return total;
  }

  /// Checks the tree invariants (tests only): preorder thread consistent with parent and depth, node
  /// balance, nonnegative flows, strong feasibility. Returns an empty string or a description.
  std::string check_invariants() const {
    index_t visited = 0;
    for (node u = thread_[root_]; u != root_; u = thread_[u]) {
      if (++visited > n_ + m_) return "thread does not return to the root";
      if (rev_thread_[thread_[u]] != u) return "rev_thread is not the inverse of thread";
      if (parent_[u] < 0) return "node on the thread without a parent";
      if (depth_[u] != depth_[parent_[u]] + 1) return "depth is not parent depth + 1";
      if (!(flow_[u] >= 0)) return "negative flow";
      if (flow_[u] == 0 && !is_up(u)) return "zero-flow arc pointing away from the root";
    }
    // Preorder: each node's parent appears before it, and a subtree is contiguous (depth rule).
    for (node u = thread_[root_]; u != root_; u = thread_[u]) {
      for (node w = thread_[u]; w != root_ && depth_[w] > depth_[u]; w = thread_[w]) {
        node x = w;
        while (x != root_ && x != u) x = parent_[x];
        if (x != u) return "thread run deeper than a node leaves its subtree";
      }
    }
    return {};
  }

 private:
  enum : char { tree_arc = 0, art_up_free = 1, art_up_priced = 2, art_down_priced = 3 };

  static std::size_t count(index_t k) { return static_cast<std::size_t>(k); }

  double cost_of(index_t i, index_t j) const noexcept { return static_cast<double>(cost_(i, j)); }

  /// Whether the arc between u and its parent points towards the root.
  bool is_up(node u) const noexcept {
    if (parent_[u] == root_) return kind_[u] != art_down_priced;
    return u < n_;  // real arcs go row -> column: up when the row is the child
  }

  /// Cost of the arc between u and its parent.
  double arc_cost(node u) const noexcept {
    const node p = parent_[u];
    if (p == root_) return kind_[u] == art_up_free ? 0.0 : big_m_;
    return u < n_ ? cost_of(u, static_cast<index_t>(p) - n_) : cost_of(p, static_cast<index_t>(u) - n_);
  }

  /// pi from the tree: pi_root = 0; a tree arc s -> t with cost c has pi_t = pi_s + c.
  void compute_potentials() {
    pi_[root_] = 0;
    for (node u = thread_[root_]; u != root_; u = thread_[u]) {
      const double c = arc_cost(u), p = pi_[parent_[u]];
      pi_[u] = is_up(u) ? p - c : p + c;
    }
  }

  /// Greedy start: each row in turn sends its mass to its cheapest allowed columns with demand left. Every
  /// allocation exhausts a row or a column, so the allocations form a forest with positive flows; each
  /// tree of it hangs from the root by a zero-flow, zero-cost artificial arc pointing up (strongly
  /// feasible). Returns false when forbidden pairs leave some mass unplaced.
  bool greedy_start() {
    double* const left = scratch_a_.data();     // remaining mass of each node (rows, then columns)
    double* const penalty = scratch_b_.data();  // 0 for a column with demand left, +inf otherwise
    for (index_t i = 0; i < n_; ++i) left[i] = supply_[i] > 0 ? supply_[i] : 0.0;
    for (index_t j = 0; j < m_; ++j) {
      left[n_ + j] = demand_[j] > 0 ? demand_[j] : 0.0;
      penalty[j] = left[n_ + j] > mass_tolerance_ ? 0.0 : std::numeric_limits<double>::infinity();
    }
    // Allocations are recorded as (row, column, flow) lists first and made into a tree at the end.
    index_t arcs = 0;
    node* const arc_row = thread_.data();  // reused as arc lists until the tree is built
    node* const arc_col = rev_thread_.data();
    double* const arc_flow = flow_.data();
    const auto allocate = [&](index_t i, index_t j) {
      double &rest = left[i], &need = left[n_ + j];
      const double x = std::min(rest, need);
      arc_row[arcs] = static_cast<node>(i);
      arc_col[arcs] = static_cast<node>(n_ + j);
      arc_flow[arcs] = x;
      ++arcs;
      if (rest <= need) {
        need -= x;
        rest = 0;
      } else {
        rest -= x;
        need = 0;
      }
      if (!(need > mass_tolerance_)) penalty[j] = std::numeric_limits<double>::infinity();
      if (!(rest > mass_tolerance_)) rest = 0;
    };
    // Phase 1, an approximate "matrix minimum" rule: the cheapest few pairs of every row and of every
    // column, taken in increasing cost (ties: lower row, then lower column).
    {
      std::vector<candidate> pool = cheapest_pairs();
      for (const candidate& e : pool)
        if (left[e.row] > mass_tolerance_ && left[n_ + e.col] > mass_tolerance_) allocate(e.row, e.col);
    }
    // Phase 2: what is left, row by row to the cheapest columns with demand left.
    for (index_t i = 0; i < n_; ++i) {
      double& rest = left[i];
      if (!(rest > mass_tolerance_)) continue;
      const C* c = cost_.row_ptr(i);
      while (rest > mass_tolerance_) {
        double best = std::numeric_limits<double>::infinity();
        index_t best_j = -1;
        for (index_t j = 0; j < m_; ++j) {
          const double r = static_cast<double>(c[j]) + penalty[j];
          if (r < best) {
            best = r;
            best_j = j;
          }
        }
        if (best_j < 0 || arcs >= n_ + m_) return false;
        allocate(i, best_j);
      }
    }
    for (index_t j = 0; j < m_; ++j)
      if (left[n_ + j] > mass_tolerance_) return false;
    build_forest_tree(arcs);
    return true;
  }

  struct candidate {
    double cost;
    index_t row, col;
  };

  /// The `per_line` cheapest finite pairs of each row and of each column (one pass over the matrix),
  /// sorted by cost, then row, then column; a pair may appear twice (harmless: the second finds a side
  /// exhausted).
  std::vector<candidate> cheapest_pairs() const {
    const index_t per_row = std::min<index_t>(m_, 6), per_col = std::min<index_t>(n_, 6);
    std::vector<candidate> rows(static_cast<std::size_t>(n_ * per_row)), cols(static_cast<std::size_t>(m_ * per_col));
    std::vector<index_t> row_fill(static_cast<std::size_t>(n_), 0), col_fill(static_cast<std::size_t>(m_), 0);
    std::vector<double> col_worst(static_cast<std::size_t>(m_), std::numeric_limits<double>::infinity());
    // Insertion into a short sorted list (stable on ties: earlier index first).
    const auto insert = [](candidate* list, index_t& fill, index_t cap, const candidate& e) {
      index_t k = fill < cap ? fill++ : cap - 1;
      while (k > 0 && list[k - 1].cost > e.cost) {
        list[k] = list[k - 1];
        --k;
      }
      list[k] = e;
    };
    for (index_t i = 0; i < n_; ++i) {
      if (!(supply_[i] > 0)) continue;
      const C* c = cost_.row_ptr(i);
      candidate* mine = rows.data() + i * per_row;
      index_t& fill = row_fill[static_cast<std::size_t>(i)];
      double worst = std::numeric_limits<double>::infinity();
      for (index_t j = 0; j < m_; ++j) {
        const double v = static_cast<double>(c[j]);
        if (!(demand_[j] > 0) || v == std::numeric_limits<double>::infinity()) continue;
        if (v < worst || fill < per_row) {
          insert(mine, fill, per_row, candidate{v, i, j});
          if (fill == per_row) worst = mine[per_row - 1].cost;
        }
        if (v < col_worst[static_cast<std::size_t>(j)] || col_fill[static_cast<std::size_t>(j)] < per_col) {
          candidate* theirs = cols.data() + j * per_col;
          index_t& cf = col_fill[static_cast<std::size_t>(j)];
          insert(theirs, cf, per_col, candidate{v, i, j});
          if (cf == per_col) col_worst[static_cast<std::size_t>(j)] = theirs[per_col - 1].cost;
        }
      }
    }
    std::vector<candidate> pool;
    pool.reserve(rows.size() + cols.size());
    for (index_t i = 0; i < n_; ++i)
      for (index_t k = 0; k < row_fill[static_cast<std::size_t>(i)]; ++k) pool.push_back(rows[static_cast<std::size_t>(i * per_row + k)]);
    for (index_t j = 0; j < m_; ++j)
      for (index_t k = 0; k < col_fill[static_cast<std::size_t>(j)]; ++k) pool.push_back(cols[static_cast<std::size_t>(j * per_col + k)]);
    std::sort(pool.begin(), pool.end(), [](const candidate& l, const candidate& r) {
      if (l.cost != r.cost) return l.cost < r.cost;
      return l.row != r.row ? l.row < r.row : l.col < r.col;
    });
    return pool;
  }

  /// Turns the recorded allocation arcs (a forest) into the thread/parent/depth tree under the root.
  void build_forest_tree(index_t arcs) {
    const index_t nodes = n_ + m_;
    // CSR adjacency, in scratch arrays: offsets in scratch_a_ (as doubles would be wasteful; use depth_ and
    // kind_ are busy) -- use host-side temporaries from the same context instead.
    std::vector<index_t> offset(static_cast<std::size_t>(nodes + 1), 0);
    std::vector<node> other(static_cast<std::size_t>(2 * arcs));
    std::vector<double> arc_flow_of(static_cast<std::size_t>(2 * arcs));
    const node* arc_row = thread_.data();
    const node* arc_col = rev_thread_.data();
    const double* arc_flow = flow_.data();
    for (index_t e = 0; e < arcs; ++e) {
      ++offset[static_cast<std::size_t>(arc_row[e]) + 1];
      ++offset[static_cast<std::size_t>(arc_col[e]) + 1];
    }
    for (index_t u = 0; u < nodes; ++u) offset[static_cast<std::size_t>(u + 1)] += offset[static_cast<std::size_t>(u)];
    {
      std::vector<index_t> fill(offset.begin(), offset.end() - 1);
      for (index_t e = 0; e < arcs; ++e) {
        const node r = arc_row[e], c = arc_col[e];
        const std::size_t pr = static_cast<std::size_t>(fill[static_cast<std::size_t>(r)]++);
        const std::size_t pc = static_cast<std::size_t>(fill[static_cast<std::size_t>(c)]++);
        other[pr] = c;
        arc_flow_of[pr] = arc_flow[e];
        other[pc] = r;
        arc_flow_of[pc] = arc_flow[e];
      }
    }
    // Depth-first over each component in node order; the preorder becomes the thread.
    std::vector<node> order;
    order.reserve(static_cast<std::size_t>(nodes));
    std::vector<node> stack;
    for (index_t u = 0; u < nodes; ++u) parent_[u] = -1;
    for (index_t s = 0; s < nodes; ++s) {
      if (parent_[s] >= 0 || !active(static_cast<node>(s))) continue;
      parent_[s] = root_;
      kind_[s] = art_up_free;
      flow_[s] = 0;
      depth_[s] = 1;
      stack.push_back(static_cast<node>(s));
      while (!stack.empty()) {
        const node u = stack.back();
        stack.pop_back();
        order.push_back(u);
        // Children pushed in reverse so the preorder visits them in adjacency order.
        for (index_t k = offset[static_cast<std::size_t>(u) + 1] - 1; k >= offset[static_cast<std::size_t>(u)]; --k) {
          const node w = other[static_cast<std::size_t>(k)];
          if (w == parent_[u]) continue;
          parent_[w] = u;
          kind_[w] = tree_arc;
          flow_[w] = arc_flow_of[static_cast<std::size_t>(k)];
          depth_[w] = depth_[u] + 1;
          stack.push_back(w);
        }
      }
    }
    link_thread(order);
  }

  /// All-artificial start (LEMON's): each row sends its supply up to the root, the root sends each
  /// column its demand, at a cost big enough that any plan on allowed pairs is cheaper (big-M).
  void artificial_start() {
    double max_abs = 0;
    for (index_t i = 0; i < n_; ++i) {
      const C* c = cost_.row_ptr(i);
      for (index_t j = 0; j < m_; ++j) {
        const double v = std::abs(static_cast<double>(c[j]));
        if (v != std::numeric_limits<double>::infinity() && v > max_abs) max_abs = v;
      }
    }
    big_m_ = (static_cast<double>(n_ + m_) + 1.0) * (max_abs + 1.0);
    std::vector<node> order;
    for (index_t u = 0; u < n_ + m_; ++u) {
      parent_[u] = -1;
      if (!active(static_cast<node>(u))) continue;
      parent_[u] = root_;
      depth_[u] = 1;
      kind_[u] = u < n_ ? art_up_priced : art_down_priced;
      flow_[u] = u < n_ ? supply_[u] : demand_[u - n_];
      order.push_back(static_cast<node>(u));
    }
    link_thread(order);
  }

  void link_thread(const std::vector<node>& order) {
    node prev = root_;
    depth_[root_] = 0;
    parent_[root_] = -1;
    for (node u : order) {
      thread_[prev] = u;
      rev_thread_[u] = prev;
      prev = u;
    }
    thread_[prev] = root_;
    rev_thread_[root_] = prev;
  }

  bool active(node u) const noexcept { return u < n_ ? supply_[u] > 0 : demand_[u - n_] > 0; }

  /// Block search: scans the cost matrix row-major from where the last search stopped, a block of about
  /// sqrt(n m) arcs at a time, and returns the most negative reduced cost of the first block that has one
  /// below -eps * scale (ties: the first in scan order). False when a whole sweep finds none: optimal.
  bool find_entering(index_t& in_row, index_t& in_col, double& reduced) {
    const std::int64_t total = static_cast<std::int64_t>(n_) * m_;
    const double* const col_pi = pi_.data() + n_;
    std::int64_t scanned = 0, block_left = block_;
    index_t i = next_row_, j = next_col_;
    double best = 0;
    index_t best_i = -1, best_j = -1;
    while (scanned < total) {
      const std::int64_t len = std::min<std::int64_t>({m_ - j, block_left, total - scanned});
      if (supply_[i] > 0) {
        const C* c = cost_.row_ptr(i) + j;
        const double row_pi = pi_[i];
        std::int64_t k = -1;
        const double r_min = row_segment_argmin(c, col_pi + j, len, k) + row_pi;
        if (r_min < best) {
          // The first arc attaining the minimum must be a genuine improving non-tree arc (tree arcs price at
          // rounding level); if it is not, look at the segment arc by arc.
          if (acceptable(i, j + k, r_min)) {
            best = r_min;
            best_i = i;
            best_j = j + k;
          } else {
            for (k = 0; k < len; ++k) {
              const double r = static_cast<double>(c[k]) - col_pi[j + k] + row_pi;
              if (r < best && acceptable(i, j + k, r)) {
                best = r;
                best_i = i;
                best_j = j + k;
              }
            }
          }
        }
      }
      scanned += len;
      block_left -= len;
      j += len;
      if (j == m_) {
        j = 0;
        i = i + 1 == n_ ? 0 : i + 1;
      }
      if (block_left == 0) {
        if (best_i >= 0) break;
        block_left = block_;
      }
    }
    next_row_ = i;
    next_col_ = j;
    if (best_i < 0) return false;
    in_row = best_i;
    in_col = best_j;
    reduced = best;
    return true;
  }

  /// Whether the arc i -> j with reduced cost r (< 0) may enter: below -eps times the magnitudes that made
  /// it, and not a tree arc.
  bool acceptable(index_t i, index_t j, double r) const noexcept {
    constexpr double eps = 1e-14;
    const node col = static_cast<node>(n_ + j);
    const double scale = std::max({std::abs(static_cast<double>(cost_(i, j))), std::abs(pi_[i]), std::abs(pi_[col])});
    if (!(r < -eps * scale)) return false;
    return parent_[i] != col && parent_[col] != static_cast<node>(i);
  }

  /// Brings row -> col (reduced cost `reduced` < 0) into the tree.
  void pivot(node first, node second, double reduced) {
    // Apex of the cycle.
    node u = first, v = second;
    while (u != v) {
      if (depth_[u] > depth_[v]) {
        u = parent_[u];
      } else if (depth_[v] > depth_[u]) {
        v = parent_[v];
      } else {
        u = parent_[u];
        v = parent_[v];
      }
    }
    const node join = u;
    // Flow goes first -> second, up from second to the apex, down from the apex to first. Leaving arc: the
    // last blocking arc in that orientation from the apex: on the first side the one nearest `first`
    // (strict <, walking up), on the second side the one nearest the apex (<=, walking up), and the second
    // side wins ties with the first.
    double delta = std::numeric_limits<double>::infinity();
    node u_out = -1;
    bool out_on_first = true;
    for (node w = first; w != join; w = parent_[w])
      if (is_up(w) && flow_[w] < delta) {
        delta = flow_[w];
        u_out = w;
      }
    for (node w = second; w != join; w = parent_[w])
      if (!is_up(w) && flow_[w] <= delta) {
        delta = flow_[w];
        u_out = w;
        out_on_first = false;
      }
    MOECOMP_ENSURES(u_out >= 0, "emd: network simplex found a cycle without a blocking arc (unbounded)");
    if (delta > 0) {
      for (node w = first; w != join; w = parent_[w]) flow_[w] += is_up(w) ? -delta : delta;
      for (node w = second; w != join; w = parent_[w]) flow_[w] += is_up(w) ? delta : -delta;
    }
    const node u_in = out_on_first ? first : second, v_in = out_on_first ? second : first;
    const double sigma = out_on_first ? -reduced : reduced;

    // Stem: u_in up to u_out; the subtree under u_out is re-hung from v_in, re-rooted at u_in.
    node* const stem = stem_.data();
    node* const seq = seq_.data();
    index_t k = 0;
    stem[0] = u_in;
    while (stem[k] != u_out) {
      stem[k + 1] = parent_[stem[k]];
      ++k;
    }
    const node before = rev_thread_[u_out];
    // New preorder of the moved subtree: stem[t], then its old descendants except the stem[t-1] branch;
    // depths and potentials are updated on the way.
    index_t len = 0;
    node prev_last = -1;
    {
      const node* MOECOMP_EMD_RESTRICT thread = thread_.data();
      std::int32_t* MOECOMP_EMD_RESTRICT depth = depth_.data();
      double* MOECOMP_EMD_RESTRICT pi = pi_.data();
      node* MOECOMP_EMD_RESTRICT out = seq;
      const std::int32_t base_depth = depth[v_in] + 1;
      for (index_t t = 0; t <= k; ++t) {
        const node s = stem[t];
        const std::int32_t d0 = depth[s];
        const std::int32_t shift = base_depth + static_cast<std::int32_t>(t) - d0;
        depth[s] = d0 + shift;
        pi[s] += sigma;
        out[len++] = s;
        node last = s;
        node x = thread[s];
        const node skip = t > 0 ? stem[t - 1] : -1;
        for (;;) {
          if (x == skip) {  // already placed, with its whole old subtree
            last = prev_last;
            x = thread[prev_last];
            continue;
          }
          const std::int32_t dx = depth[x];
          if (dx <= d0) break;
          depth[x] = dx + shift;
          pi[x] += sigma;
          out[len++] = x;
          last = x;
          x = thread[x];
        }
        prev_last = last;
      }
    }
    const node after = thread_[prev_last];
    thread_[before] = after;
    rev_thread_[after] = before;
    const node next = thread_[v_in];
    thread_[v_in] = seq[0];
    rev_thread_[seq[0]] = v_in;
    for (index_t a = 0; a + 1 < len; ++a) {
      thread_[seq[a]] = seq[a + 1];
      rev_thread_[seq[a + 1]] = seq[a];
    }
    thread_[seq[len - 1]] = next;
    rev_thread_[next] = seq[len - 1];
    // Stem arcs change owner: the arc stem[t] - stem[t+1] now hangs stem[t+1] from stem[t].
    for (index_t t = k; t >= 1; --t) {
      parent_[stem[t]] = stem[t - 1];
      flow_[stem[t]] = flow_[stem[t - 1]];
      kind_[stem[t]] = tree_arc;
    }
    parent_[u_in] = v_in;
    flow_[u_in] = delta;
    kind_[u_in] = tree_arc;
  }

  index_t n_, m_;
  node root_;
  matrix_view<const C> cost_;
  const double* supply_;
  const double* demand_;
  double mass_tolerance_;
  double big_m_ = 0;
  std::int64_t block_ = 1;
  index_t next_row_ = 0, next_col_ = 0;
  std::int64_t iterations_ = 0;
  double entering_reduced_cost_ = 0;
  moecomp::status status_ = moecomp::status::ok;
  bool used_artificial_start_ = false;
  moecomp::detail::host_workspace<node> parent_, thread_, rev_thread_, depth_;
  moecomp::detail::host_workspace<char> kind_;
  moecomp::detail::host_workspace<double> flow_, pi_;
  moecomp::detail::host_workspace<double> scratch_a_, scratch_b_;
  moecomp::detail::host_workspace<node> stem_, seq_;
};

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
