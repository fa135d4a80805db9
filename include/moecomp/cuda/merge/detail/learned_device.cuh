#pragma once
// Device implementation of learned merging of one group (<moecomp/cuda/merge/merge.cuh>'s merge_learned): the
// host's learned_problem (<moecomp/merge/detail/merge_host.hpp>) with its arrays in device memory, its GEMMs by
// cuBLAS and its dot products by cub::DeviceSegmentedReduce in double; the projected-gradient loop is the host's
// own code (merge/detail/learned_solver.hpp), run on the host over the n <= 64 coefficients that each evaluation
// copies back.
//
//   setup:    the kept tokens gathered; the target y = the members' outputs (device expert forward) weighted
//             and renormalised in double as the host's group_target; pre1_i = x W1_i^T + b1_i and
//             pre3_i = x W3_i^T + b3_i (one GEMM each, the bias added in A), W2_i and W2_i^T in A, b2_i in double;
//   forward:  a = sum alpha_i pre1_i, u = sum alpha_i pre3_i (double sums rounded to A), h = act(a) * u, W2_a and
//             b2_a mixed the same way, out = h W2_a^T (GEMM), R = out + b2_a - y, the loss sum R^2 / T;
//   gradient: M = R^T h (GEMM), G = R W2_a (GEMM), G * act'(a) * u and G * act(a) (one kernel), the column sums
//             of R, and the per-member dot products <M, W2_i>, <G act'(a) u, pre1_i>, <G act(a), pre3_i> (one
//             segmented sum each); the b2 term and the sum of the four terms on the host in the host's order.
// Every evaluation SYNCHRONISES ctx.stream once (the loss, or the loss, the 3 n dot products and the d column
// sums, copied to pinned memory).
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/merge/merge_types.hpp>
#include <moecomp/merge/detail/learned_solver.hpp>
#include <moecomp/core/detail/activation.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/cuda/core/kernel.cuh>
#include <moecomp/cuda/core/detail/cublas.cuh>
#include <moecomp/cuda/core/detail/workspace.cuh>
#include <moecomp/cuda/merge/detail/fix_dom_device.cuh>
#include <moecomp/cuda/moe/expert.cuh>
#include <moecomp/cuda/moe/expert_types.cuh>
#include <moecomp/cuda/merge/detail/merge_device_checks.cuh>
#include <moecomp/core/detail/expert_gather.hpp>
#include <moecomp/cuda/core/detail/expert_gather.cuh>

#include <cub/device/device_segmented_reduce.cuh>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace merge {
namespace cuda_detail {

/// The coefficients by value (a kernel argument).
struct alpha_table {
  double v[moecomp::detail::max_gather_members];
  int n = 0;
};

/// (double) common[k % size] * (double) stacked[k]: member k / size's term of <common, stacked_i>.
template <class A>
struct stacked_product {
  const A* common;
  const A* stacked;
  index_t size;
  __host__ __device__ double operator()(index_t k) const {
    return static_cast<double>(common[k % size]) * static_cast<double>(stacked[k]);
  }
};

/// r[k]^2 in double.
template <class A>
struct element_square_of {
  const A* r;
  __host__ __device__ double operator()(index_t k) const {
    const double v = static_cast<double>(r[k]);
    return v * v;
  }
};

// ---- Kernels.

/// pre (rows x f, contiguous) += b (W) in A, row by row.
template <class W, class A>
MOECOMP_KERNEL void add_pre_bias_kernel(A* pre, index_t rows, index_t f, const W* b) {
  const index_t total = rows * f;
  for (index_t k = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<index_t>(gridDim.x) * blockDim.x)
    pre[k] += convert_to<A>(b[k % f]);
}

/// w2 (d x f) and w2t (f x d), contiguous in A, from a member's W2 (row stride ld); b2 (d doubles, 0 without).
template <class W, class A>
MOECOMP_KERNEL void stage_w2_kernel(const W* src, index_t ld, index_t d, index_t f, A* w2, A* w2t, const W* b2,
                                    double* b2_out) {
  const index_t total = d * f;
  for (index_t k = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t r = k / f, c = k - r * f;
    const A v = convert_to<A>(src[r * ld + c]);
    w2[k] = v;
    w2t[c * d + r] = v;
    if (c == 0) b2_out[r] = b2 == nullptr ? 0.0 : convert_to<double>(b2[r]);
  }
}

/// The target's accumulation for one member (column j of the rows x n weights, or weight 1 without):
/// acc += w f, total += w, skipped where w = 0 (the host's group_target).
template <class A>
MOECOMP_KERNEL void target_accumulate_kernel(const A* f, const double* weights, index_t n, index_t j, index_t rows,
                                             index_t d, double* acc, double* total) {
  const index_t count = rows * d;
  for (index_t k = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < count;
       k += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const index_t t = k / d, c = k - t * d;
    const double w = weights == nullptr ? 1.0 : weights[t * n + j];
    if (w == 0) continue;
    if (c == 0) total[t] += w;
    acc[k] += w * static_cast<double>(f[k]);
  }
}

/// y = acc / total in A (0 where total is 0).
template <class A>
MOECOMP_KERNEL void target_finish_kernel(const double* acc, const double* total, index_t rows, index_t d, A* y) {
  const index_t count = rows * d;
  for (index_t k = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < count;
       k += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const double tt = total[k / d];
    const double inv = tt > 0 ? 1.0 / tt : 0.0;
    y[k] = static_cast<A>(acc[k] * inv);
  }
}

/// a, u, h at alpha (the host's forward, element by element).
template <class A>
MOECOMP_KERNEL void mix_hidden_kernel(alpha_table alpha, const A* pre1, const A* pre3, index_t tf, moe::activation act,
                                      bool gated, A* a, A* u, A* h) {
  for (index_t k = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < tf;
       k += static_cast<index_t>(gridDim.x) * blockDim.x) {
    double av = 0, uv = 0;
    for (int i = 0; i < alpha.n; ++i) {
      av += alpha.v[i] * static_cast<double>(pre1[static_cast<index_t>(i) * tf + k]);
      if (gated) uv += alpha.v[i] * static_cast<double>(pre3[static_cast<index_t>(i) * tf + k]);
    }
    a[k] = static_cast<A>(av);
    const A x = moecomp::detail::activate<A>(act, a[k]);
    if (gated) u[k] = static_cast<A>(uv);
    h[k] = gated ? x * u[k] : x;
  }
}

/// out[j] = sum_i alpha_i stacked[i * size + j] in double, rounded to O.
template <class A, class O>
MOECOMP_KERNEL void mix_kernel(alpha_table alpha, const A* stacked, index_t size, O* out) {
  for (index_t j = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < size;
       j += static_cast<index_t>(gridDim.x) * blockDim.x) {
    double v = 0;
    for (int i = 0; i < alpha.n; ++i) v += alpha.v[i] * static_cast<double>(stacked[static_cast<index_t>(i) * size + j]);
    out[j] = static_cast<O>(v);
  }
}

/// R = out + b2_a - y, in A from double.
template <class A>
MOECOMP_KERNEL void residual_kernel(const A* out, const double* b2a, const A* y, index_t rows, index_t d, A* r) {
  const index_t count = rows * d;
  for (index_t k = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < count;
       k += static_cast<index_t>(gridDim.x) * blockDim.x)
    r[k] = static_cast<A>(static_cast<double>(out[k]) + b2a[k % d] - static_cast<double>(y[k]));
}

/// g = G * act'(a) * u and h = G * act(a), G in g on entry.
template <class A>
MOECOMP_KERNEL void gradient_elements_kernel(A* g, const A* a, const A* u, index_t tf, moe::activation act, bool gated,
                                             A* h) {
  for (index_t k = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < tf;
       k += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const A gv = g[k], av = a[k];
    const A uv = gated ? u[k] : A(1);
    g[k] = gv * moecomp::detail::activate_derivative<A>(act, av) * uv;
    h[k] = gv * moecomp::detail::activate<A>(act, av);
  }
}

// ---- The workspace plan.

/// y (t x d, contiguous) = the group's target on the gathered tokens xv: the members' outputs (members in
/// ascending id order, the weights' column order) weighted by `weights` (t x members, device; null: weight 1) in
/// double and renormalised per token (the host's group_target). acc (t x d) and total (t) are double scratch, fout
/// (t x d) one forward's output; ffn_plan / ffn_space the forward's workspace for t tokens.
template <class W, class A = accumulator_t<W>>
void group_target_device(const cuda_context& ctx, const moe::ffn_params& forward,
                         const moe::ffn_expert_stack_device_view<W>& experts, const std::vector<index_t>& members,
                         matrix_view<const A, device_memory> xv, const double* weights, double* acc, double* total,
                         A* fout, A* y, const moe::cuda_detail::ffn_device_plan& ffn_plan, std::byte* ffn_space) {
  const index_t t = xv.rows(), d = xv.cols(), td = t * d, n = static_cast<index_t>(members.size());
  MOECOMP_CUDA_TRY(cudaMemsetAsync(acc, 0, sizeof(double) * static_cast<std::size_t>(td), ctx.stream));
  MOECOMP_CUDA_TRY(cudaMemsetAsync(total, 0, sizeof(double) * static_cast<std::size_t>(t), ctx.stream));
  for (index_t j = 0; j < n; ++j) {
    moe::cuda_detail::ffn_forward_device<W>(ctx, forward, experts.expert(members[static_cast<std::size_t>(j)]), xv,
                                            matrix_view<A, device_memory>(fout, t, d, d), {}, ffn_plan, ffn_space);
    target_accumulate_kernel<A><<<grid_for(td, fix_dom_block), fix_dom_block, 0, ctx.stream>>>(fout, weights, n, j, t,
                                                                                              d, acc, total);
    MOECOMP_CUDA_CHECK_LAUNCH();
  }
  target_finish_kernel<A><<<grid_for(td, fix_dom_block), fix_dom_block, 0, ctx.stream>>>(acc, total, t, d, y);
  MOECOMP_CUDA_CHECK_LAUNCH();
}

struct learned_plan {
  index_t t = 0, n = 0, d = 0, f = 0;
  bool gated = false, weighted = false;
  std::size_t ids = 0, weights = 0, xg = 0, y = 0, acc = 0, total = 0, fout = 0, conv = 0;
  std::size_t pre1 = 0, pre3 = 0, w2 = 0, w2t = 0, b2 = 0, a = 0, u = 0, h = 0, out = 0, r = 0, m = 0, g = 0;
  std::size_t w2a = 0, w2ta = 0, b2a = 0, readback = 0, ffn = 0, ffn_bytes = 0, cub_temp = 0, cub_bytes = 0, bytes = 0;
  moe::cuda_detail::ffn_device_plan ffn_plan;
  index_t readback_count() const noexcept { return 3 * n + 1 + d; }  // 3 n dots, the loss, the column sums
};

template <class W, class A = accumulator_t<W>>
learned_plan make_learned_plan(const char* fn, index_t t, index_t n, index_t d, index_t f, bool gated, bool weighted) {
  moecomp::detail::check_int_extents(fn, {{"the number of tokens", t}});
  learned_plan p;
  p.t = t;
  p.n = n;
  p.d = d;
  p.f = f;
  p.gated = gated;
  p.weighted = weighted;
  moecomp::detail::workspace_layout layout(fn);
  const index_t tf = t * f, td = t * d, df = d * f;
  p.ids = layout.take(t, sizeof(index_t));
  if (weighted) p.weights = layout.take(t * n, sizeof(double));
  p.xg = layout.take(td, sizeof(A));
  p.y = layout.take(td, sizeof(A));
  p.acc = layout.take(td, sizeof(double));
  p.total = layout.take(t, sizeof(double));
  p.fout = layout.take(td, sizeof(A));
  if (!std::is_same_v<W, A>) p.conv = layout.take(df, sizeof(A));
  p.pre1 = layout.take(n * tf, sizeof(A));
  if (gated) p.pre3 = layout.take(n * tf, sizeof(A));
  p.w2 = layout.take(n * df, sizeof(A));
  p.w2t = layout.take(n * df, sizeof(A));
  p.b2 = layout.take(n * d, sizeof(double));
  p.a = layout.take(tf, sizeof(A));
  if (gated) p.u = layout.take(tf, sizeof(A));
  p.h = layout.take(tf, sizeof(A));
  p.out = layout.take(td, sizeof(A));
  p.r = layout.take(td, sizeof(A));
  p.m = layout.take(df, sizeof(A));
  p.g = layout.take(tf, sizeof(A));
  p.w2a = layout.take(df, sizeof(A));
  p.w2ta = layout.take(df, sizeof(A));
  p.b2a = layout.take(d, sizeof(double));
  p.readback = layout.take(p.readback_count(), sizeof(double));
  p.ffn_plan = moe::cuda_detail::make_ffn_plan<W>(fn, t, d, f, gated, true);
  p.ffn_bytes = p.ffn_plan.bytes;
  p.ffn = layout.take(static_cast<index_t>(p.ffn_bytes), 1);
  std::size_t cub = 0, b = 0;
  MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::Sum(
      nullptr, b, indexed(stacked_product<A>{nullptr, nullptr, 1}), static_cast<double*>(nullptr),
      static_cast<std::int64_t>(n), indexed(segment_offset<index_t>{1, 0}), indexed(segment_offset<index_t>{1, 1})));
  cub = std::max(cub, b);
  b = 0;
  MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::Sum(
      nullptr, b, indexed(column_value<A>{nullptr, 1, t}), static_cast<double*>(nullptr), static_cast<std::int64_t>(d),
      indexed(segment_offset<index_t>{t, 0}), indexed(segment_offset<index_t>{t, t})));
  cub = std::max(cub, b);
  b = 0;
  MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::Sum(
      nullptr, b, indexed(element_square_of<A>{nullptr}), static_cast<double*>(nullptr), std::int64_t(1),
      indexed(segment_offset<index_t>{td, 0}), indexed(segment_offset<index_t>{td, td})));
  cub = std::max(cub, b);
  p.cub_bytes = cub;
  p.cub_temp = layout.take(static_cast<index_t>(cub), 1);
  p.bytes = layout.total();
  return p;
}

/// The objective and its gradient on the device (the host's learned_problem); evaluate() synchronises.
template <class W, class A = accumulator_t<W>>
class device_learned_problem {
 public:
  /// Sets up the problem: ordered (the dominant first) the coefficients' members, by_id the members in ascending
  /// id order (the target's order), ids the kept tokens, weights (kept rows x by_id columns, or empty) the
  /// target's weights.
  device_learned_problem(const cuda_context& ctx, const moe::ffn_params& forward, const learned_plan& plan,
                         const moe::ffn_expert_stack_device_view<W>& experts, const std::vector<index_t>& ordered,
                         const std::vector<index_t>& by_id, matrix_view<const A, device_memory> x,
                         const std::vector<index_t>& ids, const std::vector<double>& weights, std::byte* workspace)
      : ctx_(ctx), blas_(ctx), plan_(plan), act_(forward.act), base_(moecomp::detail::aligned_base(workspace)),
        readback_(plan.readback_count()) {
    const index_t t = plan.t, d = plan.d, f = plan.f, n = plan.n, td = t * d, tf = t * f, df = d * f;
    index_t* dev_ids = at<index_t>(base_, plan.ids);
    // From pageable memory: each copy returns once the host data is staged.
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(dev_ids, ids.data(), sizeof(index_t) * ids.size(), cudaMemcpyHostToDevice, ctx.stream));
    double* dev_weights = nullptr;
    if (plan.weighted) {
      dev_weights = at<double>(base_, plan.weights);
      MOECOMP_CUDA_TRY(cudaMemcpyAsync(dev_weights, weights.data(), sizeof(double) * weights.size(),
                                       cudaMemcpyHostToDevice, ctx.stream));
    }
    A* xg = at<A>(base_, plan.xg);
    gather_rows_kernel<A><<<grid_for(td, fix_dom_block), fix_dom_block, 0, ctx.stream>>>(x.data(), x.row_stride(),
                                                                                        dev_ids, t, d, xg);
    MOECOMP_CUDA_CHECK_LAUNCH();
    const matrix_view<const A, device_memory> xv(xg, t, d, d);
    // The target.
    group_target_device<W>(ctx, forward, experts, by_id, xv, dev_weights, at<double>(base_, plan.acc),
                           at<double>(base_, plan.total), at<A>(base_, plan.fout), at<A>(base_, plan.y), plan.ffn_plan,
                           at<std::byte>(base_, plan.ffn));
    // The members' pre-activations, W2 (and its transpose) in A, b2 in double.
    for (index_t i = 0; i < n; ++i) {
      const moe::ffn_expert_device_view<W> e = experts.expert(ordered[static_cast<std::size_t>(i)]);
      A* pre1 = at<A>(base_, plan.pre1) + i * tf;
      const auto w1 = moe::cuda_detail::gemm_weights<W, A>(ctx, e.w1, base_, plan.conv);
      moecomp::detail::gemm_abt(blas_.handle(), t, f, d, xg, d, w1.data(), w1.row_stride(), pre1, f);
      if (!e.b1.empty()) launch_bias(pre1, e.b1.data());
      if (plan.gated) {
        A* pre3 = at<A>(base_, plan.pre3) + i * tf;
        const auto w3 = moe::cuda_detail::gemm_weights<W, A>(ctx, e.w3, base_, plan.conv);
        moecomp::detail::gemm_abt(blas_.handle(), t, f, d, xg, d, w3.data(), w3.row_stride(), pre3, f);
        if (!e.b3.empty()) launch_bias(pre3, e.b3.data());
      }
      stage_w2_kernel<W, A><<<grid_for(df, fix_dom_block), fix_dom_block, 0, ctx.stream>>>(
          e.w2.data(), e.w2.row_stride(), d, f, at<A>(base_, plan.w2) + i * df, at<A>(base_, plan.w2t) + i * df,
          e.b2.empty() ? nullptr : e.b2.data(), at<double>(base_, plan.b2) + i * d);
      MOECOMP_CUDA_CHECK_LAUNCH();
    }
    // b2 on the host too: the gradient's b2 term is summed there, in the host's order. SYNCHRONISES.
    b2_.resize(static_cast<std::size_t>(n * d));
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(b2_.data(), at<double>(base_, plan.b2), sizeof(double) * b2_.size(),
                                     cudaMemcpyDeviceToHost, ctx.stream));
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx.stream));
  }

  /// L(alpha); the gradient into grad when it is not null. Synchronises.
  double evaluate(const std::vector<double>& alpha, std::vector<double>* grad) {
    // The line search's accepted trial is evaluated again with the gradient: its forward (a, u, h, R) is kept.
    if (!(forward_current_ && alpha == forward_alpha_)) forward(alpha);
    if (grad == nullptr) {
      fetch(1);
      return readback_[3 * plan_.n] / static_cast<double>(plan_.t);
    }
    forward_current_ = false;  // h is reused below
    gradient(alpha);
    fetch(plan_.readback_count());
    const index_t n = plan_.n, d = plan_.d;
    grad->assign(static_cast<std::size_t>(n), 0.0);
    const double scale = 2.0 / static_cast<double>(plan_.t);
    const double* col = &readback_[3 * n + 1];
    for (index_t i = 0; i < n; ++i) {
      double s = readback_[i];
      for (index_t c = 0; c < d; ++c) s += col[c] * b2_[static_cast<std::size_t>(i * d + c)];
      s += readback_[n + i];
      if (plan_.gated) s += readback_[2 * n + i];
      (*grad)[static_cast<std::size_t>(i)] = scale * s;
    }
    return readback_[3 * n] / static_cast<double>(plan_.t);
  }

 private:
  template <class B>
  void launch_bias(A* pre, const B* b) {
    add_pre_bias_kernel<B, A><<<grid_for(plan_.t * plan_.f, fix_dom_block), fix_dom_block, 0, ctx_.stream>>>(
        pre, plan_.t, plan_.f, b);
    MOECOMP_CUDA_CHECK_LAUNCH();
  }

  alpha_table table(const std::vector<double>& alpha) const {
    alpha_table tb;
    tb.n = static_cast<int>(alpha.size());
    for (std::size_t i = 0; i < alpha.size(); ++i) tb.v[i] = alpha[i];
    return tb;
  }

  /// The segmented sums of element functor `e` over `segments` segments of `length` into out.
  template <class F>
  void sums(F e, double* out, index_t segments, index_t stride, index_t length) {
    std::size_t bytes = plan_.cub_bytes;
    MOECOMP_CUDA_TRY(cub::DeviceSegmentedReduce::Sum(at<std::byte>(base_, plan_.cub_temp), bytes, indexed(e), out,
                                                     static_cast<std::int64_t>(segments),
                                                     indexed(segment_offset<index_t>{stride, 0}),
                                                     indexed(segment_offset<index_t>{stride, length}), ctx_.stream));
  }

  void forward(const std::vector<double>& alpha) {
    const learned_plan& p = plan_;
    const index_t t = p.t, d = p.d, f = p.f, tf = t * f, td = t * d, df = d * f;
    const alpha_table tb = table(alpha);
    A* a = at<A>(base_, p.a);
    A* u = p.gated ? at<A>(base_, p.u) : nullptr;
    A* h = at<A>(base_, p.h);
    mix_hidden_kernel<A><<<grid_for(tf, fix_dom_block), fix_dom_block, 0, ctx_.stream>>>(
        tb, at<A>(base_, p.pre1), p.gated ? at<A>(base_, p.pre3) : nullptr, tf, act_, p.gated, a, u, h);
    MOECOMP_CUDA_CHECK_LAUNCH();
    mix_kernel<A, A><<<grid_for(df, fix_dom_block), fix_dom_block, 0, ctx_.stream>>>(tb, at<A>(base_, p.w2), df,
                                                                                     at<A>(base_, p.w2a));
    MOECOMP_CUDA_CHECK_LAUNCH();
    mix_kernel<double, double><<<grid_for(d, fix_dom_block), fix_dom_block, 0, ctx_.stream>>>(
        tb, at<double>(base_, p.b2), d, at<double>(base_, p.b2a));
    MOECOMP_CUDA_CHECK_LAUNCH();
    A* out = at<A>(base_, p.out);
    moecomp::detail::gemm_abt(blas_.handle(), t, d, f, h, f, at<A>(base_, p.w2a), f, out, d);
    A* r = at<A>(base_, p.r);
    residual_kernel<A><<<grid_for(td, fix_dom_block), fix_dom_block, 0, ctx_.stream>>>(out, at<double>(base_, p.b2a),
                                                                                       at<A>(base_, p.y), t, d, r);
    MOECOMP_CUDA_CHECK_LAUNCH();
    sums(element_square_of<A>{r}, at<double>(base_, p.readback) + 3 * p.n, 1, td, td);
    forward_alpha_ = alpha;
    forward_current_ = true;
  }

  void gradient(const std::vector<double>& alpha) {
    const learned_plan& p = plan_;
    const index_t t = p.t, d = p.d, f = p.f, n = p.n, tf = t * f, df = d * f;
    const alpha_table tb = table(alpha);
    const A* r = at<A>(base_, p.r);
    A* h = at<A>(base_, p.h);
    A* m = at<A>(base_, p.m);
    A* g = at<A>(base_, p.g);
    double* rb = at<double>(base_, p.readback);
    // M = R^T h (d x f); G = R W2_a (t x f) from W2_a^T (f x d).
    moecomp::detail::gemm_atb(blas_.handle(), d, f, t, r, d, h, f, m, f);
    mix_kernel<A, A><<<grid_for(df, fix_dom_block), fix_dom_block, 0, ctx_.stream>>>(tb, at<A>(base_, p.w2t), df,
                                                                                     at<A>(base_, p.w2ta));
    MOECOMP_CUDA_CHECK_LAUNCH();
    moecomp::detail::gemm_abt(blas_.handle(), t, f, d, r, d, at<A>(base_, p.w2ta), d, g, f);
    gradient_elements_kernel<A><<<grid_for(tf, fix_dom_block), fix_dom_block, 0, ctx_.stream>>>(
        g, at<A>(base_, p.a), p.gated ? at<A>(base_, p.u) : nullptr, tf, act_, p.gated, h);
    MOECOMP_CUDA_CHECK_LAUNCH();
    sums(stacked_product<A>{m, at<A>(base_, p.w2), df}, rb, n, df, df);
    sums(stacked_product<A>{g, at<A>(base_, p.pre1), tf}, rb + n, n, tf, tf);
    if (p.gated) sums(stacked_product<A>{h, at<A>(base_, p.pre3), tf}, rb + 2 * n, n, tf, tf);
    sums(column_value<A>{r, d, t}, rb + 3 * n + 1, d, t, t);
  }

  /// The first `count` read-back doubles to the pinned buffer. SYNCHRONISES.
  void fetch(index_t count) {
    const index_t first = count == 1 ? 3 * plan_.n : 0;
    MOECOMP_CUDA_TRY(cudaMemcpyAsync(readback_.data() + first, at<double>(base_, plan_.readback) + first,
                                     sizeof(double) * static_cast<std::size_t>(count), cudaMemcpyDeviceToHost,
                                     ctx_.stream));
    MOECOMP_CUDA_TRY(cudaStreamSynchronize(ctx_.stream));
  }

  const cuda_context& ctx_;
  moecomp::detail::cublas_session blas_;
  const learned_plan& plan_;
  moe::activation act_;
  std::byte* base_;
  moecomp::detail::pinned_scalars<double> readback_;
  std::vector<double> b2_;
  std::vector<double> forward_alpha_;
  bool forward_current_ = false;
};

/// One group's learned merge for function fn, the arguments checked by the caller (merge_learned, merge_experts): the host's cap of
/// the token positions (stream `group`), the device problem, the host's projected gradient, the weighted sum;
/// the report of the one group.
template <class W, class A = accumulator_t<W>>
merge_report learned_group(const char* fn, const cuda_context& ctx, const merge_params& params,
                           const moe::ffn_expert_stack_device_view<W>& experts, vector_view<const index_t> members,
                           index_t dominant, index_t group, matrix_view<const A, device_memory> x,
                           vector_view<const index_t> tokens, matrix_view<const double> weights,
                           const moe::ffn_expert_device_mutable_view<W>& out,
                           vector_view<std::byte, device_memory> workspace) {
  const index_t n = members.size(), t_all = tokens.size();
  // The kept positions: the host's draw on positions 0..T-1 (cap_tokens draws positions, whatever the values).
  std::vector<index_t> positions(static_cast<std::size_t>(t_all));
  for (index_t i = 0; i < t_all; ++i) positions[static_cast<std::size_t>(i)] = i;
  positions = merge::detail::cap_tokens(std::move(positions), params.token_cap, params.seed, static_cast<std::uint64_t>(group));
  const auto t = static_cast<index_t>(positions.size());
  const std::vector<index_t> ordered = dominant_first(members, dominant);
  std::vector<index_t> by_id(ordered);
  std::sort(by_id.begin(), by_id.end());
  std::vector<index_t> ids;
  std::vector<double> w;  // kept rows x by_id columns
  for (index_t p : positions) {
    ids.push_back(tokens[p]);
    if (weights.empty()) continue;
    for (index_t e : by_id)
      for (index_t c = 0; c < n; ++c)
        if (members[c] == e) w.push_back(weights(p, c));
  }
  std::vector<double> alpha(static_cast<std::size_t>(n), 1.0 / static_cast<double>(n));
  merge::detail::learned_outcome lo;
  lo.alpha = alpha;
  lo.initial = lo.final = std::numeric_limits<double>::quiet_NaN();
  if (t > 0) {
    const auto plan = make_learned_plan<W>(fn, t, n, experts.d_model(), experts.d_ff(), experts.gated(), !weights.empty());
    moecomp::detail::check_workspace(fn, plan.bytes, workspace);
    device_learned_problem<W> problem(ctx, params.forward, plan, experts, ordered, by_id, x, ids, w, workspace.data());
    lo = merge::detail::projected_gradient(problem, static_cast<std::size_t>(n), params);
  }
  std::vector<moe::ffn_expert_device_view<W>> views;
  for (index_t e : ordered) views.push_back(experts.expert(e));
  moecomp::detail::gather_experts<W>(ctx, views, lo.alpha, nullptr, 0, out);
  merge_report report = one_group_report(merge_method::learned, params, experts.experts(), ordered, lo.alpha, t);
  merge_group_report& g = report.groups.front();
  g.objective_initial = lo.initial;
  g.objective_final = lo.final;
  g.iterations = lo.iterations;
  report.iterations = lo.iterations;
  report.criterion = lo.last_step;
  if (!lo.converged) report.status = moecomp::status::iteration_limit;
  return report;
}

}  // namespace cuda_detail
}  // namespace merge
MOECOMP_NAMESPACE_END
