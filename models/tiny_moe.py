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
    names = {torch.float64: "F64", torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
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


def dense_mlp(x, w, prefix, config, top_k=None):
    """A dense SwiGLU FFN (Mistral's `mlp`) on x (T x d). For a checkpoint that `moecomp compress --method moefy`
    wrote (config["moecomp_moefy"]), expert e is neurons [e s, (e + 1) s) of the FFN, and each token keeps the
    neurons of the top_k experts (default: the config's top_k) whose router rows score highest (x . row; ties
    to the lower index, as torch.topk on CPU gives them); top_k = num_experts is the dense FFN."""
    p = prefix + "mlp."
    h = F.silu(x @ w[p + "gate_proj.weight"].t()) * (x @ w[p + "up_proj.weight"].t())
    moefy = config.get("moecomp_moefy")
    if moefy is not None:
        E, s = moefy["num_experts"], moefy["expert_size"]
        k = moefy["top_k"] if top_k is None else top_k
        if k < E:
            scores = x @ w[p + moefy["router"]].t()
            keep = torch.zeros(x.shape[0], E, dtype=h.dtype)
            keep.scatter_(1, torch.topk(scores, k, dim=-1).indices, 1.0)
            h = h * keep.repeat_interleave(s, dim=1)
    return h @ w[p + "down_proj.weight"].t()


def forward(w, config, ids, moe_inputs=None, router_stats=None, top_k=None):
    """Logits (B x S x vocab) for byte ids (B x S). `moe_inputs`, if a list, receives each layer's MoE input."""
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
        q = (h @ w[p + "self_attn.q_proj.weight"].t()).view(B, S, heads, hd).transpose(1, 2)
        kk = (h @ w[p + "self_attn.k_proj.weight"].t()).view(B, S, kv, hd).transpose(1, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].t()).view(B, S, kv, hd).transpose(1, 2)
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
        else:
            out = dense_mlp(h, w, p, config, top_k)
        x = x + out.view(B, S, d)
    x = rms_norm(x, w["model.norm.weight"], eps)
    return x @ w["lm_head.weight"].t()


def perplexity(w, config, text, window=128, top_k=None):
    """exp(mean next-byte NLL) over non-overlapping windows of `window + 1` bytes of `text`."""
    data = torch.tensor(list(text), dtype=torch.long)
    n = (len(data) - 1) // window
    ids = data[: n * window].view(n, window)
    targets = data[1: n * window + 1].view(n, window)
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, n, 32):
            logits = forward(w, config, ids[i:i + 32], top_k=top_k)
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets[i:i + 32].reshape(-1),
                                     reduction="sum").item()
            count += targets[i:i + 32].numel()
    return math.exp(total / count)


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
