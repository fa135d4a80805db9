#!/usr/bin/env python3
"""`moecomp linkage` against scipy.cluster.hierarchy.linkage, all seven methods.

* Tie-free random points, n = 2, 3, 10, 100, 500: from float64 points, from the condensed vector
  (--condensed), and in low-memory mode where it exists (single, ward, centroid, median): the same merges as
  scipy (ids, sizes, order, exactly) and heights to 1e-9 relative.
* float32 points: moecomp computes the distances in float32 (scipy would compute them in float64), then links
  in double. So the float32 run is compared exactly (merges; heights to 1e-9) with scipy run on moecomp's own
  float32 distances (`moecomp pdist`, written as float64), and loosely with scipy on the points converted to
  float64: sorted heights to 1e-4 (float rounding may reorder merges whose heights agree to ~1e-7).
* Inputs full of exact ties (integer distances, grid points) through --condensed: identical to scipy, rows and
  heights, because moecomp follows scipy's algorithms and tie rules step by step.
* The CLI's error contract: exit 2, one "moecomp: error:" line naming the problem, no output file.

Usage: test_linkage_scipy.py PATH/TO/moecomp"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

np, hierarchy, spatial = require("numpy", "scipy.cluster.hierarchy", "scipy.spatial.distance")

METHODS = ["single", "complete", "average", "weighted", "ward", "centroid", "median"]
LOW_MEMORY = {"single", "ward", "centroid", "median"}


class Checker(ToolRunner):

    def linkage(self, x_path, method, *flags):
        out = self.path("z.npy")
        if os.path.exists(out):
            os.remove(out)
        r = self.run("linkage", x_path, "--method", method, "-o", out, *flags)
        if r.returncode != 0:
            raise RuntimeError(f"moecomp linkage {x_path} {method} {flags} failed: {r.stderr.strip()}")
        return np.load(out)

    def compare(self, label, got, want, rtol):
        self.checks += 1
        problem = None
        if got.dtype != np.float64 or got.shape != want.shape:
            problem = f"dtype/shape {got.dtype} {got.shape}, scipy {want.shape}"
        elif not np.array_equal(got[:, [0, 1, 3]], want[:, [0, 1, 3]]):
            row = int(np.nonzero(np.any(got[:, [0, 1, 3]] != want[:, [0, 1, 3]], axis=1))[0][0])
            problem = f"first different merge at row {row}: moecomp {got[row]}, scipy {want[row]}"
        else:
            scale = np.maximum(np.abs(want[:, 2]), 1e-300)
            rel = np.abs(got[:, 2] - want[:, 2]) / scale if len(want) else np.zeros(0)
            if len(rel) and not (rel <= rtol).all():
                row = int(np.argmax(rel))
                problem = f"height {got[row, 2]!r} vs scipy {want[row, 2]!r} at row {row} (relative {rel[row]:.2e})"
        if problem:
            self.failures += 1
            print(f"FAIL {label}: {problem}")
        else:
            print(f"ok   {label}")

    def compare_heights(self, label, got, want, rtol):
        """Sorted heights only: float32 rounding of the distances may reorder merges that are within
        rounding of each other, which changes ids but not (beyond rounding) the heights."""
        self.checks += 1
        g, w = np.sort(got[:, 2]), np.sort(want[:, 2])
        rel = np.abs(g - w) / np.maximum(np.abs(w), 1e-300)
        if got.shape == want.shape and (rel <= rtol).all():
            print(f"ok   {label}: heights within {rel.max() if len(rel) else 0:.1e}")
        else:
            self.failures += 1
            print(f"FAIL {label}: sorted heights differ by up to {rel.max():.2e}")

    def expect_error(self, label, args, *fragments):
        """Exit status 2, one stderr line starting with 'moecomp: error:' that holds every fragment."""
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


def tie_free_points(rng, n):
    # Gaussian points in 4-D: all distances (and every merge height) differ by far more than rounding.
    return rng.standard_normal((n, 4))


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(20240611)
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(tool, tmp)
        x_path, d_path = c.path("x.npy"), c.path("d.npy")

        for n in (2, 3, 10, 100, 500):
            x = tie_free_points(rng, n)
            np.save(x_path, x)
            np.save(d_path, spatial.pdist(x))
            x32 = x.astype(np.float32)
            x32_path, d32_path = c.path("x32.npy"), c.path("d32.npy")
            np.save(x32_path, x32)
            r = c.run("pdist", x32_path, "-o", d32_path)  # moecomp's float32 distances, as float64
            assert r.returncode == 0, r.stderr
            d32 = np.load(d32_path)
            for method in METHODS:
                want = hierarchy.linkage(x, method)
                c.compare(f"n={n} {method} points float64", c.linkage(x_path, method), want, 1e-9)
                c.compare(f"n={n} {method} condensed float64",
                          c.linkage(d_path, method, "--condensed"), hierarchy.linkage(spatial.pdist(x), method), 1e-9)
                if method in LOW_MEMORY:
                    c.compare(f"n={n} {method} low-memory float64", c.linkage(x_path, method, "--low-memory"), want,
                              1e-9)
                got32 = c.linkage(x32_path, method)
                c.compare(f"n={n} {method} points float32 (scipy on moecomp's float32 distances)", got32,
                          hierarchy.linkage(d32, method), 1e-9)
                c.compare_heights(f"n={n} {method} points float32 (scipy on the points in float64)", got32,
                                  hierarchy.linkage(x32.astype(np.float64), method), 1e-4)

        # Exact ties everywhere: scipy's tie rules, step for step (n = 400 also compacts the working matrix).
        for n in (30, 400):
            tie_inputs = {
                "integer distances 1..4": rng.integers(1, 5, n * (n - 1) // 2).astype(np.float64),
                "grid points, euclidean": spatial.pdist(rng.integers(0, 5, (n, 2)).astype(np.float64)),
                "grid points, cityblock": spatial.pdist(rng.integers(0, 3, (n, 3)).astype(np.float64), "cityblock"),
            }
            for name, d in tie_inputs.items():
                np.save(d_path, d)
                for method in METHODS:
                    for threads in ("1", "2"):
                        c.compare(f"ties n={n} {name} {method} threads={threads}",
                                  c.linkage(d_path, method, "--condensed", "--threads", threads),
                                  hierarchy.linkage(d, method), 1e-12)

        # --json summary
        np.save(x_path, tie_free_points(rng, 20))
        r = c.run("linkage", x_path, "--method", "average", "--json")
        c.checks += 1
        summary = json.loads(r.stdout) if r.returncode == 0 else {}
        if summary.get("n") == 20 and summary.get("method") == "average" and summary.get("seconds", -1) >= 0:
            print(f"ok   --json: {r.stdout.strip()}")
        else:
            c.failures += 1
            print(f"FAIL --json: exit {r.returncode}, stdout {r.stdout!r}, stderr {r.stderr!r}")

        # The error contract.
        bad = tie_free_points(rng, 5)
        bad[1, 0] = np.nan
        nan_path = c.path("nan.npy")
        np.save(nan_path, bad)
        short_path, nan_d_path = c.path("short.npy"), c.path("nan_d.npy")
        np.save(short_path, np.ones(5))
        np.save(nan_d_path, np.array([1.0, np.nan, 2.0]))
        c.expect_error("unknown method", ["linkage", x_path, "--method", "avg"], "--method", "avg")
        c.expect_error("missing method", ["linkage", x_path], "--method")
        c.expect_error("NaN point", ["linkage", nan_path, "--method", "single"], "(1, 0)")
        c.expect_error("--condensed with a 2-D array", ["linkage", x_path, "--method", "single", "--condensed"],
                       "1-D", "(20, 4)")
        c.expect_error("condensed length", ["linkage", short_path, "--method", "single", "--condensed"], "got 5")
        c.expect_error("NaN distance", ["linkage", nan_d_path, "--method", "average", "--condensed"],
                       "condensed[1]", "points 0 and 2")
        c.expect_error("ward with cosine", ["linkage", x_path, "--method", "ward", "--metric", "cosine"],
                       "euclidean", "cosine")
        c.expect_error("low memory average", ["linkage", x_path, "--method", "average", "--low-memory"],
                       "--low-memory", "average")
        c.expect_error("low memory with condensed", ["linkage", short_path, "--method", "single", "--condensed",
                                                     "--low-memory"], "--low-memory")

        print(f"{c.checks - c.failures} passed, {c.failures} failed")
        sys.exit(1 if c.failures else 0)


if __name__ == "__main__":
    main()
