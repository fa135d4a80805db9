#pragma once
// The device merge_experts' outputs (<moecomp/cuda/merge/merge.cuh>): the device twin of
// <moecomp/merge/merge_types.hpp>'s merge_outputs. Its data is the host's merge_data with Space = device_memory, its
// parameters the host's merge_params, its report the host's merge_report. Documentation: docs/merge.md, "Device".
//
// This header needs no CUDA header: the views are plain host types over device addresses.
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/merge/merge_types.hpp>
#include <moecomp/cuda/moe/expert_types.cuh>

#include <cstdint>

MOECOMP_NAMESPACE_BEGIN
namespace merge {

/// Where the device merge_experts writes: the g merged experts (device, the input's pieces, g deep), the merged
/// router (device, g x d, for router rules merged_rows and dominant_row; empty for id_map) and the map (HOST
/// memory, E entries: old id -> group; the device layer forward takes it as its expert_map once copied).
template <class W>
struct merge_device_outputs {
  moe::ffn_expert_stack_device_mutable_view<W> experts;
  matrix_view<accumulator_t<W>, device_memory> router;
  vector_view<std::int64_t> map;
};

}  // namespace merge
MOECOMP_NAMESPACE_END
