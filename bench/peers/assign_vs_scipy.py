#!/usr/bin/env python3
"""Side-by-side: `moecomp assign` against scipy.optimize.linear_sum_assignment on the same data, in one run.

Workloads: the issue's bar, a 2048 x 2048 uniform random float64 cost (moecomp must be >= 2x faster), plus
512 x 512, the same 2048 cost in float32 (scipy converts it to float64), a rectangular 1024 x 2048 cost, and
squared distances between two 1024-point clouds in 16-D. moecomp's time is the "seconds" of its --json
(the solver alone, single-threaded, no file I/O); scipy is timed in-process around its call; best of
--repeat runs each. Each row says whether the totals agree to 1e-9 relative.

    /usr/bin/python3 bench/peers/assign_vs_scipy.py --moecomp build/default/tools/cli/moecomp
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

import numpy as np
import scipy
from scipy.optimize import linear_sum_assignment

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import timed  # noqa: E402


def run_moecomp(tool, path, out, repeat, *flags):
    best = float("inf")
    for _ in range(repeat):
        res = subprocess.run([tool, "assign", path, "-o", out, "--json", "--threads", "1", *flags], check=True,
                             capture_output=True, text=True).stdout
        best = min(best, json.loads(res)["seconds"])
    return best, np.load(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--moecomp", required=True)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    rng = np.random.default_rng(1)
    machine = f"{platform.machine()}, {os.cpu_count()} cores"
    today = datetime.date.today()
    x, y = rng.standard_normal((1024, 16)), rng.standard_normal((1024, 16))
    workloads = [
        ("uniform 2048x2048 float64", rng.random((2048, 2048))),
        ("uniform 512x512 float64", rng.random((512, 512))),
        ("uniform 2048x2048 float32", rng.random((2048, 2048)).astype(np.float32)),
        ("uniform 1024x2048 float64", rng.random((1024, 2048))),
        ("squared distances 1024 points, 16-D", ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)),
    ]
    print("| workload | peer | moecomp s | peer s | ratio | same total | machine | date |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        cin, cout = os.path.join(tmp, "c.npy"), os.path.join(tmp, "cols.npy")
        for name, c in workloads:
            np.save(cin, c)
            ours, cols = run_moecomp(a.moecomp, cin, cout, a.repeat)
            c64 = c.astype(np.float64)
            peer, (rows, peer_cols) = timed(lambda: linear_sum_assignment(c), a.repeat)
            got, want = c64[np.arange(len(cols)), cols].sum(), c64[rows, peer_cols].sum()
            same = abs(got - want) <= 1e-9 * max(abs(want), 1.0) and len(set(cols.tolist())) == len(cols)
            print(f"| assign {name} | scipy {scipy.__version__} linear_sum_assignment | {ours:.4f} | {peer:.4f} | "
                  f"{peer / ours:.2f}x | {'yes' if same else 'NO'} | {machine} | {today} |", flush=True)


if __name__ == "__main__":
    main()
