// The installed moecomp::safetensors component: a file written and read back in memory.
#include <moecomp/io/safetensors.hpp>

#include <cstdio>
#include <vector>

int main() {
  namespace io = moecomp::io;
  const std::vector<float> values = {1.0f, 2.0f, 3.0f, 4.0f};
  const std::string bytes = io::serialize_safetensors({{"w", io::safetensors_dtype::f32, {2, 2}, values.data()}});
  const io::safetensors_file file = io::parse_safetensors(bytes);
  const float corner = file.tensor("w").matrix<float>()(1, 1);
  std::printf("safetensors consumer: %zu bytes, w(1,1) = %g\n", bytes.size(), static_cast<double>(corner));
  return corner == 4.0f ? 0 : 1;
}
