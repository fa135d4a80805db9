// libFuzzer entry point for moecomp::io::parse_checkpoint_index, the parser of model.safetensors.index.json.
// Not part of the CMake build; see fuzz/README.md. Every input must either parse into entries that keep the
// parser's promises (tensor names unique and in order, shard names non-empty, relative, without "..") or be
// refused with moecomp::io_error; anything else (another exception, a crash, a sanitizer report) is a bug.
#include <moecomp/io/safetensors.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = moecomp::io;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const std::vector<io::checkpoint_index_entry> entries = io::parse_checkpoint_index(text, "fuzz-index");
    if (entries.empty()) std::abort();
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (i > 0 && !(entries[i - 1].tensor < entries[i].tensor)) std::abort();
      const std::filesystem::path shard(entries[i].shard);
      if (entries[i].shard.empty() || shard.is_absolute() || shard.has_root_directory()) std::abort();
      for (const auto& part : shard)
        if (part == "..") std::abort();
    }
  } catch (const moecomp::io_error&) {
    // Malformed input, correctly refused.
  }
  return 0;
}
