#pragma once
// Argument checks that several modules share, written once with one message text for host and device
// callers: overlap of views, finiteness, and masses (histograms, weights). Plain host C++ (device views are
// only compared by address, never dereferenced). Every message names the function and the argument and gives
// the expected and the actual value.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

/// [first, last) byte addresses a view spans (first to last element); {0, 0} for an empty view.
struct address_range {
  std::uintptr_t first = 0, last = 0;
};

template <class T, class Space>
address_range address_range_of(const vector_view<T, Space>& x) noexcept {
  if (x.empty()) return {};
  return {reinterpret_cast<std::uintptr_t>(x.data()), reinterpret_cast<std::uintptr_t>(x.ptr(x.size() - 1) + 1)};
}
template <class T, class Space>
address_range address_range_of(const matrix_view<T, Space>& x) noexcept {
  if (x.empty()) return {};
  return {reinterpret_cast<std::uintptr_t>(x.data()),
          reinterpret_cast<std::uintptr_t>(x.row_ptr(x.rows() - 1) + x.cols())};
}
template <class T, class Space>
address_range address_range_of(const matrix_stack_view<T, Space>& x) noexcept {
  if (x.empty()) return {};
  if (x.is_gathered()) {  // the span from the lowest matrix to the end of the highest
    address_range r{~std::uintptr_t{0}, 0};  // first, last
    for (index_t e = 0; e < x.count(); ++e) {
      r.first = std::min(r.first, reinterpret_cast<std::uintptr_t>(x.matrix_ptr(e)));
      r.last = std::max(r.last, reinterpret_cast<std::uintptr_t>(x.row_ptr(e, x.rows() - 1) + x.cols()));
    }
    return r;
  }
  return {reinterpret_cast<std::uintptr_t>(x.data()),
          reinterpret_cast<std::uintptr_t>(x.row_ptr(x.count() - 1, x.rows() - 1) + x.cols())};
}

/// Whether the memory spanned by two views (of any kind and element type) intersects. Conservative for
/// strided views: interleaved views that share no element still count as overlapping.
template <class X, class Y>
bool views_overlap(const X& x, const Y& y) noexcept {
  const address_range a = address_range_of(x), b = address_range_of(y);
  return a.first < a.last && b.first < b.last && a.first < b.last && b.first < a.last;
}

/// "function: output must not overlap input".
template <class X, class Y>
void check_no_overlap(const char* function, const char* output, const X& x, const char* input, const Y& y) {
  MOECOMP_EXPECTS(!views_overlap(x, y), function, ": ", output, " must not overlap ", input);
}

/// One extent of a size query, with its name for the message.
struct named_extent {
  const char* name;
  index_t value;
};

/// The extents a workspace-size function receives are all >= 0
/// ("f: shapes must be non-negative, got k 2, n -1, d 3").
inline void check_extents(const char* function, std::initializer_list<named_extent> extents) {
  bool ok = true;
  for (const named_extent& e : extents) ok = ok && e.value >= 0;
  if (MOECOMP_LIKELY(ok)) return;
  std::string got;
  for (const named_extent& e : extents) got += concat(got.empty() ? "" : ", ", e.name, " ", e.value);
  MOECOMP_FAIL(error_kind::invalid_argument, function, ": shapes must be non-negative, got ", got);
}

/// The extents a device call hands to cuBLAS or to int-indexed kernels fit in an int
/// ("f: a's rows must be at most 2147483647 on the device, got ...").
inline void check_int_extents(const char* function, std::initializer_list<named_extent> extents) {
  for (const named_extent& e : extents)
    MOECOMP_EXPECTS(e.value <= static_cast<index_t>(std::numeric_limits<int>::max()), function, ": ", e.name,
                    " must be at most ", std::numeric_limits<int>::max(), " on the device, got ", e.value);
}

/// p holds each of 0..n-1 exactly once ("f: permutation must be a permutation of 0..3, got 5 at 2" or
/// "..., got 1 twice (at 0 and 2)"); p must have n entries (checked by the caller).
template <class I>
void check_permutation(const char* function, const char* name, vector_view<I> p, index_t n) {
  std::vector<index_t> seen(static_cast<std::size_t>(n), -1);
  for (index_t i = 0; i < p.size(); ++i) {
    const auto v = static_cast<index_t>(p[i]);
    MOECOMP_EXPECTS(v >= 0 && v < n, function, ": ", name, " must be a permutation of 0..", n - 1, ", got ", v,
                    " at ", i);
    MOECOMP_EXPECTS(seen[static_cast<std::size_t>(v)] < 0, function, ": ", name, " must be a permutation of 0..",
                    n - 1, ", got ", v, " twice (at ", seen[static_cast<std::size_t>(v)], " and ", i, ")");
    seen[static_cast<std::size_t>(v)] = i;
  }
}

/// Whether x[0..count) are all finite. Branch-free on the bit patterns for float and double (the exponent
/// field is all ones exactly for inf and NaN) so that it vectorises over whole cost matrices.
template <class T>
bool all_finite(const T* x, index_t count) noexcept {
  using value_type = std::remove_const_t<T>;
  if constexpr (std::is_same_v<value_type, double> || std::is_same_v<value_type, float>) {
    using bits_type = std::conditional_t<sizeof(value_type) == 8, std::uint64_t, std::uint32_t>;
    constexpr bits_type exponent =
        sizeof(value_type) == 8 ? bits_type(0x7ff0000000000000ull) : bits_type(0x7f800000u);
    bits_type bad = 0;
    for (index_t j = 0; j < count; ++j) {
      bits_type bits;
      std::memcpy(&bits, x + j, sizeof bits);
      bad |= (bits & exponent) == exponent;
    }
    return bad == 0;
  } else {
    for (index_t j = 0; j < count; ++j)
      if (!std::isfinite(convert_to<double>(x[j]))) return false;
    return true;
  }
}

/// Below this many entries the finiteness scan runs on one thread.
inline constexpr index_t finite_scan_parallel_min_entries = index_t(1) << 18;

/// The lowest row of a host matrix holding a non-finite entry, or rows() when there is none. Rows are
/// scanned in parallel; the answer does not depend on the thread count.
template <class T>
index_t first_non_finite_row(matrix_view<T> x, int threads = 1) {
  const index_t n = x.rows(), m = x.cols();
  index_t first_bad_row = n;
  (void)threads;
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads) if (threads > 1 && n * m >= finite_scan_parallel_min_entries) \
    reduction(min : first_bad_row) schedule(static)
#endif
  for (index_t i = 0; i < n; ++i)
    if (!all_finite(x.row_ptr(i), m)) first_bad_row = std::min(first_bad_row, i);
  return first_bad_row;
}

/// Every entry of a host matrix (any element type: float, double, bfloat16, half) is finite; the message names the first bad entry in row-major order
/// ("function: name must be finite, got nan at (2, 3)") whatever the thread count.
template <class T>
void check_finite(const char* function, const char* name, matrix_view<T> x, int threads = 1) {
  const index_t i = first_non_finite_row(x, threads);
  if (MOECOMP_LIKELY(i == x.rows())) return;
  for (index_t j = 0; j < x.cols(); ++j)
    MOECOMP_EXPECTS(std::isfinite(convert_to<double>(x(i, j))), function, ": ", name, " must be finite, got ",
                    convert_to<double>(x(i, j)), " at (", i, ", ", j, ")");
}

/// Masses (histogram entries, weights): each finite and >= 0, or > 0 when `positive`. Returns their sum in
/// double, summed in index order. `get(i)` reads entry i.
template <class Get>
double check_masses(const char* function, const char* name, index_t size, Get&& get, bool positive = false) {
  double total = 0;
  for (index_t i = 0; i < size; ++i) {
    const double x = static_cast<double>(get(i));
    MOECOMP_EXPECTS(std::isfinite(x) && (positive ? x > 0 : x >= 0), function, ": ", name, " must be finite and ",
                    positive ? "> 0" : ">= 0", ", got ", x, " at index ", i);
    total += x;
  }
  MOECOMP_EXPECTS(std::isfinite(total), function, ": the sum of ", name, " overflows");
  return total;
}
template <class W>
double check_masses(const char* function, const char* name, vector_view<W> w, bool positive = false) {
  return check_masses(function, name, w.size(), [&](index_t i) { return w[i]; }, positive);
}

/// A histogram's total must be positive.
inline void check_positive_total(const char* function, const char* name, double total) {
  MOECOMP_EXPECTS(total > 0, function, ": ", name, " must have a positive total mass, got ", total);
}

/// Weights must sum to 1 within `tolerance`.
inline void check_sums_to_one(const char* function, const char* name, double total, double tolerance = 1e-6) {
  MOECOMP_EXPECTS(std::abs(total - 1.0) <= tolerance, function, ": ", name, " must sum to 1 (within ", tolerance,
                  "), got ", total);
}

/// Two histograms must carry the same mass: |sum_a - sum_b| <= relative_tolerance * max(sum_a, sum_b).
inline void check_equal_totals(const char* function, double sum_a, double sum_b, double relative_tolerance) {
  MOECOMP_EXPECTS(std::fabs(sum_a - sum_b) <= relative_tolerance * std::max(sum_a, sum_b), function,
                  ": a and b must have equal total mass (relative difference <= ", relative_tolerance,
                  "), got sum(a) = ", sum_a, " and sum(b) = ", sum_b);
}

}  // namespace detail
MOECOMP_NAMESPACE_END
