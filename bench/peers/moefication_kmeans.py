#!/usr/bin/env python3
"""The MoEfication-size clustering: balanced against unbalanced k-means, and the balanced assignment step
against POT's emd on the same transport problem, in one run.

Workload (issue 12): W1 of 11008 x 4096 float32 (a LLaMA-7B FFN's shape; here normal random rows, no
checkpoint), rows L2-normalised, into 64 experts of 172 neurons. Both fits run exactly --iterations Lloyd
iterations (tol 0) from the same 64 rows, through `moecomp kmeans` (--balanced or not), --threads threads;
times are the tool's --json seconds. The assignment step alone: the transport problem of the balanced fit's
last step (11008 rows of supply 1, 64 columns of demand 172, squared distances to the returned centres) as
`moecomp emd --sparse` against POT's ot.emd, costs compared.

    /usr/bin/python3 bench/peers/moefication_kmeans.py --moecomp build/default/tools/cli/moecomp
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import tempfile
import time

THREADS = "2"
os.environ.setdefault("OMP_NUM_THREADS", THREADS)
os.environ.setdefault("OPENBLAS_NUM_THREADS", THREADS)

import numpy as np  # noqa: E402
import ot  # noqa: E402


def tool(args, cmd):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")  # moecomp's GEMM tiles are single-threaded by design
    r = subprocess.run([args.moecomp, *cmd, "--json", "--threads", args.threads], check=True, capture_output=True,
                       text=True, env=env)
    return json.loads(r.stdout)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--moecomp", required=True)
    p.add_argument("--threads", default=THREADS)
    p.add_argument("--rows", type=int, default=11008)
    p.add_argument("--d", type=int, default=4096)
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--iterations", type=int, default=10)
    a = p.parse_args()
    rng = np.random.default_rng(3)
    n, d, k = a.rows, a.d, a.experts
    w1 = rng.standard_normal((n, d)).astype(np.float32)
    w1 /= np.linalg.norm(w1, axis=1, keepdims=True)
    start = w1[rng.choice(n, k, replace=False)].copy()
    with tempfile.TemporaryDirectory() as tmp:
        paths = {name: os.path.join(tmp, name + ".npy") for name in ("w1", "c0", "lab", "cen", "a", "b", "m", "plan")}
        np.save(paths["w1"], w1)
        np.save(paths["c0"], start)
        common = ["kmeans", paths["w1"], "--k", str(k), "--init", paths["c0"], "--max-iter", str(a.iterations), "--tol",
                  "0", "-o", paths["lab"], "--centers", paths["cen"]]
        plain = tool(a, common)
        balanced = tool(a, common + ["--balanced"])
        centers = np.load(paths["cen"]).astype(np.float64)
        x = w1.astype(np.float64)
        cost = np.maximum((x * x).sum(1)[:, None] + (centers * centers).sum(1)[None, :] - 2 * x @ centers.T, 0.0)
        np.save(paths["a"], np.ones(n))
        np.save(paths["b"], np.full(k, n / k))
        np.save(paths["m"], cost)
        ours = min(tool(a, ["emd", paths["a"], paths["b"], paths["m"], "--sparse", "-o", paths["plan"]])["seconds"]
                   for _ in range(3))
        ours_cost = tool(a, ["emd", paths["a"], paths["b"], paths["m"], "--sparse", "-o", paths["plan"]])["cost"]
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            plan = ot.emd(np.ones(n), np.full(k, n / k), cost, numItermax=10**8)
            best = min(best, time.perf_counter() - t0)
        pot_cost = float((plan * cost).sum())
    print(f"# {datetime.date.today()} {platform.machine()}, {os.cpu_count()} CPUs, moecomp --threads {a.threads}, "
          f"POT {ot.__version__}")
    print(f"workload: {n} x {d} float32 rows (L2-normalised) into {k} experts of {n // k}, {a.iterations} iterations")
    print("| measurement | moecomp s | other s | ratio | note |")
    print("|---|---|---|---|---|")
    print(f"| balanced fit vs unbalanced fit | {balanced['seconds']:.3f} | {plain['seconds']:.3f} | "
          f"{balanced['seconds'] / plain['seconds']:.2f}x (balanced / unbalanced) | sizes "
          f"{min(balanced['sizes'])}..{max(balanced['sizes'])} vs {min(plain['sizes'])}..{max(plain['sizes'])}, "
          f"iterations {balanced['iterations']} vs {plain['iterations']}, gap {balanced['assignment_gap']:.1e} |")
    print(f"| balanced assignment step vs POT ot.emd | {ours:.4f} | {best:.4f} | {best / ours:.2f}x | "
          f"cost {ours_cost:.10g} vs {pot_cost:.10g} |")


if __name__ == "__main__":
    main()
