// The shared-base apply (<moecomp/sparse/apply.hpp>): y = x (B + R_e)^T for each expert's rows, against the
// dense product of the restored experts, for every residual format, float and bfloat16 bases, experts with no
// rows; the same at any thread count; the argument checks. The FFN forward built on it: test_moe_shared_base.cpp.
#include <moecomp/sparse/apply.hpp>
#include <moecomp/sparse/residual.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/random.hpp>

#include <doctest/doctest.h>

#include "test_support.hpp"

#include <cmath>
#include <vector>

namespace {

using moecomp::bfloat16;
using moecomp::host_context;
using moecomp::host_matrix;
using moecomp::index_t;
namespace sparse = moecomp::sparse;

host_matrix<float> normal(index_t rows, index_t cols, std::uint64_t seed, double scale = 1.0) {
  moecomp::random_generator rng(seed);
  host_matrix<float> m(rows, cols);
  for (index_t i = 0; i < rows * cols; ++i) m.data()[i] = static_cast<float>(scale * rng.normal<double>());
  return m;
}

/// Residuals of E experts around `base`: W_e = base + N(0, 0.1) noise, pruned (25% kept, or 2:4) and encoded.
template <class W>
std::vector<sparse::sparse_matrix> residuals_of(const host_matrix<W>& base, const std::vector<sparse::sparse_format>& formats,
                                                sparse::value_dtype values) {
  std::vector<sparse::sparse_matrix> out(formats.size());
  for (std::size_t e = 0; e < formats.size(); ++e) {
    host_matrix<float> noise = normal(base.rows(), base.cols(), 100 + e, 0.1);
    host_matrix<W> w(base.rows(), base.cols());
    for (index_t i = 0; i < w.rows() * w.cols(); ++i)
      w.data()[i] = moecomp::convert_to<W>(moecomp::convert_to<float>(base.data()[i]) + noise.data()[i]);
    sparse::residual_params p;
    p.encode.format = formats[e];
    p.encode.values = values;
    if (formats[e] == sparse::sparse_format::two_of_four)
      p.prune.scope = sparse::prune_scope::n_of_m;
    else
      p.prune.keep = 0.25;
    sparse::encode_residual<W>(host_context(1), p, base.view(), w.view(), {}, out[e]);
  }
  return out;
}

/// The reference: each expert restored densely (float), then y = x W_e^T in double.
template <class W>
host_matrix<float> dense_reference(const host_matrix<float>& x, const host_matrix<W>& base,
                                   const std::vector<sparse::sparse_matrix>& residuals, const std::vector<index_t>& offsets) {
  host_matrix<float> y(x.rows(), base.rows());
  host_matrix<float> w(base.rows(), base.cols());
  for (std::size_t e = 0; e + 1 < offsets.size(); ++e) {
    sparse::restore_dense<W, float>(host_context(1), base.view(), residuals[e].view(), w.view());
    for (index_t t = offsets[e]; t < offsets[e + 1]; ++t)
      for (index_t o = 0; o < base.rows(); ++o) {
        double s = 0;
        for (index_t k = 0; k < base.cols(); ++k) s += static_cast<double>(x(t, k)) * w(o, k);
        y(t, o) = static_cast<float>(s);
      }
  }
  return y;
}

std::vector<sparse::sparse_matrix_view> views(const std::vector<sparse::sparse_matrix>& r) {
  std::vector<sparse::sparse_matrix_view> v;
  for (const auto& m : r) v.push_back(m.view());
  return v;
}


}  // namespace

TEST_CASE("shared-base apply equals the dense product of the restored experts") {
  const index_t in = 96, out = 80;
  const std::vector<sparse::sparse_format> formats = {sparse::sparse_format::csr16, sparse::sparse_format::bitmap,
                                                      sparse::sparse_format::two_of_four, sparse::sparse_format::bitmap};
  // Expert 3 gets no rows.
  const std::vector<index_t> offsets = {0, 3, 4, 11, 11};
  const host_matrix<float> x = normal(11, in, 1);
  SUBCASE("float base, fp32 residuals") {
    const host_matrix<float> base = normal(out, in, 2);
    const auto residuals = residuals_of(base, formats, sparse::value_dtype::float32);
    host_matrix<float> y(11, out);
    sparse::shared_base_apply<float>(host_context(2), x.view(), base.view(), views(residuals),
                                     moecomp::make_vector_view(offsets.data(), 5), y.view());
    CHECK(moecomp_test::max_relative_error(y, dense_reference(x, base, residuals, offsets)) < 1e-5);
  }
  SUBCASE("bfloat16 base, fp16 residuals") {
    const host_matrix<float> f = normal(out, in, 3);
    host_matrix<bfloat16> base(out, in);
    for (index_t i = 0; i < out * in; ++i) base.data()[i] = bfloat16(f.data()[i]);
    const auto residuals = residuals_of(base, formats, sparse::value_dtype::float16);
    host_matrix<float> y(11, out);
    sparse::shared_base_apply<bfloat16>(host_context(3), x.view(), base.view(), views(residuals),
                                        moecomp::make_vector_view(offsets.data(), 5), y.view());
    CHECK(moecomp_test::max_relative_error(y, dense_reference(x, base, residuals, offsets)) < 1e-5);
  }
}

TEST_CASE("shared-base apply: bitmap rows of any width, the last stored values included") {
  // 121 columns: three 32-column pairs, one 16-column chunk and a 9-column tail, so every branch of the AVX-512
  // bitmap product runs (where it is compiled), including the masked loads of the last stored values.
  for (index_t in : {121, 16, 7}) {
    for (auto values : {sparse::value_dtype::float32, sparse::value_dtype::float16, sparse::value_dtype::bfloat16}) {
      CAPTURE(in);
      CAPTURE(sparse::to_string(values));
      const host_matrix<float> base = normal(37, in, 8);
      const auto residuals = residuals_of(base, {sparse::sparse_format::bitmap, sparse::sparse_format::bitmap}, values);
      const host_matrix<float> x = normal(3, in, 9);
      const std::vector<index_t> offsets = {0, 2, 3};
      host_matrix<float> y(3, 37);
      sparse::shared_base_apply<float>(host_context(2), x.view(), base.view(), views(residuals),
                                       moecomp::make_vector_view(offsets.data(), 3), y.view());
      CHECK(moecomp_test::max_relative_error(y, dense_reference(x, base, residuals, offsets)) < 1e-5);
    }
  }
}

TEST_CASE("shared-base apply gives the same bytes at any thread count") {
  const host_matrix<float> base = normal(300, 64, 4);
  const auto residuals = residuals_of(base, {sparse::sparse_format::bitmap, sparse::sparse_format::csr16},
                                      sparse::value_dtype::bfloat16);
  const host_matrix<float> x = normal(9, 64, 5);
  const std::vector<index_t> offsets = {0, 4, 9};
  moecomp_test::check_same_at_thread_counts([&](const host_context& ctx) {
    host_matrix<float> y(9, 300);
    sparse::shared_base_apply<float>(ctx, x.view(), base.view(), views(residuals),
                                     moecomp::make_vector_view(offsets.data(), 3), y.view());
    return y.storage();
  });
}

TEST_CASE("shared-base apply refuses mismatched shapes and offsets") {
  using moecomp_test::thrown_message;
  const host_matrix<float> base = normal(8, 16, 6);
  const auto residuals = residuals_of(base, {sparse::sparse_format::csr16, sparse::sparse_format::csr16},
                                      sparse::value_dtype::float32);
  const host_matrix<float> x = normal(5, 16, 7);
  host_matrix<float> y(5, 8);
  auto run = [&](const std::vector<index_t>& offsets) {
    return thrown_message([&] {
      sparse::shared_base_apply<float>(host_context(1), x.view(), base.view(), views(residuals),
                                       moecomp::make_vector_view(offsets.data(), static_cast<index_t>(offsets.size())),
                                       y.view());
    });
  };
  CHECK(run({0, 5}) == "shared_base_apply: expert_offsets must have 3 entries (one more than the residuals), got 2");
  CHECK(run({0, 4, 3}) == "shared_base_apply: expert_offsets must be non-decreasing, got 3 after 4 at 2");
  CHECK(run({0, 2, 4}) == "shared_base_apply: expert_offsets must end at the 5 rows of x, got 4");
  host_matrix<float> wrong(5, 9);
  const std::vector<index_t> offsets = {0, 2, 5};
  CHECK(thrown_message([&] {
          sparse::shared_base_apply<float>(host_context(1), x.view(), base.view(), views(residuals),
                                           moecomp::make_vector_view(offsets.data(), 3), wrong.view());
        }) == "shared_base_apply: y must be 5 x 8, got 5 x 9");
}
