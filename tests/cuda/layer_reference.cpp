#include "layer_reference.hpp"

#include <moecomp/core/context.hpp>
#include <moecomp/moe/layer.hpp>

namespace moecomp_test {

template <class W>
moecomp::gating::routing_result host_moe_layer_forward(const moecomp::moe::moe_layer_params& params,
                                                       const moecomp::moe::moe_layer_view<W>& layer,
                                                       moecomp::matrix_view<const moecomp::accumulator_t<W>> x,
                                                       moecomp::matrix_view<moecomp::accumulator_t<W>> y) {
  return moecomp::moe::moe_layer_forward<W>(moecomp::host_context(1), params, layer, x, y);
}

template moecomp::gating::routing_result host_moe_layer_forward<float>(const moecomp::moe::moe_layer_params&,
                                                                       const moecomp::moe::moe_layer_view<float>&,
                                                                       moecomp::matrix_view<const float>,
                                                                       moecomp::matrix_view<float>);
template moecomp::gating::routing_result host_moe_layer_forward<moecomp::bfloat16>(
    const moecomp::moe::moe_layer_params&, const moecomp::moe::moe_layer_view<moecomp::bfloat16>&,
    moecomp::matrix_view<const float>, moecomp::matrix_view<float>);

}  // namespace moecomp_test
