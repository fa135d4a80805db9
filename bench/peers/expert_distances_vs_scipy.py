#!/usr/bin/env python3
"""Side-by-side: `moecomp expert-features --kind weight-distances` (moe::expert_weight_distances) against
scipy.spatial.distance.pdist on the experts' vectorised weights, in one run.

The workload is HC-SMoE's `--features weights`: E SwiGLU experts (W1, W3: d_ff x d; W2: d x d_ff), each
vectorised as concat(W1, W2, W3), and the E (E - 1) / 2 Euclidean distances. scipy's input is that E x 3 d_ff d
matrix in float64 (what moecomp widens each entry to; building it is not timed); moecomp reads the stacks and
never builds it. moecomp's time is the "seconds" its --json reports (the computation alone); scipy's is timed
around the pdist call. Prints one Markdown row per workload: the ratio scipy / moecomp and the largest relative
difference.

    /usr/bin/python3 bench/peers/expert_distances_vs_scipy.py --moecomp build/default/tools/cli/moecomp
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import tempfile
import time

import numpy as np
from scipy.spatial.distance import pdist


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--moecomp", required=True, help="path to the moecomp tool")
    p.add_argument("--shapes", default="8x512x1024,64x512x1024", help="E x d_ff x d, comma-separated")
    p.add_argument("--repeat", type=int, default=3, help="moecomp runs (best is kept); scipy runs once")
    a = p.parse_args()
    rng = np.random.default_rng(36)
    print("| workload | peer | moecomp s | peer s | ratio | max rel diff | machine | date |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in a.shapes.split(","):
        e, d_ff, d = (int(v) for v in shape.split("x"))
        w = {"w1": (e, d_ff, d), "w2": (e, d, d_ff), "w3": (e, d_ff, d)}
        parts = {k: (rng.standard_normal(s, dtype=np.float32) * np.float32(0.02)) for k, s in w.items()}
        with tempfile.TemporaryDirectory() as tmp:
            args = [a.moecomp, "expert-features", "--kind", "weight-distances", "--json"]
            for k, v in parts.items():
                np.save(os.path.join(tmp, k + ".npy"), v)
                args += ["--" + k, os.path.join(tmp, k + ".npy")]
            out = os.path.join(tmp, "d.npy")
            best = float("inf")
            for _ in range(a.repeat):
                r = subprocess.run(args + ["-o", out], check=True, capture_output=True, text=True).stdout
                best = min(best, json.loads(r)["seconds"])
            ours = np.load(out)
        vectorized = np.concatenate([parts[k].reshape(e, -1).astype(np.float64) for k in ("w1", "w2", "w3")], axis=1)
        t0 = time.perf_counter()
        ref = pdist(vectorized)
        peer = time.perf_counter() - t0
        diff = float(np.max(np.abs(ours - ref) / ref))
        print(f"| {e} experts of {d_ff} x {d}, float32 (scipy: float64 rows) | scipy pdist | {best:.3f} | {peer:.3f} | "
              f"{peer / best:.2f}x | {diff:.1e} | {platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} cpus | {datetime.date.today()} |", flush=True)
        del vectorized


if __name__ == "__main__":
    main()
