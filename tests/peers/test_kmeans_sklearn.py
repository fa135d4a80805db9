#!/usr/bin/env python3
"""`moecomp kmeans` against scikit-learn's KMeans(algorithm="lloyd").

* From the same explicit initial centres (--init C0.npy, sklearn init=C0, n_init=1): the same labels,
  centres and inertia to 1e-9 relative in float64 (float32: labels equal, centres to 1e-5), and the same
  iteration count (sklearn's n_iter_), over blobs, uniform data, sample weights, a tolerance that stops on
  the centre shift, and an iteration limit.
* k-means++: the starts are drawn by moecomp's own generator, so the check is statistical: over 120 seeds
  each, the mean final inertia of moecomp and of scikit-learn (n_init=1) agree within 5 standard errors, and
  every moecomp start has k distinct centres (max_iter=1 on k = n points gives inertia 0).
* Balanced (--balanced, --size-min/--size-max): the sizes are exact, and the returned labels are an optimal
  assignment for the returned centres (the last assignment step): their total squared distance equals
  scipy.optimize.linear_sum_assignment on the cost with each centre's column repeated n/k times (n <= 1024),
  and POT's emd on the transport form (n = 3000, and the bounded form with a dummy row), to 1e-9
  relative, after 1, 2, 3 and all iterations;
  the inertia never increases with the iteration limit.
* The CLI's error contract: exit 2, one "moecomp: error:" line naming the problem, no output file.

Usage: test_kmeans_sklearn.py PATH/TO/moecomp"""
import json
import os
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

np, cluster, optimize, ot = require("numpy", "sklearn.cluster", "scipy.optimize", "ot")


class Checker(ToolRunner):

    def record(self, label, problem):
        self.checks += 1
        if problem:
            self.failures += 1
            print(f"FAIL {label}: {problem}")
        else:
            print(f"ok   {label}")

    def kmeans(self, x, k, *flags, weights=None, init=None):
        xin, out, cout = self.path("x.npy"), self.path("labels.npy"), self.path("centers.npy")
        np.save(xin, x)
        extra = []
        if weights is not None:
            np.save(self.path("w.npy"), weights)
            extra += ["--weights", self.path("w.npy")]
        if init is not None:
            np.save(self.path("c0.npy"), init)
            extra += ["--init", self.path("c0.npy")]
        for p in (out, cout):
            if os.path.exists(p):
                os.remove(p)
        r = self.run("kmeans", xin, "--k", str(k), "-o", out, "--centers", cout, "--json", *extra, *flags)
        if r.returncode != 0:
            raise RuntimeError(f"moecomp kmeans {flags} failed: {r.stderr.strip()}")
        return np.load(out), np.load(cout), json.loads(r.stdout)

    def compare_given(self, label, x, c0, weights=None, max_iter=300, tol=1e-4):
        k = c0.shape[0]
        labels, centers, summary = self.kmeans(x, k, "--max-iter", str(max_iter), "--tol", repr(tol),
                                               weights=weights, init=c0)
        ref = cluster.KMeans(n_clusters=k, init=c0, n_init=1, max_iter=max_iter, tol=tol, algorithm="lloyd")
        ref.fit(x, sample_weight=weights)
        double = x.dtype == np.float64
        problem = None
        if labels.dtype != np.int64 or labels.shape != (x.shape[0],):
            problem = f"labels dtype/shape {labels.dtype} {labels.shape}"
        elif not np.array_equal(labels, ref.labels_):
            problem = f"{int((labels != ref.labels_).sum())} labels differ"
        elif summary["iterations"] != ref.n_iter_:
            problem = f"iterations {summary['iterations']} vs sklearn n_iter_ {ref.n_iter_}"
        else:
            rtol = 1e-9 if double else 1e-5
            scale = max(float(np.abs(ref.cluster_centers_).max()), 1.0)
            err = float(np.abs(centers.astype(np.float64) - ref.cluster_centers_).max()) / scale
            inertia_err = abs(summary["inertia"] - ref.inertia_) / max(ref.inertia_, 1e-300)
            if err > rtol:
                problem = f"centres differ by {err:.2e} (relative to the largest), allowed {rtol:.0e}"
            elif inertia_err > rtol:
                problem = f"inertia {summary['inertia']!r} vs sklearn {ref.inertia_!r} ({inertia_err:.2e})"
            elif sorted(summary["sizes"]) != sorted(np.bincount(labels, minlength=k).tolist()):
                problem = f"sizes {summary['sizes']} are not the labels' counts"
        self.record(f"{label} {x.shape[0]}x{x.shape[1]} {x.dtype} k={k} max_iter={max_iter} tol={tol}", problem)

    def check_balanced(self, label, x, k, c0, *bounds):
        """Sizes within the bounds, and the labels an optimal size-bounded assignment to the output centres."""
        n = x.shape[0]
        size_min, size_max = (n // k, n // k) if not bounds else bounds
        previous = np.inf
        for max_iter in (1, 2, 3, 300):
            flags = ["--balanced"] if not bounds else ["--size-min", str(size_min), "--size-max", str(size_max)]
            labels, centers, summary = self.kmeans(x, k, "--max-iter", str(max_iter), *flags, init=c0)
            sizes = np.bincount(labels, minlength=k)
            cost = ((x[:, None, :] - centers[None, :, :]) ** 2).sum(-1)
            got = cost[np.arange(n), labels].sum()
            if n <= 1024:
                # Every cluster gets size_min slots, then size_max - size_min optional ones: with equal bounds
                # the replicated cost is square; otherwise rectangular (n rows, k size_max columns).
                if size_min == size_max:
                    reps = np.repeat(np.arange(k), size_max)
                    rows, cols = optimize.linear_sum_assignment(cost[:, reps])
                    want, peer = cost[:, reps][rows, cols].sum(), "scipy LSA on the replicated cost"
                else:
                    # Bounds: k columns of demand size_min, k of size_max - size_min, and a dummy row holding
                    # the k size_max - n unused places, allowed only in the second k (POT on this form).
                    big = 1e6 * (cost.max() + 1)
                    m = np.vstack([np.hstack([cost, cost]),
                                   np.concatenate([np.full(k, big), np.zeros(k)])[None, :]])
                    a = np.concatenate([np.ones(n), [k * size_max - n]])
                    b = np.concatenate([np.full(k, size_min), np.full(k, size_max - size_min)]).astype(float)
                    plan = ot.emd(a, b, m, numItermax=10**8)
                    want, peer = float((plan[:n] * m[:n]).sum()), "POT emd on the bounded transport form"
            else:
                plan = ot.emd(np.ones(n), np.full(k, n / k), cost, numItermax=10**8)
                want, peer = float((plan * cost).sum()), "POT emd on the transport form"
            problem = None
            if sizes.min() < size_min or sizes.max() > size_max:
                problem = f"sizes {sizes.tolist()} outside [{size_min}, {size_max}]"
            elif abs(got - want) > 1e-9 * max(want, 1.0):
                problem = f"assignment total {got!r} vs the optimum {want!r} ({peer})"
            elif summary["inertia"] > previous * (1 + 1e-12):
                problem = f"inertia rose from {previous!r} to {summary['inertia']!r}"
            elif summary["assignment_gap"] > 1e-9:
                problem = f"assignment_gap {summary['assignment_gap']}"
            previous = summary["inertia"]
            self.record(f"balanced {label} n={n} k={k} bounds [{size_min}, {size_max}] max_iter {max_iter} "
                        f"({peer})", problem)

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


def blobs(rng, k, per, d, spread=1.0):
    centres = rng.normal(scale=4.0, size=(k, d))
    return np.concatenate([c + spread * rng.standard_normal((per, d)) for c in centres])


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(20261123)
    warnings.simplefilter("ignore")  # sklearn's FutureWarning about n_init defaults
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(tool, tmp)
        # Same explicit starts: the same run.
        for trial, (k, per, d, spread) in enumerate([(3, 40, 2, 1.0), (8, 60, 5, 2.5), (16, 50, 16, 3.0),
                                                      (5, 200, 32, 4.0)]):
            x = blobs(rng, k, per, d, spread)
            c0 = x[rng.choice(x.shape[0], k, replace=False)]
            c.compare_given(f"blobs {trial}", x, c0)
            c.compare_given(f"blobs {trial}", x.astype(np.float32), c0.astype(np.float32))
            c.compare_given(f"blobs {trial} weighted", x, c0, weights=rng.random(x.shape[0]) * 3)
            c.compare_given(f"blobs {trial} tol 1e-2", x, c0, tol=1e-2)
            c.compare_given(f"blobs {trial} 2 iterations", x, c0, max_iter=2)
        u = rng.random((2000, 8))
        c.compare_given("uniform", u, u[:20].copy())
        c.compare_given("uniform", u, u[:20].copy(), tol=0.0)

        # k-means++: statistically the same starts.
        x = blobs(np.random.default_rng(7), 10, 30, 2, spread=2.0)
        ours, theirs = [], []
        for seed in range(120):
            _, _, summary = c.kmeans(x, 10, "--seed", str(seed))
            ours.append(summary["inertia"])
            theirs.append(cluster.KMeans(n_clusters=10, init="k-means++", n_init=1, random_state=seed,
                                         algorithm="lloyd").fit(x).inertia_)
        ours, theirs = np.array(ours), np.array(theirs)
        se = np.sqrt(ours.var(ddof=1) / len(ours) + theirs.var(ddof=1) / len(theirs))
        c.record(f"k-means++ mean inertia over 120 seeds: moecomp {ours.mean():.2f}, sklearn {theirs.mean():.2f}, "
                 f"se {se:.2f}", None if abs(ours.mean() - theirs.mean()) <= 5 * se else "means differ")
        few = rng.standard_normal((12, 3))
        distinct = all(c.kmeans(few, 12, "--seed", str(s), "--max-iter", "1")[2]["inertia"] == 0.0 for s in range(10))
        c.record("k-means++ starts from 12 distinct rows of 12", None if distinct else "a row was drawn twice")

        # Balanced: optimal assignment steps and exact sizes.
        for n, k, d in [(60, 3, 2), (256, 8, 5), (1024, 16, 8)]:
            xb = blobs(rng, k, n // k, d, spread=3.0)
            xb = xb[rng.permutation(len(xb))]
            c.check_balanced(f"blobs d={d}", xb, k, xb[:k].copy())
        xb = rng.standard_normal((3000, 6))
        c.check_balanced("normal", xb, 12, xb[:12].copy())
        xb = blobs(rng, 4, 50, 3, spread=1.0)
        c.check_balanced("bounded", xb, 5, xb[:5].copy(), 30, 45)

        # --json summary
        _, _, summary = c.kmeans(x, 10)
        c.record("--json keys", None if {"inertia", "iterations", "sizes", "converged", "seconds"} <= set(summary)
                 and sum(summary["sizes"]) == x.shape[0] else f"summary {summary}")

        # The error contract.
        good, nan_path, c_bad = c.path("good.npy"), c.path("nan.npy"), c.path("c_bad.npy")
        np.save(good, rng.random((6, 2)))
        bad = rng.random((6, 2))
        bad[3, 1] = np.nan
        np.save(nan_path, bad)
        np.save(c_bad, rng.random((3, 3)))
        c.expect_error("k > n", ["kmeans", good, "--k", "7"], "at least params.clusters = 7 rows")
        c.expect_error("k = 0", ["kmeans", good, "--k", "0"], "--k", "params.clusters must be >= 1")
        c.expect_error("missing --k", ["kmeans", good], "--k", "required")
        c.expect_error("NaN row", ["kmeans", nan_path, "--k", "2"], "nan.npy")
        c.expect_error("negative --tol", ["kmeans", good, "--k", "2", "--tol", "-1"], "--tol")
        c.expect_error("--init shape", ["kmeans", good, "--k", "2", "--init", c_bad], "--init", "(2, 2)", "(3, 3)")
        c.expect_error("--balanced, n not divisible by k", ["kmeans", good, "--k", "4", "--balanced"], "--balanced",
                       "multiple of --k (4)")
        c.expect_error("size_min * k > n", ["kmeans", good, "--k", "2", "--size-min", "4"], "--size-min", "4 x 2")
        c.expect_error("size_max < size_min", ["kmeans", good, "--k", "2", "--size-min", "3", "--size-max", "2"],
                       "--size-max")
        c.expect_error("unknown --init file", ["kmeans", good, "--k", "2", "--init", c.path("none.npy")], "none.npy")

        print(f"{c.checks - c.failures} passed, {c.failures} failed")
        sys.exit(1 if c.failures else 0)


if __name__ == "__main__":
    main()
