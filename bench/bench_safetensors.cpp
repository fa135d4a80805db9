// safetensors reading and writing at checkpoint scale:
//  * open: a shard header of 1,000 tensors (about 100 KB of JSON, Mixtral's per-shard count), parsed and
//    checked; the tensor bytes are never touched;
//  * bf16 -> float32: one Mixtral expert matrix (14336 x 4096, 117 MB of bf16) converted by to_matrix<float>;
//    the floor is reading 117 MB and writing 235 MB at the machine's copy bandwidth;
//  * write: the same matrix written to a file under /dev/shm (memory, not disk), atomically.
// The side-by-side against the Python route (json + numpy; torch for the conversion) is
// bench/peers/safetensors_vs_numpy.py.
#include <benchmark/benchmark.h>
#include <moecomp/core/random.hpp>
#include <moecomp/io/safetensors.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace {

namespace io = moecomp::io;
using moecomp::bfloat16;
using moecomp::index_t;

constexpr index_t rows = 14336, cols = 4096;

std::string scratch_directory() {
  std::error_code ec;
  return std::filesystem::is_directory("/dev/shm", ec) ? "/dev/shm" : std::filesystem::temp_directory_path().string();
}

const std::vector<bfloat16>& expert_matrix() {
  static const std::vector<bfloat16> m = [] {
    std::vector<bfloat16> values(static_cast<std::size_t>(rows * cols));
    moecomp::random_generator rng(17);
    for (auto& v : values) v = bfloat16(0.02f * rng.normal<float>());
    return values;
  }();
  return m;
}

// 1,000 small tensors named like a Mixtral shard's.
const std::string& many_tensor_file() {
  static const std::string bytes = [] {
    static std::vector<float> values(4, 1.0f);
    std::vector<io::safetensors_entry> entries;
    for (int layer = 0; layer < 32; ++layer)
      for (int expert = 0; expert < 8; ++expert)
        for (const char* w : {"w1", "w2", "w3"})
          entries.push_back({"model.layers." + std::to_string(layer) + ".block_sparse_moe.experts." +
                                 std::to_string(expert) + "." + w + ".weight",
                             io::safetensors_dtype::f32, {2, 2}, values.data()});
    for (int i = static_cast<int>(entries.size()); i < 1000; ++i)
      entries.push_back({"model.layers." + std::to_string(i % 32) + ".extra." + std::to_string(i) + ".weight",
                         io::safetensors_dtype::f32, {4}, values.data()});
    return io::serialize_safetensors(entries, {{"format", "pt"}});
  }();
  return bytes;
}

void open_1000_tensors(benchmark::State& state) {
  const std::string path = scratch_directory() + "/moecomp_bench_open.safetensors";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(many_tensor_file().data(), 1, many_tensor_file().size(), f);
    std::fclose(f);
  }
  std::size_t count = 0;
  for (auto _ : state) {
    const io::safetensors_file file = io::read_safetensors(path);
    count = file.tensors().size();
    benchmark::DoNotOptimize(count);
  }
  state.counters["tensors"] = static_cast<double>(count);
  state.counters["header_bytes"] = static_cast<double>(io::read_safetensors(path).header_bytes());
  std::remove(path.c_str());
}
BENCHMARK(open_1000_tensors)->Unit(benchmark::kMicrosecond);

void bf16_to_float(benchmark::State& state) {
  const std::string bytes = io::serialize_safetensors(
      {{"w1", io::safetensors_dtype::bf16, {rows, cols}, expert_matrix().data()}});
  const io::safetensors_file file = io::parse_safetensors(bytes);
  const io::safetensors_tensor t = file.tensor("w1");
  moecomp::host_matrix<float> out(rows, cols);
  for (auto _ : state) {
    t.convert_into(out.data(), out.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * rows * cols * 6);  // read 2, write 4
}
BENCHMARK(bf16_to_float)->Unit(benchmark::kMillisecond)->UseRealTime();

void write_expert(benchmark::State& state) {
  const std::string path = scratch_directory() + "/moecomp_bench_write.safetensors";
  const std::vector<io::safetensors_entry> entries = {
      {"w1", io::safetensors_dtype::bf16, {rows, cols}, expert_matrix().data()}};
  for (auto _ : state) benchmark::DoNotOptimize(io::write_safetensors(path, entries, {{"format", "pt"}}));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * rows * cols * 2);
  std::remove(path.c_str());
}
BENCHMARK(write_expert)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
