#!/usr/bin/env python3
"""Side-by-side: `moecomp linkage` against scipy and fastcluster on the same data, in one run.

Workloads (the bars of the hierarchical-clustering issue):
  * points -> Z: average (and others) from 4000 x 64 float64 points; peer = scipy pdist + fastcluster.linkage,
    and scipy.cluster.hierarchy.linkage for reference;
  * condensed -> Z for n = 8000; peer = fastcluster.linkage on the same condensed vector (and scipy's linkage).
moecomp's time is the "seconds" of its --json (distances + linkage for points, no file I/O); the peers are timed
in-process around their calls. Each row also says whether the Z matrices agree (ids and sizes exactly,
heights to 1e-9 relative).

    /usr/bin/python3 bench/peers/linkage_vs_fastcluster.py --moecomp build/default/tools/cli/moecomp
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

import fastcluster
import numpy as np
import scipy
from scipy.cluster.hierarchy import linkage as scipy_linkage
from scipy.spatial.distance import pdist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import timed  # noqa: E402


def same_z(a, b):
    return (a.shape == b.shape and np.array_equal(a[:, [0, 1, 3]], b[:, [0, 1, 3]])
            and np.allclose(a[:, 2], b[:, 2], rtol=1e-9, atol=0))


def run_moecomp(tool, args, out, repeat):
    best = float("inf")
    for _ in range(repeat):
        res = subprocess.run([tool, "linkage", *args, "-o", out, "--json"], check=True, capture_output=True,
                             text=True).stdout
        best = min(best, json.loads(res)["seconds"])
    return best, np.load(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--moecomp", required=True)
    p.add_argument("--points-n", type=int, default=4000)
    p.add_argument("--points-d", type=int, default=64)
    p.add_argument("--condensed-n", type=int, default=8000)
    p.add_argument("--methods", default="average,complete,ward,single")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    rng = np.random.default_rng(1)
    machine = f"{platform.machine()}, {os.cpu_count()} cores"
    today = datetime.date.today()
    print("| workload | peer | moecomp s | peer s | ratio | scipy s | same Z | machine | date |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        x = rng.standard_normal((a.points_n, a.points_d))
        xin, zout = os.path.join(tmp, "x.npy"), os.path.join(tmp, "z.npy")
        np.save(xin, x)
        for method in a.methods.split(","):
            ours, z = run_moecomp(a.moecomp, [xin, "--method", method], zout, a.repeat)
            peer, zp = timed(lambda: fastcluster.linkage(pdist(x), method=method), a.repeat)
            sc, zs = timed(lambda: scipy_linkage(x, method=method), 1)
            print(f"| linkage {method}, points {a.points_n}x{a.points_d} float64 | scipy pdist + fastcluster "
                  f"{fastcluster.__version__} | {ours:.4f} | {peer:.4f} | {peer / ours:.2f}x | {sc:.3f} | "
                  f"{'yes' if same_z(z, zs) else 'NO'} | {machine} | {today} |", flush=True)
        y = pdist(rng.standard_normal((a.condensed_n, 16)))
        yin = os.path.join(tmp, "y.npy")
        np.save(yin, y)
        for method in a.methods.split(","):
            ours, z = run_moecomp(a.moecomp, [yin, "--condensed", "--method", method], zout, a.repeat)
            peer, zp = timed(lambda: fastcluster.linkage(y, method=method), a.repeat)
            sc, zs = timed(lambda: scipy_linkage(y, method=method), 1)
            print(f"| linkage {method}, condensed n={a.condensed_n} | fastcluster {fastcluster.__version__} | "
                  f"{ours:.4f} | {peer:.4f} | {peer / ours:.2f}x | {sc:.3f} | {'yes' if same_z(z, zs) else 'NO'} "
                  f"| {machine} | {today} |", flush=True)
    print(f"\nscipy {scipy.__version__}, numpy {np.__version__}")


if __name__ == "__main__":
    main()
