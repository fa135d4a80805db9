#pragma once
// The compact sparse formats of ResMoE's residuals and their parameters (<moecomp/sparse/residual.hpp>).
// Documentation, with the exact byte layout of every format: docs/sparse.md.
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/sparse/prune_types.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {

/// How the stored entries of a rows x cols matrix are located (docs/sparse.md, "Formats"):
///  * csr16: row offsets (rows + 1 uint64), then a uint16 column index per stored entry (cols <= 65536);
///  * bitmap: one bit per entry (rows x ceil(cols / 8) bytes), then the stored values in row-major order;
///  * two_of_four: 2:4 semi-structured: in each group of 4 consecutive entries of a row exactly 2 values
///    are stored, located by a 4-bit code per group (cols % 4 == 0);
///  * automatic: the smallest of those that can hold the matrix (ties to the earlier in this list).
enum class sparse_format : std::uint8_t { csr16 = 0, bitmap = 1, two_of_four = 2, automatic = 255 };

inline const char* to_string(sparse_format f) noexcept {
  switch (f) {
    case sparse_format::csr16: return "csr16";
    case sparse_format::bitmap: return "bitmap";
    case sparse_format::two_of_four: return "2:4";
    case sparse_format::automatic: return "auto";
  }
  return "unknown";
}

/// Parses "csr16", "bitmap", "2:4" or "auto"; throws invalid_argument otherwise.
inline sparse_format parse_sparse_format(std::string_view name) {
  for (sparse_format f : {sparse_format::csr16, sparse_format::bitmap, sparse_format::two_of_four,
                          sparse_format::automatic})
    if (name == to_string(f)) return f;
  MOECOMP_FAIL(error_kind::invalid_argument, "format: expected csr16, bitmap, 2:4 or auto, got '",
               std::string(name), "'");
}

/// How each stored value is kept: IEEE float32, IEEE binary16 or bfloat16, little-endian.
enum class value_dtype : std::uint8_t { float32 = 0, float16 = 1, bfloat16 = 2 };

inline const char* to_string(value_dtype d) noexcept {
  switch (d) {
    case value_dtype::float32: return "fp32";
    case value_dtype::float16: return "fp16";
    case value_dtype::bfloat16: return "bf16";
  }
  return "unknown";
}

/// Parses "fp32", "fp16" or "bf16"; throws invalid_argument otherwise.
inline value_dtype parse_value_dtype(std::string_view name) {
  for (value_dtype d : {value_dtype::float32, value_dtype::float16, value_dtype::bfloat16})
    if (name == to_string(d)) return d;
  MOECOMP_FAIL(error_kind::invalid_argument, "values: expected fp32, fp16 or bf16, got '", std::string(name), "'");
}

inline constexpr std::size_t value_size(value_dtype d) noexcept { return d == value_dtype::float32 ? 4 : 2; }

/// The largest column count csr16 can index.
inline constexpr index_t csr16_max_cols = 65536;

/// The byte lengths of the three sections of a format (docs/sparse.md): row offsets, structure (column
/// indices, bitmap or 2:4 codes) and values, for `count` stored values. Sizes that overflow are the caller's
/// to refuse (sparse_shape_fits).
struct section_lengths {
  std::uint64_t offsets = 0, structure = 0, values = 0;
  std::uint64_t total() const noexcept { return offsets + structure + values; }
};

/// Whether a rows x cols shape is within the formats' limits: both non-negative and rows x cols and rows below
/// 2^56, so that no section length (for count <= rows x cols) overflows.
inline bool sparse_shape_fits(index_t rows, index_t cols) noexcept {
  constexpr index_t limit = index_t{1} << 56;
  return rows >= 0 && cols >= 0 && rows < limit && (cols == 0 || rows <= limit / cols);
}

inline section_lengths sparse_section_lengths(sparse_format format, value_dtype values, index_t rows, index_t cols,
                                              std::uint64_t count) noexcept {
  const auto r = static_cast<std::uint64_t>(rows), c = static_cast<std::uint64_t>(cols);
  section_lengths s;
  s.values = count * value_size(values);
  switch (format) {
    case sparse_format::csr16: s.offsets = (r + 1) * 8; s.structure = count * 2; break;
    case sparse_format::bitmap: s.structure = r * ((c + 7) / 8); break;
    case sparse_format::two_of_four: s.structure = r * ((c / 4 + 1) / 2); break;
    case sparse_format::automatic: break;
  }
  return s;
}

namespace detail {
struct sparse_view_access;
}

/// A read-only view of a matrix in one of the formats: three little-endian byte sections (docs/sparse.md).
/// Made by sparse_matrix::view() or by view_sparse_sections() / check_sparse_sections(), which check untrusted
/// bytes completely, so
/// every sparse_matrix_view describes a valid matrix.
class sparse_matrix_view {
 public:
  sparse_matrix_view() = default;
  index_t rows() const noexcept { return rows_; }
  index_t cols() const noexcept { return cols_; }
  sparse_format format() const noexcept { return format_; }
  value_dtype values_dtype() const noexcept { return values_dtype_; }
  /// The number of stored values (for 2:4, rows x cols / 2, zeros included).
  std::uint64_t count() const noexcept { return count_; }
  const std::uint8_t* offsets() const noexcept { return offsets_; }
  const std::uint8_t* structure() const noexcept { return structure_; }
  const std::uint8_t* values() const noexcept { return values_; }
  section_lengths lengths() const noexcept { return sparse_section_lengths(format_, values_dtype_, rows_, cols_, count_); }
  /// Bytes of the three sections together (the file container adds a 128-byte header).
  std::uint64_t bytes() const noexcept { return lengths().total(); }
  /// 8 x bytes() / (rows x cols): what the format costs per dense weight position, everything counted.
  double bits_per_weight() const noexcept {
    const double size = static_cast<double>(rows_) * static_cast<double>(cols_);
    return size > 0 ? 8.0 * static_cast<double>(bytes()) / size : 0.0;
  }

 private:
  friend class sparse_matrix;
  friend struct detail::sparse_view_access;
  sparse_matrix_view(index_t rows, index_t cols, sparse_format format, value_dtype values_dtype, std::uint64_t count,
                     const std::uint8_t* offsets, const std::uint8_t* structure, const std::uint8_t* values) noexcept
      : rows_(rows), cols_(cols), format_(format), values_dtype_(values_dtype), count_(count), offsets_(offsets),
        structure_(structure), values_(values) {}
  index_t rows_ = 0, cols_ = 0;
  sparse_format format_ = sparse_format::csr16;
  value_dtype values_dtype_ = value_dtype::float32;
  std::uint64_t count_ = 0;
  const std::uint8_t* offsets_ = nullptr;
  const std::uint8_t* structure_ = nullptr;
  const std::uint8_t* values_ = nullptr;
};

/// An owned matrix in one of the formats: what encode_sparse and encode_residual produce and the residual
/// file reader returns. Movable; its sections are exactly the bytes the file container stores.
namespace detail {
struct sparse_matrix_access;
}  // namespace detail

class sparse_matrix {
 public:
  sparse_matrix() = default;
  /// A copy of a (valid) view's sections.
  explicit sparse_matrix(const sparse_matrix_view& v)
      : rows_(v.rows()), cols_(v.cols()), format_(v.format()), values_dtype_(v.values_dtype()), count_(v.count()) {
    const section_lengths s = v.lengths();
    offsets_.assign(v.offsets(), v.offsets() + s.offsets);
    structure_.assign(v.structure(), v.structure() + s.structure);
    values_.assign(v.values(), v.values() + s.values);
  }
  index_t rows() const noexcept { return rows_; }
  index_t cols() const noexcept { return cols_; }
  sparse_format format() const noexcept { return format_; }
  value_dtype values_dtype() const noexcept { return values_dtype_; }
  std::uint64_t count() const noexcept { return count_; }
  std::uint64_t bytes() const noexcept { return view().bytes(); }
  double bits_per_weight() const noexcept { return view().bits_per_weight(); }
  sparse_matrix_view view() const noexcept {
    return {rows_, cols_, format_, values_dtype_, count_, offsets_.data(), structure_.data(), values_.data()};
  }
  const std::vector<std::uint8_t>& offsets_bytes() const noexcept { return offsets_; }
  const std::vector<std::uint8_t>& structure_bytes() const noexcept { return structure_; }
  const std::vector<std::uint8_t>& values_bytes() const noexcept { return values_; }

 private:
  // The encoders fill the sections (detail::sparse_matrix_access), so that every
  // sparse_matrix holds a valid matrix.
  friend struct detail::sparse_matrix_access;
  index_t rows_ = 0, cols_ = 0;
  sparse_format format_ = sparse_format::csr16;
  value_dtype values_dtype_ = value_dtype::float32;
  std::uint64_t count_ = 0;
  std::vector<std::uint8_t> offsets_, structure_, values_;
};

/// encode_sparse's parameters.
struct encode_params {
  sparse_format format = sparse_format::automatic;
  /// fp32 keeps float input exactly; fp16 / bf16 round each stored value to nearest even.
  value_dtype values = value_dtype::float32;
};

/// encode_residual's parameters: the pruning of the residual, then its encoding. With format two_of_four
/// the pruning must be N:M with m = 4 and n <= 2.
struct residual_params {
  prune_params prune;
  encode_params encode;
};

struct residual_info {
  prune_result pruned;
  sparse_format format = sparse_format::csr16;  ///< the format chosen (automatic resolved)
  std::uint64_t bytes = 0;                      ///< the sections' bytes
  double bits_per_weight = 0;
  /// ||R - decode(stored)||_F^2 = ||P W - (B + stored)||_F^2 before the final rounding of a restore: what the
  /// pruning and the value rounding lose (ResMoE's approximation error of one matrix, Appendix A.6), summed
  /// in double.
  double squared_error = 0;
};

/// ResMoE's approximation error of a layer (Appendix A.6): the mean over the N experts of each expert's
/// squared error over all its matrices, divided by d_ff as the paper reports it.
inline double layer_approximation_error(const std::vector<double>& expert_squared_errors, index_t d_ff) noexcept {
  if (expert_squared_errors.empty() || d_ff <= 0) return 0;
  double sum = 0;
  for (double e : expert_squared_errors) sum += e;
  return sum / static_cast<double>(expert_squared_errors.size()) / static_cast<double>(d_ff);
}

}  // namespace sparse
MOECOMP_NAMESPACE_END
