#pragma once
// Parameters and result of magnitude pruning (<moecomp/sparse/prune.hpp>). Documentation: docs/sparse.md.
#include <moecomp/core/error.hpp>
#include <moecomp/core/views.hpp>

#include <cmath>
#include <string>
#include <string_view>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {

/// Which entries compete for the kept places.
///  * matrix: the whole matrix (torch.nn.utils.prune.l1_unstructured on the tensor; ResMoE's design matrix);
///  * row: each row separately;
///  * column_block: each block of params.column_block consecutive columns separately (the pieces of a
///    [W1 | W3 | W2^T] design matrix, say); the last block may be narrower;
///  * n_of_m: N:M semi-structured: in each group of params.m consecutive entries of a row, the params.n largest
///    (2:4 by default); params.sparsity / keep are not used.
enum class prune_scope { matrix, row, column_block, n_of_m };

inline const char* to_string(prune_scope s) noexcept {
  switch (s) {
    case prune_scope::matrix: return "matrix";
    case prune_scope::row: return "row";
    case prune_scope::column_block: return "column_block";
    case prune_scope::n_of_m: return "n_of_m";
  }
  return "unknown";
}

/// Parses "matrix", "row", "column_block" or "n_of_m"; throws invalid_argument otherwise.
inline prune_scope parse_prune_scope(std::string_view name) {
  for (prune_scope s : {prune_scope::matrix, prune_scope::row, prune_scope::column_block, prune_scope::n_of_m})
    if (name == to_string(s)) return s;
  MOECOMP_FAIL(error_kind::invalid_argument, "scope: expected matrix, row, column_block or n_of_m, got '",
               std::string(name), "'");
}

struct prune_params {
  /// The fraction of each group to prune, torch's `amount`: round(sparsity x size) entries, Python's
  /// rounding (half to even). In [0, 1]; -1: not given (then keep is).
  double sparsity = -1;
  /// The fraction to keep instead: size - round((1 - keep) x size) entries are kept. In [0, 1]; -1: not given.
  /// Exactly one of sparsity and keep is given (except with n_of_m, which uses neither).
  double keep = -1;
  prune_scope scope = prune_scope::matrix;
  /// column_block: the block width, >= 1.
  index_t column_block = 0;
  /// n_of_m: keep n of every m consecutive entries of a row (1 <= n <= m).
  index_t n = 2, m = 4;
};

/// Python's round() of a double: to the nearest integer, halves to even (independent of the FP rounding mode).
inline double round_half_even(double x) noexcept {
  const double r = std::floor(x), diff = x - r;
  if (diff > 0.5) return r + 1;
  if (diff < 0.5) return r;
  return std::fmod(r, 2.0) == 0 ? r : r + 1;
}

/// Entries kept of a group of `size` entries under params (sparsity or keep): size - round(sparsity x size)
/// or size - round((1 - keep) x size), the product in double and rounded as Python's round, as torch's
/// _compute_nparams_toprune does for a float amount.
inline index_t kept_count(const prune_params& params, index_t size) noexcept {
  const double total = static_cast<double>(size);
  const double pruned = params.sparsity >= 0 ? params.sparsity * total : (1.0 - params.keep) * total;
  return size - static_cast<index_t>(round_half_even(pruned));
}

struct prune_result {
  index_t kept = 0, pruned = 0;
  /// The smallest kept magnitude (over every group; +inf when nothing is kept). With the matrix scope it is
  /// the threshold: every |w| above it is kept, every |w| below it pruned, ties at it kept by lowest index.
  double threshold = 0;
};

}  // namespace sparse
MOECOMP_NAMESPACE_END
