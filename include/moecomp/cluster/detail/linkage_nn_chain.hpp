#pragma once
// The nearest-neighbour chain algorithm for the reducible linkages (complete, average, weighted, ward), O(n^2)
// time on the condensed matrix, with the decisions of scipy's nn_chain:
//  * the chain starts at the lowest active cluster and grows by the nearest neighbour of its last element;
//    the search starts from the chain's previous element and only a strictly smaller distance replaces it,
//    scanning indices in ascending order (so on a tie the previous element wins, then the lowest index);
//  * when the last two elements are mutual nearest neighbours, x < y merge at their distance: slot y keeps
//    the new cluster, slot x is dropped, and D(i, y) is updated with the Lance-Williams formula.
// Merges are recorded as slots and sorted/relabelled afterwards (write_linkage_matrix).
//
// How it is made fast without changing a single decision:
//  * the matrix is an active_matrix, compacted as clusters drop out (linkage_active_matrix.hpp);
//  * a search does not scan: every active index keeps the two smallest entries of its row half (j > i) and
//    of its column half (j < i), which the merges keep exact from the values they compute anyway; a half is
//    rescanned only when a change leaves it unknown. The column half is the expensive one to scan (one
//    cache line per element), and keeping a runner-up means the common case, the chain's top losing its
//    nearest neighbour to a merge, needs no scan;
//  * merges and rescans of long ranges are split over ctx's threads, with results combined in index order.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/cluster/detail/linkage_active_matrix.hpp>
#include <moecomp/cluster/detail/linkage_common.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {
namespace detail {

/// The two smallest entries of a set of (value, index) pairs in lexicographic order. `first` is what
/// scipy's strict-minimum scan over ascending indices finds. `known` says how many of the two are exact: a
/// change can leave the second (1) or both (0) unknown. +inf entries may be left out (a search never picks
/// +inf), so "absent" is (+inf, none).
struct top_two {
  static constexpr index_t none = std::numeric_limits<index_t>::max();
  double first_value, second_value;
  index_t first_index, second_index;
  int known;

  static bool less(double v, index_t i, double w, index_t j) noexcept { return v < w || (v == w && i < j); }

  void reset() noexcept {
    first_value = second_value = infinity;
    first_index = second_index = none;
    known = 2;
  }
  void forget_second() noexcept {
    second_value = infinity;
    second_index = none;
    known = 1;
  }
  /// Adds an entry in any order.
  void insert(double v, index_t e) noexcept {
    if (less(v, e, first_value, first_index)) {
      second_value = first_value;
      second_index = first_index;
      first_value = v;
      first_index = e;
    } else if (less(v, e, second_value, second_index)) {
      second_value = v;
      second_index = e;
    }
  }
  /// Adds an entry during a scan in ascending index order (an equal value never displaces an earlier one).
  void offer(double v, index_t e) noexcept {
    if (v < second_value) {
      if (v < first_value) {
        second_value = first_value;
        second_index = first_index;
        first_value = v;
        first_index = e;
      } else {
        second_value = v;
        second_index = e;
      }
    }
  }
  /// Entry e (present before and after) changed to v.
  void change(index_t e, double v) noexcept {
    if (known == 0) return;
    if (e == first_index) {
      if (known == 2) {
        if (less(v, e, second_value, second_index)) {
          first_value = v;
        } else {  // the runner-up takes the lead; the new runner-up is unknown
          first_value = second_value;
          first_index = second_index;
          forget_second();
        }
      } else if (v <= first_value) {
        first_value = v;
      } else {
        known = 0;
      }
      return;
    }
    if (known == 2 && e == second_index) {
      if (less(v, e, first_value, first_index)) {
        second_value = first_value;
        second_index = first_index;
        first_value = v;
        first_index = e;
      } else if (v <= second_value) {
        second_value = v;
      } else {
        forget_second();
      }
      return;
    }
    if (less(v, e, first_value, first_index)) {
      second_value = first_value;  // the old first is exactly the runner-up now
      second_index = first_index;
      first_value = v;
      first_index = e;
      known = 2;
    } else if (known == 2 && less(v, e, second_value, second_index)) {
      second_value = v;
      second_index = e;
    }
  }
  /// Entry e is gone.
  void drop(index_t e) noexcept {
    if (known == 0) return;
    if (e == first_index) {
      if (known == 2) {
        first_value = second_value;
        first_index = second_index;
        forget_second();
      } else {
        known = 0;
      }
    } else if (known == 2 && e == second_index) {
      forget_second();
    }
  }
};

/// Offers values[0 .. count) (indices first, first + 1, ...) to t; chunks that cannot change it are skipped
/// after a vectorisable minimum.
inline void offer_values(top_two& t, const double* values, index_t count, index_t first) noexcept {
  for (index_t c = 0; c < count; c += scan_chunk) {
    const index_t chunk = count - c < scan_chunk ? count - c : scan_chunk;
    const double* v = values + c;
    double m = infinity;
    index_t ignored = -1;
    scan_min(v, chunk, 0, m, ignored);
    if (!(m < t.second_value)) continue;
    for (index_t k = 0; k < chunk; ++k) t.offer(v[k], first + c + k);
  }
}

/// Per active index, top_two of its row half and of its column half, kept exact through merges.
class nearest_neighbours {
 public:
  nearest_neighbours(const host_context& ctx, index_t n)
      : threads_(ctx.threads()),
        row_(ctx, static_cast<std::size_t>(n)),
        column_(ctx, static_cast<std::size_t>(n)),
        parts_(ctx, static_cast<std::size_t>(threads_ > 0 ? threads_ : 1)) {}

  /// Every summary from scratch, in one pass over the (fully active) matrix.
  void initialise(const active_matrix& a) noexcept {
    const index_t m = a.dim();
    top_two* row = row_.data();
    top_two* column = column_.data();
    for (index_t j = 0; j < m; ++j) column[j].reset();
    for (index_t i = 0; i < m; ++i) {
      const double* values = a.data() + a.row_bases()[i];
      row[i].reset();
      offer_values(row[i], values + i + 1, m - i - 1, i + 1);
      for (index_t j = i + 1; j < m; ++j) column[j].offer(values[j], i);  // rows come in ascending order
    }
  }

  /// NN(x) from (best, pick): the column half, then the row half, each replacing only when strictly smaller.
  void search(const active_matrix& a, index_t x, double& best, index_t& pick) {
    top_two& column = column_.data()[x];
    top_two& row = row_.data()[x];
    if (column.known == 0) column = combine(a, 0, x, gather_grain, [&](index_t lo, index_t hi) {
      return scan_column(a, x, lo, hi);
    });
    if (row.known == 0) row = combine(a, x + 1, a.dim(), stream_grain, [&](index_t lo, index_t hi) {
      return scan_row(a, x, lo, hi);
    });
    if (column.first_value < best) {
      best = column.first_value;
      pick = column.first_index;
    }
    if (row.first_value < best) {
      best = row.first_value;
      pick = row.first_index;
    }
  }

  /// Merges x < y: D(i, y) = the Lance-Williams update for every other index i (dropped indices too, with
  /// whatever they hold: nothing reads them, and skipping them would cost a branch per element), and keeps
  /// every summary exact: x's entries are gone, y's row and column summaries are rebuilt from the values
  /// just computed, and every other summary sees one changed entry, y.
  template <linkage_method M>
  void merge(const active_matrix& a, index_t x, index_t y, double d_xy, double n_x, double n_y) {
    column_.data()[y] = combine(a, 0, y, gather_grain, [&](index_t lo, index_t hi) {
      return merge_below<M>(a, x, y, d_xy, n_x, n_y, lo, hi);
    });
    row_.data()[y] = combine(a, y + 1, a.dim(), stream_grain, [&](index_t lo, index_t hi) {
      return merge_above<M>(a, x, y, d_xy, n_x, n_y, lo, hi);
    });
  }

  /// After a compaction of the matrix from old_dim indices: move the summaries to the new indices.
  void compact(const active_matrix& a, index_t old_dim) noexcept {
    top_two* row = row_.data();
    top_two* column = column_.data();
    // Known entries are active; the slots of unknown ones may name dropped indices and become absent.
    auto index = [&](index_t e) {
      const index_t r = e == top_two::none ? -1 : a.new_index(e);
      return r >= 0 ? r : top_two::none;
    };
    auto moved = [&](top_two t) {
      t.first_index = index(t.first_index);
      t.second_index = index(t.second_index);
      return t;
    };
    for (index_t i = 0; i < old_dim; ++i) {
      const index_t r = a.new_index(i);
      if (r < 0) continue;  // new indices never exceed old ones, so this forward copy is safe
      row[r] = moved(row[i]);
      column[r] = moved(column[i]);
    }
  }

 private:
  static constexpr index_t prefetch_distance = 16;
  /// Parallel below these lengths costs more than it saves: gathers (a cache miss each), contiguous streams.
  static constexpr index_t gather_grain = 2048;
  static constexpr index_t stream_grain = 16384;

  /// Runs part(lo, hi) -> top_two over [begin, end), in parallel ranges when long, and combines the parts.
  /// Summaries of ranges scanned with offer() may name dropped indices at +inf; those become absent.
  template <class Part>
  top_two combine(const active_matrix& a, index_t begin, index_t end, index_t grain, Part&& part) {
    top_two* parts = parts_.data();
    const int count = for_each_range(threads_, begin, end, grain,
                                     [&](index_t lo, index_t hi, int p) { parts[p] = part(lo, hi); });
    top_two t = parts[0];
    for (int p = 1; p < count; ++p) {
      t.insert(parts[p].first_value, parts[p].first_index);
      t.insert(parts[p].second_value, parts[p].second_index);
    }
    const double* size = a.sizes();
    if (t.second_index != top_two::none && size[t.second_index] == 0.0) {
      t.second_value = infinity;
      t.second_index = top_two::none;
    }
    if (t.first_index != top_two::none && size[t.first_index] == 0.0) {
      t.first_value = t.second_value;
      t.first_index = t.second_index;
      t.second_value = infinity;
      t.second_index = top_two::none;
    }
    t.known = 2;
    return t;
  }

  /// top_two of D(i, x) over active i in [lo, hi), i < x: one element per row, gathered with prefetching.
  static top_two scan_column(const active_matrix& a, index_t x, index_t lo, index_t hi) noexcept {
    top_two t;
    t.reset();
    const double* d = a.data();
    const index_t* rb = a.row_bases();
    const double* size = a.sizes();
    double buffer[scan_chunk];
    for (index_t i = lo; i < hi; i += scan_chunk) {
      const index_t chunk = hi - i < scan_chunk ? hi - i : scan_chunk;
      for (index_t c = 0; c < chunk; ++c) {
        if (i + c + prefetch_distance < hi) MOECOMP_LINKAGE_PREFETCH(d + rb[i + c + prefetch_distance] + x);
        const double value = d[rb[i + c] + x];
        buffer[c] = size[i + c] != 0.0 ? value : infinity;
      }
      offer_values(t, buffer, chunk, i);
    }
    return t;
  }

  /// top_two of D(x, j) over active j in [lo, hi), j > x: contiguous.
  static top_two scan_row(const active_matrix& a, index_t x, index_t lo, index_t hi) noexcept {
    top_two t;
    t.reset();
    const double* values = a.data() + a.row_bases()[x];
    const double* size = a.sizes();
    double buffer[scan_chunk];
    for (index_t j = lo; j < hi; j += scan_chunk) {
      const index_t chunk = hi - j < scan_chunk ? hi - j : scan_chunk;
      for (index_t c = 0; c < chunk; ++c) buffer[c] = size[j + c] != 0.0 ? values[j + c] : infinity;
      offer_values(t, buffer, chunk, j);
    }
    return t;
  }

  /// The merge for i in [lo, hi), i < y: new D(i, y); returns their top_two (y's new column summary).
  template <linkage_method M>
  MOECOMP_LINKAGE_NO_FP_CONTRACT_FUNCTION top_two merge_below(const active_matrix& a, index_t x, index_t y,
                                                              double d_xy, double n_x, double n_y, index_t lo,
                                                              index_t hi) noexcept {
    double* d = a.data();
    const index_t* rb = a.row_bases();
    const double* size = a.sizes();
    top_two* row = row_.data();
    top_two* column = column_.data();
    top_two column_y;
    column_y.reset();
    // i < x: D(i, x) and D(i, y) both sit in row i
    const index_t below_x = hi < x ? hi : x;
    for (index_t i = lo; i < below_x; ++i) {
      if (i + prefetch_distance < below_x) {
        MOECOMP_LINKAGE_PREFETCH(d + rb[i + prefetch_distance] + x);
        MOECOMP_LINKAGE_PREFETCH(d + rb[i + prefetch_distance] + y);
      }
      double* values = d + rb[i];
      const double v = lance_williams<M>(values[x], values[y], d_xy, n_x, n_y, size[i]);
      values[y] = v;
      if (size[i] == 0.0) continue;
      column_y.offer(v, i);
      row[i].drop(x);
      row[i].change(y, v);
    }
    // x < i < y: D(x, i) in row x (contiguous), D(i, y) in row i
    const double* row_x = d + rb[x];
    for (index_t i = lo > x + 1 ? lo : x + 1; i < hi; ++i) {
      if (i + prefetch_distance < hi) MOECOMP_LINKAGE_PREFETCH(d + rb[i + prefetch_distance] + y);
      double* at = d + rb[i] + y;
      const double v = lance_williams<M>(row_x[i], *at, d_xy, n_x, n_y, size[i]);
      *at = v;
      if (size[i] == 0.0) continue;
      column_y.offer(v, i);
      column[i].drop(x);
      row[i].change(y, v);
    }
    return column_y;
  }

  /// The merge for i in [lo, hi), i > y: new D(y, i) (rows x and y, contiguous); returns their top_two
  /// (y's new row summary).
  template <linkage_method M>
  MOECOMP_LINKAGE_NO_FP_CONTRACT_FUNCTION top_two merge_above(const active_matrix& a, index_t x, index_t y,
                                                              double d_xy, double n_x, double n_y, index_t lo,
                                                              index_t hi) noexcept {
    double* d = a.data();
    const index_t* rb = a.row_bases();
    const double* size = a.sizes();
    top_two* column = column_.data();
    const double* row_x = d + rb[x];
    double* row_y = d + rb[y];
    for (index_t i = lo; i < hi; ++i) row_y[i] = lance_williams<M>(row_x[i], row_y[i], d_xy, n_x, n_y, size[i]);
    for (index_t i = lo; i < hi; ++i) {
      if (size[i] == 0.0) continue;
      column[i].drop(x);
      column[i].change(y, row_y[i]);
    }
    return scan_row(a, y, lo, hi);
  }

  int threads_;
  host_workspace<top_two> row_;
  host_workspace<top_two> column_;
  host_workspace<top_two> parts_;
};

/// d: the condensed distances (n (n - 1) / 2 doubles), destroyed. Fills steps[0 .. n - 1) with slot merges.
template <linkage_method M>
void nn_chain_linkage(const host_context& ctx, index_t n, double* d, merge_step* steps) {
  if (n < 2) return;
  active_matrix a(ctx, n, d);
  nearest_neighbours nn(ctx, n);
  nn.initialise(a);
  host_workspace<index_t> chain(ctx, static_cast<std::size_t>(n));
  index_t* ch = chain.data();
  index_t chain_length = 0;
  index_t first_active = 0;  // only lower indices are ever dropped, so this only moves up

  for (index_t k = 0; k < n - 1; ++k) {
    double* size = a.sizes();
    if (chain_length == 0) {
      while (size[first_active] == 0.0) ++first_active;
      ch[0] = first_active;
      chain_length = 1;
    }
    index_t x, y;
    double current_min;
    for (;;) {
      x = ch[chain_length - 1];
      if (chain_length > 1) {
        y = ch[chain_length - 2];
        current_min = a.between(x, y);
      } else {
        y = -1;
        current_min = infinity;
      }
      nn.search(a, x, current_min, y);
      if (y < 0) {
        // every distance from x is +inf (scipy rejects infinite input): take the lowest other active index
        y = first_active != x ? first_active : x + 1;
        while (size[y] == 0.0 || y == x) ++y;
      }
      if (chain_length > 1 && y == ch[chain_length - 2]) break;
      ch[chain_length++] = y;
    }
    chain_length -= 2;
    if (x > y) {
      const index_t t = x;
      x = y;
      y = t;
    }
    const double n_x = size[x], n_y = size[y];
    steps[k] = {a.slot(x), a.slot(y), current_min};
    size[x] = 0.0;
    size[y] = n_x + n_y;
    nn.merge<M>(a, x, y, current_min, n_x, n_y);
    const index_t old_dim = a.dim();
    if (a.maybe_compact(n - k - 1)) {
      nn.compact(a, old_dim);
      for (index_t c = 0; c < chain_length; ++c) ch[c] = a.new_index(ch[c]);
      first_active = 0;
    }
  }
}

}  // namespace detail
}  // namespace cluster
MOECOMP_NAMESPACE_END
