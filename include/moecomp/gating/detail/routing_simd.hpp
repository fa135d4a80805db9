#pragma once
// AVX-512 selection for float logits, behind <moecomp/gating/routing.hpp>: compiled when the including code
// targets AVX-512 F and CD (x86-64-v4 and later); elsewhere routing_host.hpp's portable loops run. 16 experts per
// vector instruction: a maximum or a lower bound of the k-th largest, the candidates at or above it
// compressed into a short list in index order, and their ranks by (value descending, index ascending)
// counted with vector comparisons.
//
// Same answers as the portable path, bit for bit: the selection is the same total order (a float compares
// with another float exactly as their double conversions do), and the weights are computed afterwards by
// the same double arithmetic. Only the work to find the selection differs.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/views.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__AVX512F__) && defined(__AVX512CD__)
#define MOECOMP_GATING_AVX512 1
#include <immintrin.h>
#else
#define MOECOMP_GATING_AVX512 0
#endif

MOECOMP_NAMESPACE_BEGIN
namespace gating {
namespace detail {

/// The smallest float whose double value is >= bound, so that x >= result <=> double(x) >= bound for every
/// float x; false when bound is outside the float range (the caller then compares in double).
inline bool float_at_or_above(double bound, float& result) noexcept {
  if (!(std::fabs(bound) <= static_cast<double>(FLT_MAX))) return false;
  float f = static_cast<float>(bound);
  // Where f rounded below the bound, the next float up, chosen without a branch (it goes either way about
  // half the time) and without std::nextafter (a call into libm): from +-0 the smallest subnormal.
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const std::uint32_t up = f == 0.0f ? 1u : f > 0.0f ? bits + 1u : bits - 1u;
  bits = static_cast<double>(f) < bound ? up : bits;
  std::memcpy(&result, &bits, sizeof result);
  return true;
}

#if MOECOMP_GATING_AVX512

/// The lanes 0 .. width - 1 of a 16-lane mask (width clamped to 0 .. 16).
inline __mmask16 first_lanes(index_t width) noexcept {
  return width >= 16 ? static_cast<__mmask16>(0xffff) : width <= 0 ? static_cast<__mmask16>(0) : static_cast<__mmask16>((1u << width) - 1u);
}

// GCC 12's unmasked max and permute intrinsics pass an undefined placeholder that -Wmaybe-uninitialized
// flags (GCC bug 105593); the zero-masked forms with every lane selected are the same instructions.
constexpr __mmask16 all_lanes = static_cast<__mmask16>(0xffff);

/// Lane q of x moved to lane q - shift (mod 16).
inline __m512 rotate_lanes(__m512 x, int shift) noexcept {
  const __m512i index = _mm512_and_si512(
      _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(shift)),
      _mm512_set1_epi32(15));
  return _mm512_maskz_permutexvar_ps(all_lanes, index, x);
}

/// Experts j .. j + 15 of x (e of them in all), lanes past the end filled with `fill`.
inline __m512 load_experts(const float* x, index_t e, index_t j, float fill) noexcept {
  return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), first_lanes(e - j), x + j);
}

/// The largest of x[0 .. e), e >= 1.
inline float simd_max(const float* x, index_t e) noexcept {
  __m512 top = load_experts(x, e, 0, -FLT_MAX);
  for (index_t j = 16; j < e; j += 16) top = _mm512_maskz_max_ps(all_lanes, top, load_experts(x, e, j, -FLT_MAX));
  for (int shift = 8; shift > 0; shift /= 2) top = _mm512_maskz_max_ps(all_lanes, top, rotate_lanes(top, shift));
  return _mm512_cvtss_f32(top);
}

/// Ranks of the 16 lanes of v by (value descending, lane ascending): lane q's rank is the number of lanes
/// chosen before it, so the ranks are a permutation of 0 .. 15. Lanes holding -inf (padding) rank after
/// every finite lane. Fifteen rotations, each compared with v: no memory traffic, no data-dependent branch.
inline __m512i rank_lanes(__m512 v) noexcept {
  const __m512i one = _mm512_set1_epi32(1), fifteen = _mm512_set1_epi32(15);
  __m512i rank = _mm512_setzero_si512();
  __m512i source = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int r = 1; r < 16; ++r) {
    source = _mm512_and_si512(_mm512_add_epi32(source, one), fifteen);  // lane q looks at lane (q + r) mod 16
    const __m512 other = _mm512_maskz_permutexvar_ps(all_lanes, source, v);
    // lanes q >= 16 - r look at a lower lane, which wins a tie
    const auto lower = static_cast<__mmask16>(0xffffu << (16 - r));
    const auto before = static_cast<__mmask16>(_mm512_cmp_ps_mask(other, v, _CMP_GT_OQ) |
                                               _mm512_mask_cmp_ps_mask(lower, other, v, _CMP_EQ_OQ));
    rank = _mm512_mask_add_epi32(rank, before, rank, one);
  }
  return rank;
}

/// For each lane of v, how many lanes hold a strictly larger value (ties not broken).
inline __m512i count_larger(__m512 v) noexcept {
  const __m512i one = _mm512_set1_epi32(1), fifteen = _mm512_set1_epi32(15);
  __m512i larger = _mm512_setzero_si512();
  __m512i source = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int r = 1; r < 16; ++r) {
    source = _mm512_and_si512(_mm512_add_epi32(source, one), fifteen);
    const __m512 other = _mm512_maskz_permutexvar_ps(all_lanes, source, v);
    larger = _mm512_mask_add_epi32(larger, _mm512_cmp_ps_mask(other, v, _CMP_GT_OQ), larger, one);
  }
  return larger;
}

/// The smallest of the lanes of v in `lanes` (at least one).
inline float masked_min(__mmask16 lanes, __m512 v) noexcept {
  v = _mm512_mask_blend_ps(lanes, _mm512_set1_ps(std::numeric_limits<float>::infinity()), v);
  for (int shift = 8; shift > 0; shift /= 2) v = _mm512_maskz_min_ps(all_lanes, v, rotate_lanes(v, shift));
  return _mm512_cvtss_f32(v);
}

/// A lower bound of the k-th largest of x[0 .. e), 1 <= k <= 16: the k-th largest of the maxima of the 16
/// groups j mod 16 (an empty group, when e < 16, has maximum -inf), i.e. the smallest maximum with fewer
/// than k maxima above it. The k largest maxima are k distinct entries of x at or above it, so the k-th
/// largest entry is at least the bound; typically a few more than k entries reach it.
inline float simd_top_k_bound(const float* x, index_t e, index_t k) noexcept {
  const float minus_inf = -std::numeric_limits<float>::infinity();
  __m512 group_max = load_experts(x, e, 0, minus_inf);
  for (index_t j = 16; j < e; j += 16)
    group_max = _mm512_maskz_max_ps(all_lanes, group_max, load_experts(x, e, j, minus_inf));
  const __mmask16 top = _mm512_cmplt_epi32_mask(count_larger(group_max), _mm512_set1_epi32(static_cast<int>(k)));
  return masked_min(top, group_max);
}

/// Up to 16 selection candidates, in vector lanes 0 .. count - 1 in index order (values and expert ids);
/// the other lanes hold -inf and id 0.
struct lane_candidates {
  __m512 values;
  __m512i ids;
  index_t count;
};

/// The experts with x[j] >= bound, in index order, into lanes; count is 17 as soon as there are more than 16.
inline lane_candidates simd_gather_candidates(const float* x, index_t e, float bound) noexcept {
  const __m512 b = _mm512_set1_ps(bound);
  __m512i id = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i sixteen = _mm512_set1_epi32(16);
  lane_candidates c{_mm512_set1_ps(-std::numeric_limits<float>::infinity()), _mm512_setzero_si512(), 0};
  for (index_t j = 0; j < e; j += 16) {
    const __mmask16 valid = first_lanes(e - j);
    const __m512 v = _mm512_maskz_loadu_ps(valid, x + j);
    const __mmask16 pass = _mm512_mask_cmp_ps_mask(valid, v, b, _CMP_GE_OQ);
    const auto n = static_cast<index_t>(_mm_popcnt_u32(pass));
    if (c.count + n > 16) {
      c.count = 17;
      return c;
    }
    // this chunk's passing entries, packed, then spread into lanes count .. count + n - 1
    const auto slots = static_cast<__mmask16>(((1u << n) - 1u) << c.count);
    c.values = _mm512_mask_expand_ps(c.values, slots, _mm512_maskz_compress_ps(pass, v));
    c.ids = _mm512_mask_expand_epi32(c.ids, slots, _mm512_maskz_compress_epi32(pass, id));
    c.count += n;
    id = _mm512_add_epi32(id, sixteen);
  }
  return c;
}

/// Of the candidates (count <= 16), the first `take` by (value descending, index ascending) into
/// order[0 .. take): the candidate of rank s goes to slot s. Without ties the rank is the number of larger
/// candidates; a tie (two lanes with the same bits after +0.0 folds -0.0 into +0.0, found by one conflict
/// detection) takes the full rank with the index rule.
inline void simd_order_candidates(const lane_candidates& c, index_t take, index_t* order) noexcept {
  const __m512 canonical = _mm512_maskz_add_ps(all_lanes, c.values, _mm512_setzero_ps());
  const __m512i equal_before = _mm512_maskz_conflict_epi32(first_lanes(c.count), _mm512_castps_si512(canonical));
  const __m512i rank = _mm512_test_epi32_mask(equal_before, equal_before) == 0 ? count_larger(c.values) : rank_lanes(c.values);
  // slot s takes the id of the lane ranked s (found by a comparison; a scatter is slow on some CPUs)
  for (index_t s = 0; s < take; ++s) {
    const __mmask16 ranked_s = _mm512_cmpeq_epi32_mask(rank, _mm512_set1_epi32(static_cast<int>(s)));
    order[s] = _mm512_cvtsi512_si32(_mm512_maskz_compress_epi32(ranked_s, c.ids));
  }
}

#endif  // MOECOMP_GATING_AVX512

}  // namespace detail
}  // namespace gating
MOECOMP_NAMESPACE_END
