#pragma once
// The working distance matrix of the NN-chain and generic algorithms: the condensed upper triangle over the
// clusters still active, compacted in place now and then.
//
// A merge drops one cluster. Dropped clusters stay in the matrix, marked by size 0 and skipped by the scans,
// until fewer than `compaction_fraction` of the matrix's clusters are active; then the matrix is rewritten
// over the active clusters only, in their original order. Keeping the order keeps every "lowest index wins"
// rule of the algorithms unchanged, while the scans and updates only ever touch a matrix of about the size
// of the active set (the scans' column reads are one cache line per row, so this is what they cost).
// Compacting reads and writes the matrix once, front to back, in place: over a run it moves about
// 1 / (1 - f^2) times the initial matrix, a few sequential passes, against the dozens of passes the
// scans make.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/cluster/detail/linkage_common.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {
namespace detail {

inline constexpr double compaction_fraction = 0.75;
/// Below this many clusters the matrix is small enough to live in cache: no more compaction.
inline constexpr index_t compaction_min_clusters = 256;

class active_matrix {
 public:
  /// d: condensed distances of n points (n (n - 1) / 2 doubles), owned by the caller, overwritten.
  active_matrix(const host_context& ctx, index_t n, double* d)
      : dim_(n),
        d_(d),
        row_base_(ctx, static_cast<std::size_t>(n)),
        size_(ctx, static_cast<std::size_t>(n)),
        slot_(ctx, static_cast<std::size_t>(n)),
        remap_(ctx, static_cast<std::size_t>(n)),
        kept_(ctx, static_cast<std::size_t>(n)) {
    fill_row_bases(n, row_base_.data());
    for (index_t i = 0; i < n; ++i) {
      size_.data()[i] = 1.0;
      slot_.data()[i] = i;
    }
  }

  index_t dim() const noexcept { return dim_; }
  double* data() const noexcept { return d_; }
  const index_t* row_bases() const noexcept { return row_base_.data(); }
  /// Cluster sizes by index, 0 for a dropped cluster (the mask of the scans).
  double* sizes() const noexcept { return size_.data(); }
  /// The original slot (see merge_step) of index i.
  index_t slot(index_t i) const noexcept { return slot_.data()[i]; }
  /// D(i, j), i < j.
  double& at(index_t i, index_t j) const noexcept { return d_[row_base_.data()[i] + j]; }
  /// D(i, j) for i != j in either order.
  double& between(index_t i, index_t j) const noexcept { return i < j ? at(i, j) : at(j, i); }

  /// Compacts when fewer than compaction_fraction of the indices are active. Returns whether it did; then
  /// new_index(old) maps every active old index to its new one.
  bool maybe_compact(index_t active) {
    const double fraction = static_cast<double>(active) / static_cast<double>(dim_);
    if (dim_ <= compaction_min_clusters || fraction >= compaction_fraction) return false;
    index_t* remap = remap_.data();
    double* size = size_.data();
    index_t* slot = slot_.data();
    const index_t* old_base = row_base_.data();
    // The order-preserving map old -> new, and the kept old indices in order.
    index_t* kept = kept_.data();
    index_t m = 0;
    for (index_t i = 0; i < dim_; ++i) {
      remap[i] = size[i] != 0.0 ? m : -1;
      if (size[i] != 0.0) kept[m++] = i;
    }
    // In place: pair (r, s) of the new matrix lands at or before the old position of its pair, and both
    // walks go forward, so nothing is overwritten before it is read.
    double* write = d_;
    for (index_t r = 0; r < m; ++r) {
      const double* row = d_ + old_base[kept[r]];
      for (index_t s = r + 1; s < m; ++s) *write++ = row[kept[s]];
    }
    for (index_t i = 0; i < dim_; ++i)
      if (remap[i] >= 0) {
        size[remap[i]] = size[i];
        slot[remap[i]] = slot[i];
      }
    dim_ = m;
    fill_row_bases(m, row_base_.data());
    return true;
  }
  /// After maybe_compact returned true: the new index of an old active index.
  index_t new_index(index_t old) const noexcept { return remap_.data()[old]; }

 private:
  index_t dim_;
  double* d_;
  host_workspace<index_t> row_base_;
  host_workspace<double> size_;
  host_workspace<index_t> slot_;
  host_workspace<index_t> remap_;
  host_workspace<index_t> kept_;
};

/// Merges x < y for i in [lo, hi) (i != x, y): D(i, y) = the Lance-Williams update, also stored in
/// below[i] for i < y. Dropped indices get whatever their entries give: nothing reads them.
template <linkage_method M>
MOECOMP_LINKAGE_NO_FP_CONTRACT_FUNCTION void merge_range(const active_matrix& a, index_t x, index_t y, double d_xy,
                                                         double n_x, double n_y, index_t lo, index_t hi,
                                                         double* below) noexcept {
  constexpr index_t prefetch_distance = 16;
  double* d = a.data();
  const index_t* rb = a.row_bases();
  const double* size = a.sizes();
  // i < x: D(i, x) and D(i, y) both sit in row i
  const index_t below_x = hi < x ? hi : x;
  for (index_t i = lo; i < below_x; ++i) {
    if (i + prefetch_distance < below_x) {
      MOECOMP_LINKAGE_PREFETCH(d + rb[i + prefetch_distance] + x);
      MOECOMP_LINKAGE_PREFETCH(d + rb[i + prefetch_distance] + y);
    }
    double* values = d + rb[i];
    below[i] = values[y] = lance_williams<M>(values[x], values[y], d_xy, n_x, n_y, size[i]);
  }
  // x < i < y: D(x, i) in row x (contiguous), D(i, y) in row i
  const double* row_x = d + rb[x];
  const index_t below_y = hi < y ? hi : y;
  for (index_t i = lo > x + 1 ? lo : x + 1; i < below_y; ++i) {
    if (i + prefetch_distance < below_y) MOECOMP_LINKAGE_PREFETCH(d + rb[i + prefetch_distance] + y);
    double* at = d + rb[i] + y;
    below[i] = *at = lance_williams<M>(row_x[i], *at, d_xy, n_x, n_y, size[i]);
  }
  // i > y: rows x and y, both contiguous
  double* row_y = d + rb[y];
  for (index_t i = lo > y + 1 ? lo : y + 1; i < hi; ++i)
    row_y[i] = lance_williams<M>(row_x[i], row_y[i], d_xy, n_x, n_y, size[i]);
}

}  // namespace detail
}  // namespace cluster
MOECOMP_NAMESPACE_END
