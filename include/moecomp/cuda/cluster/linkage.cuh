#pragma once
// Hierarchical clustering of points held in device memory: the same call as the host's
// moecomp::cluster::linkage (<moecomp/cluster/linkage.hpp>) with a cuda_context and a device view.
//
// What runs where: the condensed distances are computed on the GPU by the device pairwise distances
// (<moecomp/cuda/distance/pairwise_distance.cuh>, in T), copied to the host, and the merge loop runs on the
// host (linkage_condensed: O(n^2) sequential bookkeeping with data-dependent order, which a GPU does not
// speed up at the sizes MoE layers have). The call therefore SYNCHRONISES ctx.stream before it returns, and
// Z is a host view. Memory: n (n - 1) / 2 elements of T on the device (from ctx's allocator, released before
// returning) and on the host, plus the host linkage's working copy (docs/cluster.md).
#include <moecomp/cluster/linkage_from_distances.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/device_buffer.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/distance/pairwise_distance.cuh>
#include <moecomp/core/detail/traits.hpp>

#include <cuda_runtime_api.h>

#include <cmath>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace cluster {

/// Z ((n - 1) x 4, host) of the rows of `points` (n x d, device, float or double). `host` supplies the
/// threads and allocator of the host merge loop. Fails like the host linkage (shapes, metric, NaN
/// distances naming the pair of points); CUDA failures are cuda_error.
template <class U, std::enable_if_t<moecomp::detail::is_real_input_v<U>, int> = 0>
void linkage(const cuda_context& ctx, const linkage_params& params, matrix_view<U, device_memory> points,
             matrix_view<double> z, const host_context& host = host_context{}) {
  using T = std::remove_const_t<U>;
  const index_t n = points.rows();
  detail::check_points_input("linkage", n, points.cols(), params, z);
  if (n == 1) return;

  const index_t count = distance::condensed_size(n);
  // The O(n^2) host copy comes from the host context's allocator, like every host workspace.
  moecomp::detail::host_workspace<T> condensed_storage(host, static_cast<std::size_t>(count));
  const vector_view<T> condensed(condensed_storage.data(), count);
  {
    device_buffer<T> device_condensed(ctx, count);
    distance::pairwise_distance_params dp;
    dp.metric = params.metric;
    distance::pairwise_distances_condensed(ctx, dp, matrix_view<const T, device_memory>(points),
                                           device_condensed.view());
    copy_to_host(ctx, device_condensed.view().as_const(), condensed);
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
  }
  // Distances of finite points are never negative; NaN comes from NaN/inf points or undefined directions.
  for (index_t k = 0; k < count; ++k) {
    if (MOECOMP_UNLIKELY(std::isnan(condensed[k]))) {
      index_t i, j;
      detail::condensed_pair(n, k, i, j);
      MOECOMP_FAIL(error_kind::invalid_argument, "linkage: the ", distance::to_string(params.metric),
                   " distance between points ", i, " and ", j,
                   " is NaN (a NaN or infinite coordinate, or a row without a direction for cosine/correlation)");
    }
  }
  linkage_condensed(host, params, condensed.as_const(), z);
}

}  // namespace cluster
MOECOMP_NAMESPACE_END
