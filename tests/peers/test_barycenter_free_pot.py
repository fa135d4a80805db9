#!/usr/bin/env python3
"""`moecomp barycenter-free` against POT's ot.lp.free_support_barycenter (uniform masses, clouds of equal size).
* Random clouds (k = 1..5, n = 1..96, d = 1..24), uniform and random weights, init = cloud 0 or --init, several
  --max-iter / --tol settings: POT is run from the same init with the same settings. Both barycenters are
  scored exactly, sum_j w_j W_2^2(B, X_j) with scipy's linear_sum_assignment; moecomp's must be <= POT's
  (+1e-9 relative), equal to the "objective" of its --json, and reached by the same number of iterations.
  The --perms written are permutations and optimal for the barycenter written (their cost equals the
  linear_sum_assignment optimum to 1e-12 relative).
* float32 input: computed in float32; the permutations are optimal for the float32 barycenter to float rounding
  and the objective matches POT on the same points in float64 to 1e-5.
* The CLI's error contract: exit 2, one "moecomp: error:" line naming the problem, neither -o nor --perms
  created, and an existing output left untouched.
Usage: test_barycenter_free_pot.py PATH/TO/moecomp"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

np, ot, optimize = require("numpy", "ot", "scipy.optimize")


def sqdist(x, b):
    x, b = x.astype(np.float64), b.astype(np.float64)
    return ((x[:, None, :] - b[None, :, :]) ** 2).sum(axis=2)


def exact_objective(clouds, weights, b):
    total = 0.0
    for w, x in zip(weights, clouds):
        cost = sqdist(x, b)
        r, c = optimize.linear_sum_assignment(cost)
        total += w * cost[r, c].sum() / len(x)
    return total


class Checker(ToolRunner):

    def check(self, label, ok, detail=""):
        self.checks += 1
        if ok:
            print(f"ok   {label}")
        else:
            self.failures += 1
            print(f"FAIL {label}: {detail}")

    def save_clouds(self, clouds):
        files = []
        for j, x in enumerate(clouds):
            files.append(self.path(f"x{j}.npy"))
            np.save(files[-1], x)
        return files

    def barycenter(self, clouds, *flags):
        files = self.save_clouds(clouds)
        out, perms = self.path("b.npy"), self.path("p.npy")
        for f in (out, perms):
            if os.path.exists(f):
                os.remove(f)
        r = self.run("barycenter-free", *files, *flags, "-o", out, "--perms", perms, "--json")
        if r.returncode != 0:
            raise RuntimeError(f"moecomp barycenter-free {flags} failed: {r.stderr.strip()}")
        return json.loads(r.stdout), np.load(out), np.load(perms)

    def compare_with_pot(self, label, clouds, weights=None, init=None, max_iter=100, tol=1e-7, rtol_perm=1e-12):
        k, n = len(clouds), clouds[0].shape[0]
        flags = ["--max-iter", str(max_iter), "--tol", repr(tol)]
        if weights is not None:
            np.save(self.path("w.npy"), weights)
            flags += ["--weights", self.path("w.npy")]
        if init is not None:
            np.save(self.path("init.npy"), init)
            flags += ["--init", self.path("init.npy")]
        summary, b, perms = self.barycenter(clouds, *flags)
        w = np.full(k, 1.0 / k) if weights is None else weights
        x64 = [x.astype(np.float64) for x in clouds]
        start = (x64[0] if init is None else init.astype(np.float64)).copy()
        bp, log = ot.lp.free_support_barycenter(x64, [np.full(n, 1.0 / n)] * k, start, weights=w,
                                                numItermax=max_iter, stopThr=tol, log=True)
        ours, theirs = exact_objective(clouds, w, b), exact_objective(x64, w, bp)
        problems = []
        if b.shape != clouds[0].shape or b.dtype != clouds[0].dtype:
            problems.append(f"barycenter {b.dtype} {b.shape}")
        if perms.shape != (k, n) or perms.dtype != np.int64:
            problems.append(f"perms {perms.dtype} {perms.shape}")
        elif not all(np.array_equal(np.sort(p), np.arange(n)) for p in perms):
            problems.append("perms are not permutations")
        else:
            for j, x in enumerate(clouds):
                cost = sqdist(x, b)
                r, c = optimize.linear_sum_assignment(cost)
                best, mine = cost[r, c].sum(), cost[np.arange(n), perms[j]].sum()
                if mine > best * (1 + rtol_perm) + 1e-300:
                    problems.append(f"perms[{j}] cost {mine!r} > optimum {best!r}")
        if ours > theirs * (1 + 1e-9) + 1e-12:
            problems.append(f"objective {ours!r} worse than POT's {theirs!r}")
        if abs(summary["objective"] - ours) > 1e-9 * max(ours, 1e-300) + (1e-5 * ours if rtol_perm > 1e-9 else 0):
            problems.append(f"--json objective {summary['objective']!r} vs exact {ours!r} at the written barycenter")
        pot_iterations = len(log["displacement_square_norms"])
        if summary["iterations"] != pot_iterations:
            problems.append(f"iterations {summary['iterations']} vs POT's {pot_iterations}")
        self.check(f"{label}: objective {ours:.10g} (POT {theirs:.10g}), iterations {summary['iterations']}, "
                   f"{summary['status']}", not problems, "; ".join(problems))
        return summary, b

    def expect_error(self, label, args, *fragments):
        """Exit 2, one stderr line 'moecomp: error: ...' holding every fragment, no output file created, and an
        existing -o file left as it was."""
        self.checks += 1
        out, perms = self.path("never.npy"), self.path("never_perms.npy")
        keep = self.path("keep.npy")
        for f in (out, perms):
            if os.path.exists(f):
                os.remove(f)
        with open(keep, "wb") as f:
            f.write(b"untouched")
        r1 = self.run(*args, "-o", out, "--perms", perms)
        r2 = self.run(*args, "-o", keep)
        lines = r1.stderr.strip().splitlines()
        with open(keep, "rb") as f:
            kept = f.read() == b"untouched"
        ok = (r1.returncode == 2 and r2.returncode == 2 and len(lines) == 1 and lines[0].startswith("moecomp: error:")
              and all(f in lines[0] for f in fragments) and not os.path.exists(out) and not os.path.exists(perms)
              and kept)
        if ok:
            print(f"ok   error {label}: {lines[0]}")
        else:
            self.failures += 1
            print(f"FAIL error {label}: exit {r1.returncode}, stderr {r1.stderr!r}, wanted {fragments}, "
                  f"outputs {os.path.exists(out)} {os.path.exists(perms)}, kept {kept}")


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(20241122)
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(tool, tmp)
        for k, n, d in ((1, 10, 3), (2, 1, 4), (2, 2, 1), (3, 40, 1), (3, 50, 8), (5, 64, 24), (4, 96, 16)):
            clouds = [rng.standard_normal((n, d)) for _ in range(k)]
            c.compare_with_pot(f"k={k} n={n} d={d} uniform, init cloud 0", clouds)
            w = rng.random(k)
            w /= w.sum()
            c.compare_with_pot(f"k={k} n={n} d={d} random weights, random init", clouds, weights=w,
                               init=rng.standard_normal((n, d)))
            c.compare_with_pot(f"k={k} n={n} d={d} --max-iter 1", clouds, init=rng.standard_normal((n, d)), max_iter=1)
            c.compare_with_pot(f"k={k} n={n} d={d} --tol 1e-2", clouds, init=rng.standard_normal((n, d)), tol=1e-2)
        # Upcycled experts: permuted noisy copies of one base (the ResMoE situation).
        base = rng.standard_normal((80, 30))
        clouds = [base[rng.permutation(80)] + 0.5 * rng.standard_normal((80, 30)) for _ in range(6)]
        c.compare_with_pot("upcycled experts k=6 n=80 d=30", clouds)
        # float32 input, computed in float32.
        clouds32 = [rng.standard_normal((48, 12)).astype(np.float32) for _ in range(4)]
        summary, b32 = c.compare_with_pot("float32 k=4 n=48 d=12", clouds32, rtol_perm=1e-5)
        c.check("float32 --json dtype", summary.get("dtype") == "float32", summary)

        # --json
        files = c.save_clouds([rng.standard_normal((6, 2)) for _ in range(3)])
        r = c.run("barycenter-free", *files, "--json")
        s = json.loads(r.stdout) if r.returncode == 0 else {}
        c.check(f"--json {r.stdout.strip()}", s.get("k") == 3 and s.get("n") == 6 and s.get("seconds", -1) >= 0
                and s.get("objective", -1) >= 0 and s.get("iterations", 0) >= 1, r.stderr)

        # The error contract.
        good = c.save_clouds([rng.standard_normal((6, 2)) for _ in range(2)])
        other = c.path("other.npy")
        np.save(other, rng.standard_normal((7, 2)))
        nan = rng.standard_normal((6, 2))
        nan[3, 1] = np.nan
        nan_path = c.path("nan.npy")
        np.save(nan_path, nan)
        for name, w in (("neg", [1.5, -0.5]), ("sum", [0.5, 0.6]), ("len", [1.0, 0.0, 0.0])):
            np.save(c.path(f"w_{name}.npy"), np.array(w))
        np.save(c.path("init_bad.npy"), rng.standard_normal((6, 3)))
        c.expect_error("clouds of different shapes", ["barycenter-free", good[0], other], other, "(6, 2)", "(7, 2)")
        c.expect_error("NaN in a cloud", ["barycenter-free", good[0], nan_path], nan_path, "(3, 1)")
        c.expect_error("negative weight", ["barycenter-free", *good, "--weights", c.path("w_neg.npy")], "--weights",
                       "-0.5")
        c.expect_error("weights not summing to 1", ["barycenter-free", *good, "--weights", c.path("w_sum.npy")],
                       "--weights", "sum to 1")
        c.expect_error("weights of the wrong length", ["barycenter-free", *good, "--weights", c.path("w_len.npy")],
                       "--weights", "(2,)", "(3,)")
        c.expect_error("init of the wrong shape", ["barycenter-free", *good, "--init", c.path("init_bad.npy")],
                       "--init", "(6, 3)")
        c.expect_error("missing file", ["barycenter-free", good[0], c.path("missing.npy")], "missing.npy")
        c.expect_error("--max-iter 0", ["barycenter-free", *good, "--max-iter", "0"], "--max-iter")
        c.expect_error("--tol negative", ["barycenter-free", *good, "--tol", "-1"], "--tol")

        print(f"{c.checks - c.failures} passed, {c.failures} failed")
        sys.exit(1 if c.failures else 0)


if __name__ == "__main__":
    main()
