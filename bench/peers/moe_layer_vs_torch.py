#!/usr/bin/env python3
"""Side-by-side: the MoE layer forward (bench/bench_moe_layer, Google Benchmark) against the HF-style torch
loop over experts (Qwen2-MoE's sparse block: router, softmax, top-4, one-hot expert mask, per-expert
index + SwiGLU + index_add_, and the sigmoid-gated shared expert), same shapes, one run, 2 threads.

Qwen-MoE size (issue 16): 512 tokens, 60 experts of d = 2048, d_ff = 1408, top-4 without renormalisation,
a shared expert of d_ff = 5632. Weights drawn at random on both sides (the work does not depend on the
values; the routing of random tokens is near uniform on both). torch runs in bfloat16 (the model dtype) and
in float32; moecomp stores bfloat16 or float weights and computes in float (bfloat16 weights: with exact products,
the weights widened to float, and with bf16 products, ctx.matmul = bf16: activations rounded to bfloat16,
bfloat16 dot products with float sums, torch's contract but for float outputs). Best of --repeat calls.

    /usr/bin/python3 bench/peers/moe_layer_vs_torch.py --bench build/default/bench/bench_moe_layer
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import time

import torch
import torch.nn.functional as F


def torch_layer(dtype, repeat):
    T, d, dff, E, K, dsh = 512, 2048, 1408, 60, 4, 5632
    g = torch.Generator().manual_seed(0)

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(dtype)

    x = torch.randn(T, d, generator=g).to(dtype)
    gate, sg = w(E, d), w(1, d)
    w1, w3, w2 = [w(dff, d) for _ in range(E)], [w(dff, d) for _ in range(E)], [w(d, dff) for _ in range(E)]
    s1, s3, s2 = w(dsh, d), w(dsh, d), w(d, dsh)

    def layer(h):
        routing = F.softmax(F.linear(h, gate), dim=1, dtype=torch.float)
        routing, selected = torch.topk(routing, K, dim=-1)
        routing = routing.to(h.dtype)
        out = torch.zeros_like(h)
        mask = F.one_hot(selected, num_classes=E).permute(2, 1, 0)
        for e in range(E):
            slot, token = torch.where(mask[e])
            if token.numel() == 0:
                continue
            cur = h[token]
            y = F.linear(F.silu(F.linear(cur, w1[e])) * F.linear(cur, w3[e]), w2[e]) * routing[token, slot, None]
            out.index_add_(0, token, y.to(h.dtype))
        shared = F.linear(F.silu(F.linear(h, s1)) * F.linear(h, s3), s2)
        return out + torch.sigmoid(F.linear(h, sg)) * shared

    with torch.no_grad():
        layer(x)
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            layer(x)
            best = min(best, time.perf_counter() - t0)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", required=True)
    p.add_argument("--threads", default="2")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    torch.set_num_threads(int(a.threads))
    env = dict(os.environ, OMP_NUM_THREADS=a.threads)
    r = subprocess.run([a.bench, "--benchmark_format=json", f"--benchmark_repetitions={a.repeat}"], check=True,
                       capture_output=True, text=True, env=env)
    ours = {}
    for b in json.loads(r.stdout)["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        kind = ("bfloat16, bf16 products" if "matmul_precision::bf16" in b["name"] else "bfloat16") \
            if "bfloat16" in b["name"] else "float32"
        seconds = b["real_time"] / {"ms": 1e3, "us": 1e6, "ns": 1e9, "s": 1.0}[b["time_unit"]]
        ours[kind] = min(ours.get(kind, float("inf")), seconds)
    torch_seconds = {kind: torch_layer(dtype, a.repeat) for kind, dtype in (("bfloat16", torch.bfloat16),
                                                                           ("float32", torch.float32))}
    rows = [(kind, torch_seconds["float32" if kind == "float32" else "bfloat16"], ours[kind])
            for kind in ("bfloat16", "bfloat16, bf16 products", "float32")]
    print(f"# {datetime.date.today()} {platform.machine()}, {os.cpu_count()} CPUs, {a.threads} threads; torch "
          f"{torch.__version__}")
    print("| MoE layer forward, 512 tokens, 60 x (2048, 1408) top-4 + shared 5632 | torch s | moecomp s | ratio |")
    print("|---|---|---|---|")
    for kind, theirs, mine in rows:
        print(f"| {kind} weights | {theirs:.4f} | {mine:.4f} | {theirs / mine:.2f}x |")
    print("(torch's bfloat16 forward is the peer of both bfloat16 rows)")


if __name__ == "__main__":
    main()
