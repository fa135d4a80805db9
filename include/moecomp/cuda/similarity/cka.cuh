#pragma once
// HSIC and CKA on the device: the device overloads of <moecomp/similarity/cka.hpp>'s cka and cka_matrix,
// taking a cuda_context and device views. The same parameters, formulas, routes, stability measures and
// undefined cases as the host (docs/similarity.md, "Device").
//
// Method: each input is centred (column means in double) and scaled by its Frobenius norm on the device;
// Grams (gram route) or cross-covariances X_a^T X_b (feature route) by cuBLAS GEMMs in T; the RBF median by
// cub::DeviceRadixSort of the n^2 squared distances; Grams centred by row means (double) with
// cub::DeviceReduce; the all-pairs products by one cuBLAS GEMM per chunk of 2^16 Gram entries over the E
// vectorised Grams, accumulated in double. The per-element rules are the host's
// (similarity/detail/cka_rules.hpp).
//
// Differences from the host: the device works in T throughout (the host computes a single pair in double),
// and keeps full n x n Grams (the host keeps upper-triangle tiles): float32 results agree with the host's to
// about 1e-5, double to rounding.
// Asynchrony: SYNCHRONISES ctx.stream (the products and the per-input reports are read back; the CKAs are
// formed on the host from E^2 scalars). `out` is host memory.
// Workspace: E n d elements of T (the scaled features), E n^2 more on the gram route and n^2 more with the
// RBF median (the sorted distances), E n + 2 E^2 doubles and CUB's temporary storage
// (cka_matrix_workspace_size).
// Without a workspace argument it comes from ctx's allocator. Needs a cuBLAS handle in ctx for speed.
// Checks: parameters and shapes as on the host; the VALUES are not checked on the device (a NaN shows as a
// NaN product and makes the affected CKAs undefined: non_positive_self_hsic).
// Determinism: no atomics; fixed orders; cuBLAS and CUB reductions are run-to-run deterministic on one GPU.
// Limits: n, d and (gram route) n^2 at most 2^31 - 1.
//
// Tests: tests/cuda/test_cka_cuda.cu. Whether it has run on a GPU: docs/cuda.md, "Status on hardware".
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/similarity/cka_types.hpp>
#include <moecomp/cuda/core/context.cuh>
#include <moecomp/cuda/core/device_buffer.cuh>
#include <moecomp/cuda/core/error.cuh>
#include <moecomp/similarity/detail/cka_checks.hpp>
#include <moecomp/similarity/detail/cka_common.hpp>
#include <moecomp/cuda/similarity/detail/cka_device.cuh>
#include <moecomp/core/detail/traits.hpp>

#include <cstddef>
#include <type_traits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace similarity {

/// Workspace bytes for the device cka_matrix of E inputs of n x d, element type T.
template <class T>
std::size_t cka_matrix_workspace_size(const cka_params& params, index_t experts, index_t n, index_t d) {
  moecomp::detail::check_device_element_type<T>();
  detail::check_cka_params("cka_matrix_workspace_size", params);
  moecomp::detail::check_extents("cka_matrix_workspace_size", {{"experts", experts}, {"n", n}, {"d", d}});
  return cuda_detail::make_cka_plan<T>("cka_matrix_workspace_size", params, n,
                                       std::vector<index_t>(static_cast<std::size_t>(experts), d),
                                       resolved_cka_matrix_route(params, experts, n, d))
      .bytes;
}

/// The E x E CKA matrix of a device stack (E x n x d) into host memory; see above.
template <class T, class U, std::enable_if_t<moecomp::detail::is_input_of_v<U, T>, int> = 0>
cka_matrix_result cka_matrix(const cuda_context& ctx, const cka_params& params,
                             matrix_stack_view<U, device_memory> features, matrix_view<double> out,
                             vector_view<std::byte, device_memory> workspace) {
  moecomp::detail::check_device_element_type<T>();
  constexpr const char* fn = "cka_matrix";
  const index_t e = features.count(), n = features.rows(), d = features.cols();
  detail::check_cka_params(fn, params);
  detail::check_cka_matrix_shapes(fn, params, e, n, d, out.rows(), out.cols());
  cka_matrix_result result;
  result.route = resolved_cka_matrix_route(params, e, n, d);
  const std::vector<index_t> dims(static_cast<std::size_t>(e), d);
  const auto plan = cuda_detail::make_cka_plan<T>(fn, params, n, dims, result.route);
  moecomp::detail::check_workspace(fn, plan.bytes, workspace);
  std::vector<cuda_detail::device_input<T>> inputs;
  for (index_t a = 0; a < e; ++a) inputs.push_back({features.matrix_ptr(a), features.row_stride(), d});
  const auto p = cuda_detail::run_cka_products<T>(ctx, params, inputs, n, plan, workspace.data());
  for (index_t a = 0; a < e; ++a)
    for (index_t b = a; b < e; ++b) {
      cka_status status = cka_status::ok;
      const double v = detail::cka_from_products<T>(
          p.products[static_cast<std::size_t>(a * e + b)], p.products[static_cast<std::size_t>(a * e + a)],
          p.products[static_cast<std::size_t>(b * e + b)],
          static_cast<cka_status>(p.reports[static_cast<std::size_t>(a)].status),
          static_cast<cka_status>(p.reports[static_cast<std::size_t>(b)].status), status);
      if (status != cka_status::ok && result.undefined_pairs++ == 0) result.first_undefined = status;
      out(a, b) = out(b, a) = v;
    }
  return result;
}

/// As above, with the workspace from ctx's allocator.
template <class T, class U, std::enable_if_t<moecomp::detail::is_input_of_v<U, T>, int> = 0>
cka_matrix_result cka_matrix(const cuda_context& ctx, const cka_params& params,
                             matrix_stack_view<U, device_memory> features, matrix_view<double> out) {
  moecomp::detail::check_device_element_type<T>();
  detail::check_cka_params("cka_matrix", params);
  detail::check_cka_matrix_shapes("cka_matrix", params, features.count(), features.rows(), features.cols(), out.rows(),
                                  out.cols());
  const moecomp::detail::scoped_workspace workspace(
      ctx, cka_matrix_workspace_size<T>(params, features.count(), features.rows(), features.cols()));
  return cka_matrix<T>(ctx, params, features, out, workspace.view());
}

/// One pair on the device (x: n x dx, y: n x dy), the workspace from ctx's allocator; returns the result
/// (synchronises).
template <class T, class UX, class UY,
          std::enable_if_t<moecomp::detail::is_input_of_v<UX, T> && moecomp::detail::is_input_of_v<UY, T>, int> = 0>
cka_result cka(const cuda_context& ctx, const cka_params& params, matrix_view<UX, device_memory> x,
               matrix_view<UY, device_memory> y) {
  moecomp::detail::check_device_element_type<T>();
  constexpr const char* fn = "cka";
  detail::check_cka_params(fn, params);
  detail::check_cka_pair_shapes(fn, params, x.rows(), x.cols(), y.rows(), y.cols());
  const index_t n = x.rows();
  cka_result result;
  result.route = resolved_cka_route(params, n, x.cols(), y.cols());
  const auto plan = cuda_detail::make_cka_plan<T>(fn, params, n, {x.cols(), y.cols()}, result.route);
  const moecomp::detail::scoped_workspace workspace(ctx, plan.bytes);
  const std::vector<cuda_detail::device_input<T>> inputs{{x.data(), x.row_stride(), x.cols()},
                                                         {y.data(), y.row_stride(), y.cols()}};
  const auto p = cuda_detail::run_cka_products<T>(ctx, params, inputs, n, plan, workspace.view().data());
  const auto& rx = p.reports[0];
  const auto& ry = p.reports[1];
  result.hsic_xy = detail::hsic_in_units(params, n, p.products[1], rx.scale, ry.scale);
  result.hsic_xx = detail::hsic_in_units(params, n, p.products[0], rx.scale, rx.scale);
  result.hsic_yy = detail::hsic_in_units(params, n, p.products[3], ry.scale, ry.scale);
  result.cka = detail::cka_from_products<T>(p.products[1], p.products[0], p.products[3],
                                            static_cast<cka_status>(rx.status), static_cast<cka_status>(ry.status),
                                            result.status);
  if (params.kernel == cka_kernel::rbf) {
    result.sigma_x = rx.sigma_scaled * rx.scale;
    result.sigma_y = ry.sigma_scaled * ry.scale;
  }
  return result;
}

}  // namespace similarity
MOECOMP_NAMESPACE_END
