#pragma once
// Checked views of standard containers and raw 16-bit storage. Documentation: docs/interop.md.
//
//   moecomp::as_matrix_view(container, rows, cols[, row_stride])  std::vector, std::array, C array
//   moecomp::as_matrix_view(c_array_2d)                           T[R][C] -> R x C
//   moecomp::as_vector_view(container)                            std::vector, std::array, C array
//   moecomp::reinterpret_view<To>(view)                           uint16_t / int16_t bits <-> bfloat16 / half
//
// The container forms check the shape against the container's size: without a row stride the size must
// be exactly rows * cols (a mistyped shape fails loudly instead of viewing part of the data); with one,
// the last row must end inside the container. Const containers give const views; temporaries do not
// compile (the view would dangle). For plain pointers use make_matrix_view / make_vector_view from
// <moecomp/core/views.hpp>.
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace interop {
namespace detail {

/// rows x cols (row_stride apart) over `size` contiguous elements of `source`; `exact` demands
/// size == rows * cols (the form without a row stride).
template <class T>
matrix_view<T> checked_matrix(const char* source, T* data, std::size_t size, index_t rows, index_t cols,
                              index_t row_stride, bool exact) {
  MOECOMP_EXPECTS(rows >= 0 && cols >= 0, "as_matrix_view: shape must be non-negative, got ",
                  ::moecomp::detail::shape_string(rows, cols));
  MOECOMP_EXPECTS(row_stride >= cols, "as_matrix_view: row_stride must be >= cols (", cols, "), got ", row_stride);
  const auto available = static_cast<index_t>(size);
  if (exact) {
    const bool product_fits = cols == 0 || rows <= std::numeric_limits<index_t>::max() / cols;
    MOECOMP_EXPECTS(product_fits, "as_matrix_view: ", source, " has ", size,
                    " elements, but rows * cols overflows for shape ", ::moecomp::detail::shape_string(rows, cols));
    MOECOMP_EXPECTS(rows * cols == available, "as_matrix_view: ", source, " has ", size,
                    " elements, expected rows * cols = ", rows * cols, " for shape ",
                    ::moecomp::detail::shape_string(rows, cols));
  } else if (rows > 0 && cols > 0) {
    // The last row ends at (rows - 1) * row_stride + cols; compared without overflow.
    MOECOMP_EXPECTS(cols <= available && rows - 1 <= (available - cols) / row_stride, "as_matrix_view: ", source,
                    " has ", size, " elements, but shape ", ::moecomp::detail::shape_string(rows, cols),
                    " with row_stride ", row_stride, " needs (rows - 1) * row_stride + cols of them");
  }
  return matrix_view<T>(data, rows, cols, row_stride);
}

template <class From, class To>
inline constexpr bool is_16bit_float_bits_v =
    (std::is_same_v<std::remove_cv_t<From>, std::uint16_t> ||
     std::is_same_v<std::remove_cv_t<From>, std::int16_t>)&&(std::is_same_v<std::remove_cv_t<To>, bfloat16> ||
                                                             std::is_same_v<std::remove_cv_t<To>, half>);

template <class From, class To>
using reinterpreted_t =
    std::conditional_t<std::is_const_v<From> || std::is_const_v<To>, const std::remove_cv_t<To>, std::remove_cv_t<To>>;

template <class From, class To>
struct reinterpret_check {
  static_assert(is_16bit_float_bits_v<From, To> || is_16bit_float_bits_v<To, From>,
                "reinterpret_view: only 16-bit storage is reinterpreted here: std::uint16_t / std::int16_t bits "
                "<-> moecomp::bfloat16 / moecomp::half");
  // What makes the reinterpretation sound: same size and alignment, and plain bits on both sides.
  static_assert(sizeof(From) == sizeof(To) && alignof(From) == alignof(To) && std::is_trivially_copyable_v<From> &&
                    std::is_trivially_copyable_v<To> && std::is_standard_layout_v<From> &&
                    std::is_standard_layout_v<To>,
                "reinterpret_view: the two element types must have the same size, alignment and a plain layout");
  static constexpr bool ok = true;
};

}  // namespace detail
}  // namespace interop

// ---------------------------------------------------------------- std::vector
/// rows x cols matrix over a std::vector of exactly rows * cols elements.
template <class T, class A>
matrix_view<T> as_matrix_view(std::vector<T, A>& v, index_t rows, index_t cols) {
  return interop::detail::checked_matrix<T>("std::vector", v.data(), v.size(), rows, cols, cols, true);
}
template <class T, class A>
matrix_view<const T> as_matrix_view(const std::vector<T, A>& v, index_t rows, index_t cols) {
  return interop::detail::checked_matrix<const T>("std::vector", v.data(), v.size(), rows, cols, cols, true);
}
/// rows x cols matrix, rows row_stride apart, whose last row ends inside the std::vector.
template <class T, class A>
matrix_view<T> as_matrix_view(std::vector<T, A>& v, index_t rows, index_t cols, index_t row_stride) {
  return interop::detail::checked_matrix<T>("std::vector", v.data(), v.size(), rows, cols, row_stride, false);
}
template <class T, class A>
matrix_view<const T> as_matrix_view(const std::vector<T, A>& v, index_t rows, index_t cols, index_t row_stride) {
  return interop::detail::checked_matrix<const T>("std::vector", v.data(), v.size(), rows, cols, row_stride, false);
}
template <class T, class A>
matrix_view<T> as_matrix_view(std::vector<T, A>&& v, index_t rows, index_t cols) = delete;  // would dangle
template <class T, class A>
matrix_view<T> as_matrix_view(std::vector<T, A>&& v, index_t rows, index_t cols, index_t row_stride) = delete;

/// The whole std::vector as a contiguous vector_view.
template <class T, class A>
vector_view<T> as_vector_view(std::vector<T, A>& v) {
  return v.empty() ? vector_view<T>() : vector_view<T>(v.data(), static_cast<index_t>(v.size()));
}
template <class T, class A>
vector_view<const T> as_vector_view(const std::vector<T, A>& v) {
  return v.empty() ? vector_view<const T>() : vector_view<const T>(v.data(), static_cast<index_t>(v.size()));
}
template <class T, class A>
vector_view<T> as_vector_view(std::vector<T, A>&& v) = delete;  // would dangle

// ---------------------------------------------------------------- std::array
template <class T, std::size_t N>
matrix_view<T> as_matrix_view(std::array<T, N>& a, index_t rows, index_t cols) {
  return interop::detail::checked_matrix<T>("std::array", a.data(), N, rows, cols, cols, true);
}
template <class T, std::size_t N>
matrix_view<const T> as_matrix_view(const std::array<T, N>& a, index_t rows, index_t cols) {
  return interop::detail::checked_matrix<const T>("std::array", a.data(), N, rows, cols, cols, true);
}
template <class T, std::size_t N>
matrix_view<T> as_matrix_view(std::array<T, N>& a, index_t rows, index_t cols, index_t row_stride) {
  return interop::detail::checked_matrix<T>("std::array", a.data(), N, rows, cols, row_stride, false);
}
template <class T, std::size_t N>
matrix_view<const T> as_matrix_view(const std::array<T, N>& a, index_t rows, index_t cols, index_t row_stride) {
  return interop::detail::checked_matrix<const T>("std::array", a.data(), N, rows, cols, row_stride, false);
}
template <class T, std::size_t N>
matrix_view<T> as_matrix_view(std::array<T, N>&& a, index_t rows, index_t cols) = delete;  // would dangle
template <class T, std::size_t N>
matrix_view<T> as_matrix_view(std::array<T, N>&& a, index_t rows, index_t cols, index_t row_stride) = delete;

template <class T, std::size_t N>
vector_view<T> as_vector_view(std::array<T, N>& a) {
  return N == 0 ? vector_view<T>() : vector_view<T>(a.data(), static_cast<index_t>(N));
}
template <class T, std::size_t N>
vector_view<const T> as_vector_view(const std::array<T, N>& a) {
  return N == 0 ? vector_view<const T>() : vector_view<const T>(a.data(), static_cast<index_t>(N));
}
template <class T, std::size_t N>
vector_view<T> as_vector_view(std::array<T, N>&& a) = delete;  // would dangle

// ---------------------------------------------------------------- C arrays (T may be const)
template <class T, std::size_t N, std::enable_if_t<!std::is_array_v<T>, int> = 0>
matrix_view<T> as_matrix_view(T (&a)[N], index_t rows, index_t cols) {
  return interop::detail::checked_matrix<T>("C array", a, N, rows, cols, cols, true);
}
template <class T, std::size_t N, std::enable_if_t<!std::is_array_v<T>, int> = 0>
matrix_view<T> as_matrix_view(T (&a)[N], index_t rows, index_t cols, index_t row_stride) {
  return interop::detail::checked_matrix<T>("C array", a, N, rows, cols, row_stride, false);
}
/// T[R][C] -> R x C, contiguous (the shape comes from the type).
template <class T, std::size_t R, std::size_t C>
matrix_view<T> as_matrix_view(T (&a)[R][C]) {
  return matrix_view<T>(&a[0][0], static_cast<index_t>(R), static_cast<index_t>(C));
}
template <class T, std::size_t N, std::enable_if_t<!std::is_array_v<T>, int> = 0>
vector_view<T> as_vector_view(T (&a)[N]) {
  return vector_view<T>(a, static_cast<index_t>(N));
}

// ---------------------------------------------------------------- 16-bit float storage
/// Views 16-bit storage as another 16-bit type: raw std::uint16_t / std::int16_t bits (from a file, a
/// framework without a bf16 type, __nv_bfloat16 / __half buffers read as integers) as moecomp::bfloat16
/// / moecomp::half, or back. Same memory, shape and strides; works for either memory space; const is
/// kept (and added if To is const). No other pairs compile.
template <class To, class From, class Space>
matrix_view<interop::detail::reinterpreted_t<From, To>, Space> reinterpret_view(matrix_view<From, Space> view) {
  static_assert(interop::detail::reinterpret_check<std::remove_cv_t<From>, std::remove_cv_t<To>>::ok);
  using R = interop::detail::reinterpreted_t<From, To>;
  return matrix_view<R, Space>(reinterpret_cast<R*>(view.data()), view.rows(), view.cols(), view.row_stride());
}
template <class To, class From, class Space>
vector_view<interop::detail::reinterpreted_t<From, To>, Space> reinterpret_view(vector_view<From, Space> view) {
  static_assert(interop::detail::reinterpret_check<std::remove_cv_t<From>, std::remove_cv_t<To>>::ok);
  using R = interop::detail::reinterpreted_t<From, To>;
  return vector_view<R, Space>(reinterpret_cast<R*>(view.data()), view.size(), view.stride());
}

MOECOMP_NAMESPACE_END
