#!/usr/bin/env python3
"""Side-by-side: `moecomp train-router` against the same training in torch, same data, one run each.

Workload (issue 35): the SADMoE router of one Mistral-7B-shape layer, d = 4096, 448 experts of 32 neurons,
d_h = 128 (no biases, D2DMoE's), on 32,768 tokens for one epoch: batch 64, Adam at lr 1e-3, batches in order,
no validation share, float32, 2 threads. torch runs the transcription of tests/peers/test_train_router_torch.py
(x @ W1^T, relu, @ W2^T, |.|, MSE, backward, Adam.step) with torch.set_num_threads(2); moecomp's time is its
--json "seconds" (the training alone, no file I/O). Both start from the same weights; the final weights are
compared, though with random targets that says little (see the last line). GEMM-bound: the FLOPs per step are
2 B d_h (d + n) forward and twice that backward, printed with the rate each achieves.

    /usr/bin/python3 bench/peers/router_training_vs_torch.py --moecomp build/default/tools/cli/moecomp [--tokens N]
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


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--moecomp", required=True)
    p.add_argument("--threads", default="2")
    p.add_argument("--tokens", type=int, default=32768)
    p.add_argument("--d", type=int, default=4096)
    p.add_argument("--experts", type=int, default=448)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batch", type=int, default=64)
    a = p.parse_args()
    threads = int(a.threads)
    torch.set_num_threads(threads)
    rng = np.random.default_rng(35)
    T, d, n, h, B = a.tokens, a.d, a.experts, a.hidden, a.batch
    z = rng.standard_normal((T, d), dtype=np.float32)
    y = np.abs(rng.standard_normal((T, n), dtype=np.float32))
    w1 = (rng.uniform(-1, 1, (h, d)) / np.sqrt(d)).astype(np.float32)
    w2 = (rng.uniform(-1, 1, (n, h)) / np.sqrt(h)).astype(np.float32)

    # torch
    W1 = torch.tensor(w1, requires_grad=True)
    W2 = torch.tensor(w2, requires_grad=True)
    opt = torch.optim.Adam([W1, W2], lr=1e-3)
    zt, yt = torch.from_numpy(z), torch.from_numpy(y)
    t0 = time.perf_counter()
    for first in range(0, T, B):
        xb, yb = zt[first:first + B], yt[first:first + B]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss((torch.relu(xb @ W1.T) @ W2.T).abs(), yb)
        loss.backward()
        opt.step()
    torch_s = time.perf_counter() - t0

    env = dict(os.environ, OMP_NUM_THREADS=a.threads, OPENBLAS_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        init = os.path.join(tmp, "init")
        os.makedirs(init)
        np.save(os.path.join(init, "w1.npy"), w1)
        np.save(os.path.join(init, "w2.npy"), w2)
        np.save(os.path.join(tmp, "z.npy"), z)
        np.save(os.path.join(tmp, "y.npy"), y)
        out = os.path.join(tmp, "out")
        r = subprocess.run([a.moecomp, "train-router", os.path.join(tmp, "z.npy"), os.path.join(tmp, "y.npy"), "-o", out,
                            "--hidden", str(h), "--batch-size", str(B), "--no-shuffle", "--validation", "0",
                            "--init", init, "--json", "--threads", a.threads],
                           check=True, capture_output=True, text=True, env=env)
        ours = json.loads(r.stdout)["seconds"]
        got = np.load(os.path.join(out, "w1.npy"))
    diff = np.linalg.norm(got - W1.detach().numpy()) / np.linalg.norm(W1.detach().numpy())
    steps = (T + B - 1) // B
    flops = 3 * 2 * T * h * (d + n)  # forward once, backward twice
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"router training, d={d}, experts={n}, d_h={h}, {T} tokens, batch {B}, {steps} steps, {threads} threads, "
          f"{cpu}, {datetime.date.today()}")
    print(f"  torch   {torch_s:8.3f} s  ({flops / torch_s / 1e9:6.1f} GFLOP/s)")
    print(f"  moecomp {ours:8.3f} s  ({flops / ours / 1e9:6.1f} GFLOP/s)")
    print(f"  ratio (torch / moecomp): {torch_s / ours:.2f}x")
    print(f"  final W1 relative difference {diff:.2e} (random targets: Adam's normalised steps on near-zero gradients "
          f"amplify float32 rounding, so this is no accuracy check; tests/peers/test_train_router_torch.py is)")


if __name__ == "__main__":
    main()
