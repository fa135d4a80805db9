#pragma once
// Pieces of HC-SMoE's fix-dom merge shared by the host (merge/detail/merge_host.hpp) and the device
// (cuda/merge/detail/fix_dom_device.cuh): the token cap's seeded draw (host code on both paths: the device
// takes the drawn token ids as host data) and the correlation score each dominant neuron is ranked by
// (MOECOMP_HOST_DEVICE, so the host tests exercise what the device's argmax reads).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/random.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace merge {
namespace detail {

/// At most `cap` of `tokens` (cap 0: all), drawn without replacement by a partial Fisher-Yates shuffle from
/// (seed, stream), then put back in ascending position order.
inline std::vector<index_t> cap_tokens(std::vector<index_t> tokens, index_t cap, std::uint64_t seed, std::uint64_t stream) {
  const auto n = static_cast<index_t>(tokens.size());
  if (cap == 0 || n <= cap) return tokens;
  random_generator rng(seed, stream);
  std::vector<index_t> position(static_cast<std::size_t>(n));
  std::iota(position.begin(), position.end(), index_t(0));
  for (index_t i = 0; i < cap; ++i) {
    const auto j = i + static_cast<index_t>(rng.uniform_index(static_cast<std::uint64_t>(n - i)));
    std::swap(position[static_cast<std::size_t>(i)], position[static_cast<std::size_t>(j)]);
  }
  position.resize(static_cast<std::size_t>(cap));
  std::sort(position.begin(), position.end());
  std::vector<index_t> out;
  out.reserve(position.size());
  for (index_t p : position) out.push_back(tokens[static_cast<std::size_t>(p)]);
  return out;
}

/// How many tokens cap_tokens keeps of n.
constexpr index_t capped_count(index_t n, index_t cap) noexcept { return cap == 0 || n <= cap ? n : cap; }

/// fix-dom's score of member neuron b for dominant neuron a: C[a, b] = cov / (sd_a sd_b + eps) written from the
/// Pearson correlation r (the standardised columns' dot product) as r * s / (s + eps), s = sd_a sd_b =
/// (norm_a * scale) * norm_b with the centred norms and scale = 1 / (tokens - 1). A NaN score (eps 0 with a
/// constant neuron) is -infinity: it never wins the argmax, as on the host, where `v > best` is false for NaN.
/// The argmax over a takes the largest score, ties to the lowest a (every a scoring -infinity: a = 0).
MOECOMP_HOST_DEVICE inline double fix_dom_score(double r, double norm_a, double norm_b, double scale, double eps) noexcept {
  const double s = norm_a * scale * norm_b;
  const double v = r * (s / (s + eps));
  return v == v ? v : -HUGE_VAL;
}

}  // namespace detail
}  // namespace merge
MOECOMP_NAMESPACE_END
