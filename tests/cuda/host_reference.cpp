#include "host_reference.hpp"

#include <moecomp/cluster/linkage.hpp>
#include <moecomp/distance/pairwise_distance.hpp>

namespace moecomp_test {

template <class T>
void host_pairwise_distances(const moecomp::distance::pairwise_distance_params& params,
                             moecomp::matrix_view<const T> x, moecomp::matrix_view<const T> y,
                             moecomp::matrix_view<T> out) {
  moecomp::distance::pairwise_distances(moecomp::host_context(1), params, x, y, out);
}
template <class T>
void host_pairwise_distances(const moecomp::distance::pairwise_distance_params& params,
                             moecomp::matrix_view<const T> x, moecomp::matrix_view<T> out) {
  moecomp::distance::pairwise_distances(moecomp::host_context(1), params, x, out);
}
template <class T>
void host_pairwise_distances_condensed(const moecomp::distance::pairwise_distance_params& params,
                                       moecomp::matrix_view<const T> x, moecomp::vector_view<T> out) {
  moecomp::distance::pairwise_distances_condensed(moecomp::host_context(1), params, x, out);
}
template <class T>
void host_linkage(const moecomp::cluster::linkage_params& params, moecomp::matrix_view<const T> points,
                  moecomp::matrix_view<double> z) {
  moecomp::cluster::linkage(moecomp::host_context(1), params, points, z);
}
template void host_linkage<float>(const moecomp::cluster::linkage_params&, moecomp::matrix_view<const float>,
                                  moecomp::matrix_view<double>);
template void host_linkage<double>(const moecomp::cluster::linkage_params&, moecomp::matrix_view<const double>,
                                   moecomp::matrix_view<double>);

#define MOECOMP_TEST_INSTANTIATE(T)                                                                            \
  template void host_pairwise_distances<T>(const moecomp::distance::pairwise_distance_params&,                \
                                           moecomp::matrix_view<const T>, moecomp::matrix_view<const T>,     \
                                           moecomp::matrix_view<T>);                                         \
  template void host_pairwise_distances<T>(const moecomp::distance::pairwise_distance_params&,                \
                                           moecomp::matrix_view<const T>, moecomp::matrix_view<T>);          \
  template void host_pairwise_distances_condensed<T>(const moecomp::distance::pairwise_distance_params&,      \
                                                     moecomp::matrix_view<const T>, moecomp::vector_view<T>);

MOECOMP_TEST_INSTANTIATE(float)
MOECOMP_TEST_INSTANTIATE(double)

}  // namespace moecomp_test
