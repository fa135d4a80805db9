#pragma once
// Memory spaces are tag types carried by every view: a function written for host views cannot be handed
// device memory by mistake, because the two view types do not convert into each other.
#include <moecomp/core/config.hpp>

#include <type_traits>

MOECOMP_NAMESPACE_BEGIN

/// Memory the CPU can dereference (ordinary, pinned or managed memory used from the host).
struct host_memory {
  static constexpr const char* name = "host";
};
/// Memory only a CUDA device can dereference (cudaMalloc, cudaMallocAsync, DLPack kDLCUDA).
struct device_memory {
  static constexpr const char* name = "device";
};

template <class Space>
struct is_memory_space : std::false_type {};
template <>
struct is_memory_space<host_memory> : std::true_type {};
template <>
struct is_memory_space<device_memory> : std::true_type {};
template <class Space>
inline constexpr bool is_memory_space_v = is_memory_space<Space>::value;

MOECOMP_NAMESPACE_END
