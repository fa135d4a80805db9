#pragma once
// The host's sparse module (pruning, encoding, restore), compiled by the C++ compiler in sparse_reference.cpp,
// for tests/cuda/test_sparse_cuda.cu to compare against: the device results must equal these bit for bit.
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/sparse/prune_types.hpp>
#include <moecomp/sparse/residual_types.hpp>

namespace moecomp_test {

template <class T>
moecomp::sparse::prune_result host_prune(const moecomp::sparse::prune_params& params, moecomp::matrix_view<const T> w,
                                         moecomp::matrix_view<T> out);
template <class T>
void host_encode(const moecomp::sparse::encode_params& params, moecomp::matrix_view<const T> r,
                 moecomp::sparse::sparse_matrix& out);
template <class Tb, class To>
void host_restore(moecomp::matrix_view<const Tb> base, const moecomp::sparse::sparse_matrix_view& r,
                  moecomp::matrix_view<To> out, moecomp::vector_view<const moecomp::index_t> permutation);
template <class T>
void host_decode(const moecomp::sparse::sparse_matrix_view& r, moecomp::matrix_view<T> out);

}  // namespace moecomp_test
