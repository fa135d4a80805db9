#pragma once
// HSIC and CKA on the host, behind <moecomp/similarity/cka.hpp>: the products P_ab = <K~_a, K~_b>_F of E
// inputs on one set of n samples, from which every CKA and HSIC follows.
//
// Stability: each input is centred column by column (means in double) and scaled by the Frobenius norm of
// its centred features before any product, so the products are O(1) whatever the features' offset and
// scale; the scale comes back in double only in the reported HSIC. H K H is never formed by products: a
// Gram is centred by its row means in O(n^2). Inner products of Grams are direct sums in double (single
// pairs) or, for the all-pairs matrix, GEMMs over tiles of the vectorised Grams accumulated in double.
//
// Layout: the Gram route keeps each input's Gram as its upper-triangle tiles (256 x 256, ti <= tj); an
// off-diagonal tile stands for itself and its transpose, so it counts twice in every inner product.
// Determinism: every GEMM is one single-threaded call on a fixed tile, every sum runs in a fixed order,
// so results are bit-identical at any thread count.
#include <moecomp/core/detail/internal_header.hpp>
#include <moecomp/core/context.hpp>
#include <moecomp/core/views.hpp>
#include <moecomp/similarity/cka_types.hpp>
#include <moecomp/similarity/detail/cka_common.hpp>
#include <moecomp/similarity/detail/cka_rules.hpp>
#include <moecomp/core/detail/gemm.hpp>
#include <moecomp/core/detail/parallel.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

MOECOMP_NAMESPACE_BEGIN
namespace similarity {
namespace detail {

using moecomp::detail::host_workspace;
using moecomp::detail::parallel_for;

/// Tile edge of the Gram route and of the feature route's output blocks.
inline constexpr index_t cka_tile = 256;

/// One upper-triangle tile of an n x n Gram: rows [row0, row0 + rows), columns [col0, col0 + cols).
struct gram_tile {
  index_t row0, rows, col0, cols;
  std::size_t offset;  // into one input's tile storage
  double weight() const noexcept { return row0 == col0 ? 1.0 : 2.0; }
};

inline std::vector<gram_tile> upper_tiles(index_t n, std::size_t& total) {
  std::vector<gram_tile> tiles;
  total = 0;
  for (index_t i = 0; i < n; i += cka_tile)
    for (index_t j = i; j < n; j += cka_tile) {
      const gram_tile t{i, std::min(cka_tile, n - i), j, std::min(cka_tile, n - j), total};
      tiles.push_back(t);
      total += static_cast<std::size_t>(t.rows * t.cols);
    }
  return tiles;
}

/// One input (n x d of T): where it is, and what preparing it found.
template <class T>
struct cka_input {
  matrix_view<const T> x;
  double scale = 0;            // Frobenius norm of the centred features
  double sigma_scaled = 0;     // RBF: sigma in units of the scaled features
  cka_status status = cka_status::ok;
};

/// The products of E inputs of n samples, in work type W (double for single pairs; T for the matrix).
template <class T, class W>
class cka_products {
 public:
  cka_products(const host_context& ctx, const cka_params& params, std::vector<cka_input<T>> inputs, cka_route route,
               bool products_by_gemm)
      : ctx_(ctx),
        params_(params),
        inputs_(std::move(inputs)),
        route_(route),
        by_gemm_(products_by_gemm),
        n_(inputs_.front().x.rows()),
        e_(static_cast<index_t>(inputs_.size())),
        threads_(std::max(1, ctx.threads())) {
    offsets_.push_back(0);
    for (const auto& in : inputs_) offsets_.push_back(offsets_.back() + static_cast<std::size_t>(n_ * in.x.cols()));
  }

  /// P (e x e, row-major, symmetric) in units of the scaled inputs.
  std::vector<double> compute() {
    if (route_ == cka_route::gram && e_ >= 2 * threads_) return streamed_gram_products();
    host_workspace<W> features(ctx_, offsets_.back());
    host_workspace<double> row_norms(ctx_, static_cast<std::size_t>(e_ * n_));
    prepare(features.data(), row_norms.data());
    if (route_ == cka_route::feature) return feature_products(features.data(), row_norms.data());
    return gram_products(features.data(), row_norms.data());
  }

  const std::vector<cka_input<T>>& inputs() const noexcept { return inputs_; }

 private:
  /// Centres each input's columns (means in double, rows in order), scales by the Frobenius norm, and stores
  /// it in W: row-major for the Gram route, transposed (d x n) for the feature route. Row norms of the
  /// scaled features in double.
  void prepare(W* features, double* row_norms) {
    parallel_for(e_, threads_, [&](index_t e, int) {
      prepare_one(e, features + offsets_[static_cast<std::size_t>(e)], row_norms + e * n_, route_ == cka_route::feature);
    });
  }

  /// Input e centred, scaled and stored in `out` (row-major, or transposed d x n), its scaled row norms in
  /// `norms`.
  void prepare_one(index_t e, W* out, double* norms, bool transposed) {
    cka_input<T>& in = inputs_[static_cast<std::size_t>(e)];
    const index_t d = in.x.cols();
    std::vector<double> mean(static_cast<std::size_t>(d), 0.0);
    for (index_t i = 0; i < n_; ++i) {
      const T* r = in.x.row_ptr(i);
      for (index_t c = 0; c < d; ++c) mean[static_cast<std::size_t>(c)] += static_cast<double>(r[c]);
    }
    for (double& m : mean) m /= static_cast<double>(n_);
    double squares = 0;
    for (index_t i = 0; i < n_; ++i) {
      const T* r = in.x.row_ptr(i);
      double s = 0;
      for (index_t c = 0; c < d; ++c) {
        const double v = static_cast<double>(r[c]) - mean[static_cast<std::size_t>(c)];
        s += v * v;
      }
      norms[i] = s;
      squares += s;
    }
    in.scale = std::sqrt(squares);
    if (!(in.scale > 0)) in.status = cka_status::constant_input;
    const double inv = in.scale > 0 ? 1.0 / in.scale : 0.0;
    const double inv2 = inv * inv;
    for (index_t i = 0; i < n_; ++i) {
      const T* r = in.x.row_ptr(i);
      norms[i] *= inv2;
      for (index_t c = 0; c < d; ++c) {
        const W v = static_cast<W>((static_cast<double>(r[c]) - mean[static_cast<std::size_t>(c)]) * inv);
        if (transposed) out[c * n_ + i] = v;
        else out[i * d + c] = v;
      }
    }
  }

  /// The gram route with many inputs: each thread prepares one input at a time into its own scratch and
  /// forms that input's Gram tiles at once (single-threaded GEMMs), so only threads x n x d elements of
  /// prepared features exist at any time instead of E x n x d.
  std::vector<double> streamed_gram_products() {
    std::size_t total = 0;
    const std::vector<gram_tile> tiles = upper_tiles(n_, total);
    host_workspace<W> grams(ctx_, total * static_cast<std::size_t>(e_));
    index_t max_d = 0;
    for (const auto& in : inputs_) max_d = std::max(max_d, in.x.cols());
    host_workspace<W> features(ctx_, static_cast<std::size_t>(threads_) * static_cast<std::size_t>(n_ * max_d));
    host_workspace<double> row_norms(ctx_, static_cast<std::size_t>(threads_ * n_));
    parallel_for(e_, threads_, [&](index_t e, int thread) {
      W* x = features.data() + static_cast<std::size_t>(thread) * static_cast<std::size_t>(n_ * max_d);
      double* norms = row_norms.data() + thread * n_;
      prepare_one(e, x, norms, false);
      W* g = grams.data() + static_cast<std::size_t>(e) * total;
      for (const gram_tile& t : tiles) gram_tile_of(e, t, x, norms, g + t.offset);
      finish_gram(e, tiles, g);
    });
    return gram_inner_products(tiles, total, grams.data());
  }

  // ---- the feature route (linear kernel) ----

  /// F_ab = ||X_a^T X_b||_F^2 from 256 x 256 output blocks of X_a^T X_b (one GEMM each over the n samples);
  /// debiased with Kornblith's correction.
  std::vector<double> feature_products(const W* features, const double* row_norms) {
    struct task {
      index_t a, b, block_row, block_col;
    };
    std::vector<task> tasks;
    std::vector<std::size_t> first_task;  // per pair (a <= b), in pair order
    for (index_t a = 0; a < e_; ++a)
      for (index_t b = a; b < e_; ++b) {
        first_task.push_back(tasks.size());
        for (index_t r = 0; r < inputs_[static_cast<std::size_t>(a)].x.cols(); r += cka_tile)
          for (index_t c = 0; c < inputs_[static_cast<std::size_t>(b)].x.cols(); c += cka_tile) tasks.push_back({a, b, r, c});
      }
    first_task.push_back(tasks.size());
    std::vector<double> partial(tasks.size());
    host_workspace<W> scratch(ctx_, static_cast<std::size_t>(threads_ * cka_tile * cka_tile));
    parallel_for(static_cast<index_t>(tasks.size()), threads_, [&](index_t t, int thread) {
      const task& k = tasks[static_cast<std::size_t>(t)];
      const index_t da = inputs_[static_cast<std::size_t>(k.a)].x.cols(), db = inputs_[static_cast<std::size_t>(k.b)].x.cols();
      const index_t rows = std::min(cka_tile, da - k.block_row), cols = std::min(cka_tile, db - k.block_col);
      W* block = scratch.data() + static_cast<std::size_t>(thread) * static_cast<std::size_t>(cka_tile * cka_tile);
      const W* xa = features + offsets_[static_cast<std::size_t>(k.a)] + k.block_row * n_;
      const W* xb = features + offsets_[static_cast<std::size_t>(k.b)] + k.block_col * n_;
      moecomp::detail::gemm_abt<W>(W(1), xa, n_, xb, n_, rows, cols, n_, block, cols);
      double s = 0;
      for (index_t q = 0; q < rows * cols; ++q) s += static_cast<double>(block[q]) * static_cast<double>(block[q]);
      partial[static_cast<std::size_t>(t)] = s;
    });
    std::vector<double> p(static_cast<std::size_t>(e_ * e_));
    std::size_t pair = 0;
    const double n = static_cast<double>(n_);
    for (index_t a = 0; a < e_; ++a)
      for (index_t b = a; b < e_; ++b, ++pair) {
        double f = 0;
        for (std::size_t t = first_task[pair]; t < first_task[pair + 1]; ++t) f += partial[t];
        if (params_.unbiased) {
          const double* ra = row_norms + a * n_;
          const double* rb = row_norms + b * n_;
          double dot = 0, sum_a = 0, sum_b = 0;
          for (index_t i = 0; i < n_; ++i) {
            dot += ra[i] * rb[i];
            sum_a += ra[i];
            sum_b += rb[i];
          }
          f = f - n / (n - 2) * dot + sum_a * sum_b / ((n - 1) * (n - 2));
        }
        p[static_cast<std::size_t>(a * e_ + b)] = p[static_cast<std::size_t>(b * e_ + a)] = f;
      }
    return p;
  }

  // ---- the Gram route ----

  std::vector<double> gram_products(const W* features, const double* row_norms) {
    std::size_t total = 0;
    const std::vector<gram_tile> tiles = upper_tiles(n_, total);
    const auto tile_count = static_cast<index_t>(tiles.size());
    host_workspace<W> grams(ctx_, total * static_cast<std::size_t>(e_));
    parallel_for(e_ * tile_count, threads_, [&](index_t task, int) {
      const index_t e = task / tile_count;
      const gram_tile& t = tiles[static_cast<std::size_t>(task % tile_count)];
      gram_tile_of(e, t, features + offsets_[static_cast<std::size_t>(e)], row_norms + e * n_,
                   grams.data() + static_cast<std::size_t>(e) * total + t.offset);
    });
    parallel_for(e_, threads_, [&](index_t e, int) {
      finish_gram(e, tiles, grams.data() + static_cast<std::size_t>(e) * total);
    });
    return gram_inner_products(tiles, total, grams.data());
  }

  /// One tile of input e's Gram (one GEMM); for RBF, turned into squared distances (diagonal 0).
  void gram_tile_of(index_t e, const gram_tile& t, const W* x, const double* norms, W* out) const {
    const index_t d = inputs_[static_cast<std::size_t>(e)].x.cols();
    moecomp::detail::gemm_abt<W>(W(1), x + t.row0 * d, d, x + t.col0 * d, d, t.rows, t.cols, d, out, t.cols);
    if (params_.kernel != cka_kernel::rbf) return;
    for (index_t r = 0; r < t.rows; ++r)
      for (index_t c = 0; c < t.cols; ++c) {
        const index_t i = t.row0 + r, j = t.col0 + c;
        out[r * t.cols + c] = static_cast<W>(
            squared_distance_from_gram(norms[i], norms[j], static_cast<double>(out[r * t.cols + c]), i == j));
      }
  }

  /// After all of input e's tiles: the RBF kernel values, then the centring.
  void finish_gram(index_t e, const std::vector<gram_tile>& tiles, W* g) {
    if (params_.kernel == cka_kernel::rbf) rbf_kernel(inputs_[static_cast<std::size_t>(e)], tiles, g);
    centre_gram(tiles, g);
  }

  /// P_ab = sum over tiles of weight x <tile_a, tile_b>: by GEMM over the inputs' copies of each tile
  /// (the all-pairs matrix) or by direct double sums (single pairs).
  std::vector<double> gram_inner_products(const std::vector<gram_tile>& tiles, std::size_t total, const W* grams) {
    const auto tile_count = static_cast<index_t>(tiles.size());
    std::vector<double> p(static_cast<std::size_t>(e_ * e_), 0.0);
    if (by_gemm_) {
      // Per tile, one GEMM over the inputs' copies of that tile: the E x E inner products, weighted.
      std::vector<double> per_tile(static_cast<std::size_t>(tile_count * e_ * e_));
      host_workspace<W> scratch(ctx_, static_cast<std::size_t>(threads_ * e_ * e_));
      parallel_for(tile_count, threads_, [&](index_t ti, int thread) {
        const gram_tile& t = tiles[static_cast<std::size_t>(ti)];
        W* out = scratch.data() + static_cast<std::size_t>(thread) * static_cast<std::size_t>(e_ * e_);
        const W* a = grams + t.offset;
        moecomp::detail::gemm_abt<W>(W(1), a, static_cast<index_t>(total), a, static_cast<index_t>(total), e_, e_,
                                     t.rows * t.cols, out, e_);
        for (index_t q = 0; q < e_ * e_; ++q)
          per_tile[static_cast<std::size_t>(ti * e_ * e_ + q)] = t.weight() * static_cast<double>(out[q]);
      });
      for (index_t ti = 0; ti < tile_count; ++ti)
        for (index_t q = 0; q < e_ * e_; ++q) p[static_cast<std::size_t>(q)] += per_tile[static_cast<std::size_t>(ti * e_ * e_ + q)];
      for (index_t a = 0; a < e_; ++a)  // the GEMM's two triangles can differ in the last bit: keep the upper
        for (index_t b = 0; b < a; ++b) p[static_cast<std::size_t>(a * e_ + b)] = p[static_cast<std::size_t>(b * e_ + a)];
      return p;
    }
    for (index_t a = 0; a < e_; ++a)
      for (index_t b = a; b < e_; ++b) {
        const W* ga = grams + static_cast<std::size_t>(a) * total;
        const W* gb = grams + static_cast<std::size_t>(b) * total;
        double s = 0;
        for (const gram_tile& t : tiles) {
          double ts = 0;
          for (std::size_t q = t.offset; q < t.offset + static_cast<std::size_t>(t.rows * t.cols); ++q)
            ts += static_cast<double>(ga[q]) * static_cast<double>(gb[q]);
          s += t.weight() * ts;
        }
        p[static_cast<std::size_t>(a * e_ + b)] = p[static_cast<std::size_t>(b * e_ + a)] = s;
      }
    return p;
  }

  /// The RBF kernel from the squared distances in the tiles: the bandwidth (explicit, or the median
  /// heuristic over the n^2 distances, zero diagonal included), then exp(-D / (2 sigma^2)).
  void rbf_kernel(cka_input<T>& in, const std::vector<gram_tile>& tiles, W* g) const {
    double sigma2 = 0;
    if (params_.sigma > 0) {
      const double s = params_.sigma / (in.scale > 0 ? in.scale : 1.0);
      sigma2 = s * s;
    } else {
      sigma2 = params_.threshold * params_.threshold * median_squared_distance(tiles, g);
    }
    in.sigma_scaled = std::sqrt(sigma2);
    if (!(sigma2 > 0)) {
      if (in.status == cka_status::ok) in.status = cka_status::zero_median;
      for (const gram_tile& t : tiles)
        std::fill(g + t.offset, g + t.offset + static_cast<std::size_t>(t.rows * t.cols), W(0));
      return;
    }
    const double factor = -1.0 / (2.0 * sigma2);
    for (const gram_tile& t : tiles)
      for (std::size_t q = t.offset; q < t.offset + static_cast<std::size_t>(t.rows * t.cols); ++q)
        g[q] = static_cast<W>(rbf_value(static_cast<double>(g[q]), factor));
  }

  /// numpy's median of the n x n squared-distance matrix: the n zeros of the diagonal and each off-diagonal
  /// distance twice; for an even count the mean of the two middle values.
  double median_squared_distance(const std::vector<gram_tile>& tiles, const W* g) const {
    std::vector<double> off;
    off.reserve(static_cast<std::size_t>(n_ * (n_ - 1) / 2));
    for (const gram_tile& t : tiles)
      for (index_t r = 0; r < t.rows; ++r)
        for (index_t c = 0; c < t.cols; ++c)
          if (t.row0 + r < t.col0 + c) off.push_back(static_cast<double>(g[t.offset + static_cast<std::size_t>(r * t.cols + c)]));
    const std::size_t count = static_cast<std::size_t>(n_) * static_cast<std::size_t>(n_);
    // Rank q of the multiset: the diagonal's zeros first (every distance is >= 0), then off[(q - n) / 2].
    auto at_rank = [&](std::size_t q) -> double {
      if (q < static_cast<std::size_t>(n_)) {
        // A zero, unless fewer off-diagonal values are zero; zeros sort first either way.
        return 0.0;
      }
      const std::size_t k = (q - static_cast<std::size_t>(n_)) / 2;
      std::nth_element(off.begin(), off.begin() + static_cast<std::ptrdiff_t>(k), off.end());
      return off[k];
    };
    if (count % 2 == 1) return at_rank(count / 2);
    return 0.5 * (at_rank(count / 2 - 1) + at_rank(count / 2));
  }

  /// Centres one Gram held as upper tiles: biased K - m_i - m_j + mean(m) (H K H), or Kornblith's unbiased
  /// centring (diagonal zeroed, means over n - 2, corrected by their sum over 2 (n - 1), diagonal zeroed
  /// again). Row sums in double, tiles in order.
  void centre_gram(const std::vector<gram_tile>& tiles, W* g) const {
    std::vector<double> rows(static_cast<std::size_t>(n_), 0.0);
    const bool unbiased = params_.unbiased;
    for (const gram_tile& t : tiles)
      for (index_t r = 0; r < t.rows; ++r)
        for (index_t c = 0; c < t.cols; ++c) {
          const index_t i = t.row0 + r, j = t.col0 + c;
          if (i > j || (unbiased && i == j)) continue;  // the diagonal tiles' lower halves mirror their upper
          const double v = static_cast<double>(g[t.offset + static_cast<std::size_t>(r * t.cols + c)]);
          rows[static_cast<std::size_t>(i)] += v;
          if (i != j) rows[static_cast<std::size_t>(j)] += v;
        }
    std::vector<double> m(static_cast<std::size_t>(n_));
    double total = 0;
    for (index_t i = 0; i < n_; ++i) {
      m[static_cast<std::size_t>(i)] = gram_row_mean(rows[static_cast<std::size_t>(i)], n_, unbiased);
      total += m[static_cast<std::size_t>(i)];
    }
    const double shift = gram_mean_shift(total, n_, unbiased);
    for (double& v : m) v -= shift;
    for (const gram_tile& t : tiles)
      for (index_t r = 0; r < t.rows; ++r)
        for (index_t c = 0; c < t.cols; ++c) {
          const index_t i = t.row0 + r, j = t.col0 + c;
          W& v = g[t.offset + static_cast<std::size_t>(r * t.cols + c)];
          v = static_cast<W>(centred_gram_entry(static_cast<double>(v), m[static_cast<std::size_t>(i)],
                                                m[static_cast<std::size_t>(j)], i == j, unbiased));
        }
  }

  const host_context& ctx_;
  cka_params params_;
  std::vector<cka_input<T>> inputs_;
  cka_route route_;
  bool by_gemm_;
  index_t n_, e_;
  int threads_;
  std::vector<std::size_t> offsets_;
};

/// One pair, in double.
template <class T>
cka_result cka_pair(const host_context& ctx, const cka_params& params, matrix_view<const T> x, matrix_view<const T> y) {
  const index_t n = x.rows();
  cka_result result;
  result.route = resolved_cka_route(params, n, x.cols(), y.cols());
  cka_products<T, double> products(ctx, params, {cka_input<T>{x}, cka_input<T>{y}}, result.route, false);
  const std::vector<double> p = products.compute();
  const auto& in = products.inputs();
  result.hsic_xy = hsic_in_units(params, n, p[1], in[0].scale, in[1].scale);
  result.hsic_xx = hsic_in_units(params, n, p[0], in[0].scale, in[0].scale);
  result.hsic_yy = hsic_in_units(params, n, p[3], in[1].scale, in[1].scale);
  result.cka = cka_from_products<double>(p[1], p[0], p[3], in[0].status, in[1].status, result.status);
  if (params.kernel == cka_kernel::rbf) {
    result.sigma_x = in[0].sigma_scaled * in[0].scale;
    result.sigma_y = in[1].sigma_scaled * in[1].scale;
  }
  return result;
}

/// The all-pairs matrix of a stack, in T (the Grams by GEMM tiles, their products by GEMM over tiles).
template <class T>
cka_matrix_result cka_all_pairs(const host_context& ctx, const cka_params& params, matrix_stack_view<const T> features,
                                matrix_view<double> out) {
  const index_t e = features.count(), n = features.rows(), d = features.cols();
  cka_matrix_result result;
  result.route = resolved_cka_matrix_route(params, e, n, d);
  std::vector<cka_input<T>> inputs;
  for (index_t a = 0; a < e; ++a) inputs.push_back(cka_input<T>{features.matrix(a)});
  cka_products<T, T> products(ctx, params, std::move(inputs), result.route, true);
  const std::vector<double> p = products.compute();
  const auto& in = products.inputs();
  for (index_t a = 0; a < e; ++a)
    for (index_t b = a; b < e; ++b) {
      cka_status status = cka_status::ok;
      const double v = cka_from_products<T>(p[static_cast<std::size_t>(a * e + b)], p[static_cast<std::size_t>(a * e + a)],
                                         p[static_cast<std::size_t>(b * e + b)], in[static_cast<std::size_t>(a)].status,
                                         in[static_cast<std::size_t>(b)].status, status);
      if (status != cka_status::ok && result.undefined_pairs++ == 0) result.first_undefined = status;
      out(a, b) = out(b, a) = v;
    }
  return result;
}

}  // namespace detail
}  // namespace similarity
MOECOMP_NAMESPACE_END
