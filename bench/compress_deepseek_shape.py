#!/usr/bin/env python3
"""`moecomp compress` at DeepSeek-V3's MoE layer shape (issue 36's memory bar): a synthetic one-layer checkpoint in
Hugging Face DeepSeek-V3 naming, 256 routed experts of 2048 x 7168 (gate_proj, up_proj) and 7168 x 2048 (down_proj)
plus one shared expert of the same shape, all bf16 (22.6 GB of experts), the router (256 x 7168, bf16) with its
e_score_correction_bias (F32), multi-head latent attention and norms at DeepSeek-V3's shapes and a 512-token
vocabulary; and calibration inputs (TOKENS x 7168 float32). It is written into a scratch directory and deleted
afterwards (never committed). The layout file is the repository's layouts/deepseek.json (model_type deepseek_v3:
sigmoid scores, noaux_tc group-limited top-8 of 8 groups, 4 kept, routed_scaling_factor 2.5).

Each method runs once, and the table gives the wall time, the report's steps, the report's peak RSS (getrusage,
which counts the checkpoint's mapped pages while they are resident) and, sampled every 0.2 s from /proc, the
peak anonymous memory (what the process itself allocated) and the peak of the file pages it had mapped.

    /usr/bin/python3 bench/compress_deepseek_shape.py PATH/TO/moecomp [--dir DIR] [--tokens 256] [--experts 128]
        [--methods prune,hc-smoe-weights] [--small]

--small writes the same checkpoint at 32 experts of 128 x 256 (a check of the script, in seconds).

The weights are random bf16 bit patterns of magnitude 2^-11 to 2^-9 with random signs (written at disk speed;
normal deviates would take minutes): random experts share nothing, so this measures time and memory, not quality.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compress_mixtral_shape import run_sampled, write_safetensors  # noqa: E402

VOCAB = 512
METHODS = {
    "prune": ["--method", "prune", "--criterion", "reap"],
    "hc-smoe-weights": ["--method", "hc-smoe", "--features", "weights", "--merge", "average"],
}


def shape(small):
    """(H, I, E, MLA shapes) at DeepSeek-V3's size or the small check's."""
    if small:
        return 256, 128, 32, {"q_lora": 64, "kv_lora": 32, "heads": 4, "nope": 16, "rope": 8, "v": 16}
    return 7168, 2048, 256, {"q_lora": 1536, "kv_lora": 512, "heads": 128, "nope": 128, "rope": 64, "v": 128}


def tensors_of(small):
    H, I, E, a = shape(small)
    q_head = a["nope"] + a["rope"]
    t = {"model.embed_tokens.weight": ("BF16", (VOCAB, H)), "lm_head.weight": ("BF16", (VOCAB, H)),
         "model.norm.weight": ("BF16", (H,))}
    p = "model.layers.0."
    t[p + "input_layernorm.weight"] = ("BF16", (H,))
    t[p + "post_attention_layernorm.weight"] = ("BF16", (H,))
    attention = {"q_a_proj.weight": (a["q_lora"], H), "q_a_layernorm.weight": (a["q_lora"],),
                 "q_b_proj.weight": (a["heads"] * q_head, a["q_lora"]),
                 "kv_a_proj_with_mqa.weight": (a["kv_lora"] + a["rope"], H), "kv_a_layernorm.weight": (a["kv_lora"],),
                 "kv_b_proj.weight": (a["heads"] * (a["nope"] + a["v"]), a["kv_lora"]),
                 "o_proj.weight": (H, a["heads"] * a["v"])}
    for name, s in attention.items():
        t[p + "self_attn." + name] = ("BF16", s)
    t[p + "mlp.gate.weight"] = ("BF16", (E, H))
    t[p + "mlp.gate.e_score_correction_bias"] = ("F32", (E,))
    for prefix in [f"mlp.experts.{e}." for e in range(E)] + ["mlp.shared_experts."]:
        for w, s in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
            t[p + prefix + w + ".weight"] = ("BF16", s)
    return t


def random_bf16(rng, count):
    """bf16 bit patterns: random sign and 8 low bits over exponent 116 (magnitudes 2^-11 to 2^-9)."""
    bits = rng.integers(0, 1 << 16, size=count, dtype=np.uint16)
    return ((bits & np.uint16(0x80FF)) | np.uint16(0x3A00)).tobytes()


def build(directory, tokens, small):
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(36)
    H, I, E, a = shape(small)

    def fill(name, dtype, s):
        n = int(np.prod(s))
        if name.endswith("norm.weight"):
            return np.full(n, 0x3F80, dtype=np.uint16).tobytes()  # bf16 1.0
        if dtype == "F32":  # the correction bias: small, so that the scores still decide
            return (rng.standard_normal(n).astype(np.float32) * np.float32(1e-3)).tobytes()
        return random_bf16(rng, n)

    write_safetensors(os.path.join(directory, "model.safetensors"), tensors_of(small), fill)
    write_safetensors(os.path.join(directory, "calibration.safetensors"), {"layers.0.moe_input": ("F32", (tokens, H))},
                      lambda name, dtype, s: rng.standard_normal(s, dtype=np.float32).tobytes())
    config = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": VOCAB,
              "hidden_size": H, "intermediate_size": 9 * I, "moe_intermediate_size": I, "num_hidden_layers": 1,
              "num_attention_heads": a["heads"], "num_key_value_heads": a["heads"], "n_routed_experts": E,
              "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 0, "moe_layer_freq": 1,
              "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
              "norm_topk_prob": True, "routed_scaling_factor": 2.5, "q_lora_rank": a["q_lora"],
              "kv_lora_rank": a["kv_lora"], "qk_nope_head_dim": a["nope"], "qk_rope_head_dim": a["rope"],
              "v_head_dim": a["v"], "hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
              "torch_dtype": "bfloat16"}
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def main():
    a = argparse.ArgumentParser()
    a.add_argument("tool")
    a.add_argument("--dir", default=None)
    a.add_argument("--tokens", type=int, default=256)
    a.add_argument("--experts", type=int, default=None, help="experts after compression (default: half)")
    a.add_argument("--methods", default=",".join(METHODS))
    a.add_argument("--small", action="store_true")
    args = a.parse_args()
    H, I, E, _ = shape(args.small)
    experts = args.experts or E // 2
    scratch = args.dir or tempfile.mkdtemp(prefix="moecomp-deepseek-shape-")
    model, out = os.path.join(scratch, "model"), os.path.join(scratch, "out")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        t0 = time.time()
        build(model, args.tokens, args.small)
        size = os.path.getsize(os.path.join(model, "model.safetensors"))
        print(f"synthetic DeepSeek-V3-shape checkpoint: 1 MoE layer of {E} experts of {I} x {H} and a shared expert, "
              f"{size / 1e9:.2f} GB, written in {time.time() - t0:.0f} s; calibration {args.tokens} tokens", flush=True)
    expert_bytes = 3 * E * I * H * 2
    rows = []
    try:
        for method in args.methods.split(","):
            shutil.rmtree(out, ignore_errors=True)
            code, stdout, stderr, wall, peak = run_sampled(
                [args.tool, "compress", model, "-o", out, "--quiet", "--json", "--experts", str(experts), *METHODS[method]])
            if code != 0:
                print(f"{method}: exit {code}: {stderr.strip()}", flush=True)
                continue
            report = json.loads(stdout.strip().splitlines()[-1])
            layer = report["layers"][0]
            split = ", ".join(f"{k} {v:.1f}" for k, v in layer["steps_seconds"].items())
            rss = report["totals"]["peak_rss_bytes"]
            rows.append((method, wall, split, rss, peak, layer["output_relative_error"]))
            print(f"{method}: {wall:.1f} s wall ({split}); peak RSS {rss / 1e9:.2f} GB "
                  f"({rss / expert_bytes:.2f}x the experts' {expert_bytes / 1e9:.2f} GB); sampled peaks: anonymous "
                  f"{peak['RssAnon'] / 1e9:.2f} GB, mapped file {peak['RssFile'] / 1e9:.2f} GB; output error "
                  f"{layer['output_relative_error']:.4f}", flush=True)
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    print("\n| method | wall (s) | steps (s) | peak RSS | / expert bytes | peak anonymous | peak mapped file |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for method, wall, split, rss, peak, _ in rows:
        print(f"| {method} | {wall:.1f} | {split} | {rss / 1e9:.2f} GB | {rss / expert_bytes:.2f}x | "
              f"{peak['RssAnon'] / 1e9:.2f} GB | {peak['RssFile'] / 1e9:.2f} GB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
