// moecomp::io safetensors: round trips of every dtype, the writer's layout, zero-copy views, conversions
// (FP8 against the formats' closed forms), each rule of the reference's rejection list, sharded
// checkpoints, atomic writes, a mutation fuzzer, and files written and read by an independent Python
// implementation of the format (json + numpy) as the peer.
#include <moecomp/core/random.hpp>
#include <moecomp/io/safetensors.hpp>

#include <doctest/doctest.h>

#include "test_files.hpp"
#include "test_special_files.hpp"
#include "test_support.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#if defined(__linux__)
#include <unistd.h>
#endif

namespace fs = std::filesystem;
namespace io = moecomp::io;
using moecomp::bfloat16;
using moecomp::half;
using moecomp::index_t;
using moecomp_test::read_file;
using moecomp_test::temp_dir;
using moecomp_test::write_file;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A file from a header text and data bytes: the 8-byte little-endian length, the header, the data.
std::string make_file(const std::string& header, const std::string& data = {}) {
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>((static_cast<std::uint64_t>(header.size()) >> (8 * i)) & 0xff);
  return bytes + header + data;
}

// The io_error message of parsing `bytes`; a failed check (and "") when it parses.
std::string rejection(const std::string& bytes) {
  try {
    io::parse_safetensors(bytes, "case.safetensors");
  } catch (const moecomp::io_error& e) {
    return e.what();
  }
  FAIL_CHECK("expected an io_error");
  return "";
}

template <class T>
std::vector<T> counting(std::size_t n, double scale, double shift) {
  std::vector<T> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<T>(static_cast<double>(i) * scale + shift);
  return values;
}

}  // namespace

TEST_CASE("safetensors: a round trip keeps every dtype, shape, value and the metadata") {
  moecomp::random_generator rng(7);
  moecomp::host_matrix<float> f32(3, 5);
  rng.fill_uniform(f32.view(), -2.0f, 2.0f);
  moecomp::host_matrix<double> f64(2, 2);
  rng.fill_uniform(f64.view(), -1.0, 1.0);
  std::vector<bfloat16> bf16;
  std::vector<half> f16;
  for (int i = 0; i < 6; ++i) {
    bf16.push_back(bfloat16(static_cast<float>(rng.uniform<double>(-4.0, 4.0))));
    f16.push_back(half(static_cast<float>(rng.uniform<double>(-4.0, 4.0))));
  }
  const auto i64 = counting<std::int64_t>(4, -3, 5);
  const auto i32 = counting<std::int32_t>(6, 7, -20);
  const auto i16 = counting<std::int16_t>(3, -300, 10);
  const auto u16 = counting<std::uint16_t>(3, 300, 10);
  const auto i8 = counting<std::int8_t>(5, -20, 40);
  const auto u8 = counting<std::uint8_t>(5, 50, 1);
  const auto u32 = counting<std::uint32_t>(2, 1e9, 1);
  const auto u64 = counting<std::uint64_t>(2, 1e18, 1);
  const std::vector<std::uint8_t> flags = {1, 0, 1};
  const double scalar = 2.5;

  const std::vector<io::safetensors_entry> entries = {
      io::safetensors_entry::of("model.w", f32.const_view()),
      io::safetensors_entry::of("model.d", f64.const_view()),
      {"bf", io::safetensors_dtype::bf16, {2, 3}, bf16.data()},
      {"h", io::safetensors_dtype::f16, {3, 1, 2}, f16.data()},
      {"i64", io::safetensors_dtype::i64, {4}, i64.data()},
      {"i32", io::safetensors_dtype::i32, {2, 3}, i32.data()},
      {"i16", io::safetensors_dtype::i16, {3}, i16.data()},
      {"u16", io::safetensors_dtype::u16, {3}, u16.data()},
      {"i8", io::safetensors_dtype::i8, {5}, i8.data()},
      {"u8", io::safetensors_dtype::u8, {5}, u8.data()},
      {"u32", io::safetensors_dtype::u32, {2}, u32.data()},
      {"u64", io::safetensors_dtype::u64, {2}, u64.data()},
      {"flags", io::safetensors_dtype::boolean, {3}, flags.data()},
      {"scalar", io::safetensors_dtype::f64, {}, &scalar},
      {"empty", io::safetensors_dtype::f32, {0, 4}, nullptr},
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünïcode \"quoted\"\n"}};
  const io::safetensors_file file = io::parse_safetensors(io::serialize_safetensors(entries, metadata));

  CHECK(file.metadata() == metadata);
  CHECK(file.has_metadata());
  REQUIRE(file.tensors().size() == entries.size());
  for (const auto& e : entries) {
    const io::safetensors_tensor t = file.tensor(e.name);
    CHECK(t.dtype() == e.dtype);
    CHECK(t.shape() == e.shape);
    if (t.byte_size() > 0) CHECK(std::memcmp(t.data(), e.data, t.byte_size()) == 0);
  }
  CHECK(file.tensor("scalar").size() == 1);
  CHECK(file.tensor("scalar").to_vector<double>() == std::vector<double>{2.5});
  CHECK(file.tensor("empty").size() == 0);
  CHECK(file.tensor("empty").to_matrix<float>().rows() == 0);
  // Exact-type views point into the file's bytes: no copy.
  const auto w = file.tensor("model.w").matrix<float>();
  CHECK(static_cast<const void*>(w.data()) == static_cast<const void*>(file.tensor("model.w").data()));
  CHECK(w(2, 4) == f32(2, 4));
  CHECK(file.tensor("h").slice<half>(2)(0, 1).bits == f16[5].bits);
  CHECK(file.tensor("i64").vector<std::int64_t>()[3] == i64[3]);
  // Conversions: exact where the target holds the value.
  const auto bf_as_float = file.tensor("bf").to_matrix<float>();
  for (int i = 0; i < 6; ++i) CHECK(bf_as_float.data()[i] == static_cast<float>(bf16[static_cast<std::size_t>(i)]));
  CHECK(file.tensor("i16").to_vector<double>() == std::vector<double>{10, -290, -590});
  CHECK(file.tensor("u64").to_vector<double>()[1] == 1e18 + 1);
  CHECK(file.tensor("flags").to_vector<float>() == std::vector<float>{1, 0, 1});
  const auto f32_as_bf16 = file.tensor("model.w").to_vector<bfloat16>();
  for (int i = 0; i < 15; ++i) CHECK(f32_as_bf16[static_cast<std::size_t>(i)].bits == bfloat16(f32.data()[i]).bits);
}

TEST_CASE("safetensors: the writer lays tensors out as the reference does") {
  const std::vector<float> a(6, 1.0f);
  const std::vector<double> b(2, 2.0);
  const std::vector<std::uint8_t> c(3, 3);
  const std::vector<bfloat16> d(5, bfloat16(4.0f));
  const std::vector<float> e(1, 5.0f);
  const std::string bytes = io::serialize_safetensors({{"a", io::safetensors_dtype::f32, {2, 3}, a.data()},
                                                       {"z", io::safetensors_dtype::u8, {3}, c.data()},
                                                       {"b", io::safetensors_dtype::f64, {2}, b.data()},
                                                       {"d", io::safetensors_dtype::bf16, {5}, d.data()},
                                                       {"aa", io::safetensors_dtype::f32, {1}, e.data()}});
  // Decreasing dtype (F64, F32, BF16, U8), then by name; compact JSON; padded with spaces to 8 bytes.
  const std::string want =
      R"({"b":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[16,40]},)"
      R"("aa":{"dtype":"F32","shape":[1],"data_offsets":[40,44]},"d":{"dtype":"BF16","shape":[5],"data_offsets":[44,54]},)"
      R"("z":{"dtype":"U8","shape":[3],"data_offsets":[54,57]}})";
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  CHECK(n == (want.size() + 7) / 8 * 8);
  CHECK(bytes.substr(8, want.size()) == want);
  CHECK(bytes.substr(8 + want.size(), n - want.size()) == std::string(n - want.size(), ' '));
  CHECK(bytes.size() == 8 + n + 57);
  const auto file = io::parse_safetensors(bytes);
  CHECK(file.names() == std::vector<std::string>{"b", "a", "aa", "d", "z"});
  CHECK_FALSE(file.has_metadata());
  // Every tensor starts at a multiple of its item size from the file's start (8 + n is a multiple of 8).
  for (const auto& t : file.tensors()) CHECK((8 + n + t.begin) % io::item_size(t.dtype) == 0);
}

TEST_CASE("safetensors: strided matrix views are written row by row") {
  moecomp::host_matrix<float> big(4, 6);
  for (index_t i = 0; i < big.size(); ++i) big.data()[i] = static_cast<float>(i);
  const moecomp::matrix_view<const float> inner(big.data() + 1, 3, 4, 6);  // rows 0-2, columns 1-4
  const auto file = io::parse_safetensors(io::serialize_safetensors({io::safetensors_entry::of("m", inner)}));
  const auto m = file.tensor("m").matrix<float>();
  REQUIRE(m.rows() == 3);
  REQUIRE(m.cols() == 4);
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 4; ++j) CHECK(m(i, j) == inner(i, j));
}

TEST_CASE("safetensors: the reference's own example file reads") {
  // The doc-test buffer of huggingface/safetensors' SafeTensors::deserialize.
  const std::string header = R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})";
  REQUIRE(header.size() == 0x3c);
  const auto file = io::parse_safetensors(make_file(header, std::string(16, '\0')));
  CHECK(file.tensor("test").shape() == std::vector<index_t>{2, 2});
  CHECK(file.tensor("test").matrix<std::int32_t>()(1, 1) == 0);
}

TEST_CASE("safetensors: FP8 decodes by the formats' closed forms") {
  SUBCASE("E4M3 (torch's float8_e4m3fn): bias 7, subnormals, no infinity, S.1111.111 is NaN") {
    CHECK(moecomp::float8_e4m3::to_float(0x00) == 0.0f);
    CHECK(std::signbit(moecomp::float8_e4m3::to_float(0x80)));
    CHECK(moecomp::float8_e4m3::to_float(0x38) == 1.0f);
    CHECK(moecomp::float8_e4m3::to_float(0x7e) == 448.0f);
    CHECK(moecomp::float8_e4m3::to_float(0xfe) == -448.0f);
    CHECK(moecomp::float8_e4m3::to_float(0x01) == std::ldexp(1.0f, -9));
    CHECK(moecomp::float8_e4m3::to_float(0x08) == std::ldexp(1.0f, -6));
    CHECK(std::isnan(moecomp::float8_e4m3::to_float(0x7f)));
    CHECK(std::isnan(moecomp::float8_e4m3::to_float(0xff)));
    for (int code = 0; code < 256; ++code) {
      const int sign = code >> 7, exponent = (code >> 3) & 15, mantissa = code & 7;
      if (exponent == 15 && mantissa == 7) continue;
      const double magnitude = exponent == 0 ? mantissa * std::ldexp(1.0, -9)
                                             : (1.0 + mantissa / 8.0) * std::ldexp(1.0, exponent - 7);
      CHECK(moecomp::float8_e4m3::to_float(static_cast<std::uint8_t>(code)) == (sign ? -magnitude : magnitude));
    }
  }
  SUBCASE("E5M2: bias 15, subnormals, infinities and NaNs as IEEE") {
    CHECK(moecomp::float8_e5m2::to_float(0x3c) == 1.0f);
    CHECK(moecomp::float8_e5m2::to_float(0x7b) == 57344.0f);
    CHECK(moecomp::float8_e5m2::to_float(0x01) == std::ldexp(1.0f, -16));
    CHECK(std::isinf(moecomp::float8_e5m2::to_float(0x7c)));
    CHECK(moecomp::float8_e5m2::to_float(0xfc) < 0.0f);
    CHECK(std::isnan(moecomp::float8_e5m2::to_float(0x7d)));
    for (int code = 0; code < 256; ++code) {
      const int sign = code >> 7, exponent = (code >> 2) & 31, mantissa = code & 3;
      if (exponent == 31) continue;
      const double magnitude = exponent == 0 ? mantissa * std::ldexp(1.0, -16)
                                             : (1.0 + mantissa / 4.0) * std::ldexp(1.0, exponent - 15);
      CHECK(moecomp::float8_e5m2::to_float(static_cast<std::uint8_t>(code)) == (sign ? -magnitude : magnitude));
    }
  }
  SUBCASE("F8 tensors convert through the same functions") {
    std::vector<std::uint8_t> codes(256);
    for (int i = 0; i < 256; ++i) codes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i);
    const auto file = io::parse_safetensors(io::serialize_safetensors(
        {{"e4", io::safetensors_dtype::f8_e4m3, {16, 16}, codes.data()},
         {"e5", io::safetensors_dtype::f8_e5m2, {256}, codes.data()}}));
    const auto e4 = file.tensor("e4").to_matrix<double>();
    const auto e5 = file.tensor("e5").to_vector<float>();
    for (int i = 0; i < 256; ++i) {
      const float want4 = moecomp::float8_e4m3::to_float(static_cast<std::uint8_t>(i));
      const float want5 = moecomp::float8_e5m2::to_float(static_cast<std::uint8_t>(i));
      CHECK((std::isnan(want4) ? std::isnan(e4.data()[i]) : e4.data()[i] == want4));
      CHECK((std::isnan(want5) ? std::isnan(e5[static_cast<std::size_t>(i)]) : e5[static_cast<std::size_t>(i)] == want5));
    }
    CHECK(file.tensor("e4").holds<moecomp::float8_e4m3>());
  }
}

TEST_CASE("safetensors: views refuse another dtype, another ndim and misaligned data; copies accept them") {
  // U8 [0, 2) then F32 [2, 6): the float starts 2 bytes past an 8-aligned data section.
  const std::string header = R"({"u":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"f":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})";
  std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  float value = 1.5f;
  std::string data(2, '\x07');
  data.append(reinterpret_cast<const char*>(&value), 4);
  const auto file = io::parse_safetensors(make_file(padded, data));
  const std::string misaligned = moecomp_test::thrown_message([&] { (void)file.tensor("f").vector<float>(); });
  CHECK_MESSAGE(contains(misaligned, "must be aligned to 4 bytes"), misaligned);
  CHECK(file.tensor("f").to_vector<float>() == std::vector<float>{1.5f});
  const std::string dtype = moecomp_test::thrown_message([&] { (void)file.tensor("u").vector<float>(); });
  CHECK_MESSAGE(contains(dtype, "tensor 'u' must be F32 for this element type, got U8"), dtype);
  const std::string ndim = moecomp_test::thrown_message([&] { (void)file.tensor("u").matrix<std::uint8_t>(); });
  CHECK_MESSAGE(contains(ndim, "tensor 'u' must have 2 dimensions, got 1"), ndim);
  const std::string absent = moecomp_test::thrown_message([&] { (void)file.tensor("nope"); });
  CHECK_MESSAGE(contains(absent, "name must be a tensor of '<memory>', got 'nope'"), absent);
  CHECK(file.find("nope") == nullptr);
}

TEST_CASE("safetensors: each rule of the reference's rejection list is an io_error naming the rule") {
  const std::string tensor = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string good_header = "{" + tensor + "}";
  const std::string data(8, '\0');
  REQUIRE_NOTHROW(io::parse_safetensors(make_file(good_header, data)));

  SUBCASE("shorter than 8 bytes") {
    CHECK(contains(rejection(""), "it has 0 bytes, fewer than the 8 of the header length"));
    CHECK(contains(rejection("1234567"), "it has 7 bytes"));
  }
  SUBCASE("a header length over 100,000,000 bytes") {
    std::string bytes = make_file(good_header, data);
    const std::uint64_t n = 100'000'001;
    std::memcpy(&bytes[0], &n, 8);
    CHECK(contains(rejection(bytes), "the header length 100000001 exceeds the limit of 100000000 bytes"));
    const std::uint64_t huge = std::numeric_limits<std::uint64_t>::max();
    std::memcpy(&bytes[0], &huge, 8);
    CHECK(contains(rejection(bytes), "exceeds the limit"));
  }
  SUBCASE("a header length beyond the file") {
    std::string bytes = make_file(good_header);
    const std::uint64_t n = good_header.size() + 1;
    std::memcpy(&bytes[0], &n, 8);
    CHECK(contains(rejection(bytes), "runs past the end of the file"));
  }
  SUBCASE("invalid UTF-8: a stray continuation byte, an overlong form, a surrogate, a truncated sequence") {
    for (const std::string& bad : {std::string("\x80"), std::string("\xc0\xaf"), std::string("\xed\xa0\x80"),
                                  std::string("\xf4\x90\x80\x80"), std::string("\xe2\x82")}) {
      const std::string header = R"({"__metadata__":{"k":")" + bad + R"("}})";
      const std::string message = rejection(make_file(header));
      CHECK_MESSAGE(contains(message, "the header is not valid UTF-8 (at byte 22)"), message);
    }
    // Valid multi-byte text is fine.
    CHECK_NOTHROW(io::parse_safetensors(make_file(R"({"__metadata__":{"k":"€ 𝄞 ü"}})")));
  }
  SUBCASE("invalid JSON") {
    CHECK(contains(rejection(make_file("{" + tensor)), "the header is not valid JSON (at byte"));
    CHECK(contains(rejection(make_file(good_header + "x", data)), "the header is not valid JSON"));
    CHECK(contains(rejection(make_file(good_header + std::string(1, '\0'), data)), "not valid JSON"));
    CHECK(contains(rejection(make_file("")), "not valid JSON"));
    CHECK(contains(rejection(make_file("[]")), "the header must be a JSON object, got an array"));
  }
  SUBCASE("__metadata__ that is not a string-to-string map") {
    CHECK(contains(rejection(make_file(R"({"__metadata__":{"k":1}})")),
                   "\"__metadata__\" must be a string-to-string map, but 'k' holds a number"));
    CHECK(contains(rejection(make_file(R"({"__metadata__":{"k":{"a":"b"}}})")), "but 'k' holds an object"));
    CHECK(contains(rejection(make_file(R"({"__metadata__":["a"]})")), "must be a string-to-string map, got an array"));
    CHECK(contains(rejection(make_file(R"({"__metadata__":"x"})")), "must be a string-to-string map, got a string"));
    // null is "no metadata", as serde reads an Option.
    CHECK_FALSE(io::parse_safetensors(make_file(R"({"__metadata__":null})")).has_metadata());
  }
  SUBCASE("offsets that are not exactly contiguous from 0") {
    CHECK(contains(rejection(make_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", data + "1234")),
                   "tensor 't' has data_offsets [4, 12]; the offsets must be contiguous from 0, and the next tensor "
                   "must start at byte 0"));
    const std::string gap = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})";
    CHECK(contains(rejection(make_file(gap, "12345")), "tensor 'b' has data_offsets [3, 5]"));
    const std::string overlap = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})";
    CHECK(contains(rejection(make_file(overlap, "123")), "tensor 'b' has data_offsets [1, 3]"));
    const std::string backwards = R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"c":{"dtype":"U8","shape":[2],"data_offsets":[2,0]}})";
    CHECK(contains(rejection(make_file(backwards, "")), "has data_offsets [2, 0]"));
    // The header's order does not matter, only the ranges (the reference sorts them).
    const std::string shuffled = R"({"b":{"dtype":"U8","shape":[3],"data_offsets":[2,5]},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
    CHECK(io::parse_safetensors(make_file(shuffled, "12345")).names() == std::vector<std::string>{"a", "b"});
  }
  SUBCASE("a byte length that disagrees with shape x dtype") {
    CHECK(contains(rejection(make_file(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data)),
                   "tensor 't' holds 8 bytes, but 3 elements of F32 need 12"));
    CHECK(contains(rejection(make_file(R"({"t":{"dtype":"BF16","shape":[2],"data_offsets":[0,8]}})", data)),
                   "2 elements of BF16 need 4"));
  }
  SUBCASE("trailing bytes, and a truncated data section") {
    CHECK(contains(rejection(make_file(good_header, data + "xy")), "2 trailing bytes follow the 8 bytes of tensor data"));
    CHECK(contains(rejection(make_file(good_header, data.substr(0, 5))),
                   "the header declares 8 bytes of tensor data, but only 5 follow it (the file is truncated)"));
  }
  SUBCASE("integer overflow") {
    CHECK(contains(rejection(make_file(
                       R"({"t":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", data)),
                   "the element count of its shape overflows"));
    CHECK(contains(rejection(make_file(
                       R"({"t":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})", data)),
                   "the byte count of its shape overflows"));
    CHECK(contains(rejection(make_file(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551616]}})")),
                   "\"data_offsets\" must hold non-negative integers (below 2^64), got 18446744073709551616"));
    // Offsets near 2^64 overflow nothing: the data section's end is compared without adding.
    CHECK(contains(rejection(make_file(R"({"t":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,18446744073709551615]}})")),
                   "more than moecomp's index type holds"));
  }
  SUBCASE("the structure of a tensor entry (as the reference's serde types demand)") {
    CHECK(contains(rejection(make_file(R"({"t":{"dtype":"F32","shape":[2]}})", data)),
                   "tensor 't' lacks the field \"data_offsets\""));
    CHECK(contains(rejection(make_file(R"({"t":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", data)),
                   "tensor 't' has the dtype 'F33', which moecomp does not read"));
    CHECK(contains(rejection(make_file(R"({"t":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", data)),
                   "the dtype 'C64'"));
    CHECK(contains(rejection(make_file(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data)),
                   "tensor 't': \"shape\" must hold non-negative integers, got -2"));
    CHECK(contains(rejection(make_file(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", data)),
                   "got 2.0"));
    CHECK(contains(rejection(make_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})", data)),
                   "\"data_offsets\" must hold 2 integers, got 3"));
    CHECK(contains(rejection(make_file(R"({"t":[1,2]})", data)), "tensor 't' must be an object"));
    CHECK(contains(rejection(make_file(R"({"t":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data)),
                   "has the field \"dtype\" twice"));
    CHECK(contains(rejection(make_file("{" + tensor + "," + tensor + "}", data)), "names the tensor 't' twice"));
    // Unknown fields are skipped, whatever they hold.
    CHECK_NOTHROW(io::parse_safetensors(
        make_file(R"({"t":{"extra":{"a":[1,{"b":null}]},"dtype":"F32","more":-1.5,"shape":[2],"data_offsets":[0,8]}})", data)));
  }
}

TEST_CASE("safetensors: files on disk are mapped; a failed write leaves nothing behind") {
  temp_dir dir("safetensors_files");
  const std::vector<float> values = counting<float>(12, 0.5, -1.0);
  const std::vector<io::safetensors_entry> entries = {{"w", io::safetensors_dtype::f32, {3, 4}, values.data()}};
  const std::string path = dir.file("a.safetensors");
  const std::uint64_t size = io::write_safetensors(path, entries, {{"format", "pt"}});
  CHECK(fs::file_size(path) == size);
  CHECK(read_file(path) == io::serialize_safetensors(entries, {{"format", "pt"}}));
  {
    io::safetensors_file file = io::read_safetensors(path);
#if defined(MOECOMP_TEST_POSIX)
    CHECK(file.memory_mapped());
#endif
    CHECK(file.file_bytes() == size);
    CHECK(file.tensor("w").matrix<float>()(2, 3) == values[11]);
    const io::safetensors_file moved = std::move(file);
    CHECK(moved.tensor("w").matrix<float>()(1, 1) == values[5]);
  }
  SUBCASE("read errors name the path") {
    const std::string missing = dir.file("missing.safetensors");
    try {
      io::read_safetensors(missing);
      FAIL("expected an io_error");
    } catch (const moecomp::io_error& e) {
      CHECK(contains(e.what(), "read_safetensors: cannot open '" + missing + "'"));
    }
    try {
      io::read_safetensors(dir.path.string());
      FAIL("expected an io_error");
    } catch (const moecomp::io_error& e) {
      CHECK(contains(e.what(), "it is a directory, not a regular file"));
    }
    write_file(dir.file("short.safetensors"), "abc");
    try {
      io::read_safetensors(dir.file("short.safetensors"));
      FAIL("expected an io_error");
    } catch (const moecomp::io_error& e) {
      CHECK(contains(e.what(), "'" + dir.file("short.safetensors") + "' is not a valid safetensors file: it has 3 bytes"));
    }
  }
  SUBCASE("misuse is refused before any file exists") {
    const std::string target = dir.file("b.safetensors");
    const std::string twice = moecomp_test::thrown_message([&] { io::write_safetensors(target, {entries[0], entries[0]}); });
    CHECK_MESSAGE(contains(twice, "write_safetensors: tensor names must be unique, got 'w' twice"), twice);
    const std::string reserved = moecomp_test::thrown_message(
        [&] { io::write_safetensors(target, {{"__metadata__", io::safetensors_dtype::f32, {1}, values.data()}}); });
    CHECK(contains(reserved, "a tensor name must not be \"__metadata__\""));
    const std::string negative = moecomp_test::thrown_message(
        [&] { io::write_safetensors(target, {{"x", io::safetensors_dtype::f32, {-1}, values.data()}}); });
    CHECK(contains(negative, "tensor 'x' has a negative extent -1"));
    const std::string null = moecomp_test::thrown_message(
        [&] { io::write_safetensors(target, {{"x", io::safetensors_dtype::f32, {2}, nullptr}}); });
    CHECK(contains(null, "tensor 'x' has 2 elements but null data"));
    const std::string utf8 = moecomp_test::thrown_message(
        [&] { io::write_safetensors(target, {{"bad\xff", io::safetensors_dtype::f32, {1}, values.data()}}); });
    CHECK(contains(utf8, "a tensor name must be valid UTF-8"));
    CHECK_FALSE(fs::exists(target));
    CHECK(dir.entries() == std::vector<std::string>{"a.safetensors"});
  }
  SUBCASE("a target that is a directory is refused and nothing is created") {
    fs::create_directory(dir.file("folder"));
    CHECK_THROWS_AS(io::write_safetensors(dir.file("folder"), entries), moecomp::io_error);
    CHECK(dir.entries().size() == 2);
  }
}

#if defined(__linux__)
/// This process's resident pages, in bytes (/proc/self/statm's second field).
double resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  double pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<double>(::sysconf(_SC_PAGESIZE));
}
#endif

TEST_CASE("safetensors: release takes a tensor's pages out of the resident set and loses nothing") {
  temp_dir dir("safetensors_release");
  const index_t n = index_t(1) << 21;  // 8 MiB of float
  const std::vector<float> values = counting<float>(static_cast<std::size_t>(n), 0.25, -3.0);
  const std::string path = dir.file("big.safetensors");
  io::write_safetensors(path, {{"small", io::safetensors_dtype::f32, {4}, values.data()},
                               {"big", io::safetensors_dtype::f32, {n}, values.data()}});
  const io::safetensors_file file = io::read_safetensors(path);
  const auto sum = [&] {
    double total = 0;
    const auto v = file.tensor("big").vector<float>();
    for (index_t i = 0; i < n; ++i) total += v[i];
    return total;
  };
  const double expected = sum();  // every page of "big" read
#if defined(__linux__)
  const double before = resident_bytes();
  file.release("big");
  const double after = resident_bytes();
  INFO("resident before ", before, " bytes, after ", after);
  CHECK(before - after >= 7.0 * 1024 * 1024);  // the 8 MiB tensor's whole pages
#else
  file.release("big");
#endif
  CHECK(sum() == expected);  // read again from the file
  CHECK(file.tensor("small").vector<float>()[3] == values[3]);
  CHECK(contains(moecomp_test::thrown_message([&] { file.release("nothing"); }),
                 "safetensors_file::release: name must be a tensor of"));
}

TEST_CASE("safetensors: sharded checkpoints are written shard by shard and read through the index") {
  temp_dir dir("safetensors_shards");
  const std::vector<float> a = counting<float>(6, 1.0, 0.0);
  const std::vector<bfloat16> b(4, bfloat16(2.0f));
  const std::vector<std::int64_t> c = {5, 6, 7};
  std::vector<std::string> written;
  {
    io::safetensors_sharded_writer writer(dir.path.string());
    writer.write_shard({{"layers.0.w", io::safetensors_dtype::f32, {2, 3}, a.data()}}, {{"format", "pt"}});
    writer.write_shard({{"layers.1.w", io::safetensors_dtype::bf16, {2, 2}, b.data()},
                        {"layers.1.n", io::safetensors_dtype::i64, {3}, c.data()}},
                       {{"format", "pt"}});
    const std::string again = moecomp_test::thrown_message(
        [&] { writer.write_shard({{"layers.0.w", io::safetensors_dtype::f32, {1}, a.data()}}); });
    CHECK(contains(again, "tensor names must be unique across shards, got 'layers.0.w' again"));
    written = writer.finish();
  }
  CHECK(written == std::vector<std::string>{dir.file("model-00001-of-00002.safetensors"),
                                            dir.file("model-00002-of-00002.safetensors"),
                                            dir.file("model.safetensors.index.json")});
  const std::string index = read_file(dir.file("model.safetensors.index.json"));
  CHECK(contains(index, "\"total_size\": 56"));
  CHECK(contains(index, "\"layers.1.n\": \"model-00002-of-00002.safetensors\""));

  const io::safetensors_checkpoint checkpoint = io::open_safetensors_checkpoint(dir.path.string());
  CHECK(checkpoint.sharded());
  CHECK(checkpoint.names() == std::vector<std::string>{"layers.0.w", "layers.1.n", "layers.1.w"});
  CHECK(checkpoint.shards().size() == 2);
  CHECK(checkpoint.tensor("layers.0.w").matrix<float>()(1, 2) == 5.0f);
  CHECK(checkpoint.tensor("layers.1.n").vector<std::int64_t>()[2] == 7);
  CHECK(checkpoint.info("layers.1.w").dtype == io::safetensors_dtype::bf16);
  CHECK(checkpoint.tensor_bytes() == 56);
  CHECK(checkpoint.metadata().at("format") == "pt");

  SUBCASE("one shard is model.safetensors, with no index") {
    temp_dir single("safetensors_single");
    io::safetensors_sharded_writer writer(single.path.string());
    writer.write_shard({{"w", io::safetensors_dtype::f32, {6}, a.data()}});
    CHECK(writer.finish() == std::vector<std::string>{single.file("model.safetensors")});
    const auto one = io::open_safetensors_checkpoint(single.path.string());
    CHECK_FALSE(one.sharded());
    CHECK(one.names() == std::vector<std::string>{"w"});
  }
  SUBCASE("an unfinished writer removes its files") {
    temp_dir scratch("safetensors_unfinished");
    {
      io::safetensors_sharded_writer writer(scratch.path.string());
      writer.write_shard({{"w", io::safetensors_dtype::f32, {6}, a.data()}});
      CHECK(scratch.entries().size() == 1);
    }
    CHECK(scratch.entries().empty());
  }
  SUBCASE("a bad index is an io_error naming the index and the problem") {
    const std::string path = dir.file("model.safetensors.index.json");
    auto refused = [&](const std::string& text) {
      write_file(path, text);
      try {
        io::open_safetensors_checkpoint(dir.path.string());
      } catch (const moecomp::io_error& e) {
        return std::string(e.what());
      }
      FAIL_CHECK("expected an io_error");
      return std::string();
    };
    CHECK(contains(refused("{"), "'" + path + "' is not a valid checkpoint index: it is not valid JSON"));
    CHECK(contains(refused("[]"), "it must be a JSON object"));
    CHECK(contains(refused(R"({"metadata":{}})"), "it must have a \"weight_map\" object"));
    CHECK(contains(refused(R"({"weight_map":{}})"), "\"weight_map\" is empty"));
    CHECK(contains(refused(R"({"weight_map":{"w":3}})"), "must map names to file names, but 'w' does not"));
    CHECK(contains(refused(R"({"weight_map":{"w":"../x.safetensors"}})"), "a shard must lie inside the index's directory"));
    CHECK(contains(refused(R"({"weight_map":{"w":"/etc/passwd"}})"), "a shard must be a relative file name"));
    CHECK(contains(refused(R"({"weight_map":{"w":"nothere.safetensors"}})"), "cannot open"));
    CHECK(contains(refused(R"({"weight_map":{"layers.9.w":"model-00001-of-00002.safetensors"}})"),
                   "\"weight_map\" places 'layers.9.w' in 'model-00001-of-00002.safetensors', which does not hold it"));
  }
  SUBCASE("a directory with neither file") {
    temp_dir empty("safetensors_empty");
    try {
      io::open_safetensors_checkpoint(empty.path.string());
      FAIL("expected an io_error");
    } catch (const moecomp::io_error& e) {
      CHECK(contains(e.what(), "has neither model.safetensors.index.json nor model.safetensors"));
    }
  }
}

TEST_CASE("safetensors: only regular files are read: a FIFO, a directory or a device fails at once with io_error") {
  using moecomp_test::io_error_within;
  temp_dir dir("safetensors_special");
  const std::vector<float> a = counting<float>(6, 0.25, -1.0);
  auto starts = [](const std::string& text, const std::string& start) { return text.find(start) == 0; };

  SUBCASE("read_safetensors") {
    const std::string fifo = dir.file("model.safetensors");
    if (moecomp_test::make_fifo(fifo)) {
      const std::string m = io_error_within([fifo] { io::read_safetensors(fifo); }, fifo);
      CHECK_MESSAGE(starts(m, "read_safetensors: cannot read '" + fifo + "': it is a FIFO, not a regular file"), m);
    }
    if (moecomp_test::have_dev_zero()) {
      const std::string m = io_error_within([] { io::read_safetensors("/dev/zero"); });
      CHECK_MESSAGE(starts(m, "read_safetensors: cannot read '/dev/zero': it is a character device"), m);
    }
  }
  SUBCASE("a FIFO as model.safetensors of a checkpoint directory") {
    const std::string fifo = dir.file("model.safetensors");
    if (moecomp_test::make_fifo(fifo)) {
      const std::string d = dir.path.string();
      const std::string m = io_error_within([d] { io::open_safetensors_checkpoint(d); }, fifo);
      CHECK_MESSAGE(starts(m, "read_safetensors: cannot read '" + fifo + "': it is a FIFO"), m);
    }
  }
  SUBCASE("a FIFO or a directory as model.safetensors.index.json is an error, not an absent index") {
    io::write_safetensors(dir.file("model.safetensors"), {{"w", io::safetensors_dtype::f32, {6}, a.data()}});
    const std::string index = dir.file("model.safetensors.index.json");
    const std::string d = dir.path.string();
    if (moecomp_test::make_fifo(index)) {
      const std::string m = io_error_within([d] { io::open_safetensors_checkpoint(d); }, index);
      CHECK_MESSAGE(starts(m, "open_safetensors_checkpoint: cannot read '" + index + "': it is a FIFO"), m);
      const std::string direct = io_error_within([index] { io::open_safetensors_checkpoint(index); }, index);
      CHECK_MESSAGE(starts(direct, "open_safetensors_checkpoint: cannot read '" + index + "': it is a FIFO"), direct);
      fs::remove(index);
    }
    fs::create_directory(index);
    const std::string m = io_error_within([d] { io::open_safetensors_checkpoint(d); });
    CHECK_MESSAGE(starts(m, "open_safetensors_checkpoint: cannot read '" + index + "': it is a directory"), m);
    fs::remove(index);
    CHECK_FALSE(io::open_safetensors_checkpoint(d).sharded());  // with the name free, the single file is read
  }
  SUBCASE("an index larger than text_file_limit is refused before it is read") {
    const std::string index = dir.file("model.safetensors.index.json");
    write_file(index, "{}");
    fs::resize_file(index, io::text_file_limit + 1);  // sparse: no disk is used
    const std::string d = dir.path.string();
    const std::string m = io_error_within([d] { io::open_safetensors_checkpoint(d); });
    CHECK_MESSAGE(starts(m, "open_safetensors_checkpoint: cannot read '" + index + "': the file is 67108865 bytes, "
                            "larger than the 67108864-byte limit"),
                  m);
  }
  SUBCASE("a shard that is a FIFO") {
    const std::string shard = dir.file("model-00001-of-00001.safetensors");
    if (moecomp_test::make_fifo(shard)) {
      write_file(dir.file("model.safetensors.index.json"),
                 R"({"weight_map": {"w": "model-00001-of-00001.safetensors"}})");
      const std::string d = dir.path.string();
      const std::string m = io_error_within([d] { io::open_safetensors_checkpoint(d); }, shard);
      CHECK_MESSAGE(starts(m, "read_safetensors: cannot read '" + shard + "': it is a FIFO"), m);
    }
  }
}

TEST_CASE("safetensors: parse_checkpoint_index reads an index's text, in memory") {
  const auto entries = io::parse_checkpoint_index(
      R"({"metadata": {"total_size": 56}, "weight_map": {"b": "s-2.safetensors", "a": "s-1.safetensors", "c": "d/s-1.safetensors"}})",
      "idx.json");
  REQUIRE(entries.size() == 3);
  CHECK(entries[0].tensor == "a");
  CHECK(entries[0].shard == "s-1.safetensors");
  CHECK(entries[1].tensor == "b");
  CHECK(entries[2].shard == "d/s-1.safetensors");
  auto refused = [](const std::string& text) {
    try {
      io::parse_checkpoint_index(text, "idx.json");
    } catch (const moecomp::io_error& e) {
      return std::string(e.what());
    }
    FAIL_CHECK("expected an io_error for " << text);
    return std::string();
  };
  CHECK(contains(refused("{"), "parse_checkpoint_index: 'idx.json' is not a valid checkpoint index: it is not valid JSON"));
  CHECK(contains(refused(""), "it is not valid JSON"));
  CHECK(contains(refused("[]"), "it must be a JSON object"));
  CHECK(contains(refused(R"({"weight_map": []})"), "it must have a \"weight_map\" object"));
  CHECK(contains(refused(R"({"weight_map": {}})"), "\"weight_map\" is empty"));
  CHECK(contains(refused(R"({"weight_map": {"w": null}})"), "but 'w' does not"));
  CHECK(contains(refused(R"({"weight_map": {"w": ""}})"), "a shard must be a relative file name, got ''"));
  CHECK(contains(refused(R"({"weight_map": {"w": "a/../../x"}})"), "a shard must lie inside the index's directory"));
}

// A deterministic mutation fuzzer (the libFuzzer version is fuzz/safetensors_fuzzer.cpp): every mutated
// input parses into a self-consistent file, which re-serialises into one that parses the same, or is refused
// with io_error. Nothing else may escape.
TEST_CASE("safetensors: mutated files parse consistently or are refused with io_error") {
  const std::vector<float> a = counting<float>(6, 0.25, -1.0);
  const std::vector<std::uint8_t> codes = {0x38, 0x7e, 0x01, 0xff};
  const std::vector<std::string> seeds = {
      io::serialize_safetensors({{"a", io::safetensors_dtype::f32, {2, 3}, a.data()},
                                 {"e4", io::safetensors_dtype::f8_e4m3, {4}, codes.data()}},
                                {{"format", "pt"}}),
      io::serialize_safetensors({{"x", io::safetensors_dtype::bf16, {3}, a.data()},
                                 {"s", io::safetensors_dtype::f64, {}, a.data()},
                                 {"z", io::safetensors_dtype::i8, {0}, nullptr}}),
      make_file(R"({"t":{"extra":[1,{"b":null}],"dtype":"U8","shape":[3],"data_offsets":[0,3]},"__metadata__":null})", "abc"),
  };
  const std::vector<std::string> tokens = {"\"", "{", "}", "[", "]", ",", ":", "0", "9", "-1", "1e3", "null",
                                           "\"F32\"", "\"__metadata__\"", "\\u0000", "\xc3", "\xff", "18446744073709551615"};
  moecomp::random_generator rng(2026);
  int parsed = 0, refused = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string bytes = seeds[rng.uniform_index(seeds.size())];
    const int edits = 1 + static_cast<int>(rng.uniform_index(3));
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng.uniform_index(bytes.size() + 1);
      switch (rng.uniform_index(5)) {
        case 0:
          if (!bytes.empty()) bytes[at % bytes.size()] ^= static_cast<char>(1u << rng.uniform_index(8));
          break;
        case 1: bytes.resize(at); break;
        case 2: bytes.insert(at, tokens[rng.uniform_index(tokens.size())]); break;
        case 3:
          if (at < bytes.size()) bytes.erase(at, 1 + rng.uniform_index(4));
          break;
        default:  // rewrite the length field to a plausible value
          if (bytes.size() >= 8) {
            const std::uint64_t n = rng.uniform_index(bytes.size());
            std::memcpy(&bytes[0], &n, 8);
          }
      }
    }
    try {
      const io::safetensors_file file = io::parse_safetensors(bytes);
      std::vector<io::safetensors_entry> entries;
      for (const auto& t : file.tensors()) {
        CHECK(static_cast<std::uint64_t>(t.size()) * io::item_size(t.dtype) == t.bytes());
        entries.push_back(io::safetensors_entry::of(t.name, file.tensor(t.name)));
      }
      const io::safetensors_file again = io::parse_safetensors(io::serialize_safetensors(entries, file.metadata()));
      CHECK(again.tensors().size() == file.tensors().size());
      for (const auto& t : file.tensors()) {
        const auto u = again.tensor(t.name);
        CHECK(u.shape() == t.shape);
        CHECK((u.byte_size() == 0 || std::memcmp(u.data(), file.tensor(t.name).data(), u.byte_size()) == 0));
      }
      ++parsed;
    } catch (const moecomp::io_error&) {
      ++refused;
    }
  }
  MESSAGE("parsed " << parsed << ", refused " << refused);
  CHECK(parsed > 100);
  CHECK(refused > 1000);
}

// ------------------------------------------------------------------------ an independent Python peer

TEST_CASE("safetensors: files agree with an independent implementation (Python's json and numpy)") {
  temp_dir dir("safetensors_python");
  // moecomp writes; Python reads by the specification (json.loads, numpy.frombuffer) and writes its own.
  moecomp::random_generator rng(11);
  moecomp::host_matrix<float> w(4, 3);
  rng.fill_uniform(w.view(), -1.0f, 1.0f);
  std::vector<bfloat16> bf(6);
  for (auto& x : bf) x = bfloat16(static_cast<float>(rng.uniform<double>(-3.0, 3.0)));
  const std::vector<std::int32_t> ids = {3, -1, 4, 1, -5};
  io::write_safetensors(dir.file("moecomp.safetensors"),
                        {io::safetensors_entry::of("w", w.const_view()),
                         {"bf", io::safetensors_dtype::bf16, {2, 3}, bf.data()},
                         {"ids", io::safetensors_dtype::i32, {5}, ids.data()}},
                        {{"format", "pt"}});
  const std::string script = R"PY(
import json, struct, sys
try:
    import numpy as np
except ImportError:
    sys.exit(77)
out = sys.argv[1]
def read(path):
    raw = open(path, 'rb').read()
    (n,) = struct.unpack('<Q', raw[:8])
    header = json.loads(raw[8:8 + n].decode('utf-8'))
    data = raw[8 + n:]
    return header, data
header, data = read(out + '/moecomp.safetensors')
assert header['__metadata__'] == {'format': 'pt'}, header
kinds = {'F32': '<f4', 'I32': '<i4', 'BF16': '<u2'}
with open(out + '/read.txt', 'w') as f:
    for name in sorted(k for k in header if k != '__metadata__'):
        t = header[name]
        b, e = t['data_offsets']
        values = np.frombuffer(data[b:e], dtype=kinds[t['dtype']]).reshape(t['shape'])
        if t['dtype'] == 'BF16':
            values = (values.astype(np.uint32) << 16).view(np.float32)
        f.write(name + ' ' + t['dtype'] + ' ' + ' '.join(repr(float(v)) for v in values.ravel()) + '\n')
# Python writes, in an order of its own (names descending) with no padding beyond 8 and an F8 tensor.
rng = np.random.default_rng(5)
tensors = {
    'z.f16': rng.standard_normal((2, 2)).astype('<f2'),
    'y.f64': rng.standard_normal(3).astype('<f8'),
    'x.e5': np.arange(0, 256, 17, dtype=np.uint8),
    'w.i64': np.array([[-(2**40), 7]], dtype='<i8'),
}
dtypes = {'z.f16': 'F16', 'y.f64': 'F64', 'x.e5': 'F8_E5M2', 'w.i64': 'I64'}
header, blob, offset = {'__metadata__': {'who': 'python'}}, b'', 0
for name in sorted(tensors, reverse=True):
    raw = tensors[name].tobytes()
    header[name] = {'dtype': dtypes[name], 'shape': list(tensors[name].shape), 'data_offsets': [offset, offset + len(raw)]}
    blob += raw
    offset += len(raw)
text = json.dumps(header, separators=(',', ':')).encode()
text += b' ' * (-len(text) % 8)
open(out + '/python.safetensors', 'wb').write(struct.pack('<Q', len(text)) + text + blob)
with open(out + '/written.txt', 'w') as f:
    for name in sorted(tensors):
        v = tensors[name]
        if dtypes[name] == 'F8_E5M2':  # E5M2 is the upper byte of a binary16
            v = (v.astype(np.uint16) << 8).view(np.float16)
        f.write(name + ' ' + ' '.join(repr(float(x)) for x in v.astype(np.float64).ravel()) + '\n')
)PY";
  std::string log;
  const int code = moecomp_test::run_python(dir, script, log);
  if (moecomp_test::skip_without_peer(code, log, "numpy")) return;
  REQUIRE_MESSAGE(code == 0, log);

  // What Python read from moecomp's file.
  std::string want;
  auto line = [&want](const std::string& name, const char* dtype, const std::vector<double>& values) {
    want += name + " " + dtype;
    for (double v : values) {
      char text[64];
      std::snprintf(text, sizeof text, " %.17g", v);
      want += text;
    }
    want += "\n";
  };
  std::vector<double> bf_values, id_values, w_values;
  for (auto x : bf) bf_values.push_back(static_cast<float>(x));
  for (auto x : ids) id_values.push_back(x);
  for (index_t i = 0; i < w.size(); ++i) w_values.push_back(w.data()[i]);
  line("bf", "BF16", bf_values);
  line("ids", "I32", id_values);
  line("w", "F32", w_values);
  // Python prints repr(float): parse both sides as numbers rather than comparing text.
  auto numbers = [](const std::string& text) {
    std::vector<std::string> words;
    std::string word;
    for (char ch : text) {
      if (ch == ' ' || ch == '\n') {
        if (!word.empty()) words.push_back(word);
        word.clear();
      } else {
        word += ch;
      }
    }
    return words;
  };
  // A word that is a number (nan and inf included) must be the same number; any other word the same text.
  auto check_same_words = [](const std::vector<std::string>& theirs, const std::vector<std::string>& ours) {
    REQUIRE(theirs.size() == ours.size());
    for (std::size_t i = 0; i < ours.size(); ++i) {
      char* end = nullptr;
      const double t = std::strtod(theirs[i].c_str(), &end);
      if (*end != '\0') {
        CHECK(theirs[i] == ours[i]);
        continue;
      }
      const double o = std::strtod(ours[i].c_str(), nullptr);
      CHECK_MESSAGE(((std::isnan(t) && std::isnan(o)) || t == o), theirs[i] << " vs " << ours[i]);
    }
  };
  check_same_words(numbers(read_file(dir.file("read.txt"))), numbers(want));

  // What moecomp reads from Python's file.
  const io::safetensors_file file = io::read_safetensors(dir.file("python.safetensors"));
  CHECK(file.metadata().at("who") == "python");
  CHECK(file.names() == std::vector<std::string>{"z.f16", "y.f64", "x.e5", "w.i64"});
  std::string mine;
  for (const char* name : {"w.i64", "x.e5", "y.f64", "z.f16"}) {
    mine += std::string(name);
    for (double v : file.tensor(name).to_vector<double>()) {
      char text[64];
      std::snprintf(text, sizeof text, " %.17g", v);
      mine += text;
    }
    mine += "\n";
  }
  check_same_words(numbers(read_file(dir.file("written.txt"))), numbers(mine));
}
