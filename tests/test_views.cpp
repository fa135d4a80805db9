// Views and owning host containers: construction checks, element addressing with strides, slicing,
// const and memory-space conversion rules, and the traits device code relies on.
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/checks.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

using moecomp::device_memory;
using moecomp::host_memory;
using moecomp::index_t;
using moecomp::matrix_view;
using moecomp::vector_view;

namespace {

constexpr index_t index_max = std::numeric_limits<index_t>::max();

using moecomp_test::thrown_message;

#define CHECK_INVALID(expression, fragment)                                                           \
  do {                                                                                                \
    const std::string message_ = thrown_message([&] { (void)(expression); });              \
    INFO("message: ", message_);                                                                      \
    CHECK_MESSAGE(message_.find(fragment) != std::string::npos, "expected '", fragment, "' in the message"); \
  } while (0)

// Detection of operator() the way a generic caller would try it.
template <class V, class = void>
struct has_call_1 : std::false_type {};
template <class V>
struct has_call_1<V, std::void_t<decltype(std::declval<const V&>()(index_t{0}))>> : std::true_type {};
template <class V, class = void>
struct has_call_2 : std::false_type {};
template <class V>
struct has_call_2<V, std::void_t<decltype(std::declval<const V&>()(index_t{0}, index_t{0}))>> : std::true_type {};
template <class V, class = void>
struct has_subscript : std::false_type {};
template <class V>
struct has_subscript<V, std::void_t<decltype(std::declval<const V&>()[index_t{0}])>> : std::true_type {};

}  // namespace

// ------------------------------------------------------------------------------------------------ traits

// Views travel by value into CUDA kernels: they must be trivially copyable and small.
static_assert(std::is_trivially_copyable_v<matrix_view<float>>);
static_assert(std::is_trivially_copyable_v<matrix_view<const double, device_memory>>);
static_assert(std::is_trivially_copyable_v<vector_view<float>>);
static_assert(std::is_trivially_copyable_v<vector_view<const int, device_memory>>);
static_assert(std::is_trivially_destructible_v<matrix_view<float>>);
static_assert(std::is_nothrow_default_constructible_v<matrix_view<float>>);
static_assert(sizeof(matrix_view<float>) == sizeof(float*) + 3 * sizeof(index_t));
static_assert(sizeof(vector_view<float>) == sizeof(float*) + 2 * sizeof(index_t));

static_assert(std::is_same_v<matrix_view<const float>::value_type, float>);
static_assert(std::is_same_v<matrix_view<const float>::element_type, const float>);
static_assert(std::is_same_v<matrix_view<float, device_memory>::memory_space, device_memory>);
static_assert(std::is_same_v<moecomp::host_matrix_view<float>, matrix_view<float, host_memory>>);
static_assert(std::is_same_v<moecomp::device_vector_view<float>, vector_view<float, device_memory>>);
static_assert(moecomp::is_memory_space_v<host_memory> && moecomp::is_memory_space_v<device_memory>);
static_assert(!moecomp::is_memory_space_v<int>);

// Mutable -> const converts implicitly; const -> mutable never does.
static_assert(std::is_convertible_v<matrix_view<float>, matrix_view<const float>>);
static_assert(std::is_convertible_v<vector_view<float>, vector_view<const float>>);
static_assert(std::is_convertible_v<matrix_view<float, device_memory>, matrix_view<const float, device_memory>>);
static_assert(std::is_convertible_v<vector_view<float, device_memory>, vector_view<const float, device_memory>>);
static_assert(!std::is_convertible_v<matrix_view<const float>, matrix_view<float>>);
static_assert(!std::is_constructible_v<matrix_view<float>, matrix_view<const float>>);
static_assert(!std::is_constructible_v<vector_view<float>, vector_view<const float>>);
static_assert(!std::is_constructible_v<vector_view<float, device_memory>, vector_view<const float, device_memory>>);

// Nor between element types.
static_assert(!std::is_constructible_v<matrix_view<const double>, matrix_view<float>>);
static_assert(!std::is_constructible_v<vector_view<int>, vector_view<unsigned>>);

// Host <-> device never converts, in either direction, with or without const.
static_assert(!std::is_convertible_v<matrix_view<float, host_memory>, matrix_view<float, device_memory>>);
static_assert(!std::is_convertible_v<matrix_view<float, device_memory>, matrix_view<float, host_memory>>);
static_assert(!std::is_constructible_v<matrix_view<float, host_memory>, matrix_view<float, device_memory>>);
static_assert(!std::is_constructible_v<matrix_view<float, device_memory>, matrix_view<float, host_memory>>);
static_assert(!std::is_constructible_v<matrix_view<const float, device_memory>, matrix_view<float, host_memory>>);
static_assert(!std::is_constructible_v<matrix_view<const float, host_memory>, matrix_view<float, device_memory>>);
static_assert(!std::is_convertible_v<vector_view<float, host_memory>, vector_view<float, device_memory>>);
static_assert(!std::is_constructible_v<vector_view<float, device_memory>, vector_view<float, host_memory>>);
static_assert(!std::is_constructible_v<vector_view<float, host_memory>, vector_view<float, device_memory>>);
static_assert(!std::is_constructible_v<vector_view<const float, device_memory>, vector_view<float, host_memory>>);
static_assert(!std::is_assignable_v<matrix_view<float, device_memory>&, matrix_view<float, host_memory>>);
static_assert(!std::is_assignable_v<matrix_view<float, host_memory>&, matrix_view<float, device_memory>>);
// ... and a matrix is not a vector.
static_assert(!std::is_constructible_v<vector_view<float>, matrix_view<float>>);

// Element access exists for host views only; device code goes through data() / row_ptr() / ptr().
static_assert(has_call_2<matrix_view<float>>::value);
static_assert(has_call_2<matrix_view<const float>>::value);
static_assert(!has_call_2<matrix_view<float, device_memory>>::value);
static_assert(!has_call_2<matrix_view<const float, device_memory>>::value);
static_assert(has_call_1<vector_view<float>>::value);
static_assert(has_subscript<vector_view<float>>::value);
static_assert(!has_call_1<vector_view<float, device_memory>>::value);
static_assert(!has_subscript<vector_view<float, device_memory>>::value);
static_assert(std::is_invocable_r_v<float&, const matrix_view<float>&, index_t, index_t>);
static_assert(std::is_invocable_r_v<const float&, const matrix_view<const float>&, index_t, index_t>);
static_assert(!std::is_invocable_v<const matrix_view<float, device_memory>&, index_t, index_t>);
static_assert(!std::is_invocable_v<const vector_view<float, device_memory>&, index_t>);
// A const view hands out const references: writing through it does not compile.
static_assert(!std::is_assignable_v<decltype(std::declval<matrix_view<const float>>()(0, 0)), float>);
static_assert(std::is_assignable_v<decltype(std::declval<matrix_view<float>>()(0, 0)), float>);

// ------------------------------------------------------------------------------------------------ matrix

TEST_CASE("matrix_view addresses element (i, j) at data[i * row_stride + j]") {
  std::vector<int> storage(4 * 7);
  std::iota(storage.begin(), storage.end(), 0);
  const matrix_view<int> m(storage.data(), 4, 5, 7);  // 4 x 5 inside rows of 7
  CHECK(m.rows() == 4);
  CHECK(m.cols() == 5);
  CHECK(m.row_stride() == 7);
  CHECK(m.size() == 20);
  CHECK_FALSE(m.empty());
  CHECK_FALSE(m.is_contiguous());
  CHECK(m.data() == storage.data());
  for (index_t i = 0; i < 4; ++i) {
    CHECK(m.row_ptr(i) == storage.data() + 7 * i);
    for (index_t j = 0; j < 5; ++j) CHECK(m(i, j) == 7 * i + j);
  }
  m(2, 3) = -1;  // writes through to the storage
  CHECK(storage[2 * 7 + 3] == -1);

  const matrix_view<int> packed(storage.data(), 4, 7);  // row_stride defaults to cols
  CHECK(packed.row_stride() == 7);
  CHECK(packed.is_contiguous());
  CHECK(packed(3, 6) == 27);
  // One row is contiguous whatever its stride.
  CHECK(matrix_view<int>(storage.data(), 1, 3, 10).is_contiguous());
}

TEST_CASE("matrix_view construction rejects bad shapes with messages that name the problem") {
  std::vector<float> storage(64);
  float* p = storage.data();
  CHECK_INVALID((matrix_view<float>(p, -1, 2, 2)), "matrix_view: shape must be non-negative, got -1 x 2");
  CHECK_INVALID((matrix_view<float>(p, 2, -3, 4)), "matrix_view: shape must be non-negative, got 2 x -3");
  CHECK_INVALID((matrix_view<float>(p, 3, 4, 3)), "matrix_view: row_stride must be >= cols (4), got 3");
  CHECK_INVALID((matrix_view<float>(p, 3, 4, -4)), "row_stride must be >= cols (4), got -4");
  CHECK_INVALID((matrix_view<float>(nullptr, 2, 3)), "matrix_view: data is null but shape is 2 x 3");
  CHECK_INVALID((matrix_view<float>(p, index_max / 8 + 1, 4, 8)), "matrix_view: rows * row_stride overflows");
  CHECK_INVALID((matrix_view<float>(p, 2, index_max, index_max)), "rows * row_stride overflows (2 x ");
  CHECK_INVALID((moecomp::make_matrix_view(p, 2, 5, 4)), "row_stride must be >= cols (5), got 4");
  CHECK_INVALID((moecomp::make_device_matrix_view(p, -2, 5)), "shape must be non-negative, got -2 x 5");
  CHECK_INVALID((moecomp::make_device_matrix_view<float>(nullptr, 1, 1)), "data is null but shape is 1 x 1");

  // The exception is a moecomp::error of kind invalid_argument, also catchable as std::invalid_argument's
  // sibling std::runtime_error.
  CHECK_THROWS_AS((matrix_view<float>(p, -1, 1)), moecomp::error);
  CHECK_THROWS_AS((matrix_view<float>(p, -1, 1)), std::runtime_error);

  // Limits that are legal: the largest rows for a stride, and empty shapes with null data.
  CHECK_NOTHROW((matrix_view<float>(p, index_max / 8, 4, 8)));
  CHECK_NOTHROW((matrix_view<float>(nullptr, 0, 5)));
  CHECK_NOTHROW((matrix_view<float>(nullptr, 5, 0)));
  CHECK_NOTHROW((matrix_view<float>(nullptr, 0, 0, 0)));
  CHECK_NOTHROW((matrix_view<float>(nullptr, 7, 0, 0)));
}

TEST_CASE("matrix_view row, column, block and row_range share the parent's memory and stride") {
  std::vector<double> storage(6 * 8);
  for (std::size_t k = 0; k < storage.size(); ++k) storage[k] = static_cast<double>(k);
  const auto m = moecomp::make_matrix_view(storage.data(), 6, 5, 8);  // element (i, j) = 8 i + j

  const auto r = m.row(4);
  CHECK(r.size() == 5);
  CHECK(r.stride() == 1);
  CHECK(r.is_contiguous());
  for (index_t j = 0; j < 5; ++j) CHECK(r(j) == 32 + j);

  const auto c = m.column(3);
  CHECK(c.size() == 6);
  CHECK(c.stride() == 8);
  CHECK_FALSE(c.is_contiguous());
  for (index_t i = 0; i < 6; ++i) CHECK(c[i] == 8 * i + 3);
  c(5) = -7.0;  // through a column view into the parent
  CHECK(m(5, 3) == -7.0);

  const auto b = m.block(1, 2, 3, 2);  // rows 1..3, columns 2..3
  CHECK(b.rows() == 3);
  CHECK(b.cols() == 2);
  CHECK(b.row_stride() == 8);
  CHECK(b.data() == storage.data() + 8 + 2);
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 2; ++j) CHECK(b(i, j) == 8 * (i + 1) + (j + 2));
  // A block of a block composes offsets.
  const auto bb = b.block(1, 1, 2, 1);
  CHECK(bb(0, 0) == 8 * 2 + 3);
  CHECK(bb(1, 0) == 8 * 3 + 3);
  // A column of a block keeps the parent's stride.
  CHECK(b.column(1).stride() == 8);
  CHECK(b.column(1)(2) == 8 * 3 + 3);

  const auto rr = m.row_range(2, 3);
  CHECK(rr.rows() == 3);
  CHECK(rr.cols() == 5);
  CHECK(rr.row_stride() == 8);
  CHECK(rr(0, 0) == 16);
  CHECK(rr(2, 4) == 36);

  // The whole matrix as a block is the same view.
  const auto all = m.block(0, 0, 6, 5);
  CHECK(all.data() == m.data());
  CHECK(all.row_stride() == m.row_stride());
}

TEST_CASE("matrix_view slicing rejects out-of-range requests, including ones that would overflow") {
  std::vector<float> storage(12);
  const auto m = moecomp::make_matrix_view(storage.data(), 3, 4);
  CHECK_INVALID(m.row(3), "matrix_view::row: index 3 is outside [0, 3)");
  CHECK_INVALID(m.row(-1), "matrix_view::row: index -1 is outside [0, 3)");
  CHECK_INVALID(m.column(4), "matrix_view::column: index 4 is outside [0, 4)");
  CHECK_INVALID(m.block(1, 1, 3, 1), "matrix_view::block: 3 x 1 at (1, 1) does not fit in 3 x 4");
  CHECK_INVALID(m.block(0, 2, 1, 3), "matrix_view::block: 1 x 3 at (0, 2) does not fit in 3 x 4");
  CHECK_INVALID(m.block(-1, 0, 1, 1), "does not fit in 3 x 4");
  CHECK_INVALID(m.block(0, 0, -1, 1), "does not fit in 3 x 4");
  CHECK_INVALID(m.row_range(2, 2), "matrix_view::block: 2 x 4 at (2, 0) does not fit in 3 x 4");
  // first + count would overflow index_t: still rejected, not wrapped around.
  CHECK_INVALID(m.block(1, 0, index_max, 1), "does not fit in 3 x 4");
  CHECK_INVALID(m.block(index_max, 0, 1, 1), "does not fit in 3 x 4");
  CHECK_INVALID(m.block(0, 2, 1, index_max), "does not fit in 3 x 4");
  CHECK_INVALID(m.row_range(index_max, index_max), "does not fit in 3 x 4");
  // Empty slices at the end are fine.
  CHECK(m.block(3, 4, 0, 0).empty());
  CHECK(m.row_range(3, 0).rows() == 0);
  CHECK(m.row_range(3, 0).cols() == 4);
}

TEST_CASE("empty matrix views") {
  const matrix_view<float> defaulted;
  CHECK(defaulted.rows() == 0);
  CHECK(defaulted.cols() == 0);
  CHECK(defaulted.size() == 0);
  CHECK(defaulted.empty());
  CHECK(defaulted.data() == nullptr);
  CHECK(defaulted.is_contiguous());

  std::vector<float> storage(6);
  const auto m = moecomp::make_matrix_view(storage.data(), 3, 2);
  const auto no_cols = m.block(0, 1, 3, 0);
  CHECK(no_cols.empty());
  CHECK(no_cols.rows() == 3);
  CHECK(no_cols.size() == 0);
  const auto no_rows = m.row_range(1, 0);
  CHECK(no_rows.empty());
  CHECK(no_rows.column(1).empty());  // a column of a 0-row matrix
  const matrix_view<float> zero_cols(nullptr, 4, 0);
  CHECK_INVALID(zero_cols.column(0), "matrix_view::column: index 0 is outside [0, 0)");
  CHECK(zero_cols.row(3).empty());  // rows exist, each has no element
  CHECK(zero_cols.row(3).size() == 0);
}

TEST_CASE("mutable views convert to const views of the same memory") {
  std::vector<float> storage = {1, 2, 3, 4, 5, 6};
  const auto m = moecomp::make_matrix_view(storage.data(), 2, 3);
  const matrix_view<const float> c = m;  // implicit
  CHECK(c.data() == m.data());
  CHECK(c.rows() == 2);
  CHECK(c.cols() == 3);
  CHECK(c.row_stride() == 3);
  CHECK(c(1, 2) == 6.0f);
  const auto ac = m.as_const();
  static_assert(std::is_same_v<decltype(ac), const matrix_view<const float>>);
  CHECK(ac(0, 1) == 2.0f);

  // A function taking const views accepts mutable ones.
  auto trace2 = [](matrix_view<const float> x) { return x(0, 0) + x(1, 1); };
  CHECK(trace2(m) == 6.0f);
  auto sum = [](vector_view<const float> v) {
    float s = 0;
    for (index_t i = 0; i < v.size(); ++i) s += v[i];
    return s;
  };
  CHECK(sum(m.column(2)) == 9.0f);
  CHECK(sum(m.row(1).as_const()) == 15.0f);

  const auto dm = moecomp::make_device_matrix_view(storage.data(), 2, 3);
  const matrix_view<const float, device_memory> dc = dm;
  CHECK(dc.data() == storage.data());
  CHECK(dc.row_ptr(1) == storage.data() + 3);
}

// ------------------------------------------------------------------------------------------------ vector

TEST_CASE("vector_view addresses element i at data[i * stride]") {
  std::vector<int> storage(20);
  std::iota(storage.begin(), storage.end(), 100);
  const vector_view<int> v(storage.data() + 1, 6, 3);  // 101, 104, ..., 116
  CHECK(v.size() == 6);
  CHECK(v.stride() == 3);
  CHECK_FALSE(v.empty());
  CHECK_FALSE(v.is_contiguous());
  for (index_t i = 0; i < 6; ++i) {
    CHECK(v(i) == 101 + 3 * i);
    CHECK(v[i] == 101 + 3 * i);
    CHECK(v.ptr(i) == storage.data() + 1 + 3 * i);
  }
  v[5] = 0;
  CHECK(storage[16] == 0);

  const auto s = v.subview(2, 3);  // elements 2, 3, 4 of v
  CHECK(s.size() == 3);
  CHECK(s.stride() == 3);
  CHECK(s(0) == 107);
  CHECK(s(2) == 113);
  const auto ss = s.subview(1, 2);
  CHECK(ss(1) == 113);
  CHECK(v.subview(6, 0).empty());
  CHECK(v.subview(0, 6).data() == v.data());

  const auto packed = moecomp::make_vector_view(storage.data(), 20);
  CHECK(packed.stride() == 1);
  CHECK(packed.is_contiguous());
  CHECK(moecomp::make_vector_view(storage.data(), 1, 9).is_contiguous());  // one element: any stride

  const auto dv = moecomp::make_device_vector_view(storage.data(), 4, 2);
  CHECK(dv.ptr(3) == storage.data() + 6);
}

TEST_CASE("vector_view construction and subview reject bad arguments") {
  std::vector<float> storage(8);
  float* p = storage.data();
  CHECK_INVALID((vector_view<float>(p, -1)), "vector_view: size must be >= 0, got -1");
  CHECK_INVALID((vector_view<float>(p, 3, 0)), "vector_view: stride must be >= 1, got 0");
  CHECK_INVALID((vector_view<float>(p, 3, -2)), "vector_view: stride must be >= 1, got -2");
  CHECK_INVALID((vector_view<float>(nullptr, 3)), "vector_view: data is null but size is 3");
  CHECK_INVALID((vector_view<float>(p, index_max / 4 + 1, 4)), "vector_view: size * stride overflows");
  CHECK_INVALID((moecomp::make_device_vector_view(p, 2, 0)), "stride must be >= 1, got 0");
  CHECK_NOTHROW((vector_view<float>(p, index_max / 4, 4)));
  CHECK_NOTHROW((vector_view<float>(nullptr, 0)));

  const vector_view<float> v(p, 8);
  CHECK_INVALID(v.subview(5, 4), "vector_view::subview: 4 elements from 5 do not fit in a vector of size 8");
  CHECK_INVALID(v.subview(-1, 1), "do not fit in a vector of size 8");
  CHECK_INVALID(v.subview(0, -1), "do not fit in a vector of size 8");
  CHECK_INVALID(v.subview(9, 0), "do not fit in a vector of size 8");
  CHECK_INVALID(v.subview(1, index_max), "do not fit in a vector of size 8");  // would overflow first + count
  CHECK_INVALID(v.subview(index_max, 1), "do not fit in a vector of size 8");
}

TEST_CASE("empty vector views") {
  const vector_view<double> v;
  CHECK(v.size() == 0);
  CHECK(v.empty());
  CHECK(v.stride() == 1);
  CHECK(v.data() == nullptr);
  CHECK(v.is_contiguous());
  CHECK(v.subview(0, 0).empty());
  CHECK_INVALID(v.subview(0, 1), "do not fit in a vector of size 0");
}

// ------------------------------------------------------------------------------------------------ owning

TEST_CASE("host_matrix owns a value-initialised row-major buffer and views it") {
  moecomp::host_matrix<float> m(3, 4);
  CHECK(m.rows() == 3);
  CHECK(m.cols() == 4);
  CHECK(m.size() == 12);
  CHECK(m.storage().size() == 12);
  for (float x : m.storage()) CHECK(x == 0.0f);
  m(2, 1) = 5.0f;
  CHECK(m.data()[2 * 4 + 1] == 5.0f);

  const auto v = m.view();
  static_assert(std::is_same_v<decltype(v), const matrix_view<float>>);
  CHECK(v.data() == m.data());
  CHECK(v.row_stride() == 4);
  CHECK(v(2, 1) == 5.0f);
  v(0, 3) = 7.0f;
  CHECK(m(0, 3) == 7.0f);
  const auto& cm = m;
  static_assert(std::is_same_v<decltype(cm.view()), matrix_view<const float>>);
  static_assert(std::is_same_v<decltype(m.const_view()), matrix_view<const float>>);
  CHECK(cm.view()(0, 3) == 7.0f);

  const moecomp::host_matrix<int> filled(2, 3, 9);
  for (int x : filled.storage()) CHECK(x == 9);

  const moecomp::host_matrix<double> empty;
  CHECK(empty.view().empty());
  CHECK(moecomp::host_matrix<double>(0, 5).view().cols() == 5);

  CHECK_INVALID((moecomp::host_matrix<float>(-1, 2)), "host_matrix: shape must be non-negative, got -1 x 2");
  CHECK_INVALID((moecomp::host_matrix<float>(index_max / 2, 3)), "host_matrix: rows * cols overflows");
}

TEST_CASE("host_vector owns a value-initialised buffer and views it") {
  moecomp::host_vector<int> v(5);
  CHECK(v.size() == 5);
  for (index_t i = 0; i < 5; ++i) CHECK(v[i] == 0);
  v[3] = 4;
  v(4) = 8;
  const auto view = v.view();
  CHECK(view.size() == 5);
  CHECK(view.stride() == 1);
  CHECK(view(3) == 4);
  CHECK(view[4] == 8);
  static_assert(std::is_same_v<decltype(v.const_view()), vector_view<const int>>);
  CHECK(moecomp::host_vector<int>().view().empty());
  CHECK_INVALID((moecomp::host_vector<int>(-3)), "host_vector: size must be >= 0, got -3");
}

// ------------------------------------------------------------------------------------- stacks of matrices

using moecomp::matrix_stack_view;

// A stack travels into kernels like the other views; its element access exists on the host only.
static_assert(std::is_trivially_copyable_v<matrix_stack_view<float>>);
static_assert(std::is_trivially_copyable_v<matrix_stack_view<const double, device_memory>>);
template <class V, class = void>
struct has_call_3 : std::false_type {};
template <class V>
struct has_call_3<V, std::void_t<decltype(std::declval<const V&>()(index_t{0}, index_t{0}, index_t{0}))>>
    : std::true_type {};
static_assert(has_call_3<matrix_stack_view<float>>::value);
static_assert(!has_call_3<matrix_stack_view<float, device_memory>>::value);
// Mutable converts to const in one memory space; the spaces never convert into each other.
static_assert(std::is_convertible_v<matrix_stack_view<float>, matrix_stack_view<const float>>);
static_assert(!std::is_convertible_v<matrix_stack_view<const float>, matrix_stack_view<float>>);
static_assert(!std::is_convertible_v<matrix_stack_view<float>, matrix_stack_view<float, device_memory>>);
static_assert(!std::is_convertible_v<matrix_stack_view<float, device_memory>, matrix_stack_view<float>>);

TEST_CASE("matrix_stack_view addresses (e, i, j) at data[e * matrix_stride + i * row_stride + j]") {
  // Three expert matrices of 2 x 3 (d_ff x d), rows padded to 4, matrices padded to 10 elements.
  std::vector<int> storage(30);
  std::iota(storage.begin(), storage.end(), 0);
  const matrix_stack_view<int> experts(storage.data(), 3, 2, 3, 4, 10);
  CHECK(experts.count() == 3);
  CHECK(experts.rows() == 2);
  CHECK(experts.cols() == 3);
  CHECK(experts.size() == 18);
  CHECK_FALSE(experts.is_contiguous());
  CHECK(experts(2, 1, 2) == 2 * 10 + 1 * 4 + 2);
  CHECK(experts.row_ptr(1, 1) == storage.data() + 14);
  CHECK(experts.matrix_ptr(2) == storage.data() + 20);
  // Matrix e is an ordinary matrix view sharing the row stride.
  const matrix_view<int> second = experts[1];
  CHECK(second.rows() == 2);
  CHECK(second.row_stride() == 4);
  CHECK(second(1, 0) == 14);
  CHECK(experts.matrix(0)(0, 2) == 2);
  // A subrange is a stack of consecutive matrices.
  const matrix_stack_view<int> last_two = experts.subrange(1, 2);
  CHECK(last_two.count() == 2);
  CHECK(last_two(0, 0, 0) == 10);
  CHECK(last_two(1, 1, 1) == 25);
  // Padding between matrices forbids the one-matrix view; without it the stack is (count rows) x cols.
  CHECK_INVALID(experts.as_matrix(), "matrix_stack_view::as_matrix: matrix_stride must be rows * row_stride (8)");
  const matrix_stack_view<int> rows_padded(storage.data(), 3, 2, 3, 4, 8);
  const matrix_view<int> all = rows_padded.as_matrix();
  CHECK(all.rows() == 6);
  CHECK(all.row_stride() == 4);
  CHECK(all(5, 2) == 5 * 4 + 2);
}

TEST_CASE("contiguous stacks and split_rows: one (count rows) x cols matrix cut into equal row blocks") {
  std::vector<float> storage(24);
  std::iota(storage.begin(), storage.end(), 0.0f);
  const matrix_stack_view<float> contiguous(storage.data(), 4, 2, 3);
  CHECK(contiguous.row_stride() == 3);
  CHECK(contiguous.matrix_stride() == 6);
  CHECK(contiguous.is_contiguous());
  CHECK(contiguous(3, 1, 2) == 23.0f);
  // The stacked-matrix convention: the same memory as an 8 x 3 matrix split in 4.
  const matrix_stack_view<float> split = moecomp::split_rows(moecomp::make_matrix_view(storage.data(), 8, 3), 4);
  CHECK(split.count() == 4);
  CHECK(split.rows() == 2);
  CHECK(split.matrix_stride() == 6);
  CHECK(split(2, 0, 1) == contiguous(2, 0, 1));
  CHECK(split.row_ptr(3, 1) == contiguous.row_ptr(3, 1));
  // A padded matrix keeps its row stride in every block.
  const matrix_stack_view<float> padded = moecomp::split_rows(moecomp::make_matrix_view(storage.data(), 4, 2, 6), 2);
  CHECK(padded.row_stride() == 6);
  CHECK(padded.matrix_stride() == 12);
  CHECK(padded(1, 1, 1) == 19.0f);
  CHECK_INVALID(moecomp::split_rows(moecomp::make_matrix_view(storage.data(), 8, 3), 3),
                "split_rows: the matrix's rows (8) must be a multiple of count (3)");
  CHECK_INVALID(moecomp::split_rows(moecomp::make_matrix_view(storage.data(), 8, 3), 0),
                "split_rows: count must be >= 1, got 0");
  // Const conversion keeps every stride.
  const matrix_stack_view<const float> read_only = padded;
  CHECK(read_only.data() == padded.data());
  CHECK(read_only.matrix_stride() == 12);
  CHECK(padded.as_const()(1, 1, 1) == 19.0f);
}

TEST_CASE("matrix_stack_view construction rejects bad shapes with messages that name the problem") {
  std::vector<double> storage(64);
  double* p = storage.data();
  CHECK(thrown_message([&] { matrix_stack_view<double>(p, -1, 2, 3); }) ==
        "matrix_stack_view: shape must be non-negative, got -1 x 2 x 3");
  CHECK(thrown_message([&] { matrix_stack_view<double>(p, 2, 2, 4, 3, 8); }) ==
        "matrix_stack_view: row_stride must be >= cols (4), got 3");
  CHECK(thrown_message([&] { matrix_stack_view<double>(p, 2, 2, 3, 4, 7); }) ==
        "matrix_stack_view: matrix_stride must be >= rows * row_stride (8), got 7");
  CHECK(thrown_message([&] { matrix_stack_view<double>(nullptr, 2, 2, 3); }) ==
        "matrix_stack_view: data is null but shape is 2 x 2 x 3");
  CHECK(thrown_message([&] { matrix_stack_view<double>(p, 2, index_max / 2, 3); }).find("rows * cols overflows") !=
        std::string::npos);
  CHECK(thrown_message([&] { matrix_stack_view<double>(p, index_max, 2, 3); }) ==
        "matrix_stack_view: count * matrix_stride overflows (" + std::to_string(index_max) + " x 6)");
  // One matrix needs no matrix stride: DLPack producers may give any stride for an extent of 1.
  const matrix_stack_view<double> one(p, 1, 2, 3, 3, 1);
  CHECK(one(0, 1, 2) == storage[5]);
  // Empty stacks may have no data.
  const matrix_stack_view<double> none(nullptr, 0, 2, 3);
  CHECK(none.empty());
  CHECK(none.size() == 0);
  CHECK(none.as_matrix().rows() == 0);
  CHECK_INVALID(one.matrix(1), "matrix_stack_view::matrix: index 1 is outside [0, 1)");
  CHECK_INVALID(one.subrange(1, 1), "matrix_stack_view::subrange: 1 matrices from 1 do not fit in a stack of 1");
  CHECK_INVALID(one.subrange(0, index_max), "do not fit in a stack of 1");
}

TEST_CASE("gathered stacks: matrix e at table[e], anywhere in memory, repeats allowed (experts read in place)") {
  // Three 2 x 3 matrices with rows padded to 4, scattered in one buffer out of order; matrix 3 repeats matrix 0.
  std::vector<int> storage(40);
  std::iota(storage.begin(), storage.end(), 0);
  int* table[] = {storage.data() + 30, storage.data() + 2, storage.data() + 17, storage.data() + 30};
  const matrix_stack_view<int> experts(table, 4, 2, 3, 4);
  CHECK(experts.is_gathered());
  CHECK(experts.count() == 4);
  CHECK(experts.matrix_stride() == 0);
  CHECK_FALSE(experts.is_contiguous());
  CHECK_FALSE(experts.matrices_contiguous());  // rows padded
  CHECK(experts.matrix_ptr(2) == storage.data() + 17);
  CHECK(experts.row_ptr(1, 1) == storage.data() + 6);
  CHECK(experts(2, 1, 2) == 17 + 4 + 2);
  CHECK(experts[0](1, 1) == experts[3](1, 1));
  CHECK(experts.matrix(1).row_stride() == 4);
  // Subranges keep the table; the const view shares it.
  const matrix_stack_view<int> middle = experts.subrange(1, 2);
  CHECK(middle.is_gathered());
  CHECK(middle(1, 0, 0) == 17);
  const matrix_stack_view<const int> read_only = experts;
  CHECK(read_only.is_gathered());
  CHECK(read_only(0, 1, 2) == 36);
  // No one-matrix view, and contiguous matrices are seen as such.
  CHECK_INVALID(experts.as_matrix(), "matrix_stack_view::as_matrix: a gathered stack of 4 matrices is not one matrix");
  const matrix_stack_view<int> dense(table, 2, 2, 4, 4);
  CHECK(dense.matrices_contiguous());
  // Overlap checks see the span from the lowest matrix to the end of the highest.
  const auto span = moecomp::detail::address_range_of(experts);
  CHECK(span.first == reinterpret_cast<std::uintptr_t>(storage.data() + 2));
  CHECK(span.last == reinterpret_cast<std::uintptr_t>(storage.data() + 30 + 4 + 3));
  CHECK(moecomp::detail::views_overlap(experts, moecomp::make_vector_view(storage.data() + 36, 1)));
  CHECK_FALSE(moecomp::detail::views_overlap(experts, moecomp::make_vector_view(storage.data() + 37, 3)));
  // Bad tables are refused by name.
  CHECK(thrown_message([&] { matrix_stack_view<int>(static_cast<int* const*>(nullptr), 2, 2, 3, 3); }) ==
        "matrix_stack_view: matrices is null but count is 2");
  int* holes[] = {storage.data(), nullptr};
  CHECK(thrown_message([&] { matrix_stack_view<int>(holes, 2, 2, 3, 3); }) == "matrix_stack_view: matrices[1] is null");
  CHECK(thrown_message([&] { matrix_stack_view<int>(holes, 1, 2, 3, 2); }) ==
        "matrix_stack_view: row_stride must be >= cols (3), got 2");
}

TEST_CASE("device stacks: addresses only, never dereferenced on the host") {
  // A device address that is never dereferenced.
  auto* fake = reinterpret_cast<float*>(std::uintptr_t{0x7f0000001000});
  const auto experts = moecomp::make_device_matrix_stack_view(fake, 8, 16, 32);
  static_assert(std::is_same_v<decltype(experts), const matrix_stack_view<float, device_memory>>);
  CHECK(experts.count() == 8);
  CHECK(experts.matrix_ptr(7) == fake + 7 * 16 * 32);
  CHECK(experts.row_ptr(1, 2) == fake + 16 * 32 + 2 * 32);
  const matrix_view<float, device_memory> third = experts[2];
  CHECK(third.data() == fake + 2 * 16 * 32);
  const auto strided = moecomp::make_device_matrix_stack_view(fake, 2, 4, 5, 8, 40);
  CHECK(strided.subrange(1, 1).data() == fake + 40);
  CHECK_FALSE(strided.is_contiguous());
}

TEST_CASE("bfloat16 stacks: weights stored in 16 bits, read as float") {
  // Two 2 x 2 experts in bf16 storage, written and read through the view.
  std::vector<moecomp::bfloat16> storage(8);
  const auto experts = moecomp::make_matrix_stack_view(storage.data(), 2, 2, 2);
  for (index_t e = 0; e < 2; ++e)
    for (index_t i = 0; i < 2; ++i)
      for (index_t j = 0; j < 2; ++j) experts(e, i, j) = moecomp::bfloat16(float(e * 100 + i * 10 + j) + 0.5f);
  CHECK(static_cast<float>(experts(1, 1, 0)) == 110.5f);
  CHECK(static_cast<float>(storage[6]) == 110.5f);
  // 1.00390625 = 1 + 2^-8 lies halfway between two bf16 values: it rounds to even (1.0).
  experts(0, 0, 0) = moecomp::bfloat16(1.00390625f);
  CHECK(static_cast<float>(experts.as_const()(0, 0, 0)) == 1.0f);
  CHECK(sizeof(storage[0]) == 2);
}
