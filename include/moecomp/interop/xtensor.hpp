#pragma once
// xtensor <-> moecomp views, without copies (xtensor 0.24). Documentation: docs/interop.md.
//
//   moecomp::as_matrix_view(x)  2-D xt::xtensor, xt::xarray, xt::xtensor_fixed, xt::adapt(...) adaptors
//                               -> matrix_view<T> (row stride from x.strides())
//   moecomp::as_vector_view(x)  1-D ones -> vector_view<T> with the container's stride
//   moecomp::as_xtensor(view)   contiguous host matrix_view / vector_view -> non-owning xt::adapt
//                               adaptor (2-D / 1-D, row-major)
//
// Any xtensor container (everything deriving from xt::xcontainer) is accepted; lazy expressions and
// xt::view / xt::strided_view are not (evaluate them, or adapt the memory they refer to). Layout: a
// container whose layout is column-major at compile time does not compile (see
// interop::is_column_major_xtensor_v); one with dynamic layout is checked at run time from its strides:
// the column stride must be 1 and the row stride >= cols (strides of extent-1 axes, which xtensor sets
// to 0, are ignored). T is const for const containers and for adaptors of const pointers. Views never
// own: the container must outlive them; temporaries that own their storage are rejected at compile time.
#include <moecomp/core/views.hpp>
#include <moecomp/interop/detail/strided_view.hpp>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xbuffer_adaptor.hpp>
#include <xtensor/xcontainer.hpp>
#include <xtensor/xfixed.hpp>
#include <xtensor/xtensor.hpp>

#include <array>
#include <cstddef>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace interop {

namespace detail {
template <class D>
std::true_type xcontainer_test(const xt::xcontainer<D>*);
std::false_type xcontainer_test(...);

template <class T>
using xt_remove_cvref_t = std::remove_cv_t<std::remove_reference_t<T>>;

// The container an adaptor adapts is foreign memory when held by reference or as a non-owning buffer.
template <class EC>
struct is_foreign_storage : std::is_lvalue_reference<EC> {};
template <class CP, class A>
struct is_foreign_storage<xt::xbuffer_adaptor<CP, xt::no_ownership, A>> : std::true_type {};

template <class X>
struct is_non_owning_xtensor : std::false_type {};
template <class EC, std::size_t N, xt::layout_type L, class Tag>
struct is_non_owning_xtensor<xt::xtensor_adaptor<EC, N, L, Tag>> : is_foreign_storage<EC> {};
template <class EC, xt::layout_type L, class SC, class Tag>
struct is_non_owning_xtensor<xt::xarray_adaptor<EC, L, SC, Tag>> : is_foreign_storage<EC> {};
template <class EC, class S, xt::layout_type L, bool SH, class Tag>
struct is_non_owning_xtensor<xt::xfixed_adaptor<EC, S, L, SH, Tag>> : is_foreign_storage<EC> {};

// Number of dimensions fixed by the type (xtensor, xtensor_fixed, their adaptors), or -1 (xarray).
template <class Shape>
struct static_rank : std::integral_constant<int, -1> {};
template <class I, std::size_t N>
struct static_rank<std::array<I, N>> : std::integral_constant<int, int(N)> {};
template <class I, std::size_t N>
struct static_rank<xt::const_array<I, N>> : std::integral_constant<int, int(N)> {};
}  // namespace detail

/// True for xtensor containers and adaptors (everything deriving from xt::xcontainer).
template <class X>
inline constexpr bool is_xtensor_container_v =
    decltype(detail::xcontainer_test(std::declval<detail::xt_remove_cvref_t<X>*>()))::value;

/// True when the container's layout is column-major at compile time: as_matrix_view does not compile for
/// it ("column-major xtensor container: a matrix_view needs row-major rows; use layout_type::row_major").
/// Dynamic layouts are checked at run time instead.
template <class X, class = void>
struct is_column_major_xtensor : std::false_type {};
template <class X>
struct is_column_major_xtensor<X, std::enable_if_t<is_xtensor_container_v<X>>>
    : std::bool_constant<detail::xt_remove_cvref_t<X>::static_layout == xt::layout_type::column_major> {};
template <class X>
inline constexpr bool is_column_major_xtensor_v = is_column_major_xtensor<X>::value;

/// The dimension fixed by the container type, or -1 when it is known only at run time (xarray).
template <class X>
inline constexpr int xtensor_static_rank_v =
    detail::static_rank<typename detail::xt_remove_cvref_t<X>::inner_shape_type>::value;

/// True when a view of an object passed as `X&&` (forwarding reference) cannot dangle: lvalues, and
/// temporary adaptors of memory owned elsewhere (xt::adapt of a pointer without ownership, or of a
/// container held by reference).
template <class X>
inline constexpr bool xtensor_view_cannot_dangle_v =
    std::is_lvalue_reference_v<X> || detail::is_non_owning_xtensor<detail::xt_remove_cvref_t<X>>::value;

/// The adaptor as_xtensor returns for a contiguous host view of T: xt::adapt over the pointer, no ownership.
template <class T, std::size_t N>
using xtensor_adaptor_of =
    xt::xtensor_adaptor<xt::xbuffer_adaptor<T*, xt::no_ownership, std::allocator<std::remove_const_t<T>>>, N,
                        xt::layout_type::row_major>;

namespace detail {
template <class X>
using xtensor_element_t = std::remove_pointer_t<decltype(std::declval<std::remove_reference_t<X>&>().data())>;

template <class X>
struct xtensor_source_check {
  static_assert(xtensor_view_cannot_dangle_v<X>,
                "moecomp interop: this xtensor container is a temporary that owns its storage; the view "
                "would dangle. Keep it in a named variable");
  static constexpr bool ok = true;
};
}  // namespace detail

}  // namespace interop

/// 2-D xtensor container or adaptor -> rows x cols matrix_view (const T for read-only containers).
/// Throws invalid_argument if the dimension is not 2 or the strides are not row-major with column
/// stride 1.
template <class X, std::enable_if_t<interop::is_xtensor_container_v<X>, int> = 0>
auto as_matrix_view(X&& x) {
  static_assert(interop::detail::xtensor_source_check<X>::ok);
  static_assert(!interop::is_column_major_xtensor_v<X>,
                "column-major xtensor container: a matrix_view needs row-major rows; use layout_type::row_major");
  static_assert(interop::xtensor_static_rank_v<X> == -1 || interop::xtensor_static_rank_v<X> == 2,
                "as_matrix_view: the xtensor container's type fixes a dimension other than 2");
  using T = interop::detail::xtensor_element_t<X>;
  MOECOMP_EXPECTS(x.dimension() == 2, "as_matrix_view: xtensor container must be 2-D, got dimension ", x.dimension());
  return interop::detail::matrix_from_strides<T, host_memory>(
      "as_matrix_view", "xtensor container", x.data() + x.data_offset(), index_t(x.shape()[0]), index_t(x.shape()[1]),
      index_t(x.strides()[0]), index_t(x.strides()[1]));
}

/// 3-D xtensor container or adaptor (E x rows x cols) -> matrix_stack_view (const T for read-only
/// containers). Throws invalid_argument if the dimension is not 3 or the strides are not row-major with
/// column stride 1 and matrices apart.
template <class X, std::enable_if_t<interop::is_xtensor_container_v<X>, int> = 0>
auto as_matrix_stack_view(X&& x) {
  static_assert(interop::detail::xtensor_source_check<X>::ok);
  static_assert(!interop::is_column_major_xtensor_v<X>,
                "column-major xtensor container: a matrix_stack_view needs row-major rows; use layout_type::row_major");
  static_assert(interop::xtensor_static_rank_v<X> == -1 || interop::xtensor_static_rank_v<X> == 3,
                "as_matrix_stack_view: the xtensor container's type fixes a dimension other than 3");
  using T = interop::detail::xtensor_element_t<X>;
  MOECOMP_EXPECTS(x.dimension() == 3, "as_matrix_stack_view: xtensor container must be 3-D, got dimension ",
                  x.dimension());
  return interop::detail::stack_from_strides<T, host_memory>(
      "as_matrix_stack_view", "xtensor container", x.data() + x.data_offset(), index_t(x.shape()[0]),
      index_t(x.shape()[1]), index_t(x.shape()[2]), index_t(x.strides()[0]), index_t(x.strides()[1]),
      index_t(x.strides()[2]));
}

/// 1-D xtensor container or adaptor -> vector_view with the container's stride (any layout).
template <class X, std::enable_if_t<interop::is_xtensor_container_v<X>, int> = 0>
auto as_vector_view(X&& x) {
  static_assert(interop::detail::xtensor_source_check<X>::ok);
  static_assert(interop::xtensor_static_rank_v<X> == -1 || interop::xtensor_static_rank_v<X> == 1,
                "as_vector_view: the xtensor container's type fixes a dimension other than 1");
  using T = interop::detail::xtensor_element_t<X>;
  MOECOMP_EXPECTS(x.dimension() == 1, "as_vector_view: xtensor container must be 1-D, got dimension ", x.dimension());
  return interop::detail::vector_from_stride<T, host_memory>("as_vector_view", "xtensor container",
                                                             x.data() + x.data_offset(), index_t(x.shape()[0]),
                                                             index_t(x.strides()[0]));
}

/// Contiguous host matrix_view -> 2-D row-major xtensor adaptor of the same memory (no ownership). A view
/// with row_stride > cols is rejected: xtensor 0.24's pointer adaptors require the buffer to hold
/// exactly rows * cols elements and walk it linearly (fill, linear iterators), which a row stride breaks.
template <class T, class Space>
interop::xtensor_adaptor_of<T, 2> as_xtensor(matrix_view<T, Space> view) {
  static_assert(std::is_same_v<Space, host_memory>,
                "as_xtensor: a device_memory view cannot be read on the host; xtensor needs host memory");
  MOECOMP_EXPECTS(
      view.is_contiguous(), "as_xtensor: matrix_view must be contiguous (row_stride == cols == ", view.cols(),
      "), got row_stride ", view.row_stride(), " for shape ", ::moecomp::detail::shape_string(view.rows(), view.cols()),
      "; xtensor 0.24 pointer adaptors cannot carry a row stride");
  const std::array<std::size_t, 2> shape{static_cast<std::size_t>(view.rows()), static_cast<std::size_t>(view.cols())};
  return xt::adapt<xt::layout_type::row_major>(static_cast<T*>(view.data()), static_cast<std::size_t>(view.size()),
                                               xt::no_ownership(), shape);
}

/// Contiguous host vector_view -> 1-D xtensor adaptor of the same memory (stride 1 only, as above).
template <class T, class Space>
interop::xtensor_adaptor_of<T, 1> as_xtensor(vector_view<T, Space> view) {
  static_assert(std::is_same_v<Space, host_memory>,
                "as_xtensor: a device_memory view cannot be read on the host; xtensor needs host memory");
  MOECOMP_EXPECTS(view.is_contiguous(), "as_xtensor: vector_view must be contiguous (stride 1), got stride ",
                  view.stride(), " for size ", view.size(), "; xtensor 0.24 pointer adaptors cannot carry a stride");
  const std::array<std::size_t, 1> shape{static_cast<std::size_t>(view.size())};
  return xt::adapt<xt::layout_type::row_major>(static_cast<T*>(view.data()), static_cast<std::size_t>(view.size()),
                                               xt::no_ownership(), shape);
}

MOECOMP_NAMESPACE_END
