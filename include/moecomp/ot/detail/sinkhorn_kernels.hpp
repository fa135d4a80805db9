#pragma once
// The inner loops of the scaling pass (sinkhorn_passes.hpp), each over one or two rows of the kernel K
// (float or double, widened to double; all arithmetic is in double):
//  * kernel_dot, kernel_dot2: K_i . v (and any dot product of two rows) with 16 partial sums (lane l sums the terms j = l mod 16), added in
//    the fixed tree order of sum16, then the m mod 16 tail terms one by one;
//  * kernel_axpy, kernel_axpy2: col_j += u_i K_ij, one multiply-add per row in row order;
//  * kernel_axpy2_dot2: the axpy of one row pair fused with the dot of the next (same results).
//
// Written with GCC/Clang vector extensions (as linear_assignment_kernels.hpp): from the scalar loops GCC's
// SLP vectoriser makes a mix of 256-bit, 128-bit and scalar code that runs at half the speed. The 16 partial
// sums are the same at every vector width (lane l of vector q is partial sum q * width + l), so the result
// does not depend on the width; the scalar loops, used by other compilers and for MOECOMP_SINKHORN_SCALAR,
// compute the same partial sums. Every multiply-add is written as multiply_add (fused exactly when the
// target has a fast FMA), not left to the compiler's contraction, which may differ between two inlined
// copies of a loop: so the vector and the scalar loops agree bit for bit on one target (tested).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/views.hpp>

#include <cmath>
#include <cstring>

#if defined(__AVX__) && !defined(MOECOMP_SINKHORN_SCALAR) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#if !defined(MOECOMP_SINKHORN_SCALAR) && (defined(__GNUC__) || defined(__clang__))
#define MOECOMP_SINKHORN_VECTOR 1
#endif

MOECOMP_NAMESPACE_BEGIN
namespace ot {
namespace detail {

/// Sum of 16 partial sums in a fixed tree order.
inline double sum16(const double* p) {
  double h[8];
  for (int l = 0; l < 8; ++l) h[l] = p[l] + p[l + 8];
  return ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
}

/// a * b + c, fused into one rounding exactly when the target has a fast fused multiply-add. Written out
/// rather than left to the compiler: whether it contracts a * b + c is its choice per inlined copy, so two
/// loops computing the same sums could otherwise differ in the last bit.
inline double multiply_add(double a, double b, double c) noexcept {
#if defined(FP_FAST_FMA) || defined(__FP_FAST_FMA)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

/// s + x_j y_j for j = begin, ..., m - 1 in order: a dot product's terms after its 16-lane part.
template <class X, class Y>
inline double dot_tail(const X* x, const Y* y, index_t begin, index_t m, double s) {
  for (index_t j = begin; j < m; ++j) s = multiply_add(static_cast<double>(x[j]), static_cast<double>(y[j]), s);
  return s;
}

/// col_j += u0 x0_j, then col_j += u1 x1_j, for j in [begin, m).
template <class T>
inline void axpy2_columns(double* col, double u0, const T* x0, double u1, const T* x1, index_t begin, index_t m) {
  for (index_t j = begin; j < m; ++j) {
    col[j] = multiply_add(u1, static_cast<double>(x1[j]), multiply_add(u0, static_cast<double>(x0[j]), col[j]));
  }
}

#if defined(MOECOMP_SINKHORN_VECTOR)

#if defined(__AVX512F__)
constexpr int kernel_lanes = 8;
#elif defined(__AVX__)
constexpr int kernel_lanes = 4;
#else
constexpr int kernel_lanes = 2;
#endif
constexpr int kernel_vectors = 16 / kernel_lanes;  // vectors holding the 16 partial sums

typedef double kernel_double_vector __attribute__((vector_size(kernel_lanes * sizeof(double))));
typedef float kernel_float_vector __attribute__((vector_size(kernel_lanes * sizeof(float))));

inline kernel_double_vector load_widened(const double* p) noexcept {
  kernel_double_vector x;
  std::memcpy(&x, p, sizeof x);
  return x;
}

inline kernel_double_vector load_widened(const float* p) noexcept {
#if defined(__AVX512F__)
  return _mm512_maskz_cvtps_pd(static_cast<__mmask8>(0xff), _mm256_loadu_ps(p));  // maskz: GCC 12 warns on the unmasked form
#elif defined(__AVX__)
  return _mm256_cvtps_pd(_mm_loadu_ps(p));  // GCC 12 splits __builtin_convertvector into 128-bit halves
#else
  kernel_float_vector x;
  std::memcpy(&x, p, sizeof x);
  return __builtin_convertvector(x, kernel_double_vector);
#endif
}

inline void store(double* p, kernel_double_vector x) noexcept { std::memcpy(p, &x, sizeof x); }

/// a * b + c lane by lane, fused exactly when the scalar multiply_add is.
inline kernel_double_vector multiply_add(kernel_double_vector a, kernel_double_vector b,
                                         kernel_double_vector c) noexcept {
#if defined(__AVX512F__)
  return _mm512_fmadd_pd(a, b, c);
#elif defined(__FMA__)
  return _mm256_fmadd_pd(a, b, c);
#elif defined(FP_FAST_FMA) || defined(__FP_FAST_FMA)
  for (int l = 0; l < kernel_lanes; ++l) c[l] = std::fma(a[l], b[l], c[l]);
  return c;
#else
  return a * b + c;
#endif
}

inline kernel_double_vector broadcast(double x) noexcept {
  kernel_double_vector v;
  for (int l = 0; l < kernel_lanes; ++l) v[l] = x;
  return v;
}

/// The 16 partial sums held in kernel_vectors vectors, added in sum16's order.
inline double sum_partials(const kernel_double_vector* partial) noexcept {
  double p[16];
  std::memcpy(p, partial, sizeof p);
  return sum16(p);
}

template <class T>
inline void kernel_dot2(const T* x0, const T* x1, const double* y, index_t m, double& s0, double& s1) {
  kernel_double_vector p[kernel_vectors], q[kernel_vectors];
  for (int k = 0; k < kernel_vectors; ++k) p[k] = q[k] = kernel_double_vector{};
  index_t j = 0;
  for (; j + 16 <= m; j += 16)
    for (int k = 0; k < kernel_vectors; ++k) {
      const kernel_double_vector yk = load_widened(y + j + k * kernel_lanes);
      p[k] = multiply_add(load_widened(x0 + j + k * kernel_lanes), yk, p[k]);
      q[k] = multiply_add(load_widened(x1 + j + k * kernel_lanes), yk, q[k]);
    }
  s0 = dot_tail(x0, y, j, m, sum_partials(p));
  s1 = dot_tail(x1, y, j, m, sum_partials(q));
}

template <class X, class Y>
inline double kernel_dot(const X* x, const Y* y, index_t m) {
  kernel_double_vector p[kernel_vectors];
  for (int k = 0; k < kernel_vectors; ++k) p[k] = kernel_double_vector{};
  index_t j = 0;
  for (; j + 16 <= m; j += 16)
    for (int k = 0; k < kernel_vectors; ++k)
      p[k] = multiply_add(load_widened(x + j + k * kernel_lanes), load_widened(y + j + k * kernel_lanes), p[k]);
  return dot_tail(x, y, j, m, sum_partials(p));
}

template <class T>
inline void kernel_axpy2(double* col, double u0, const T* x0, double u1, const T* x1, index_t m) {
  const kernel_double_vector u0v = broadcast(u0), u1v = broadcast(u1);
  index_t j = 0;
  for (; j + 2 * kernel_lanes <= m; j += 2 * kernel_lanes) {
    kernel_double_vector c0 = load_widened(col + j), c1 = load_widened(col + j + kernel_lanes);
    c0 = multiply_add(u0v, load_widened(x0 + j), c0);
    c1 = multiply_add(u0v, load_widened(x0 + j + kernel_lanes), c1);
    c0 = multiply_add(u1v, load_widened(x1 + j), c0);
    c1 = multiply_add(u1v, load_widened(x1 + j + kernel_lanes), c1);
    store(col + j, c0);
    store(col + j + kernel_lanes, c1);
  }
  axpy2_columns(col, u0, x0, u1, x1, j, m);
}

/// kernel_axpy2(col, u0, x0, u1, x1) and kernel_dot2(z0, z1, y) in one loop: the rows z (read from memory)
/// stream in while the rows x (just read, in L1) are added, which overlaps the two. Bit-identical to the two
/// calls.
template <class T>
inline void kernel_axpy2_dot2(double* col, double u0, const T* x0, double u1, const T* x1, const T* z0, const T* z1,
                              const double* y, index_t m, double& s0, double& s1) {
  const kernel_double_vector u0v = broadcast(u0), u1v = broadcast(u1);
  kernel_double_vector p[kernel_vectors], q[kernel_vectors];
  for (int k = 0; k < kernel_vectors; ++k) p[k] = q[k] = kernel_double_vector{};
  index_t j = 0;
  for (; j + 16 <= m; j += 16)
    for (int k = 0; k < kernel_vectors; ++k) {
      const index_t at = j + k * kernel_lanes;
      const kernel_double_vector yk = load_widened(y + at);
      p[k] = multiply_add(load_widened(z0 + at), yk, p[k]);
      q[k] = multiply_add(load_widened(z1 + at), yk, q[k]);
      kernel_double_vector c = load_widened(col + at);
      c = multiply_add(u0v, load_widened(x0 + at), c);
      c = multiply_add(u1v, load_widened(x1 + at), c);
      store(col + at, c);
    }
  s0 = dot_tail(z0, y, j, m, sum_partials(p));
  s1 = dot_tail(z1, y, j, m, sum_partials(q));
  axpy2_columns(col, u0, x0, u1, x1, j, m);
}

#else  // scalar loops with the same partial sums

template <class X, class Y>
inline double kernel_dot(const X* x, const Y* y, index_t m) {
  double p[16] = {};
  index_t j = 0;
  for (; j + 16 <= m; j += 16)
    for (int l = 0; l < 16; ++l) p[l] = multiply_add(static_cast<double>(x[j + l]), static_cast<double>(y[j + l]), p[l]);
  return dot_tail(x, y, j, m, sum16(p));
}

template <class T>
inline void kernel_dot2(const T* x0, const T* x1, const double* y, index_t m, double& s0, double& s1) {
  s0 = kernel_dot(x0, y, m);
  s1 = kernel_dot(x1, y, m);
}

template <class T>
inline void kernel_axpy2(double* col, double u0, const T* x0, double u1, const T* x1, index_t m) {
  axpy2_columns(col, u0, x0, u1, x1, 0, m);
}

template <class T>
inline void kernel_axpy2_dot2(double* col, double u0, const T* x0, double u1, const T* x1, const T* z0, const T* z1,
                              const double* y, index_t m, double& s0, double& s1) {
  kernel_axpy2(col, u0, x0, u1, x1, m);
  kernel_dot2(z0, z1, y, m, s0, s1);
}

#endif

template <class T>
inline void kernel_axpy(double* col, double u0, const T* x0, index_t m) {
  for (index_t j = 0; j < m; ++j) col[j] = multiply_add(u0, static_cast<double>(x0[j]), col[j]);
}

}  // namespace detail
}  // namespace ot
MOECOMP_NAMESPACE_END
