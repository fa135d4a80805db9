#pragma once
// The two other compressions of a residual matrix that ResMoE's ablations compare with magnitude pruning
// (its Tables 1, 4, 5): a truncated SVD and structured (row) pruning. Documentation: docs/sparse.md,
// "Low-rank and structured residuals".
//
//   svd_budget_rank(rows, cols, keep)  the rank whose factors hold no more parameters than keeping `keep` of
//       the entries: floor(keep x rows x cols / (rows + cols)), at least 1 (ResMoE's Appendix A.5 rule,
//       k (p_I + 3p) ~ s p_I 3p, with the k singular values folded into the left factor).
//   truncated_svd(a, rank, u, v)  a ~ u v with u = U_k S_k (rows x rank) and v = V_k^T (rank x cols, orthonormal
//       rows); the singular values by one-sided Jacobi (Hestenes) in double on a or a^T (whichever has fewer
//       columns; pairs rotated until their cosine is below max(rows, cols) x 2^-52), sorted decreasing (ties to the lower index); each v row's largest |entry| (lowest index on
//       ties) made positive. Returns all min(rows, cols) singular values.
//   rows_kept(rows, keep) / prune_rows(keep, a, out)  structured pruning: the rows - round((1 - keep) rows) rows
//       of largest l2 norm kept (Python's rounding, as prune_magnitude counts entries; ties to the lower row),
//       the others zeroed. Returns the kept rows in increasing order.
//
// Deterministic: serial double arithmetic in a fixed order.
#include <moecomp/core/context.hpp>
#include <moecomp/core/host_buffer.hpp>
#include <moecomp/core/numeric_types.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/sparse/prune_types.hpp>
#include <moecomp/core/detail/checks.hpp>
#include <moecomp/core/detail/traits.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace sparse {

/// floor(keep x rows x cols / (rows + cols)), at least 1 (see above). keep in (0, 1].
inline index_t svd_budget_rank(index_t rows, index_t cols, double keep) {
  MOECOMP_EXPECTS(rows >= 1 && cols >= 1, "svd_budget_rank: rows and cols must be >= 1, got ", rows, " and ", cols);
  MOECOMP_EXPECTS(keep > 0 && keep <= 1, "svd_budget_rank: keep must be in (0, 1], got ", keep);
  const double k = std::floor(keep * static_cast<double>(rows) * static_cast<double>(cols) /
                              static_cast<double>(rows + cols));
  return std::min(std::max<index_t>(1, static_cast<index_t>(k)), std::min(rows, cols));
}

namespace detail {

/// x . y with four partial sums (vectorisable without reassociating at run time; the order is fixed).
inline double dot4(const double* x, const double* y, index_t n) noexcept {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  index_t k = 0;
  for (; k + 4 <= n; k += 4) {
    s0 += x[k] * y[k];
    s1 += x[k + 1] * y[k + 1];
    s2 += x[k + 2] * y[k + 2];
    s3 += x[k + 3] * y[k + 3];
  }
  for (; k < n; ++k) s0 += x[k] * y[k];
  return (s0 + s1) + (s2 + s3);
}

}  // namespace detail

/// Truncated SVD of a (see above) into u (rows x rank) and v (rank x cols). rank in [1, min(rows, cols)].
template <class T>
std::vector<double> truncated_svd(const host_context& ctx, moecomp::detail::type_identity_t<matrix_view<const T>> a,
                                  index_t rank, matrix_view<double> u, matrix_view<double> v) {
  constexpr const char* fn = "truncated_svd";
  (void)ctx;
  const index_t m = a.rows(), n = a.cols();
  MOECOMP_EXPECTS(m >= 1 && n >= 1, fn, ": a must not be empty, got ", m, " x ", n);
  MOECOMP_EXPECTS(rank >= 1 && rank <= std::min(m, n), fn, ": rank must be 1 to min(rows, cols) = ", std::min(m, n),
                  " (the matrix's largest rank), got ", rank);
  MOECOMP_EXPECTS(u.rows() == m && u.cols() == rank, fn, ": u must be ", m, " x ", rank, ", got ", u.rows(), " x ", u.cols());
  MOECOMP_EXPECTS(v.rows() == rank && v.cols() == n, fn, ": v must be ", rank, " x ", n, ", got ", v.rows(), " x ", v.cols());
  moecomp::detail::check_finite(fn, "a", a, 1);
  // B = a (m >= n) or a^T, p x q with q = min(m, n), kept as q columns of p entries each.
  const bool transposed = m < n;
  const index_t p = transposed ? n : m, q = transposed ? m : n;
  std::vector<double> b(static_cast<std::size_t>(p * q)), w(static_cast<std::size_t>(q * q), 0.0);
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      const double x = convert_to<double>(a(i, j));
      if (transposed) b[static_cast<std::size_t>(i * p + j)] = x;  // column i of a^T is row i of a
      else b[static_cast<std::size_t>(j * p + i)] = x;
    }
  for (index_t j = 0; j < q; ++j) w[static_cast<std::size_t>(j * q + j)] = 1.0;
  auto col = [](std::vector<double>& x, index_t len, index_t j) { return x.data() + j * len; };
  // One-sided Jacobi: rotate column pairs until each pair's cosine is below p eps. The squared column norms are
  // recomputed at each sweep's start and updated by each rotation, so an orthogonal pair costs one dot product.
  const double tolerance = static_cast<double>(p) * 2.220446049250313e-16;
  std::vector<double> norm2(static_cast<std::size_t>(q));
  for (int sweep = 0; sweep < 80; ++sweep) {
    for (index_t j = 0; j < q; ++j) norm2[static_cast<std::size_t>(j)] = detail::dot4(col(b, p, j), col(b, p, j), p);
    bool rotated = false;
    for (index_t i = 0; i + 1 < q; ++i)
      for (index_t j = i + 1; j < q; ++j) {
        double* bi = col(b, p, i);
        double* bj = col(b, p, j);
        const double alpha = norm2[static_cast<std::size_t>(i)], beta = norm2[static_cast<std::size_t>(j)];
        const double gamma = detail::dot4(bi, bj, p);
        if (gamma == 0 || std::abs(gamma) <= tolerance * std::sqrt(alpha) * std::sqrt(beta)) continue;
        rotated = true;
        const double zeta = (beta - alpha) / (2 * gamma);
        const double t = (zeta >= 0 ? 1.0 : -1.0) / (std::abs(zeta) + std::sqrt(1 + zeta * zeta));
        const double c = 1 / std::sqrt(1 + t * t), s = c * t;
        for (index_t k = 0; k < p; ++k) {
          const double x = bi[k], y = bj[k];
          bi[k] = c * x - s * y;
          bj[k] = s * x + c * y;
        }
        norm2[static_cast<std::size_t>(i)] = alpha - t * gamma;  // exact in exact arithmetic; recomputed each sweep
        norm2[static_cast<std::size_t>(j)] = beta + t * gamma;
        double* wi = col(w, q, i);
        double* wj = col(w, q, j);
        for (index_t k = 0; k < q; ++k) {
          const double x = wi[k], y = wj[k];
          wi[k] = c * x - s * y;
          wj[k] = s * x + c * y;
        }
      }
    if (!rotated) break;
  }
  // B W = U S: column j of B is sigma_j u_j, column j of W is v_j; B = sum_j b_j w_j^T.
  std::vector<double> sigma(static_cast<std::size_t>(q));
  for (index_t j = 0; j < q; ++j) {
    const double* bj = col(b, p, j);
    double s = 0;
    for (index_t k = 0; k < p; ++k) s += bj[k] * bj[k];
    sigma[static_cast<std::size_t>(j)] = std::sqrt(s);
  }
  std::vector<index_t> order(static_cast<std::size_t>(q));
  std::iota(order.begin(), order.end(), index_t{0});
  std::stable_sort(order.begin(), order.end(), [&](index_t x, index_t y) {
    return sigma[static_cast<std::size_t>(x)] > sigma[static_cast<std::size_t>(y)];
  });
  std::vector<double> sorted(static_cast<std::size_t>(q));
  for (index_t r = 0; r < q; ++r) sorted[static_cast<std::size_t>(r)] = sigma[static_cast<std::size_t>(order[static_cast<std::size_t>(r)])];
  for (index_t r = 0; r < rank; ++r) {
    const index_t j = order[static_cast<std::size_t>(r)];
    const double s = sigma[static_cast<std::size_t>(j)];
    const double* bj = col(b, p, j);
    const double* wj = col(w, q, j);
    // a = B (no transpose): u column = b_j (sigma u), v row = w_j. a = B^T: a = sum_j w_j b_j^T, so u column =
    // sigma w_j and v row = b_j / sigma (a zero singular value: zero row and column).
    for (index_t i = 0; i < m; ++i) u(i, r) = transposed ? s * wj[i] : bj[i];
    for (index_t k = 0; k < n; ++k) v(r, k) = transposed ? (s > 0 ? bj[k] / s : 0.0) : wj[k];
    index_t big = 0;
    for (index_t k = 1; k < n; ++k)
      if (std::abs(v(r, k)) > std::abs(v(r, big))) big = k;
    if (v(r, big) < 0) {
      for (index_t k = 0; k < n; ++k) v(r, k) = -v(r, k);
      for (index_t i = 0; i < m; ++i) u(i, r) = -u(i, r);
    }
  }
  return sorted;
}

/// Rows kept by prune_rows: rows - round((1 - keep) x rows), Python's rounding. keep in (0, 1].
inline index_t rows_kept(index_t rows, double keep) {
  MOECOMP_EXPECTS(keep > 0 && keep <= 1, "rows_kept: keep must be in (0, 1], got ", keep);
  return rows - static_cast<index_t>(round_half_even((1.0 - keep) * static_cast<double>(rows)));
}

/// Structured pruning (see above): out = a with all rows but the rows_kept(rows, keep) of largest l2 norm zeroed.
/// out may be a itself. Returns the kept rows in increasing order.
template <class T>
std::vector<index_t> prune_rows(const host_context& ctx, double keep, moecomp::detail::type_identity_t<matrix_view<const T>> a,
                                matrix_view<T> out) {
  constexpr const char* fn = "prune_rows";
  (void)ctx;
  MOECOMP_EXPECTS(out.rows() == a.rows() && out.cols() == a.cols(), fn, ": out must be ", a.rows(), " x ", a.cols(),
                  " like a, got ", out.rows(), " x ", out.cols());
  moecomp::detail::check_finite(fn, "a", a, 1);
  const index_t rows = a.rows(), kept = rows_kept(rows, keep);
  std::vector<double> norm(static_cast<std::size_t>(rows), 0.0);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < a.cols(); ++j) {
      const double x = convert_to<double>(a(i, j));
      norm[static_cast<std::size_t>(i)] += x * x;
    }
  std::vector<index_t> order(static_cast<std::size_t>(rows));
  std::iota(order.begin(), order.end(), index_t{0});
  std::stable_sort(order.begin(), order.end(), [&](index_t x, index_t y) {
    return norm[static_cast<std::size_t>(x)] > norm[static_cast<std::size_t>(y)];
  });
  std::vector<index_t> chosen(order.begin(), order.begin() + kept);
  std::sort(chosen.begin(), chosen.end());
  std::vector<char> keep_row(static_cast<std::size_t>(rows), 0);
  for (index_t i : chosen) keep_row[static_cast<std::size_t>(i)] = 1;
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < a.cols(); ++j) out(i, j) = keep_row[static_cast<std::size_t>(i)] ? a(i, j) : T{};
  return chosen;
}

}  // namespace sparse
MOECOMP_NAMESPACE_END
