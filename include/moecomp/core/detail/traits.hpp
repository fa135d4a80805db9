#pragma once
// The element-type traits of every module, written once.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/config.hpp>

#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

/// float or double: the element types of the floating-point algorithms.
template <class T>
inline constexpr bool is_real_v = std::is_same_v<T, float> || std::is_same_v<T, double>;

/// A view of U can be read as input of T: U is T, const or not.
template <class U, class T>
inline constexpr bool is_input_of_v = std::is_same_v<std::remove_const_t<U>, T>;

/// A view of U is a float or double input, const or not.
template <class U>
inline constexpr bool is_real_input_v = is_real_v<std::remove_const_t<U>>;

/// std::type_identity (C++20): keeps a parameter out of template argument deduction.
template <class T>
struct type_identity {
  using type = T;
};
template <class T>
using type_identity_t = typename type_identity<T>::type;

}  // namespace detail
MOECOMP_NAMESPACE_END
