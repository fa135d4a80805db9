"""Side-by-side: the Python binding (docs/python.md) against the peers a researcher would call from the same
Python, in one process, best of --repeat each, on data from moecomp's generator:
  pdist 4096 x 256 float32 (scipy.spatial.distance.pdist), linkage average 2048 x 64 (scipy.cluster.hierarchy),
  route top-8 of 64 over 16384 tokens float32 (torch.softmax + torch.topk), kmeans 8192 x 512 k = 64, 20 Lloyd
  iterations from a given start (scikit-learn KMeans lloyd), linear_sum_assignment 1024 x 1024 (scipy), sinkhorn
  512 x 512 reg 5e-2 (POT).
Both sides: 2 threads (moecomp threads=2; OPENBLAS_NUM_THREADS=2, torch.set_num_threads(2)). The time includes the
binding's argument handling (the inputs are read in place; outputs are new arrays).

    OPENBLAS_NUM_THREADS=2 PYTHONPATH=build/default/python /usr/bin/python3 bench/peers/python_binding_vs_peers.py
"""
import argparse
import datetime
import os
import platform
import sys

import numpy as np
import torch
import scipy.spatial.distance as spatial
import scipy.cluster.hierarchy as hierarchy
import scipy.optimize as optimize
import sklearn.cluster as skcluster
import ot

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import timed  # noqa: E402

import moecomp  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(2)
    rows = []

    def row(workload, peer, ours, theirs, same):
        t_ours, _ = timed(ours, args.repeat)
        t_theirs, _ = timed(theirs, args.repeat)
        rows.append((workload, peer, t_ours, t_theirs, same))

    x = moecomp.normal(4096, 256, seed=1).astype(np.float32)
    same = np.max(np.abs(moecomp.pdist(x, threads=2) - spatial.pdist(x))) <= 1e-3
    row("pdist 4096 x 256 float32", "scipy pdist", lambda: moecomp.pdist(x, threads=2), lambda: spatial.pdist(x), same)

    y = moecomp.normal(2048, 64, seed=2)
    same = np.array_equal(moecomp.linkage(y, "average", threads=2)[:, :2], hierarchy.linkage(y, "average")[:, :2])
    row("linkage average 2048 x 64 float64", "scipy linkage", lambda: moecomp.linkage(y, "average", threads=2),
        lambda: hierarchy.linkage(y, "average"), same)

    logits = torch.from_numpy(moecomp.normal(16384, 64, seed=3).astype(np.float32))
    ids, _ = moecomp.route(logits, "top_k", 8, threads=2)
    same = np.array_equal(ids, torch.topk(torch.softmax(logits, -1), 8, -1).indices.numpy())
    row("route top-8 of 64, 16384 tokens float32", "torch softmax + topk",
        lambda: moecomp.route(logits, "top_k", 8, threads=2), lambda: torch.topk(torch.softmax(logits, -1), 8, -1),
        same)

    data = moecomp.normal(8192, 512, seed=4).astype(np.float32)
    start = data[:: 8192 // 64][:64].copy()
    ours_km = moecomp.kmeans(data, 64, centers=start, max_iterations=20, tolerance=0.0, threads=2)
    ref = skcluster.KMeans(64, init=start, n_init=1, max_iter=20, tol=0.0, algorithm="lloyd").fit(data)
    same = np.mean(ours_km["labels"] == ref.labels_) >= 0.99
    row("kmeans 8192 x 512 k 64, 20 iterations float32", "scikit-learn lloyd",
        lambda: moecomp.kmeans(data, 64, centers=start, max_iterations=20, tolerance=0.0, threads=2),
        lambda: skcluster.KMeans(64, init=start, n_init=1, max_iter=20, tol=0.0, algorithm="lloyd").fit(data), same)

    cost = moecomp.normal(1024, 1024, seed=5)
    same = np.array_equal(moecomp.linear_sum_assignment(cost)[1], optimize.linear_sum_assignment(cost)[1])
    row("linear_sum_assignment 1024 x 1024", "scipy", lambda: moecomp.linear_sum_assignment(cost),
        lambda: optimize.linear_sum_assignment(cost), same)

    n = 512
    a = np.full(n, 1.0 / n)
    pa, pb = moecomp.normal(n, 2, seed=6), moecomp.normal(n, 2, seed=7)
    m = ((pa[:, None, :] - pb[None, :, :]) ** 2).sum(-1)
    m /= m.max()
    same = np.max(np.abs(moecomp.sinkhorn(a, a, m, 5e-2, threads=2)[0] - ot.sinkhorn(a, a, m, 5e-2))) <= 1e-9
    row("sinkhorn 512 x 512 reg 5e-2 float64", "POT ot.sinkhorn", lambda: moecomp.sinkhorn(a, a, m, 5e-2, threads=2),
        lambda: ot.sinkhorn(a, a, m, 5e-2), same)

    date = datetime.date.today().isoformat()
    machine = f"{platform.machine()}, {os.cpu_count()} cores"
    print("| workload | peer | moecomp s | peer s | ratio | same answer | machine | date |")
    print("|---|---|---|---|---|---|---|---|")
    for workload, peer, t_ours, t_theirs, same in rows:
        print(f"| {workload} | {peer} | {t_ours:.4f} | {t_theirs:.4f} | {t_theirs / t_ours:.2f}x | "
              f"{'yes' if same else 'no'} | {machine} | {date} |")


if __name__ == "__main__":
    main()
