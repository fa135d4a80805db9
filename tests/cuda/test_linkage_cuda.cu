// Device linkage: distances on the GPU, merge loop on the host. Compared with the host linkage of the same
// points: identical merges (ids, sizes, order) and heights to rounding, all seven methods.
#include <doctest/doctest.h>
#include <moecomp/cuda/moecomp.cuh>

#include "device_test_support.cuh"
#include "host_reference.hpp"

#include <cuda_runtime_api.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

using moecomp::index_t;
namespace cluster = moecomp::cluster;

using moecomp_test::require_device;

template <class T>
std::vector<T> random_points(index_t n, index_t d, std::uint64_t seed) {
  std::vector<T> x(static_cast<std::size_t>(n * d));
  moecomp::random_generator rng(seed);
  for (auto& v : x) v = rng.normal<T>();
  return x;
}

}  // namespace

TEST_CASE_TEMPLATE("device linkage equals the host linkage for all seven methods", T, float, double) {
  require_device();
  cudaStream_t stream;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  const moecomp::cuda_context ctx(stream);
  for (index_t n : {2, 3, 60, 300}) {
    const index_t d = 24;
    const auto host_points = random_points<T>(n, d, 100 + static_cast<std::uint64_t>(n));
    moecomp::device_buffer<T> device_points(ctx, n * d);
    moecomp::copy_to_device(ctx, moecomp::make_vector_view(host_points.data(), n * d), device_points.view());
    for (const char* name : {"single", "complete", "average", "weighted", "ward", "centroid", "median"}) {
      CAPTURE(n);
      CAPTURE(std::string(name));
      cluster::linkage_params params;
      params.method = cluster::parse_linkage_method(name);
      moecomp::host_matrix<double> z_device(n - 1, 4), z_host(n - 1, 4);
      cluster::linkage(ctx, params, device_points.view(n, d).as_const(), z_device.view());
      moecomp_test::host_linkage<T>(params, moecomp::make_matrix_view(host_points.data(), n, d), z_host.view());
      index_t different = 0;
      for (index_t i = 0; i < n - 1; ++i) {
        if (z_device(i, 0) != z_host(i, 0) || z_device(i, 1) != z_host(i, 1) || z_device(i, 3) != z_host(i, 3))
          ++different;
        const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
        if (!(std::fabs(z_device(i, 2) - z_host(i, 2)) <= tol * std::max(1.0, std::fabs(z_host(i, 2))))) ++different;
      }
      CHECK(different == 0);
    }
  }
  REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
}

TEST_CASE("device linkage rejects a bad Z shape and a non-Euclidean ward before touching the device") {
  cudaStream_t stream = nullptr;  // never used: the checks come first
  const moecomp::cuda_context ctx(stream);
  float* fake = reinterpret_cast<float*>(256);  // a device address that is never dereferenced
  const auto points = moecomp::make_device_matrix_view<const float>(fake, 5, 3);
  moecomp::host_matrix<double> wrong(3, 4);
  CHECK_THROWS_AS(cluster::linkage(ctx, cluster::linkage_params{}, points, wrong.view()), moecomp::invalid_argument);
  moecomp::host_matrix<double> z(4, 4);
  cluster::linkage_params ward;
  ward.method = cluster::linkage_method::ward;
  ward.metric = moecomp::distance::metric::cosine;
  CHECK_THROWS_AS(cluster::linkage(ctx, ward, points, z.view()), moecomp::invalid_argument);
}
