#pragma once
// Linkage in O(n d) memory, without the distance matrix (as fastcluster's linkage_vector):
//  * single: Prim's algorithm (linkage_mst.hpp) with each step's distances computed from the points;
//  * ward, centroid, median: the generic algorithm (linkage_generic.hpp) over cluster centres and sizes:
//      centroid  d(u, v) = ||c_u - c_v||, c = the mean of the cluster's points
//      median    d(u, v) = ||w_u - w_v||, w = the midpoint of the two merged clusters' w (WPGMC)
//      ward      d(u, v) = sqrt(2 |u| |v| / (|u| + |v|)) ||c_u - c_v||
//    which are exactly the distances the Lance-Williams recurrences of linkage_common.hpp track.
// Distances are computed directly in double from the rows (no Gram form, so no cancellation); single
// linkage rounds them to the points' type T, as the distance module does; the centres stay in double.
// Distance batches run in parallel (OpenMP, ctx.threads()) when large; each value is independent of the
// thread count.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/cluster/detail/linkage_common.hpp>
#include <moecomp/core/detail/range_scaling.hpp>
#include <moecomp/distance/distance_types.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {
namespace detail {

/// Enough work (in multiply-adds) to be worth an OpenMP parallel region.
inline constexpr index_t parallel_work_threshold = 1 << 15;

/// sum_k ((a_k - oa) sa - (b_k - ob) sb)^2 in double, in 8 independent partial sums (a single running sum
/// is a chain of dependent additions that the compiler may not reorder). Symmetric bit for bit in (a, b).
template <class T>
double squared_distance(const T* a, double oa, double sa, const T* b, double ob, double sb, index_t d) noexcept {
  constexpr index_t lanes = 8;
  double partial[lanes] = {};
  index_t k = 0;
  for (; k + lanes <= d; k += lanes)
    for (index_t l = 0; l < lanes; ++l) {
      const double diff = (static_cast<double>(a[k + l]) - oa) * sa - (static_cast<double>(b[k + l]) - ob) * sb;
      partial[l] += diff * diff;
    }
  for (index_t l = 0; k < d; ++k, ++l) {
    const double diff = (static_cast<double>(a[k]) - oa) * sa - (static_cast<double>(b[k]) - ob) * sb;
    partial[l] += diff * diff;
  }
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
         ((partial[4] + partial[5]) + (partial[6] + partial[7]));
}

/// ||a - b||^2 of two rows of doubles, summed as above.
inline double squared_distance(const double* a, const double* b, index_t d) noexcept {
  constexpr index_t lanes = 8;
  double partial[lanes] = {};
  index_t k = 0;
  for (; k + lanes <= d; k += lanes)
    for (index_t l = 0; l < lanes; ++l) {
      const double diff = a[k + l] - b[k + l];
      partial[l] += diff * diff;
    }
  for (index_t l = 0; k < d; ++k, ++l) {
    const double diff = a[k] - b[k];
    partial[l] += diff * diff;
  }
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
         ((partial[4] + partial[5]) + (partial[6] + partial[7]));
}

/// Distances from one point to others, on the fly: Prim's row callback for low-memory single linkage.
/// `euclidean_prescale` (a power of two, 1 for ordinary inputs) scales the Euclidean metrics' points so that
/// no square overflows (core/detail/range_scaling.hpp); the caller scales the heights back.
template <class T>
class point_rows {
 public:
  point_rows(const host_context& ctx, distance::metric m, matrix_view<const T> points, double euclidean_prescale)
      : ctx_(&ctx),
        metric_(m),
        points_(points),
        offset_(ctx, static_cast<std::size_t>(points.rows())),
        scale_(ctx, static_cast<std::size_t>(points.rows())) {
    // The same preprocessing as the distance module: cosine divides by the norm, correlation centres the
    // row first; a zero (constant) row has no direction and gives NaN distances, as in scipy.
    const index_t d = points.cols();
    const bool normalise = m == distance::metric::cosine || m == distance::metric::correlation;
    for (index_t i = 0; i < points.rows(); ++i) {
      const T* row = points.row_ptr(i);
      double offset = 0.0, scale = normalise ? 1.0 : euclidean_prescale;
      if (m == distance::metric::correlation && d > 0) {
        for (index_t k = 0; k < d; ++k) offset += static_cast<double>(row[k]);
        offset /= static_cast<double>(d);
      }
      if (normalise) {
        // The norm from prescaled values (one power of two per row), so that its squares cannot overflow.
        double row_max = 0.0;
        for (index_t k = 0; k < d; ++k) row_max = std::max(row_max, std::abs(static_cast<double>(row[k]) - offset));
        const double prescale = moecomp::detail::safe_prescale<double>(row_max, d);
        double sum = 0.0;
        for (index_t k = 0; k < d; ++k) {
          const double v = (static_cast<double>(row[k]) - offset) * prescale;
          sum += v * v;
        }
        scale = sum > 0.0 ? prescale / std::sqrt(sum) : std::numeric_limits<double>::quiet_NaN();
      }
      offset_[static_cast<std::size_t>(i)] = offset;
      scale_[static_cast<std::size_t>(i)] = scale;
    }
  }

  /// The first point whose distances are NaN (a zero row for cosine, a constant row for correlation), or -1.
  index_t first_undefined_row() const noexcept {
    for (index_t i = 0; i < points_.rows(); ++i)
      if (scale_[static_cast<std::size_t>(i)] != scale_[static_cast<std::size_t>(i)]) return i;
    return -1;
  }

  double operator()(index_t i, index_t j) const noexcept {
    double value = squared_distance(points_.row_ptr(i), offset_[static_cast<std::size_t>(i)],
                                    scale_[static_cast<std::size_t>(i)], points_.row_ptr(j),
                                    offset_[static_cast<std::size_t>(j)], scale_[static_cast<std::size_t>(j)],
                                    points_.cols());
    value = distance::distance_from_squared(metric_, value);
    return static_cast<double>(static_cast<T>(value));
  }

  void operator()(index_t x, const index_t* targets, index_t count, double* out) const {
    const int threads = ctx_->threads();
    (void)threads;
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads) if (threads > 1 && count * points_.cols() > parallel_work_threshold) \
    schedule(static)
#endif
    for (index_t j = 0; j < count; ++j) out[j] = (*this)(x, targets[j]);
  }

 private:
  const host_context* ctx_;
  distance::metric metric_;
  matrix_view<const T> points_;
  host_workspace<double> offset_;
  host_workspace<double> scale_;
};

/// The generic algorithm's oracle over cluster centres (ward, centroid, median; Euclidean).
template <linkage_method M>
class centroid_oracle {
 public:
  /// `prescale`: as point_rows' euclidean_prescale.
  template <class T>
  centroid_oracle(const host_context& ctx, matrix_view<const T> points, double prescale)
      : ctx_(&ctx),
        n_(points.rows()),
        d_(points.cols()),
        centre_(ctx, static_cast<std::size_t>(points.rows() * points.cols())),
        size_(ctx, static_cast<std::size_t>(points.rows())),
        scratch_(ctx, static_cast<std::size_t>(points.rows())) {
    for (index_t i = 0; i < n_; ++i) {
      const T* row = points.row_ptr(i);
      double* c = centre_.data() + i * d_;
      for (index_t k = 0; k < d_; ++k) c[k] = static_cast<double>(row[k]) * prescale;
      size_[static_cast<std::size_t>(i)] = 1.0;
    }
  }

  bool active(index_t i) const noexcept { return size_[static_cast<std::size_t>(i)] != 0.0; }

  /// Symmetric bit for bit in (i, j) (squared_distance is, and so is the ward factor), so a distance
  /// recomputed later compares equal to the one stored in the heap.
  double distance(index_t i, index_t j) const noexcept {
    const double sum = squared_distance(centre_.data() + i * d_, centre_.data() + j * d_, d_);
    if constexpr (M == linkage_method::ward) {
      const double n_i = size_[static_cast<std::size_t>(i)], n_j = size_[static_cast<std::size_t>(j)];
      return std::sqrt(2.0 * n_i * n_j / (n_i + n_j) * sum);
    } else {
      return std::sqrt(sum);
    }
  }

  index_t nearest_above(index_t x, double& dist) const {
    const index_t first = x + 1, count = n_ - first;
    double* out = scratch_.data();
    fill(count, [&](index_t c) { return active(first + c) ? distance(x, first + c) : infinity; }, out);
    dist = infinity;
    index_t pick = -1;
    scan_min(out, count, first, dist, pick);
    if (pick < 0) {
      for (index_t i = first; i < n_; ++i)
        if (active(i)) return i;
    }
    return pick;
  }

  /// y takes the merged cluster: its centre moves (to the mean of both clusters, or to the midpoint for
  /// median), x becomes inactive, and below[z] = distance(z, y) for z < y.
  void merge(index_t x, index_t y, double /*d_xy*/, double* below) {
    const double n_x = size_[static_cast<std::size_t>(x)], n_y = size_[static_cast<std::size_t>(y)];
    const double* cx = centre_.data() + x * d_;
    double* cy = centre_.data() + y * d_;
    if constexpr (M == linkage_method::median) {
      for (index_t k = 0; k < d_; ++k) cy[k] = 0.5 * (cx[k] + cy[k]);
    } else {
      const double total = n_x + n_y;
      for (index_t k = 0; k < d_; ++k) cy[k] = (n_x * cx[k] + n_y * cy[k]) / total;
    }
    size_[static_cast<std::size_t>(x)] = 0.0;
    size_[static_cast<std::size_t>(y)] = n_x + n_y;
    fill(y, [&](index_t z) { return active(z) ? distance(z, y) : infinity; }, below);
  }

  index_t dim() const noexcept { return n_; }
  index_t slot(index_t i) const noexcept { return i; }
  /// Nothing to compact: the centres are O(n d) and the scans compute rather than read.
  bool maybe_compact(index_t /*active*/) const noexcept { return false; }
  index_t new_index(index_t old) const noexcept { return old; }

 private:
  template <class F>
  void fill(index_t count, F&& value, double* out) const {
    const int threads = ctx_->threads();
    (void)threads;
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads) if (threads > 1 && count * d_ > parallel_work_threshold) schedule(static)
#endif
    for (index_t c = 0; c < count; ++c) out[c] = value(c);
  }

  const host_context* ctx_;
  index_t n_, d_;
  host_workspace<double> centre_;
  host_workspace<double> size_;
  host_workspace<double> scratch_;
};

}  // namespace detail
}  // namespace cluster
MOECOMP_NAMESPACE_END
