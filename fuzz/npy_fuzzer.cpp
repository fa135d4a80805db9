// libFuzzer entry point for moecomp::io::parse_npy. Not part of the CMake build; see fuzz/README.md.
// Every input must either parse into a self-consistent array or be refused with moecomp::io_error;
// anything else (another exception, a crash, a sanitizer report, a huge allocation) is a bug.
#include <moecomp/io/npy.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = moecomp::io;
  try {
    const io::npy_array array = io::parse_npy(data, size, "fuzz-input");
    moecomp::index_t product = 1;
    for (moecomp::index_t extent : array.shape()) product *= extent;
    if (array.size() != product || array.byte_size() > size || array.data() == nullptr) std::abort();
    // Read every byte (so ASan sees any overrun) and check that a round trip reproduces the array.
    const io::npy_array again = io::parse_npy(io::serialize_npy(array), "round-trip");
    if (again.shape() != array.shape() || again.dtype() != array.dtype() ||
        std::memcmp(again.data(), array.data(), array.byte_size()) != 0)
      std::abort();
  } catch (const moecomp::io_error&) {
    // Malformed input, correctly refused.
  }
  return 0;
}
