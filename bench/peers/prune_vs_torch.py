#!/usr/bin/env python3
"""Side-by-side: `moecomp prune` against torch.nn.utils.prune.l1_unstructured, same data, one run.

Workload (issue 15): ResMoE's pruning of a Mixtral expert's design matrix [W1 | W3 | W2^T], 14336 x 12288
float32, at amount 0.75. torch (2 threads) is timed on a 4096 x 12288 slice (its full-size run takes tens of
seconds and 2x the memory), and moecomp on the same slice and on the full matrix; the ratio compares the
same slice. The masks agree (checked on the slice). moecomp's time is its --json "seconds" (the pruning
alone, no file I/O). The floor: the matrix read twice and written once at this machine's copy bandwidth
(numpy's copy of the slice, measured here).

    /usr/bin/python3 bench/peers/prune_vs_torch.py --moecomp build/default/tools/cli/moecomp
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
import torch
import torch.nn.utils.prune as torch_prune


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--moecomp", required=True)
    p.add_argument("--threads", default="2")
    p.add_argument("--skip-full", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(int(a.threads))
    rng = np.random.default_rng(15)
    rows, cols, amount = 4096, 12288, 0.75
    w = rng.standard_normal((rows, cols), dtype=np.float32)
    copy = np.empty_like(w)
    np.copyto(copy, w)  # the first copy faults its pages in; the second measures the bandwidth
    t0 = time.perf_counter()
    np.copyto(copy, w)
    copy_s = time.perf_counter() - t0
    bandwidth = 2 * w.nbytes / copy_s
    t = torch.from_numpy(w)
    t0 = time.perf_counter()
    mask = torch_prune.L1Unstructured(amount=amount).compute_mask(t, default_mask=torch.ones_like(t))
    torch_s = time.perf_counter() - t0
    mask = mask.numpy() != 0
    env = dict(os.environ, OMP_NUM_THREADS=a.threads, OPENBLAS_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        wp, op = os.path.join(tmp, "w.npy"), os.path.join(tmp, "p.npy")
        np.save(wp, w)
        r = subprocess.run([a.moecomp, "prune", wp, "--sparsity", str(amount), "-o", op, "--json", "--threads",
                            a.threads], check=True, capture_output=True, text=True, env=env)
        ours = json.loads(r.stdout)["seconds"]
        agree = np.array_equal(np.load(op) != 0, mask)
        full = None
        if not a.skip_full:
            del copy, t
            big = np.concatenate([w, rng.standard_normal((14336 - rows, cols), dtype=np.float32)])
            np.save(wp, big)
            del big
            r = subprocess.run([a.moecomp, "prune", wp, "--sparsity", str(amount), "-o", op, "--json", "--threads",
                                a.threads], check=True, capture_output=True, text=True, env=env)
            full = json.loads(r.stdout)["seconds"]
    floor = 3 * w.nbytes / bandwidth
    print(f"# {datetime.date.today()} {platform.machine()}, {os.cpu_count()} CPUs, {a.threads} threads; torch "
          f"{torch.__version__}; copy bandwidth {bandwidth / 1e9:.1f} GB/s")
    print("| workload | torch s | moecomp s | ratio | floor s | agreement |")
    print("|---|---|---|---|---|---|")
    print(f"| prune 0.75, {rows} x {cols} float32 | {torch_s:.3f} | {ours:.4f} | {torch_s / ours:.1f}x | {floor:.4f} | "
          f"masks {'equal' if agree else 'DIFFER'} |")
    if full is not None:
        print(f"| prune 0.75, 14336 x {cols} float32 (moecomp alone) | - | {full:.4f} | - | {floor * 14336 / rows:.4f} | |")


if __name__ == "__main__":
    main()
