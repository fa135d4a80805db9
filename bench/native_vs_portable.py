#!/usr/bin/env python3
"""What -march=native buys the moecomp tool: the same workloads through two builds of the tool, a native one
(the default preset, MOECOMP_NATIVE=ON) and a portable one (MOECOMP_NATIVE=OFF: the compiler's baseline
x86-64, SSE2), timed alternately in every round (this VM's speed drifts), best of --repeat. Times are the
tool's own "seconds" (the library call, no file I/O).

Usage: native_vs_portable.py --native build/default/tools/cli/moecomp \
                             --portable build/portable/tools/cli/moecomp [--repeat 5]"""
import argparse
import json
import os
import subprocess
import tempfile

import numpy as np


def workloads(tmp, rng):
    def save(name, array):
        path = os.path.join(tmp, name)
        np.save(path, array)
        return path

    x32 = save("x32.npy", rng.standard_normal((4096, 1024)).astype(np.float32))
    x64 = save("x64.npy", rng.standard_normal((2048, 1024)))
    pts = save("pts.npy", rng.standard_normal((4000, 64)))
    n = 2000
    a = rng.random(n) + 0.1
    a /= a.sum()
    ha = save("a.npy", a)
    xy = rng.random((n, 2))
    cost = ((xy[:, None, :] - xy[None, :, :]) ** 2).sum(-1)
    M = save("M.npy", cost / cost.max())
    emd_a = save("ea.npy", np.full(1000, 1e-3))
    emd_M = save("eM.npy", rng.random((1000, 1000)))
    clouds = [save(f"c{j}.npy", rng.standard_normal((512, 770)).astype(np.float32)) for j in range(8)]
    return [
        ("pdist euclidean 4096x1024 float32", ["pdist", x32]),
        ("pdist cosine 4096x1024 float32", ["pdist", x32, "--metric", "cosine"]),
        ("pdist euclidean 2048x1024 float64", ["pdist", x64]),
        ("linkage average 4000x64", ["linkage", pts, "--method", "average"]),
        ("sinkhorn plain 2000x2000 reg 1e-2", ["sinkhorn", ha, ha, M, "--reg", "1e-2"]),
        ("sinkhorn log 2000x2000 reg 1e-2", ["sinkhorn", ha, ha, M, "--reg", "1e-2", "--method", "log"]),
        ("emd 1000x1000", ["emd", emd_a, emd_a, emd_M]),
        ("assign 1000x1000", ["assign", emd_M]),
        ("barycenter-free 8 x 512x770 float32, 10 iterations", ["barycenter-free", *clouds, "--max-iter", "10"]),
    ]


def seconds(tool, args):
    r = subprocess.run([tool, *args, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{tool} {' '.join(args)} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)["seconds"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--native", required=True)
    p.add_argument("--portable", required=True)
    p.add_argument("--repeat", type=int, default=5)
    options = p.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        print("| workload | native s | portable s | native gain |")
        print("|---|---|---|---|")
        for label, args in workloads(tmp, rng):
            best = {"native": float("inf"), "portable": float("inf")}
            for _ in range(options.repeat):
                for name in ("native", "portable"):
                    best[name] = min(best[name], seconds(getattr(options, name), args))
            print(f"| {label} | {best['native']:.4f} | {best['portable']:.4f} | "
                  f"{best['portable'] / best['native']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
