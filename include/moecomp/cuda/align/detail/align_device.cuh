#pragma once
// Device implementation of neuron alignment (<moecomp/cuda/align/align.cuh>): the host's cost matrices
// (<moecomp/align/detail/align_host.hpp>) by cuBLAS, the assignment by the device auction.
//
//   rows:         the squared row norms in double (cub::DeviceSegmentedReduce, one segment per row), the cross
//                 term a b^T by one cuBLAS GEMM in T, then per entry the clamped squared distance (weights) or
//                 the product itself (inner);
//   correlation:  a and b transposed into one (n + m) x tokens block (a tiled copy kernel, so that each neuron
//                 is a contiguous segment), each row's sum and centred sum of squares in double (two
//                 cub::DeviceSegmentedReduce calls over the n + m rows), the rows standardised in place in T,
//                 then one GEMM za zb^T;
//   assignment:   ot::auction_assignment on the n x m cost (SYNCHRONISES);
//   experts:      each expert's design rows [W1 | b1 | W3 | b3 | W2^T] in accumulator_t<W> (the host's layout and
//                 conversions, align/detail/align_rules.hpp: an element-wise kernel for the row pieces, the tiled
//                 transpose for W2^T), or its hidden activations by the device forward (cuda/moe); then the
//                 rows or the correlation path above;
//   objective:    the terms of each matched pair in double (cub::DeviceSegmentedReduce, one segment per row of
//                 a), read back and summed on the host in row order, as the host does.
// The per-element rules are the host's (align/detail/align_rules.hpp, core/detail/correlation_rules.hpp).
// Every piece of the workspace starts on a 256-byte boundary (cuda/core/detail/workspace.cuh).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/moe/ffn_types.hpp>
#include <moecomp/align/align_types.hpp>
#include <moecomp/align/detail/align_rules.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/correlation_rules.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/kernel.cuh>
#include <moecomp/cuda/core/detail/cublas.cuh>
#include <moecomp/cuda/core/detail/workspace.cuh>
#include <moecomp/cuda/moe/expert_types.cuh>
#include <moecomp/cuda/moe/expert.cuh>
#include <moecomp/cuda/ot/auction_assignment.cuh>
#include <moecomp/ot/linear_assignment_types.hpp>

#include <cub/device/device_segmented_reduce.cuh>
#include <cuda_runtime_api.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace align {
namespace cuda_detail {

using namespace moecomp::detail;  // the shared device layer: cuda/core/detail, core/detail

inline constexpr int align_block = 256;
inline constexpr int transpose_tile = 32;
inline constexpr int transpose_rows = 8;  // threads per tile column: blocks of 32 x 8

// ---- The inputs of the segmented sums: functors of a flat element index k (thrust::transform_iterator over
// ---- a counting iterator), so no n x f buffer of terms is ever written.

/// Element k squared, in double (a row's squared norm: the inner term of the row with itself).
template <class T>
struct element_square {
  const T* x;
  __host__ __device__ double operator()(index_t k) const {
    const double v = static_cast<double>(x[k]);
    return align::detail::objective_term(v, v, false);
  }
};

/// Element k as double (a row's sum).
template <class T>
struct element_value {
  const T* x;
  __host__ __device__ double operator()(index_t k) const { return static_cast<double>(x[k]); }
};

/// Element k's squared deviation from the mean of its row (rows of `count` elements, sums[row] / count).
template <class T>
struct element_squared_deviation {
  const T* z;
  const double* sums;
  index_t count;
  __host__ __device__ double operator()(index_t k) const {
    const index_t row = k / count;
    return moecomp::detail::squared_deviation(static_cast<double>(z[k]), sums[row] / static_cast<double>(count));
  }
};

/// The objective term of a's element k (row i = k / lda) and the same column of b's row p[i].
template <class T>
struct matched_pair_term {
  const T* a;
  index_t lda;
  const T* b;
  index_t ldb;
  const index_t* p;
  index_t p_stride;
  bool squared_distance;
  __host__ __device__ double operator()(index_t k) const {
    const index_t i = k / lda, c = k - i * lda;
    return align::detail::objective_term(static_cast<double>(a[k]), static_cast<double>(b[p[i * p_stride] * ldb + c]),
                                         squared_distance);
  }
};

/// i * stride + shift: the first (shift 0) or one-past-last (shift = row length) element of row i.
struct row_offset {
  index_t stride, shift;
  __host__ __device__ index_t operator()(index_t i) const { return i * stride + shift; }
};

template <class F>
auto over_indices(F f) {
  return thrust::make_transform_iterator(thrust::counting_iterator<index_t>(0), f);
}

/// out[i] = the sum in double of element(k) over k in [i * stride, i * stride + length), i < segments: one
/// cub::DeviceSegmentedReduce::Sum (a fixed reduction tree per segment: deterministic). With temp null, `bytes`
/// receives the temporary storage it needs.
template <class F>
void segmented_sum(std::byte* temp, std::size_t& bytes, F element, double* out, index_t segments, index_t stride,
                   index_t length, cudaStream_t stream) {
  MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::Sum(temp, bytes, over_indices(element), out,
                                                   static_cast<std::int64_t>(segments), over_indices(row_offset{stride, 0}),
                                                   over_indices(row_offset{stride, length}), stream));
}

/// Temporary bytes of segmented_sum for this element functor and segment count.
template <class F>
std::size_t segmented_sum_bytes(F element, index_t segments, index_t length) {
  std::size_t bytes = 0;
  segmented_sum(nullptr, bytes, element, nullptr, segments, length, length, nullptr);
  return bytes;
}

// ---- Kernels.

/// out (cols x rows at row stride ldo) = x^T (x: rows x cols at row stride ld) converted to T (convert_to, as the
/// host converts), through 32 x 32 tiles in shared memory so that the reads and the writes are both coalesced; a
/// grid-stride loop over the tiles, blocks of 32 x 8.
template <class S, class T>
MOECOMP_KERNEL void __launch_bounds__(transpose_tile * transpose_rows)
    transpose_kernel(const S* x, index_t ld, index_t rows, index_t cols, T* out, index_t ldo) {
  __shared__ T tile[transpose_tile][transpose_tile + 1];  // + 1: no bank conflicts on the column reads
  const index_t tile_cols = ceil_div(cols, transpose_tile), tiles = ceil_div(rows, transpose_tile) * tile_cols;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  for (index_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const index_t r0 = t / tile_cols * transpose_tile, c0 = t % tile_cols * transpose_tile;
    for (int dy = ty; dy < transpose_tile; dy += transpose_rows) {
      const index_t r = r0 + dy, c = c0 + tx;
      if (r < rows && c < cols) tile[dy][tx] = convert_to<T>(x[r * ld + c]);
    }
    __syncthreads();
    for (int dy = ty; dy < transpose_tile; dy += transpose_rows) {
      const index_t c = c0 + dy, r = r0 + tx;
      if (c < cols && r < rows) out[c * ldo + r] = tile[tx][dy];
    }
    __syncthreads();  // the tile is refilled by the next iteration
  }
}

/// The row pieces W1 | b1 | W3 | b3 (columns [0, layout.w2)) of an expert's design rows, converted to A by
/// convert_to as the host's fill_design converts them, into out (d_ff x layout.width, contiguous); the column
/// mapping is the host's (align::detail::design_source). A grid-stride loop over d_ff x layout.w2 elements.
template <class W, class A>
MOECOMP_KERNEL void __launch_bounds__(align_block)
    design_rows_kernel(matrix_view<const W, device_memory> w1, matrix_view<const W, device_memory> w3,
                       vector_view<const W, device_memory> b1, vector_view<const W, device_memory> b3, index_t d_ff,
                       align::detail::design_layout layout, A* out) {
  const index_t cols = layout.w2, total = d_ff * cols;
  for (index_t t = index_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += index_t(gridDim.x) * blockDim.x) {
    const index_t i = t / cols, c = t - i * cols;
    index_t k = 0;
    A v = A(0);
    switch (align::detail::design_source(layout, c, k)) {
      case align::detail::design_piece::w1: v = convert_to<A>(w1.row_ptr(i)[k]); break;
      case align::detail::design_piece::b1: v = convert_to<A>(*b1.ptr(i)); break;
      case align::detail::design_piece::w3: v = convert_to<A>(w3.row_ptr(i)[k]); break;
      case align::detail::design_piece::b3: v = convert_to<A>(*b3.ptr(i)); break;
      case align::detail::design_piece::w2: break;  // columns >= layout.w2: not in this kernel
    }
    out[i * layout.width + c] = v;
  }
}

/// identity (n, contiguous) = 0, 1, ..., n - 1: the reference's own row of align_stack.
MOECOMP_KERNEL void __launch_bounds__(align_block) identity_kernel(index_t* p, index_t n) {
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += index_t(gridDim.x) * blockDim.x) p[i] = i;
}

/// cost (n x m, contiguous) from the cross terms a_i . b_j to the clamped squared distances, in place; a block
/// per row (no index division).
template <class T>
MOECOMP_KERNEL void __launch_bounds__(align_block)
    squared_distance_kernel(T* cost, index_t n, index_t m, const double* norm_a, const double* norm_b) {
  for (index_t i = blockIdx.x; i < n; i += gridDim.x) {
    const double ni = norm_a[i];
    T* row = cost + i * m;
    for (index_t j = threadIdx.x; j < m; j += blockDim.x)
      row[j] = static_cast<T>(align::detail::clamped_squared_distance(ni, norm_b[j], static_cast<double>(row[j])));
  }
}

/// Each row of z (rows x count, contiguous) standardised in place from its sum and centred sum of squares; a
/// block per row.
template <class T>
MOECOMP_KERNEL void __launch_bounds__(align_block)
    standardize_kernel(T* z, index_t rows, index_t count, const double* sums, const double* squares) {
  for (index_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const double mean = sums[i] / static_cast<double>(count);
    const double scale = moecomp::detail::unit_norm_scale(squares[i]);
    T* row = z + i * count;
    for (index_t t = threadIdx.x; t < count; t += blockDim.x)
      row[t] = static_cast<T>(moecomp::detail::standardized_value(static_cast<double>(row[t]), mean, scale));
  }
}

// ---- Workspace plans: built identically by the size queries and by the calls.

/// The assignment's pieces, shared by align_rows and align_activations: the n x m cost in T, the n pair terms
/// in double, and the auction's own workspace.
struct assignment_plan {
  std::size_t cost = 0, terms = 0, auction = 0, auction_bytes = 0;
};

template <class T>
assignment_plan take_assignment(workspace_layout& layout, index_t n, index_t m) {
  assignment_plan p;
  p.cost = layout.take(n * m, sizeof(T));
  p.terms = layout.take(n, sizeof(double));
  p.auction_bytes = ot::auction_assignment_workspace_size<T>(ot::auction_params{}, n, m);
  p.auction = layout.take(static_cast<index_t>(p.auction_bytes), 1);
  return p;
}

/// align_rows: a n x f, b m x f.
struct rows_plan {
  index_t n = 0, m = 0, f = 0;
  bool distances = false;
  std::size_t norms = 0, cub_temp = 0, cub_bytes = 0, bytes = 0;
  assignment_plan assignment;
};

template <class T>
rows_plan make_rows_plan(const char* fn, align_objective objective, index_t n, index_t m, index_t f) {
  check_int_extents(fn, {{"a's rows", n}, {"b's rows", m}, {"the number of columns", f}});
  rows_plan p;
  p.n = n;
  p.m = m;
  p.f = f;
  p.distances = objective == align_objective::weights;
  workspace_layout layout(fn);
  if (p.distances) p.norms = layout.take(n + m, sizeof(double));
  p.assignment = take_assignment<T>(layout, n, m);
  const index_t most = std::max(n, m);
  p.cub_bytes = std::max(segmented_sum_bytes(element_square<T>{nullptr}, most, f),
                         segmented_sum_bytes(matched_pair_term<T>{nullptr, 1, nullptr, 1, nullptr, 1, false}, n, f));
  p.cub_temp = layout.take(static_cast<index_t>(p.cub_bytes), 1);
  p.bytes = layout.total();
  return p;
}

/// pearson_correlation and align_activations: a tokens x n, b tokens x m.
struct correlation_plan {
  index_t tokens = 0, n = 0, m = 0;
  bool assigns = false;
  std::size_t z = 0, sums = 0, squares = 0, cub_temp = 0, cub_bytes = 0, bytes = 0;
  assignment_plan assignment;
};

template <class T>
correlation_plan make_correlation_plan(const char* fn, index_t tokens, index_t n, index_t m, bool assigns) {
  check_int_extents(fn, {{"the number of tokens", tokens}, {"a's neurons", n}, {"b's neurons", m}});
  correlation_plan p;
  p.tokens = tokens;
  p.n = n;
  p.m = m;
  p.assigns = assigns;
  workspace_layout layout(fn);
  p.z = layout.take((n + m) * tokens, sizeof(T));
  p.sums = layout.take(n + m, sizeof(double));
  p.squares = layout.take(n + m, sizeof(double));
  if (assigns) p.assignment = take_assignment<T>(layout, n, m);
  p.cub_bytes = std::max(segmented_sum_bytes(element_value<T>{nullptr}, n + m, tokens),
                         segmented_sum_bytes(element_squared_deviation<T>{nullptr, nullptr, 1}, n + m, tokens));
  if (assigns)
    p.cub_bytes = std::max(p.cub_bytes,
                           segmented_sum_bytes(matched_pair_term<T>{nullptr, 1, nullptr, 1, nullptr, 1, false}, n, tokens));
  p.cub_temp = layout.take(static_cast<index_t>(p.cub_bytes), 1);
  p.bytes = layout.total();
  return p;
}

// ---- The computations.

/// out (n x m at row stride ldo) = the Pearson correlations of a's columns with b's (see above). Asynchronous.
template <class T>
void correlation_into(const cuda_context& ctx, const cublas_session& blas, const correlation_plan& plan,
                      std::byte* base, matrix_view<const T, device_memory> a, matrix_view<const T, device_memory> b,
                      T* out, index_t ldo) {
  const index_t tokens = plan.tokens, n = plan.n, m = plan.m, rows = n + m;
  T* z = at<T>(base, plan.z);
  double* sums = at<double>(base, plan.sums);
  double* squares = at<double>(base, plan.squares);
  std::byte* temp = at<std::byte>(base, plan.cub_temp);
  const dim3 tile_block(transpose_tile, transpose_rows);
  const auto tiles = [&](index_t cols) { return ceil_div(tokens, transpose_tile) * ceil_div(cols, transpose_tile); };
  transpose_kernel<T, T><<<grid_for(tiles(n), 1), tile_block, 0, ctx.stream>>>(a.data(), a.row_stride(), tokens, n,
                                                                                z, tokens);
  MOECOMP_CUDA_CHECK_LAUNCH();
  transpose_kernel<T, T><<<grid_for(tiles(m), 1), tile_block, 0, ctx.stream>>>(b.data(), b.row_stride(), tokens, m,
                                                                                z + n * tokens, tokens);
  MOECOMP_CUDA_CHECK_LAUNCH();
  std::size_t bytes = plan.cub_bytes;
  segmented_sum(temp, bytes, element_value<T>{z}, sums, rows, tokens, tokens, ctx.stream);
  bytes = plan.cub_bytes;
  segmented_sum(temp, bytes, element_squared_deviation<T>{z, sums, tokens}, squares, rows, tokens, tokens, ctx.stream);
  standardize_kernel<T><<<grid_for(rows, 1), align_block, 0, ctx.stream>>>(z, rows, tokens, sums, squares);
  MOECOMP_CUDA_CHECK_LAUNCH();
  gemm_abt(blas.handle(), n, m, tokens, z, tokens, z + n * tokens, tokens, out, ldo);
}

/// The rows (or standardised columns) a solution is reported from: a n x f at lda, b at ldb.
template <class T>
struct reported_rows {
  const T* a;
  index_t lda;
  const T* b;
  index_t ldb;
  index_t f;
};

/// p = the auction's assignment on the n x m cost in the workspace (maximising or minimising), then the objective
/// at p from the rows in double: each pair's terms summed on the device, the n sums read back and added in row
/// order. Synchronises.
template <class T>
align_result assign_and_report(const cuda_context& ctx, const assignment_plan& plan, std::byte* base,
                               std::byte* cub_temp, std::size_t cub_bytes, index_t n, index_t m, bool maximize,
                               bool squared_distance, const reported_rows<T>& rows,
                               vector_view<index_t, device_memory> p) {
  ot::auction_params params;
  params.maximize = maximize;
  const matrix_view<const T, device_memory> cost(at<T>(base, plan.cost), n, m, m);
  const vector_view<std::byte, device_memory> auction_space(at<std::byte>(base, plan.auction),
                                                            static_cast<index_t>(plan.auction_bytes));
  const ot::auction_result assignment = ot::auction_assignment(ctx, params, cost, p, auction_space);
  align_result out;
  out.status = assignment.status;
  if (!out.ok()) return out;
  double* terms = at<double>(base, plan.terms);
  std::size_t bytes = cub_bytes;
  segmented_sum(cub_temp, bytes,
                matched_pair_term<T>{rows.a, rows.lda, rows.b, rows.ldb, p.data(), p.stride(), squared_distance}, terms,
                n, rows.lda, rows.f, ctx.stream);
  std::vector<double> host(static_cast<std::size_t>(n));
  MOECOMP_CUDA_TRY(cudaMemcpyAsync(host.data(), terms, sizeof(double) * host.size(), cudaMemcpyDeviceToHost, ctx.stream));
  MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
  for (const double t : host) out.cost += t;
  return out;
}

/// align_rows on the device (arguments checked by the caller). Synchronises.
template <class T>
align_result run_align_rows(const cuda_context& ctx, const rows_plan& plan, matrix_view<const T, device_memory> a,
                            matrix_view<const T, device_memory> b, vector_view<index_t, device_memory> p,
                            std::byte* workspace) {
  std::byte* base = aligned_base(workspace);
  const index_t n = plan.n, m = plan.m, f = plan.f;
  std::byte* temp = at<std::byte>(base, plan.cub_temp);
  T* cost = at<T>(base, plan.assignment.cost);
  if (plan.distances) {
    double* norms = at<double>(base, plan.norms);
    std::size_t bytes = plan.cub_bytes;
    segmented_sum(temp, bytes, element_square<T>{a.data()}, norms, n, a.row_stride(), f, ctx.stream);
    bytes = plan.cub_bytes;
    segmented_sum(temp, bytes, element_square<T>{b.data()}, norms + n, m, b.row_stride(), f, ctx.stream);
  }
  {
    const cublas_session blas(ctx);  // a temporary handle (none in ctx) synchronises here, before the auction
    gemm_abt(blas.handle(), n, m, f, a.data(), a.row_stride(), b.data(), b.row_stride(), cost, m);
  }
  if (plan.distances) {
    const double* norms = at<double>(base, plan.norms);
    squared_distance_kernel<T><<<grid_for(n, 1), align_block, 0, ctx.stream>>>(cost, n, m, norms, norms + n);
    MOECOMP_CUDA_CHECK_LAUNCH();
  }
  return assign_and_report<T>(ctx, plan.assignment, base, temp, plan.cub_bytes, n, m, !plan.distances, plan.distances,
                              {a.data(), a.row_stride(), b.data(), b.row_stride(), f}, p);
}

/// align_activations on the device (arguments checked by the caller). Synchronises.
template <class T>
align_result run_align_activations(const cuda_context& ctx, const correlation_plan& plan,
                                   matrix_view<const T, device_memory> a, matrix_view<const T, device_memory> b,
                                   vector_view<index_t, device_memory> p, std::byte* workspace) {
  std::byte* base = aligned_base(workspace);
  const index_t tokens = plan.tokens, n = plan.n, m = plan.m;
  {
    const cublas_session blas(ctx);
    correlation_into<T>(ctx, blas, plan, base, a, b, at<T>(base, plan.assignment.cost), m);
  }
  const T* z = at<T>(base, plan.z);
  return assign_and_report<T>(ctx, plan.assignment, base, at<std::byte>(base, plan.cub_temp), plan.cub_bytes, n, m,
                              true, false, {z, tokens, z + n * tokens, tokens, tokens}, p);
}

// ---- Experts (align_experts, align_stack): each expert's design rows (weights, inner) or hidden activations
// ---- (correlation) in A = accumulator_t<W>, then run_align_rows / run_align_activations on them.

/// The workspace of align_experts and align_stack: the reference's rows (`first`: d_ff x width design rows, or
/// tokens x d_ff activations), an expert's (`second`), and one inner piece shared, in stream order, by the
/// device forward (correlation) and the alignment that follows it.
struct experts_plan {
  bool correlation = false;
  index_t d = 0, d_ff = 0, tokens = 0;
  align::detail::design_layout layout;
  std::size_t first = 0, second = 0, inner = 0, bytes = 0;
  rows_plan rows;
  correlation_plan activations;
  moe::cuda_detail::ffn_device_plan forward;
};

template <class W>
experts_plan make_experts_plan(const char* fn, align_objective objective, index_t d, index_t d_ff, bool gated,
                               bool has_b1, bool has_b3, index_t tokens) {
  using A = accumulator_t<W>;
  experts_plan p;
  p.correlation = objective == align_objective::correlation;
  p.d = d;
  p.d_ff = d_ff;
  p.tokens = p.correlation ? tokens : 0;
  p.layout = align::detail::make_design_layout(d, gated, has_b1, has_b3);
  workspace_layout layout(fn);
  if (p.correlation) {
    p.first = layout.take(tokens * d_ff, sizeof(A));
    p.second = layout.take(tokens * d_ff, sizeof(A));
    p.forward = moe::cuda_detail::make_ffn_plan<W>(fn, tokens, d, d_ff, gated, false);
    p.activations = make_correlation_plan<A>(fn, tokens, d_ff, d_ff, true);
    p.inner = layout.take(static_cast<index_t>(std::max(p.forward.bytes, p.activations.bytes)), 1);
  } else {
    p.first = layout.take(d_ff * p.layout.width, sizeof(A));
    p.second = layout.take(d_ff * p.layout.width, sizeof(A));
    p.rows = make_rows_plan<A>(fn, objective, d_ff, d_ff, p.layout.width);
    p.inner = layout.take(static_cast<index_t>(p.rows.bytes), 1);
  }
  p.bytes = layout.total();
  return p;
}

/// out (d_ff x layout.width, contiguous) = the expert's design rows in A: the row pieces by design_rows_kernel,
/// W2^T by the tiled transpose into columns [layout.w2, width). Asynchronous.
template <class W, class A>
void design_into(const cuda_context& ctx, const moe::ffn_expert_device_view<W>& e,
                 const align::detail::design_layout& layout, A* out) {
  const index_t d_ff = e.d_ff(), d = layout.d;
  design_rows_kernel<W, A><<<grid_for(d_ff * layout.w2, align_block), align_block, 0, ctx.stream>>>(
      e.w1, e.w3, e.b1, e.b3, d_ff, layout, out);
  MOECOMP_CUDA_CHECK_LAUNCH();
  const index_t tiles = ceil_div(d, transpose_tile) * ceil_div(d_ff, transpose_tile);
  transpose_kernel<W, A><<<grid_for(tiles, 1), dim3(transpose_tile, transpose_rows), 0, ctx.stream>>>(
      e.w2.data(), e.w2.row_stride(), d, d_ff, out + layout.w2, layout.width);
  MOECOMP_CUDA_CHECK_LAUNCH();
}

/// The expert's rows for the alignment into the piece at `offset`: its design rows, or (correlation) its
/// hidden activations on x by the device forward. Asynchronous.
template <class W>
void expert_rows_into(const cuda_context& ctx, const moe::ffn_params& forward, const experts_plan& plan,
                      std::byte* base, std::size_t offset, const moe::ffn_expert_device_view<W>& e,
                      matrix_view<const accumulator_t<W>, device_memory> x) {
  using A = accumulator_t<W>;
  if (plan.correlation) {
    const matrix_view<A, device_memory> hidden(at<A>(base, offset), plan.tokens, plan.d_ff, plan.d_ff);
    moe::cuda_detail::ffn_forward_device<W>(ctx, forward, e, x, {}, hidden, plan.forward, at<std::byte>(base, plan.inner));
  } else {
    design_into<W, A>(ctx, e, plan.layout, at<A>(base, offset));
  }
}

/// p = the alignment of the expert's rows (`second`) to the reference's (`first`), both in the workspace.
/// Synchronises.
template <class W>
align_result align_prepared(const cuda_context& ctx, const experts_plan& plan, std::byte* base,
                            vector_view<index_t, device_memory> p) {
  using A = accumulator_t<W>;
  const A* first = at<A>(base, plan.first);
  const A* second = at<A>(base, plan.second);
  std::byte* inner = at<std::byte>(base, plan.inner);
  if (plan.correlation) {
    const index_t t = plan.tokens, n = plan.d_ff;
    return run_align_activations<A>(ctx, plan.activations, matrix_view<const A, device_memory>(first, t, n, n),
                                    matrix_view<const A, device_memory>(second, t, n, n), p, inner);
  }
  const index_t n = plan.d_ff, f = plan.layout.width;
  return run_align_rows<A>(ctx, plan.rows, matrix_view<const A, device_memory>(first, n, f, f),
                           matrix_view<const A, device_memory>(second, n, f, f), p, inner);
}

/// align_experts on the device (arguments checked by the caller). Synchronises.
template <class W>
align_result run_align_experts(const cuda_context& ctx, const align_params& params, const experts_plan& plan,
                               const moe::ffn_expert_device_view<W>& reference,
                               const moe::ffn_expert_device_view<W>& expert,
                               matrix_view<const accumulator_t<W>, device_memory> x,
                               vector_view<index_t, device_memory> p, std::byte* workspace) {
  std::byte* base = aligned_base(workspace);
  expert_rows_into<W>(ctx, params.forward, plan, base, plan.first, reference, x);
  expert_rows_into<W>(ctx, params.forward, plan, base, plan.second, expert, x);
  return align_prepared<W>(ctx, plan, base, p);
}

/// align_stack on the device (arguments checked by the caller): the reference's rows once, then each other
/// expert's rows and its alignment into its row of permutations. Synchronises (once per expert).
template <class W>
align_result run_align_stack(const cuda_context& ctx, const align_params& params, const experts_plan& plan,
                             const moe::ffn_expert_stack_device_view<W>& stack, index_t reference,
                             matrix_view<const accumulator_t<W>, device_memory> x,
                             matrix_view<index_t, device_memory> permutations, std::byte* workspace) {
  std::byte* base = aligned_base(workspace);
  const index_t d_ff = plan.d_ff;
  identity_kernel<<<grid_for(d_ff, align_block), align_block, 0, ctx.stream>>>(permutations.row_ptr(reference), d_ff);
  MOECOMP_CUDA_CHECK_LAUNCH();
  align_result total;
  if (stack.experts() == 1) {  // nothing to align; synchronise as the calls that align do
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
    return total;
  }
  expert_rows_into<W>(ctx, params.forward, plan, base, plan.first, stack.expert(reference), x);
  for (index_t e = 0; e < stack.experts(); ++e) {
    if (e == reference) continue;
    expert_rows_into<W>(ctx, params.forward, plan, base, plan.second, stack.expert(e), x);
    const align_result r =
        align_prepared<W>(ctx, plan, base, vector_view<index_t, device_memory>(permutations.row_ptr(e), d_ff));
    total.cost += r.cost;
    if (total.ok() && !r.ok()) total.status = r.status;
  }
  return total;
}

}  // namespace cuda_detail
}  // namespace align
MOECOMP_NAMESPACE_END
