#pragma once
// Magnitude pruning on the host, behind <moecomp/sparse/prune.hpp>.
//
// Selection without sorting: every |w| becomes an unsigned key (its bits with the sign cleared: for finite
// values the integer order is the order of magnitudes), and the kept-th largest key is found by an MSD radix
// select with 16-bit digits (one histogram pass per digit, per-thread histograms summed in thread order), or
// by std::nth_element for small groups. Then every key above it is kept, and of the keys equal to it the
// lowest flat indices, as many as still needed. Exact, O(numel), and the same at any thread count.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/sparse/prune_types.hpp>
#include <moecomp/core/detail/parallel.hpp>
#include <moecomp/sparse/detail/sparse_element.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {
namespace detail {

using moecomp::detail::parallel_for;

/// A rectangular group of a matrix: rows [row0, row0 + rows), columns [col0, col0 + cols).
struct group {
  index_t row0, rows, col0, cols;
  index_t size() const noexcept { return rows * cols; }
};

inline constexpr int digit_bits = 16;
inline constexpr std::size_t digit_values = std::size_t(1) << digit_bits;
/// Groups smaller than this select with std::nth_element.
inline constexpr index_t radix_min_size = index_t(1) << 16;

/// The `rank`-th largest key (1-based) among the group's entries.
template <class T>
typename magnitude_key<T>::type kth_largest_key(matrix_view<const T> w, const group& g, index_t rank, int threads) {
  using key = typename magnitude_key<T>::type;
  constexpr int total_bits = static_cast<int>(sizeof(key) * 8);
  if (g.size() < radix_min_size) {
    std::vector<key> keys;
    keys.reserve(static_cast<std::size_t>(g.size()));
    for (index_t i = 0; i < g.rows; ++i)
      for (index_t j = 0; j < g.cols; ++j) keys.push_back(magnitude_key<T>::of(w(g.row0 + i, g.col0 + j)));
    const auto nth = keys.begin() + static_cast<std::ptrdiff_t>(rank - 1);
    std::nth_element(keys.begin(), nth, keys.end(), [](key a, key b) { return a > b; });
    return *nth;
  }
  // MSD radix select: fix the top digits one at a time.
  const int used = static_cast<int>(std::min<index_t>(std::max(threads, 1), g.rows));
  std::vector<index_t> histograms(static_cast<std::size_t>(used) * digit_values);
  key prefix = 0;
  int fixed_bits = 0;  // the top fixed_bits of the answer are prefix's
  index_t remaining = rank;
  while (fixed_bits < total_bits) {
    const int width = std::min(digit_bits, total_bits - fixed_bits);
    const int shift = total_bits - fixed_bits - width;
    std::fill(histograms.begin(), histograms.end(), index_t(0));
    const index_t chunk = (g.rows + used - 1) / used;
    parallel_for(used, used, [&](index_t t, int) {
      index_t* h = histograms.data() + static_cast<std::size_t>(t) * digit_values;
      const index_t r0 = t * chunk, r1 = std::min(g.rows, r0 + chunk);
      for (index_t i = r0; i < r1; ++i) {
        const T* row = w.row_ptr(g.row0 + i) + g.col0;
        for (index_t j = 0; j < g.cols; ++j) {
          const key k = magnitude_key<T>::of(row[j]);
          // Only keys that share the fixed top bits compete.
          if (fixed_bits > 0 && (k >> (total_bits - fixed_bits)) != (prefix >> (total_bits - fixed_bits))) continue;
          ++h[static_cast<std::size_t>((k >> shift) & ((key(1) << width) - 1))];
        }
      }
    });
    const std::size_t values = std::size_t(1) << width;
    for (int t = 1; t < used; ++t)
      for (std::size_t v = 0; v < values; ++v)
        histograms[v] += histograms[static_cast<std::size_t>(t) * digit_values + v];
    const std::uint32_t digit = pick_digit(histograms.data(), static_cast<std::uint32_t>(values), true, remaining);
    prefix = static_cast<key>(prefix | (static_cast<key>(digit) << shift));
    fixed_bits += width;
  }
  return prefix;
}

/// Prunes one group: keeps the `kept` largest magnitudes (ties at the threshold to the lowest flat index of
/// the group, row by row), writes out, returns the smallest kept magnitude (+inf when none is kept).
template <class T>
double prune_group(matrix_view<const T> w, matrix_view<T> out, const group& g, index_t kept, int threads) {
  using key = typename magnitude_key<T>::type;
  if (kept <= 0) {
    for (index_t i = 0; i < g.rows; ++i)
      for (index_t j = 0; j < g.cols; ++j) out(g.row0 + i, g.col0 + j) = T{};
    return std::numeric_limits<double>::infinity();
  }
  const key threshold = kth_largest_key(w, g, kept, threads);
  // Keys above the threshold are all kept; `ties` of the equal ones, the first in row-major order.
  index_t above = 0;
  for (index_t i = 0; i < g.rows; ++i) {
    const T* row = w.row_ptr(g.row0 + i) + g.col0;
    for (index_t j = 0; j < g.cols; ++j) above += magnitude_key<T>::of(row[j]) > threshold;
  }
  index_t ties = kept - above;
  double smallest = std::numeric_limits<double>::infinity();
  for (index_t i = 0; i < g.rows; ++i) {
    const T* row = w.row_ptr(g.row0 + i) + g.col0;
    T* o = out.row_ptr(g.row0 + i) + g.col0;
    for (index_t j = 0; j < g.cols; ++j) {
      const key k = magnitude_key<T>::of(row[j]);
      const bool keep = k > threshold || (k == threshold && ties > 0);
      if (k == threshold && keep) --ties;
      const T v = row[j];
      o[j] = keep ? v : T{};
      if (keep) smallest = std::min(smallest, std::abs(convert_to<double>(v)));
    }
  }
  return smallest;
}

/// N:M: in each run of m entries of a row, the n largest magnitudes (ties to the lowest index: n_of_m_kept).
template <class T>
double prune_n_of_m(matrix_view<const T> w, matrix_view<T> out, index_t n, index_t m, int threads) {
  std::vector<double> smallest(static_cast<std::size_t>(w.rows()), std::numeric_limits<double>::infinity());
  parallel_for(w.rows(), threads, [&](index_t i, int) {
    const T* row = w.row_ptr(i);
    T* o = out.row_ptr(i);
    std::vector<T> run(static_cast<std::size_t>(m));  // a copy: out may be w (in place)
    double& s = smallest[static_cast<std::size_t>(i)];
    for (index_t g = 0; g < w.cols(); g += m) {
      std::copy(row + g, row + g + m, run.begin());
      for (index_t q = 0; q < m; ++q) {
        const bool keep = n_of_m_kept(run.data(), m, n, q);
        const T v = run[static_cast<std::size_t>(q)];
        o[g + q] = keep ? v : T{};
        if (keep) s = std::min(s, std::abs(convert_to<double>(v)));
      }
    }
  });
  double s = std::numeric_limits<double>::infinity();
  for (double v : smallest) s = std::min(s, v);
  return s;
}

/// Every scope; out may be w itself (in place: each group reads its values before writing them).
template <class T>
prune_result prune_host(const host_context& ctx, const prune_params& params, matrix_view<const T> w, matrix_view<T> out) {
  const int threads = std::max(1, ctx.threads());
  const index_t rows = w.rows(), cols = w.cols();
  prune_result result;
  result.threshold = std::numeric_limits<double>::infinity();
  switch (params.scope) {
    case prune_scope::matrix: {
      const group g{0, rows, 0, cols};
      result.kept = kept_count(params, g.size());
      result.threshold = prune_group(w, out, g, result.kept, threads);
      break;
    }
    case prune_scope::row: {
      std::vector<double> smallest(static_cast<std::size_t>(rows));
      const index_t kept = kept_count(params, cols);
      parallel_for(rows, threads, [&](index_t i, int) {
        smallest[static_cast<std::size_t>(i)] = prune_group(w, out, group{i, 1, 0, cols}, kept, 1);
      });
      result.kept = kept * rows;
      for (double v : smallest) result.threshold = std::min(result.threshold, v);
      break;
    }
    case prune_scope::column_block: {
      for (index_t c0 = 0; c0 < cols; c0 += params.column_block) {
        const group g{0, rows, c0, std::min(params.column_block, cols - c0)};
        const index_t kept = kept_count(params, g.size());
        result.kept += kept;
        result.threshold = std::min(result.threshold, prune_group(w, out, g, kept, threads));
      }
      break;
    }
    case prune_scope::n_of_m: {
      result.kept = rows * (cols / params.m) * params.n;
      result.threshold = prune_n_of_m(w, out, params.n, params.m, threads);
      break;
    }
  }
  result.pruned = rows * cols - result.kept;
  return result;
}

}  // namespace detail
}  // namespace sparse
MOECOMP_NAMESPACE_END
