#pragma once
// Eigen <-> moecomp views, without copies. Documentation: docs/interop.md.
//
//   moecomp::as_matrix_view(m)      row-major Matrix / Array, Map, Ref, Block -> matrix_view<T>
//   moecomp::as_transposed_view(m)  column-major one -> the cols x rows view of its transpose
//   moecomp::as_vector_view(v)      any compile-time vector (VectorX, RowVectorX, row(i), col(j), maps
//                                   with InnerStride) -> vector_view<T> with the vector's stride
//   moecomp::as_eigen(view)         matrix_view<T> -> Map<Matrix<T, Dynamic, Dynamic, RowMajor>, 0,
//                                   OuterStride<>>; vector_view<T> -> Map<VectorX<T>, 0, InnerStride<>>
//
// T is const whenever the Eigen object is read-only (a const matrix, Map<const ...>, Ref<const ...>, a
// block of a const matrix), so a view never grants writes Eigen would not. Views never own: the Eigen
// object must outlive them. Temporaries that own their storage (a Matrix returned by value, a
// Ref<const ...> that may hold a private copy) are rejected at compile time; temporary Maps and Blocks are
// fine, since the memory they refer to lives elsewhere.
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/interop/detail/strided_view.hpp>

#include <moecomp/core/detail/eigen.hpp>

#include <type_traits>
#include <utility>

MOECOMP_NAMESPACE_BEGIN
namespace interop {

namespace detail {
template <class D>
std::true_type eigen_dense_test(const Eigen::DenseBase<D>*);
std::false_type eigen_dense_test(...);
template <class D>
std::true_type eigen_map_base_test(const Eigen::MapBase<D, Eigen::ReadOnlyAccessors>*);
std::false_type eigen_map_base_test(...);

template <class M>
struct is_eigen_ref_to_const : std::false_type {};
template <class P, int Options, class S>
struct is_eigen_ref_to_const<Eigen::Ref<const P, Options, S>> : std::true_type {};

template <class T>
using remove_cvref_t = std::remove_cv_t<std::remove_reference_t<T>>;
}  // namespace detail

/// True for Eigen dense objects (Matrix, Array, Map, Ref, Block, expressions).
template <class M>
inline constexpr bool is_eigen_dense_v =
    decltype(detail::eigen_dense_test(std::declval<detail::remove_cvref_t<M>*>()))::value;

/// True when as_matrix_view accepts the Eigen type's layout: row-major, or one column at compile time
/// (a column vector is the same in either layout). as_matrix_view static_asserts on it with the message
/// "column-major Eigen matrix: use as_transposed_view() or a RowMajor matrix".
template <class M, class = void>
struct is_row_major_eigen : std::false_type {};
template <class M>
struct is_row_major_eigen<M, std::enable_if_t<is_eigen_dense_v<M>>>
    : std::bool_constant<bool(detail::remove_cvref_t<M>::IsRowMajor) ||
                         detail::remove_cvref_t<M>::ColsAtCompileTime == 1> {};
template <class M>
inline constexpr bool is_row_major_eigen_v = is_row_major_eigen<M>::value;

/// True when the Eigen type has storage a view can point into (Matrix, Array, Map, Ref, direct Blocks),
/// false for lazy expressions (a + b, a * b, a.transpose() of an expression).
template <class M, class = void>
struct has_eigen_storage : std::false_type {};
template <class M>
struct has_eigen_storage<M, std::enable_if_t<is_eigen_dense_v<M>>>
    : std::bool_constant<(int(detail::remove_cvref_t<M>::Flags) & Eigen::DirectAccessBit) != 0> {};
template <class M>
inline constexpr bool has_eigen_storage_v = has_eigen_storage<M>::value;

/// True when a view of an object passed as `E&&` (E deduced by a forwarding reference) cannot dangle
/// once the full expression ends: lvalues, and temporaries that only refer to memory owned elsewhere
/// (Map, Block, Ref to non-const). A temporary Matrix, or a temporary Ref<const ...> (which may hold a
/// private converted copy), would leave the view pointing at freed memory.
template <class E>
inline constexpr bool eigen_view_cannot_dangle_v =
    std::is_lvalue_reference_v<E> ||
    (decltype(detail::eigen_map_base_test(std::declval<detail::remove_cvref_t<E>*>()))::value &&
     !detail::is_eigen_ref_to_const<detail::remove_cvref_t<E>>::value);

/// The Eigen map as_eigen returns for a host matrix_view<T> (const-correct).
template <class T>
using eigen_matrix_map = Eigen::Map<
    std::conditional_t<std::is_const_v<T>,
                       const Eigen::Matrix<std::remove_const_t<T>, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>,
                       Eigen::Matrix<std::remove_const_t<T>, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>,
    Eigen::Unaligned, Eigen::OuterStride<>>;
/// The Eigen map as_eigen returns for a host vector_view<T> (a column vector, const-correct).
template <class T>
using eigen_vector_map =
    Eigen::Map<std::conditional_t<std::is_const_v<T>, const Eigen::Matrix<std::remove_const_t<T>, Eigen::Dynamic, 1>,
                                  Eigen::Matrix<std::remove_const_t<T>, Eigen::Dynamic, 1>>,
               Eigen::Unaligned, Eigen::InnerStride<>>;

namespace detail {
/// Element type of the view of an object passed as E&&: const exactly when Eigen gives read-only data().
template <class E>
using eigen_element_t = std::remove_pointer_t<decltype(std::declval<std::remove_reference_t<E>&>().data())>;

// A class, not a function: its static_asserts fire when it is named, before the caller's body fails on
// a missing data() with a less helpful message.
template <class E>
struct eigen_source_check {
  static_assert(has_eigen_storage_v<E>,
                "moecomp interop: this Eigen expression has no storage of its own (a sum, product, ...); "
                "evaluate it into a Matrix first");
  static_assert(!has_eigen_storage_v<E> || eigen_view_cannot_dangle_v<E>,
                "moecomp interop: this Eigen object is a temporary that owns its storage (a Matrix returned "
                "by value, or a Ref<const ...>); the view would dangle. Keep it in a named variable");
  static constexpr bool ok = true;
};

template <class T>
constexpr void check_eigen_scalar() {
  using value = std::remove_const_t<T>;
  static_assert(!std::is_same_v<value, bfloat16> && !std::is_same_v<value, half>,
                "as_eigen: moecomp::bfloat16 and moecomp::half have no Eigen NumTraits; reinterpret_view the "
                "bits (moecomp/interop/raw.hpp) or convert to float first");
}
}  // namespace detail

}  // namespace interop

/// Row-major Eigen matrix / Map / Ref / Block -> rows x cols matrix_view (const T for read-only objects).
/// The column stride must be 1: checked at compile time where Eigen knows it, at run time otherwise
/// (Map with Stride<Dynamic, Dynamic>), throwing invalid_argument.
template <class E, std::enable_if_t<interop::is_eigen_dense_v<E>, int> = 0>
auto as_matrix_view(E&& m) {
  using M = interop::detail::remove_cvref_t<E>;
  static_assert(interop::detail::eigen_source_check<E>::ok);
  static_assert(interop::is_row_major_eigen_v<M>,
                "column-major Eigen matrix: use as_transposed_view() or a RowMajor matrix");
  static_assert(!interop::has_eigen_storage_v<M> || M::ColsAtCompileTime == 1 ||
                    M::InnerStrideAtCompileTime == Eigen::Dynamic || M::InnerStrideAtCompileTime == 1,
                "as_matrix_view: the Eigen object's column stride is a compile-time constant other than 1; "
                "a matrix_view needs contiguous rows (as_vector_view takes strided vectors)");
  using T = interop::detail::eigen_element_t<E>;
  return interop::detail::matrix_from_strides<T, host_memory>("as_matrix_view", "Eigen object", m.data(),
                                                              index_t(m.rows()), index_t(m.cols()),
                                                              index_t(m.rowStride()), index_t(m.colStride()));
}

/// Eigen has no rank-3 dense type, so stacks use the stacked-matrix convention: a row-major Eigen matrix of
/// (count rows) x cols is `count` matrices of rows x cols, matrix e being rows [e rows, (e + 1) rows) (as
/// split_rows). count must be >= 1 and divide m.rows(); the matrix rules are as_matrix_view's.
template <class E, std::enable_if_t<interop::is_eigen_dense_v<E>, int> = 0>
auto as_matrix_stack_view(E&& m, index_t count) {
  const auto all = as_matrix_view(std::forward<E>(m));
  MOECOMP_EXPECTS(count >= 1, "as_matrix_stack_view: count must be >= 1, got ", count);
  MOECOMP_EXPECTS(all.rows() % count == 0, "as_matrix_stack_view: the Eigen object's rows (", all.rows(),
                  ") must be a multiple of count (", count, ")");
  return split_rows(all, count);
}

/// Column-major Eigen matrix / Map / Ref / Block (or a column vector) -> the cols x rows matrix_view of
/// its transpose: element (i, j) of the view is m(j, i). Its row stride is the matrix's column stride.
template <class E, std::enable_if_t<interop::is_eigen_dense_v<E>, int> = 0>
auto as_transposed_view(E&& m) {
  using M = interop::detail::remove_cvref_t<E>;
  static_assert(interop::detail::eigen_source_check<E>::ok);
  static_assert(!bool(M::IsRowMajor),
                "as_transposed_view: the Eigen object is row-major, so its transpose is column-major; use "
                "as_matrix_view()");
  static_assert(!interop::has_eigen_storage_v<M> || M::RowsAtCompileTime == 1 ||
                    M::InnerStrideAtCompileTime == Eigen::Dynamic || M::InnerStrideAtCompileTime == 1,
                "as_transposed_view: the Eigen object's row stride is a compile-time constant other than 1; "
                "its transpose would not have contiguous rows");
  using T = interop::detail::eigen_element_t<E>;
  return interop::detail::matrix_from_strides<T, host_memory>("as_transposed_view", "Eigen object (transposed)",
                                                              m.data(), index_t(m.cols()), index_t(m.rows()),
                                                              index_t(m.colStride()), index_t(m.rowStride()));
}

/// Eigen vector (compile-time one row or one column, any inner stride) -> vector_view with that stride.
template <class E, std::enable_if_t<interop::is_eigen_dense_v<E>, int> = 0>
auto as_vector_view(E&& v) {
  using M = interop::detail::remove_cvref_t<E>;
  static_assert(interop::detail::eigen_source_check<E>::ok);
  static_assert(bool(M::IsVectorAtCompileTime),
                "as_vector_view: the Eigen object must be a vector at compile time (VectorX, RowVectorX, "
                "m.row(i), m.col(j), or a Map / Ref of one)");
  using T = interop::detail::eigen_element_t<E>;
  return interop::detail::vector_from_stride<T, host_memory>("as_vector_view", "Eigen vector", v.data(),
                                                             index_t(v.size()), index_t(v.innerStride()));
}

/// Host matrix_view -> Eigen::Map of a row-major dynamic matrix with the view's row stride as outer
/// stride. Map<const ...> for a const view. Device views do not compile.
template <class T, class Space>
interop::eigen_matrix_map<T> as_eigen(matrix_view<T, Space> view) {
  static_assert(std::is_same_v<Space, host_memory>,
                "as_eigen: a device_memory view cannot be read on the host; Eigen maps need host memory");
  interop::detail::check_eigen_scalar<T>();
  // An empty default view has row stride 0; Eigen only needs a stride >= cols.
  const index_t outer = view.row_stride() >= view.cols() ? view.row_stride() : view.cols();
  return interop::eigen_matrix_map<T>(view.data(), view.rows(), view.cols(), Eigen::OuterStride<>(outer));
}

/// Host vector_view -> Eigen::Map of a dynamic column vector with the view's stride as inner stride.
template <class T, class Space>
interop::eigen_vector_map<T> as_eigen(vector_view<T, Space> view) {
  static_assert(std::is_same_v<Space, host_memory>,
                "as_eigen: a device_memory view cannot be read on the host; Eigen maps need host memory");
  interop::detail::check_eigen_scalar<T>();
  return interop::eigen_vector_map<T>(view.data(), view.size(), Eigen::InnerStride<>(view.stride()));
}

MOECOMP_NAMESPACE_END
