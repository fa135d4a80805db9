// libFuzzer entry point for moecomp::model::read_calibration_tokens on a safetensors file parsed from memory
// (moecomp::io::parse_safetensors). Not part of the CMake build; see fuzz/README.md. Every tensor of every
// input that parses is read as calibration tokens with the hidden size of its last extent (and with a wrong
// one): each read must return a T x hidden matrix of finite floats or be refused with moecomp::io_error;
// anything else (another exception, a crash, a sanitizer report) is a bug.
#include <moecomp/io/safetensors.hpp>
#include <moecomp/model/layout.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = moecomp::io;
  using moecomp::index_t;
  try {
    const io::safetensors_file file = io::parse_safetensors(data, size, "fuzz-calibration");
    for (const auto& t : file.tensors()) {
      if (t.size() > 65536) continue;  // bounded work per input
      const index_t hidden = t.shape.empty() || t.shape.back() < 1 ? 1 : t.shape.back();
      for (const index_t h : {hidden, hidden + 1}) {
        try {
          const moecomp::host_matrix<float> x = moecomp::model::read_calibration_tokens(file, t.name, h);
          if (x.rows() < 1 || x.cols() != h || t.shape.size() != 2 || x.rows() != t.shape[0]) std::abort();
          for (index_t k = 0; k < x.size(); ++k)
            if (!std::isfinite(x.data()[k])) std::abort();
        } catch (const moecomp::io_error&) {
        }
      }
    }
    try {
      (void)moecomp::model::read_calibration_tokens(file, "no such tensor \x01", 4);
      std::abort();
    } catch (const moecomp::io_error&) {
    }
  } catch (const moecomp::io_error&) {
    // Malformed input, correctly refused.
  }
  return 0;
}
