#pragma once
// The .npy format itself, independent of where the bytes come from: the preamble, a strict parser of the
// header dict NumPy writes, the header NumPy would write for a shape, byte swapping and the Fortran -> C
// reordering. Everything here reports malformed input through MOECOMP_FAIL(io_error) with a message that
// names the function and the source; nothing allocates more than the input's own size.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace io {

/// Element types a .npy file may hold for moecomp.
enum class npy_dtype { float32, float64, int32, int64 };

/// "float32", "float64", "int32", "int64".
inline const char* to_string(npy_dtype dtype) noexcept {
  switch (dtype) {
    case npy_dtype::float32: return "float32";
    case npy_dtype::float64: return "float64";
    case npy_dtype::int32: return "int32";
    case npy_dtype::int64: return "int64";
  }
  return "unknown";
}

/// Bytes per element: 4 or 8.
inline constexpr std::size_t item_size(npy_dtype dtype) noexcept {
  return (dtype == npy_dtype::float32 || dtype == npy_dtype::int32) ? 4 : 8;
}

/// The npy_dtype of a C++ element type; only float, double, std::int32_t and std::int64_t have one.
template <class T>
struct npy_dtype_of {
  static constexpr bool supported = false;
};
template <>
struct npy_dtype_of<float> {
  static constexpr bool supported = true;
  static constexpr npy_dtype value = npy_dtype::float32;
};
template <>
struct npy_dtype_of<double> {
  static constexpr bool supported = true;
  static constexpr npy_dtype value = npy_dtype::float64;
};
template <>
struct npy_dtype_of<std::int32_t> {
  static constexpr bool supported = true;
  static constexpr npy_dtype value = npy_dtype::int32;
};
template <>
struct npy_dtype_of<std::int64_t> {
  static constexpr bool supported = true;
  static constexpr npy_dtype value = npy_dtype::int64;
};
template <class T>
inline constexpr bool is_npy_element_v = npy_dtype_of<T>::supported;

namespace detail {

inline constexpr unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
inline constexpr std::size_t npy_magic_size = 6;
/// Headers longer than this are refused before anything is read: NumPy's own default limit is 10,000
/// bytes, and a real header is under 200.
inline constexpr std::size_t npy_max_header_bytes = std::size_t(1) << 20;
/// NumPy 2 allows at most 64 dimensions (NumPy 1: 32).
inline constexpr std::size_t npy_max_ndim = 64;
/// Nesting depth of tuples/lists accepted inside the header (a valid one needs 1).
inline constexpr int npy_max_nesting = 16;

inline bool host_is_little_endian() noexcept {
  const std::uint16_t probe = 1;
  unsigned char first = 0;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

/// "(3, 4)", "(5,)", "()": the shape as Python prints a tuple (also how NumPy writes it).
inline std::string shape_repr(const std::vector<index_t>& shape) {
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  if (shape.size() == 1) text += ",";
  text += ")";
  return text;
}

/// Printable excerpt of untrusted bytes for an error message: at most `limit` characters, non-printable
/// bytes as \xNN.
inline std::string printable(const char* text, std::size_t size, std::size_t limit = 48) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  const std::size_t shown = size < limit ? size : limit;
  for (std::size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (shown < size) out += "...";
  return out;
}
inline std::string printable(const std::string& text, std::size_t limit = 48) {
  return printable(text.data(), text.size(), limit);
}

/// Who reports a malformed file: "read_npy: 'X.npy' is not a valid .npy file: <problem>".
struct npy_error_context {
  const char* function;
  const std::string* source;

  template <class... Args>
  [[noreturn]] void fail(Args&&... problem) const {
    MOECOMP_FAIL(error_kind::io_error, function, ": '", *source, "' is not a valid .npy file: ",
                 std::forward<Args>(problem)...);
  }
};

/// Everything the header says, checked: the data that follows has exactly `data_bytes` bytes.
struct npy_header {
  npy_dtype dtype = npy_dtype::float64;
  bool byte_swapped = false;  // the file's byte order differs from the host's
  bool fortran_order = false;
  std::vector<index_t> shape;
  index_t element_count = 1;
  std::size_t data_bytes = 0;
  std::string descr;  // as written in the file, for messages
};

/// The fixed-size part before the header: magic, version, header length.
struct npy_preamble {
  int major_version = 0;
  std::size_t size = 0;          // 10 (version 1.0) or 12 (2.0, 3.0)
  std::size_t header_bytes = 0;  // the header length field
};

/// Bytes needed to decide the preamble: the longest one.
inline constexpr std::size_t npy_max_preamble_size = 12;

/// Decodes the preamble from the first `available` bytes of a source of `total_size` bytes.
inline npy_preamble parse_npy_preamble(const unsigned char* bytes, std::size_t available, std::uint64_t total_size,
                                       const npy_error_context& where) {
  if (total_size == 0) where.fail("the file is empty (0 bytes)");
  const std::size_t magic_seen = available < npy_magic_size ? available : npy_magic_size;
  if (std::memcmp(bytes, npy_magic, magic_seen) != 0) {
    if (available >= 4 && std::memcmp(bytes, "PK\x03\x04", 4) == 0)
      where.fail("it is a zip archive (an .npz?), not a .npy file");
    where.fail("bad magic: expected the 6 bytes \\x93NUMPY, got '",
               printable(reinterpret_cast<const char*>(bytes), magic_seen), "'");
  }
  if (available < 8)
    where.fail("truncated: ", total_size, " bytes, too short to hold the magic and version (8 bytes)");
  npy_preamble preamble;
  const int major = bytes[6], minor = bytes[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    where.fail("unsupported format version ", major, ".", minor, " (moecomp reads 1.0, 2.0 and 3.0)");
  preamble.major_version = major;
  preamble.size = major == 1 ? 10 : 12;
  if (available < preamble.size)
    where.fail("truncated: ", total_size, " bytes, too short to hold the version ", major,
               ".0 preamble (", preamble.size, " bytes)");
  std::uint64_t length = std::uint64_t(bytes[8]) | (std::uint64_t(bytes[9]) << 8);
  if (major != 1) length |= (std::uint64_t(bytes[10]) << 16) | (std::uint64_t(bytes[11]) << 24);
  if (length > npy_max_header_bytes)
    where.fail("header length ", length, " is larger than the ", npy_max_header_bytes, "-byte limit");
  if (length > total_size - preamble.size)
    where.fail("header length ", length, " runs past the end of the file (", total_size - preamble.size,
               " bytes follow the preamble)");
  preamble.header_bytes = static_cast<std::size_t>(length);
  return preamble;
}

/// Whether [text, text + size) is well-formed UTF-8 (no overlong forms, no surrogates, <= U+10FFFF).
inline bool is_valid_utf8(const char* text, std::size_t size) noexcept {
  std::size_t i = 0;
  while (i < size) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::size_t extra = 0;
    std::uint32_t code = 0, min_code = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      extra = 1, code = c & 0x1f, min_code = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2, code = c & 0x0f, min_code = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      extra = 3, code = c & 0x07, min_code = 0x10000;
    } else {
      return false;
    }
    if (size - i <= extra) return false;
    for (std::size_t k = 1; k <= extra; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = (code << 6) | (next & 0x3f);
    }
    if (code < min_code || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    i += extra + 1;
  }
  return true;
}

/// A strict recursive-descent parser of the one Python literal a .npy header holds, e.g.
///   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
/// Accepted: any whitespace between tokens, either quote style, trailing commas, and (versions 1.0/2.0,
/// written by Python 2) integers with an 'L' suffix. Values may be strings, True/False/None, integers,
/// tuples and lists nested up to npy_max_nesting, so that structured dtypes get a clear message rather
/// than a syntax error. Strings with escapes, numbers other than decimal integers, nested dicts,
/// expressions and anything after the closing brace other than whitespace are refused.
class npy_header_parser {
 public:
  npy_header_parser(const char* text, std::size_t size, bool allow_long_suffix, const npy_error_context& where)
      : begin_(text), pos_(text), end_(text + size), allow_long_suffix_(allow_long_suffix), where_(where) {}

  npy_header parse() {
    skip_space();
    if (peek() != '{') syntax_error("the header must be a Python dict literal starting with '{'");
    ++pos_;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    value descr, order, shape;
    skip_space();
    while (peek() != '}') {
      const char* key_at = pos_;
      if (peek() != '\'' && peek() != '"') syntax_error("expected a quoted key or '}'");
      const std::string key = parse_string();
      skip_space();
      if (peek() != ':') syntax_error("expected ':' after the key '", printable(key), "'");
      ++pos_;
      skip_space();
      value parsed = parse_value(1, true);
      bool* seen = nullptr;
      value* slot = nullptr;
      if (key == "descr") {
        seen = &seen_descr, slot = &descr;
      } else if (key == "fortran_order") {
        seen = &seen_order, slot = &order;
      } else if (key == "shape") {
        seen = &seen_shape, slot = &shape;
      } else {
        where_.fail("unknown header key '", printable(key), "' at byte ", key_at - begin_,
                    " (a .npy header has exactly 'descr', 'fortran_order' and 'shape')");
      }
      if (*seen) where_.fail("duplicate header key '", key, "'");
      *seen = true;
      *slot = std::move(parsed);
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
      } else if (peek() != '}') {
        syntax_error("expected ',' or '}' after the value of '", key, "'");
      }
    }
    ++pos_;
    skip_space();
    if (pos_ != end_) syntax_error("unexpected text after the closing '}'");
    if (!seen_descr) where_.fail("the header has no 'descr' key");
    if (!seen_order) where_.fail("the header has no 'fortran_order' key");
    if (!seen_shape) where_.fail("the header has no 'shape' key");

    npy_header header;
    decode_descr(descr, header);
    if (order.kind != value_kind::boolean)
      where_.fail("'fortran_order' must be True or False, got ", kind_name(order.kind));
    header.fortran_order = order.boolean;
    decode_shape(shape, header);
    return header;
  }

 private:
  enum class value_kind { string, boolean, none, integer, tuple, list };
  struct value {
    value_kind kind = value_kind::none;
    std::string text;        // string
    bool boolean = false;    // boolean
    bool negative = false;   // integer: sign
    std::uint64_t magnitude = 0;  // integer: |value|
    std::vector<value> items;     // tuple, list: the first items only (see parse_sequence)
    std::size_t item_count = 0;   // tuple, list: all items
  };

  static const char* kind_name(value_kind kind) noexcept {
    switch (kind) {
      case value_kind::string: return "a string";
      case value_kind::boolean: return "a bool";
      case value_kind::none: return "None";
      case value_kind::integer: return "an integer";
      case value_kind::tuple: return "a tuple";
      case value_kind::list: return "a list";
    }
    return "a value";
  }

  int peek() const noexcept { return pos_ < end_ ? static_cast<unsigned char>(*pos_) : -1; }

  static bool is_space(int c) noexcept { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }
  static bool is_digit(int c) noexcept { return c >= '0' && c <= '9'; }
  static bool is_name_char(int c) noexcept {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_';
  }
  void skip_space() noexcept {
    while (pos_ < end_ && is_space(static_cast<unsigned char>(*pos_))) ++pos_;
  }

  std::string describe_here() const {
    if (pos_ >= end_) return "the end of the header";
    // built by appending: GCC 12 warns falsely (-Wrestrict, bug 105329) on "literal" + std::string&& in C++20
    std::string quoted(1, '\'');
    quoted += printable(pos_, 1);
    quoted += '\'';
    return quoted;
  }

  template <class... Args>
  [[noreturn]] void syntax_error(Args&&... what) const {
    where_.fail("header syntax error at byte ", pos_ - begin_, ": ", std::forward<Args>(what)..., ", found ",
                describe_here(), " (header: \"", printable(begin_, static_cast<std::size_t>(end_ - begin_), 80),
                "\")");
  }

  std::string parse_string() {
    const char quote = *pos_++;
    const char* start = pos_;
    while (pos_ < end_ && *pos_ != quote) {
      if (*pos_ == '\\') syntax_error("escape sequences in header strings are not supported");
      if (*pos_ == '\n' || *pos_ == '\r') syntax_error("unterminated string");
      ++pos_;
    }
    if (pos_ >= end_) syntax_error("unterminated string");
    std::string text(start, static_cast<std::size_t>(pos_ - start));
    ++pos_;
    return text;
  }

  value parse_value(int depth, bool keep) {
    if (depth > npy_max_nesting) syntax_error("values nested deeper than ", npy_max_nesting, " levels");
    value result;
    const int c = peek();
    if (c == '\'' || c == '"') {
      result.kind = value_kind::string;
      result.text = parse_string();
    } else if (c == '(' || c == '[') {
      parse_sequence(result, depth, keep);
    } else if (is_digit(c) || c == '-' || c == '+') {
      parse_integer(result);
    } else if (c >= 'A' && c <= 'Z') {
      const char* start = pos_;
      while (pos_ < end_ && is_name_char(static_cast<unsigned char>(*pos_))) ++pos_;
      const std::string name(start, static_cast<std::size_t>(pos_ - start));
      if (name == "True" || name == "False") {
        result.kind = value_kind::boolean;
        result.boolean = name == "True";
      } else if (name == "None") {
        result.kind = value_kind::none;
      } else {
        pos_ = start;
        syntax_error("expected True, False or None");
      }
    } else {
      syntax_error("expected a value (string, integer, True/False/None, tuple or list)");
    }
    return result;
  }

  // '(' a ')' is a parenthesised value, '(' a ',' ')' and '()' are tuples, '[' ... ']' a list.
  // Memory stays proportional to a valid header, whatever the input: a sequence that may become a dict
  // value (`keep`: the value itself, or the first item of such a sequence, which a parenthesis may
  // unwrap) stores its first npy_max_ndim + 1 items, any other only its first; the rest are parsed,
  // counted and dropped.
  void parse_sequence(value& result, int depth, bool keep) {
    const char open = *pos_++;
    const char close = open == '(' ? ')' : ']';
    result.kind = open == '(' ? value_kind::tuple : value_kind::list;
    bool saw_comma = false;
    skip_space();
    while (peek() != close) {
      value item = parse_value(depth + 1, keep && result.item_count == 0);
      ++result.item_count;
      if (result.items.empty() || (keep && result.items.size() <= npy_max_ndim))
        result.items.push_back(std::move(item));
      skip_space();
      if (peek() == ',') {
        saw_comma = true;
        ++pos_;
        skip_space();
      } else if (peek() != close) {
        syntax_error("expected ',' or '", close, "'");
      }
    }
    ++pos_;
    if (open == '(' && result.item_count == 1 && !saw_comma) {
      value inner = std::move(result.items.front());
      result = std::move(inner);
    }
  }

  void parse_integer(value& result) {
    result.kind = value_kind::integer;
    if (peek() == '-' || peek() == '+') result.negative = *pos_++ == '-';
    if (!is_digit(peek())) syntax_error("expected digits");
    const char* digits = pos_;
    std::uint64_t magnitude = 0;
    while (is_digit(peek())) {
      const auto digit = static_cast<std::uint64_t>(*pos_ - '0');
      if (magnitude > (std::numeric_limits<std::uint64_t>::max() - digit) / 10)
        where_.fail("the integer '", printable(digits, static_cast<std::size_t>(end_ - digits), 32),
                    "' in the header does not fit in 64 bits");
      magnitude = magnitude * 10 + digit;
      ++pos_;
    }
    if (pos_ - digits > 1 && *digits == '0') {
      pos_ = digits;
      syntax_error("integers with leading zeros are not Python literals");
    }
    if (allow_long_suffix_ && peek() == 'L') ++pos_;
    if (is_name_char(peek()) || peek() == '.') syntax_error("only decimal integers are accepted");
    result.magnitude = magnitude;
  }

  void decode_descr(const value& descr, npy_header& header) const {
    if (descr.kind == value_kind::list)
      where_.fail("'descr' is a list: a structured dtype, which moecomp does not read (supported: <f4, <f8, "
                  "<i4, <i8)");
    if (descr.kind != value_kind::string)
      where_.fail("'descr' must be a dtype string such as '<f4', got ", kind_name(descr.kind),
                  descr.kind == value_kind::tuple ? " (a sub-array dtype, which moecomp does not read)" : "");
    header.descr = descr.text;
    const std::string& text = descr.text;
    std::size_t at = 0;
    char order = '=';
    if (!text.empty() && (text[0] == '<' || text[0] == '>' || text[0] == '=' || text[0] == '|')) order = text[at++];
    const std::string code = text.substr(at);
    if (code == "f4") {
      header.dtype = npy_dtype::float32;
    } else if (code == "f8") {
      header.dtype = npy_dtype::float64;
    } else if (code == "i4") {
      header.dtype = npy_dtype::int32;
    } else if (code == "i8") {
      header.dtype = npy_dtype::int64;
    } else {
      where_.fail("unsupported dtype descr '", printable(text),
                  "' (moecomp reads float32, float64, int32 and int64: '<f4', '<f8', '<i4', '<i8', big-endian "
                  "'>' too)");
    }
    // '=' and '|' (and no prefix) mean the reading machine's order, as NumPy interprets them.
    const bool file_little = order == '<' || (order != '>' && host_is_little_endian());
    header.byte_swapped = file_little != host_is_little_endian();
  }

  void decode_shape(const value& shape, npy_header& header) const {
    if (shape.kind != value_kind::tuple)
      where_.fail("'shape' must be a tuple of integers, got ", kind_name(shape.kind));
    if (shape.item_count > npy_max_ndim)
      where_.fail("'shape' has ", shape.item_count, " dimensions, more than the ", npy_max_ndim, " supported");
    const auto max_index = static_cast<std::uint64_t>(std::numeric_limits<index_t>::max());
    // Every dimension (zeros counted as 1) multiplied together and by the item size must fit in index_t
    // and size_t, so that no stride or byte offset computed later can overflow, even for empty arrays.
    std::uint64_t product = 1;
    bool empty = false;
    for (std::size_t i = 0; i < shape.items.size(); ++i) {
      const value& dim = shape.items[i];
      if (dim.kind != value_kind::integer)
        where_.fail("'shape' element ", i, " must be an integer, got ", kind_name(dim.kind));
      if (dim.negative && dim.magnitude != 0)
        where_.fail("'shape' element ", i, " is negative (-", dim.magnitude, ")");
      if (dim.magnitude > max_index)
        where_.fail("'shape' element ", i, " (", dim.magnitude, ") does not fit in a signed 64-bit index");
      const std::uint64_t factor = dim.magnitude == 0 ? 1 : dim.magnitude;
      if (product > max_index / factor)
        where_.fail("the element count of shape ", shape_text(shape), " overflows 64 bits");
      product *= factor;
      empty = empty || dim.magnitude == 0;
      header.shape.push_back(static_cast<index_t>(dim.magnitude));
    }
    const std::uint64_t size = item_size(header.dtype);
    const std::uint64_t max_bytes =
        std::min<std::uint64_t>(max_index, std::numeric_limits<std::size_t>::max());
    if (product > max_bytes / size)
      where_.fail("the byte count of shape ", shape_text(shape), " with ", to_string(header.dtype),
                  " elements overflows");
    header.element_count = empty ? 0 : static_cast<index_t>(product);
    header.data_bytes = static_cast<std::size_t>(static_cast<std::uint64_t>(header.element_count) * size);
  }

  static std::string shape_text(const value& shape) {
    std::vector<index_t> dims;
    for (const value& dim : shape.items) dims.push_back(static_cast<index_t>(dim.magnitude));
    return shape_repr(dims);
  }

  const char* begin_;
  const char* pos_;
  const char* end_;
  bool allow_long_suffix_;
  const npy_error_context& where_;
};

/// Parses and checks the header text of a file of format `major_version`.
inline npy_header parse_npy_header(const char* text, std::size_t size, int major_version,
                                   const npy_error_context& where) {
  if (major_version >= 3 && !is_valid_utf8(text, size)) where.fail("the version 3.0 header is not valid UTF-8");
  return npy_header_parser(text, size, major_version <= 2, where).parse();
}

/// The preamble and header NumPy (1.24) writes for a C-order array of this dtype and shape in the host's
/// byte order: format 1.0 unless the header needs more than 65535 bytes, then 2.0. The dict keys are
/// sorted, the header is padded with spaces (plus 21 - digits of shape[0] spare ones, NumPy's room for
/// growing axis 0) and a newline so that the data starts on a 64-byte boundary.
inline std::string npy_header_bytes(npy_dtype dtype, const std::vector<index_t>& shape) {
  static constexpr const char* codes[] = {"f4", "f8", "i4", "i8"};
  std::string dict = "{'descr': '";
  dict += host_is_little_endian() ? '<' : '>';
  dict += codes[static_cast<int>(dtype)];
  dict += "', 'fortran_order': False, 'shape': ";
  dict += shape_repr(shape);
  dict += ", }";
  if (!shape.empty()) {
    constexpr std::size_t growth_digits = 21;
    const std::size_t digits = std::to_string(shape.front()).size();
    if (digits < growth_digits) dict.append(growth_digits - digits, ' ');
  }
  constexpr std::size_t alignment = 64;
  const std::size_t text_bytes = dict.size() + 1;  // + '\n'
  const auto padding_after = [&](std::size_t preamble) { return alignment - (preamble + text_bytes) % alignment; };
  const bool version1 = text_bytes + padding_after(10) <= 0xffff;
  const std::size_t padding = padding_after(version1 ? 10 : 12);
  const std::size_t header_length = text_bytes + padding;
  std::string bytes(reinterpret_cast<const char*>(npy_magic), npy_magic_size);
  bytes += static_cast<char>(version1 ? 1 : 2);
  bytes += '\0';
  for (std::size_t i = 0; i < (version1 ? 2u : 4u); ++i) bytes += static_cast<char>((header_length >> (8 * i)) & 0xff);
  bytes += dict;
  bytes.append(padding, ' ');
  bytes += '\n';
  return bytes;
}

/// Reverses the byte order of `count` items of `size` (4 or 8) bytes, in place.
inline void swap_bytes(void* data, std::size_t count, std::size_t size) noexcept {
  auto* bytes = static_cast<unsigned char*>(data);
  for (std::size_t i = 0; i < count; ++i, bytes += size) {
    for (std::size_t lo = 0, hi = size - 1; lo < hi; ++lo, --hi) std::swap(bytes[lo], bytes[hi]);
  }
}

template <class Word>
void fortran_to_c_order_typed(const Word* source, Word* target, const std::vector<index_t>& shape) {
  const std::size_t ndim = shape.size();
  if (ndim == 2) {
    // Source is the cols x rows C-order transpose: a tiled transpose keeps both sides in cache.
    const index_t rows = shape[0], cols = shape[1];
    constexpr index_t tile = 32;
    for (index_t i0 = 0; i0 < rows; i0 += tile)
      for (index_t j0 = 0; j0 < cols; j0 += tile) {
        const index_t i1 = std::min(rows, i0 + tile), j1 = std::min(cols, j0 + tile);
        for (index_t i = i0; i < i1; ++i)
          for (index_t j = j0; j < j1; ++j) target[i * cols + j] = source[j * rows + i];
      }
    return;
  }
  // General case: walk the C-order target with an odometer, keeping the Fortran offset up to date.
  std::vector<index_t> fortran_stride(ndim, 1), index(ndim, 0);
  for (std::size_t d = 1; d < ndim; ++d) fortran_stride[d] = fortran_stride[d - 1] * shape[d - 1];
  index_t count = 1;
  for (index_t extent : shape) count *= extent;
  index_t offset = 0;
  for (index_t k = 0; k < count; ++k) {
    target[k] = source[offset];
    for (std::size_t d = ndim; d-- > 0;) {
      if (++index[d] < shape[d]) {
        offset += fortran_stride[d];
        break;
      }
      offset -= (shape[d] - 1) * fortran_stride[d];
      index[d] = 0;
    }
  }
}

/// Copies a Fortran-order array of `shape` into C order. `target` must not overlap `source`.
inline void fortran_to_c_order(const void* source, void* target, const std::vector<index_t>& shape,
                               std::size_t size) {
  for (index_t extent : shape)
    if (extent == 0) return;
  if (size == 4) {
    fortran_to_c_order_typed(static_cast<const std::uint32_t*>(source), static_cast<std::uint32_t*>(target), shape);
  } else {
    fortran_to_c_order_typed(static_cast<const std::uint64_t*>(source), static_cast<std::uint64_t*>(target), shape);
  }
}

}  // namespace detail
}  // namespace io
MOECOMP_NAMESPACE_END
