#pragma once
// Non-owning views: the only data type in moecomp's public signatures.
//
// vector_view<T, Space>: `size` elements `stride` apart.
// matrix_view<T, Space>: `rows` x `cols`, row-major, element (i, j) at data[i * row_stride + j].
// matrix_stack_view<T, Space>: `count` matrices of `rows` x `cols` (stacks of experts, batches of problems).
//
// `T` may be const-qualified (read-only input). `Space` is host_memory or device_memory: a view of one
// space never converts to the other, so handing device memory to a host algorithm does not compile. A
// mutable view converts implicitly to a const view of the same space. Views are trivially copyable, so
// they can be passed by value into CUDA kernels; element access with operator() is host-only, device code
// uses row_ptr() / data().
#include <moecomp/core/error.hpp>
#include <moecomp/core/memory_space.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN

/// Signed index type of every size, stride and index in moecomp.
using index_t = std::int64_t;

namespace detail {
inline std::string shape_string(index_t rows, index_t cols) { return concat(rows, " x ", cols); }
template <class U, class T>
inline constexpr bool is_const_conversion_v =
    std::is_same_v<std::add_const_t<U>, T> && !std::is_same_v<U, T>;
}  // namespace detail

template <class T, class Space = host_memory>
class vector_view {
  static_assert(is_memory_space_v<Space>, "vector_view: Space must be host_memory or device_memory");

 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using memory_space = Space;

  constexpr vector_view() noexcept = default;

  /// `size` elements starting at `data`, `stride` elements apart (stride >= 1).
  vector_view(T* data, index_t size, index_t stride = 1) : data_(data), size_(size), stride_(stride) {
    MOECOMP_EXPECTS(size >= 0, "vector_view: size must be >= 0, got ", size);
    MOECOMP_EXPECTS(stride >= 1, "vector_view: stride must be >= 1, got ", stride);
    MOECOMP_EXPECTS(size == 0 || data != nullptr, "vector_view: data is null but size is ", size);
    MOECOMP_EXPECTS(size <= std::numeric_limits<index_t>::max() / stride,
                    "vector_view: size * stride overflows (", size, " x ", stride, ")");
  }

  /// Mutable -> const view of the same memory space (never across spaces).
  template <class U, std::enable_if_t<detail::is_const_conversion_v<U, T>, int> = 0>
  constexpr vector_view(const vector_view<U, Space>& other) noexcept  // NOLINT(implicit)
      : data_(other.data()), size_(other.size()), stride_(other.stride()) {}

  MOECOMP_HOST_DEVICE constexpr T* data() const noexcept { return data_; }
  MOECOMP_HOST_DEVICE constexpr index_t size() const noexcept { return size_; }
  MOECOMP_HOST_DEVICE constexpr index_t stride() const noexcept { return stride_; }
  MOECOMP_HOST_DEVICE constexpr bool empty() const noexcept { return size_ == 0; }
  MOECOMP_HOST_DEVICE constexpr bool is_contiguous() const noexcept { return stride_ == 1 || size_ <= 1; }
  /// Address of element i (no dereference, so usable for any memory space).
  MOECOMP_HOST_DEVICE constexpr T* ptr(index_t i) const noexcept { return data_ + i * stride_; }

  /// Element i. Host memory only; unchecked.
  template <class S = Space, std::enable_if_t<std::is_same_v<S, host_memory>, int> = 0>
  constexpr T& operator()(index_t i) const noexcept {
    return data_[i * stride_];
  }
  template <class S = Space, std::enable_if_t<std::is_same_v<S, host_memory>, int> = 0>
  constexpr T& operator[](index_t i) const noexcept {
    return data_[i * stride_];
  }

  /// Elements [first, first + count).
  vector_view subview(index_t first, index_t count) const {
    // Written as count <= size_ - first so that huge arguments cannot overflow inside the check itself.
    MOECOMP_EXPECTS(first >= 0 && count >= 0 && first <= size_ && count <= size_ - first,
                    "vector_view::subview: ", count, " elements from ", first, " do not fit in a vector of size ",
                    size_);
    return count == 0 ? vector_view() : vector_view(ptr(first), count, stride_);
  }

  constexpr vector_view<const value_type, Space> as_const() const noexcept { return *this; }

 private:
  T* data_ = nullptr;
  index_t size_ = 0;
  index_t stride_ = 1;
};

template <class T, class Space = host_memory>
class matrix_view {
  static_assert(is_memory_space_v<Space>, "matrix_view: Space must be host_memory or device_memory");

 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using memory_space = Space;

  constexpr matrix_view() noexcept = default;

  /// `rows` x `cols` row-major matrix at `data`, rows `row_stride` elements apart (row_stride >= cols).
  matrix_view(T* data, index_t rows, index_t cols, index_t row_stride)
      : data_(data), rows_(rows), cols_(cols), row_stride_(row_stride) {
    MOECOMP_EXPECTS(rows >= 0 && cols >= 0, "matrix_view: shape must be non-negative, got ",
                    detail::shape_string(rows, cols));
    MOECOMP_EXPECTS(row_stride >= cols, "matrix_view: row_stride must be >= cols (", cols, "), got ", row_stride);
    MOECOMP_EXPECTS(rows == 0 || cols == 0 || data != nullptr, "matrix_view: data is null but shape is ",
                    detail::shape_string(rows, cols));
    MOECOMP_EXPECTS(row_stride == 0 || rows <= std::numeric_limits<index_t>::max() / row_stride,
                    "matrix_view: rows * row_stride overflows (", rows, " x ", row_stride, ")");
  }
  /// Contiguous `rows` x `cols` matrix (row_stride = cols).
  matrix_view(T* data, index_t rows, index_t cols) : matrix_view(data, rows, cols, cols) {}

  /// Mutable -> const view of the same memory space (never across spaces).
  template <class U, std::enable_if_t<detail::is_const_conversion_v<U, T>, int> = 0>
  constexpr matrix_view(const matrix_view<U, Space>& other) noexcept  // NOLINT(implicit)
      : data_(other.data()), rows_(other.rows()), cols_(other.cols()), row_stride_(other.row_stride()) {}

  MOECOMP_HOST_DEVICE constexpr T* data() const noexcept { return data_; }
  MOECOMP_HOST_DEVICE constexpr index_t rows() const noexcept { return rows_; }
  MOECOMP_HOST_DEVICE constexpr index_t cols() const noexcept { return cols_; }
  MOECOMP_HOST_DEVICE constexpr index_t row_stride() const noexcept { return row_stride_; }
  MOECOMP_HOST_DEVICE constexpr index_t size() const noexcept { return rows_ * cols_; }
  MOECOMP_HOST_DEVICE constexpr bool empty() const noexcept { return rows_ == 0 || cols_ == 0; }
  MOECOMP_HOST_DEVICE constexpr bool is_contiguous() const noexcept { return row_stride_ == cols_ || rows_ <= 1; }
  /// Address of row i (no dereference, so usable for any memory space).
  MOECOMP_HOST_DEVICE constexpr T* row_ptr(index_t i) const noexcept { return data_ + i * row_stride_; }

  /// Element (i, j). Host memory only; unchecked.
  template <class S = Space, std::enable_if_t<std::is_same_v<S, host_memory>, int> = 0>
  constexpr T& operator()(index_t i, index_t j) const noexcept {
    return data_[i * row_stride_ + j];
  }

  /// Row i as a contiguous vector.
  vector_view<T, Space> row(index_t i) const {
    MOECOMP_EXPECTS(i >= 0 && i < rows_, "matrix_view::row: index ", i, " is outside [0, ", rows_, ")");
    return cols_ == 0 ? vector_view<T, Space>() : vector_view<T, Space>(row_ptr(i), cols_, 1);
  }
  /// Column j as a strided vector.
  vector_view<T, Space> column(index_t j) const {
    MOECOMP_EXPECTS(j >= 0 && j < cols_, "matrix_view::column: index ", j, " is outside [0, ", cols_, ")");
    return rows_ == 0 ? vector_view<T, Space>() : vector_view<T, Space>(data_ + j, rows_, row_stride_ > 0 ? row_stride_ : 1);
  }
  /// The block of `rows` x `cols` starting at (first_row, first_col), sharing this view's row stride.
  matrix_view block(index_t first_row, index_t first_col, index_t rows, index_t cols) const {
    // Differences, not sums, so that huge arguments cannot overflow inside the check itself.
    MOECOMP_EXPECTS(first_row >= 0 && first_col >= 0 && rows >= 0 && cols >= 0 && first_row <= rows_ &&
                        first_col <= cols_ && rows <= rows_ - first_row && cols <= cols_ - first_col,
                    "matrix_view::block: ", detail::shape_string(rows, cols), " at (", first_row, ", ", first_col,
                    ") does not fit in ", detail::shape_string(rows_, cols_));
    if (rows == 0 || cols == 0) return matrix_view(nullptr, rows, cols, cols);
    return matrix_view(data_ + first_row * row_stride_ + first_col, rows, cols, row_stride_);
  }
  /// Rows [first, first + count).
  matrix_view row_range(index_t first, index_t count) const { return block(first, 0, count, cols_); }

  constexpr matrix_view<const value_type, Space> as_const() const noexcept { return *this; }

 private:
  T* data_ = nullptr;
  index_t rows_ = 0;
  index_t cols_ = 0;
  index_t row_stride_ = 0;
};

/// A stack of `count` matrices of one shape `rows` x `cols`: expert weights (E x d_ff x d), per-expert
/// activations (E x n x d), a batch of cost matrices (B x n x m). Element (e, i, j) is at
/// data[e * matrix_stride + i * row_stride + j]: the rank-3 strided view of a C-contiguous E x rows x cols
/// array (numpy, torch, DLPack), of one matrix cut into equal row blocks (matrix_stride = rows * row_stride),
/// or of padded matrices. Same rules as matrix_view: const element types for inputs, one memory space,
/// trivially copyable, operator() on the host only.
template <class T, class Space = host_memory>
class matrix_stack_view {
  static_assert(is_memory_space_v<Space>, "matrix_stack_view: Space must be host_memory or device_memory");

 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using memory_space = Space;

  constexpr matrix_stack_view() noexcept = default;

  /// `count` matrices of `rows` x `cols` at `data`, rows `row_stride` elements apart (>= cols), matrices
  /// `matrix_stride` elements apart (>= rows * row_stride, so that matrices never share an element).
  matrix_stack_view(T* data, index_t count, index_t rows, index_t cols, index_t row_stride, index_t matrix_stride)
      : data_(data), count_(count), rows_(rows), cols_(cols), row_stride_(row_stride), matrix_stride_(matrix_stride) {
    MOECOMP_EXPECTS(count >= 0 && rows >= 0 && cols >= 0, "matrix_stack_view: shape must be non-negative, got ",
                    count, " x ", detail::shape_string(rows, cols));
    MOECOMP_EXPECTS(row_stride >= cols, "matrix_stack_view: row_stride must be >= cols (", cols, "), got ", row_stride);
    MOECOMP_EXPECTS(row_stride == 0 || rows <= std::numeric_limits<index_t>::max() / row_stride,
                    "matrix_stack_view: rows * row_stride overflows (", rows, " x ", row_stride, ")");
    // One matrix needs no matrix stride (DLPack producers may give any stride for an extent of 1).
    MOECOMP_EXPECTS(count <= 1 || matrix_stride >= rows * row_stride,
                    "matrix_stack_view: matrix_stride must be >= rows * row_stride (", rows * row_stride, "), got ",
                    matrix_stride);
    MOECOMP_EXPECTS(matrix_stride >= 0, "matrix_stack_view: matrix_stride must be >= 0, got ", matrix_stride);
    MOECOMP_EXPECTS(matrix_stride == 0 || count <= std::numeric_limits<index_t>::max() / matrix_stride,
                    "matrix_stack_view: count * matrix_stride overflows (", count, " x ", matrix_stride, ")");
    MOECOMP_EXPECTS(count == 0 || rows == 0 || cols == 0 || data != nullptr, "matrix_stack_view: data is null but shape is ",
                    count, " x ", detail::shape_string(rows, cols));
  }
  /// Contiguous stack (row_stride = cols, matrix_stride = rows * cols).
  matrix_stack_view(T* data, index_t count, index_t rows, index_t cols)
      : matrix_stack_view(data, count, rows, cols, cols, checked_product(rows, cols)) {}

  /// Gathered stack (host memory only): matrix e at `matrices[e]`, each `rows` x `cols` with rows `row_stride`
  /// elements apart. The matrices may lie anywhere and may repeat: experts read in place from a checkpoint's
  /// mapping, whose tensors are not evenly spaced (model::map_moe_layer). `matrices` (count pointers) must outlive
  /// the view and its copies. A gathered stack has no matrix stride (matrix_stride() is 0, data() is matrix 0):
  /// address matrix e through matrix(e), matrix_ptr(e), row_ptr or operator(), never data() + e * stride.
  template <class S = Space, std::enable_if_t<std::is_same_v<S, host_memory>, int> = 0>
  matrix_stack_view(T* const* matrices, index_t count, index_t rows, index_t cols, index_t row_stride)
      : data_(count > 0 && matrices != nullptr ? matrices[0] : nullptr),
        table_(matrices),
        count_(count),
        rows_(rows),
        cols_(cols),
        row_stride_(row_stride) {
    MOECOMP_EXPECTS(count >= 0 && rows >= 0 && cols >= 0, "matrix_stack_view: shape must be non-negative, got ",
                    count, " x ", detail::shape_string(rows, cols));
    MOECOMP_EXPECTS(row_stride >= cols, "matrix_stack_view: row_stride must be >= cols (", cols, "), got ", row_stride);
    MOECOMP_EXPECTS(count == 0 || matrices != nullptr, "matrix_stack_view: matrices is null but count is ", count);
    for (index_t e = 0; e < count && rows > 0 && cols > 0; ++e)
      MOECOMP_EXPECTS(matrices[e] != nullptr, "matrix_stack_view: matrices[", e, "] is null");
  }

  /// Mutable -> const view of the same memory space (never across spaces).
  template <class U, std::enable_if_t<detail::is_const_conversion_v<U, T>, int> = 0>
  constexpr matrix_stack_view(const matrix_stack_view<U, Space>& other) noexcept  // NOLINT(implicit)
      : data_(other.data()),
        table_(other.matrix_table()),
        count_(other.count()),
        rows_(other.rows()),
        cols_(other.cols()),
        row_stride_(other.row_stride()),
        matrix_stride_(other.matrix_stride()) {}

  MOECOMP_HOST_DEVICE constexpr T* data() const noexcept { return data_; }
  MOECOMP_HOST_DEVICE constexpr index_t count() const noexcept { return count_; }
  MOECOMP_HOST_DEVICE constexpr index_t rows() const noexcept { return rows_; }
  MOECOMP_HOST_DEVICE constexpr index_t cols() const noexcept { return cols_; }
  MOECOMP_HOST_DEVICE constexpr index_t row_stride() const noexcept { return row_stride_; }
  MOECOMP_HOST_DEVICE constexpr index_t matrix_stride() const noexcept { return matrix_stride_; }
  /// Whether the stack is gathered (a table of matrix addresses, host memory only); its table, or null.
  MOECOMP_HOST_DEVICE constexpr bool is_gathered() const noexcept { return table_ != nullptr; }
  MOECOMP_HOST_DEVICE constexpr T* const* matrix_table() const noexcept { return table_; }
  /// count * rows * cols.
  MOECOMP_HOST_DEVICE constexpr index_t size() const noexcept { return count_ * rows_ * cols_; }
  MOECOMP_HOST_DEVICE constexpr bool empty() const noexcept { return count_ == 0 || rows_ == 0 || cols_ == 0; }
  /// The matrices follow each other with no gap, each contiguous: the stack is one (count rows) x cols
  /// contiguous matrix.
  MOECOMP_HOST_DEVICE constexpr bool is_contiguous() const noexcept {
    return (row_stride_ == cols_ || rows_ <= 1) && (count_ <= 1 || (table_ == nullptr && matrix_stride_ == rows_ * row_stride_));
  }
  /// Whether each matrix on its own is contiguous (row_stride == cols): true of a gathered stack of whole tensors.
  MOECOMP_HOST_DEVICE constexpr bool matrices_contiguous() const noexcept { return row_stride_ == cols_ || rows_ <= 1; }
  /// Address of matrix e and of row i of matrix e (no dereference of the data, so usable for any memory space;
  /// a gathered stack reads its host table).
  MOECOMP_HOST_DEVICE constexpr T* matrix_ptr(index_t e) const noexcept {
    return table_ != nullptr ? table_[e] : data_ + e * matrix_stride_;
  }
  MOECOMP_HOST_DEVICE constexpr T* row_ptr(index_t e, index_t i) const noexcept { return matrix_ptr(e) + i * row_stride_; }

  /// Element (e, i, j). Host memory only; unchecked.
  template <class S = Space, std::enable_if_t<std::is_same_v<S, host_memory>, int> = 0>
  constexpr T& operator()(index_t e, index_t i, index_t j) const noexcept {
    return matrix_ptr(e)[i * row_stride_ + j];
  }

  /// Matrix e, a rows x cols view sharing this stack's row stride.
  matrix_view<T, Space> matrix(index_t e) const {
    MOECOMP_EXPECTS(e >= 0 && e < count_, "matrix_stack_view::matrix: index ", e, " is outside [0, ", count_, ")");
    if (rows_ == 0 || cols_ == 0) return matrix_view<T, Space>(nullptr, rows_, cols_, cols_);
    return matrix_view<T, Space>(matrix_ptr(e), rows_, cols_, row_stride_);
  }
  matrix_view<T, Space> operator[](index_t e) const { return matrix(e); }

  /// Matrices [first, first + count).
  matrix_stack_view subrange(index_t first, index_t count) const {
    MOECOMP_EXPECTS(first >= 0 && count >= 0 && first <= count_ && count <= count_ - first,
                    "matrix_stack_view::subrange: ", count, " matrices from ", first,
                    " do not fit in a stack of ", count_);
    if (count == 0 || rows_ == 0 || cols_ == 0)
      return matrix_stack_view(static_cast<T*>(nullptr), count, rows_, cols_, row_stride_, matrix_stride_);
    if constexpr (std::is_same_v<Space, host_memory>)  // only host stacks are gathered
      if (table_ != nullptr) return matrix_stack_view(table_ + first, count, rows_, cols_, row_stride_);
    return matrix_stack_view(matrix_ptr(first), count, rows_, cols_, row_stride_, matrix_stride_);
  }

  /// The stack as one (count rows) x cols matrix, matrix e being rows [e rows, (e + 1) rows). Possible when
  /// the matrices follow each other at the row stride (matrix_stride == rows * row_stride).
  matrix_view<T, Space> as_matrix() const {
    MOECOMP_EXPECTS(table_ == nullptr || count_ <= 1, "matrix_stack_view::as_matrix: a gathered stack of ", count_,
                    " matrices is not one matrix");
    MOECOMP_EXPECTS(matrix_stride_ == rows_ * row_stride_ || count_ <= 1,
                    "matrix_stack_view::as_matrix: matrix_stride must be rows * row_stride (", rows_ * row_stride_,
                    ") to view the stack as one matrix, got ", matrix_stride_);
    if (empty()) return matrix_view<T, Space>(nullptr, count_ * rows_, cols_, cols_);
    return matrix_view<T, Space>(data_, count_ * rows_, cols_, row_stride_);
  }

  constexpr matrix_stack_view<const value_type, Space> as_const() const noexcept { return *this; }

 private:
  static index_t checked_product(index_t rows, index_t cols) {
    MOECOMP_EXPECTS(rows >= 0 && cols >= 0, "matrix_stack_view: shape must be non-negative, got ",
                    detail::shape_string(rows, cols));
    MOECOMP_EXPECTS(cols == 0 || rows <= std::numeric_limits<index_t>::max() / cols,
                    "matrix_stack_view: rows * cols overflows (", rows, " x ", cols, ")");
    return rows * cols;
  }

  T* data_ = nullptr;
  T* const* table_ = nullptr;  // gathered stacks: matrix e at table_[e]
  index_t count_ = 0;
  index_t rows_ = 0;
  index_t cols_ = 0;
  index_t row_stride_ = 0;
  index_t matrix_stride_ = 0;
};

/// A matrix cut into `count` equal row blocks, as a stack (the stacked-matrix convention: matrix e is rows
/// [e r, (e + 1) r) with r = rows / count). count must divide the rows.
template <class T, class Space>
matrix_stack_view<T, Space> split_rows(matrix_view<T, Space> m, index_t count) {
  MOECOMP_EXPECTS(count >= 1, "split_rows: count must be >= 1, got ", count);
  MOECOMP_EXPECTS(m.rows() % count == 0, "split_rows: the matrix's rows (", m.rows(), ") must be a multiple of count (",
                  count, ")");
  const index_t r = m.rows() / count;
  if (m.empty()) return matrix_stack_view<T, Space>(nullptr, count, r, m.cols(), m.cols(), r * m.cols());
  return matrix_stack_view<T, Space>(m.data(), count, r, m.cols(), m.row_stride(), r * m.row_stride());
}

template <class T>
using host_vector_view = vector_view<T, host_memory>;
template <class T>
using device_vector_view = vector_view<T, device_memory>;
template <class T>
using host_matrix_view = matrix_view<T, host_memory>;
template <class T>
using device_matrix_view = matrix_view<T, device_memory>;

template <class T>
using host_matrix_stack_view = matrix_stack_view<T, host_memory>;
template <class T>
using device_matrix_stack_view = matrix_stack_view<T, device_memory>;

/// View of host memory: make_matrix_view(ptr, rows, cols[, row_stride]).
template <class T>
matrix_view<T, host_memory> make_matrix_view(T* data, index_t rows, index_t cols, index_t row_stride) {
  return {data, rows, cols, row_stride};
}
template <class T>
matrix_view<T, host_memory> make_matrix_view(T* data, index_t rows, index_t cols) {
  return {data, rows, cols, cols};
}
template <class T>
vector_view<T, host_memory> make_vector_view(T* data, index_t size, index_t stride = 1) {
  return {data, size, stride};
}
/// View of device memory (the pointer is not dereferenced on the host).
template <class T>
matrix_view<T, device_memory> make_device_matrix_view(T* data, index_t rows, index_t cols, index_t row_stride) {
  return {data, rows, cols, row_stride};
}
template <class T>
matrix_view<T, device_memory> make_device_matrix_view(T* data, index_t rows, index_t cols) {
  return {data, rows, cols, cols};
}
template <class T>
vector_view<T, device_memory> make_device_vector_view(T* data, index_t size, index_t stride = 1) {
  return {data, size, stride};
}

/// Stacks: make_matrix_stack_view(ptr, count, rows, cols[, row_stride, matrix_stride]) and the device twin.
template <class T>
matrix_stack_view<T, host_memory> make_matrix_stack_view(T* data, index_t count, index_t rows, index_t cols) {
  return {data, count, rows, cols};
}
template <class T>
matrix_stack_view<T, host_memory> make_matrix_stack_view(T* data, index_t count, index_t rows, index_t cols,
                                                         index_t row_stride, index_t matrix_stride) {
  return {data, count, rows, cols, row_stride, matrix_stride};
}
template <class T>
matrix_stack_view<T, device_memory> make_device_matrix_stack_view(T* data, index_t count, index_t rows, index_t cols) {
  return {data, count, rows, cols};
}
template <class T>
matrix_stack_view<T, device_memory> make_device_matrix_stack_view(T* data, index_t count, index_t rows, index_t cols,
                                                                  index_t row_stride, index_t matrix_stride) {
  return {data, count, rows, cols, row_stride, matrix_stride};
}

MOECOMP_NAMESPACE_END
