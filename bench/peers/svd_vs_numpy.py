#!/usr/bin/env python3
"""sparse::truncated_svd (bench/bench_low_rank.cpp, one-sided Jacobi in double, serial) against numpy's LAPACK SVD
(np.linalg.svd, gesdd, on the float64 matrix, then truncated to the same rank) at the bench's three shapes of a
ResMoE design residual, keep 0.25. One run of each in this process; ratio = numpy time / moecomp time (above 1:
moecomp faster). numpy's BLAS threads are whatever OPENBLAS_NUM_THREADS allows (2 here); moecomp's SVD is serial.

Usage: bench/peers/svd_vs_numpy.py build/mine/bench/bench_low_rank"""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import timed  # noqa: E402


def main():
    bench = sys.argv[1]
    out = subprocess.run([bench, "--benchmark_format=json"], capture_output=True, text=True, check=True).stdout
    ours = {}
    for b in json.loads(out)["benchmarks"]:
        _, rows, cols = b["run_name"].split("/")[:3]
        ours[(int(rows), int(cols))] = (b["real_time"] / 1e3, int(b["rank"]))  # ms -> s
    rng = np.random.default_rng(5)
    print(f"{'shape':<12} {'rank':>5} {'moecomp':>10} {'numpy':>10} {'ratio':>7}")
    for (rows, cols), (seconds, rank) in sorted(ours.items()):
        a = (0.01 * rng.standard_normal((rows, cols))).astype(np.float32)

        def numpy_svd():
            u, s, vt = np.linalg.svd(a.astype(np.float64), full_matrices=False)
            return u[:, :rank] * s[:rank], vt[:rank]
        t, _ = timed(numpy_svd, 3)
        print(f"{rows}x{cols:<7} {rank:>5} {seconds:>9.4f}s {t:>9.4f}s {t / seconds:>7.3f}")


if __name__ == "__main__":
    main()
