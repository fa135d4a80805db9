// Magnitude pruning (<moecomp/sparse/prune.hpp>): torch's count (Python's rounding, halves to even); the
// tie rule; the radix selection (large groups) against a sort-based definition; every scope; bfloat16 and
// half storage; in place and out of place alike; the same result at any thread count; the argument checks.
// The masks against torch itself: tests/peers/test_prune_torch.py.
#include <moecomp/sparse/prune.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

namespace {

using moecomp::index_t;
namespace sparse = moecomp::sparse;

/// The definition: keep the `kept` largest |w| of the values, ties by the lowest index.
template <class T>
std::vector<bool> reference_mask(const std::vector<T>& w, index_t kept) {
  std::vector<index_t> order(w.size());
  std::iota(order.begin(), order.end(), index_t(0));
  std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
    return std::abs(moecomp::convert_to<double>(w[static_cast<std::size_t>(a)])) >
           std::abs(moecomp::convert_to<double>(w[static_cast<std::size_t>(b)]));
  });
  std::vector<bool> mask(w.size(), false);
  for (index_t q = 0; q < kept; ++q) mask[static_cast<std::size_t>(order[static_cast<std::size_t>(q)])] = true;
  return mask;
}

template <class T>
std::vector<T> values(index_t count, std::uint64_t seed, int levels = 0) {
  moecomp::random_generator rng(seed);
  std::vector<T> v(static_cast<std::size_t>(count));
  for (auto& x : v) {
    const double r = levels > 0 ? std::floor(rng.uniform<double>() * levels) - levels / 2 : rng.normal<double>();
    x = moecomp::convert_to<T>(r);
  }
  return v;
}

sparse::prune_params with_sparsity(double s, sparse::prune_scope scope = sparse::prune_scope::matrix) {
  sparse::prune_params p;
  p.sparsity = s;
  p.scope = scope;
  return p;
}

}  // namespace

TEST_CASE("prune: the count is torch's, round(amount x size) with halves to even") {
  CHECK(sparse::round_half_even(2.5) == 2.0);
  CHECK(sparse::round_half_even(3.5) == 4.0);
  CHECK(sparse::round_half_even(2.4999) == 2.0);
  CHECK(sparse::kept_count(with_sparsity(0.5), 5) == 3);  // 2.5 pruned -> 2
  CHECK(sparse::kept_count(with_sparsity(0.5), 7) == 3);  // 3.5 -> 4
  CHECK(sparse::kept_count(with_sparsity(0.75), 4096 * 12288) == 4096 * 12288 / 4);
  sparse::prune_params keep;
  keep.keep = 0.3;
  CHECK(sparse::kept_count(keep, 10) == 3);
}

TEST_CASE_TEMPLATE("prune: the kept set is the definition's, small groups and radix-selected large ones, ties included",
                   T, float, double, moecomp::bfloat16, moecomp::half) {
  for (const index_t rows : {index_t(7), index_t(300)})  // 7 x 333 by nth_element; 300 x 333 by radix select
    for (const int levels : {0, 9}) {                   // continuous values, or 9 levels: many ties
      const index_t cols = 333;
      const auto w = values<T>(rows * cols, 40 + static_cast<std::uint64_t>(rows), levels);
      for (double s : {0.1, 0.5, 0.75, 0.999}) {
        CAPTURE(rows);
        CAPTURE(levels);
        CAPTURE(s);
        std::vector<T> out(w.size());
        const auto r = sparse::prune_magnitude<T>(moecomp::host_context(3), with_sparsity(s),
                                                  moecomp::matrix_view<const T>(w.data(), rows, cols),
                                                  moecomp::matrix_view<T>(out.data(), rows, cols));
        const index_t kept = sparse::kept_count(with_sparsity(s), rows * cols);
        CHECK(r.kept == kept);
        CHECK(r.pruned == rows * cols - kept);
        const auto mask = reference_mask(w, kept);
        index_t mismatches = 0;
        for (std::size_t q = 0; q < w.size(); ++q) {
          const bool nonzero_expected = mask[q];
          const double got = moecomp::convert_to<double>(out[q]);
          if (nonzero_expected ? got != moecomp::convert_to<double>(w[q]) : got != 0.0) ++mismatches;
        }
        CHECK(mismatches == 0);
      }
    }
}

TEST_CASE("prune: in place equals out of place, at 1 and 3 threads, for every scope") {
  const index_t rows = 260, cols = 512;
  const auto w = values<float>(rows * cols, 50, 0);
  for (auto scope : {sparse::prune_scope::matrix, sparse::prune_scope::row, sparse::prune_scope::column_block,
                     sparse::prune_scope::n_of_m}) {
    CAPTURE(sparse::to_string(scope));
    sparse::prune_params p = with_sparsity(0.75, scope);
    p.column_block = 100;
    if (scope == sparse::prune_scope::n_of_m) p.sparsity = -1;
    std::vector<float> out1(w.size()), in_place = w;
    const auto r1 = sparse::prune_magnitude<float>(moecomp::host_context(1), p,
                                                   moecomp::matrix_view<const float>(w.data(), rows, cols),
                                                   moecomp::matrix_view<float>(out1.data(), rows, cols));
    const auto r3 = sparse::prune_magnitude<float>(moecomp::host_context(3), p,
                                                   moecomp::matrix_view<float>(in_place.data(), rows, cols));
    CHECK(out1 == in_place);
    CHECK(r1.kept == r3.kept);
    CHECK(r1.threshold == r3.threshold);
  }
}

TEST_CASE("prune: row, column-block and 2:4 scopes keep what each group's definition keeps") {
  const index_t rows = 6, cols = 24;
  const auto w = values<double>(rows * cols, 60, 0);
  std::vector<double> out(w.size());
  const moecomp::matrix_view<const double> wv(w.data(), rows, cols);
  const moecomp::matrix_view<double> ov(out.data(), rows, cols);
  (void)sparse::prune_magnitude<double>(moecomp::host_context(1), with_sparsity(0.5, sparse::prune_scope::row), wv, ov);
  for (index_t i = 0; i < rows; ++i) {
    const std::vector<double> row(w.begin() + i * cols, w.begin() + (i + 1) * cols);
    const auto mask = reference_mask(row, 12);
    for (index_t j = 0; j < cols; ++j) CHECK((out[static_cast<std::size_t>(i * cols + j)] != 0) == mask[static_cast<std::size_t>(j)]);
  }
  sparse::prune_params nm;
  nm.scope = sparse::prune_scope::n_of_m;
  const auto r = sparse::prune_magnitude<double>(moecomp::host_context(1), nm, wv, ov);
  CHECK(r.kept == rows * cols / 2);
  for (index_t i = 0; i < rows; ++i)
    for (index_t g = 0; g < cols; g += 4) {
      const std::vector<double> run(w.begin() + i * cols + g, w.begin() + i * cols + g + 4);
      const auto mask = reference_mask(run, 2);
      for (index_t q = 0; q < 4; ++q)
        CHECK((out[static_cast<std::size_t>(i * cols + g + q)] != 0) == mask[static_cast<std::size_t>(q)]);
    }
}

TEST_CASE("prune: bad input is refused with a message naming the argument") {
  std::vector<double> w = values<double>(4 * 6, 70, 0);
  const moecomp::host_context ctx(1);
  const moecomp::matrix_view<double> v(w.data(), 4, 6);
  CHECK_THROWS_WITH_AS(sparse::prune_magnitude<double>(ctx, sparse::prune_params{}, v),
                       "prune_magnitude: exactly one of params.sparsity and params.keep must be given, got neither",
                       moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(sparse::prune_magnitude<double>(ctx, with_sparsity(1.5), v),
                       "prune_magnitude: params.sparsity must be in [0, 1], got 1.5", moecomp::invalid_argument);
  sparse::prune_params nm;
  nm.scope = sparse::prune_scope::n_of_m;
  nm.m = 4;
  CHECK_THROWS_WITH_AS(sparse::prune_magnitude<double>(ctx, nm, v),
                       "prune_magnitude: w's columns must be a multiple of params.m = 4 for N:M pruning, got 6",
                       moecomp::invalid_argument);
  w[7] = std::nan("");
  CHECK_THROWS_WITH_AS(sparse::prune_magnitude<double>(ctx, with_sparsity(0.5), v),
                       "prune_magnitude: w must be finite, got nan at (1, 1)", moecomp::invalid_argument);
  std::vector<double> other(24);
  CHECK_THROWS_AS(sparse::prune_magnitude<double>(ctx, with_sparsity(0.5), moecomp::matrix_view<const double>(w.data(), 4, 6),
                                                  moecomp::matrix_view<double>(w.data() + 1, 4, 5)),
                  moecomp::invalid_argument);
}

// The device's matrix-scope algorithm (<moecomp/cuda/sparse/prune.cuh>) is the radix select of
// sparse_element.hpp over 8-bit digit histograms, a second select over the storage offsets of the ties, and
// threshold_kept per entry. Its rules run here on the host, with the histograms counted by loops instead of
// cub::DeviceHistogram, and must keep exactly what the host's prune_magnitude keeps.
namespace {
template <class T>
std::vector<T> device_style_prune(const std::vector<T>& storage, index_t rows, index_t cols, index_t stride,
                                  index_t kept, double& threshold) {
  using key = typename sparse::detail::magnitude_key<T>::type;
  std::vector<unsigned long long> histogram;
  const auto count_digits = [&](auto digit_of, int width) {
    histogram.assign(std::size_t(1) << width, 0);
    for (index_t i = 0; i < rows; ++i)
      for (index_t j = 0; j < cols; ++j) {
        const int d = digit_of(i * stride + j);
        if (d >= 0) ++histogram[static_cast<std::size_t>(d)];  // the histogram's range drops -1
      }
    return static_cast<const unsigned long long*>(histogram.data());
  };
  const auto key_at = [&](index_t offset) {
    return sparse::detail::magnitude_key<T>::of(storage[static_cast<std::size_t>(offset)]);
  };
  sparse::detail::threshold_rule<key> rule;
  rule.keep_none = kept == 0;
  threshold = std::numeric_limits<double>::infinity();
  if (kept > 0) {
    index_t remaining = kept, equal = 0;
    rule.threshold = sparse::detail::radix_select_loop<key>(
        static_cast<int>(8 * sizeof(key)) - 1, true, remaining, equal,
        [&](const sparse::detail::radix_digit_rule<key>& digits) {
          return count_digits([&](index_t offset) { return digits(key_at(offset)); }, digits.width);
        });
    rule.last_tie = std::numeric_limits<index_t>::max();
    if (remaining < equal) {
      const auto last_offset = static_cast<std::uint64_t>((rows - 1) * stride + cols - 1);
      int bits = 1;
      while (bits < 63 && (last_offset >> bits) != 0) ++bits;
      index_t rank = remaining, ties = 0;
      rule.last_tie = static_cast<index_t>(sparse::detail::radix_select_loop<std::uint64_t>(
          bits, false, rank, ties, [&](const sparse::detail::radix_digit_rule<std::uint64_t>& digits) {
            return count_digits(
                [&](index_t offset) {
                  return key_at(offset) == rule.threshold ? digits(static_cast<std::uint64_t>(offset)) : -1;
                },
                digits.width);
          }));
    }
    threshold = sparse::detail::magnitude_key<T>::value(rule.threshold);
  }
  std::vector<T> out(static_cast<std::size_t>(rows * cols));
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) {
      const T v = storage[static_cast<std::size_t>(i * stride + j)];
      out[static_cast<std::size_t>(i * cols + j)] =
          sparse::detail::threshold_kept(rule, key_at(i * stride + j), i * stride + j) ? v : T{};
    }
  return out;
}
}  // namespace

TEST_CASE_TEMPLATE("prune: the device's radix select and tie cut, run on the host, keep the host's entries", T, float,
                   double, moecomp::bfloat16, moecomp::half) {
  const index_t rows = 23, cols = 190, stride = 201;
  for (int levels : {0, 7}) {
    const auto storage = values<T>(rows * stride, 80 + static_cast<std::uint64_t>(levels), levels);
    for (double s : {0.0, 0.3, 0.75, 0.999, 1.0}) {
      CAPTURE(levels);
      CAPTURE(s);
      std::vector<T> host(static_cast<std::size_t>(rows * cols));
      const auto r = sparse::prune_magnitude<T>(moecomp::host_context(1), with_sparsity(s),
                                                moecomp::matrix_view<const T>(storage.data(), rows, cols, stride),
                                                moecomp::matrix_view<T>(host.data(), rows, cols));
      double threshold = 0;
      const auto device = device_style_prune(storage, rows, cols, stride, r.kept, threshold);
      CHECK(std::memcmp(device.data(), host.data(), host.size() * sizeof(T)) == 0);
      CHECK(threshold == r.threshold);
    }
  }
}

TEST_CASE("prune: the per-element rules the device shares with the host") {
  // pick_digit walks from the top (largest first) or the bottom, leaving the rank within the digit.
  const unsigned long long counts[4] = {5, 0, 2, 3};
  index_t remaining = 4;
  CHECK(sparse::detail::pick_digit(counts, 4, true, remaining) == 2);
  CHECK(remaining == 1);
  remaining = 6;
  CHECK(sparse::detail::pick_digit(counts, 4, false, remaining) == 2);
  CHECK(remaining == 1);
  remaining = 3;
  CHECK(sparse::detail::pick_digit(counts, 4, true, remaining) == 3);
  CHECK(remaining == 3);
  // radix_digit_rule: the digit under the fixed prefix, -1 for keys that left it.
  sparse::detail::radix_digit_rule<std::uint32_t> rule;
  rule.total_bits = 16;
  rule.fixed_bits = 8;
  rule.prefix = 0xab00u;
  rule.shift = 0;
  rule.width = 8;
  CHECK(rule(0xab37u) == 0x37);
  CHECK(rule(0xac37u) == -1);
  // threshold_kept: above the threshold always, ties up to last_tie, nothing under keep_none.
  sparse::detail::threshold_rule<std::uint32_t> t;
  t.threshold = 10;
  t.last_tie = 5;
  CHECK(sparse::detail::threshold_kept(t, 11u, 100));
  CHECK(sparse::detail::threshold_kept(t, 10u, 5));
  CHECK_FALSE(sparse::detail::threshold_kept(t, 10u, 6));
  CHECK_FALSE(sparse::detail::threshold_kept(t, 9u, 0));
  t.keep_none = true;
  CHECK_FALSE(sparse::detail::threshold_kept(t, 11u, 0));
  // n_of_m_kept: larger magnitudes first, ties to the lower index.
  const float run[4] = {-2.0f, 1.0f, 2.0f, -1.0f};
  CHECK(sparse::detail::n_of_m_kept(run, 4, 2, 0));
  CHECK(sparse::detail::n_of_m_kept(run, 4, 2, 2));
  CHECK_FALSE(sparse::detail::n_of_m_kept(run, 4, 2, 1));
  CHECK(sparse::detail::n_of_m_kept(run, 4, 3, 1));
  CHECK_FALSE(sparse::detail::n_of_m_kept(run, 4, 3, 3));
  // magnitude_key::value is the magnitude a key stands for.
  CHECK(sparse::detail::magnitude_key<float>::value(sparse::detail::magnitude_key<float>::of(-0.375f)) == 0.375);
  CHECK(sparse::detail::magnitude_key<double>::value(sparse::detail::magnitude_key<double>::of(-1e-300)) == 1e-300);
  CHECK(sparse::detail::magnitude_key<moecomp::half>::value(
            sparse::detail::magnitude_key<moecomp::half>::of(moecomp::half(-3.5f))) == 3.5);
}
