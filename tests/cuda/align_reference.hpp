#pragma once
// The host's expert alignment (<moecomp/align/align.hpp>: align_experts and align_stack), compiled by the C++
// compiler in align_reference.cpp, for tests/cuda/test_align_cuda.cu to compare against (the .cu files include no
// host algorithm headers).
#include <moecomp/align/align_types.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/moe/ffn_types.hpp>

namespace moecomp_test {

/// The host align_experts on one thread.
template <class W>
moecomp::align::align_result host_align_experts(const moecomp::align::align_params& params,
                                                const moecomp::moe::ffn_expert_view<W>& reference,
                                                const moecomp::moe::ffn_expert_view<W>& expert,
                                                moecomp::matrix_view<const moecomp::accumulator_t<W>> x,
                                                moecomp::vector_view<moecomp::index_t> p);

/// The host align_stack on one thread.
template <class W>
moecomp::align::align_result host_align_stack(const moecomp::align::align_params& params,
                                              const moecomp::moe::ffn_expert_stack_view<W>& stack,
                                              moecomp::index_t reference,
                                              moecomp::matrix_view<const moecomp::accumulator_t<W>> x,
                                              moecomp::matrix_view<moecomp::index_t> permutations);

}  // namespace moecomp_test
