// Flat clusters, cophenetic distances and groupings: hand-built linkage matrices with answers worked out by
// hand (and checked against scipy's cophenet / fcluster 'distance', whose outputs are quoted), the
// documented tie rule, a non-monotone (centroid-like) Z, every validation error, random trees checked
// against the definitions, and HC-SMoE's representatives with a planted answer and a tie.
#include <doctest/doctest.h>

#include "test_support.hpp"
#include <moecomp/cluster/fcluster.hpp>
#include <moecomp/cluster/grouping.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

using moecomp::host_context;
using moecomp::index_t;
using moecomp_test::thrown_message;
namespace cluster = moecomp::cluster;

namespace {

using labels_t = std::vector<std::int64_t>;

/// A linkage matrix from its rows {a, b, height, size}.
struct linkage {
  std::vector<double> values;
  index_t rows;
  explicit linkage(std::initializer_list<std::initializer_list<double>> r) : rows(static_cast<index_t>(r.size())) {
    for (const auto& row : r) values.insert(values.end(), row.begin(), row.end());
  }
  index_t n() const { return rows + 1; }
  moecomp::matrix_view<const double> view() const {
    return moecomp::make_matrix_view(values.data(), rows, index_t{4});
  }
};

// The two criteria of cluster::fcluster, as scipy's fcluster(Z, t, criterion).
cluster::fcluster_params maxclust_params(index_t k) {
  cluster::fcluster_params p;
  p.criterion = cluster::fcluster_criterion::maxclust;
  p.max_clusters = k;
  return p;
}
cluster::fcluster_params distance_params(double t) {
  cluster::fcluster_params p;
  p.criterion = cluster::fcluster_criterion::distance;
  p.height = t;
  return p;
}

labels_t maxclust(const linkage& z, index_t k, index_t* count = nullptr) {
  labels_t labels(static_cast<std::size_t>(z.n()));
  const index_t c = cluster::fcluster(host_context(), maxclust_params(k), z.view(),
                                      moecomp::make_vector_view(labels.data(), z.n()));
  if (count) *count = c;
  return labels;
}

labels_t by_distance(const linkage& z, double t, index_t* count = nullptr) {
  labels_t labels(static_cast<std::size_t>(z.n()));
  const index_t c = cluster::fcluster(host_context(), distance_params(t), z.view(),
                                      moecomp::make_vector_view(labels.data(), z.n()));
  if (count) *count = c;
  return labels;
}

std::vector<double> cophenet(const linkage& z) {
  std::vector<double> d(static_cast<std::size_t>(moecomp::distance::condensed_size(z.n())), -1.0);
  cluster::cophenetic_distances(host_context(), z.view(), moecomp::make_vector_view(d.data(), index_t(d.size())));
  return d;
}

std::vector<double> heights(const linkage& z) {
  std::vector<double> h(static_cast<std::size_t>(z.rows));
  cluster::monotone_heights(host_context(), z.view(), moecomp::make_vector_view(h.data(), z.rows));
  return h;
}

// Tree of five points: {1,3} at 0.5, {0,4} at 1, {1,3}+2 at 1.5, everything at 2.5.
const linkage five({{1, 3, 0.5, 2}, {0, 4, 1.0, 2}, {2, 5, 1.5, 3}, {6, 7, 2.5, 5}});

}  // namespace

TEST_CASE("maxclust on a five-point tree: every K by hand, labels by first appearance") {
  index_t count = 0;
  CHECK(maxclust(five, 1, &count) == labels_t{0, 0, 0, 0, 0});
  CHECK(count == 1);
  CHECK(maxclust(five, 2, &count) == labels_t{0, 1, 1, 1, 0});  // {0,4} {1,2,3}
  CHECK(count == 2);
  CHECK(maxclust(five, 3, &count) == labels_t{0, 1, 2, 1, 0});  // {0,4} {1,3} {2}
  CHECK(count == 3);
  CHECK(maxclust(five, 4, &count) == labels_t{0, 1, 2, 1, 3});  // {1,3} and singletons
  CHECK(count == 4);
  CHECK(maxclust(five, 5, &count) == labels_t{0, 1, 2, 3, 4});
  CHECK(count == 5);
  // K > n: all singletons (scipy 1.10.1 returns 3 clusters for K = 4 and 5 here; see docs/cluster.md).
  CHECK(maxclust(five, 1000, &count) == labels_t{0, 1, 2, 3, 4});
  CHECK(count == 5);
}

TEST_CASE("distance criterion on the five-point tree (scipy's fcluster(Z, t, 'distance') up to relabelling)") {
  index_t count = 0;
  // scipy: t=0.4 -> [1 3 5 4 2], 0.5 -> [1 3 4 3 2], 1.2 -> [1 2 3 2 1], 1.5 -> [1 2 2 2 1], 2.5 -> all 1
  CHECK(by_distance(five, -1.0, &count) == labels_t{0, 1, 2, 3, 4});
  CHECK(count == 5);
  CHECK(by_distance(five, 0.4, &count) == labels_t{0, 1, 2, 3, 4});
  CHECK(by_distance(five, 0.5, &count) == labels_t{0, 1, 2, 1, 3});  // the threshold is inclusive
  CHECK(count == 4);
  CHECK(by_distance(five, 1.2, &count) == labels_t{0, 1, 2, 1, 0});
  CHECK(count == 3);
  CHECK(by_distance(five, 1.5, &count) == labels_t{0, 1, 1, 1, 0});
  CHECK(by_distance(five, 2.5, &count) == labels_t{0, 0, 0, 0, 0});
  CHECK(count == 1);
  CHECK(by_distance(five, std::numeric_limits<double>::infinity(), &count) == labels_t{0, 0, 0, 0, 0});
}

TEST_CASE("cophenetic distances by hand (scipy's cophenet values)") {
  // pairs in pdist order: (0,1) (0,2) (0,3) (0,4) (1,2) (1,3) (1,4) (2,3) (2,4) (3,4)
  CHECK(cophenet(five) == std::vector<double>{2.5, 2.5, 2.5, 1.0, 1.5, 0.5, 2.5, 1.5, 2.5, 2.5});
  CHECK(heights(five) == std::vector<double>{0.5, 1.0, 1.5, 2.5});
  // Strided output: only every other slot is written.
  const linkage three({{0, 2, 1.0, 2}, {1, 3, 4.0, 3}});
  std::vector<double> strided(6, -7.0);
  cluster::cophenetic_distances(host_context(), three.view(), moecomp::make_vector_view(strided.data(), 3, 2));
  CHECK(strided == std::vector<double>{4.0, -7.0, 1.0, -7.0, 4.0, -7.0});
}

TEST_CASE("ties in merge height: the lower row is merged first, so exactly K clusters come out") {
  // Rows 0 and 1 both at height 1. scipy 1.10.1 answers K = 3 with 2 clusters ([1 1 2 2]).
  const linkage tie4({{0, 1, 1, 2}, {2, 3, 1, 2}, {4, 5, 2, 4}});
  index_t count = 0;
  CHECK(maxclust(tie4, 3, &count) == labels_t{0, 0, 1, 2});
  CHECK(count == 3);
  CHECK(maxclust(tie4, 2) == labels_t{0, 0, 1, 1});
  // The distance criterion has no freedom: both tied merges are <= 1.
  CHECK(by_distance(tie4, 1.0, &count) == labels_t{0, 0, 1, 1});
  CHECK(count == 2);

  // The rule is by row, not by point: row 0 joins points 3 and 4, row 1 (same height) joins 0 and 1.
  const linkage tie5({{3, 4, 1, 2}, {0, 1, 1, 2}, {2, 5, 1.5, 3}, {6, 7, 3, 5}});
  CHECK(maxclust(tie5, 4, &count) == labels_t{0, 1, 2, 3, 3});
  CHECK(count == 4);
  CHECK(maxclust(tie5, 3) == labels_t{0, 0, 1, 2, 2});
  CHECK(maxclust(tie5, 2) == labels_t{0, 0, 1, 1, 1});
}

TEST_CASE("non-monotone (centroid-like) Z: monotone heights for the cuts, raw heights for cophenet") {
  // Row 2 (height 1.5) is below row 1 (1.75) that formed its child: an inversion, as centroid/median make.
  const linkage z({{1, 2, 0.75, 2}, {4, 5, 1.75, 3}, {3, 6, 1.5, 4}, {0, 7, 2.25, 5}});
  CHECK(heights(z) == std::vector<double>{0.75, 1.75, 1.75, 2.25});  // scipy's maxdists
  // scipy's cophenet keeps the raw height: pairs first joined by row 2 get 1.5.
  CHECK(cophenet(z) == std::vector<double>{2.25, 2.25, 2.25, 2.25, 0.75, 1.5, 1.75, 1.5, 1.75, 1.5});
  index_t count = 0;
  // scipy: t=1.6 -> [4 1 1 3 2] (row 2 cannot happen before row 1), t=1.75 -> [2 1 1 1 1]
  CHECK(by_distance(z, 1.6, &count) == labels_t{0, 1, 1, 2, 3});
  CHECK(count == 4);
  CHECK(by_distance(z, 1.75, &count) == labels_t{0, 1, 1, 1, 1});
  CHECK(count == 2);
  // Rows 1 and 2 tie at monotone height 1.75; K = 3 performs rows 0 and 1 (scipy 1.10.1: 2 clusters).
  CHECK(maxclust(z, 3, &count) == labels_t{0, 1, 1, 2, 1});
  CHECK(count == 3);
  CHECK(maxclust(z, 4) == labels_t{0, 1, 1, 2, 3});
  CHECK(maxclust(z, 2) == labels_t{0, 1, 1, 1, 1});
}

TEST_CASE("rows not in height order are cut in (monotone height, row) order") {
  // A valid Z whose first row is higher than its second.
  const linkage z({{0, 1, 2, 2}, {2, 3, 1, 2}, {4, 5, 3, 4}});
  index_t count = 0;
  CHECK(maxclust(z, 3, &count) == labels_t{0, 1, 2, 2});  // row 1 (height 1) goes first
  CHECK(count == 3);
  CHECK(maxclust(z, 2) == labels_t{0, 0, 1, 1});
  CHECK(by_distance(z, 1.5) == labels_t{0, 1, 2, 2});
  CHECK(cophenet(z) == std::vector<double>{2, 3, 3, 3, 3, 1});

  // Out of order and tied: rows 0 and 2 share height 2 after row 1 (height 1); row 0 is merged first.
  const linkage tied({{0, 1, 2, 2}, {2, 3, 1, 2}, {4, 6, 2, 3}, {5, 7, 3, 5}});
  CHECK(maxclust(tied, 4, &count) == labels_t{0, 1, 2, 2, 3});
  CHECK(maxclust(tied, 3, &count) == labels_t{0, 0, 1, 1, 2});
  CHECK(count == 3);
  CHECK(maxclust(tied, 2) == labels_t{0, 0, 1, 1, 1});
}

TEST_CASE("one and two points") {
  const linkage one({});
  index_t count = 0;
  CHECK(one.view().rows() == 0);
  CHECK(maxclust(one, 1, &count) == labels_t{0});
  CHECK(count == 1);
  CHECK(maxclust(one, 7) == labels_t{0});
  CHECK(by_distance(one, 0.0, &count) == labels_t{0});
  CHECK(count == 1);
  CHECK(cophenet(one).empty());
  const linkage two({{0, 1, 3, 2}});
  CHECK(maxclust(two, 1) == labels_t{0, 0});
  CHECK(maxclust(two, 2) == labels_t{0, 1});
  CHECK(by_distance(two, 2.999) == labels_t{0, 1});
  CHECK(by_distance(two, 3) == labels_t{0, 0});
  CHECK(cophenet(two) == std::vector<double>{3});
}

TEST_CASE("random trees: distance cuts agree with cophenetic distances, maxclust cuts are nested") {
  moecomp::random_generator rng(20261122);
  for (int trial = 0; trial < 40; ++trial) {
    const index_t n = 2 + static_cast<index_t>(rng.uniform_index(40));
    // Random merges of the active clusters at non-decreasing heights drawn from a coarse grid (many ties).
    std::vector<index_t> active(static_cast<std::size_t>(n));
    std::vector<double> size(static_cast<std::size_t>(2 * n - 1), 1.0);
    for (index_t p = 0; p < n; ++p) active[static_cast<std::size_t>(p)] = p;
    std::vector<std::vector<double>> rows;
    double h = 0;
    for (index_t i = 0; i < n - 1; ++i) {
      const auto x = rng.uniform_index(active.size());
      index_t a = active[x];
      active.erase(active.begin() + static_cast<std::ptrdiff_t>(x));
      const auto y = rng.uniform_index(active.size());
      index_t b = active[y];
      active.erase(active.begin() + static_cast<std::ptrdiff_t>(y));
      if (a > b) std::swap(a, b);
      h += static_cast<double>(rng.uniform_index(3));
      size[static_cast<std::size_t>(n + i)] = size[static_cast<std::size_t>(a)] + size[static_cast<std::size_t>(b)];
      rows.push_back({double(a), double(b), h, size[static_cast<std::size_t>(n + i)]});
      active.push_back(n + i);
    }
    std::vector<double> values;
    for (const auto& r : rows) values.insert(values.end(), r.begin(), r.end());
    const auto z = moecomp::make_matrix_view(values.data(), n - 1, index_t{4}).as_const();
    const host_context ctx;
    cluster::validate_linkage(ctx, z);

    std::vector<double> coph(static_cast<std::size_t>(moecomp::distance::condensed_size(n)));
    cluster::cophenetic_distances(ctx, z, moecomp::make_vector_view(coph.data(), index_t(coph.size())));
    labels_t labels(static_cast<std::size_t>(n)), coarser(static_cast<std::size_t>(n));
    const auto lv = moecomp::make_vector_view(labels.data(), n);
    for (double t = -0.5; t <= h + 0.5; t += 0.5) {
      const index_t count = cluster::fcluster(ctx, distance_params(t), z, lv);
      std::int64_t seen = -1;
      int unordered = 0, disagreements = 0;
      for (index_t p = 0; p < n; ++p) {
        unordered += labels[p] > seen + 1;  // first-appearance numbering
        seen = std::max(seen, labels[p]);
      }
      for (index_t i = 0; i < n; ++i)
        for (index_t j = i + 1; j < n; ++j)
          disagreements += (labels[i] == labels[j]) != (coph[moecomp::distance::condensed_index(n, i, j)] <= t);
      INFO("trial " << trial << ", n = " << n << ", t = " << t);
      CHECK(unordered == 0);
      CHECK(seen + 1 == count);
      CHECK(disagreements == 0);
    }
    // maxclust: exactly K clusters, and the cut for K is a coarsening of the cut for K + 1.
    for (index_t k = 1; k <= n; ++k) {
      INFO("trial " << trial << ", n = " << n << ", K = " << k);
      CHECK(cluster::fcluster(ctx, maxclust_params(k), z, lv) == k);
      int not_nested = 0;
      if (k > 1)
        for (index_t i = 0; i < n; ++i)
          for (index_t j = 0; j < n; ++j) not_nested += labels[i] == labels[j] && coarser[i] != coarser[j];
      CHECK(not_nested == 0);
      coarser = labels;
    }
  }
}

TEST_CASE("validate_linkage: each malformed Z is refused, naming the row and the problem") {
  const host_context ctx;
  auto message = [&](std::initializer_list<std::initializer_list<double>> rows) {
    const linkage z(rows);
    return thrown_message([&] { cluster::validate_linkage(ctx, z.view()); });
  };
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::vector<double> three_cols(9, 0.0);
  CHECK(thrown_message([&] {
          cluster::validate_linkage(ctx, moecomp::make_matrix_view(three_cols.data(), 3, 3).as_const());
        }) == "validate_linkage: z must be an (n - 1) x 4 linkage matrix, got 3 x 3");
  CHECK(message({{0, 5, 1, 2}, {2, 4, 2, 3}}) ==
        "validate_linkage: z row 0: Z(0, 1) = 5 is not a cluster formed before row 0 (expected an integer in [0, 3))");
  // Cluster 3 (row 0's) is used by row 0 itself: not yet formed.
  CHECK(message({{0, 3, 1, 2}, {1, 2, 2, 2}}).find("z row 0: Z(0, 1) = 3 is not a cluster formed before row 0") !=
        std::string::npos);
  CHECK(message({{0, 1.5, 1, 2}, {2, 3, 2, 3}}).find("Z(0, 1) = 1.5 is not a cluster formed") != std::string::npos);
  CHECK(message({{-1, 1, 1, 2}, {2, 3, 2, 3}}).find("Z(0, 0) = -1 is not a cluster formed") != std::string::npos);
  CHECK(message({{0, 1, 1, 2}, {nan, 3, 2, 3}}).find("z row 1: Z(1, 0) = nan is not a cluster formed before row 1 "
                                                     "(expected an integer in [0, 4))") != std::string::npos);
  CHECK(message({{1, 0, 1, 2}, {2, 3, 2, 3}}) == "validate_linkage: z row 0: Z(0, 0) = 1 must be < Z(0, 1) = 0");
  CHECK(message({{1, 1, 1, 2}, {2, 3, 2, 3}}) == "validate_linkage: z row 0: Z(0, 0) = 1 must be < Z(0, 1) = 1");
  CHECK(message({{0, 1, 1, 2}, {1, 2, 2, 2}}) ==
        "validate_linkage: z row 1: cluster 1 is merged a second time (first at row 0)");
  CHECK(message({{0, 1, -1, 2}, {2, 3, 2, 3}}) ==
        "validate_linkage: z row 0: height Z(0, 2) = -1 must be a number >= 0 (+inf allowed)");
  CHECK(message({{0, 1, 1, 2}, {2, 3, nan, 3}}).find("z row 1: height Z(1, 2) = nan must be a number >= 0") !=
        std::string::npos);
  CHECK(message({{0, 1, 1, 2}, {2, 3, -inf, 3}}).find("z row 1: height Z(1, 2) = -inf must be a number >= 0") !=
        std::string::npos);
  // +inf is what linkage writes for points at infinite distance (they merge last): a valid height.
  const linkage infinite_merge({{0, 1, 1, 2}, {2, 3, inf, 3}});
  CHECK_NOTHROW(cluster::validate_linkage(ctx, infinite_merge.view()));
  CHECK(message({{0, 1, 1, 3}, {2, 3, 2, 4}}) ==
        "validate_linkage: z row 0: size Z(0, 3) = 3 must be the sum of the merged clusters' sizes, 1 + 1 = 2");
  CHECK(message({{0, 1, 1, 2}, {2, 3, 2, 4}}) ==
        "validate_linkage: z row 1: size Z(1, 3) = 4 must be the sum of the merged clusters' sizes, 1 + 2 = 3");
  // A strided view of a valid Z (extra column ignored) is accepted.
  const std::vector<double> padded = {0, 1, 1, 2, 99, 2, 3, 2, 3, 99};
  cluster::validate_linkage(ctx, moecomp::make_matrix_view(padded.data(), 2, 4, 5));
}

TEST_CASE("fcluster and cophenet arguments: the calling function is named") {
  const host_context ctx;
  labels_t labels(5);
  const auto lv = moecomp::make_vector_view(labels.data(), index_t{5});
  CHECK(thrown_message([&] { cluster::fcluster(ctx, maxclust_params(0), five.view(), lv); }) ==
        "fcluster: params.max_clusters must be >= 1, got 0");
  CHECK(thrown_message([&] { cluster::fcluster(ctx, maxclust_params(2), five.view(), lv.subview(0, 4)); }) ==
        "fcluster: labels must have n = 5 elements (rows of z + 1), got 4");
  CHECK(thrown_message([&] { cluster::fcluster(ctx, distance_params(std::nan("")), five.view(), lv); }) ==
        "fcluster: params.height must not be NaN");
  CHECK(thrown_message([&] { cluster::fcluster(ctx, distance_params(1.0), five.view(), lv.subview(0, 3)); }) ==
        "fcluster: labels must have n = 5 elements (rows of z + 1), got 3");
  CHECK(cluster::parse_fcluster_criterion("distance") == cluster::fcluster_criterion::distance);
  CHECK(thrown_message([&] { cluster::parse_fcluster_criterion("inconsistent"); }) ==
        "criterion: expected maxclust or distance, got 'inconsistent'");
  std::vector<double> coph(9);
  CHECK(thrown_message([&] {
          cluster::cophenetic_distances(ctx, five.view(), moecomp::make_vector_view(coph.data(), index_t{9}));
        }) == "cophenetic_distances: condensed must have n (n - 1) / 2 = 10 elements for n = 5, got 9");
  std::vector<double> h(3);
  CHECK(thrown_message([&] {
          cluster::monotone_heights(ctx, five.view(), moecomp::make_vector_view(h.data(), index_t{3}));
        }) == "monotone_heights: heights must have n - 1 = 4 elements (one per row of z), got 3");
  const linkage bad({{0, 1, 1, 2}, {0, 2, 2, 3}});
  CHECK(thrown_message([&] { cluster::fcluster(ctx, maxclust_params(1), bad.view(), lv.subview(0, 3)); }) ==
        "fcluster: z row 1: cluster 0 is merged a second time (first at row 0)");
  CHECK(thrown_message([&] { cluster::fcluster(ctx, distance_params(1), bad.view(), lv.subview(0, 3)); })
            .rfind("fcluster: z row 1", 0) == 0);
  std::vector<double> c3(3);
  CHECK(thrown_message([&] {
          cluster::cophenetic_distances(ctx, bad.view(), moecomp::make_vector_view(c3.data(), index_t{3}));
        }).rfind("cophenetic_distances: z row 1", 0) == 0);
}

TEST_CASE("relabel_by_first_appearance, group_count, group_members") {
  const host_context ctx;
  labels_t labels = {7, 3, 7, -1, 3, 9};
  labels_t out(6);
  CHECK(cluster::relabel_by_first_appearance(ctx, moecomp::make_vector_view(labels.data(), index_t{6}).as_const(),
                                             moecomp::make_vector_view(out.data(), index_t{6})) == 4);
  CHECK(out == labels_t{0, 1, 0, 2, 1, 3});
  // In place, and from scipy's 1-based labels.
  labels = {2, 2, 1, 3, 1};
  const auto lv = moecomp::make_vector_view(labels.data(), index_t{5});
  CHECK(cluster::relabel_by_first_appearance(ctx, lv, lv) == 3);
  CHECK(labels == labels_t{0, 0, 1, 2, 1});
  CHECK(cluster::relabel_by_first_appearance(ctx, moecomp::vector_view<const std::int64_t>(),
                                             moecomp::vector_view<std::int64_t>()) == 0);

  labels = {1, 0, 1, 2, 0};
  CHECK(cluster::group_count(ctx, lv) == 3);
  std::vector<index_t> offsets(4), members(5);
  cluster::group_members(ctx, lv, moecomp::make_vector_view(offsets.data(), index_t{4}),
                         moecomp::make_vector_view(members.data(), index_t{5}));
  CHECK(offsets == std::vector<index_t>{0, 2, 4, 5});
  CHECK(members == std::vector<index_t>{1, 4, 0, 2, 3});

  labels = {0, 2, 0, 2, 0};
  CHECK(thrown_message([&] { cluster::group_count(ctx, lv); }) ==
        "group_count: group 1 has no member, but labels use groups up to 2; every group 0 .. k-1 must be used "
        "(relabel_by_first_appearance renumbers any labels)");
  labels = {0, 1, -1, 1, 0};
  CHECK(thrown_message([&] { cluster::group_count(ctx, lv); }) ==
        "group_count: labels[2] = -1 is outside [0, n) = [0, 5); labels must number the groups 0 .. k-1");
  labels = {0, 1, 5, 1, 0};
  CHECK(thrown_message([&] { cluster::group_count(ctx, lv); }).find("labels[2] = 5 is outside [0, n)") !=
        std::string::npos);
  labels = {0, 1, 0, 1, 0};
  CHECK(thrown_message([&] {
          cluster::group_members(ctx, lv, moecomp::make_vector_view(offsets.data(), index_t{4}),
                                 moecomp::make_vector_view(members.data(), index_t{5}));
        }) == "group_members: offsets must have k + 1 = 3 elements for the k = 2 groups of labels, got 4");
}

TEST_CASE("group_representatives: planted nearest-to-mean members, lowest index on a tie") {
  // Group 0 = rows {0, 2, 4}: mean (8/3, 8/3), nearest row 4. Group 1 = rows {1, 3}: mean (5, 5), both at
  // squared distance 50, so row 1 wins. Group 2 = row 5 alone.
  const std::vector<double> features = {0, 0, 10, 0, 6, 6, 0, 10, 2, 2, 3, -7};
  const labels_t labels = {0, 1, 0, 1, 0, 2};
  const host_context ctx;
  const auto lv = moecomp::make_vector_view(labels.data(), index_t{6});
  std::vector<index_t> reps(3, -5);
  const auto rv = moecomp::make_vector_view(reps.data(), index_t{3});
  cluster::group_representatives(ctx, moecomp::make_matrix_view(features.data(), 6, 2), lv, rv);
  CHECK(reps == std::vector<index_t>{4, 1, 5});

  // The same in float, in bfloat16 (all values exact), and through a strided view with a padding column.
  std::vector<float> f32(features.begin(), features.end());
  reps.assign(3, -5);
  cluster::group_representatives(ctx, moecomp::make_matrix_view(f32.data(), 6, 2).as_const(), lv, rv);
  CHECK(reps == std::vector<index_t>{4, 1, 5});
  std::vector<moecomp::bfloat16> b16;
  for (double v : features) b16.push_back(moecomp::bfloat16(static_cast<float>(v)));
  reps.assign(3, -5);
  cluster::group_representatives(ctx, moecomp::make_matrix_view(b16.data(), 6, 2), lv, rv);
  CHECK(reps == std::vector<index_t>{4, 1, 5});
  std::vector<double> padded;
  for (index_t i = 0; i < 6; ++i) padded.insert(padded.end(), {features[2 * i], features[2 * i + 1], 1e300});
  reps.assign(3, -5);
  cluster::group_representatives(ctx, moecomp::make_matrix_view(padded.data(), 6, 2, 3), lv, rv);
  CHECK(reps == std::vector<index_t>{4, 1, 5});

  // Zero-width features: every member is at distance 0, so the lowest index of each group.
  reps.assign(3, -5);
  cluster::group_representatives(ctx, moecomp::make_matrix_view(features.data(), 6, 0), lv, rv);
  CHECK(reps == std::vector<index_t>{0, 1, 5});

  CHECK(thrown_message([&] {
          cluster::group_representatives(ctx, moecomp::make_matrix_view(features.data(), 6, 2), lv, rv.subview(0, 2));
        }) == "group_representatives: representatives must have k = 3 elements (one per group of labels), got 2");
  CHECK(thrown_message([&] {
          cluster::group_representatives(ctx, moecomp::make_matrix_view(features.data(), 5, 2), lv, rv);
        }) == "group_representatives: labels must have one entry per feature row (5), got 6");
  std::vector<double> with_nan = features;
  with_nan[7] = std::nan("");
  CHECK(thrown_message([&] {
          cluster::group_representatives(ctx, moecomp::make_matrix_view(with_nan.data(), 6, 2), lv, rv);
        }) == "group_representatives: features(3, 1) = nan; finite values are required");
  const labels_t gap = {0, 2, 0, 2, 0, 2};
  CHECK(thrown_message([&] {
          cluster::group_representatives(ctx, moecomp::make_matrix_view(features.data(), 6, 2),
                                         moecomp::make_vector_view(gap.data(), index_t{6}), rv);
        }).rfind("group_representatives: group 1 has no member", 0) == 0);
}

TEST_CASE("HC-SMoE grouping end to end: cut, members, representatives") {
  // Six experts on a line: {0, 1, 2} near 0, {3, 4} near 10, {5} at 30; single-linkage Z built by hand.
  const std::vector<double> x = {0.0, 10.0, 1.0, 11.0, 0.5, 30.0};
  const linkage z({{0, 4, 0.5, 2}, {2, 6, 0.5, 3}, {1, 3, 1.0, 2}, {7, 8, 9.0, 5}, {5, 9, 19.0, 6}});
  const host_context ctx;
  labels_t labels(6);
  const auto lv = moecomp::make_vector_view(labels.data(), index_t{6});
  CHECK(cluster::fcluster(ctx, maxclust_params(3), z.view(), lv) == 3);
  CHECK(labels == labels_t{0, 1, 0, 1, 0, 2});
  std::vector<index_t> reps(3);
  cluster::group_representatives(ctx, moecomp::make_matrix_view(x.data(), 6, 1), lv,
                                 moecomp::make_vector_view(reps.data(), index_t{3}));
  CHECK(reps == std::vector<index_t>{4, 1, 5});  // mean of {0, 1, 0.5} is 0.5; {10, 11} tie -> expert 1
}
