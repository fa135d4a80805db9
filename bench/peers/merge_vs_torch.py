#!/usr/bin/env python3
"""Side-by-side: `moecomp merge --method fix-dom` against a torch transcription of HC-SMoE's fix-dom-same, in one run.

Workload (issue 14): one group of 4 Qwen-MoE-size experts (d = 2048, d_ff = 1408, SwiGLU, float32) merged on 8192
calibration tokens, all of them the group's (no router; HC-SMoE's Qwen driver uses every group token, no cap).
The peer is HC-SMoE's `_merge_moe_experts_with_dominant_same_rule` (mode normal, uniform coefficients, ingredient
act) written with torch: each member's activations silu(X W1^T) * (X W3^T), its `compute_covariance` (means, unbiased
standard deviations, the centred product over the tokens), argmax over the dominant's neurons, the dense
d_ff x 4 d_ff matrix P row-normalised, then P cat(W1), P cat(W3) and cat(W2) P^T as GEMMs. Run in float32 (the
same arithmetic as moecomp's float path) and in bfloat16 (how HC-SMoE runs it: the model is loaded in bf16).
Both sides: 2 threads. moecomp's time is the "seconds" of --json with --no-errors (the merge, no file I/O); the
peer is timed in-process; best of --repeat. Each row says whether the merged weights agree (float32: 1e-4 relative
to the largest weight, the argmax ties of float32 rounding aside).

    OPENBLAS_NUM_THREADS=2 /usr/bin/python3 bench/peers/merge_vs_torch.py --moecomp build/default/tools/cli/moecomp
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
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import timed  # noqa: E402

E, D, D_FF, T = 4, 2048, 1408, 8192


def run_moecomp(tool, tmp, repeat):
    best, summary = float("inf"), None
    for _ in range(repeat):
        r = subprocess.run([tool, "merge", "--w1", os.path.join(tmp, "w1.npy"), "--w2", os.path.join(tmp, "w2.npy"),
                            "--w3", os.path.join(tmp, "w3.npy"), "--groups", os.path.join(tmp, "groups.npy"),
                            "--method", "fix-dom", "--inputs", os.path.join(tmp, "x.npy"), "--token-cap", "0",
                            "--no-errors", "-o", os.path.join(tmp, "out"), "--json", "--threads", "2"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"moecomp merge failed: {r.stderr}")
        summary = json.loads(r.stdout)
        best = min(best, summary["seconds"])
    return best, summary


def hc_fix_dom_same(w1, w3, w2, x):
    """HC-SMoE fix-dom-same for one group whose dominant is member 0 (torch tensors, any float dtype)."""
    def act(e):
        return torch.nn.functional.silu(x @ w1[e].T) * (x @ w3[e].T)

    def covariance(a, b):
        a_mean, b_mean = a.mean(dim=0), b.mean(dim=0)
        a_std, b_std = a.std(dim=0), b.std(dim=0)
        cov = (a - a_mean).T @ (b - b_mean) / (a.shape[0] - 1)
        return cov / (a_std[:, None] * b_std[None, :] + 1e-7)

    dom = act(0)
    p = torch.zeros(D_FF, E * D_FF, dtype=x.dtype)
    p[:, :D_FF] = torch.eye(D_FF).to(x.dtype)
    cols = torch.arange(D_FF)
    for j in range(1, E):
        match = torch.argmax(covariance(dom, act(j)), dim=0)
        p[match, j * D_FF + cols] = 1
    p = p / p.sum(dim=1, keepdim=True)
    return p @ torch.cat(list(w1), dim=0), p @ torch.cat(list(w3), dim=0), torch.cat(list(w2), dim=1) @ p.T


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moecomp", required=True)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(2)
    rng = np.random.default_rng(1)
    w1 = (rng.standard_normal((E, D_FF, D), dtype=np.float32) / np.sqrt(D)).astype(np.float32)
    w3 = (rng.standard_normal((E, D_FF, D), dtype=np.float32) / np.sqrt(D)).astype(np.float32)
    w2 = (rng.standard_normal((E, D, D_FF), dtype=np.float32) / np.sqrt(D_FF)).astype(np.float32)
    x = rng.standard_normal((T, D), dtype=np.float32)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"
    today = datetime.date.today()
    print("| workload | peer | moecomp s | peer s | ratio | same weights | machine | date |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, value in (("w1", w1), ("w2", w2), ("w3", w3), ("x", x), ("groups", np.zeros(E, dtype=np.int64))):
            np.save(os.path.join(tmp, name + ".npy"), value)
        ours, _ = run_moecomp(args.moecomp, tmp, args.repeat)
        got = [np.load(os.path.join(tmp, "out", k + ".npy"))[0] for k in ("w1", "w3", "w2")]
        label = "fix-dom, 4 Qwen-size experts, 8192 tokens"
        for dtype in (torch.float32, torch.bfloat16):
            tw = [torch.from_numpy(a).to(dtype) for a in (w1, w3, w2)]
            tx = torch.from_numpy(x).to(dtype)
            with torch.no_grad():
                theirs, want = timed(lambda: hc_fix_dom_same(tw[0], tw[1], tw[2], tx), args.repeat)
            want = [w.float().numpy() for w in want]
            err = max(np.abs(g - w).max() / np.abs(w).max() for g, w in zip(got, want))
            same = "yes" if err <= 1e-4 else f"no ({err:.1e})"
            peer = f"torch {str(dtype).replace('torch.', '')} transcription of HC-SMoE"
            print(f"| {label} | {peer} | {ours:.3f} | {theirs:.3f} | {theirs / ours:.2f}x | {same} | {machine} | "
                  f"{today} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
