#pragma once
// Helpers shared by the doctest suites.
#include <doctest/doctest.h>
#include <moecomp/core/context.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/random.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace moecomp_test {

/// Runs `f` and returns the message of the moecomp::invalid_argument it throws; a failed check (and "")
/// when it throws nothing.
template <class F>
std::string thrown_message(F&& f) {
  try {
    f();
  } catch (const moecomp::invalid_argument& e) {
    return e.what();
  }
  FAIL_CHECK("expected moecomp::invalid_argument");
  return "";
}

/// A random permutation of 0..n-1 (Fisher-Yates with moecomp's generator).
inline std::vector<moecomp::index_t> random_permutation(moecomp::index_t n, std::uint64_t seed) {
  std::vector<moecomp::index_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), moecomp::index_t(0));
  moecomp::random_generator rng(seed);
  rng.shuffle(p.begin(), p.end());
  return p;
}

namespace detail {

template <class T>
std::size_t differing_entries(const T& a, const T& b) {
  static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>, "compare numbers, enums, or std::vectors of them");
  return std::memcmp(&a, &b, sizeof(T)) == 0 ? 0 : 1;
}

template <class T>
std::size_t differing_entries(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  std::size_t count = 0;
  for (std::size_t i = 0; i < a.size(); ++i) count += differing_entries(a[i], b[i]);
  return count;
}

template <class T>
struct is_tuple : std::false_type {};
template <class... Ts>
struct is_tuple<std::tuple<Ts...>> : std::true_type {};

template <class Tuple, std::size_t... I>
void check_same_outputs(const Tuple& want, const Tuple& got, std::index_sequence<I...>) {
  auto check_one = [](std::size_t output, const auto& w, const auto& g) {
    const std::size_t differing = differing_entries(w, g);
    CHECK_MESSAGE(differing == 0, "output " << output << " of the returned tuple: " << differing
                                            << " entries differ from the 1-thread run");
  };
  (check_one(I, std::get<I>(want), std::get<I>(got)), ...);
}

}  // namespace detail

/// max |got - want| / max |want| over two matrices of the same shape (anything with rows(), cols(), data()).
template <class M>
double max_relative_error(const M& got, const M& want) {
  double worst = 0, scale = 0;
  const auto size = static_cast<std::size_t>(want.rows() * want.cols());
  for (std::size_t i = 0; i < size; ++i) scale = std::max(scale, std::abs(static_cast<double>(want.data()[i])));
  for (std::size_t i = 0; i < size; ++i)
    worst = std::max(worst, std::abs(static_cast<double>(got.data()[i]) - static_cast<double>(want.data()[i])) / scale);
  return worst;
}

/// Thread-count determinism (docs/core.md: results do not depend on host_context::num_threads unless a
/// module's page says so). `run(ctx)` computes with the given context and returns its outputs: a number,
/// an enum, a std::vector of them, or a std::tuple of such values. This runs it at host_context(1) and at
/// each of thread_counts_to_compare (even, odd, and more threads than a small machine has cores), and
/// CHECKs that every output has the 1-thread run's bytes exactly (no tolerance; NaN payloads and the sign
/// of zero count), reporting how many entries differ. Inputs must be large enough for the parallel paths.
inline constexpr int thread_counts_to_compare[] = {2, 3, 7};
template <class F>
void check_same_at_thread_counts(F&& run) {
  const auto want = run(moecomp::host_context(1));
  using outputs = std::decay_t<decltype(want)>;
  for (int threads : thread_counts_to_compare) {
    CAPTURE(threads);
    const outputs got = run(moecomp::host_context(threads));
    if constexpr (detail::is_tuple<outputs>::value) {
      detail::check_same_outputs(want, got, std::make_index_sequence<std::tuple_size_v<outputs>>{});
    } else {
      const std::size_t differing = detail::differing_entries(want, got);
      CHECK_MESSAGE(differing == 0, differing << " entries differ from the 1-thread run");
    }
  }
}

}  // namespace moecomp_test
