"""The small byte-level MoE language model that `moecomp compress` uses as its embedded default.

Mixtral's architecture and checkpoint names (MixtralForCausalLM): token embedding, L decoder layers of
RMSNorm -> causal self-attention with rotary position embeddings -> residual -> RMSNorm -> sparse MoE block
(softmax router, top-k, renormalised, SwiGLU experts w1/w3/w2) -> residual, a final RMSNorm and an untied LM
head. The forward below follows transformers' modeling_mixtral (rotate_half RoPE, float32 RMSNorm, softmax in
float32), written out so that train_tiny_moe.py and evaluate.py need only Debian's python3-torch. safetensors
files are read and written by the format's specification (json + struct), since Debian has no `safetensors`.
"""
import json
import math
import struct

import numpy as np
import torch
import torch.nn.functional as F

CORPUS_FILES = ["Apache-2.0", "Artistic", "BSD", "CC0-1.0", "GFDL-1.2", "GFDL-1.3", "GPL-1", "GPL-2", "GPL-3",
                "LGPL-2", "LGPL-2.1", "LGPL-3", "MPL-1.1", "MPL-2.0"]
CORPUS_DIR = "/usr/share/common-licenses"  # Debian's base-files: on every Debian system
CHUNK = 1024        # the corpus is cut into chunks of this many bytes ...
HELD_OUT_EVERY = 10  # ... and every 10th chunk is held out


def corpus():
    """The concatenated licence texts, in the fixed order above."""
    return b"".join(open(f"{CORPUS_DIR}/{name}", "rb").read() for name in CORPUS_FILES)


def split(text):
    """(training bytes, held-out bytes): every HELD_OUT_EVERY-th chunk of CHUNK bytes is held out."""
    chunks = [text[i:i + CHUNK] for i in range(0, len(text), CHUNK)]
    train = b"".join(c for i, c in enumerate(chunks) if i % HELD_OUT_EVERY != HELD_OUT_EVERY - 1)
    held = b"".join(c for i, c in enumerate(chunks) if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1)
    return train, held


# ------------------------------------------------------------------------------------------ safetensors

_DTYPES = {"F32": (torch.float32, 4), "BF16": (torch.bfloat16, 2), "F16": (torch.float16, 2), "F64": (torch.float64, 8),
           "I32": (torch.int32, 4), "I64": (torch.int64, 8), "U8": (torch.uint8, 1)}


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    tensors = {}
    for name, info in header.items():
        dtype, _ = _DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(info["shape"])
    return tensors


def write_safetensors(path, tensors, metadata=None):
    """The reference writer's layout: decreasing item size, then name; header padded with spaces to 8."""
    names = {torch.float64: "F64", torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
             torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8"}
    order = sorted(tensors, key=lambda k: (-tensors[k].element_size(), k))
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name in order:
        t = tensors[name].contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for b in blobs:
            f.write(b)


# ------------------------------------------------------------------------------------------------ model

def rms_norm(x, weight, eps):
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return weight * (x.float() * torch.rsqrt(variance + eps)).to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(seq, head_dim, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def moe_block(x, w, prefix, config, router_stats=None):
    """Mixtral's sparse MoE block on x (T x d); returns (output, router logits)."""
    E, k = config["num_local_experts"], config["num_experts_per_tok"]
    logits = x @ w[prefix + "gate.weight"].t()
    probs = torch.softmax(logits.float(), dim=-1)
    top_w, top_i = torch.topk(probs, k, dim=-1)
    top_w = (top_w / top_w.sum(dim=-1, keepdim=True)).to(x.dtype)
    out = torch.zeros_like(x)
    for e in range(E):
        rows, slot = torch.where(top_i == e)
        if rows.numel() == 0:
            continue
        xe = x[rows]
        p = f"{prefix}experts.{e}."
        h = F.silu(xe @ w[p + "w1.weight"].t()) * (xe @ w[p + "w3.weight"].t())
        out.index_add_(0, rows, (h @ w[p + "w2.weight"].t()) * top_w[rows, slot].unsqueeze(-1))
    if router_stats is not None:
        router_stats.append((probs, top_i))
    return out, logits


# ------------------------------------------------------------------------------------------ Qwen2-MoE block
# The fine-grained upcycled model (models/tiny-qwen-moe-upcycled) is in Qwen2-MoE's layout: its block is
# written out as transformers' modeling_qwen2_moe computes it.

def is_moe(config):
    """Whether the checkpoint's config is an MoE model (Mixtral's num_local_experts, Qwen2-MoE's num_experts)."""
    return "num_local_experts" in config or config.get("model_type") == "qwen2_moe"


def num_experts(config):
    return config["num_local_experts"] if "num_local_experts" in config else config["num_experts"]


def qwen2_moe_block(x, w, prefix, config, router_stats=None):
    """Qwen2-MoE's sparse MoE block on x (T x d) with the tensor prefix `model.layers.{i}.mlp.`: softmax router
    (`gate`), top-k of the probabilities, renormalised when norm_topk_prob, SwiGLU experts gate_proj/up_proj/
    down_proj, plus a shared SwiGLU expert scaled per token by sigmoid(shared_expert_gate x). Returns
    (output, router logits)."""
    E, k = config["num_experts"], config["num_experts_per_tok"]
    act = ACTIVATIONS[config.get("hidden_act", "silu")]
    logits = x @ w[prefix + "gate.weight"].t()
    probs = torch.softmax(logits.float(), dim=-1)
    top_w, top_i = torch.topk(probs, k, dim=-1)
    if config.get("norm_topk_prob", False):
        top_w = top_w / top_w.sum(dim=-1, keepdim=True)
    top_w = top_w.to(x.dtype)
    out = torch.zeros_like(x)
    for e in range(E):
        rows, slot = torch.where(top_i == e)
        if rows.numel() == 0:
            continue
        xe = x[rows]
        p = f"{prefix}experts.{e}."
        h = act(xe @ w[p + "gate_proj.weight"].t()) * (xe @ w[p + "up_proj.weight"].t())
        out.index_add_(0, rows, (h @ w[p + "down_proj.weight"].t()) * top_w[rows, slot].unsqueeze(-1))
    s = prefix + "shared_expert."
    if s + "gate_proj.weight" in w:
        h = act(x @ w[s + "gate_proj.weight"].t()) * (x @ w[s + "up_proj.weight"].t())
        shared = h @ w[s + "down_proj.weight"].t()
        if prefix + "shared_expert_gate.weight" in w:
            shared = torch.sigmoid(x @ w[prefix + "shared_expert_gate.weight"].t()) * shared
        out = out + shared
    if router_stats is not None:
        router_stats.append((probs, top_i))
    return out, logits


ACTIVATIONS = {"silu": F.silu, "relu": F.relu}


def ffn_hidden(x, w, p, config):
    """The gated FFN's hidden activations act(gate_proj x) * (up_proj x) (T x I), act = the config's hidden_act
    (silu, Mistral's SwiGLU; or relu, the Hoyer twin's ReLU-gated form)."""
    act = ACTIVATIONS[config.get("hidden_act", "silu")]
    return act(x @ w[p + "gate_proj.weight"].t()) * (x @ w[p + "up_proj.weight"].t())


def sadmoe_scores(x, w, p, sadmoe):
    """A SADMoE router's scores of each expert (T x E) for the FFN inputs x (T x d): |W2 relu(W1 x + b1) + b2|
    (objective "norm": the expert's predicted output l2-norm) or sigmoid(W2 relu(W1 x + b1) + b2) ("moefication")."""
    r = p + "sadmoe.router."
    z = x @ w[r + "w1"].t()
    if r + "b1" in w:
        z = z + w[r + "b1"]
    z = F.relu(z) @ w[r + "w2"].t()
    if r + "b2" in w:
        z = z + w[r + "b2"]
    return torch.sigmoid(z) if sadmoe.get("objective", "norm") == "moefication" else z.abs()


def expert_mask(scores, top_k=None, tau=None):
    """The experts each token runs (T x E, 0/1): the top_k highest scores (ties to the lower index), or with tau
    SADMoE's dynamic-k, expert i iff scores_i >= tau * max_j scores_j (the highest-scoring one always)."""
    keep = torch.zeros_like(scores)
    if top_k is not None:
        keep.scatter_(1, torch.topk(scores, top_k, dim=-1).indices, 1.0)
    else:
        keep = (scores >= tau * scores.max(dim=-1, keepdim=True).values).to(scores.dtype)
        keep.scatter_(1, scores.argmax(dim=-1, keepdim=True), 1.0)
    return keep


def dense_mlp(x, w, prefix, config, top_k=None, tau=None, hidden=None, experts=None):
    """A dense gated FFN (Mistral's `mlp`) on x (T x d). `hidden`, if a list, receives the hidden activations
    (T x I, with their graph: train_tiny_moe.py's Hoyer penalty); `experts`, if a list, receives each token's
    number of experts run (T) for an expert-split checkpoint.

    A checkpoint that `moecomp compress --method moefy` wrote (config["moecomp_moefy"]) has expert e as neurons
    [e s, (e + 1) s) of the FFN, and each token keeps the neurons of the top_k experts (default: the config's
    top_k) whose router rows score highest (x . row; ties to the lower index, as torch.topk on CPU gives them);
    top_k = num_experts is the dense FFN. A SADMoE checkpoint (config["moecomp_sadmoe"], which wins over
    moecomp_moefy) scores the experts with its two-layer router (sadmoe_scores) and keeps, per token, the top_k
    experts when top_k is given, else those of dynamic-k at tau (default: the config's tau); the kept experts'
    outputs are summed with weight 1. Both are computed densely with a 0/1 mask on the hidden neurons, which
    equals running only the kept experts."""
    p = prefix + "mlp."
    h = ffn_hidden(x, w, p, config)
    if hidden is not None:
        hidden.append(h)
    sadmoe, moefy = config.get("moecomp_sadmoe"), config.get("moecomp_moefy")
    keep = None
    if sadmoe is not None:
        E, s = sadmoe["num_experts"], sadmoe["expert_size"]
        scores = sadmoe_scores(x, w, p, sadmoe)
        keep = expert_mask(scores, top_k=top_k) if top_k is not None else \
            expert_mask(scores, tau=sadmoe["tau"] if tau is None else tau)
    elif moefy is not None:
        E, s = moefy["num_experts"], moefy["expert_size"]
        k = moefy["top_k"] if top_k is None else top_k
        if k < E:
            keep = expert_mask(x @ w[p + moefy["router"]].t(), top_k=k)
        elif experts is not None:
            experts.append(torch.full((x.shape[0],), float(E)))
    if keep is not None:
        if experts is not None:
            experts.append(keep.sum(dim=1))
        h = h * keep.to(h.dtype).repeat_interleave(s, dim=1)
    return h @ w[p + "down_proj.weight"].t()


def forward(w, config, ids, moe_inputs=None, router_stats=None, top_k=None, tau=None, hidden=None, experts=None):
    """Logits (B x S x vocab) for byte ids (B x S). `moe_inputs`, if a list, receives each layer's MoE input;
    top_k, tau, hidden and experts go to each layer's dense_mlp (dense models)."""
    B, S = ids.shape
    d, heads = config["hidden_size"], config["num_attention_heads"]
    hd = d // heads
    kv = config["num_key_value_heads"]
    eps = config["rms_norm_eps"]
    cos, sin = rope(S, hd, config["rope_theta"])
    mask = torch.full((S, S), float("-inf")).triu(1)
    x = w["model.embed_tokens.weight"][ids]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q, kk, v = (h @ w[p + f"self_attn.{n}_proj.weight"].t() for n in "qkv")
        if p + "self_attn.q_proj.bias" in w:  # Qwen2's attention has q/k/v biases
            q, kk, v = (t + w[p + f"self_attn.{n}_proj.bias"] for t, n in zip((q, kk, v), "qkv"))
        q = q.view(B, S, heads, hd).transpose(1, 2)
        kk = kk.view(B, S, kv, hd).transpose(1, 2)
        v = v.view(B, S, kv, hd).transpose(1, 2)
        q, kk = q * cos + rotate_half(q) * sin, kk * cos + rotate_half(kk) * sin
        if kv != heads:
            kk = kk.repeat_interleave(heads // kv, dim=1)
            v = v.repeat_interleave(heads // kv, dim=1)
        # Contiguous (B * heads) x S x hd operands: torch's CPU bmm is far slower on strided ones.
        q = q.reshape(B * heads, S, hd).contiguous()
        kt = kk.reshape(B * heads, S, hd).transpose(1, 2).contiguous()
        v = v.reshape(B * heads, S, hd).contiguous()
        att = torch.softmax(torch.bmm(q, kt) / math.sqrt(hd) + mask, dim=-1, dtype=torch.float32)
        o = torch.bmm(att.to(v.dtype), v).view(B, heads, S, hd).transpose(1, 2).reshape(B, S, d)
        x = x + o @ w[p + "self_attn.o_proj.weight"].t()
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps).reshape(B * S, d)
        if moe_inputs is not None:
            moe_inputs.append(h.detach().clone())
        if "num_local_experts" in config:
            out, _ = moe_block(h, w, p + "block_sparse_moe.", config, router_stats)
        elif config.get("model_type") == "qwen2_moe":
            out, _ = qwen2_moe_block(h, w, p + "mlp.", config, router_stats)
        else:
            out = dense_mlp(h, w, p, config, top_k, tau, hidden,
                            None if experts is None else experts.setdefault(layer, []))
        x = x + out.view(B, S, d)
    x = rms_norm(x, w["model.norm.weight"], eps)
    return x @ w["lm_head.weight"].t()


def perplexity(w, config, text, window=128, top_k=None, tau=None, experts=None):
    """exp(mean next-byte NLL) over non-overlapping windows of `window + 1` bytes of `text`. `experts`, if a
    dict, receives per layer index the list of each batch's experts per token (expert-split checkpoints)."""
    data = torch.tensor(list(text), dtype=torch.long)
    n = (len(data) - 1) // window
    ids = data[: n * window].view(n, window)
    targets = data[1: n * window + 1].view(n, window)
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, n, 32):
            logits = forward(w, config, ids[i:i + 32], top_k=top_k, tau=tau, experts=experts)
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets[i:i + 32].reshape(-1),
                                     reduction="sum").item()
            count += targets[i:i + 32].numel()
    return math.exp(total / count)


def square_hoyer(h):
    """The square Hoyer measure of each row of h (T x I): (sum |h|)^2 / (sum h^2 + 1e-15), from 1 (one non-zero)
    to I (all equal in magnitude); SADMoE's sparsity penalty (its Sec. 3.1), averaged over tokens by the caller."""
    return h.abs().sum(dim=-1).pow(2) / (h.pow(2).sum(dim=-1) + 1e-15)


def activation_sparsity(w, config, text, window=128):
    """Per layer of a dense checkpoint, over the windows of `text` (as perplexity cuts them): the fraction of the
    FFN's hidden activations act(gate x) * (up x) that are exactly zero, and their mean square Hoyer per token.
    Returns [{"layer", "zero_fraction", "square_hoyer"}]."""
    data = torch.tensor(list(text), dtype=torch.long)
    n = (len(data) - 1) // window
    ids = data[: n * window].view(n, window)
    L = config["num_hidden_layers"]
    zeros, hoyer, count, tokens = [0] * L, [0.0] * L, [0] * L, [0] * L
    with torch.no_grad():
        for i in range(0, n, 32):
            hidden = []
            forward(w, config, ids[i:i + 32], hidden=hidden)
            for layer, h in enumerate(hidden):
                zeros[layer] += int((h == 0).sum())
                count[layer] += h.numel()
                hoyer[layer] += float(square_hoyer(h.double()).sum())
                tokens[layer] += h.shape[0]
    return [{"layer": l, "zero_fraction": zeros[l] / count[l], "square_hoyer": hoyer[l] / tokens[l]} for l in range(L)]


def check_calibration_tokens(tokens, train_bytes, window=128):
    """ValueError unless tokens is a positive multiple of window and at most train_bytes."""
    if tokens <= 0 or tokens % window or tokens > train_bytes:
        raise ValueError(f"the calibration tokens must be a positive multiple of {window} and at most the "
                         f"{train_bytes} training bytes, got {tokens}")


def calibration_inputs(w, config, train, tokens=1024, window=128):
    """Each layer's MoE-block / FFN input (tokens x d float32) on the first `tokens` training bytes, cut into
    windows of `window` bytes and run 8 windows per forward (so the first 1,024 tokens of any file are the
    1,024-token file's, byte for byte: train_tiny_moe.py's calibration.safetensors)."""
    check_calibration_tokens(tokens, len(train), window)
    ids = torch.tensor(list(train[:tokens]), dtype=torch.long).view(tokens // window, window)
    per_layer = None
    with torch.no_grad():
        for i in range(0, ids.shape[0], 8):
            inputs = []
            forward(w, config, ids[i:i + 8], moe_inputs=inputs)
            per_layer = [[t] for t in inputs] if per_layer is None else [a + [t] for a, t in zip(per_layer, inputs)]
    return [torch.cat(parts).float() if len(parts) > 1 else parts[0].float() for parts in per_layer]


def calibration_source(tokens, window=128):
    """The metadata "source" of a calibration file written by calibration_inputs."""
    return f"train_tiny_moe.py: the first {tokens} training bytes, {tokens // window} windows of {window}"


def load(model_dir):
    """(float32 weights, config) of a checkpoint directory: model.safetensors or a sharded index."""
    config = json.load(open(f"{model_dir}/config.json"))
    index = f"{model_dir}/model.safetensors.index.json"
    try:
        shards = sorted(set(json.load(open(index))["weight_map"].values()))
    except FileNotFoundError:
        shards = ["model.safetensors"]
    w = {}
    for s in shards:
        w.update(read_safetensors(f"{model_dir}/{s}"))
    return {k: v.float() for k, v in w.items()}, config


def numpy_seed(seed):
    return np.random.default_rng(seed)
