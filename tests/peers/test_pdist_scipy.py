#!/usr/bin/env python3
"""`moecomp pdist` against scipy.spatial.distance.pdist: 1e-10 relative in float64, 2e-4 in float32, all four
metrics, several shapes and data distributions (including near-duplicate rows far from the origin, where the
Gram form would cancel). Usage: test_pdist_scipy.py PATH/TO/moecomp"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import require  # noqa: E402

np, spatial = require("numpy", "scipy.spatial.distance")

TOL = {"float64": 1e-10, "float32": 2e-4}
METRICS = ["euclidean", "sqeuclidean", "cosine", "correlation"]


def datasets(rng):
    yield "gaussian 50x7", rng.standard_normal((50, 7))
    yield "gaussian 300x64", rng.standard_normal((300, 64))
    yield "uniform 513x300", rng.uniform(-2, 5, (513, 300))
    base = rng.standard_normal((10, 128))
    clusters = np.repeat(base, 20, axis=0) + 1e-3 * rng.standard_normal((200, 128))
    yield "near-duplicates 200x128", clusters
    yield "offset 1e3 near-duplicates 100x32", 1e3 + np.repeat(rng.standard_normal((5, 32)), 20, axis=0) \
        + 1e-2 * rng.standard_normal((100, 32))
    yield "two points", rng.standard_normal((2, 5))


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(20261122)
    failures = checks = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, x64 in datasets(rng):
            for dtype in ("float64", "float32"):
                x = x64.astype(dtype)
                xin, dout = os.path.join(tmp, "x.npy"), os.path.join(tmp, "d.npy")
                np.save(xin, x)
                for metric in METRICS:
                    subprocess.run([tool, "pdist", xin, "--metric", metric, "-o", dout], check=True)
                    got = np.load(dout)
                    want = spatial.pdist(x, metric)  # scipy computes float32 input in double
                    checks += 1
                    assert got.dtype == np.float64 and got.shape == want.shape, (got.dtype, got.shape, want.shape)
                    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-300)
                    # scipy's own 1 - cos cancels for near-parallel rows (its absolute error is ~1e-16), so
                    # there the comparison is absolute at scipy's resolution as well as relative
                    ok = (rel <= TOL[dtype]) | (np.abs(got - want) <= (1e-14 if dtype == "float64" else 1e-6))
                    if metric in ("euclidean", "sqeuclidean"):
                        ok = rel <= TOL[dtype]
                    if not ok.all():
                        failures += 1
                        k = int(np.argmax(rel))
                        print(f"FAIL {name} {dtype} {metric}: worst relative difference {rel[k]:.3e} at {k} "
                              f"(moecomp {got[k]!r}, scipy {want[k]!r})")
                    else:
                        print(f"ok   {name} {dtype} {metric}: max relative difference {rel.max():.2e}")
        # scipy's NaN conventions: zero row (cosine), constant row (correlation)
        x = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [2.0, 2.0, 2.0]])
        xin, dout = os.path.join(tmp, "z.npy"), os.path.join(tmp, "dz.npy")
        np.save(xin, x)
        for metric in ("cosine", "correlation"):
            subprocess.run([tool, "pdist", xin, "--metric", metric, "-o", dout], check=True)
            got, want = np.load(dout), spatial.pdist(x, metric)
            checks += 1
            if not np.array_equal(np.isnan(got), np.isnan(want)) or not np.allclose(got[~np.isnan(got)],
                                                                                   want[~np.isnan(want)]):
                failures += 1
                print(f"FAIL NaN convention {metric}: moecomp {got}, scipy {want}")
            else:
                print(f"ok   NaN convention {metric}: {got}")
    print(f"{checks - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
