// libFuzzer entry point for moecomp::io::parse_residual. Not part of the CMake build; see fuzz/README.md.
// Each input is parsed twice: as it is, and with its two CRC-32 fields recomputed, so that mutations reach
// the content checks behind the checksums. Either parse must give a valid matrix (which then decodes and
// re-serialises to the same bytes) or be refused with moecomp::io_error; anything else is a bug.
#include <moecomp/io/residual_file.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

namespace {

void check(const std::vector<std::uint8_t>& bytes) {
  namespace io = moecomp::io;
  try {
    const io::residual_file file = io::parse_residual(bytes, "fuzz-input");
    const moecomp::sparse::sparse_matrix_view m = file.matrix();
    if (static_cast<double>(m.rows()) * static_cast<double>(m.cols()) <= 1 << 20) {
      std::vector<float> out(static_cast<std::size_t>(m.rows() * m.cols()));
      moecomp::sparse::decode_sparse<float>(moecomp::host_context(1), m,
                                            moecomp::make_matrix_view(out.data(), m.rows(), m.cols()));
    }
    if (io::serialize_residual(m) != bytes) std::abort();
  } catch (const moecomp::io_error&) {
    // Malformed input, correctly refused.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint8_t> bytes(data, data + size);
  check(bytes);
  if (size >= 128) {
    moecomp::detail::store_le<std::uint32_t>(bytes.data() + 104,
                                             moecomp::io::detail::crc32(0, bytes.data() + 128, size - 128));
    moecomp::detail::store_le<std::uint32_t>(bytes.data() + 124, moecomp::io::detail::crc32(0, bytes.data(), 124));
    check(bytes);
  }
  return 0;
}
