#pragma once
// NumPy .npy files: read format versions 1.0, 2.0 and 3.0, write 1.0 (2.0 only for a header over 64 KiB),
// for float32, float64, int32 and int64 arrays of any number of dimensions. Documentation: docs/io.md.
//
//   npy_array x = io::read_npy("X.npy");                 // any supported dtype, C or Fortran order
//   host_matrix<double> m = x.to_matrix<double>();       // 2-D, converted to double
//   matrix_view<const float> v = x.matrix<float>();      // 2-D float32, no copy
//   io::write_npy("D.npy", distances.view());            // atomic: temporary file + rename
//
// Every malformed input (bad magic, unsupported version or dtype, broken header, truncated data,
// trailing bytes, ...) is an io_error naming the file and the problem; reading never allocates more than
// the input's own size. Writes replace the target atomically: a failed write leaves the old file (or no
// file) behind, never a partial one.
#include <moecomp/core/error.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/input_file.hpp>
#include <moecomp/io/detail/atomic_file.hpp>
#include <moecomp/io/detail/npy_format.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace io {

namespace detail {

inline constexpr std::size_t npy_data_alignment = 64;

struct aligned_delete {
  void operator()(unsigned char* pointer) const noexcept {
    ::operator delete(pointer, std::align_val_t(npy_data_alignment));
  }
};
using aligned_bytes = std::unique_ptr<unsigned char[], aligned_delete>;

inline aligned_bytes allocate_aligned(std::size_t bytes) {
  return aligned_bytes(static_cast<unsigned char*>(::operator new(bytes, std::align_val_t(npy_data_alignment))));
}

/// The element count of a caller-given shape: 0 to 64 non-negative extents whose product (zeros counted
/// as 1) times the item size fits in index_t and size_t; invalid_argument naming `function` otherwise.
inline index_t checked_element_count(const char* function, npy_dtype dtype, const std::vector<index_t>& shape) {
  MOECOMP_EXPECTS(shape.size() <= npy_max_ndim, function, ": shape must have at most ", npy_max_ndim,
                  " dimensions, got ", shape.size());
  const auto limit = static_cast<index_t>(std::min<std::uint64_t>(
      static_cast<std::uint64_t>(std::numeric_limits<index_t>::max()), std::numeric_limits<std::size_t>::max()));
  index_t product = 1;
  bool empty = false;
  for (index_t extent : shape) {
    MOECOMP_EXPECTS(extent >= 0, function, ": shape ", shape_repr(shape), " has a negative extent");
    const index_t factor = extent == 0 ? 1 : extent;
    MOECOMP_EXPECTS(product <= limit / factor / static_cast<index_t>(item_size(dtype)), function,
                    ": the byte count of shape ", shape_repr(shape), " overflows");
    product *= factor;
    empty = empty || extent == 0;
  }
  return empty ? 0 : product;
}

/// checked_element_count, and `data` may be null only for an empty array.
inline index_t checked_write_count(const char* function, npy_dtype dtype, const std::vector<index_t>& shape,
                                   const void* data) {
  const index_t count = checked_element_count(function, dtype, shape);
  MOECOMP_EXPECTS(count == 0 || data != nullptr, function, ": data is null but shape ", shape_repr(shape), " has ",
                  count, " elements");
  return count;
}

template <class T>
constexpr void check_npy_element() {
  static_assert(is_npy_element_v<T>, "moecomp::io npy: the element type must be float, double, std::int32_t or "
                                     "std::int64_t");
}

}  // namespace detail

class npy_array;
namespace detail {
template <class Source>
npy_array decode_npy(Source& source, const char* function, const std::string& name);
}  // namespace detail

/// An owning N-d array as read from a .npy file: C order, host byte order, data aligned to 64 bytes.
/// Copies are deep; a default-constructed or moved-from array is empty (ndim 0, size 0, data null).
class npy_array {
 public:
  static constexpr std::size_t alignment = detail::npy_data_alignment;

  npy_array() noexcept = default;

  /// A zero-filled array of `dtype` and `shape` (every extent >= 0, at most 64 of them; shape {} is a
  /// 0-d array with one element). `source` names it in error messages.
  npy_array(npy_dtype dtype, std::vector<index_t> shape, std::string source = {})
      : dtype_(dtype), shape_(std::move(shape)), source_(std::move(source)) {
    size_ = detail::checked_element_count("npy_array", dtype_, shape_);
    storage_ = detail::allocate_aligned(byte_size());
    if (byte_size() > 0) std::memset(storage_.get(), 0, byte_size());
  }

  npy_array(const npy_array& other)
      : dtype_(other.dtype_), shape_(other.shape_), size_(other.size_), source_(other.source_) {
    if (other.storage_) {
      storage_ = detail::allocate_aligned(byte_size());
      if (byte_size() > 0) std::memcpy(storage_.get(), other.storage_.get(), byte_size());
    }
  }
  npy_array(npy_array&& other) noexcept
      : dtype_(other.dtype_),
        shape_(std::move(other.shape_)),
        size_(other.size_),
        storage_(std::move(other.storage_)),
        source_(std::move(other.source_)) {
    other.make_empty();
  }
  npy_array& operator=(const npy_array& other) {
    if (this != &other) *this = npy_array(other);
    return *this;
  }
  npy_array& operator=(npy_array&& other) noexcept {
    if (this != &other) {
      dtype_ = other.dtype_;
      shape_ = std::move(other.shape_);
      size_ = other.size_;
      storage_ = std::move(other.storage_);
      source_ = std::move(other.source_);
      other.make_empty();
    }
    return *this;
  }
  ~npy_array() = default;

  npy_dtype dtype() const noexcept { return dtype_; }
  const std::vector<index_t>& shape() const noexcept { return shape_; }
  index_t ndim() const noexcept { return static_cast<index_t>(shape_.size()); }
  /// Number of elements: the product of the shape (1 for a 0-d array).
  index_t size() const noexcept { return size_; }
  std::size_t item_size() const noexcept { return io::item_size(dtype_); }
  std::size_t byte_size() const noexcept { return static_cast<std::size_t>(size_) * item_size(); }
  /// The elements in C order, host byte order; 64-byte aligned.
  const void* data() const noexcept { return storage_.get(); }
  void* data() noexcept { return storage_.get(); }
  /// The file path or source name it was read from (empty if built in memory).
  const std::string& source() const noexcept { return source_; }

  /// Whether the elements are exactly of type T.
  template <class T>
  bool holds() const noexcept {
    detail::check_npy_element<T>();
    return dtype_ == npy_dtype_of<T>::value;
  }

  /// A view of a 1-D array of exactly T (no conversion); invalid_argument otherwise.
  template <class T>
  vector_view<const T> vector() const {
    check_view<T>("vector", 1);
    return size_ == 0 ? vector_view<const T>() : vector_view<const T>(static_cast<const T*>(data()), size_, 1);
  }
  template <class T>
  vector_view<T> vector() {
    check_view<T>("vector", 1);
    return size_ == 0 ? vector_view<T>() : vector_view<T>(static_cast<T*>(data()), size_, 1);
  }
  /// A view of a 2-D array of exactly T (no conversion); invalid_argument otherwise.
  template <class T>
  matrix_view<const T> matrix() const {
    check_view<T>("matrix", 2);
    return matrix_view<const T>(static_cast<const T*>(data()), shape_[0], shape_[1], shape_[1]);
  }
  template <class T>
  matrix_view<T> matrix() {
    check_view<T>("matrix", 2);
    return matrix_view<T>(static_cast<T*>(data()), shape_[0], shape_[1], shape_[1]);
  }

  /// A copy of a 2-D array converted to T (see "Conversions" in docs/io.md). Arrays of other ndim are
  /// refused with invalid_argument: a 1-D array is not silently taken as a column or a row.
  template <class T>
  host_matrix<T> to_matrix() const {
    detail::check_npy_element<T>();
    check_ndim("to_matrix", npy_dtype_of<T>::value, 2);
    host_matrix<T> result(shape_[0], shape_[1]);
    convert_into(result.data(), "to_matrix");
    return result;
  }
  /// A copy of a 1-D array converted to T; other ndim are refused with invalid_argument.
  template <class T>
  host_vector<T> to_vector() const {
    detail::check_npy_element<T>();
    check_ndim("to_vector", npy_dtype_of<T>::value, 1);
    host_vector<T> result(size_);
    convert_into(result.data(), "to_vector");
    return result;
  }
  /// A copy of all elements in C order, any ndim (0-d: one element), converted to T.
  template <class T>
  host_vector<T> to_flat_vector() const {
    detail::check_npy_element<T>();
    host_vector<T> result(size_);
    convert_into(result.data(), "to_flat_vector");
    return result;
  }

 private:
  struct adopt_tag {};
  npy_array(adopt_tag, npy_dtype dtype, std::vector<index_t> shape, index_t size, detail::aligned_bytes storage,
            std::string source) noexcept
      : dtype_(dtype), shape_(std::move(shape)), size_(size), storage_(std::move(storage)), source_(std::move(source)) {}

  template <class Source>
  friend npy_array detail::decode_npy(Source& source, const char* function, const std::string& name);

  void make_empty() noexcept {
    shape_.clear();
    size_ = 0;
  }

  std::string holder() const { return source_.empty() ? std::string("the array") : "'" + source_ + "'"; }

  template <class T>
  void check_view(const char* function, index_t wanted_ndim) const {
    detail::check_npy_element<T>();
    const npy_dtype wanted = npy_dtype_of<T>::value;
    MOECOMP_EXPECTS(dtype_ == wanted && ndim() == wanted_ndim, "npy_array::", function, "<", to_string(wanted),
                    ">: ", holder(), " holds a ", ndim(), "-D ", to_string(dtype_), " array of shape ",
                    detail::shape_repr(shape_), "; a ", wanted_ndim, "-D ", to_string(wanted),
                    " array is needed (use to_", function, "<T>() to convert)");
  }

  void check_ndim(const char* function, npy_dtype wanted, index_t wanted_ndim) const {
    MOECOMP_EXPECTS(ndim() == wanted_ndim, "npy_array::", function, "<", to_string(wanted), ">: ", holder(),
                    " holds a ", ndim(), "-D array of shape ", detail::shape_repr(shape_), "; a ", wanted_ndim,
                    "-D array is needed");
  }

  // Conversions never invoke undefined behaviour: float64 -> float32 rounds to nearest and overflows to
  // +-inf as IEEE does; floats -> integers must be finite, integral and in range; int64 -> int32 must be
  // in range; integers -> floats round to nearest. Anything else is invalid_argument naming the element.
  template <class To, class From>
  void convert_typed(const From* in, To* out, const char* function) const {
    const auto n = static_cast<std::size_t>(size_);
    if constexpr (std::is_same_v<To, From>) {
      if (n > 0) std::memcpy(out, in, n * sizeof(To));
    } else if constexpr (std::is_floating_point_v<To>) {
      for (std::size_t k = 0; k < n; ++k) {
        if constexpr (std::is_same_v<To, float> && std::is_same_v<From, double>) {
          // Values at or beyond FLT_MAX + half an ulp round to infinity (the cast itself would be UB).
          constexpr double overflow = 0x1.ffffffp+127;
          const double x = in[k];
          out[k] = std::fabs(x) >= overflow ? std::copysign(std::numeric_limits<float>::infinity(), static_cast<float>(x))
                                            : static_cast<float>(x);
        } else {
          out[k] = static_cast<To>(in[k]);
        }
      }
    } else if constexpr (std::is_floating_point_v<From>) {
      // Exact bounds of To as doubles: [-2^(bits-1), 2^(bits-1)).
      constexpr double upper = std::is_same_v<To, std::int32_t> ? 0x1p31 : 0x1p63;
      for (std::size_t k = 0; k < n; ++k) {
        const double x = static_cast<double>(in[k]);
        MOECOMP_EXPECTS(std::isfinite(x) && std::trunc(x) == x && x >= -upper && x < upper, "npy_array::", function,
                        "<", to_string(npy_dtype_of<To>::value), ">: ", holder(), " element ", k, " (", x,
                        ") is not an integer representable as ", to_string(npy_dtype_of<To>::value));
        out[k] = static_cast<To>(x);
      }
    } else if constexpr (sizeof(To) >= sizeof(From)) {
      for (std::size_t k = 0; k < n; ++k) out[k] = static_cast<To>(in[k]);
    } else {
      for (std::size_t k = 0; k < n; ++k) {
        MOECOMP_EXPECTS(in[k] >= std::numeric_limits<To>::min() && in[k] <= std::numeric_limits<To>::max(),
                        "npy_array::", function, "<", to_string(npy_dtype_of<To>::value), ">: ", holder(),
                        " element ", k, " (", in[k], ") is out of range for ", to_string(npy_dtype_of<To>::value));
        out[k] = static_cast<To>(in[k]);
      }
    }
  }

  template <class To>
  void convert_into(To* out, const char* function) const {
    switch (dtype_) {
      case npy_dtype::float32: convert_typed(static_cast<const float*>(data()), out, function); break;
      case npy_dtype::float64: convert_typed(static_cast<const double*>(data()), out, function); break;
      case npy_dtype::int32: convert_typed(static_cast<const std::int32_t*>(data()), out, function); break;
      case npy_dtype::int64: convert_typed(static_cast<const std::int64_t*>(data()), out, function); break;
    }
  }

  npy_dtype dtype_ = npy_dtype::float64;
  std::vector<index_t> shape_;
  index_t size_ = 0;
  detail::aligned_bytes storage_;
  std::string source_;
};

namespace detail {

/// Bytes in memory, read front to back.
class npy_memory_source {
 public:
  npy_memory_source(const void* bytes, std::size_t size) : bytes_(static_cast<const unsigned char*>(bytes)), size_(size) {}
  std::uint64_t total() const noexcept { return size_; }
  /// Reads exactly `count` bytes; the decoder never asks for more than total() allows.
  void read(void* target, std::size_t count) {
    if (count == 0) return;
    std::memcpy(target, bytes_ + position_, count);
    position_ += count;
  }

 private:
  const unsigned char* bytes_;
  std::size_t size_;
  std::size_t position_ = 0;
};

/// A regular file of known size, read front to back.
class npy_file_source {
 public:
  explicit npy_file_source(moecomp::detail::input_file& file) : file_(file) {}
  std::uint64_t total() const noexcept { return file_.size(); }
  void read(void* target, std::size_t count) { file_.read(target, count); }

 private:
  moecomp::detail::input_file& file_;
};

/// Elements per chunk when a write converts or gathers: bounded extra memory whatever the array's size.
inline constexpr index_t npy_write_chunk = 8192;

/// Appends `count` elements at `values` (stride `stride`) to `sink` as Stored: straight from memory when
/// they are contiguous and already Stored, else converted or gathered chunk by chunk.
template <class Stored, class Sink, class T>
void write_npy_run(Sink& sink, const T* values, index_t count, index_t stride) {
  if (count <= 0) return;
  if constexpr (std::is_same_v<Stored, T>) {
    if (stride == 1) {
      sink.write(values, static_cast<std::size_t>(count) * sizeof(T));
      return;
    }
  }
  Stored buffer[npy_write_chunk];
  for (index_t first = 0; first < count; first += npy_write_chunk) {
    const index_t n = std::min(npy_write_chunk, count - first);
    for (index_t k = 0; k < n; ++k) buffer[k] = static_cast<Stored>(values[(first + k) * stride]);
    sink.write(buffer, static_cast<std::size_t>(n) * sizeof(Stored));
  }
}

template <class Stored, class Sink, class T>
void write_npy_rows(Sink& sink, matrix_view<const T> m) {
  if (m.empty()) return;
  if (m.is_contiguous()) {
    write_npy_run<Stored>(sink, m.data(), m.size(), 1);
  } else {
    for (index_t i = 0; i < m.rows(); ++i) write_npy_run<Stored>(sink, m.row_ptr(i), m.cols(), 1);
  }
}

template <class Stored, class Sink, class T>
void write_npy_elements(Sink& sink, vector_view<const T> v) {
  if (v.empty()) return;
  write_npy_run<Stored>(sink, v.data(), v.size(), v.is_contiguous() ? 1 : v.stride());
}

struct npy_string_sink {
  std::string& bytes;
  void write(const void* data, std::size_t count) { bytes.append(static_cast<const char*>(data), count); }
};

}  // namespace detail

namespace detail {
/// Decodes a whole .npy from `source` (see npy_memory_source for the interface): one pass, one
/// allocation of the data's size (two for a Fortran-order array of ndim >= 2, which is reordered).
template <class Source>
npy_array decode_npy(Source& source, const char* function, const std::string& name) {
  const npy_error_context where{function, &name};
  const std::uint64_t total = source.total();
  unsigned char preamble_bytes[detail::npy_max_preamble_size] = {};
  std::size_t available = static_cast<std::size_t>(std::min<std::uint64_t>(total, 8));
  source.read(preamble_bytes, available);
  if (available == 8) {
    const std::size_t wanted = preamble_bytes[6] == 1 ? 10 : 12;
    const auto extra = static_cast<std::size_t>(std::min<std::uint64_t>(total, wanted) - 8);
    source.read(preamble_bytes + 8, extra);
    available += extra;
  }
  const detail::npy_preamble preamble = detail::parse_npy_preamble(preamble_bytes, available, total, where);

  std::string header_text(preamble.header_bytes, '\0');
  source.read(header_text.data(), header_text.size());
  detail::npy_header header =
      detail::parse_npy_header(header_text.data(), header_text.size(), preamble.major_version, where);

  // Sizes are checked against what the source holds before anything is allocated.
  const std::uint64_t data_offset = preamble.size + preamble.header_bytes;
  const std::uint64_t remaining = total - data_offset;
  if (remaining < header.data_bytes)
    where.fail("truncated data: shape ", detail::shape_repr(header.shape), " of ", to_string(header.dtype), " needs ",
               header.data_bytes, " bytes after the ", data_offset, "-byte header, but only ", remaining,
               " remain");
  if (remaining > header.data_bytes)
    where.fail(remaining - header.data_bytes, " unexpected trailing bytes after the ", header.data_bytes,
               " bytes of data of shape ", detail::shape_repr(header.shape), " (", to_string(header.dtype), ")");

  const std::size_t size = item_size(header.dtype);
  const auto count = static_cast<std::size_t>(header.element_count);
  detail::aligned_bytes storage = detail::allocate_aligned(header.data_bytes);
  if (header.fortran_order && header.shape.size() >= 2 && count > 0) {
    detail::aligned_bytes fortran = detail::allocate_aligned(header.data_bytes);
    source.read(fortran.get(), header.data_bytes);
    if (header.byte_swapped) detail::swap_bytes(fortran.get(), count, size);
    detail::fortran_to_c_order(fortran.get(), storage.get(), header.shape, size);
  } else {
    source.read(storage.get(), header.data_bytes);
    if (header.byte_swapped) detail::swap_bytes(storage.get(), count, size);
  }
  return npy_array(npy_array::adopt_tag{}, header.dtype, std::move(header.shape), header.element_count,
                   std::move(storage), name);
}
}  // namespace detail

/// Parses a complete .npy held in memory. `source_name` names it in error messages and becomes the
/// result's source(). Any malformed input is an io_error; nothing is read outside [bytes, bytes + size).
inline npy_array parse_npy(const void* bytes, std::size_t size, const std::string& source_name) {
  MOECOMP_EXPECTS(size == 0 || bytes != nullptr, "parse_npy: bytes is null but size is ", size);
  detail::npy_memory_source source(bytes, size);
  return detail::decode_npy(source, "parse_npy", source_name);
}
inline npy_array parse_npy(const std::string& bytes, const std::string& source_name) {
  return parse_npy(bytes.data(), bytes.size(), source_name);
}

/// Reads the .npy file at `path`, a regular file (a FIFO, a device or a directory is refused before
/// anything is read). Errors (cannot open or read, not a regular file, malformed content) are io_errors
/// that name the path.
inline npy_array read_npy(const std::string& path) {
  moecomp::detail::input_file file(path, "read_npy");
  detail::npy_file_source source(file);
  return detail::decode_npy(source, "read_npy", path);
}

// ---------------------------------------------------------------------------------------------- writing

/// The bytes of a .npy file (format 1.0, C order, host byte order) holding `shape` elements of `dtype`
/// at `data` in C order. Exactly what numpy.save writes for the same array.
inline std::string serialize_npy(npy_dtype dtype, const std::vector<index_t>& shape, const void* data) {
  const index_t count = detail::checked_write_count("serialize_npy", dtype, shape, data);
  std::string bytes = detail::npy_header_bytes(dtype, shape);
  if (count > 0) bytes.append(static_cast<const char*>(data), static_cast<std::size_t>(count) * item_size(dtype));
  return bytes;
}
inline std::string serialize_npy(const npy_array& array) {
  return serialize_npy(array.dtype(), array.shape(), array.data());
}
/// A rows x cols matrix (any row stride, const or mutable elements of float, double, int32, int64).
template <class U>
std::string serialize_npy(matrix_view<U, host_memory> m) {
  using T = std::remove_const_t<U>;
  detail::check_npy_element<T>();
  std::string bytes = detail::npy_header_bytes(npy_dtype_of<T>::value, {m.rows(), m.cols()});
  detail::npy_string_sink sink{bytes};
  detail::write_npy_rows<T, detail::npy_string_sink, T>(sink, m);
  return bytes;
}
/// A 1-D array (any stride).
template <class U>
std::string serialize_npy(vector_view<U, host_memory> v) {
  using T = std::remove_const_t<U>;
  detail::check_npy_element<T>();
  std::string bytes = detail::npy_header_bytes(npy_dtype_of<T>::value, {v.size()});
  detail::npy_string_sink sink{bytes};
  detail::write_npy_elements<T, detail::npy_string_sink, T>(sink, v);
  return bytes;
}

/// How a write is done. `hooks` sees the temporary file (for a program that removes it on a signal).
/// `dtype`, if set, is the dtype stored in the file: float32 and float64 views may be stored as either (the
/// conversion streams in bounded chunks, no full copy); integer views only as themselves.
struct write_options {
  temporary_file_hooks hooks{};
  std::optional<npy_dtype> dtype{};
};

namespace detail {
struct staged_file_access;
}

/// A complete .npy in a temporary file beside its target, not yet in place (see stage_npy). commit()
/// renames it over the target; destroying it uncommitted removes it and leaves the target as it was.
/// Staging several files, then committing them one after another, writes all of them or, when any
/// staging fails, none.
class staged_file {
 public:
  staged_file(staged_file&&) noexcept = default;
  staged_file& operator=(staged_file&&) noexcept = default;
  ~staged_file() = default;

  /// Renames the temporary over the target; an io_error (and the temporary removed) if that fails.
  void commit() {
    MOECOMP_EXPECTS(writer_ != nullptr, "staged_file::commit: the file was already committed");
    writer_->publish();
    writer_.reset();
  }
  bool committed() const noexcept { return writer_ == nullptr; }
  /// The path the file was staged for.
  const std::string& path() const noexcept { return path_; }

 private:
  friend struct detail::staged_file_access;
  staged_file(std::unique_ptr<detail::atomic_file_writer> writer, std::string path)
      : writer_(std::move(writer)), path_(std::move(path)) {}

  std::unique_ptr<detail::atomic_file_writer> writer_;
  std::string path_;
};

namespace detail {

struct staged_file_access {
  static staged_file make(std::unique_ptr<atomic_file_writer> writer, const std::string& path) {
    return staged_file(std::move(writer), path);
  }
};

/// The dtype a view of T is stored as under `options` (float32 <-> float64 only); invalid_argument
/// naming `function` for any other conversion.
template <class T>
npy_dtype stored_dtype(const char* function, const write_options& options) {
  const npy_dtype own = npy_dtype_of<T>::value;
  if (!options.dtype || *options.dtype == own) return own;
  const bool floating = std::is_floating_point_v<T> &&
                        (*options.dtype == npy_dtype::float32 || *options.dtype == npy_dtype::float64);
  MOECOMP_EXPECTS(floating, function, ": options.dtype must be ", to_string(own),
                  " or, for a floating-point array, float32 or float64, got ", to_string(*options.dtype));
  return *options.dtype;
}

/// Stages the header of `shape` and the elements of a view of T, which `elements(sink, Stored{})` writes as
/// Stored: T itself, or for a float view the other float type when options.dtype asks for it (the only
/// conversion stored_dtype allows).
template <class T, class Elements>
staged_file stage_elements(const std::string& path, const std::vector<index_t>& shape, const write_options& options,
                           Elements&& elements) {
  check_npy_element<T>();
  const npy_dtype dtype = stored_dtype<T>("write_npy", options);
  const std::string header = npy_header_bytes(dtype, shape);
  auto file = std::make_unique<atomic_file_writer>(path, "write_npy", options.hooks);
  file->write(header.data(), header.size());
  bool converted = false;
  if constexpr (std::is_floating_point_v<T>) {
    using other = std::conditional_t<std::is_same_v<T, float>, double, float>;
    converted = dtype != npy_dtype_of<T>::value;
    if (converted) elements(*file, other{});
  }
  if (!converted) elements(*file, T{});
  file->finish();
  return staged_file_access::make(std::move(file), path);
}

}  // namespace detail

/// Writes an N-d array (C order at `data`) to a temporary file beside `path` and returns it staged, not
/// yet in place. Failures (the target is a directory, a device or a FIFO; the directory is missing or
/// read-only; the disk is full; a file-size limit) are io_errors that name the path and the cause, with
/// nothing left behind.
inline staged_file stage_npy_bytes(const std::string& path, npy_dtype dtype, const std::vector<index_t>& shape,
                                   const void* data, const write_options& options = {}) {
  const index_t count = detail::checked_write_count("write_npy", dtype, shape, data);
  MOECOMP_EXPECTS(!options.dtype || *options.dtype == dtype, "write_npy: options.dtype must be ", to_string(dtype),
                  " (the data's own dtype) for raw bytes, got ", to_string(*options.dtype));
  const std::string header = detail::npy_header_bytes(dtype, shape);
  auto file = std::make_unique<detail::atomic_file_writer>(path, "write_npy", options.hooks);
  file->write(header.data(), header.size());
  file->write(data, static_cast<std::size_t>(count) * item_size(dtype));
  file->finish();
  return detail::staged_file_access::make(std::move(file), path);
}

/// A rows x cols matrix (any row stride), staged as above.
template <class U>
staged_file stage_npy_matrix(const std::string& path, matrix_view<U, host_memory> m,
                             const write_options& options = {}) {
  using T = std::remove_const_t<U>;
  const matrix_view<const T> values = m;
  return detail::stage_elements<T>(path, {m.rows(), m.cols()}, options, [&](auto& sink, auto stored) {
    detail::write_npy_rows<decltype(stored)>(sink, values);
  });
}

/// A count x rows x cols stack (any strides), staged as above: a 3-D array in C order (the layout numpy and
/// torch give an E x rows x cols stack of experts).
template <class U>
staged_file stage_npy_stack(const std::string& path, matrix_stack_view<U, host_memory> s,
                            const write_options& options = {}) {
  using T = std::remove_const_t<U>;
  const matrix_stack_view<const T> values = s;
  return detail::stage_elements<T>(path, {s.count(), s.rows(), s.cols()}, options, [&](auto& sink, auto stored) {
    for (index_t e = 0; e < values.count(); ++e) detail::write_npy_rows<decltype(stored)>(sink, values[e]);
  });
}

/// A 1-D array (any stride), staged as above.
template <class U>
staged_file stage_npy_vector(const std::string& path, vector_view<U, host_memory> v,
                             const write_options& options = {}) {
  using T = std::remove_const_t<U>;
  const vector_view<const T> values = v;
  return detail::stage_elements<T>(path, {v.size()}, options, [&](auto& sink, auto stored) {
    detail::write_npy_elements<decltype(stored)>(sink, values);
  });
}

/// stage_npy(path, ...) forwards to the functions above by argument type.
template <class U>
staged_file stage_npy(const std::string& path, matrix_view<U, host_memory> m, const write_options& options = {}) {
  return stage_npy_matrix(path, m, options);
}
template <class U>
staged_file stage_npy(const std::string& path, vector_view<U, host_memory> v, const write_options& options = {}) {
  return stage_npy_vector(path, v, options);
}
template <class U>
staged_file stage_npy(const std::string& path, matrix_stack_view<U, host_memory> s, const write_options& options = {}) {
  return stage_npy_stack(path, s, options);
}
inline staged_file stage_npy(const std::string& path, const npy_array& array, const write_options& options = {}) {
  return stage_npy_bytes(path, array.dtype(), array.shape(), array.data(), options);
}

/// Any bytes (a JSON report, a text file), staged as above: `bytes` bytes at `data` in a temporary file beside
/// `path`, with the same rules (a device, FIFO or directory target refused; nothing left behind on failure).
/// `options.dtype` must be unset.
inline staged_file stage_file_bytes(const std::string& path, const void* data, std::size_t bytes,
                                    const write_options& options = {}) {
  MOECOMP_EXPECTS(!options.dtype, "stage_file_bytes: options.dtype must be unset for raw bytes");
  MOECOMP_EXPECTS(data != nullptr || bytes == 0, "stage_file_bytes: data must not be null when bytes is ", bytes);
  auto file = std::make_unique<detail::atomic_file_writer>(path, "stage_file_bytes", options.hooks);
  file->write(data, bytes);
  file->finish();
  return detail::staged_file_access::make(std::move(file), path);
}

/// Writes an N-d array (C order at `data`) to `path`, atomically: the bytes go to a temporary file in the
/// same directory which is renamed over `path` only once complete. On any failure the temporary is
/// removed, `path` is left as it was, and an io_error names the path and the cause.
inline void write_npy(const std::string& path, npy_dtype dtype, const std::vector<index_t>& shape, const void* data,
                      const write_options& options = {}) {
  stage_npy_bytes(path, dtype, shape, data, options).commit();
}
inline void write_npy(const std::string& path, const npy_array& array, const write_options& options = {}) {
  stage_npy(path, array, options).commit();
}
/// Writes a rows x cols matrix (any row stride) atomically, as above.
template <class U>
void write_npy(const std::string& path, matrix_view<U, host_memory> m, const write_options& options = {}) {
  stage_npy_matrix(path, m, options).commit();
}
/// Writes a 1-D array (any stride) atomically, as above.
template <class U>
void write_npy(const std::string& path, vector_view<U, host_memory> v, const write_options& options = {}) {
  stage_npy_vector(path, v, options).commit();
}
/// Writes a count x rows x cols stack (any strides) as a 3-D array atomically, as above.
template <class U>
void write_npy(const std::string& path, matrix_stack_view<U, host_memory> s, const write_options& options = {}) {
  stage_npy_stack(path, s, options).commit();
}

}  // namespace io
MOECOMP_NAMESPACE_END
