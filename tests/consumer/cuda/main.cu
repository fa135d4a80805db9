// Consumer of an installed moecomp with the cuda component: a .cu file that includes only the device
// umbrella header, compiled by the consumer's nvcc and linked with moecomp::cuda (cudart, cuBLAS). It
// computes the pairwise distances of the 3-4-5 triangle on the GPU. The packaging test always compiles and
// links it; where a GPU is present it also checks the answer (exit 0), and without one it exits 77.
#include <moecomp/cuda/moecomp.cuh>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <exception>

namespace {

// Returns the number of wrong distances. The buffers are freed (stream-ordered) before the caller
// destroys the stream.
int compute_and_check(cudaStream_t stream) {
  // Rows (0, 0), (3, 0), (0, 4): pairwise euclidean distances 3, 4 and 5.
  const float points[3 * 2] = {0.0f, 0.0f, 3.0f, 0.0f, 0.0f, 4.0f};
  const float expected[3] = {3.0f, 4.0f, 5.0f};

  const moecomp::cuda_context ctx(stream);
  moecomp::device_buffer<float> device_points(ctx, 3 * 2);
  moecomp::device_buffer<float> device_distances(ctx, 3);
  const auto x = moecomp::make_device_matrix_view(device_points.data(), 3, 2);
  moecomp::copy_to_device(ctx, moecomp::make_matrix_view(points, 3, 2), x);
  moecomp::distance::pairwise_distances_condensed(ctx, moecomp::distance::pairwise_distance_params{}, x.as_const(),
                                                  device_distances.view());
  float distances[3] = {-1.0f, -1.0f, -1.0f};
  moecomp::copy_to_host(ctx, device_distances.view().as_const(), moecomp::make_vector_view(distances, 3));
  MOECOMP_CUDA_TRY(cudaStreamSynchronize(stream));

  int wrong = 0;
  for (int k = 0; k < 3; ++k) {
    if (std::fabs(distances[k] - expected[k]) > 1e-5f) {
      std::fprintf(stderr, "distance %d = %g, expected %g\n", k, distances[k], expected[k]);
      ++wrong;
    }
  }
  return wrong;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: built and linked only\n");
    return 77;
  }
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) {
    std::fprintf(stderr, "cudaStreamCreate failed\n");
    return 1;
  }
  int wrong = 0;
  try {
    wrong = compute_and_check(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    wrong = 1;
  }
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  if (wrong != 0) return 1;
  std::printf("moecomp %s on the GPU: pairwise distances of the 3-4-5 triangle are correct\n", MOECOMP_VERSION_STRING);
  return 0;
}
