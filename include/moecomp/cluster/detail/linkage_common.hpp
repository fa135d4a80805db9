#pragma once
// Pieces shared by the linkage algorithms: the condensed layout, scipy's Lance-Williams update formulas,
// the strict "first index of the minimum" scans, input validation, and the final stable sort + relabelling
// that turns a list of merges into scipy's linkage matrix.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/cluster/linkage_types.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/distance/distance_types.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__linux__)
#include <sys/mman.h>
#endif

MOECOMP_NAMESPACE_BEGIN
namespace cluster {
namespace detail {

using moecomp::detail::host_workspace;

inline constexpr double infinity = std::numeric_limits<double>::infinity();

using moecomp::detail::is_real_v;

/// One merge as an algorithm records it. Before relabelling, x and y are *slots*: slot i always holds the
/// cluster that contains original point i, so a union-find over points recovers the cluster ids.
struct merge_step {
  index_t x;
  index_t y;
  double height;
};

/// Row bases of the condensed upper triangle: D(i, j) = d[row_base[i] + j] for i < j (row_base[0] = -1).
inline void fill_row_bases(index_t n, index_t* row_base) noexcept {
  for (index_t i = 0; i < n; ++i) row_base[i] = n * i - i * (i + 1) / 2 - i - 1;
}

/// The pair (i, j), i < j, stored at position k of the condensed vector of n points (error messages only).
inline void condensed_pair(index_t n, index_t k, index_t& i, index_t& j) noexcept {
  i = 0;
  while (k >= n - 1 - i) {
    k -= n - 1 - i;
    ++i;
  }
  j = i + 1 + k;
}

/// n such that n (n - 1) / 2 == length, or -1 when length is not such a number. Length 0 gives n = 1.
inline index_t points_from_condensed_length(index_t length) noexcept {
  return distance::points_of_condensed_size(length);
}

// ---------------------------------------------------------------------------------------------------
// Lance-Williams updates: the distance from the merged cluster xy to cluster i, scipy's formulas in scipy's
// order of operations (_hierarchy_distance_update.pxi). Two deliberate differences, both only where scipy
// returns NaN: a negative square-root argument (rounding, or non-Euclidean input to ward / centroid /
// median) gives 0, and a NaN argument (inf - inf, from infinite or overflowing distances) gives +inf.

// scipy (built without FMA) rounds every product; a compiler that contracts a * b + c into one fused
// multiply-add changes the last bit of some updated distances, and on inputs with exact ties that can change
// which of two equal distances is seen first. So contraction is switched off where the updates are evaluated:
// by pragma inside the formulas for clang, by a function attribute on the loops that inline them for GCC
// (GCC has no block-scope switch, and inlining keeps the caller's setting). -ffp-contract=fast on clang's
// command line overrides the pragma; results then still agree with scipy to rounding.
#if defined(__clang__)
#define MOECOMP_LINKAGE_NO_FP_CONTRACT_BLOCK _Pragma("clang fp contract(off)")
#define MOECOMP_LINKAGE_NO_FP_CONTRACT_FUNCTION
#elif defined(__GNUC__)
#define MOECOMP_LINKAGE_NO_FP_CONTRACT_BLOCK
#define MOECOMP_LINKAGE_NO_FP_CONTRACT_FUNCTION __attribute__((optimize("fp-contract=off")))
#else
#define MOECOMP_LINKAGE_NO_FP_CONTRACT_BLOCK
#define MOECOMP_LINKAGE_NO_FP_CONTRACT_FUNCTION
#endif

inline double checked_sqrt(double argument) noexcept {
  if (argument >= 0.0) return std::sqrt(argument);
  return argument < 0.0 ? 0.0 : infinity;
}

template <linkage_method M>
inline double lance_williams(double d_xi, double d_yi, double d_xy, double n_x, double n_y, double n_i) noexcept {
  MOECOMP_LINKAGE_NO_FP_CONTRACT_BLOCK
  if constexpr (M == linkage_method::single) {
    (void)d_xy, (void)n_x, (void)n_y, (void)n_i;
    return d_yi < d_xi ? d_yi : d_xi;
  } else if constexpr (M == linkage_method::complete) {
    (void)d_xy, (void)n_x, (void)n_y, (void)n_i;
    return d_yi > d_xi ? d_yi : d_xi;
  } else if constexpr (M == linkage_method::average) {
    (void)d_xy, (void)n_i;
    return (n_x * d_xi + n_y * d_yi) / (n_x + n_y);
  } else if constexpr (M == linkage_method::weighted) {
    (void)d_xy, (void)n_x, (void)n_y, (void)n_i;
    return 0.5 * (d_xi + d_yi);
  } else if constexpr (M == linkage_method::ward) {
    const double t = 1.0 / (n_x + n_y + n_i);
    return checked_sqrt((n_i + n_x) * t * d_xi * d_xi + (n_i + n_y) * t * d_yi * d_yi - n_i * t * d_xy * d_xy);
  } else if constexpr (M == linkage_method::centroid) {
    (void)n_i;
    return checked_sqrt(((n_x * d_xi * d_xi + n_y * d_yi * d_yi) - (n_x * n_y) * d_xy * d_xy / (n_x + n_y)) /
                        (n_x + n_y));
  } else {
    static_assert(M == linkage_method::median, "unhandled linkage method");
    (void)n_x, (void)n_y, (void)n_i;
    return checked_sqrt(0.5 * (d_xi * d_xi + d_yi * d_yi) - 0.25 * d_xy * d_xy);
  }
}

/// Calls f(std::integral_constant<linkage_method, M>{}) for the runtime method m, so each algorithm is
/// instantiated once per method with the update formula inlined into its loops.
template <class F>
decltype(auto) dispatch_method(linkage_method m, F&& f) {
  switch (m) {
    case linkage_method::single: return f(std::integral_constant<linkage_method, linkage_method::single>{});
    case linkage_method::complete: return f(std::integral_constant<linkage_method, linkage_method::complete>{});
    case linkage_method::average: return f(std::integral_constant<linkage_method, linkage_method::average>{});
    case linkage_method::weighted: return f(std::integral_constant<linkage_method, linkage_method::weighted>{});
    case linkage_method::ward: return f(std::integral_constant<linkage_method, linkage_method::ward>{});
    case linkage_method::centroid: return f(std::integral_constant<linkage_method, linkage_method::centroid>{});
    case linkage_method::median: break;
  }
  return f(std::integral_constant<linkage_method, linkage_method::median>{});
}

// ---------------------------------------------------------------------------------------------------
// Minimum scans with scipy's rule: a value replaces the current best only when strictly smaller, so the
// first (lowest) index of the minimum wins and an equal value never displaces the starting candidate.
// Values are processed in chunks whose lane-wise minimum vectorises; a chunk is re-read only when it holds
// a new best, which happens O(log n) times on typical data.

inline constexpr index_t scan_lanes = 8;
inline constexpr index_t scan_chunk = 64;

/// Updates (best, pick) with values[0 .. count), which stand for indices first, first + 1, ...
inline void scan_min(const double* values, index_t count, index_t first, double& best, index_t& pick) noexcept {
  index_t c = 0;
  for (; c + scan_chunk <= count; c += scan_chunk) {
    const double* chunk = values + c;
    double lane[scan_lanes];
    for (index_t l = 0; l < scan_lanes; ++l) lane[l] = chunk[l];
    for (index_t b = scan_lanes; b < scan_chunk; b += scan_lanes)
      for (index_t l = 0; l < scan_lanes; ++l) lane[l] = chunk[b + l] < lane[l] ? chunk[b + l] : lane[l];
    double m = lane[0];
    for (index_t l = 1; l < scan_lanes; ++l) m = lane[l] < m ? lane[l] : m;
    if (MOECOMP_UNLIKELY(m < best)) {
      index_t at = 0;
      while (!(chunk[at] == m)) ++at;
      best = m;
      pick = first + c + at;
    }
  }
  for (; c < count; ++c)
    if (values[c] < best) {
      best = values[c];
      pick = first + c;
    }
}

/// A hint to fetch the cache line at an address that a gather will read soon (no effect on results).
#if defined(__GNUC__) || defined(__clang__)
#define MOECOMP_LINKAGE_PREFETCH(address) __builtin_prefetch(address)
#else
#define MOECOMP_LINKAGE_PREFETCH(address) ((void)0)
#endif

/// scan_min over values[c] where mask[c] != 0 (masked-out values count as +inf).
inline void scan_min_masked(const double* values, const double* mask, index_t count, index_t first, double& best,
                            index_t& pick) noexcept {
  double buffer[scan_chunk];
  for (index_t c = 0; c < count; c += scan_chunk) {
    const index_t chunk = count - c < scan_chunk ? count - c : scan_chunk;
    for (index_t k = 0; k < chunk; ++k) buffer[k] = mask[c + k] != 0.0 ? values[c + k] : infinity;
    scan_min(buffer, chunk, first + c, best, pick);
  }
}

// ---------------------------------------------------------------------------------------------------
// Parallel loops (OpenMP, when moecomp::openmp is linked).

/// Runs f(begin, end, part) on [lo, hi) split into one contiguous range per thread when the range holds at
/// least `grain` elements and `threads` > 1, else f(lo, hi, 0). Returns the number of parts. Parts are
/// numbered in ascending range order, so results combined in part order do not depend on the thread count.
template <class F>
int for_each_range(int threads, index_t lo, index_t hi, index_t grain, F&& f) {
#if defined(_OPENMP)
  if (threads > 1 && hi - lo >= grain) {
    int parts = 1;
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num(), count = omp_get_num_threads();
      if (t == 0) parts = count;
      f(lo + (hi - lo) * t / count, lo + (hi - lo) * (t + 1) / count, t);
    }
    return parts;
  }
#endif
  (void)threads, (void)grain;
  f(lo, hi, 0);
  return 1;
}

// ---------------------------------------------------------------------------------------------------
// The working copy of the distance matrix.

/// n (n - 1) / 2 doubles from ctx's allocator, freed at scope exit. The NN-chain and generic scans read
/// columns of the condensed matrix, one element per row; with 4 KiB pages nearly each such read also
/// misses the TLB. So with the default allocator on Linux a large block is aligned to 2 MiB and advised
/// for transparent huge pages (madvise MADV_HUGEPAGE, as numpy does for its large arrays), which makes the
/// algorithms about 25% faster where the system allows huge pages on request. Memory from a user's
/// allocator is left alone. Nothing changes in the results.
class working_distances {
 public:
  working_distances(const host_context& ctx, index_t count) : ctx_(&ctx) {
    MOECOMP_EXPECTS(static_cast<std::size_t>(count) <= std::numeric_limits<std::size_t>::max() / sizeof(double),
                    "linkage: ", count, " distances overflow size_t");
    bytes_ = static_cast<std::size_t>(count) * sizeof(double);
    alignment_ = 64;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    constexpr std::size_t huge_page = std::size_t(2) << 20;
    const bool advise = ctx.allocator.allocate == nullptr && bytes_ >= 16 * huge_page;
    if (advise) alignment_ = huge_page;
#endif
    data_ = static_cast<double*>(ctx.allocate(bytes_, alignment_));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (advise) ::madvise(data_, bytes_ / huge_page * huge_page, MADV_HUGEPAGE);  // advice only: errors ignored
#endif
  }
  ~working_distances() { ctx_->deallocate(data_, bytes_, alignment_); }
  working_distances(const working_distances&) = delete;
  working_distances& operator=(const working_distances&) = delete;
  double* data() const noexcept { return data_; }

 private:
  const host_context* ctx_;
  std::size_t bytes_ = 0, alignment_ = 64;
  double* data_ = nullptr;
};

// ---------------------------------------------------------------------------------------------------
// From merges to Z.

/// Stable merge sort of order[0 .. count) by steps[order[k]].height (ascending; equal heights keep their
/// order, as numpy's argsort(kind='mergesort') does).
inline void stable_sort_by_height(const merge_step* steps, index_t* order, index_t* scratch, index_t count) noexcept {
  index_t* from = order;
  index_t* to = scratch;
  for (index_t width = 1; width < count; width *= 2) {
    for (index_t lo = 0; lo < count; lo += 2 * width) {
      const index_t mid = lo + width < count ? lo + width : count;
      const index_t hi = lo + 2 * width < count ? lo + 2 * width : count;
      index_t a = lo, b = mid, k = lo;
      while (a < mid && b < hi) to[k++] = steps[from[b]].height < steps[from[a]].height ? from[b++] : from[a++];
      while (a < mid) to[k++] = from[a++];
      while (b < hi) to[k++] = from[b++];
    }
    index_t* swap = from;
    from = to;
    to = swap;
  }
  if (from != order) std::memcpy(order, from, static_cast<std::size_t>(count) * sizeof(index_t));
}

/// Writes Z from n - 1 merges of slots (see merge_step). With `sort_by_height` the merges are first put in
/// ascending height (stable), as scipy does for the reducible methods. Then, in row order, each merge joins
/// the current clusters of its two slots (a union-find over points), the new cluster gets id n + row, the
/// smaller id goes to column 0 and the size to column 3.
inline void write_linkage_matrix(const host_context& ctx, index_t n, const merge_step* steps, bool sort_by_height,
                                 matrix_view<double> z) {
  const index_t merges = n - 1;
  if (merges <= 0) return;
  host_workspace<index_t> order(ctx, static_cast<std::size_t>(merges));
  for (index_t k = 0; k < merges; ++k) order[static_cast<std::size_t>(k)] = k;
  if (sort_by_height) {
    host_workspace<index_t> scratch(ctx, static_cast<std::size_t>(merges));
    stable_sort_by_height(steps, order.data(), scratch.data(), merges);
  }
  // parent[c] for the 2n - 1 clusters; a root is its own parent. size[c] counts points.
  host_workspace<index_t> parent(ctx, static_cast<std::size_t>(2 * n - 1));
  host_workspace<index_t> size(ctx, static_cast<std::size_t>(2 * n - 1));
  for (index_t c = 0; c < 2 * n - 1; ++c) {
    parent[static_cast<std::size_t>(c)] = c;
    size[static_cast<std::size_t>(c)] = 1;
  }
  auto find = [&](index_t c) {
    while (parent[static_cast<std::size_t>(c)] != c) {
      // path halving keeps the trees shallow
      const index_t grand = parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(c)])];
      parent[static_cast<std::size_t>(c)] = grand;
      c = grand;
    }
    return c;
  };
  for (index_t row = 0; row < merges; ++row) {
    const merge_step& s = steps[order[static_cast<std::size_t>(row)]];
    index_t a = find(s.x), b = find(s.y);
    if (b < a) {
      const index_t t = a;
      a = b;
      b = t;
    }
    const index_t id = n + row;
    parent[static_cast<std::size_t>(a)] = id;
    parent[static_cast<std::size_t>(b)] = id;
    size[static_cast<std::size_t>(id)] = size[static_cast<std::size_t>(a)] + size[static_cast<std::size_t>(b)];
    z(row, 0) = static_cast<double>(a);
    z(row, 1) = static_cast<double>(b);
    z(row, 2) = s.height;
    z(row, 3) = static_cast<double>(size[static_cast<std::size_t>(id)]);
  }
}

// ---------------------------------------------------------------------------------------------------
// Argument checks.

inline void check_z_shape(const char* function, index_t n, matrix_view<double> z) {
  MOECOMP_EXPECTS(z.rows() == n - 1 && z.cols() == 4, function, ": z must be (n - 1) x 4 = ",
                  moecomp::detail::shape_string(n - 1, 4), " for n = ", n, " points, got ",
                  moecomp::detail::shape_string(z.rows(), z.cols()));
}

inline void check_metric(const char* function, const linkage_params& params) {
  MOECOMP_EXPECTS(!requires_euclidean(params.method) || params.metric == distance::metric::euclidean, function,
                  ": method ", to_string(params.method), " is defined for Euclidean distances only; params.metric "
                  "must be euclidean, got ", distance::to_string(params.metric));
}

/// The checks every point-input linkage makes before computing anything: at least one point, Z's shape,
/// and a Euclidean metric for ward/centroid/median.
inline void check_points_input(const char* function, index_t rows, index_t cols, const linkage_params& params,
                               matrix_view<double> z) {
  MOECOMP_EXPECTS(rows >= 1, function, ": points must have at least one row, got shape ",
                  moecomp::detail::shape_string(rows, cols));
  check_z_shape(function, rows, z);
  check_metric(function, params);
}

/// A distance value must be a number >= 0 (+inf allowed). `where` streams the entry's position.
template <class Where>
inline void check_distance_value(const char* function, double value, Where&& where) {
  if (MOECOMP_LIKELY(value >= 0.0)) return;
  MOECOMP_FAIL(error_kind::invalid_argument, function, ": ", where(), " is ", value,
               value != value ? "; distances must not be NaN" : "; distances must be >= 0");
}

/// The position of the first entry of `condensed` that is not a valid distance (NaN or negative), or -1;
/// with `copy`, also copies every entry to copy[k] as double. One pass, in parallel blocks; the reported
/// position does not depend on the thread count.
template <class T>
index_t copy_and_find_invalid(const host_context& ctx, vector_view<const T> condensed, double* copy) {
  constexpr index_t block = 4096;
  const index_t length = condensed.size();
  const int threads = ctx.threads();
  host_workspace<index_t> first_bad(ctx, static_cast<std::size_t>(threads > 0 ? threads : 1));
  const T* data = condensed.data();
  const index_t stride = condensed.stride();
  const int parts = for_each_range(threads, 0, length, index_t(1) << 18, [&](index_t lo, index_t hi, int part) {
    index_t bad = -1;
    for (index_t b = lo; b < hi && bad < 0; b += block) {
      const index_t end = hi - b < block ? hi : b + block;
      bool invalid = false;
      if (copy != nullptr && stride == 1) {
        for (index_t k = b; k < end; ++k) {
          const double v = static_cast<double>(data[k]);
          copy[k] = v;
          invalid |= !(v >= 0.0);
        }
      } else {
        for (index_t k = b; k < end; ++k) {
          const double v = static_cast<double>(data[k * stride]);
          if (copy != nullptr) copy[k] = v;
          invalid |= !(v >= 0.0);
        }
      }
      if (MOECOMP_UNLIKELY(invalid))
        for (index_t k = b; k < end && bad < 0; ++k)
          if (!(static_cast<double>(data[k * stride]) >= 0.0)) bad = k;
    }
    first_bad[static_cast<std::size_t>(part)] = bad;
  });
  for (int p = 0; p < parts; ++p)
    if (first_bad[static_cast<std::size_t>(p)] >= 0) return first_bad[static_cast<std::size_t>(p)];
  return -1;
}

/// Whether a square matrix is exactly symmetric with valid distances (>= 0, not NaN) and a zero diagonal.
/// Compares in tiles so that the transposed reads stay in cache; the caller finds the first offending
/// entry with a plain scan only when this says no.
template <class T>
bool is_valid_square(const host_context& ctx, matrix_view<const T> s) {
  constexpr index_t tile = 64;
  const index_t n = s.rows();
  const index_t tiles = (n + tile - 1) / tile;
  const int threads = ctx.threads();
  host_workspace<char> ok(ctx, static_cast<std::size_t>(threads > 0 ? threads : 1));
  const int parts = for_each_range(threads, 0, tiles, 2, [&](index_t lo, index_t hi, int part) {
    bool good = true;
    for (index_t ti = lo; ti < hi && good; ++ti) {
      const index_t i0 = ti * tile, i1 = i0 + tile < n ? i0 + tile : n;
      for (index_t j0 = i0; j0 < n && good; j0 += tile) {
        const index_t j1 = j0 + tile < n ? j0 + tile : n;
        for (index_t i = i0; i < i1; ++i) {
          const T* row = s.row_ptr(i);
          for (index_t j = j0 > i ? j0 : i; j < j1; ++j) {
            const double v = static_cast<double>(row[j]);
            good &= v >= 0.0 && (i == j ? v == 0.0 : v == static_cast<double>(s(j, i)));
          }
        }
      }
    }
    ok[static_cast<std::size_t>(part)] = good ? 1 : 0;
  });
  for (int p = 0; p < parts; ++p)
    if (!ok[static_cast<std::size_t>(p)]) return false;
  return true;
}

/// Points must be finite: the row and column of the first entry that is not.
template <class T>
void check_finite_points(const char* function, matrix_view<const T> points) {
  for (index_t i = 0; i < points.rows(); ++i) {
    const T* row = points.row_ptr(i);
    for (index_t j = 0; j < points.cols(); ++j)
      if (MOECOMP_UNLIKELY(!std::isfinite(row[j])))
        MOECOMP_FAIL(error_kind::invalid_argument, function, ": points(", i, ", ", j, ") is ", row[j],
                     "; points must be finite");
  }
}

}  // namespace detail
}  // namespace cluster
MOECOMP_NAMESPACE_END
