#pragma once
// Umbrella header: every host-side part of moecomp. Includes no CUDA header; device code is under
// <moecomp/cuda/...> (see <moecomp/cuda/moecomp.cuh>). Interop adaptors (Eigen, xtensor, DLPack) and the
// file readers are opt-in: include <moecomp/interop/...> and <moecomp/io/...> yourself.
#include <moecomp/version.hpp>

#include <moecomp/core/config.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/gemm.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/memory_space.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/core/status.hpp>
#include <moecomp/core/views.hpp>

#include <moecomp/distance/pairwise_distance.hpp>

#include <moecomp/cluster/fcluster.hpp>
#include <moecomp/cluster/grouping.hpp>
#include <moecomp/cluster/kmeans.hpp>
#include <moecomp/cluster/moefication.hpp>
#include <moecomp/cluster/linkage.hpp>
#include <moecomp/ot/auction_assignment.hpp>
#include <moecomp/ot/emd.hpp>
#include <moecomp/ot/fixed_support_barycenter.hpp>
#include <moecomp/ot/free_support_barycenter.hpp>
#include <moecomp/ot/linear_assignment.hpp>
#include <moecomp/ot/sinkhorn.hpp>
#include <moecomp/gating/dispatch.hpp>
#include <moecomp/gating/routing.hpp>
#include <moecomp/gating/sadmoe.hpp>
#include <moecomp/moe/features.hpp>
#include <moecomp/moe/ffn.hpp>
#include <moecomp/moe/layer.hpp>
#include <moecomp/similarity/cka.hpp>
#include <moecomp/sparse/prune.hpp>
#include <moecomp/sparse/residual.hpp>
#include <moecomp/align/align.hpp>
#include <moecomp/merge/merge.hpp>
#include <moecomp/similarity/partition.hpp>
