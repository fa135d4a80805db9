#pragma once
// Umbrella header for the device side: the CUDA context, device buffers and copies, and every device
// algorithm, plus the Eigen-free host core they build on (views, errors, contexts, parameter types).
//
// It deliberately does not include the host umbrella <moecomp/moecomp.hpp>: the host algorithms use
// Eigen 3.4, whose headers nvcc 12/13 compiles only with warnings (#20012, #20013-#20015) unless
// --expt-relaxed-constexpr is given, and a library header must not impose a compiler flag or warnings on
// the translation unit that includes it. Call the host algorithms from .cpp files (plain C++ compiler),
// or include <moecomp/moecomp.hpp> in a .cu file compiled with --expt-relaxed-constexpr.
#include <moecomp/version.hpp>

#include <moecomp/core/config.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/memory_space.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cluster/kmeans_types.hpp>
#include <moecomp/distance/distance_types.hpp>
#include <moecomp/gating/dispatch_types.hpp>
#include <moecomp/gating/routing_types.hpp>
#include <moecomp/ot/free_support_barycenter_types.hpp>
#include <moecomp/ot/linear_assignment_types.hpp>
#include <moecomp/ot/sinkhorn_types.hpp>
#include <moecomp/similarity/cka_types.hpp>
#include <moecomp/sparse/prune_types.hpp>
#include <moecomp/sparse/residual_types.hpp>

#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/device_buffer.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/kernel.cuh>

#include <moecomp/cuda/distance/pairwise_distance.cuh>
#include <moecomp/cuda/cluster/kmeans.cuh>
#include <moecomp/cuda/cluster/linkage.cuh>
#include <moecomp/cuda/ot/auction_assignment.cuh>
#include <moecomp/cuda/ot/free_support_barycenter.cuh>
#include <moecomp/cuda/ot/sinkhorn.cuh>
#include <moecomp/cuda/gating/routing.cuh>
#include <moecomp/cuda/moe/expert.cuh>
#include <moecomp/cuda/moe/layer.cuh>
#include <moecomp/cuda/similarity/cka.cuh>
#include <moecomp/cuda/align/align.cuh>
#include <moecomp/cuda/merge/merge.cuh>
#include <moecomp/cuda/sparse/prune.cuh>
#include <moecomp/cuda/sparse/residual.cuh>
