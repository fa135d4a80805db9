#pragma once
// The oneDNN GEMM provider (MOECOMP_USE_ONEDNN, defined by the including program, which links oneDNN):
// out = alpha * A B^T through oneDNN's matmul primitive, for float and for bfloat16 operands with float
// output. oneDNN picks its kernel for the running CPU (brgemm with AVX-512, AVX512_BF16 dot products, AMX),
// so one binary runs at the CPU's best whatever it was compiled for.
//
// Determinism: every call runs on one thread with oneDNN's view of the thread count set to 1 while the
// primitive is created and run, so its blocking (and so the order of every sum) is the same at any caller
// thread count. moecomp parallelises over calls, never inside one (core/detail/gemm.hpp).
//
// The engine, one stream per thread and the last primitives per thread are cached (thread_local): creating
// a matmul descriptor costs tens of microseconds, a tile's GEMM a few milliseconds. The cache holds only
// oneDNN objects keyed by shapes, never data, and is freed at thread exit.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>

#include <oneapi/dnnl/dnnl.hpp>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include <array>
#include <cstdint>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

/// The shape of one cached matmul: operand type, sizes, row strides, whether alpha is applied.
struct onednn_gemm_key {
  std::array<index_t, 6> dims{};  // r, c, d, lda, ldb, ldo
  bool bf16 = false;
  bool scaled = false;
  bool operator==(const onednn_gemm_key& o) const noexcept {
    return dims == o.dims && bf16 == o.bf16 && scaled == o.scaled;
  }
};

/// One thread's oneDNN state: its stream and a small round-robin cache of primitives.
class onednn_gemm_state {
 public:
  static constexpr int slots = 8;

  static onednn_gemm_state& this_thread() {
    thread_local onednn_gemm_state state;
    return state;
  }

  void run(const onednn_gemm_key& key, float alpha, const void* a, const void* b, float* out) {
    const dnnl::matmul& primitive = find(key);
    const auto dt = key.bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
    const dnnl::memory::dim r = key.dims[0], c = key.dims[1], d = key.dims[2];
    dnnl::memory a_mem({{r, d}, dt, {key.dims[3], 1}}, engine(), const_cast<void*>(a));
    dnnl::memory b_mem({{d, c}, dt, {1, key.dims[4]}}, engine(), const_cast<void*>(b));
    dnnl::memory out_mem({{r, c}, dnnl::memory::data_type::f32, {key.dims[5], 1}}, engine(), out);
    if (key.scaled) {
      dnnl::memory scale_mem({{1}, dnnl::memory::data_type::f32, {1}}, engine(), &alpha);
      primitive.execute(stream_, {{DNNL_ARG_SRC, a_mem},
                                  {DNNL_ARG_WEIGHTS, b_mem},
                                  {DNNL_ARG_DST, out_mem},
                                  {DNNL_ARG_ATTR_OUTPUT_SCALES, scale_mem}});
    } else {
      primitive.execute(stream_, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, out_mem}});
    }
    stream_.wait();
  }

 private:
  onednn_gemm_state() : stream_(engine()) {}

  static const dnnl::engine& engine() {
    static const dnnl::engine cpu(dnnl::engine::kind::cpu, 0);
    return cpu;
  }

  const dnnl::matmul& find(const onednn_gemm_key& key) {
    for (int i = 0; i < slots; ++i)
      if (used_[i] && keys_[i] == key) return primitives_[i];
    const int slot = next_;
    next_ = (next_ + 1) % slots;
    const auto dt = key.bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
    const dnnl::memory::dim r = key.dims[0], c = key.dims[1], d = key.dims[2];
    dnnl::primitive_attr attr;
    if (key.scaled) attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(dnnl::memory::desc({r, d}, dt, {key.dims[3], 1}),
                           dnnl::memory::desc({d, c}, dt, {1, key.dims[4]}),
                           dnnl::memory::desc({r, c}, dnnl::memory::data_type::f32, {key.dims[5], 1})),
        attr, engine());
    primitives_[slot] = dnnl::matmul(pd);
    keys_[slot] = key;
    used_[slot] = true;
    return primitives_[slot];
  }

  dnnl::stream stream_;
  std::array<onednn_gemm_key, slots> keys_{};
  std::array<dnnl::matmul, slots> primitives_{};
  std::array<bool, slots> used_{};
  int next_ = 0;
};

/// Sets the calling thread's OpenMP thread count to 1 for the scope, so that oneDNN both plans and runs
/// the primitive for one thread (inside an active parallel region it would plan for the outer count).
class onednn_one_thread_scope {
 public:
  onednn_one_thread_scope() {
#if defined(_OPENMP)
    saved_ = omp_get_max_threads();
    if (saved_ != 1) omp_set_num_threads(1);
#endif
  }
  ~onednn_one_thread_scope() {
#if defined(_OPENMP)
    if (saved_ != 1) omp_set_num_threads(saved_);
#endif
  }
  onednn_one_thread_scope(const onednn_one_thread_scope&) = delete;
  onednn_one_thread_scope& operator=(const onednn_one_thread_scope&) = delete;

 private:
  int saved_ = 1;
};

/// out (r x c, row stride ldo) = alpha * A B^T through oneDNN, A r x d and B c x d row-major; T is float or
/// bfloat16 (products of bfloat16 are exact in float; sums are float). r, c, d > 0.
template <class T>
void onednn_gemm_abt(float alpha, const T* a, index_t lda, const T* b, index_t ldb, index_t r, index_t c, index_t d,
                     float* out, index_t ldo) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, bfloat16>, "onednn_gemm_abt: float or bfloat16");
  onednn_one_thread_scope one_thread;
  const onednn_gemm_key key{{r, c, d, lda, ldb, ldo}, std::is_same_v<T, bfloat16>, alpha != 1.0f};
  onednn_gemm_state::this_thread().run(key, alpha, a, b, out);
}

}  // namespace detail
MOECOMP_NAMESPACE_END
