#pragma once
// Device implementation of HSIC and CKA (<moecomp/cuda/similarity/cka.cuh>): the host's products
// (<moecomp/similarity/detail/cka_host.hpp>) with every pass on the GPU, in T.
//
//   centring:  column means (32 columns x 32 row slices per block, double), the rows' squared norms of the
//              centred features (one warp per row), their total by cub::DeviceReduce, then the scaled
//              features written row-major (gram route) or transposed (feature route);
//   gram:      the full n x n Grams by one cuBLAS strided-batched GEMM (inputs of one width; else one GEMM
//              per input); RBF: squared distances, the median by
//              cub::DeviceRadixSort of the n^2 distances, the kernel values; centring by row sums (one warp
//              per row, in double), cub::DeviceReduce for the means' total, one pass over the entries;
//   products:  gram: cuBLAS GEMMs over chunks of 2^13 entries of the E vectorised Grams (strided-batched,
//              up to 1024 chunks a launch), each chunk's E x E accumulated in double in chunk order; feature: one GEMM per pair (X_a^T X_b) and a
//              deterministic block sum of its squares; the debiased correction's row-norm dot products by
//              cublasDgemm.
// The per-element rules are the host's (similarity/detail/cka_rules.hpp).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/similarity/cka_types.hpp>
#include <moecomp/similarity/detail/cka_common.hpp>
#include <moecomp/similarity/detail/cka_rules.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/kernel.cuh>
#include <moecomp/cuda/core/detail/block_reduce.cuh>
#include <moecomp/cuda/core/detail/cublas.cuh>
#include <moecomp/cuda/core/detail/workspace.cuh>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace similarity {
namespace cuda_detail {

using namespace moecomp::detail;  // the shared device layer
using similarity::detail::centred_gram_entry;
using similarity::detail::gram_mean_shift;
using similarity::detail::gram_row_mean;
using similarity::detail::rbf_value;
using similarity::detail::squared_distance_from_gram;

inline constexpr int cka_block = 256;
/// Entries of the vectorised Grams per product GEMM (each chunk's E x E goes to double: float sums run
/// over at most 2^13 terms).
inline constexpr index_t cka_product_chunk = index_t(1) << 13;

/// Full chunks per batched launch: as many as there are, at most 1024 and at most 2^22 result entries
/// (the workspace of their E x E products). Many chunks in one launch are what fill the GPU: each
/// E x E x 2^13 product alone is one or a few thread blocks.
inline index_t cka_chunks_per_batch(index_t n, index_t e) {
  const index_t by_space = std::max<index_t>(1, (index_t(1) << 22) / std::max<index_t>(1, e * e));
  return std::max<index_t>(1, std::min({index_t(1024), by_space, n * n / cka_product_chunk}));
}

/// One device input: n x d at row stride ld.
template <class T>
struct device_input {
  const T* x;
  index_t ld, d;
};

/// Per-input results read back to the host.
struct input_report {
  double scale;         // Frobenius norm of the centred features
  double sigma_scaled;  // RBF bandwidth in scaled units
  int status;           // cka_status
  int padding;
};

struct cka_device_plan {
  index_t e = 0, n = 0, max_d = 0, total_features = 0;
  cka_route route = cka_route::gram;
  bool rbf = false;
  std::size_t features = 0, grams = 0, row_norms = 0, column_means = 0, row_sums = 0, scalars = 0, sorted = 0;
  std::size_t reports = 0, products = 0, chunk = 0, norm_dots = 0, cub_temp = 0, cub_bytes = 0, bytes = 0;
};

template <class T>
std::size_t cka_cub_bytes(index_t n, bool rbf) {
  std::size_t bytes = 0, need = 0;
  MOECOMP_CUDA_TRY(cub::DeviceReduce::Sum(nullptr, need, static_cast<const double*>(nullptr),
                                          static_cast<double*>(nullptr), static_cast<int>(n)));
  bytes = std::max(bytes, need);
  if (rbf) {
    MOECOMP_CUDA_TRY(cub::DeviceRadixSort::SortKeys(nullptr, need, static_cast<const T*>(nullptr),
                                                    static_cast<T*>(nullptr), static_cast<int>(n * n)));
    bytes = std::max(bytes, need);
  }
  return bytes;
}

/// The workspace of E inputs of n samples whose feature counts are `dims`.
template <class T>
cka_device_plan make_cka_plan(const char* fn, const cka_params& params, index_t n, const std::vector<index_t>& dims,
                              cka_route route) {
  cka_device_plan p;
  p.e = static_cast<index_t>(dims.size());
  p.n = n;
  p.route = route;
  p.rbf = params.kernel == cka_kernel::rbf;
  for (index_t d : dims) {
    p.max_d = std::max(p.max_d, d);
    p.total_features += n * d;
  }
  MOECOMP_EXPECTS(n <= static_cast<index_t>(INT_MAX) && p.max_d <= static_cast<index_t>(INT_MAX) &&
                      (route != cka_route::gram || n * n <= static_cast<index_t>(INT_MAX)),
                  fn, ": the device version needs n, d (and n^2 on the gram route) at most ", INT_MAX, ", got n = ", n,
                  ", d = ", p.max_d);
  workspace_layout layout(fn);
  p.features = layout.take(p.total_features, sizeof(T));
  if (route == cka_route::gram) p.grams = layout.take(p.e * n * n, sizeof(T));
  p.row_norms = layout.take(p.e * n, sizeof(double));
  p.column_means = layout.take(p.max_d, sizeof(double));
  p.row_sums = layout.take(n, sizeof(double));
  p.scalars = layout.take(4, sizeof(double));  // squared Frobenius norm, means' total, median, spare
  if (p.rbf) p.sorted = layout.take(n * n, sizeof(T));
  p.reports = layout.take(p.e, sizeof(input_report));
  p.products = layout.take(p.e * p.e, sizeof(double));
  p.chunk = layout.take(route == cka_route::gram ? cka_chunks_per_batch(n, p.e) * p.e * p.e : p.max_d * p.max_d, sizeof(T));
  p.norm_dots = layout.take(p.e * p.e, sizeof(double));
  p.cub_bytes = cka_cub_bytes<T>(n, p.rbf);
  p.cub_temp = layout.take(static_cast<index_t>(p.cub_bytes), 1);
  p.bytes = layout.total();
  return p;
}


/// The column-means blocks: 32 columns x cka_row_slices row slices (each slice's sum is a serial chain,
/// so more slices, shorter chains).
inline constexpr int cka_row_slices = 32;
inline constexpr int column_means_block = 32 * cka_row_slices;

/// means[c] = mean of column c in double. A block takes 32 adjacent columns (coalesced reads); slice s of
/// them sums rows s, s + slices, ... in order, and the slices' partials are added in slice order: a fixed
/// order, so the result does not depend on timing.
template <class T>
MOECOMP_KERNEL void __launch_bounds__(column_means_block)
    column_means_kernel(const T* x, index_t ld, index_t n, index_t d, double* means) {
  __shared__ double partial[cka_row_slices][32];
  const int lane = static_cast<int>(threadIdx.x) & 31, slice = static_cast<int>(threadIdx.x) >> 5;
  for (index_t c0 = static_cast<index_t>(blockIdx.x) * 32; c0 < d; c0 += static_cast<index_t>(gridDim.x) * 32) {
    const index_t c = c0 + lane;
    double s = 0;
    if (c < d)
      for (index_t i = slice; i < n; i += cka_row_slices) s += static_cast<double>(x[i * ld + c]);
    partial[slice][lane] = s;
    __syncthreads();
    if (slice == 0 && c < d) {
      double total = 0;
      for (int k = 0; k < cka_row_slices; ++k) total += partial[k][lane];
      means[c] = total / static_cast<double>(n);
    }
    __syncthreads();
  }
}

/// norms[i] = ||x_i - mean||^2 in double: one warp per row (coalesced), lane l summing columns l, l + 32,
/// ... in order, then warp_sum's fixed tree.
template <class T>
MOECOMP_KERNEL void __launch_bounds__(cka_block)
    centred_row_norms_kernel(const T* x, index_t ld, index_t n, index_t d, const double* means, double* norms) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const index_t warps = static_cast<index_t>(gridDim.x) * (cka_block / 32);
  for (index_t i = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; i < n; i += warps) {
    double s = 0;
    for (index_t c = lane; c < d; c += 32) {
      const double v = static_cast<double>(x[i * ld + c]) - means[c];
      s += v * v;
    }
    s = warp_sum(s);
    if (lane == 0) norms[i] = s;
  }
}

/// The scaled centred features (row-major, or transposed d x n), the scaled row norms, and the input's
/// scale and status; squares = the total of the row norms (on the device).
template <class T>
MOECOMP_KERNEL void __launch_bounds__(cka_block)
    scale_features_kernel(const T* x, index_t ld, index_t n, index_t d, const double* means, const double* squares,
                          bool transposed, T* out, double* norms, input_report* report) {
  const double total = *squares;
  const double inv = total > 0 ? 1.0 / sqrt(total) : 0.0;
  // a block per row, its threads along the columns (no index division)
  for (index_t i = blockIdx.x; i < n; i += gridDim.x) {
    for (index_t c = threadIdx.x; c < d; c += blockDim.x) {
      const T v = static_cast<T>((static_cast<double>(x[i * ld + c]) - means[c]) * inv);
      if (transposed) out[c * n + i] = v;
      else out[i * d + c] = v;
    }
    if (threadIdx.x == 0) norms[i] *= inv * inv;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    report->scale = sqrt(total);
    report->status = total > 0 ? static_cast<int>(cka_status::ok) : static_cast<int>(cka_status::constant_input);
  }
}

/// Gram entries to squared distances (the shared rule).
template <class T>
MOECOMP_KERNEL void __launch_bounds__(cka_block)
    distances_kernel(T* g, index_t n, const double* norms) {
  for (index_t i = blockIdx.x; i < n; i += gridDim.x)  // a block per row (no index division)
    for (index_t j = threadIdx.x; j < n; j += blockDim.x) {
      const index_t e = i * n + j;
      g[e] = static_cast<T>(squared_distance_from_gram(norms[i], norms[j], static_cast<double>(g[e]), i == j));
    }
}

/// The RBF bandwidth of one input from the sorted distances (numpy's median of the n^2 entries) or the
/// explicit sigma; writes sigma_scaled and, when it is 0, the zero_median status.
template <class T>
MOECOMP_KERNEL void bandwidth_kernel(const T* sorted, index_t count, double sigma, double threshold,
                                     input_report* report) {
  double sigma2;
  if (sigma > 0) {
    const double s = sigma / (report->scale > 0 ? report->scale : 1.0);
    sigma2 = s * s;
  } else {
    const double median = count % 2 == 1 ? static_cast<double>(sorted[count / 2])
                                         : 0.5 * (static_cast<double>(sorted[count / 2 - 1]) +
                                                  static_cast<double>(sorted[count / 2]));
    sigma2 = threshold * threshold * median;
  }
  report->sigma_scaled = sqrt(sigma2 > 0 ? sigma2 : 0.0);
  if (!(sigma2 > 0) && report->status == static_cast<int>(cka_status::ok))
    report->status = static_cast<int>(cka_status::zero_median);
}

/// Squared distances to kernel values (0 everywhere when the bandwidth is 0: the input is undefined).
template <class T>
MOECOMP_KERNEL void __launch_bounds__(cka_block) rbf_kernel(T* g, index_t count, const input_report* report) {
  const double s = report->sigma_scaled;
  const double factor = s > 0 ? -1.0 / (2.0 * s * s) : 0.0;
  for (index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<index_t>(gridDim.x) * blockDim.x)
    g[e] = s > 0 ? static_cast<T>(rbf_value(static_cast<double>(g[e]), factor)) : T(0);
}

/// Row means before the correction, in double: one warp per row (coalesced), lane l summing entries l,
/// l + 32, ... in order, then warp_sum's fixed tree.
template <class T>
MOECOMP_KERNEL void __launch_bounds__(cka_block)
    gram_row_means_kernel(const T* g, index_t n, bool unbiased, double* means) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const index_t warps = static_cast<index_t>(gridDim.x) * (cka_block / 32);
  for (index_t i = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; i < n; i += warps) {
    double s = 0;
    for (index_t j = lane; j < n; j += 32)
      if (!(unbiased && i == j)) s += static_cast<double>(g[i * n + j]);
    s = warp_sum(s);
    if (lane == 0) means[i] = gram_row_mean(s, n, unbiased);
  }
}

/// The centred Gram in place; total = the means' total (on the device).
template <class T>
MOECOMP_KERNEL void __launch_bounds__(cka_block)
    centre_gram_kernel(T* g, index_t n, const double* means, const double* total, bool unbiased) {
  const double shift = gram_mean_shift(*total, n, unbiased);
  for (index_t i = blockIdx.x; i < n; i += gridDim.x)  // a block per row (no index division)
    for (index_t j = threadIdx.x; j < n; j += blockDim.x) {
      const index_t e = i * n + j;
      g[e] = static_cast<T>(centred_gram_entry(static_cast<double>(g[e]), means[i] - shift, means[j] - shift, i == j,
                                               unbiased));
    }
}

/// products += chunks[0] + chunks[1] + ... (each E x E, `count` entries apart), in double, chunk by chunk
/// in order: the order of the separate launches it replaces.
template <class T>
MOECOMP_KERNEL void accumulate_kernel(const T* chunks, index_t count, index_t chunk_count, double* products) {
  for (index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<index_t>(gridDim.x) * blockDim.x) {
    double s = products[e];
    for (index_t k = 0; k < chunk_count; ++k) s += static_cast<double>(chunks[k * count + e]);
    products[e] = s;
  }
}

/// out[0] = sum of squares of m (count entries), one block (fixed order: deterministic).
template <class T>
MOECOMP_KERNEL void __launch_bounds__(cka_block) sum_of_squares_kernel(const T* m, index_t count, double* out) {
  __shared__ double scratch[block_sum_scratch<cka_block>];
  double s = 0;
  for (index_t e = threadIdx.x; e < count; e += cka_block) s += static_cast<double>(m[e]) * static_cast<double>(m[e]);
  s = block_sum<cka_block>(s, scratch);
  if (threadIdx.x == 0) *out = s;
}

/// Everything the host needs back: the E x E products, the row-norm dots and sums (debiased feature
/// route), and the per-input reports.
struct cka_device_products {
  std::vector<double> products, norm_dots, norm_sums;
  std::vector<input_report> reports;
};

/// The products of the inputs (synchronises once at the end).
template <class T>
cka_device_products run_cka_products(const cuda_context& ctx, const cka_params& params,
                                     const std::vector<device_input<T>>& inputs, index_t n, const cka_device_plan& plan,
                                     std::byte* workspace) {
  std::byte* base = aligned_base(workspace);
  const index_t e_count = plan.e;
  T* features = at<T>(base, plan.features);
  double* row_norms = at<double>(base, plan.row_norms);
  double* means = at<double>(base, plan.column_means);
  double* row_sums = at<double>(base, plan.row_sums);
  double* scalars = at<double>(base, plan.scalars);
  input_report* reports = at<input_report>(base, plan.reports);
  double* products = at<double>(base, plan.products);
  T* chunk = at<T>(base, plan.chunk);
  const cublas_session blas(ctx);
  const bool transposed = plan.route == cka_route::feature;
  std::vector<std::size_t> offsets;
  std::size_t offset = 0;
  for (const auto& in : inputs) {
    offsets.push_back(offset);
    offset += static_cast<std::size_t>(n * in.d);
  }
  for (index_t e = 0; e < e_count; ++e) {
    const device_input<T>& in = inputs[static_cast<std::size_t>(e)];
    double* norms = row_norms + e * n;
    column_means_kernel<T><<<grid_for(in.d, 32), column_means_block, 0, ctx.stream>>>(in.x, in.ld, n, in.d, means);
    MOECOMP_CUDA_TRY(cudaGetLastError());
    centred_row_norms_kernel<T><<<grid_for(n * 32, cka_block), cka_block, 0, ctx.stream>>>(in.x, in.ld, n, in.d, means, norms);
    MOECOMP_CUDA_TRY(cudaGetLastError());
    std::size_t bytes = plan.cub_bytes;
    MOECOMP_CUDA_TRY(cub::DeviceReduce::Sum(at<std::byte>(base, plan.cub_temp), bytes, norms, scalars,
                                            static_cast<int>(n), ctx.stream));
    T* x = features + offsets[static_cast<std::size_t>(e)];
    scale_features_kernel<T><<<grid_for(n, 1), cka_block, 0, ctx.stream>>>(
        in.x, in.ld, n, in.d, means, scalars, transposed, x, norms, reports + e);
    MOECOMP_CUDA_TRY(cudaGetLastError());
  }
  if (!transposed) {
    // The Grams: one strided-batched GEMM when every input has the same width (the features lie n x d apart),
    // which fills the GPU where one n x n product alone may not; else one GEMM per input.
    T* grams = at<T>(base, plan.grams);
    bool uniform = true;
    for (const auto& in : inputs) uniform = uniform && in.d == inputs.front().d;
    if (uniform && e_count > 1) {
      const index_t d = inputs.front().d;
      gemm_abt_batched(blas.handle(), n, n, d, features, d, features, d, n * d, grams, n, n * n, e_count);
    } else {
      for (index_t e = 0; e < e_count; ++e) {
        const index_t d = inputs[static_cast<std::size_t>(e)].d;
        const T* x = features + offsets[static_cast<std::size_t>(e)];
        gemm_abt(blas.handle(), n, n, d, x, d, x, d, grams + e * n * n, n);
      }
    }
  }
  for (index_t e = 0; e < e_count && !transposed; ++e) {
    double* norms = row_norms + e * n;
    std::size_t bytes = plan.cub_bytes;
    T* g = at<T>(base, plan.grams) + e * n * n;
    if (plan.rbf) {
      distances_kernel<T><<<grid_for(n, 1), cka_block, 0, ctx.stream>>>(g, n, norms);
      MOECOMP_CUDA_TRY(cudaGetLastError());
      if (params.sigma <= 0) {
        bytes = plan.cub_bytes;
        MOECOMP_CUDA_TRY(cub::DeviceRadixSort::SortKeys(at<std::byte>(base, plan.cub_temp), bytes, g,
                                                        at<T>(base, plan.sorted), static_cast<int>(n * n), 0,
                                                        static_cast<int>(sizeof(T) * 8), ctx.stream));
      }
      bandwidth_kernel<T><<<1, 1, 0, ctx.stream>>>(at<T>(base, plan.sorted), n * n, params.sigma, params.threshold,
                                                   reports + e);
      MOECOMP_CUDA_TRY(cudaGetLastError());
      rbf_kernel<T><<<grid_for(n * n, cka_block), cka_block, 0, ctx.stream>>>(g, n * n, reports + e);
      MOECOMP_CUDA_TRY(cudaGetLastError());
    }
    gram_row_means_kernel<T><<<grid_for(n * 32, cka_block), cka_block, 0, ctx.stream>>>(g, n, params.unbiased, row_sums);
    MOECOMP_CUDA_TRY(cudaGetLastError());
    bytes = plan.cub_bytes;
    MOECOMP_CUDA_TRY(cub::DeviceReduce::Sum(at<std::byte>(base, plan.cub_temp), bytes, row_sums, scalars + 1,
                                            static_cast<int>(n), ctx.stream));
    centre_gram_kernel<T><<<grid_for(n, 1), cka_block, 0, ctx.stream>>>(g, n, row_sums, scalars + 1, params.unbiased);
    MOECOMP_CUDA_TRY(cudaGetLastError());
  }
  MOECOMP_CUDA_TRY(cudaMemsetAsync(products, 0, sizeof(double) * static_cast<std::size_t>(e_count * e_count), ctx.stream));
  if (!transposed) {
    const T* grams = at<T>(base, plan.grams);
    // Full chunks a batch at a time (one launch fills the GPU; a single E x E x 2^13 product would not),
    // then the shorter last chunk.
    const index_t ee = e_count * e_count, full = n * n / cka_product_chunk, per_batch = cka_chunks_per_batch(n, e_count);
    for (index_t first = 0; first < full; first += per_batch) {
      const index_t count = std::min(per_batch, full - first);
      const T* start = grams + first * cka_product_chunk;
      gemm_abt_batched(blas.handle(), e_count, e_count, cka_product_chunk, start, n * n, start, n * n,
                       cka_product_chunk, chunk, e_count, ee, count);
      accumulate_kernel<T><<<grid_for(ee, cka_block), cka_block, 0, ctx.stream>>>(chunk, ee, count, products);
      MOECOMP_CUDA_TRY(cudaGetLastError());
    }
    if (const index_t rest = n * n - full * cka_product_chunk; rest > 0) {
      const T* start = grams + full * cka_product_chunk;
      gemm_abt(blas.handle(), e_count, e_count, rest, start, n * n, start, n * n, chunk, e_count);
      accumulate_kernel<T><<<grid_for(ee, cka_block), cka_block, 0, ctx.stream>>>(chunk, ee, 1, products);
      MOECOMP_CUDA_TRY(cudaGetLastError());
    }
  } else {
    for (index_t a = 0; a < e_count; ++a)
      for (index_t b = a; b < e_count; ++b) {
        const index_t da = inputs[static_cast<std::size_t>(a)].d, db = inputs[static_cast<std::size_t>(b)].d;
        gemm_abt(blas.handle(), da, db, n, features + offsets[static_cast<std::size_t>(a)], n,
                 features + offsets[static_cast<std::size_t>(b)], n, chunk, db);
        sum_of_squares_kernel<T><<<1, cka_block, 0, ctx.stream>>>(chunk, da * db, products + a * e_count + b);
        MOECOMP_CUDA_TRY(cudaGetLastError());
      }
    // Row-norm dot products for the debiased correction: R R^T (R: E x n doubles).
    gemm_abt(blas.handle(), e_count, e_count, n, row_norms, n, row_norms, n, at<double>(base, plan.norm_dots), e_count);
  }
  cka_device_products out;
  out.products.resize(static_cast<std::size_t>(e_count * e_count));
  out.norm_dots.resize(static_cast<std::size_t>(e_count * e_count));
  out.reports.resize(static_cast<std::size_t>(e_count));
  std::vector<double> norms(static_cast<std::size_t>(transposed ? e_count * n : 0));
  MOECOMP_CUDA_TRY(cudaMemcpyAsync(out.products.data(), products, sizeof(double) * out.products.size(),
                                   cudaMemcpyDeviceToHost, ctx.stream));
  MOECOMP_CUDA_TRY(cudaMemcpyAsync(out.reports.data(), reports, sizeof(input_report) * out.reports.size(),
                                   cudaMemcpyDeviceToHost, ctx.stream));
  if (transposed) {
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(out.norm_dots.data(), at<double>(base, plan.norm_dots),
                                     sizeof(double) * out.norm_dots.size(), cudaMemcpyDeviceToHost, ctx.stream));
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(norms.data(), row_norms, sizeof(double) * norms.size(), cudaMemcpyDeviceToHost,
                                     ctx.stream));
  }
  MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
  // Symmetric products from the upper triangle; the debiased feature-route correction on the host (E^2
  // scalars), sums of the row norms in row order.
  out.norm_sums.assign(static_cast<std::size_t>(e_count), 0.0);
  for (index_t e = 0; e < e_count && transposed; ++e)
    for (index_t i = 0; i < n; ++i) out.norm_sums[static_cast<std::size_t>(e)] += norms[static_cast<std::size_t>(e * n + i)];
  const double nn = static_cast<double>(n);
  for (index_t a = 0; a < e_count; ++a)
    for (index_t b = a; b < e_count; ++b) {
      double& p = out.products[static_cast<std::size_t>(a * e_count + b)];
      if (transposed && params.unbiased)
        p = p - nn / (nn - 2) * out.norm_dots[static_cast<std::size_t>(a * e_count + b)] +
            out.norm_sums[static_cast<std::size_t>(a)] * out.norm_sums[static_cast<std::size_t>(b)] / ((nn - 1) * (nn - 2));
      out.products[static_cast<std::size_t>(b * e_count + a)] = p;
    }
  return out;
}

}  // namespace cuda_detail
}  // namespace similarity
MOECOMP_NAMESPACE_END
