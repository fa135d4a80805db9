#!/usr/bin/env python3
"""`moecomp assign` against scipy.optimize.linear_sum_assignment.

* Random float64 and float32 costs, square and rectangular (n < m), minimised and maximised, and costs full
  of exact ties (small integers): moecomp's output is a valid assignment (int64, length n, distinct columns)
  whose total equals scipy's to 1e-9 relative. The totals are recomputed here from the output columns in
  float64, so the check does not trust moecomp's own "cost". Tied problems have many optimal assignments;
  only the totals are compared.
* Forbidden pairs (+inf): the same totals as scipy; a problem scipy calls infeasible exits 2 with one
  error line and no output file.
* --method auction: within its reported gap_bound of scipy's total, and equal on integer costs.
* The CLI's error contract: exit 2, one "moecomp: error:" line naming the problem, no output file.

Usage: test_assign_scipy.py PATH/TO/moecomp"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

np, optimize = require("numpy", "scipy.optimize")


class Checker(ToolRunner):

    def assign(self, c, *flags):
        cin, out = self.path("c.npy"), self.path("cols.npy")
        np.save(cin, c)
        if os.path.exists(out):
            os.remove(out)
        r = self.run("assign", cin, "-o", out, "--json", *flags)
        if r.returncode != 0:
            raise RuntimeError(f"moecomp assign {flags} failed: {r.stderr.strip()}")
        return np.load(out), json.loads(r.stdout)

    def record(self, label, problem):
        self.checks += 1
        if problem:
            self.failures += 1
            print(f"FAIL {label}: {problem}")
        else:
            print(f"ok   {label}")

    def compare(self, label, c, maximize=False, rtol=1e-9, method="jv"):
        flags = (["--maximize"] if maximize else []) + (["--method", method] if method != "jv" else [])
        cols, summary = self.assign(c, *flags)
        rows, want_cols = optimize.linear_sum_assignment(c.astype(np.float64), maximize=maximize)
        want = c.astype(np.float64)[rows, want_cols].sum()
        n, m = c.shape
        problem = None
        if cols.dtype != np.int64 or cols.shape != (n,):
            problem = f"output dtype/shape {cols.dtype} {cols.shape}, wanted int64 ({n},)"
        elif n and (cols.min() < 0 or cols.max() >= m or len(set(cols.tolist())) != n):
            problem = f"not an assignment: {cols[:10]}..."
        else:
            got = c.astype(np.float64)[np.arange(n), cols].sum()
            tol = rtol * max(abs(want), 1.0) if method == "jv" else summary["gap_bound"] * (1 + 1e-9) + 1e-12
            if abs(got - want) > tol:
                problem = f"total {got!r} vs scipy {want!r} (difference {got - want:.3e}, allowed {tol:.1e})"
            elif abs(summary["cost"] - got) > 1e-9 * max(abs(got), 1.0):
                problem = f"json cost {summary['cost']!r} is not the output's total {got!r}"
            elif summary["status"] != "ok":
                problem = f"status {summary['status']}"
        self.record(f"{label} {n}x{m} {c.dtype} {'max' if maximize else 'min'} {method}", problem)

    def expect_error(self, label, args, *fragments):
        """Exit status 2, one stderr line starting with 'moecomp: error:' that holds every fragment, no output."""
        self.checks += 1
        out = self.path("never.npy")
        if os.path.exists(out):
            os.remove(out)
        r = self.run(*args, "-o", out)
        lines = r.stderr.strip().splitlines()
        ok = (r.returncode == 2 and len(lines) == 1 and lines[0].startswith("moecomp: error:")
              and all(f in lines[0] for f in fragments) and not os.path.exists(out))
        if ok:
            print(f"ok   error {label}: {lines[0]}")
        else:
            self.failures += 1
            print(f"FAIL error {label}: exit {r.returncode}, stderr {r.stderr!r}, wanted {fragments}")


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(20240612)
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(tool, tmp)
        shapes = [(1, 1), (1, 7), (2, 2), (5, 5), (10, 17), (64, 64), (100, 250), (300, 300), (500, 501)]
        for n, m in shapes:
            for maximize in (False, True):
                x = rng.random((n, m))
                c.compare("uniform", x, maximize)
                c.compare("uniform", x.astype(np.float32), maximize)
                c.compare("normal, wide range", rng.standard_normal((n, m)) * 1e3, maximize)
                c.compare("tied integers 0..3", rng.integers(0, 4, (n, m)).astype(np.float64), maximize)
                c.compare("tied integers 0..1", rng.integers(0, 2, (n, m)).astype(np.float32), maximize)
        c.compare("all equal", np.full((40, 60), 2.5))
        c.compare("uniform", rng.random((1000, 1000)))
        # squared distances between point clouds, the free-support barycenter's problem
        a, b = rng.standard_normal((400, 8)), rng.standard_normal((400, 8))
        c.compare("squared distances", ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))

        # forbidden pairs
        for trial in range(40):
            n, m = int(rng.integers(1, 9)), 0
            m = n + int(rng.integers(0, 3))
            for maximize in (False, True):
                x = rng.integers(0, 10, (n, m)).astype(np.float64)
                x[rng.random((n, m)) < 0.45] = -np.inf if maximize else np.inf
                cin, out = c.path("c.npy"), c.path("cols.npy")
                np.save(cin, x)
                if os.path.exists(out):
                    os.remove(out)
                r = c.run("assign", cin, "-o", out, "--json", *(["--maximize"] if maximize else []))
                summary = json.loads(r.stdout) if r.returncode == 0 else {}
                try:
                    rows, cols = optimize.linear_sum_assignment(x, maximize=maximize)
                    want = x[rows, cols].sum()
                except ValueError:
                    want = None
                got_cols = np.load(out) if r.returncode == 0 else None
                label = f"forbidden pairs trial {trial} {n}x{m} {'max' if maximize else 'min'}"
                if want is None:
                    lines = r.stderr.strip().splitlines()
                    c.record(label + " (infeasible)", None if r.returncode == 2 and len(lines) == 1 and
                             lines[0].startswith("moecomp: error:") and "no feasible assignment" in lines[0] and
                             not os.path.exists(out) else f"exit {r.returncode}: {r.stderr.strip()}")
                elif r.returncode != 0:
                    c.record(label, f"exit {r.returncode}: {r.stderr.strip()}")
                else:
                    got = x[np.arange(n), got_cols].sum()
                    c.record(label, None if summary.get("status") == "ok" and got == want
                             else f"total {got} vs scipy {want}, summary {summary}")

        # the auction: within its gap bound, exact on integers
        for n, m in [(1, 3), (50, 50), (200, 260), (400, 400)]:
            for maximize in (False, True):
                c.compare("uniform", rng.random((n, m)), maximize, method="auction")
                c.compare("tied integers 0..9", rng.integers(0, 10, (n, m)).astype(np.float64), maximize,
                          rtol=0.0, method="auction")

        # --json summary
        _, summary = c.assign(rng.random((6, 9)))
        c.record("--json keys", None if {"cost", "seconds", "status", "n", "m"} <= set(summary) and
                 summary["seconds"] >= 0 and summary["n"] == 6 else f"summary {summary}")

        # The error contract.
        good = c.path("good.npy")
        np.save(good, rng.random((3, 4)))
        bad = rng.random((3, 4))
        bad[1, 2] = np.nan
        nan_path, tall_path, flat_path, int_path = (c.path(p) for p in ("nan.npy", "tall.npy", "flat.npy",
                                                                          "int.npy"))
        np.save(nan_path, bad)
        np.save(tall_path, rng.random((5, 3)))
        np.save(flat_path, rng.random(6))
        np.save(int_path, np.ones((3, 3), dtype=np.int64))
        neg = rng.random((3, 4))
        neg[0, 0] = -np.inf
        neg_path = c.path("neginf.npy")
        np.save(neg_path, neg)
        c.expect_error("NaN cost", ["assign", nan_path], "nan.npy", "cost(1, 2)", "NaN")
        c.expect_error("n > m", ["assign", tall_path], "tall.npy", "5 x 3", "n <= m")
        c.expect_error("1-D input", ["assign", flat_path], "flat.npy", "2-D", "(6,)")
        c.expect_error("missing file", ["assign", c.path("missing.npy")], "missing.npy")
        c.expect_error("integer dtype", ["assign", int_path], "int.npy", "int64")
        c.expect_error("-inf when minimising", ["assign", neg_path], "neginf.npy", "-inf")
        c.expect_error("unknown method", ["assign", good, "--method", "hungarian"], "--method", "hungarian")
        c.expect_error("--epsilon without auction", ["assign", good, "--epsilon", "0.1"], "--epsilon")
        c.expect_error("negative --epsilon", ["assign", good, "--method", "auction", "--epsilon", "-1"], "--epsilon")
        # a failed run leaves an existing output untouched
        c.checks += 1
        keep = c.path("keep.npy")
        np.save(keep, np.arange(3))
        r = c.run("assign", nan_path, "-o", keep)
        if r.returncode == 2 and np.array_equal(np.load(keep), np.arange(3)):
            print("ok   existing output untouched by a failed run")
        else:
            c.failures += 1
            print(f"FAIL existing output: exit {r.returncode}, content {np.load(keep)}")

        print(f"{c.checks - c.failures} passed, {c.failures} failed")
        sys.exit(1 if c.failures else 0)


if __name__ == "__main__":
    main()
