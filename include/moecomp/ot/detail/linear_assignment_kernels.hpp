#pragma once
// The inner loops of the assignment solvers, each one pass over a cost row:
//  * relax_argmin: the Dijkstra step of the shortest augmenting path (relax every column through one row,
//    and return the column of smallest tentative distance);
//  * two_smallest: the smallest and second smallest reduced cost of a row (augmenting row reduction, and
//    the auction's bid);
//  * column_min_update: the running column minima of the column reduction.
//
// The cost is read in its own type (float or double) and widened to double. Every loop is branch-free over
// contiguous arrays and written with GCC/Clang vector extensions, so one source gives AVX-512 (8 doubles),
// AVX (4) or SSE/NEON (2) code. Exact ties go to the lowest column index in every kernel and at every
// width, so the result does not depend on the width: lanes keep their first minimum (strict <), and the
// lanes are merged by (value, index). Compilers without vector extensions get the scalar loops.
//
// MOECOMP_LSA_LANES (2, 4 or 8) overrides the width; MOECOMP_LSA_SCALAR forces the scalar loops.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/views.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if !defined(MOECOMP_LSA_SCALAR) && (defined(__GNUC__) || defined(__clang__))
#define MOECOMP_LSA_VECTOR 1
#endif

#if !defined(MOECOMP_LSA_LANES)
#if defined(__AVX512F__)
#define MOECOMP_LSA_LANES 8
#elif defined(__AVX__)
#define MOECOMP_LSA_LANES 4
#else
#define MOECOMP_LSA_LANES 2
#endif
#endif

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

/// Smallest value and the lowest index attaining it; index -1 when every value is +inf.
struct argmin_result {
  double value;
  index_t index;
};

/// Smallest and second smallest of a row by (value, index); an index is -1 when there is no finite such
/// entry.
struct two_smallest_result {
  double first;
  index_t first_index;
  double second;
  index_t second_index;
};

inline constexpr double lsa_inf = std::numeric_limits<double>::infinity();

/// (value, index) < (best value, best index), with index -1 meaning "none".
inline bool lexicographically_less(double value, index_t index, double best, index_t best_index) noexcept {
  if (index < 0) return false;
  if (best_index < 0) return true;
  return value < best || (value == best && index < best_index);
}

template <bool Negate, class T>
inline double signed_cost(T x) noexcept {
  return Negate ? -static_cast<double>(x) : static_cast<double>(x);
}

// ---------------------------------------------------------------------------------------------------------
// Scalar loops: the fallback, and the tails of the vector loops.

template <class T, bool Negate>
inline void relax_argmin_scalar(const T* row, index_t begin, index_t end, double h, const double* vw, double* d,
                                std::int32_t* pred, std::int32_t i, argmin_result& best) noexcept {
  for (index_t k = begin; k < end; ++k) {
    const double nd = (signed_cost<Negate>(row[k]) - vw[k]) - h;
    if (nd < d[k]) {
      d[k] = nd;
      pred[k] = i;
    }
    if (lexicographically_less(d[k], d[k] < lsa_inf ? k : -1, best.value, best.index)) best = {d[k], k};
  }
}

inline void push_candidate(double value, index_t index, two_smallest_result& r) noexcept {
  if (lexicographically_less(value, index, r.first, r.first_index)) {
    r.second = r.first;
    r.second_index = r.first_index;
    r.first = value;
    r.first_index = index;
  } else if (lexicographically_less(value, index, r.second, r.second_index)) {
    r.second = value;
    r.second_index = index;
  }
}

template <class T, bool Negate>
inline void two_smallest_scalar(const T* row, index_t begin, index_t end, const double* v, double cap,
                                two_smallest_result& r) noexcept {
  for (index_t k = begin; k < end; ++k) {
    double x = signed_cost<Negate>(row[k]);
    x = x < cap ? x : cap;
    const double w = x - v[k];
    if (w < lsa_inf) push_candidate(w, k, r);
  }
}

template <class T, bool Negate>
inline void column_min_update_scalar(const T* row, index_t begin, index_t end, double* column_min,
                                     std::int32_t* arg, std::int32_t i) noexcept {
  for (index_t k = begin; k < end; ++k) {
    const double x = signed_cost<Negate>(row[k]);
    if (x < column_min[k]) {
      column_min[k] = x;
      arg[k] = i;
    }
  }
}

#if defined(MOECOMP_LSA_VECTOR)
// ---------------------------------------------------------------------------------------------------------
// Vector loops. Vectors live only inside these functions (never passed by value), so that no ABI question
// arises when the width exceeds what the target ISA has natively (the tests run the 8-lane code on AVX2).

template <int W>
struct lsa_simd;
template <>
struct lsa_simd<2> {
  typedef double vd __attribute__((vector_size(16)));
  typedef float vf __attribute__((vector_size(8)));
  typedef std::int64_t vl __attribute__((vector_size(16)));
  typedef std::int32_t vi __attribute__((vector_size(8)));
};
template <>
struct lsa_simd<4> {
  typedef double vd __attribute__((vector_size(32)));
  typedef float vf __attribute__((vector_size(16)));
  typedef std::int64_t vl __attribute__((vector_size(32)));
  typedef std::int32_t vi __attribute__((vector_size(16)));
};
template <>
struct lsa_simd<8> {
  typedef double vd __attribute__((vector_size(64)));
  typedef float vf __attribute__((vector_size(32)));
  typedef std::int64_t vl __attribute__((vector_size(64)));
  typedef std::int32_t vi __attribute__((vector_size(32)));
};

/// W costs from `p`, widened to double and negated when maximising.
template <int W, bool Negate, class T>
inline void load_costs(typename lsa_simd<W>::vd& out, const T* p) noexcept {
  using S = lsa_simd<W>;
  if constexpr (std::is_same_v<T, double>) {
    std::memcpy(&out, p, sizeof out);
  } else {
    typename S::vf narrow;
    std::memcpy(&narrow, p, sizeof narrow);
    out = __builtin_convertvector(narrow, typename S::vd);
  }
  if constexpr (Negate) out = -out;
}

template <int W>
inline void lane_indices(typename lsa_simd<W>::vl& out, index_t first) noexcept {
  for (int l = 0; l < W; ++l) out[l] = first + l;
}

template <int W, class T, bool Negate>
inline argmin_result relax_argmin_vector(const T* row, index_t m, double h, const double* vw, double* d,
                                         std::int32_t* pred, std::int32_t i) noexcept {
  using S = lsa_simd<W>;
  using vd = typename S::vd;
  using vl = typename S::vl;
  using vi = typename S::vi;
  const vd hv = vd{} + h, inf = vd{} + lsa_inf;
  const vi iv = vi{} + i;
  // Two independent accumulators halve the latency chain of the running minimum.
  vd best0 = inf, best1 = inf;
  vl at0 = vl{} - 1, at1 = vl{} - 1, k0, k1;
  lane_indices<W>(k0, 0);
  lane_indices<W>(k1, W);
  auto step = [&](index_t k, vd& best, vl& at, const vl& kv) {
    vd x, w, dk;
    load_costs<W, Negate>(x, row + k);
    std::memcpy(&w, vw + k, sizeof w);
    std::memcpy(&dk, d + k, sizeof dk);
    const vd nd = (x - w) - hv;
    const vl lower = nd < dk;
    dk = lower ? nd : dk;
    std::memcpy(d + k, &dk, sizeof dk);
    vi p;
    std::memcpy(&p, pred + k, sizeof p);
    p = __builtin_convertvector(lower, vi) ? iv : p;
    std::memcpy(pred + k, &p, sizeof p);
    const vl better = dk < best;
    best = better ? dk : best;
    at = better ? kv : at;
  };
  index_t k = 0;
  for (; k + 2 * W <= m; k += 2 * W) {
    step(k, best0, at0, k0);
    step(k + W, best1, at1, k1);
    k0 += 2 * W;
    k1 += 2 * W;
  }
  if (k + W <= m) {
    step(k, best0, at0, k0);
    k += W;
  }
  argmin_result r{lsa_inf, -1};
  for (int l = 0; l < W; ++l) {
    if (lexicographically_less(best0[l], at0[l], r.value, r.index)) r = {best0[l], at0[l]};
    if (lexicographically_less(best1[l], at1[l], r.value, r.index)) r = {best1[l], at1[l]};
  }
  relax_argmin_scalar<T, Negate>(row, k, m, h, vw, d, pred, i, r);
  return r;
}

template <int W, class T, bool Negate>
inline two_smallest_result two_smallest_vector(const T* row, index_t m, const double* v, double cap) noexcept {
  using S = lsa_simd<W>;
  using vd = typename S::vd;
  using vl = typename S::vl;
  const vd capv = vd{} + cap, inf = vd{} + lsa_inf;
  vd first0 = inf, second0 = inf, first1 = inf, second1 = inf;
  vl first_at0 = vl{} - 1, second_at0 = first_at0, first_at1 = first_at0, second_at1 = first_at0, k0, k1;
  lane_indices<W>(k0, 0);
  lane_indices<W>(k1, W);
  auto step = [&](index_t k, vd& first, vd& second, vl& first_at, vl& second_at, const vl& kv) {
    vd x, vk;
    load_costs<W, Negate>(x, row + k);
    std::memcpy(&vk, v + k, sizeof vk);
    x = x < capv ? x : capv;
    const vd w = x - vk;
    const vl below_first = w < first, below_second = w < second;
    second = below_first ? first : (below_second ? w : second);
    second_at = below_first ? first_at : (below_second ? kv : second_at);
    first = below_first ? w : first;
    first_at = below_first ? kv : first_at;
  };
  index_t k = 0;
  for (; k + 2 * W <= m; k += 2 * W) {
    step(k, first0, second0, first_at0, second_at0, k0);
    step(k + W, first1, second1, first_at1, second_at1, k1);
    k0 += 2 * W;
    k1 += 2 * W;
  }
  if (k + W <= m) {
    step(k, first0, second0, first_at0, second_at0, k0);
    k += W;
  }
  // Each column index sits in one lane as its first or its second, so the two smallest of the row are
  // the two smallest of these candidates.
  two_smallest_result r{lsa_inf, -1, lsa_inf, -1};
  for (int l = 0; l < W; ++l) {
    push_candidate(first0[l], first_at0[l], r);
    push_candidate(second0[l], second_at0[l], r);
    push_candidate(first1[l], first_at1[l], r);
    push_candidate(second1[l], second_at1[l], r);
  }
  two_smallest_scalar<T, Negate>(row, k, m, v, cap, r);
  return r;
}

template <int W, class T, bool Negate>
inline void column_min_update_vector(const T* row, index_t m, double* column_min, std::int32_t* arg,
                                     std::int32_t i) noexcept {
  using S = lsa_simd<W>;
  using vd = typename S::vd;
  using vi = typename S::vi;
  const vi iv = vi{} + i;
  index_t k = 0;
  for (; k + W <= m; k += W) {
    vd x, c;
    vi a;
    load_costs<W, Negate>(x, row + k);
    std::memcpy(&c, column_min + k, sizeof c);
    std::memcpy(&a, arg + k, sizeof a);
    const auto lower = x < c;
    c = lower ? x : c;
    a = __builtin_convertvector(lower, vi) ? iv : a;
    std::memcpy(column_min + k, &c, sizeof c);
    std::memcpy(arg + k, &a, sizeof a);
  }
  column_min_update_scalar<T, Negate>(row, k, m, column_min, arg, i);
}
#endif  // MOECOMP_LSA_VECTOR

// ---------------------------------------------------------------------------------------------------------
// Dispatch. W = 1 selects the scalar loops (also used by the tests as the reference).

/// For every column k: nd = (s C(i, k) - vw[k]) - h; where nd < d[k], d[k] = nd and pred[k] = i. Returns the
/// smallest d[k] afterwards and its lowest column. s = -1 when Negate.
template <int W = MOECOMP_LSA_LANES, class T, bool Negate>
inline argmin_result relax_argmin(const T* row, index_t m, double h, const double* vw, double* d,
                                  std::int32_t* pred, std::int32_t i) noexcept {
#if defined(MOECOMP_LSA_VECTOR)
  if constexpr (W > 1) return relax_argmin_vector<W, T, Negate>(row, m, h, vw, d, pred, i);
#endif
  argmin_result r{lsa_inf, -1};
  relax_argmin_scalar<T, Negate>(row, 0, m, h, vw, d, pred, i, r);
  return r;
}

/// The two smallest of min(s C(i, k), cap) - v[k] over the columns k, by (value, index).
template <int W = MOECOMP_LSA_LANES, class T, bool Negate>
inline two_smallest_result two_smallest(const T* row, index_t m, const double* v, double cap) noexcept {
#if defined(MOECOMP_LSA_VECTOR)
  if constexpr (W > 1) return two_smallest_vector<W, T, Negate>(row, m, v, cap);
#endif
  two_smallest_result r{lsa_inf, -1, lsa_inf, -1};
  two_smallest_scalar<T, Negate>(row, 0, m, v, cap, r);
  return r;
}

/// column_min[k] = min(column_min[k], s C(i, k)), arg[k] = i where it decreased (strictly: lowest row wins).
template <int W = MOECOMP_LSA_LANES, class T, bool Negate>
inline void column_min_update(const T* row, index_t m, double* column_min, std::int32_t* arg,
                              std::int32_t i) noexcept {
#if defined(MOECOMP_LSA_VECTOR)
  if constexpr (W > 1) {
    column_min_update_vector<W, T, Negate>(row, m, column_min, arg, i);
    return;
  }
#endif
  column_min_update_scalar<T, Negate>(row, 0, m, column_min, arg, i);
}

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
