#!/usr/bin/env python3
"""`moecomp compress` at Mixtral-8x7B's layer shape (issue 17's benchmark): a synthetic checkpoint in Hugging Face
Mixtral naming with LAYERS MoE layers of 8 experts, each W1/W3 14336 x 4096 and W2 4096 x 14336 in bf16 (random
normal weights, std 0.02; attention and norms at Mixtral's shapes, a 512-token vocabulary), and calibration
inputs (TOKENS x 4096 float32 per layer), written here into a scratch directory and deleted afterwards (never
committed). Every method compresses it once; the table gives the wall time per layer, how it splits between the
steps (the report's steps_seconds), the extrapolation to Mixtral-8x7B's 32 layers, and the peak resident memory
(the report's getrusage figure, and the anonymous and mapped-file peaks sampled from /proc every 0.2 s) against one
layer's experts (2.82 GB in bf16, 5.64 GB as the float32 the methods compute in).

    /usr/bin/python3 bench/compress_mixtral_shape.py PATH/TO/moecomp [--dir DIR] [--layers 2] [--tokens 256]
        [--methods hc-smoe-weights,hc-smoe,cka-merge,resmoe,prune,moefy] [--moefy-options "--experts 448 ..."]

moefy needs a dense checkpoint: for it a second synthetic checkpoint in Mistral-7B's naming and shape is
written (LAYERS layers, each a dense SwiGLU FFN of 14336 x 4096 in bf16, the size of one Mixtral expert).

resmoe runs one barycenter iteration (--max-iter 1): random experts share no neurons, so more iterations would
only repeat the same work; the time per iteration is what the table shows.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

H, I, E, VOCAB = 4096, 14336, 8, 512
METHODS = {
    "hc-smoe-weights": ["--method", "hc-smoe", "--features", "weights", "--merge", "average"],
    "hc-smoe": ["--method", "hc-smoe"],
    "cka-merge": ["--method", "cka-merge"],
    "resmoe": ["--method", "resmoe", "--keep", "0.25", "--max-iter", "1"],
    "prune": ["--method", "prune", "--criterion", "reap"],
    "moefy": ["--method", "moefy"],  # on the dense checkpoint; --moefy-options adds to it
}


def tensors_of(layers, dense=False):
    """name -> (dtype, shape) of the synthetic checkpoint, Mixtral's names (dense: Mistral's, one FFN per layer)."""
    t = {"model.embed_tokens.weight": ("BF16", (VOCAB, H)), "lm_head.weight": ("BF16", (VOCAB, H)),
         "model.norm.weight": ("BF16", (H,))}
    for l in range(layers):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = ("BF16", (H,))
        t[p + "post_attention_layernorm.weight"] = ("BF16", (H,))
        for name, shape in (("q_proj", (H, H)), ("k_proj", (1024, H)), ("v_proj", (1024, H)), ("o_proj", (H, H))):
            t[p + f"self_attn.{name}.weight"] = ("BF16", shape)
        if dense:
            for w, shape in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
                t[p + f"mlp.{w}.weight"] = ("BF16", shape)
            continue
        t[p + "block_sparse_moe.gate.weight"] = ("BF16", (E, H))
        for e in range(E):
            for w, shape in (("w1", (I, H)), ("w3", (I, H)), ("w2", (H, I))):
                t[p + f"block_sparse_moe.experts.{e}.{w}.weight"] = ("BF16", shape)
    return t


class memory_sampler:
    """Samples /proc/PID/status every 0.2 s: the peaks of RssAnon, RssFile and VmRSS (bytes)."""

    def __init__(self, pid):
        self.pid, self.peak, self.done = pid, {"RssAnon": 0, "RssFile": 0, "VmRSS": 0}, False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.done:
            try:
                with open(f"/proc/{self.pid}/status") as f:
                    for line in f:
                        key = line.split(":")[0]
                        if key in self.peak:
                            self.peak[key] = max(self.peak[key], int(line.split()[1]) * 1024)
            except OSError:
                return
            time.sleep(0.2)

    def stop(self):
        self.done = True
        self.thread.join()
        return self.peak


def run_sampled(command):
    """Runs `command`, sampling its memory: (returncode, stdout, stderr, wall seconds, memory_sampler peaks)."""
    start = time.time()
    p = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = memory_sampler(p.pid)
    stdout, stderr = p.communicate()
    peak = sampler.stop()
    return p.returncode, stdout, stderr, time.time() - start, peak


def write_safetensors(path, tensors, fill):
    """Writes the header, then each tensor's bytes from fill(name, dtype, shape), streamed."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    sizes = {"BF16": 2, "F32": 4}
    for name in sorted(tensors):
        dtype, shape = tensors[name]
        n = int(np.prod(shape)) * sizes[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name in sorted(tensors):
            dtype, shape = tensors[name]
            f.write(fill(name, dtype, shape))


def bf16_normal(rng, shape, std):
    """bf16 bits of normal values (rounded by truncation: this is synthetic data)."""
    out = np.empty(int(np.prod(shape)), dtype=np.uint16)
    chunk = 1 << 24
    for start in range(0, out.size, chunk):
        v = (rng.standard_normal(min(chunk, out.size - start), dtype=np.float32) * np.float32(std))
        out[start:start + v.size] = (v.view(np.uint32) >> 16).astype(np.uint16)
    return out.tobytes()


def build(directory, layers, tokens, dense=False):
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(17)
    tensors = tensors_of(layers, dense)

    def fill(name, dtype, shape):
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            return (np.full(shape, 0x3F80, dtype=np.uint16)).tobytes()  # bf16 1.0
        return bf16_normal(rng, shape, 0.02)

    write_safetensors(os.path.join(directory, "model.safetensors"), tensors, fill)
    calibration = {f"layers.{l}.moe_input": ("F32", (tokens, H)) for l in range(layers)}
    write_safetensors(os.path.join(directory, "calibration.safetensors"), calibration,
                      lambda name, dtype, shape: rng.standard_normal(shape, dtype=np.float32).tobytes())
    config = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": VOCAB,
              "hidden_size": H, "intermediate_size": I, "num_hidden_layers": layers, "num_attention_heads": 32,
              "num_key_value_heads": 8, "num_local_experts": E, "num_experts_per_tok": 2, "hidden_act": "silu",
              "rms_norm_eps": 1e-5, "rope_theta": 1e6, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    if dense:
        config.update({"architectures": ["MistralForCausalLM"], "model_type": "mistral"})
        del config["num_local_experts"], config["num_experts_per_tok"]
    json.dump(config, open(os.path.join(directory, "config.json"), "w"), indent=2)


def main():
    a = argparse.ArgumentParser()
    a.add_argument("tool")
    a.add_argument("--dir", default=None)
    a.add_argument("--layers", type=int, default=2)
    a.add_argument("--tokens", type=int, default=256)
    a.add_argument("--methods", default=",".join(METHODS))
    a.add_argument("--moefy-options", default="", help="more options for moefy, e.g. \"--experts 448 --n-init 1\"")
    args = a.parse_args()
    scratch = args.dir or tempfile.mkdtemp(prefix="moecomp-mixtral-shape-")
    model, dense_model, out = os.path.join(scratch, "model"), os.path.join(scratch, "dense"), os.path.join(scratch, "out")
    methods = args.methods.split(",")
    METHODS["moefy"] = METHODS["moefy"] + args.moefy_options.split()
    for directory, dense, wanted in ((model, False, any(m != "moefy" for m in methods)), (dense_model, True, "moefy" in methods)):
        if not wanted or os.path.exists(os.path.join(directory, "model.safetensors")):
            continue
        t0 = time.time()
        build(directory, args.layers, args.tokens, dense)
        size = os.path.getsize(os.path.join(directory, "model.safetensors"))
        print(f"synthetic {'Mistral' if dense else 'Mixtral'}-shape checkpoint: {args.layers} "
              f"{'dense' if dense else 'MoE'} layers, {size / 1e9:.2f} GB, written in {time.time() - t0:.0f} s; "
              f"calibration {args.tokens} tokens per layer", flush=True)
    rows = []
    try:
        for method in methods:
            shutil.rmtree(out, ignore_errors=True)
            code, stdout, stderr, wall, peak = run_sampled(
                [args.tool, "compress", dense_model if method == "moefy" else model, "-o", out, "--quiet", "--json",
                 *METHODS[method]])
            if code != 0:
                print(f"{method}: exit {code}: {stderr.strip()}", flush=True)
                continue
            report = json.loads(stdout.strip().splitlines()[-1])
            layers = report["layers"]
            per_layer = sum(l["seconds"] for l in layers) / len(layers)
            steps = {}
            for l in layers:
                for k, v in l["steps_seconds"].items():
                    steps[k] = steps.get(k, 0.0) + v / len(layers)
            other = per_layer - sum(steps.values())
            split = ", ".join(f"{k} {v:.1f}" for k, v in steps.items()) + f", other {other:.1f}"
            errors = [l["output_relative_error"] for l in layers]
            if method == "moefy":
                print("moefy: balanced k-means per layer: " + "; ".join(
                    f"{l['balanced_kmeans']['iterations']} iterations, {l['balanced_kmeans']['status']}, gap "
                    f"{l['balanced_kmeans']['assignment_gap']:.1e}" for l in layers) +
                    f"; {report['options']['experts']} experts of {report['options']['expert_size']}, top-"
                    f"{report['options']['top_k']}, FLOPs ratio {report['flops']['ratio']:.3f}", flush=True)
            rows.append((method, wall, per_layer, split, report["totals"]["peak_rss_bytes"], errors,
                         report["totals"]["bits_per_weight"], peak))
            print(f"{method}: {wall:.1f} s wall, {per_layer:.1f} s per layer ({split}); 32 layers about "
                  f"{per_layer * 32 / 60:.1f} min; peak RSS {report['totals']['peak_rss_bytes'] / 1e9:.2f} GB "
                  f"(sampled: anonymous {peak['RssAnon'] / 1e9:.2f} GB, mapped file {peak['RssFile'] / 1e9:.2f} GB); "
                  f"errors {['%.4f' % e for e in errors]}; {report['totals']['bits_per_weight']:.2f} bits per weight",
                  flush=True)
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    print("\n| method | seconds per layer | split (seconds) | 32 layers | peak RSS | peak anonymous | bits per weight |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for method, wall, per_layer, split, rss, errors, bits, peak in rows:
        print(f"| {method} | {per_layer:.1f} | {split} | {per_layer * 32 / 60:.1f} min | {rss / 1e9:.2f} GB | "
              f"{peak['RssAnon'] / 1e9:.2f} GB | {bits:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
