#!/usr/bin/env python3
"""Device benchmarks against PyTorch on the same GPU, from one run (scripts/device-check.sh calls it).

    python3 bench/peers/cuda_vs_torch.py DIR

DIR holds the Google Benchmark JSON of bench_distance_cuda and bench_cka_cuda from the same machine. For
each of their cases this times the PyTorch expression a user would write, float32 with TF32 off (moecomp's
device GEMMs are FP32), by CUDA events: the median of 10 runs after 2 warm-ups. Prints
`case  moecomp_ms  torch_ms  torch/moecomp`.

  pdist_cuda/n/d    torch.pdist is O(n^2 d) without GEMM; the fair peer is torch.cdist(x, x) (GEMM form
                    for large inputs), whose upper triangle is the condensed vector; the full square is
                    what it writes, so the condensed case is timed against it too
  square_cuda/n/d   torch.cdist(x, x)
  cka_matrix_cuda/E/n/d   linear CKA of all pairs: centre each expert's features, batched Gram matrices
                    K_e = X_e X_e^T (bmm), HSIC = K K^T over the flattened Grams, normalised by the diagonal
"""
import json
import pathlib
import statistics
import sys

import torch


def timed(fn, repeats=10, warmup=2):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def ours(directory, name):
    times = {}
    for path in pathlib.Path(directory).glob(f"{name}.json"):
        for b in json.loads(path.read_text())["benchmarks"]:
            if "error_occurred" not in b:
                times[b["name"].replace("/manual_time", "")] = b["real_time"]  # ms (the benches' unit)
    return times


def cka_matrix(x):
    xc = x - x.mean(dim=1, keepdim=True)
    k = torch.bmm(xc, xc.transpose(1, 2)).reshape(x.shape[0], -1)
    h = k @ k.T
    d = h.diagonal().sqrt()
    return h / (d[:, None] * d[None, :])


def main():
    directory = sys.argv[1]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(17)
    rows = []
    for case, ms in sorted(ours(directory, "bench_distance_cuda").items()):
        kind, n, d = case.split("/")
        if kind not in ("pdist_cuda", "square_cuda"):
            continue
        x = torch.rand(int(n), int(d), device="cuda", generator=gen) * 2 - 1
        rows.append((case, ms, timed(lambda: torch.cdist(x, x))))
        del x
    for case, ms in sorted(ours(directory, "bench_cka_cuda").items()):
        _, e, n, d = case.split("/")
        x = torch.randn(int(e), int(n), int(d), device="cuda", generator=gen)
        rows.append((case, ms, timed(lambda: cka_matrix(x))))
        del x
    torch.cuda.empty_cache()
    print(f"{'case':34s} {'moecomp ms':>11s} {'torch ms':>10s} {'torch/moecomp':>14s}")
    for case, a, b in rows:
        print(f"{case:34s} {a:11.3f} {b:10.3f} {b / a:14.2f}")


if __name__ == "__main__":
    main()
