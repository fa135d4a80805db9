#pragma once
// moecomp's residual files: one compact sparse matrix (<moecomp/sparse/residual.hpp>) in a container with a
// magic, a version, the shape, the format and value dtype codes, a section table and two CRC-32 checksums,
// all little-endian. The byte layout: docs/sparse.md, "The residual file".
//
//   io::write_residual("R.bin", r.view());                 // atomic: temporary file + rename
//   io::residual_file f = io::read_residual("R.bin");      // every byte checked
//   sparse::restore_dense<float, float>(ctx, base, f.matrix(), out);
//
// Every malformed input (truncated, bad magic or version, checksum mismatch, a section table that is not
// the canonical one, a shape that overflows, row offsets out of order, column indices out of range, a bitmap
// whose popcount disagrees with the count, a bad 2:4 code, a non-finite value, trailing bytes) is an io_error
// naming the file and the problem. Reading allocates at most the file's own size.
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/io/npy.hpp>
#include <moecomp/sparse/residual.hpp>
#include <moecomp/core/detail/input_file.hpp>
#include <moecomp/core/detail/little_endian.hpp>
#include <moecomp/io/detail/atomic_file.hpp>
#include <moecomp/io/detail/crc32.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace io {

inline constexpr char residual_magic[9] = "MOERESID";
inline constexpr std::uint16_t residual_version_major = 1;
inline constexpr std::uint16_t residual_version_minor = 0;
inline constexpr std::uint64_t residual_header_bytes = 128;
inline constexpr std::uint64_t residual_section_alignment = 64;

/// A residual file read and checked: owns its bytes and views the matrix inside them. Movable (the view
/// follows the bytes), not copyable.
class residual_file {
 public:
  residual_file(residual_file&&) noexcept = default;
  residual_file& operator=(residual_file&&) noexcept = default;
  residual_file(const residual_file&) = delete;
  residual_file& operator=(const residual_file&) = delete;

  const sparse::sparse_matrix_view& matrix() const noexcept { return matrix_; }
  std::uint64_t file_bytes() const noexcept { return bytes_.size(); }

 private:
  friend residual_file parse_residual(std::vector<std::uint8_t>, const std::string&);
  residual_file(std::vector<std::uint8_t> bytes, sparse::sparse_matrix_view m) : bytes_(std::move(bytes)), matrix_(m) {}
  std::vector<std::uint8_t> bytes_;
  sparse::sparse_matrix_view matrix_;
};

namespace detail {

inline std::uint64_t align_up(std::uint64_t x, std::uint64_t a) noexcept { return (x + a - 1) / a * a; }

/// The canonical section offsets of a matrix: the first at the header's end, each next one at the 64-byte
/// boundary after the previous one's end; returns the file size.
inline std::uint64_t residual_section_offsets(const sparse::section_lengths& s, std::uint64_t offsets[3]) noexcept {
  offsets[0] = residual_header_bytes;
  offsets[1] = align_up(offsets[0] + s.offsets, residual_section_alignment);
  offsets[2] = align_up(offsets[1] + s.structure, residual_section_alignment);
  return offsets[2] + s.values;
}

}  // namespace detail

/// The size of the residual file holding m: the header, the sections and the padding between them.
inline std::uint64_t residual_file_bytes(const sparse::sparse_matrix_view& m) noexcept {
  std::uint64_t offsets[3];
  return detail::residual_section_offsets(m.lengths(), offsets);
}

/// The bytes of a residual file holding m.
inline std::vector<std::uint8_t> serialize_residual(const sparse::sparse_matrix_view& m) {
  using moecomp::detail::store_le;
  const sparse::section_lengths s = m.lengths();
  std::uint64_t offsets[3];
  const std::uint64_t size = detail::residual_section_offsets(s, offsets);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size), 0);
  std::uint8_t* h = bytes.data();
  std::memcpy(h, residual_magic, 8);
  store_le<std::uint16_t>(h + 8, residual_version_major);
  store_le<std::uint16_t>(h + 10, residual_version_minor);
  store_le<std::uint32_t>(h + 12, static_cast<std::uint32_t>(residual_header_bytes));
  store_le<std::uint64_t>(h + 16, static_cast<std::uint64_t>(m.rows()));
  store_le<std::uint64_t>(h + 24, static_cast<std::uint64_t>(m.cols()));
  h[32] = static_cast<std::uint8_t>(m.format());
  h[33] = static_cast<std::uint8_t>(m.values_dtype());
  store_le<std::uint64_t>(h + 40, m.count());
  const std::uint64_t lengths[3] = {s.offsets, s.structure, s.values};
  const std::uint8_t* sources[3] = {m.offsets(), m.structure(), m.values()};
  for (int k = 0; k < 3; ++k) {
    store_le<std::uint64_t>(h + 48 + 16 * k, offsets[k]);
    store_le<std::uint64_t>(h + 56 + 16 * k, lengths[k]);
    if (lengths[k] != 0) std::memcpy(h + offsets[k], sources[k], static_cast<std::size_t>(lengths[k]));
  }
  store_le<std::uint64_t>(h + 96, size);
  store_le<std::uint32_t>(h + 104, detail::crc32(0, h + residual_header_bytes,
                                                 static_cast<std::size_t>(size - residual_header_bytes)));
  store_le<std::uint32_t>(h + 124, detail::crc32(0, h, 124));
  return bytes;
}

/// Parses and checks the bytes of a residual file (source_name names it in errors); io_error if malformed.
inline residual_file parse_residual(std::vector<std::uint8_t> bytes, const std::string& source_name) {
  using moecomp::detail::load_le;
  auto bad = [&](const auto&... what) {
    MOECOMP_FAIL(error_kind::io_error, "read_residual: '", source_name, "' is not a valid residual file: ", what...);
  };
  const auto size = static_cast<std::uint64_t>(bytes.size());
  if (size < residual_header_bytes)
    bad("it has ", size, " bytes, fewer than the ", residual_header_bytes, "-byte header (truncated)");
  const std::uint8_t* h = bytes.data();
  if (std::memcmp(h, residual_magic, 8) != 0) bad("the magic must be 'MOERESID'");
  const std::uint16_t major = load_le<std::uint16_t>(h + 8), minor = load_le<std::uint16_t>(h + 10);
  if (major != residual_version_major || minor != residual_version_minor)
    bad("version ", major, ".", minor, " is not supported (this reader reads ", residual_version_major, ".",
        residual_version_minor, ")");
  if (load_le<std::uint32_t>(h + 124) != detail::crc32(0, h, 124))
    bad("the header checksum does not match (the header is corrupt)");
  if (load_le<std::uint32_t>(h + 12) != residual_header_bytes)
    bad("the header size must be ", residual_header_bytes, ", got ", load_le<std::uint32_t>(h + 12));
  for (std::uint64_t k : {34, 35, 36, 37, 38, 39})
    if (h[k] != 0) bad("reserved byte ", k, " must be 0");
  for (std::uint64_t k = 108; k < 124; ++k)
    if (h[k] != 0) bad("reserved byte ", k, " must be 0");
  const std::uint64_t rows = load_le<std::uint64_t>(h + 16), cols = load_le<std::uint64_t>(h + 24);
  if (rows >= (std::uint64_t{1} << 62) || cols >= (std::uint64_t{1} << 62) ||
      !sparse::sparse_shape_fits(static_cast<index_t>(rows), static_cast<index_t>(cols)))
    bad("the shape ", rows, " x ", cols, " is beyond the formats' limit of 2^56 entries");
  const std::uint64_t file_size = load_le<std::uint64_t>(h + 96);
  if (file_size != size)
    bad("the header gives ", file_size, " bytes but the file has ", size,
        size < file_size ? " (truncated)" : " (trailing bytes)");
  std::uint64_t offset[3], length[3];
  std::uint64_t end = residual_header_bytes;
  for (int k = 0; k < 3; ++k) {
    offset[k] = load_le<std::uint64_t>(h + 48 + 16 * k);
    length[k] = load_le<std::uint64_t>(h + 56 + 16 * k);
    const std::uint64_t expected = detail::align_up(end, residual_section_alignment);
    if (offset[k] != expected)
      bad("section ", k, " must start at byte ", expected, " (the canonical layout), got ", offset[k]);
    if (length[k] > size - offset[k] || offset[k] > size)
      bad("section ", k, " (", length[k], " bytes at ", offset[k], ") runs past the end of the ", size, "-byte file");
    for (std::uint64_t b = end; b < offset[k]; ++b)
      if (h[b] != 0) bad("padding byte ", b, " before section ", k, " must be 0");
    end = offset[k] + length[k];
  }
  if (end != size) bad("the sections end at byte ", end, " but the file has ", size, " bytes (trailing bytes)");
  if (load_le<std::uint32_t>(h + 104) !=
      detail::crc32(0, h + residual_header_bytes, static_cast<std::size_t>(size - residual_header_bytes)))
    bad("the data checksum does not match (the data are corrupt)");
  sparse::sparse_matrix_view view;
  const std::string problem = sparse::check_sparse_sections(
      static_cast<index_t>(rows), static_cast<index_t>(cols), static_cast<sparse::sparse_format>(h[32]),
      static_cast<sparse::value_dtype>(h[33]), load_le<std::uint64_t>(h + 40), h + offset[0], length[0],
      h + offset[1], length[1], h + offset[2], length[2], &view);
  if (!problem.empty()) bad(problem);
  return residual_file(std::move(bytes), view);
}

inline residual_file parse_residual(const void* data, std::size_t size, const std::string& source_name) {
  const auto* b = static_cast<const std::uint8_t*>(data);
  return parse_residual(std::vector<std::uint8_t>(b, b + size), source_name);
}

/// Reads and checks a residual file: a regular file (a FIFO, a device or a directory is refused before
/// anything is read), read whole into memory, then checked as parse_residual checks bytes.
inline residual_file read_residual(const std::string& path) {
  moecomp::detail::input_file file(path, "read_residual");
  return parse_residual(file.read_all<std::vector<std::uint8_t>>(), path);
}

/// A complete residual file in a temporary file beside `path`, not yet in place (see staged_file).
inline staged_file stage_residual(const std::string& path, const sparse::sparse_matrix_view& m,
                                  const write_options& options = {}) {
  const std::vector<std::uint8_t> bytes = serialize_residual(m);
  auto file = std::make_unique<detail::atomic_file_writer>(path, "write_residual", options.hooks);
  file->write(bytes.data(), bytes.size());
  file->finish();
  return detail::staged_file_access::make(std::move(file), path);
}

/// Writes m to `path` atomically (temporary file, then rename).
inline void write_residual(const std::string& path, const sparse::sparse_matrix_view& m,
                           const write_options& options = {}) {
  stage_residual(path, m, options).commit();
}

}  // namespace io
MOECOMP_NAMESPACE_END
