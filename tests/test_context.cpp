// host_context: the thread policy (this test links moecomp::openmp, so OpenMP is on when the compiler has
// it), argument checks, and the allocator hook as host_workspace uses it.
#include <moecomp/core/context.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace {

bool aligned_to(const void* p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

// A caller-side allocator that records every call through user_data.
struct allocation_log {
  struct call {
    void* pointer;
    std::size_t bytes;
    std::size_t alignment;
  };
  std::vector<call> allocations;
  std::vector<call> deallocations;

  static void* allocate(std::size_t bytes, std::size_t alignment, void* user_data) {
    auto* log = static_cast<allocation_log*>(user_data);
    void* p = ::operator new(bytes, std::align_val_t(alignment));
    log->allocations.push_back({p, bytes, alignment});
    return p;
  }
  static void deallocate(void* pointer, std::size_t bytes, std::size_t alignment, void* user_data) {
    auto* log = static_cast<allocation_log*>(user_data);
    log->deallocations.push_back({pointer, bytes, alignment});
    ::operator delete(pointer, std::align_val_t(alignment));
  }
  moecomp::host_allocator hook() { return {&allocate, &deallocate, this}; }
};

struct alignas(128) wide_element {
  double lanes[16];
};

}  // namespace

static_assert(std::is_trivially_copyable_v<moecomp::host_context>);
static_assert(std::is_nothrow_default_constructible_v<moecomp::host_context>);

TEST_CASE("threads(): 0 means OpenMP's default, n > 0 means n, and nothing global changes") {
  const moecomp::host_context defaults;
  CHECK(defaults.num_threads == 0);
  CHECK((defaults.allocator.allocate == nullptr));
  CHECK((defaults.allocator.deallocate == nullptr));
  CHECK(defaults.allocator.user_data == nullptr);
  CHECK(moecomp::host_context(1).threads() == 1);
#if defined(_OPENMP)
  const int before = omp_get_max_threads();
  CHECK(defaults.threads() == before);
  CHECK(moecomp::host_context(3).threads() == 3);
  CHECK(moecomp::host_context(0).threads() == before);
  moecomp::host_context many(64);
  CHECK(many.threads() == 64);
  CHECK(omp_get_max_threads() == before);  // no global OpenMP setting was touched
#else
  CHECK(defaults.threads() == 1);
  CHECK(moecomp::host_context(3).threads() == 1);  // without OpenMP every loop is serial
#endif
}

TEST_CASE("num_threads must be non-negative") {
  CHECK_THROWS_WITH_AS(moecomp::host_context(-1), "host_context: num_threads must be >= 0, got -1",
                       moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS((moecomp::host_context(std::numeric_limits<int>::min())),
                       ("host_context: num_threads must be >= 0, got " +
                        std::to_string(std::numeric_limits<int>::min()))
                           .c_str(),
                       moecomp::invalid_argument);
  CHECK_NOTHROW(moecomp::host_context(0));
}

TEST_CASE("default allocation: aligned operator new, nothing for zero bytes") {
  const moecomp::host_context ctx;
  for (std::size_t alignment : {std::size_t{1}, std::size_t{8}, std::size_t{64}, std::size_t{256}, std::size_t{4096}}) {
    void* p = ctx.allocate(1000, alignment);
    REQUIRE(p != nullptr);
    CHECK(aligned_to(p, alignment));
    std::memset(p, 0xab, 1000);  // the whole block is usable
    ctx.deallocate(p, 1000, alignment);
  }
  void* p = ctx.allocate(10);  // default alignment 64
  CHECK(aligned_to(p, 64));
  ctx.deallocate(p, 10);
  CHECK(ctx.allocate(0) == nullptr);
  ctx.deallocate(nullptr, 0);  // no-op

  CHECK_THROWS_WITH_AS(ctx.allocate(16, 48), "host_context::allocate: alignment must be a power of two, got 48",
                       moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(ctx.allocate(16, 0), "host_context::allocate: alignment must be a power of two, got 0",
                       moecomp::invalid_argument);
}

TEST_CASE("a custom allocator receives the requested size and alignment, once per workspace") {
  allocation_log log;
  moecomp::host_context ctx(2);
  ctx.allocator = log.hook();
  void* expected_pointer = nullptr;
  {
    moecomp::detail::host_workspace<double> workspace(ctx, 100);
    REQUIRE(log.allocations.size() == 1);
    CHECK(log.allocations[0].bytes == 100 * sizeof(double));
    CHECK(log.allocations[0].alignment == 64);  // workspaces are cache-line aligned at least
    CHECK(workspace.data() == log.allocations[0].pointer);
    CHECK(workspace.size() == 100);
    CHECK(aligned_to(workspace.data(), 64));
    for (std::size_t i = 0; i < workspace.size(); ++i) workspace[i] = static_cast<double>(i);
    CHECK(workspace[99] == 99.0);
    expected_pointer = workspace.data();
    CHECK(log.deallocations.empty());
  }
  // Freed at scope exit with the same pointer, size and alignment.
  REQUIRE(log.deallocations.size() == 1);
  CHECK(log.deallocations[0].pointer == expected_pointer);
  CHECK(log.deallocations[0].bytes == 100 * sizeof(double));
  CHECK(log.deallocations[0].alignment == 64);

  {
    // An over-aligned element type asks for its own alignment.
    moecomp::detail::host_workspace<wide_element> workspace(ctx, 3);
    REQUIRE(log.allocations.size() == 2);
    CHECK(log.allocations[1].bytes == 3 * sizeof(wide_element));
    CHECK(log.allocations[1].alignment == 128);
    CHECK(aligned_to(workspace.data(), 128));
  }
  REQUIRE(log.deallocations.size() == 2);
  CHECK(log.deallocations[1].alignment == 128);

  {
    // An empty workspace never calls the allocator.
    moecomp::detail::host_workspace<float> workspace(ctx, 0);
    CHECK(workspace.data() == nullptr);
  }
  CHECK(log.allocations.size() == 2);
  CHECK(log.deallocations.size() == 2);

  // Direct calls pass the caller's alignment through.
  void* p = ctx.allocate(7, 512);
  REQUIRE(log.allocations.size() == 3);
  CHECK(log.allocations[2].alignment == 512);
  CHECK(aligned_to(p, 512));
  ctx.deallocate(p, 7, 512);
  CHECK(log.deallocations.size() == 3);

  // A copy of the context shares the hook (contexts own nothing); the default context is unaffected.
  const moecomp::host_context copy = ctx;
  { moecomp::detail::host_workspace<int> workspace(copy, 5); }
  CHECK(log.allocations.size() == 4);
  const moecomp::host_context plain;
  { moecomp::detail::host_workspace<int> workspace(plain, 5); }
  CHECK(log.allocations.size() == 4);
}

TEST_CASE("an allocator with only one of its two functions set is rejected") {
  allocation_log log;
  const std::string message = "host_context: allocator.allocate and allocator.deallocate must be set together";
  moecomp::host_context only_allocate;
  only_allocate.allocator.allocate = &allocation_log::allocate;
  only_allocate.allocator.user_data = &log;
  CHECK_THROWS_WITH_AS(only_allocate.allocate(64), message.c_str(), moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(moecomp::detail::host_workspace<float>(only_allocate, 16), message.c_str(),
                       moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(only_allocate.allocate(0), message.c_str(), moecomp::invalid_argument);

  moecomp::host_context only_deallocate;
  only_deallocate.allocator.deallocate = &allocation_log::deallocate;
  CHECK_THROWS_WITH_AS(only_deallocate.allocate(64), message.c_str(), moecomp::invalid_argument);
  CHECK(log.allocations.empty());  // nothing was allocated on the way to the error
}

TEST_CASE("a workspace whose byte count would overflow size_t is rejected before allocating") {
  allocation_log log;
  moecomp::host_context ctx;
  ctx.allocator = log.hook();
  const std::size_t too_many = std::numeric_limits<std::size_t>::max() / sizeof(double) + 1;
  CHECK_THROWS_WITH_AS(moecomp::detail::host_workspace<double>(ctx, too_many),
                       ("host_workspace: " + std::to_string(too_many) + " elements of 8 bytes overflow size_t").c_str(),
                       moecomp::invalid_argument);
  CHECK(log.allocations.empty());
}
