#!/usr/bin/env python3
"""`moecomp align` against numpy costs plus scipy.optimize.linear_sum_assignment.

* --objective weights: the total sum_i ||A_i - B_P[i]||^2 of the tool's P equals scipy's optimum on
  cdist(A, B, 'sqeuclidean') to 1e-9 relative in float64 (square and rectangular, n < m), and is within 1e-5 of
  it from float32 input (the tool solves the float32-rounded costs exactly).
* --objective inner: the same for the maximised total sum_i <A_i, B_P[i]>.
* --objective correlation: activations (tokens x n); the total of Pearson correlations (np.corrcoef) equals
  scipy's maximum; with --inputs X the activations silu(X W1^T) * (X W3^T) (gated design rows, width 3d) or
  relu(X W1^T) (plain, 2d) are computed here in float64 first.
* A planted permutation (B = A[Q] + noise) gives P = argsort(Q) exactly: B[P] is B in A's order.
* --json's cost is the objective at the tool's P; P is int64 of length n, a valid assignment.
* Bad input: exit 2, one "moecomp: error:" line naming the problem, no output file.

Usage: test_align_scipy.py PATH/TO/moecomp"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

np, optimize, spatial = require("numpy", "scipy.optimize", "scipy.spatial")


def silu(v):
    return v / (1.0 + np.exp(-v))


class Checker(ToolRunner):

    def align(self, a, b, *flags, x=None):
        pa, pb, out = self.path("a.npy"), self.path("b.npy"), self.path("p.npy")
        np.save(pa, a)
        np.save(pb, b)
        args = [pa, pb, "-o", out, "--json", *flags]
        if x is not None:
            np.save(self.path("x.npy"), x)
            args += ["--inputs", self.path("x.npy")]
        if os.path.exists(out):
            os.remove(out)
        r = self.run("align", *args)
        if r.returncode != 0:
            raise RuntimeError(f"moecomp align {flags} failed: {r.stderr.strip()}")
        return np.load(out), json.loads(r.stdout)

    def compare(self, label, objective, a, b, x=None, rtol=1e-9, activation="silu"):
        """The tool's total against scipy's optimum under the objective; the JSON cost against the total."""
        flags = ["--objective", objective] + (["--activation", activation] if x is not None else [])
        p, summary = self.align(a, b, *flags, x=x)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        if objective == "weights":
            cost, maximize = spatial.distance.cdist(a64, b64, "sqeuclidean"), False
        elif objective == "inner":
            cost, maximize = a64 @ b64.T, True
        else:
            if x is not None:  # design rows -> activations
                x64, d = x.astype(np.float64), x.shape[1]
                acts = []
                for rows in (a64, b64):
                    pre = x64 @ rows[:, :d].T
                    if rows.shape[1] == 3 * d:
                        acts.append(silu(pre) * (x64 @ rows[:, d:2 * d].T))
                    else:
                        acts.append(np.maximum(pre, 0.0))
                a64, b64 = acts
            n = a64.shape[1]
            cost, maximize = np.corrcoef(a64.T, b64.T)[:n, n:], True
        n = cost.shape[0]
        rows, cols = optimize.linear_sum_assignment(cost, maximize=maximize)
        want = cost[rows, cols].sum()
        if p.dtype != np.int64 or p.shape != (n,) or len(set(p.tolist())) != n or p.min() < 0 or p.max() >= cost.shape[1]:
            self.check(label, False, f"not an assignment: dtype {p.dtype} shape {p.shape}")
            return p
        got = cost[np.arange(n), p].sum()
        scale = max(abs(want), 1.0)
        self.check(label, abs(got - want) <= rtol * scale and abs(summary["cost"] - got) <= max(rtol, 1e-9) * scale,
                   f"total {got:.12g}, scipy {want:.12g}, json {summary['cost']:.12g}")
        return p


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    rng = np.random.default_rng(20261126)
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(sys.argv[1], tmp)
        for n, m, f in [(40, 40, 24), (30, 45, 16), (120, 120, 64)]:
            a, b = rng.standard_normal((n, f)), rng.standard_normal((m, f))
            c.compare(f"weights {n}x{m} f={f} float64", "weights", a, b)
            c.compare(f"inner {n}x{m} f={f} float64", "inner", a, b)
            c.compare(f"weights {n}x{m} f={f} float32", "weights", a.astype(np.float32), b.astype(np.float32), rtol=1e-5)
            c.compare(f"inner {n}x{m} f={f} float32", "inner", a.astype(np.float32), b.astype(np.float32), rtol=1e-5)
        for tokens, n, m in [(64, 20, 20), (300, 50, 70)]:
            ha, hb = rng.standard_normal((tokens, n)), rng.standard_normal((tokens, m))
            c.compare(f"correlation activations {tokens} tokens {n}x{m}", "correlation", ha, hb)
        # Design rows with inputs: gated (3d) and plain (2d, relu).
        d, d_ff = 12, 32
        x = rng.standard_normal((200, d))
        for width, act in [(3 * d, "silu"), (2 * d, "relu")]:
            a, b = rng.standard_normal((d_ff, width)) / 3, rng.standard_normal((d_ff, width)) / 3
            c.compare(f"correlation from inputs width {width} {act}", "correlation", a, b, x=x, activation=act)

        # Planted permutations: exact recovery by every objective.
        a = rng.standard_normal((64, 48))
        q = rng.permutation(64)
        b = a[q] + 0.01 * rng.standard_normal((64, 48))
        for objective in ("weights", "inner"):
            p = c.compare(f"planted {objective}", objective, a, b)
            c.check(f"planted {objective} recovered", np.array_equal(p, np.argsort(q)), "P = argsort(Q)")
        h = rng.standard_normal((500, 64))
        p = c.compare("planted correlation", "correlation", h, h[:, q] + 0.05 * rng.standard_normal((500, 64)))
        c.check("planted correlation recovered", np.array_equal(p, np.argsort(q)), "P = argsort(Q)")

        # Bad input.
        def save(name, array):
            np.save(c.path(name), array)
            return c.path(name)
        a1, a2 = save("e1.npy", rng.standard_normal((10, 6))), save("e2.npy", rng.standard_normal((10, 5)))
        few = save("few.npy", rng.standard_normal((8, 6)))
        vec = save("vec.npy", rng.standard_normal(6))
        nan = rng.standard_normal((10, 6))
        nan[3, 2] = np.nan
        bad = save("nan.npy", nan)
        x5 = save("x5.npy", rng.standard_normal((20, 5)))
        c.expect_error("columns differ", ["align", a1, a2], "b must have 6 columns like a")
        c.expect_error("B has fewer rows", ["align", a1, few], "b must have at least a's 10 rows")
        c.expect_error("1-D input", ["align", a1, vec], "vec.npy")
        c.expect_error("non-finite", ["align", a1, bad], "nan.npy", "finite")
        c.expect_error("unknown objective", ["align", a1, a1, "--objective", "cosine"],
                       "expected weights, inner or correlation")
        c.expect_error("inputs without correlation", ["align", a1, a1, "--inputs", x5], "--inputs")
        c.expect_error("design width not 3d or 2d", ["align", a1, a1, "--objective", "correlation", "--inputs", x5],
                       "3d", "got 6")
        one = save("one.npy", rng.standard_normal((1, 6)))
        c.expect_error("one token", ["align", one, one, "--objective", "correlation"], "at least 2 tokens")
        print(f"{c.checks - c.failures} of {c.checks} checks passed")
        return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
