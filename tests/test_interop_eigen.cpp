// Eigen <-> moecomp views: no copies (same pointers and strides), element agreement, const-correctness,
// every rejection with its message, and pairwise distances through Eigen views.
#include <moecomp/distance/pairwise_distance.hpp>
#include <moecomp/interop/eigen.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <Eigen/Core>

#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using moecomp::index_t;
using moecomp::matrix_view;
using moecomp::vector_view;
using RowMatrixXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatrixXd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The message of the moecomp::invalid_argument `f` throws ("" and a failed check when it throws nothing).
using moecomp_test::thrown_message;

// m(i, j) = 10 i + j: every element distinct and easy to name.
template <class M>
void fill_planted(M& m) {
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j) m(i, j) = static_cast<typename M::Scalar>(10 * i + j);
}

template <class V, class M>
void check_same_elements(const V& view, const M& m) {
  REQUIRE(view.rows() == m.rows());
  REQUIRE(view.cols() == m.cols());
  for (index_t i = 0; i < view.rows(); ++i)
    for (index_t j = 0; j < view.cols(); ++j) CHECK(view(i, j) == m(i, j));
}

}  // namespace

// ---------------------------------------------------------------- compile-time layout checks
// as_matrix_view(column-major) does not compile: it static_asserts on this trait with the message
// "column-major Eigen matrix: use as_transposed_view() or a RowMajor matrix".
static_assert(!moecomp::interop::is_row_major_eigen_v<Eigen::MatrixXf>);
static_assert(!moecomp::interop::is_row_major_eigen_v<const Eigen::MatrixXd&>);
static_assert(!moecomp::interop::is_row_major_eigen_v<Eigen::Map<Eigen::MatrixXf>>);
static_assert(!moecomp::interop::is_row_major_eigen_v<Eigen::Ref<Eigen::MatrixXf>>);
static_assert(!moecomp::interop::is_row_major_eigen_v<Eigen::Block<Eigen::MatrixXf>>);
static_assert(moecomp::interop::is_row_major_eigen_v<RowMatrixXf>);
static_assert(moecomp::interop::is_row_major_eigen_v<Eigen::Map<const RowMatrixXf, 0, Eigen::OuterStride<>>>);
static_assert(moecomp::interop::is_row_major_eigen_v<Eigen::Block<RowMatrixXf>>);
static_assert(moecomp::interop::is_row_major_eigen_v<Eigen::Matrix<float, 3, 4, Eigen::RowMajor>>);
static_assert(moecomp::interop::is_row_major_eigen_v<Eigen::VectorXf>);  // one column: either layout
static_assert(moecomp::interop::is_row_major_eigen_v<Eigen::RowVectorXf>);
static_assert(!moecomp::interop::is_row_major_eigen_v<std::vector<float>>);  // not Eigen at all
// Lazy expressions have no storage to view.
static_assert(moecomp::interop::has_eigen_storage_v<RowMatrixXf>);
static_assert(moecomp::interop::has_eigen_storage_v<Eigen::Block<RowMatrixXf>>);
static_assert(!moecomp::interop::has_eigen_storage_v<decltype(RowMatrixXf() + RowMatrixXf())>);
// Temporaries that own their storage would dangle; lvalues, Maps and Blocks do not.
static_assert(moecomp::interop::eigen_view_cannot_dangle_v<RowMatrixXf&>);
static_assert(moecomp::interop::eigen_view_cannot_dangle_v<const RowMatrixXf&>);
static_assert(!moecomp::interop::eigen_view_cannot_dangle_v<RowMatrixXf>);
static_assert(moecomp::interop::eigen_view_cannot_dangle_v<Eigen::Map<RowMatrixXf>>);
static_assert(moecomp::interop::eigen_view_cannot_dangle_v<Eigen::Block<RowMatrixXf>>);
static_assert(moecomp::interop::eigen_view_cannot_dangle_v<Eigen::Ref<RowMatrixXf>>);
static_assert(!moecomp::interop::eigen_view_cannot_dangle_v<Eigen::Ref<const RowMatrixXf>>);
static_assert(moecomp::interop::eigen_view_cannot_dangle_v<const Eigen::Ref<const RowMatrixXf>&>);

TEST_CASE("eigen: row-major matrix -> matrix_view shares data, element (i, j) agrees, writes go through") {
  RowMatrixXf m(3, 4);
  fill_planted(m);
  auto v = moecomp::as_matrix_view(m);
  static_assert(std::is_same_v<decltype(v), matrix_view<float>>);
  CHECK(v.data() == m.data());
  CHECK(v.rows() == 3);
  CHECK(v.cols() == 4);
  CHECK(v.row_stride() == 4);
  check_same_elements(v, m);
  v(2, 1) = -5.0f;
  CHECK(m(2, 1) == -5.0f);

  const RowMatrixXf& cm = m;
  auto cv = moecomp::as_matrix_view(cm);
  static_assert(std::is_same_v<decltype(cv), matrix_view<const float>>);
  CHECK(cv.data() == m.data());
  check_same_elements(cv, m);
}

TEST_CASE("eigen: fixed-size row-major matrix and Array") {
  Eigen::Matrix<double, 2, 3, Eigen::RowMajor> f;
  fill_planted(f);
  auto v = moecomp::as_matrix_view(f);
  static_assert(std::is_same_v<decltype(v), matrix_view<double>>);
  CHECK(v.data() == f.data());
  CHECK(v.row_stride() == 3);
  check_same_elements(v, f);

  Eigen::Array<int, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> a(2, 5);
  fill_planted(a);
  auto av = moecomp::as_matrix_view(a);
  static_assert(std::is_same_v<decltype(av), matrix_view<int>>);
  CHECK(av.data() == a.data());
  check_same_elements(av, a);
}

TEST_CASE("eigen: Map with OuterStride<> and Stride<Dynamic, 1> keeps the row stride") {
  std::vector<float> buffer(3 * 7);
  for (std::size_t k = 0; k < buffer.size(); ++k) buffer[k] = static_cast<float>(k);

  Eigen::Map<RowMatrixXf, 0, Eigen::OuterStride<>> outer(buffer.data(), 3, 5, Eigen::OuterStride<>(7));
  auto v = moecomp::as_matrix_view(outer);
  static_assert(std::is_same_v<decltype(v), matrix_view<float>>);
  CHECK(v.data() == buffer.data());
  CHECK(v.row_stride() == 7);
  CHECK_FALSE(v.is_contiguous());
  check_same_elements(v, outer);
  CHECK(v(2, 4) == 18.0f);

  using dyn1 = Eigen::Stride<Eigen::Dynamic, 1>;
  Eigen::Map<RowMatrixXf, 0, dyn1> strided(buffer.data() + 1, 2, 6, dyn1(7, 1));
  auto sv = moecomp::as_matrix_view(strided);
  CHECK(sv.data() == buffer.data() + 1);
  CHECK(sv.row_stride() == 7);
  check_same_elements(sv, strided);

  // A temporary Map refers to memory owned elsewhere: allowed, and mutable.
  auto tv = moecomp::as_matrix_view(Eigen::Map<RowMatrixXf>(buffer.data(), 3, 7));
  static_assert(std::is_same_v<decltype(tv), matrix_view<float>>);
  CHECK(tv.data() == buffer.data());
  CHECK(tv.row_stride() == 7);

  // Map<const ...> is read-only, and so is its view.
  Eigen::Map<const RowMatrixXf, 0, Eigen::OuterStride<>> read_only(buffer.data(), 3, 5, Eigen::OuterStride<>(7));
  auto rv = moecomp::as_matrix_view(read_only);
  static_assert(std::is_same_v<decltype(rv), matrix_view<const float>>);
  CHECK(rv.row_stride() == 7);
  check_same_elements(rv, read_only);
}

TEST_CASE("eigen: Map with a dynamic inner stride is checked at run time") {
  std::vector<double> buffer(40, 0.0);
  using dyn = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>;
  // Inner stride 1 at run time: accepted.
  Eigen::Map<RowMatrixXd, 0, dyn> fine(buffer.data(), 3, 4, dyn(6, 1));
  auto v = moecomp::as_matrix_view(fine);
  CHECK(v.row_stride() == 6);
  CHECK(v.data() == buffer.data());
  // Inner stride 2: the rows are not contiguous, which a matrix_view cannot express.
  Eigen::Map<RowMatrixXd, 0, dyn> gapped(buffer.data(), 3, 4, dyn(8, 2));
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(gapped); }) ==
        "as_matrix_view: Eigen object inner (column) stride must be 1, got strides (8, 2) for shape 3 x 4");
  // Rows that overlap (outer stride < cols).
  Eigen::Map<RowMatrixXd, 0, Eigen::OuterStride<>> overlapping(buffer.data(), 3, 4, Eigen::OuterStride<>(2));
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(overlapping); }) ==
        "as_matrix_view: Eigen object row stride must be >= cols (4), got strides (2, 1) for shape 3 x 4");
  // Column-major strides handed over through a dynamic row-major Map.
  Eigen::Map<RowMatrixXd, 0, dyn> transposed(buffer.data(), 3, 4, dyn(1, 3));
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_view(transposed); }) ==
        "as_matrix_view: Eigen object is column-major (strides (1, 3) for shape 3 x 4); a matrix_view needs "
        "row-major rows with inner stride 1");
}

TEST_CASE("eigen: Ref to mutable and const row-major matrices") {
  RowMatrixXd m(4, 3);
  fill_planted(m);
  Eigen::Ref<RowMatrixXd> r = m;
  auto v = moecomp::as_matrix_view(r);
  static_assert(std::is_same_v<decltype(v), matrix_view<double>>);
  CHECK(v.data() == m.data());
  CHECK(v.row_stride() == 3);
  check_same_elements(v, m);

  Eigen::Ref<const RowMatrixXd> cr = m;
  auto cv = moecomp::as_matrix_view(cr);
  static_assert(std::is_same_v<decltype(cv), matrix_view<const double>>);
  CHECK(cv.data() == m.data());  // no copy: m already has the Ref's layout
  check_same_elements(cv, m);

  // A Ref bound to a block keeps the block's outer stride.
  Eigen::Ref<RowMatrixXd> rb = m.bottomRightCorner(2, 2);
  auto bv = moecomp::as_matrix_view(rb);
  CHECK(bv.data() == &m(2, 1));
  CHECK(bv.row_stride() == 3);
  check_same_elements(bv, m.bottomRightCorner(2, 2));
}

TEST_CASE("eigen: blocks, rows and columns of row-major matrices") {
  RowMatrixXf m(5, 6);
  fill_planted(m);
  auto b = moecomp::as_matrix_view(m.block(1, 2, 3, 4));
  static_assert(std::is_same_v<decltype(b), matrix_view<float>>);
  CHECK(b.data() == &m(1, 2));
  CHECK(b.rows() == 3);
  CHECK(b.cols() == 4);
  CHECK(b.row_stride() == 6);
  CHECK(b(0, 0) == 12.0f);
  CHECK(b(2, 3) == 35.0f);
  b(1, 1) = 100.0f;
  CHECK(m(2, 3) == 100.0f);

  const RowMatrixXf& cm = m;
  auto cb = moecomp::as_matrix_view(cm.block(1, 2, 3, 4));
  static_assert(std::is_same_v<decltype(cb), matrix_view<const float>>);
  CHECK(cb.data() == &m(1, 2));

  // One row as a 1 x n matrix, one column as an n x 1 matrix (its row stride is the matrix's).
  auto row = moecomp::as_matrix_view(m.row(3));
  CHECK(row.rows() == 1);
  CHECK(row.cols() == 6);
  CHECK(row.data() == &m(3, 0));
  auto col = moecomp::as_matrix_view(m.col(2));
  CHECK(col.rows() == 5);
  CHECK(col.cols() == 1);
  CHECK(col.row_stride() == 6);
  CHECK(col(4, 0) == 42.0f);

  // Empty blocks are fine.
  auto empty = moecomp::as_matrix_view(m.block(0, 0, 0, 3));
  CHECK(empty.empty());
  CHECK(empty.cols() == 3);
}

TEST_CASE("eigen: column-major matrices through as_transposed_view") {
  Eigen::MatrixXf m(3, 5);  // column-major
  fill_planted(m);
  auto t = moecomp::as_transposed_view(m);
  static_assert(std::is_same_v<decltype(t), matrix_view<float>>);
  CHECK(t.data() == m.data());
  CHECK(t.rows() == 5);
  CHECK(t.cols() == 3);
  CHECK(t.row_stride() == 3);
  for (index_t i = 0; i < 5; ++i)
    for (index_t j = 0; j < 3; ++j) CHECK(t(i, j) == m(j, i));

  const Eigen::MatrixXf& cm = m;
  auto ct = moecomp::as_transposed_view(cm);
  static_assert(std::is_same_v<decltype(ct), matrix_view<const float>>);

  // A block of a column-major matrix: the transpose's row stride is the matrix's outer stride.
  Eigen::MatrixXd big(6, 4);
  fill_planted(big);
  auto tb = moecomp::as_transposed_view(big.block(1, 1, 4, 2));
  CHECK(tb.data() == &big(1, 1));
  CHECK(tb.rows() == 2);
  CHECK(tb.cols() == 4);
  CHECK(tb.row_stride() == 6);
  CHECK(tb(1, 3) == big(4, 2));

  // A column vector transposes into one contiguous row.
  Eigen::VectorXf x(4);
  x << 1, 2, 3, 4;
  auto tx = moecomp::as_transposed_view(x);
  CHECK(tx.rows() == 1);
  CHECK(tx.cols() == 4);
  CHECK(tx(0, 3) == 4.0f);

  // A column vector is also accepted by as_matrix_view, as n x 1.
  auto nx1 = moecomp::as_matrix_view(x);
  CHECK(nx1.rows() == 4);
  CHECK(nx1.cols() == 1);
  CHECK(nx1(2, 0) == 3.0f);

  // Run-time inner stride of a column-major Map.
  std::vector<float> buffer(64, 0.0f);
  using dyn = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>;
  Eigen::Map<Eigen::MatrixXf, 0, dyn> gapped(buffer.data(), 3, 4, dyn(8, 2));
  CHECK(thrown_message([&] { (void)moecomp::as_transposed_view(gapped); }) ==
        "as_transposed_view: Eigen object (transposed) inner (column) stride must be 1, got strides (8, 2) for "
        "shape 4 x 3");
}

TEST_CASE("eigen: vectors -> vector_view with their stride") {
  Eigen::VectorXd x(4);
  x << 1, 2, 3, 4;
  auto v = moecomp::as_vector_view(x);
  static_assert(std::is_same_v<decltype(v), vector_view<double>>);
  CHECK(v.data() == x.data());
  CHECK(v.size() == 4);
  CHECK(v.stride() == 1);
  CHECK(v(3) == 4.0);

  const Eigen::RowVectorXf r = Eigen::RowVectorXf::LinSpaced(5, 0.0f, 4.0f);
  auto rv = moecomp::as_vector_view(r);
  static_assert(std::is_same_v<decltype(rv), vector_view<const float>>);
  CHECK(rv.data() == r.data());
  CHECK(rv(4) == 4.0f);

  // A column of a row-major matrix: stride = number of columns.
  RowMatrixXf m(4, 3);
  fill_planted(m);
  auto col = moecomp::as_vector_view(m.col(1));
  static_assert(std::is_same_v<decltype(col), vector_view<float>>);
  CHECK(col.data() == &m(0, 1));
  CHECK(col.size() == 4);
  CHECK(col.stride() == 3);
  for (index_t i = 0; i < 4; ++i) CHECK(col(i) == m(i, 1));
  auto row = moecomp::as_vector_view(m.row(2));
  CHECK(row.stride() == 1);
  CHECK(row.data() == &m(2, 0));

  // A Map with a run-time inner stride.
  std::vector<float> buffer{0, 1, 2, 3, 4, 5, 6, 7, 8};
  Eigen::Map<Eigen::VectorXf, 0, Eigen::InnerStride<>> every_third(buffer.data(), 3, Eigen::InnerStride<>(3));
  auto sv = moecomp::as_vector_view(every_third);
  CHECK(sv.data() == buffer.data());
  CHECK(sv.stride() == 3);
  CHECK(sv(2) == 6.0f);
  Eigen::Map<const Eigen::VectorXf, 0, Eigen::InnerStride<2>> every_second(buffer.data(), 4);
  auto cv = moecomp::as_vector_view(every_second);
  static_assert(std::is_same_v<decltype(cv), vector_view<const float>>);
  CHECK(cv.stride() == 2);
  CHECK(cv(3) == 6.0f);

  // A zero stride (every element aliasing one) is rejected.
  Eigen::Map<Eigen::VectorXf, 0, Eigen::InnerStride<>> broadcast(buffer.data(), 3, Eigen::InnerStride<>(0));
  CHECK(thrown_message([&] { (void)moecomp::as_vector_view(broadcast); }) ==
        "as_vector_view: Eigen vector stride must be >= 1, got 0 for size 3");
}

TEST_CASE("eigen: as_eigen maps a matrix_view back without copying") {
  std::vector<float> buffer(3 * 5);
  for (std::size_t k = 0; k < buffer.size(); ++k) buffer[k] = static_cast<float>(k);
  const matrix_view<float> v(buffer.data(), 3, 4, 5);
  auto e = moecomp::as_eigen(v);
  static_assert(std::is_same_v<decltype(e), Eigen::Map<RowMatrixXf, 0, Eigen::OuterStride<>>>);
  static_assert(std::is_same_v<decltype(e), moecomp::interop::eigen_matrix_map<float>>);
  CHECK(e.data() == buffer.data());
  CHECK(e.rows() == 3);
  CHECK(e.cols() == 4);
  CHECK(e.outerStride() == 5);
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 4; ++j) CHECK(e(i, j) == v(i, j));
  e(1, 2) = -1.0f;
  CHECK(buffer[7] == -1.0f);
  // Eigen arithmetic on the map: the row sums of [[0..3], [5..8], [10..13]] with e(1, 2) = -1.
  const Eigen::VectorXf sums = e.rowwise().sum();
  CHECK(sums(0) == 6.0f);
  CHECK(sums(1) == 5.0f + 6.0f - 1.0f + 8.0f);
  CHECK(sums(2) == 46.0f);

  const matrix_view<const float> cv = v;
  auto ce = moecomp::as_eigen(cv);
  static_assert(std::is_same_v<decltype(ce), Eigen::Map<const RowMatrixXf, 0, Eigen::OuterStride<>>>);
  CHECK(ce.data() == buffer.data());

  // Round trip: view -> Eigen -> view gives the same view.
  auto back = moecomp::as_matrix_view(e);
  CHECK(back.data() == v.data());
  CHECK(back.row_stride() == v.row_stride());

  // An empty default view maps to an empty matrix.
  auto empty = moecomp::as_eigen(matrix_view<double>());
  CHECK(empty.size() == 0);
}

TEST_CASE("eigen: as_eigen maps a strided vector_view") {
  std::vector<double> buffer{1, 2, 3, 4, 5, 6, 7};
  const vector_view<double> v(buffer.data(), 4, 2);
  auto e = moecomp::as_eigen(v);
  static_assert(std::is_same_v<decltype(e), Eigen::Map<Eigen::VectorXd, 0, Eigen::InnerStride<>>>);
  CHECK(e.data() == buffer.data());
  CHECK(e.size() == 4);
  CHECK(e.innerStride() == 2);
  CHECK(e.sum() == 1.0 + 3.0 + 5.0 + 7.0);
  auto ce = moecomp::as_eigen(v.as_const());
  static_assert(std::is_same_v<decltype(ce), Eigen::Map<const Eigen::VectorXd, 0, Eigen::InnerStride<>>>);
  auto back = moecomp::as_vector_view(e);
  CHECK(back.data() == v.data());
  CHECK(back.stride() == 2);
}

TEST_CASE("eigen: pairwise distances through Eigen views equal the raw-pointer result") {
  // Rows of x and y with planted distances: |(0,0,0) - (3,4,0)| = 5, |(1,2,2) - (0,0,0)| = 3, ...
  RowMatrixXd x(3, 3);
  x << 0, 0, 0,  //
      1, 2, 2,   //
      3, 4, 0;
  RowMatrixXd y(2, 3);
  y << 3, 4, 0,  //
      1, 2, 2;
  RowMatrixXd out(3, 2);
  const moecomp::host_context ctx(1);
  const moecomp::distance::pairwise_distance_params params{};
  moecomp::distance::pairwise_distances(ctx, params, moecomp::as_matrix_view(std::as_const(x)),
                                        moecomp::as_matrix_view(std::as_const(y)), moecomp::as_matrix_view(out));
  std::vector<double> raw(6);
  moecomp::distance::pairwise_distances(ctx, params, moecomp::make_matrix_view<const double>(x.data(), 3, 3),
                                        moecomp::make_matrix_view<const double>(y.data(), 2, 3),
                                        moecomp::make_matrix_view(raw.data(), 3, 2));
  const double expected[3][2] = {{5.0, 3.0}, {std::sqrt(4.0 + 4.0 + 4.0), 0.0}, {0.0, std::sqrt(4.0 + 4.0 + 4.0)}};
  for (index_t i = 0; i < 3; ++i) {
    for (index_t j = 0; j < 2; ++j) {
      CHECK(out(i, j) == raw[static_cast<std::size_t>(i * 2 + j)]);
      CHECK(out(i, j) == doctest::Approx(expected[i][j]).epsilon(1e-12));
    }
  }

  // The same points embedded as a block of a wider matrix (row stride 5) and as a column-major
  // matrix's transpose give the same distances.
  RowMatrixXd wide = RowMatrixXd::Constant(4, 5, 99.0);
  wide.block(1, 1, 3, 3) = x;
  Eigen::MatrixXd x_transposed = x.transpose();  // column-major 3 x 3 whose transpose is x
  RowMatrixXd out_block(3, 3), out_transposed(3, 3);
  moecomp::distance::pairwise_distances(ctx, params, moecomp::as_matrix_view(wide.block(1, 1, 3, 3)),
                                        moecomp::as_matrix_view(out_block));
  moecomp::distance::pairwise_distances(ctx, params, moecomp::as_transposed_view(x_transposed),
                                        moecomp::as_matrix_view(out_transposed));
  CHECK(out_block(0, 2) == doctest::Approx(5.0).epsilon(1e-12));
  CHECK(out_block(0, 1) == doctest::Approx(3.0).epsilon(1e-12));
  CHECK(out_block == out_transposed);
}

// ------------------------------------------------------------- stacks: the stacked-matrix convention

TEST_CASE("eigen: a row-major (count rows) x cols matrix is a stack of count matrices") {
  // Four experts of 2 x 3 kept in one 8 x 3 row-major matrix, expert e in rows [2 e, 2 e + 2).
  RowMatrixXf all(8, 3);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 3; ++j) all(i, j) = static_cast<float>(10 * i + j);
  const auto experts = moecomp::as_matrix_stack_view(all, 4);
  static_assert(std::is_same_v<std::remove_const_t<decltype(experts)>, moecomp::matrix_stack_view<float>>);
  CHECK(experts.count() == 4);
  CHECK(experts.rows() == 2);
  CHECK(experts(3, 1, 2) == 72.0f);
  CHECK(experts[2].data() == all.data() + 12);
  // A block keeps its parent's row stride in every matrix.
  const auto block = moecomp::as_matrix_stack_view(all.block(0, 1, 8, 2), 2);
  CHECK(block.row_stride() == 3);
  CHECK(block(1, 3, 1) == 72.0f);
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_stack_view(all, 3); }) ==
        "as_matrix_stack_view: the Eigen object's rows (8) must be a multiple of count (3)");
  CHECK(thrown_message([&] { (void)moecomp::as_matrix_stack_view(all, 0); }) ==
        "as_matrix_stack_view: count must be >= 1, got 0");
}
