#pragma once
// The host library's algorithms (distances, linkage, optimal transport), compiled by the C++ compiler in host_reference.cpp, for the
// device tests to compare against. The .cu files never include the host algorithms (they pull in
// Eigen, which nvcc compiles only with warnings; see <moecomp/cuda/moecomp.cuh>).
#include <moecomp/core/views.hpp>

#include <cstdint>
#include <moecomp/align/align_types.hpp>
#include <moecomp/cluster/kmeans_types.hpp>
#include <moecomp/cluster/linkage_types.hpp>
#include <moecomp/distance/distance_types.hpp>
#include <moecomp/ot/free_support_barycenter_types.hpp>
#include <moecomp/ot/linear_assignment_types.hpp>
#include <moecomp/ot/sinkhorn_types.hpp>
#include <moecomp/similarity/cka_types.hpp>

namespace moecomp_test {

template <class T>
void host_pairwise_distances(const moecomp::distance::pairwise_distance_params& params,
                             moecomp::matrix_view<const T> x, moecomp::matrix_view<const T> y,
                             moecomp::matrix_view<T> out);
template <class T>
void host_pairwise_distances(const moecomp::distance::pairwise_distance_params& params,
                             moecomp::matrix_view<const T> x, moecomp::matrix_view<T> out);
template <class T>
void host_pairwise_distances_condensed(const moecomp::distance::pairwise_distance_params& params,
                                       moecomp::matrix_view<const T> x, moecomp::vector_view<T> out);

/// The host linkage of the points (distances computed on the host).
template <class T>
void host_linkage(const moecomp::cluster::linkage_params& params, moecomp::matrix_view<const T> points,
                  moecomp::matrix_view<double> z);

/// The host's batched Sinkhorn (one thread).
template <class T>
void host_sinkhorn_batched(const moecomp::ot::sinkhorn_params& params, moecomp::matrix_view<const T> a,
                           moecomp::matrix_view<const T> b, moecomp::matrix_view<const T> costs,
                           moecomp::matrix_view<T> plans, moecomp::vector_view<moecomp::ot::sinkhorn_result> results);

/// The host's exact linear assignment (Jonker-Volgenant); returns its result.
template <class T>
moecomp::ot::linear_assignment_result host_linear_assignment(bool maximize, moecomp::matrix_view<const T> cost,
                                                             moecomp::vector_view<moecomp::index_t> row_to_column);

/// The host's uniform free-support barycenter (exact assignments).
template <class T>
moecomp::ot::free_support_barycenter_result host_free_support_barycenter(
    const moecomp::ot::free_support_barycenter_params& params, moecomp::matrix_view<const T> measures,
    moecomp::index_t k, moecomp::vector_view<const double> weights, moecomp::matrix_view<const T> init,
    moecomp::matrix_view<T> barycenter, moecomp::matrix_view<moecomp::index_t> permutations);

/// The host's k-means (one thread).
template <class T>
moecomp::cluster::kmeans_result host_kmeans(const moecomp::cluster::kmeans_params& params,
                                            moecomp::matrix_view<const T> x, moecomp::vector_view<const T> weights,
                                            moecomp::matrix_view<T> centers,
                                            moecomp::vector_view<std::int64_t> labels,
                                            moecomp::vector_view<moecomp::index_t> sizes);

/// The host's CKA of a pair and all-pairs matrix (one thread).
template <class T>
moecomp::similarity::cka_result host_cka(const moecomp::similarity::cka_params& params,
                                         moecomp::matrix_view<const T> x, moecomp::matrix_view<const T> y);
template <class T>
moecomp::similarity::cka_matrix_result host_cka_matrix(const moecomp::similarity::cka_params& params,
                                                       moecomp::matrix_stack_view<const T> features,
                                                       moecomp::matrix_view<double> out);

/// The host's neuron alignment (one thread): align_rows, align_activations and their correlation matrix.
template <class T>
moecomp::align::align_result host_align_rows(const moecomp::align::align_params& params, moecomp::matrix_view<const T> a,
                                             moecomp::matrix_view<const T> b, moecomp::vector_view<moecomp::index_t> p);
template <class T>
moecomp::align::align_result host_align_activations(moecomp::matrix_view<const T> a, moecomp::matrix_view<const T> b,
                                                    moecomp::vector_view<moecomp::index_t> p);
template <class T>
void host_pearson_correlation(moecomp::matrix_view<const T> a, moecomp::matrix_view<const T> b,
                              moecomp::matrix_view<T> out);

}  // namespace moecomp_test
