// The device weighted merge (<moecomp/cuda/merge/merge.cuh>) and the device permute_neurons
// (<moecomp/cuda/align/align.cuh>) against the host's merge and permute_neurons: the same double sums rounded
// once, so the device results must equal the host's bit for bit, for float and bf16 storage, with biases, with
// and without permutations. Argument checks run before any device work and pass without a GPU. The rest runs
// under `ctest -L cuda`.
#include <doctest/doctest.h>
#include <moecomp/core/random.hpp>
#include <moecomp/cuda/align/align.cuh>
#include <moecomp/cuda/core/device_buffer.cuh>
#include <moecomp/cuda/merge/merge.cuh>

#include "device_test_support.cuh"

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

namespace {

using moecomp::index_t;
namespace moe = moecomp::moe;
using moecomp_test::device_fixture;
using moecomp_test::dmatrix;
using moecomp_test::dvector;

constexpr index_t experts = 4, d = 12, d_ff = 20;

/// The same bits (bfloat16 has no operator==).
template <class W>
bool same_bits(W a, W b) {
  return std::memcmp(&a, &b, sizeof(W)) == 0;
}

/// A stack of 4 experts with biases, values from moecomp's generator rounded to W.
template <class W>
struct stack_data {
  std::vector<W> w1, w3, w2, b1, b3, b2;
  explicit stack_data(std::uint64_t seed) {
    moecomp::random_generator rng(seed);
    const auto draw = [&](std::vector<W>& v, index_t n) {
      for (index_t i = 0; i < n; ++i) v.push_back(moecomp::convert_to<W>(0.3 * rng.normal<double>()));
    };
    draw(w1, experts * d_ff * d);
    draw(w3, experts * d_ff * d);
    draw(w2, experts * d * d_ff);
    draw(b1, experts * d_ff);
    draw(b3, experts * d_ff);
    draw(b2, experts * d);
  }
  /// The value the merge must produce for element k of a piece: sum_i c_i src_i(gathered), in double, rounded once.
  W expected(const std::vector<W>& piece, index_t per_expert, const std::vector<index_t>& members,
             const std::vector<double>& c, const std::vector<std::vector<index_t>>& perms, index_t row, index_t col,
             index_t cols, int axis) const {
    double acc = 0;
    for (std::size_t i = 0; i < members.size(); ++i) {
      index_t r = row, k = col;
      if (axis == 0 && !perms.empty()) r = perms[i][static_cast<std::size_t>(row)];
      if (axis == 1 && !perms.empty()) k = perms[i][static_cast<std::size_t>(col)];
      acc += c[i] * moecomp::convert_to<double>(piece[static_cast<std::size_t>(members[i] * per_expert + r * cols + k)]);
    }
    return moecomp::convert_to<W>(acc);
  }
};

}  // namespace

TEST_CASE("device merge_weighted and permute_neurons: argument checks run before any device work") {
  const moecomp::cuda_context ctx(nullptr);  // never used: the checks come first
  float storage[4096] = {0};
  index_t ids[64] = {0};
  moe::ffn_expert_stack_device_view<float> s;
  s.w1 = moecomp::matrix_stack_view<const float, moecomp::device_memory>(storage, 2, d_ff, d, d, d_ff * d);
  s.w2 = moecomp::matrix_stack_view<const float, moecomp::device_memory>(storage + 2 * d_ff * d, 2, d, d_ff, d_ff, d * d_ff);
  moe::ffn_expert_device_mutable_view<float> out;
  out.w1 = dmatrix<float>(storage + 4 * d_ff * d, d_ff, d);
  out.w2 = dmatrix<float>(storage + 5 * d_ff * d, d, d_ff);
  const std::vector<index_t> members{0, 1};
  const std::vector<double> c{0.5, 0.5};
  const auto mv = moecomp::make_vector_view<const index_t>(members.data(), 2);
  const auto cv = moecomp::make_vector_view<const double>(c.data(), 2);
  CHECK_THROWS_WITH_AS(moecomp::merge::merge_weighted<float>(ctx, s, mv, moecomp::make_vector_view<const double>(c.data(), 1), {}, out),
                       "merge_weighted: coefficients must have 2 entries (one per member), got 1", moecomp::invalid_argument);
  const std::vector<index_t> outside{0, 2};
  CHECK_THROWS_WITH_AS(moecomp::merge::merge_weighted<float>(ctx, s, moecomp::make_vector_view<const index_t>(outside.data(), 2), cv, {}, out),
                       "merge_weighted: members must be expert ids in [0, 2), got 2 at 1", moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(moecomp::merge::merge_weighted<float>(ctx, s, mv, cv, dmatrix<const index_t>(ids, 2, 3), out),
                       doctest::Contains("merge_weighted: permutations must be empty or 2 x 20"), moecomp::invalid_argument);
  auto narrow = out;
  narrow.w1 = dmatrix<float>(storage + 4 * d_ff * d, d_ff, d - 1);
  CHECK_THROWS_WITH_AS(moecomp::merge::merge_weighted<float>(ctx, s, mv, cv, {}, narrow),
                       doctest::Contains("merge_weighted: out must have the experts' shape"), moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(moecomp::align::permute_neurons<float>(ctx, s.expert(0), dvector<const index_t>(ids, 3), out),
                       doctest::Contains("permute_neurons: permutation must have 20 contiguous entries"),
                       moecomp::invalid_argument);
}

TEST_CASE_TEMPLATE("device merge_weighted equals the host's double sum rounded once; permute_neurons copies exactly", W,
                   float, moecomp::bfloat16) {
  device_fixture f;
  const auto ctx = f.context();
  const stack_data<W> h(1);
  const auto put = [&](const std::vector<W>& v) {
    moecomp::device_buffer<W> b(ctx, static_cast<index_t>(v.size()));
    moecomp::copy_to_device(ctx, moecomp::make_vector_view(v.data(), static_cast<index_t>(v.size())), b.view());
    return b;
  };
  const auto w1 = put(h.w1), w3 = put(h.w3), w2 = put(h.w2), b1 = put(h.b1), b3 = put(h.b3), b2 = put(h.b2);
  moe::ffn_expert_stack_device_view<W> s;
  s.w1 = moecomp::matrix_stack_view<const W, moecomp::device_memory>(w1.data(), experts, d_ff, d, d, d_ff * d);
  s.w3 = moecomp::matrix_stack_view<const W, moecomp::device_memory>(w3.data(), experts, d_ff, d, d, d_ff * d);
  s.w2 = moecomp::matrix_stack_view<const W, moecomp::device_memory>(w2.data(), experts, d, d_ff, d_ff, d * d_ff);
  s.b1 = dmatrix<const W>(b1.data(), experts, d_ff);
  s.b3 = dmatrix<const W>(b3.data(), experts, d_ff);
  s.b2 = dmatrix<const W>(b2.data(), experts, d);
  moecomp::device_buffer<W> o1(ctx, d_ff * d), o3(ctx, d_ff * d), o2(ctx, d * d_ff), ob1(ctx, d_ff), ob3(ctx, d_ff),
      ob2(ctx, d);
  const moe::ffn_expert_device_mutable_view<W> out{o1.view(d_ff, d), o3.view(d_ff, d), o2.view(d, d_ff),
                                                   ob1.view(),       ob3.view(),       ob2.view()};
  const std::vector<index_t> members{3, 0, 2};
  const std::vector<double> c{0.5, 0.3, 0.2};
  std::vector<std::vector<index_t>> perms(3, std::vector<index_t>(d_ff));
  moecomp::random_generator rng(2);
  std::vector<index_t> flat;
  for (auto& p : perms) {
    std::iota(p.begin(), p.end(), index_t(0));
    rng.shuffle(p.begin(), p.end());
    flat.insert(flat.end(), p.begin(), p.end());
  }
  moecomp::device_buffer<index_t> dp(ctx, 3 * d_ff);
  moecomp::copy_to_device(ctx, moecomp::make_vector_view<const index_t>(flat.data(), 3 * d_ff), dp.view());
  for (bool permuted : {false, true}) {
    CAPTURE(permuted);
    const std::vector<std::vector<index_t>> used = permuted ? perms : std::vector<std::vector<index_t>>{};
    moecomp::merge::merge_weighted<W>(ctx, s, moecomp::make_vector_view<const index_t>(members.data(), 3),
                                      moecomp::make_vector_view<const double>(c.data(), 3),
                                      permuted ? dp.view(3, d_ff).as_const() : dmatrix<const index_t>(), out);
    std::vector<W> g1(d_ff * d), g2(d * d_ff), gb1(d_ff), gb2(d);
    moecomp::copy_to_host(ctx, o1.view(d_ff, d).as_const(), moecomp::make_matrix_view(g1.data(), d_ff, d));
    moecomp::copy_to_host(ctx, o2.view(d, d_ff).as_const(), moecomp::make_matrix_view(g2.data(), d, d_ff));
    moecomp::copy_to_host(ctx, ob1.view(1, d_ff).as_const(), moecomp::make_matrix_view(gb1.data(), 1, d_ff));
    moecomp::copy_to_host(ctx, ob2.view(1, d).as_const(), moecomp::make_matrix_view(gb2.data(), 1, d));
    f.sync();
    std::size_t wrong = 0;
    for (index_t r = 0; r < d_ff; ++r)
      for (index_t k = 0; k < d; ++k)
        wrong += !same_bits<W>(g1[static_cast<std::size_t>(r * d + k)], h.expected(h.w1, d_ff * d, members, c, used, r, k, d, 0));
    for (index_t r = 0; r < d; ++r)
      for (index_t k = 0; k < d_ff; ++k)
        wrong += !same_bits<W>(g2[static_cast<std::size_t>(r * d_ff + k)], h.expected(h.w2, d * d_ff, members, c, used, r, k, d_ff, 1));
    for (index_t k = 0; k < d_ff; ++k) wrong += !same_bits<W>(gb1[static_cast<std::size_t>(k)], h.expected(h.b1, d_ff, members, c, used, 0, k, d_ff, 1));
    for (index_t k = 0; k < d; ++k) wrong += !same_bits<W>(gb2[static_cast<std::size_t>(k)], h.expected(h.b2, d, members, c, {}, 0, k, d, -1));
    CHECK(wrong == 0);
  }
  // permute_neurons: expert 1 with perms[0], every value copied exactly.
  moecomp::align::permute_neurons<W>(ctx, s.expert(1), dp.view().as_const().subview(0, d_ff) , out);
  std::vector<W> g1(d_ff * d);
  moecomp::copy_to_host(ctx, o1.view(d_ff, d).as_const(), moecomp::make_matrix_view(g1.data(), d_ff, d));
  f.sync();
  std::size_t wrong = 0;
  for (index_t r = 0; r < d_ff; ++r)
    for (index_t k = 0; k < d; ++k)
      wrong += !same_bits<W>(g1[static_cast<std::size_t>(r * d + k)], h.w1[static_cast<std::size_t>(d_ff * d + perms[0][static_cast<std::size_t>(r)] * d + k)]);
  CHECK(wrong == 0);
}
