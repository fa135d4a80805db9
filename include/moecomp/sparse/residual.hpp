#pragma once
// ResMoE's residuals in compact formats, on the host: encode a pruned matrix as CSR with 16-bit column
// indices, a bitmap plus packed values, or 2:4 semi-structured; decode it; restore W = B + R into a caller
// buffer in float, double, bfloat16 or half and in either neuron order; and encode_residual, which takes
// R = P W - B, prunes it and encodes it in one call. Documentation, with every byte layout: docs/sparse.md.
//
//   sparse_matrix r;
//   residual_info info = encode_residual<float>(ctx, params, base, w, permutation, r);   // prune + encode
//   restore_dense<float, bfloat16>(ctx, base, r.view(), out, permutation);             // W = B + R, bf16
//
// Neuron order: `permutation` is the OT module's (free_support_barycenter: row i of expert k goes to
// barycenter row permutations(k, i)). The residual is kept in the barycenter's order, R(p(i), :) =
// W(i, :) - B(p(i), :), and restore gives back W's own order, out(i, :) = B(p(i), :) + R(p(i), :). An
// empty permutation is the identity (then out is in the base's order).
//
// Stored entries: every entry whose bits are not +0 (so decoding is bit-exact, -0 included); values are
// rounded once to the value dtype (round to nearest even). Rows are independent: every result is the same
// at any thread count. Throws invalid_argument for bad parameters, shapes, permutations, non-finite values,
// values that overflow the value dtype, or matrices a format cannot hold.
#include <moecomp/core/context.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/sparse/prune_types.hpp>
#include <moecomp/sparse/residual_types.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/parallel.hpp>
#include <moecomp/core/detail/traits.hpp>
#include <moecomp/sparse/detail/encode_host.hpp>
#include <moecomp/sparse/detail/prune_checks.hpp>
#include <moecomp/sparse/detail/prune_host.hpp>
#include <moecomp/sparse/detail/restore_host.hpp>
#include <moecomp/sparse/detail/sparse_layout.hpp>

#include <cstdint>
#include <string>
#include <type_traits>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {

/// Checks sections that did not come from an encoder (a file, a foreign buffer) byte by byte (docs/sparse.md,
/// "Validation"): returns "" and, if `view` is given, sets *view to a view of them (not owning the bytes) when
/// they describe a valid matrix; otherwise returns the first problem (one phrase) and leaves *view alone.
inline std::string check_sparse_sections(index_t rows, index_t cols, sparse_format format, value_dtype values,
                                         std::uint64_t count, const std::uint8_t* offsets,
                                         std::uint64_t offsets_length, const std::uint8_t* structure,
                                         std::uint64_t structure_length, const std::uint8_t* value_bytes,
                                         std::uint64_t values_length, sparse_matrix_view* view = nullptr) {
  std::string problem =
      detail::sparse_sections_problem(rows, cols, format, values, count, offsets, offsets_length, structure,
                                      structure_length, value_bytes, values_length);
  if (problem.empty() && view != nullptr)
    *view = detail::sparse_view_access::make(rows, cols, format, values, count, offsets, structure, value_bytes);
  return problem;
}

/// check_sparse_sections that throws invalid_argument naming the first problem.
inline sparse_matrix_view view_sparse_sections(index_t rows, index_t cols, sparse_format format, value_dtype values,
                                               std::uint64_t count, const std::uint8_t* offsets,
                                               std::uint64_t offsets_length, const std::uint8_t* structure,
                                               std::uint64_t structure_length, const std::uint8_t* value_bytes,
                                               std::uint64_t values_length) {
  sparse_matrix_view view;
  const std::string problem = check_sparse_sections(rows, cols, format, values, count, offsets, offsets_length,
                                                    structure, structure_length, value_bytes, values_length, &view);
  MOECOMP_EXPECTS(problem.empty(), "view_sparse_sections: the sections must describe a valid matrix: ", problem);
  return view;
}

/// Encodes r (float, double, bfloat16 or half) into out in params.format (automatic: the smallest that can
/// hold it) with params.values. O(rows x cols), two passes.
template <class T>
void encode_sparse(const host_context& ctx, const encode_params& params,
                   moecomp::detail::type_identity_t<matrix_view<const T>> r, sparse_matrix& out) {
  static_assert(moecomp::detail::is_weight_type_v<T>, "encode_sparse: T must be float, double, bfloat16 or half");
  MOECOMP_EXPECTS(sparse_shape_fits(r.rows(), r.cols()), "encode_sparse: r must have fewer than 2^56 entries, got ",
                  moecomp::detail::shape_string(r.rows(), r.cols()));
  moecomp::detail::check_finite("encode_sparse", "r", r, ctx.threads());
  detail::encode_sparse_host<T>(ctx, params, r, out);
}

/// Restores out = base + r with rows permuted as described above (permutation empty: the identity). The sum
/// is formed in float (double if base or out is double) and rounded once to out's type. base and out may be
/// float, double, bfloat16 or half, independently.
template <class Tb, class To>
void restore_dense(const host_context& ctx, moecomp::detail::type_identity_t<matrix_view<const Tb>> base,
                   const sparse_matrix_view& r, matrix_view<To> out,
                   vector_view<const index_t> permutation = vector_view<const index_t>()) {
  constexpr const char* fn = "restore_dense";
  static_assert(moecomp::detail::is_weight_type_v<Tb> && moecomp::detail::is_weight_type_v<To>,
                "restore_dense: the base and output types must be float, double, bfloat16 or half");
  MOECOMP_EXPECTS(base.rows() == r.rows() && base.cols() == r.cols(), fn, ": base must be ",
                  moecomp::detail::shape_string(r.rows(), r.cols()), " like the residual, got ",
                  moecomp::detail::shape_string(base.rows(), base.cols()));
  MOECOMP_EXPECTS(out.rows() == r.rows() && out.cols() == r.cols(), fn, ": out must be ",
                  moecomp::detail::shape_string(r.rows(), r.cols()), " like the residual, got ",
                  moecomp::detail::shape_string(out.rows(), out.cols()));
  MOECOMP_EXPECTS(permutation.size() == 0 || permutation.size() == r.rows(), fn, ": permutation must be empty or have ",
                  r.rows(), " entries (one per row), got ", permutation.size());
  moecomp::detail::check_permutation(fn, "permutation", permutation, r.rows());
  moecomp::detail::check_no_overlap(fn, "out", out, "base", base);
  std::vector<index_t> p;
  if (permutation.size() != 0) {
    p.resize(static_cast<std::size_t>(permutation.size()));
    for (index_t i = 0; i < permutation.size(); ++i) p[static_cast<std::size_t>(i)] = permutation[i];
  }
  detail::restore_host<Tb, To>(ctx, &base, r, p.empty() ? nullptr : p.data(), out);
}

/// Decodes r into out (float, double, bfloat16 or half): the stored values, +0 elsewhere. Bit-exact against
/// the values as stored (decode(encode(x)) == x when x has float32 values and the values are fp32).
template <class T>
void decode_sparse(const host_context& ctx, const sparse_matrix_view& r, matrix_view<T> out) {
  static_assert(moecomp::detail::is_weight_type_v<T>, "decode_sparse: T must be float, double, bfloat16 or half");
  MOECOMP_EXPECTS(out.rows() == r.rows() && out.cols() == r.cols(), "decode_sparse: out must be ",
                  moecomp::detail::shape_string(r.rows(), r.cols()), " like the residual, got ",
                  moecomp::detail::shape_string(out.rows(), out.cols()));
  detail::restore_host<T, T>(ctx, nullptr, r, nullptr, out);
}

/// ||full - stored||_F^2 in double, where `stored` is `pruned` (a pruned copy of `full`) with each non-+0 entry
/// rounded to `values` and every other entry 0: what pruning and value rounding lose, as encode_residual reports
/// it (residual_info::squared_error). For residuals formed outside encode_residual (an expert's design matrix).
template <class T>
double stored_squared_error(const host_context& ctx, moecomp::detail::type_identity_t<matrix_view<const T>> full,
                            moecomp::detail::type_identity_t<matrix_view<const T>> pruned, value_dtype values) {
  static_assert(moecomp::detail::is_weight_type_v<T>, "stored_squared_error: T must be float, double, bfloat16 or half");
  MOECOMP_EXPECTS(pruned.rows() == full.rows() && pruned.cols() == full.cols(), "stored_squared_error: pruned must be ",
                  moecomp::detail::shape_string(full.rows(), full.cols()), " like full, got ",
                  moecomp::detail::shape_string(pruned.rows(), pruned.cols()));
  return detail::encoding_squared_error<T>(ctx, full, pruned, values);
}

/// ResMoE's residual in one call: R(p(i), :) = w(i, :) - base(p(i), :) (in float; double for double input),
/// pruned by params.prune (torch's l1_unstructured count and scopes, <moecomp/sparse/prune.hpp>), then encoded
/// by params.encode into out. Returns the pruning counts and threshold and the format's size.
template <class T>
residual_info encode_residual(const host_context& ctx, const residual_params& params,
                              moecomp::detail::type_identity_t<matrix_view<const T>> base,
                              moecomp::detail::type_identity_t<matrix_view<const T>> w,
                              vector_view<const index_t> permutation, sparse_matrix& out) {
  constexpr const char* fn = "encode_residual";
  static_assert(moecomp::detail::is_weight_type_v<T>, "encode_residual: T must be float, double, bfloat16 or half");
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  MOECOMP_EXPECTS(w.rows() == base.rows() && w.cols() == base.cols(), fn, ": w must be ",
                  moecomp::detail::shape_string(base.rows(), base.cols()), " like base, got ",
                  moecomp::detail::shape_string(w.rows(), w.cols()));
  MOECOMP_EXPECTS(sparse_shape_fits(w.rows(), w.cols()), fn, ": w must have fewer than 2^56 entries, got ",
                  moecomp::detail::shape_string(w.rows(), w.cols()));
  MOECOMP_EXPECTS(permutation.size() == 0 || permutation.size() == w.rows(), fn,
                  ": permutation must be empty or have ", w.rows(), " entries (one per row), got ", permutation.size());
  moecomp::detail::check_permutation(fn, "permutation", permutation, w.rows());
  detail::check_prune_params(fn, params.prune, w.rows(), w.cols());
  if (params.encode.format == sparse_format::two_of_four)
    MOECOMP_EXPECTS(params.prune.scope == prune_scope::n_of_m && params.prune.m == 4 && params.prune.n <= 2, fn,
                    ": params.encode.format 2:4 needs params.prune to be N:M pruning with m = 4 and n <= 2, got ",
                    params.prune.scope == prune_scope::n_of_m
                        ? moecomp::detail::concat(params.prune.n, ":", params.prune.m)
                        : std::string(to_string(params.prune.scope)));
  moecomp::detail::check_finite(fn, "base", base, ctx.threads());
  moecomp::detail::check_finite(fn, "w", w, ctx.threads());
  host_matrix<Acc> r(w.rows(), w.cols());
  matrix_view<Acc> rv = r.view();
  moecomp::detail::parallel_for(w.rows(), ctx.threads(), [&](index_t i, int) {
    const index_t s = permutation.size() != 0 ? permutation[i] : i;
    const T* wi = w.row_ptr(i);
    const T* bs = base.row_ptr(s);
    Acc* rs = rv.row_ptr(s);
    for (index_t j = 0; j < w.cols(); ++j) rs[j] = convert_to<Acc>(wi[j]) - convert_to<Acc>(bs[j]);
  });
  residual_info info;
  host_matrix<Acc> pruned(w.rows(), w.cols());
  info.pruned = detail::prune_host<Acc>(ctx, params.prune, r.const_view(), pruned.view());
  detail::encode_sparse_host<Acc>(ctx, params.encode, pruned.const_view(), out);
  info.squared_error = detail::encoding_squared_error<Acc>(ctx, r.const_view(), pruned.const_view(), params.encode.values);
  info.format = out.format();
  info.bytes = out.bytes();
  info.bits_per_weight = out.bits_per_weight();
  return info;
}

}  // namespace sparse
MOECOMP_NAMESPACE_END
