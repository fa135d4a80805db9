#pragma once
// The safetensors format's internals: UTF-8 validation, the header's JSON read through nlohmann-json's SAX
// interface (no document tree, so a 100 MB header costs its tensors' entries and no more), the reference
// implementation's layout checks, the read-only file mapping, element conversion, and the header a writer
// puts out. Everything here reports a malformed file through MOECOMP_FAIL(io_error) with a message that
// names the file and the rule it breaks.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/detail/input_file.hpp>
#include <moecomp/core/detail/little_endian.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/io/safetensors_types.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define MOECOMP_SAFETENSORS_MMAP 1
#else
#define MOECOMP_SAFETENSORS_MMAP 0
#endif

MOECOMP_NAMESPACE_BEGIN
namespace io {
namespace detail {

// Tensor bytes are little-endian in the file and are viewed and written in place.
static_assert(moecomp::detail::host_is_little_endian, "moecomp's safetensors support needs a little-endian host");

/// The reference implementation's limit on the header's length (safetensors' MAX_HEADER_SIZE).
inline constexpr std::uint64_t safetensors_max_header_bytes = 100'000'000;
/// The 8-byte little-endian header length that starts every file.
inline constexpr std::uint64_t safetensors_length_bytes = 8;

template <class... Parts>
[[noreturn]] void safetensors_fail(const char* function, const std::string& source, const Parts&... parts) {
  MOECOMP_FAIL(error_kind::io_error, function, ": '", source, "' is not a valid safetensors file: ", parts...);
}

/// The offset of the first byte that breaks UTF-8 (overlong forms, surrogates and code points above
/// U+10FFFF included, as Rust's str::from_utf8 rules), or `size` when all of it is valid.
inline std::size_t utf8_invalid_offset(const unsigned char* text, std::size_t size) noexcept {
  std::size_t i = 0;
  while (i < size) {
    const unsigned char lead = text[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xbf;  // the range of the second byte
    if (lead >= 0xc2 && lead <= 0xdf) {
      length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      length = 3;
      if (lead == 0xe0) low = 0xa0;       // no overlong 3-byte forms
      if (lead == 0xed) high = 0x9f;      // no surrogates
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      length = 4;
      if (lead == 0xf0) low = 0x90;       // no overlong 4-byte forms
      if (lead == 0xf4) high = 0x8f;      // nothing above U+10FFFF
    } else {
      return i;
    }
    if (size - i < length) return i;
    if (text[i + 1] < low || text[i + 1] > high) return i;
    for (std::size_t k = 2; k < length; ++k)
      if ((text[i + k] & 0xc0) != 0x80) return i;
    i += length;
  }
  return size;
}

/// What the header holds, before the layout checks.
struct safetensors_header {
  std::vector<safetensors_tensor_info> tensors;  // in the header's order until sorted
  std::map<std::string, std::string> metadata;
  bool has_metadata = false;
};

/// A SAX handler for the header. It accepts exactly what the reference's serde types accept: an object
/// whose "__metadata__" entry is null or a string-to-string map and whose every other entry is a tensor
/// object with "dtype" (a known name), "shape" (non-negative integers) and "data_offsets" (two
/// non-negative integers); a tensor's other fields are skipped, as serde skips unknown fields. It also
/// refuses duplicate keys, which serde would resolve silently.
class safetensors_header_reader {
 public:
  using json = nlohmann::json;

  explicit safetensors_header_reader(safetensors_header& out) : out_(out) {}

  const std::string& error() const noexcept { return error_; }

  bool null() {
    if (state_ == state::top_value && key_ == "__metadata__") {  // serde reads null as "no metadata"
      out_.has_metadata = false;
      state_ = state::top;
      return true;
    }
    return scalar("null");
  }
  bool boolean(bool) { return scalar("a boolean"); }
  bool number_integer(json::number_integer_t value) {
    if (state_ == state::skip) return skip_scalar();
    if (state_ == state::shape || state_ == state::offsets)
      return refuse(where(), " must hold non-negative integers, got ", value);
    return scalar("a number");
  }
  bool number_unsigned(json::number_unsigned_t value) {
    if (state_ == state::skip) return skip_scalar();
    if (state_ == state::shape) {
      if (value > static_cast<std::uint64_t>(std::numeric_limits<index_t>::max()))
        return refuse(where(), " has the extent ", value, ", more than moecomp's index type holds (2^63 - 1)");
      tensor().shape.push_back(static_cast<index_t>(value));
      return true;
    }
    if (state_ == state::offsets) {
      if (offsets_seen_ == 0) tensor().begin = value;
      if (offsets_seen_ == 1) tensor().end = value;
      ++offsets_seen_;
      return true;
    }
    return scalar("a number");
  }
  bool number_float(json::number_float_t, const json::string_t& text) {
    if (state_ == state::skip) return skip_scalar();
    if (state_ == state::shape || state_ == state::offsets)
      return refuse(where(), " must hold non-negative integers (below 2^64), got ", text);
    return scalar("a number");
  }
  bool string(json::string_t& value) {
    switch (state_) {
      case state::skip: return skip_scalar();
      case state::metadata:
        out_.metadata.emplace(key_, std::move(value));
        return true;
      case state::tensor:
        if (field_ == field::dtype) {
          const auto dtype = try_parse_safetensors_dtype(value);
          if (!dtype)
            return refuse("tensor '", tensor().name, "' has the dtype '", value,
                          "', which moecomp does not read (it reads BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, "
                          "BF16, I32, U32, F32, F64, I64, U64)");
          tensor().dtype = *dtype;
          return true;
        }
        return scalar("a string");
      default: return scalar("a string");
    }
  }
  bool binary(json::binary_t&) { return refuse("the header holds binary data"); }

  bool start_object(std::size_t) {
    switch (state_) {
      case state::start: state_ = state::top; return true;
      case state::top_value:
        if (key_ == "__metadata__") {
          state_ = state::metadata;
        } else {
          state_ = state::tensor;
          seen_ = 0;
        }
        return true;
      case state::skip: ++skip_depth_; return true;
      default: return scalar("an object");
    }
  }
  bool key(json::string_t& name) {
    switch (state_) {
      case state::top:
        if (name == "__metadata__") {
          if (metadata_seen_) return refuse("the header has two \"__metadata__\" entries");
          metadata_seen_ = true;
          out_.has_metadata = true;
        } else {
          if (!names_.emplace(name, out_.tensors.size()).second)
            return refuse("the header names the tensor '", name, "' twice");
          out_.tensors.emplace_back();
          out_.tensors.back().name = name;
        }
        key_ = std::move(name);
        state_ = state::top_value;
        return true;
      case state::metadata:
        if (out_.metadata.count(name) != 0) return refuse("\"__metadata__\" has the key '", name, "' twice");
        key_ = std::move(name);
        return true;
      case state::tensor: {
        field_ = name == "dtype" ? field::dtype
                 : name == "shape" ? field::shape
                 : name == "data_offsets" ? field::offsets
                                          : field::other;
        if (field_ == field::other) {
          state_ = state::skip;  // an unknown field: its value is skipped, whatever it holds
          skip_depth_ = 0;
          return true;
        }
        const unsigned bit = 1u << static_cast<unsigned>(field_);
        if ((seen_ & bit) != 0) return refuse("tensor '", tensor().name, "' has the field \"", name, "\" twice");
        seen_ |= bit;
        return true;
      }
      case state::skip: return true;
      default: return refuse("unexpected key '", name, "'");
    }
  }
  bool end_object() {
    switch (state_) {
      case state::top: state_ = state::done; return true;
      case state::metadata: state_ = state::top; return true;
      case state::tensor:
        for (field f : {field::dtype, field::shape, field::offsets})
          if ((seen_ & (1u << static_cast<unsigned>(f))) == 0)
            return refuse("tensor '", tensor().name, "' lacks the field \"", field_name(f), "\"");
        state_ = state::top;
        return true;
      case state::skip: return end_skipped_container();
      default: return refuse("unexpected end of an object");
    }
  }
  bool start_array(std::size_t) {
    if (state_ == state::skip) {
      ++skip_depth_;
      return true;
    }
    if (state_ == state::tensor && field_ == field::shape) {
      state_ = state::shape;
      return true;
    }
    if (state_ == state::tensor && field_ == field::offsets) {
      state_ = state::offsets;
      offsets_seen_ = 0;
      return true;
    }
    return scalar("an array");
  }
  bool end_array() {
    if (state_ == state::skip) return end_skipped_container();
    if (state_ == state::shape) {
      state_ = state::tensor;
      return true;
    }
    if (state_ == state::offsets) {
      if (offsets_seen_ != 2)
        return refuse("tensor '", tensor().name, "': \"data_offsets\" must hold 2 integers, got ", offsets_seen_);
      state_ = state::tensor;
      return true;
    }
    return refuse("unexpected end of an array");
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::json::exception& problem) {
    if (error_.empty()) error_ = moecomp::detail::concat("the header is not valid JSON (at byte ", position, "): ", problem.what());
    return false;
  }

 private:
  enum class state { start, top, top_value, metadata, tensor, shape, offsets, skip, done };
  enum class field : unsigned { dtype = 0, shape = 1, offsets = 2, other = 3 };

  static const char* field_name(field f) noexcept {
    return f == field::dtype ? "dtype" : f == field::shape ? "shape" : "data_offsets";
  }
  safetensors_tensor_info& tensor() { return out_.tensors.back(); }

  std::string where() const { return moecomp::detail::concat("tensor '", out_.tensors.back().name, "': \"", field_name(field_), "\""); }

  // A scalar (or a container) where the structure expects something else.
  bool scalar(const char* what) {
    switch (state_) {
      case state::skip: return skip_scalar();
      case state::start: return refuse("the header must be a JSON object, got ", what);
      case state::top_value:
        if (key_ == "__metadata__") {
          return refuse("\"__metadata__\" must be a string-to-string map, got ", what);
        }
        return refuse("tensor '", key_, "' must be an object with dtype, shape and data_offsets, got ", what);
      case state::metadata:
        return refuse("\"__metadata__\" must be a string-to-string map, but '", key_, "' holds ", what);
      case state::tensor:
        return refuse("tensor '", tensor().name, "': \"", field_name(field_), "\" must be ",
                      field_ == field::dtype ? "a string" : "an array of integers", ", got ", what);
      case state::shape:
      case state::offsets: return refuse(where(), " must hold non-negative integers, got ", what);
      default: return refuse("unexpected ", what);
    }
  }
  bool skip_scalar() {
    if (skip_depth_ == 0) state_ = state::tensor;
    return true;
  }
  bool end_skipped_container() {
    if (--skip_depth_ == 0) state_ = state::tensor;
    return true;
  }
  template <class... Parts>
  bool refuse(const Parts&... parts) {
    if (error_.empty()) error_ = moecomp::detail::concat(parts...);
    return false;
  }

  safetensors_header& out_;
  std::unordered_map<std::string, std::size_t> names_;
  std::string key_;
  std::string error_;
  state state_ = state::start;
  field field_ = field::other;
  unsigned seen_ = 0;
  std::size_t offsets_seen_ = 0;
  std::size_t skip_depth_ = 0;
  bool metadata_seen_ = false;
};

/// A parsed and checked file: the header's length, the tensors in data order, the metadata, and where
/// each name is.
struct safetensors_layout {
  std::uint64_t header_bytes = 0;  // the JSON's length, without the 8-byte length field
  std::vector<safetensors_tensor_info> tensors;
  std::map<std::string, std::string> metadata;
  bool has_metadata = false;
  std::unordered_map<std::string, std::size_t> index;
};

/// Reads the header of the file `bytes[0, size)` and applies the reference's checks in its order: the
/// length field, the header's extent, UTF-8, JSON and its structure, contiguous offsets from 0, byte
/// lengths that agree with shape x dtype (overflow checked), and a data section that ends at the file's end.
inline safetensors_layout parse_safetensors_layout(const unsigned char* bytes, std::uint64_t size, const char* function,
                                                   const std::string& source) {
  if (size < safetensors_length_bytes)
    safetensors_fail(function, source, "it has ", size, " bytes, fewer than the 8 of the header length");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > safetensors_max_header_bytes)
    safetensors_fail(function, source, "the header length ", n, " exceeds the limit of ", safetensors_max_header_bytes,
                     " bytes");
  if (n > size - safetensors_length_bytes)
    safetensors_fail(function, source, "the header length ", n, " runs past the end of the file (",
                     size - safetensors_length_bytes, " bytes follow the length field)");
  const unsigned char* text = bytes + safetensors_length_bytes;
  const std::size_t length = static_cast<std::size_t>(n);
  const std::size_t bad = utf8_invalid_offset(text, length);
  if (bad != length) safetensors_fail(function, source, "the header is not valid UTF-8 (at byte ", bad, ")");

  // nlohmann-json stops at a NUL as at the end of the input; to serde (and JSON) it is an invalid byte.
  if (const void* nul = std::memchr(text, 0, length))
    safetensors_fail(function, source, "the header is not valid JSON (a NUL byte at byte ",
                     static_cast<const unsigned char*>(nul) - text, ")");
  safetensors_header header;
  safetensors_header_reader reader(header);
  const bool parsed = nlohmann::json::sax_parse(text, text + length, &reader);
  if (!parsed || !reader.error().empty())
    safetensors_fail(function, source, reader.error().empty() ? std::string("the header is not valid JSON")
                                                              : reader.error());

  safetensors_layout layout;
  layout.header_bytes = n;
  layout.tensors = std::move(header.tensors);
  layout.metadata = std::move(header.metadata);
  layout.has_metadata = header.has_metadata;
  // The reference sorts by (begin, end); equal ranges (empty tensors at one offset) keep the name order so
  // that the result does not depend on the header's order.
  std::sort(layout.tensors.begin(), layout.tensors.end(), [](const auto& a, const auto& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  std::uint64_t position = 0;
  for (const safetensors_tensor_info& t : layout.tensors) {
    if (t.begin != position || t.end < t.begin)
      safetensors_fail(function, source, "tensor '", t.name, "' has data_offsets [", t.begin, ", ", t.end,
                       "]; the offsets must be contiguous from 0, and the next tensor must start at byte ", position);
    position = t.end;
    std::uint64_t elements = 1;
    for (index_t extent : t.shape) {  // left to right, as the reference's checked fold
      const auto e = static_cast<std::uint64_t>(extent);
      if (e != 0 && elements > std::numeric_limits<std::uint64_t>::max() / e)
        safetensors_fail(function, source, "tensor '", t.name, "': the element count of its shape overflows");
      elements *= e;
    }
    const std::uint64_t item = item_size(t.dtype);
    if (elements > std::numeric_limits<std::uint64_t>::max() / item)
      safetensors_fail(function, source, "tensor '", t.name, "': the byte count of its shape overflows");
    if (t.end - t.begin != elements * item)
      safetensors_fail(function, source, "tensor '", t.name, "' holds ", t.end - t.begin, " bytes, but ", elements,
                       " elements of ", to_string(t.dtype), " need ", elements * item);
    // moecomp's views index with index_t: the count must fit it too (it does for anything a file can hold).
    if (elements > static_cast<std::uint64_t>(std::numeric_limits<index_t>::max()))
      safetensors_fail(function, source, "tensor '", t.name, "' has more elements than moecomp's index type holds");
  }
  const std::uint64_t available = size - safetensors_length_bytes - n;
  if (position != available) {
    if (position > available)
      safetensors_fail(function, source, "the header declares ", position, " bytes of tensor data, but only ",
                       available, " follow it (the file is truncated)");
    safetensors_fail(function, source, available - position, " trailing bytes follow the ", position,
                     " bytes of tensor data");
  }
  for (std::size_t i = 0; i < layout.tensors.size(); ++i) layout.index.emplace(layout.tensors[i].name, i);
  return layout;
}

/// A file's bytes, read-only: memory-mapped on POSIX systems (nothing is read until touched), read into
/// memory elsewhere. Movable; the bytes stay at one address for the object's life.
class mapped_file {
 public:
  mapped_file() = default;
  mapped_file(const std::string& path, const char* function) {
    moecomp::detail::input_file file(path, function);  // a regular file, or an io_error
#if MOECOMP_SAFETENSORS_MMAP
    size_ = file.size();
    if (size_ > static_cast<std::uint64_t>(std::numeric_limits<std::size_t>::max()))
      MOECOMP_FAIL(error_kind::io_error, function, ": cannot map '", path, "' into memory: it is ", size_,
                   " bytes, more than this machine can address");
    if (size_ > 0) {
      errno = 0;
      void* address =
          ::mmap(nullptr, static_cast<std::size_t>(size_), PROT_READ, MAP_PRIVATE, file.descriptor(), 0);
      const int code = errno;
      if (address == MAP_FAILED) {
        size_ = 0;
        MOECOMP_FAIL(error_kind::io_error, function, ": cannot map '", path, "' into memory: ", std::strerror(code));
      }
      data_ = static_cast<const unsigned char*>(address);  // the mapping keeps the file once it is closed
      mapped_ = true;
    }
#else
    owned_ = file.read_all<std::vector<unsigned char>>();
    data_ = owned_.data();
    size_ = owned_.size();
#endif
  }
  /// The bytes of a buffer, copied (for files held in memory).
  mapped_file(const void* data, std::uint64_t size)
      : owned_(static_cast<const unsigned char*>(data), static_cast<const unsigned char*>(data) + size) {
    data_ = owned_.data();
    size_ = size;
  }
  mapped_file(mapped_file&& other) noexcept { take(other); }
  mapped_file& operator=(mapped_file&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  ~mapped_file() { release(); }

  const unsigned char* data() const noexcept { return data_; }
  std::uint64_t size() const noexcept { return size_; }
  bool is_mapped() const noexcept { return mapped_; }
  /// Drops the whole pages inside [offset, offset + bytes) from this process's resident set (madvise
  /// MADV_DONTNEED on the read-only private mapping: nothing is lost, a later read faults the pages in from
  /// the file again). Nothing for bytes held in memory.
  void release_pages(std::uint64_t offset, std::uint64_t bytes) const noexcept {
#if MOECOMP_SAFETENSORS_MMAP
    if (!mapped_ || bytes == 0 || offset >= size_) return;
    const long page_size = ::sysconf(_SC_PAGESIZE);
    const auto page = static_cast<std::uint64_t>(page_size > 0 ? page_size : 4096);
    const std::uint64_t end = std::min(size_, offset + bytes);
    const std::uint64_t first = (offset + page - 1) / page * page, last = end / page * page;
    if (last > first)
      ::madvise(const_cast<unsigned char*>(data_) + first, static_cast<std::size_t>(last - first), MADV_DONTNEED);
#else
    (void)offset;
    (void)bytes;
#endif
  }

 private:
  void take(mapped_file& other) noexcept {
    owned_ = std::move(other.owned_);  // a vector's move keeps its buffer's address
    data_ = other.data_;
    size_ = other.size_;
    mapped_ = other.mapped_;
    other.data_ = nullptr;
    other.size_ = 0;
    other.mapped_ = false;
  }
  void release() noexcept {
#if MOECOMP_SAFETENSORS_MMAP
    if (mapped_) ::munmap(const_cast<unsigned char*>(data_), static_cast<std::size_t>(size_));
#endif
    owned_.clear();
    data_ = nullptr;
    size_ = 0;
    mapped_ = false;
  }

  std::vector<unsigned char> owned_;
  const unsigned char* data_ = nullptr;
  std::uint64_t size_ = 0;
  bool mapped_ = false;
};

/// One element of `dtype` at `p` (little-endian, any alignment) as double: exact for every dtype but
/// I64/U64 beyond 2^53, which round to nearest.
inline double load_as_double(safetensors_dtype dtype, const unsigned char* p) noexcept {
  auto load = [p](auto value) {
    std::memcpy(&value, p, sizeof value);
    return value;
  };
  switch (dtype) {
    case safetensors_dtype::boolean: return p[0] != 0 ? 1.0 : 0.0;
    case safetensors_dtype::u8: return p[0];
    case safetensors_dtype::i8: return static_cast<std::int8_t>(p[0]);
    case safetensors_dtype::f8_e5m2: return float8_e5m2::to_float(p[0]);
    case safetensors_dtype::f8_e4m3: return float8_e4m3::to_float(p[0]);
    case safetensors_dtype::i16: return load(std::int16_t{});
    case safetensors_dtype::u16: return load(std::uint16_t{});
    case safetensors_dtype::f16: return half::to_float(load(std::uint16_t{}));
    case safetensors_dtype::bf16: return static_cast<float>(bfloat16::from_bits(load(std::uint16_t{})));
    case safetensors_dtype::i32: return load(std::int32_t{});
    case safetensors_dtype::u32: return load(std::uint32_t{});
    case safetensors_dtype::f32: return load(float{});
    case safetensors_dtype::f64: return load(double{});
    case safetensors_dtype::i64: return static_cast<double>(load(std::int64_t{}));
    case safetensors_dtype::u64: return static_cast<double>(load(std::uint64_t{}));
  }
  return 0.0;
}

/// The index of the first of `count` words U at `data` whose bits under `mask` are all ones, or `count`.
template <class U>
std::size_t first_with_bits(const unsigned char* data, std::size_t count, U mask) noexcept {
  constexpr std::size_t block = 1024;  // count a block without branching (vectorises), then look inside it
  for (std::size_t first = 0; first < count; first += block) {
    const std::size_t last = std::min(count, first + block);
    std::size_t hits = 0;
    for (std::size_t i = first; i < last; ++i) {
      U u;
      std::memcpy(&u, data + i * sizeof(U), sizeof(U));
      hits += static_cast<std::size_t>((u & mask) == mask);
    }
    if (hits == 0) continue;
    for (std::size_t i = first; i < last; ++i) {
      U u;
      std::memcpy(&u, data + i * sizeof(U), sizeof(U));
      if ((u & mask) == mask) return i;
    }
  }
  return count;
}

/// The index of the first of `count` elements of `dtype` at `data` that is a NaN or an infinity, or
/// `count` when every one is finite (always, for integer and boolean dtypes). It reads the exponent bits
/// (all ones: not finite; F8_E4M3 has no infinity and its NaN is S.1111.111), without converting.
inline std::size_t first_non_finite(safetensors_dtype dtype, const unsigned char* data, std::size_t count) noexcept {
  switch (dtype) {
    case safetensors_dtype::f64: return first_with_bits<std::uint64_t>(data, count, 0x7ff0000000000000ull);
    case safetensors_dtype::f32: return first_with_bits<std::uint32_t>(data, count, 0x7f800000u);
    case safetensors_dtype::f16: return first_with_bits<std::uint16_t>(data, count, 0x7c00u);
    case safetensors_dtype::bf16: return first_with_bits<std::uint16_t>(data, count, 0x7f80u);
    case safetensors_dtype::f8_e5m2: return first_with_bits<std::uint8_t>(data, count, 0x7cu);
    case safetensors_dtype::f8_e4m3: return first_with_bits<std::uint8_t>(data, count, 0x7fu);
    default: return count;
  }
}


/// `count` elements of `dtype` from `source` (any alignment) converted to T (float, double, bfloat16,
/// half). Floating-point sources convert exactly where T holds the value and round to nearest even
/// otherwise; the same-type case is a copy. The common weight conversions have their own loops.
template <class T>
void convert_safetensors_elements(safetensors_dtype dtype, const unsigned char* source, std::size_t count, T* out) {
  static_assert(moecomp::detail::is_weight_type_v<T>, "convert_safetensors_elements: T must be a weight type");
  if (dtype == safetensors_dtype_of<T>::value) {
    if (count > 0) std::memcpy(static_cast<void*>(out), source, count * sizeof(T));
    return;
  }
  if (dtype == safetensors_dtype::bf16 && (std::is_same_v<T, float> || std::is_same_v<T, double>)) {
    for (std::size_t i = 0; i < count; ++i) {  // bf16 -> float is a shift: let the compiler vectorise it
      std::uint16_t bits;
      std::memcpy(&bits, source + 2 * i, 2);
      out[i] = static_cast<T>(moecomp::detail::bits_float(static_cast<std::uint32_t>(bits) << 16));
    }
    return;
  }
  if (dtype == safetensors_dtype::f32 && std::is_same_v<T, bfloat16>) {
    for (std::size_t i = 0; i < count; ++i) {
      float value;
      std::memcpy(&value, source + 4 * i, 4);
      out[i] = convert_to<T>(value);
    }
    return;
  }
  const std::size_t item = item_size(dtype);
  for (std::size_t i = 0; i < count; ++i) {
    const double value = load_as_double(dtype, source + i * item);
    if constexpr (std::is_same_v<T, double>) {
      out[i] = value;
    } else {
      out[i] = convert_to<T>(static_cast<float>(value));  // F64 to bfloat16 / half rounds twice, via float
    }
  }
}

/// The header a writer puts out for tensors already in data order: compact JSON with "__metadata__" first
/// (when given) and the tensors in order, padded with spaces to a multiple of 8 bytes, as the reference
/// pads it.
inline std::string safetensors_header_text(const std::vector<safetensors_tensor_info>& tensors,
                                           const std::map<std::string, std::string>* metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (metadata != nullptr) header["__metadata__"] = *metadata;
  for (const safetensors_tensor_info& t : tensors) {
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = to_string(t.dtype);
    entry["shape"] = t.shape;
    entry["data_offsets"] = {t.begin, t.end};
    header[t.name] = std::move(entry);
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  return text;
}

}  // namespace detail
}  // namespace io
MOECOMP_NAMESPACE_END
