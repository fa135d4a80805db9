#pragma once
// The one host parallel loop: body(i, thread) for i in [0, count), OpenMP-dynamic over at most `threads`
// threads, serial without OpenMP or with one thread. Determinism is the caller's: each i must write only
// its own outputs (results are then the same at any thread count); `thread` indexes per-thread scratch.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/views.hpp>

#include <algorithm>

#if defined(_OPENMP)
#include <omp.h>
#endif

MOECOMP_NAMESPACE_BEGIN
namespace detail {

template <class Body>
void parallel_for(index_t count, int threads, Body&& body) {
  const int used = static_cast<int>(std::min<index_t>(std::max(threads, 1), count));
#if defined(_OPENMP)
  if (used > 1) {
#pragma omp parallel for num_threads(used) schedule(dynamic, 1)
    for (index_t i = 0; i < count; ++i) body(i, omp_get_thread_num());
    return;
  }
#endif
  (void)used;
  for (index_t i = 0; i < count; ++i) body(i, 0);
}

}  // namespace detail
MOECOMP_NAMESPACE_END
