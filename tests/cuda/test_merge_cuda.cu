// The device weighted merge (<moecomp/cuda/merge/merge.cuh>) and the device permute_neurons
// (<moecomp/cuda/align/align.cuh>) against the host's merge and permute_neurons: the same double sums rounded
// once, so the device results must equal the host's bit for bit, for float and bf16 storage, with biases, with
// and without permutations; the device fix-dom merge (merge_fix_dom, compiled, not run on hardware) against the
// host merge_experts on planted data, and the device learned merge (merge_learned, compiled, not run) against the
// host's learned coefficients. Argument checks run before any device work and pass without a GPU. The rest runs
// under `ctest -L cuda`.
#include <doctest/doctest.h>
#include <moecomp/core/random.hpp>
#include <moecomp/cuda/align/align.cuh>
#include <moecomp/cuda/core/device_buffer.cuh>
#include <moecomp/cuda/merge/merge.cuh>

#include "device_test_support.cuh"
#include "merge_reference.hpp"

#include <algorithm>
#include <cmath>
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

// ---- The device fix-dom merge (merge_fix_dom) against the host's merge_experts with method fix_dom.

namespace {

constexpr index_t fd_experts = 4, fd_d = 32, fd_d_ff = 48, fd_tokens = 256;

/// A stack with a planted fix-dom structure: expert 2 (the dominant of group {0, 2, 3}) is random; experts 0
/// and 3 are its neurons in a shuffled order plus small noise, and expert 3's neurons 0 and 1 both copy the
/// dominant's neuron 5 (many-to-one); expert 1 (group 0, alone) is random. planted[i][b]: the dominant neuron
/// member i's neuron b comes from (i: 0 = the dominant, 1 = expert 0, 2 = expert 3).
template <class W>
struct planted_stack {
  std::vector<W> w1, w3, w2, b1, b3, b2;
  std::vector<std::vector<index_t>> planted;
  std::vector<float> x;
  explicit planted_stack(std::uint64_t seed) {
    moecomp::random_generator rng(seed);
    const auto draw = [&](double s) { return s * rng.normal<double>(); };
    std::vector<double> r1(fd_experts * fd_d_ff * fd_d), r3(r1.size()), r2(fd_experts * fd_d * fd_d_ff),
        rb1(fd_experts * fd_d_ff), rb3(rb1.size()), rb2(fd_experts * fd_d);
    for (auto* v : {&r1, &r3, &r2, &rb1, &rb3, &rb2})
      for (double& e : *v) e = draw(0.3);
    std::vector<index_t> p0(fd_d_ff), p3(fd_d_ff);
    std::iota(p0.begin(), p0.end(), index_t(0));
    rng.shuffle(p0.begin(), p0.end());
    std::iota(p3.begin(), p3.end(), index_t(0));
    rng.shuffle(p3.begin(), p3.end());
    p3[0] = 5;
    p3[1] = 5;
    const index_t dom = 2;
    for (const auto& [e, p] : {std::pair<index_t, const std::vector<index_t>*>{0, &p0}, {3, &p3}})
      for (index_t b = 0; b < fd_d_ff; ++b) {
        const index_t a = (*p)[static_cast<std::size_t>(b)];
        for (index_t k = 0; k < fd_d; ++k) {
          r1[static_cast<std::size_t>((e * fd_d_ff + b) * fd_d + k)] = r1[static_cast<std::size_t>((dom * fd_d_ff + a) * fd_d + k)] + draw(0.02);
          r3[static_cast<std::size_t>((e * fd_d_ff + b) * fd_d + k)] = r3[static_cast<std::size_t>((dom * fd_d_ff + a) * fd_d + k)] + draw(0.02);
          r2[static_cast<std::size_t>((e * fd_d + k) * fd_d_ff + b)] = r2[static_cast<std::size_t>((dom * fd_d + k) * fd_d_ff + a)] + draw(0.02);
        }
        rb1[static_cast<std::size_t>(e * fd_d_ff + b)] = rb1[static_cast<std::size_t>(dom * fd_d_ff + a)] + draw(0.02);
        rb3[static_cast<std::size_t>(e * fd_d_ff + b)] = rb3[static_cast<std::size_t>(dom * fd_d_ff + a)] + draw(0.02);
      }
    std::vector<index_t> identity(fd_d_ff);
    std::iota(identity.begin(), identity.end(), index_t(0));
    planted = {identity, p0, p3};
    const auto to_w = [](const std::vector<double>& v, std::vector<W>& out) {
      for (double e : v) out.push_back(moecomp::convert_to<W>(e));
    };
    to_w(r1, w1);
    to_w(r3, w3);
    to_w(r2, w2);
    to_w(rb1, b1);
    to_w(rb3, b3);
    to_w(rb2, b2);
    for (index_t i = 0; i < fd_tokens * fd_d; ++i) x.push_back(static_cast<float>(rng.normal<double>()));
  }
  moe::ffn_expert_stack_view<W> host_view() const {
    moe::ffn_expert_stack_view<W> s;
    s.w1 = moecomp::matrix_stack_view<const W>(w1.data(), fd_experts, fd_d_ff, fd_d, fd_d, fd_d_ff * fd_d);
    s.w3 = moecomp::matrix_stack_view<const W>(w3.data(), fd_experts, fd_d_ff, fd_d, fd_d, fd_d_ff * fd_d);
    s.w2 = moecomp::matrix_stack_view<const W>(w2.data(), fd_experts, fd_d, fd_d_ff, fd_d_ff, fd_d * fd_d_ff);
    s.b1 = moecomp::make_matrix_view<const W>(b1.data(), fd_experts, fd_d_ff);
    s.b3 = moecomp::make_matrix_view<const W>(b3.data(), fd_experts, fd_d_ff);
    s.b2 = moecomp::make_matrix_view<const W>(b2.data(), fd_experts, fd_d);
    return s;
  }
};

/// max |a - b| / max |b| over two pieces in W.
template <class W>
double relative_difference(const std::vector<W>& a, const W* b, std::size_t n) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double u = moecomp::convert_to<double>(a[i]), v = moecomp::convert_to<double>(b[i]);
    diff = std::max(diff, std::fabs(u - v));
    scale = std::max(scale, std::fabs(v));
  }
  return scale > 0 ? diff / scale : diff;
}

/// A group's arguments over host memory posing as device memory (the argument checks never read it): a stack of 3
/// experts without W3 or biases, an output expert, 10 tokens, members {0, 2} and tokens {0, 3, 9}.
struct fake_group {
  float storage[8192] = {0};
  std::vector<index_t> members{0, 2}, tokens{0, 3, 9};
  struct views {
    moe::ffn_expert_stack_device_view<float> s;
    moe::ffn_expert_device_mutable_view<float> out;
    dmatrix<const float> x;
    moecomp::vector_view<const index_t> mv, tv;
  };
  views arguments() const {
    float* base = const_cast<float*>(storage);
    views v;
    v.s.w1 = moecomp::matrix_stack_view<const float, moecomp::device_memory>(base, 3, d_ff, d, d, d_ff * d);
    v.s.w2 = moecomp::matrix_stack_view<const float, moecomp::device_memory>(base + 3 * d_ff * d, 3, d, d_ff, d_ff, d * d_ff);
    v.out.w1 = dmatrix<float>(base + 6 * d_ff * d, d_ff, d);
    v.out.w2 = dmatrix<float>(base + 7 * d_ff * d, d, d_ff);
    v.x = dmatrix<const float>(base + 8 * d_ff * d, 10, d);
    v.mv = moecomp::make_vector_view<const index_t>(members.data(), 2);
    v.tv = moecomp::make_vector_view<const index_t>(tokens.data(), 3);
    return v;
  }
};

}  // namespace

TEST_CASE("device merge_fix_dom: argument checks run before any device work") {
  const moecomp::cuda_context ctx(nullptr);  // never used: the checks come first
  const fake_group f;
  const auto& [s, out, x, mv, tv] = f.arguments();
  moecomp::merge::merge_params params;
  params.method = moecomp::merge::merge_method::fix_dom;
  CHECK_THROWS_WITH_AS(moecomp::merge::merge_fix_dom<float>(ctx, params, s, mv, 1, 0, x, tv, out),
                       "merge_fix_dom: dominant must be one of the members, got 1", moecomp::invalid_argument);
  const std::vector<index_t> twice{2, 2};
  CHECK_THROWS_WITH_AS(moecomp::merge::merge_fix_dom<float>(ctx, params, s, moecomp::make_vector_view<const index_t>(twice.data(), 2), 2, 0, x, tv, out),
                       "merge_fix_dom: members must be distinct, got 2 at 0 and 1", moecomp::invalid_argument);
  const std::vector<index_t> far{0, 10};
  CHECK_THROWS_WITH_AS(moecomp::merge::merge_fix_dom<float>(ctx, params, s, mv, 2, 0, x, moecomp::make_vector_view<const index_t>(far.data(), 2), out),
                       "merge_fix_dom: tokens must be rows of x in [0, 10), got 10 at 1", moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(moecomp::merge::merge_fix_dom<float>(ctx, params, s, mv, 2, 0, dmatrix<const float>(f.storage, 10, d - 1), tv, out),
                       doctest::Contains("merge_fix_dom: x must have d = 12 columns"), moecomp::invalid_argument);
  index_t ids[64] = {0};
  CHECK_THROWS_WITH_AS(moecomp::merge::merge_fix_dom<float>(ctx, params, s, mv, 2, 0, x, tv, out, dmatrix<index_t>(ids, 3, d_ff)),
                       doctest::Contains("merge_fix_dom: matches must be empty or 2 x 20"), moecomp::invalid_argument);
  params.token_cap = -1;
  CHECK_THROWS_WITH_AS(moecomp::merge::merge_fix_dom<float>(ctx, params, s, mv, 2, 0, x, tv, out),
                       "merge_fix_dom: params.token_cap must be >= 0, got -1", moecomp::invalid_argument);
}

/// A planted_stack's experts and tokens in device memory, and a device expert of their shape to merge into.
template <class W>
struct device_planted_stack {
  moecomp::device_buffer<W> w1, w3, w2, b1, b3, b2;
  moecomp::device_buffer<float> xd;
  moecomp::device_buffer<W> o1, o3, o2, ob1, ob3, ob2;
  moe::ffn_expert_stack_device_view<W> s;
  device_planted_stack(const moecomp::cuda_context& ctx, const planted_stack<W>& h)
      : w1(put(ctx, h.w1)), w3(put(ctx, h.w3)), w2(put(ctx, h.w2)), b1(put(ctx, h.b1)), b3(put(ctx, h.b3)),
        b2(put(ctx, h.b2)), xd(put(ctx, h.x)), o1(ctx, fd_d_ff * fd_d), o3(ctx, fd_d_ff * fd_d), o2(ctx, fd_d * fd_d_ff),
        ob1(ctx, fd_d_ff), ob3(ctx, fd_d_ff), ob2(ctx, fd_d) {
    s.w1 = moecomp::matrix_stack_view<const W, moecomp::device_memory>(w1.data(), fd_experts, fd_d_ff, fd_d, fd_d, fd_d_ff * fd_d);
    s.w3 = moecomp::matrix_stack_view<const W, moecomp::device_memory>(w3.data(), fd_experts, fd_d_ff, fd_d, fd_d, fd_d_ff * fd_d);
    s.w2 = moecomp::matrix_stack_view<const W, moecomp::device_memory>(w2.data(), fd_experts, fd_d, fd_d_ff, fd_d_ff, fd_d * fd_d_ff);
    s.b1 = dmatrix<const W>(b1.data(), fd_experts, fd_d_ff);
    s.b3 = dmatrix<const W>(b3.data(), fd_experts, fd_d_ff);
    s.b2 = dmatrix<const W>(b2.data(), fd_experts, fd_d);
  }
  moe::ffn_expert_device_mutable_view<W> out() {
    return {o1.view(fd_d_ff, fd_d), o3.view(fd_d_ff, fd_d), o2.view(fd_d, fd_d_ff), ob1.view(), ob3.view(), ob2.view()};
  }

 private:
  template <class T>
  static moecomp::device_buffer<T> put(const moecomp::cuda_context& ctx, const std::vector<T>& v) {
    moecomp::device_buffer<T> b(ctx, static_cast<index_t>(v.size()));
    moecomp::copy_to_device(ctx, moecomp::make_vector_view(v.data(), static_cast<index_t>(v.size())), b.view());
    return b;
  }
};

TEST_CASE_TEMPLATE("device merge_fix_dom matches the host's fix_dom: the same matching, the weights to 1e-5", W, float,
                   moecomp::bfloat16) {
  device_fixture f;
  const auto ctx = f.context();
  const planted_stack<W> h(7);
  device_planted_stack<W> d(ctx, h);
  const auto& s = d.s;
  const auto& xd = d.xd;
  const moe::ffn_expert_device_mutable_view<W> out = d.out();
  moecomp::device_buffer<index_t> dm(ctx, 3 * fd_d_ff);
  // Group 1 = {0, 2, 3} with dominant 2; group 0 = {1}. Every token (no router), capped at 200 (the seeded draw)
  // or not, and a single token (the identity matching: a plain mean).
  const std::vector<std::int64_t> labels{1, 0, 1, 1}, dominants{1, 2};
  const std::vector<index_t> members{3, 0, 2}, ordered{2, 0, 3};
  for (const index_t tokens : {fd_tokens, index_t(1)})
    for (const index_t cap : {index_t(200), index_t(0)}) {
      CAPTURE(tokens);
      CAPTURE(cap);
      moecomp::merge::merge_params params;
      params.method = moecomp::merge::merge_method::fix_dom;
      params.token_cap = cap;
      params.seed = 11;
      const auto x = moecomp::make_matrix_view<const float>(h.x.data(), tokens, fd_d);
      // The host.
      std::vector<W> m1(2 * fd_d_ff * fd_d), m3(m1.size()), m2(2 * fd_d * fd_d_ff), mb1(2 * fd_d_ff), mb3(mb1.size()),
          mb2(2 * fd_d);
      std::vector<std::int64_t> map(fd_experts);
      moecomp::merge::merge_outputs<W> ho;
      ho.experts.w1 = moecomp::matrix_stack_view<W>(m1.data(), 2, fd_d_ff, fd_d, fd_d, fd_d_ff * fd_d);
      ho.experts.w3 = moecomp::matrix_stack_view<W>(m3.data(), 2, fd_d_ff, fd_d, fd_d, fd_d_ff * fd_d);
      ho.experts.w2 = moecomp::matrix_stack_view<W>(m2.data(), 2, fd_d, fd_d_ff, fd_d_ff, fd_d * fd_d_ff);
      ho.experts.b1 = moecomp::make_matrix_view(mb1.data(), 2, fd_d_ff);
      ho.experts.b3 = moecomp::make_matrix_view(mb3.data(), 2, fd_d_ff);
      ho.experts.b2 = moecomp::make_matrix_view(mb2.data(), 2, fd_d);
      ho.map = moecomp::make_vector_view(map.data(), fd_experts);
      moecomp::merge::merge_data<float> data;
      data.x = x;
      data.dominants = moecomp::make_vector_view<const std::int64_t>(dominants.data(), 2);
      const moecomp::merge::merge_report hr = moecomp_test::host_merge_experts<W>(
          params, h.host_view(), moecomp::make_vector_view<const std::int64_t>(labels.data(), fd_experts), data, ho);
      const std::vector<index_t> host_matches = moecomp_test::host_fix_dom_matches<W>(params, h.host_view(), ordered, 1, x);
      // The planted matching is what the host finds on every token set of at least 2 tokens.
      if (tokens >= 2)
        for (std::size_t i = 0; i < 3; ++i)
          CHECK(std::equal(h.planted[i].begin(), h.planted[i].end(), host_matches.begin() + static_cast<std::ptrdiff_t>(i * fd_d_ff)));
      // The device.
      std::vector<index_t> all(static_cast<std::size_t>(tokens));
      std::iota(all.begin(), all.end(), index_t(0));
      const moecomp::merge::merge_report dr = moecomp::merge::merge_fix_dom<W>(
          ctx, params, s, moecomp::make_vector_view<const index_t>(members.data(), 3), 2, 1,
          xd.view(tokens, fd_d).as_const(), moecomp::make_vector_view<const index_t>(all.data(), tokens), out,
          dm.view(3, fd_d_ff));
      CHECK(dr.groups[0].dominant == 2);
      CHECK(dr.groups[0].tokens == (cap == 0 ? tokens : std::min(cap, tokens)));
      CHECK(hr.groups[1].tokens == dr.groups[0].tokens);  // without a router the group's tokens are the correlation's
      CHECK(dr.groups.size() == 1);
      CHECK(dr.method == moecomp::merge::merge_method::fix_dom);
      CHECK(dr.coefficients == std::vector<double>{1.0 / 3, 0, 1.0 / 3, 1.0 / 3});
      CHECK(std::isnan(dr.groups[0].error));
      std::vector<W> g1(fd_d_ff * fd_d), g3(g1.size()), g2(fd_d * fd_d_ff), gb1(fd_d_ff), gb3(fd_d_ff), gb2(fd_d);
      std::vector<index_t> gm(3 * fd_d_ff);
      moecomp::copy_to_host(ctx, d.o1.view(fd_d_ff, fd_d).as_const(), moecomp::make_matrix_view(g1.data(), fd_d_ff, fd_d));
      moecomp::copy_to_host(ctx, d.o3.view(fd_d_ff, fd_d).as_const(), moecomp::make_matrix_view(g3.data(), fd_d_ff, fd_d));
      moecomp::copy_to_host(ctx, d.o2.view(fd_d, fd_d_ff).as_const(), moecomp::make_matrix_view(g2.data(), fd_d, fd_d_ff));
      moecomp::copy_to_host(ctx, d.ob1.view(1, fd_d_ff).as_const(), moecomp::make_matrix_view(gb1.data(), 1, fd_d_ff));
      moecomp::copy_to_host(ctx, d.ob3.view(1, fd_d_ff).as_const(), moecomp::make_matrix_view(gb3.data(), 1, fd_d_ff));
      moecomp::copy_to_host(ctx, d.ob2.view(1, fd_d).as_const(), moecomp::make_matrix_view(gb2.data(), 1, fd_d));
      moecomp::copy_to_host(ctx, dm.view(3, fd_d_ff).as_const(), moecomp::make_matrix_view(gm.data(), 3, fd_d_ff));
      f.sync();
      CHECK(gm == host_matches);
      // Group 1 is the host's merged expert 1.
      CHECK(relative_difference(g1, m1.data() + fd_d_ff * fd_d, g1.size()) <= 1e-5);
      CHECK(relative_difference(g3, m3.data() + fd_d_ff * fd_d, g3.size()) <= 1e-5);
      CHECK(relative_difference(g2, m2.data() + fd_d * fd_d_ff, g2.size()) <= 1e-5);
      CHECK(relative_difference(gb1, mb1.data() + fd_d_ff, gb1.size()) <= 1e-5);
      CHECK(relative_difference(gb3, mb3.data() + fd_d_ff, gb3.size()) <= 1e-5);
      CHECK(relative_difference(gb2, mb2.data() + fd_d, gb2.size()) <= 1e-5);
      // With the same matching the sums are the host's, in its order: the same bits.
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < g1.size(); ++i) wrong += !same_bits<W>(g1[i], m1[fd_d_ff * fd_d + i]);
      for (std::size_t i = 0; i < g2.size(); ++i) wrong += !same_bits<W>(g2[i], m2[fd_d * fd_d_ff + i]);
      CHECK(wrong == 0);
    }
}

TEST_CASE("device merge_learned: argument checks run before any device work") {
  const moecomp::cuda_context ctx(nullptr);  // never used: the checks come first
  const fake_group f;
  const auto& [s, out, x, mv, tv] = f.arguments();
  moecomp::merge::merge_params params;
  params.method = moecomp::merge::merge_method::learned;
  const std::vector<double> w(6, 0.5), bad{0.5, 0.5, 0.5, -1, 0.5, 0.5};
  CHECK_THROWS_WITH_AS(moecomp::merge::merge_learned<float>(ctx, params, s, mv, 1, 0, x, tv, {}, out),
                       "merge_learned: dominant must be one of the members, got 1", moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(moecomp::merge::merge_learned<float>(ctx, params, s, mv, 0, 0, x, tv, moecomp::make_matrix_view<const double>(w.data(), 2, 3), out),
                       "merge_learned: weights must be empty or 3 x 2 (tokens x members), got 2 x 3", moecomp::invalid_argument);
  CHECK_THROWS_WITH_AS(moecomp::merge::merge_learned<float>(ctx, params, s, mv, 0, 0, x, tv, moecomp::make_matrix_view<const double>(bad.data(), 3, 2), out),
                       "merge_learned: weights must be finite and >= 0, got -1 at (1, 1)", moecomp::invalid_argument);
  params.max_iterations = 0;
  CHECK_THROWS_WITH_AS(moecomp::merge::merge_learned<float>(ctx, params, s, mv, 0, 0, x, tv, {}, out),
                       "merge_learned: params.max_iterations must be >= 1, got 0", moecomp::invalid_argument);
}

TEST_CASE("device merge_learned matches the host's learned merge: coefficients to 2e-6, weights to 1e-5") {
  using W = float;
  device_fixture f;
  const auto ctx = f.context();
  const planted_stack<W> h(9);
  device_planted_stack<W> d(ctx, h);
  const auto& s = d.s;
  const auto& xd = d.xd;
  const moe::ffn_expert_device_mutable_view<W> out = d.out();
  // A router of 4 rows for the routed variant (top 2 of the softmax).
  std::vector<float> router(fd_experts * fd_d);
  moecomp::random_generator rng(13);
  for (float& v : router) v = static_cast<float>(0.5 * rng.normal<double>());
  const std::vector<std::int64_t> labels{1, 0, 1, 1}, dominants{1, 2};
  const std::vector<index_t> members{3, 0, 2};
  for (const bool routed : {false, true}) {
    CAPTURE(routed);
    moecomp::merge::merge_params params;
    params.method = moecomp::merge::merge_method::learned;
    params.token_cap = 200;
    params.seed = 5;
    params.max_iterations = 20;
    const auto x = moecomp::make_matrix_view<const float>(h.x.data(), fd_tokens, fd_d);
    const auto rv = moecomp::make_matrix_view<const float>(router.data(), fd_experts, fd_d);
    // The host.
    std::vector<W> m1(2 * fd_d_ff * fd_d), m3(m1.size()), m2(2 * fd_d * fd_d_ff), mb1(2 * fd_d_ff), mb3(mb1.size()),
        mb2(2 * fd_d);
    std::vector<float> merged_router(2 * fd_d);
    std::vector<std::int64_t> map(fd_experts);
    moecomp::merge::merge_outputs<W> ho;
    ho.experts.w1 = moecomp::matrix_stack_view<W>(m1.data(), 2, fd_d_ff, fd_d, fd_d, fd_d_ff * fd_d);
    ho.experts.w3 = moecomp::matrix_stack_view<W>(m3.data(), 2, fd_d_ff, fd_d, fd_d, fd_d_ff * fd_d);
    ho.experts.w2 = moecomp::matrix_stack_view<W>(m2.data(), 2, fd_d, fd_d_ff, fd_d_ff, fd_d * fd_d_ff);
    ho.experts.b1 = moecomp::make_matrix_view(mb1.data(), 2, fd_d_ff);
    ho.experts.b3 = moecomp::make_matrix_view(mb3.data(), 2, fd_d_ff);
    ho.experts.b2 = moecomp::make_matrix_view(mb2.data(), 2, fd_d);
    ho.map = moecomp::make_vector_view(map.data(), fd_experts);
    if (routed) ho.router = moecomp::make_matrix_view(merged_router.data(), 2, fd_d);
    moecomp::merge::merge_data<float> data;
    data.x = x;
    if (routed) data.router = rv;
    data.dominants = moecomp::make_vector_view<const std::int64_t>(dominants.data(), 2);
    const moecomp::merge::merge_report hr = moecomp_test::host_merge_experts<W>(
        params, h.host_view(), moecomp::make_vector_view<const std::int64_t>(labels.data(), fd_experts), data, ho);
    // The device: the group's tokens and router probabilities as the host builds them.
    std::vector<index_t> tokens(fd_tokens);
    std::iota(tokens.begin(), tokens.end(), index_t(0));
    std::vector<double> weights;
    if (routed) moecomp_test::host_group_routes(params, x, rv, members, tokens, weights);
    const auto wv = routed ? moecomp::make_matrix_view<const double>(weights.data(), static_cast<index_t>(tokens.size()), 3)
                           : moecomp::matrix_view<const double>();
    const moecomp::merge::merge_report dr = moecomp::merge::merge_learned<W>(
        ctx, params, s, moecomp::make_vector_view<const index_t>(members.data(), 3), 2, 1, xd.view(fd_tokens, fd_d).as_const(),
        moecomp::make_vector_view<const index_t>(tokens.data(), static_cast<index_t>(tokens.size())), wv, out);
    REQUIRE(dr.groups.size() == 1);
    CHECK(dr.groups[0].tokens == hr.groups[1].tokens);
    // The same loop on objectives equal to rounding: the same steps, up to a last step decided by the tolerance.
    CHECK(std::abs(dr.groups[0].iterations - hr.groups[1].iterations) <= 1);
    CHECK(dr.status == hr.status);
    CHECK(dr.groups[0].objective_initial == doctest::Approx(hr.groups[1].objective_initial).epsilon(1e-5));
    CHECK(dr.groups[0].objective_final == doctest::Approx(hr.groups[1].objective_final).epsilon(1e-5));
    CHECK(dr.groups[0].objective_final <= dr.groups[0].objective_initial);
    double sum = 0;
    for (index_t e : members) {
      CHECK(std::fabs(dr.coefficients[static_cast<std::size_t>(e)] - hr.coefficients[static_cast<std::size_t>(e)]) <= 2e-6);
      CHECK(dr.coefficients[static_cast<std::size_t>(e)] >= 0);
      sum += dr.coefficients[static_cast<std::size_t>(e)];
    }
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-12));
    CHECK(dr.coefficients[1] == 0);
    std::vector<W> g1(fd_d_ff * fd_d), g2(fd_d * fd_d_ff), gb2(fd_d);
    moecomp::copy_to_host(ctx, d.o1.view(fd_d_ff, fd_d).as_const(), moecomp::make_matrix_view(g1.data(), fd_d_ff, fd_d));
    moecomp::copy_to_host(ctx, d.o2.view(fd_d, fd_d_ff).as_const(), moecomp::make_matrix_view(g2.data(), fd_d, fd_d_ff));
    moecomp::copy_to_host(ctx, d.ob2.view(1, fd_d).as_const(), moecomp::make_matrix_view(gb2.data(), 1, fd_d));
    f.sync();
    CHECK(relative_difference(g1, m1.data() + fd_d_ff * fd_d, g1.size()) <= 1e-5);
    CHECK(relative_difference(g2, m2.data() + fd_d * fd_d_ff, g2.size()) <= 1e-5);
    CHECK(relative_difference(gb2, mb2.data() + fd_d, gb2.size()) <= 1e-5);
  }
}

// ---- The device layer (merge_experts) against the host's merge_experts.

TEST_CASE("device merge_experts: argument checks run before any device work") {
  namespace mm = moecomp::merge;
  const moecomp::cuda_context ctx(nullptr);  // never used: the checks come first
  constexpr index_t most = 513, piece = d_ff * d;
  std::vector<float> storage(4 * most * piece);  // fake device addresses: the checks never read them
  float* inputs = storage.data();
  float* outputs = storage.data() + 2 * most * piece;
  const auto stack = [&](index_t e) {
    moe::ffn_expert_stack_device_view<float> s;
    s.w1 = moecomp::matrix_stack_view<const float, moecomp::device_memory>(inputs, e, d_ff, d, d, piece);
    s.w2 = moecomp::matrix_stack_view<const float, moecomp::device_memory>(inputs + e * piece, e, d, d_ff, d_ff, piece);
    return s;
  };
  std::vector<std::int64_t> map(most);
  const auto outs = [&](index_t g, float* at) {
    mm::merge_device_outputs<float> o;
    o.experts.w1 = moecomp::matrix_stack_view<float, moecomp::device_memory>(at, g, d_ff, d, d, piece);
    o.experts.w2 = moecomp::matrix_stack_view<float, moecomp::device_memory>(at + g * piece, g, d, d_ff, d_ff, piece);
    o.map = moecomp::make_vector_view(map.data(), 4);
    return o;
  };
  const auto labels = [](const std::vector<std::int64_t>& v) {
    return moecomp::make_vector_view<const std::int64_t>(v.data(), static_cast<index_t>(v.size()));
  };
  const std::vector<std::int64_t> two{0, 1, 1, 0}, gap{0, 2, 2, 2};
  mm::merge_params params;
  mm::merge_data<float, moecomp::device_memory> data;
  CHECK_THROWS_WITH_AS(mm::merge_experts<float>(ctx, params, stack(4), labels(gap), data, outs(3, outputs)),
                       "merge_experts: groups must cover every id in 0..2 (g = 3 groups), got no expert in group 1",
                       moecomp::invalid_argument);
  params.method = mm::merge_method::fix_dom;
  CHECK_THROWS_WITH_AS(mm::merge_experts<float>(ctx, params, stack(4), labels(two), data, outs(2, outputs)),
                       "merge_experts: method fix-dom needs calibration tokens x, got none", moecomp::invalid_argument);
  data.x = dmatrix<const float>(outputs + most * piece, 10, d);
  data.router = dmatrix<const float>(outputs + most * piece + 10 * d, 4, d);
  CHECK_THROWS_WITH_AS(mm::merge_experts_workspace_size<float>(params, stack(4), labels({0, 1, 1}), data),
                       "merge_experts_workspace_size: groups must have 4 entries (one per expert), got 3",
                       moecomp::invalid_argument);
  // The device's limits: 64 members per group, 512 experts to route.
  const std::vector<std::int64_t> one_group(65, 0);
  data.router = {};
  CHECK_THROWS_WITH_AS(mm::merge_experts<float>(ctx, params, stack(65), labels(one_group), data, outs(1, outputs)),
                       "merge_experts: groups must have at most 64 members each on the device, got 65 in group 0",
                       moecomp::invalid_argument);
  std::vector<std::int64_t> alone(most);
  std::iota(alone.begin(), alone.end(), std::int64_t(0));
  data.router = dmatrix<const float>(outputs + most * piece + 10 * d, most, d);
  params.method = mm::merge_method::average;
  CHECK_THROWS_WITH_AS(mm::merge_experts<float>(ctx, params, stack(most), labels(alone), data, outs(most, outputs)),
                       "merge_experts: experts must be at most 512 to route the tokens on the device, got 513",
                       moecomp::invalid_argument);
  // The outputs: the router rows of the rule in force, no overlap with the inputs.
  data.router = dmatrix<const float>(outputs + most * piece + 10 * d, 4, d);
  params.method = mm::merge_method::uniform;  // the router rule merged_rows
  CHECK_THROWS_WITH_AS(mm::merge_experts<float>(ctx, params, stack(4), labels(two), data, outs(2, outputs)),
                       doctest::Contains("merge_experts: out.router must be 2 x 12 (groups x d) for router rule merged"),
                       moecomp::invalid_argument);
  params.router = mm::router_rule::id_map;
  CHECK_THROWS_WITH_AS(mm::merge_experts<float>(ctx, params, stack(4), labels(two), data, outs(2, inputs)),
                       "merge_experts: out.experts.w1 must not overlap experts.w1", moecomp::invalid_argument);
}

namespace {

/// The host's and the device's merge_experts on one planted layer (groups {1}, {0, 2, 3}), routed by a random
/// router with the merge errors on.
template <class W>
struct layer_comparison {
  moecomp::merge::merge_report host, device;
  std::vector<W> host_w1, host_w2, host_b2, device_w1, device_w2, device_b2;
  std::vector<float> host_router, device_router;
  std::vector<std::int64_t> device_map;
};

template <class W>
layer_comparison<W> compare_layers(const moecomp::cuda_context& ctx, device_fixture& f, const planted_stack<W>& h,
                                   device_planted_stack<W>& d, const moecomp::merge::merge_params& params,
                                   bool planted_dominant) {
  namespace mm = moecomp::merge;
  constexpr index_t g = 2;
  const std::vector<std::int64_t> labels{1, 0, 1, 1};
  const auto lv = moecomp::make_vector_view<const std::int64_t>(labels.data(), fd_experts);
  std::vector<float> router(fd_experts * fd_d);
  moecomp::random_generator rng(17);
  for (float& v : router) v = static_cast<float>(0.5 * rng.normal<double>());
  const bool rows = mm::resolve_router_rule(params, true) != mm::router_rule::id_map;
  layer_comparison<W> c;
  // The host.
  c.host_w1.resize(g * fd_d_ff * fd_d);
  c.host_w2.resize(g * fd_d * fd_d_ff);
  c.host_b2.resize(g * fd_d);
  std::vector<W> w3(c.host_w1.size()), b1(g * fd_d_ff), b3(b1.size());
  std::vector<std::int64_t> map(fd_experts);
  c.host_router.resize(rows ? g * fd_d : 0);
  mm::merge_outputs<W> ho;
  ho.experts.w1 = moecomp::matrix_stack_view<W>(c.host_w1.data(), g, fd_d_ff, fd_d, fd_d, fd_d_ff * fd_d);
  ho.experts.w3 = moecomp::matrix_stack_view<W>(w3.data(), g, fd_d_ff, fd_d, fd_d, fd_d_ff * fd_d);
  ho.experts.w2 = moecomp::matrix_stack_view<W>(c.host_w2.data(), g, fd_d, fd_d_ff, fd_d_ff, fd_d * fd_d_ff);
  ho.experts.b1 = moecomp::make_matrix_view(b1.data(), g, fd_d_ff);
  ho.experts.b3 = moecomp::make_matrix_view(b3.data(), g, fd_d_ff);
  ho.experts.b2 = moecomp::make_matrix_view(c.host_b2.data(), g, fd_d);
  ho.map = moecomp::make_vector_view(map.data(), fd_experts);
  if (rows) ho.router = moecomp::make_matrix_view(c.host_router.data(), g, fd_d);
  // The dominants: the routing frequencies' choice, or expert 2, the planted reference, where a matching is compared.
  const std::vector<std::int64_t> dominants{1, 2};
  const auto dv = planted_dominant ? moecomp::make_vector_view<const std::int64_t>(dominants.data(), g)
                                   : moecomp::vector_view<const std::int64_t>();
  mm::merge_data<float> hd;
  hd.x = moecomp::make_matrix_view<const float>(h.x.data(), fd_tokens, fd_d);
  hd.router = moecomp::make_matrix_view<const float>(router.data(), fd_experts, fd_d);
  hd.dominants = dv;
  c.host = moecomp_test::host_merge_experts<W>(params, h.host_view(), lv, hd, ho);
  // The device.
  moecomp::device_buffer<W> o1(ctx, g * fd_d_ff * fd_d), o3(ctx, g * fd_d_ff * fd_d), o2(ctx, g * fd_d * fd_d_ff),
      ob1(ctx, g * fd_d_ff), ob3(ctx, g * fd_d_ff), ob2(ctx, g * fd_d);
  moecomp::device_buffer<float> dr(ctx, fd_experts * fd_d), drows(ctx, g * fd_d);
  moecomp::copy_to_device(ctx, moecomp::make_vector_view<const float>(router.data(), fd_experts * fd_d), dr.view());
  mm::merge_device_outputs<W> out;
  out.experts.w1 = moecomp::matrix_stack_view<W, moecomp::device_memory>(o1.data(), g, fd_d_ff, fd_d, fd_d, fd_d_ff * fd_d);
  out.experts.w3 = moecomp::matrix_stack_view<W, moecomp::device_memory>(o3.data(), g, fd_d_ff, fd_d, fd_d, fd_d_ff * fd_d);
  out.experts.w2 = moecomp::matrix_stack_view<W, moecomp::device_memory>(o2.data(), g, fd_d, fd_d_ff, fd_d_ff, fd_d * fd_d_ff);
  out.experts.b1 = dmatrix<W>(ob1.data(), g, fd_d_ff);
  out.experts.b3 = dmatrix<W>(ob3.data(), g, fd_d_ff);
  out.experts.b2 = dmatrix<W>(ob2.data(), g, fd_d);
  c.device_map.assign(fd_experts, -1);
  out.map = moecomp::make_vector_view(c.device_map.data(), fd_experts);
  if (rows) out.router = dmatrix<float>(drows.data(), g, fd_d);
  mm::merge_data<float, moecomp::device_memory> dd;
  dd.x = d.xd.view(fd_tokens, fd_d).as_const();
  dd.router = dmatrix<const float>(dr.data(), fd_experts, fd_d);
  dd.dominants = dv;
  c.device = mm::merge_experts<W>(ctx, params, d.s, lv, dd, out);
  c.device_w1.resize(c.host_w1.size());
  c.device_w2.resize(c.host_w2.size());
  c.device_b2.resize(c.host_b2.size());
  c.device_router.resize(c.host_router.size());
  moecomp::copy_to_host(ctx, o1.view(g * fd_d_ff, fd_d).as_const(), moecomp::make_matrix_view(c.device_w1.data(), g * fd_d_ff, fd_d));
  moecomp::copy_to_host(ctx, o2.view(g * fd_d, fd_d_ff).as_const(), moecomp::make_matrix_view(c.device_w2.data(), g * fd_d, fd_d_ff));
  moecomp::copy_to_host(ctx, ob2.view(g, fd_d).as_const(), moecomp::make_matrix_view(c.device_b2.data(), g, fd_d));
  if (rows)
    moecomp::copy_to_host(ctx, drows.view(g, fd_d).as_const(), moecomp::make_matrix_view(c.device_router.data(), g, fd_d));
  f.sync();
  return c;
}

template <class W>
std::size_t different_bits(const std::vector<W>& a, const std::vector<W>& b) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < a.size(); ++i) wrong += !same_bits<W>(a[i], b[i]);
  return wrong;
}

}  // namespace

TEST_CASE_TEMPLATE("device merge_experts matches the host's merge_experts, method by method, on a routed layer", W, float,
                   moecomp::bfloat16) {
  namespace mm = moecomp::merge;
  device_fixture f;
  const auto ctx = f.context();
  const planted_stack<W> h(21);
  device_planted_stack<W> d(ctx, h);
  struct variant {
    mm::merge_method method;
    moecomp::align::align_objective objective;
  };
  for (const variant v : {variant{mm::merge_method::average, {}}, variant{mm::merge_method::frequency, {}},
                          variant{mm::merge_method::uniform, {}}, variant{mm::merge_method::dominant, {}},
                          variant{mm::merge_method::aligned, moecomp::align::align_objective::weights},
                          variant{mm::merge_method::aligned, moecomp::align::align_objective::correlation},
                          variant{mm::merge_method::fix_dom, {}}, variant{mm::merge_method::learned, {}}}) {
    mm::merge_params params;
    params.method = v.method;
    params.align.objective = v.objective;
    params.token_cap = 200;
    params.seed = 3;
    params.max_iterations = 20;
    CAPTURE(mm::to_string(v.method));
    CAPTURE(moecomp::align::to_string(v.objective));
    // aligned and fix_dom match neurons: against the planted reference, where the matching has a clear margin (the
    // device alignment is the auction, the host's the exact solve: they agree where the optimum is clear).
    const bool matching = v.method == mm::merge_method::aligned || v.method == mm::merge_method::fix_dom;
    const layer_comparison<W> c = compare_layers<W>(ctx, f, h, d, params, matching);
    if (matching) CHECK(c.host.groups[1].dominant == 2);
    CHECK(c.device_map == std::vector<std::int64_t>{1, 0, 1, 1});
    CHECK(c.device.method == c.host.method);
    CHECK(c.device.router == c.host.router);
    CHECK(c.device.status == c.host.status);
    REQUIRE(c.device.groups.size() == 2);
    for (std::size_t k = 0; k < 2; ++k) {
      CAPTURE(k);
      CHECK(c.device.groups[k].dominant == c.host.groups[k].dominant);
      CHECK(c.device.groups[k].tokens == c.host.groups[k].tokens);
      CHECK(c.device.groups[k].error == doctest::Approx(c.host.groups[k].error).epsilon(1e-4));
    }
    const bool learned = v.method == mm::merge_method::learned;
    if (learned) {
      CHECK(std::abs(c.device.groups[1].iterations - c.host.groups[1].iterations) <= 1);
      CHECK(c.device.groups[1].objective_final == doctest::Approx(c.host.groups[1].objective_final).epsilon(1e-5));
      for (std::size_t e = 0; e < fd_experts; ++e)
        CHECK(std::fabs(c.device.coefficients[e] - c.host.coefficients[e]) <= 2e-6);
      CHECK(relative_difference(c.device_w1, c.host_w1.data(), c.host_w1.size()) <= 1e-5);
      CHECK(relative_difference(c.device_w2, c.host_w2.data(), c.host_w2.size()) <= 1e-5);
      CHECK(relative_difference(c.device_router, c.host_router.data(), c.host_router.size()) <= 1e-5);
    } else {
      // The same routes give the same coefficients, and the same sums in the same order the same bits.
      CHECK(c.device.coefficients == c.host.coefficients);
      CHECK(different_bits(c.device_w1, c.host_w1) == 0);
      CHECK(different_bits(c.device_w2, c.host_w2) == 0);
      CHECK(different_bits(c.device_b2, c.host_b2) == 0);
      CHECK(different_bits(c.device_router, c.host_router) == 0);
    }
  }
}
