// A deterministic mutation fuzzer for parse_npy, run as part of the test suite: valid seeds are mutated
// (bit flips, truncation, header-length corruption, shape digit edits, token insertions, splices) with a
// fixed-seed moecomp::random_generator. Every input must either parse into a self-consistent array or be
// refused with moecomp::io_error; nothing else may escape, and (under ASan/UBSan) nothing may crash.
// The libFuzzer version of the same harness is fuzz/npy_fuzzer.cpp.
#include <moecomp/core/random.hpp>
#include <moecomp/io/npy.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

using moecomp::index_t;
namespace io = moecomp::io;

namespace {

std::string make_npy(int major, const std::string& header, const std::string& data) {
  std::string bytes = "\x93NUMPY";
  bytes += static_cast<char>(major);
  bytes += '\0';
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i) bytes += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return bytes + header + data;
}

std::string counting_bytes(std::size_t count) {
  std::string bytes(count, '\0');
  for (std::size_t i = 0; i < count; ++i) bytes[i] = static_cast<char>(i * 37 + 11);
  return bytes;
}

std::vector<std::string> seeds() {
  std::vector<std::string> result;
  const std::vector<double> f8 = {1.0, -2.5, 3.25, 4.0, 5.5, -6.0};
  const std::vector<float> f4 = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f};
  const std::vector<std::int32_t> i4 = {1, -2, 3, -4, 5, -6};
  const std::vector<std::int64_t> i8 = {10, 20, 30, 40};
  result.push_back(io::serialize_npy(moecomp::make_matrix_view(f8.data(), 2, 3)));
  result.push_back(io::serialize_npy(moecomp::make_matrix_view(f4.data(), 2, 2, 4)));
  result.push_back(io::serialize_npy(moecomp::make_vector_view(i4.data(), 6)));
  result.push_back(io::serialize_npy(io::npy_dtype::int64, {2, 1, 2}, i8.data()));
  result.push_back(io::serialize_npy(io::npy_dtype::float64, {}, f8.data()));
  result.push_back(io::serialize_npy(io::npy_dtype::float32, {0, 5}, nullptr));
  // Hand-made: Fortran order, big-endian, versions 2.0 and 3.0, Python 2 longs, compact syntax.
  result.push_back(make_npy(1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }\n", counting_bytes(48)));
  result.push_back(make_npy(1, "{'descr': '>i4', 'fortran_order': True, 'shape': (2, 2, 2), }", counting_bytes(32)));
  result.push_back(make_npy(2, "{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }", counting_bytes(12)));
  result.push_back(make_npy(3, "{\"descr\":\"<i8\",\"fortran_order\":False,\"shape\":(1,2)}", counting_bytes(16)));
  result.push_back(make_npy(1, "{'descr': '|f4', 'fortran_order': False, 'shape': (2L, 1L), }", counting_bytes(8)));
  return result;
}

// A random valid file and the C-order, host-order bytes it must decode to: random dtype, ndim 0-4,
// extents 0-4, C or Fortran order, any byte-order spelling, versions 1.0-3.0, and the header written with
// random key order, quotes, whitespace, trailing commas, Python 2 'L' suffixes and padding.
struct generated_npy {
  std::string file;
  io::npy_dtype dtype;
  std::vector<index_t> shape;
  std::string expected;  // C order, little-endian (the tests' host)
};

generated_npy generate_valid(moecomp::random_generator& rng) {
  static const char* const codes[] = {"f4", "f8", "i4", "i8"};
  generated_npy result;
  const auto type_index = static_cast<int>(rng.uniform_index(4));
  result.dtype = static_cast<io::npy_dtype>(type_index);
  const std::size_t item = io::item_size(result.dtype);
  const auto ndim = static_cast<std::size_t>(rng.uniform_index(5));
  index_t count = 1;
  for (std::size_t d = 0; d < ndim; ++d) {
    result.shape.push_back(static_cast<index_t>(rng.uniform_index(5)));
    count *= result.shape.back();
  }
  const bool fortran = rng.uniform_index(2) == 0;
  static const char* const orders[] = {"<", ">", "=", "|", ""};
  const std::string order = orders[rng.uniform_index(5)];
  const bool big_endian = order == ">";
  const int major = 1 + static_cast<int>(rng.uniform_index(3));

  result.expected.resize(static_cast<std::size_t>(count) * item);
  for (char& c : result.expected) c = static_cast<char>(rng.uniform_index(256));
  // The file's data: Fortran order permutes elements (first index fastest), big-endian reverses bytes.
  std::string data(result.expected.size(), '\0');
  for (index_t k = 0; k < count; ++k) {
    index_t rest = k, offset = 0, stride = 1;
    std::vector<index_t> index(ndim);
    for (std::size_t d = ndim; d-- > 0;) {
      index[d] = rest % result.shape[d];
      rest /= result.shape[d];
    }
    for (std::size_t d = 0; d < ndim; ++d) {
      offset += index[d] * (fortran ? stride : 0);
      stride *= result.shape[d];
    }
    if (!fortran) offset = k;
    for (std::size_t b = 0; b < item; ++b)
      data[static_cast<std::size_t>(offset) * item + (big_endian ? item - 1 - b : b)] =
          result.expected[static_cast<std::size_t>(k) * item + b];
  }

  const auto space = [&] {
    static const char* const blanks[] = {"", "", " ", "  ", "\n", "\t", " \n "};
    return std::string(blanks[rng.uniform_index(7)]);
  };
  const auto quoted = [&](const std::string& text) {
    const char quote = rng.uniform_index(2) == 0 ? '\'' : '"';
    return quote + text + quote;
  };
  std::string shape_text = std::string("(") + space();
  for (std::size_t d = 0; d < ndim; ++d) {
    shape_text += std::to_string(result.shape[d]);
    if (major < 3 && rng.uniform_index(4) == 0) shape_text += "L";
    if (d + 1 < ndim || ndim == 1 || rng.uniform_index(2) == 0) shape_text += space() + "," + space();
  }
  shape_text += ")";
  std::vector<std::string> entries = {
      quoted("descr") + space() + ":" + space() + quoted(order + codes[type_index]),
      quoted("fortran_order") + space() + ":" + space() + (fortran ? "True" : "False"),
      quoted("shape") + space() + ":" + space() + shape_text};
  rng.shuffle(entries.begin(), entries.end());
  std::string header = space() + "{" + space();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    header += entries[i];
    if (i + 1 < entries.size() || rng.uniform_index(2) == 0) header += space() + "," + space();
  }
  header += '}';
  header += std::string(static_cast<std::size_t>(rng.uniform_index(70)), ' ');
  if (rng.uniform_index(4) != 0) header += "\n";
  result.file = make_npy(major, header, data);
  return result;
}

// Fragments that steer mutations toward the parser's interesting paths.
const char* const tokens[] = {"'",     "\"",    ",",    "(",     ")",   "[",   "]",    "{",   "}",    ":",
                              " ",     "\n",    "\\",   "-",     "+",   "L",   "0",    "00",  "True", "False",
                              "None",  "'<f2'", "'>f8'", "'|b1'", "'descr'", "'shape'", "'fortran_order'",
                              "9223372036854775807", "18446744073709551616", "4294967296", "2305843009213693952",
                              "1099511627776", "\xff", "\xc3\xa9", "\x93NUMPY"};

std::string mutate(const std::string& seed, const std::vector<std::string>& all_seeds, moecomp::random_generator& rng) {
  std::string bytes = seed;
  const int rounds = rng.uniform_index(2) == 0 ? 1 : 2 + static_cast<int>(rng.uniform_index(2));
  for (int round = 0; round < rounds; ++round) {
    // Most mutations aim at the first 128 bytes, where the preamble and header live.
    const auto position = [&](bool anywhere) -> std::size_t {
      if (bytes.empty()) return 0;
      const std::size_t limit = anywhere || bytes.size() < 128 ? bytes.size() : 128;
      return static_cast<std::size_t>(rng.uniform_index(limit));
    };
    switch (rng.uniform_index(10)) {
      case 0:  // flip one bit
        if (!bytes.empty()) bytes[position(rng.uniform_index(4) == 0)] ^= static_cast<char>(1u << rng.uniform_index(8));
        break;
      case 1:  // truncate
        bytes.resize(static_cast<std::size_t>(rng.uniform_index(bytes.size() + 1)));
        break;
      case 2: {  // corrupt the header-length field (bytes 8-9, or 8-11 for versions 2.0/3.0)
        if (bytes.size() < 12) break;
        const std::size_t field = static_cast<unsigned char>(bytes[6]) == 1 ? 2 : 4;
        std::uint64_t length = 0;
        for (std::size_t i = 0; i < field; ++i) length |= std::uint64_t(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
        switch (rng.uniform_index(4)) {
          case 0: length += rng.uniform_index(17); break;
          case 1: length -= rng.uniform_index(17); break;
          case 2: length = rng.next_u64(); break;
          default: length = std::uint64_t(1) << rng.uniform_index(32); break;
        }
        for (std::size_t i = 0; i < field; ++i) bytes[8 + i] = static_cast<char>((length >> (8 * i)) & 0xff);
        break;
      }
      case 3: {  // change, insert or delete digits inside the shape tuple
        const std::size_t at = bytes.find("shape");
        if (at == std::string::npos) break;
        const std::size_t open = bytes.find('(', at);
        const std::size_t close = open == std::string::npos ? open : bytes.find(')', open);
        if (close == std::string::npos) break;
        const std::size_t where = open + 1 + static_cast<std::size_t>(rng.uniform_index(close - open));
        const char digit = static_cast<char>('0' + rng.uniform_index(10));
        switch (rng.uniform_index(3)) {
          case 0:
            if (where < close) bytes[where] = digit;
            break;
          case 1: bytes.insert(where, static_cast<std::size_t>(1 + rng.uniform_index(12)), digit); break;
          default:
            if (where < close) bytes.erase(where, 1);
            break;
        }
        break;
      }
      case 4: {  // insert a token
        const std::size_t count = sizeof(tokens) / sizeof(tokens[0]);
        bytes.insert(position(false), tokens[rng.uniform_index(count)]);
        break;
      }
      case 5: {  // insert random bytes
        std::string noise(static_cast<std::size_t>(1 + rng.uniform_index(8)), '\0');
        for (char& c : noise) c = static_cast<char>(rng.uniform_index(256));
        bytes.insert(position(true), noise);
        break;
      }
      case 6: {  // delete a range
        if (bytes.empty()) break;
        const std::size_t at = position(true);
        bytes.erase(at, static_cast<std::size_t>(1 + rng.uniform_index(16)));
        break;
      }
      case 7:  // trailing garbage
        bytes.append(static_cast<std::size_t>(1 + rng.uniform_index(9)), static_cast<char>(rng.uniform_index(256)));
        break;
      case 8:  // another version byte
        if (bytes.size() > 7) bytes[6] = static_cast<char>(rng.uniform_index(5));
        break;
      default: {  // splice the front of this input with the back of another seed
        const std::string& other = all_seeds[static_cast<std::size_t>(rng.uniform_index(all_seeds.size()))];
        const std::size_t cut = position(true);
        const std::size_t from = static_cast<std::size_t>(rng.uniform_index(other.size() + 1));
        bytes = bytes.substr(0, cut) + other.substr(from);
        break;
      }
    }
  }
  return bytes;
}

// A parsed array must be self-consistent, readable to its last byte, and survive a round trip.
void check_consistent(const io::npy_array& a, const std::string& input) {
  index_t product = 1;
  for (index_t extent : a.shape()) {
    REQUIRE(extent >= 0);
    product *= extent;
  }
  REQUIRE(a.ndim() <= 64);
  REQUIRE(a.size() == product);
  REQUIRE(a.byte_size() == static_cast<std::size_t>(a.size()) * io::item_size(a.dtype()));
  REQUIRE(a.byte_size() <= input.size());
  REQUIRE(a.data() != nullptr);
  REQUIRE(reinterpret_cast<std::uintptr_t>(a.data()) % io::npy_array::alignment == 0);
  unsigned checksum = 0;
  const auto* bytes = static_cast<const unsigned char*>(a.data());
  for (std::size_t i = 0; i < a.byte_size(); ++i) checksum += bytes[i];  // touches every byte (ASan)
  (void)checksum;
  const io::npy_array again = io::parse_npy(io::serialize_npy(a), "round trip");
  REQUIRE(again.dtype() == a.dtype());
  REQUIRE(again.shape() == a.shape());
  REQUIRE(std::memcmp(again.data(), a.data(), a.byte_size()) == 0);
}

}  // namespace

TEST_CASE("parse_npy decodes randomly generated valid files exactly") {
  moecomp::random_generator rng(7);
  for (int iteration = 0; iteration < 2000; ++iteration) {
    const generated_npy g = generate_valid(rng);
    INFO("iteration " << iteration << ": " << io::detail::printable(g.file, 200));
    const io::npy_array a = io::parse_npy(g.file, "generated.npy");
    REQUIRE(a.dtype() == g.dtype);
    REQUIRE(a.shape() == g.shape);
    REQUIRE(a.byte_size() == g.expected.size());
    REQUIRE(std::memcmp(a.data(), g.expected.data(), g.expected.size()) == 0);
    check_consistent(a, g.file);
  }
}

TEST_CASE("parse_npy survives 20,000 mutated inputs") {
  REQUIRE(io::detail::host_is_little_endian());
  const std::vector<std::string> all_seeds = seeds();
  for (const std::string& seed : all_seeds) check_consistent(io::parse_npy(seed, "seed"), seed);

  moecomp::random_generator rng(20240611);
  constexpr int iterations = 20000;
  int accepted = 0, rejected = 0;
  for (int iteration = 0; iteration < iterations; ++iteration) {
    // Half the inputs start from a fixed seed, half from a freshly generated valid file.
    const std::string seed = rng.uniform_index(2) == 0
                                 ? all_seeds[static_cast<std::size_t>(rng.uniform_index(all_seeds.size()))]
                                 : generate_valid(rng).file;
    const std::string input = mutate(seed, all_seeds, rng);
    try {
      const io::npy_array a = io::parse_npy(input, "fuzz.npy");
      check_consistent(a, input);
      ++accepted;
    } catch (const moecomp::error& e) {
      // Malformed input is always an io_error that names the source.
      if (e.kind() != moecomp::error_kind::io_error || std::string(e.what()).find("'fuzz.npy'") == std::string::npos)
        FAIL("iteration " << iteration << ": unexpected error: " << e.what());
      ++rejected;
    } catch (const std::exception& e) {
      FAIL("iteration " << iteration << ": a non-moecomp exception escaped: " << e.what());
    }
  }
  MESSAGE("parse_npy fuzz: " << accepted << " accepted, " << rejected << " rejected");
  // Both paths must be exercised for the run to mean anything.
  CHECK(accepted > iterations / 50);
  CHECK(rejected > iterations / 2);
}
