// Device free-support barycenter (uniform path) against the host's (host_reference.cpp): on planted clouds
// (noisy permutations of one base cloud, so the optimal permutations are unique and clear) the same
// permutations, iterations and status, and the barycenter and objective to rounding; on random clouds the
// returned permutations are within the reported gap bound of optimal for the returned barycenter (checked
// with the host's exact assignment) and the objective matches its definition. Argument checks run before
// any device work (those pass without a GPU). They run under `ctest -L cuda`.
#include <doctest/doctest.h>
#include <moecomp/cuda/moecomp.cuh>

#include "device_test_support.cuh"
#include "host_reference.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using moecomp::index_t;
namespace ot = moecomp::ot;

using moecomp_test::require_device;
using moecomp_test::device_fixture;

/// k clouds of n points: planted = each a shuffled copy of one base cloud plus noise of size `noise`;
/// otherwise independent normal points.
template <class T>
moecomp::host_matrix<T> clouds(index_t k, index_t n, index_t d, bool planted, double noise, std::uint64_t seed) {
  moecomp::random_generator rng(seed);
  moecomp::host_matrix<T> base(n, d), x(k * n, d);
  for (index_t i = 0; i < n; ++i)
    for (index_t c = 0; c < d; ++c) base(i, c) = static_cast<T>(rng.normal<double>());
  for (index_t j = 0; j < k; ++j) {
    std::vector<index_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), index_t(0));
    rng.shuffle(order.begin(), order.end());
    for (index_t i = 0; i < n; ++i)
      for (index_t c = 0; c < d; ++c)
        x(j * n + i, c) = planted ? static_cast<T>(static_cast<double>(base(order[static_cast<std::size_t>(i)], c)) +
                                                   noise * rng.normal<double>())
                                  : static_cast<T>(rng.normal<double>());
  }
  return x;
}

struct device_answer {
  ot::free_support_barycenter_device_result result;
  std::vector<double> barycenter;
  std::vector<index_t> permutations;
};

template <class T>
device_answer run_device(const moecomp::cuda_context& ctx, const ot::free_support_barycenter_params& params,
                         const moecomp::host_matrix<T>& measures, index_t k, const std::vector<double>& weights) {
  const index_t n = measures.rows() / k, d = measures.cols();
  moecomp::device_buffer<T> x(ctx, k * n * d), b(ctx, n * d);
  moecomp::device_buffer<index_t> p(ctx, k * n);
  moecomp::copy_to_device(ctx, measures.const_view(), x.view(k * n, d));
  device_answer out;
  // init = cloud 0 (ResMoE), as a view into the measures
  out.result = ot::free_support_barycenter(ctx, params, moecomp::split_rows(x.view(k * n, d).as_const(), k),
                                           moecomp::make_vector_view(weights.data(), k), x.view(n, d).as_const(),
                                           b.view(n, d), p.view(k, n));
  moecomp::host_matrix<T> host_b(n, d);
  out.permutations.resize(static_cast<std::size_t>(k * n));
  moecomp::copy_to_host(ctx, b.view(n, d).as_const(), host_b.view());
  moecomp::copy_to_host(ctx, p.view().as_const(), moecomp::make_vector_view(out.permutations.data(), k * n));
  REQUIRE(cudaStreamSynchronize(ctx.stream) == cudaSuccess);
  out.barycenter.assign(host_b.data(), host_b.data() + n * d);
  return out;
}

}  // namespace

TEST_CASE_TEMPLATE("device barycenter equals the host's on planted clouds", T, float, double) {
  device_fixture f;
  const auto ctx = f.context();
  const index_t k = 4, n = 60, d = 9;
  const auto measures = clouds<T>(k, n, d, true, 0.01, 42);
  const std::vector<double> weights{0.1, 0.2, 0.3, 0.4};
  const ot::free_support_barycenter_params params;
  const device_answer got = run_device(ctx, params, measures, k, weights);

  moecomp::host_matrix<T> host_b(n, d);
  moecomp::host_matrix<index_t> host_p(k, n);
  const auto host = moecomp_test::host_free_support_barycenter<T>(
      params, measures.const_view(), k, moecomp::make_vector_view(weights.data(), k),
      moecomp::matrix_view<const T>(measures.data(), n, d, d), host_b.view(), host_p.view());
  REQUIRE(host.status == moecomp::status::ok);
  CHECK(got.result.status == host.status);
  CHECK(got.result.iterations == host.iterations);
  bool same_permutations = true;
  for (index_t j = 0; j < k; ++j)
    for (index_t i = 0; i < n; ++i)
      same_permutations = same_permutations && got.permutations[static_cast<std::size_t>(j * n + i)] == host_p(j, i);
  CHECK(same_permutations);
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  double worst = 0;
  for (index_t i = 0; i < n; ++i)
    for (index_t c = 0; c < d; ++c)
      worst = std::max(worst, std::fabs(got.barycenter[static_cast<std::size_t>(i * d + c)] -
                                        static_cast<double>(host_b(i, c))));
  CHECK(worst <= tol * 10);
  CHECK(std::fabs(got.result.objective - host.objective) <= got.result.gap_bound + tol * host.objective);
  CHECK(got.result.gap_bound > 0.0);
}

TEST_CASE_TEMPLATE("device barycenter permutations are within the gap bound on random clouds", T, float, double) {
  device_fixture f;
  const auto ctx = f.context();
  const index_t k = 3, n = 50, d = 6;
  const auto measures = clouds<T>(k, n, d, false, 0.0, 7);
  const std::vector<double> weights(3, 1.0 / 3.0);
  ot::free_support_barycenter_params params;
  params.max_iterations = 20;
  const device_answer got = run_device(ctx, params, measures, k, weights);
  REQUIRE(got.result.status != moecomp::status::numerical_error);
  CHECK(got.result.iterations >= 1);
  // the objective by its definition, and the optimum for the returned barycenter by exact assignments
  double objective = 0, optimum = 0;
  for (index_t j = 0; j < k; ++j) {
    moecomp::host_matrix<T> cost(n, n);
    std::vector<char> used(static_cast<std::size_t>(n), 0);
    double cloud = 0;
    for (index_t i = 0; i < n; ++i) {
      const index_t l = got.permutations[static_cast<std::size_t>(j * n + i)];
      REQUIRE(l >= 0);
      REQUIRE(l < n);
      REQUIRE(used[static_cast<std::size_t>(l)] == 0);
      used[static_cast<std::size_t>(l)] = 1;
      for (index_t r = 0; r < n; ++r) {
        double s = 0;
        for (index_t c = 0; c < d; ++c) {
          const double delta = static_cast<double>(measures(j * n + i, c)) - got.barycenter[static_cast<std::size_t>(r * d + c)];
          s += delta * delta;
        }
        cost(i, r) = static_cast<T>(s);
        if (r == l) cloud += s;
      }
    }
    objective += weights[static_cast<std::size_t>(j)] * cloud / static_cast<double>(n);
    std::vector<index_t> exact(static_cast<std::size_t>(n));
    const auto best =
        moecomp_test::host_linear_assignment<T>(false, cost.const_view(), moecomp::make_vector_view(exact.data(), n));
    optimum += weights[static_cast<std::size_t>(j)] * best.cost / static_cast<double>(n);
  }
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  CHECK(std::fabs(got.result.objective - objective) <= tol * objective);
  CHECK(got.result.objective - optimum <= got.result.gap_bound + tol * 10 * optimum);
}

TEST_CASE("device barycenter rejects bad arguments before touching the device") {
  const moecomp::cuda_context ctx(nullptr);  // never used: the checks come first
  double* fake = reinterpret_cast<double*>(256);
  double* other = reinterpret_cast<double*>(1 << 20);
  index_t* fake_index = reinterpret_cast<index_t*>(1 << 24);
  const auto measures = moecomp::make_device_matrix_stack_view<const double>(fake, 2, 3, 2);  // k = 2, n = 3
  const auto init = moecomp::make_device_matrix_view<const double>(fake, 3, 2);
  const auto barycenter = moecomp::make_device_matrix_view<double>(other, 3, 2);
  const auto permutations = moecomp::make_device_matrix_view<index_t>(fake_index, 2, 3);
  const std::vector<double> w{0.5, 0.5}, bad_w{0.5, 0.6};
  const ot::free_support_barycenter_params params;
  const auto wv = moecomp::make_vector_view(w.data(), 2);
  CHECK_THROWS_AS(ot::free_support_barycenter(ctx, params, moecomp::make_device_matrix_stack_view<const double>(fake, 2, 5, 2),
                                              wv, init, barycenter, permutations),
                  moecomp::invalid_argument);
  CHECK_THROWS_AS(ot::free_support_barycenter(ctx, params, measures, wv, init, barycenter,
                                              moecomp::make_device_matrix_view<index_t>(fake_index, 3, 2)),
                  moecomp::invalid_argument);
  CHECK_THROWS_AS(ot::free_support_barycenter(ctx, params, measures, moecomp::make_vector_view(bad_w.data(), 2),
                                              init, barycenter, permutations),
                  moecomp::invalid_argument);
  CHECK_THROWS_AS(ot::free_support_barycenter(ctx, params, measures, wv, init,
                                              moecomp::make_device_matrix_view<double>(fake + 2, 3, 2), permutations),
                  moecomp::invalid_argument);  // overlaps measures
  ot::free_support_barycenter_params zero;
  zero.max_iterations = 0;
  CHECK_THROWS_AS(ot::free_support_barycenter(ctx, zero, measures, wv, init, barycenter, permutations),
                  moecomp::invalid_argument);
  CHECK_THROWS_AS(ot::free_support_barycenter(ctx, params, moecomp::make_device_matrix_stack_view<const double>(nullptr, 0, 3, 2),
                                              init, barycenter, permutations),
                  moecomp::invalid_argument);
}
