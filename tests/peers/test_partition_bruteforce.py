#!/usr/bin/env python3
"""`moecomp partition` against a Python enumeration of every set partition (N <= 9).

* Eq. 5 of "Diversifying the expert knowledge" is computed literally (ordered pairs inside each group minus
  ordered pairs from it to the other groups) for every partition of the N experts into exactly R groups (of at
  most S with --max-size); the least one is the answer. --method exact and --method heuristic must both
  return it (random distances: no ties) and report its objective to 1e-12 relative, float64 and float32.
* Tie rule: on integer distances 0..3 (many optima, exact sums) --method exact returns the optimum whose groups,
  taken in order of their smallest member, each hold the smallest expert in which they differ from a rival's.
* A non-zero diagonal adds trace(D) to Eq. 5 and changes nothing else.
* The CLI's error contract: exit 2, one "moecomp: error:" line naming the problem, no output file, for
  R > N, a non-square matrix, NaN, an asymmetric matrix, an infeasible --max-size, and no --groups.

Usage: test_partition_bruteforce.py PATH/TO/moecomp"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

(np,) = require("numpy")


def set_partitions(n):
    """Every partition of 0..n-1 as a restricted growth string (labels numbered by smallest member)."""
    out = []

    def visit(prefix, used):
        if len(prefix) == n:
            out.append(list(prefix))
            return
        for g in range(used + 1):
            visit(prefix + [g], max(used, g + 1))

    if n == 0:
        return np.zeros((1, 0), dtype=np.int64)
    visit([0], 1)
    return np.array(out, dtype=np.int64)


def eq5(d, labels, r):
    """Eq. 5 literally: for each group, D over ordered pairs inside it minus D over ordered pairs leaving it."""
    total = 0.0
    for g in range(r):
        inside = labels == g
        total += d[np.ix_(inside, inside)].sum() - d[np.ix_(inside, ~inside)].sum()
    return total


def brute_force(d, r, max_size=0):
    """The optimal canonical labels under Eq. 5 (ties by the documented rule) and its objective."""
    n = d.shape[0]
    parts = set_partitions(n)
    parts = parts[parts.max(axis=1) == r - 1]
    if max_size:
        sizes = np.stack([(parts == g).sum(axis=1) for g in range(r)], axis=1)
        parts = parts[sizes.max(axis=1) <= max_size]
    iu, ju = np.triu_indices(n, 1)
    within = (parts[:, iu] == parts[:, ju]).astype(np.float64) @ d[iu, ju]
    best = within.min()
    candidates = parts[within == best]
    # Tie rule: groups in order; membership sorts first, so the group holding the smallest differing expert wins.
    key = lambda labels: tuple(tuple(0 if x == g else 1 for x in labels) for g in range(r))  # noqa: E731
    chosen = min(candidates, key=key)
    return chosen, eq5(d, chosen, r), len(candidates)


def random_distances(rng, n, integers=0):
    """Symmetric, zero diagonal: uniform in [0, 1), or integers 0 .. integers - 1 (exact sums, many ties)."""
    a = rng.integers(0, integers, size=(n, n)).astype(np.float64) if integers else rng.random((n, n))
    d = np.triu(a, 1)
    return d + d.T


class Checker(ToolRunner):

    def partition(self, d, r, *flags):
        din, out = self.path("d.npy"), self.path("labels.npy")
        np.save(din, d)
        if os.path.exists(out):
            os.remove(out)
        res = self.run("partition", din, "--groups", str(r), "-o", out, "--json", *flags)
        if res.returncode != 0:
            raise RuntimeError(f"moecomp partition {flags} failed: {res.stderr.strip()}")
        return np.load(out), json.loads(res.stdout)

    def compare(self, label, d, r, max_size=0, method="exact", ties=False):
        flags = ["--method", method] + (["--max-size", str(max_size)] if max_size else [])
        labels, summary = self.partition(d, r, *flags)
        d64 = d.astype(np.float64)
        want, objective, optima = brute_force(d64, r, max_size)
        scale = max(float(np.abs(d64).sum()), 1.0)
        problems = []
        if labels.dtype != np.int64 or labels.shape != (d.shape[0],):
            problems.append(f"labels dtype/shape {labels.dtype} {labels.shape}")
        elif not np.array_equal(labels, want):
            got = eq5(d64, labels, r)
            problems.append(f"labels {labels.tolist()} (Eq. 5 {got!r}) vs enumeration {want.tolist()} ({objective!r})")
        if abs(summary["objective"] - objective) > 1e-12 * scale:
            problems.append(f"objective {summary['objective']!r} vs enumeration {objective!r}")
        if summary["lower_bound"] > summary["objective"]:
            problems.append(f"lower_bound {summary['lower_bound']!r} above the objective")
        if method == "exact" and not summary["optimal"]:
            problems.append("exact run not reported optimal")
        if summary["method"] != method:
            problems.append(f"method {summary['method']}")
        self.check(f"{label} N={d.shape[0]} R={r} max_size={max_size} {d.dtype} --method {method}"
                   + (f" ({optima} tied optima)" if ties else ""), not problems, "; ".join(problems) or "same optimum")


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(20260415)
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(tool, tmp)
        # Random distances, every method and precision, with and without a size bound.
        for n in range(1, 10):
            for r in sorted(r for r in {1, 2, (n + 1) // 2, n - 1, n} if 1 <= r <= n):
                d = random_distances(rng, n)
                bounds = [0] + ([-(-n // r)] if 1 < r < n else [])
                for max_size in bounds:
                    c.compare("random", d, r, max_size)
                    c.compare("random", d, r, max_size, method="heuristic")
                    c.compare("random", d.astype(np.float32), r, max_size)
        # Ties: integer distances; the documented rule picks one of the tied optima.
        for trial in range(12):
            n, r = 9, 2 + trial % 3
            d = random_distances(rng, n, integers=4 if trial < 6 else 2)
            c.compare(f"ties {trial}", d, r, ties=True)
            c.compare(f"ties {trial}", d, r, 3 if r == 3 else 0, ties=True)
        flat = random_distances(rng, 8, integers=1) + 1.0
        np.fill_diagonal(flat, 0.0)
        for r in (2, 3, 4):
            c.compare("all distances equal", flat, r, ties=True)
        # A non-zero diagonal counts once in Eq. 5 and never moves the optimum.
        d = random_distances(rng, 7)
        np.fill_diagonal(d, rng.random(7))
        c.compare("diagonal", d, 3)

        # The error contract.
        d = random_distances(rng, 5)
        np.save(c.path("ok.npy"), d)
        c.expect_error("R > N", ["partition", c.path("ok.npy"), "--groups", "6"], "option --groups", "params.groups")
        c.expect_error("no --groups", ["partition", c.path("ok.npy")], "option --groups", "required")
        c.expect_error("infeasible --max-size", ["partition", c.path("ok.npy"), "--groups", "2", "--max-size", "2"],
                       "option --max-size")
        np.save(c.path("rect.npy"), d[:3])
        c.expect_error("non-square", ["partition", c.path("rect.npy"), "--groups", "2"], "rect.npy", "square")
        nan = d.copy()
        nan[1, 2] = np.nan
        np.save(c.path("nan.npy"), nan)
        c.expect_error("NaN", ["partition", c.path("nan.npy"), "--groups", "2"], "nan.npy", "nan")
        asym = d.copy()
        asym[0, 1] += 0.25
        np.save(c.path("asym.npy"), asym)
        c.expect_error("asymmetric", ["partition", c.path("asym.npy"), "--groups", "2"], "asym.npy", "symmetric")
        neg = d.copy()
        neg[0, 1] = neg[1, 0] = -1.0
        np.save(c.path("neg.npy"), neg)
        c.expect_error("negative", ["partition", c.path("neg.npy"), "--groups", "2"], "neg.npy", ">= 0")

        print(f"{c.checks} checks, {c.failures} failures")
        sys.exit(1 if c.failures else 0)


if __name__ == "__main__":
    main()
