#pragma once
// The host library's pairwise distances, compiled by the C++ compiler in host_reference.cpp, for the
// device tests to compare against. The .cu files never include the host algorithms (they pull in
// Eigen, which nvcc compiles only with warnings; see <moecomp/cuda/moecomp.cuh>).
#include <moecomp/core/views.hpp>
#include <moecomp/cluster/linkage_types.hpp>
#include <moecomp/distance/distance_types.hpp>

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

}  // namespace moecomp_test
