#!/usr/bin/env python3
"""O-prune's subset search (`moecomp compress --method prune --criterion output`) against a torch transcription
of the reference's loop (Lu et al., "Not All Experts are Equal": every combination of N of the E experts, the
layer's output routed over that combination only, the one closest to the full layer's output kept).

A synthetic 1-layer Mixtral-layout checkpoint (float32; E = 16 experts of 256 x 512, 256 calibration tokens), so
that C(16, 8) = 12,870 subsets are all searched. moecomp's time is the report's "subsets" step (the expert outputs
and logits once, then every subset's routed output and error, in double, over the threads); torch's is the same
work: the expert outputs and logits once, then one loop iteration per subset (softmax over the subset's logits,
top-2, renormalised, the weighted sum and its squared error, in float64). One run each; the kept subsets must
agree. ratio = torch / moecomp (above 1: moecomp faster).

Usage: bench/peers/oprune_vs_torch.py build/mine/tools/cli/moecomp [--experts 16 --keep 8 --tokens 256]"""
import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "reliability"))


def main():
    a = argparse.ArgumentParser()
    a.add_argument("tool")
    a.add_argument("--experts", type=int, default=16)
    a.add_argument("--keep", type=int, default=8)
    a.add_argument("--tokens", type=int, default=256)
    a.add_argument("--threads", type=int, default=2)
    args = a.parse_args()
    tool = os.path.abspath(args.tool)
    sys.argv[1:] = [tool]
    import numpy as np
    import torch
    import test_hostile

    torch.set_num_threads(args.threads)
    E, N = args.experts, args.keep
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model")
        test_hostile.synthetic_family(model, "mixtral", np.random.default_rng(1), experts=E, hidden=512, ffn=256,
                                      tokens=args.tokens, layers=1, dtype="F32")
        env = dict(os.environ, OMP_WAIT_POLICY="passive")
        out = subprocess.run([tool, "compress", model, "-o", os.path.join(tmp, "out"), "--method", "prune",
                              "--criterion", "output", "--experts", str(N), "--threads", str(args.threads), "--json"],
                             env=env, capture_output=True, text=True, check=True).stdout
        layer = json.loads(out)["layers"][0]
        ours, kept = layer["steps_seconds"]["subsets"], layer["kept"]
        t = read_safetensors(os.path.join(model, "model.safetensors"))
        x = torch.from_numpy(read_safetensors(os.path.join(model, "calibration.safetensors"))["layers.0.moe_input"])
    p = "model.layers.0.block_sparse_moe."
    w1 = torch.stack([torch.from_numpy(t[f"{p}experts.{e}.w1.weight"]) for e in range(E)])
    w3 = torch.stack([torch.from_numpy(t[f"{p}experts.{e}.w3.weight"]) for e in range(E)])
    w2 = torch.stack([torch.from_numpy(t[f"{p}experts.{e}.w2.weight"]) for e in range(E)])
    router = torch.from_numpy(t[p + "gate.weight"])

    def search():
        outputs = torch.stack([(torch.nn.functional.silu(x @ w1[e].T) * (x @ w3[e].T)) @ w2[e].T
                               for e in range(E)]).double()  # E x T x H
        logits = (x @ router.T).double()

        def routed(subset):
            s = torch.softmax(logits[:, subset], dim=1)
            wts, ids = torch.topk(s, 2, dim=1)
            wts = wts / wts.sum(dim=1, keepdim=True)
            chosen = outputs[torch.tensor(subset)[ids], torch.arange(x.shape[0])[:, None]]  # T x 2 x H
            return (wts[:, :, None] * chosen).sum(dim=1)

        reference = routed(list(range(E)))
        best, best_err = None, float("inf")
        for subset in itertools.combinations(range(E), N):
            err = float(((routed(list(subset)) - reference) ** 2).sum())
            if err < best_err:
                best, best_err = subset, err
        return list(best)

    start = time.perf_counter()
    theirs = search()
    torch_seconds = time.perf_counter() - start
    print(f"O-prune, {E} experts -> {N} ({len(list(itertools.combinations(range(E), N)))} subsets), "
          f"{args.tokens} tokens, {args.threads} threads")
    print(f"moecomp {ours:.3f} s (kept {kept}); torch {torch_seconds:.3f} s (kept {theirs}); "
          f"ratio {torch_seconds / ours:.2f}x; the same subset: {kept == theirs}")


def read_safetensors(path):
    """A float32 safetensors file as numpy arrays (the synthetic checkpoints are F32 here)."""
    import numpy as np
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=np.float32).reshape(info["shape"]).copy()
    return out


if __name__ == "__main__":
    main()
