// Calls every public host algorithm of moecomp, for float and double, and checks each answer where one is
// known. CMakeLists.txt compiles this file alone with MOECOMP_STRICT_FLAGS (by default -Wall -Wextra
// -Wpedantic -Werror -march=x86-64-v4), so every template instantiated here, Eigen's AVX-512 GEMM kernels
// and moecomp's vectorised Sinkhorn kernels included, must compile without a warning. The inputs are
// small and deterministic but large enough (e.g. 40 x 24 points) for those vector paths to run.
#include <moecomp/moecomp.hpp>
// After a moecomp header, as docs/building.md asks: Eigen then comes through moecomp's own include.
#include <moecomp/interop/eigen.hpp>
#include <moecomp/io/npy.hpp>
#include <moecomp/io/residual_file.hpp>
#include <moecomp/sparse/apply.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

int run_all_algorithms();

namespace {

using moecomp::host_context;
using moecomp::host_matrix;
using moecomp::host_vector;
using moecomp::index_t;
using moecomp::make_matrix_view;
using moecomp::make_vector_view;
using moecomp::matrix_view;
using moecomp::vector_view;
namespace cluster = moecomp::cluster;
namespace distance = moecomp::distance;
namespace ot = moecomp::ot;

int failure_count = 0;
int check_count = 0;

template <class T>
const char* type_name() {
  return std::is_same_v<T, float> ? "float" : "double";
}

/// Tolerance (relative, and absolute near 0) for answers computed in T.
template <class T>
constexpr double tol = std::is_same_v<T, float> ? 1e-4 : 1e-9;

/// "what <float>": every message names the element type of the failing call.
template <class T>
std::string label(const std::string& what) {
  return what + " <" + type_name<T>() + ">";
}

void expect(bool ok, const std::string& what) {
  ++check_count;
  if (!ok) {
    ++failure_count;
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  }
}

/// |got - want| <= tolerance (1 + |want|).
void expect_near(double got, double want, double tolerance, const std::string& what) {
  ++check_count;
  if (!(std::fabs(got - want) <= tolerance * (1.0 + std::fabs(want)))) {
    ++failure_count;
    std::fprintf(stderr, "FAILED: %s: got %.17g, expected %.17g (tolerance %g)\n", what.c_str(), got, want,
                 tolerance);
  }
}

/// A worst-case error over many entries, reported once.
void expect_small(double error, double tolerance, const std::string& what) {
  ++check_count;
  if (!(error <= tolerance)) {
    ++failure_count;
    std::fprintf(stderr, "FAILED: %s: error %.3g above %g\n", what.c_str(), error, tolerance);
  }
}

/// Relative-and-absolute error of one entry, as expect_near measures it.
double entry_error(double got, double want) { return std::fabs(got - want) / (1.0 + std::fabs(want)); }

// ------------------------------------------------------------------------------------------------ inputs

template <class T>
host_matrix<T> normal_points(index_t rows, index_t cols, std::uint64_t seed) {
  host_matrix<T> x(rows, cols);
  moecomp::random_generator rng(seed);
  rng.fill_normal(x.view());
  return x;
}

/// Positive masses w_i / 2^p with integer w_i, summing to exactly 1 in float and in double.
template <class T>
host_vector<T> dyadic_histogram(index_t n, std::uint64_t seed) {
  moecomp::random_generator rng(seed);
  index_t total = 1;
  while (total < 16 * n) total *= 2;
  host_vector<T> h(n);
  index_t used = 0;
  for (index_t i = 0; i + 1 < n; ++i) {
    const auto w = 1 + static_cast<index_t>(rng.uniform_index(15));
    h[i] = static_cast<T>(w);
    used += w;
  }
  h[n - 1] = static_cast<T>(total - used);
  for (index_t i = 0; i < n; ++i) h[i] /= static_cast<T>(total);
  return h;
}

/// Squared Euclidean costs between random 2-D points (moecomp's cross distances), scaled to [0, 1].
template <class T>
host_matrix<T> unit_cost(index_t n, index_t m, std::uint64_t seed) {
  const auto xs = normal_points<T>(n, 2, seed), ys = normal_points<T>(m, 2, seed + 1);
  host_matrix<T> cost(n, m);
  distance::pairwise_distance_params params;
  params.metric = distance::metric::sqeuclidean;
  distance::pairwise_distances(host_context(), params, xs.view(), ys.view(), cost.view());
  T top = 0;
  for (const T c : cost.storage()) top = std::max(top, c);
  for (T& c : cost.storage()) c /= top;
  return cost;
}

/// scipy's definition of each metric, in double, straight from the rows.
template <class T>
double reference_distance(distance::metric metric, const T* a, const T* b, index_t d) {
  double mean_a = 0, mean_b = 0;
  if (metric == distance::metric::correlation) {
    for (index_t j = 0; j < d; ++j) {
      mean_a += static_cast<double>(a[j]);
      mean_b += static_cast<double>(b[j]);
    }
    mean_a /= static_cast<double>(d);
    mean_b /= static_cast<double>(d);
  }
  double dot = 0, norm_a = 0, norm_b = 0, squared = 0;
  for (index_t j = 0; j < d; ++j) {
    const double x = static_cast<double>(a[j]) - mean_a, y = static_cast<double>(b[j]) - mean_b;
    const double diff = static_cast<double>(a[j]) - static_cast<double>(b[j]);
    dot += x * y;
    norm_a += x * x;
    norm_b += y * y;
    squared += diff * diff;
  }
  switch (metric) {
    case distance::metric::euclidean: return std::sqrt(squared);
    case distance::metric::sqeuclidean: return squared;
    default: return 1.0 - dot / std::sqrt(norm_a * norm_b);
  }
}

constexpr distance::metric all_metrics[] = {distance::metric::euclidean, distance::metric::sqeuclidean,
                                            distance::metric::cosine, distance::metric::correlation};
constexpr cluster::linkage_method all_linkage_methods[] = {
    cluster::linkage_method::single,   cluster::linkage_method::complete, cluster::linkage_method::average,
    cluster::linkage_method::weighted, cluster::linkage_method::ward,     cluster::linkage_method::centroid,
    cluster::linkage_method::median};
constexpr ot::sinkhorn_method all_sinkhorn_methods[] = {ot::sinkhorn_method::plain, ot::sinkhorn_method::log,
                                                        ot::sinkhorn_method::stabilized,
                                                        ot::sinkhorn_method::epsilon_scaling};

// ------------------------------------------------------------------------------------------- distances

template <class T>
void check_distances() {
  const host_context ctx;

  // Three 2-D points per metric with answers by hand.
  struct known_triangle {
    distance::metric metric;
    T points[6];
    double expected[3];  // pairs (0, 1), (0, 2), (1, 2)
  };
  const double cosine_45 = 1.0 - 1.0 / std::sqrt(2.0);
  const known_triangle triangles[] = {
      {distance::metric::euclidean, {0, 0, 3, 0, 0, 4}, {3, 4, 5}},
      {distance::metric::sqeuclidean, {0, 0, 3, 0, 0, 4}, {9, 16, 25}},
      {distance::metric::cosine, {1, 0, 0, 1, 1, 1}, {1, cosine_45, cosine_45}},
      // Centred rows (1, -1)/2, -(1, -1)/2, (1, -1): opposite, parallel, opposite.
      {distance::metric::correlation, {1, 0, 0, 1, 2, 0}, {2, 0, 2}},
  };
  for (const known_triangle& t : triangles) {
    distance::pairwise_distance_params params;
    params.metric = t.metric;
    const std::string name = label<T>(std::string("pairwise_distances ") + distance::to_string(t.metric));
    const auto x = make_matrix_view(t.points, 3, 2);
    T condensed[3] = {-1, -1, -1};
    distance::pairwise_distances_condensed(ctx, params, x, make_vector_view(condensed, 3));
    host_matrix<T> square(3, 3, T(-1));
    distance::pairwise_distances(ctx, params, x, square.view());
    for (index_t i = 0; i < 3; ++i) {
      expect(square(i, i) == T(0), name + ": zero diagonal");
      for (index_t j = i + 1; j < 3; ++j) {
        const double want = t.expected[distance::condensed_index(3, i, j)];
        expect_near(condensed[distance::condensed_index(3, i, j)], want, tol<T>, name + " condensed, known triangle");
        expect_near(square(i, j), want, tol<T>, name + " square, known triangle");
        expect(square(j, i) == square(i, j), name + ": square form is symmetric");
      }
    }
  }

  // Random points, every metric, every form, against the definitions.
  const index_t n = 40, m = 17, d = 24;
  const auto x = normal_points<T>(n, d, 1), y = normal_points<T>(m, d, 2);
  for (const distance::metric metric : all_metrics) {
    distance::pairwise_distance_params params;
    params.metric = metric;
    const std::string name = label<T>(std::string("pairwise_distances ") + distance::to_string(metric));
    host_matrix<T> square(n, n), cross(n, m);
    host_vector<T> condensed(distance::condensed_size(n));
    distance::pairwise_distances(ctx, params, x.view(), square.view());
    distance::pairwise_distances_condensed(ctx, params, x.view(), condensed.view());
    distance::pairwise_distances(ctx, params, x.view(), y.view(), cross.view());
    double square_error = 0, condensed_error = 0, cross_error = 0;
    bool symmetric = true;
    for (index_t i = 0; i < n; ++i) {
      for (index_t j = 0; j < n; ++j) {
        const double want = i == j ? 0.0 : reference_distance(metric, x.view().row_ptr(i), x.view().row_ptr(j), d);
        square_error = std::max(square_error, entry_error(square(i, j), want));
        symmetric = symmetric && square(i, j) == square(j, i);
        if (i < j)
          condensed_error =
              std::max(condensed_error, entry_error(condensed[distance::condensed_index(n, i, j)], want));
      }
      for (index_t j = 0; j < m; ++j)
        cross_error = std::max(cross_error, entry_error(cross(i, j), reference_distance(metric, x.view().row_ptr(i),
                                                                                          y.view().row_ptr(j), d)));
    }
    expect_small(square_error, tol<T>, name + " square vs definition");
    expect_small(condensed_error, tol<T>, name + " condensed vs definition");
    expect_small(cross_error, tol<T>, name + " x-to-y vs definition");
    expect(symmetric, name + ": square form is exactly symmetric");
  }

  // Eigen interop: the squared distances from Eigen's own GEMM (instantiated in this file), and the same
  // call on an Eigen matrix seen as a view.
  using eigen_rows = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const auto x_map = moecomp::as_eigen(x.view());
  const eigen_rows gram = x_map * x_map.transpose();
  distance::pairwise_distance_params squared;
  squared.metric = distance::metric::sqeuclidean;
  host_matrix<T> from_view(n, n), from_eigen(n, n);
  distance::pairwise_distances(ctx, squared, x.view(), from_view.view());
  double gram_error = 0;
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j)
      gram_error = std::max(gram_error, entry_error(from_view(i, j), static_cast<double>(gram(i, i)) +
                                                                         static_cast<double>(gram(j, j)) -
                                                                         2.0 * static_cast<double>(gram(i, j))));
  expect_small(gram_error, tol<T>, label<T>("sqeuclidean vs Eigen's Gram matrix"));
  eigen_rows x_copy = x_map;
  distance::pairwise_distances(ctx, squared, moecomp::as_matrix_view(x_copy), from_eigen.view());
  expect(from_eigen.storage() == from_view.storage(), label<T>("pairwise_distances of as_matrix_view(Eigen matrix)"));
}

// --------------------------------------------------------------------------------------------- linkage

/// Checks what every linkage matrix of n points satisfies; validate_linkage throws on a malformed one.
void expect_linkage_shape(const host_context& ctx, const host_matrix<double>& z, index_t n, const std::string& what) {
  expect(z.rows() == n - 1 && z.cols() == 4, what + ": Z is (n - 1) x 4");
  cluster::validate_linkage(ctx, z.view());
  expect(z.rows() > 0 && z(z.rows() - 1, 3) == static_cast<double>(n), what + ": the last merge holds all n points");
}

/// Largest relative height difference of two linkage matrices; infinite when their merges differ.
double linkage_difference(const host_matrix<double>& a, const host_matrix<double>& b) {
  if (a.rows() != b.rows()) return HUGE_VAL;
  double worst = 0;
  for (index_t r = 0; r < a.rows(); ++r) {
    if (a(r, 0) != b(r, 0) || a(r, 1) != b(r, 1) || a(r, 3) != b(r, 3)) return HUGE_VAL;
    worst = std::max(worst, entry_error(a(r, 2), b(r, 2)));
  }
  return worst;
}

template <class T>
void check_linkage() {
  const host_context ctx;

  // 1-D points 0, 1, 3, 7: every method merges 0 and 1 first, at 1; three methods checked to the end.
  const T line[] = {0, 1, 3, 7};
  for (const cluster::linkage_method method : all_linkage_methods) {
    cluster::linkage_params params;
    params.method = method;
    const std::string name = label<T>(std::string("linkage ") + cluster::to_string(method) + " of 0, 1, 3, 7");
    const host_matrix<double> z = cluster::linkage(ctx, params, make_matrix_view(line, 4, 1));
    expect_linkage_shape(ctx, z, 4, name);
    expect(z(0, 0) == 0 && z(0, 1) == 1 && z(0, 3) == 2, name + ": first merge is points 0 and 1");
    expect_near(z(0, 2), 1.0, tol<T>, name + ": first height");
    const double single_heights[] = {1, 2, 4}, complete_heights[] = {1, 3, 7}, average_heights[] = {1, 2.5, 17.0 / 3};
    const double* heights = method == cluster::linkage_method::single     ? single_heights
                            : method == cluster::linkage_method::complete ? complete_heights
                            : method == cluster::linkage_method::average  ? average_heights
                                                                          : nullptr;
    if (heights != nullptr)
      for (index_t r = 0; r < 3; ++r) expect_near(z(r, 2), heights[r], tol<T>, name + ": heights");
  }

  // Random points: every metric and method from points, condensed and square distances agree exactly.
  const index_t n = 40, d = 24;
  const auto x = normal_points<T>(n, d, 3);
  for (const distance::metric metric : all_metrics) {
    distance::pairwise_distance_params distance_params;
    distance_params.metric = metric;
    host_vector<T> condensed(distance::condensed_size(n));
    host_matrix<T> square(n, n);
    distance::pairwise_distances_condensed(ctx, distance_params, x.view(), condensed.view());
    distance::pairwise_distances(ctx, distance_params, x.view(), square.view());
    for (const cluster::linkage_method method : all_linkage_methods) {
      if (cluster::requires_euclidean(method) && metric != distance::metric::euclidean) continue;
      cluster::linkage_params params;
      params.method = method;
      params.metric = metric;
      const std::string name = label<T>(std::string("linkage ") + cluster::to_string(method) + " " +
                                        distance::to_string(metric) + " of 40 x 24 points");
      const host_matrix<double> from_points = cluster::linkage(ctx, params, x.view());
      const host_matrix<double> from_condensed = cluster::linkage_condensed(ctx, params, condensed.const_view());
      const host_matrix<double> from_square = cluster::linkage_square(ctx, params, square.const_view());
      expect_linkage_shape(ctx, from_points, n, name);
      expect_small(linkage_difference(from_points, from_condensed), 1e-12, name + ": points vs linkage_condensed");
      expect_small(linkage_difference(from_points, from_square), 1e-12, name + ": points vs linkage_square");
      if (cluster::is_monotone(method)) {
        bool monotone = true;
        for (index_t r = 1; r < n - 1; ++r) monotone = monotone && from_points(r, 2) >= from_points(r - 1, 2);
        expect(monotone, name + ": heights never decrease");
      }
    }
  }

  // The O(n d) memory variant: same heights as linkage() for single and ward, up to distance rounding.
  for (const cluster::linkage_method method : {cluster::linkage_method::single, cluster::linkage_method::ward,
                                               cluster::linkage_method::centroid, cluster::linkage_method::median}) {
    cluster::linkage_params params;
    params.method = method;
    const std::string name = label<T>(std::string("linkage_low_memory ") + cluster::to_string(method));
    const host_matrix<double> low = cluster::linkage_low_memory(ctx, params, x.view());
    const host_matrix<double> full = cluster::linkage(ctx, params, x.view());
    expect_linkage_shape(ctx, low, n, name);
    if (method == cluster::linkage_method::single || method == cluster::linkage_method::ward) {
      double worst = 0;
      for (index_t r = 0; r < n - 1; ++r) worst = std::max(worst, entry_error(low(r, 2), full(r, 2)));
      expect_small(worst, tol<T>, name + ": heights vs linkage()");
    }
  }
}

// ------------------------------------------------------------------------- flat clusters and groupings

template <class T>
void check_flat_clusters() {
  const host_context ctx;
  // Two groups of four points one apart, 97 apart from each other: single linkage.
  const T line[] = {0, 1, 2, 3, 100, 101, 102, 103};
  const auto points = make_matrix_view(line, 8, 1);
  const host_matrix<double> z = cluster::linkage(ctx, cluster::linkage_params{}, points);
  const std::int64_t two_groups[] = {0, 0, 0, 0, 1, 1, 1, 1};
  std::int64_t labels[8] = {};
  const auto labels_view = make_vector_view(labels, 8);
  const auto labels_are = [&labels](const std::int64_t* want) { return std::equal(labels, labels + 8, want); };
  const std::int64_t singletons[] = {0, 1, 2, 3, 4, 5, 6, 7};
  const auto maxclust = [](index_t k) {
    cluster::fcluster_params p;
    p.max_clusters = k;
    return p;
  };
  const auto at_height = [](double t) {
    cluster::fcluster_params p;
    p.criterion = cluster::fcluster_criterion::distance;
    p.height = t;
    return p;
  };

  expect(cluster::fcluster(ctx, maxclust(2), z.view(), labels_view) == 2 && labels_are(two_groups),
         label<T>("fcluster_maxclust 2"));
  expect(cluster::fcluster(ctx, maxclust(8), z.view(), labels_view) == 8 && labels_are(singletons),
         label<T>("fcluster_maxclust 8"));
  expect(cluster::fcluster(ctx, at_height(0.5), z.view(), labels_view) == 8 && labels_are(singletons),
         label<T>("fcluster_distance 0.5"));
  expect(cluster::fcluster(ctx, at_height(50.0), z.view(), labels_view) == 2 && labels_are(two_groups),
         label<T>("fcluster_distance 50"));

  host_vector<double> cophenetic(distance::condensed_size(8));
  cluster::cophenetic_distances(ctx, z.view(), cophenetic.view());
  for (index_t i = 0; i < 8; ++i)
    for (index_t j = i + 1; j < 8; ++j)
      expect_near(cophenetic[distance::condensed_index(8, i, j)], (i < 4) == (j < 4) ? 1.0 : 97.0, tol<T>,
                  label<T>("cophenetic_distances"));
  host_vector<double> heights(7);
  cluster::monotone_heights(ctx, z.view(), heights.view());
  for (index_t r = 0; r < 7; ++r) expect(heights[r] == z(r, 2), label<T>("monotone_heights of single linkage"));

  // Groupings of the two-cluster labels (labels_view holds them after fcluster_distance 50).
  const vector_view<const std::int64_t> grouping = labels_view;
  expect(cluster::group_count(ctx, grouping) == 2, label<T>("group_count"));
  index_t offsets[3] = {}, members[8] = {};
  cluster::group_members(ctx, grouping, make_vector_view(offsets, 3), make_vector_view(members, 8));
  const index_t want_offsets[] = {0, 4, 8};
  expect(std::equal(offsets, offsets + 3, want_offsets), label<T>("group_members offsets"));
  bool in_order = true;
  for (index_t p = 0; p < 8; ++p) in_order = in_order && members[p] == p;
  expect(in_order, label<T>("group_members members"));
  // Group means 1.5 and 101.5: two members tie in each group, the lower index wins.
  index_t representatives[2] = {-1, -1};
  cluster::group_representatives(ctx, points, grouping, make_vector_view(representatives, 2));
  expect(representatives[0] == 1 && representatives[1] == 5, label<T>("group_representatives"));
  const std::int64_t raw[] = {7, 7, -3, 7, 42, -3};
  const std::int64_t want_relabelled[] = {0, 0, 1, 0, 2, 1};
  std::int64_t relabelled[6] = {};
  expect(cluster::relabel_by_first_appearance(ctx, make_vector_view(raw, 6), make_vector_view(relabelled, 6)) == 3 &&
             std::equal(relabelled, relabelled + 6, want_relabelled),
         label<T>("relabel_by_first_appearance"));
}

// ---------------------------------------------------------------------------------- linear assignment

bool is_identity(const host_vector<index_t>& columns) {
  for (index_t i = 0; i < columns.size(); ++i)
    if (columns[i] != i) return false;
  return true;
}

bool all_distinct(const host_vector<index_t>& columns) {
  std::vector<index_t> sorted(columns.storage());
  std::sort(sorted.begin(), sorted.end());
  return std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end() && (sorted.empty() || sorted.front() >= 0);
}

template <class T>
void check_assignment() {
  const host_context ctx;
  const index_t n = 24;
  // Zero diagonal, positive elsewhere: the identity is the only optimum.
  host_matrix<T> diagonal(n, n), negated(n, n);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j) {
      diagonal(i, j) = i == j ? T(0) : static_cast<T>(1 + (i * 7 + j * 3) % 11);
      negated(i, j) = -diagonal(i, j);
    }
  host_vector<index_t> columns(n);
  ot::linear_assignment_result r = ot::linear_assignment(ctx, {}, diagonal.const_view(), columns.view());
  expect(r.status == moecomp::status::ok && r.cost == 0 && is_identity(columns),
         label<T>("linear_assignment on a zero-diagonal cost"));
  ot::linear_assignment_params maximize;
  maximize.maximize = true;
  r = ot::linear_assignment(ctx, maximize, negated.const_view(), columns.view());
  expect(r.status == moecomp::status::ok && r.cost == 0 && is_identity(columns),
         label<T>("linear_assignment maximize"));

  // Potentials: dual feasible, tight on the assignment; then a warm start from them.
  host_vector<double> u(n), v(n);
  r = ot::linear_assignment(ctx, {}, diagonal.const_view(), columns.view(), u.view(), v.view());
  double violation = 0;
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j) {
      const double slack = static_cast<double>(diagonal(i, j)) - u[i] - v[j];
      violation = std::max(violation, i == j ? std::fabs(slack) : -slack);
    }
  expect(r.status == moecomp::status::ok && is_identity(columns), label<T>("linear_assignment with potentials"));
  expect_small(violation, 1e-9, label<T>("linear_assignment potentials: feasible and tight"));
  ot::linear_assignment_params warm;
  warm.warm_start = true;
  r = ot::linear_assignment(ctx, warm, diagonal.const_view(), columns.view(), u.view(), v.view());
  expect(r.status == moecomp::status::ok && r.cost == 0 && is_identity(columns),
         label<T>("linear_assignment warm start"));

  // Rectangular integer costs: the exact solver and the auction (exact on integers) agree.
  const index_t rows = 24, cols = 40;
  host_matrix<T> integer_costs(rows, cols);
  moecomp::random_generator rng(4);
  for (T& c : integer_costs.storage()) c = static_cast<T>(rng.uniform_index(100));
  host_vector<index_t> exact_columns(rows), auction_columns(rows);
  const ot::linear_assignment_result exact =
      ot::linear_assignment(ctx, {}, integer_costs.const_view(), exact_columns.view());
  const ot::auction_result auction =
      ot::auction_assignment(ctx, ot::auction_params{}, integer_costs.const_view(), auction_columns.view());
  expect(exact.status == moecomp::status::ok && all_distinct(exact_columns), label<T>("linear_assignment 24 x 40"));
  expect(auction.status == moecomp::status::ok && all_distinct(auction_columns) && auction.criterion < 1,
         label<T>("auction_assignment 24 x 40"));
  expect_near(auction.cost, exact.cost, 0.0, label<T>("auction_assignment cost vs linear_assignment on integers"));

  host_vector<double> prices(n);
  const ot::auction_result priced =
      ot::auction_assignment(ctx, ot::auction_params{}, diagonal.const_view(), columns.view(), prices.view());
  expect(priced.status == moecomp::status::ok && priced.cost == 0 && is_identity(columns),
         label<T>("auction_assignment with prices on a zero-diagonal cost"));
  ot::auction_params auction_maximize;
  auction_maximize.maximize = true;
  const ot::auction_result maximized =
      ot::auction_assignment(ctx, auction_maximize, negated.const_view(), columns.view());
  expect(maximized.status == moecomp::status::ok && maximized.cost == 0 && is_identity(columns),
         label<T>("auction_assignment maximize"));

  // Batched: problem b's zero entries sit on the shifted diagonal j = (i + b) mod m.
  const index_t batch = 5, bn = 6, bm = 8;
  host_matrix<T> costs(batch * bn, bm);
  for (index_t b = 0; b < batch; ++b)
    for (index_t i = 0; i < bn; ++i)
      for (index_t j = 0; j < bm; ++j)
        costs(b * bn + i, j) = j == (i + b) % bm ? T(0) : static_cast<T>(1 + (i + j + b) % 5);
  host_vector<index_t> batch_columns(batch * bn);
  host_vector<ot::linear_assignment_result> results(batch);
  ot::linear_assignment_batched(ctx, {}, split_rows(costs.const_view(), batch),
                                make_matrix_view(batch_columns.data(), batch, bn), results.view());
  for (index_t b = 0; b < batch; ++b) {
    bool shifted = results[b].status == moecomp::status::ok && results[b].cost == 0;
    for (index_t i = 0; i < bn; ++i) shifted = shifted && batch_columns[b * bn + i] == (i + b) % bm;
    expect(shifted, label<T>("linear_assignment_batched problem " + std::to_string(b)));
  }
}

// ------------------------------------------------------------------------------------------------- emd

template <class T>
void check_emd() {
  const host_context ctx;
  // Identical histograms, zero-diagonal cost: nothing moves.
  const index_t n = 24;
  const auto a = dyadic_histogram<T>(n, 5);
  host_matrix<T> line_cost(n, n);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j) line_cost(i, j) = static_cast<T>(i > j ? i - j : j - i);
  host_matrix<double> plan(n, n);
  ot::emd_result r = ot::emd(ctx, {}, a.const_view(), a.const_view(), line_cost.const_view(), plan.view());
  double off_diagonal = 0, diagonal_error = 0;
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j) {
      if (i == j) diagonal_error = std::max(diagonal_error, std::fabs(plan(i, i) - static_cast<double>(a[i])));
      else off_diagonal += plan(i, j);
    }
  expect(r.ok() && r.cost == 0, label<T>("emd of identical histograms: cost 0"));
  expect_small(diagonal_error + off_diagonal, 1e-15, label<T>("emd of identical histograms: diagonal plan"));

  // Points {0, 1} to {1, 2}, squared distances: shift each point by one (cost 1), not cross (cost 2).
  const T halves[] = {0.5, 0.5};
  const T shift_cost[] = {1, 4, 0, 1};
  double shift_plan[4] = {};
  r = ot::emd(ctx, {}, make_vector_view(halves, 2), make_vector_view(halves, 2), make_matrix_view(shift_cost, 2, 2),
              make_matrix_view(shift_plan, 2, 2));
  expect(r.ok() && r.cost == 1 && shift_plan[0] == 0.5 && shift_plan[3] == 0.5,
         label<T>("emd of a shifted pair of points"));

  // Random 30 x 20: marginals, cost, strong duality, and the sparse form.
  const index_t rows = 30, cols = 20;
  const auto ra = dyadic_histogram<T>(rows, 8), rb = dyadic_histogram<T>(cols, 9);
  const auto cost = unit_cost<T>(rows, cols, 10);
  host_matrix<double> dense(rows, cols);
  host_vector<double> u(rows), v(cols);
  r = ot::emd(ctx, {}, ra.const_view(), rb.const_view(), cost.const_view(), dense.view(), u.view(), v.view());
  expect(r.ok() && r.nonzeros <= rows + cols - 1, label<T>("emd 30 x 20: status and support size"));
  double marginal_error = 0, transported = 0, dual = 0, dual_violation = 0;
  index_t positive = 0;
  for (index_t i = 0; i < rows; ++i) {
    double row_sum = 0;
    for (index_t j = 0; j < cols; ++j) {
      row_sum += dense(i, j);
      transported += dense(i, j) * static_cast<double>(cost(i, j));
      positive += dense(i, j) > 0;
      dual_violation = std::max(dual_violation, u[i] + v[j] - static_cast<double>(cost(i, j)));
    }
    marginal_error = std::max(marginal_error, std::fabs(row_sum - static_cast<double>(ra[i])));
    dual += static_cast<double>(ra[i]) * u[i];
  }
  for (index_t j = 0; j < cols; ++j) {
    double column_sum = 0;
    for (index_t i = 0; i < rows; ++i) column_sum += dense(i, j);
    marginal_error = std::max(marginal_error, std::fabs(column_sum - static_cast<double>(rb[j])));
    dual += static_cast<double>(rb[j]) * v[j];
  }
  expect_small(marginal_error, 1e-12, label<T>("emd 30 x 20: plan marginals"));
  expect_near(transported, r.cost, 1e-12, label<T>("emd 30 x 20: cost of the plan"));
  expect_near(dual, r.cost, 1e-9, label<T>("emd 30 x 20: <a, u> + <b, v> = cost"));
  expect_small(dual_violation, 1e-9, label<T>("emd 30 x 20: u_i + v_j <= cost"));
  expect(positive == r.nonzeros, label<T>("emd 30 x 20: nonzeros"));

  const index_t capacity = rows + cols - 1;
  host_vector<index_t> entry_rows(capacity), entry_cols(capacity);
  host_vector<double> mass(capacity), su(rows), sv(cols);
  const ot::emd_result sparse = ot::emd_sparse(ctx, {}, ra.const_view(), rb.const_view(), cost.const_view(),
                                               entry_rows.view(), entry_cols.view(), mass.view());
  bool same_entries = sparse.ok() && sparse.nonzeros == r.nonzeros && sparse.cost == r.cost;
  for (index_t k = 0; same_entries && k < sparse.nonzeros; ++k)
    same_entries = dense(entry_rows[k], entry_cols[k]) == mass[k];
  expect(same_entries, label<T>("emd_sparse: the dense plan's entries"));
  const ot::emd_result sparse_dual = ot::emd_sparse(ctx, {}, ra.const_view(), rb.const_view(), cost.const_view(),
                                                    entry_rows.view(), entry_cols.view(), mass.view(), su.view(),
                                                    sv.view());
  expect(sparse_dual.ok() && sparse_dual.cost == r.cost && su.storage() == u.storage() && sv.storage() == v.storage(),
         label<T>("emd_sparse with potentials"));
}

// -------------------------------------------------------------------------------------------- sinkhorn

/// Largest |row sum - a_i| and |column sum - b_j| of a plan.
template <class T>
double plan_marginal_error(const host_matrix<T>& plan, vector_view<const T> a, vector_view<const T> b) {
  double worst = 0;
  for (index_t i = 0; i < plan.rows(); ++i) {
    double sum = 0;
    for (index_t j = 0; j < plan.cols(); ++j) sum += static_cast<double>(plan(i, j));
    worst = std::max(worst, std::fabs(sum - static_cast<double>(a[i])));
  }
  for (index_t j = 0; j < plan.cols(); ++j) {
    double sum = 0;
    for (index_t i = 0; i < plan.rows(); ++i) sum += static_cast<double>(plan(i, j));
    worst = std::max(worst, std::fabs(sum - static_cast<double>(b[j])));
  }
  return worst;
}

template <class T>
void check_sinkhorn() {
  const host_context ctx;
  constexpr double marginal_tolerance = std::is_same_v<T, float> ? 1e-5 : 1e-8;
  const index_t n = 40, m = 24;
  const auto a = dyadic_histogram<T>(n, 11), b = dyadic_histogram<T>(m, 12);
  const auto cost = unit_cost<T>(n, m, 13);
  for (const ot::sinkhorn_method method : all_sinkhorn_methods) {
    const std::string name = label<T>(std::string("sinkhorn ") + ot::to_string(method) + " 40 x 24");
    ot::sinkhorn_params params;
    params.reg = 0.05;
    params.method = method;
    params.max_iterations = 10000;
    params.tolerance = std::is_same_v<T, float> ? 1e-7 : 1e-9;
    host_matrix<T> plan(n, m);
    const ot::sinkhorn_result r =
        ot::sinkhorn(ctx, params, a.const_view(), b.const_view(), cost.const_view(), plan.view());
    expect(r.ok(), name + ": converged");
    expect_small(plan_marginal_error(plan, a.const_view(), b.const_view()), marginal_tolerance,
                 name + ": plan marginals are a and b");
    double transported = 0;
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < m; ++j) transported += static_cast<double>(plan(i, j)) * static_cast<double>(cost(i, j));
    expect_near(r.cost, transported, tol<T>, name + ": cost of the plan");

    // With the potentials: the same plan, and plan_ij = exp((f_i + g_j - cost_ij) / reg) (epsilon_scaling's
    // identity holds for its last regularisation, not reg, so it is not checked there).
    host_matrix<T> plan_fg(n, m);
    host_vector<T> f(n), g(m);
    const ot::sinkhorn_result r_fg = ot::sinkhorn(ctx, params, a.const_view(), b.const_view(), cost.const_view(),
                                                  plan_fg.view(), f.view(), g.view());
    expect(r_fg.status == moecomp::status::ok, name + " with potentials: converged");
    double plan_difference = 0, identity_error = 0;
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < m; ++j) {
        plan_difference = std::max(plan_difference, std::fabs(static_cast<double>(plan_fg(i, j) - plan(i, j))));
        const double from_potentials = std::exp(
            (static_cast<double>(f[i]) + static_cast<double>(g[j]) - static_cast<double>(cost(i, j))) / params.reg);
        if (plan_fg(i, j) > T(1e-6))
          identity_error =
              std::max(identity_error, std::fabs(from_potentials / static_cast<double>(plan_fg(i, j)) - 1));
      }
    expect_small(plan_difference, marginal_tolerance, name + " with potentials: same plan");
    if (method != ot::sinkhorn_method::epsilon_scaling)
      expect_small(identity_error, std::is_same_v<T, float> ? 1e-3 : 1e-6, name + ": plan from the potentials");

    // Batched: three 8 x 12 problems, each the same as solved alone.
    const index_t batch = 3, bn = 8, bm = 12;
    host_matrix<T> batch_a(batch, bn), batch_b(batch, bm), costs(batch * bn, bm), plans(batch * bn, bm);
    for (index_t k = 0; k < batch; ++k) {
      const auto ak = dyadic_histogram<T>(bn, 20 + static_cast<std::uint64_t>(k));
      const auto bk = dyadic_histogram<T>(bm, 30 + static_cast<std::uint64_t>(k));
      const auto ck = unit_cost<T>(bn, bm, 40 + 2 * static_cast<std::uint64_t>(k));
      std::copy(ak.storage().begin(), ak.storage().end(), batch_a.view().row_ptr(k));
      std::copy(bk.storage().begin(), bk.storage().end(), batch_b.view().row_ptr(k));
      std::copy(ck.storage().begin(), ck.storage().end(), costs.view().row_ptr(k * bn));
    }
    host_vector<ot::sinkhorn_result> results(batch);
    ot::sinkhorn_batched(ctx, params, batch_a.const_view(), batch_b.const_view(), split_rows(costs.const_view(), batch),
                         split_rows(plans.view(), batch),
                         results.view());
    for (index_t k = 0; k < batch; ++k) {
      host_matrix<T> alone(bn, bm);
      const ot::sinkhorn_result r_alone =
          ot::sinkhorn(host_context(1), params, batch_a.const_view().row(k), batch_b.const_view().row(k),
                       costs.const_view().row_range(k * bn, bn), alone.view());
      double difference = 0;
      for (index_t i = 0; i < bn; ++i)
        for (index_t j = 0; j < bm; ++j)
          difference = std::max(difference, std::fabs(static_cast<double>(plans(k * bn + i, j) - alone(i, j))));
      expect(results[k].status == moecomp::status::ok && r_alone.status == moecomp::status::ok,
             name + ": sinkhorn_batched problem " + std::to_string(k) + " converged");
      expect_small(difference, 1e-12, name + ": sinkhorn_batched problem " + std::to_string(k) + " vs alone");
    }
  }

  // 512 x 512 in double: large enough for the plain method's float copy of the kernel.
  if constexpr (std::is_same_v<T, double>) {
    const index_t big = 512;
    const auto big_a = dyadic_histogram<double>(big, 50), big_b = dyadic_histogram<double>(big, 51);
    const auto big_cost = unit_cost<double>(big, big, 52);
    ot::sinkhorn_params params;
    params.reg = 0.05;
    host_matrix<double> plan(big, big);
    const ot::sinkhorn_result r =
        ot::sinkhorn(ctx, params, big_a.const_view(), big_b.const_view(), big_cost.const_view(), plan.view());
    expect(r.status == moecomp::status::ok, label<T>("sinkhorn plain 512 x 512: converged"));
    expect_small(plan_marginal_error(plan, big_a.const_view(), big_b.const_view()), 1e-8,
                 label<T>("sinkhorn plain 512 x 512: plan marginals"));
  }
}

// ---------------------------------------------------------------------------- fixed-support barycenter

template <class T>
void check_fixed_support_barycenter() {
  const host_context ctx;
  // Two bumps on a 24-point grid, at 5 and at its mirror 18: with equal weights the barycenter is
  // symmetric, peaked in the middle.
  const index_t n = 24;
  host_matrix<T> cost(n, n), histograms(n, 2);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j) {
      const double step = static_cast<double>(i - j) / static_cast<double>(n - 1);
      cost(i, j) = static_cast<T>(step * step);
    }
  double bump_mass = 0;
  for (index_t i = 0; i < n; ++i) bump_mass += std::exp(-0.25 * static_cast<double>((i - 5) * (i - 5))) + 1e-3;
  for (index_t i = 0; i < n; ++i) {
    histograms(i, 0) = static_cast<T>((std::exp(-0.25 * static_cast<double>((i - 5) * (i - 5))) + 1e-3) / bump_mass);
    histograms(n - 1 - i, 1) = histograms(i, 0);
  }
  const auto peak_of = [](const host_vector<T>& h) {
    return static_cast<index_t>(std::max_element(h.storage().begin(), h.storage().end()) - h.storage().begin());
  };
  const T equal_weights[] = {0.5, 0.5}, first_only[] = {1, 0};
  for (const bool log_domain : {false, true}) {
    const std::string name = label<T>(std::string("fixed_support_barycenter") + (log_domain ? " log" : ""));
    ot::fixed_support_barycenter_params params;
    params.reg = 0.05;
    params.log_domain = log_domain;
    host_vector<T> uniform(n), weighted(n), first(n);
    const ot::fixed_support_barycenter_result r =
        ot::fixed_support_barycenter(ctx, params, histograms.const_view(), cost.const_view(), uniform.view());
    expect(r.ok(), name + ": converged");
    double mass = 0, asymmetry = 0;
    for (index_t i = 0; i < n; ++i) {
      mass += static_cast<double>(uniform[i]);
      asymmetry = std::max(asymmetry, std::fabs(static_cast<double>(uniform[i] - uniform[n - 1 - i])));
    }
    expect_near(mass, 1.0, 1e-3, name + ": unit mass");
    expect_small(asymmetry, tol<T>, name + ": symmetric barycenter of mirrored bumps");
    expect(peak_of(uniform) == 11 || peak_of(uniform) == 12, name + ": peak in the middle");

    const ot::fixed_support_barycenter_result rw = ot::fixed_support_barycenter(
        ctx, params, histograms.const_view(), cost.const_view(), make_vector_view(equal_weights, 2), weighted.view());
    double difference = 0;
    for (index_t i = 0; i < n; ++i)
      difference = std::max(difference, std::fabs(static_cast<double>(weighted[i] - uniform[i])));
    expect(rw.status == moecomp::status::ok, name + " weights (0.5, 0.5): converged");
    expect_small(difference, tol<T>, name + ": weights (0.5, 0.5) as the uniform overload");
    // Weights (1, 0): the log domain starts from zero log scalings and keeps the first bump. (The plain
    // method starts as POT does, from the unweighted geometric mean, and then lands elsewhere: not checked.)
    if (log_domain) {
      const ot::fixed_support_barycenter_result r1 = ot::fixed_support_barycenter(
          ctx, params, histograms.const_view(), cost.const_view(), make_vector_view(first_only, 2), first.view());
      expect(r1.status == moecomp::status::ok && peak_of(first) >= 3 && peak_of(first) <= 7,
             name + " weights (1, 0): peak at the first bump");
    }
  }
}

// ----------------------------------------------------------------------------- free-support barycenter

template <class T>
void check_free_support_barycenter() {
  const host_context ctx;
  // Cloud j is a permutation of one base cloud, translated by s_j. Translations do not change which
  // matching is optimal, so the barycenter is the base cloud translated by sum_j w_j s_j, each cloud's row i
  // goes to barycenter row perm_j(i), and the objective is sum_j w_j ||s_j - mean shift||^2.
  const index_t k = 3, n = 40, d = 24;
  const auto base = normal_points<T>(n, d, 60);
  const auto shifts = normal_points<T>(k, d, 61);
  host_matrix<index_t> perms(k, n);  // row j: perm_j, the identity for j = 0
  moecomp::random_generator rng(62);
  for (index_t j = 0; j < k; ++j) {
    index_t* perm = perms.view().row_ptr(j);
    std::iota(perm, perm + n, index_t(0));
    if (j > 0) rng.shuffle(perm, perm + n);
  }
  host_matrix<T> measures(k * n, d);
  for (index_t j = 0; j < k; ++j)
    for (index_t i = 0; i < n; ++i)
      for (index_t c = 0; c < d; ++c)
        measures(j * n + i, c) = base(perms(j, i), c) + shifts(j, c);
  host_matrix<T> init(n, d);  // cloud 0
  std::copy(measures.storage().begin(), measures.storage().begin() + n * d, init.storage().begin());

  const double skewed[] = {0.5, 0.3, 0.2}, uniform[] = {1.0 / 3, 1.0 / 3, 1.0 / 3};
  for (const double* weights : {skewed, uniform}) {
    const bool is_uniform = weights == uniform;
    host_vector<double> mean_shift(d);
    for (index_t j = 0; j < k; ++j)
      for (index_t c = 0; c < d; ++c) mean_shift[c] += weights[j] * static_cast<double>(shifts(j, c));
    double objective = 0;
    for (index_t j = 0; j < k; ++j)
      for (index_t c = 0; c < d; ++c) {
        const double off = static_cast<double>(shifts(j, c)) - mean_shift[c];
        objective += weights[j] * off * off;
      }
    const auto barycenter_error = [&](const host_matrix<T>& barycenter) {
      double worst = 0;
      for (index_t l = 0; l < n; ++l)
        for (index_t c = 0; c < d; ++c)
          worst = std::max(worst, entry_error(barycenter(l, c), static_cast<double>(base(l, c)) + mean_shift[c]));
      return worst;
    };

    // The uniform path (one linear assignment per cloud), with explicit weights or its 1/k overload.
    const std::string name = label<T>(std::string("free_support_barycenter") + (is_uniform ? " 1/k" : " weighted"));
    host_matrix<T> barycenter(n, d);
    host_matrix<index_t> permutations(k, n);
    const ot::free_support_barycenter_result r =
        is_uniform ? ot::free_support_barycenter<T>(ctx, {}, split_rows(measures.const_view(), k), init.const_view(),
                                                    barycenter.view(), permutations.view())
                   : ot::free_support_barycenter<T>(ctx, {}, split_rows(measures.const_view(), k), make_vector_view(weights, k),
                                                    init.const_view(), barycenter.view(), permutations.view());
    bool planted = true;
    for (index_t j = 0; j < k; ++j)
      for (index_t i = 0; i < n; ++i)
        planted = planted && permutations(j, i) == perms(j, i);
    expect(r.status == moecomp::status::ok, name + ": converged");
    expect(planted, name + ": the planted permutations");
    expect_small(barycenter_error(barycenter), tol<T>, name + ": base cloud + mean shift");
    expect_near(r.objective, objective, tol<T>, name + ": objective");

    // The general path (network simplex) on the same clouds with masses 1/n.
    const std::string general_name =
        label<T>(std::string("free_support_barycenter_weighted") + (is_uniform ? " 1/k" : " weighted"));
    host_vector<double> point_mass(n);
    for (index_t i = 0; i < n; ++i) point_mass[i] = 1.0 / static_cast<double>(n);
    std::vector<matrix_view<const T>> clouds;
    std::vector<vector_view<const double>> masses;
    for (index_t j = 0; j < k; ++j) {
      clouds.push_back(measures.const_view().row_range(j * n, n));
      masses.push_back(point_mass.const_view());
    }
    host_matrix<T> general(n, d);
    const ot::free_support_barycenter_result rg =
        is_uniform ? ot::free_support_barycenter_weighted<T>(ctx, {}, clouds, masses, init.const_view(),
                                                             point_mass.const_view(), general.view())
                   : ot::free_support_barycenter_weighted<T>(ctx, {}, clouds, masses, make_vector_view(weights, k),
                                                             init.const_view(), point_mass.const_view(),
                                                             general.view());
    expect(rg.status == moecomp::status::ok, general_name + ": converged");
    expect_small(barycenter_error(general), tol<T>, general_name + ": base cloud + mean shift");
    expect_near(rg.objective, objective, tol<T>, general_name + ": objective");
  }

  // Two Dirac measures with weights (1/4, 3/4): the barycenter is their weighted mean.
  const T y1[] = {0, 0}, y2[] = {2, 4}, start[] = {7, -1};
  const double one = 1.0, dirac_weights[] = {0.25, 0.75};
  T dirac_barycenter[2] = {};
  const std::vector<matrix_view<const T>> diracs = {make_matrix_view(y1, 1, 2), make_matrix_view(y2, 1, 2)};
  const std::vector<vector_view<const double>> dirac_masses = {make_vector_view(&one, 1), make_vector_view(&one, 1)};
  const ot::free_support_barycenter_result rd = ot::free_support_barycenter_weighted<T>(
      ctx, {}, diracs, dirac_masses, make_vector_view(dirac_weights, 2), make_matrix_view(start, 1, 2),
      make_vector_view(&one, 1), make_matrix_view(dirac_barycenter, 1, 2));
  expect(rd.status == moecomp::status::ok && dirac_barycenter[0] == T(1.5) && dirac_barycenter[1] == T(3),
         label<T>("free_support_barycenter_weighted of two Diracs"));
}

// ------------------------------------------------------------------------------------------------- npy

template <class T>
void check_npy() {
  namespace io = moecomp::io;
  const auto x = normal_points<T>(5, 7, 70);
  const io::npy_array matrix = io::parse_npy(io::serialize_npy(x.view()), "in-memory matrix");
  expect(matrix.holds<T>() && matrix.shape() == std::vector<index_t>{5, 7} &&
             matrix.to_matrix<T>().storage() == x.storage(),
         label<T>("serialize_npy / parse_npy round trip of a matrix"));
  const auto h = dyadic_histogram<T>(9, 71);
  const io::npy_array parsed = io::parse_npy(io::serialize_npy(h.const_view()), "in-memory vector");
  expect(parsed.holds<T>() && parsed.ndim() == 1 && parsed.to_vector<T>().storage() == h.storage(),
         label<T>("serialize_npy / parse_npy round trip of a vector"));
}

// ------------------------------------------------------------------------------------------ sparse residuals

/// A residual with about one entry in four nonzero, each a multiple of 1/64 in [-1, 1]: exact in fp32, fp16
/// and bf16 values, so every format and value type must give it back exactly.
template <class T>
host_matrix<T> planted_residual(index_t rows, index_t cols, std::uint64_t seed) {
  moecomp::random_generator rng(seed);
  host_matrix<T> r(rows, cols);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j)
      r(i, j) = rng.uniform_index(4) == 0 ? static_cast<T>(static_cast<double>(rng.uniform_index(129)) / 64 - 1) : T(0);
  return r;
}

// The bitmap restore and apply have AVX-512 kernels (sparse/detail/bitmap_simd.hpp), so these checks are what
// compiles and runs them at each level and with each compiler.
template <class T>
void check_sparse() {
  namespace sparse = moecomp::sparse;
  const host_context ctx;
  const index_t rows = 37, cols = 300;  // a ragged tail after the 64-column SIMD blocks
  const auto base = normal_points<T>(rows, cols, 91);
  const auto residual = planted_residual<T>(rows, cols, 92);
  for (const sparse::sparse_format format : {sparse::sparse_format::csr16, sparse::sparse_format::bitmap}) {
    const std::string name = std::string(sparse::to_string(format));
    sparse::encode_params encode;
    encode.format = format;
    encode.values = sparse::value_dtype::bfloat16;
    sparse::sparse_matrix r;
    sparse::encode_sparse<T>(ctx, encode, residual.view(), r);
    const moecomp::io::residual_file file =
        moecomp::io::parse_residual(moecomp::io::serialize_residual(r.view()), "memory");
    const sparse::sparse_matrix_view stored = file.matrix();

    host_matrix<T> decoded(rows, cols), restored(rows, cols);
    host_matrix<moecomp::bfloat16> restored_bf16(rows, cols);
    sparse::decode_sparse<T>(ctx, stored, decoded.view());
    sparse::restore_dense<T, T>(ctx, base.view(), stored, restored.view());
    sparse::restore_dense<T, moecomp::bfloat16>(ctx, base.view(), stored, restored_bf16.view());
    double decode_error = 0, restore_error = 0, bf16_error = 0;
    for (index_t i = 0; i < rows; ++i)
      for (index_t j = 0; j < cols; ++j) {
        const double want = static_cast<double>(base(i, j)) + static_cast<double>(residual(i, j));
        decode_error = std::max(decode_error, std::fabs(static_cast<double>(decoded(i, j) - residual(i, j))));
        restore_error = std::max(restore_error, entry_error(static_cast<double>(restored(i, j)), want));
        bf16_error = std::max(bf16_error, entry_error(static_cast<double>(static_cast<float>(restored_bf16(i, j))), want));
      }
    expect_small(decode_error, 0, label<T>("decode_sparse " + name + " gives the residual back exactly"));
    expect_small(restore_error, tol<T>, label<T>("restore_dense " + name));
    expect_small(bf16_error, 1.0 / 128, label<T>("restore_dense " + name + " to bfloat16"));

    // Two experts sharing the base, 3 and 40 tokens: the per-row and the panel paths of the apply.
    const index_t tokens = 43;
    const auto x = normal_points<T>(tokens, cols, 93);
    host_matrix<T> y(tokens, rows);
    const std::vector<sparse::sparse_matrix_view> experts = {stored, stored};
    host_vector<index_t> offsets(3);
    offsets[0] = 0;
    offsets[1] = 3;
    offsets[2] = tokens;
    sparse::shared_base_apply<T>(ctx, x.view(), base.view(), experts, offsets.view(), y.view());
    double apply_error = 0;
    for (index_t t = 0; t < tokens; ++t)
      for (index_t i = 0; i < rows; ++i) {
        double want = 0;
        for (index_t j = 0; j < cols; ++j)
          want += static_cast<double>(x(t, j)) * (static_cast<double>(base(i, j)) + static_cast<double>(residual(i, j)));
        apply_error = std::max(apply_error, entry_error(static_cast<double>(y(t, i)), want));
      }
    expect_small(apply_error, std::is_same_v<T, float> ? 1e-4 : 1e-12, label<T>("shared_base_apply " + name));
  }
}

// ---------------------------------------------------------------------------------------------- driver

/// Runs one group of checks; an exception (moecomp's misuse errors) counts as a failure of that group.
template <class Checks>
void run_group(const char* name, Checks&& checks) {
  try {
    checks();
  } catch (const std::exception& e) {
    ++failure_count;
    std::fprintf(stderr, "FAILED: %s threw: %s\n", name, e.what());
  }
}

template <class T>
void check_all() {
  run_group(label<T>("distances").c_str(), check_distances<T>);
  run_group(label<T>("linkage").c_str(), check_linkage<T>);
  run_group(label<T>("flat clusters and groupings").c_str(), check_flat_clusters<T>);
  run_group(label<T>("linear assignment").c_str(), check_assignment<T>);
  run_group(label<T>("emd").c_str(), check_emd<T>);
  run_group(label<T>("sinkhorn").c_str(), check_sinkhorn<T>);
  run_group(label<T>("fixed-support barycenter").c_str(), check_fixed_support_barycenter<T>);
  run_group(label<T>("free-support barycenter").c_str(), check_free_support_barycenter<T>);
  run_group(label<T>("npy").c_str(), check_npy<T>);
  run_group(label<T>("sparse residuals").c_str(), check_sparse<T>);
}

}  // namespace

int run_all_algorithms() {
  check_all<float>();
  check_all<double>();
  if (failure_count != 0) {
    std::fprintf(stderr, "%d of %d checks failed\n", failure_count, check_count);
    return 1;
  }
  std::printf("moecomp %s: %d checks of the host algorithms (float and double) passed\n", MOECOMP_VERSION_STRING,
              check_count);
  return 0;
}
