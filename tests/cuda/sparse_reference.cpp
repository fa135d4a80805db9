#include "sparse_reference.hpp"

#include <moecomp/sparse/prune.hpp>
#include <moecomp/sparse/residual.hpp>

namespace moecomp_test {

template <class T>
moecomp::sparse::prune_result host_prune(const moecomp::sparse::prune_params& params, moecomp::matrix_view<const T> w,
                                         moecomp::matrix_view<T> out) {
  return moecomp::sparse::prune_magnitude<T>(moecomp::host_context(1), params, w, out);
}
template <class T>
void host_encode(const moecomp::sparse::encode_params& params, moecomp::matrix_view<const T> r,
                 moecomp::sparse::sparse_matrix& out) {
  moecomp::sparse::encode_sparse<T>(moecomp::host_context(1), params, r, out);
}
template <class Tb, class To>
void host_restore(moecomp::matrix_view<const Tb> base, const moecomp::sparse::sparse_matrix_view& r,
                  moecomp::matrix_view<To> out, moecomp::vector_view<const moecomp::index_t> permutation) {
  moecomp::sparse::restore_dense<Tb, To>(moecomp::host_context(1), base, r, out, permutation);
}
template <class T>
void host_decode(const moecomp::sparse::sparse_matrix_view& r, moecomp::matrix_view<T> out) {
  moecomp::sparse::decode_sparse<T>(moecomp::host_context(1), r, out);
}

#define MOECOMP_TEST_INSTANTIATE_SPARSE(T)                                                                        \
  template moecomp::sparse::prune_result host_prune<T>(const moecomp::sparse::prune_params&,                      \
                                                       moecomp::matrix_view<const T>, moecomp::matrix_view<T>);   \
  template void host_encode<T>(const moecomp::sparse::encode_params&, moecomp::matrix_view<const T>,              \
                               moecomp::sparse::sparse_matrix&);                                                  \
  template void host_decode<T>(const moecomp::sparse::sparse_matrix_view&, moecomp::matrix_view<T>);
MOECOMP_TEST_INSTANTIATE_SPARSE(float)
MOECOMP_TEST_INSTANTIATE_SPARSE(double)
MOECOMP_TEST_INSTANTIATE_SPARSE(moecomp::bfloat16)
MOECOMP_TEST_INSTANTIATE_SPARSE(moecomp::half)

#define MOECOMP_TEST_INSTANTIATE_RESTORE(Tb, To)                                                                  \
  template void host_restore<Tb, To>(moecomp::matrix_view<const Tb>, const moecomp::sparse::sparse_matrix_view&,  \
                                     moecomp::matrix_view<To>, moecomp::vector_view<const moecomp::index_t>);
MOECOMP_TEST_INSTANTIATE_RESTORE(float, float)
MOECOMP_TEST_INSTANTIATE_RESTORE(float, moecomp::bfloat16)
MOECOMP_TEST_INSTANTIATE_RESTORE(moecomp::bfloat16, moecomp::bfloat16)
MOECOMP_TEST_INSTANTIATE_RESTORE(moecomp::half, float)
MOECOMP_TEST_INSTANTIATE_RESTORE(double, double)

}  // namespace moecomp_test
