#!/usr/bin/env python3
"""`moecomp cka` and `moecomp cka-matrix` checked against a numpy transcription of Kornblith et al.'s
reference formulas (gram_linear, gram_rbf, center_gram, cka, feature_space_linear_cka with its debiased
helper), written out below from the paper's published definitions.

* cka: linear, RBF (median heuristic with thresholds 1 and 0.5, and a fixed sigma), biased and debiased,
  both routes (feature, gram), features fewer and more than samples, float64 to 1e-10; the reported HSICs
  equal <H K H, H L H> / (n-1)^2 (biased) and Song's unbiased estimator written from its own formula
  (1/(n(n-3)) [tr(K~L~) + 1'K~1 1'L~1/((n-1)(n-2)) - 2/(n-2) 1'K~L~1], K~ the Gram with its diagonal zeroed).
* float32 inputs with a 1e4 offset, or scaled by 1e-6 / 1e6: the CKA of the clean float64 data to 1e-5.
* cka-matrix: the E x E matrix equals the pair-by-pair reference (float64 1e-10, float32 1e-5), both routes,
  linear and RBF, biased and debiased.
* The error contract: exit 2, one "moecomp: error:" line naming the problem, no output file: unequal sample
  counts, n < 4 with --unbiased, NaN, a 2-D array for cka-matrix, --sigma without --kernel rbf, a bad kernel.

Usage: test_cka_numpy.py PATH/TO/moecomp"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

(np,) = require("numpy")


# ---- Kornblith et al.'s reference formulas (transcribed) ----

def gram_linear(x):
    return x.dot(x.T)


def gram_rbf(x, threshold=1.0, sigma=None):
    dot_products = x.dot(x.T)
    sq_norms = np.diag(dot_products)
    sq_distances = -2 * dot_products + sq_norms[:, None] + sq_norms[None, :]
    if sigma is None:
        return np.exp(-sq_distances / (2 * threshold ** 2 * np.median(sq_distances)))
    return np.exp(-sq_distances / (2 * sigma ** 2))


def center_gram(gram, unbiased=False):
    gram = gram.copy()
    n = gram.shape[0]
    if unbiased:
        np.fill_diagonal(gram, 0)
        means = np.sum(gram, 0, dtype=np.float64) / (n - 2)
        means -= np.sum(means) / (2 * (n - 1))
        gram -= means[:, None]
        gram -= means[None, :]
        np.fill_diagonal(gram, 0)
    else:
        means = np.mean(gram, 0, dtype=np.float64)
        means -= np.mean(means) / 2
        gram -= means[:, None]
        gram -= means[None, :]
    return gram


def cka(gram_x, gram_y, debiased=False):
    gx, gy = center_gram(gram_x, debiased), center_gram(gram_y, debiased)
    return gx.ravel().dot(gy.ravel()) / (np.linalg.norm(gx) * np.linalg.norm(gy))


def _debiased_dot(xty, sum_sq_rows_x, sum_sq_rows_y, sq_norm_x, sq_norm_y, n):
    return xty - n / (n - 2.0) * sum_sq_rows_x.dot(sum_sq_rows_y) + sq_norm_x * sq_norm_y / ((n - 1) * (n - 2))


def feature_space_linear_cka(fx, fy, debiased=False):
    fx = fx - np.mean(fx, 0, keepdims=True)
    fy = fy - np.mean(fy, 0, keepdims=True)
    dot = np.linalg.norm(fx.T.dot(fy)) ** 2
    nx, ny = np.linalg.norm(fx.T.dot(fx)), np.linalg.norm(fy.T.dot(fy))
    if debiased:
        n = fx.shape[0]
        sx, sy = np.einsum("ij,ij->i", fx, fx), np.einsum("ij,ij->i", fy, fy)
        dot = _debiased_dot(dot, sx, sy, sx.sum(), sy.sum(), n)
        nx = np.sqrt(_debiased_dot(nx ** 2, sx, sx, sx.sum(), sx.sum(), n))
        ny = np.sqrt(_debiased_dot(ny ** 2, sy, sy, sy.sum(), sy.sum(), n))
    return dot / (nx * ny)


# ---- HSIC estimators from their own definitions ----

def hsic_biased(k, l):
    n = k.shape[0]
    h = np.eye(n) - np.ones((n, n)) / n
    return np.trace(h @ k @ h @ l) / (n - 1) ** 2


def hsic_unbiased(k, l):
    n = k.shape[0]
    kt, lt = k.copy(), l.copy()
    np.fill_diagonal(kt, 0)
    np.fill_diagonal(lt, 0)
    one = np.ones(n)
    return (np.trace(kt @ lt) + (one @ kt @ one) * (one @ lt @ one) / ((n - 1) * (n - 2))
            - 2.0 / (n - 2) * (one @ kt @ lt @ one)) / (n * (n - 3))


def reference(x, y, kernel, unbiased, threshold=1.0, sigma=None):
    if kernel == "linear":
        k, l = gram_linear(x), gram_linear(y)
    else:
        k, l = gram_rbf(x, threshold, sigma), gram_rbf(y, threshold, sigma)
    h = hsic_unbiased if unbiased else hsic_biased
    return cka(k, l, unbiased), h(k, l), h(k, k), h(l, l)


def rel(a, b):
    return abs(a - b) / max(1e-300, abs(b))


class Checker(ToolRunner):

    def cka_json(self, x, y, *args):
        np.save(self.path("x.npy"), x)
        np.save(self.path("y.npy"), y)
        r = self.run("cka", self.path("x.npy"), self.path("y.npy"), "--json", *args)
        if r.returncode != 0:
            return None, r.stderr.strip()
        return json.loads(r.stdout), ""

    def pairs(self, rng):
        for n, dx, dy in [(60, 12, 9), (48, 70, 90), (5, 3, 4)]:
            x = rng.standard_normal((n, dx))
            y = x[:, : min(dx, dy)] @ rng.standard_normal((min(dx, dy), dy)) + 0.7 * rng.standard_normal((n, dy))
            cases = [("linear", False, {}, []), ("linear", True, {}, ["--unbiased"]),
                     ("rbf", False, {}, ["--kernel", "rbf"]),
                     ("rbf", True, {"threshold": 0.5}, ["--kernel", "rbf", "--unbiased", "--threshold", "0.5"]),
                     ("rbf", False, {"sigma": 3.0}, ["--kernel", "rbf", "--sigma", "3"])]
            for kernel, unbiased, extra, args in cases:
                routes = [[]] if kernel == "rbf" else [[], ["--route", "feature"], ["--route", "gram"]]
                ref = reference(x, y, kernel, unbiased, **extra)
                for route in routes:
                    j, err = self.cka_json(x, y, *args, *route)
                    label = f"cka n={n} dx={dx} dy={dy} {' '.join(args + route) or 'linear'}"
                    if j is None:
                        self.check(label, False, err)
                        continue
                    errs = [rel(j["cka"], ref[0]), rel(j["hsic_xy"], ref[1]), rel(j["hsic_xx"], ref[2]),
                            rel(j["hsic_yy"], ref[3])]
                    self.check(label, max(errs) <= 1e-10 and j["defined"],
                               f"cka {j['cka']:.15f} vs {ref[0]:.15f}, worst rel {max(errs):.1e} ({j['route']})")
        # Feature-space reference formula itself (Kornblith's feature_space_linear_cka) against the tool.
        x, y = rng.standard_normal((80, 6)), rng.standard_normal((80, 5))
        for unbiased in (False, True):
            j, _ = self.cka_json(x, y, *(["--unbiased"] if unbiased else []))
            ref = feature_space_linear_cka(x, y, unbiased)
            self.check(f"cka vs feature_space_linear_cka debiased={unbiased}", j and rel(j["cka"], ref) <= 1e-10,
                       f"{j and j['cka']} vs {ref}")

    def stability(self, rng):
        clean = np.round(rng.standard_normal((200, 16)) * 64) / 64  # exactly representable after a 1e4 shift
        other = np.round((clean[:, :8] @ rng.standard_normal((8, 12)) + rng.standard_normal((200, 12))) * 64) / 64
        for unbiased in (False, True):
            ref = cka(gram_linear(clean), gram_linear(other), unbiased)
            for name, tx in [("offset 1e4", lambda v: v + 1e4), ("scale 1e-6", lambda v: v * 1e-6),
                             ("scale 1e6", lambda v: v * 1e6)]:
                j, err = self.cka_json(tx(clean).astype(np.float32), tx(other).astype(np.float32),
                                       *(["--unbiased"] if unbiased else []))
                ok = j is not None and np.isfinite(j["cka"]) and abs(j["cka"] - ref) <= 1e-5
                self.check(f"float32 {name} debiased={unbiased}", ok,
                           f"{j and j['cka']} vs clean {ref:.9f}" if j else err)

    def matrix(self, rng):
        for e, n, d, dtype, tol in [(5, 40, 8, np.float64, 1e-10), (4, 30, 50, np.float64, 1e-10),
                                    (6, 64, 16, np.float32, 1e-5)]:
            base = rng.standard_normal((n, d))
            f = np.stack([base @ rng.standard_normal((d, d)) * (0.5 + a) + rng.standard_normal((n, d)) * a
                          for a in range(e)]).astype(dtype)
            fd = f.astype(np.float64)
            for args, kernel, unbiased in [([], "linear", False), (["--unbiased"], "linear", True),
                                           (["--kernel", "rbf"], "rbf", False),
                                           (["--kernel", "rbf", "--unbiased"], "rbf", True)]:
                routes = [[]] if kernel == "rbf" else [["--route", "feature"], ["--route", "gram"]]
                ref = np.array([[reference(fd[a], fd[b], kernel, unbiased)[0] for b in range(e)] for a in range(e)])
                for route in routes:
                    np.save(self.path("f.npy"), f)
                    out = self.path("s.npy")
                    r = self.run("cka-matrix", self.path("f.npy"), "-o", out, "--json", *args, *route)
                    label = f"cka-matrix E={e} n={n} d={d} {np.dtype(dtype).name} {' '.join(args + route) or 'linear'}"
                    if r.returncode != 0:
                        self.check(label, False, r.stderr.strip())
                        continue
                    s = np.load(out)
                    worst = np.max(np.abs(s - ref))
                    self.check(label, s.dtype == np.float64 and s.shape == (e, e) and worst <= tol
                               and np.array_equal(s, s.T), f"max |diff| {worst:.1e} ({json.loads(r.stdout)['route']})")

    def errors(self, rng):
        x = rng.standard_normal((10, 3))
        np.save(self.path("x.npy"), x)
        np.save(self.path("y9.npy"), rng.standard_normal((9, 3)))
        np.save(self.path("x3.npy"), x[:3])
        bad = x.copy()
        bad[2, 1] = np.nan
        np.save(self.path("nan.npy"), bad)
        np.save(self.path("f3.npy"), rng.standard_normal((2, 10, 3)))
        self.expect_error("unequal samples", ["cka", self.path("x.npy"), self.path("y9.npy")], "rows", "10", "9")
        self.expect_error("n < 4 unbiased", ["cka", self.path("x3.npy"), self.path("x3.npy"), "--unbiased"],
                          "at least 4 samples")
        self.expect_error("NaN", ["cka", self.path("nan.npy"), self.path("x.npy")], "nan.npy", "(2, 1)")
        self.expect_error("2-D for cka-matrix", ["cka-matrix", self.path("x.npy")], "3-D", "(10, 3)")
        self.expect_error("sigma without rbf", ["cka", self.path("x.npy"), self.path("x.npy"), "--sigma", "1"],
                          "--sigma", "rbf")
        self.expect_error("bad kernel", ["cka", self.path("x.npy"), self.path("x.npy"), "--kernel", "poly"],
                          "--kernel", "poly")
        self.expect_error("feature route with rbf",
                          ["cka-matrix", self.path("f3.npy"), "--kernel", "rbf", "--route", "feature"], "--route")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    rng = np.random.default_rng(20261124)
    with tempfile.TemporaryDirectory(prefix="moecomp-cka-") as tmp:
        c = Checker(sys.argv[1], tmp)
        c.pairs(rng)
        c.stability(rng)
        c.matrix(rng)
        c.errors(rng)
    print(f"{c.checks - c.failures} of {c.checks} checks passed")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
