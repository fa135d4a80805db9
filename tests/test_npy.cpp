// moecomp::io npy reader/writer: hand-made byte strings (always), round trips, every malformed-input
// error, atomic writes, and files written / read by NumPy itself when /usr/bin/python3 has numpy.
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/io/npy.hpp>

#include <doctest/doctest.h>

#include "test_files.hpp"
#include "test_special_files.hpp"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <csignal>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#define MOECOMP_TEST_POSIX 1
#endif

namespace fs = std::filesystem;
using moecomp::index_t;
using moecomp::io::npy_array;
using moecomp::io::npy_dtype;
namespace io = moecomp::io;
using moecomp_test::read_file;
using moecomp_test::run_python;
using moecomp_test::temp_dir;
using moecomp_test::write_file;
using moecomp_test::skip_without_peer;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Raw little-endian bytes of values (the tests run on little-endian hosts; checked below).
template <class T>
std::string le_bytes(std::initializer_list<T> values) {
  std::string bytes;
  for (T value : values) {
    unsigned char raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    bytes.append(reinterpret_cast<const char*>(raw), sizeof(T));
  }
  return bytes;
}
template <class T>
std::string be_bytes(std::initializer_list<T> values) {
  std::string bytes;
  for (T value : values) {
    unsigned char raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    for (std::size_t i = sizeof(T); i-- > 0;) bytes += static_cast<char>(raw[i]);
  }
  return bytes;
}

// A .npy with the given version, header text (taken as is: no padding added) and data bytes.
std::string make_npy(int major, const std::string& header, const std::string& data, std::uint64_t length_field) {
  std::string bytes = "\x93NUMPY";
  bytes += static_cast<char>(major);
  bytes += '\0';
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i) bytes += static_cast<char>((length_field >> (8 * i)) & 0xff);
  return bytes + header + data;
}
std::string make_npy(int major, const std::string& header, const std::string& data = {}) {
  return make_npy(major, header, data, header.size());
}
std::string make_npy(const std::string& header, const std::string& data = {}) { return make_npy(1, header, data); }

// What parse_npy throws for `bytes` named "bad.npy" (or a marker if it does not throw an io_error).
std::string npy_error(const std::string& bytes) {
  try {
    io::parse_npy(bytes, "bad.npy");
  } catch (const moecomp::io_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<unexpected exception> ") + e.what();
  }
  return "<no error>";
}

// Each malformed input must be an io_error naming the function, the source and the problem.
#define CHECK_NPY_ERROR(bytes_expr, problem)                                                          \
  do {                                                                                                \
    const std::string npy_bytes_ = (bytes_expr);                                                      \
    CHECK_THROWS_AS(io::parse_npy(npy_bytes_, "bad.npy"), moecomp::io_error);                         \
    const std::string npy_message_ = npy_error(npy_bytes_);                                           \
    CHECK_MESSAGE(contains(npy_message_, "parse_npy: 'bad.npy' is not a valid .npy file: "), npy_message_); \
    CHECK_MESSAGE(contains(npy_message_, problem), npy_message_);                                     \
  } while (0)

const std::string good_header = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }";
std::string header_with(const std::string& descr, const std::string& order, const std::string& shape) {
  return "{'descr': " + descr + ", 'fortran_order': " + order + ", 'shape': " + shape + ", }";
}

// Closed-form fixture values: element k (C order) of every test array.
double float_value(index_t k) { return static_cast<double>(k) * 0.25 - 1.5; }
std::int64_t int_value(index_t k) { return k * 3 - 7; }

template <class T>
T fixture_value(index_t k) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(float_value(k));
  } else {
    return static_cast<T>(int_value(k));
  }
}

template <class T>
void check_fixture_values(const npy_array& a) {
  REQUIRE(a.holds<T>());
  const T* data = static_cast<const T*>(a.data());
  for (index_t k = 0; k < a.size(); ++k) {
    INFO("element " << k << " of " << a.source());
    CHECK(data[k] == fixture_value<T>(k));
  }
}

template <class T>
std::vector<T> fixture_vector(index_t n) {
  std::vector<T> values(static_cast<std::size_t>(n));
  for (index_t k = 0; k < n; ++k) values[static_cast<std::size_t>(k)] = fixture_value<T>(k);
  return values;
}

}  // namespace

TEST_CASE("npy: tests assume a little-endian host") { REQUIRE(io::detail::host_is_little_endian()); }

// ------------------------------------------------------------------------------------- hand-made files

TEST_CASE("npy: reads the exact bytes numpy.save writes for int32 [1, 2, 3], and writes the same bytes") {
  // np.save(f, np.array([1, 2, 3], dtype='<i4')): header padded to 118 bytes so the data starts at 128.
  const std::string dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }";
  const std::string numpy_bytes = std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict + std::string(117 - dict.size(), ' ') +
                                  "\n" + std::string("\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00", 12);
  REQUIRE(numpy_bytes.size() == 140);
  const npy_array a = io::parse_npy(numpy_bytes, "numpy.npy");
  CHECK(a.dtype() == npy_dtype::int32);
  CHECK(a.shape() == std::vector<index_t>{3});
  CHECK(a.ndim() == 1);
  CHECK(a.size() == 3);
  CHECK(a.source() == "numpy.npy");
  const auto v = a.vector<std::int32_t>();
  CHECK(v(0) == 1);
  CHECK(v(1) == 2);
  CHECK(v(2) == 3);
  CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % 64 == 0);

  const std::int32_t values[] = {1, 2, 3};
  CHECK(io::serialize_npy(moecomp::make_vector_view(values, 3)) == numpy_bytes);
  CHECK(io::serialize_npy(a) == numpy_bytes);
}

TEST_CASE("npy: header syntax variants NumPy's literal parser accepts") {
  const std::string data = le_bytes<double>({1.5, -2.0});
  const std::vector<std::string> headers = {
      "{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": (2,)}",              // double quotes, no comma
      "{'shape':(2,),'fortran_order':False,'descr':'<f8'}\n",                           // any key order, no spaces
      "  {\n\t'descr' : '<f8' ,\r\n 'fortran_order':False,'shape':( 2 , ),\n}   \n",  // whitespace everywhere
      "{'descr': '<f8', 'fortran_order': False, 'shape': (+2,), }",                    // unary plus
      "{'descr': '<f8', 'fortran_order': False, 'shape': ((2),), }",                   // parenthesised element
      "{'descr': '<f8', 'fortran_order': False, 'shape': (((2,))), }",                 // parenthesised tuple
      "{'descr': '<f8', 'fortran_order': False, 'shape': (2L,), }",                    // Python 2 long (1.0)
      "{'descr': '=f8', 'fortran_order': False, 'shape': (2,), }",                     // native order '='
      "{'descr': '|f8', 'fortran_order': False, 'shape': (2,), }",                     // '|' (NumPy: native)
      "{'descr': 'f8', 'fortran_order': False, 'shape': (2,), }",                      // no order character
  };
  for (const std::string& header : headers) {
    INFO(header);
    const npy_array a = io::parse_npy(make_npy(header, data), "variant.npy");
    REQUIRE(a.shape() == std::vector<index_t>{2});
    CHECK(a.vector<double>()(0) == 1.5);
    CHECK(a.vector<double>()(1) == -2.0);
  }
  // Version 2.0 and 3.0 (4-byte header length; 3.0's header is UTF-8).
  for (int major : {2, 3}) {
    const npy_array a = io::parse_npy(make_npy(major, good_header, data), "v.npy");
    CHECK(a.vector<double>()(1) == -2.0);
  }
}

TEST_CASE("npy: big-endian files are byte-swapped on read") {
  const npy_array f4 = io::parse_npy(make_npy(header_with("'>f4'", "False", "(3,)"), be_bytes<float>({1.0f, -0.5f, 3e7f})), "be.npy");
  CHECK(f4.vector<float>()(0) == 1.0f);
  CHECK(f4.vector<float>()(1) == -0.5f);
  CHECK(f4.vector<float>()(2) == 3e7f);
  const npy_array i8 = io::parse_npy(make_npy(header_with("'>i8'", "False", "(2,)"),
                                              be_bytes<std::int64_t>({-2, 0x0102030405060708})),
                                     "be.npy");
  CHECK(i8.vector<std::int64_t>()(0) == -2);
  CHECK(i8.vector<std::int64_t>()(1) == 0x0102030405060708);
  const npy_array f8 = io::parse_npy(make_npy(header_with("'>f8'", "False", "()"), be_bytes<double>({6.25})), "be.npy");
  CHECK(*static_cast<const double*>(f8.data()) == 6.25);
  const npy_array i4 = io::parse_npy(make_npy(header_with("'>i4'", "False", "(1, 2)"), be_bytes<std::int32_t>({7, -9})), "be.npy");
  CHECK(i4.matrix<std::int32_t>()(0, 1) == -9);
}

TEST_CASE("npy: Fortran-order files are converted to C order, any ndim") {
  // The 2 x 3 matrix [[1, 2, 3], [4, 5, 6]] stored column by column.
  const npy_array m = io::parse_npy(
      make_npy(header_with("'<i4'", "True", "(2, 3)"), le_bytes<std::int32_t>({1, 4, 2, 5, 3, 6})), "f.npy");
  const auto view = m.matrix<std::int32_t>();
  CHECK(view(0, 0) == 1);
  CHECK(view(0, 1) == 2);
  CHECK(view(0, 2) == 3);
  CHECK(view(1, 0) == 4);
  CHECK(view(1, 2) == 6);
  // A 2 x 3 x 2 array with a(i, j, k) = 100 i + 10 j + k: Fortran order varies i fastest, then j, then k.
  std::vector<double> fortran;
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) fortran.push_back(100 * i + 10 * j + k);
  std::string data(reinterpret_cast<const char*>(fortran.data()), fortran.size() * sizeof(double));
  const npy_array t = io::parse_npy(make_npy(header_with("'<f8'", "True", "(2, 3, 2)"), data), "f3.npy");
  const double* c = static_cast<const double*>(t.data());
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) CHECK(c[(i * 3 + j) * 2 + k] == 100 * i + 10 * j + k);
  // Fortran order and big-endian together.
  const npy_array both = io::parse_npy(
      make_npy(header_with("'>i8'", "True", "(2, 2)"), be_bytes<std::int64_t>({1, 3, 2, 4})), "fb.npy");
  CHECK(both.matrix<std::int64_t>()(0, 1) == 2);
  CHECK(both.matrix<std::int64_t>()(1, 0) == 3);
  // 1-D and 0-d Fortran arrays are the same bytes as C order.
  const npy_array one = io::parse_npy(make_npy(header_with("'<f4'", "True", "(2,)"), le_bytes<float>({5, 6})), "f1.npy");
  CHECK(one.vector<float>()(1) == 6.0f);
}

TEST_CASE("npy: 0-d and empty arrays") {
  const npy_array scalar = io::parse_npy(make_npy(header_with("'<f8'", "False", "()"), le_bytes<double>({2.5})), "s.npy");
  CHECK(scalar.ndim() == 0);
  CHECK(scalar.size() == 1);
  CHECK(scalar.to_flat_vector<double>()(0) == 2.5);
  CHECK_THROWS_AS(scalar.vector<double>(), moecomp::invalid_argument);

  const npy_array empty = io::parse_npy(make_npy(header_with("'<f4'", "False", "(0, 3)"), ""), "e.npy");
  CHECK(empty.size() == 0);
  CHECK(empty.shape() == std::vector<index_t>{0, 3});
  CHECK(empty.matrix<float>().rows() == 0);
  CHECK(empty.to_matrix<double>().cols() == 3);
  // An empty array may have a huge other extent: the byte count is 0.
  const npy_array wide = io::parse_npy(make_npy(header_with("'<f8'", "False", "(0, 1000000000000)"), ""), "w.npy");
  CHECK(wide.size() == 0);
}

// ------------------------------------------------------------------------------------------ round trips

TEST_CASE_TEMPLATE("npy: round trips of 1-D, 2-D, 3-D and 0-d arrays", T, float, double, std::int32_t, std::int64_t) {
  temp_dir dir("roundtrip");
  const npy_dtype dtype = io::npy_dtype_of<T>::value;

  // 2-D, contiguous and strided (row_stride 5 > cols 3), const and mutable views.
  std::vector<T> storage = fixture_vector<T>(4 * 5);
  const auto strided = moecomp::make_matrix_view(storage.data(), 4, 3, 5);
  io::write_npy(dir.file("m.npy"), strided);
  const npy_array m = io::read_npy(dir.file("m.npy"));
  CHECK(m.source() == dir.file("m.npy"));
  CHECK(m.dtype() == dtype);
  REQUIRE(m.shape() == std::vector<index_t>{4, 3});
  const auto mv = m.matrix<T>();
  for (index_t i = 0; i < 4; ++i)
    for (index_t j = 0; j < 3; ++j) CHECK(mv(i, j) == storage[static_cast<std::size_t>(i * 5 + j)]);
  const moecomp::matrix_view<const T> const_view = moecomp::make_matrix_view(storage.data(), 4, 5);
  const npy_array c = io::parse_npy(io::serialize_npy(const_view), "c.npy");
  check_fixture_values<T>(c);

  // 1-D, contiguous and with stride 3.
  const auto every_third = moecomp::make_vector_view(storage.data(), 6, 3);
  io::write_npy(dir.file("v.npy"), every_third);
  const npy_array v = io::read_npy(dir.file("v.npy"));
  REQUIRE(v.shape() == std::vector<index_t>{6});
  for (index_t k = 0; k < 6; ++k) CHECK(v.vector<T>()(k) == storage[static_cast<std::size_t>(3 * k)]);
  check_fixture_values<T>(io::parse_npy(io::serialize_npy(moecomp::make_vector_view(storage.data(), 20).as_const()), "v"));

  // 3-D and 0-d through the generic writer.
  const std::vector<T> cube = fixture_vector<T>(2 * 3 * 4);
  io::write_npy(dir.file("t.npy"), dtype, {2, 3, 4}, cube.data());
  const npy_array t = io::read_npy(dir.file("t.npy"));
  CHECK(t.shape() == std::vector<index_t>{2, 3, 4});
  check_fixture_values<T>(t);
  io::write_npy(dir.file("s.npy"), dtype, {}, cube.data() + 5);
  const npy_array s = io::read_npy(dir.file("s.npy"));
  CHECK(s.ndim() == 0);
  CHECK(s.to_flat_vector<T>()(0) == fixture_value<T>(5));

  // An npy_array written back is the same file.
  io::write_npy(dir.file("t2.npy"), t);
  CHECK(read_file(dir.file("t2.npy")) == read_file(dir.file("t.npy")));

  // Empty matrix and vector.
  const npy_array e = io::parse_npy(io::serialize_npy(moecomp::matrix_view<const T>(nullptr, 0, 7)), "e");
  CHECK(e.shape() == std::vector<index_t>{0, 7});
  CHECK(io::parse_npy(io::serialize_npy(moecomp::vector_view<T>()), "e").shape() == std::vector<index_t>{0});
  // Nothing but the written files is left in the directory (no temporaries).
  CHECK(dir.entries().size() == 5);
}

TEST_CASE("npy: the writer pads the header to 64 bytes and uses format 1.0") {
  for (const auto& shape : std::vector<std::vector<index_t>>{{}, {1}, {12345678901}, {3, 4, 5, 6, 7, 8, 9, 10}}) {
    const std::string header = io::detail::npy_header_bytes(npy_dtype::float32, shape);
    CHECK(header.size() % 64 == 0);
    CHECK(header[6] == 1);
    CHECK(header.back() == '\n');
  }
}

// ------------------------------------------------------------------------------------ npy_array access

TEST_CASE("npy_array: typed views, conversions and their errors") {
  const std::vector<double> values = {1.0, 2.5, -3.0, 4.0, 1e300, -0.0};
  npy_array a = io::parse_npy(io::serialize_npy(moecomp::make_matrix_view(values.data(), 2, 3)), "X.npy");
  CHECK(a.holds<double>());
  CHECK_FALSE(a.holds<float>());
  CHECK(a.matrix<double>()(1, 1) == 1e300);

  const std::string wrong = [&] {
    try {
      (void)a.matrix<float>();
    } catch (const moecomp::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  CHECK_MESSAGE(contains(wrong, "npy_array::matrix<float32>: 'X.npy' holds a 2-D float64 array of shape (2, 3)"), wrong);
  CHECK_THROWS_AS(a.vector<double>(), moecomp::invalid_argument);
  CHECK_THROWS_AS(a.to_vector<double>(), moecomp::invalid_argument);

  // Mutable access writes through.
  a.matrix<double>()(0, 0) = 9.0;
  CHECK(static_cast<const double*>(a.data())[0] == 9.0);

  // float64 -> float32 rounds to nearest; 1e300 overflows to +inf as IEEE does.
  const auto f = a.to_matrix<float>();
  CHECK(f(0, 1) == 2.5f);
  CHECK(std::isinf(f(1, 1)));
  CHECK(f(1, 1) > 0);
  CHECK(std::signbit(f(1, 2)));
  // float64 -> int: 2.5 is not an integer.
  const std::string not_int = [&] {
    try {
      (void)a.to_matrix<std::int64_t>();
    } catch (const moecomp::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  CHECK_MESSAGE(contains(not_int, "npy_array::to_matrix<int64>: 'X.npy' element 1 (2.5) is not an integer"), not_int);

  // Integral floats convert exactly; ints widen and narrow with a range check.
  const std::vector<double> integral = {-2.0, 0.0, 2147483647.0};
  const npy_array ints = io::parse_npy(io::serialize_npy(moecomp::make_vector_view(integral.data(), 3)), "i.npy");
  CHECK(ints.to_vector<std::int32_t>()(2) == 2147483647);
  CHECK(ints.to_vector<std::int64_t>()(0) == -2);
  const std::vector<double> too_big = {2147483648.0};
  CHECK_THROWS_AS(io::parse_npy(io::serialize_npy(moecomp::make_vector_view(too_big.data(), 1)), "b").to_vector<std::int32_t>(),
                  moecomp::invalid_argument);
  const std::vector<double> nan = {std::nan("")};
  CHECK_THROWS_AS(io::parse_npy(io::serialize_npy(moecomp::make_vector_view(nan.data(), 1)), "n").to_vector<std::int64_t>(),
                  moecomp::invalid_argument);
  const std::vector<std::int64_t> wide = {5, -(std::int64_t(1) << 40)};
  const npy_array w = io::parse_npy(io::serialize_npy(moecomp::make_vector_view(wide.data(), 2)), "w.npy");
  CHECK(w.to_vector<double>()(1) == -1099511627776.0);
  CHECK_THROWS_WITH_AS(w.to_vector<std::int32_t>(),
                       "npy_array::to_vector<int32>: 'w.npy' element 1 (-1099511627776) is out of range for int32",
                       moecomp::invalid_argument);
  const std::vector<std::int32_t> narrow = {-7, 8};
  const npy_array n = io::parse_npy(io::serialize_npy(moecomp::make_vector_view(narrow.data(), 2)), "n.npy");
  CHECK(n.to_vector<std::int64_t>()(0) == -7);
  CHECK(n.to_vector<float>()(1) == 8.0f);

  // to_flat_vector flattens any ndim in C order.
  const std::vector<float> cube = fixture_vector<float>(24);
  const npy_array t = io::parse_npy(io::serialize_npy(npy_dtype::float32, {2, 3, 4}, cube.data()), "t.npy");
  CHECK_THROWS_AS(t.to_matrix<float>(), moecomp::invalid_argument);
  const auto flat = t.to_flat_vector<double>();
  REQUIRE(flat.size() == 24);
  for (index_t k = 0; k < 24; ++k) CHECK(flat(k) == float_value(k));
}

TEST_CASE("npy_array: construction, deep copies and moves") {
  npy_array a(npy_dtype::int64, {2, 2}, "built");
  CHECK(a.size() == 4);
  CHECK(a.matrix<std::int64_t>()(1, 1) == 0);
  a.matrix<std::int64_t>()(1, 1) = 42;
  npy_array copy = a;
  a.matrix<std::int64_t>()(1, 1) = 1;
  CHECK(copy.matrix<std::int64_t>()(1, 1) == 42);
  npy_array moved = std::move(copy);
  CHECK(moved.matrix<std::int64_t>()(1, 1) == 42);
  CHECK(copy.size() == 0);  // NOLINT(bugprone-use-after-move): the documented empty state
  CHECK(copy.ndim() == 0);
  CHECK(npy_array().size() == 0);
  CHECK_THROWS_AS(npy_array(npy_dtype::float32, {2, -1}), moecomp::invalid_argument);
  CHECK_THROWS_AS(npy_array(npy_dtype::float64, {index_t(1) << 40, index_t(1) << 40}), moecomp::invalid_argument);
  CHECK_THROWS_AS(io::serialize_npy(npy_dtype::float32, {3}, nullptr), moecomp::invalid_argument);
  CHECK_THROWS_AS(io::serialize_npy(npy_dtype::float32, std::vector<index_t>(65, 1), &a), moecomp::invalid_argument);
}

// ------------------------------------------------------------------------------------- malformed input

TEST_CASE("npy: malformed preambles") {
  CHECK_NPY_ERROR("", "the file is empty");
  CHECK_NPY_ERROR("\x93NUMPX\x01\x00", "bad magic");
  CHECK_NPY_ERROR("hello, world", "bad magic");
  CHECK_NPY_ERROR(std::string("PK\x03\x04\x14\x00", 6), "zip archive");
  CHECK_NPY_ERROR("\x93NUM", "truncated");
  CHECK_NPY_ERROR(std::string("\x93NUMPY\x01\x00\x05", 9), "too short to hold the version 1.0 preamble");
  CHECK_NPY_ERROR(std::string("\x93NUMPY\x02\x00\x05\x00", 10), "too short to hold the version 2.0 preamble");
  CHECK_NPY_ERROR(make_npy(4, good_header, le_bytes<double>({1, 2})), "unsupported format version 4.0");
  CHECK_NPY_ERROR(make_npy(0, good_header, le_bytes<double>({1, 2})), "unsupported format version 0.0");
  std::string minor = make_npy(good_header, le_bytes<double>({1, 2}));
  minor[7] = 1;
  CHECK_NPY_ERROR(minor, "unsupported format version 1.1");
  // Header length beyond the file, and absurdly large (checked before anything is allocated).
  CHECK_NPY_ERROR(make_npy(1, good_header, "", good_header.size() + 1), "runs past the end of the file");
  CHECK_NPY_ERROR(make_npy(1, good_header, le_bytes<double>({1, 2}), 0xffff), "runs past the end of the file");
  CHECK_NPY_ERROR(make_npy(2, good_header, "", 0xffffffffu), "larger than the 1048576-byte limit");
  CHECK_NPY_ERROR(make_npy(3, good_header, "", (1u << 20) + 1), "larger than the 1048576-byte limit");
}

TEST_CASE("npy: headers that are not the dict literal NumPy writes") {
  CHECK_NPY_ERROR(make_npy(""), "must be a Python dict literal");
  CHECK_NPY_ERROR(make_npy("[1, 2]"), "must be a Python dict literal");
  CHECK_NPY_ERROR(make_npy("'descr'"), "must be a Python dict literal");
  CHECK_NPY_ERROR(make_npy("{'descr' '<f8'}"), "expected ':' after the key 'descr'");
  CHECK_NPY_ERROR(make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,)"), "expected ',' or '}'");
  CHECK_NPY_ERROR(make_npy("{'descr': '<f8"), "unterminated string");
  CHECK_NPY_ERROR(make_npy("{'descr': '<f8\n', 'fortran_order': False, 'shape': (2,)}"), "unterminated string");
  CHECK_NPY_ERROR(make_npy("{'descr': '<\\x66\\x38', 'fortran_order': False, 'shape': (2,)}"), "escape sequences");
  CHECK_NPY_ERROR(make_npy(good_header + " x", le_bytes<double>({1, 2})), "unexpected text after the closing '}'");
  CHECK_NPY_ERROR(make_npy(good_header + std::string(1, '\0'), le_bytes<double>({1, 2})), "unexpected text after the closing '}'");
  CHECK_NPY_ERROR(make_npy("{'descr': {'a': 1}, 'fortran_order': False, 'shape': (2,)}"), "expected a value");
  CHECK_NPY_ERROR(make_npy("{'descr': '<f8', 'fortran_order': false, 'shape': (2,)}"), "expected a value");
  CHECK_NPY_ERROR(make_npy("{'descr': '<f8', 'fortran_order': Maybe, 'shape': (2,)}"), "expected True, False or None");
  CHECK_NPY_ERROR(make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (02,)}"), "leading zeros");
  CHECK_NPY_ERROR(make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (0x2,)}"), "only decimal integers");
  CHECK_NPY_ERROR(make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2.0,)}"), "only decimal integers");
  CHECK_NPY_ERROR(make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (- 2,)}"), "expected digits");
  CHECK_NPY_ERROR(make_npy("{1: '<f8'}"), "expected a quoted key");
  CHECK_NPY_ERROR(make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': " + std::string(17, '(') + "2" +
                           std::string(17, ')') + "}"),
                  "nested deeper than 16 levels");
  // Huge literals are parsed in memory proportional to a valid header, then refused.
  std::string many_items;
  for (int i = 0; i < 100000; ++i) many_items += "[1, 'x'], ";  // 1 MB, under the header limit
  CHECK_NPY_ERROR(make_npy(2, "{'descr': [" + many_items + "], 'fortran_order': False, 'shape': (2,)}"),
                  "structured dtype");
  CHECK_NPY_ERROR(make_npy(2, "{'descr': '<f8', 'fortran_order': False, 'shape': (" + many_items + ")}"),
                  "'shape' has 100000 dimensions");
  // Python 2 'L' suffixes only in versions 1.0 and 2.0, as in NumPy.
  CHECK_NPY_ERROR(make_npy(3, "{'descr': '<f8', 'fortran_order': False, 'shape': (2L,), }", le_bytes<double>({1, 2})),
                  "only decimal integers");
  // Non-ASCII outside strings; invalid UTF-8 in a 3.0 header.
  CHECK_NPY_ERROR(make_npy("{'descr': '<f8', 'fortran_order': False,\xa0'shape': (2,)}"), "expected a quoted key");
  CHECK_NPY_ERROR(make_npy(3, "{'descr': '<f8\xff', 'fortran_order': False, 'shape': (2,)}"), "not valid UTF-8");
  CHECK_NPY_ERROR(make_npy(3, "{'descr': '<f8\xc0\xaf', 'fortran_order': False, 'shape': (2,)}"), "not valid UTF-8");
}

TEST_CASE("npy: missing, duplicate and unknown keys") {
  const std::string data = le_bytes<double>({1, 2});
  CHECK_NPY_ERROR(make_npy("{'fortran_order': False, 'shape': (2,)}", data), "the header has no 'descr' key");
  CHECK_NPY_ERROR(make_npy("{'descr': '<f8', 'shape': (2,)}", data), "the header has no 'fortran_order' key");
  CHECK_NPY_ERROR(make_npy("{'descr': '<f8', 'fortran_order': False}", data), "the header has no 'shape' key");
  CHECK_NPY_ERROR(make_npy("{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (2,)}", data),
                  "duplicate header key 'descr'");
  CHECK_NPY_ERROR(make_npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'extra': 1}", data),
                  "unknown header key 'extra'");
  CHECK_NPY_ERROR(make_npy("{}", data), "the header has no 'descr' key");
}

TEST_CASE("npy: unsupported or malformed descr and fortran_order") {
  const std::string data = le_bytes<double>({1, 2});
  for (const char* descr : {"<f2", "|b1", "<c8", "|O", "<u4", "|u1", "<U3", "|S4", "<M8[ns]", "float32", "", "<<f8"}) {
    INFO(descr);
    // strings built by appending: GCC 12 warns falsely on "literal" + std::string&& in C++20 (bug 105329)
    std::string quoted(1, '\'');
    quoted += descr;
    quoted += '\'';
    CHECK_NPY_ERROR(make_npy(header_with(quoted, "False", "(2,)"), data), "unsupported dtype descr " + quoted);
  }
  CHECK_NPY_ERROR(make_npy(header_with("[('a', '<f4'), ('b', '<i4')]", "False", "(1,)"), data),
                  "structured dtype, which moecomp does not read");
  CHECK_NPY_ERROR(make_npy(header_with("('<f4', (2,))", "False", "(1,)"), data), "a sub-array dtype");
  CHECK_NPY_ERROR(make_npy(header_with("8", "False", "(2,)"), data), "'descr' must be a dtype string");
  CHECK_NPY_ERROR(make_npy(header_with("'<f8'", "0", "(2,)"), data), "'fortran_order' must be True or False, got an integer");
  CHECK_NPY_ERROR(make_npy(header_with("'<f8'", "'False'", "(2,)"), data), "'fortran_order' must be True or False, got a string");
  CHECK_NPY_ERROR(make_npy(header_with("'<f8'", "None", "(2,)"), data), "'fortran_order' must be True or False, got None");
}

TEST_CASE("npy: bad shapes, including overflowing element and byte counts") {
  const std::string data = le_bytes<double>({1, 2});
  const auto with_shape = [&](const std::string& shape) { return make_npy(header_with("'<f8'", "False", shape), data); };
  CHECK_NPY_ERROR(with_shape("[2]"), "'shape' must be a tuple of integers, got a list");
  CHECK_NPY_ERROR(with_shape("(2)"), "'shape' must be a tuple of integers, got an integer");
  CHECK_NPY_ERROR(with_shape("'2'"), "'shape' must be a tuple of integers, got a string");
  CHECK_NPY_ERROR(with_shape("(2, -1)"), "'shape' element 1 is negative");
  CHECK_NPY_ERROR(with_shape("('a',)"), "'shape' element 0 must be an integer, got a string");
  CHECK_NPY_ERROR(with_shape("(True,)"), "'shape' element 0 must be an integer, got a bool");
  CHECK_NPY_ERROR(with_shape("((1, 2),)"), "'shape' element 0 must be an integer, got a tuple");
  CHECK_NPY_ERROR(with_shape("(99999999999999999999,)"), "does not fit in 64 bits");
  CHECK_NPY_ERROR(with_shape("(9223372036854775808,)"), "does not fit in a signed 64-bit index");
  CHECK_NPY_ERROR(with_shape("(4294967296, 4294967296)"), "the element count of shape (4294967296, 4294967296) overflows");
  CHECK_NPY_ERROR(with_shape("(0, 4294967296, 4294967296)"), "overflows");
  CHECK_NPY_ERROR(with_shape("(2305843009213693952,)"), "the byte count of shape (2305843009213693952,) with float64");
  std::string many = "(";
  for (int i = 0; i < 65; ++i) many += "1, ";
  CHECK_NPY_ERROR(with_shape(many + ")"), "'shape' has 65 dimensions, more than the 64 supported");
}

TEST_CASE("npy: truncated data and trailing bytes") {
  CHECK_NPY_ERROR(make_npy(header_with("'<f8'", "False", "(3,)"), le_bytes<double>({1, 2})),
                  "truncated data: shape (3,) of float64 needs 24 bytes after the");
  CHECK_NPY_ERROR(make_npy(header_with("'<i4'", "False", "(2, 2)"), le_bytes<std::int32_t>({1, 2, 3}) + "x"),
                  "only 13 remain");
  CHECK_NPY_ERROR(make_npy(header_with("'<f4'", "False", "()"), ""), "needs 4 bytes");
  // A huge shape with no data is refused before allocating: this would be 8 TiB.
  CHECK_NPY_ERROR(make_npy(header_with("'<f8'", "False", "(1099511627776,)"), le_bytes<double>({1, 2})), "truncated data");
  CHECK_NPY_ERROR(make_npy(header_with("'<f8'", "False", "(2,)"), le_bytes<double>({1, 2}) + "garbage"),
                  "7 unexpected trailing bytes after the 16 bytes of data");
  CHECK_NPY_ERROR(make_npy(header_with("'<f8'", "False", "(0,)"), "\n"), "1 unexpected trailing bytes");
}

// -------------------------------------------------------------------------------------------- read_npy

TEST_CASE("read_npy: errors name the path") {
  temp_dir dir("read");
  const std::string missing = dir.file("missing.npy");
  const std::string missing_message = "read_npy: cannot open '" + missing + "': No such file or directory";
  CHECK_THROWS_WITH_AS(io::read_npy(missing), missing_message.c_str(), moecomp::io_error);
  CHECK_THROWS_AS(io::read_npy(dir.path.string()), moecomp::io_error);
  const std::string broken = dir.file("broken.npy");
  write_file(broken, make_npy(header_with("'<f8'", "False", "(3,)"), le_bytes<double>({1, 2})));
  const std::string message = [&] {
    try {
      io::read_npy(broken);
    } catch (const moecomp::io_error& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  CHECK_MESSAGE(contains(message, "read_npy: '" + broken + "' is not a valid .npy file: truncated data"), message);
}

// ------------------------------------------------------------------------------------------ atomicity

TEST_CASE("write_npy: atomic replacement") {
  temp_dir dir("atomic");
  const std::vector<double> first = {1, 2, 3};
  const std::vector<double> second = {4, 5};

  SUBCASE("a missing directory throws and creates nothing") {
    const std::string target = dir.file("no/such/dir/out.npy");
    const std::string message = [&] {
      try {
        io::write_npy(target, moecomp::make_vector_view(first.data(), 3));
      } catch (const moecomp::io_error& e) {
        return std::string(e.what());
      }
      return std::string();
    }();
    CHECK_MESSAGE(contains(message, "write_npy: cannot write '" + target + "'"), message);
    CHECK_FALSE(fs::exists(dir.path / "no"));
    CHECK(dir.entries().empty());
  }

  SUBCASE("writing over an existing file replaces it") {
    const std::string target = dir.file("out.npy");
    io::write_npy(target, moecomp::make_vector_view(first.data(), 3));
    io::write_npy(target, moecomp::make_vector_view(second.data(), 2));
    const npy_array a = io::read_npy(target);
    CHECK(a.shape() == std::vector<index_t>{2});
    CHECK(a.vector<double>()(1) == 5.0);
    CHECK(dir.entries() == std::vector<std::string>{"out.npy"});
  }

  SUBCASE("a failed rename leaves the target and no temporary") {
    fs::create_directory(dir.path / "occupied");
    write_file((dir.path / "occupied" / "keep").string(), "x");
    CHECK_THROWS_AS(io::write_npy(dir.file("occupied"), moecomp::make_vector_view(first.data(), 3)), moecomp::io_error);
    CHECK(fs::is_directory(dir.path / "occupied"));
    CHECK(read_file((dir.path / "occupied" / "keep").string()) == "x");
    CHECK(dir.entries() == std::vector<std::string>{"occupied"});
  }

  SUBCASE("an abandoned write leaves the previous file untouched") {
    const std::string target = dir.file("out.npy");
    io::write_npy(target, moecomp::make_vector_view(first.data(), 3));
    const std::string before = read_file(target);
    {
      io::detail::atomic_file_writer writer(target, "test");
      writer.write("partial", 7);
      CHECK(fs::exists(writer.temporary_path()));
    }  // destroyed without commit(), as when an exception unwinds through write_npy
    CHECK(read_file(target) == before);
    CHECK(dir.entries() == std::vector<std::string>{"out.npy"});
  }

  SUBCASE("invalid arguments are refused before any file is touched") {
    const std::string target = dir.file("out.npy");
    io::write_npy(target, moecomp::make_vector_view(first.data(), 3));
    const std::string before = read_file(target);
    CHECK_THROWS_AS(io::write_npy(target, npy_dtype::float64, {3, -1}, first.data()), moecomp::invalid_argument);
    CHECK_THROWS_AS(io::write_npy(target, npy_dtype::float64, {3}, nullptr), moecomp::invalid_argument);
    CHECK(read_file(target) == before);
    CHECK(dir.entries() == std::vector<std::string>{"out.npy"});
  }

  SUBCASE("a directory as the target is refused before anything is created, naming what it is") {
    fs::create_directory(dir.path / "folder");
    std::string message;
    try {
      io::write_npy(dir.file("folder"), moecomp::make_vector_view(first.data(), 3));
    } catch (const moecomp::io_error& e) {
      message = e.what();
    }
    CHECK_MESSAGE(contains(message, "it is a directory, not a regular file"), message);
    CHECK(dir.entries() == std::vector<std::string>{"folder"});
  }

  SUBCASE("staged files: nothing is in place before commit(), and an uncommitted one is removed") {
    const std::string plan = dir.file("plan.npy"), duals = dir.file("duals.npy");
    {
      io::staged_file staged_plan = io::stage_npy(plan, moecomp::make_vector_view(first.data(), 3));
      io::staged_file staged_duals = io::stage_npy(duals, moecomp::make_vector_view(second.data(), 2));
      CHECK_FALSE(fs::exists(plan));
      CHECK(dir.entries().size() == 2);  // the two temporaries
      staged_plan.commit();
      CHECK(staged_plan.committed());
      CHECK(io::read_npy(plan).size() == 3);
    }  // staged_duals destroyed uncommitted
    CHECK_FALSE(fs::exists(duals));
    CHECK(dir.entries() == std::vector<std::string>{"plan.npy"});
  }

  SUBCASE("temporaries are named <target>.moecomp-tmp-<16 hex digits> and reported to the hooks") {
    struct seen_names {
      std::vector<std::string> created, released;
    } seen;
    io::write_options options;
    options.hooks.user = &seen;
    options.hooks.creating = [](const char* path, void* user) {
      static_cast<seen_names*>(user)->created.push_back(path);
    };
    options.hooks.released = [](const char* path, void* user) {
      static_cast<seen_names*>(user)->released.push_back(path);
    };
    const std::string target = dir.file("out.npy");
    io::write_npy(target, moecomp::make_vector_view(first.data(), 3), options);
    REQUIRE(seen.created.size() == 1);
    CHECK(seen.released == seen.created);
    const std::string name = seen.created[0];
    REQUIRE(name.size() == target.size() + std::string(io::temporary_file_marker).size() + 16);
    CHECK(name.compare(0, target.size(), target) == 0);
    CHECK(name.find_first_not_of("0123456789abcdef", name.size() - 16) == std::string::npos);
  }

  SUBCASE("options.dtype stores float32 as float64 (streamed), and refuses integer conversions") {
    std::vector<float> values(20000);
    for (std::size_t k = 0; k < values.size(); ++k) values[k] = static_cast<float>(k) * 0.25f + 0.1f;
    io::write_options options;
    options.dtype = npy_dtype::float64;
    const std::string target = dir.file("wide.npy");
    io::write_npy(target, moecomp::make_vector_view(values.data(), static_cast<index_t>(values.size())), options);
    const npy_array a = io::read_npy(target);
    REQUIRE(a.dtype() == npy_dtype::float64);
    bool exact = true;
    for (std::size_t k = 0; k < values.size(); ++k)
      exact = exact && a.vector<double>()(static_cast<index_t>(k)) == static_cast<double>(values[k]);
    CHECK(exact);
    const std::vector<std::int32_t> labels = {1, 2};
    CHECK_THROWS_AS(io::write_npy(dir.file("labels.npy"), moecomp::make_vector_view(labels.data(), 2), options),
                    moecomp::invalid_argument);
  }

#if defined(MOECOMP_TEST_POSIX)
  SUBCASE("a FIFO is never replaced, and a link to a regular file is followed") {
    const std::string fifo = dir.file("fifo");
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    std::string message;
    try {
      io::write_npy(fifo, moecomp::make_vector_view(first.data(), 3));
    } catch (const moecomp::io_error& e) {
      message = e.what();
    }
    CHECK_MESSAGE(contains(message, "it is a FIFO, not a regular file"), message);
    CHECK(fs::is_fifo(fifo));
    const std::string target = dir.file("target.npy"), link = dir.file("link.npy");
    io::write_npy(target, moecomp::make_vector_view(first.data(), 3));
    fs::create_symlink(target, link);
    io::write_npy(link, moecomp::make_vector_view(second.data(), 2));
    CHECK(fs::is_symlink(link));
    CHECK(io::read_npy(target).size() == 2);
  }

  SUBCASE("a write that fails midway (file size limit) leaves the previous file untouched") {
    const std::string target = dir.file("out.npy");
    io::write_npy(target, moecomp::make_vector_view(first.data(), 3));
    const std::string before = read_file(target);
    // RLIMIT_FSIZE makes writes past 4 KiB fail with EFBIG, like a full disk (SIGXFSZ ignored so the
    // process survives).
    rlimit saved{};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = saved;
    small.rlim_cur = 4096;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
    const std::vector<double> big(1 << 16, 1.0);
    std::string message;
    try {
      io::write_npy(target, moecomp::make_vector_view(big.data(), static_cast<index_t>(big.size())));
    } catch (const moecomp::io_error& e) {
      message = e.what();
    }
    setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, previous_handler);
    CHECK_MESSAGE(contains(message, "write_npy: cannot write '" + target + "'"), message);
    CHECK(read_file(target) == before);
    CHECK(dir.entries() == std::vector<std::string>{"out.npy"});
  }
#endif
}

// -------------------------------------------------------------------------------- NumPy as the peer

namespace {

bool skip_without_numpy(int code, const std::string& log) { return skip_without_peer(code, log, "numpy"); }

const char* numpy_prelude = R"PY(
import sys
try:
    import numpy as np
    import numpy.lib.format as fmt
except ImportError:
    sys.exit(77)
import os
out = sys.argv[1]
def fixture(dtype, shape):
    n = int(np.prod(shape, dtype=np.int64))
    k = np.arange(n, dtype=np.int64)
    values = k * 0.25 - 1.5 if np.dtype(dtype).kind == 'f' else k * 3 - 7
    return values.astype(dtype).reshape(shape)
)PY";

}  // namespace

TEST_CASE("npy: reads files written by NumPy (versions 1.0-3.0, Fortran order, big-endian)") {
  temp_dir dir("numpy_read");
  const std::string script = std::string(numpy_prelude) + R"PY(
cases = [
    # name, dtype, shape, fortran, version
    ('c_f4_2d', '<f4', (3, 4), False, (1, 0)),
    ('c_f8_1d', '<f8', (7,), False, (1, 0)),
    ('c_i4_3d', '<i4', (2, 3, 4), False, (1, 0)),
    ('c_i8_2d', '<i8', (5, 2), False, (1, 0)),
    ('f_f8_2d', '<f8', (3, 4), True, (1, 0)),
    ('f_f4_3d', '<f4', (2, 3, 4), True, (1, 0)),
    ('f_i4_4d', '<i4', (2, 1, 3, 2), True, (1, 0)),
    ('f_i8_2d', '<i8', (4, 3), True, (1, 0)),
    ('be_f8_1d', '>f8', (5,), False, (1, 0)),
    ('be_f4_2d', '>f4', (2, 3), False, (1, 0)),
    ('be_i4_f', '>i4', (3, 2), True, (1, 0)),
    ('be_i8_3d', '>i8', (2, 2, 2), False, (1, 0)),
    ('v2_f4_2d', '<f4', (2, 3), False, (2, 0)),
    ('v2_i8_f', '<i8', (3, 3), True, (2, 0)),
    ('v3_f8_2d', '<f8', (2, 5), False, (3, 0)),
    ('v3_be_i4', '>i4', (6,), False, (3, 0)),
    ('zero_d_f8', '<f8', (), False, (1, 0)),
    ('empty_f4', '<f4', (0, 3), False, (1, 0)),
]
for name, dtype, shape, fortran, version in cases:
    a = fixture(dtype, shape)
    if fortran:
        a = np.asfortranarray(a)
        assert a.ndim < 2 or not a.flags.c_contiguous
    with open(os.path.join(out, name + '.npy'), 'wb') as f:
        fmt.write_array(f, a, version=version)
with open(os.path.join(out, 'manifest.txt'), 'w') as f:
    for name, dtype, shape, fortran, version in cases:
        f.write('%s %s %s\n' % (name, np.dtype(dtype).name, ','.join(str(s) for s in shape)))
)PY";
  std::string log;
  const int code = run_python(dir, script, log);
  if (skip_without_numpy(code, log)) return;
  REQUIRE_MESSAGE(code == 0, log);

  std::ifstream manifest(dir.file("manifest.txt"));
  std::string name, dtype_name, shape_text;
  int cases = 0;
  while (manifest >> name >> dtype_name) {
    std::getline(manifest, shape_text);
    std::vector<index_t> shape;
    std::istringstream dims(shape_text);
    for (std::string dim; std::getline(dims, dim, ',');)
      if (dim.find_first_not_of(' ') != std::string::npos) shape.push_back(std::stoll(dim));
    INFO(name);
    const npy_array a = io::read_npy(dir.file(name + ".npy"));
    CHECK(a.shape() == shape);
    CHECK(io::to_string(a.dtype()) == dtype_name);
    switch (a.dtype()) {
      case npy_dtype::float32: check_fixture_values<float>(a); break;
      case npy_dtype::float64: check_fixture_values<double>(a); break;
      case npy_dtype::int32: check_fixture_values<std::int32_t>(a); break;
      case npy_dtype::int64: check_fixture_values<std::int64_t>(a); break;
    }
    ++cases;
  }
  CHECK(cases == 18);
}

TEST_CASE("npy: NumPy reads what moecomp writes, byte for byte as numpy.save") {
  temp_dir dir("numpy_write");
  const std::vector<float> f4 = fixture_vector<float>(12);
  const std::vector<double> f8 = fixture_vector<double>(30);
  const std::vector<std::int32_t> i4 = fixture_vector<std::int32_t>(21);
  const std::vector<std::int64_t> i8 = fixture_vector<std::int64_t>(24);
  io::write_npy(dir.file("m_f4.npy"), moecomp::make_matrix_view(f4.data(), 3, 4));
  io::write_npy(dir.file("v_f8.npy"), moecomp::make_vector_view(f8.data(), 30).as_const());
  io::write_npy(dir.file("v_i4.npy"), moecomp::make_vector_view(i4.data(), 21));
  io::write_npy(dir.file("t_i8.npy"), npy_dtype::int64, {2, 3, 4}, i8.data());
  io::write_npy(dir.file("s_f8.npy"), npy_dtype::float64, {}, f8.data());
  const std::string script = std::string(numpy_prelude) + R"PY(
import io
expected = {
    'm_f4': fixture('<f4', (3, 4)),
    'v_f8': fixture('<f8', (30,)),
    'v_i4': fixture('<i4', (21,)),
    't_i8': fixture('<i8', (2, 3, 4)),
    's_f8': fixture('<f8', ()),
}
bad = 0
for name, want in expected.items():
    path = os.path.join(out, name + '.npy')
    got = np.load(path)
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        print(name, 'differs:', got.dtype, got.shape, got)
        bad += 1
    buf = io.BytesIO()
    np.save(buf, want)
    if buf.getvalue() != open(path, 'rb').read():
        print(name, 'bytes differ from numpy.save')
        bad += 1
sys.exit(1 if bad else 0)
)PY";
  std::string log;
  const int code = run_python(dir, script, log);
  if (skip_without_numpy(code, log)) return;
  CHECK_MESSAGE(code == 0, log);
}

TEST_CASE("npy: a stack of matrices is written as a 3-D array in C order, padding skipped") {
  // Two 2 x 3 matrices, rows padded to 4, matrices 10 apart: the file holds the 12 values in (e, i, j) order.
  std::vector<float> storage(20);
  for (std::size_t k = 0; k < storage.size(); ++k) storage[k] = static_cast<float>(k);
  const auto stack = moecomp::make_matrix_stack_view(storage.data(), 2, 2, 3, 4, 10);
  const temp_dir dir("stack");
  const std::string path = dir.file("stack.npy");
  moecomp::io::write_npy(path, stack.as_const());
  const moecomp::io::npy_array back = moecomp::io::read_npy(path);
  CHECK(back.shape() == std::vector<index_t>{2, 2, 3});
  REQUIRE(back.dtype() == moecomp::io::npy_dtype::float32);
  const auto* values = static_cast<const float*>(back.data());
  const float want[] = {0, 1, 2, 4, 5, 6, 10, 11, 12, 14, 15, 16};
  for (index_t k = 0; k < 12; ++k) CHECK(values[k] == want[k]);
}

TEST_CASE("npy: read_npy reads regular files only: a FIFO, a directory and /dev/zero are refused at once") {
  const temp_dir dir("npy_special");
  const std::string fifo = dir.file("X.npy");
  if (moecomp_test::make_fifo(fifo)) {
    const std::string message = moecomp_test::io_error_within([fifo] { io::read_npy(fifo); }, fifo);
    CHECK_MESSAGE(message.find("read_npy: cannot read '" + fifo + "': it is a FIFO, not a regular file") == 0, message);
  }
  const std::string directory = dir.path.string();
  const std::string message = moecomp_test::io_error_within([directory] { io::read_npy(directory); });
  CHECK_MESSAGE(message.find("read_npy: cannot read '" + directory + "': it is a directory, not a regular file") == 0,
                message);
  if (moecomp_test::have_dev_zero()) {
    const std::string zero = moecomp_test::io_error_within([] { io::read_npy("/dev/zero"); });
    CHECK_MESSAGE(zero.find("read_npy: cannot read '/dev/zero': it is a character device, not a regular file") == 0,
                  zero);
  }
  const std::string missing = moecomp_test::io_error_within([&dir] { io::read_npy(dir.file("missing.npy")); });
  CHECK_MESSAGE(missing.find("read_npy: cannot open '" + dir.file("missing.npy") + "': ") == 0, missing);
}
