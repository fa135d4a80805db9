#pragma once
// AVX-512 kernels of the bitmap format, compiled when the including code targets AVX-512 F/BW/VL (x86-64-v4
// and later): 16 columns at a time, the stored values expanded into the lanes their bitmap bits mark (an
// expand of the next popcount values), so that restore and the shared-base apply run vector instructions
// per 16 weight positions instead of a scalar loop per stored entry. Elsewhere the portable loops run.
//
// Restore gives exactly the scalar path's bits (a masked add per lane, one rounding); the apply sums in a
// different order than the scalar path (16 lanes, then a fixed reduction), so a v4 build and a portable
// build of it differ in the last bits. Each is the same at any thread count.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/sparse/residual_types.hpp>
#include <moecomp/sparse/detail/sparse_layout.hpp>

#include <cstdint>
#include <type_traits>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define MOECOMP_SPARSE_AVX512 1
#include <immintrin.h>
#else
#define MOECOMP_SPARSE_AVX512 0
#endif

MOECOMP_NAMESPACE_BEGIN
namespace sparse {
namespace detail {

#if MOECOMP_SPARSE_AVX512

/// The 16 bits of bitmap row `bits` for columns c0 .. c0 + 15 (c0 a multiple of 16), limited to `width` columns.
inline std::uint32_t bitmap_mask16(const std::uint8_t* bits, index_t c0, index_t width) noexcept {
  std::uint32_t m = 0;
  if (width >= 16) {
    m = load_le<std::uint16_t>(bits + c0 / 8);
  } else {
    for (index_t b = 0; b < (width + 7) / 8; ++b) m |= static_cast<std::uint32_t>(bits[c0 / 8 + b]) << (8 * b);
    m &= (1u << width) - 1u;
  }
  return m;
}

/// The stored values k, k+1, ... placed in the lanes set in `mask` (0 elsewhere), as floats. The load reads
/// only the popcount(mask) values it needs (a load masked by the popcount), or, with PlainLoad while 16 values
/// remain before `count`, all 16 (the expand picks the lanes): then the load does not wait for the popcount,
/// which the product's FMA chains gain from (measured: the shared-base apply 218 -> 174 ms), while restore,
/// which streams stores, loses (13 -> 18 ms), so it keeps the masked load.
template <value_dtype D, bool PlainLoad = false>
inline __m512 expand_values(std::uint32_t mask, const std::uint8_t* values, std::uint64_t k, std::uint64_t count) noexcept {
  const auto m16 = static_cast<__mmask16>(mask);
  const bool whole = PlainLoad && k + 16 <= count;
  const auto first = whole ? static_cast<__mmask16>(0xffff)
                           : static_cast<__mmask16>((1u << static_cast<unsigned>(__builtin_popcount(mask))) - 1u);
  if constexpr (D == value_dtype::float32) {
    const __m512 packed = whole ? _mm512_loadu_ps(values + 4 * k) : _mm512_maskz_loadu_ps(first, values + 4 * k);
    return _mm512_maskz_expand_ps(m16, packed);
  } else {
    const __m256i packed = whole ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + 2 * k))
                                 : _mm256_maskz_loadu_epi16(first, values + 2 * k);
#if defined(__AVX512VBMI2__)
    // VBMI2 (Ice Lake, Zen 4 and later) expands 16-bit lanes directly: no widening and narrowing around it.
    const __m256i spread16 = _mm256_maskz_expand_epi16(m16, packed);
    if constexpr (D == value_dtype::float16) {
      return _mm512_maskz_cvtph_ps(0xffff, spread16);
    } else {
      return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, spread16), 16));
    }
#else
    const __m512i spread = _mm512_maskz_expand_epi32(m16, _mm512_maskz_cvtepu16_epi32(0xffff, packed));
    if constexpr (D == value_dtype::float16) {
      return _mm512_maskz_cvtph_ps(0xffff, _mm512_maskz_cvtepi32_epi16(0xffff, spread));
    } else {
      return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, spread, 16));
    }
#endif
  }
}

/// 16 (or `lanes`) elements of T as floats.
template <class T>
inline __m512 load16(const T* p, __mmask16 lanes) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_maskz_loadu_ps(lanes, p);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    const __m256i h = _mm256_maskz_loadu_epi16(lanes, p);
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, h), 16));
  } else {
    static_assert(std::is_same_v<T, half>, "load16: float, bfloat16 or half");
    return _mm512_maskz_cvtph_ps(0xffff, _mm256_maskz_loadu_epi16(lanes, p));
  }
}

/// The bfloat16 bits of 16 floats: round to nearest even, NaN quieted (bfloat16's constructor, lane by lane).
inline __m256i bfloat16_bits(__m512 v) noexcept {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i high = _mm512_maskz_srli_epi32(0xffff, u, 16);
  const __m512i lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_maskz_srli_epi32(0xffff, _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __m512i quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_maskz_cvtepi32_epi16(0xffff, _mm512_mask_mov_epi32(rounded, nan, quiet));
}

/// Stores 16 (or `lanes`) floats as T: float as is, bfloat16 rounded to nearest even (NaN quieted, as
/// bfloat16's constructor does).
template <class T>
inline void store16(T* p, __m512 v, __mmask16 lanes) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    _mm512_mask_storeu_ps(p, lanes, v);
  } else {
    static_assert(std::is_same_v<T, bfloat16>, "store16: float or bfloat16");
    _mm256_mask_storeu_epi16(p, lanes, bfloat16_bits(v));
  }
}

/// 16 elements of T as floats, unmasked.
template <class T>
inline __m512 load16_full(const T* p) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_loadu_ps(p);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, h), 16));
  } else {
    return _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
}

/// Stores 16 floats as T, unmasked (bfloat16 rounded as store16 does).
template <class T>
inline void store16_full(T* p, __m512 v) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    _mm512_storeu_ps(p, v);
  } else {
    static_assert(std::is_same_v<T, bfloat16>, "store16_full: float or bfloat16");
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bfloat16_bits(v));
  }
}

/// Whether restore's bitmap kernel serves a base of Tb and an output of To.
template <class Tb, class To>
inline constexpr bool bitmap_restore_simd_v =
    (std::is_same_v<Tb, float> || std::is_same_v<Tb, bfloat16> || std::is_same_v<Tb, half>) &&
    (std::is_same_v<To, float> || std::is_same_v<To, bfloat16>);

/// Row s of a bitmap residual added to base row `from` (or, without a base, decoded) into output row `to`:
/// lanes with a stored value get base + value (or the value), the others the base (or +0), rounded once. Full
/// 16-column chunks use plain loads and stores (masked stores are slow on some cores); the tail is masked.
template <value_dtype D, class Tb, class To>
inline void restore_bitmap_row(const sparse_matrix_view& r, index_t s, std::uint64_t k, const Tb* from, To* to) noexcept {
  const index_t cols = r.cols(), full = cols / 16 * 16;
  const std::uint8_t* bits = r.structure() + static_cast<std::uint64_t>(s) * static_cast<std::uint64_t>((cols + 7) / 8);
  const std::uint8_t* values = r.values();
  for (index_t c0 = 0; c0 < full; c0 += 16) {
    const std::uint32_t mask = load_le<std::uint16_t>(bits + c0 / 8);
    const __m512 v = expand_values<D>(mask, values, k, r.count());
    k += static_cast<std::uint64_t>(__builtin_popcount(mask));
    if (from != nullptr) {
      const __m512 b = load16_full(from + c0);
      store16_full(to + c0, _mm512_mask_add_ps(b, static_cast<__mmask16>(mask), b, v));
    } else {
      store16_full(to + c0, v);
    }
  }
  if (full < cols) {
    const index_t width = cols - full;
    const auto lanes = static_cast<__mmask16>((1u << width) - 1u);
    const std::uint32_t mask = bitmap_mask16(bits, full, width);
    const __m512 v = expand_values<D>(mask, values, k, r.count());
    __m512 out = v;
    if (from != nullptr) {
      const __m512 b = load16(from + full, lanes);
      out = _mm512_mask_add_ps(b, static_cast<__mmask16>(mask), b, v);
    }
    store16(to + full, out, lanes);
  }
}

/// out[t] = sum over row o's stored entries of value x (x_t at column), for the M rows x_t = x + t * ldx, in
/// 16-lane partial sums reduced in a fixed order.
template <int M, value_dtype D>
inline void bitmap_row_product(const sparse_matrix_view& r, index_t o, std::uint64_t k, const float* x, index_t ldx,
                               float* out) noexcept {
  const index_t cols = r.cols();
  const std::uint8_t* bits = r.structure() + static_cast<std::uint64_t>(o) * static_cast<std::uint64_t>((cols + 7) / 8);
  // Two sets of accumulators, for even and odd 16-column chunks: each FMA chain then waits on one FMA every
  // other chunk instead of every chunk. Summed in a fixed order at the end.
  __m512 acc[M], odd[M];
  for (int t = 0; t < M; ++t) acc[t] = odd[t] = _mm512_setzero_ps();
  const index_t full = cols / 16 * 16, pairs = cols / 32 * 32;
  for (index_t c0 = 0; c0 < pairs; c0 += 32) {
    const std::uint32_t both = load_le<std::uint32_t>(bits + c0 / 8);
    if (both == 0) continue;
    const std::uint32_t low = both & 0xffffu, high = both >> 16;
    const __m512 v0 = expand_values<D, true>(low, r.values(), k, r.count());
    const __m512 v1 = expand_values<D, true>(high, r.values(), k + static_cast<std::uint64_t>(__builtin_popcount(low)), r.count());
    k += static_cast<std::uint64_t>(__builtin_popcount(both));
    for (int t = 0; t < M; ++t) {
      acc[t] = _mm512_fmadd_ps(v0, _mm512_loadu_ps(x + t * ldx + c0), acc[t]);
      odd[t] = _mm512_fmadd_ps(v1, _mm512_loadu_ps(x + t * ldx + c0 + 16), odd[t]);
    }
  }
  for (index_t c0 = pairs; c0 < full; c0 += 16) {
    const std::uint32_t mask = load_le<std::uint16_t>(bits + c0 / 8);
    if (mask == 0) continue;
    const __m512 v = expand_values<D, true>(mask, r.values(), k, r.count());
    k += static_cast<std::uint64_t>(__builtin_popcount(mask));
    for (int t = 0; t < M; ++t) acc[t] = _mm512_fmadd_ps(v, _mm512_loadu_ps(x + t * ldx + c0), acc[t]);
  }
  if (full < cols) {
    const std::uint32_t mask = bitmap_mask16(bits, full, cols - full);
    const __m512 v = expand_values<D, true>(mask, r.values(), k, r.count());
    const auto m16 = static_cast<__mmask16>(mask);
    for (int t = 0; t < M; ++t) acc[t] = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(m16, x + t * ldx + full), acc[t]);
  }
  for (int t = 0; t < M; ++t) out[t] = _mm512_reduce_add_ps(_mm512_add_ps(acc[t], odd[t]));
}

#endif  // MOECOMP_SPARSE_AVX512

}  // namespace detail
}  // namespace sparse
MOECOMP_NAMESPACE_END
