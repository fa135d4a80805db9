// The expert-graph partition (Eq. 5 of "Diversifying the expert knowledge"): the objective identity, the exact
// solver against enumeration of every partition (with and without a group-size bound, float and double, its
// tie rule on tie-heavy integer distances), the heuristic against the exact optimum at N = 16, the lower bound
// never above the optimum, determinism across seeds and thread counts, and bad input. The black-box check
// against a Python enumeration is tests/peers/test_partition_bruteforce.py.
#include <moecomp/similarity/partition.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace similarity = moecomp::similarity;
using moecomp::host_context;
using moecomp::host_matrix;
using moecomp::index_t;
using moecomp::matrix_view;
using moecomp::vector_view;
using moecomp_test::thrown_message;

namespace {

using labelling = std::vector<std::int64_t>;

/// Symmetric distances with a zero diagonal: uniform in [0, 1), or small integers 0 .. 3 (many exact ties,
/// and sums without rounding).
template <class T>
host_matrix<T> random_distances(index_t n, std::uint64_t seed, bool integers = false) {
  host_matrix<T> d(n, n);
  moecomp::random_generator rng(seed);
  for (index_t i = 0; i < n; ++i) {
    d(i, i) = T(0);
    for (index_t j = i + 1; j < n; ++j)
      d(i, j) = d(j, i) = integers ? static_cast<T>(rng.uniform_index(4)) : rng.uniform<T>();
  }
  return d;
}

/// `groups` planted groups of `per` experts, scattered over the indices: distances 0.1 .. 0.3 inside a
/// group, 1 .. 2 between groups. Returns the planted group of each expert through `planted`.
template <class T>
host_matrix<T> planted_distances(index_t groups, index_t per, std::uint64_t seed, labelling& planted) {
  const index_t n = groups * per;
  std::vector<index_t> order(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  moecomp::random_generator rng(seed);
  rng.shuffle(order.begin(), order.end());
  planted.assign(static_cast<std::size_t>(n), 0);
  for (index_t q = 0; q < n; ++q) planted[static_cast<std::size_t>(order[static_cast<std::size_t>(q)])] = q / per;
  host_matrix<T> d(n, n);
  for (index_t i = 0; i < n; ++i) {
    d(i, i) = T(0);
    for (index_t j = i + 1; j < n; ++j) {
      const bool same = planted[static_cast<std::size_t>(i)] == planted[static_cast<std::size_t>(j)];
      d(i, j) = d(j, i) = static_cast<T>(same ? 0.1 + 0.2 * rng.uniform<double>() : 1.0 + rng.uniform<double>());
    }
  }
  return d;
}

/// Groups numbered in order of their smallest member.
labelling canonical(labelling labels) {
  std::vector<std::int64_t> id(labels.size(), -1);
  std::int64_t next = 0;
  for (auto& l : labels) {
    auto& m = id[static_cast<std::size_t>(l)];
    if (m < 0) m = next++;
    l = m;
  }
  return labels;
}

/// Eq. 5 exactly as the paper writes it: for each group, the sum of D over ordered pairs inside it minus the
/// sum over ordered pairs from it to every other group.
template <class T>
double eq5_literal(const host_matrix<T>& d, const labelling& labels, index_t groups) {
  const index_t n = d.rows();
  double objective = 0;
  for (index_t g = 0; g < groups; ++g) {
    double inside = 0, outside = 0;
    for (index_t j = 0; j < n; ++j) {
      if (labels[static_cast<std::size_t>(j)] != g) continue;
      for (index_t k = 0; k < n; ++k)
        (labels[static_cast<std::size_t>(k)] == g ? inside : outside) += static_cast<double>(d(j, k));
    }
    objective += inside - outside;
  }
  return objective;
}

/// W: D over unordered same-group pairs, in row-major order (the library's summation order).
template <class T>
double within(const host_matrix<T>& d, const labelling& labels) {
  double w = 0;
  for (index_t i = 0; i < d.rows(); ++i)
    for (index_t j = i + 1; j < d.rows(); ++j)
      if (labels[static_cast<std::size_t>(i)] == labels[static_cast<std::size_t>(j)]) w += static_cast<double>(d(i, j));
  return w;
}

/// The documented tie rule between two canonical labellings of equal W: compare the groups in order; at the
/// first group that differs, the winner holds the smallest expert that is in exactly one of the two groups.
bool wins_tie(const labelling& a, const labelling& b) {
  const index_t n = static_cast<index_t>(a.size());
  for (std::int64_t g = 0;; ++g) {
    bool any = false;
    for (index_t i = 0; i < n; ++i) {
      const bool in_a = a[static_cast<std::size_t>(i)] == g, in_b = b[static_cast<std::size_t>(i)] == g;
      any = any || in_a || in_b;
      if (in_a != in_b) return in_a;
    }
    if (!any) return false;  // identical
  }
}

struct enumerated {
  double w = std::numeric_limits<double>::infinity();
  labelling labels;
  std::int64_t partitions = 0;
  std::int64_t optima = 0;  // labellings attaining w
};

/// Every partition of 0 .. n-1 into exactly r groups of at most max_size (0: any), as restricted growth
/// strings; the least W, ties by wins_tie.
template <class T>
enumerated enumerate_all(const host_matrix<T>& d, index_t r, index_t max_size) {
  const index_t n = d.rows(), cap = max_size > 0 ? max_size : n;
  enumerated best;
  labelling labels(static_cast<std::size_t>(n), 0);
  std::vector<index_t> sizes(static_cast<std::size_t>(r), 0);
  std::function<void(index_t, index_t)> visit = [&](index_t i, index_t used) {
    if (n - i < r - used) return;  // too few experts left to open the remaining groups
    if (i == n) {
      ++best.partitions;
      const double w = within(d, labels);
      best.optima = w < best.w ? 1 : best.optima + (w == best.w);
      if (w < best.w || (w == best.w && wins_tie(labels, best.labels))) {
        best.w = w;
        best.labels = labels;
      }
      return;
    }
    for (index_t g = 0; g <= std::min(used, r - 1); ++g) {
      if (sizes[static_cast<std::size_t>(g)] == cap) continue;
      labels[static_cast<std::size_t>(i)] = g;
      ++sizes[static_cast<std::size_t>(g)];
      visit(i + 1, g == used ? used + 1 : used);
      --sizes[static_cast<std::size_t>(g)];
    }
  };
  visit(0, 0);
  return best;
}

struct solved {
  labelling labels;
  similarity::partition_result result;
};

template <class T>
solved solve(const host_matrix<T>& d, const similarity::partition_params& params, const host_context& ctx = host_context(1)) {
  solved out{labelling(static_cast<std::size_t>(d.rows()), -1), {}};
  out.result = similarity::partition_experts<T>(ctx, params, d.const_view(),
                                                vector_view<std::int64_t>(out.labels.data(), d.rows()));
  return out;
}

similarity::partition_params with(index_t groups, similarity::partition_method method, index_t max_size = 0) {
  similarity::partition_params p;
  p.groups = groups;
  p.method = method;
  p.max_size = max_size;
  return p;
}

/// The library's lower bound on W, before it is clamped to the objective (the test of its validity).
template <class T>
double raw_lower_bound(const host_matrix<T>& d, index_t groups, index_t max_size) {
  const index_t n = d.rows();
  std::vector<double> dist(static_cast<std::size_t>(n * n));
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j) dist[static_cast<std::size_t>(i * n + j)] = i == j ? 0.0 : static_cast<double>(d(i, j));
  similarity::detail::partition_problem p;
  p.n = n;
  p.groups = groups;
  p.capacity = max_size > 0 ? max_size : n;
  p.dist = dist.data();
  return similarity::detail::within_lower_bound(host_context(1), p);
}

}  // namespace

TEST_CASE("partition: Eq. 5 as the paper writes it is 4 W - 2 T + trace(D)") {
  // The within sum runs over ordered pairs (each unordered pair twice, plus the diagonal), and every pair
  // across two groups is subtracted once from each side: 2 W + trace - 2 (T - W).
  moecomp::random_generator rng(5);
  for (index_t n : {2, 5, 9, 14}) {
    auto d = random_distances<double>(n, 100 + static_cast<std::uint64_t>(n));
    double trace = 0;
    for (index_t i = 0; i < n; ++i) trace += d(i, i) = rng.uniform<double>();  // the diagonal counts once
    double total = 0;
    for (index_t i = 0; i < n; ++i)
      for (index_t j = i + 1; j < n; ++j) total += d(i, j);
    for (int trial = 0; trial < 20; ++trial) {
      const index_t r = 1 + static_cast<index_t>(rng.uniform_index(static_cast<std::uint64_t>(n)));
      labelling labels(static_cast<std::size_t>(n));
      for (index_t i = 0; i < n; ++i) labels[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(rng.uniform_index(static_cast<std::uint64_t>(r)));
      CHECK(eq5_literal(d, labels, r) == doctest::Approx(4 * within(d, labels) - 2 * total + trace).epsilon(1e-12));
    }
    // The library reports the same number for the labels it returns.
    const index_t r = std::max<index_t>(1, n / 3);
    const solved s = solve(d, with(r, similarity::partition_method::automatic));
    CHECK(s.result.objective == doctest::Approx(eq5_literal(d, s.labels, r)).epsilon(1e-12));
    CHECK(s.result.within == within(d, s.labels));
    CHECK(s.result.total == total);
  }
}

TEST_CASE_TEMPLATE("partition: the exact solver finds the optimum of every enumerated partition", T, float, double) {
  for (index_t n : {1, 2, 3, 5, 7, 8, 10}) {
    for (index_t r = 1; r <= n; r += (n > 5 ? 2 : 1)) {
      for (index_t max_size : {index_t(0), (n + r - 1) / r, (n + r - 1) / r + 1}) {
        CAPTURE(n);
        CAPTURE(r);
        CAPTURE(max_size);
        const auto d = random_distances<T>(n, 1000 * static_cast<std::uint64_t>(n) + static_cast<std::uint64_t>(r));
        const enumerated all = enumerate_all(d, r, max_size);
        const solved s = solve(d, with(r, similarity::partition_method::exact, max_size));
        CHECK(s.result.method == similarity::partition_method::exact);
        CHECK(s.result.optimal);
        CHECK(s.result.within == doctest::Approx(all.w).epsilon(1e-12));
        CHECK(s.labels == all.labels);
        CHECK(s.result.lower_bound == s.result.objective);
        CHECK(s.result.criterion == 0.0);
        CHECK(raw_lower_bound(d, r, max_size) <= all.w);
      }
    }
  }
}

TEST_CASE("partition: ties go to the documented rule (integer distances, exact sums)") {
  // With distances 0 .. 3 many partitions share the optimum; every sum is exact, so the solver's choice is
  // exactly the rule: group by group in order, the group holding the smallest expert where two candidates
  // differ wins.
  int tied_instances = 0;
  for (std::uint64_t seed = 0; seed < 12; ++seed)
    for (index_t r : {2, 3, 4}) {
      const auto d = random_distances<double>(9, 7000 + seed, /*integers=*/true);
      for (index_t max_size : {index_t(0), index_t(3)}) {
        CAPTURE(seed);
        CAPTURE(r);
        if (max_size * r < 9 && max_size > 0) continue;
        const enumerated all = enumerate_all(d, r, max_size);
        const solved s = solve(d, with(r, similarity::partition_method::exact, max_size));
        CHECK(s.result.within == all.w);
        CHECK(s.labels == all.labels);
        tied_instances += all.optima > 1;
      }
    }
  CHECK(tied_instances >= 20);  // the rule is really exercised: most of these optima are shared
  // All distances equal: every balanced partition ties, and the rule takes experts 0, 1, 2 first.
  host_matrix<double> flat(9, 9);
  for (index_t i = 0; i < 9; ++i)
    for (index_t j = 0; j < 9; ++j) flat(i, j) = i == j ? 0.0 : 1.0;
  const solved s = solve(flat, with(3, similarity::partition_method::exact));
  CHECK(s.labels == labelling{0, 0, 0, 1, 1, 1, 2, 2, 2});
  CHECK(enumerate_all(flat, 3, 0).optima == 280);  // 9! / (3!^3 3!)
}

TEST_CASE("partition: the heuristic reaches the exact optimum at N = 16, and its bound stays below it") {
  int instances = 0;
  for (std::uint64_t seed = 0; seed < 6; ++seed) {
    for (index_t r : {2, 4, 5}) {
      for (index_t max_size : {index_t(0), (16 + r - 1) / r}) {
        CAPTURE(seed);
        CAPTURE(r);
        CAPTURE(max_size);
        labelling planted;
        const auto d = seed % 2 == 0 ? random_distances<double>(16, 300 + seed)
                                     : planted_distances<double>(4, 4, 300 + seed, planted);
        const solved exact = solve(d, with(r, similarity::partition_method::exact, max_size));
        auto params = with(r, similarity::partition_method::heuristic, max_size);
        params.seed = seed;
        const solved heuristic = solve(d, params);
        CHECK(heuristic.result.method == similarity::partition_method::heuristic);
        CHECK(heuristic.result.within == doctest::Approx(exact.result.within).epsilon(1e-12));
        CHECK(heuristic.result.lower_bound <= heuristic.result.objective);
        CHECK(heuristic.result.within_lower_bound <= exact.result.within);
        CHECK(raw_lower_bound(d, r, max_size) <= exact.result.within);
        CHECK(heuristic.result.criterion >= 0.0);
        if (max_size > 0)
          for (std::int64_t g = 0; g < r; ++g)
            CHECK(std::count(heuristic.labels.begin(), heuristic.labels.end(), g) <= max_size);
        ++instances;
      }
    }
  }
  CHECK(instances == 36);
}

TEST_CASE("partition: planted groups are recovered, by both methods") {
  labelling planted;
  const auto d = planted_distances<double>(4, 4, 11, planted);
  const solved exact = solve(d, with(4, similarity::partition_method::exact));
  CHECK(exact.labels == canonical(planted));
  // 16 groups of 4 among 64 experts: beyond the exact solver.
  const auto big = planted_distances<float>(16, 4, 12, planted);
  const solved heuristic = solve(big, with(16, similarity::partition_method::automatic));
  CHECK(heuristic.result.method == similarity::partition_method::heuristic);
  CHECK(heuristic.labels == canonical(planted));
  CHECK(heuristic.labels[0] == 0);
  CHECK(heuristic.result.lower_bound <= heuristic.result.objective);
  CHECK(heuristic.result.within_lower_bound > 0.0);
}

TEST_CASE("partition: labels are canonical, and r = 1, r = N and N = 1 are solved outright") {
  const auto d = random_distances<double>(12, 21);
  for (auto method : {similarity::partition_method::exact, similarity::partition_method::heuristic}) {
    const solved s = solve(d, with(5, method));
    CHECK(s.labels == canonical(s.labels));
    const solved one = solve(d, with(1, method));
    CHECK(one.labels == labelling(12, 0));
    CHECK(one.result.optimal);
    CHECK(one.result.within == one.result.total);
    const solved each = solve(d, with(12, method));
    CHECK(each.result.optimal);
    CHECK(each.result.within == 0.0);
    for (index_t i = 0; i < 12; ++i) CHECK(each.labels[static_cast<std::size_t>(i)] == i);
  }
  host_matrix<double> single(1, 1);
  single(0, 0) = 0;
  const solved s = solve(single, with(1, similarity::partition_method::automatic));
  CHECK(s.labels == labelling{0});
  CHECK(s.result.objective == 0.0);
}

TEST_CASE("partition: the method resolves by N, and names parse") {
  similarity::partition_params p;
  p.groups = 2;
  CHECK(similarity::resolved_partition_method(p, 16) == similarity::partition_method::exact);
  CHECK(similarity::resolved_partition_method(p, 17) == similarity::partition_method::heuristic);
  p.exact_limit = 4;
  CHECK(similarity::resolved_partition_method(p, 5) == similarity::partition_method::heuristic);
  p.method = similarity::partition_method::exact;
  CHECK(similarity::resolved_partition_method(p, 18) == similarity::partition_method::exact);
  for (auto m : {similarity::partition_method::automatic, similarity::partition_method::exact,
                 similarity::partition_method::heuristic})
    CHECK(similarity::parse_partition_method(similarity::to_string(m)) == m);
  CHECK(thrown_message([] { similarity::parse_partition_method("best"); }) ==
        "method: expected auto, exact or heuristic, got 'best'");
}

TEST_CASE("partition: the same seed gives the same labels, at any thread count") {
  const auto d = random_distances<double>(40, 77);
  auto params = with(6, similarity::partition_method::heuristic, 8);
  params.seed = 3;
  const solved first = solve(d, params, host_context(1));
  for (int threads : {1, 2, 3}) {
    CAPTURE(threads);
    const solved again = solve(d, params, host_context(threads));
    CHECK(again.labels == first.labels);
    CHECK(again.result.within == first.result.within);
    CHECK(again.result.lower_bound == first.result.lower_bound);
    CHECK(again.result.best_restart == first.result.best_restart);
    CHECK(again.result.iterations == first.result.iterations);
  }
  const auto small = random_distances<float>(14, 78);
  const solved exact = solve(small, with(4, similarity::partition_method::exact), host_context(1));
  for (int threads : {2, 3}) {
    const solved again = solve(small, with(4, similarity::partition_method::exact), host_context(threads));
    CHECK(again.labels == exact.labels);
    CHECK(again.result.iterations == exact.result.iterations);
  }
}

TEST_CASE("partition: a size bound is honoured by the heuristic beyond the exact range") {
  const auto d = random_distances<double>(30, 91);
  const solved s = solve(d, with(4, similarity::partition_method::heuristic, 8));
  for (std::int64_t g = 0; g < 4; ++g) {
    const auto size = std::count(s.labels.begin(), s.labels.end(), g);
    CHECK(size >= 1);
    CHECK(size <= 8);
  }
  // Without the bound the groups are free; with it the optimum can only be worse or equal.
  const solved free = solve(d, with(4, similarity::partition_method::heuristic));
  CHECK(free.result.within <= s.result.within + 1e-12);
}

TEST_CASE("partition: bad input is refused with a message naming the argument") {
  auto d = random_distances<double>(4, 1);
  labelling labels(4);
  auto call = [&](const host_matrix<double>& m, similarity::partition_params p, index_t label_count = 4) {
    return thrown_message([&] {
      similarity::partition_experts<double>(host_context(1), p, m.const_view(),
                                            vector_view<std::int64_t>(labels.data(), label_count));
    });
  };
  auto p = with(2, similarity::partition_method::automatic);
  CHECK(call(d, with(0, similarity::partition_method::automatic)) ==
        "partition_experts: params.groups must be in [1, N = 4] (N: the rows of distances), got 0");
  CHECK(call(d, with(5, similarity::partition_method::automatic)) ==
        "partition_experts: params.groups must be in [1, N = 4] (N: the rows of distances), got 5");
  CHECK(call(d, with(2, similarity::partition_method::automatic, 1)) ==
        "partition_experts: params.max_size x params.groups must be >= the experts (N = 4), got 1 x 2");
  CHECK(call(d, p, 3) == "partition_experts: labels must have 4 entries (the rows of distances), got 3");
  host_matrix<double> wide(3, 4);
  CHECK(call(wide, p) == "partition_experts: distances must be square (N x N) with N >= 1, got 3 x 4");
  auto nan = d;
  nan(1, 2) = std::numeric_limits<double>::quiet_NaN();
  CHECK(call(nan, p) == "partition_experts: distances must be finite, got nan at (1, 2)");
  auto negative = d;
  negative(0, 3) = negative(3, 0) = -1;
  CHECK(call(negative, p) == "partition_experts: distances must be >= 0, got -1 at (0, 3)");
  auto skew = d;
  skew(0, 1) = 0.5;
  skew(1, 0) = 0.25;
  CHECK(call(skew, p) == "partition_experts: distances must be symmetric (|D_ij - D_ji| <= "
                         "params.symmetry_tolerance = 1e-06 x max(D_ij, D_ji)), got 0.5 at (0, 1) and 0.25 at (1, 0)");
  auto bad = p;
  bad.restarts = 0;
  CHECK(call(d, bad) == "partition_experts: params.restarts must be >= 1, got 0");
  bad = p;
  bad.exact_limit = 21;
  CHECK(call(d, bad) == "partition_experts: params.exact_limit must be in [0, 20], got 21");
  const auto big = random_distances<double>(21, 2);
  labels.assign(21, 0);
  CHECK(call(big, with(3, similarity::partition_method::exact), 21) ==
        "partition_experts: params.method must be auto or heuristic for more than 20 experts (exact takes O(r 3^N) "
        "time), got exact with N = 21");
  // Within the tolerance the pair is accepted, and the mean is used.
  labels.assign(4, 0);
  auto near = d;
  near(0, 1) = near(1, 0) * (1 + 1e-7);
  CHECK_NOTHROW(similarity::partition_experts<double>(host_context(1), p, near.const_view(),
                                                      vector_view<std::int64_t>(labels.data(), 4)));
}
