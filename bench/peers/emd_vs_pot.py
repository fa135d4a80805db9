#!/usr/bin/env python3
"""Side-by-side: `moecomp emd` against POT's ot.emd on the same data, in one run.

Workload (the bar of the optimal-transport issue): n = m = 1000 (and other sizes with --sizes), masses uniform
random normalised, cost = squared Euclidean between uniform random 2-D points (ot.dist). moecomp's time is the
"seconds" of its --json (the solve and writing the dense plan into memory, no file I/O); POT's is ot.emd timed
in-process (dense plan as well). Best of --repeat runs each. Each row also says whether the costs agree (1e-9
relative) and gives moecomp's pivot count.

    /usr/bin/python3 bench/peers/emd_vs_pot.py --moecomp build/default/tools/cli/moecomp
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


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--moecomp", required=True)
    p.add_argument("--sizes", default="1000x1000,200x200,1000x500")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    machine = f"{platform.machine()}, {os.cpu_count()} cores"
    today = datetime.date.today()
    print("| workload | peer | moecomp s | peer s | ratio | costs agree | pivots | machine | date |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for size in a.sizes.split(","):
            n, m = (int(t) for t in size.split("x"))
            rng = np.random.default_rng(a.seed)
            x, y = rng.random((n, 2)), rng.random((m, 2))
            wa, wb = rng.random(n), rng.random(m)
            wa, wb = wa / wa.sum(), wb / wb.sum()
            M = ot.dist(x, y)
            paths = [os.path.join(tmp, f) for f in ("a.npy", "b.npy", "M.npy")]
            for path, arr in zip(paths, (wa, wb, M)):
                np.save(path, arr)
            out = os.path.join(tmp, "plan.npy")
            ours, summary = float("inf"), None
            for _ in range(a.repeat):
                r = subprocess.run([a.moecomp, "emd", *paths, "-o", out, "--json", "--threads", "1"], check=True,
                                   capture_output=True, text=True)
                summary = json.loads(r.stdout)
                ours = min(ours, summary["seconds"])
            peer, log = float("inf"), None
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                _, log = ot.emd(wa, wb, M, log=True)
                peer = min(peer, time.perf_counter() - t0)
            agree = abs(summary["cost"] - log["cost"]) <= 1e-9 * abs(log["cost"])
            print(f"| emd {n}x{m}, random masses, sqeuclidean 2-D | POT {ot.__version__} ot.emd | {ours:.4f} | "
                  f"{peer:.4f} | {peer / ours:.2f}x | {'yes' if agree else 'NO'} "
                  f"({summary['cost']:.12g} vs {log['cost']:.12g}) | {summary['iterations']} | {machine} | {today} |",
                  flush=True)
    print(f"\nnumpy {np.__version__}; load average {os.getloadavg()[0]:.2f} (timings are best of {a.repeat})")


if __name__ == "__main__":
    main()
