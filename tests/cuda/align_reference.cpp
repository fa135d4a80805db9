#include "align_reference.hpp"

#include <moecomp/align/align.hpp>

namespace moecomp_test {

template <class W>
moecomp::align::align_result host_align_experts(const moecomp::align::align_params& params,
                                                const moecomp::moe::ffn_expert_view<W>& reference,
                                                const moecomp::moe::ffn_expert_view<W>& expert,
                                                moecomp::matrix_view<const moecomp::accumulator_t<W>> x,
                                                moecomp::vector_view<moecomp::index_t> p) {
  return moecomp::align::align_experts<W>(moecomp::host_context(1), params, reference, expert, x, p);
}

template <class W>
moecomp::align::align_result host_align_stack(const moecomp::align::align_params& params,
                                              const moecomp::moe::ffn_expert_stack_view<W>& stack,
                                              moecomp::index_t reference,
                                              moecomp::matrix_view<const moecomp::accumulator_t<W>> x,
                                              moecomp::matrix_view<moecomp::index_t> permutations) {
  return moecomp::align::align_stack<W>(moecomp::host_context(1), params, stack, reference, x, permutations);
}

#define MOECOMP_TEST_INSTANTIATE_ALIGN(W)                                                                          \
  template moecomp::align::align_result host_align_experts<W>(                                                    \
      const moecomp::align::align_params&, const moecomp::moe::ffn_expert_view<W>&,                               \
      const moecomp::moe::ffn_expert_view<W>&, moecomp::matrix_view<const moecomp::accumulator_t<W>>,             \
      moecomp::vector_view<moecomp::index_t>);                                                                     \
  template moecomp::align::align_result host_align_stack<W>(                                                      \
      const moecomp::align::align_params&, const moecomp::moe::ffn_expert_stack_view<W>&, moecomp::index_t,       \
      moecomp::matrix_view<const moecomp::accumulator_t<W>>, moecomp::matrix_view<moecomp::index_t>);
MOECOMP_TEST_INSTANTIATE_ALIGN(float)
MOECOMP_TEST_INSTANTIATE_ALIGN(double)
MOECOMP_TEST_INSTANTIATE_ALIGN(moecomp::bfloat16)
MOECOMP_TEST_INSTANTIATE_ALIGN(moecomp::half)
#undef MOECOMP_TEST_INSTANTIATE_ALIGN

}  // namespace moecomp_test
