// Hierarchical clustering on the host: hand-computed linkage matrices for all seven methods, the tie rules
// (Prim's lowest index, the NN chain's preference for its previous element), +inf distances, structural
// properties on random data, a brute-force reference on inputs large enough to exercise the compaction
// and the neighbour summaries, equivalence of the input forms, thread-count determinism, and bad input.
// (The comparison with scipy itself is tests/peers/test_linkage_scipy.py.)
#include <doctest/doctest.h>

#include "test_support.hpp"
#include <moecomp/cluster/linkage.hpp>
#include <moecomp/moecomp.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

using moecomp::host_context;
using moecomp::host_matrix;
using moecomp::host_vector;
using moecomp::index_t;
using moecomp_test::thrown_message;
namespace cluster = moecomp::cluster;
namespace distance = moecomp::distance;
using cluster::linkage_method;

namespace {

const linkage_method all_methods[] = {linkage_method::single,   linkage_method::complete, linkage_method::average,
                                      linkage_method::weighted, linkage_method::ward,     linkage_method::centroid,
                                      linkage_method::median};
const double inf = std::numeric_limits<double>::infinity();

cluster::linkage_params with(linkage_method m, distance::metric metric = distance::metric::euclidean) {
  cluster::linkage_params p;
  p.method = m;
  p.metric = metric;
  return p;
}

host_matrix<double> column_points(const std::vector<double>& values) {
  host_matrix<double> x(static_cast<index_t>(values.size()), 1);
  for (std::size_t i = 0; i < values.size(); ++i) x(static_cast<index_t>(i), 0) = values[i];
  return x;
}

host_vector<double> condensed(const std::vector<double>& values) {
  host_vector<double> v(static_cast<index_t>(values.size()));
  for (std::size_t k = 0; k < values.size(); ++k) v[static_cast<index_t>(k)] = values[k];
  return v;
}

struct row {
  double a, b, height, size;
};

void check_z(const host_matrix<double>& z, const std::vector<row>& want, double tolerance = 1e-12) {
  REQUIRE(z.rows() == static_cast<index_t>(want.size()));
  REQUIRE(z.cols() == 4);
  for (index_t i = 0; i < z.rows(); ++i) {
    const row& w = want[static_cast<std::size_t>(i)];
    INFO("row " << i << ": got [" << z(i, 0) << ", " << z(i, 1) << ", " << z(i, 2) << ", " << z(i, 3) << "]");
    CHECK(z(i, 0) == w.a);
    CHECK(z(i, 1) == w.b);
    CHECK(z(i, 3) == w.size);
    if (std::isinf(w.height))
      CHECK(z(i, 2) == w.height);
    else
      CHECK(std::fabs(z(i, 2) - w.height) <= tolerance * std::max(1.0, std::fabs(w.height)));
  }
}

/// Same merges (ids, sizes, order) and heights to a relative tolerance.
void check_same(const host_matrix<double>& got, const host_matrix<double>& want, double tolerance) {
  REQUIRE(got.rows() == want.rows());
  for (index_t i = 0; i < got.rows(); ++i) {
    INFO("row " << i);
    CHECK(got(i, 0) == want(i, 0));
    CHECK(got(i, 1) == want(i, 1));
    CHECK(got(i, 3) == want(i, 3));
    CHECK(std::fabs(got(i, 2) - want(i, 2)) <= tolerance * std::max(1e-300, std::fabs(want(i, 2))));
  }
}

bool identical(const host_matrix<double>& a, const host_matrix<double>& b) {
  return a.rows() == b.rows() && a.storage() == b.storage();
}

template <class T>
host_matrix<T> random_points(index_t n, index_t d, std::uint64_t seed) {
  host_matrix<T> x(n, d);
  moecomp::random_generator rng(seed);
  rng.fill_normal(x.view(), T(0), T(1));
  return x;
}

host_vector<double> condensed_of(const host_matrix<double>& x) {
  host_vector<double> d(distance::condensed_size(x.rows()));
  distance::pairwise_distances_condensed(host_context(), distance::pairwise_distance_params{}, x.view(), d.view());
  return d;
}

/// Linkage by its definition, in O(n^3): merge the globally closest pair (lowest (i, j) on ties) into slot j
/// with the same update formulas; for the reducible methods the merges are then sorted by height. On
/// tie-free input this is the dendrogram of every method, so the fast algorithms must reproduce it.
host_matrix<double> reference_linkage(linkage_method m, const host_vector<double>& condensed_distances, index_t n) {
  std::vector<double> d(static_cast<std::size_t>(n * n), 0.0);
  index_t k = 0;
  for (index_t i = 0; i < n; ++i)
    for (index_t j = i + 1; j < n; ++j)
      d[static_cast<std::size_t>(i * n + j)] = d[static_cast<std::size_t>(j * n + i)] = condensed_distances[k++];
  std::vector<double> size(static_cast<std::size_t>(n), 1.0);
  std::vector<cluster::detail::merge_step> steps;
  for (index_t step = 0; step + 1 < n; ++step) {
    index_t x = -1, y = -1;
    double best = inf;
    for (index_t i = 0; i < n; ++i) {
      if (size[static_cast<std::size_t>(i)] == 0) continue;
      for (index_t j = i + 1; j < n; ++j)
        if (size[static_cast<std::size_t>(j)] != 0 && d[static_cast<std::size_t>(i * n + j)] < best) {
          best = d[static_cast<std::size_t>(i * n + j)];
          x = i;
          y = j;
        }
    }
    steps.push_back({x, y, best});
    const double nx = size[static_cast<std::size_t>(x)], ny = size[static_cast<std::size_t>(y)];
    size[static_cast<std::size_t>(x)] = 0;
    size[static_cast<std::size_t>(y)] = nx + ny;
    for (index_t i = 0; i < n; ++i) {
      if (size[static_cast<std::size_t>(i)] == 0 || i == y) continue;
      const double v = cluster::detail::dispatch_method(m, [&](auto tag) {
        return cluster::detail::lance_williams<decltype(tag)::value>(
            d[static_cast<std::size_t>(i * n + x)], d[static_cast<std::size_t>(i * n + y)], best, nx, ny,
            size[static_cast<std::size_t>(i)]);
      });
      d[static_cast<std::size_t>(i * n + y)] = d[static_cast<std::size_t>(y * n + i)] = v;
    }
  }
  host_matrix<double> z(n - 1, 4);
  cluster::detail::write_linkage_matrix(host_context(), n, steps.data(), cluster::is_monotone(m), z.view());
  return z;
}

/// Structural properties every Z must have.
void check_structure(const host_matrix<double>& z, index_t n, linkage_method m) {
  REQUIRE(z.rows() == n - 1);
  std::vector<int> used(static_cast<std::size_t>(2 * n - 1), 0);
  std::vector<double> size(static_cast<std::size_t>(2 * n - 1), 1.0);
  for (index_t i = 0; i < n - 1; ++i) {
    const auto a = static_cast<index_t>(z(i, 0)), b = static_cast<index_t>(z(i, 1));
    CHECK(a < b);
    CHECK(b < n + i);  // merges only clusters that exist already
    CHECK(static_cast<double>(a) == z(i, 0));
    ++used[static_cast<std::size_t>(a)];
    ++used[static_cast<std::size_t>(b)];
    size[static_cast<std::size_t>(n + i)] = size[static_cast<std::size_t>(a)] + size[static_cast<std::size_t>(b)];
    CHECK(z(i, 3) == size[static_cast<std::size_t>(n + i)]);
    CHECK(z(i, 2) >= 0.0);
    if (cluster::is_monotone(m) && i > 0) CHECK(z(i, 2) >= z(i - 1, 2));
  }
  for (index_t c = 0; c < 2 * n - 2; ++c) CHECK(used[static_cast<std::size_t>(c)] == 1);
  CHECK(z(n - 2, 3) == static_cast<double>(n));
}

}  // namespace

TEST_CASE("four points on a line: every method against its hand-computed Z") {
  // x = 0, 1, 3, 7: D01 = 1, D02 = 3, D03 = 7, D12 = 2, D13 = 6, D23 = 4. All merge {0, 1} first, then 2.
  const host_context ctx;
  const host_matrix<double> x = column_points({0, 1, 3, 7});
  const double third = 1.0 / 3.0;
  struct expected {
    linkage_method m;
    double second, third_height;
  };
  const expected cases[] = {
      {linkage_method::single, 2.0, 4.0},                  // min(3, 2); min(7, 6, 4)
      {linkage_method::complete, 3.0, 7.0},                // max(3, 2); max(7, 6, 4)
      {linkage_method::average, 2.5, 17.0 * third},        // (3 + 2) / 2; (7 + 6 + 4) / 3
      {linkage_method::weighted, 2.5, 5.25},               // (3 + 2) / 2; ((7 + 6) / 2 + 4) / 2
      {linkage_method::ward, std::sqrt(25.0 * third),      // sqrt(2 * 2 * 1 / 3) * |3 - 0.5|
       std::sqrt(1.5) * 17.0 * third},                     // sqrt(2 * 3 * 1 / 4) * |7 - 4/3|
      {linkage_method::centroid, 2.5, 17.0 * third},       // |3 - 0.5|; |7 - 4/3|
      {linkage_method::median, 2.5, 5.25},                 // |3 - 0.5|; |7 - (0.5 + 3) / 2|
  };
  for (const expected& e : cases) {
    CAPTURE(cluster::to_string(e.m));
    const std::vector<row> want = {{0, 1, 1.0, 2}, {2, 4, e.second, 3}, {3, 5, e.third_height, 4}};
    check_z(cluster::linkage(ctx, with(e.m), x.view()), want);
    check_z(cluster::linkage_condensed(ctx, with(e.m), condensed({1, 3, 7, 2, 6, 4}).view()), want);
  }
}

TEST_CASE("centroid and median may merge below the previous height (rows stay in merge order)") {
  // (0, 0), (1, 0), (0.5, 0.9): {0, 1} at 1, whose centre (0.5, 0) is 0.9 from point 2.
  host_matrix<double> x(3, 2);
  x(1, 0) = 1.0;
  x(2, 0) = 0.5;
  x(2, 1) = 0.9;
  for (linkage_method m : {linkage_method::centroid, linkage_method::median}) {
    CAPTURE(cluster::to_string(m));
    check_z(cluster::linkage(host_context(), with(m), x.view()), {{0, 1, 1.0, 2}, {2, 3, 0.9, 3}});
    check_z(cluster::linkage_low_memory(host_context(), with(m), x.view()), {{0, 1, 1.0, 2}, {2, 3, 0.9, 3}});
  }
}

TEST_CASE("ties: Prim's lowest index, the stable sort, and the NN chain's previous element") {
  const host_context ctx;
  SUBCASE("single linkage on 0, 1, 2, 3: three merges at height 1 in Prim's order") {
    check_z(cluster::linkage(ctx, with(linkage_method::single), column_points({0, 1, 2, 3}).view()),
            {{0, 1, 1, 2}, {2, 4, 1, 3}, {3, 5, 1, 4}});
  }
  SUBCASE("complete linkage on 0, 1, 2, 3: the chain from 0 merges {0, 1}, then {2, 3}") {
    check_z(cluster::linkage(ctx, with(linkage_method::complete), column_points({0, 1, 2, 3}).view()),
            {{0, 1, 1, 2}, {2, 3, 1, 2}, {4, 5, 3, 4}});
  }
  SUBCASE("the chain prefers its previous element over a lower index at the same distance") {
    // D01 = 5, D02 = 3, D03 = 4, D12 = 6, D13 = 2, D23 = 2. Chain 0 -> 2 -> 3; at 3, both 1 and the
    // previous element 2 are at distance 2: 2 wins, so {2, 3} merges first (the lowest index would give 1).
    const host_vector<double> d = condensed({5, 3, 4, 6, 2, 2});
    check_z(cluster::linkage_condensed(ctx, with(linkage_method::average), d.view()),
            {{2, 3, 2, 2}, {0, 4, 3.5, 3}, {1, 5, 13.0 / 3.0, 4}});
    check_z(cluster::linkage_condensed(ctx, with(linkage_method::complete), d.view()),
            {{2, 3, 2, 2}, {0, 4, 4, 3}, {1, 5, 6, 4}});
    // Prim from 0 adds 2 (3), then 3 (2), then 1 (2): sorted stably, (2, 3) comes before (3, 1).
    check_z(cluster::linkage_condensed(ctx, with(linkage_method::single), d.view()),
            {{2, 3, 2, 2}, {1, 4, 2, 3}, {0, 5, 3, 4}});
  }
  SUBCASE("all distances equal: deterministic, and the same from every input form and thread count") {
    const index_t n = 300;
    host_vector<double> d(distance::condensed_size(n));
    for (index_t k = 0; k < d.size(); ++k) d[k] = 1.0;
    for (linkage_method m : all_methods) {
      CAPTURE(cluster::to_string(m));
      const host_matrix<double> z = cluster::linkage_condensed(host_context(1), with(m), d.view());
      check_structure(z, n, m);
      CHECK(identical(z, cluster::linkage_condensed(host_context(2), with(m), d.view())));
    }
  }
}

TEST_CASE("+inf distances: separate groups join last, at height inf, for every method") {
  // {0, 1} at 1 and {2, 3} at 2, every distance between the groups infinite.
  const host_vector<double> d = condensed({1, inf, inf, inf, inf, 2});
  for (linkage_method m : all_methods) {
    CAPTURE(cluster::to_string(m));
    check_z(cluster::linkage_condensed(host_context(), with(m), d.view()),
            {{0, 1, 1, 2}, {2, 3, 2, 2}, {4, 5, inf, 4}});
  }
  SUBCASE("every distance infinite") {
    const host_vector<double> all_inf = condensed({inf, inf, inf});
    for (linkage_method m : all_methods) {
      CAPTURE(cluster::to_string(m));
      const host_matrix<double> z = cluster::linkage_condensed(host_context(), with(m), all_inf.view());
      check_structure(z, 3, m);
      CHECK(z(0, 2) == inf);
      CHECK(z(1, 2) == inf);
    }
  }
}

TEST_CASE("n = 1 gives an empty Z, n = 2 one merge") {
  const host_context ctx;
  for (linkage_method m : all_methods) {
    CAPTURE(cluster::to_string(m));
    CHECK(cluster::linkage(ctx, with(m), column_points({4}).view()).rows() == 0);
    CHECK(cluster::linkage_condensed(ctx, with(m), host_vector<double>().view()).rows() == 0);
    check_z(cluster::linkage(ctx, with(m), column_points({4, 6.5}).view()), {{0, 1, 2.5, 2}});
  }
}

TEST_CASE("random data: brute-force reference, structure, all input forms, threads") {
  // n = 600 exceeds the size below which the working matrix is no longer compacted, so compaction, the
  // neighbour summaries and the parallel ranges are all exercised.
  const index_t n = 600;
  const host_matrix<double> x = random_points<double>(n, 5, 42);
  const host_vector<double> d = condensed_of(x);
  host_matrix<double> square(n, n);
  distance::pairwise_distances(host_context(), distance::pairwise_distance_params{}, x.view(), square.view());
  for (linkage_method m : all_methods) {
    CAPTURE(cluster::to_string(m));
    const host_matrix<double> z = cluster::linkage_condensed(host_context(1), with(m), d.view());
    check_structure(z, n, m);
    check_same(z, reference_linkage(m, d, n), 1e-12);
    // the same distances through the other forms: bit-identical
    CHECK(identical(z, cluster::linkage_square(host_context(1), with(m), square.view())));
    CHECK(identical(z, cluster::linkage_condensed(host_context(2), with(m), d.view())));
    CHECK(identical(z, cluster::linkage_condensed(host_context(4), with(m), d.view())));
    // from points: the same distances up to rounding
    check_same(cluster::linkage(host_context(), with(m), x.view()), z, 1e-9);
    if (m == linkage_method::single || cluster::requires_euclidean(m))
      check_same(cluster::linkage_low_memory(host_context(), with(m), x.view()), z, 1e-9);
  }
}

// docs/cluster.md: long merges, rescans and Prim rows are split into one contiguous range per thread and the
// parts are combined in index order, so Z is bit-identical for any thread count. Ranges are split from 2048
// elements (the NN chain's column scans) and 4096 (Prim's rows, the generic algorithm's scans), hence 2300
// points for the NN chain (complete, average, weighted, ward) and 4200 for the others.
TEST_CASE_TEMPLATE("linkage: bit-identical at 1, 2, 3 and 7 threads", T, float, double) {
  // From points, whose distances are computed in T in parallel tiles first.
  const host_matrix<T> chain_points = random_points<T>(2300, 16, 61);
  const host_matrix<T> prim_points = random_points<T>(4200, 8, 62);
  for (linkage_method m : {linkage_method::single, linkage_method::complete, linkage_method::average,
                           linkage_method::ward}) {
    CAPTURE(cluster::to_string(m));
    const host_matrix<T>& x = m == linkage_method::single ? prim_points : chain_points;
    moecomp_test::check_same_at_thread_counts(
        [&](const host_context& ctx) { return cluster::linkage(ctx, with(m), x.view()).storage(); });
  }
}

TEST_CASE_TEMPLATE("linkage_low_memory: bit-identical at 1, 2, 3 and 7 threads", T, float, double) {
  // Without the distance matrix: a batch of distances runs in parallel once (points in it) x d exceeds 2^15.
  const host_matrix<T> ward_points = random_points<T>(2300, 16, 61);
  const host_matrix<T> prim_points = random_points<T>(4200, 8, 62);
  for (linkage_method m : {linkage_method::single, linkage_method::ward}) {
    CAPTURE(cluster::to_string(m));
    const host_matrix<T>& x = m == linkage_method::single ? prim_points : ward_points;
    moecomp_test::check_same_at_thread_counts(
        [&](const host_context& ctx) { return cluster::linkage_low_memory(ctx, with(m), x.view()).storage(); });
  }
}

TEST_CASE_TEMPLATE("linkage_condensed: bit-identical at 1, 2, 3 and 7 threads", T, float, double) {
  // From condensed distances in T, copied into the double working matrix in parallel blocks: all seven methods
  // for double; float input differs only in that copy, so one method per algorithm (Prim, NN chain, generic).
  auto condensed_in = [](const host_matrix<T>& x) {
    host_vector<T> d(distance::condensed_size(x.rows()));
    distance::pairwise_distances_condensed(host_context(), distance::pairwise_distance_params{}, x.view(), d.view());
    return d;
  };
  const host_vector<T> chain = condensed_in(random_points<T>(2300, 16, 63));
  const host_vector<T> large = condensed_in(random_points<T>(4200, 8, 64));
  for (linkage_method m : all_methods) {
    if (std::is_same_v<T, float> && m != linkage_method::single && m != linkage_method::average &&
        m != linkage_method::centroid)
      continue;
    CAPTURE(cluster::to_string(m));
    const bool nn_chain = m != linkage_method::single && cluster::is_monotone(m);
    const host_vector<T>& d = nn_chain ? chain : large;
    moecomp_test::check_same_at_thread_counts(
        [&](const host_context& ctx) { return cluster::linkage_condensed(ctx, with(m), d.view()).storage(); });
  }
}

TEST_CASE("other metrics from points, and low memory single linkage with them") {
  const host_matrix<double> x = random_points<double>(120, 6, 7);
  for (distance::metric metric : {distance::metric::sqeuclidean, distance::metric::cosine,
                                  distance::metric::correlation}) {
    CAPTURE(distance::to_string(metric));
    host_vector<double> d(distance::condensed_size(x.rows()));
    distance::pairwise_distance_params dp;
    dp.metric = metric;
    distance::pairwise_distances_condensed(host_context(), dp, x.view(), d.view());
    for (linkage_method m : {linkage_method::single, linkage_method::complete, linkage_method::average,
                             linkage_method::weighted}) {
      CAPTURE(cluster::to_string(m));
      const host_matrix<double> z = cluster::linkage(host_context(), with(m, metric), x.view());
      check_structure(z, x.rows(), m);
      check_same(z, cluster::linkage_condensed(host_context(), with(m), d.view()), 1e-12);
    }
    check_same(cluster::linkage_low_memory(host_context(), with(linkage_method::single, metric), x.view()),
               cluster::linkage(host_context(), with(linkage_method::single, metric), x.view()), 1e-9);
  }
}

TEST_CASE("float input: distances in float, linkage in double") {
  const index_t n = 200;
  const host_matrix<float> xf = random_points<float>(n, 8, 3);
  host_matrix<double> xd(n, 8);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < 8; ++j) xd(i, j) = static_cast<double>(xf(i, j));
  host_vector<float> df(distance::condensed_size(n));
  distance::pairwise_distances_condensed(host_context(), distance::pairwise_distance_params{}, xf.view(), df.view());
  host_vector<double> dd(df.size());
  for (index_t k = 0; k < df.size(); ++k) dd[k] = static_cast<double>(df[k]);
  for (linkage_method m : all_methods) {
    CAPTURE(cluster::to_string(m));
    // float condensed input is converted to double, exactly
    const host_matrix<double> z = cluster::linkage_condensed(host_context(), with(m), df.view());
    CHECK(identical(z, cluster::linkage_condensed(host_context(), with(m), dd.view())));
    // float points: the same float distances
    CHECK(identical(cluster::linkage(host_context(), with(m), xf.view()), z));
    // against double points: float rounding only (these points have no near-ties at float precision)
    check_same(z, cluster::linkage(host_context(), with(m), xd.view()), 1e-5);
  }
}

TEST_CASE("strided and const views") {
  const index_t n = 50;
  const host_matrix<double> x = random_points<double>(n, 3, 9);
  const host_vector<double> d = condensed_of(x);
  std::vector<double> strided(static_cast<std::size_t>(3 * d.size()), -1.0);
  for (index_t k = 0; k < d.size(); ++k) strided[static_cast<std::size_t>(3 * k)] = d[k];
  const moecomp::vector_view<const double> view(strided.data(), d.size(), 3);
  for (linkage_method m : all_methods) {
    CAPTURE(cluster::to_string(m));
    host_matrix<double> z(n - 1, 4);
    cluster::linkage_condensed(host_context(), with(m), view, z.view());
    CHECK(identical(z, cluster::linkage_condensed(host_context(), with(m), d.view())));
  }
}

TEST_CASE("bad input is refused with the argument named") {
  const host_context ctx;
  const host_matrix<double> x = column_points({0, 1, 3, 7});
  host_matrix<double> z(3, 4);
  std::string m;

  SUBCASE("NaN in points names the row and column") {
    host_matrix<double> bad(4, 2);
    bad(2, 1) = std::numeric_limits<double>::quiet_NaN();
    m = thrown_message([&] { cluster::linkage(ctx, with(linkage_method::average), bad.view(), z.view()); });
    CHECK(m.find("points(2, 1)") != std::string::npos);
    m = thrown_message([&] { cluster::linkage_low_memory(ctx, with(linkage_method::ward), bad.view(), z.view()); });
    CHECK(m.find("points(2, 1)") != std::string::npos);
  }
  SUBCASE("NaN and negative condensed entries name the position and the pair") {
    host_vector<double> d = condensed({1, 3, 7, 2, 6, 4});
    d[4] = std::numeric_limits<double>::quiet_NaN();
    m = thrown_message([&] { cluster::linkage_condensed(ctx, with(linkage_method::single), d.view(), z.view()); });
    CHECK(m.find("condensed[4]") != std::string::npos);
    CHECK(m.find("points 1 and 3") != std::string::npos);
    CHECK(m.find("NaN") != std::string::npos);
    d[4] = 6;
    d[2] = -1;
    m = thrown_message([&] { cluster::linkage_condensed(ctx, with(linkage_method::ward), d.view(), z.view()); });
    CHECK(m.find("condensed[2]") != std::string::npos);
    CHECK(m.find("points 0 and 3") != std::string::npos);
    CHECK(m.find(">= 0") != std::string::npos);
  }
  SUBCASE("a condensed length that is not n (n - 1) / 2") {
    const host_vector<double> d = condensed({1, 2, 3, 4, 5});
    m = thrown_message([&] { cluster::linkage_condensed(ctx, with(linkage_method::single), d.view()); });
    CHECK(m.find("got 5") != std::string::npos);
    CHECK(m.find("n (n - 1) / 2") != std::string::npos);
  }
  SUBCASE("wrong z shape") {
    host_matrix<double> wrong(4, 4);
    m = thrown_message([&] { cluster::linkage(ctx, with(linkage_method::single), x.view(), wrong.view()); });
    CHECK(m.find("z must be (n - 1) x 4 = 3 x 4") != std::string::npos);
    CHECK(m.find("got 4 x 4") != std::string::npos);
  }
  SUBCASE("square input: asymmetric, non-zero diagonal, NaN, not square") {
    host_matrix<double> s(3, 3);
    s(0, 1) = s(1, 0) = 1;
    s(0, 2) = s(2, 0) = 2;
    s(1, 2) = 3;
    s(2, 1) = 3.5;
    host_matrix<double> z2(2, 4);
    m = thrown_message([&] { cluster::linkage_square(ctx, with(linkage_method::average), s.view(), z2.view()); });
    CHECK(m.find("symmetric") != std::string::npos);
    CHECK(m.find("square(1, 2) = 3 but square(2, 1) = 3.5") != std::string::npos);
    s(2, 1) = 3;
    s(1, 1) = 0.5;
    m = thrown_message([&] { cluster::linkage_square(ctx, with(linkage_method::average), s.view(), z2.view()); });
    CHECK(m.find("square(1, 1) = 0.5") != std::string::npos);
    s(1, 1) = 0;
    s(2, 0) = std::numeric_limits<double>::quiet_NaN();
    m = thrown_message([&] { cluster::linkage_square(ctx, with(linkage_method::single), s.view(), z2.view()); });
    CHECK(m.find("square(2, 0) is nan") != std::string::npos);
    host_matrix<double> rect(3, 2);
    m = thrown_message([&] { cluster::linkage_square(ctx, with(linkage_method::single), rect.view(), z2.view()); });
    CHECK(m.find("n x n") != std::string::npos);
  }
  SUBCASE("ward, centroid and median need the euclidean metric") {
    for (linkage_method method : {linkage_method::ward, linkage_method::centroid, linkage_method::median}) {
      m = thrown_message([&] { cluster::linkage(ctx, with(method, distance::metric::cosine), x.view(), z.view()); });
      CHECK(m.find("euclidean") != std::string::npos);
      CHECK(m.find("cosine") != std::string::npos);
    }
  }
  SUBCASE("low memory supports single, ward, centroid, median only") {
    m = thrown_message([&] { cluster::linkage_low_memory(ctx, with(linkage_method::average), x.view(), z.view()); });
    CHECK(m.find("average") != std::string::npos);
    CHECK(m.find("linkage_low_memory") != std::string::npos);
  }
  SUBCASE("no points") {
    host_matrix<double> empty(0, 3);
    host_matrix<double> z0(0, 4);
    m = thrown_message([&] { cluster::linkage(ctx, with(linkage_method::single), empty.view(), z0.view()); });
    CHECK(m.find("at least one row") != std::string::npos);
  }
  SUBCASE("a cosine distance that is NaN (zero row) names the pair") {
    host_matrix<double> p(4, 2, 1.0);
    p(2, 0) = p(2, 1) = 0.0;
    for (auto run : {0, 1}) {
      m = thrown_message([&] {
        if (run == 0)
          cluster::linkage(ctx, with(linkage_method::average, distance::metric::cosine), p.view(), z.view());
        else
          cluster::linkage_low_memory(ctx, with(linkage_method::single, distance::metric::cosine), p.view(), z.view());
      });
      CHECK(m.find("cosine distance between points 0 and 2 is NaN") != std::string::npos);
    }
  }
}
