#!/usr/bin/env python3
"""Trains moecomp's embedded default models: a small byte-level MoE language model in Mixtral's layout, and
with --dense its dense twin in Mistral's layout (the model `moecomp compress --method moefy` splits).

    /usr/bin/python3 models/train_tiny_moe.py [--dense] [--out models/tiny-moe] [--steps 2000] [--threads 1]
    /usr/bin/python3 models/train_tiny_moe.py --activation relu --hoyer 1e-3     # models/tiny-dense-hoyer
    /usr/bin/python3 models/train_tiny_moe.py --upcycle models/tiny-dense --steps 1000 --lr 1e-3
                                                                                # models/tiny-moe-upcycled
    /usr/bin/python3 models/train_tiny_moe.py --upcycle models/tiny-dense --layout qwen2_moe --steps 600 --lr 1e-3
                                                                                # models/tiny-qwen-moe-upcycled

CPU only, Debian's python3-torch, fixed seeds. The text is the licence collection of Debian's base-files
package (/usr/share/common-licenses: 14 files, 264 KB, each licence text permitting verbatim copies), whose
SHA-256 is checked so that a different text cannot pass for the recorded one. Every 10th KB is held out.

Writes to --out: config.json (MixtralConfig keys; MistralConfig's with --dense; Qwen2MoeConfig's with --layout
qwen2_moe), model.safetensors (bf16), calibration.safetensors (each layer's MoE-block inputs, or with --dense
its FFN inputs, `layers.{i}.moe_input`, T x d float32, on 1024 training bytes), heldout.bin (the held-out bytes) and train_log.json (the losses and
the held-out perplexity of the saved bf16 weights). The dense model is the MoE model's twin: the same
attention, sizes, data, schedule and seed, with one SwiGLU FFN of intermediate size 1024 per layer (as many
neurons as four of the MoE's experts) in place of the MoE block.

--activation relu makes the dense FFN ReLU-gated, relu(gate_proj x) * up_proj x (config hidden_act "relu"; the
Mistral layout moecomp reads needs up_proj), and --hoyer ALPHA adds SADMoE's square Hoyer penalty on its hidden
activations, (sum |h|)^2 / (sum h^2 + 1e-15) per token, averaged over tokens and summed over layers, weighted by
ALPHA * step / (steps - 1). With a dense model train_log.json also records each layer's held-out fraction of
exactly-zero hidden activations and square Hoyer. --calibration-tokens N writes N tokens of calibration (as
make_calibration.py does).

--upcycle DENSE_DIR builds the MoE from a trained dense twin instead of random weights, as Mixtral and
Qwen-MoE were built: every non-FFN tensor copied, each layer's FFN of 1,024 neurons cut into pieces that become
the experts (each piece twice, with 1% noise), a small random router, then the same training (text, batches,
AdamW, warm-up and cosine, load-balancing loss) for --steps at peak --lr. --layout mixtral (default) keeps
tiny-moe's shape (8 experts of 256, top-2); --layout qwen2_moe writes Qwen2-MoE's layout (32 experts of 48,
top-4 renormalised, a shared expert of the 256 neurons of largest mean contribution with a sigmoid gate).
upcycle_weights gives the construction; models/README.md says why.
"""
import argparse
import hashlib
import json
import math
import os
import sys
import time

# One thread everywhere, set before torch loads its BLAS: torch 1.13 runs these small matrices 3x slower on
# two threads, and a single thread makes a run reproducible bit for bit on a given machine.
if __name__ == "__main__":
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = os.environ.get(variable, "1") if "--threads" not in sys.argv else \
            sys.argv[sys.argv.index("--threads") + 1]

import torch
import torch.nn.functional as F

import tiny_moe

CORPUS_SHA256 = "e702fc128a22ec5f42b88d701ba068de1515b336f5af4e0d6e144a3795587db2"

CONFIG = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "vocab_size": 256,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "hidden_act": "silu",
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "router_aux_loss_coef": 0.02,
    "torch_dtype": "bfloat16",
}

DENSE_CONFIG = {
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "vocab_size": 256,
    "hidden_size": 128,
    "intermediate_size": 1024,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_act": "silu",
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


# The fine-grained upcycled variant (--upcycle DENSE_DIR --layout qwen2_moe): Qwen2-MoE's layout and config keys
# (Qwen2MoeConfig), 32 routed experts of 48 neurons, top-4 renormalised, and a shared expert of 256 neurons with
# its sigmoid gate; every layer sparse. intermediate_size is the dense FFN's (Qwen2-MoE uses it only for
# mlp_only_layers, of which there are none).
QWEN2_MOE_CONFIG = {
    "architectures": ["Qwen2MoeForCausalLM"],
    "model_type": "qwen2_moe",
    "vocab_size": 256,
    "hidden_size": 128,
    "intermediate_size": 1024,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_experts": 32,
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 48,
    "shared_expert_intermediate_size": 256,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "hidden_act": "silu",
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "router_aux_loss_coef": 0.02,
    "output_router_logits": False,
    "torch_dtype": "bfloat16",
}


def init_weights(config, generator):
    d, I, V = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    E = config.get("num_local_experts", 0)
    hd = d // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * hd

    def normal(*shape, std=0.02):
        return (torch.randn(*shape, generator=generator) * std).requires_grad_()

    w = {"model.embed_tokens.weight": normal(V, d), "lm_head.weight": normal(V, d),
         "model.norm.weight": torch.ones(d, requires_grad=True)}
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        w[p + "input_layernorm.weight"] = torch.ones(d, requires_grad=True)
        w[p + "post_attention_layernorm.weight"] = torch.ones(d, requires_grad=True)
        w[p + "self_attn.q_proj.weight"] = normal(d, d)
        w[p + "self_attn.k_proj.weight"] = normal(kv, d)
        w[p + "self_attn.v_proj.weight"] = normal(kv, d)
        w[p + "self_attn.o_proj.weight"] = normal(d, d, std=0.02 / math.sqrt(2 * config["num_hidden_layers"]))
        if not E:  # dense: one SwiGLU FFN
            w[p + "mlp.gate_proj.weight"] = normal(I, d)
            w[p + "mlp.up_proj.weight"] = normal(I, d)
            w[p + "mlp.down_proj.weight"] = normal(d, I, std=0.02 / math.sqrt(2 * config["num_hidden_layers"]))
            continue
        w[p + "block_sparse_moe.gate.weight"] = normal(E, d)
        for e in range(E):
            q = f"{p}block_sparse_moe.experts.{e}."
            w[q + "w1.weight"] = normal(I, d)
            w[q + "w3.weight"] = normal(I, d)
            w[q + "w2.weight"] = normal(d, I, std=0.02 / math.sqrt(2 * config["num_hidden_layers"]))
    return w


# ----------------------------------------------------------------------------------------------- upcycling

def upcycle_plan(config):
    """How --upcycle builds each layer from the dense FFN of n neurons: (pieces, replicas, shared, scale).
    mixtral: the n = 1024 neurons in order are cut into 4 pieces of 256, expert e is piece e // 2 (2 replicas),
    no shared expert. qwen2_moe: the 256 neurons of largest mean contribution form the shared expert, the other
    768 in order are cut into 16 pieces of 48, expert e is piece e // 2. scale (main() measures others): the
    number of pieces P, for which at the start (a near-uniform router: each expert chosen with probability k/E,
    renormalised weights close to 1/k) the expected output over the routing is the output of the dense FFN's
    routed neurons, sum_e (k/E)(1/k) P piece(e) = (2P/E) sum_j piece_j = sum_j piece_j."""
    E, k = tiny_moe.num_experts(config), config["num_experts_per_tok"]
    shared = config.get("shared_expert_intermediate_size", 0)
    size = config["intermediate_size"] if config.get("model_type") != "qwen2_moe" else config["moe_intermediate_size"]
    return {"replicas": 2, "pieces": E // 2, "expert_size": size, "shared": shared, "scale": float(E // 2)}


def neuron_contributions(dense_w, dense_config, layer, inputs):
    """Mean over the tokens `inputs` (T x d) of |h_i| * ||down[:, i]||: neuron i's mean output magnitude."""
    p = f"model.layers.{layer}.mlp."
    h = tiny_moe.ffn_hidden(inputs, dense_w, p, dense_config)
    return h.abs().mean(dim=0) * dense_w[p + "down_proj.weight"].norm(dim=0)


def upcycle_weights(dense_w, dense_config, config, generator, train, noise, scale=None):
    """The MoE's weights (float32 leaves with gradients) built from the dense checkpoint dense_w: every non-FFN
    tensor copied, each layer's experts cut from its FFN by upcycle_plan, each expert matrix plus Gaussian noise
    of std noise x the std of the dense matrix it came from (so that the replicas of a piece differ), the
    routed down projections times `scale` (default the plan's), the router N(0, 0.02^2). qwen2_moe: the shared
    expert is the dense FFN's shared neurons exactly, its down projection doubled since its gate (weight 0)
    starts at sigmoid(0) = 1/2; q/k/v biases are zero (Qwen2's attention has them; they stay zero).
    Returns (weights, record of the construction)."""
    plan = upcycle_plan(config)
    scale = plan["scale"] if scale is None else scale
    qwen = config.get("model_type") == "qwen2_moe"
    d, n = config["hidden_size"], dense_config["intermediate_size"]
    E, S, P = tiny_moe.num_experts(config), plan["expert_size"], plan["pieces"]
    if plan["shared"] + P * S != n:
        raise SystemExit(f"train_tiny_moe: --upcycle: the plan needs a dense FFN of {plan['shared'] + P * S} "
                         f"neurons, the dense checkpoint has {n}")
    w = {}
    for name, t in dense_w.items():
        if ".mlp." not in name:
            w[name] = t.clone()
    calibration = tiny_moe.calibration_inputs(dense_w, dense_config, train) if qwen else None
    record = {"pieces": P, "replicas": plan["replicas"], "expert_size": S, "shared_expert_size": plan["shared"],
              "down_proj_scale": scale, "noise": noise, "shared_neurons": []}
    for layer in range(config["num_hidden_layers"]):
        src = f"model.layers.{layer}.mlp."
        gate, up, down = (dense_w[src + m + "_proj.weight"] for m in ("gate", "up", "down"))
        order = torch.arange(n)
        if qwen:
            contribution = neuron_contributions(dense_w, dense_config, layer, calibration[layer])
            # Stable sort: equal contributions go to the lower index.
            ranked = torch.tensor(sorted(range(n), key=lambda i: (-float(contribution[i]), i)))
            shared = ranked[:plan["shared"]].sort().values
            taken = set(shared.tolist())
            routed = torch.tensor([i for i in range(n) if i not in taken])
            order = routed
            record["shared_neurons"].append(shared.tolist())
            s = src + "shared_expert."
            w[s + "gate_proj.weight"] = gate[shared].clone()
            w[s + "up_proj.weight"] = up[shared].clone()
            w[s + "down_proj.weight"] = down[:, shared] * 2.0
            w[src + "shared_expert_gate.weight"] = torch.zeros(1, d)
            for m in "qkv":
                rows = dense_w[f"model.layers.{layer}.self_attn.{m}_proj.weight"].shape[0]
                w[f"model.layers.{layer}.self_attn.{m}_proj.bias"] = torch.zeros(rows)
        prefix = src if qwen else f"model.layers.{layer}.block_sparse_moe."
        names = ("gate_proj", "up_proj", "down_proj") if qwen else ("w1", "w3", "w2")
        w[prefix + "gate.weight"] = torch.randn(E, d, generator=generator) * 0.02
        stds = [gate.std(), up.std(), down.std()]
        for e in range(E):
            neurons = order[(e // plan["replicas"]) * S:(e // plan["replicas"] + 1) * S]
            parts = [gate[neurons], up[neurons], down[:, neurons]]
            for i, (name, t) in enumerate(zip(names, parts)):
                t = t + torch.randn(t.shape, generator=generator) * (noise * stds[i])
                w[f"{prefix}experts.{e}.{name}.weight"] = t * scale if i == 2 else t
    trainable = {k: (v if k.endswith("_proj.bias") else v.requires_grad_()) for k, v in w.items()}
    return trainable, record


def load_balancing_loss(router_stats, E):
    """Switch/Mixtral's auxiliary loss: E * sum_e (fraction of routed slots to e) * (mean probability of e)."""
    total = 0.0
    for probs, top_i in router_stats:
        fraction = F.one_hot(top_i, E).float().sum(dim=1).mean(dim=0) / top_i.shape[1]
        total = total + E * (fraction * probs.mean(dim=0)).sum()
    return total / len(router_stats)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dense", action="store_true", help="train the dense twin (Mistral layout) instead")
    p.add_argument("--activation", choices=["silu", "relu"], default="silu",
                   help="the dense FFN's activation: silu (SwiGLU, tiny-dense) or relu (ReLU-gated: "
                        "relu(gate_proj x) * up_proj x, config hidden_act \"relu\"); implies --dense when relu")
    p.add_argument("--hoyer", type=float, default=0.0, metavar="ALPHA",
                   help="add SADMoE's square Hoyer penalty on the dense FFNs' hidden activations, summed over "
                        "layers and averaged over tokens, with a weight rising linearly from 0 at the first step "
                        "to ALPHA at the last (needs a dense model)")
    p.add_argument("--upcycle", default=None, metavar="DENSE_DIR",
                   help="build the MoE from the dense checkpoint DENSE_DIR (models/tiny-dense) instead of from "
                        "random weights: its non-FFN weights copied, each FFN cut into pieces that become the "
                        "experts (models/README.md, the upcycled models), then trained as an MoE")
    p.add_argument("--layout", choices=["mixtral", "qwen2_moe"], default="mixtral",
                   help="with --upcycle: mixtral (tiny-moe's shape: 8 experts of 256, top-2) or qwen2_moe (32 "
                        "experts of 48, top-4, a shared expert of 256 with a sigmoid gate)")
    p.add_argument("--noise", type=float, default=0.01,
                   help="with --upcycle: the std of the noise added to each expert matrix, relative to the std of "
                        "the dense matrix it was cut from (default 0.01)")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    p.add_argument("--calibration-tokens", type=int, default=1024, metavar="N",
                   help="training bytes in calibration.safetensors (a multiple of 128; default 1024)")
    p.add_argument("--out", default=None, help="default: models/tiny-moe, models/tiny-dense with --dense, "
                   "models/tiny-moe-upcycled with --upcycle, models/tiny-qwen-moe-upcycled with --upcycle "
                   "--layout qwen2_moe, "
                   "models/tiny-dense-hoyer with --activation relu --hoyer ALPHA, models/tiny-dense-relu "
                   "with --activation relu alone")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--any-corpus", action="store_true", help="accept a corpus whose SHA-256 differs")
    a = p.parse_args()
    if a.activation == "relu":
        a.dense = True
    if a.hoyer < 0 or not math.isfinite(a.hoyer):
        p.error(f"--hoyer must be a finite ALPHA >= 0, got {a.hoyer}")
    if a.hoyer > 0 and not a.dense:
        p.error("--hoyer needs a dense model (--dense or --activation relu)")
    if a.upcycle is not None and (a.dense or a.hoyer > 0):
        p.error("--upcycle builds an MoE model; it cannot go with --dense, --activation relu or --hoyer")
    if a.layout != "mixtral" and a.upcycle is None:
        p.error("--layout qwen2_moe needs --upcycle DENSE_DIR")
    if not (a.noise >= 0 and math.isfinite(a.noise)):
        p.error(f"--noise must be a finite number >= 0, got {a.noise}")
    if not (a.lr > 0 and math.isfinite(a.lr)):
        p.error(f"--lr must be a finite number > 0, got {a.lr}")
    if a.out is None and a.upcycle is not None:
        a.out = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "tiny-moe-upcycled" if a.layout == "mixtral" else "tiny-qwen-moe-upcycled")
    if a.out is None:
        name = "tiny-moe" if not a.dense else "tiny-dense" if a.activation == "silu" else \
            "tiny-dense-hoyer" if a.hoyer > 0 else "tiny-dense-relu"
        a.out = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)  # denormal gradients slow the CPU down by 10-100x and change nothing here
    torch.manual_seed(a.seed)

    text = tiny_moe.corpus()
    digest = hashlib.sha256(text).hexdigest()
    if digest != CORPUS_SHA256 and not a.any_corpus:
        raise SystemExit(f"train_tiny_moe: the corpus's SHA-256 is {digest}, not the recorded {CORPUS_SHA256}; "
                         "its files differ from the ones the committed model was trained on (--any-corpus to go on)")
    train, held = tiny_moe.split(text)
    data = torch.tensor(list(train), dtype=torch.long)
    config = dict(DENSE_CONFIG if a.dense else QWEN2_MOE_CONFIG if a.layout == "qwen2_moe" else CONFIG)
    if a.dense:
        config["hidden_act"] = a.activation
    try:
        tiny_moe.check_calibration_tokens(a.calibration_tokens, len(train))
    except ValueError as e:
        p.error(f"--calibration-tokens: {e}")
    E = tiny_moe.num_experts(config) if tiny_moe.is_moe(config) else 0
    generator = torch.Generator().manual_seed(a.seed)
    upcycled = None
    if a.upcycle is None:
        w = init_weights(config, generator)
    else:
        dense_w, dense_config = tiny_moe.load(a.upcycle)
        if tiny_moe.is_moe(dense_config) or dense_config.get("hidden_act", "silu") != "silu":
            p.error(f"--upcycle: {a.upcycle} must be a dense SwiGLU checkpoint (Mistral layout, hidden_act silu)")
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size"):
            if dense_config[key] != config[key]:
                p.error(f"--upcycle: {a.upcycle}'s {key} is {dense_config[key]}, the MoE needs {config[key]}")
        # The routed experts' down projections are scaled by the power of two c in 1, 2, ..., E whose untrained
        # MoE has the lowest perplexity on the first len(held) training bytes (ties to the smaller c); the
        # held-out perplexity of each start is recorded too. Each trial draws the same noise and router.
        state = generator.get_state()
        sample = train[:len(held)]
        trials = {}
        for factor in [float(2 ** i) for i in range(int(math.log2(E)) + 1)]:
            generator.set_state(state)
            trial, _ = upcycle_weights(dense_w, dense_config, config, generator, train, a.noise, scale=factor)
            trial = {n: t.detach() for n, t in trial.items()}
            trials[factor] = (tiny_moe.perplexity(trial, config, sample), tiny_moe.perplexity(trial, config, held))
            print(f"upcycled start, down_proj x {factor:g}: perplexity {trials[factor][0]:.4f} on {len(sample)} "
                  f"training bytes, {trials[factor][1]:.4f} held out", flush=True)
        chosen = min(trials, key=lambda f: (trials[f][0], f))
        generator.set_state(state)
        w, upcycled = upcycle_weights(dense_w, dense_config, config, generator, train, a.noise, scale=chosen)
        upcycled["initial_perplexity_by_scale"] = {f"{f:g}": {"train_sample": round(t, 4), "heldout": round(h, 4)}
                                                   for f, (t, h) in trials.items()}
        upcycled["from"] = os.path.relpath(os.path.abspath(a.upcycle), os.path.dirname(os.path.abspath(__file__)))
        upcycled["from_model_sha256"] = hashlib.sha256(
            open(os.path.join(a.upcycle, "model.safetensors"), "rb").read()).hexdigest()
        upcycled["dense_heldout_perplexity"] = round(tiny_moe.perplexity(dense_w, dense_config, held), 4)
    params = [t for t in w.values() if t.requires_grad]
    decay = [t for n, t in w.items() if t.dim() == 2]
    no_decay = [t for n, t in w.items() if t.dim() < 2 and t.requires_grad]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=a.lr, betas=(0.9, 0.95))
    warmup = 60

    def lr_at(step):
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, a.steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    log = {"corpus_sha256": digest, "corpus_bytes": len(text), "train_bytes": len(train), "heldout_bytes": len(held),
           "steps": a.steps, "batch": a.batch, "seq": a.seq, "threads": a.threads, "seed": a.seed, "loss": []}
    if a.dense:
        log["hidden_act"] = a.activation
    if a.lr != 3e-3:
        log["lr"] = a.lr
    if upcycled is not None:
        log["upcycle"] = upcycled
    if a.hoyer > 0:
        log["hoyer_alpha"] = a.hoyer
        log["hoyer_schedule"] = "alpha * step / (steps - 1): 0 at the first step, alpha at the last"
        log["hoyer"] = []  # [step, the penalty before alpha: the square Hoyer summed over layers]
    start = time.time()
    for step in range(a.steps):
        offsets = torch.randint(0, len(data) - a.seq - 1, (a.batch,), generator=generator)
        ids = torch.stack([data[o:o + a.seq] for o in offsets])
        targets = torch.stack([data[o + 1:o + a.seq + 1] for o in offsets])
        stats, hidden = [], [] if a.hoyer > 0 else None
        logits = tiny_moe.forward(w, config, ids, router_stats=stats, hidden=hidden)
        lm = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss = lm + config["router_aux_loss_coef"] * load_balancing_loss(stats, E) if E else lm
        if hidden is not None:
            hoyer = sum(tiny_moe.square_hoyer(h).mean() for h in hidden)
            loss = loss + a.hoyer * step / max(1, a.steps - 1) * hoyer
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        scheduler.step()
        if step % 50 == 0 or step == a.steps - 1:
            log["loss"].append([step, round(lm.item(), 4)])
            extra = ""
            if hidden is not None:
                log["hoyer"].append([step, round(hoyer.item(), 2)])
                extra = f"  square Hoyer {hoyer.item():8.2f}"
            print(f"step {step:5d}  loss {lm.item():.4f}{extra}  {time.time() - start:6.1f} s", flush=True)
    log["train_seconds"] = round(time.time() - start, 1)

    os.makedirs(a.out, exist_ok=True)
    saved = {k: v.detach().to(torch.bfloat16) for k, v in w.items()}
    tiny_moe.write_safetensors(os.path.join(a.out, "model.safetensors"), saved, {"format": "pt"})
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    # What is evaluated and calibrated on is the saved bf16 model, read back.
    weights, config = tiny_moe.load(a.out)
    log["heldout_perplexity"] = round(tiny_moe.perplexity(weights, config, held), 4)
    if a.dense:
        log["heldout_activation_sparsity"] = [
            {k: round(v, 6) if isinstance(v, float) else v for k, v in r.items()}
            for r in tiny_moe.activation_sparsity(weights, config, held)]
    inputs = tiny_moe.calibration_inputs(weights, config, train, a.calibration_tokens)
    tiny_moe.write_safetensors(os.path.join(a.out, "calibration.safetensors"),
                               {f"layers.{i}.moe_input": t for i, t in enumerate(inputs)},
                               {"source": tiny_moe.calibration_source(a.calibration_tokens)})
    calibration_ids = torch.tensor(list(train[:1024]), dtype=torch.long).view(8, 128)
    with open(os.path.join(a.out, "heldout.bin"), "wb") as f:
        f.write(held)
    if E:
        usage = []
        with torch.no_grad():
            stats = []
            tiny_moe.forward(weights, config, calibration_ids, router_stats=stats)
            for probs, top_i in stats:
                usage.append([int((top_i == e).sum()) for e in range(E)])
        log["calibration_expert_slots"] = usage
    with open(os.path.join(a.out, "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
        f.write("\n")
    print(f"held-out perplexity {log['heldout_perplexity']}, {log['train_seconds']} s; wrote {a.out}")


if __name__ == "__main__":
    main()
