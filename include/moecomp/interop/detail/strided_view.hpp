#pragma once
// Shared by the interop adaptors: turns a foreign (data, shape, element strides) description into a
// moecomp view, accepting exactly what a row-major view can express and naming the caller and the
// foreign object in every rejection. Includes no foreign library.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace interop {
namespace detail {

inline std::string strides_string(index_t row_stride, index_t col_stride) {
  return ::moecomp::detail::concat("(", row_stride, ", ", col_stride, ")");
}

/// A `rows` x `cols` view of `data`, element (i, j) at data[i * row_stride + j * col_stride]. The stride
/// of an axis of extent <= 1 is never used, so it is ignored (xtensor stores 0 there, PyTorch anything).
/// `function` and `source` name the caller and the foreign object in messages ("as_matrix_view",
/// "DLTensor").
template <class T, class Space>
matrix_view<T, Space> matrix_from_strides(const char* function, const char* source, T* data, index_t rows, index_t cols,
                                          index_t row_stride, index_t col_stride) {
  MOECOMP_EXPECTS(rows >= 0 && cols >= 0, function, ": ", source, " shape must be non-negative, got ",
                  ::moecomp::detail::shape_string(rows, cols));
  if (rows > 1 && cols > 1 && col_stride != 1 && row_stride == 1) {
    MOECOMP_FAIL(error_kind::invalid_argument, function, ": ", source, " is column-major (strides ",
                 strides_string(row_stride, col_stride), " for shape ", ::moecomp::detail::shape_string(rows, cols),
                 "); a matrix_view needs row-major rows with inner stride 1");
  }
  MOECOMP_EXPECTS(cols <= 1 || col_stride == 1, function, ": ", source,
                  " inner (column) stride must be 1, got strides ", strides_string(row_stride, col_stride),
                  " for shape ", ::moecomp::detail::shape_string(rows, cols));
  MOECOMP_EXPECTS(rows <= 1 || row_stride >= cols, function, ": ", source, " row stride must be >= cols (", cols,
                  "), got strides ", strides_string(row_stride, col_stride), " for shape ",
                  ::moecomp::detail::shape_string(rows, cols));
  MOECOMP_EXPECTS(rows == 0 || cols == 0 || data != nullptr, function, ": ", source, " data is null but shape is ",
                  ::moecomp::detail::shape_string(rows, cols));
  return matrix_view<T, Space>(data, rows, cols, rows <= 1 ? cols : row_stride);
}

/// `count` matrices of `rows` x `cols`, element (e, i, j) at data[e * matrix_stride + i * row_stride +
/// j * col_stride]: each matrix as matrix_from_strides, and matrices that never share an element (the
/// matrix stride of an extent-1 axis is ignored, as the other strides).
template <class T, class Space>
matrix_stack_view<T, Space> stack_from_strides(const char* function, const char* source, T* data, index_t count,
                                               index_t rows, index_t cols, index_t matrix_stride, index_t row_stride,
                                               index_t col_stride) {
  MOECOMP_EXPECTS(count >= 0, function, ": ", source, " count (first extent) must be non-negative, got ", count);
  const matrix_view<T, Space> first = matrix_from_strides<T, Space>(function, source, data, rows, cols, row_stride,
                                                                    col_stride);
  const index_t span = rows * first.row_stride();
  MOECOMP_EXPECTS(count <= 1 || rows == 0 || cols == 0 || matrix_stride >= span, function, ": ", source,
                  " matrix stride (first axis) must be >= rows * row stride (", span, ") so that matrices do not "
                  "overlap, got ", matrix_stride, " for shape ", count, " x ",
                  ::moecomp::detail::shape_string(rows, cols));
  return matrix_stack_view<T, Space>(data, count, rows, cols, first.row_stride(),
                                     count <= 1 || rows == 0 || cols == 0 ? span : matrix_stride);
}

/// `size` elements of `data`, `stride` apart (ignored when size <= 1).
template <class T, class Space>
vector_view<T, Space> vector_from_stride(const char* function, const char* source, T* data, index_t size,
                                         index_t stride) {
  MOECOMP_EXPECTS(size >= 0, function, ": ", source, " size must be non-negative, got ", size);
  MOECOMP_EXPECTS(size <= 1 || stride >= 1, function, ": ", source, " stride must be >= 1, got ", stride, " for size ",
                  size);
  MOECOMP_EXPECTS(size == 0 || data != nullptr, function, ": ", source, " data is null but size is ", size);
  return vector_view<T, Space>(data, size, size <= 1 ? 1 : stride);
}

}  // namespace detail
}  // namespace interop
MOECOMP_NAMESPACE_END
