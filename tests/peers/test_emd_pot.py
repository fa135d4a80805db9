#!/usr/bin/env python3
"""`moecomp emd` against POT's ot.emd / ot.emd2.

* Random problems, square and rectangular (n, m up to 300), random masses, masses with zeros, uniform masses,
  small-integer costs (heavily degenerate), float32 input: the cost equals ot.emd2's to 1e-9 relative and the
  plan (n x m float64) is feasible: marginals to 1e-12 relative, nonnegative. Plans may differ from POT's
  where the optimum is not unique, so they are not compared entry by entry.
* --sparse gives the same plan as a k x 3 list; --duals writes centred duals (u + v <= M, cost = <a,u> + <b,v>).
* --max-iter: a low limit reports "iteration_limit", exit 0, a warning line, a feasible plan.
* The JSON summary has cost, iterations, status, seconds.
* The error contract: exit 2, one "moecomp: error:" line naming the argument, no output file, an existing
  output untouched (unequal masses, negative mass, NaN cost, shape mismatch, missing file, infeasible).

Usage: test_emd_pot.py PATH/TO/moecomp"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

np, ot = require("numpy", "ot")


class Checker(ToolRunner):

    def ok(self, label, good, detail=""):
        self.checks += 1
        if good:
            print(f"ok   {label} {detail}")
        else:
            self.failures += 1
            print(f"FAIL {label} {detail}")

    def save(self, a, b, M):
        paths = self.path("a.npy"), self.path("b.npy"), self.path("M.npy")
        for p, x in zip(paths, (a, b, M)):
            np.save(p, x)
        return paths

    def emd(self, a, b, M, *flags):
        out = self.path("plan.npy")
        if os.path.exists(out):
            os.remove(out)
        r = self.run("emd", *self.save(a, b, M), "-o", out, "--json", *flags)
        if r.returncode != 0:
            raise RuntimeError(f"moecomp emd failed: {r.stderr.strip()}")
        return json.loads(r.stdout), np.load(out), r

    def check_plan(self, label, a, b, M, summary, plan):
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        b64 = b64 * a64.sum() / b64.sum()
        want = ot.emd2(a64, b64, M.astype(np.float64))
        rel = abs(summary["cost"] - want) / max(abs(want), 1e-300)
        mass = a64.sum()
        marg = max(np.abs(plan.sum(1) - a64).max(), np.abs(plan.sum(0) - b64).max()) / max(mass, 1e-300)
        own = float(np.sum(np.where(plan > 0, M.astype(np.float64), 0) * plan))
        good = (plan.dtype == np.float64 and plan.shape == M.shape and plan.min() >= 0 and rel <= 1e-9
                and marg <= 1e-12 and summary["status"] == "ok"
                and abs(own - summary["cost"]) <= 1e-12 * max(abs(want), 1e-300) + 1e-15)
        self.ok(label, good, f"cost {summary['cost']:.12g} vs POT {want:.12g} (rel {rel:.1e}), marginals {marg:.1e}, "
                             f"{summary['iterations']} pivots")

    def expect_error(self, label, args, *fragments, existing=False):
        """Exit status 2, one stderr line starting with 'moecomp: error:' that holds every fragment, and no output
        file (or, with existing=True, the existing output untouched)."""
        self.checks += 1
        out = self.path("never.npy")
        if os.path.exists(out):
            os.remove(out)
        if existing:
            np.save(out, np.arange(3.0))
        r = self.run(*args, "-o", out)
        lines = r.stderr.strip().splitlines()
        untouched = (np.array_equal(np.load(out), np.arange(3.0)) if existing else not os.path.exists(out))
        good = (r.returncode == 2 and len(lines) == 1 and lines[0].startswith("moecomp: error:")
                and all(f in lines[0] for f in fragments) and untouched)
        if good:
            print(f"ok   error {label}: {lines[0]}")
        else:
            self.failures += 1
            print(f"FAIL error {label}: exit {r.returncode}, stderr {r.stderr!r}, wanted {fragments}")


def histogram(rng, n, zeros=0.0):
    h = rng.random(n)
    h[rng.random(n) < zeros] = 0
    if h.sum() == 0:
        h[0] = 1
    return h / h.sum()


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(20240612)
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(tool, tmp)

        sizes = [(1, 1), (1, 7), (6, 1), (2, 3), (10, 10), (37, 19), (19, 37), (100, 100), (250, 120), (300, 300)]
        for n, m in sizes:
            x, y = rng.random((n, 2)), rng.random((m, 2))
            M = ot.dist(x, y)
            for kind in ("random", "zeros", "uniform"):
                if kind == "random":
                    a, b = histogram(rng, n), histogram(rng, m)
                elif kind == "zeros":
                    a, b = histogram(rng, n, 0.3), histogram(rng, m, 0.3)
                else:
                    a, b = np.full(n, 1.0 / n), np.full(m, 1.0 / m)
                s, plan, _ = c.emd(a, b, M)
                c.check_plan(f"{n}x{m} {kind} masses, sqeuclidean", a, b, M, s, plan)
            # Small-integer costs with equal masses: heavy degeneracy and many optimal plans.
            Mi = rng.integers(0, 4, (n, m)).astype(np.float64)
            a, b = np.full(n, 1.0 / n), np.full(m, 1.0 / m)
            s, plan, _ = c.emd(a, b, Mi)
            c.check_plan(f"{n}x{m} integer costs 0..3, uniform masses", a, b, Mi, s, plan)

        # float32 input: moecomp computes in double from the float32 values; POT on the same values in float64.
        a32, b32 = histogram(rng, 80).astype(np.float32), histogram(rng, 60).astype(np.float32)
        M32 = ot.dist(rng.random((80, 3)), rng.random((60, 3))).astype(np.float32)
        s, plan, _ = c.emd(a32, b32, M32)
        c.check_plan("80x60 float32 input", a32, b32, M32, s, plan)
        c.ok("float32 --json dtype", s.get("dtype") == "float32")

        # --sparse and --duals.
        a, b = histogram(rng, 50, 0.2), histogram(rng, 40, 0.2)
        M = ot.dist(rng.random((50, 2)), rng.random((40, 2)))
        s, dense, _ = c.emd(a, b, M)
        s2, lst, _ = c.emd(a, b, M, "--sparse")
        rebuilt = np.zeros_like(dense)
        if lst.ndim == 2 and lst.shape[1] == 3:
            rebuilt[lst[:, 0].astype(int), lst[:, 1].astype(int)] = lst[:, 2]
        c.ok("--sparse list equals the dense plan", lst.shape == (s["nonzeros"], 3) and np.array_equal(rebuilt, dense)
             and lst.shape[0] <= 50 + 40 - 1)
        upath, vpath = c.path("u.npy"), c.path("v.npy")
        s3, _, _ = c.emd(a, b, M, "--duals", upath, "--duals-v", vpath)
        u, v = np.load(upath), np.load(vpath)
        b_scaled = b * a.sum() / b.sum()
        slack = M - u[:, None] - v[None, :]
        c.ok("--duals: u + v <= M, equality on the support, cost = <a,u> + <b,v>, centred",
             slack.min() >= -1e-12 and np.abs(slack[dense > 0]).max() <= 1e-12
             and abs(a @ u + b_scaled @ v - s3["cost"]) <= 1e-12 and abs(a @ u - b_scaled @ v) <= 1e-12,
             f"min slack {slack.min():.1e}")

        # Iteration limit: exit 0, warning, status, feasible plan.
        a, b = histogram(rng, 120), histogram(rng, 100)
        M = ot.dist(rng.random((120, 2)), rng.random((100, 2)))
        s, plan, r = c.emd(a, b, M, "--max-iter", "3")
        marg = max(np.abs(plan.sum(1) - a).max(), np.abs(plan.sum(0) - b * a.sum() / b.sum()).max())
        c.ok("--max-iter 3: iteration_limit, exit 0, warning, feasible plan",
             s["status"] == "iteration_limit" and s["iterations"] == 3 and r.stderr.startswith("moecomp: warning:")
             and marg <= 1e-12 and plan.min() >= 0 and s["cost"] >= ot.emd2(a, b, M) * (1 - 1e-12),
             f"cost {s['cost']:.6g}")
        c.ok("--json keys", all(k in s for k in ("cost", "iterations", "status", "seconds")) and s["seconds"] >= 0)

        # Forbidden pairs (+inf): feasible.
        Mf = ot.dist(rng.random((30, 2)), rng.random((30, 2)))
        Mf[np.triu_indices(30, 1)] = np.inf
        a = np.full(30, 1 / 30)
        s, plan, _ = c.emd(a, a, Mf)
        c.ok("+inf pairs avoided", s["status"] == "ok" and plan[np.isinf(Mf)].max() == 0
             and abs(plan.sum(1) - a).max() <= 1e-12)

        # The error contract.
        a, b = histogram(rng, 4), histogram(rng, 3)
        M = rng.random((4, 3))
        pa, pb, pM = c.save(a, b, M)
        bad_b = c.path("bad_b.npy")
        np.save(bad_b, b * 1.5)
        c.expect_error("unequal masses", ["emd", pa, bad_b, pM], "equal total mass", "sum(b) = 1.5")
        neg = c.path("neg.npy")
        np.save(neg, np.array([0.5, -0.25, 0.5, 0.25]))
        c.expect_error("negative mass", ["emd", neg, pb, pM], "neg.npy", "element 1", "-0.25")
        nanM = c.path("nanM.npy")
        Mn = M.copy()
        Mn[2, 1] = np.nan
        np.save(nanM, Mn)
        c.expect_error("NaN cost", ["emd", pa, pb, nanM], "nanM.npy", "(2, 1)", "nan")
        shapeM = c.path("shapeM.npy")
        np.save(shapeM, rng.random((3, 4)))
        c.expect_error("shape mismatch", ["emd", pa, pb, shapeM], "shapeM.npy", "(4, 3)", "(3, 4)")
        c.expect_error("missing file", ["emd", c.path("missing.npy"), pb, pM], "missing.npy")
        two_d = c.path("a2d.npy")
        np.save(two_d, np.ones((2, 2)) / 4)
        c.expect_error("2-D histogram", ["emd", two_d, pb, pM], "a2d.npy", "1-D")
        infM = c.path("infM.npy")
        Mi = M.copy()
        Mi[1, :] = np.inf
        np.save(infM, Mi)
        c.expect_error("infeasible (+inf row)", ["emd", pa, pb, infM], "infM.npy", "no feasible plan")
        c.expect_error("unequal masses, existing output untouched", ["emd", pa, bad_b, pM], "equal total mass",
                       existing=True)
        c.expect_error("bad --max-iter", ["emd", pa, pb, pM, "--max-iter", "-1"], "--max-iter")

        print(f"{c.checks - c.failures} passed, {c.failures} failed")
        sys.exit(1 if c.failures else 0)


if __name__ == "__main__":
    main()
