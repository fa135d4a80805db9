#pragma once
// The expert-graph partition on the host, behind <moecomp/similarity/partition.hpp>: the exact subset dynamic
// programme, the heuristic (agglomerative and random balanced starts, moves, swaps and kicks), the lower bound
// and the canonical labels. Minimises W, the within-group total, which is equivalent to Eq. 5
// (docs/partition.md). Deterministic at any thread count: the programme's entries of one level are
// independent of each other, and each start of the heuristic draws from its own stream and writes its own
// result; every sum runs in a fixed order in double.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/similarity/partition_types.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/parallel.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

MOECOMP_NAMESPACE_BEGIN
namespace similarity {
namespace detail {

using moecomp::detail::host_workspace;
using moecomp::detail::parallel_for;

inline constexpr double partition_infinity = std::numeric_limits<double>::infinity();
/// Unit roundoff of double, for the rounding margin of the lower bound.
inline constexpr double partition_roundoff = 0x1.0p-53;

/// The checked problem: D symmetrised (the mean of D_ij and D_ji) in double with a zero diagonal.
struct partition_problem {
  index_t n = 0, groups = 0;
  /// The group size bound, n when params.max_size is 0.
  index_t capacity = 0;
  const double* dist = nullptr;  // n x n, row-major
  double total = 0;              // T = sum_{i<j} D_ij, in row-major order
  double trace = 0;              // sum_i D_ii of the input
  double d(index_t i, index_t j) const noexcept { return dist[i * n + j]; }
};

/// Relabels in place so that groups are numbered in order of their smallest member (label[0] == 0).
template <class Label>
void canonical_labels(index_t n, Label* labels, index_t* scratch) {
  std::fill(scratch, scratch + n, index_t(-1));
  index_t next = 0;
  for (index_t i = 0; i < n; ++i) {
    index_t& id = scratch[static_cast<index_t>(labels[i])];
    if (id < 0) id = next++;
    labels[i] = static_cast<Label>(id);
  }
}

/// W of a labelling: D_ij over i < j with equal labels, summed in row-major order (one rounding for all callers).
template <class Label>
double within_total(const partition_problem& p, const Label* labels) {
  double w = 0;
  for (index_t i = 0; i < p.n; ++i)
    for (index_t j = i + 1; j < p.n; ++j)
      if (labels[i] == labels[j]) w += p.d(i, j);
  return w;
}

/// Whether group a wins the tie rule against group b: the smallest expert in exactly one of them is in a.
inline bool earlier_group(std::uint32_t a, std::uint32_t b) noexcept {
  const std::uint32_t differ = a ^ b;
  return (a & differ & (0u - differ)) != 0;
}

inline int lowest_bit(std::uint32_t mask) noexcept {
  int k = 0;
  while (!(mask & 1u)) {
    mask >>= 1;
    ++k;
  }
  return k;
}

inline index_t bit_count(std::uint32_t mask) noexcept {
  index_t c = 0;
  for (; mask; mask &= mask - 1) ++c;
  return c;
}

/// Exact: f_k(M), the least W of M split into k groups, over subsets M. Each step takes the group S of M's
/// lowest member (so groups come out in order of their smallest member, already canonical):
///   f_k(M) = min over S, lowest(M) in S subset of M, of w(S) + f_{k-1}(M \ S),  f_1(M) = w(M),
/// w(S) the within total of S (infinite above the capacity). After j groups the rest lies in {j .. n-1}, so
/// level k only needs the subsets of {r-k .. n-1}. Ties: the S that wins earlier_group. Writes labels, returns
/// the transitions evaluated.
inline std::int64_t exact_partition(const host_context& ctx, const partition_problem& p, std::int64_t* labels) {
  const index_t n = p.n, r = p.groups;
  const std::uint32_t full = (1u << n) - 1u;  // n <= max_exact_experts
  const std::size_t subsets = std::size_t(1) << n;
  // w(S) for every subset: w(S) = w(S without its lowest member i) + D_ij over its other members j, ascending.
  host_workspace<double> within(ctx, subsets);
  within[0] = 0;
  for (std::uint32_t s = 1; s <= full && s != 0; ++s) {
    const std::uint32_t rest = s & (s - 1);
    const index_t low = lowest_bit(s);
    if (bit_count(s) > p.capacity) {
      within[s] = partition_infinity;
      continue;
    }
    double w = within[rest];
    for (std::uint32_t m = rest; m; m &= m - 1) w += p.d(low, lowest_bit(m));
    within[s] = w;
  }
  // f_1 read from `within`, with the empty set (no group at all) infinite.
  auto level_one = [&](std::uint32_t m) { return m ? within[m] : partition_infinity; };

  // The best split of `mask` into k groups given f_{k-1} (`previous`, indexed by mask >> previous_shift, or
  // level_one when k == 2).
  auto best_split = [&](index_t k, std::uint32_t mask, const double* previous, int previous_shift,
                        std::int64_t& transitions) {
    const std::uint32_t low = mask & (0u - mask), others = mask ^ low;
    double best = partition_infinity;
    std::uint32_t best_group = 0;
    for (std::uint32_t sub = others;; sub = (sub - 1) & others) {
      const std::uint32_t group = low | sub, remaining = others ^ sub;
      const double w = within[group];
      if (w < partition_infinity) {
        const double rest = k == 2 ? level_one(remaining) : previous[remaining >> previous_shift];
        const double cost = w + rest;
        ++transitions;
        if (cost < best || (cost == best && cost < partition_infinity && earlier_group(group, best_group))) {
          best = cost;
          best_group = group;
        }
      }
      if (sub == 0) break;
    }
    return std::pair<double, std::uint32_t>(best, best_group);
  };

  std::int64_t transitions = 0;
  // Levels k = 2 .. r-1: values (two alternating buffers) and choices (kept for the reconstruction).
  const std::size_t level_entries = r >= 3 ? std::size_t(1) << (n - 1) : 0;
  host_workspace<double> values_a(ctx, level_entries), values_b(ctx, level_entries);
  host_workspace<std::size_t> choice_offset(ctx, static_cast<std::size_t>(r + 1));
  std::size_t choice_total = 0;
  for (index_t k = 2; k < r; ++k) {
    choice_offset[static_cast<std::size_t>(k)] = choice_total;
    choice_total += std::size_t(1) << (n - (r - k));
  }
  host_workspace<std::uint32_t> choices(ctx, choice_total);
  const double* previous = nullptr;
  int previous_shift = 0;
  constexpr index_t block = 2048;
  const int threads = ctx.threads();
  for (index_t k = 2; k < r; ++k) {
    const int shift = static_cast<int>(r - k);
    const index_t entries = index_t(1) << (n - shift);
    double* current = (k % 2 == 0) ? values_a.data() : values_b.data();
    std::uint32_t* choice = choices.data() + choice_offset[static_cast<std::size_t>(k)];
    const index_t blocks = (entries + block - 1) / block;
    host_workspace<std::int64_t> counted(ctx, static_cast<std::size_t>(blocks));
    parallel_for(blocks, threads, [&](index_t b, int) {
      std::int64_t local = 0;
      const index_t end = std::min(entries, (b + 1) * block);
      for (index_t m = b * block; m < end; ++m) {
        const std::uint32_t mask = static_cast<std::uint32_t>(m) << shift;
        if (mask == 0) {
          current[m] = partition_infinity;
          choice[m] = 0;
          continue;
        }
        const auto best = best_split(k, mask, previous, previous_shift, local);
        current[m] = best.first;
        choice[m] = best.second;
      }
      counted[static_cast<std::size_t>(b)] = local;
    });
    for (index_t b = 0; b < blocks; ++b) transitions += counted[static_cast<std::size_t>(b)];
    previous = current;
    previous_shift = shift;
  }

  // Level r on the full set, then the groups back out of the choices.
  std::uint32_t group;
  if (r == 1) {
    group = full;
  } else {
    group = best_split(r, full, previous, previous_shift, transitions).second;
  }
  MOECOMP_ENSURES(group != 0, "partition_experts: the exact solver found no feasible partition");
  std::uint32_t remaining = full;
  for (index_t k = r, id = 0; k >= 1; --k, ++id) {
    if (k == 1) group = remaining;
    else if (k < r) group = choices[choice_offset[static_cast<std::size_t>(k)] + (remaining >> (r - k))];
    for (std::uint32_t m = group; m; m &= m - 1) labels[lowest_bit(m)] = id;
    remaining ^= group;
  }
  return transitions;
}

/// The heuristic's search on one labelling: single moves, then pairwise swaps, repeated until a pass changes
/// nothing. `to_group` (n x r) holds sum_{j in g} D_ij, rebuilt at the start of every pass so that rounding
/// never accumulates over passes. A pass is kept only when it lowers W (recomputed by within_total), which
/// guarantees the search ends. Returns the improving steps.
class local_search {
 public:
  local_search(const partition_problem& p, double* to_group, index_t* sizes, std::int64_t* saved)
      : p_(p), to_group_(to_group), sizes_(sizes), saved_(saved) {
    double largest_row = 0;
    for (index_t i = 0; i < p.n; ++i) {
      double row = 0;
      for (index_t j = 0; j < p.n; ++j) row += p.d(i, j);
      largest_row = std::max(largest_row, row);
    }
    // Improvements below this are rounding, not progress.
    threshold_ = 1e-12 * largest_row;
  }

  /// Improves `labels` in place; `w` is their within_total on entry and on exit.
  std::int64_t run(std::int64_t* labels, double& w) {
    const index_t n = p_.n, r = p_.groups;
    std::int64_t steps = 0;
    for (;;) {
      std::fill(sizes_, sizes_ + r, index_t(0));
      std::fill(to_group_, to_group_ + n * r, 0.0);
      for (index_t j = 0; j < n; ++j) ++sizes_[labels[j]];
      for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < n; ++j) to_group_[i * r + labels[j]] += p_.d(i, j);
      std::copy(labels, labels + n, saved_);
      std::int64_t pass_steps = 0;
      for (index_t i = 0; i < n; ++i) {
        const index_t a = labels[i];
        if (sizes_[a] == 1) continue;
        index_t best = -1;
        double best_delta = -threshold_;
        for (index_t b = 0; b < r; ++b) {
          if (b == a || sizes_[b] >= p_.capacity) continue;
          const double delta = to_group_[i * r + b] - to_group_[i * r + a];
          if (delta < best_delta) {
            best_delta = delta;
            best = b;
          }
        }
        if (best >= 0) {
          move(labels, i, best);
          ++pass_steps;
        }
      }
      for (index_t i = 0; i < n; ++i)
        for (index_t j = i + 1; j < n; ++j) {
          const index_t a = labels[i], b = labels[j];
          if (a == b) continue;
          const double delta = to_group_[i * r + b] - to_group_[i * r + a] + to_group_[j * r + a] -
                               to_group_[j * r + b] - 2.0 * p_.d(i, j);
          if (delta < -threshold_) {
            move(labels, i, b);
            move(labels, j, a);
            ++pass_steps;
          }
        }
      if (pass_steps == 0) return steps;
      const double after = within_total(p_, labels);
      if (!(after < w)) {  // rounding made the pass look better than it was: undo it and stop
        std::copy(saved_, saved_ + n, labels);
        return steps;
      }
      w = after;
      steps += pass_steps;
    }
  }

 private:
  void move(std::int64_t* labels, index_t i, index_t b) {
    const index_t n = p_.n, r = p_.groups, a = labels[i];
    for (index_t j = 0; j < n; ++j) {
      to_group_[j * r + a] -= p_.d(j, i);
      to_group_[j * r + b] += p_.d(j, i);
    }
    --sizes_[a];
    ++sizes_[b];
    labels[i] = b;
  }

  const partition_problem& p_;
  double* to_group_;
  index_t* sizes_;
  std::int64_t* saved_;
  double threshold_ = 0;
};

/// Start 0: agglomerative. From singletons, repeatedly merge the two groups whose union adds least to W (the
/// sum of D between them; ties: the lowest pair of smallest members) among those that fit the capacity. When
/// no pair fits before r groups remain, the start is expert i in group i mod r instead. O(n^3) time, n x n
/// memory.
inline void agglomerative_start(const host_context& ctx, const partition_problem& p, std::int64_t* labels) {
  const index_t n = p.n, r = p.groups;
  host_workspace<double> between(ctx, static_cast<std::size_t>(n * n));
  host_workspace<index_t> size(ctx, static_cast<std::size_t>(n));
  std::copy(p.dist, p.dist + n * n, between.data());
  for (index_t i = 0; i < n; ++i) {
    labels[i] = i;
    size[static_cast<std::size_t>(i)] = 1;
  }
  // Alive groups are named by their smallest member, and merging h into g < h keeps that true.
  for (index_t count = n; count > r; --count) {
    double best = partition_infinity;
    index_t bg = -1, bh = -1;
    for (index_t g = 0; g < n; ++g) {
      if (size[static_cast<std::size_t>(g)] == 0) continue;
      for (index_t h = g + 1; h < n; ++h) {
        if (size[static_cast<std::size_t>(h)] == 0 ||
            size[static_cast<std::size_t>(g)] + size[static_cast<std::size_t>(h)] > p.capacity)
          continue;
        if (between[static_cast<std::size_t>(g * n + h)] < best) {
          best = between[static_cast<std::size_t>(g * n + h)];
          bg = g;
          bh = h;
        }
      }
    }
    if (bg < 0) {
      for (index_t i = 0; i < n; ++i) labels[i] = i % r;
      return;
    }
    for (index_t x = 0; x < n; ++x) {
      between[static_cast<std::size_t>(bg * n + x)] += between[static_cast<std::size_t>(bh * n + x)];
      between[static_cast<std::size_t>(x * n + bg)] = between[static_cast<std::size_t>(bg * n + x)];
    }
    size[static_cast<std::size_t>(bg)] += size[static_cast<std::size_t>(bh)];
    size[static_cast<std::size_t>(bh)] = 0;
    for (index_t i = 0; i < n; ++i)
      if (labels[i] == bh) labels[i] = bg;
  }
}

/// Starts 1..: a random balanced assignment, expert perm[q] in group q mod r for a uniform permutation.
inline void random_balanced_start(const partition_problem& p, random_generator& rng, std::int64_t* labels,
                                  index_t* order) {
  for (index_t i = 0; i < p.n; ++i) order[i] = i;
  rng.shuffle(order, order + p.n);
  for (index_t q = 0; q < p.n; ++q) labels[order[q]] = q % p.groups;
}

/// A lower bound on W over every partition into r groups of at most `capacity` experts: the larger of two,
/// each lowered by a bound on its own and on W's rounding error (docs/partition.md, "Lower bound").
///  * Pairs: a partition has at least P = sum_g C(n_g, 2) >= P_min same-group pairs, P_min that of the most
///    balanced sizes, and D >= 0, so W >= the sum of the P_min smallest D_ij (i < j).
///  * Experts: with k_i + 1 the size of expert i's group, W = 1/2 sum_i (sum of D_ij over i's group mates)
///    >= sum_i c_i(k_i), c_i(k) half the sum of the k smallest D_ij of row i, and sum_i 1 / (k_i + 1) = r
///    (each group adds 1). For every lambda, L(lambda) = sum_i min_k [c_i(k) + lambda / (k + 1)] - lambda r is
///    a lower bound (Lagrangian relaxation of that equality); it is concave, maximised by golden section.
inline double within_lower_bound(const host_context& ctx, const partition_problem& p) {
  const index_t n = p.n, r = p.groups;
  if (n < 2) return 0;
  // Pairs.
  const index_t q = n / r, extra = n % r;
  const index_t pairs_min = extra * ((q + 1) * q / 2) + (r - extra) * (q * (q - 1) / 2);
  const index_t all_pairs = n * (n - 1) / 2;
  host_workspace<double> values(ctx, static_cast<std::size_t>(std::max(all_pairs, n * n)));
  double pair_bound = 0;
  if (pairs_min > 0) {
    index_t c = 0;
    for (index_t i = 0; i < n; ++i)
      for (index_t j = i + 1; j < n; ++j) values[static_cast<std::size_t>(c++)] = p.d(i, j);
    double* first = values.data();
    std::nth_element(first, first + (pairs_min - 1), first + all_pairs);
    std::sort(first, first + pairs_min);
    for (index_t t = 0; t < pairs_min; ++t) pair_bound += first[t];
    pair_bound -= static_cast<double>(n * n + 16) * 2.0 * partition_roundoff * pair_bound;
  }
  // Experts: row i's sorted distances to the others, as prefix sums halved: c_i(k) at values[i * n + k].
  const index_t k_max = std::min(p.capacity, n - r + 1) - 1;
  for (index_t i = 0; i < n; ++i) {
    double* row = values.data() + i * n;
    index_t c = 0;
    for (index_t j = 0; j < n; ++j)
      if (j != i) row[1 + c++] = p.d(i, j);
    std::sort(row + 1, row + n);
    row[0] = 0;
    for (index_t k = 1; k < n; ++k) row[k] = row[k - 1] + 0.5 * row[k];
  }
  auto lagrangian = [&](double lambda) {
    double sum = 0, magnitude = 0;
    for (index_t i = 0; i < n; ++i) {
      const double* row = values.data() + i * n;
      double best = partition_infinity;
      for (index_t k = 0; k <= k_max; ++k) best = std::min(best, row[k] + lambda / static_cast<double>(k + 1));
      sum += best;
      magnitude += best;
    }
    magnitude += lambda * static_cast<double>(r);
    const double bound = sum - lambda * static_cast<double>(r);
    return bound - static_cast<double>(n * n + 16) * 2.0 * partition_roundoff * magnitude;
  };
  // Past lambda_high every expert takes k_max and L no longer rises (k_max + 1 >= N / r).
  double largest = 0;
  for (index_t i = 0; i < n; ++i) largest = std::max(largest, values[static_cast<std::size_t>(i * n + k_max)]);
  double low = 0, high = largest * static_cast<double>((k_max + 1) * (k_max + 1)) + 1.0;
  double expert_bound = std::max(lagrangian(low), lagrangian(high));
  const double golden = 0.6180339887498949;
  double x1 = high - golden * (high - low), x2 = low + golden * (high - low);
  double f1 = lagrangian(x1), f2 = lagrangian(x2);
  for (int step = 0; step < 80; ++step) {
    expert_bound = std::max(expert_bound, std::max(f1, f2));
    if (f1 < f2) {
      low = x1;
      x1 = x2;
      f1 = f2;
      x2 = low + golden * (high - low);
      f2 = lagrangian(x2);
    } else {
      high = x2;
      x2 = x1;
      f2 = f1;
      x1 = high - golden * (high - low);
      f1 = lagrangian(x1);
    }
  }
  expert_bound = std::max(expert_bound, std::max(f1, f2));
  return std::max(0.0, std::max(pair_bound, expert_bound));
}

/// What one method returns before the result is assembled: canonical labels, W, optimality and bookkeeping.
struct partition_outcome {
  double within = 0, within_lower_bound = 0;
  bool optimal = false;
  index_t best_restart = 0;
  std::int64_t iterations = 0;
};

/// Heuristic: params.restarts starts (0 agglomerative, the others random balanced, start s on stream s), each
/// improved by local_search and then params.kicks rounds of a few random swaps plus local_search, kept only
/// when W drops. The lowest W wins, ties to the earliest start. Starts run in parallel.
inline partition_outcome heuristic_partition(const host_context& ctx, const partition_params& params,
                                             const partition_problem& p, std::int64_t* labels) {
  const index_t n = p.n, r = p.groups, restarts = params.restarts;
  const int threads = static_cast<int>(std::min<index_t>(std::max(ctx.threads(), 1), restarts));
  host_workspace<std::int64_t> start_labels(ctx, static_cast<std::size_t>(restarts * n));
  host_workspace<double> start_within(ctx, static_cast<std::size_t>(restarts));
  host_workspace<std::int64_t> start_steps(ctx, static_cast<std::size_t>(restarts));
  host_workspace<index_t> relabel(ctx, static_cast<std::size_t>(n));
  agglomerative_start(ctx, p, start_labels.data());
  canonical_labels(n, start_labels.data(), relabel.data());  // group ids 0 .. r-1
  // Per-thread scratch: to_group (n x r), sizes (r), saved and trial labels (n each), an order (n).
  const std::size_t per_thread = static_cast<std::size_t>(n * r + r + 3 * n);
  host_workspace<double> to_group(ctx, static_cast<std::size_t>(threads) * static_cast<std::size_t>(n * r));
  host_workspace<std::int64_t> integers(ctx, static_cast<std::size_t>(threads) * (per_thread - static_cast<std::size_t>(n * r)));
  const index_t kick_swaps = std::max<index_t>(2, n / 16);
  parallel_for(restarts, threads, [&](index_t s, int thread) {
    std::int64_t* base = integers.data() + static_cast<std::size_t>(thread) * (per_thread - static_cast<std::size_t>(n * r));
    index_t* sizes = base;
    std::int64_t* saved = base + r;
    std::int64_t* trial = saved + n;
    index_t* order = trial + n;
    std::int64_t* current = start_labels.data() + s * n;
    random_generator rng(params.seed, static_cast<std::uint64_t>(s));
    if (s > 0) random_balanced_start(p, rng, current, order);
    local_search search(p, to_group.data() + static_cast<std::size_t>(thread) * static_cast<std::size_t>(n * r), sizes,
                        saved);
    double w = within_total(p, current);
    std::int64_t steps = search.run(current, w);
    // Kicks need two groups to swap between; with r = 1 or r = n there is only one partition anyway.
    for (index_t kick = 0; kick < params.kicks && r > 1 && r < n; ++kick) {
      std::copy(current, current + n, trial);
      for (index_t t = 0; t < kick_swaps; ++t) {
        const index_t i = static_cast<index_t>(rng.uniform_index(static_cast<std::uint64_t>(n)));
        index_t j = i;
        while (trial[j] == trial[i]) j = static_cast<index_t>(rng.uniform_index(static_cast<std::uint64_t>(n)));
        std::swap(trial[i], trial[j]);
      }
      double trial_w = within_total(p, trial);
      const std::int64_t trial_steps = search.run(trial, trial_w);
      if (trial_w < w) {
        std::copy(trial, trial + n, current);
        w = trial_w;
        steps += trial_steps + 1;
      }
    }
    start_within[static_cast<std::size_t>(s)] = w;
    start_steps[static_cast<std::size_t>(s)] = steps;
  });
  index_t best = 0;
  for (index_t s = 1; s < restarts; ++s)
    if (start_within[static_cast<std::size_t>(s)] < start_within[static_cast<std::size_t>(best)]) best = s;
  std::copy(start_labels.data() + best * n, start_labels.data() + (best + 1) * n, labels);
  partition_outcome out;
  out.best_restart = best;
  out.iterations = start_steps[static_cast<std::size_t>(best)];
  return out;
}

/// Both methods behind one call: the symmetrised copy of D, the method, canonical labels, W, the bound and
/// the result.
template <class T>
partition_result partition_host(const host_context& ctx, const partition_params& params, matrix_view<const T> d,
                                vector_view<std::int64_t> labels) {
  const index_t n = d.rows(), r = params.groups;
  host_workspace<double> dist(ctx, static_cast<std::size_t>(n * n));
  partition_problem p;
  p.n = n;
  p.groups = r;
  p.capacity = params.max_size > 0 ? std::min(params.max_size, n) : n;
  p.dist = dist.data();
  for (index_t i = 0; i < n; ++i) {
    p.trace += static_cast<double>(d(i, i));
    dist[static_cast<std::size_t>(i * n + i)] = 0;
    for (index_t j = i + 1; j < n; ++j) {
      // The mean, written so that an exactly symmetric pair gives back D_ij exactly.
      const double a = static_cast<double>(d(i, j)), b = static_cast<double>(d(j, i));
      const double mean = a + 0.5 * (b - a);
      dist[static_cast<std::size_t>(i * n + j)] = dist[static_cast<std::size_t>(j * n + i)] = mean;
      p.total += mean;
    }
  }
  MOECOMP_EXPECTS(std::isfinite(p.total) && std::isfinite(p.trace),
                  "partition_experts: distances must sum to a finite total, got ", p.total);

  host_workspace<std::int64_t> out(ctx, static_cast<std::size_t>(n));
  host_workspace<index_t> scratch(ctx, static_cast<std::size_t>(n));
  partition_result result;
  result.method = resolved_partition_method(params, n);
  partition_outcome outcome;
  const bool unique = r == 1 || r == n;  // one partition only
  if (unique) {
    for (index_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = r == 1 ? 0 : i;
  } else if (result.method == partition_method::exact) {
    outcome.iterations = exact_partition(ctx, p, out.data());
  } else {
    outcome = heuristic_partition(ctx, params, p, out.data());
  }
  canonical_labels(n, out.data(), scratch.data());
  const double w = within_total(p, out.data());
  const bool optimal = unique || result.method == partition_method::exact;
  const double bound = optimal ? w : std::min(w, within_lower_bound(ctx, p));
  for (index_t i = 0; i < n; ++i) labels[i] = out[static_cast<std::size_t>(i)];

  result.within = w;
  result.total = p.total;
  result.objective = 4.0 * w - 2.0 * p.total + p.trace;
  result.within_lower_bound = bound;
  result.optimal = optimal || bound >= w;
  result.lower_bound = result.optimal ? result.objective : 4.0 * bound - 2.0 * p.total + p.trace;
  result.best_restart = outcome.best_restart;
  result.iterations = outcome.iterations;
  result.criterion = result.objective - result.lower_bound;
  result.status = moecomp::status::ok;
  return result;
}

}  // namespace detail
}  // namespace similarity
MOECOMP_NAMESPACE_END
