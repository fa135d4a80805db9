#pragma once
// Owning host containers, for the convenience overloads that return results and for tests and tools.
// Algorithms never take these: they take views (views.hpp), so callers keep their own memory.
#include <moecomp/core/views.hpp>

#include <algorithm>
#include <limits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN

/// A contiguous row-major rows x cols matrix in a std::vector, value-initialised.
template <class T>
class host_matrix {
 public:
  host_matrix() = default;
  host_matrix(index_t rows, index_t cols) : rows_(rows), cols_(cols) {
    MOECOMP_EXPECTS(rows >= 0 && cols >= 0, "host_matrix: shape must be non-negative, got ",
                    detail::shape_string(rows, cols));
    MOECOMP_EXPECTS(cols == 0 || rows <= std::numeric_limits<index_t>::max() / cols,
                    "host_matrix: rows * cols overflows (", detail::shape_string(rows, cols), ")");
    storage_.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
  }
  host_matrix(index_t rows, index_t cols, const T& value) : host_matrix(rows, cols) {
    std::fill(storage_.begin(), storage_.end(), value);
  }

  index_t rows() const noexcept { return rows_; }
  index_t cols() const noexcept { return cols_; }
  index_t size() const noexcept { return rows_ * cols_; }
  T* data() noexcept { return storage_.data(); }
  const T* data() const noexcept { return storage_.data(); }
  T& operator()(index_t i, index_t j) noexcept { return storage_[static_cast<std::size_t>(i * cols_ + j)]; }
  const T& operator()(index_t i, index_t j) const noexcept {
    return storage_[static_cast<std::size_t>(i * cols_ + j)];
  }

  matrix_view<T> view() noexcept { return {storage_.data(), rows_, cols_, cols_}; }
  matrix_view<const T> view() const noexcept { return {storage_.data(), rows_, cols_, cols_}; }
  matrix_view<const T> const_view() const noexcept { return view(); }
  std::vector<T>& storage() noexcept { return storage_; }
  const std::vector<T>& storage() const noexcept { return storage_; }

 private:
  index_t rows_ = 0;
  index_t cols_ = 0;
  std::vector<T> storage_;
};

/// A contiguous vector in a std::vector, value-initialised.
template <class T>
class host_vector {
 public:
  host_vector() = default;
  explicit host_vector(index_t size) {
    MOECOMP_EXPECTS(size >= 0, "host_vector: size must be >= 0, got ", size);
    storage_.resize(static_cast<std::size_t>(size));
  }
  index_t size() const noexcept { return static_cast<index_t>(storage_.size()); }
  T* data() noexcept { return storage_.data(); }
  const T* data() const noexcept { return storage_.data(); }
  T& operator[](index_t i) noexcept { return storage_[static_cast<std::size_t>(i)]; }
  const T& operator[](index_t i) const noexcept { return storage_[static_cast<std::size_t>(i)]; }
  T& operator()(index_t i) noexcept { return storage_[static_cast<std::size_t>(i)]; }
  const T& operator()(index_t i) const noexcept { return storage_[static_cast<std::size_t>(i)]; }

  vector_view<T> view() noexcept { return {storage_.data(), size(), 1}; }
  vector_view<const T> view() const noexcept { return {storage_.data(), size(), 1}; }
  vector_view<const T> const_view() const noexcept { return view(); }
  std::vector<T>& storage() noexcept { return storage_; }
  const std::vector<T>& storage() const noexcept { return storage_; }

 private:
  std::vector<T> storage_;
};

MOECOMP_NAMESPACE_END
