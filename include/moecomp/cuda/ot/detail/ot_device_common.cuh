#pragma once
// Pieces shared by the device optimal-transport algorithms: the device workspace machinery of
// cuda/core/detail/workspace.cuh under the module's names, and the int-extent check of its kernels.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/detail/workspace.cuh>
#include <moecomp/cuda/core/kernel.cuh>

#include <cuda_runtime_api.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace cuda_detail {

using namespace moecomp::detail;  // the shared device layer: cuda/core/detail, core/detail

/// The kernels index rows and columns with int where it saves registers: refuse what does not fit.
inline void check_int_extent(const char* function, const char* what, index_t value) {
  check_int_extents(function, {{what, value}});
}

}  // namespace cuda_detail
}  // namespace ot
MOECOMP_NAMESPACE_END
