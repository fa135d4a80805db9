#!/usr/bin/env python3
"""Side-by-side: `moecomp barycenter-free` against POT's ot.lp.free_support_barycenter on the same data, in one run.

Workloads (the bar of the optimal-transport issue is the first):
  * 8 clouds x 512 points x 770 dims float64, standard normal, uniform weights, init = cloud 0, at most 10
    iterations (POT's defaults otherwise: stopThr 1e-7);
  * ResMoE-shaped: 8 "upcycled" experts (one shared base, rows shuffled per expert, plus noise), same settings.
moecomp's time is the "seconds" of its --json (no file I/O); POT is timed in-process around its call. Each row
gives both objectives sum_j w_j W_2^2(B, X_j), evaluated exactly for each returned barycenter with
scipy.optimize.linear_sum_assignment (POT's own iterate can carry the suboptimal plans of its emd's 100000-pivot
cap), the iteration counts, and whether moecomp's objective is <= POT's (+1e-9 relative).

    /usr/bin/python3 bench/peers/barycenter_vs_pot.py --moecomp build/default/tools/cli/moecomp
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
import ot
from scipy.optimize import linear_sum_assignment


def exact_objective(clouds, weights, b):
    total = 0.0
    for w, x in zip(weights, clouds):
        cost = ot.dist(x, b)  # squared Euclidean
        r, c = linear_sum_assignment(cost)
        total += w * cost[r, c].sum() / len(x)
    return total


def run_moecomp(tool, files, out, max_iter, repeat):
    best, summary = float("inf"), None
    for _ in range(repeat):
        res = subprocess.run([tool, "barycenter-free", *files, "--max-iter", str(max_iter), "-o", out, "--json"],
                             check=True, capture_output=True, text=True).stdout
        summary = json.loads(res)
        best = min(best, summary["seconds"])
    return best, summary, np.load(out)


def run_pot(clouds, max_iter, repeat):
    n = clouds[0].shape[0]
    masses = [np.full(n, 1.0 / n) for _ in clouds]
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        b, log = ot.lp.free_support_barycenter(clouds, masses, clouds[0].copy(), numItermax=max_iter, log=True)
        best = min(best, time.perf_counter() - t0)
        result = (b, len(log["displacement_square_norms"]))
    return best, result


def upcycled(rng, k, n, d, noise):
    base = rng.standard_normal((n, d))
    return [base[rng.permutation(n)] + noise * rng.standard_normal((n, d)) for _ in range(k)]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--moecomp", required=True)
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--d", type=int, default=770)
    p.add_argument("--max-iter", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    machine = f"{platform.machine()}, {os.cpu_count()} cores"
    today = datetime.date.today()
    workloads = [
        ("normal", [rng.standard_normal((a.n, a.d)) for _ in range(a.k)]),
        ("upcycled experts (noise 0.3)", upcycled(rng, a.k, a.n, a.d, 0.3)),
    ]
    print("| workload | peer | moecomp s | peer s | ratio | moecomp objective | POT objective | iterations "
          "(moecomp / POT) | objective <= POT | machine | date |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, clouds in workloads:
            files = []
            for j, x in enumerate(clouds):
                files.append(os.path.join(tmp, f"x{j}.npy"))
                np.save(files[-1], x)
            out = os.path.join(tmp, "b.npy")
            ours, summary, b = run_moecomp(a.moecomp, files, out, a.max_iter, a.repeat)
            peer, (bp, pot_iterations) = run_pot(clouds, a.max_iter, a.repeat)
            weights = [1.0 / a.k] * a.k
            obj_ours = exact_objective(clouds, weights, b)
            obj_pot = exact_objective(clouds, weights, bp)
            better = obj_ours <= obj_pot * (1 + 1e-9) and abs(summary["objective"] - obj_ours) <= 1e-9 * obj_ours
            ok = ok and better
            print(f"| barycenter-free {name}, {a.k} x {a.n} x {a.d} float64, max {a.max_iter} it | POT "
                  f"{ot.__version__} free_support_barycenter | {ours:.4f} | {peer:.4f} | {peer / ours:.2f}x | "
                  f"{obj_ours:.10g} | {obj_pot:.10g} | {summary['iterations']} / {pot_iterations} | "
                  f"{'yes' if better else 'NO'} | {machine} | {today} |", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
