// The device sparse module (<moecomp/cuda/sparse/prune.cuh>, <moecomp/cuda/sparse/residual.cuh>) against the
// host's: pruning gives the same entries, counts and threshold bit for bit (the same selection and tie rule),
// restore and decode the same bits for every format, value dtype and output type, and the sparse product agrees
// with a double reference to 1e-5 relative. Argument checks run before any device work and pass without a GPU.
// The rest runs under `ctest -L cuda`.
#include <doctest/doctest.h>
#include <moecomp/core/random.hpp>
#include <moecomp/cuda/core/device_buffer.cuh>
#include <moecomp/cuda/sparse/prune.cuh>
#include <moecomp/cuda/sparse/residual.cuh>

#include "device_test_support.cuh"
#include "sparse_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

namespace {

using moecomp::index_t;
namespace sparse = moecomp::sparse;
using moecomp_test::device_fixture;
using moecomp_test::dmatrix;
using moecomp_test::dvector;

/// A rows x cols matrix from moecomp's generator, rounded to T; with `levels` > 0 the values take only that
/// many magnitudes (many ties at any threshold).
template <class T>
std::vector<T> draw(index_t rows, index_t cols, std::uint64_t seed, int levels = 0) {
  moecomp::random_generator rng(seed);
  std::vector<T> v;
  for (index_t k = 0; k < rows * cols; ++k) {
    double x = rng.normal<double>();
    if (levels > 0) x = std::copysign(static_cast<double>(1 + static_cast<int>(std::fabs(x) * levels) % levels), x);
    v.push_back(moecomp::convert_to<T>(x));
  }
  return v;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
moecomp::device_buffer<T> upload(const moecomp::cuda_context& ctx, const std::vector<T>& v) {
  moecomp::device_buffer<T> b(ctx, static_cast<index_t>(v.size()));
  moecomp::copy_to_device(ctx, moecomp::make_vector_view(v.data(), static_cast<index_t>(v.size())), b.view());
  return b;
}

template <class T>
std::vector<T> download(const moecomp::cuda_context& ctx, const moecomp::device_buffer<T>& b) {
  std::vector<T> v(static_cast<std::size_t>(b.size()));
  moecomp::copy_to_host(ctx, b.view(), moecomp::make_vector_view(v.data(), b.size()));
  REQUIRE(cudaStreamSynchronize(ctx.stream) == cudaSuccess);
  return v;
}

}  // namespace

TEST_CASE("device prune_magnitude, restore_dense and sparse_matmul: argument checks run before any device work") {
  const moecomp::cuda_context ctx(nullptr);  // never used: the checks come first
  float storage[64] = {0};
  const dmatrix<float> w(storage, 4, 8);
  sparse::prune_params row;
  row.sparsity = 0.5;
  row.scope = sparse::prune_scope::row;
  CHECK_THROWS_WITH_AS(sparse::prune_magnitude<float>(ctx, row, w),
                       "prune_magnitude: params.scope must be matrix or n_of_m on the device (row and column_block are "
                       "host-only for now), got row",
                       moecomp::invalid_argument);
  sparse::prune_params wide;
  wide.scope = sparse::prune_scope::n_of_m;
  wide.n = 2;
  wide.m = 128;
  CHECK_THROWS_WITH_AS(sparse::prune_magnitude<float>(ctx, wide, dmatrix<float>(storage, 1, 0)),
                       "prune_magnitude: params.m must be at most 64 on the device, got 128", moecomp::invalid_argument);
  sparse::prune_params neither;
  CHECK_THROWS_WITH_AS(sparse::prune_magnitude<float>(ctx, neither, w),
                       "prune_magnitude: exactly one of params.sparsity and params.keep must be given, got neither",
                       moecomp::invalid_argument);
  sparse::prune_params half_away;
  half_away.sparsity = 0.5;
  CHECK_THROWS_WITH_AS(sparse::prune_magnitude<float>(ctx, half_away, dmatrix<const float>(storage, 4, 8),
                                                      dmatrix<float>(storage + 32, 4, 7)),
                       "prune_magnitude: out must be 4 x 8 like w, got 4 x 7", moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(sparse::prune_magnitude<float>(ctx, half_away, dmatrix<const float>(storage, 4, 8),
                                                      dmatrix<float>(storage + 4, 4, 8)),
                       "prune_magnitude: out must be w itself (in place) or not overlap it", moecomp::invalid_argument);

  sparse::sparse_matrix_device_view r;
  r.rows = 4;
  r.cols = 8;
  r.format = sparse::sparse_format::bitmap;
  r.structure = reinterpret_cast<const std::uint8_t*>(storage);
  r.value_bytes = storage;
  r.count = 1;
  CHECK_THROWS_WITH_AS(sparse::decode_sparse<float>(ctx, r, dmatrix<float>(storage, 4, 8)),
                       "decode_sparse: r.row_offsets must be set for bitmap (the row starts: bitmap_row_starts)",
                       moecomp::invalid_argument);
  r.row_offsets = reinterpret_cast<const std::uint64_t*>(storage);
  CHECK_THROWS_WITH_AS((sparse::restore_dense<float, float>(ctx, dmatrix<const float>(storage, 4, 7), r,
                                                            dmatrix<float>(storage + 32, 4, 8))),
                       "restore_dense: base must be 4 x 8 like the residual, got 4 x 7", moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS((sparse::restore_dense<float, float>(ctx, dmatrix<const float>(storage, 4, 8), r,
                                                            dmatrix<float>(storage + 32, 4, 8),
                                                            dvector<const index_t>(reinterpret_cast<const index_t*>(storage), 3))),
                       "restore_dense: permutation must be empty or contiguous with 4 entries (one per row), got 3",
                       moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(sparse::sparse_matmul<float>(ctx, dmatrix<const float>(storage, 2, 7), r,
                                                    dmatrix<float>(storage + 32, 2, 4)),
                       "sparse_matmul: x must have 8 columns (r's), got 7", moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(sparse::sparse_matmul<float>(ctx, dmatrix<const float>(storage, 2, 8), r,
                                                    dmatrix<float>(storage + 32, 2, 5)),
                       "sparse_matmul: y must be 2 x 4 (tokens x r's rows), got 2 x 5", moecomp::invalid_argument);
  r.format = sparse::sparse_format::two_of_four;
  r.cols = 6;
  CHECK_THROWS_WITH_AS(sparse::decode_sparse<float>(ctx, r, dmatrix<float>(storage, 4, 6)),
                       "decode_sparse: 2:4 needs a column count divisible by 4, got 6", moecomp::invalid_argument);
}

TEST_CASE_TEMPLATE("device prune_magnitude keeps the host's entries, counts and threshold, bit for bit", T, float,
                   double, moecomp::bfloat16, moecomp::half) {
  device_fixture f;
  const auto ctx = f.context();
  const index_t rows = 37, cols = 300, stride = 311;
  for (int levels : {0, 5}) {  // tie-free, then many ties at every threshold
    for (double sparsity : {0.0, 0.25, 0.75, 0.9995, 1.0}) {
      CAPTURE(levels);
      CAPTURE(sparsity);
      // A strided view (row stride 311) so that offsets and flat indices differ.
      const std::vector<T> w = draw<T>(rows, stride, 3 + static_cast<std::uint64_t>(levels), levels);
      sparse::prune_params params;
      params.sparsity = sparsity;
      std::vector<T> host_out(static_cast<std::size_t>(rows * cols));
      const auto expected = moecomp_test::host_prune<T>(params, moecomp::make_matrix_view(w.data(), rows, cols, stride),
                                                        moecomp::make_matrix_view(host_out.data(), rows, cols));
      const auto dw = upload(ctx, w);
      moecomp::device_buffer<T> dout(ctx, rows * cols);
      const auto got = sparse::prune_magnitude<T>(ctx, params, dw.view(rows, cols, stride).as_const(), dout.view(rows, cols));
      CHECK(got.kept == expected.kept);
      CHECK(got.pruned == expected.pruned);
      CHECK(got.threshold == expected.threshold);
      CHECK(same_bits(download(ctx, dout), host_out));
      // In place gives the same entries.
      auto in_place = upload(ctx, w);
      (void)sparse::prune_magnitude<T>(ctx, params, in_place.view(rows, cols, stride));
      const std::vector<T> all = download(ctx, in_place);
      std::vector<T> packed;
      for (index_t i = 0; i < rows; ++i) packed.insert(packed.end(), all.begin() + i * stride, all.begin() + i * stride + cols);
      CHECK(same_bits(packed, host_out));
    }
  }
  // N:M, 2:4 and 3:8, with ties, in place.
  for (index_t m : {4, 8}) {
    sparse::prune_params params;
    params.scope = sparse::prune_scope::n_of_m;
    params.n = m == 4 ? 2 : 3;
    params.m = m;
    const std::vector<T> w = draw<T>(rows, 296, 9, 3);
    std::vector<T> host_out(w.size());
    const auto expected = moecomp_test::host_prune<T>(params, moecomp::make_matrix_view(w.data(), rows, index_t(296)),
                                                      moecomp::make_matrix_view(host_out.data(), rows, index_t(296)));
    auto dw = upload(ctx, w);
    const auto got = sparse::prune_magnitude<T>(ctx, params, dw.view(rows, 296));
    CHECK(got.kept == expected.kept);
    CHECK(got.threshold == expected.threshold);
    CHECK(same_bits(download(ctx, dw), host_out));
  }
}

TEST_CASE("device restore_dense and decode_sparse equal the host's bit for bit in every format and value dtype") {
  device_fixture f;
  const auto ctx = f.context();
  const index_t rows = 29, cols = 1030;  // several bitmap tiles and a partial one
  const std::vector<float> base = draw<float>(rows, cols, 21);
  std::vector<float> residual = draw<float>(rows, cols, 22);
  sparse::prune_params keep_quarter;
  keep_quarter.keep = 0.25;
  sparse::prune_params two_of_four;
  two_of_four.scope = sparse::prune_scope::n_of_m;
  std::vector<index_t> permutation(static_cast<std::size_t>(rows));
  std::iota(permutation.begin(), permutation.end(), index_t(0));
  moecomp::random_generator rng(23);
  rng.shuffle(permutation.begin(), permutation.end());
  const auto dbase = upload(ctx, base);
  std::vector<moecomp::bfloat16> base16;
  for (float v : base) base16.push_back(moecomp::bfloat16(v));
  const auto dbase16 = upload(ctx, base16);
  const auto dperm = upload(ctx, permutation);
  for (auto format : {sparse::sparse_format::csr16, sparse::sparse_format::bitmap, sparse::sparse_format::two_of_four}) {
    for (auto values : {sparse::value_dtype::float32, sparse::value_dtype::float16, sparse::value_dtype::bfloat16}) {
      CAPTURE(sparse::to_string(format));
      CAPTURE(sparse::to_string(values));
      std::vector<float> pruned(residual.size());
      (void)moecomp_test::host_prune<float>(format == sparse::sparse_format::two_of_four ? two_of_four : keep_quarter,
                                            moecomp::make_matrix_view<const float>(residual.data(), rows, cols),
                                            moecomp::make_matrix_view(pruned.data(), rows, cols));
      // A stored -0 must come back as -0: the first kept entry becomes -0 (so 2:4 still stores 2 per group).
      *std::find_if(pruned.begin(), pruned.end(), [](float v) { return v != 0.0f; }) = -0.0f;
      sparse::sparse_matrix host;
      sparse::encode_params encode;
      encode.format = format;
      encode.values = values;
      moecomp_test::host_encode<float>(encode, moecomp::make_matrix_view<const float>(pruned.data(), rows, cols), host);
      const sparse::device_sparse_matrix device(ctx, host.view());
      const auto pv = moecomp::make_vector_view<const index_t>(permutation.data(), rows);

      std::vector<float> want(residual.size());
      moecomp_test::host_restore<float, float>(moecomp::make_matrix_view<const float>(base.data(), rows, cols),
                                               host.view(), moecomp::make_matrix_view(want.data(), rows, cols), pv);
      moecomp::device_buffer<float> out(ctx, rows * cols);
      sparse::restore_dense<float, float>(ctx, dbase.view(rows, cols), device.view(), out.view(rows, cols),
                                          dperm.view().as_const());
      CHECK(same_bits(download(ctx, out), want));

      std::vector<moecomp::bfloat16> want16(residual.size());
      moecomp_test::host_restore<moecomp::bfloat16, moecomp::bfloat16>(
          moecomp::make_matrix_view<const moecomp::bfloat16>(base16.data(), rows, cols), host.view(),
          moecomp::make_matrix_view(want16.data(), rows, cols), moecomp::vector_view<const index_t>());
      moecomp::device_buffer<moecomp::bfloat16> out16(ctx, rows * cols);
      sparse::restore_dense<moecomp::bfloat16, moecomp::bfloat16>(ctx, dbase16.view(rows, cols), device.view(),
                                                                  out16.view(rows, cols));
      CHECK(same_bits(download(ctx, out16), want16));

      std::vector<float> decoded(residual.size());
      moecomp_test::host_decode<float>(host.view(), moecomp::make_matrix_view(decoded.data(), rows, cols));
      sparse::decode_sparse<float>(ctx, device.view(), out.view(rows, cols));
      CHECK(same_bits(download(ctx, out), decoded));
    }
  }
}

TEST_CASE("device bitmap_row_starts are the prefix sums of the rows' popcounts") {
  device_fixture f;
  const auto ctx = f.context();
  const index_t rows = 300, cols = 77;
  const index_t row_bytes = (cols + 7) / 8;
  std::vector<std::uint8_t> bits(static_cast<std::size_t>(rows * row_bytes));
  moecomp::random_generator rng(31);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j)
      if (rng.uniform<double>() < 0.3) bits[static_cast<std::size_t>(i * row_bytes + j / 8)] |= std::uint8_t(1u << (j % 8));
  std::vector<std::uint64_t> expected(static_cast<std::size_t>(rows) + 1, 0);
  for (index_t i = 0; i < rows; ++i) {
    std::uint64_t ones = 0;
    for (index_t b = 0; b < row_bytes; ++b)
      for (std::uint8_t v = bits[static_cast<std::size_t>(i * row_bytes + b)]; v != 0; v = std::uint8_t(v & (v - 1))) ++ones;
    expected[static_cast<std::size_t>(i) + 1] = expected[static_cast<std::size_t>(i)] + ones;
  }
  const auto dbits = upload(ctx, bits);
  moecomp::device_buffer<std::uint64_t> starts(ctx, rows + 1);
  sparse::bitmap_row_starts(ctx, rows, cols, dbits.data(), starts.view());
  CHECK(download(ctx, starts) == expected);
}

TEST_CASE("device sparse_matmul equals x r^T to 1e-5 relative for decode batch sizes, accumulating or not") {
  device_fixture f;
  const auto ctx = f.context();
  const index_t rows = 70, cols = 2100;
  std::vector<float> dense = draw<float>(rows, cols, 41);
  sparse::prune_params keep_quarter;
  keep_quarter.keep = 0.25;
  sparse::prune_params two_of_four;
  two_of_four.scope = sparse::prune_scope::n_of_m;
  for (auto format : {sparse::sparse_format::csr16, sparse::sparse_format::bitmap, sparse::sparse_format::two_of_four}) {
    std::vector<float> pruned(dense.size());
    (void)moecomp_test::host_prune<float>(format == sparse::sparse_format::two_of_four ? two_of_four : keep_quarter,
                                          moecomp::make_matrix_view<const float>(dense.data(), rows, cols),
                                          moecomp::make_matrix_view(pruned.data(), rows, cols));
    sparse::sparse_matrix host;
    sparse::encode_params encode;
    encode.format = format;
    moecomp_test::host_encode<float>(encode, moecomp::make_matrix_view<const float>(pruned.data(), rows, cols), host);
    const sparse::device_sparse_matrix device(ctx, host.view());
    for (index_t tokens : {1, 8, 13}) {
      CAPTURE(sparse::to_string(format));
      CAPTURE(tokens);
      const std::vector<float> x = draw<float>(tokens, cols, 42 + static_cast<std::uint64_t>(tokens));
      const std::vector<float> y0 = draw<float>(tokens, rows, 43);
      const auto dx = upload(ctx, x);
      for (bool accumulate : {false, true}) {
        auto dy = upload(ctx, y0);
        sparse::sparse_matmul<float>(ctx, dx.view(tokens, cols), device.view(), dy.view(tokens, rows), accumulate);
        const std::vector<float> y = download(ctx, dy);
        for (index_t t = 0; t < tokens; ++t)
          for (index_t i = 0; i < rows; ++i) {
            double want = accumulate ? y0[static_cast<std::size_t>(t * rows + i)] : 0.0, scale = std::fabs(want);
            for (index_t j = 0; j < cols; ++j) {
              const double term = static_cast<double>(x[static_cast<std::size_t>(t * cols + j)]) *
                                  pruned[static_cast<std::size_t>(i * cols + j)];
              want += term;
              scale += std::fabs(term);
            }
            CHECK(std::fabs(y[static_cast<std::size_t>(t * rows + i)] - want) <= 1e-5 * scale);
          }
      }
    }
  }
}
