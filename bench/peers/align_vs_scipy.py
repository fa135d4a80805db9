#!/usr/bin/env python3
"""Side-by-side: `moecomp align` against numpy (the cost) plus scipy.optimize.linear_sum_assignment, in one run.

Workloads (issue 14): weight matching of two Qwen-MoE-size experts (d = 2048, d_ff = 1408, SwiGLU: design rows
[W1 | W3 | W2^T] of 6144 float32 columns), by squared distance and by inner product, and by the correlation of
hidden activations (1408 neurons over 8192 tokens). Expert B is expert A with its neurons shuffled plus noise
of half the weights' size. The peer is what a careful numpy user writes: the cost by one float32 GEMM
(|a|^2 + |b|^2 - 2 a b^T, or a b^T, or np.corrcoef's standardised columns), then linear_sum_assignment. Both
sides: 2 threads (OpenBLAS for numpy). moecomp's time is the "seconds" of --json (cost and assignment, no file
I/O); the peer is timed in-process around cost + assignment; best of --repeat. Each row says whether the
totals agree (1e-5 relative: both work in float32 costs).

With --mixtral, also the Mixtral-size weight matching (d = 4096, d_ff = 14336: 14336 design rows of 12288),
moecomp alone: time and the tool's peak resident memory (its own process, from wait4's rusage).

    OPENBLAS_NUM_THREADS=2 /usr/bin/python3 bench/peers/align_vs_scipy.py --moecomp build/default/tools/cli/moecomp
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
from scipy.optimize import linear_sum_assignment

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import timed  # noqa: E402


def run_moecomp(tool, a, b, objective, repeat):
    best, summary, rss = float("inf"), None, 0
    for _ in range(repeat):
        out_path = os.path.join(os.path.dirname(a), "p.npy")
        proc = subprocess.Popen([tool, "align", a, b, "--objective", objective, "-o", out_path, "--json", "--threads",
                                 "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        out = proc.stdout.read()
        if status != 0:
            raise RuntimeError(f"moecomp align failed: {proc.stderr.read()}")
        summary = json.loads(out)
        best = min(best, summary["seconds"])
        rss = max(rss, usage.ru_maxrss * 1024)
    return best, summary, rss


def design_pair(rng, d, d_ff):
    s1, s2 = 1 / np.sqrt(d), 1 / np.sqrt(d_ff)
    a = np.concatenate([s1 * rng.standard_normal((d_ff, 2 * d), dtype=np.float32),
                        s2 * rng.standard_normal((d_ff, d), dtype=np.float32)], axis=1)
    q = rng.permutation(d_ff)
    noise = rng.standard_normal(a.shape, dtype=np.float32)
    noise[:, :2 * d] *= 0.5 * s1
    noise[:, 2 * d:] *= 0.5 * s2
    return a, (a[q] + noise).astype(np.float32)


def peer_weights(a, b):
    cost = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * (a @ b.T)
    return linear_sum_assignment(cost)[1]


def peer_inner(a, b):
    return linear_sum_assignment(a @ b.T, maximize=True)[1]


def peer_correlation(ha, hb):
    za, zb = ha - ha.mean(0), hb - hb.mean(0)
    za /= np.linalg.norm(za, axis=0)
    zb /= np.linalg.norm(zb, axis=0)
    return linear_sum_assignment(za.T @ zb, maximize=True)[1]


def total(objective, a, b, p):
    a, b = a.astype(np.float64), b.astype(np.float64)
    if objective == "weights":
        return ((a - b[p]) ** 2).sum()
    if objective == "inner":
        return (a * b[p]).sum()
    za, zb = a - a.mean(0), b - b.mean(0)
    za /= np.linalg.norm(za, axis=0)
    zb /= np.linalg.norm(zb, axis=0)
    return (za * zb[:, p]).sum()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--moecomp", required=True)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--mixtral", action="store_true")
    args = p.parse_args()
    rng = np.random.default_rng(1)
    machine = f"{platform.machine()}, {os.cpu_count()} cores"
    today = datetime.date.today()
    print("| workload | peer | moecomp s | peer s | ratio | same total | machine | date |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        a, b = design_pair(rng, 2048, 1408)
        ha = rng.standard_normal((8192, 1408), dtype=np.float32)
        hb = (ha[:, rng.permutation(1408)] + rng.standard_normal((8192, 1408), dtype=np.float32)).astype(np.float32)
        cases = [("weights", "Qwen-size experts, design rows 1408 x 6144, squared distance", a, b, peer_weights),
                 ("inner", "Qwen-size experts, design rows 1408 x 6144, inner product", a, b, peer_inner),
                 ("correlation", "activations 8192 tokens x 1408 neurons, Pearson", ha, hb, peer_correlation)]
        for objective, label, x, y, peer in cases:
            pa, pb = os.path.join(tmp, "a.npy"), os.path.join(tmp, "b.npy")
            np.save(pa, x)
            np.save(pb, y)
            ours, summary, _ = run_moecomp(args.moecomp, pa, pb, objective, args.repeat)
            theirs, peer_p = timed(lambda: peer(x, y), args.repeat)
            our_p = np.load(os.path.join(tmp, "p.npy"))
            t_ours, t_peer = total(objective, x, y, our_p), total(objective, x, y, peer_p)
            same = abs(t_ours - t_peer) <= 1e-5 * max(abs(t_peer), 1.0)
            print(f"| {label} | numpy + scipy lsa | {ours:.3f} | {theirs:.3f} | {theirs / ours:.2f}x | "
                  f"{'yes' if same else f'no ({t_ours:.6g} vs {t_peer:.6g})'} | {machine} | {today} |", flush=True)
        if args.mixtral:
            a, b = design_pair(rng, 4096, 14336)
            pa, pb = os.path.join(tmp, "a.npy"), os.path.join(tmp, "b.npy")
            np.save(pa, a)
            np.save(pb, b)
            del a, b
            ours, summary, rss = run_moecomp(args.moecomp, pa, pb, "weights", 1)
            print(f"| Mixtral-size experts, design rows 14336 x 12288, squared distance | (moecomp alone) | "
                  f"{ours:.2f} | | | peak RSS {rss / 2**30:.2f} GiB (inputs {2 * 14336 * 12288 * 4 / 2**30:.2f} GiB) | "
                  f"{machine} | {today} |", flush=True)


if __name__ == "__main__":
    main()
