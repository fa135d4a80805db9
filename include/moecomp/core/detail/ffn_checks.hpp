#pragma once
// The argument checks of FFN experts, shared by every module that takes them (moe, align) on the host and the
// device: shapes of an expert, of a stack, of the tokens and outputs.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/moe/ffn_types.hpp>

MOECOMP_NAMESPACE_BEGIN
namespace detail {

inline void check_ffn_params(const char* fn, const moe::ffn_params& params) {
  MOECOMP_EXPECTS(params.token_tile >= 1, fn, ": params.token_tile must be >= 1, got ", params.token_tile);
}

/// The shapes of one expert's pieces: d_ff x d, d x d_ff, d_ff, d_ff, d.
inline void check_ffn_shapes(const char* fn, index_t d_ff, index_t d, index_t w3_rows, index_t w3_cols,
                             index_t w2_rows, index_t w2_cols, index_t b1, index_t b3, index_t b2, bool gated) {
  MOECOMP_EXPECTS(d_ff >= 1 && d >= 1, fn, ": w1 must be d_ff x d with d_ff, d >= 1, got ", shape_string(d_ff, d));
  if (gated)
    MOECOMP_EXPECTS(w3_rows == d_ff && w3_cols == d, fn, ": w3 must be ", shape_string(d_ff, d), " like w1, got ",
                    shape_string(w3_rows, w3_cols));
  MOECOMP_EXPECTS(w2_rows == d && w2_cols == d_ff, fn, ": w2 must be ", shape_string(d, d_ff),
                  " (d x d_ff, nn.Linear layout), got ", shape_string(w2_rows, w2_cols));
  MOECOMP_EXPECTS(b1 == 0 || b1 == d_ff, fn, ": b1 must be empty or have ", d_ff, " entries (d_ff), got ", b1);
  MOECOMP_EXPECTS(b3 == 0 || (gated && b3 == d_ff), fn, ": b3 must be empty or have ", d_ff,
                  " entries (d_ff) with w3, got ", b3, gated ? "" : " without w3");
  MOECOMP_EXPECTS(b2 == 0 || b2 == d, fn, ": b2 must be empty or have ", d, " entries (d), got ", b2);
}

template <class W>
void check_ffn_expert(const char* fn, const moe::ffn_expert_view<W>& e) {
  check_ffn_shapes(fn, e.d_ff(), e.d_model(), e.w3.rows(), e.w3.cols(), e.w2.rows(), e.w2.cols(), e.b1.size(),
                   e.b3.size(), e.b2.size(), e.gated());
}

template <class Stack>
void check_ffn_stack(const char* fn, const Stack& s) {
  const index_t e = s.experts(), d_ff = s.d_ff(), d = s.d_model();
  MOECOMP_EXPECTS(e >= 1, fn, ": the stack must hold at least one expert, got 0");
  if (s.gated())
    MOECOMP_EXPECTS(s.w3.count() == e, fn, ": w3 must hold ", e, " experts like w1, got ", s.w3.count());
  MOECOMP_EXPECTS(s.w2.count() == e, fn, ": w2 must hold ", e, " experts like w1, got ", s.w2.count());
  check_ffn_shapes(fn, d_ff, d, s.w3.rows(), s.w3.cols(), s.w2.rows(), s.w2.cols(), s.b1.empty() ? 0 : s.b1.cols(),
                   s.b3.empty() ? 0 : s.b3.cols(), s.b2.empty() ? 0 : s.b2.cols(), s.gated());
  MOECOMP_EXPECTS(s.b1.empty() || s.b1.rows() == e, fn, ": b1 must have one row per expert (", e, "), got ", s.b1.rows());
  MOECOMP_EXPECTS(s.b3.empty() || s.b3.rows() == e, fn, ": b3 must have one row per expert (", e, "), got ", s.b3.rows());
  MOECOMP_EXPECTS(s.b2.empty() || s.b2.rows() == e, fn, ": b2 must have one row per expert (", e, "), got ", s.b2.rows());
}

/// Tokens x (n x d) and the output's shape (rows x cols).
inline void check_tokens(const char* fn, index_t d, index_t x_rows, index_t x_cols, const char* out_name,
                         index_t out_rows, index_t out_cols, index_t want_cols) {
  MOECOMP_EXPECTS(x_cols == d, fn, ": x must have ", d, " columns (the experts' d), got ", shape_string(x_rows, x_cols));
  MOECOMP_EXPECTS(out_rows == x_rows && out_cols == want_cols, fn, ": ", out_name, " must be ",
                  shape_string(x_rows, want_cols), ", got ", shape_string(out_rows, out_cols));
}

}  // namespace detail
MOECOMP_NAMESPACE_END
