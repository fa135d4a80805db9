// ResMoE's inference saving, measured: an 8-expert Mixtral-shape layer (d = 4096, d_ff = 14336, SwiGLU, bf16
// weights) at 1, 8 and 64 tokens with top-2 routing (token t goes to experts t mod 8 and (3t + 1) mod 8):
//  * shared_base: one bf16 base per matrix plus each expert's fp16 bitmap residuals at 25% density
//    (moe::shared_base_ffn_forward);
//  * dense: the 8 experts as dense bf16 matrices, each expert's rows through moe::ffn_forward (up to one tile
//    of tokens it reads the weights once, in panels over the threads: moecomp's best dense path at these sizes).
// Counters: bytes, the weight bytes each call must read (dense: 3 bf16 matrices per expert in use; shared:
// the 3 bases plus the residuals of the experts in use); bytes/s over the measured time. The weights are filled
// by a hash of their index (cheap to set up; the values do not change the work).
#include <benchmark/benchmark.h>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/moe/ffn.hpp>
#include <moecomp/moe/shared_base.hpp>
#include <moecomp/sparse/residual.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

using moecomp::bfloat16;
using moecomp::index_t;
namespace moe = moecomp::moe;
namespace sparse = moecomp::sparse;

constexpr index_t d = 4096, d_ff = 14336, experts = 8;

std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
/// Uniform in [-scale, scale) from a hash of (seed, i).
float hashed(std::uint64_t seed, std::uint64_t i, float scale) {
  return scale * (static_cast<float>(mix(seed * 0x100000001b3ull + i) >> 40) / 8388608.0f - 1.0f);
}

std::vector<bfloat16> bf16_matrix(index_t rows, index_t cols, std::uint64_t seed) {
  std::vector<bfloat16> m(static_cast<std::size_t>(rows * cols));
#pragma omp parallel for schedule(static)
  for (index_t i = 0; i < rows * cols; ++i) m[static_cast<std::size_t>(i)] = bfloat16(hashed(seed, static_cast<std::uint64_t>(i), 0.02f));
  return m;
}

/// A 25%-dense residual with fp16 values, encoded as a bitmap.
sparse::sparse_matrix residual(index_t rows, index_t cols, std::uint64_t seed) {
  std::vector<float> r(static_cast<std::size_t>(rows * cols));
#pragma omp parallel for schedule(static)
  for (index_t i = 0; i < rows * cols; ++i) {
    const auto h = mix(seed * 31 + static_cast<std::uint64_t>(i));
    r[static_cast<std::size_t>(i)] = (h & 3) == 0 ? hashed(seed, static_cast<std::uint64_t>(i), 0.005f) : 0.0f;
  }
  sparse::encode_params p;
  p.format = sparse::sparse_format::bitmap;
  p.values = sparse::value_dtype::float16;
  sparse::sparse_matrix out;
  sparse::encode_sparse<float>(moecomp::host_context(), p, moecomp::matrix_view<const float>(r.data(), rows, cols), out);
  return out;
}

struct layer {
  std::vector<bfloat16> b1, b3, b2;
  std::vector<sparse::sparse_matrix> r1, r3, r2;
  std::vector<std::vector<bfloat16>> w1, w3, w2;
};

const layer& the_layer() {
  static const layer L = [] {
    layer l;
    l.b1 = bf16_matrix(d_ff, d, 1);
    l.b3 = bf16_matrix(d_ff, d, 2);
    l.b2 = bf16_matrix(d, d_ff, 3);
    for (index_t e = 0; e < experts; ++e) {
      l.r1.push_back(residual(d_ff, d, 100 + 3 * e));
      l.r3.push_back(residual(d_ff, d, 101 + 3 * e));
      l.r2.push_back(residual(d, d_ff, 102 + 3 * e));
      l.w1.push_back(bf16_matrix(d_ff, d, 200 + 3 * e));
      l.w3.push_back(bf16_matrix(d_ff, d, 201 + 3 * e));
      l.w2.push_back(bf16_matrix(d, d_ff, 202 + 3 * e));
    }
    return l;
  }();
  return L;
}

/// Top-2 routing of `tokens` tokens, as rows grouped by expert: the rows' tokens and the expert offsets.
void route(index_t tokens, std::vector<index_t>& token_of_row, std::vector<index_t>& offsets) {
  std::vector<std::vector<index_t>> rows(experts);
  for (index_t t = 0; t < tokens; ++t) {
    rows[static_cast<std::size_t>(t % experts)].push_back(t);
    rows[static_cast<std::size_t>((3 * t + 1) % experts)].push_back(t);
  }
  token_of_row.clear();
  offsets.assign(1, 0);
  for (const auto& r : rows) {
    token_of_row.insert(token_of_row.end(), r.begin(), r.end());
    offsets.push_back(static_cast<index_t>(token_of_row.size()));
  }
}

moecomp::host_matrix<float> gathered_tokens(const std::vector<index_t>& token_of_row) {
  moecomp::host_matrix<float> x(static_cast<index_t>(token_of_row.size()), d);
  for (std::size_t r = 0; r < token_of_row.size(); ++r)
    for (index_t j = 0; j < d; ++j)
      x(static_cast<index_t>(r), j) = hashed(7, static_cast<std::uint64_t>(token_of_row[r] * d + j), 1.0f);
  return x;
}

void shared_base(benchmark::State& state) {
  const layer& L = the_layer();
  std::vector<index_t> token_of_row, offsets;
  route(state.range(0), token_of_row, offsets);
  const moecomp::host_matrix<float> x = gathered_tokens(token_of_row);
  moecomp::host_matrix<float> y(x.rows(), d);
  moe::shared_base_ffn_view<bfloat16> view;
  view.w1 = moecomp::matrix_view<const bfloat16>(L.b1.data(), d_ff, d);
  view.w3 = moecomp::matrix_view<const bfloat16>(L.b3.data(), d_ff, d);
  view.w2 = moecomp::matrix_view<const bfloat16>(L.b2.data(), d, d_ff);
  double bytes = 3.0 * double(d * d_ff) * 2;
  for (index_t e = 0; e < experts; ++e) {
    view.r1.push_back(L.r1[static_cast<std::size_t>(e)].view());
    view.r3.push_back(L.r3[static_cast<std::size_t>(e)].view());
    view.r2.push_back(L.r2[static_cast<std::size_t>(e)].view());
    if (offsets[static_cast<std::size_t>(e) + 1] > offsets[static_cast<std::size_t>(e)])
      bytes += double(L.r1[static_cast<std::size_t>(e)].bytes() + L.r3[static_cast<std::size_t>(e)].bytes() +
                      L.r2[static_cast<std::size_t>(e)].bytes());
  }
  const moecomp::host_context ctx;
  for (auto _ : state) {
    moe::shared_base_ffn_forward<bfloat16>(ctx, {}, view, x.view(), moecomp::make_vector_view(offsets.data(), experts + 1),
                                           y.view());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["bytes"] = bytes;
  state.counters["bytes/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

void dense(benchmark::State& state) {
  const layer& L = the_layer();
  std::vector<index_t> token_of_row, offsets;
  route(state.range(0), token_of_row, offsets);
  const moecomp::host_matrix<float> x = gathered_tokens(token_of_row);
  moecomp::host_matrix<float> y(x.rows(), d);
  double bytes = 0;
  for (index_t e = 0; e < experts; ++e)
    if (offsets[static_cast<std::size_t>(e) + 1] > offsets[static_cast<std::size_t>(e)]) bytes += 3.0 * double(d * d_ff) * 2;
  const moecomp::host_context ctx;
  for (auto _ : state) {
    for (index_t e = 0; e < experts; ++e) {
      const index_t first = offsets[static_cast<std::size_t>(e)], m = offsets[static_cast<std::size_t>(e) + 1] - first;
      if (m == 0) continue;
      moe::ffn_expert_view<bfloat16> v;
      v.w1 = moecomp::matrix_view<const bfloat16>(L.w1[static_cast<std::size_t>(e)].data(), d_ff, d);
      v.w3 = moecomp::matrix_view<const bfloat16>(L.w3[static_cast<std::size_t>(e)].data(), d_ff, d);
      v.w2 = moecomp::matrix_view<const bfloat16>(L.w2[static_cast<std::size_t>(e)].data(), d, d_ff);
      moe::ffn_forward<bfloat16>(ctx, {}, v, moecomp::matrix_view<const float>(x.data() + first * d, m, d),
                                 moecomp::matrix_view<float>(y.data() + first * d, m, d));
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["bytes"] = bytes;
  state.counters["bytes/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK(shared_base)->Arg(1)->Arg(8)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(dense)->Arg(1)->Arg(8)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
