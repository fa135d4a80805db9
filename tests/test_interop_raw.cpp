// Checked views of standard containers and 16-bit reinterpretation: same memory, shape checks with their
// messages, const-correctness, and temporaries that do not compile.
#include <moecomp/interop/raw.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using moecomp::device_memory;
using moecomp::index_t;
using moecomp::matrix_view;
using moecomp::vector_view;

using moecomp_test::thrown_message;

// Whether as_matrix_view(C, 2, 2) / as_vector_view(C) compiles for an argument of type C.
template <class C, class = void>
struct matrix_view_compiles : std::false_type {};
template <class C>
struct matrix_view_compiles<C, std::void_t<decltype(moecomp::as_matrix_view(std::declval<C>(), 2, 2))>>
    : std::true_type {};
template <class C, class = void>
struct vector_view_compiles : std::false_type {};
template <class C>
struct vector_view_compiles<C, std::void_t<decltype(moecomp::as_vector_view(std::declval<C>()))>> : std::true_type {};

}  // namespace

// Temporaries would leave the view dangling: those overloads are deleted.
static_assert(matrix_view_compiles<std::vector<float>&>::value);
static_assert(matrix_view_compiles<const std::vector<float>&>::value);
static_assert(!matrix_view_compiles<std::vector<float>>::value);
static_assert(!matrix_view_compiles<std::array<float, 4>>::value);
static_assert(vector_view_compiles<std::vector<int>&>::value);
static_assert(!vector_view_compiles<std::vector<int>>::value);
static_assert(!vector_view_compiles<std::array<int, 3>>::value);
// Const containers give const views.
static_assert(std::is_same_v<decltype(moecomp::as_matrix_view(std::declval<const std::vector<double>&>(), 1, 1)),
                             matrix_view<const double>>);
static_assert(std::is_same_v<decltype(moecomp::as_vector_view(std::declval<const std::array<int, 2>&>())),
                             vector_view<const int>>);

TEST_CASE("raw: std::vector -> matrix_view, exact size") {
  std::vector<float> v(12);
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(k);
  auto m = moecomp::as_matrix_view(v, 3, 4);
  static_assert(std::is_same_v<decltype(m), matrix_view<float>>);
  CHECK(m.data() == v.data());
  CHECK(m.rows() == 3);
  CHECK(m.cols() == 4);
  CHECK(m.row_stride() == 4);
  CHECK(m(2, 1) == 9.0f);
  m(0, 3) = -1.0f;
  CHECK(v[3] == -1.0f);

  const std::vector<float>& cv = v;
  auto cm = moecomp::as_matrix_view(cv, 4, 3);
  static_assert(std::is_same_v<decltype(cm), matrix_view<const float>>);
  CHECK(cm.data() == v.data());
  CHECK(cm(3, 2) == 11.0f);

  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(v, 3, 5); }) ==
        "as_matrix_view: std::vector has 12 elements, expected rows * cols = 15 for shape 3 x 5");
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(v, 2, 4); }) ==
        "as_matrix_view: std::vector has 12 elements, expected rows * cols = 8 for shape 2 x 4");
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(v, -3, -4); }) ==
        "as_matrix_view: shape must be non-negative, got -3 x -4");
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(v, index_t(1) << 62, 8); }) ==
        "as_matrix_view: std::vector has 12 elements, but rows * cols overflows for shape 4611686018427387904 x 8");

  std::vector<double> empty;
  auto e = moecomp::as_matrix_view(empty, 0, 5);
  CHECK(e.empty());
  CHECK(e.cols() == 5);
}

TEST_CASE("raw: std::vector with a row stride: the last row must end inside") {
  std::vector<int> v(10);
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<int>(k);
  // 3 rows of 2, 4 apart: the last row is elements 8, 9.
  auto m = moecomp::as_matrix_view(v, 3, 2, 4);
  CHECK(m.data() == v.data());
  CHECK(m.row_stride() == 4);
  CHECK(m(2, 1) == 9);
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(v, 3, 3, 4); }) ==
        "as_matrix_view: std::vector has 10 elements, but shape 3 x 3 with row_stride 4 needs (rows - 1) * "
        "row_stride + cols of them");
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(v, 1, 11, 11); }) ==
        "as_matrix_view: std::vector has 10 elements, but shape 1 x 11 with row_stride 11 needs (rows - 1) * "
        "row_stride + cols of them");
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(v, 2, 4, 3); }) ==
        "as_matrix_view: row_stride must be >= cols (4), got 3");
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(v, index_t(1) << 40, 2, index_t(1) << 30); }) ==
        "as_matrix_view: std::vector has 10 elements, but shape 1099511627776 x 2 with row_stride 1073741824 needs "
        "(rows - 1) * row_stride + cols of them");
  const auto& cv = v;
  static_assert(std::is_same_v<decltype(moecomp::as_matrix_view(cv, 2, 2, 5)), matrix_view<const int>>);
}

TEST_CASE("raw: std::array and C arrays") {
  std::array<double, 6> a{1, 2, 3, 4, 5, 6};
  auto m = moecomp::as_matrix_view(a, 2, 3);
  static_assert(std::is_same_v<decltype(m), matrix_view<double>>);
  CHECK(m.data() == a.data());
  CHECK(m(1, 0) == 4.0);
  const auto& ca = a;
  auto cm = moecomp::as_matrix_view(ca, 3, 2);
  static_assert(std::is_same_v<decltype(cm), matrix_view<const double>>);
  CHECK(cm(2, 1) == 6.0);
  CHECK(moecomp::as_matrix_view(a, 2, 2, 4)(1, 1) == 6.0);
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(a, 2, 2); }) ==
        "as_matrix_view: std::array has 6 elements, expected rows * cols = 4 for shape 2 x 2");

  float flat[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  auto fm = moecomp::as_matrix_view(flat, 2, 4);
  static_assert(std::is_same_v<decltype(fm), matrix_view<float>>);
  CHECK(fm.data() == flat);
  CHECK(fm(1, 3) == 7.0f);
  CHECK(moecomp::as_matrix_view(flat, 2, 3, 5)(1, 2) == 7.0f);
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(flat, 3, 3); }) ==
        "as_matrix_view: C array has 8 elements, expected rows * cols = 9 for shape 3 x 3");
  const float cflat[4] = {1, 2, 3, 4};
  static_assert(std::is_same_v<decltype(moecomp::as_matrix_view(cflat, 2, 2)), matrix_view<const float>>);

  // A 2-D C array carries its shape in the type.
  int grid[3][4] = {{0, 1, 2, 3}, {10, 11, 12, 13}, {20, 21, 22, 23}};
  auto g = moecomp::as_matrix_view(grid);
  static_assert(std::is_same_v<decltype(g), matrix_view<int>>);
  CHECK(g.data() == &grid[0][0]);
  CHECK(g.rows() == 3);
  CHECK(g.cols() == 4);
  CHECK(g(2, 3) == 23);
  const int cgrid[2][2] = {{1, 2}, {3, 4}};
  static_assert(std::is_same_v<decltype(moecomp::as_matrix_view(cgrid)), matrix_view<const int>>);
}

TEST_CASE("raw: containers -> vector_view") {
  std::vector<int> v{1, 2, 3};
  auto vv = moecomp::as_vector_view(v);
  static_assert(std::is_same_v<decltype(vv), vector_view<int>>);
  CHECK(vv.data() == v.data());
  CHECK(vv.size() == 3);
  CHECK(vv.stride() == 1);
  const std::vector<int> empty;
  CHECK(moecomp::as_vector_view(empty).empty());
  std::array<float, 2> a{5.0f, 6.0f};
  CHECK(moecomp::as_vector_view(a)(1) == 6.0f);
  const double c[3] = {7, 8, 9};
  auto cv = moecomp::as_vector_view(c);
  static_assert(std::is_same_v<decltype(cv), vector_view<const double>>);
  CHECK(cv.data() == c);
  CHECK(cv(2) == 9.0);
}

TEST_CASE("raw: reinterpret_view between 16-bit bits and bfloat16 / half") {
  // bfloat16 bits: 1.0 = 0x3f80, -2.0 = 0xc000, 0.5 = 0x3f00; half bits: 1.0 = 0x3c00, -2.0 = 0xc000.
  const std::vector<std::uint16_t> bf_bits{0x3f80, 0xc000, 0x3f00, 0x0000, 0x4040, 0x7f80};
  const matrix_view<const std::uint16_t> bits = moecomp::as_matrix_view(bf_bits, 2, 3);
  auto bf = moecomp::reinterpret_view<moecomp::bfloat16>(bits);
  static_assert(std::is_same_v<decltype(bf), matrix_view<const moecomp::bfloat16>>);
  CHECK(static_cast<const void*>(bf.data()) == static_cast<const void*>(bf_bits.data()));
  CHECK(bf.rows() == 2);
  CHECK(bf.cols() == 3);
  CHECK(bf.row_stride() == 3);
  CHECK(static_cast<float>(bf(0, 0)) == 1.0f);
  CHECK(static_cast<float>(bf(0, 1)) == -2.0f);
  CHECK(static_cast<float>(bf(0, 2)) == 0.5f);
  CHECK(static_cast<float>(bf(1, 1)) == 3.0f);
  CHECK(static_cast<float>(bf(1, 2)) == std::numeric_limits<float>::infinity());

  // Mutable bits -> mutable halves (with a row stride); writes land in the bits.
  std::vector<std::uint16_t> h_bits{0x3c00, 0xc000, 0xffff, 0x3800, 0x4400, 0xffff};
  auto h = moecomp::reinterpret_view<moecomp::half>(moecomp::as_matrix_view(h_bits, 2, 2, 3));
  static_assert(std::is_same_v<decltype(h), matrix_view<moecomp::half>>);
  CHECK(h.row_stride() == 3);
  CHECK(static_cast<float>(h(0, 0)) == 1.0f);
  CHECK(static_cast<float>(h(0, 1)) == -2.0f);
  CHECK(static_cast<float>(h(1, 0)) == 0.5f);
  CHECK(static_cast<float>(h(1, 1)) == 4.0f);
  h(1, 1) = moecomp::half(1.0f);
  CHECK(h_bits[4] == 0x3c00);

  // Back to bits, const requested explicitly; int16_t works too.
  auto back = moecomp::reinterpret_view<const std::uint16_t>(h);
  static_assert(std::is_same_v<decltype(back), matrix_view<const std::uint16_t>>);
  CHECK(back.data() == h_bits.data());
  std::vector<std::int16_t> signed_bits{0x3c00};
  CHECK(static_cast<float>(moecomp::reinterpret_view<moecomp::half>(moecomp::as_vector_view(signed_bits))(0)) == 1.0f);

  // Vectors keep their stride; device views stay device views (nothing is dereferenced).
  auto every_other = moecomp::reinterpret_view<moecomp::bfloat16>(moecomp::make_vector_view(bf_bits.data(), 3, 2));
  static_assert(std::is_same_v<decltype(every_other), vector_view<const moecomp::bfloat16>>);
  CHECK(every_other.stride() == 2);
  CHECK(static_cast<float>(every_other(1)) == 0.5f);
  auto* device_bits = reinterpret_cast<std::uint16_t*>(std::uintptr_t{0x7f0000002000});
  auto dv = moecomp::reinterpret_view<moecomp::bfloat16>(moecomp::make_device_matrix_view(device_bits, 64, 128));
  static_assert(std::is_same_v<decltype(dv), matrix_view<moecomp::bfloat16, device_memory>>);
  CHECK(static_cast<void*>(dv.data()) == static_cast<void*>(device_bits));
  CHECK(dv.cols() == 128);

  // Empty views stay empty, shape included.
  auto none = moecomp::reinterpret_view<moecomp::half>(matrix_view<std::uint16_t>(nullptr, 0, 5));
  CHECK(none.empty());
  CHECK(none.cols() == 5);
}
