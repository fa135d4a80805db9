#pragma once
// Device implementation of the pairwise distances (<moecomp/cuda/distance/pairwise_distance.cuh>). The
// same computation as the host one (<moecomp/distance/detail/pairwise_distance_host.hpp>), step by step:
//
//  1. column mean of x (and y) in double, for euclidean / sqeuclidean: partial sums over fixed row chunks,
//     then the chunks summed in order (deterministic, no atomics);
//  2. one block per row: offset o_i (correlation: the row mean), scale s_i (cosine / correlation:
//     1 / ||x_i - o_i||, NaN for a zero or constant row), the preprocessed row
//     a_i = T((x_i - o_i - mu) * s_i) into the workspace, and ||a_i||^2 in double;
//  3. the Gram matrix A B^T with cuBLAS (row-major through the transpose trick); for x against itself in
//     row panels [r0, r0 + p) x [r0, n) only, so roughly half the flops;
//  4. an epilogue kernel that turns each Gram entry into ||a_i||^2 + ||b_j||^2 - 2 a_i.b_j, recomputes
//     the pair directly from the input rows in double when that form cancels (the guard of
//     pairwise_distance_params::cancellation_threshold), applies the metric's finish, and writes the
//     square (in place over the Gram entries, mirrored through shared memory) or condensed output.
//
// Workspace layout: every piece starts on a 256-byte boundary; the total includes 256 bytes of slack so
// that a caller's workspace needs no particular alignment.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/detail/block_reduce.cuh>
#include <moecomp/cuda/core/detail/cublas.cuh>
#include <moecomp/cuda/core/detail/workspace.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/kernel.cuh>
#include <moecomp/distance/distance_types.hpp>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace distance {
namespace cuda_detail {

using namespace moecomp::detail;  // the shared device layer: cuda/core/detail, core/detail

enum class output_form { cross, square, condensed };

/// Row-panel height for x against itself. About n / 8 (so the triangular panel scheme does ~56% of the
/// full GEMM's flops), at least 512 rows so each GEMM stays large, a multiple of 128. For the condensed
/// form the panel also lives in the workspace, so p x n is capped at 2^25 elements (128 MiB in float).
/// Depends on n only, never on the workspace a caller passes, so results do not depend on it either.
inline index_t symmetric_panel_rows(index_t n, bool capped) {
  constexpr index_t min_panel = 512, target_panels = 8, budget = index_t(1) << 25;
  index_t p = round_up(max_index(min_panel, ceil_div(n, target_panels)), 128);
  if (capped) {
    const index_t cap = max_index(1, budget / max_index(n, 1));
    if (p > cap) p = cap >= 128 ? cap / 128 * 128 : cap;
  }
  return max_index(1, min_index(p, n));
}

/// Where each piece of the workspace lives (byte offsets from the aligned base) and the shapes of the
/// computation. Built identically by the size query and by the computation.
struct workspace_plan {
  output_form form = output_form::cross;
  bool euclidean_family = false;
  bool empty = true;        // nothing to compute (no pair)
  index_t n = 0, m = 0, d = 0;  // rows of x, rows of y (= n for x against itself), columns
  index_t prepared_ld = 1;  // row stride of the preprocessed rows (16-byte multiple, for cuBLAS)
  index_t mean_chunks = 0, chunk_rows = 0;
  index_t panel_rows = 0;   // x against itself: Gram panel height
  index_t gram_ld = 1;      // condensed: row stride of the Gram panel in the workspace
  std::size_t partial_sums = 0, column_mean = 0;
  std::size_t a_values = 0, a_norm2 = 0, a_offset = 0, a_scale = 0;
  std::size_t b_values = 0, b_norm2 = 0, b_offset = 0, b_scale = 0;
  std::size_t gram = 0;
  std::size_t bytes = 0;
};

template <class T>
workspace_plan make_plan(output_form form, metric m_metric, index_t n, index_t m, index_t d) {
  workspace_plan plan;
  plan.form = form;
  plan.n = n;
  plan.m = form == output_form::cross ? m : n;
  plan.d = d;
  plan.euclidean_family = (m_metric == metric::euclidean || m_metric == metric::sqeuclidean);
  switch (form) {
    case output_form::cross: plan.empty = (n == 0 || m == 0); break;
    case output_form::square: plan.empty = (n == 0); break;
    case output_form::condensed: plan.empty = (n < 2); break;
  }
  if (plan.empty) return plan;

  constexpr index_t elements_per_16_bytes = static_cast<index_t>(16 / sizeof(T));
  plan.prepared_ld = d == 0 ? 1 : round_up(d, elements_per_16_bytes);
  workspace_layout layout("pairwise_distances");
  if (plan.euclidean_family && d > 0) {
    const index_t total_rows = n + (form == output_form::cross ? m : 0);
    plan.mean_chunks = min_index(64, max_index(1, ceil_div(total_rows, 256)));
    plan.chunk_rows = ceil_div(total_rows, plan.mean_chunks);
    plan.partial_sums = layout.take(plan.mean_chunks * d, sizeof(double));
    plan.column_mean = layout.take(d, sizeof(double));
  }
  MOECOMP_EXPECTS(plan.prepared_ld == 0 || n <= std::numeric_limits<index_t>::max() / plan.prepared_ld,
                  "pairwise_distances: ", n, " rows of ", d, " columns overflow the index type");
  plan.a_values = layout.take(n * plan.prepared_ld, sizeof(T));
  plan.a_norm2 = layout.take(n, sizeof(double));
  plan.a_offset = layout.take(n, sizeof(double));
  plan.a_scale = layout.take(n, sizeof(double));
  if (form == output_form::cross) {
    MOECOMP_EXPECTS(m <= std::numeric_limits<index_t>::max() / plan.prepared_ld, "pairwise_distances: ", m,
                    " rows of ", d, " columns overflow the index type");
    plan.b_values = layout.take(m * plan.prepared_ld, sizeof(T));
    plan.b_norm2 = layout.take(m, sizeof(double));
    plan.b_offset = layout.take(m, sizeof(double));
    plan.b_scale = layout.take(m, sizeof(double));
  } else {
    plan.panel_rows = symmetric_panel_rows(n, form == output_form::condensed);
    if (form == output_form::condensed && d > 0) {
      plan.gram_ld = round_up(n, 32);
      plan.gram = layout.take(plan.panel_rows * plan.gram_ld, sizeof(T));
    }
  }
  plan.bytes = layout.total();
  return plan;
}

/// cuBLAS takes int dimensions and leading dimensions: refuse what does not fit instead of truncating.
inline void check_blas_limits(const char* function, index_t n, index_t m, index_t d, index_t ld_a, index_t ld_out) {
  constexpr index_t limit = INT_MAX;
  MOECOMP_EXPECTS(n <= limit && m <= limit && d <= limit && ld_a <= limit && ld_out <= limit, function,
                  ": shapes and row strides must be at most ", limit, " (cuBLAS's int dimensions), got x rows ", n,
                  ", y rows ", m, ", columns ", d, ", out row stride ", ld_out);
}

// ----------------------------------------------------------------------------------------------- kernels

__device__ __forceinline__ double quiet_nan() { return __longlong_as_double(0x7ff8000000000000LL); }

/// Step 1a: partial column sums of the rows of x followed by the rows of y over row chunk blockIdx.y.
/// Block (32, 8): 32 columns, 8 row lanes summed in a fixed order.
template <class T>
MOECOMP_KERNEL void __launch_bounds__(256)
    column_partial_sums_kernel(const T* x, index_t x_ld, index_t x_rows, const T* y, index_t y_ld, index_t y_rows,
                               index_t d, index_t chunk_rows, double* partial) {
  __shared__ double lanes[8][33];
  const index_t col = static_cast<index_t>(blockIdx.x) * 32 + threadIdx.x;
  const index_t chunk = blockIdx.y;
  const index_t total = x_rows + y_rows;
  const index_t begin = chunk * chunk_rows;
  const index_t end = min_index(begin + chunk_rows, total);
  double sum = 0.0;
  if (col < d) {
    for (index_t r = begin + threadIdx.y; r < end; r += 8) {
      const T value = r < x_rows ? x[r * x_ld + col] : y[(r - x_rows) * y_ld + col];
      sum += static_cast<double>(value);
    }
  }
  lanes[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < d) {
    double chunk_sum = 0.0;
#pragma unroll
    for (int lane = 0; lane < 8; ++lane) chunk_sum += lanes[lane][threadIdx.x];
    partial[chunk * d + col] = chunk_sum;
  }
}

/// Step 1b: mean[col] = (sum of the chunks' partial sums, in chunk order) / total_rows.
template <class Index>
MOECOMP_KERNEL void column_mean_kernel(const double* partial, Index chunks, Index d, Index total_rows, double* mean) {
  const Index col = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= d) return;
  double sum = 0.0;
  for (Index chunk = 0; chunk < chunks; ++chunk) sum += partial[chunk * d + col];
  mean[col] = total_rows > 0 ? sum / static_cast<double>(total_rows) : 0.0;
}

inline constexpr int prepare_block = 256;

template <class T>
struct prepare_args {
  const T* x;
  index_t x_ld, rows, d;
  metric m;
  const double* shift;  // column mean (euclidean family) or null
  T* values;
  index_t values_ld;
  double* norm2;
  double* offset;
  double* scale;
};

/// Step 2: one block per row (grid-stride over rows).
template <class T>
MOECOMP_KERNEL void __launch_bounds__(prepare_block) prepare_rows_kernel(const prepare_args<T> args) {
  __shared__ double scratch[moecomp::detail::block_sum_scratch<prepare_block>];
  const bool centre = args.m == metric::correlation;
  const bool normalise = centre || args.m == metric::cosine;
  const index_t d = args.d;
  for (index_t i = blockIdx.x; i < args.rows; i += gridDim.x) {
    const T* row = args.x + i * args.x_ld;
    double offset = 0.0, scale = 1.0;
    if (centre) {
      double sum = 0.0;
      for (index_t k = threadIdx.x; k < d; k += prepare_block) sum += static_cast<double>(row[k]);
      sum = moecomp::detail::block_sum<prepare_block>(sum, scratch);
      offset = d > 0 ? sum / static_cast<double>(d) : 0.0;
    }
    if (normalise) {
      double sum = 0.0;
      for (index_t k = threadIdx.x; k < d; k += prepare_block) {
        const double v = static_cast<double>(row[k]) - offset;
        sum += v * v;
      }
      sum = moecomp::detail::block_sum<prepare_block>(sum, scratch);
      // scipy gives NaN for a zero (cosine) or constant (correlation) row: so do we, through a NaN scale
      scale = sum > 0.0 ? 1.0 / sqrt(sum) : quiet_nan();
    }
    T* out_row = args.values + i * args.values_ld;
    double norm2 = 0.0;
    for (index_t k = threadIdx.x; k < d; k += prepare_block) {
      const double shifted = static_cast<double>(row[k]) - offset - (args.shift ? args.shift[k] : 0.0);
      const T a = static_cast<T>(shifted * scale);
      out_row[k] = a;
      norm2 += static_cast<double>(a) * static_cast<double>(a);
    }
    norm2 = moecomp::detail::block_sum<prepare_block>(norm2, scratch);
    if (threadIdx.x == 0) {
      args.norm2[i] = norm2;
      args.offset[i] = offset;
      args.scale[i] = scale;
    }
  }
}

template <class T>
struct epilogue_args {
  const T* gram;  // panel Gram entry (r, c) at gram[r * gram_ld + c]
  index_t gram_ld;
  index_t rows, cols;  // panel extent
  index_t row0, col0;  // global indices of panel row 0 and column 0
  bool zero_gram;      // d == 0: no GEMM ran, every Gram entry is 0
  const double* a_norm2;
  const double* a_offset;
  const double* a_scale;
  const double* b_norm2;
  const double* b_offset;
  const double* b_scale;
  const T* x;  // the caller's rows, for the direct recomputation
  index_t x_ld;
  const T* y;
  index_t y_ld;
  index_t d;
  metric m;
  double threshold;
  T* out;          // square forms: out(i, j) at out[i * out_ld + j]; condensed: element k at out[k * out_ld]
  index_t out_ld;
  index_t n;       // condensed: number of points
};

/// ||(x - ox) sx - (y - oy) sy||^2 in double. The products are rounded separately (no contraction into
/// an fma), so two identical rows give exactly 0.
template <class T>
__device__ double direct_squared_distance(const T* x, double ox, double sx, const T* y, double oy, double sy,
                                          index_t d) {
  double sum = 0.0;
  for (index_t k = 0; k < d; ++k) {
    const double diff = __dsub_rn(__dmul_rn(static_cast<double>(x[k]) - ox, sx),
                                  __dmul_rn(static_cast<double>(y[k]) - oy, sy));
    sum = __fma_rn(diff, diff, sum);
  }
  return sum;
}

__device__ __forceinline__ double finish_distance(metric m, double squared) {
  switch (m) {
    case metric::euclidean: return sqrt(squared);
    case metric::sqeuclidean: return squared;
    case metric::cosine:
    case metric::correlation: return 0.5 * squared;
  }
  return squared;
}

/// The distance of panel entry (r, c), which is pair (i, j).
template <class T>
__device__ T pair_distance(const epilogue_args<T>& args, index_t r, index_t c, index_t i, index_t j) {
  const double na = args.a_norm2[i], nb = args.b_norm2[j];
  const double g = args.zero_gram ? 0.0 : static_cast<double>(args.gram[r * args.gram_ld + c]);
  double squared = na + nb - 2.0 * g;
  if (squared < args.threshold * (na + nb)) {
    squared = direct_squared_distance(args.x + i * args.x_ld, args.a_offset[i], args.a_scale[i], args.y + j * args.y_ld,
                                      args.b_offset[j], args.b_scale[j], args.d);
  } else if (!(squared >= 0.0) && squared == squared) {
    squared = 0.0;  // only reachable with threshold 0: clamp cancellation below zero
  }
  return static_cast<T>(finish_distance(args.m, squared));
}

/// scipy's condensed position of pair (i, j), i < j < n.
__device__ __forceinline__ index_t condensed_position(index_t n, index_t i, index_t j) {
  return n * i - i * (i + 1) / 2 + (j - i - 1);
}

inline constexpr int tile_dim = 32;   // epilogue tile: 32 x 32 panel entries
inline constexpr int tile_rows = 8;   // block (32, 8): each thread handles 4 rows of the tile

/// Step 4 over one panel: block (32, 8) per 32 x 32 tile; grid.x over column tiles, grid.y (strided) over
/// row tiles. cross: every entry, in place. square: the entries with j > i, in place, plus the transposed
/// copy (j, i) written row-wise through shared memory, and 0 on the diagonal. condensed: entries j > i.
template <class T, output_form Form>
MOECOMP_KERNEL void __launch_bounds__(tile_dim * tile_rows) distance_epilogue_kernel(const epilogue_args<T> args) {
  __shared__ T mirror[tile_dim][tile_dim + 1];
  const index_t row_tiles = ceil_div(args.rows, tile_dim);
  const index_t c0 = static_cast<index_t>(blockIdx.x) * tile_dim;
  for (index_t tile_row = blockIdx.y; tile_row < row_tiles; tile_row += gridDim.y) {
    const index_t r0 = tile_row * tile_dim;
    if constexpr (Form != output_form::cross) {
      // A tile wholly below the diagonal has nothing to compute (the test is uniform over the block).
      const index_t first_i = args.row0 + r0;
      const index_t last_j = args.col0 + min_index(c0 + tile_dim, args.cols) - 1;
      if (Form == output_form::square ? last_j < first_i : last_j <= first_i) continue;
    }
    for (int k = 0; k < tile_dim; k += tile_rows) {
      const index_t r = r0 + threadIdx.y + k, c = c0 + threadIdx.x;
      if (r >= args.rows || c >= args.cols) continue;
      const index_t i = args.row0 + r, j = args.col0 + c;
      if constexpr (Form == output_form::cross) {
        args.out[i * args.out_ld + j] = pair_distance(args, r, c, i, j);
      } else if constexpr (Form == output_form::condensed) {
        if (j > i) args.out[condensed_position(args.n, i, j) * args.out_ld] = pair_distance(args, r, c, i, j);
      } else {
        if (j > i) {
          const T value = pair_distance(args, r, c, i, j);
          args.out[i * args.out_ld + j] = value;
          mirror[threadIdx.y + k][threadIdx.x] = value;
        } else if (j == i) {
          args.out[i * args.out_ld + i] = T(0);
        }
      }
    }
    if constexpr (Form == output_form::square) {
      __syncthreads();
      // Thread x now walks the tile's rows, so the writes of out(j, i) along i are coalesced.
      for (int k = 0; k < tile_dim; k += tile_rows) {
        const index_t r = r0 + threadIdx.x, c = c0 + threadIdx.y + k;
        if (r >= args.rows || c >= args.cols) continue;
        const index_t i = args.row0 + r, j = args.col0 + c;
        if (j > i) args.out[j * args.out_ld + i] = mirror[threadIdx.x][threadIdx.y + k];
      }
      __syncthreads();  // the tile is rewritten by the next iteration
    }
  }
}

// ------------------------------------------------------------------------------------------ host side

/// Pointers into the caller's or an allocated workspace, following a plan.
template <class T>
struct prepared_side {
  T* values = nullptr;
  double* norm2 = nullptr;
  double* offset = nullptr;
  double* scale = nullptr;
};

template <class T>
void launch_prepare(const cuda_context& ctx, metric m, matrix_view<const T, device_memory> x, const double* shift,
                    const prepared_side<T>& side, index_t prepared_ld) {
  if (x.rows() == 0) return;
  const prepare_args<T> args{x.data(), x.row_stride(), x.rows(), x.cols(), m, shift, side.values, prepared_ld,
                             side.norm2, side.offset, side.scale};
  const auto blocks = static_cast<unsigned>(min_index(x.rows(), moecomp::detail::max_grid_x));
  prepare_rows_kernel<T><<<blocks, prepare_block, 0, ctx.stream>>>(args);
  MOECOMP_CUDA_CHECK_LAUNCH();
}

template <class T, output_form Form>
void launch_epilogue(const cuda_context& ctx, const epilogue_args<T>& args) {
  if (args.rows == 0 || args.cols == 0) return;
  const dim3 grid(static_cast<unsigned>(ceil_div(args.cols, tile_dim)),
                  static_cast<unsigned>(min_index(ceil_div(args.rows, tile_dim), moecomp::detail::max_grid_y)));
  const dim3 block(tile_dim, tile_rows);
  distance_epilogue_kernel<T, Form><<<grid, block, 0, ctx.stream>>>(args);
  MOECOMP_CUDA_CHECK_LAUNCH();
}

/// Enqueues the whole computation on ctx.stream. `y` is used for the cross form only. `out` / `out_ld`:
/// the output's first element and its row stride (square forms) or element stride (condensed).
/// `workspace` holds at least plan.bytes bytes.
template <class T>
void run(const cuda_context& ctx, const pairwise_distance_params& params, const workspace_plan& plan,
         matrix_view<const T, device_memory> x, matrix_view<const T, device_memory> y, T* out, index_t out_ld,
         std::byte* workspace) {
  if (plan.empty) return;
  const bool cross = plan.form == output_form::cross;
  const index_t d = plan.d;
  const metric m = params.metric;
  const double threshold = effective_cancellation_threshold<T>(params);

  std::byte* base = aligned_base(workspace);  // the plan keeps the alignment slack for this

  // 1. column mean (euclidean family)
  const double* shift = nullptr;
  if (plan.euclidean_family && d > 0) {
    double* partial = at<double>(base, plan.partial_sums);
    double* mean = at<double>(base, plan.column_mean);
    const dim3 grid(static_cast<unsigned>(ceil_div(d, 32)), static_cast<unsigned>(plan.mean_chunks));
    const dim3 block(32, 8);
    column_partial_sums_kernel<T><<<grid, block, 0, ctx.stream>>>(x.data(), x.row_stride(), x.rows(),
                                                                  cross ? y.data() : nullptr, cross ? y.row_stride() : 0,
                                                                  cross ? y.rows() : 0, d, plan.chunk_rows, partial);
    MOECOMP_CUDA_CHECK_LAUNCH();
    const index_t total_rows = plan.n + (cross ? plan.m : 0);
    column_mean_kernel<index_t><<<static_cast<unsigned>(ceil_div(d, 256)), 256, 0, ctx.stream>>>(
        partial, plan.mean_chunks, d, total_rows, mean);
    MOECOMP_CUDA_CHECK_LAUNCH();
    shift = mean;
  }

  // 2. preprocessed rows
  const prepared_side<T> a{at<T>(base, plan.a_values), at<double>(base, plan.a_norm2), at<double>(base, plan.a_offset),
                           at<double>(base, plan.a_scale)};
  launch_prepare<T>(ctx, m, x, shift, a, plan.prepared_ld);
  prepared_side<T> b = a;
  if (cross) {
    b = {at<T>(base, plan.b_values), at<double>(base, plan.b_norm2), at<double>(base, plan.b_offset),
         at<double>(base, plan.b_scale)};
    launch_prepare<T>(ctx, m, y, shift, b, plan.prepared_ld);
  }

  epilogue_args<T> args{};
  args.zero_gram = (d == 0);
  args.a_norm2 = a.norm2;
  args.a_offset = a.offset;
  args.a_scale = a.scale;
  args.b_norm2 = b.norm2;
  args.b_offset = b.offset;
  args.b_scale = b.scale;
  args.x = x.data();
  args.x_ld = x.row_stride();
  args.y = cross ? y.data() : x.data();
  args.y_ld = cross ? y.row_stride() : x.row_stride();
  args.d = d;
  args.m = m;
  args.threshold = threshold;
  args.out = out;
  args.out_ld = out_ld;
  args.n = plan.n;

  // 3 + 4. Gram and epilogue. Without columns there is nothing to multiply (and no handle is needed).
  if (cross) {
    if (d > 0) {
      const cublas_session session(ctx);
      gemm_abt(session.handle(), plan.n, plan.m, d, a.values, plan.prepared_ld, b.values, plan.prepared_ld, out,
                out_ld);
    }
    args.gram = out;
    args.gram_ld = out_ld;
    args.rows = plan.n;
    args.cols = plan.m;
    launch_epilogue<T, output_form::cross>(ctx, args);
    return;
  }

  const bool square = plan.form == output_form::square;
  T* gram_panel = square || d == 0 ? nullptr : at<T>(base, plan.gram);
  const index_t n = plan.n;
  const auto each_panel = [&](cublasHandle_t h) {
    for (index_t r0 = 0; r0 < n; r0 += plan.panel_rows) {
      const index_t rows = min_index(plan.panel_rows, n - r0), cols = n - r0;
      T* gram = square ? out + r0 * out_ld + r0 : gram_panel;
      const index_t gram_ld = square ? out_ld : plan.gram_ld;
      if (d > 0) {
        const T* panel = a.values + r0 * plan.prepared_ld;
        gemm_abt(h, rows, cols, d, panel, plan.prepared_ld, panel, plan.prepared_ld, gram, gram_ld);
      }
      args.gram = gram;
      args.gram_ld = gram_ld;
      args.rows = rows;
      args.cols = cols;
      args.row0 = r0;
      args.col0 = r0;
      if (square) {
        launch_epilogue<T, output_form::square>(ctx, args);
      } else {
        launch_epilogue<T, output_form::condensed>(ctx, args);
      }
    }
  };
  if (d > 0) {
    const cublas_session session(ctx);  // one session for all panels
    each_panel(session.handle());
  } else {
    each_panel(nullptr);
  }
}

}  // namespace cuda_detail
}  // namespace distance
MOECOMP_NAMESPACE_END
