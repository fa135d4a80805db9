// A program written the way a user of the installed package writes one: only <moecomp/moecomp.hpp> and
// the moecomp::moecomp target. It computes the pairwise distances of a 3-4-5 right triangle and fails
// (non-zero exit) unless they are exactly the known answer.
#include <moecomp/moecomp.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>

int main() {
  // Rows (0, 0), (3, 0), (0, 4): pairwise euclidean distances 3, 4 and 5.
  const double points[3 * 2] = {0.0, 0.0, 3.0, 0.0, 0.0, 4.0};
  const double expected_condensed[3] = {3.0, 4.0, 5.0};
  const double expected_square[3 * 3] = {0.0, 3.0, 4.0, 3.0, 0.0, 5.0, 4.0, 5.0, 0.0};

  const moecomp::host_context ctx;
  const moecomp::distance::pairwise_distance_params params{};  // euclidean
  const auto x = moecomp::make_matrix_view(points, 3, 2);

  double condensed[3] = {-1.0, -1.0, -1.0};
  moecomp::distance::pairwise_distances_condensed(ctx, params, x, moecomp::make_vector_view(condensed, 3));
  double square[3 * 3];
  for (double& value : square) value = -1.0;
  moecomp::distance::pairwise_distances(ctx, params, x, moecomp::make_matrix_view(square, 3, 3));

  int failures = 0;
  for (int k = 0; k < 3; ++k) {
    if (std::fabs(condensed[k] - expected_condensed[k]) > 1e-12) {
      std::fprintf(stderr, "condensed[%d] = %.17g, expected %.17g\n", k, condensed[k], expected_condensed[k]);
      ++failures;
    }
  }
  for (int k = 0; k < 9; ++k) {
    if (std::fabs(square[k] - expected_square[k]) > 1e-12) {
      std::fprintf(stderr, "square[%d][%d] = %.17g, expected %.17g\n", k / 3, k % 3, square[k], expected_square[k]);
      ++failures;
    }
  }
#if defined(MOECOMP_EXPECTED_VERSION)
  // The package version CMake found must be the version the headers declare.
  if (std::strcmp(MOECOMP_VERSION_STRING, MOECOMP_EXPECTED_VERSION) != 0) {
    std::fprintf(stderr, "headers say version %s, the CMake package says %s\n", MOECOMP_VERSION_STRING,
                 MOECOMP_EXPECTED_VERSION);
    ++failures;
  }
#endif
  if (failures != 0) return 1;
  std::printf("moecomp %s: pairwise distances of the 3-4-5 triangle are correct\n", MOECOMP_VERSION_STRING);
  return 0;
}
