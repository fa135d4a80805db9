// expert_similarity: the README's quick-start example. It builds a synthetic Mixture-of-Experts layer
// (SwiGLU experts in three planted families), computes each expert's HC-SMoE feature (its mean output over
// calibration tokens, every expert run on every token), and summarises how similar the experts are with
// moecomp's pairwise distances: Euclidean on the output features (HC-SMoE's choice) and cosine on the
// flattened weights. Later issues grow this into the full compression pipeline.
//
//   expert_similarity [--seed S]        exit 0 when every expert's nearest neighbour is in its own family
#include <moecomp/moecomp.hpp>

#include <moecomp/interop/eigen.hpp>  // Eigen itself, through moecomp (docs/building.md, "Warnings")

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using moecomp::index_t;
using row_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct expert {
  row_matrix w1, w3, w2;  // gate (d_ff x d_model), up (d_ff x d_model), down (d_model x d_ff)
};

row_matrix normal_matrix(moecomp::random_generator& rng, index_t rows, index_t cols, float scale) {
  row_matrix m(rows, cols);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) m(i, j) = scale * rng.normal<float>();
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t seed = 7;
  for (int k = 1; k < argc; ++k) {
    if (std::strcmp(argv[k], "--seed") == 0 && k + 1 < argc) {
      seed = std::strtoull(argv[++k], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: expert_similarity [--seed S]\n");
      return 2;
    }
  }
  const index_t d_model = 64, d_ff = 256, tokens = 512;
  const int family_of[] = {0, 0, 0, 1, 1, 1, 2, 2};  // three planted families of experts
  const index_t experts = 8;

  moecomp::random_generator rng(seed);
  const float w_scale = 1.0f / std::sqrt(static_cast<float>(d_model));
  std::vector<expert> family_base(3);
  for (auto& base : family_base)
    base = {normal_matrix(rng, d_ff, d_model, w_scale), normal_matrix(rng, d_ff, d_model, w_scale),
            normal_matrix(rng, d_model, d_ff, w_scale)};
  std::vector<expert> layer(static_cast<std::size_t>(experts));
  for (index_t e = 0; e < experts; ++e) {
    const expert& base = family_base[static_cast<std::size_t>(family_of[e])];
    const float noise = 0.35f * w_scale;  // members of a family share most of their weights
    layer[static_cast<std::size_t>(e)] = {base.w1 + normal_matrix(rng, d_ff, d_model, noise),
                                          base.w3 + normal_matrix(rng, d_ff, d_model, noise),
                                          base.w2 + normal_matrix(rng, d_model, d_ff, noise)};
  }
  const row_matrix calibration = normal_matrix(rng, tokens, d_model, 1.0f);

  // HC-SMoE's expert feature: mean over all tokens of W2 (SiLU(W1 x) * (W3 x)).
  moecomp::host_matrix<float> features(experts, d_model);
  for (index_t e = 0; e < experts; ++e) {
    const expert& ex = layer[static_cast<std::size_t>(e)];
    const row_matrix gate = calibration * ex.w1.transpose(), up = calibration * ex.w3.transpose();
    const row_matrix hidden = (gate.array() / (1.0f + (-gate.array()).exp()) * up.array()).matrix();
    const Eigen::RowVectorXf mean = (hidden * ex.w2.transpose()).colwise().mean();
    for (index_t j = 0; j < d_model; ++j) features(e, j) = mean(j);
  }
  // Flattened weights [W1 | W3 | W2^T], one row per expert.
  const index_t flat = 3 * d_ff * d_model;
  moecomp::host_matrix<float> weights(experts, flat);
  for (index_t e = 0; e < experts; ++e) {
    const expert& ex = layer[static_cast<std::size_t>(e)];
    float* row = &weights(e, 0);
    Eigen::Map<row_matrix>(row, d_ff, d_model) = ex.w1;
    Eigen::Map<row_matrix>(row + d_ff * d_model, d_ff, d_model) = ex.w3;
    Eigen::Map<row_matrix>(row + 2 * d_ff * d_model, d_ff, d_model) = ex.w2.transpose();
  }

  const moecomp::host_context ctx;
  moecomp::distance::pairwise_distance_params euclidean, cosine;
  cosine.metric = moecomp::distance::metric::cosine;
  moecomp::host_matrix<float> d_out(experts, experts), d_weights(experts, experts);
  moecomp::distance::pairwise_distances(ctx, euclidean, features.view(), d_out.view());
  moecomp::distance::pairwise_distances(ctx, cosine, weights.view(), d_weights.view());

  std::printf("moecomp %s: %lld synthetic SwiGLU experts (d_model %lld, d_ff %lld), %lld calibration tokens, "
              "seed %llu\n\n", MOECOMP_VERSION_STRING, static_cast<long long>(experts),
              static_cast<long long>(d_model), static_cast<long long>(d_ff), static_cast<long long>(tokens),
              static_cast<unsigned long long>(seed));
  auto print = [&](const char* title, const moecomp::host_matrix<float>& d) {
    std::printf("%s\n      ", title);
    for (index_t j = 0; j < experts; ++j) std::printf("   e%lld  ", static_cast<long long>(j));
    std::printf("\n");
    for (index_t i = 0; i < experts; ++i) {
      std::printf("  e%lld ", static_cast<long long>(i));
      for (index_t j = 0; j < experts; ++j) std::printf(" %7.4f", d(i, j));
      std::printf("\n");
    }
    std::printf("\n");
  };
  print("Euclidean distance between mean expert outputs (HC-SMoE feature):", d_out);
  print("Cosine distance between flattened weights [W1 | W3 | W2^T]:", d_weights);

  int recovered = 0;
  std::printf("nearest expert (by output feature), lowest index on ties:\n");
  for (index_t i = 0; i < experts; ++i) {
    index_t best = -1;
    for (index_t j = 0; j < experts; ++j)
      if (j != i && (best < 0 || d_out(i, j) < d_out(i, best))) best = j;
    const bool same = family_of[i] == family_of[best];
    recovered += same;
    std::printf("  e%lld -> e%lld  (distance %.4f, %s family)\n", static_cast<long long>(i),
                static_cast<long long>(best), d_out(i, best), same ? "same" : "OTHER");
  }
  std::printf("\n%d/%lld experts have their nearest neighbour in their planted family\n", recovered,
              static_cast<long long>(experts));
  return recovered == experts ? 0 : 1;
}
