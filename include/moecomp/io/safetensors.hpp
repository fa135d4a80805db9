#pragma once
// safetensors files and sharded checkpoints: memory-mapped reads with zero-copy views, atomic writes, and
// model.safetensors.index.json. Needs nlohmann-json (the header's JSON is read with its SAX parser and
// written with its serialiser), as does <moecomp/model/layout.hpp>. Documentation: docs/io.md, "safetensors".
//
//   io::safetensors_file f = io::read_safetensors("model.safetensors");        // checks every rule
//   matrix_view<const bfloat16> w = f.tensor("layers.0.w1").matrix<bfloat16>(); // no copy
//   host_matrix<float> g = f.tensor("gate.weight").to_matrix<float>();          // converted
//   io::write_safetensors("out.safetensors", {io::safetensors_entry::of("w", w)}, {{"format", "pt"}});
//   io::safetensors_checkpoint c = io::open_safetensors_checkpoint("model_dir"); // sharded or not
//
// Reading refuses, as an io_error naming the file and the rule, everything the reference implementation
// (huggingface/safetensors) refuses: a file shorter than 8 bytes, a header length over 100,000,000 or
// beyond the file, a header that is not UTF-8 or not JSON, "__metadata__" that is not a string-to-string
// map, offsets that are not contiguous from 0, a byte length that disagrees with shape x dtype, trailing
// bytes, and arithmetic overflow. It also refuses duplicate keys and dtypes it does not convert (F4, F6,
// F8_E8M0, F8_*FNUZ, C64), by name. Reading touches only the header: tensor bytes are read when used.
//
// A mapped file must not shrink while it is open (on POSIX a read past the new end is a SIGBUS). Views
// stay valid while their file or checkpoint object lives, moves included.
#include <moecomp/core/error.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/core/detail/input_file.hpp>
#include <moecomp/io/safetensors_types.hpp>
#include <moecomp/io/detail/atomic_file.hpp>
#include <moecomp/io/detail/safetensors_format.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace io {

/// One tensor of a file: its header entry and its bytes, without a copy. Valid while the file lives.
class safetensors_tensor {
 public:
  safetensors_tensor(const safetensors_tensor_info& info, const unsigned char* data, const std::string& source) noexcept
      : info_(&info), data_(data), source_(&source) {}

  const safetensors_tensor_info& info() const noexcept { return *info_; }
  const std::string& name() const noexcept { return info_->name; }
  safetensors_dtype dtype() const noexcept { return info_->dtype; }
  const std::vector<index_t>& shape() const noexcept { return info_->shape; }
  index_t ndim() const noexcept { return info_->ndim(); }
  /// The number of elements (1 for a 0-d tensor, 0 when an extent is 0).
  index_t size() const noexcept { return info_->size(); }
  std::uint64_t byte_size() const noexcept { return info_->bytes(); }
  /// The elements in C order, little-endian, at the alignment the file gives them (see matrix()).
  const unsigned char* data() const noexcept { return data_; }
  /// The file it lives in.
  const std::string& source() const noexcept { return *source_; }

  /// Whether the elements are exactly of type T (float for F32, bfloat16 for BF16, ...).
  template <class T>
  bool holds() const noexcept {
    static_assert(is_safetensors_element_v<T>, "safetensors_tensor::holds: T has no safetensors dtype");
    return info_->dtype == safetensors_dtype_of<std::remove_cv_t<T>>::value;
  }

  /// A view of a 1-D tensor of exactly T, without a copy. invalid_argument for another dtype or ndim,
  /// and for data not aligned to T (files written by moecomp or the reference always are; use
  /// to_vector for any file).
  template <class T>
  vector_view<const T> vector() const {
    check_view<T>("vector", 1);
    return size() == 0 ? vector_view<const T>() : vector_view<const T>(typed<T>(), size(), 1);
  }
  /// A view of a 2-D tensor of exactly T, without a copy; the same refusals as vector().
  template <class T>
  matrix_view<const T> matrix() const {
    check_view<T>("matrix", 2);
    return matrix_view<const T>(typed<T>(), shape()[0], shape()[1], shape()[1]);
  }
  /// Matrix `index` of a 3-D tensor of exactly T (a fused expert stack, E x rows x cols), without a copy.
  template <class T>
  matrix_view<const T> slice(index_t index) const {
    check_view<T>("slice", 3);
    MOECOMP_EXPECTS(index >= 0 && index < shape()[0], "safetensors_tensor::slice: index must be in [0, ", shape()[0],
                    ") for tensor '", name(), "', got ", index);
    return matrix_view<const T>(typed<T>() + index * shape()[1] * shape()[2], shape()[1], shape()[2], shape()[2]);
  }

  /// The elements, any ndim, in C order, converted to T (float, double, bfloat16 or half): exact where T
  /// holds the value, rounded to nearest even otherwise. `out` holds size() elements.
  template <class T>
  void convert_into(T* out, index_t count) const {
    static_assert(is_safetensors_conversion_target_v<T>,
                  "safetensors_tensor::convert_into: T must be float, double, bfloat16 or half");
    MOECOMP_EXPECTS(count == size(), "safetensors_tensor::convert_into: count must be the size of tensor '", name(),
                    "', ", size(), ", got ", count);
    MOECOMP_EXPECTS(out != nullptr || count == 0, "safetensors_tensor::convert_into: out must not be null");
    detail::convert_safetensors_elements(dtype(), data_, static_cast<std::size_t>(count), out);
  }
  /// Elements [first, first + count) in C order, converted to T: a piece of a tensor, such as one expert's
  /// matrix of a fused 3-D stack.
  template <class T>
  void convert_into(T* out, index_t count, index_t first) const {
    static_assert(is_safetensors_conversion_target_v<T>,
                  "safetensors_tensor::convert_into: T must be float, double, bfloat16 or half");
    MOECOMP_EXPECTS(first >= 0 && count >= 0 && first <= size() && count <= size() - first,
                    "safetensors_tensor::convert_into: [first, first + count) must lie in the ", size(),
                    " elements of tensor '", name(), "', got first ", first, " and count ", count);
    MOECOMP_EXPECTS(out != nullptr || count == 0, "safetensors_tensor::convert_into: out must not be null");
    detail::convert_safetensors_elements(dtype(), data_ + static_cast<std::size_t>(first) * item_size(dtype()),
                                         static_cast<std::size_t>(count), out);
  }
  /// The index (C order) of the first element that is a NaN or an infinity, or -1 when every element is
  /// finite (always, for integer and boolean dtypes). Reads the stored bits, converts nothing.
  index_t find_non_finite() const noexcept {
    const auto count = static_cast<std::size_t>(size());
    const std::size_t first = detail::first_non_finite(dtype(), data_, count);
    return first == count ? index_t{-1} : static_cast<index_t>(first);
  }
  /// The elements of a 2-D tensor converted to T; other ndim are refused with invalid_argument.
  template <class T>
  host_matrix<T> to_matrix() const {
    check_ndim("to_matrix", 2);
    host_matrix<T> result(shape()[0], shape()[1]);
    convert_into(result.data(), result.size());
    return result;
  }
  /// The elements, any ndim, flattened in C order and converted to T.
  template <class T>
  std::vector<T> to_vector() const {
    std::vector<T> result(static_cast<std::size_t>(size()));
    convert_into(result.data(), size());
    return result;
  }

 private:
  void check_ndim(const char* function, index_t ndim) const {
    MOECOMP_EXPECTS(this->ndim() == ndim, "safetensors_tensor::", function, ": tensor '", name(), "' must have ", ndim,
                    " dimensions, got ", this->ndim());
  }
  template <class T>
  void check_view(const char* function, index_t ndim) const {
    static_assert(is_safetensors_element_v<T>, "safetensors_tensor: T has no safetensors dtype");
    MOECOMP_EXPECTS(holds<T>(), "safetensors_tensor::", function, ": tensor '", name(), "' must be ",
                    to_string(safetensors_dtype_of<std::remove_cv_t<T>>::value), " for this element type, got ",
                    to_string(dtype()), " (to_matrix / to_vector convert)");
    check_ndim(function, ndim);
    MOECOMP_EXPECTS(reinterpret_cast<std::uintptr_t>(data_) % alignof(T) == 0 || size() == 0, "safetensors_tensor::",
                    function, ": tensor '", name(), "' in '", source(), "' must be aligned to ", alignof(T),
                    " bytes for a view, but the file places it at a misaligned offset (to_matrix / to_vector copy)");
  }
  template <class T>
  const T* typed() const noexcept {
    return reinterpret_cast<const T*>(data_);
  }

  const safetensors_tensor_info* info_;
  const unsigned char* data_;
  const std::string* source_;
};

/// A safetensors file, read and checked: the header parsed, the bytes mapped. Movable, not copyable.
class safetensors_file {
 public:
  safetensors_file(safetensors_file&&) noexcept = default;
  safetensors_file& operator=(safetensors_file&&) noexcept = default;
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;

  /// The path (or the name given to parse_safetensors).
  const std::string& source() const noexcept { return *source_; }
  /// Every tensor's header entry, in data order (increasing offsets).
  const std::vector<safetensors_tensor_info>& tensors() const noexcept { return layout_->tensors; }
  /// The names, in data order.
  std::vector<std::string> names() const {
    std::vector<std::string> result;
    result.reserve(tensors().size());
    for (const auto& t : tensors()) result.push_back(t.name);
    return result;
  }
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  /// The entry named `name`, or null.
  const safetensors_tensor_info* find(const std::string& name) const {
    const auto it = layout_->index.find(name);
    return it == layout_->index.end() ? nullptr : &layout_->tensors[it->second];
  }
  /// The tensor named `name`; invalid_argument naming the file when it has none.
  safetensors_tensor tensor(const std::string& name) const {
    const safetensors_tensor_info* info = find(name);
    MOECOMP_EXPECTS(info != nullptr, "safetensors_file::tensor: name must be a tensor of '", source(), "', got '", name,
                    "'");
    return safetensors_tensor(*info, bytes_.data() + data_offset() + info->begin, *source_);
  }
  /// The "__metadata__" map (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const noexcept { return layout_->metadata; }
  /// Whether the header has a "__metadata__" entry (an empty map counts; null does not).
  bool has_metadata() const noexcept { return layout_->has_metadata; }
  /// The header's JSON length (without the 8-byte length field), and where the tensor data starts.
  std::uint64_t header_bytes() const noexcept { return layout_->header_bytes; }
  std::uint64_t data_offset() const noexcept { return detail::safetensors_length_bytes + layout_->header_bytes; }
  std::uint64_t file_bytes() const noexcept { return bytes_.size(); }
  /// Whether the bytes are memory-mapped (read_safetensors on POSIX) rather than held in memory.
  bool memory_mapped() const noexcept { return bytes_.is_mapped(); }
  /// Takes the pages of tensor `name` that were read out of this process's resident set (memory-mapped files
  /// only; the whole pages inside the tensor): for reading a checkpoint layer by layer without the pages read
  /// so far counting against the process. Nothing is lost: views stay valid, a later read maps the pages in
  /// again from the file (or the page cache). invalid_argument when the file has no such tensor.
  void release(const std::string& name) const {
    const safetensors_tensor_info* info = find(name);
    MOECOMP_EXPECTS(info != nullptr, "safetensors_file::release: name must be a tensor of '", source(), "', got '", name,
                    "'");
    bytes_.release_pages(data_offset() + info->begin, info->end - info->begin);
  }

 private:
  friend safetensors_file read_safetensors(const std::string&);
  friend safetensors_file parse_safetensors(const void*, std::size_t, const std::string&);
  safetensors_file(detail::mapped_file bytes, const std::string& source, const char* function)
      : bytes_(std::move(bytes)), source_(std::make_unique<std::string>(source)) {
    layout_ = std::make_unique<detail::safetensors_layout>(
        detail::parse_safetensors_layout(bytes_.data(), bytes_.size(), function, *source_));
  }
  detail::mapped_file bytes_;
  // Behind pointers so that views (which hold addresses of the name and entries) survive moves.
  std::unique_ptr<std::string> source_;
  std::unique_ptr<detail::safetensors_layout> layout_;
};

/// Reads the safetensors file at `path`: maps it (POSIX) or reads it, and checks the header and layout.
/// Any failure is an io_error naming the path.
inline safetensors_file read_safetensors(const std::string& path) {
  return safetensors_file(detail::mapped_file(path, "read_safetensors"), path, "read_safetensors");
}

/// The file held in `data[0, size)`, copied and checked; `source` names it in messages.
inline safetensors_file parse_safetensors(const void* data, std::size_t size, const std::string& source = "<memory>") {
  MOECOMP_EXPECTS(data != nullptr || size == 0, "parse_safetensors: data must not be null for ", size, " bytes");
  return safetensors_file(detail::mapped_file(data, size), source, "parse_safetensors");
}
inline safetensors_file parse_safetensors(const std::string& bytes, const std::string& source = "<memory>") {
  return parse_safetensors(bytes.data(), bytes.size(), source);
}

// ---------------------------------------------------------------------------------------------- writing

/// A tensor to write: a name, a dtype, a shape and the caller's elements in C order (native byte order,
/// which must be little-endian). A 2-D tensor may have rows `row_stride` elements apart (0: contiguous).
struct safetensors_entry {
  std::string name;
  safetensors_dtype dtype = safetensors_dtype::f32;
  std::vector<index_t> shape;
  const void* data = nullptr;
  index_t row_stride = 0;

  /// A matrix view (any row stride) of any element type with a dtype.
  template <class U>
  static safetensors_entry of(std::string name, matrix_view<U, host_memory> m) {
    using T = std::remove_cv_t<U>;
    static_assert(is_safetensors_element_v<T>, "safetensors_entry::of: the element type has no safetensors dtype");
    return {std::move(name), safetensors_dtype_of<T>::value, {m.rows(), m.cols()}, m.data(), m.row_stride()};
  }
  /// A contiguous vector view.
  template <class U>
  static safetensors_entry of(std::string name, vector_view<U, host_memory> v) {
    using T = std::remove_cv_t<U>;
    static_assert(is_safetensors_element_v<T>, "safetensors_entry::of: the element type has no safetensors dtype");
    MOECOMP_EXPECTS(v.size() <= 1 || v.stride() == 1, "safetensors_entry::of: vector '", name,
                    "' must be contiguous (stride 1), got stride ", v.stride());
    return {std::move(name), safetensors_dtype_of<T>::value, {v.size()}, v.data(), 0};
  }
  /// A tensor of another file, as it is (no conversion), under `name`.
  static safetensors_entry of(std::string name, const safetensors_tensor& t) {
    return {std::move(name), t.dtype(), t.shape(), t.data(), 0};
  }
};

/// Whether moecomp writes computed values (merged experts, router rows) as `dtype`: F32, F64, BF16, F16.
inline bool is_float_storage(safetensors_dtype dtype) noexcept {
  return dtype == safetensors_dtype::f32 || dtype == safetensors_dtype::f64 || dtype == safetensors_dtype::bf16 ||
         dtype == safetensors_dtype::f16;
}

/// Appends `count` floats at `values` to `out` as the bytes of a `dtype` tensor (little-endian): F32 as they
/// are, F64 widened exactly, BF16 and F16 rounded once to nearest even (moecomp's bfloat16 and half).
/// invalid_argument for a dtype that is_float_storage refuses.
inline void append_encoded(const float* values, std::size_t count, safetensors_dtype dtype,
                           std::vector<unsigned char>& out) {
  MOECOMP_EXPECTS(is_float_storage(dtype), "append_encoded: dtype must be F32, F64, BF16 or F16, got ",
                  to_string(dtype));
  const std::size_t at = out.size();
  out.resize(at + item_size(dtype) * count);
  unsigned char* to = out.data() + at;
  switch (dtype) {
    case safetensors_dtype::f32: std::memcpy(to, values, 4 * count); return;
    case safetensors_dtype::f64:
      for (std::size_t i = 0; i < count; ++i) {
        const double v = values[i];
        std::memcpy(to + 8 * i, &v, 8);
      }
      return;
    case safetensors_dtype::bf16:
      for (std::size_t i = 0; i < count; ++i) {
        const bfloat16 v(values[i]);
        std::memcpy(to + 2 * i, &v, 2);
      }
      return;
    default:
      for (std::size_t i = 0; i < count; ++i) {
        const half v(values[i]);
        std::memcpy(to + 2 * i, &v, 2);
      }
      return;
  }
}

/// The same for bfloat16 values: a BF16 tensor gets their bytes as they are (no rounding: they are exact), the
/// other float dtypes their float value, encoded as above.
inline void append_encoded(const bfloat16* values, std::size_t count, safetensors_dtype dtype,
                           std::vector<unsigned char>& out) {
  MOECOMP_EXPECTS(is_float_storage(dtype), "append_encoded: dtype must be F32, F64, BF16 or F16, got ",
                  to_string(dtype));
  if (dtype == safetensors_dtype::bf16) {
    const std::size_t at = out.size();
    out.resize(at + 2 * count);
    std::memcpy(out.data() + at, values, 2 * count);
    return;
  }
  constexpr std::size_t chunk = 4096;  // widened a chunk at a time: no float copy of the whole tensor
  float wide[chunk];
  for (std::size_t first = 0; first < count; first += chunk) {
    const std::size_t n = std::min(chunk, count - first);
    for (std::size_t i = 0; i < n; ++i) wide[i] = static_cast<float>(values[first + i]);
    append_encoded(wide, n, dtype, out);
  }
}

/// Rounds `count` floats at `values` in place to what `dtype` stores (BF16, F16: once, to nearest even; other
/// dtypes: unchanged), so that what a caller computes from them is what the written tensor holds.
inline void round_to_storage(float* values, std::size_t count, safetensors_dtype dtype) noexcept {
  if (dtype == safetensors_dtype::bf16)
    for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<float>(bfloat16(values[i]));
  else if (dtype == safetensors_dtype::f16)
    for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<float>(half(values[i]));
}

namespace detail {

/// Checks the entries (invalid_argument naming `function`) and lays them out as the reference's writer
/// does: by decreasing dtype (so every tensor sits at a multiple of its item size), then by name.
inline std::vector<std::pair<safetensors_tensor_info, const safetensors_entry*>> safetensors_plan(
    const char* function, const std::vector<safetensors_entry>& entries,
    const std::map<std::string, std::string>& metadata) {
  auto check_text = [function](const std::string& text, const char* what) {
    MOECOMP_EXPECTS(utf8_invalid_offset(reinterpret_cast<const unsigned char*>(text.data()), text.size()) == text.size(),
                    function, ": ", what, " must be valid UTF-8, got '", text, "'");
  };
  for (const auto& [key, value] : metadata) {
    check_text(key, "a metadata key");
    check_text(value, "a metadata value");
  }
  std::set<std::string> names;
  std::vector<std::pair<safetensors_tensor_info, const safetensors_entry*>> plan;
  plan.reserve(entries.size());
  for (const safetensors_entry& e : entries) {
    check_text(e.name, "a tensor name");
    MOECOMP_EXPECTS(e.name != "__metadata__", function, ": a tensor name must not be \"__metadata__\"");
    MOECOMP_EXPECTS(names.insert(e.name).second, function, ": tensor names must be unique, got '", e.name, "' twice");
    MOECOMP_EXPECTS(e.dtype <= safetensors_dtype::u64, function, ": tensor '", e.name, "' has an invalid dtype code ",
                    static_cast<int>(e.dtype));
    std::uint64_t elements = 1;
    bool empty = false;
    for (index_t extent : e.shape) {
      MOECOMP_EXPECTS(extent >= 0, function, ": tensor '", e.name, "' has a negative extent ", extent);
      const auto x = static_cast<std::uint64_t>(extent == 0 ? 1 : extent);
      MOECOMP_EXPECTS(elements <= (std::uint64_t{1} << 62) / x / item_size(e.dtype), function, ": tensor '", e.name,
                      "': its byte count overflows");
      elements *= x;
      empty = empty || extent == 0;
    }
    if (empty) elements = 0;
    MOECOMP_EXPECTS(elements == 0 || e.data != nullptr, function, ": tensor '", e.name, "' has ", elements,
                    " elements but null data");
    if (e.row_stride != 0) {
      MOECOMP_EXPECTS(e.shape.size() == 2, function, ": tensor '", e.name,
                      "': row_stride applies to 2-D tensors only, got ", e.shape.size(), " dimensions");
      MOECOMP_EXPECTS(e.row_stride >= e.shape[1], function, ": tensor '", e.name, "': row_stride must be >= its ",
                      e.shape[1], " columns, got ", e.row_stride);
    }
    safetensors_tensor_info info;
    info.name = e.name;
    info.dtype = e.dtype;
    info.shape = e.shape;
    info.end = elements * item_size(e.dtype);  // the length, for now
    plan.emplace_back(std::move(info), &e);
  }
  std::sort(plan.begin(), plan.end(), [](const auto& a, const auto& b) {
    if (a.first.dtype != b.first.dtype) return a.first.dtype > b.first.dtype;
    return a.first.name < b.first.name;
  });
  std::uint64_t offset = 0;
  for (auto& [info, entry] : plan) {
    const std::uint64_t length = info.end;
    info.begin = offset;
    info.end = offset + length;
    offset += length;
  }
  return plan;
}

/// Writes the planned tensors' bytes through `sink(const void*, size_t)`, row by row for strided views.
template <class Sink>
void write_safetensors_data(const std::vector<std::pair<safetensors_tensor_info, const safetensors_entry*>>& plan,
                            Sink&& sink) {
  for (const auto& [info, entry] : plan) {
    const std::size_t length = static_cast<std::size_t>(info.end - info.begin);
    if (length == 0) continue;
    const auto* bytes = static_cast<const unsigned char*>(entry->data);
    if (entry->row_stride == 0 || entry->row_stride == entry->shape[1]) {
      sink(bytes, length);
      continue;
    }
    const std::size_t row = static_cast<std::size_t>(entry->shape[1]) * item_size(info.dtype);
    const std::size_t stride = static_cast<std::size_t>(entry->row_stride) * item_size(info.dtype);
    for (index_t r = 0; r < entry->shape[0]; ++r) sink(bytes + static_cast<std::size_t>(r) * stride, row);
  }
}

/// A file ready to be written: the tensors in data order and the header, every check done.
struct safetensors_prepared {
  std::vector<std::pair<safetensors_tensor_info, const safetensors_entry*>> plan;
  std::string header;
  std::uint64_t file_bytes() const noexcept { return 8 + header.size() + (plan.empty() ? 0 : plan.back().first.end); }
};

inline safetensors_prepared prepare_safetensors(const char* function, const std::vector<safetensors_entry>& entries,
                                                const std::map<std::string, std::string>& metadata) {
  safetensors_prepared prepared;
  prepared.plan = safetensors_plan(function, entries, metadata);
  std::vector<safetensors_tensor_info> infos;
  infos.reserve(prepared.plan.size());
  for (const auto& step : prepared.plan) infos.push_back(step.first);
  prepared.header = safetensors_header_text(infos, metadata.empty() ? nullptr : &metadata);
  MOECOMP_EXPECTS(prepared.header.size() <= safetensors_max_header_bytes, function, ": the header would have ",
                  prepared.header.size(), " bytes, more than the format's limit of ", safetensors_max_header_bytes);
  return prepared;
}

/// Writes a prepared file through `sink(const void*, size_t)`; returns its size.
template <class Sink>
std::uint64_t emit_safetensors(const safetensors_prepared& prepared, Sink&& sink) {
  unsigned char length[8];
  const auto n = static_cast<std::uint64_t>(prepared.header.size());
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(n >> (8 * i));
  sink(length, 8);
  sink(prepared.header.data(), prepared.header.size());
  write_safetensors_data(prepared.plan, sink);
  return prepared.file_bytes();
}

}  // namespace detail

/// The bytes of a safetensors file holding `entries`, with `metadata` as "__metadata__" (none when empty).
/// The layout is the reference writer's: tensors by decreasing dtype then by name, the header padded with
/// spaces to a multiple of 8 bytes. invalid_argument for a bad entry (a duplicate, "__metadata__" or
/// non-UTF-8 name, a negative extent, null data, an overflowing size).
inline std::string serialize_safetensors(const std::vector<safetensors_entry>& entries,
                                         const std::map<std::string, std::string>& metadata = {}) {
  const detail::safetensors_prepared prepared = detail::prepare_safetensors("serialize_safetensors", entries, metadata);
  std::string bytes;
  bytes.reserve(static_cast<std::size_t>(prepared.file_bytes()));
  detail::emit_safetensors(prepared, [&bytes](const void* p, std::size_t n) { bytes.append(static_cast<const char*>(p), n); });
  return bytes;
}

/// Writes `entries` to `path` atomically (temporary file, then rename; see docs/io.md, "Atomicity"), with
/// serialize_safetensors's layout, streaming each tensor from the caller's memory. Returns the file's size.
inline std::uint64_t write_safetensors(const std::string& path, const std::vector<safetensors_entry>& entries,
                                       const std::map<std::string, std::string>& metadata = {},
                                       const temporary_file_hooks& hooks = {}) {
  // Everything is checked before the temporary exists, so that misuse leaves nothing behind.
  const detail::safetensors_prepared prepared = detail::prepare_safetensors("write_safetensors", entries, metadata);
  detail::atomic_file_writer writer(path, "write_safetensors", hooks);
  const std::uint64_t size =
      detail::emit_safetensors(prepared, [&writer](const void* p, std::size_t n) { writer.write(p, n); });
  writer.commit();
  return size;
}

// ------------------------------------------------------------------------------------ sharded checkpoints

/// A checkpoint: one safetensors file, or the shards a model.safetensors.index.json names. Every shard is
/// mapped and checked when the checkpoint opens; a tensor is found through the index's weight_map.
class safetensors_checkpoint {
 public:
  safetensors_checkpoint(safetensors_checkpoint&&) noexcept = default;
  safetensors_checkpoint& operator=(safetensors_checkpoint&&) noexcept = default;

  /// The index file, or the single file when there is no index.
  const std::string& source() const noexcept { return source_; }
  bool sharded() const noexcept { return sharded_; }
  /// Every tensor name, sorted.
  const std::vector<std::string>& names() const noexcept { return names_; }
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  /// The tensor named `name` (a view into its shard); invalid_argument when the checkpoint has none.
  safetensors_tensor tensor(const std::string& name) const {
    const auto it = where_.find(name);
    MOECOMP_EXPECTS(it != where_.end(), "safetensors_checkpoint::tensor: name must be a tensor of '", source_,
                    "', got '", name, "'");
    return shards_[it->second].tensor(name);
  }
  const safetensors_tensor_info& info(const std::string& name) const {
    const auto it = where_.find(name);
    MOECOMP_EXPECTS(it != where_.end(), "safetensors_checkpoint::info: name must be a tensor of '", source_, "', got '",
                    name, "'");
    return *shards_[it->second].find(name);
  }
  /// The shard files, in the order the index first names them.
  const std::vector<safetensors_file>& shards() const noexcept { return shards_; }
  /// safetensors_file::release for the shard holding `name`.
  void release(const std::string& name) const {
    const auto it = where_.find(name);
    MOECOMP_EXPECTS(it != where_.end(), "safetensors_checkpoint::release: name must be a tensor of '", source_,
                    "', got '", name, "'");
    shards_[it->second].release(name);
  }
  /// The first shard's "__metadata__" (Hugging Face writes {"format": "pt"} into every shard).
  const std::map<std::string, std::string>& metadata() const noexcept { return shards_.front().metadata(); }
  /// The sum of every tensor's byte count.
  std::uint64_t tensor_bytes() const {
    std::uint64_t total = 0;
    for (const auto& [name, shard] : where_) total += shards_[shard].find(name)->bytes();
    return total;
  }

 private:
  friend safetensors_checkpoint open_safetensors_checkpoint(const std::string&);
  safetensors_checkpoint() = default;
  std::string source_;
  bool sharded_ = false;
  std::vector<safetensors_file> shards_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, std::size_t> where_;
};

/// The largest config.json, checkpoint index (*.index.json) or layout file moecomp reads: 64 MiB. The whole
/// text of such a file is parsed into a JSON tree; real ones are a few kilobytes (the index of a model of a
/// thousand shards, a few megabytes).
inline constexpr std::uint64_t text_file_limit = std::uint64_t{64} << 20;

/// One entry of a checkpoint index's "weight_map": a tensor and the shard file that holds it, as the index
/// names it (relative to the index's directory).
struct checkpoint_index_entry {
  std::string tensor;
  std::string shard;
};

namespace detail {

[[noreturn]] inline void index_fail(const char* function, const std::string& path, const std::string& problem) {
  MOECOMP_FAIL(error_kind::io_error, function, ": '", path, "' is not a valid checkpoint index: ", problem);
}

/// A shard's file name from the index: relative, inside the index's directory (no ".." component).
inline void check_shard_name(const char* function, const std::string& index_path, const std::string& shard) {
  namespace fs = std::filesystem;
  const fs::path relative(shard);
  if (shard.empty() || relative.is_absolute() || relative.has_root_name() || relative.has_root_directory())
    index_fail(function, index_path, "a shard must be a relative file name, got '" + shard + "'");
  for (const fs::path& part : relative)
    if (part == "..")
      index_fail(function, index_path, "a shard must lie inside the index's directory, got '" + shard + "'");
}

inline std::vector<checkpoint_index_entry> parse_checkpoint_index(const char* text, std::size_t size,
                                                                  const std::string& source, const char* function) {
  const auto index = nlohmann::json::parse(text, text + size, nullptr, false);
  if (index.is_discarded()) index_fail(function, source, "it is not valid JSON");
  if (!index.is_object()) index_fail(function, source, "it must be a JSON object");
  const auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object())
    index_fail(function, source, "it must have a \"weight_map\" object (tensor name to shard file)");
  if (map->empty()) index_fail(function, source, "\"weight_map\" is empty");
  std::vector<checkpoint_index_entry> entries;
  entries.reserve(map->size());
  for (auto it = map->begin(); it != map->end(); ++it) {
    if (!it.value().is_string())
      index_fail(function, source, "\"weight_map\" must map names to file names, but '" + it.key() + "' does not");
    checkpoint_index_entry entry{it.key(), it.value().get<std::string>()};
    check_shard_name(function, source, entry.shard);
    entries.push_back(std::move(entry));
  }
  return entries;
}

/// Whether something exists at `path` (a link that leads nowhere counts: it is there, and broken).
inline bool path_is_taken(const std::filesystem::path& path) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::symlink_status(path, ec);
  return !ec && std::filesystem::exists(status);
}

}  // namespace detail

/// Parses the text of a checkpoint index (model.safetensors.index.json): a JSON object whose "weight_map"
/// object maps each tensor name to the shard file holding it, a relative name inside the index's directory
/// (no absolute path, no ".." component). Other keys ("metadata") are ignored. The entries come in name
/// order. Any other text is an io_error naming `source`; no file is opened.
inline std::vector<checkpoint_index_entry> parse_checkpoint_index(const std::string& text,
                                                                  const std::string& source = "<memory>") {
  return detail::parse_checkpoint_index(text.data(), text.size(), source, "parse_checkpoint_index");
}

/// Opens a checkpoint: a directory (its model.safetensors.index.json, else its model.safetensors), an
/// index file (*.index.json), or one .safetensors file. Every file must be a regular file: a FIFO, a device
/// or a directory in its place is an io_error, and a model.safetensors.index.json that exists but is not a
/// regular file is one too, not taken for absent. The index is at most text_file_limit (64 MiB) and is
/// parsed as parse_checkpoint_index does; every tensor it names must be in its shard; tensors a shard holds
/// beyond its weight_map entries are ignored, as Hugging Face's loaders ignore them. Every failure is an
/// io_error naming the file.
inline safetensors_checkpoint open_safetensors_checkpoint(const std::string& path) {
  namespace fs = std::filesystem;
  constexpr const char* function = "open_safetensors_checkpoint";
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) {
    const fs::path index = fs::path(path) / "model.safetensors.index.json";
    const fs::path single = fs::path(path) / "model.safetensors";
    if (detail::path_is_taken(index)) {
      file = index.string();  // read as an index whatever it is: a FIFO or a directory there is an error
    } else if (detail::path_is_taken(single)) {
      file = single.string();
    } else {
      MOECOMP_FAIL(error_kind::io_error, function, ": the directory '", path,
                   "' has neither model.safetensors.index.json nor model.safetensors");
    }
  }
  safetensors_checkpoint checkpoint;
  checkpoint.source_ = file;
  const bool is_index = file.size() >= 5 && file.compare(file.size() - 5, 5, ".json") == 0;
  if (!is_index) {
    checkpoint.shards_.push_back(read_safetensors(file));
    for (const auto& t : checkpoint.shards_.front().tensors()) {
      checkpoint.names_.push_back(t.name);
      checkpoint.where_.emplace(t.name, 0);
    }
    std::sort(checkpoint.names_.begin(), checkpoint.names_.end());
    return checkpoint;
  }
  checkpoint.sharded_ = true;
  std::vector<checkpoint_index_entry> entries;
  {
    moecomp::detail::input_file index_file(file, function, text_file_limit);
    const std::string text = index_file.read_all<std::string>();
    entries = detail::parse_checkpoint_index(text.data(), text.size(), file, function);
  }
  std::map<std::string, std::size_t> shard_of_file;
  for (const checkpoint_index_entry& entry : entries) {
    auto found = shard_of_file.find(entry.shard);
    if (found == shard_of_file.end()) {
      checkpoint.shards_.push_back(read_safetensors((fs::path(file).parent_path() / entry.shard).string()));
      found = shard_of_file.emplace(entry.shard, checkpoint.shards_.size() - 1).first;
    }
    if (!checkpoint.shards_[found->second].contains(entry.tensor))
      detail::index_fail(function, file, "\"weight_map\" places '" + entry.tensor + "' in '" + entry.shard +
                                             "', which does not hold it");
    checkpoint.where_.emplace(entry.tensor, found->second);
    checkpoint.names_.push_back(entry.tensor);
  }
  std::sort(checkpoint.names_.begin(), checkpoint.names_.end());
  return checkpoint;
}

/// Writes a checkpoint one shard at a time, so that a caller never holds more than one shard's tensors:
/// write_shard() writes a file at once, finish() names the files as Hugging Face does and writes the
/// index. One shard becomes `<prefix>.safetensors` with no index; n shards become
/// `<prefix>-0000i-of-0000n.safetensors` plus `<prefix>.safetensors.index.json` ({"metadata":
/// {"total_size": tensor bytes}, "weight_map": {...}}). Files of an unfinished writer are removed.
///
/// Several processes can write one checkpoint (docs/io.md, "One checkpoint from several processes"): each
/// writes its shards at fixed positions (write_shard_at) into the same directory and gives them up (release);
/// one of them takes the others' shards over (adopt_shard) and finishes. A shard at position k is the file
/// `<prefix>.part-<k + 1>.safetensors` until finish() renames it.
class safetensors_sharded_writer {
 public:
  /// `directory` must exist; `prefix` is the files' stem ("model").
  explicit safetensors_sharded_writer(std::string directory, std::string prefix = "model")
      : directory_(std::move(directory)), prefix_(std::move(prefix)) {
    std::error_code ec;
    MOECOMP_EXPECTS(std::filesystem::is_directory(directory_, ec),
                    "safetensors_sharded_writer: directory must be an existing directory, got '", directory_, "'");
    MOECOMP_EXPECTS(!prefix_.empty() && prefix_.find('/') == std::string::npos,
                    "safetensors_sharded_writer: prefix must be a plain file stem, got '", prefix_, "'");
  }
  safetensors_sharded_writer(const safetensors_sharded_writer&) = delete;
  safetensors_sharded_writer& operator=(const safetensors_sharded_writer&) = delete;
  ~safetensors_sharded_writer() {
    if (finished_) return;
    for (const auto& [position, shard] : shards_) std::remove(shard.file.c_str());
  }

  /// Writes `entries` (names unique across all shards) as the next shard (after the highest position held),
  /// with `metadata` in its header.
  void write_shard(const std::vector<safetensors_entry>& entries, const std::map<std::string, std::string>& metadata = {}) {
    write_shard_at(shards_.empty() ? 0 : shards_.rbegin()->first + 1, entries, metadata);
  }

  /// Writes `entries` as the shard at `position` (0-based), which this writer must not hold yet.
  void write_shard_at(std::size_t position, const std::vector<safetensors_entry>& entries,
                      const std::map<std::string, std::string>& metadata = {}) {
    constexpr const char* fn = "safetensors_sharded_writer::write_shard";
    check_open(fn, position);
    for (const auto& e : entries)
      MOECOMP_EXPECTS(shard_of_.count(e.name) == 0, fn, ": tensor names must be unique across shards, got '", e.name,
                      "' again");
    const std::string file = part_path(position);
    write_safetensors(file, entries, metadata);
    shard written{file, 0, {}};
    for (const auto& e : entries) {
      std::uint64_t elements = 1;
      for (index_t extent : e.shape) elements *= static_cast<std::uint64_t>(extent);
      written.tensor_bytes += elements * item_size(e.dtype);
      written.names.push_back(e.name);
    }
    hold(position, std::move(written));
  }

  /// Takes over the shard at `position` that another writer (another process) wrote into this directory and
  /// released: its tensors join the index, and the file is this writer's (renamed by finish(), removed if this
  /// writer is not finished). io_error when the file is missing or not a safetensors file; invalid_argument when
  /// this writer holds the position or one of its tensor names already.
  void adopt_shard(std::size_t position) {
    constexpr const char* fn = "safetensors_sharded_writer::adopt_shard";
    check_open(fn, position);
    const std::string file = part_path(position);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(std::filesystem::symlink_status(file, ec)))
      MOECOMP_FAIL(error_kind::io_error, fn, ": shard ", position, " ('", file,
                   "') was not written: no such regular file");
    shard adopted{file, 0, {}};
    {
      const safetensors_file part = read_safetensors(file);
      for (const safetensors_tensor_info& t : part.tensors()) {
        MOECOMP_EXPECTS(shard_of_.count(t.name) == 0, fn, ": tensor names must be unique across shards, got '", t.name,
                        "' again in shard ", position);
        adopted.tensor_bytes += t.bytes();
        adopted.names.push_back(t.name);
      }
    }
    hold(position, std::move(adopted));
  }

  /// Whether this writer holds the shard at `position` (written or adopted).
  bool holds_shard(std::size_t position) const noexcept { return shards_.count(position) != 0; }

  /// Gives up the shards written so far: they stay in the directory for another writer to adopt, and this
  /// writer can write no more. Returns their positions, ascending.
  std::vector<std::size_t> release() {
    MOECOMP_EXPECTS(!finished_, "safetensors_sharded_writer::release: the writer is already finished");
    std::vector<std::size_t> positions;
    for (const auto& [position, shard] : shards_) positions.push_back(position);
    shards_.clear();
    shard_of_.clear();
    finished_ = true;
    return positions;
  }

  /// Names the shards and writes the index; returns the files written, index last. The shards must be the
  /// positions 0, 1, ..., n - 1 without a gap.
  std::vector<std::string> finish() {
    constexpr const char* fn = "safetensors_sharded_writer::finish";
    MOECOMP_EXPECTS(!finished_, fn, ": the writer is already finished");
    MOECOMP_EXPECTS(!shards_.empty(), fn, ": no shard was written");
    MOECOMP_EXPECTS(shards_.rbegin()->first + 1 == shards_.size(), fn, ": shards must be positions 0 to ",
                    shards_.size() - 1, " without a gap, got a shard at position ", shards_.rbegin()->first);
    namespace fs = std::filesystem;
    const std::size_t count = shards_.size();
    std::vector<std::string> names(count);
    if (count == 1) {
      names[0] = prefix_ + ".safetensors";
    } else {
      for (std::size_t i = 0; i < count; ++i) names[i] = prefix_ + "-" + five(i + 1) + "-of-" + five(count) + ".safetensors";
    }
    std::vector<std::string> written;
    std::uint64_t tensor_bytes = 0;
    for (auto& [position, shard] : shards_) {
      const std::string target = (fs::path(directory_) / names[position]).string();
      if (std::rename(shard.file.c_str(), target.c_str()) != 0)
        MOECOMP_FAIL(error_kind::io_error, fn, ": cannot rename '", shard.file, "' to '", target, "'");
      shard.file = target;
      written.push_back(target);
      tensor_bytes += shard.tensor_bytes;
    }
    if (count > 1) {
      nlohmann::ordered_json index;
      index["metadata"]["total_size"] = tensor_bytes;
      nlohmann::ordered_json map = nlohmann::ordered_json::object();
      for (const auto& [name, position] : shard_of_) map[name] = names[position];  // std::map: sorted by name
      index["weight_map"] = std::move(map);
      const std::string text = index.dump(2) + "\n";
      const std::string index_path = (fs::path(directory_) / (prefix_ + ".safetensors.index.json")).string();
      detail::atomic_file_writer writer(index_path, fn);
      writer.write(text.data(), text.size());
      writer.commit();
      written.push_back(index_path);
    }
    finished_ = true;
    return written;
  }

 private:
  struct shard {
    std::string file;
    std::uint64_t tensor_bytes = 0;
    std::vector<std::string> names;
  };
  static std::string five(std::size_t value) {
    std::string text = std::to_string(value);
    return text.size() >= 5 ? text : std::string(5 - text.size(), '0') + text;
  }
  std::string part_path(std::size_t position) const {
    return (std::filesystem::path(directory_) / (prefix_ + ".part-" + std::to_string(position + 1) + ".safetensors"))
        .string();
  }
  void check_open(const char* fn, std::size_t position) const {
    MOECOMP_EXPECTS(!finished_, fn, ": the writer is finished (or released)");
    MOECOMP_EXPECTS(shards_.count(position) == 0, fn, ": the writer already holds shard ", position);
  }
  void hold(std::size_t position, shard s) {
    for (const std::string& name : s.names) shard_of_.emplace(name, position);
    shards_.emplace(position, std::move(s));
  }
  std::string directory_;
  std::string prefix_;
  std::map<std::size_t, shard> shards_;         // by position
  std::map<std::string, std::size_t> shard_of_;  // tensor name -> position
  bool finished_ = false;
};

}  // namespace io
MOECOMP_NAMESPACE_END
