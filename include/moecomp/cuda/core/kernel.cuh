#pragma once
// How moecomp declares its kernels, and small launch helpers.
//
// MOECOMP_KERNEL is `static __global__`: every kernel has internal linkage, so each translation unit that
// includes a moecomp device header gets its own kernel symbols and registers them with its own fat
// binary. Two shared libraries (or a library and its host program) that embed different moecomp builds,
// or the same build compiled for different GPU architectures, can then never resolve a launch to the
// other's kernel, and no kernel symbol is exported. `__attribute__((visibility("hidden")))` alone would
// keep kernels out of a shared library's dynamic symbol table but still merge them across the translation
// units of that library, whose fat binaries may hold code for different architectures. The cost of
// internal linkage is one copy of a kernel per translation unit that instantiates it.
//
// Remaining rule: the host-side launch functions are ordinary inline templates that the linker merges,
// so the translation units of one binary that include moecomp device headers should be compiled for the
// same set of CUDA architectures (-arch / CMAKE_CUDA_ARCHITECTURES).
//
// Most kernels are templates, instantiated only where launched; the small bookkeeping kernels (index fills,
// the auction's phase steps, the dispatch plan's scatter) are not, so a translation unit that includes their
// header compiles them even if it launches nothing.
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/error.cuh>

#include <cuda_runtime_api.h>

#define MOECOMP_KERNEL static __global__

MOECOMP_NAMESPACE_BEGIN
namespace detail {

/// ceil(a / b) for a >= 0, b > 0.
MOECOMP_HOST_DEVICE constexpr index_t ceil_div(index_t a, index_t b) noexcept { return (a + b - 1) / b; }
/// a rounded up to a multiple of b (b > 0).
MOECOMP_HOST_DEVICE constexpr index_t round_up(index_t a, index_t b) noexcept { return ceil_div(a, b) * b; }
MOECOMP_HOST_DEVICE constexpr index_t min_index(index_t a, index_t b) noexcept { return a < b ? a : b; }
MOECOMP_HOST_DEVICE constexpr index_t max_index(index_t a, index_t b) noexcept { return a < b ? b : a; }

/// Largest grid.y / grid.z a launch may use; kernels loop over the rest.
inline constexpr index_t max_grid_y = 65535;
/// Largest grid.x moecomp launches; kernels loop over the rest (the hardware allows 2^31 - 1).
inline constexpr index_t max_grid_x = index_t(1) << 20;

/// Blocks for `items` work items at `per_block` items per block: at least 1, at most `cap` (the kernels are
/// grid-stride loops and cover the rest).
inline unsigned grid_for(index_t items, index_t per_block, index_t cap = max_grid_x) {
  const index_t blocks = ceil_div(items, per_block);
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

}  // namespace detail
MOECOMP_NAMESPACE_END
