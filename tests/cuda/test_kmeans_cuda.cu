// Device k-means against the host's (host_reference.cpp): on planted blobs (well-separated clusters, so no
// label sits near a tie) the same labels, iterations and status, centres and inertia to rounding, for
// given, random-rows and k-means++ starts, sample weights, strided views and size bounds; the re-seeding
// of an emptied cluster; bit-identical repeated runs; caller workspaces; the equal-size step by the device
// auction (kmeans_balanced_solver::device_auction: the host's labels on planted equal clusters, exact sizes,
// its certificate within its bound, a swap test of the last step on unstructured data). Argument checks run
// before any device work and pass without a GPU. The rest runs under `ctest -L cuda`. The device-auction
// cases are compiled, not yet run on hardware.
#include <doctest/doctest.h>
#include <moecomp/cuda/moecomp.cuh>

#include "device_test_support.cuh"
#include "host_reference.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace {

using moecomp::index_t;
namespace cluster = moecomp::cluster;
using moecomp_test::device_fixture;

/// k blobs of n / k points around centres 20 apart (blob spread 1), rows in a seeded shuffled order.
template <class T>
moecomp::host_matrix<T> blobs(index_t n, index_t d, index_t k, std::uint64_t seed) {
  moecomp::random_generator rng(seed);
  moecomp::host_matrix<T> centres(k, d), x(n, d);
  for (index_t j = 0; j < k; ++j)
    for (index_t c = 0; c < d; ++c) centres(j, c) = static_cast<T>(20.0 * rng.normal<double>());
  for (index_t i = 0; i < n; ++i) {
    const index_t j = static_cast<index_t>(rng.uniform_index(static_cast<std::uint64_t>(k)));
    for (index_t c = 0; c < d; ++c) x(i, c) = static_cast<T>(static_cast<double>(centres(j, c)) + rng.normal<double>());
  }
  return x;
}

template <class T>
struct fit {
  cluster::kmeans_result result;
  std::vector<T> centers;
  std::vector<std::int64_t> labels;
  std::vector<index_t> sizes;
};

template <class T>
fit<T> host_fit(const cluster::kmeans_params& params, const moecomp::host_matrix<T>& x, const std::vector<T>& weights,
                const moecomp::host_matrix<T>& init) {
  const index_t n = x.rows(), d = x.cols(), k = params.clusters;
  fit<T> out;
  out.centers.assign(init.data(), init.data() + k * d);
  out.labels.resize(static_cast<std::size_t>(n));
  out.sizes.resize(static_cast<std::size_t>(k));
  out.result = moecomp_test::host_kmeans<T>(params, x.const_view(),
                                           moecomp::make_vector_view(weights.data(), static_cast<index_t>(weights.size())),
                                           moecomp::make_matrix_view(out.centers.data(), k, d),
                                           moecomp::make_vector_view(out.labels.data(), n),
                                           moecomp::make_vector_view(out.sizes.data(), k));
  return out;
}

/// The device fit, x stored at row stride `ld` >= d.
template <class T>
fit<T> device_fit(const moecomp::cuda_context& ctx, const cluster::kmeans_params& params,
                  const moecomp::host_matrix<T>& x, const std::vector<T>& weights, const moecomp::host_matrix<T>& init,
                  index_t ld, bool caller_workspace = false) {
  const index_t n = x.rows(), d = x.cols(), k = params.clusters;
  moecomp::device_buffer<T> dx(ctx, n * ld), dc(ctx, k * d), dw(ctx, weights.empty() ? 0 : n);
  moecomp::device_buffer<std::int64_t> dl(ctx, n);
  moecomp::device_buffer<index_t> ds(ctx, k);
  moecomp::copy_to_device(ctx, x.const_view(), dx.view(n, d, ld));
  moecomp::copy_to_device(ctx, init.const_view(), dc.view(k, d));
  auto w = moecomp::vector_view<const T, moecomp::device_memory>();
  if (!weights.empty()) {
    moecomp::copy_to_device(ctx, moecomp::make_vector_view(weights.data(), n), dw.view());
    w = dw.view().as_const();
  }
  fit<T> out;
  if (caller_workspace) {
    moecomp::device_buffer<std::byte> ws(ctx, static_cast<index_t>(cluster::kmeans_workspace_size<T>(params, n, d)));
    out.result = cluster::kmeans(ctx, params, dx.view(n, d, ld).as_const(), w, dc.view(k, d), dl.view(), ds.view(),
                                 ws.view());
  } else {
    out.result = cluster::kmeans(ctx, params, dx.view(n, d, ld).as_const(), w, dc.view(k, d), dl.view(), ds.view());
  }
  out.centers.resize(static_cast<std::size_t>(k * d));
  out.labels.resize(static_cast<std::size_t>(n));
  out.sizes.resize(static_cast<std::size_t>(k));
  moecomp::copy_to_host(ctx, dc.view().as_const(), moecomp::make_vector_view(out.centers.data(), k * d));
  moecomp::copy_to_host(ctx, dl.view().as_const(), moecomp::make_vector_view(out.labels.data(), n));
  moecomp::copy_to_host(ctx, ds.view().as_const(), moecomp::make_vector_view(out.sizes.data(), k));
  REQUIRE(cudaStreamSynchronize(ctx.stream) == cudaSuccess);
  return out;
}

template <class T>
void require_same_fit(const fit<T>& host, const fit<T>& device) {
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  CHECK(device.result.status == host.result.status);
  CHECK(device.result.iterations == host.result.iterations);
  CHECK(device.result.reseeded == host.result.reseeded);
  CHECK(device.labels == host.labels);
  CHECK(device.sizes == host.sizes);
  CHECK(std::abs(device.result.inertia - host.result.inertia) <= tol * std::max(1.0, host.result.inertia));
  double worst = 0;
  for (std::size_t e = 0; e < host.centers.size(); ++e)
    worst = std::max(worst, std::abs(static_cast<double>(device.centers[e]) - static_cast<double>(host.centers[e])) /
                                std::max(1.0, std::abs(static_cast<double>(host.centers[e]))));
  CHECK(worst <= tol);
}

/// k planted clusters of exactly n / k points (row i in cluster i % k), centres 20 apart, spread 1.
template <class T>
moecomp::host_matrix<T> equal_blobs(index_t n, index_t d, index_t k, std::uint64_t seed) {
  moecomp::random_generator rng(seed);
  moecomp::host_matrix<T> centres(k, d), x(n, d);
  for (index_t j = 0; j < k; ++j)
    for (index_t c = 0; c < d; ++c) centres(j, c) = static_cast<T>(20.0 * rng.normal<double>());
  for (index_t i = 0; i < n; ++i)
    for (index_t c = 0; c < d; ++c)
      x(i, c) = static_cast<T>(static_cast<double>(centres(i % k, c)) + rng.normal<double>());
  return x;
}

/// The first k rows as centres.
template <class T>
moecomp::host_matrix<T> first_rows(const moecomp::host_matrix<T>& x, index_t k) {
  moecomp::host_matrix<T> c(k, x.cols());
  for (index_t j = 0; j < k; ++j)
    for (index_t col = 0; col < x.cols(); ++col) c(j, col) = x(j, col);
  return c;
}

}  // namespace

TEST_CASE("device kmeans: argument checks run before any device work") {
  cluster::kmeans_params params;
  params.clusters = 4;
  const moecomp::cuda_context ctx(nullptr);  // never used: the checks come first
  // Views over host storage posing as device memory: never dereferenced, the checks come first.
  float storage[16] = {0};
  std::int64_t label_storage[3] = {0};
  index_t size_storage[4] = {0};
  const auto x = moecomp::matrix_view<const float, moecomp::device_memory>(storage, 3, 2);
  const auto c = moecomp::matrix_view<float, moecomp::device_memory>(storage + 8, 4, 2);
  const auto l = moecomp::vector_view<std::int64_t, moecomp::device_memory>(label_storage, 3);
  const auto s = moecomp::vector_view<index_t, moecomp::device_memory>(size_storage, 4);
  CHECK_THROWS_WITH_AS(cluster::kmeans(ctx, params, x, c, l, s), doctest::Contains("at least params.clusters = 4 rows"),
                       moecomp::invalid_argument);
  params.clusters = 2;
  CHECK_THROWS_WITH_AS(cluster::kmeans(ctx, params, x, c, l, s), doctest::Contains("centers must be 2 x 2"),
                       moecomp::invalid_argument);
  params.max_iterations = 0;
  CHECK_THROWS_WITH_AS(cluster::kmeans_workspace_size<float>(params, 10, 2),
                       doctest::Contains("params.max_iterations must be >= 1"), moecomp::invalid_argument);
}

TEST_CASE_TEMPLATE("device kmeans equals the host from given centres, strided x, with and without weights", T, float,
                   double) {
  device_fixture fixture;
  const moecomp::cuda_context ctx(fixture.stream, fixture.handle);
  const index_t n = 1000, d = 24, k = 7;
  const auto x = blobs<T>(n, d, k, 11);
  cluster::kmeans_params params;
  params.clusters = k;
  params.init = cluster::kmeans_init::given;
  const auto init = first_rows(x, k);
  for (const bool weighted : {false, true}) {
    std::vector<T> w;
    if (weighted) {
      moecomp::random_generator rng(5);
      for (index_t i = 0; i < n; ++i) w.push_back(static_cast<T>(0.5 + rng.uniform<double>()));
    }
    const auto host = host_fit(params, x, w, init);
    require_same_fit(host, device_fit(ctx, params, x, w, init, d));
    require_same_fit(host, device_fit(ctx, params, x, w, init, d + 5, true));
  }
}

TEST_CASE_TEMPLATE("device kmeans: random-rows and k-means++ starts, restarts, balanced sizes", T, float, double) {
  device_fixture fixture;
  const moecomp::cuda_context ctx(fixture.stream, fixture.handle);
  const index_t n = 840, d = 16, k = 6;
  const auto x = blobs<T>(n, d, k, 23);
  moecomp::host_matrix<T> init(k, d);
  cluster::kmeans_params params;
  params.clusters = k;
  params.seed = 9;
  params.restarts = 3;
  params.init = cluster::kmeans_init::random_rows;
  require_same_fit(host_fit(params, x, {}, init), device_fit(ctx, params, x, {}, init, d));
  params.init = cluster::kmeans_init::kmeans_plus_plus;
  const auto host = host_fit(params, x, {}, init);
  const auto device = device_fit(ctx, params, x, {}, init, d);
  // k-means++ draws can differ where the running sums round differently; on separated blobs both find the
  // planted clusters, so the inertia agrees.
  CHECK(std::abs(device.result.inertia - host.result.inertia) <= 1e-5 * host.result.inertia);
  params.init = cluster::kmeans_init::given;
  params.restarts = 1;
  params.size_min = params.size_max = n / k;
  const auto balanced_host = host_fit(params, x, {}, first_rows(x, k));
  const auto balanced = device_fit(ctx, params, x, {}, first_rows(x, k), d);
  require_same_fit(balanced_host, balanced);
  for (index_t s : balanced.sizes) CHECK(s == n / k);
  CHECK(balanced.result.assignment_gap <= 1e-9);
}

TEST_CASE("device kmeans re-seeds an emptied cluster as the host does, and repeats bit for bit") {
  device_fixture fixture;
  const moecomp::cuda_context ctx(fixture.stream, fixture.handle);
  const index_t n = 600, d = 8, k = 5;
  const auto x = blobs<double>(n, d, k, 31);
  auto init = first_rows(x, k);
  // A centre far from every blob: cluster 4 gets no row in the first assignment. (A duplicate of centre 3
  // would not do: the GEMM form may round the two columns differently, and with FMA contraction
  // (x86-64-v3 and up) it does here, so the duplicate keeps some rows.)
  for (index_t c = 0; c < d; ++c) init(4, c) = 1000.0;
  cluster::kmeans_params params;
  params.clusters = k;
  params.init = cluster::kmeans_init::given;
  const auto host = host_fit(params, x, {}, init);
  REQUIRE(host.result.reseeded >= 1);
  const auto first = device_fit(ctx, params, x, {}, init, d);
  require_same_fit(host, first);
  const auto second = device_fit(ctx, params, x, {}, init, d);
  CHECK(second.labels == first.labels);
  CHECK(second.centers == first.centers);
  CHECK(second.result.inertia == first.result.inertia);
}

TEST_CASE_TEMPLATE("device kmeans: the equal-size step by the device auction", T, float, double) {
  device_fixture fixture;
  const moecomp::cuda_context ctx(fixture.stream, fixture.handle);
  const index_t n = 600, d = 12, k = 6, c = n / k;
  cluster::kmeans_params params;
  params.clusters = k;
  params.init = cluster::kmeans_init::given;
  params.size_min = params.size_max = c;
  cluster::kmeans_params auction = params;
  auction.balanced_solver = cluster::kmeans_balanced_solver::device_auction;
  // The workspace holds the replicated n x n cost (doubles) and the auction's own.
  CHECK(cluster::kmeans_workspace_size<T>(auction, n, d) >=
        cluster::kmeans_workspace_size<T>(params, n, d) + sizeof(double) * static_cast<std::size_t>(n * n));
  // Unequal bounds keep the network simplex: the same workspace as without the choice.
  cluster::kmeans_params unequal = auction;
  unequal.size_min = c - 10;
  cluster::kmeans_params unequal_simplex = params;
  unequal_simplex.size_min = c - 10;
  CHECK(cluster::kmeans_workspace_size<T>(unequal, n, d) == cluster::kmeans_workspace_size<T>(unequal_simplex, n, d));

  // Planted equal clusters: every step's optimum is unique by a wide margin, so the auction (within its
  // bound) finds the network simplex's labels, and the fit is the host's.
  const auto x = equal_blobs<T>(n, d, k, 41);
  const auto host = host_fit(params, x, {}, first_rows(x, k));
  const auto device = device_fit(ctx, auction, x, {}, first_rows(x, k), d);
  require_same_fit(host, device);
  for (index_t s : device.sizes) CHECK(s == c);
  CHECK(device.result.assignment_bound > 0);
  CHECK(device.result.assignment_bound <= 1e-4);  // range / 1e6 against a cost of about n d
  CHECK(device.result.assignment_gap <= device.result.assignment_bound + 1e-12);
  const auto with_workspace = device_fit(ctx, auction, x, {}, first_rows(x, k), d + 3, true);
  CHECK(with_workspace.labels == device.labels);
  CHECK(with_workspace.centers == device.centers);  // strided x, caller's workspace: the same arithmetic
  CHECK(with_workspace.result.inertia == device.result.inertia);

  // Unstructured data, one iteration (tolerance 0): the returned labels are the last step's, against the
  // returned centres. Exact sizes, the certificate within the bound, no swap of two rows' centres lowers
  // the cost by more than the bound (2-opt, a necessary condition of optimality), bit-identical reruns.
  moecomp::host_matrix<T> u(240, 4);
  moecomp::random_generator rng(43);
  for (index_t i = 0; i < u.rows(); ++i)
    for (index_t col = 0; col < u.cols(); ++col) u(i, col) = static_cast<T>(rng.uniform<double>());
  cluster::kmeans_params one = auction;
  one.clusters = 4;
  one.size_min = one.size_max = 60;
  one.max_iterations = 1;
  one.tolerance = 0;
  const auto first = device_fit(ctx, one, u, {}, first_rows(u, 4), 4);
  const auto again = device_fit(ctx, one, u, {}, first_rows(u, 4), 4);
  CHECK(again.labels == first.labels);
  CHECK(again.centers == first.centers);
  CHECK(again.result.assignment_gap == first.result.assignment_gap);
  for (index_t s : first.sizes) CHECK(s == 60);
  CHECK(first.result.assignment_gap <= first.result.assignment_bound + 1e-12);
  std::vector<double> cost(static_cast<std::size_t>(240 * 4));
  double total = 0;
  for (index_t i = 0; i < 240; ++i) {
    for (index_t j = 0; j < 4; ++j) {
      double s = 0;
      for (index_t col = 0; col < 4; ++col) {
        const double t = static_cast<double>(u(i, col)) -
                         static_cast<double>(first.centers[static_cast<std::size_t>(j * 4 + col)]);
        s += t * t;
      }
      cost[static_cast<std::size_t>(i * 4 + j)] = s;
    }
    total += cost[static_cast<std::size_t>(i * 4 + first.labels[static_cast<std::size_t>(i)])];
  }
  // The device compares GEMM-form costs in T: allow their rounding on top of the auction's bound.
  const double slack = first.result.assignment_bound * std::max(1.0, total) + (std::is_same_v<T, float> ? 1e-4 : 1e-10);
  double worst = 0;
  for (index_t i = 0; i < 240; ++i)
    for (index_t h = i + 1; h < 240; ++h) {
      const auto a = static_cast<std::size_t>(first.labels[static_cast<std::size_t>(i)]);
      const auto b = static_cast<std::size_t>(first.labels[static_cast<std::size_t>(h)]);
      if (a == b) continue;
      const double gain = cost[static_cast<std::size_t>(i) * 4 + a] + cost[static_cast<std::size_t>(h) * 4 + b] -
                          cost[static_cast<std::size_t>(i) * 4 + b] - cost[static_cast<std::size_t>(h) * 4 + a];
      worst = std::max(worst, gain);
    }
  CHECK(worst <= slack);
}
