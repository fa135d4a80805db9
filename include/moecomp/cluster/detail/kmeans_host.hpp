#pragma once
// Lloyd's k-means on the host, behind <moecomp/cluster/kmeans.hpp>: initialisation (greedy k-means++,
// random rows, given), the GEMM-based assignment, the centre update, empty-cluster re-seeding and restarts.
// Deterministic at any thread count: rows are cut into fixed tiles whose GEMMs are single-threaded, each
// row's argmin is independent of the others, and every sum runs in index order in double.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/detail/row_math.hpp>
#include <moecomp/cluster/kmeans_types.hpp>
#include <moecomp/cluster/detail/kmeans_rules.hpp>
#include <moecomp/cluster/detail/kmeans_transport.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/gemm.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#if defined(_OPENMP)
#include <omp.h>
#endif

MOECOMP_NAMESPACE_BEGIN
namespace cluster {
namespace detail {

using moecomp::detail::host_workspace;

/// Rows per GEMM tile. Fixed, so that every distance is computed the same way whichever thread computes it.
inline constexpr index_t kmeans_tile_rows = 256;

/// The inputs of one fit, checked.
template <class T>
struct kmeans_data {
  matrix_view<const T> x;
  const T* weights;  // n entries, or null for unit weights
  index_t n, d, k;
  double weight(index_t i) const noexcept { return weights ? static_cast<double>(weights[i]) : 1.0; }
};

/// ||row||^2 of each row of m, summed in double in column order, rounded to T.
template <class T>
void squared_row_norms(matrix_view<const T> m, T* out) {
  for (index_t i = 0; i < m.rows(); ++i) {
    const T* r = m.row_ptr(i);
    double s = 0;
    for (index_t j = 0; j < m.cols(); ++j) s += static_cast<double>(r[j]) * static_cast<double>(r[j]);
    out[i] = static_cast<T>(s);
  }
}

/// Runs body(first_row, rows, thread) over the fixed row tiles of n rows, in parallel over tiles.
template <class Body>
void for_each_row_tile(index_t n, int threads, Body&& body) {
  const index_t tiles = (n + kmeans_tile_rows - 1) / kmeans_tile_rows;
  const int used = static_cast<int>(std::min<index_t>(threads, tiles));
#if defined(_OPENMP)
  if (used > 1) {
#pragma omp parallel for num_threads(used) schedule(dynamic, 1)
    for (index_t t = 0; t < tiles; ++t) {
      const index_t first = t * kmeans_tile_rows;
      body(first, std::min(kmeans_tile_rows, n - first), omp_get_thread_num());
    }
    return;
  }
#endif
  (void)used;
  for (index_t t = 0; t < tiles; ++t) {
    const index_t first = t * kmeans_tile_rows;
    body(first, std::min(kmeans_tile_rows, n - first), 0);
  }
}

/// The assignment step: labels(i) = the j minimising ||c_j||^2 - 2 x_i . c_j (the squared distance less the
/// row's constant ||x_i||^2, as scikit-learn compares), ties to the lowest j. scratch: threads x tile x k.
template <class T>
void assign_labels(const kmeans_data<T>& data, int threads, const T* centers, const T* center_norms, T* scratch,
                   std::int64_t* labels) {
  const index_t k = data.k, d = data.d;
  for_each_row_tile(data.n, threads, [&](index_t first, index_t rows, int thread) {
    T* tile = scratch + static_cast<std::size_t>(thread) * static_cast<std::size_t>(kmeans_tile_rows * k);
    moecomp::detail::gemm_abt<T>(T(-2), data.x.row_ptr(first), data.x.row_stride(), centers, d, rows, k, d, tile, k);
    for (index_t r = 0; r < rows; ++r) {
      const T* dist = tile + r * k;
      T best = assignment_score(dist[0], center_norms[0]);
      index_t label = 0;
      for (index_t j = 1; j < k; ++j) {
        const T v = assignment_score(dist[j], center_norms[j]);
        if (beats(v, j, best, label)) {
          best = v;
          label = j;
        }
      }
      labels[first + r] = label;
    }
  });
}

/// ||x_i - c||^2 in double, directly (not through the GEMM form).
using moecomp::detail::squared_distance;

/// sum_i w_i ||x_i - c_label(i)||^2 in double, rows in order.
template <class T>
double inertia_of(const kmeans_data<T>& data, const T* centers, const std::int64_t* labels) {
  double total = 0;
  for (index_t i = 0; i < data.n; ++i)
    total += data.weight(i) * squared_distance(data.x.row_ptr(i), centers + labels[i] * data.d, data.d);
  return total;
}

/// Weighted sums of each cluster's rows (k x d, double) and the clusters' weights, each sum in row order.
/// The rows are listed per cluster (a stable counting sort of the labels: members holds n entries, offsets
/// k + 1), then the clusters are summed in parallel, each by one thread over its rows in index order: a whole
/// row at a time (a contiguous, vectorised pass over d columns into the cluster's sums), the same order of
/// additions for every entry, and so the same result, at any thread count.
template <class T>
void cluster_sums(const kmeans_data<T>& data, int threads, const std::int64_t* labels, double* sums,
                  double* cluster_weight, index_t* members, index_t* offsets) {
  const index_t n = data.n, d = data.d, k = data.k;
  std::fill(cluster_weight, cluster_weight + k, 0.0);
  std::fill(offsets, offsets + k + 1, index_t(0));
  for (index_t i = 0; i < n; ++i) {
    cluster_weight[labels[i]] += data.weight(i);
    ++offsets[labels[i] + 1];
  }
  for (index_t j = 0; j < k; ++j) offsets[j + 1] += offsets[j];
  for (index_t i = 0; i < n; ++i) members[offsets[labels[i]]++] = i;  // offsets[j] is now cluster j's end
  for (index_t j = k; j > 0; --j) offsets[j] = offsets[j - 1];
  offsets[0] = 0;
  auto cluster = [&](index_t j) {
    double* s = sums + j * d;
    std::fill(s, s + d, 0.0);
    for (index_t m = offsets[j]; m < offsets[j + 1]; ++m) {
      const index_t i = members[m];
      const double w = data.weight(i);
      const T* row = data.x.row_ptr(i);
      for (index_t c = 0; c < d; ++c) s[c] += w * static_cast<double>(row[c]);
    }
  };
  const int used = static_cast<int>(std::min<index_t>(threads, k));
#if defined(_OPENMP)
  if (used > 1 && n * d >= (index_t(1) << 16)) {
#pragma omp parallel for num_threads(used) schedule(dynamic, 1)
    for (index_t j = 0; j < k; ++j) cluster(j);
    return;
  }
#endif
  (void)used;
  for (index_t j = 0; j < k; ++j) cluster(j);
}

/// scikit-learn's re-seeding, made deterministic: each empty cluster, in increasing index, takes one of the
/// rows farthest from their current centre (squared distance in double, largest first, ties to the lowest
/// row), whose weight moves from its old cluster's sum to the empty one. Returns the clusters re-seeded.
template <class T>
index_t reseed_empty_clusters(const kmeans_data<T>& data, const T* centers, const std::int64_t* labels, double* sums,
                              double* cluster_weight, double* distance, index_t* order) {
  const index_t n = data.n, d = data.d, k = data.k;
  index_t empty = 0;
  for (index_t j = 0; j < k; ++j) empty += cluster_weight[j] == 0.0;
  if (empty == 0) return 0;
  for (index_t i = 0; i < n; ++i) {
    distance[i] = squared_distance(data.x.row_ptr(i), centers + labels[i] * d, d);
    order[i] = i;
  }
  std::partial_sort(order, order + empty, order + n, [distance](index_t a, index_t b) {
    return distance[a] > distance[b] || (distance[a] == distance[b] && a < b);
  });
  index_t next = 0;
  for (index_t j = 0; j < k; ++j) {
    if (cluster_weight[j] != 0.0) continue;
    const index_t i = order[next++];
    const double w = data.weight(i);
    const T* row = data.x.row_ptr(i);
    double* from = sums + labels[i] * d;
    double* to = sums + j * d;
    for (index_t c = 0; c < d; ++c) {
      from[c] -= w * static_cast<double>(row[c]);
      to[c] = w * static_cast<double>(row[c]);
    }
    cluster_weight[labels[i]] -= w;
    cluster_weight[j] = w;
  }
  return empty;
}

/// k distinct rows, uniformly: the first k of a partial Fisher-Yates shuffle.
template <class T>
void random_rows_init(const kmeans_data<T>& data, random_generator& rng, index_t* pick, T* centers) {
  for (index_t i = 0; i < data.n; ++i) pick[i] = i;
  for (index_t j = 0; j < data.k; ++j) {
    const auto r = j + static_cast<index_t>(rng.uniform_index(static_cast<std::uint64_t>(data.n - j)));
    std::swap(pick[j], pick[r]);
    std::copy(data.x.row_ptr(pick[j]), data.x.row_ptr(pick[j]) + data.d, centers + j * data.d);
  }
}

/// The scratch of k-means++: squared distances of every row to the closest centre so far and to each
/// candidate, and the candidates' rows.
template <class T>
struct kmeans_pp_scratch {
  double* closest;      // n
  double* trial_dist;   // trials x n
  double* cumulative;   // n
  T* candidate_rows;    // trials x d
  T* candidate_norms;   // trials
  T* x_norms;           // n
  T* tile;              // threads x tile x trials
};

/// dist(t, i) = max(0, ||x_i||^2 + ||p_t||^2 - 2 x_i . p_t) for `count` points p (GEMM form, in T).
template <class T>
void distances_to_points(const kmeans_data<T>& data, int threads, const T* points, const T* point_norms, index_t count,
                         const T* x_norms, T* scratch, double* out) {
  const index_t d = data.d, n = data.n;
  for_each_row_tile(n, threads, [&](index_t first, index_t rows, int thread) {
    T* tile = scratch + static_cast<std::size_t>(thread) * static_cast<std::size_t>(kmeans_tile_rows * count);
    moecomp::detail::gemm_abt<T>(T(-2), data.x.row_ptr(first), data.x.row_stride(), points, d, rows, count, d, tile,
                                 count);
    for (index_t r = 0; r < rows; ++r)
      for (index_t t = 0; t < count; ++t) {
        out[t * n + first + r] = gemm_form_distance(tile[r * count + t], x_norms[first + r], point_norms[t]);
      }
  });
}

/// Greedy k-means++ (scikit-learn's _kmeans_plusplus): the first centre uniformly among the rows; then, for
/// each next centre, `trials` candidates drawn with probability w_i D(x_i)^2 (inverse CDF on the running sum
/// in double), and the one whose addition gives the lowest potential sum_i w_i min(D_i, d(x_i, cand))^2
/// wins (ties to the earliest draw).
template <class T>
void kmeans_plus_plus_init(const kmeans_data<T>& data, int threads, index_t trials, random_generator& rng,
                           const kmeans_pp_scratch<T>& s, T* centers) {
  const index_t n = data.n, d = data.d;
  const auto first = static_cast<index_t>(rng.uniform_index(static_cast<std::uint64_t>(n)));
  std::copy(data.x.row_ptr(first), data.x.row_ptr(first) + d, centers);
  T first_norm;
  squared_row_norms(matrix_view<const T>(centers, 1, d), &first_norm);
  distances_to_points(data, threads, centers, &first_norm, 1, s.x_norms, s.tile, s.closest);
  double potential = 0;
  for (index_t i = 0; i < n; ++i) potential += data.weight(i) * s.closest[i];
  for (index_t c = 1; c < data.k; ++c) {
    double running = 0;
    for (index_t i = 0; i < n; ++i) {
      running += data.weight(i) * s.closest[i];
      s.cumulative[i] = running;
    }
    for (index_t t = 0; t < trials; ++t) {
      const double target = rng.uniform<double>() * potential;
      // searchsorted(cumulative, target) (side left), clipped to n - 1, as scikit-learn.
      index_t id = static_cast<index_t>(std::lower_bound(s.cumulative, s.cumulative + n, target) - s.cumulative);
      id = std::min(id, n - 1);
      std::copy(data.x.row_ptr(id), data.x.row_ptr(id) + d, s.candidate_rows + t * d);
    }
    squared_row_norms(matrix_view<const T>(s.candidate_rows, trials, d), s.candidate_norms);
    distances_to_points(data, threads, s.candidate_rows, s.candidate_norms, trials, s.x_norms, s.tile, s.trial_dist);
    index_t best = 0;
    double best_potential = std::numeric_limits<double>::infinity();
    for (index_t t = 0; t < trials; ++t) {
      double* dist = s.trial_dist + t * n;
      double pot = 0;
      for (index_t i = 0; i < n; ++i) {
        dist[i] = std::min(dist[i], s.closest[i]);
        pot += data.weight(i) * dist[i];
      }
      if (pot < best_potential) {
        best_potential = pot;
        best = t;
      }
    }
    potential = best_potential;
    std::copy(s.trial_dist + best * n, s.trial_dist + (best + 1) * n, s.closest);
    std::copy(s.candidate_rows + best * d, s.candidate_rows + (best + 1) * d, centers + c * d);
  }
}

/// The host's assignment step with size bounds: the costs w_i ||x_i - c_j||^2 from one GEMM per row tile
/// (the GEMM form in T, clamped at 0, then in double), then the exact transportation problem
/// (kmeans_transport.hpp).
template <class T>
struct size_bounded_assignment {
  size_bounded_transport transport;
  host_workspace<T> x_norms;

  size_bounded_assignment(const host_context& ctx, const kmeans_data<T>& data, index_t lo, index_t hi)
      : transport(ctx, data.n, data.k, lo, hi), x_norms(ctx, static_cast<std::size_t>(data.n)) {
    squared_row_norms(data.x, x_norms.data());
  }

  /// Solves the assignment step for `centers`; writes labels and returns the relative duality gap.
  double solve(const host_context& ctx, const kmeans_data<T>& data, int threads, const T* centers,
               const T* center_norms, T* scratch, std::int64_t* labels) {
    const index_t d = data.d, k = data.k;
    for_each_row_tile(data.n, threads, [&](index_t first, index_t count, int thread) {
      T* tile = scratch + static_cast<std::size_t>(thread) * static_cast<std::size_t>(kmeans_tile_rows * k);
      moecomp::detail::gemm_abt<T>(T(-2), data.x.row_ptr(first), data.x.row_stride(), centers, d, count, k, d, tile, k);
      for (index_t r = 0; r < count; ++r) {
        const index_t i = first + r;
        double* row = transport.cost_row(i);
        const double w = data.weight(i);
        for (index_t j = 0; j < k; ++j)
          row[j] = w * gemm_form_distance(tile[r * k + j], x_norms[static_cast<std::size_t>(i)], center_norms[j]);
      }
    });
    return transport.solve(ctx, labels);
  }
};

/// One Lloyd run from the centres in `centers` (k x d, contiguous), scikit-learn's _kmeans_single_lloyd:
/// assign, update (re-seeding empty clusters), stop when no label changed or the squared shift is <= tol;
/// when it stopped on the shift or the limit, a last assignment makes the labels match the centres.
template <class T>
kmeans_result lloyd_run(const host_context& ctx, const kmeans_params& params, const kmeans_data<T>& data,
                        double scaled_tolerance, T* centers, std::int64_t* labels) {
  const index_t n = data.n, d = data.d, k = data.k;
  const int threads = std::max(1, ctx.threads());
  host_workspace<T> center_norms(ctx, static_cast<std::size_t>(k));
  host_workspace<T> scratch(ctx, static_cast<std::size_t>(threads) * static_cast<std::size_t>(kmeans_tile_rows * k));
  host_workspace<std::int64_t> previous(ctx, static_cast<std::size_t>(n));
  host_workspace<double> sums(ctx, static_cast<std::size_t>(k * d)), cluster_weight(ctx, static_cast<std::size_t>(k));
  host_workspace<double> distance(ctx, static_cast<std::size_t>(n));
  host_workspace<index_t> order(ctx, static_cast<std::size_t>(n));
  host_workspace<index_t> members(ctx, static_cast<std::size_t>(n)), offsets(ctx, static_cast<std::size_t>(k + 1));
  kmeans_result result;
  result.status = status::iteration_limit;
  bool labels_settled = false;
  const bool bounded = has_size_bounds(params);
  std::optional<size_bounded_assignment<T>> transport;
  if (bounded) transport.emplace(ctx, data, params.size_min, params.size_max > 0 ? params.size_max : n);
  auto assign = [&] {
    squared_row_norms(matrix_view<const T>(centers, k, d), center_norms.data());
    if (bounded)
      result.assignment_gap = std::max(
          result.assignment_gap, transport->solve(ctx, data, threads, centers, center_norms.data(), scratch.data(), labels));
    else
      assign_labels(data, threads, centers, center_norms.data(), scratch.data(), labels);
  };
  for (index_t it = 0; it < params.max_iterations; ++it) {
    assign();
    cluster_sums(data, threads, labels, sums.data(), cluster_weight.data(), members.data(), offsets.data());
    result.reseeded +=
        reseed_empty_clusters(data, centers, labels, sums.data(), cluster_weight.data(), distance.data(), order.data());
    double shift = 0;
    for (index_t j = 0; j < k; ++j) {
      const double w = cluster_weight[static_cast<std::size_t>(j)];
      for (index_t c = 0; c < d; ++c) {
        const T updated = centre_coordinate<T>(sums[static_cast<std::size_t>(j * d + c)], w);
        const double move = static_cast<double>(updated) - static_cast<double>(centers[j * d + c]);
        shift += move * move;
        centers[j * d + c] = updated;
      }
    }
    result.iterations = it + 1;
    result.criterion = shift;
    if (it > 0 && std::equal(labels, labels + n, previous.data())) {
      result.status = status::ok;
      labels_settled = true;
      break;
    }
    if (shift <= scaled_tolerance) {
      result.status = status::ok;
      break;
    }
    std::copy(labels, labels + n, previous.data());
  }
  if (!labels_settled) assign();
  result.inertia = inertia_of(data, centers, labels);
  return result;
}

/// tolerance x the mean over features of the population variance of x (scikit-learn's _tolerance), in
/// double, each column's two passes in row order.
template <class T>
double scaled_tolerance(const kmeans_data<T>& data, double tolerance) {
  if (tolerance == 0) return 0;
  double total = 0;
  for (index_t c = 0; c < data.d; ++c) {
    double mean = 0;
    for (index_t i = 0; i < data.n; ++i) mean += static_cast<double>(data.x(i, c));
    mean /= static_cast<double>(data.n);
    double var = 0;
    for (index_t i = 0; i < data.n; ++i) {
      const double t = static_cast<double>(data.x(i, c)) - mean;
      var += t * t;
    }
    total += var / static_cast<double>(data.n);
  }
  return tolerance * total / static_cast<double>(data.d);
}

/// All runs; the best one's centres and labels end in `centers` / `labels`, its sizes in `sizes`.
template <class T>
kmeans_result kmeans_host(const host_context& ctx, const kmeans_params& params, const kmeans_data<T>& data,
                          matrix_view<T> centers, vector_view<std::int64_t> labels, vector_view<index_t> sizes) {
  const index_t n = data.n, d = data.d, k = data.k;
  const int threads = std::max(1, ctx.threads());
  const double tol = scaled_tolerance(data, params.tolerance);
  const index_t trials = resolved_local_trials(params);
  host_workspace<T> run_centers(ctx, static_cast<std::size_t>(k * d)), best_centers(ctx, static_cast<std::size_t>(k * d));
  host_workspace<std::int64_t> run_labels(ctx, static_cast<std::size_t>(n)), best_labels(ctx, static_cast<std::size_t>(n));
  const bool plus_plus = params.init == kmeans_init::kmeans_plus_plus;
  host_workspace<index_t> pick(ctx, params.init == kmeans_init::random_rows ? static_cast<std::size_t>(n) : 0);
  host_workspace<double> pp_doubles(ctx, plus_plus ? static_cast<std::size_t>((trials + 2) * n) : 0);
  host_workspace<T> pp_values(ctx, plus_plus ? static_cast<std::size_t>(trials * d + trials + n) +
                                                   static_cast<std::size_t>(threads) *
                                                       static_cast<std::size_t>(kmeans_tile_rows * trials)
                                             : 0);
  kmeans_pp_scratch<T> pp{};
  if (plus_plus) {
    pp = {pp_doubles.data(), pp_doubles.data() + n, pp_doubles.data() + (trials + 1) * n, pp_values.data(),
          pp_values.data() + trials * d, pp_values.data() + trials * d + trials,
          pp_values.data() + trials * d + trials + n};
    squared_row_norms(data.x, pp.x_norms);
  }
  kmeans_result best;
  for (index_t run = 0; run < params.restarts; ++run) {
    random_generator rng(params.seed, static_cast<std::uint64_t>(run));
    switch (params.init) {
      case kmeans_init::given:
        for (index_t j = 0; j < k; ++j) std::copy(centers.row_ptr(j), centers.row_ptr(j) + d, run_centers.data() + j * d);
        break;
      case kmeans_init::random_rows: random_rows_init(data, rng, pick.data(), run_centers.data()); break;
      case kmeans_init::kmeans_plus_plus:
        kmeans_plus_plus_init(data, threads, trials, rng, pp, run_centers.data());
        break;
    }
    kmeans_result r = lloyd_run(ctx, params, data, tol, run_centers.data(), run_labels.data());
    r.best_run = run;
    if (run == 0 || r.inertia < best.inertia) {
      best = r;
      std::copy(run_centers.data(), run_centers.data() + k * d, best_centers.data());
      std::copy(run_labels.data(), run_labels.data() + n, best_labels.data());
    }
  }
  for (index_t j = 0; j < k; ++j) std::copy(best_centers.data() + j * d, best_centers.data() + (j + 1) * d, centers.row_ptr(j));
  for (index_t j = 0; j < k; ++j) sizes[j] = 0;
  for (index_t i = 0; i < n; ++i) {
    labels[i] = best_labels[static_cast<std::size_t>(i)];
    ++sizes[best_labels[static_cast<std::size_t>(i)]];
  }
  return best;
}

}  // namespace detail
}  // namespace cluster
MOECOMP_NAMESPACE_END
