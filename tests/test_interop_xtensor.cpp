// xtensor <-> moecomp views: no copies (same pointers and strides), element agreement, const-correctness,
// every rejection with its message, and pairwise distances through xtensor views.
#include <moecomp/distance/pairwise_distance.hpp>
#include <moecomp/interop/xtensor.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xfixed.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

#include <array>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using moecomp::index_t;
using moecomp::matrix_view;
using moecomp::vector_view;
using shape2 = std::array<std::size_t, 2>;
using strides2 = std::array<std::ptrdiff_t, 2>;

using moecomp_test::thrown_message;

// x(i, j) = 10 i + j.
template <class X>
void fill_planted(X& x) {
  for (std::size_t i = 0; i < x.shape()[0]; ++i)
    for (std::size_t j = 0; j < x.shape()[1]; ++j) x(i, j) = static_cast<typename X::value_type>(10 * i + j);
}

template <class V, class X>
void check_same_elements(const V& view, const X& x) {
  REQUIRE(view.rows() == index_t(x.shape()[0]));
  REQUIRE(view.cols() == index_t(x.shape()[1]));
  for (index_t i = 0; i < view.rows(); ++i)
    for (index_t j = 0; j < view.cols(); ++j) CHECK(view(i, j) == x(std::size_t(i), std::size_t(j)));
}

using row_major_tensor = xt::xtensor<float, 2>;
using column_major_tensor = xt::xtensor<float, 2, xt::layout_type::column_major>;
using dynamic_array = xt::xarray<float, xt::layout_type::dynamic>;
using pointer_adaptor = moecomp::interop::xtensor_adaptor_of<float, 2>;

}  // namespace

// ---------------------------------------------------------------- compile-time checks
// as_matrix_view(column-major at compile time) does not compile: it static_asserts on this trait with
// "column-major xtensor container: a matrix_view needs row-major rows; use layout_type::row_major".
static_assert(moecomp::interop::is_column_major_xtensor_v<column_major_tensor>);
static_assert(moecomp::interop::is_column_major_xtensor_v<const column_major_tensor&>);
static_assert(moecomp::interop::is_column_major_xtensor_v<
              xt::xtensor_fixed<float, xt::xshape<2, 2>, xt::layout_type::column_major>>);
static_assert(!moecomp::interop::is_column_major_xtensor_v<row_major_tensor>);
static_assert(!moecomp::interop::is_column_major_xtensor_v<dynamic_array>);  // checked at run time
static_assert(!moecomp::interop::is_column_major_xtensor_v<std::vector<float>>);
static_assert(moecomp::interop::is_xtensor_container_v<xt::xarray<double>>);
static_assert(moecomp::interop::is_xtensor_container_v<pointer_adaptor&>);
static_assert(!moecomp::interop::is_xtensor_container_v<std::vector<float>>);
static_assert(moecomp::interop::xtensor_static_rank_v<row_major_tensor> == 2);
static_assert(moecomp::interop::xtensor_static_rank_v<xt::xtensor_fixed<float, xt::xshape<2, 3, 4>>> == 3);
static_assert(moecomp::interop::xtensor_static_rank_v<xt::xarray<float>> == -1);
// Owning temporaries would dangle; lvalues and non-owning adaptors do not.
static_assert(!moecomp::interop::xtensor_view_cannot_dangle_v<row_major_tensor>);
static_assert(!moecomp::interop::xtensor_view_cannot_dangle_v<xt::xarray<float>>);
static_assert(moecomp::interop::xtensor_view_cannot_dangle_v<row_major_tensor&>);
static_assert(moecomp::interop::xtensor_view_cannot_dangle_v<const row_major_tensor&>);
static_assert(moecomp::interop::xtensor_view_cannot_dangle_v<pointer_adaptor>);
static_assert(moecomp::interop::xtensor_view_cannot_dangle_v<
              xt::xarray_adaptor<std::vector<float>&, xt::layout_type::row_major, std::vector<std::size_t>>>);
static_assert(!moecomp::interop::xtensor_view_cannot_dangle_v<
              xt::xarray_adaptor<std::vector<float>, xt::layout_type::row_major, std::vector<std::size_t>>>);

TEST_CASE("xtensor: xtensor<T, 2> -> matrix_view shares data, element (i, j) agrees, writes go through") {
  row_major_tensor x = row_major_tensor::from_shape({3, 4});
  fill_planted(x);
  auto v = moecomp::as_matrix_view(x);
  static_assert(std::is_same_v<decltype(v), matrix_view<float>>);
  CHECK(v.data() == x.data());
  CHECK(v.rows() == 3);
  CHECK(v.cols() == 4);
  CHECK(v.row_stride() == 4);
  check_same_elements(v, x);
  v(2, 3) = -1.0f;
  CHECK(x(2, 3) == -1.0f);

  const row_major_tensor& cx = x;
  auto cv = moecomp::as_matrix_view(cx);
  static_assert(std::is_same_v<decltype(cv), matrix_view<const float>>);
  CHECK(cv.data() == x.data());
  check_same_elements(cv, x);
}

TEST_CASE("xtensor: extent-1 axes (xtensor stores stride 0 there)") {
  row_major_tensor one_row = row_major_tensor::from_shape({1, 4});
  fill_planted(one_row);
  REQUIRE(one_row.strides()[0] == 0);
  auto r = moecomp::as_matrix_view(one_row);
  CHECK(r.rows() == 1);
  CHECK(r.cols() == 4);
  CHECK(r.row_stride() == 4);
  check_same_elements(r, one_row);

  row_major_tensor one_col = row_major_tensor::from_shape({4, 1});
  fill_planted(one_col);
  REQUIRE(one_col.strides()[1] == 0);
  auto c = moecomp::as_matrix_view(one_col);
  CHECK(c.rows() == 4);
  CHECK(c.cols() == 1);
  CHECK(c.row_stride() == 1);
  check_same_elements(c, one_col);

  row_major_tensor empty = row_major_tensor::from_shape({0, 3});
  auto e = moecomp::as_matrix_view(empty);
  CHECK(e.empty());
  CHECK(e.cols() == 3);
}

TEST_CASE("xtensor: xarray with run-time dimension and layout") {
  xt::xarray<double> a = xt::xarray<double>::from_shape({2, 5});
  fill_planted(a);
  auto v = moecomp::as_matrix_view(a);
  static_assert(std::is_same_v<decltype(v), matrix_view<double>>);
  CHECK(v.data() == a.data());
  CHECK(v.row_stride() == 5);
  check_same_elements(v, a);

  xt::xarray<double> cube = xt::xarray<double>::from_shape({2, 3, 4});
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(cube); }) ==
        "as_matrix_view: xtensor container must be 2-D, got dimension 3");
  CHECK(thrown_message([&] { (void)moecomp::as_vector_view(a); }) ==
        "as_vector_view: xtensor container must be 1-D, got dimension 2");

  // Dynamic layout: row-major accepted, column-major rejected at run time.
  dynamic_array rows = dynamic_array::from_shape({3, 4});
  CHECK(moecomp::as_matrix_view(rows).row_stride() == 4);
  dynamic_array columns(std::vector<std::size_t>{3, 4}, xt::layout_type::column_major);
  REQUIRE(columns.layout() == xt::layout_type::column_major);
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(columns); }) ==
        "as_matrix_view: xtensor container is column-major (strides (1, 3) for shape 3 x 4); a matrix_view needs "
        "row-major rows with inner stride 1");
  // A column-major n x 1 array has the same memory order as a row-major one: accepted.
  dynamic_array column(std::vector<std::size_t>{3, 1}, xt::layout_type::column_major);
  CHECK(moecomp::as_matrix_view(column).rows() == 3);
}

TEST_CASE("xtensor: xtensor_fixed") {
  xt::xtensor_fixed<double, xt::xshape<2, 3>> f;
  fill_planted(f);
  auto v = moecomp::as_matrix_view(f);
  static_assert(std::is_same_v<decltype(v), matrix_view<double>>);
  CHECK(v.data() == f.data());
  CHECK(v.row_stride() == 3);
  check_same_elements(v, f);
  const auto& cf = f;
  static_assert(std::is_same_v<decltype(moecomp::as_matrix_view(cf)), matrix_view<const double>>);

  xt::xtensor_fixed<int, xt::xshape<4>> w = {1, 2, 3, 4};
  auto wv = moecomp::as_vector_view(w);
  static_assert(std::is_same_v<decltype(wv), vector_view<int>>);
  CHECK(wv.data() == w.data());
  CHECK(wv.size() == 4);
  CHECK(wv(3) == 4);
}

TEST_CASE("xtensor: xt::adapt adaptors over pointers and containers") {
  std::vector<float> buffer(20);
  for (std::size_t k = 0; k < buffer.size(); ++k) buffer[k] = static_cast<float>(k);

  // A temporary adaptor of a pointer it does not own: accepted, mutable.
  auto v = moecomp::as_matrix_view(xt::adapt(buffer.data(), 12, xt::no_ownership(), shape2{3, 4}));
  static_assert(std::is_same_v<decltype(v), matrix_view<float>>);
  CHECK(v.data() == buffer.data());
  CHECK(v.row_stride() == 4);
  CHECK(v(2, 3) == 11.0f);

  // An adaptor of a const pointer gives a const view.
  const float* read_only = buffer.data();
  auto ca = xt::adapt(read_only, 12, xt::no_ownership(), shape2{3, 4});
  auto cv = moecomp::as_matrix_view(ca);
  static_assert(std::is_same_v<decltype(cv), matrix_view<const float>>);
  CHECK(cv.data() == buffer.data());

  // Explicit strides: the row stride comes from strides(). (xtensor 0.24 wants size == rows * cols here.)
  auto strided = xt::adapt(buffer.data(), 12, xt::no_ownership(), shape2{3, 4}, strides2{5, 1});
  auto sv = moecomp::as_matrix_view(strided);
  CHECK(sv.data() == buffer.data());
  CHECK(sv.row_stride() == 5);
  check_same_elements(sv, strided);
  CHECK(sv(2, 3) == 13.0f);

  auto gapped = xt::adapt(buffer.data(), 12, xt::no_ownership(), shape2{3, 4}, strides2{8, 2});
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(gapped); }) ==
        "as_matrix_view: xtensor container inner (column) stride must be 1, got strides (8, 2) for shape 3 x 4");
  auto overlapping = xt::adapt(buffer.data(), 12, xt::no_ownership(), shape2{3, 4}, strides2{2, 1});
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(overlapping); }) ==
        "as_matrix_view: xtensor container row stride must be >= cols (4), got strides (2, 1) for shape 3 x 4");
  auto transposed = xt::adapt(buffer.data(), 12, xt::no_ownership(), shape2{3, 4}, strides2{1, 3});
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(transposed); }) ==
        "as_matrix_view: xtensor container is column-major (strides (1, 3) for shape 3 x 4); a matrix_view "
        "needs row-major rows with inner stride 1");

  // An adaptor of a std::vector held by reference.
  std::vector<double> values{1, 2, 3, 4, 5, 6};
  auto by_reference = moecomp::as_matrix_view(xt::adapt(values, std::vector<std::size_t>{2, 3}));
  static_assert(std::is_same_v<decltype(by_reference), matrix_view<double>>);
  CHECK(by_reference.data() == values.data());
  CHECK(by_reference(1, 2) == 6.0);
}

TEST_CASE("xtensor: 1-D containers -> vector_view with their stride") {
  xt::xtensor<double, 1> x = xt::xtensor<double, 1>::from_shape({5});
  for (std::size_t k = 0; k < 5; ++k) x(k) = double(k * k);
  auto v = moecomp::as_vector_view(x);
  static_assert(std::is_same_v<decltype(v), vector_view<double>>);
  CHECK(v.data() == x.data());
  CHECK(v.size() == 5);
  CHECK(v.stride() == 1);
  CHECK(v(4) == 16.0);

  const xt::xarray<float> a = {1.0f, 2.0f, 3.0f};
  auto av = moecomp::as_vector_view(a);
  static_assert(std::is_same_v<decltype(av), vector_view<const float>>);
  CHECK(av(2) == 3.0f);

  // Column-major layout does not matter in 1-D.
  xt::xtensor<float, 1, xt::layout_type::column_major> c = {7.0f, 8.0f};
  CHECK(moecomp::as_vector_view(c)(1) == 8.0f);

  std::vector<float> buffer{0, 1, 2, 3, 4, 5, 6, 7, 8};
  auto every_third =
      xt::adapt(buffer.data(), 3, xt::no_ownership(), std::array<std::size_t, 1>{3}, std::array<std::ptrdiff_t, 1>{3});
  auto sv = moecomp::as_vector_view(every_third);
  CHECK(sv.data() == buffer.data());
  CHECK(sv.stride() == 3);
  CHECK(sv(2) == 6.0f);
  auto backwards = xt::adapt(buffer.data() + 8, 3, xt::no_ownership(), std::array<std::size_t, 1>{3},
                             std::array<std::ptrdiff_t, 1>{-1});
  CHECK(thrown_message([&] { (void)moecomp::as_vector_view(backwards); }) ==
        "as_vector_view: xtensor container stride must be >= 1, got -1 for size 3");
}

TEST_CASE("xtensor: as_xtensor adapts a contiguous view without copying") {
  std::vector<float> buffer(12);
  for (std::size_t k = 0; k < buffer.size(); ++k) buffer[k] = static_cast<float>(k);
  const matrix_view<float> v(buffer.data(), 3, 4);
  auto a = moecomp::as_xtensor(v);
  static_assert(std::is_same_v<decltype(a), moecomp::interop::xtensor_adaptor_of<float, 2>>);
  CHECK(a.data() == buffer.data());
  CHECK(a.shape()[0] == 3);
  CHECK(a.shape()[1] == 4);
  CHECK(a.strides()[0] == 4);
  CHECK(a.strides()[1] == 1);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 4; ++j) CHECK(a(i, j) == v(index_t(i), index_t(j)));
  CHECK(xt::sum(a)() == 66.0f);  // 0 + 1 + ... + 11
  a(1, 1) = 50.0f;
  CHECK(buffer[5] == 50.0f);
  a.fill(2.0f);  // walks the buffer linearly: exactly the 12 elements of the view
  CHECK(buffer[0] == 2.0f);
  CHECK(buffer[11] == 2.0f);

  const matrix_view<const float> cv = v;
  auto ca = moecomp::as_xtensor(cv);
  static_assert(std::is_same_v<decltype(ca.data()), const float*>);
  CHECK(ca.data() == buffer.data());

  // Back again: the same view.
  auto back = moecomp::as_matrix_view(a);
  CHECK(back.data() == v.data());
  CHECK(back.row_stride() == 4);

  // A row stride cannot be carried by xtensor 0.24's pointer adaptors.
  const matrix_view<float> padded(buffer.data(), 2, 4, 6);
  CHECK(thrown_message([&] { (void)moecomp::as_xtensor(padded); }) ==
        "as_xtensor: matrix_view must be contiguous (row_stride == cols == 4), got row_stride 6 for shape 2 x 4; "
        "xtensor 0.24 pointer adaptors cannot carry a row stride");
  // ...but one row of it, or a block spanning full rows, is contiguous.
  CHECK(moecomp::as_xtensor(padded.row_range(1, 1)).data() == buffer.data() + 6);

  std::vector<double> values{1, 2, 3, 4, 5, 6};
  auto va = moecomp::as_xtensor(moecomp::make_vector_view(values.data(), 6));
  static_assert(std::is_same_v<decltype(va), moecomp::interop::xtensor_adaptor_of<double, 1>>);
  CHECK(va.data() == values.data());
  CHECK(xt::sum(va)() == 21.0);
  CHECK(thrown_message([&] { (void)moecomp::as_xtensor(moecomp::make_vector_view(values.data(), 3, 2)); }) ==
        "as_xtensor: vector_view must be contiguous (stride 1), got stride 2 for size 3; xtensor 0.24 pointer "
        "adaptors cannot carry a stride");
}

TEST_CASE("xtensor: pairwise distances through xtensor views equal the raw-pointer result") {
  // Planted: the rows of x are (0,0), (3,4), (6,8) -> distances 5, 10, 5.
  row_major_tensor x = {{0.0f, 0.0f}, {3.0f, 4.0f}, {6.0f, 8.0f}};
  row_major_tensor out = row_major_tensor::from_shape({3, 3});
  const moecomp::host_context ctx(1);
  const moecomp::distance::pairwise_distance_params params{};
  const auto& cx = x;
  moecomp::distance::pairwise_distances(ctx, params, moecomp::as_matrix_view(cx), moecomp::as_matrix_view(out));

  std::vector<float> raw(9);
  moecomp::distance::pairwise_distances(ctx, params, moecomp::make_matrix_view<const float>(x.data(), 3, 2),
                                        moecomp::make_matrix_view(raw.data(), 3, 3));
  const float expected[3][3] = {{0, 5, 10}, {5, 0, 5}, {10, 5, 0}};
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t j = 0; j < 3; ++j) {
      CHECK(out(i, j) == raw[i * 3 + j]);
      CHECK(out(i, j) == doctest::Approx(expected[i][j]).epsilon(1e-6));
    }
  }

  // Condensed form into a 1-D xtensor, and the input through a strided adaptor (row stride 3).
  std::vector<float> padded{0, 0, 99, 3, 4, 99, 6, 8, 99};
  auto padded_x = xt::adapt(padded.data(), 6, xt::no_ownership(), shape2{3, 2}, strides2{3, 1});
  xt::xtensor<float, 1> condensed = xt::xtensor<float, 1>::from_shape({3});
  moecomp::distance::pairwise_distances_condensed(ctx, params, moecomp::as_matrix_view(padded_x),
                                                  moecomp::as_vector_view(condensed));
  CHECK(condensed(0) == out(0, 1));
  CHECK(condensed(1) == out(0, 2));
  CHECK(condensed(2) == out(1, 2));
}

// ----------------------------------------------------------------------------- rank 3: stacks of experts

TEST_CASE("xtensor: a 3-D container is a stack of matrices") {
  // Three experts of 2 x 4, as a row-major xtensor and as an xarray.
  xt::xtensor<float, 3> experts({3, 2, 4});
  for (std::size_t e = 0; e < 3; ++e)
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t j = 0; j < 4; ++j) experts(e, i, j) = static_cast<float>(100 * e + 10 * i + j);
  const auto stack = moecomp::as_matrix_stack_view(experts);
  static_assert(std::is_same_v<std::remove_const_t<decltype(stack)>, moecomp::matrix_stack_view<float>>);
  CHECK(stack.count() == 3);
  CHECK(stack.matrix_stride() == 8);
  CHECK(stack(2, 1, 3) == 213.0f);
  stack(0, 0, 0) = -1.0f;  // the view writes into the container
  CHECK(experts(0, 0, 0) == -1.0f);
  const xt::xarray<double> dynamic = xt::ones<double>({2, 3, 5});
  const auto read_only = moecomp::as_matrix_stack_view(dynamic);
  static_assert(std::is_same_v<std::remove_const_t<decltype(read_only)>, moecomp::matrix_stack_view<const double>>);
  CHECK(read_only(1, 2, 4) == 1.0);
  // A strided adaptor: every other matrix of a 4 x 2 x 3 buffer.
  std::vector<double> buffer(24);
  for (std::size_t k = 0; k < buffer.size(); ++k) buffer[k] = static_cast<double>(k);
  const std::array<std::size_t, 3> shape{2, 2, 3};
  const std::array<std::ptrdiff_t, 3> strides{12, 3, 1};
  auto every_other = xt::adapt(buffer.data(), 12, xt::no_ownership(), shape, strides);
  const auto strided = moecomp::as_matrix_stack_view(every_other);
  CHECK(strided.matrix_stride() == 12);
  CHECK(strided(1, 1, 2) == 12.0 + 3.0 + 2.0);
}

TEST_CASE("xtensor: what a stack cannot express is refused") {
  xt::xarray<double> flat = xt::zeros<double>({4, 4});
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_stack_view(flat); }) ==
        "as_matrix_stack_view: xtensor container must be 3-D, got dimension 2");
  std::vector<double> buffer(24);
  const std::array<std::size_t, 3> shape{2, 3, 4};
  const std::array<std::ptrdiff_t, 3> overlapping{4, 4, 1};
  auto overlap = xt::adapt(buffer.data(), 24, xt::no_ownership(), shape, overlapping);
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_stack_view(overlap); }) ==
        "as_matrix_stack_view: xtensor container matrix stride (first axis) must be >= rows * row stride (12) so "
        "that matrices do not overlap, got 4 for shape 2 x 3 x 4");
}
