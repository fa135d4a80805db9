// The ResMoE-size free-support barycenter on this CPU: k experts of n neurons, one design row per neuron
// ([W1_i | W3_i | W2[:, i]], Mixtral-8x7B: k = 8, n = 14336, d = 3 * 4096 + 2 = 12290), float32, synthetic
// upcycled experts (one base FFN, neurons shuffled per expert, plus noise), init = expert 0, as the ResMoE code.
// A plain timer, not a Google Benchmark: one run takes minutes.
//
//   bench_resmoe_barycenter [--k 8] [--n 14336] [--d 12290] [--iterations 1] [--noise 0.3] [--threads 0]
//
// Prints the wall time of the library call, the GEMM work of one assignment round, and the result.
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>
#include <moecomp/ot/free_support_barycenter.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  using namespace moecomp;
  long long k = 8, n = 14336, d = 12290, iterations = 1, threads = 0;
  double noise = 0.3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const double value = std::atof(argv[i + 1]);
    if (key == "--k") k = static_cast<long long>(value);
    else if (key == "--n") n = static_cast<long long>(value);
    else if (key == "--d") d = static_cast<long long>(value);
    else if (key == "--iterations") iterations = static_cast<long long>(value);
    else if (key == "--noise") noise = value;
    else if (key == "--threads") threads = static_cast<long long>(value);
    else {
      std::fprintf(stderr, "bench_resmoe_barycenter: unknown option %s\n", key.c_str());
      return 2;
    }
  }
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  host_matrix<float> base(n, d);
  random_generator(1).fill_normal(base.view());
  host_matrix<float> experts(k * n, d);
  // Uniform noise with the requested standard deviation: cheaper than normals, and its law does not matter here.
  const float half_width = static_cast<float>(noise * std::sqrt(3.0));
#pragma omp parallel for schedule(static)
  for (long long j = 0; j < k; ++j) {
    random_generator rng(2, static_cast<std::uint64_t>(j));
    std::vector<index_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), index_t(0));
    rng.shuffle(order.begin(), order.end());
    for (index_t i = 0; i < n; ++i) {
      const float* src = base.view().row_ptr(order[static_cast<std::size_t>(i)]);
      float* dst = experts.view().row_ptr(j * n + i);
      for (index_t c = 0; c < d; ++c) dst[c] = src[c] + half_width * (2.0f * rng.uniform<float>() - 1.0f);
    }
  }
  const double setup = std::chrono::duration<double>(clock::now() - t0).count();

  host_matrix<float> barycenter(n, d);
  host_matrix<index_t> permutations(k, n);
  ot::free_support_barycenter_params params;
  params.max_iterations = iterations;
  const host_context ctx(static_cast<int>(threads));
  const auto t1 = clock::now();
  const ot::free_support_barycenter_result r = ot::free_support_barycenter<float>(
      ctx, params, split_rows(experts.view(), k), experts.view().row_range(0, n), barycenter.view(), permutations.view());
  const double seconds = std::chrono::duration<double>(clock::now() - t1).count();
  const double gemm_tflop = 2.0 * static_cast<double>(k) * n * n * d * 1e-12;
  std::printf("k %lld n %lld d %lld float32, setup %.1f s\n", k, n, d, setup);
  std::printf("free_support_barycenter: %.1f s, iterations %lld, status %s, objective %.6g, displacement %.3g\n",
              seconds, static_cast<long long>(r.iterations), to_string(r.status), r.objective, r.criterion);
  std::printf("GEMM work per assignment round: %.2f TFLOP\n", gemm_tflop);
  return r.status == status::ok || r.status == status::iteration_limit ? 0 : 1;
}
