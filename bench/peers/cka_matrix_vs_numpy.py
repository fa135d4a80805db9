#!/usr/bin/env python3
"""Side-by-side: `moecomp cka-matrix` against a numpy loop over expert pairs of Kornblith's
feature_space_linear_cka, same data, one run; then the Qwen-MoE-scale matrix alone with its GFLOP/s.

Workloads (issue 13), float32 normal data, linear kernel, biased CKA:
  1. E = 32 experts x n = 1024 tokens x d = 1024: moecomp's all-pairs matrix against the numpy loop over the
     E (E - 1) / 2 pairs (each pair: centre both, ||X^T Y||^2, ||X^T X||, ||Y^T Y||: three d x n x d GEMMs);
     agreement = the largest |difference| between the two matrices.
  2. E = 64, n = 2048, d = 2048 (Qwen-MoE scale): moecomp alone; the GEMM flops it executes (the upper-
     triangle Gram tiles, E x 36/64 x 2 n^2 d, and the tile products, 2 E^2 x 36/64 n^2) divided by its
     whole time (centring included, so the GEMM part's own rate is at least this), against numpy's sgemm
     rate on 2048^3 measured in the same run.
Peers use OpenBLAS on --threads threads (set before numpy loads); moecomp runs its own --threads with
single-threaded GEMM tiles. moecomp's time is its --json "seconds" (the computation alone, no file I/O).

    /usr/bin/python3 bench/peers/cka_matrix_vs_numpy.py --moecomp build/default/tools/cli/moecomp
"""
import argparse
import os
import sys

THREADS = "2"
for i, a in enumerate(sys.argv):
    if a == "--threads" and i + 1 < len(sys.argv):
        THREADS = sys.argv[i + 1]
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = THREADS

import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402


def feature_space_linear_cka(fx, fy):
    fx = fx - np.mean(fx, 0, keepdims=True)
    fy = fy - np.mean(fy, 0, keepdims=True)
    return np.linalg.norm(fx.T.dot(fy)) ** 2 / (np.linalg.norm(fx.T.dot(fx)) * np.linalg.norm(fy.T.dot(fy)))


def run_moecomp(tool, threads, path, out):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS=threads)
    r = subprocess.run([tool, "cka-matrix", path, "-o", out, "--json", "--threads", threads], check=True,
                       capture_output=True, text=True, env=env)
    return json.loads(r.stdout)


def tiles_fraction(n, tile=256):
    t = -(-n // tile)
    return (t * (t + 1) / 2) / (t * t)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--moecomp", required=True)
    p.add_argument("--threads", default=THREADS)
    p.add_argument("--skip-large", action="store_true", help="only the E = 32 comparison")
    a = p.parse_args()
    rng = np.random.default_rng(13)
    big = rng.standard_normal((2048, 2048)).astype(np.float32)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        big @ big
        best = min(best, time.perf_counter() - t0)
    sgemm = 2 * 2048 ** 3 / best
    print(f"# {datetime.date.today()} {platform.machine()}, {os.cpu_count()} CPUs, {a.threads} threads; numpy "
          f"{np.__version__}; sgemm {sgemm / 1e9:.0f} GFLOP/s (2048^3)")
    with tempfile.TemporaryDirectory() as tmp:
        path, out = os.path.join(tmp, "f.npy"), os.path.join(tmp, "s.npy")
        e, n, d = 32, 1024, 1024
        f = rng.standard_normal((e, n, d), dtype=np.float32)
        np.save(path, f)
        summary = run_moecomp(a.moecomp, a.threads, path, out)
        ours = summary["seconds"]
        s = np.load(out)
        t0 = time.perf_counter()
        ref = np.eye(e)
        for i in range(e):
            for j in range(i + 1, e):
                ref[i, j] = ref[j, i] = feature_space_linear_cka(f[i], f[j])
        numpy_time = time.perf_counter() - t0
        print("| workload | numpy pair loop s | moecomp s | ratio | agreement |")
        print("|---|---|---|---|---|")
        print(f"| all-pairs linear CKA, E = {e}, n = {n}, d = {d}, float32 | {numpy_time:.2f} | {ours:.3f} | "
              f"{numpy_time / ours:.1f}x | max abs diff {np.max(np.abs(s - ref)):.1e} ({summary['route']} route) |")
        if a.skip_large:
            return
        del f
        e, n, d = 64, 2048, 2048
        f = rng.standard_normal((e, n, d), dtype=np.float32)
        np.save(path, f)
        del f
        summary = run_moecomp(a.moecomp, a.threads, path, out)
        frac = tiles_fraction(n)
        flops = e * frac * 2 * n * n * d + 2 * e * e * frac * n * n
        rate = flops / summary["seconds"]
        print()
        print("| workload | moecomp s | executed GEMM GFLOP | GFLOP/s (whole run) | share of sgemm rate |")
        print("|---|---|---|---|---|")
        print(f"| all-pairs linear CKA, E = {e}, n = {n}, d = {d}, float32 | {summary['seconds']:.2f} | "
              f"{flops / 1e9:.0f} | {rate / 1e9:.0f} | {rate / sgemm * 100:.0f}% of {sgemm / 1e9:.0f} |")


if __name__ == "__main__":
    main()
