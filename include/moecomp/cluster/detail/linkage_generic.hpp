#pragma once
// Mullner's generic clustering algorithm (arXiv:1109.2378, "Generic_linkage"), used for centroid and median,
// whose merge heights need not be monotone (and, in low-memory mode, for ward). It follows scipy's
// fast_linkage step for step, including its binary heap, so the merge order (and the handling of equal
// distances) is the same as scipy's:
//  * every slot x < n - 1 keeps a candidate nearest neighbour among higher slots and a lower bound of that
//    distance in a min-heap;
//  * the heap's top is accepted when its bound equals the current distance to its candidate, otherwise its
//    true nearest neighbour above it is recomputed (lowest index on ties) and the heap updated;
//  * x < y merge into slot y (new id n + k); candidates pointing at x move to y; bounds of slots below y
//    drop to their new distance to y where it is smaller; y's own neighbour above it is recomputed.
// The distances come from an "oracle": the condensed matrix with Lance-Williams updates (compacted as
// clusters drop out, see linkage_active_matrix.hpp), or, in low-memory mode, cluster centres. Its interface,
// in the oracle's index space (ascending indices = ascending slots, so every tie rule is unchanged):
//   index_t dim()                                   size of the index space
//   bool active(index_t i)
//   index_t slot(index_t i)                         the original slot of index i
//   double distance(index_t i, index_t j)           i < j, both active
//   index_t nearest_above(index_t x, double& dist)  lowest-index nearest active index above x (its distance
//                                                   in dist); +inf distances count; -1 if none is active
//   void merge(x, y, d_xy, double* below)           x < y: y becomes the merged cluster, x inactive;
//                                                   below[z] = distance(z, y) for every active z < y
//   bool maybe_compact(index_t active)              may renumber the active indices (order kept) ...
//   index_t new_index(index_t old)                  ... and then maps old to new
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/cluster/detail/linkage_active_matrix.hpp>
#include <moecomp/cluster/detail/linkage_common.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {
namespace detail {

/// scipy's Heap (cluster/_structures.pxi): a binary min-heap of values keyed 0 .. size-1, compared by value
/// only, with the same sift rules, so that equal values come out in the same order as in scipy.
class linkage_heap {
 public:
  linkage_heap(const host_context& ctx, const double* values, index_t size)
      : index_by_key_(ctx, static_cast<std::size_t>(size)),
        key_by_index_(ctx, static_cast<std::size_t>(size)),
        values_(ctx, static_cast<std::size_t>(size)),
        size_(size) {
    for (index_t k = 0; k < size; ++k) {
      index_by_key_[static_cast<std::size_t>(k)] = k;
      key_by_index_[static_cast<std::size_t>(k)] = k;
      values_[static_cast<std::size_t>(k)] = values[k];
    }
    for (index_t i = size / 2 - 1; i >= 0; --i) sift_down(i);
  }
  index_t min_key() const noexcept { return key_by_index_[0]; }
  double min_value() const noexcept { return values_[0]; }
  void remove_min() noexcept {
    swap(0, size_ - 1);
    --size_;
    sift_down(0);
  }
  /// Renames every key k still in the heap to rename(k) (positions, hence the order of ties, unchanged).
  template <class Rename>
  void rename_keys(Rename&& rename) noexcept {
    for (index_t i = 0; i < size_; ++i) {
      const index_t key = rename(key_by_index_[static_cast<std::size_t>(i)]);
      key_by_index_[static_cast<std::size_t>(i)] = key;
      index_by_key_[static_cast<std::size_t>(key)] = i;
    }
  }
  void change_value(index_t key, double value) noexcept {
    const index_t index = index_by_key_[static_cast<std::size_t>(key)];
    const double old = values_[static_cast<std::size_t>(index)];
    values_[static_cast<std::size_t>(index)] = value;
    if (value < old)
      sift_up(index);
    else
      sift_down(index);
  }

 private:
  void sift_up(index_t index) noexcept {
    index_t parent = (index - 1) >> 1;
    while (index > 0 && values_[static_cast<std::size_t>(parent)] > values_[static_cast<std::size_t>(index)]) {
      swap(index, parent);
      index = parent;
      parent = (index - 1) >> 1;
    }
  }
  void sift_down(index_t index) noexcept {
    index_t child = 2 * index + 1;
    while (child < size_) {
      if (child + 1 < size_ && values_[static_cast<std::size_t>(child + 1)] < values_[static_cast<std::size_t>(child)])
        ++child;
      if (values_[static_cast<std::size_t>(index)] > values_[static_cast<std::size_t>(child)]) {
        swap(index, child);
        index = child;
        child = 2 * index + 1;
      } else {
        break;
      }
    }
  }
  void swap(index_t i, index_t j) noexcept {
    const auto ui = static_cast<std::size_t>(i), uj = static_cast<std::size_t>(j);
    const double v = values_[ui];
    values_[ui] = values_[uj];
    values_[uj] = v;
    const index_t key_i = key_by_index_[ui], key_j = key_by_index_[uj];
    key_by_index_[ui] = key_j;
    key_by_index_[uj] = key_i;
    index_by_key_[static_cast<std::size_t>(key_i)] = j;
    index_by_key_[static_cast<std::size_t>(key_j)] = i;
  }

  host_workspace<index_t> index_by_key_;
  host_workspace<index_t> key_by_index_;
  host_workspace<double> values_;
  index_t size_;
};

/// Fills steps[0 .. n - 1) with slot merges in merge order (heights need not be monotone).
template <class Oracle>
void generic_linkage(const host_context& ctx, index_t n, Oracle& oracle, merge_step* steps) {
  if (n < 2) return;
  const auto un = static_cast<std::size_t>(n);
  host_workspace<index_t> neighbour_storage(ctx, un);
  host_workspace<double> min_dist_storage(ctx, un);
  host_workspace<double> below_storage(ctx, un);
  index_t* neighbour = neighbour_storage.data();
  double* min_dist = min_dist_storage.data();
  double* below = below_storage.data();
  for (index_t x = 0; x < n - 1; ++x) neighbour[x] = oracle.nearest_above(x, min_dist[x]);
  linkage_heap heap(ctx, min_dist, n - 1);

  for (index_t k = 0; k < n - 1; ++k) {
    const index_t top = oracle.dim() - 1;  // the highest index is always active and has no heap entry
    index_t x = 0, y = 0;
    double dist = 0.0;
    // Bounded like scipy's loop: at most n - k re-evaluations find the closest pair.
    for (index_t attempt = 0; attempt < n - k; ++attempt) {
      x = heap.min_key();
      dist = heap.min_value();
      y = neighbour[x];
      if (dist == oracle.distance(x, y)) break;
      y = oracle.nearest_above(x, dist);
      neighbour[x] = y;
      min_dist[x] = dist;
      heap.change_value(x, dist);
    }
    heap.remove_min();
    steps[k] = {oracle.slot(x), oracle.slot(y), dist};
    oracle.merge(x, y, dist, below);

    // Candidates that pointed at the dropped index x now point at y (a guess, checked when popped).
    for (index_t z = 0; z < x; ++z)
      if (oracle.active(z) && neighbour[z] == x) neighbour[z] = y;
    // Lower bounds drop to the new distance to y where it is smaller.
    for (index_t z = 0; z < y; ++z) {
      if (!oracle.active(z)) continue;
      if (below[z] < min_dist[z]) {
        neighbour[z] = y;
        min_dist[z] = below[z];
        heap.change_value(z, below[z]);
      }
    }
    if (y < top) {
      double d_y = infinity;
      const index_t z = oracle.nearest_above(y, d_y);
      if (z != -1) {
        neighbour[y] = z;
        min_dist[y] = d_y;
        heap.change_value(y, d_y);
      }
    }
    const index_t old_dim = oracle.dim();
    if (oracle.maybe_compact(n - k - 1)) {
      for (index_t i = 0; i < old_dim - 1; ++i) {
        const index_t r = oracle.new_index(i);
        if (r < 0) continue;  // new indices never exceed old ones: a forward copy is safe
        neighbour[r] = oracle.new_index(neighbour[i]);
        min_dist[r] = min_dist[i];
      }
      heap.rename_keys([&](index_t key) { return oracle.new_index(key); });
    }
  }
}

/// The generic algorithm's oracle over the condensed matrix (destroyed), Lance-Williams updates of method M.
template <linkage_method M>
class condensed_oracle {
 public:
  condensed_oracle(const host_context& ctx, index_t n, double* d) : threads_(ctx.threads()), matrix_(ctx, n, d) {}
  index_t dim() const noexcept { return matrix_.dim(); }
  bool active(index_t i) const noexcept { return matrix_.sizes()[i] != 0.0; }
  index_t slot(index_t i) const noexcept { return matrix_.slot(i); }
  double distance(index_t i, index_t j) const noexcept { return matrix_.at(i, j); }
  index_t nearest_above(index_t x, double& dist) const noexcept {
    dist = infinity;
    index_t pick = -1;
    const index_t m = matrix_.dim();
    const double* size = matrix_.sizes();
    scan_min_masked(matrix_.data() + matrix_.row_bases()[x] + x + 1, size + x + 1, m - x - 1, x + 1, dist, pick);
    if (pick < 0) {  // all +inf: the lowest active index above x, if any
      for (index_t i = x + 1; i < m; ++i)
        if (size[i] != 0.0) return i;
    }
    return pick;
  }
  void merge(index_t x, index_t y, double d_xy, double* below) {
    double* size = matrix_.sizes();
    const double n_x = size[x], n_y = size[y];
    size[x] = 0.0;
    size[y] = n_x + n_y;
    for_each_range(threads_, 0, matrix_.dim(), 4096, [&](index_t lo, index_t hi, int) {
      merge_range<M>(matrix_, x, y, d_xy, n_x, n_y, lo, hi, below);
    });
  }
  bool maybe_compact(index_t active) { return matrix_.maybe_compact(active); }
  index_t new_index(index_t old) const noexcept { return matrix_.new_index(old); }

 private:
  int threads_;
  active_matrix matrix_;
};

}  // namespace detail
}  // namespace cluster
MOECOMP_NAMESPACE_END
