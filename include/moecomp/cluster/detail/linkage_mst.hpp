#pragma once
// Single linkage as a minimum spanning tree: Prim's algorithm from point 0, in O(n^2) time, exactly as
// scipy's mst_single_linkage. Each step adds the unmerged point y with the smallest key (its distance to the
// tree; the lowest index wins ties) and records the merge (x, y, key) where x is the point added just
// before; sorting these merges by height and relabelling (write_linkage_matrix) gives the dendrogram.
// The distances come from a callable, so the same loop serves condensed, square and point input.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/cluster/detail/linkage_common.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {
namespace detail {

/// `row_distances(x, targets, count, out)` writes the distance from point x to points targets[0 .. count)
/// (ascending, never x) into out[0 .. count). Fills steps[0 .. n - 1).
template <class RowDistances>
void prim_single_linkage(const host_context& ctx, index_t n, RowDistances&& row_distances, merge_step* steps) {
  if (n < 2) return;
  const auto un = static_cast<std::size_t>(n);
  host_workspace<index_t> rest(ctx, un);  // points not yet in the tree, ascending
  host_workspace<double> key(ctx, un);    // key[j]: distance from rest[j] to the tree
  host_workspace<double> dist(ctx, un);
  index_t count = n - 1;
  for (index_t j = 0; j < count; ++j) {
    rest[static_cast<std::size_t>(j)] = j + 1;
    key[static_cast<std::size_t>(j)] = infinity;
  }
  index_t x = 0;
  for (index_t k = 0; k < n - 1; ++k) {
    row_distances(x, static_cast<const index_t*>(rest.data()), count, dist.data());
    double* keys = key.data();
    const double* d = dist.data();
    for (index_t j = 0; j < count; ++j) keys[j] = keys[j] > d[j] ? d[j] : keys[j];
    double best = infinity;
    index_t pick = -1;
    scan_min(keys, count, 0, best, pick);
    if (pick < 0) pick = 0;  // every key is +inf: the lowest unmerged point joins at height inf
    const index_t y = rest[static_cast<std::size_t>(pick)];
    steps[k] = {x, y, keys[pick]};
    x = y;
    // keep `rest` ascending: the tie rule depends on the order of the scan
    const auto tail = static_cast<std::size_t>(count - pick - 1);
    std::memmove(rest.data() + pick, rest.data() + pick + 1, tail * sizeof(index_t));
    std::memmove(keys + pick, keys + pick + 1, tail * sizeof(double));
    --count;
  }
}

/// Enough elements in a row for its reads to be worth splitting over threads.
inline constexpr index_t prim_parallel_grain = 4096;

/// Row distances read from a condensed vector (any stride, float or double): D(x, i) for i in targets.
template <class T>
struct condensed_rows {
  vector_view<const T> condensed;
  const index_t* row_base;
  int threads;
  void operator()(index_t x, const index_t* targets, index_t count, double* out) const {
    const T* data = condensed.data();
    const index_t stride = condensed.stride();
    const index_t base_x = row_base[x];
    for_each_range(threads, 0, count, prim_parallel_grain, [&](index_t lo, index_t hi, int) {
      for (index_t j = lo; j < hi; ++j) {
        const index_t i = targets[j];
        const index_t at = i < x ? row_base[i] + x : base_x + i;
        out[j] = static_cast<double>(data[at * stride]);
      }
    });
  }
};

/// Row distances read from an n x n square matrix (its row x).
template <class T>
struct square_rows {
  matrix_view<const T> square;
  int threads;
  void operator()(index_t x, const index_t* targets, index_t count, double* out) const {
    const T* row = square.row_ptr(x);
    for_each_range(threads, 0, count, 4 * prim_parallel_grain, [&](index_t lo, index_t hi, int) {
      for (index_t j = lo; j < hi; ++j) out[j] = static_cast<double>(row[targets[j]]);
    });
  }
};

}  // namespace detail
}  // namespace cluster
MOECOMP_NAMESPACE_END
