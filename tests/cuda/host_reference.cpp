#include "host_reference.hpp"

#include <moecomp/align/align.hpp>
#include <moecomp/cluster/kmeans.hpp>
#include <moecomp/cluster/linkage.hpp>
#include <moecomp/distance/pairwise_distance.hpp>
#include <moecomp/ot/free_support_barycenter.hpp>
#include <moecomp/ot/linear_assignment.hpp>
#include <moecomp/ot/sinkhorn.hpp>
#include <moecomp/similarity/cka.hpp>

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

template <class T>
void host_sinkhorn_batched(const moecomp::ot::sinkhorn_params& params, moecomp::matrix_view<const T> a,
                           moecomp::matrix_view<const T> b, moecomp::matrix_view<const T> costs,
                           moecomp::matrix_view<T> plans, moecomp::vector_view<moecomp::ot::sinkhorn_result> results) {
  moecomp::ot::sinkhorn_batched(moecomp::host_context(1), params, a, b, moecomp::split_rows(costs, a.rows()),
                                moecomp::split_rows(plans, a.rows()), results);
}

template <class T>
moecomp::ot::linear_assignment_result host_linear_assignment(bool maximize, moecomp::matrix_view<const T> cost,
                                                             moecomp::vector_view<moecomp::index_t> row_to_column) {
  moecomp::ot::linear_assignment_params params;
  params.maximize = maximize;
  return moecomp::ot::linear_assignment(moecomp::host_context(1), params, cost, row_to_column);
}

template <class T>
moecomp::ot::free_support_barycenter_result host_free_support_barycenter(
    const moecomp::ot::free_support_barycenter_params& params, moecomp::matrix_view<const T> measures,
    moecomp::index_t k, moecomp::vector_view<const double> weights, moecomp::matrix_view<const T> init,
    moecomp::matrix_view<T> barycenter, moecomp::matrix_view<moecomp::index_t> permutations) {
  return moecomp::ot::free_support_barycenter<T>(moecomp::host_context(1), params, moecomp::split_rows(measures, k), weights, init,
                                                 barycenter, permutations);
}

#define MOECOMP_TEST_INSTANTIATE_SINKHORN(T)                                                                  \
  template void host_sinkhorn_batched<T>(const moecomp::ot::sinkhorn_params&, moecomp::matrix_view<const T>, \
                                         moecomp::matrix_view<const T>, moecomp::matrix_view<const T>,       \
                                         moecomp::matrix_view<T>, moecomp::vector_view<moecomp::ot::sinkhorn_result>);

#define MOECOMP_TEST_INSTANTIATE_OT(T)                                                                           \
  MOECOMP_TEST_INSTANTIATE_SINKHORN(T)                                                                           \
  template moecomp::ot::linear_assignment_result host_linear_assignment<T>(bool, moecomp::matrix_view<const T>,  \
                                                                          moecomp::vector_view<moecomp::index_t>); \
  template moecomp::ot::free_support_barycenter_result host_free_support_barycenter<T>(                          \
      const moecomp::ot::free_support_barycenter_params&, moecomp::matrix_view<const T>, moecomp::index_t,       \
      moecomp::vector_view<const double>, moecomp::matrix_view<const T>, moecomp::matrix_view<T>,               \
      moecomp::matrix_view<moecomp::index_t>);

MOECOMP_TEST_INSTANTIATE_OT(float)
MOECOMP_TEST_INSTANTIATE_OT(double)

template <class T>
moecomp::cluster::kmeans_result host_kmeans(const moecomp::cluster::kmeans_params& params,
                                            moecomp::matrix_view<const T> x, moecomp::vector_view<const T> weights,
                                            moecomp::matrix_view<T> centers,
                                            moecomp::vector_view<std::int64_t> labels,
                                            moecomp::vector_view<moecomp::index_t> sizes) {
  return moecomp::cluster::kmeans<T>(moecomp::host_context(1), params, x, weights, centers, labels, sizes);
}
template moecomp::cluster::kmeans_result host_kmeans<float>(const moecomp::cluster::kmeans_params&,
                                                            moecomp::matrix_view<const float>,
                                                            moecomp::vector_view<const float>, moecomp::matrix_view<float>,
                                                            moecomp::vector_view<std::int64_t>,
                                                            moecomp::vector_view<moecomp::index_t>);
template moecomp::cluster::kmeans_result host_kmeans<double>(const moecomp::cluster::kmeans_params&,
                                                             moecomp::matrix_view<const double>,
                                                             moecomp::vector_view<const double>,
                                                             moecomp::matrix_view<double>,
                                                             moecomp::vector_view<std::int64_t>,
                                                             moecomp::vector_view<moecomp::index_t>);

template <class T>
moecomp::similarity::cka_result host_cka(const moecomp::similarity::cka_params& params,
                                         moecomp::matrix_view<const T> x, moecomp::matrix_view<const T> y) {
  return moecomp::similarity::cka<T>(moecomp::host_context(1), params, x, y);
}
template <class T>
moecomp::similarity::cka_matrix_result host_cka_matrix(const moecomp::similarity::cka_params& params,
                                                       moecomp::matrix_stack_view<const T> features,
                                                       moecomp::matrix_view<double> out) {
  return moecomp::similarity::cka_matrix<T>(moecomp::host_context(1), params, features, out);
}
#define MOECOMP_TEST_INSTANTIATE_CKA(T)                                                                          \
  template moecomp::similarity::cka_result host_cka<T>(const moecomp::similarity::cka_params&,                 \
                                                       moecomp::matrix_view<const T>, moecomp::matrix_view<const T>); \
  template moecomp::similarity::cka_matrix_result host_cka_matrix<T>(                                          \
      const moecomp::similarity::cka_params&, moecomp::matrix_stack_view<const T>, moecomp::matrix_view<double>);
MOECOMP_TEST_INSTANTIATE_CKA(float)
MOECOMP_TEST_INSTANTIATE_CKA(double)

template <class T>
moecomp::align::align_result host_align_rows(const moecomp::align::align_params& params, moecomp::matrix_view<const T> a,
                                             moecomp::matrix_view<const T> b, moecomp::vector_view<moecomp::index_t> p) {
  return moecomp::align::align_rows<T>(moecomp::host_context(1), params, a, b, p);
}
template <class T>
moecomp::align::align_result host_align_activations(moecomp::matrix_view<const T> a, moecomp::matrix_view<const T> b,
                                                    moecomp::vector_view<moecomp::index_t> p) {
  return moecomp::align::align_activations<T>(moecomp::host_context(1), a, b, p);
}
template <class T>
void host_pearson_correlation(moecomp::matrix_view<const T> a, moecomp::matrix_view<const T> b,
                              moecomp::matrix_view<T> out) {
  moecomp::align::pearson_correlation<T>(moecomp::host_context(1), a, b, out);
}
#define MOECOMP_TEST_INSTANTIATE_ALIGN(T)                                                                        \
  template moecomp::align::align_result host_align_rows<T>(const moecomp::align::align_params&,                 \
                                                           moecomp::matrix_view<const T>, moecomp::matrix_view<const T>, \
                                                           moecomp::vector_view<moecomp::index_t>);            \
  template moecomp::align::align_result host_align_activations<T>(                                              \
      moecomp::matrix_view<const T>, moecomp::matrix_view<const T>, moecomp::vector_view<moecomp::index_t>);    \
  template void host_pearson_correlation<T>(moecomp::matrix_view<const T>, moecomp::matrix_view<const T>,       \
                                            moecomp::matrix_view<T>);
MOECOMP_TEST_INSTANTIATE_ALIGN(float)
MOECOMP_TEST_INSTANTIATE_ALIGN(double)

}  // namespace moecomp_test
