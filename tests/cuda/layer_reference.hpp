#pragma once
// The host's MoE layer forward (<moecomp/moe/layer.hpp>), compiled by the C++ compiler in layer_reference.cpp,
// for tests/cuda/test_moe_expert_cuda.cu to compare the device layer forward against.
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/gating/routing_types.hpp>
#include <moecomp/moe/layer_types.hpp>

namespace moecomp_test {

/// moe::moe_layer_forward on the host, one thread; instantiated for float and bfloat16 weights.
template <class W>
moecomp::gating::routing_result host_moe_layer_forward(const moecomp::moe::moe_layer_params& params,
                                                       const moecomp::moe::moe_layer_view<W>& layer,
                                                       moecomp::matrix_view<const moecomp::accumulator_t<W>> x,
                                                       moecomp::matrix_view<moecomp::accumulator_t<W>> y);

}  // namespace moecomp_test
