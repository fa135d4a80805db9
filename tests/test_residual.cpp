// ResMoE's residuals in compact formats (<moecomp/sparse/residual.hpp>): the exact bytes of each format on a
// small matrix (docs/sparse.md), bit-exact round trips for every format, value dtype and input type, the
// automatic choice, restore against the dense sum in both neuron orders and every output type, encode_residual
// against its definition, thread-count determinism, and the checks on untrusted sections.
// The CLI and the file container against numpy: tests/peers/test_residual_numpy.py.
#include <moecomp/sparse/residual.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

namespace {

using moecomp::bfloat16;
using moecomp::half;
using moecomp::host_context;
using moecomp::host_matrix;
using moecomp::index_t;
namespace sparse = moecomp::sparse;

/// A rows x cols matrix of normal values with about `density` of its entries non-zero.
template <class T>
host_matrix<T> sparse_values(index_t rows, index_t cols, double density, std::uint64_t seed) {
  moecomp::random_generator rng(seed);
  host_matrix<T> m(rows, cols);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j)
      m(i, j) = rng.uniform<double>() < density ? moecomp::convert_to<T>(rng.normal<double>()) : T{};
  return m;
}

/// Each group of 4 keeps its first two entries (positions chosen by the seed), the rest +0.
host_matrix<float> two_of_four_values(index_t rows, index_t cols, std::uint64_t seed) {
  moecomp::random_generator rng(seed);
  host_matrix<float> m(rows, cols, 0.0f);
  for (index_t i = 0; i < rows; ++i)
    for (index_t g = 0; g < cols / 4; ++g) {
      const auto a = static_cast<index_t>(rng.uniform_index(4));
      const auto b = (a + 1 + static_cast<index_t>(rng.uniform_index(3))) % 4;
      m(i, 4 * g + a) = static_cast<float>(rng.normal<double>());
      m(i, 4 * g + b) = static_cast<float>(rng.normal<double>());
    }
  return m;
}

template <class T>
std::uint64_t bits_of(T v) {
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

/// What a stored value decodes to: the value rounded to the value dtype.
float as_stored(float v, sparse::value_dtype d) {
  switch (d) {
    case sparse::value_dtype::float16: return static_cast<float>(half(v));
    case sparse::value_dtype::bfloat16: return static_cast<float>(bfloat16(v));
    case sparse::value_dtype::float32: break;
  }
  return v;
}

sparse::sparse_matrix encode(const host_matrix<float>& m, sparse::sparse_format f, sparse::value_dtype d,
                             int threads = 1) {
  sparse::sparse_matrix r;
  sparse::encode_params params;
  params.format = f;
  params.values = d;
  sparse::encode_sparse<float>(host_context(threads), params, m.view(), r);
  return r;
}

std::vector<std::uint8_t> all_bytes(const sparse::sparse_matrix& r) {
  std::vector<std::uint8_t> b = r.offsets_bytes();
  b.insert(b.end(), r.structure_bytes().begin(), r.structure_bytes().end());
  b.insert(b.end(), r.values_bytes().begin(), r.values_bytes().end());
  return b;
}

}  // namespace

TEST_CASE("the byte layout of each format, on a 2 x 8 matrix") {
  // Row 0: 1.5 at column 1, -2 at column 6; row 1: 0.25 at column 3.
  host_matrix<float> m(2, 8, 0.0f);
  m(0, 1) = 1.5f;
  m(0, 6) = -2.0f;
  m(1, 3) = 0.25f;

  SUBCASE("csr16: uint64 row offsets, uint16 column indices, values in row order") {
    const sparse::sparse_matrix r = encode(m, sparse::sparse_format::csr16, sparse::value_dtype::float32);
    CHECK(r.count() == 3);
    const std::vector<std::uint8_t> offsets = {0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0};
    CHECK(r.offsets_bytes() == offsets);
    CHECK(r.structure_bytes() == std::vector<std::uint8_t>{1, 0, 6, 0, 3, 0});
    // 1.5f = 0x3fc00000, -2.0f = 0xc0000000, 0.25f = 0x3e800000, little-endian.
    CHECK(r.values_bytes() == std::vector<std::uint8_t>{0, 0, 0xc0, 0x3f, 0, 0, 0, 0xc0, 0, 0, 0x80, 0x3e});
    CHECK(r.bytes() == 24 + 6 + 12);
  }
  SUBCASE("bitmap: one bit per entry, least significant bit first, then the values") {
    const sparse::sparse_matrix r = encode(m, sparse::sparse_format::bitmap, sparse::value_dtype::bfloat16);
    CHECK(r.offsets_bytes().empty());
    CHECK(r.structure_bytes() == std::vector<std::uint8_t>{0x42, 0x08});  // bits 1 and 6; bit 3
    // bfloat16: 1.5 = 0x3fc0, -2 = 0xc000, 0.25 = 0x3e80.
    CHECK(r.values_bytes() == std::vector<std::uint8_t>{0xc0, 0x3f, 0x00, 0xc0, 0x80, 0x3e});
    CHECK(r.bits_per_weight() == doctest::Approx(8.0 * 8 / 16));
  }
  SUBCASE("2:4: a 4-bit code per group (positions a < b), two values per group, zeros stored") {
    const sparse::sparse_matrix r = encode(m, sparse::sparse_format::two_of_four, sparse::value_dtype::float16);
    CHECK(r.count() == 8);
    // Row 0: group 0 holds column 1, padded with position 0: code 0 | 1 << 2 = 0x4; group 1 holds column 6
    // (position 2), padded with position 0: code 0 | 2 << 2 = 0x8. One byte per row: 0x84. Row 1: group 0
    // holds position 3, padded with 0: 0xc; group 1 is empty: positions 0 and 1, code 0x4. Byte 0x4c.
    CHECK(r.structure_bytes() == std::vector<std::uint8_t>{0x84, 0x4c});
    // half: 1.5 = 0x3e00, -2 = 0xc000, 0.25 = 0x3400.
    CHECK(r.values_bytes() == std::vector<std::uint8_t>{0, 0, 0x00, 0x3e, 0, 0, 0x00, 0xc0, 0, 0, 0x00, 0x34, 0, 0, 0, 0});
  }
}

TEST_CASE("decoding gives back exactly what was encoded, for every format, value dtype and input type") {
  const sparse::value_dtype dtypes[] = {sparse::value_dtype::float32, sparse::value_dtype::float16,
                                        sparse::value_dtype::bfloat16};
  for (auto d : dtypes) {
    CAPTURE(sparse::to_string(d));
    for (auto f : {sparse::sparse_format::csr16, sparse::sparse_format::bitmap, sparse::sparse_format::two_of_four}) {
      CAPTURE(sparse::to_string(f));
      host_matrix<float> m = f == sparse::sparse_format::two_of_four ? two_of_four_values(37, 100, 7)
                                                                       : sparse_values<float>(37, 101, 0.3, 7);
      m(3, 8) = -0.0f;  // -0 is stored (its bits are not +0), so it comes back as -0
      if (f == sparse::sparse_format::two_of_four) m(3, 9) = m(3, 10) = m(3, 11) = 0.0f;
      const sparse::sparse_matrix r = encode(m, f, d);
      host_matrix<float> back(m.rows(), m.cols(), 7.0f);
      sparse::decode_sparse<float>(host_context(1), r.view(), back.view());
      std::size_t differing = 0;
      for (index_t i = 0; i < m.rows(); ++i)
        for (index_t j = 0; j < m.cols(); ++j) differing += bits_of(back(i, j)) != bits_of(as_stored(m(i, j), d));
      CHECK(differing == 0);
    }
  }
  SUBCASE("double, bfloat16 and half inputs") {
    const host_matrix<double> m = sparse_values<double>(20, 64, 0.25, 3);
    sparse::sparse_matrix r;
    sparse::encode_sparse<double>(host_context(1), {}, m.view(), r);
    host_matrix<double> back(20, 64);
    sparse::decode_sparse<double>(host_context(1), r.view(), back.view());
    for (index_t i = 0; i < 20; ++i)
      for (index_t j = 0; j < 64; ++j) CHECK(back(i, j) == static_cast<double>(static_cast<float>(m(i, j))));
    const host_matrix<bfloat16> b = sparse_values<bfloat16>(20, 64, 0.25, 4);
    sparse::encode_params p;
    p.values = sparse::value_dtype::bfloat16;
    sparse::encode_sparse<bfloat16>(host_context(1), p, b.view(), r);
    host_matrix<bfloat16> bb(20, 64);
    sparse::decode_sparse<bfloat16>(host_context(1), r.view(), bb.view());
    std::size_t differing = 0;
    for (index_t i = 0; i < 20; ++i)
      for (index_t j = 0; j < 64; ++j) differing += bb(i, j).bits != b(i, j).bits;
    CHECK(differing == 0);
  }
}

TEST_CASE("every finite half and bfloat16 value decodes exactly, subnormals included") {
  for (auto d : {sparse::value_dtype::float16, sparse::value_dtype::bfloat16}) {
    CAPTURE(sparse::to_string(d));
    std::vector<float> all;
    for (std::uint32_t bits = 1; bits < 0x10000u; ++bits) {
      const float v = d == sparse::value_dtype::float16 ? half::to_float(static_cast<std::uint16_t>(bits))
                                                        : static_cast<float>(bfloat16::from_bits(static_cast<std::uint16_t>(bits)));
      if (std::isfinite(v) && bits != 0x8000u) all.push_back(v);
    }
    const host_matrix<float> m = [&] {
      host_matrix<float> x(1, static_cast<index_t>(all.size()));
      std::copy(all.begin(), all.end(), x.data());
      return x;
    }();
    host_matrix<float> back(m.rows(), m.cols());
    sparse::decode_sparse<float>(host_context(1), encode(m, sparse::sparse_format::bitmap, d).view(), back.view());
    std::size_t differing = 0;
    for (index_t j = 0; j < m.cols(); ++j) differing += bits_of(back(0, j)) != bits_of(m(0, j));
    CHECK(differing == 0);
  }
}

TEST_CASE("auto picks the smallest format; 2:4 costs what the bitmap costs, so ties keep the bitmap") {
  const host_matrix<float> dense_quarter = sparse_values<float>(64, 256, 0.25, 11);
  const host_matrix<float> very_sparse = sparse_values<float>(64, 256, 0.01, 12);
  const auto fp16 = sparse::value_dtype::float16;
  // At 25% density with 2-byte values: csr16 costs 0.25 x (2 + 2) = 1 byte per weight, the bitmap
  // 1/8 + 0.25 x 2 = 0.625.
  CHECK(encode(dense_quarter, sparse::sparse_format::automatic, fp16).format() == sparse::sparse_format::bitmap);
  // At 1%: csr16 0.04 bytes per weight (plus the row offsets), the bitmap 0.145.
  CHECK(encode(very_sparse, sparse::sparse_format::automatic, fp16).format() == sparse::sparse_format::csr16);
  const host_matrix<float> two_four = two_of_four_values(64, 256, 13);
  const sparse::sparse_matrix chosen = encode(two_four, sparse::sparse_format::automatic, fp16);
  CHECK(chosen.format() == sparse::sparse_format::bitmap);
  CHECK(chosen.bytes() == encode(two_four, sparse::sparse_format::two_of_four, fp16).bytes());
  // Columns beyond 65536 rule csr16 out.
  const host_matrix<float> wide = sparse_values<float>(1, 70000, 0.001, 14);
  CHECK(encode(wide, sparse::sparse_format::automatic, fp16).format() == sparse::sparse_format::bitmap);
}

TEST_CASE("restore is the dense sum, in the base's order or back in the expert's own order") {
  const index_t rows = 48, cols = 96;
  const host_matrix<float> base = sparse_values<float>(rows, cols, 1.0, 21);
  const host_matrix<float> residual = sparse_values<float>(rows, cols, 0.25, 22);
  std::vector<index_t> p(static_cast<std::size_t>(rows));
  std::iota(p.begin(), p.end(), index_t(0));
  moecomp::random_generator rng(23);
  rng.shuffle(p.begin(), p.end());
  for (auto f : {sparse::sparse_format::csr16, sparse::sparse_format::bitmap}) {
    CAPTURE(sparse::to_string(f));
    const sparse::sparse_matrix r = encode(residual, f, sparse::value_dtype::float32);
    host_matrix<float> out(rows, cols);
    sparse::restore_dense<float, float>(host_context(2), base.view(), r.view(), out.view());
    host_matrix<float> permuted(rows, cols);
    sparse::restore_dense<float, float>(host_context(2), base.view(), r.view(), permuted.view(),
                                        moecomp::make_vector_view(p.data(), rows));
    host_matrix<bfloat16> as_bf16(rows, cols);
    sparse::restore_dense<float, bfloat16>(host_context(2), base.view(), r.view(), as_bf16.view());
    host_matrix<double> as_double(rows, cols);
    sparse::restore_dense<float, double>(host_context(2), base.view(), r.view(), as_double.view());
    std::size_t wrong = 0;
    for (index_t i = 0; i < rows; ++i)
      for (index_t j = 0; j < cols; ++j) {
        const float sum = base(i, j) + residual(i, j);
        const index_t s = p[static_cast<std::size_t>(i)];
        wrong += bits_of(out(i, j)) != bits_of(sum);
        wrong += bits_of(permuted(i, j)) != bits_of(base(s, j) + residual(s, j));
        wrong += as_bf16(i, j).bits != bfloat16(sum).bits;
        wrong += as_double(i, j) != static_cast<double>(base(i, j)) + static_cast<double>(residual(i, j));
      }
    CHECK(wrong == 0);
  }
  SUBCASE("a 2:4 residual over a bfloat16 base into half") {
    const host_matrix<float> two_four = two_of_four_values(rows, cols, 24);
    const sparse::sparse_matrix r = encode(two_four, sparse::sparse_format::two_of_four, sparse::value_dtype::bfloat16);
    host_matrix<bfloat16> b16(rows, cols);
    for (index_t i = 0; i < rows; ++i)
      for (index_t j = 0; j < cols; ++j) b16(i, j) = bfloat16(base(i, j));
    host_matrix<half> out(rows, cols);
    sparse::restore_dense<bfloat16, half>(host_context(3), b16.view(), r.view(), out.view());
    std::size_t wrong = 0;
    for (index_t i = 0; i < rows; ++i)
      for (index_t j = 0; j < cols; ++j)
        wrong += out(i, j).bits !=
                 half(static_cast<float>(b16(i, j)) + static_cast<float>(bfloat16(two_four(i, j)))).bits;
    CHECK(wrong == 0);
  }
}

TEST_CASE("encode_residual prunes R = P W - B and restore gives W back where nothing was pruned") {
  const index_t rows = 32, cols = 80;
  const host_matrix<float> base = sparse_values<float>(rows, cols, 1.0, 31);
  const host_matrix<float> w = sparse_values<float>(rows, cols, 1.0, 32);
  std::vector<index_t> p(static_cast<std::size_t>(rows));
  for (index_t i = 0; i < rows; ++i) p[static_cast<std::size_t>(i)] = (7 * i + 3) % rows;  // 7 is prime to 32
  const auto perm = moecomp::make_vector_view<const index_t>(p.data(), rows);
  sparse::residual_params params;
  params.prune.sparsity = 0.75;
  sparse::sparse_matrix r;
  const sparse::residual_info info = sparse::encode_residual<float>(host_context(2), params, base.view(), w.view(), perm, r);
  CHECK(info.pruned.kept == rows * cols - 1920);  // round(0.75 x 2560) = 1920 pruned
  CHECK(r.count() == static_cast<std::uint64_t>(info.pruned.kept));
  CHECK(info.bytes == r.bytes());
  // The definition: R(p(i), j) = w(i, j) - base(p(i), j), then the kept largest magnitudes.
  host_matrix<float> decoded(rows, cols);
  sparse::decode_sparse<float>(host_context(1), r.view(), decoded.view());
  std::size_t wrong = 0;
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) {
      const index_t s = p[static_cast<std::size_t>(i)];
      const float full = w(i, j) - base(s, j);
      const float got = decoded(s, j);
      wrong += !(got == full || (got == 0.0f && std::abs(full) <= info.pruned.threshold));
    }
  CHECK(wrong == 0);
  // Restore in the expert's own order: the kept entries give base + (w - base), the pruned ones base.
  host_matrix<float> restored(rows, cols);
  sparse::restore_dense<float, float>(host_context(2), base.view(), r.view(), restored.view(), perm);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) {
      const index_t s = p[static_cast<std::size_t>(i)];
      CHECK(restored(i, j) == base(s, j) + decoded(s, j));
    }
  SUBCASE("nothing pruned: W comes back to within rounding") {
    params.prune.sparsity = 0.0;
    sparse::encode_residual<float>(host_context(1), params, base.view(), w.view(), perm, r);
    sparse::restore_dense<float, float>(host_context(1), base.view(), r.view(), restored.view(), perm);
    for (index_t i = 0; i < rows; ++i)
      for (index_t j = 0; j < cols; ++j) CHECK(restored(i, j) == doctest::Approx(w(i, j)).epsilon(1e-6));
  }
}

TEST_CASE("encoding and restoring give the same bytes at any thread count") {
  const host_matrix<float> m = sparse_values<float>(1500, 300, 0.25, 41);
  const host_matrix<float> base = sparse_values<float>(1500, 300, 1.0, 42);
  for (auto f : {sparse::sparse_format::csr16, sparse::sparse_format::bitmap}) {
    moecomp_test::check_same_at_thread_counts([&](const host_context& ctx) {
      const sparse::sparse_matrix r = encode(m, f, sparse::value_dtype::float16, ctx.threads());
      host_matrix<float> out(m.rows(), m.cols());
      sparse::restore_dense<float, float>(ctx, base.view(), r.view(), out.view());
      return std::make_tuple(all_bytes(r), out.storage());
    });
  }
}

TEST_CASE("bad arguments are refused with the argument named") {
  using moecomp_test::thrown_message;
  const host_context ctx(1);
  host_matrix<float> m(4, 8, 0.0f);
  m(0, 0) = 2.0f;
  sparse::sparse_matrix r;
  sparse::encode_params p;
  p.format = sparse::sparse_format::two_of_four;
  m(1, 4) = m(1, 5) = m(1, 6) = 1.0f;
  CHECK(thrown_message([&] { sparse::encode_sparse<float>(ctx, p, m.view(), r); }) ==
        "encode_sparse: params.format 2:4 needs at most 2 stored (non-zero) entries in each group of 4, got more in "
        "row 1, columns 4 to 7 (prune with the 2:4 scope first)");
  p.format = sparse::sparse_format::csr16;
  const host_matrix<float> wide(1, 65537, 1.0f);
  CHECK(thrown_message([&] { sparse::encode_sparse<float>(ctx, p, wide.view(), r); }) ==
        "encode_sparse: params.format csr16 holds at most 65536 columns (16-bit indices), got r with 65537 (use bitmap)");
  p.format = sparse::sparse_format::automatic;
  p.values = sparse::value_dtype::float16;
  m(2, 3) = 70000.0f;
  CHECK(thrown_message([&] { sparse::encode_sparse<float>(ctx, p, m.view(), r); }) ==
        "encode_sparse: r's value 70000 at (2, 3) must fit params.values fp16 (it rounds to infinity)");
  m(2, 3) = NAN;
  CHECK(thrown_message([&] { sparse::encode_sparse<float>(ctx, p, m.view(), r); }).find("must be finite, got nan at (2, 3)") !=
        std::string::npos);
  m(2, 3) = 0.0f;
  sparse::encode_sparse<float>(ctx, {}, m.view(), r);
  host_matrix<float> out(4, 7);
  CHECK(thrown_message([&] { sparse::decode_sparse<float>(ctx, r.view(), out.view()); }) ==
        "decode_sparse: out must be 4 x 8 like the residual, got 4 x 7");
  host_matrix<float> base(4, 8, 0.0f), full(4, 8);
  const std::vector<index_t> twice = {0, 1, 1, 3};
  CHECK(thrown_message([&] {
          sparse::restore_dense<float, float>(ctx, base.view(), r.view(), full.view(),
                                              moecomp::make_vector_view(twice.data(), 4));
        }) == "restore_dense: permutation must be a permutation of 0..3, got 1 twice (at 1 and 2)");
  sparse::residual_params rp;
  rp.prune.keep = 0.5;
  rp.encode.format = sparse::sparse_format::two_of_four;
  CHECK(thrown_message([&] {
          sparse::encode_residual<float>(ctx, rp, base.view(), m.view(), {}, r);
        }) == "encode_residual: params.encode.format 2:4 needs params.prune to be N:M pruning with m = 4 and n <= 2, "
               "got matrix");
  CHECK(thrown_message([] { sparse::parse_sparse_format("coo"); }) ==
        "format: expected csr16, bitmap, 2:4 or auto, got 'coo'");
}

TEST_CASE("view_sparse_sections checks every byte of untrusted sections") {
  using moecomp_test::thrown_message;
  host_matrix<float> m = sparse_values<float>(5, 12, 0.4, 61);
  m(0, 0) = 1.0f;  // at least one stored entry in row 0
  auto problem = [](const sparse::sparse_matrix& r, std::vector<std::uint8_t> offsets,
                    std::vector<std::uint8_t> structure, std::vector<std::uint8_t> values) {
    return thrown_message([&] {
      sparse::view_sparse_sections(r.rows(), r.cols(), r.format(), r.values_dtype(), r.count(), offsets.data(),
                                   offsets.size(), structure.data(), structure.size(), values.data(), values.size());
    });
  };
  const sparse::sparse_matrix csr = encode(m, sparse::sparse_format::csr16, sparse::value_dtype::float32);
  // Untouched sections pass and describe the same matrix.
  const sparse::sparse_matrix_view ok = sparse::view_sparse_sections(
      csr.rows(), csr.cols(), csr.format(), csr.values_dtype(), csr.count(), csr.offsets_bytes().data(),
      csr.offsets_bytes().size(), csr.structure_bytes().data(), csr.structure_bytes().size(),
      csr.values_bytes().data(), csr.values_bytes().size());
  CHECK(ok.bytes() == csr.bytes());
  auto columns = csr.structure_bytes();
  columns[0] = 12;  // row 0's first column index: 12 of 12 columns
  CHECK(problem(csr, csr.offsets_bytes(), columns, csr.values_bytes()).find("column index 12 of row 0 is out of range (12 columns)") !=
        std::string::npos);
  auto offsets = csr.offsets_bytes();
  offsets[8] = static_cast<std::uint8_t>(csr.count() + 1);  // row 1 starts beyond the count
  CHECK(problem(csr, offsets, csr.structure_bytes(), csr.values_bytes()).find("row offsets must be non-decreasing") !=
        std::string::npos);
  auto values = csr.values_bytes();
  values[3] = 0x7f, values[2] = 0x80;  // +inf
  CHECK(problem(csr, csr.offsets_bytes(), csr.structure_bytes(), values).find("stored value 0 is not finite") !=
        std::string::npos);
  auto shorter = csr.values_bytes();
  shorter.pop_back();
  CHECK(problem(csr, csr.offsets_bytes(), csr.structure_bytes(), shorter).find("the values section must be") !=
        std::string::npos);

  const sparse::sparse_matrix bitmap = encode(m, sparse::sparse_format::bitmap, sparse::value_dtype::float16);
  auto bits = bitmap.structure_bytes();
  bits[0] = static_cast<std::uint8_t>(bits[0] ^ 0x2);  // one more or one fewer marked entry
  CHECK(problem(bitmap, {}, bits, bitmap.values_bytes()).find("the bitmap marks") != std::string::npos);
  bits = bitmap.structure_bytes();
  bits[1] = static_cast<std::uint8_t>(bits[1] | 0x80);  // column 15 of a 12-column row
  CHECK(problem(bitmap, {}, bits, bitmap.values_bytes()).find("padding bits after column 11 of bitmap row 0") !=
        std::string::npos);

  const sparse::sparse_matrix two_four =
      encode(two_of_four_values(5, 12, 62), sparse::sparse_format::two_of_four, sparse::value_dtype::float32);
  auto codes = two_four.structure_bytes();
  codes[0] = static_cast<std::uint8_t>((codes[0] & 0xf0) | 0x5);  // positions 1 and 1
  CHECK(problem(two_four, {}, codes, two_four.values_bytes()).find("the 2:4 code 5 of row 0, group 0") != std::string::npos);
  codes = two_four.structure_bytes();
  codes[1] = static_cast<std::uint8_t>(codes[1] | 0x40);  // the padding nibble of row 0 (3 groups)
  CHECK(problem(two_four, {}, codes, two_four.values_bytes()).find("padding nibble of 2:4 row 0") != std::string::npos);
}

TEST_CASE("the structure lookups the device kernels share with the host (sparse_element.hpp)") {
  // 2:4 code 0b1101: positions 1 (bits 0-1) and 3 (bits 2-3) hold the group's values 0 and 1.
  const unsigned code = 1u | (3u << 2);
  CHECK(sparse::detail::two_of_four_slot(code, 0) == -1);
  CHECK(sparse::detail::two_of_four_slot(code, 1) == 0);
  CHECK(sparse::detail::two_of_four_slot(code, 2) == -1);
  CHECK(sparse::detail::two_of_four_slot(code, 3) == 1);
  // Group 1 of a row is the high nibble of byte 0; group 2 the low nibble of byte 1.
  const std::uint8_t codes[2] = {static_cast<std::uint8_t>(0x4u | (code << 4)), 0x9u};
  CHECK(sparse::detail::two_of_four_code(codes, 0) == 0x4u);
  CHECK(sparse::detail::two_of_four_code(codes, 1) == code);
  CHECK(sparse::detail::two_of_four_code(codes, 2) == 0x9u);
  // Bitmap bits are least significant first within each byte.
  const std::uint8_t bits[2] = {0x81u, 0x02u};
  CHECK(sparse::detail::bitmap_bit(bits, 0));
  CHECK_FALSE(sparse::detail::bitmap_bit(bits, 1));
  CHECK(sparse::detail::bitmap_bit(bits, 7));
  CHECK_FALSE(sparse::detail::bitmap_bit(bits, 8));
  CHECK(sparse::detail::bitmap_bit(bits, 9));
}
