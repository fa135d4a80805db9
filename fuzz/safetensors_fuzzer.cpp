// libFuzzer entry point for moecomp::io::parse_safetensors. Not part of the CMake build; see fuzz/README.md.
// Every input must either parse into a self-consistent file, which re-serialises into one that parses the
// same, or be refused with moecomp::io_error; anything else (another exception, a crash, a sanitizer
// report, a huge allocation) is a bug.
#include <moecomp/io/safetensors.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = moecomp::io;
  try {
    const io::safetensors_file file = io::parse_safetensors(data, size, "fuzz-input");
    std::vector<io::safetensors_entry> entries;
    std::uint64_t total = 0;
    for (const auto& t : file.tensors()) {
      if (static_cast<std::uint64_t>(t.size()) * io::item_size(t.dtype) != t.bytes()) std::abort();
      total += t.bytes();
      entries.push_back(io::safetensors_entry::of(t.name, file.tensor(t.name)));
      // Read every byte through a conversion (so ASan sees any overrun).
      if (t.size() <= 4096) (void)file.tensor(t.name).to_vector<float>();
    }
    if (file.data_offset() + total != file.file_bytes()) std::abort();
    const io::safetensors_file again = io::parse_safetensors(io::serialize_safetensors(entries, file.metadata()));
    if (again.tensors().size() != file.tensors().size() || again.metadata() != file.metadata()) std::abort();
    for (const auto& t : file.tensors()) {
      const io::safetensors_tensor u = again.tensor(t.name);
      if (u.shape() != t.shape || u.dtype() != t.dtype) std::abort();
      if (u.byte_size() > 0 && std::memcmp(u.data(), file.tensor(t.name).data(), u.byte_size()) != 0) std::abort();
    }
  } catch (const moecomp::io_error&) {
    // Malformed input, correctly refused.
  }
  return 0;
}
