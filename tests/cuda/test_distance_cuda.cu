// Device tests of the pairwise distances: every metric, form and element type against the host
// implementation (host_reference.cpp), strided views, NaN rows, near-duplicate rows against a direct
// double computation, caller workspaces, caller-owned cuBLAS handles, determinism. They need a CUDA
// device and run under `ctest -L cuda`; without one they fail, saying so.
#include <moecomp/cuda/moecomp.cuh>

#include "device_test_support.cuh"
#include "host_reference.hpp"

#include <cublas_v2.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using moecomp::index_t;
namespace dist = moecomp::distance;
using dist::metric;

constexpr metric all_metrics[] = {metric::euclidean, metric::sqeuclidean, metric::cosine, metric::correlation};

using moecomp_test::device_fixture;

/// Relative tolerance of device against host: both compute in T through a GEMM, and the cancellation
/// guard bounds each one's relative error on the squared distance by about eps(T) * sqrt(d) divided by
/// the guard threshold.
template <class T>
constexpr double tolerance() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-12;
}

/// Normal data with a column offset and per-column scales, so the column centring and the norms matter.
template <class T>
moecomp::host_matrix<T> test_matrix(index_t rows, index_t cols, std::uint64_t seed) {
  moecomp::host_matrix<T> m(rows, cols);
  moecomp::random_generator rng(seed);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j)
      m(i, j) = static_cast<T>(3.0 + (1.0 + 0.5 * static_cast<double>(j % 7)) * rng.normal<double>());
  return m;
}

/// A device copy of `host` with rows `row_stride` apart; the padding holds NaN, so reading it would show.
template <class T>
moecomp::device_buffer<T> upload(const moecomp::cuda_context& ctx, const moecomp::host_matrix<T>& host,
                                 index_t row_stride) {
  moecomp::device_buffer<T> buffer(ctx, std::max<index_t>(1, host.rows() * row_stride));
  REQUIRE(cudaMemsetAsync(buffer.data(), 0xff, buffer.bytes(), ctx.stream) == cudaSuccess);  // all-ones: NaN
  moecomp::copy_to_device(ctx, host.const_view(), buffer.view(host.rows(), host.cols(), row_stride));
  return buffer;
}

/// Sentinel for output padding: any write outside the view changes it.
template <class T>
T sentinel() {
  return static_cast<T>(1234.5);
}

template <class T>
moecomp::device_buffer<T> sentinel_buffer(const moecomp::cuda_context& ctx, index_t size) {
  std::vector<T> host(static_cast<std::size_t>(std::max<index_t>(size, 1)), sentinel<T>());
  moecomp::device_buffer<T> buffer(ctx, static_cast<index_t>(host.size()));
  moecomp::copy_to_device(ctx, moecomp::make_vector_view<const T>(host.data(), buffer.size()), buffer.view());
  return buffer;
}

template <class T>
std::vector<T> download(const moecomp::cuda_context& ctx, const moecomp::device_buffer<T>& buffer) {
  std::vector<T> host(static_cast<std::size_t>(buffer.size()));
  moecomp::copy_to_host(ctx, buffer.view(), moecomp::make_vector_view(host.data(), buffer.size()));
  REQUIRE(cudaStreamSynchronize(ctx.stream) == cudaSuccess);
  return host;
}

/// Compares `got` with `want` elementwise: NaN exactly where `want` is NaN, otherwise
/// |got - want| <= tol (|want| + scale), scale = the largest finite |want| (a mixed absolute / relative
/// bound: the GEMM's rounding error is relative to the data's scale, not to each distance), and at least
/// `min_scale`: cosine and correlation distances are 1 - cos, whose rounding is relative to 1 even where every
/// distance is 0 (d = 1 with rows of one sign: the host's direct recomputation leaves ~1e-33, the device 0).
template <class T>
void check_close(const std::vector<T>& got, const std::vector<T>& want, double tol, const std::string& what,
                 double min_scale = 0.0) {
  REQUIRE(got.size() == want.size());
  double scale = min_scale;
  for (T w : want)
    if (std::isfinite(static_cast<double>(w))) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  std::size_t bad = 0, first_bad = 0;
  double worst = 0.0;
  for (std::size_t k = 0; k < want.size(); ++k) {
    const double g = static_cast<double>(got[k]), w = static_cast<double>(want[k]);
    bool ok;
    if (std::isnan(w)) {
      ok = std::isnan(g);
    } else {
      const double err = std::fabs(g - w);
      ok = err <= tol * (std::fabs(w) + scale);
      if (std::isfinite(err)) worst = std::max(worst, err / (std::fabs(w) + scale + 1e-300));
    }
    if (!ok && bad++ == 0) first_bad = k;
  }
  INFO(what, ": ", bad, " of ", want.size(), " entries differ; first at ", first_bad, " (device ",
       bad ? static_cast<double>(got[first_bad]) : 0.0, ", host ", bad ? static_cast<double>(want[first_bad]) : 0.0,
       "); worst relative error ", worst);
  CHECK(bad == 0);
}

/// Entries of a strided device matrix (rows x cols, row stride `stride`) as a dense row-major vector,
/// checking that the padding still holds the sentinel.
template <class T>
std::vector<T> dense_from_strided(const std::vector<T>& raw, index_t rows, index_t cols, index_t stride,
                                  const std::string& what) {
  std::vector<T> dense(static_cast<std::size_t>(rows * cols));
  std::size_t touched = 0;
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < stride; ++j) {
      const T v = raw[static_cast<std::size_t>(i * stride + j)];
      if (j < cols) {
        dense[static_cast<std::size_t>(i * cols + j)] = v;
      } else {
        touched += !(v == sentinel<T>());
      }
    }
  INFO(what, ": padding entries overwritten: ", touched);
  CHECK(touched == 0);
  return dense;
}

/// Runs the three forms on the device and on the host and compares them. Strides > the dense ones add
/// padding to the inputs and outputs.
template <class T>
void compare_with_host(const device_fixture& fx, metric m, index_t n, index_t m_rows, index_t d, std::uint64_t seed,
                       index_t x_pad = 0, index_t out_pad = 0, index_t condensed_stride = 1) {
  const auto ctx = fx.context();
  dist::pairwise_distance_params params;
  params.metric = m;
  const auto x = test_matrix<T>(n, d, seed);
  const auto y = test_matrix<T>(m_rows, d, seed + 1000);
  const double min_scale = (m == dist::metric::cosine || m == dist::metric::correlation) ? 1.0 : 0.0;
  const std::string where = std::string(dist::to_string(m)) + " " + (std::is_same_v<T, float> ? "float" : "double") +
                            " n=" + std::to_string(n) + " m=" + std::to_string(m_rows) + " d=" + std::to_string(d);

  const index_t x_stride = d + x_pad, y_stride = d + x_pad + 1;
  const auto dx = upload(ctx, x, x_stride);
  const auto dy = upload(ctx, y, y_stride);
  const auto xv = dx.view(n, d, x_stride);
  const auto yv = dy.view(m_rows, d, y_stride);

  // square, x against itself
  {
    const index_t stride = n + out_pad;
    auto out = sentinel_buffer<T>(ctx, n * stride);
    dist::pairwise_distances(ctx, params, xv, out.view(n, n, stride));
    const auto got = dense_from_strided(download(ctx, out), n, n, stride, where + " square");
    moecomp::host_matrix<T> want(n, n);
    moecomp_test::host_pairwise_distances<T>(params, x.const_view(), want.view());
    check_close(got, want.storage(), tolerance<T>(), where + " square", min_scale);
    // exact symmetry and zero diagonal
    std::size_t asymmetric = 0, nonzero_diagonal = 0;
    for (index_t i = 0; i < n; ++i) {
      nonzero_diagonal += got[static_cast<std::size_t>(i * n + i)] != T(0);
      for (index_t j = i + 1; j < n; ++j) {
        const T a = got[static_cast<std::size_t>(i * n + j)], b = got[static_cast<std::size_t>(j * n + i)];
        asymmetric += !(a == b || (std::isnan(static_cast<double>(a)) && std::isnan(static_cast<double>(b))));
      }
    }
    INFO(where);
    CHECK(asymmetric == 0);
    CHECK(nonzero_diagonal == 0);
  }
  // condensed
  {
    const index_t size = dist::condensed_size(n);
    auto out = sentinel_buffer<T>(ctx, size * condensed_stride);
    const auto view = size == 0 ? moecomp::device_vector_view<T>()
                                : moecomp::make_device_vector_view(out.data(), size, condensed_stride);
    dist::pairwise_distances_condensed(ctx, params, xv, view);
    const auto got = dense_from_strided(download(ctx, out), std::max<index_t>(size, 1), 1, condensed_stride,
                                        where + " condensed");
    moecomp::host_vector<T> want(size);
    moecomp_test::host_pairwise_distances_condensed<T>(params, x.const_view(), want.view());
    check_close(std::vector<T>(got.begin(), got.begin() + size), want.storage(), tolerance<T>(), where + " condensed",
                min_scale);
  }
  // x against y
  {
    const index_t stride = m_rows + out_pad;
    auto out = sentinel_buffer<T>(ctx, n * stride);
    dist::pairwise_distances(ctx, params, xv.as_const(), yv, out.view(n, m_rows, stride));
    const auto got = dense_from_strided(download(ctx, out), n, m_rows, stride, where + " cross");
    moecomp::host_matrix<T> want(n, m_rows);
    moecomp_test::host_pairwise_distances<T>(params, x.const_view(), y.const_view(), want.view());
    check_close(got, want.storage(), tolerance<T>(), where + " cross", min_scale);
  }
}

template <class F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const moecomp::invalid_argument& e) {
    return e.what();
  }
  FAIL("no moecomp::invalid_argument was thrown");
  return {};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// Counts allocator calls (forwarding to cudaMallocAsync / cudaFreeAsync).
struct counting_allocator {
  int allocations = 0, deallocations = 0;
  static void* allocate(std::size_t bytes, cudaStream_t stream, void* user) {
    ++static_cast<counting_allocator*>(user)->allocations;
    void* pointer = nullptr;
    MOECOMP_CUDA_TRY(cudaMallocAsync(&pointer, bytes, stream));
    return pointer;
  }
  static void deallocate(void* pointer, std::size_t, cudaStream_t stream, void* user) {
    ++static_cast<counting_allocator*>(user)->deallocations;
    (void)cudaFreeAsync(pointer, stream);
  }
  moecomp::cuda_allocator callbacks() { return {&allocate, &deallocate, this}; }
};

}  // namespace

TEST_CASE("the default cancellation threshold (shared with the host through distance_types.hpp)") {
  CHECK(dist::default_cancellation_threshold<float>() == 1.0 / 16);
  CHECK(dist::default_cancellation_threshold<double>() == 1.0 / 1024);
  dist::pairwise_distance_params p;
  p.cancellation_threshold = 0.25;
  CHECK(dist::effective_cancellation_threshold<float>(p) == 0.25);
}

TEST_CASE("the Gram panels depend on n only and bound the condensed workspace") {
  using dist::cuda_detail::symmetric_panel_rows;
  CHECK(symmetric_panel_rows(1, false) == 1);
  CHECK(symmetric_panel_rows(257, false) == 257);
  CHECK(symmetric_panel_rows(1000, false) == 512);
  CHECK(symmetric_panel_rows(4096, false) == 512);
  CHECK(symmetric_panel_rows(14336, false) == 1792);
  CHECK(symmetric_panel_rows(14336, true) == 1792);      // 1792 x 14336 < 2^25
  CHECK(symmetric_panel_rows(100000, false) == 12544);  // ceil(100000 / 8) rounded up to 128
  CHECK(symmetric_panel_rows(100000, true) == 256);     // 2^25 / 100000 = 335, down to 256
  CHECK(symmetric_panel_rows(10000000, true) == 3);     // tiny panels rather than an unbounded workspace
  // the condensed workspace's Gram panel stays within 2^25 elements
  const dist::pairwise_distance_params params;
  CHECK(dist::pairwise_distances_condensed_workspace_size<float>(params, 100000, 16) <
        (std::size_t(1) << 27) + 100000 * 64 + 100000 * 3 * 8 + 64 * 16 * 8 + 16 * 8 + 8 * 256);
  // nothing to compute, nothing to allocate
  CHECK(dist::pairwise_distances_workspace_size<float>(params, 0, 0, 5) == 0);
  CHECK(dist::pairwise_distances_workspace_size<double>(params, 0, 7, 5) == 0);
  CHECK(dist::pairwise_distances_workspace_size<double>(params, 7, 0, 5) == 0);
  CHECK(dist::pairwise_distances_condensed_workspace_size<float>(params, 1, 5) == 0);
  CHECK(dist::pairwise_distances_workspace_size<float>(params, 1, 1, 5) > 0);
}

TEST_CASE_TEMPLATE("device pairwise distances match the host for every metric and form", T, float, double) {
  device_fixture fx;
  struct shape {
    index_t n, m, d;
  };
  const shape shapes[] = {{1, 3, 1},     {1, 2, 3},     {2, 1, 1},     {2, 5, 3},      {2, 4, 300},
                          {5, 4, 0},     {257, 130, 1}, {257, 130, 3}, {257, 33, 300}, {1000, 130, 3},
                          {1000, 257, 300}, {2500, 7, 3}};
  std::uint64_t seed = 1;
  for (const metric m : all_metrics)
    for (const shape& s : shapes) compare_with_host<T>(fx, m, s.n, s.m, s.d, seed++);
}

TEST_CASE_TEMPLATE("strided inputs and outputs", T, float, double) {
  device_fixture fx;
  std::uint64_t seed = 100;
  for (const metric m : all_metrics) {
    compare_with_host<T>(fx, m, 257, 65, 3, seed++, /*x_pad=*/5, /*out_pad=*/3, /*condensed_stride=*/2);
    compare_with_host<T>(fx, m, 600, 31, 300, seed++, /*x_pad=*/1, /*out_pad=*/7, /*condensed_stride=*/3);
  }
}

TEST_CASE_TEMPLATE("zero and constant rows give NaN under cosine and correlation, as scipy", T, float, double) {
  device_fixture fx;
  const auto ctx = fx.context();
  const index_t n = 6, d = 4;
  auto x = test_matrix<T>(n, d, 7);
  for (index_t j = 0; j < d; ++j) {
    x(0, j) = T(0);    // zero row: NaN under cosine and correlation
    x(1, j) = T(2.5);  // constant row: NaN under correlation only
  }
  const auto dx = upload(ctx, x, d);
  for (const metric m : all_metrics) {
    dist::pairwise_distance_params params;
    params.metric = m;
    auto out = sentinel_buffer<T>(ctx, n * n);
    dist::pairwise_distances(ctx, params, dx.view(n, d), out.view(n, n));
    const auto got = download(ctx, out);
    moecomp::host_matrix<T> want(n, n);
    moecomp_test::host_pairwise_distances<T>(params, x.const_view(), want.view());
    check_close(got, want.storage(), tolerance<T>(), dist::to_string(m));

    const auto at = [&](index_t i, index_t j) { return static_cast<double>(got[static_cast<std::size_t>(i * n + j)]); };
    INFO(dist::to_string(m));
    CHECK(at(0, 0) == 0.0);  // the diagonal stays exactly 0, as squareform's
    CHECK(at(1, 1) == 0.0);
    const bool normalised = m == metric::cosine || m == metric::correlation;
    CHECK(std::isnan(at(0, 3)) == normalised);
    CHECK(std::isnan(at(3, 0)) == normalised);
    CHECK(std::isnan(at(1, 3)) == (m == metric::correlation));
    CHECK(std::isfinite(at(2, 3)));
  }
}

TEST_CASE_TEMPLATE("near-duplicate rows are accurate: the cancellation guard recomputes them", T, float, double) {
  device_fixture fx;
  const auto ctx = fx.context();
  // 32 well-separated centres, each with a near-duplicate about 1e-2 away: for those pairs the Gram form
  // ||a||^2 + ||b||^2 - 2 a.b cancels to a relative size of ~1e-5, far below both guard thresholds. (Much
  // closer pairs would make the normalised metrics ill-conditioned in the row scales themselves.)
  const index_t centres = 32, n = 2 * centres, d = 300;
  const auto base = test_matrix<T>(centres, d, 11);
  const auto noise = test_matrix<T>(centres, d, 12);
  moecomp::host_matrix<T> x(n, d);
  for (index_t c = 0; c < centres; ++c)
    for (index_t j = 0; j < d; ++j) {
      x(2 * c, j) = base(c, j);
      x(2 * c + 1, j) = static_cast<T>(static_cast<double>(base(c, j)) * (1.0 + 1e-4) +
                                       1e-2 * (static_cast<double>(noise(c, j)) - 3.0));
    }
  const auto dx = upload(ctx, x, d);

  for (const metric m : all_metrics) {
    // The reference: the metric computed directly in long double from the T inputs.
    const auto reference = [&](index_t i, index_t j) {
      long double oi = 0, oj = 0;
      if (m == metric::correlation) {
        for (index_t k = 0; k < d; ++k) {
          oi += x(i, k);
          oj += x(j, k);
        }
        oi /= d;
        oj /= d;
      }
      long double si = 1, sj = 1;
      if (m == metric::cosine || m == metric::correlation) {
        long double ni = 0, nj = 0;
        for (index_t k = 0; k < d; ++k) {
          ni += (x(i, k) - oi) * (x(i, k) - oi);
          nj += (x(j, k) - oj) * (x(j, k) - oj);
        }
        si = 1 / std::sqrt(ni);
        sj = 1 / std::sqrt(nj);
      }
      long double sum = 0;
      for (index_t k = 0; k < d; ++k) {
        const long double diff = (x(i, k) - oi) * si - (x(j, k) - oj) * sj;
        sum += diff * diff;
      }
      switch (m) {
        case metric::euclidean: return static_cast<double>(std::sqrt(sum));
        case metric::sqeuclidean: return static_cast<double>(sum);
        default: return static_cast<double>(sum / 2);
      }
    };

    dist::pairwise_distance_params params;
    params.metric = m;
    auto out = sentinel_buffer<T>(ctx, dist::condensed_size(n));
    dist::pairwise_distances_condensed(ctx, params, dx.view(n, d), out.view());
    const auto got = download(ctx, out);
    // The guard recomputes in double from the inputs: only the final rounding to T (and, for the
    // normalised metrics, the rounding of the row scales) separates the device from the reference.
    const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-12;
    double worst = 0.0;
    for (index_t c = 0; c < centres; ++c) {
      const index_t i = 2 * c, j = 2 * c + 1;
      const double want = reference(i, j);
      const double value = static_cast<double>(got[static_cast<std::size_t>(dist::condensed_index(n, i, j))]);
      worst = std::max(worst, std::fabs(value - want) / want);
    }
    INFO(dist::to_string(m), ": worst relative error over the near-duplicate pairs ", worst);
    CHECK(worst <= tol);

    if (m == metric::sqeuclidean && std::is_same_v<T, float>) {
      // Without the guard, float's Gram form loses these pairs entirely: the test above would notice.
      dist::pairwise_distance_params unguarded = params;
      unguarded.cancellation_threshold = 0.0;
      dist::pairwise_distances_condensed(ctx, unguarded, dx.view(n, d), out.view());
      const auto raw = download(ctx, out);
      double unguarded_worst = 0.0;
      for (index_t c = 0; c < centres; ++c) {
        const index_t i = 2 * c, j = 2 * c + 1;
        const double want = reference(i, j);
        unguarded_worst = std::max(
            unguarded_worst,
            std::fabs(static_cast<double>(raw[static_cast<std::size_t>(dist::condensed_index(n, i, j))]) - want) / want);
      }
      CHECK(unguarded_worst > 1e-4);  // guarded: <= 1e-6
    }
  }
}

TEST_CASE_TEMPLATE("identical rows are exactly 0 apart under every metric", T, float, double) {
  device_fixture fx;
  const auto ctx = fx.context();
  const index_t n = 40, d = 17;
  const auto row = test_matrix<T>(1, d, 5);
  moecomp::host_matrix<T> x(n, d);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < d; ++j) x(i, j) = row(0, j);
  const auto dx = upload(ctx, x, d);
  for (const metric m : all_metrics) {
    dist::pairwise_distance_params params;
    params.metric = m;
    auto out = sentinel_buffer<T>(ctx, n * n);
    dist::pairwise_distances(ctx, params, dx.view(n, d), dx.view(n, d), out.view(n, n));
    const auto got = download(ctx, out);
    INFO(dist::to_string(m));
    CHECK(std::count(got.begin(), got.end(), T(0)) == static_cast<std::ptrdiff_t>(n * n));
  }
}

TEST_CASE_TEMPLATE("a caller's workspace: exact size, any alignment, no allocation", T, float, double) {
  device_fixture fx;
  counting_allocator counter;
  const moecomp::cuda_context ctx(fx.stream, fx.handle, counter.callbacks());
  const moecomp::cuda_context plain = fx.context();
  const index_t n = 700, m_rows = 90, d = 33;
  const auto x = test_matrix<T>(n, d, 21);
  const auto y = test_matrix<T>(m_rows, d, 22);
  const auto dx = upload(plain, x, d);
  const auto dy = upload(plain, y, d);

  for (const metric m : all_metrics) {
    dist::pairwise_distance_params params;
    params.metric = m;
    const std::size_t square_bytes = dist::pairwise_distances_workspace_size<T>(params, n, n, d);
    const std::size_t condensed_bytes = dist::pairwise_distances_condensed_workspace_size<T>(params, n, d);
    const std::size_t cross_bytes = dist::pairwise_distances_workspace_size<T>(params, n, m_rows, d);
    // the condensed form keeps a Gram panel in the workspace; the square form writes it into `out`
    CHECK(condensed_bytes > square_bytes);

    // one buffer, used from an odd offset: the functions align within the slack they asked for
    const std::size_t largest = std::max({square_bytes, condensed_bytes, cross_bytes});
    moecomp::device_buffer<std::byte> storage(plain, static_cast<index_t>(largest + 3));
    const auto workspace = [&](std::size_t bytes) {
      return moecomp::make_device_vector_view(storage.data() + 3, static_cast<index_t>(bytes));
    };

    auto square = sentinel_buffer<T>(plain, n * n);
    auto condensed = sentinel_buffer<T>(plain, dist::condensed_size(n));
    auto cross = sentinel_buffer<T>(plain, n * m_rows);
    const int allocations_before = counter.allocations;
    dist::pairwise_distances(ctx, params, dx.view(n, d), square.view(n, n), workspace(square_bytes));
    dist::pairwise_distances_condensed(ctx, params, dx.view(n, d), condensed.view(), workspace(condensed_bytes));
    dist::pairwise_distances(ctx, params, dx.view(n, d), dy.view(m_rows, d), cross.view(n, m_rows),
                             workspace(cross_bytes));
    CHECK(counter.allocations == allocations_before);  // nothing hidden on the hot path

    moecomp::host_matrix<T> want_square(n, n), want_cross(n, m_rows);
    moecomp::host_vector<T> want_condensed(dist::condensed_size(n));
    moecomp_test::host_pairwise_distances<T>(params, x.const_view(), want_square.view());
    moecomp_test::host_pairwise_distances_condensed<T>(params, x.const_view(), want_condensed.view());
    moecomp_test::host_pairwise_distances<T>(params, x.const_view(), y.const_view(), want_cross.view());
    const std::string name = dist::to_string(m);
    check_close(download(plain, square), want_square.storage(), tolerance<T>(), name + " square");
    check_close(download(plain, condensed), want_condensed.storage(), tolerance<T>(), name + " condensed");
    check_close(download(plain, cross), want_cross.storage(), tolerance<T>(), name + " cross");

    // too small, or strided: refused before anything is enqueued. (The square form is checked against its
    // own need, which the size query does not give alone: for x_rows == y_rows it covers both forms.)
    CHECK(contains(invalid_argument_message([&] {
                     dist::pairwise_distances(ctx, params, dx.view(n, d), dy.view(m_rows, d), cross.view(n, m_rows),
                                              workspace(cross_bytes - 1));
                   }),
                   "pairwise_distances: workspace must have at least " + std::to_string(cross_bytes) + " bytes"));
    CHECK(contains(invalid_argument_message([&] {
                     dist::pairwise_distances(ctx, params, dx.view(n, d), square.view(n, n), workspace(1));
                   }),
                   "pairwise_distances: workspace must have at least "));
    CHECK(contains(invalid_argument_message([&] {
                     dist::pairwise_distances_condensed(ctx, params, dx.view(n, d), condensed.view(),
                                                        workspace(condensed_bytes - 1));
                   }),
                   "pairwise_distances_condensed: workspace must have at least " + std::to_string(condensed_bytes) +
                       " bytes"));
    CHECK(contains(invalid_argument_message([&] {
                     dist::pairwise_distances_condensed(ctx, params, dx.view(n, d), condensed.view(),
                                                        moecomp::make_device_vector_view(storage.data(), 4, 2));
                   }),
                   "pairwise_distances_condensed: workspace must be contiguous"));
  }

  // the overloads without a workspace take exactly one allocation from the context and return it
  const int allocations = counter.allocations, deallocations = counter.deallocations;
  auto out = sentinel_buffer<T>(plain, n * n);
  dist::pairwise_distances(ctx, dist::pairwise_distance_params{}, dx.view(n, d), out.view(n, n));
  CHECK(counter.allocations == allocations + 1);
  CHECK(counter.deallocations == deallocations + 1);
  fx.sync();
}

TEST_CASE_TEMPLATE("with or without a caller's cuBLAS handle; the handle is left as it was found", T, float, double) {
  device_fixture fx;
  const index_t n = 300, d = 40;
  const auto x = test_matrix<T>(n, d, 31);
  const auto dx = upload(fx.context(), x, d);
  dist::pairwise_distance_params params;
  params.metric = metric::correlation;

  // a handle bound to another stream and in device pointer mode: moecomp must use ctx.stream and host
  // scalars for its calls, then put both settings back
  cudaStream_t other = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) == cudaSuccess);
  cublasHandle_t handle = nullptr;
  REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasSetStream(handle, other) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_DEVICE) == CUBLAS_STATUS_SUCCESS);

  const moecomp::cuda_context with_handle(fx.stream, handle);
  const moecomp::cuda_context without_handle(fx.stream);
  auto a = sentinel_buffer<T>(with_handle, n * n);
  auto b = sentinel_buffer<T>(with_handle, n * n);
  auto c = sentinel_buffer<T>(with_handle, n * n);
  dist::pairwise_distances(with_handle, params, dx.view(n, d), a.view(n, n));
  dist::pairwise_distances(without_handle, params, dx.view(n, d), b.view(n, n));
  dist::pairwise_distances(with_handle, params, dx.view(n, d), c.view(n, n));

  cudaStream_t stream_after = nullptr;
  cublasPointerMode_t mode_after = CUBLAS_POINTER_MODE_HOST;
  REQUIRE(cublasGetStream(handle, &stream_after) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasGetPointerMode(handle, &mode_after) == CUBLAS_STATUS_SUCCESS);
  CHECK(stream_after == other);
  CHECK(mode_after == CUBLAS_POINTER_MODE_DEVICE);

  const auto got_a = download(fx.context(), a);
  const auto got_b = download(fx.context(), b);
  const auto got_c = download(fx.context(), c);
  moecomp::host_matrix<T> want(n, n);
  moecomp_test::host_pairwise_distances<T>(params, x.const_view(), want.view());
  check_close(got_a, want.storage(), tolerance<T>(), "caller's handle");
  check_close(got_b, want.storage(), tolerance<T>(), "temporary handle");
  // the same call twice with the same handle: bit-identical
  CHECK(std::memcmp(got_a.data(), got_c.data(), got_a.size() * sizeof(T)) == 0);

  (void)cublasDestroy(handle);
  (void)cudaStreamDestroy(other);
}

TEST_CASE("work is ordered on the context's stream only") {
  device_fixture fx;
  const auto ctx = fx.context();
  // Everything (upload, distances, download) on one non-blocking stream; synchronising that stream
  // alone must be enough to read the result.
  const index_t n = 1500, d = 64;
  const auto x = test_matrix<float>(n, d, 41);
  std::vector<float> result(static_cast<std::size_t>(dist::condensed_size(n)));
  {
    const auto dx = upload(ctx, x, d);
    moecomp::device_buffer<float> out(ctx, dist::condensed_size(n));
    dist::pairwise_distances_condensed(ctx, dist::pairwise_distance_params{}, dx.view(n, d), out.view());
    moecomp::copy_to_host(ctx, out.view().as_const(),
                          moecomp::make_vector_view(result.data(), static_cast<index_t>(result.size())));
  }  // the buffers are freed in stream order, after the copy
  fx.sync();
  moecomp::host_vector<float> want(dist::condensed_size(n));
  moecomp_test::host_pairwise_distances_condensed<float>(dist::pairwise_distance_params{}, x.const_view(), want.view());
  check_close(result, want.storage(), tolerance<float>(), "stream-ordered");
}

TEST_CASE("shape errors have the host's messages") {
  device_fixture fx;
  const auto ctx = fx.context();
  moecomp::device_buffer<double> storage(ctx, 64);
  std::vector<double> host_storage(64, 0.0);
  const dist::pairwise_distance_params params;
  const auto dev = [&](index_t r, index_t c) { return storage.view(r, c); };
  const auto host = [&](index_t r, index_t c) { return moecomp::make_matrix_view(host_storage.data(), r, c); };

  const auto host_cross = invalid_argument_message(
      [&] { moecomp_test::host_pairwise_distances<double>(params, host(4, 3), host(5, 2), host(4, 5)); });
  const auto dev_cross = invalid_argument_message(
      [&] { dist::pairwise_distances(ctx, params, dev(4, 3).as_const(), dev(5, 2), dev(4, 5)); });
  CHECK(dev_cross == host_cross);

  const auto host_out = invalid_argument_message(
      [&] { moecomp_test::host_pairwise_distances<double>(params, host(4, 3), host(5, 3), host(5, 4)); });
  const auto dev_out = invalid_argument_message(
      [&] { dist::pairwise_distances(ctx, params, dev(4, 3), dev(5, 3), dev(5, 4)); });
  CHECK(dev_out == host_out);

  const auto host_square =
      invalid_argument_message([&] { moecomp_test::host_pairwise_distances<double>(params, host(4, 3), host(4, 3)); });
  const auto dev_square = invalid_argument_message([&] { dist::pairwise_distances(ctx, params, dev(4, 3), dev(4, 3)); });
  CHECK(dev_square == host_square);

  const auto host_condensed = invalid_argument_message([&] {
    moecomp_test::host_pairwise_distances_condensed<double>(params, host(4, 3),
                                                            moecomp::make_vector_view(host_storage.data(), 5));
  });
  const auto dev_condensed = invalid_argument_message([&] {
    dist::pairwise_distances_condensed(ctx, params, dev(4, 3), moecomp::make_device_vector_view(storage.data(), 5));
  });
  CHECK(dev_condensed == host_condensed);
  CHECK(contains(dev_condensed, "out must have n (n - 1) / 2 = 6 elements"));
  fx.sync();
}
