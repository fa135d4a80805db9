#!/usr/bin/env python3
"""Held-out perplexity of the embedded models, original or compressed: any checkpoint of tiny-moe in its
Mixtral layout (merged or pruned experts, a reduced num_local_experts, ResMoE restored dense, hc-smoe's experts
stored distinct with an id map per layer, expanded on load), the upcycled models (tiny-moe-upcycled, Mixtral's
layout; tiny-qwen-moe-upcycled, Qwen2-MoE's, with its shared expert), and tiny-dense
(or tiny-dense-hoyer) in its Mistral layout, as trained, split into experts by `moecomp compress --method
moefy`, or split and given SADMoE's trained routers.

    /usr/bin/python3 models/evaluate.py [--top-k K[,K...]] [--tau T[,T...]] [--json] [--sparsity] [MODEL_DIR ...]
                                                                                         default: models/tiny-moe

A moefy checkpoint (config.json's `moecomp_moefy`) is evaluated with the top-k its config records, or with each
K of --top-k (K = its number of experts is the dense FFN): each token runs the K experts whose centre-router rows
score highest. A SADMoE checkpoint (config.json's `moecomp_sadmoe`; models/README.md gives its format) scores
the experts with its per-layer router, |W2 relu(W1 x + b1) + b2| (objective "norm") or sigmoid(...)
("moefication"), and is evaluated with dynamic-k at each T of --tau (expert i runs iff score_i >= T * max_j
score_j; T in [0, 1]; the best expert always runs) and top-k at each K of --top-k; with neither, at the tau its
config records. The selected experts' outputs are summed with weight 1.

Each setting prints one line (or with --json one JSON object per line): the checkpoint, the perplexity, the
bytes of its model *.safetensors files (calibration*.safetensors excluded) and, for moefy and SADMoE, the mean
number of experts per token (over tokens and layers) and the FFN FLOPs ratio of the MoE form to the dense FFN:

    ratio = (k * C_E + C_R) / C_FFN,   C_FFN = 3 d I (gated FFN; 2 d I ungated),   C_E = C_FFN / n,
    C_R = d_h (d + n) for SADMoE's two-layer router (d -> d_h -> n), d n for moefy's one-layer centre router,

with d the hidden size, I the FFN's neurons, n experts, k the mean experts per token, d_h the router's hidden
size (multiply-adds per token; biases, the activation and the selection are not counted). For an ungated FFN
with expansion e = I / d this is SADMoE's Appendix B, k/n + d_h (1 + n/d) / (2 e d).

--sparsity adds, for dense models, each layer's fraction of exactly-zero FFN hidden activations
act(gate x) * (up x) and their mean square Hoyer per token, on the held-out bytes.

The held-out bytes are MODEL_DIR/heldout.bin when present, else models/tiny-moe/heldout.bin, else they are cut
from /usr/share/common-licenses as train_tiny_moe.py cuts them.

Bad input (a --tau outside [0, 1], a --top-k outside [1, n], a SADMoE checkpoint whose record or router tensors
are malformed) exits 2 with one line `evaluate.py: error: ...`.
"""
import argparse
import glob
import hashlib
import json
import math
import os
import sys

import torch

import tiny_moe
from train_tiny_moe import CORPUS_SHA256

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = "evaluate.py"


class BadInput(Exception):
    pass


def fail(message):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


def held_out(model_dir):
    for path in (os.path.join(model_dir, "heldout.bin"), os.path.join(HERE, "tiny-moe", "heldout.bin")):
        if os.path.exists(path):
            return open(path, "rb").read()
    text = tiny_moe.corpus()
    if hashlib.sha256(text).hexdigest() != CORPUS_SHA256:
        print("evaluate: warning: /usr/share/common-licenses differs from the training corpus (SHA-256); the "
              "held-out bytes are not the recorded ones", file=sys.stderr)
    return tiny_moe.split(text)[1]


def bytes_on_disk(model_dir):
    """The sizes of the directory's model *.safetensors files, summed (calibration*.safetensors left out)."""
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(model_dir, "*.safetensors"))
               if not os.path.basename(f).startswith("calibration"))


def parse_list(text, option, convert):
    values = []
    for item in text.split(","):
        try:
            values.append(convert(item.strip()))
        except ValueError:
            raise BadInput(f"{option}: '{item}' is not a {'number' if convert is float else 'whole number'}")
    return values


def parse_taus(text):
    taus = parse_list(text, "--tau", float)
    for t in taus:
        if not (0.0 <= t <= 1.0):
            raise BadInput(f"--tau: {t:g} is outside [0, 1]")
    return taus


def parse_top_ks(text):
    ks = parse_list(text, "--top-k", int)
    for k in ks:
        if k < 1:
            raise BadInput(f"--top-k: {k} is below 1")
    return ks


def layer_prefixes(config):
    return [f"model.layers.{i}.mlp" for i in range(config["num_hidden_layers"])]


def check_sadmoe(weights, config):
    """BadInput unless config's moecomp_sadmoe and the router tensors fit the model (shapes, names, values)."""
    s = config["moecomp_sadmoe"]
    if not isinstance(s, dict):
        raise BadInput("config.json's moecomp_sadmoe must be an object")
    for key in ("num_experts", "expert_size", "router_hidden"):
        if not isinstance(s.get(key), int) or isinstance(s.get(key), bool) or s[key] < 1:
            raise BadInput(f"moecomp_sadmoe.{key} must be a whole number >= 1, got {json.dumps(s.get(key))}")
    E, S, dh = s["num_experts"], s["expert_size"], s["router_hidden"]
    H, I = config["hidden_size"], config["intermediate_size"]
    if E * S != I:
        raise BadInput(f"moecomp_sadmoe: num_experts x expert_size = {E} x {S} = {E * S}, but the FFN has "
                       f"intermediate_size {I} neurons")
    if s.get("objective", "norm") not in ("norm", "moefication"):
        raise BadInput(f"moecomp_sadmoe.objective must be \"norm\" or \"moefication\", got {json.dumps(s['objective'])}")
    if "router_bias" in s and not isinstance(s["router_bias"], bool):
        raise BadInput(f"moecomp_sadmoe.router_bias must be true or false, got {json.dumps(s['router_bias'])}")
    tau = s.get("tau")
    if not isinstance(tau, (int, float)) or isinstance(tau, bool) or not (0.0 <= tau <= 1.0):
        raise BadInput(f"moecomp_sadmoe.tau must be a number in [0, 1], got {json.dumps(tau)}")
    layers = [str(p).rstrip(".") for p in s.get("layers", [])]
    if layers != layer_prefixes(config):
        raise BadInput(f"moecomp_sadmoe.layers must name every layer's FFN, {json.dumps(layer_prefixes(config))}, "
                       f"got {json.dumps(s.get('layers'))}")
    bias = s.get("router_bias", False)
    for prefix in layers:
        r = prefix + ".sadmoe.router."
        expected = {"w1": ([dh, H], "router_hidden x hidden_size"), "w2": ([E, dh], "num_experts x router_hidden"),
                    "b1": ([dh], "router_hidden"), "b2": ([E], "num_experts")}
        for name, (shape, what) in expected.items():
            t = weights.get(r + name)
            if t is None:
                if name.startswith("w") or bias:
                    raise BadInput(f"tensor '{r + name}' is missing (expected shape {shape}, {what})")
                continue
            if list(t.shape) != shape:
                raise BadInput(f"tensor '{r + name}' has shape {list(t.shape)}, expected {shape} ({what})")
            if not torch.isfinite(t).all():
                raise BadInput(f"tensor '{r + name}' holds a non-finite value")
        perm = weights.get(prefix + ".moefy.permutation")
        if perm is not None:
            if list(perm.shape) != [I]:
                raise BadInput(f"tensor '{prefix}.moefy.permutation' has shape {list(perm.shape)}, expected [{I}] "
                               "(intermediate_size)")
            if not torch.equal(perm.long().sort().values, torch.arange(I)):
                raise BadInput(f"tensor '{prefix}.moefy.permutation' is not a permutation of 0 .. {I - 1}")


def expand_expert_maps(weights):
    """moecomp's distinct expert storage (`moecomp compress --expert-storage distinct`, models/README.md) expanded
    in place to one expert per router id: a layer's `...gate.expert_map` (router id r -> stored expert m[r]) makes
    expert r's tensors a reference to stored expert m[r]'s, and is dropped. BadInput for a map entry that names no
    stored expert. The model code then reads the same tensors as from the duplicated form."""
    for key in [k for k in weights if k.endswith(".gate.expert_map")]:
        prefix = key[:-len("gate.expert_map")] + "experts."
        ids = [int(v) for v in weights.pop(key).reshape(-1).tolist()]
        stored = {}
        for s in sorted(set(ids)):
            names = [n for n in weights if n.startswith(f"{prefix}{s}.")]
            if not names:
                raise BadInput(f"tensor '{key}' maps a router id to expert {s}, which the checkpoint does not store")
            stored[s] = {n[len(f"{prefix}{s}."):]: weights[n] for n in names}
        for r, s in enumerate(ids):
            for piece, t in stored[s].items():
                weights[f"{prefix}{r}.{piece}"] = t


def flops_ratio(config, num_experts, mean_experts, router_cost):
    """(k C_E + C_R) / C_FFN for a gated FFN: C_FFN = 3 d I, C_E = C_FFN / n (the module docstring)."""
    c_ffn = 3 * config["hidden_size"] * config["intermediate_size"]
    return (mean_experts * c_ffn / num_experts + router_cost) / c_ffn


def routed(weights, config, held, kind, setting, value):
    """One routed evaluation: the record of a moefy or SADMoE checkpoint at top_k or tau = value."""
    experts = {}
    ppl = tiny_moe.perplexity(weights, config, held, experts=experts, **{setting: value})
    per_layer = [float(torch.cat(experts[l]).mean()) for l in sorted(experts)]
    mean = sum(per_layer) / len(per_layer)
    record = config["moecomp_" + kind]
    E, H = record["num_experts"], config["hidden_size"]
    cost = record["router_hidden"] * (H + E) if kind == "sadmoe" else H * E
    return {"perplexity": ppl, "kind": kind, "num_experts": E, "expert_size": record["expert_size"],
            "routing": setting, setting: value, "mean_experts": mean, "mean_experts_per_layer": per_layer,
            "flops_ratio": flops_ratio(config, E, mean, cost), "router_flops": cost}


def evaluate(model_dir, a, taus, top_ks):
    """The records (dicts) of one checkpoint, one per setting."""
    try:
        weights, config = tiny_moe.load(model_dir)
    except (OSError, ValueError, KeyError) as e:
        raise BadInput(f"{model_dir}: cannot read the checkpoint: {e}")
    try:
        expand_expert_maps(weights)
    except BadInput as e:
        raise BadInput(f"{model_dir}: {e}")
    dense = not tiny_moe.is_moe(config)  # Mixtral's num_local_experts or a qwen2_moe config
    if dense and config.get("hidden_act", "silu") not in tiny_moe.ACTIVATIONS:
        raise BadInput(f"{model_dir}: hidden_act {json.dumps(config['hidden_act'])} is not one of "
                       f"{', '.join(tiny_moe.ACTIVATIONS)}")
    held = held_out(model_dir)
    base = {"checkpoint": model_dir, "bytes_on_disk": bytes_on_disk(model_dir)}
    if dense:
        base["intermediate_size"] = config["intermediate_size"]
    records = []
    sadmoe, moefy = config.get("moecomp_sadmoe"), config.get("moecomp_moefy")
    if dense and sadmoe is not None:
        try:
            check_sadmoe(weights, config)
        except BadInput as e:
            raise BadInput(f"{model_dir}: {e}")
        E = sadmoe["num_experts"]
        for k in top_ks or []:
            if k > E:
                raise BadInput(f"--top-k: {k} exceeds {model_dir}'s {E} experts")
        settings = [("tau", t) for t in taus or []] + [("top_k", k) for k in top_ks or []]
        for setting, value in settings or [("tau", float(sadmoe["tau"]))]:
            records.append(dict(base, **routed(weights, config, held, "sadmoe", setting, value)))
    elif dense and moefy is not None:
        if taus:
            print(f"{PROG}: warning: {model_dir} is a moefy checkpoint (centre router, top-k); --tau is ignored",
                  file=sys.stderr)
        for k in top_ks or []:
            if k > moefy["num_experts"]:
                raise BadInput(f"--top-k: {k} exceeds {model_dir}'s {moefy['num_experts']} experts")
        for k in top_ks or [moefy["top_k"]]:
            records.append(dict(base, **routed(weights, config, held, "moefy", "top_k", k)))
    else:
        r = dict(base, perplexity=tiny_moe.perplexity(weights, config, held), kind="moe" if not dense else "dense")
        if dense:
            r["hidden_act"] = config.get("hidden_act", "silu")
        else:
            r["num_experts"], r["top_k"] = tiny_moe.num_experts(config), config["num_experts_per_tok"]
        records.append(r)
    if a.sparsity and dense:
        stats = tiny_moe.activation_sparsity(weights, config, held)
        for r in records:
            r["activation_sparsity"] = stats
    return records


def text_line(r):
    head = f"{r['checkpoint']}: held-out perplexity {r['perplexity']:.4f}"
    if r["kind"] == "moe":
        return f"{head} ({r['num_experts']} experts, top-{r['top_k']})"
    if r["kind"] == "dense":
        act = "" if r["hidden_act"] == "silu" else f", {r['hidden_act']}-gated"
        return f"{head} (dense FFN of {r['intermediate_size']} neurons{act})"
    how = f"top-{r['top_k']}" if r["routing"] == "top_k" else f"tau {r['tau']:g}"
    return (f"{head} ({r['kind']}: {r['num_experts']} experts of {r['expert_size']} neurons, {how}: "
            f"{r['mean_experts']:.3f} experts per token, FLOPs ratio {r['flops_ratio']:.4f})")


def main():
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--top-k", default=None, help="moefy and SADMoE checkpoints: comma-separated experts per token")
    p.add_argument("--tau", default=None, help="SADMoE checkpoints: comma-separated dynamic-k thresholds in [0, 1]")
    p.add_argument("--json", action="store_true", help="one JSON object per checkpoint and setting")
    p.add_argument("--sparsity", action="store_true",
                   help="dense models: each layer's fraction of exactly-zero FFN hidden activations and square Hoyer")
    p.add_argument("dirs", nargs="*")
    a = p.parse_args()
    try:
        taus = parse_taus(a.tau) if a.tau is not None else None
        top_ks = parse_top_ks(a.top_k) if a.top_k is not None else None
        for model_dir in a.dirs or [os.path.join(HERE, "tiny-moe")]:
            for r in evaluate(model_dir, a, taus, top_ks):
                if a.json:
                    print(json.dumps(r), flush=True)
                    continue
                print(text_line(r), flush=True)
                for s in r.get("activation_sparsity", []):
                    print(f"  layer {s['layer']}: {100 * s['zero_fraction']:.2f}% of the {r['intermediate_size']} hidden "
                          f"activations exactly zero, mean square Hoyer {s['square_hoyer']:.2f}")
    except BadInput as e:
        fail(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
