#!/usr/bin/env python3
"""`moecomp fcluster` against scipy.cluster.hierarchy.fcluster on linkage matrices from scipy's own linkage (all
seven methods, centroid and median included) on random tie-free data.

--distance T is compared with fcluster(Z, T, 'distance') for thresholds below, at, between and above the merge
heights: the same partition, and our labels numbered by first appearance.

--maxclust K (K = 1, 2, 3, 7, n - 1, n, n + 3; every K for centroid and median when n <= 40) must give exactly
min(K, n) clusters. Wherever scipy's fcluster(Z, K, 'maxclust') also gives min(K, n) clusters, the partitions
must be equal. scipy before 1.15 has a known bug in that criterion (its bisection never tries the lowest merge
height, so K >= n - 1 fails on any data), and by its definition (the lowest threshold giving at most K clusters)
it returns fewer than K when monotone heights tie at the cut, as they do after each centroid/median inversion. There the reference is the definition
through scipy's own 'distance' criterion at the cut height (when that height is not tied) or this library's
documented tie rule (merges in order of (monotone height, row)); the script counts those cases.

Also: invalid linkage matrices exit 2 with one error line (those scipy's is_valid_linkage rejects, and two it
accepts but this library does not: a wrong cluster size, and Z(i, 0) > Z(i, 1)).
Usage: test_fcluster_scipy.py PATH/TO/moecomp"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import require  # noqa: E402

np, scipy, hierarchy = require("numpy", "scipy", "scipy.cluster.hierarchy")

METHODS = ["single", "complete", "average", "weighted", "ward", "centroid", "median"]


def same_partition(a, b):
    """Equal up to relabelling: the pairs (a_i, b_i) define a bijection between the two label sets."""
    a, b = np.asarray(a), np.asarray(b)
    pairs = len(set(zip(a.tolist(), b.tolist())))
    return a.shape == b.shape and pairs == len(set(a.tolist())) == len(set(b.tolist()))


def first_appearance(labels):
    """Labels 0-based in order of first appearance over the points."""
    seen = -1
    for v in labels.tolist():
        if v > seen + 1:
            return False
        seen = max(seen, v)
    return True


def documented_maxclust(Z, k):
    """The library's rule written independently: perform the first n - min(k, n) merges in the order of
    (monotone height, row), with a union-find over the points."""
    n = Z.shape[0] + 1
    md = hierarchy.maxdists(Z)
    order = sorted(range(n - 1), key=lambda i: (md[i], i))
    parent = list(range(n))
    leaf = list(range(n)) + [0] * (n - 1)  # a point inside each node
    for i in range(n - 1):
        leaf[n + i] = leaf[int(Z[i, 0])]

    def find(p):
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    for i in order[: n - min(k, n)]:
        parent[find(leaf[int(Z[i, 0])])] = find(leaf[int(Z[i, 1])])
    return np.array([find(p) for p in range(n)])


def datasets(rng):
    yield "gaussian 12x3", rng.standard_normal((12, 3))
    yield "gaussian 40x5", rng.standard_normal((40, 5))
    yield "uniform 101x8", rng.uniform(-1, 1, (101, 8))
    yield "blobs 60x4", np.repeat(rng.standard_normal((6, 4)) * 5, 10, axis=0) + 0.3 * rng.standard_normal((60, 4))
    yield "two points", rng.standard_normal((2, 3))


class Checker:
    def __init__(self, tool, tmp):
        self.tool, self.tmp = tool, tmp
        self.checks = self.failures = self.scipy_bug_cases = self.tied_cuts = 0

    def run(self, z_path, *options):
        out = os.path.join(self.tmp, "labels.npy")
        subprocess.run([self.tool, "fcluster", z_path, *options, "-o", out], check=True)
        labels = np.load(out)
        assert labels.dtype == np.int64, labels.dtype
        return labels

    def expect(self, ok, what):
        self.checks += 1
        if not ok:
            self.failures += 1
            print(f"FAIL {what}")

    def check_linkage(self, name, Z, z_path, every_k=False):
        n = Z.shape[0] + 1
        md = np.sort(hierarchy.maxdists(Z))
        # --distance: below everything, at each monotone height (inclusive), between heights, above all
        thresholds = [-1.0, float(md[0]) / 2] + [float(v) for v in md[:: max(1, (n - 1) // 6)]]
        thresholds += [float(v + w) / 2 for v, w in zip(md[:-1:5], md[1::5])] + [float(md[-1]), float(md[-1]) + 1]
        for t in thresholds:
            ours = self.run(z_path, "--distance", repr(t))
            want = hierarchy.fcluster(Z, t, "distance")
            self.expect(same_partition(ours, want) and first_appearance(ours),
                        f"{name} --distance {t}: moecomp {ours.tolist()} vs scipy {want.tolist()}")
        # --maxclust
        for k in range(1, n + 2) if every_k else sorted({1, 2, 3, 7, n - 1, n, n + 3}):
            if k < 1:
                continue
            ours = self.run(z_path, "--maxclust", str(k))
            clusters = len(set(ours.tolist()))
            self.expect(clusters == min(k, n) and first_appearance(ours),
                        f"{name} --maxclust {k}: {clusters} clusters, labels {ours.tolist()}")
            scipy_labels = hierarchy.fcluster(Z, k, "maxclust")
            if len(set(scipy_labels.tolist())) == min(k, n):
                self.expect(same_partition(ours, scipy_labels),
                            f"{name} --maxclust {k}: moecomp {ours.tolist()} vs scipy {scipy_labels.tolist()}")
                continue
            self.scipy_bug_cases += 1
            if k >= n:
                want = np.arange(n)
            elif k == 1:
                want = np.zeros(n, dtype=np.int64)
            elif md[n - k - 1] < md[n - k]:  # the cut height is not tied: the 'distance' criterion defines it
                want = hierarchy.fcluster(Z, md[n - k - 1], "distance")
            else:
                want = documented_maxclust(Z, k)
                self.tied_cuts += 1
            self.expect(same_partition(ours, want),
                        f"{name} --maxclust {k} (scipy maxclust bug case): moecomp {ours.tolist()} vs {want.tolist()}")

    def check_rejected(self, name, Z, scipy_rejects=True):
        if scipy_rejects:
            assert not hierarchy.is_valid_linkage(Z), name
        path = os.path.join(self.tmp, "invalid.npy")
        np.save(path, Z)
        r = subprocess.run([self.tool, "fcluster", path, "--maxclust", "2"], capture_output=True, text=True)
        self.expect(r.returncode == 2 and r.stderr.startswith("moecomp: error: ") and r.stderr.count("\n") == 1,
                    f"invalid Z ({name}): exit {r.returncode}, stderr {r.stderr!r}")


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(20261123)
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(tool, tmp)
        z_path = os.path.join(tmp, "z.npy")
        for data_name, x in datasets(rng):
            for method in METHODS:
                Z = hierarchy.linkage(x, method)
                np.save(z_path, Z)
                before = c.failures
                # inversions tie monotone heights: try every K on the smaller centroid/median trees
                every_k = method in ("centroid", "median") and len(x) <= 40
                c.check_linkage(f"{data_name} {method}", Z, z_path, every_k)
                print(f"{'ok  ' if c.failures == before else 'FAIL'} {data_name} {method}")
        # float32 Z is widened exactly; compare with scipy on the same (rounded) values
        Z = hierarchy.linkage(rng.standard_normal((30, 4)), "average").astype(np.float32)
        np.save(z_path, Z)
        c.check_linkage("float32 Z average 30x4", Z.astype(np.float64), z_path)

        Z = hierarchy.linkage(rng.standard_normal((6, 2)), "complete")
        bad = Z.copy()
        bad[2, 3] += 1
        c.check_rejected("wrong size", bad, scipy_rejects=False)  # scipy 1.10's is_valid_linkage skips sizes
        bad = Z.copy()
        bad[2, [0, 1]] = bad[2, [1, 0]]
        c.check_rejected("ids not ascending", bad, scipy_rejects=False)  # scipy accepts either order
        bad = Z.copy()
        bad[3, 0] = bad[2, 0]
        c.check_rejected("cluster merged twice", bad)
        bad = Z.copy()
        bad[0, 1] = 6 + 3
        c.check_rejected("cluster not formed yet", bad)
        bad = Z.copy()
        bad[1, 2] = -1.0
        c.check_rejected("negative height", bad)
    print(f"{c.checks - c.failures} passed, {c.failures} failed "
          f"(scipy {scipy.__version__} maxclust gave a wrong cluster count in {c.scipy_bug_cases} cases, "
          f"checked against the definition instead; {c.tied_cuts} of them at a tied monotone height)")
    sys.exit(1 if c.failures else 0)


if __name__ == "__main__":
    main()
