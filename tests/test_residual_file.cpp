// The residual file container (<moecomp/io/residual_file.hpp>): the header's exact bytes, CRC-32 as zlib
// computes it, round trips of every format, every kind of corruption refused with the problem named (with the
// checksums recomputed, so that the content checks themselves are reached), atomic writes, and a deterministic
// mutation fuzzer (bit flips, truncations, splices, field edits with checksums fixed up). Every input must
// parse into a valid matrix or be refused with io_error; the libFuzzer harness is fuzz/residual_fuzzer.cpp.
#include <moecomp/io/residual_file.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <doctest/doctest.h>

#include "test_special_files.hpp"
#include "test_support.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using moecomp::host_context;
using moecomp::host_matrix;
using moecomp::index_t;
namespace io = moecomp::io;
namespace sparse = moecomp::sparse;

sparse::sparse_matrix encoded(index_t rows, index_t cols, double density, sparse::sparse_format f,
                              sparse::value_dtype d, std::uint64_t seed) {
  moecomp::random_generator rng(seed);
  host_matrix<float> m(rows, cols, 0.0f);
  for (index_t i = 0; i < rows; ++i)
    for (index_t g = 0; g < cols / 4 * 4; g += 4)
      for (index_t q = 0; q < 4; ++q)
        if (q < 2 && rng.uniform<double>() < density * 2) m(i, g + q) = static_cast<float>(rng.normal<double>());
  sparse::sparse_matrix r;
  sparse::encode_params p;
  p.format = f;
  p.values = d;
  sparse::encode_sparse<float>(host_context(1), p, m.view(), r);
  return r;
}

std::string refusal(const std::vector<std::uint8_t>& bytes) {
  try {
    io::parse_residual(bytes, "R.bin");
  } catch (const moecomp::io_error& e) {
    return e.what();
  }
  return "accepted";
}

void fix_checksums(std::vector<std::uint8_t>& b) {
  using moecomp::detail::store_le;
  if (b.size() < 128) return;
  store_le<std::uint32_t>(b.data() + 104, io::detail::crc32(0, b.data() + 128, b.size() - 128));
  store_le<std::uint32_t>(b.data() + 124, io::detail::crc32(0, b.data(), 124));
}

template <class U>
void put(std::vector<std::uint8_t>& b, std::size_t at, U value) {
  moecomp::detail::store_le<U>(b.data() + at, value);
}

}  // namespace

TEST_CASE("CRC-32 is zlib's") {
  const char* text = "123456789";
  CHECK(io::detail::crc32(0, reinterpret_cast<const std::uint8_t*>(text), 9) == 0xCBF43926u);
  // Continuation: the CRC of a whole equals the CRC continued over its parts (the slicing path included).
  std::vector<std::uint8_t> data(1000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 131 + 7);
  CHECK(io::detail::crc32(io::detail::crc32(0, data.data(), 333), data.data() + 333, 667) ==
        io::detail::crc32(0, data.data(), 1000));
}

TEST_CASE("the header: magic, version, shape, codes, count, the section table, size and checksums") {
  const sparse::sparse_matrix r = encoded(3, 20, 0.3, sparse::sparse_format::csr16, sparse::value_dtype::float16, 1);
  const std::vector<std::uint8_t> b = io::serialize_residual(r.view());
  using moecomp::detail::load_le;
  CHECK(std::string(b.begin(), b.begin() + 8) == "MOERESID");
  CHECK(load_le<std::uint16_t>(&b[8]) == 1);
  CHECK(load_le<std::uint16_t>(&b[10]) == 0);
  CHECK(load_le<std::uint32_t>(&b[12]) == 128);
  CHECK(load_le<std::uint64_t>(&b[16]) == 3);
  CHECK(load_le<std::uint64_t>(&b[24]) == 20);
  CHECK(b[32] == 0);  // csr16
  CHECK(b[33] == 1);  // fp16
  CHECK(load_le<std::uint64_t>(&b[40]) == r.count());
  // Sections at 64-byte boundaries from the header's end: row offsets (4 x 8 bytes) at 128, the column
  // indices at 192, the values after them.
  CHECK(load_le<std::uint64_t>(&b[48]) == 128);
  CHECK(load_le<std::uint64_t>(&b[56]) == 32);
  CHECK(load_le<std::uint64_t>(&b[64]) == 192);
  CHECK(load_le<std::uint64_t>(&b[72]) == 2 * r.count());
  CHECK(load_le<std::uint64_t>(&b[80]) == (192 + 2 * r.count() + 63) / 64 * 64);
  CHECK(load_le<std::uint64_t>(&b[88]) == 2 * r.count());
  CHECK(load_le<std::uint64_t>(&b[96]) == b.size());
  CHECK(load_le<std::uint32_t>(&b[104]) == io::detail::crc32(0, b.data() + 128, b.size() - 128));
  CHECK(load_le<std::uint32_t>(&b[124]) == io::detail::crc32(0, b.data(), 124));
}

TEST_CASE("every format and value dtype round-trips through a file") {
  const std::string path = "test_residual_file_roundtrip.bin";
  for (auto f : {sparse::sparse_format::csr16, sparse::sparse_format::bitmap, sparse::sparse_format::two_of_four})
    for (auto d : {sparse::value_dtype::float32, sparse::value_dtype::float16, sparse::value_dtype::bfloat16}) {
      CAPTURE(sparse::to_string(f));
      CAPTURE(sparse::to_string(d));
      const sparse::sparse_matrix r = encoded(17, 36, 0.2, f, d, 2);
      io::write_residual(path, r.view());
      const io::residual_file file = io::read_residual(path);
      const sparse::sparse_matrix back(file.matrix());
      CHECK(back.format() == f);
      CHECK(back.values_dtype() == d);
      CHECK(back.count() == r.count());
      CHECK(back.offsets_bytes() == r.offsets_bytes());
      CHECK(back.structure_bytes() == r.structure_bytes());
      CHECK(back.values_bytes() == r.values_bytes());
    }
  std::remove(path.c_str());
  SUBCASE("an empty matrix and a matrix with nothing stored") {
    for (index_t rows : {0, 5}) {
      const sparse::sparse_matrix r = encoded(rows, rows == 0 ? 0 : 8, 0.0, sparse::sparse_format::csr16,
                                              sparse::value_dtype::float32, 3);
      const io::residual_file file = io::parse_residual(io::serialize_residual(r.view()), "empty");
      CHECK(file.matrix().rows() == rows);
      CHECK(file.matrix().count() == 0);
    }
  }
}

TEST_CASE("corrupt files are refused with the problem named") {
  const sparse::sparse_matrix csr = encoded(6, 40, 0.3, sparse::sparse_format::csr16, sparse::value_dtype::float32, 4);
  const std::vector<std::uint8_t> good = io::serialize_residual(csr.view());
  REQUIRE(refusal(good) == "accepted");
  const std::string prefix = "read_residual: 'R.bin' is not a valid residual file: ";

  auto b = good;
  b.resize(100);
  CHECK(refusal(b) == prefix + "it has 100 bytes, fewer than the 128-byte header (truncated)");
  b = good;
  b.pop_back();
  CHECK(refusal(b) == prefix + "the header gives " + std::to_string(good.size()) + " bytes but the file has " +
                          std::to_string(good.size() - 1) + " (truncated)");
  b = good;
  b.push_back(0);
  CHECK(refusal(b).find("(trailing bytes)") != std::string::npos);
  b = good;
  b[0] = 'X';
  CHECK(refusal(b) == prefix + "the magic must be 'MOERESID'");
  b = good;
  put<std::uint16_t>(b, 8, 2);
  CHECK(refusal(b) == prefix + "version 2.0 is not supported (this reader reads 1.0)");
  b = good;
  b[20] ^= 1;  // the row count, without fixing the checksum
  CHECK(refusal(b) == prefix + "the header checksum does not match (the header is corrupt)");
  b = good;
  b[b.size() - 1] ^= 0x10;  // a value byte
  CHECK(refusal(b) == prefix + "the data checksum does not match (the data are corrupt)");

  // With the checksums fixed up, the content checks themselves refuse.
  b = good;
  put<std::uint16_t>(b, 192, 40);  // the first column index: 40 of 40 columns
  fix_checksums(b);
  CHECK(refusal(b).find("column index 40 of row") != std::string::npos);
  b = good;
  put<std::uint64_t>(b, 128 + 8 * 3, 0);  // row offset 3 back to 0
  fix_checksums(b);
  CHECK(refusal(b).find("row offsets must be non-decreasing") != std::string::npos);
  b = good;
  put<std::uint64_t>(b, 16, 7);  // 7 rows: the offsets section no longer matches the shape
  fix_checksums(b);
  CHECK(refusal(b).find("the row offsets section must be 64 bytes") != std::string::npos);
  b = good;
  put<std::uint64_t>(b, 16, std::uint64_t{1} << 40);
  put<std::uint64_t>(b, 24, std::uint64_t{1} << 40);
  fix_checksums(b);
  CHECK(refusal(b).find("is beyond the formats' limit of 2^56 entries") != std::string::npos);
  b = good;
  b[32] = 7;
  fix_checksums(b);
  CHECK(refusal(b).find("the format code must be 0 (csr16), 1 (bitmap) or 2 (2:4), got 7") != std::string::npos);
  b = good;
  put<std::uint64_t>(b, 64, 256);  // the structure section moved: not the canonical layout
  fix_checksums(b);
  CHECK(refusal(b).find("section 1 must start at byte 192") != std::string::npos);

  const sparse::sparse_matrix bitmap = encoded(6, 40, 0.3, sparse::sparse_format::bitmap, sparse::value_dtype::float16, 5);
  b = io::serialize_residual(bitmap.view());
  b[128] ^= 0x01;  // flips column 0 of row 0: the popcount no longer matches the count
  fix_checksums(b);
  CHECK(refusal(b).find("the bitmap marks") != std::string::npos);
}

TEST_CASE("a failed write leaves no file, and an existing file untouched") {
  const std::string path = "test_residual_file_atomic.bin";
  const sparse::sparse_matrix r = encoded(4, 16, 0.5, sparse::sparse_format::bitmap, sparse::value_dtype::float32, 6);
  io::write_residual(path, r.view());
  const std::uint64_t before = io::read_residual(path).file_bytes();
  CHECK_THROWS_AS(io::write_residual("no_such_directory/R.bin", r.view()), moecomp::io_error);
  CHECK(io::read_residual(path).file_bytes() == before);
  CHECK_THROWS_AS(io::read_residual("no_such_directory/R.bin"), moecomp::io_error);
  std::remove(path.c_str());
}

TEST_CASE("mutated files parse into a valid matrix or are refused with io_error") {
  std::vector<std::vector<std::uint8_t>> seeds;
  for (auto f : {sparse::sparse_format::csr16, sparse::sparse_format::bitmap, sparse::sparse_format::two_of_four})
    for (auto d : {sparse::value_dtype::float32, sparse::value_dtype::float16, sparse::value_dtype::bfloat16})
      seeds.push_back(io::serialize_residual(encoded(5, 24, 0.25, f, d, 7).view()));
  moecomp::random_generator rng(2026);
  // A uniform index below n (0 when n is 0).
  auto pick = [&](std::size_t n) { return n == 0 ? std::size_t{0} : static_cast<std::size_t>(rng.uniform_index(n)); };
  std::size_t accepted = 0, refused = 0;
  for (int round = 0; round < 20000; ++round) {
    std::vector<std::uint8_t> b = seeds[pick(seeds.size())];
    const int edits = 1 + static_cast<int>(pick(3));
    for (int e = 0; e < edits; ++e) {
      switch (pick(6)) {
        case 0: if (!b.empty()) b[pick(b.size())] ^= static_cast<std::uint8_t>(1u << pick(8)); break;  // bit flip
        case 1: b.resize(pick(b.size() + 1)); break;                                             // truncate
        case 2: b.insert(b.begin() + static_cast<std::ptrdiff_t>(pick(b.size() + 1)), static_cast<std::uint8_t>(pick(256))); break;
        case 3: {                                                                                // a header field
          const std::size_t fields[] = {16, 24, 32, 33, 40, 48, 56, 64, 72, 80, 88, 96};
          const std::size_t at = fields[pick(12)];
          if (b.size() >= at + 8) put<std::uint64_t>(b, at, rng.uniform<double>() < 0.5 ? pick(1000) : ~std::uint64_t{0} >> pick(64));
          break;
        }
        case 4: if (b.size() > 128) b[128 + pick(b.size() - 128)] = static_cast<std::uint8_t>(pick(256)); break;
        default: {                                                                               // splice
          const std::vector<std::uint8_t>& other = seeds[pick(seeds.size())];
          const std::size_t from = pick(other.size());
          const std::size_t at = pick(b.size() + 1);
          b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
          break;
        }
      }
    }
    if (rng.uniform<double>() < 0.8) fix_checksums(b);  // mostly reach the content checks
    try {
      const io::residual_file file = io::parse_residual(b, "fuzz");
      // Accepted: the matrix must decode (every byte touched) and re-serialise to the same bytes.
      host_matrix<float> out(file.matrix().rows(), file.matrix().cols());
      sparse::decode_sparse<float>(host_context(1), file.matrix(), out.view());
      CHECK(io::serialize_residual(file.matrix()) == b);
      ++accepted;
    } catch (const moecomp::io_error&) {
      ++refused;
    }
  }
  MESSAGE("accepted " << accepted << ", refused " << refused);
  CHECK(refused > 0);
  CHECK(accepted > 0);
}

TEST_CASE("residual file: read_residual reads regular files only: a FIFO, a directory and /dev/zero are refused at once") {
  const moecomp_test::temp_dir dir("residual_special");
  const std::string fifo = dir.file("r.residual");
  if (moecomp_test::make_fifo(fifo)) {
    const std::string message = moecomp_test::io_error_within([fifo] { io::read_residual(fifo); }, fifo);
    CHECK_MESSAGE(message.find("read_residual: cannot read '" + fifo + "': it is a FIFO, not a regular file") == 0,
                  message);
  }
  const std::string directory = dir.path.string();
  const std::string message = moecomp_test::io_error_within([directory] { io::read_residual(directory); });
  CHECK_MESSAGE(message.find("read_residual: cannot read '" + directory + "': it is a directory") == 0, message);
  if (moecomp_test::have_dev_zero()) {
    const std::string zero = moecomp_test::io_error_within([] { io::read_residual("/dev/zero"); });
    CHECK_MESSAGE(zero.find("read_residual: cannot read '/dev/zero': it is a character device") == 0, zero);
  }
}
