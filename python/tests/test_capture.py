#!/usr/bin/env python3
"""moecomp_capture (python/moecomp_capture, docs/capture.md) end to end.

- The embedded model: capturing models/tiny-moe and models/tiny-dense from their calibration text (the first 1024
  training bytes, 8 windows of 128) against the committed calibration.safetensors: in this process to a tolerance,
  and through `python3 -m moecomp_capture` under OPENBLAS_CORETYPE=Haswell byte for byte (whole file), where torch's
  BLAS is the OpenBLAS that wrote them.
- Fake transformers trees (classes named and nested as transformers' Mixtral, Qwen2-MoE, DeepSeek-V2/V3, OLMoE,
  Switch, Mistral): keys and values against a direct walk of the layers; padding masks, max_tokens, dtype, hooks.
- The writer against an independent reader (struct + numpy), and against `moecomp compress` when the tool is
  built (argv[1], $MOECOMP_CLI, or build/default/tools/cli/moecomp).
- Every error. Prints one line per check and `N passed, M failed`; exits 1 on a failure.

    /usr/bin/python3 python/tests/test_capture.py [path/to/moecomp]
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import moecomp_capture as mc  # noqa: E402

passed = failed = 0


def check(label, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
    print(f"{'ok  ' if ok else 'FAIL'} {label}{': ' + str(detail) if detail != '' else ''}", flush=True)


def skip(label, why):
    print(f"skip {label}: {why}", flush=True)


def expect(label, fragments, fn, *args, exc=ValueError, **kwargs):
    """fn raises `exc` whose message holds every fragment."""
    fragments = [fragments] if isinstance(fragments, str) else fragments
    try:
        fn(*args, **kwargs)
    except exc as e:
        missing = [f for f in fragments if f not in str(e)]
        check(label, not missing, str(e) if not missing else f"{e} (missing {missing})")
        return
    except Exception as e:  # noqa: BLE001
        check(label, False, f"raised {type(e).__name__}: {e}")
        return
    check(label, False, "no exception")


# ------------------------------------------------------------------------------- an independent reader

def parse_safetensors(path):
    """(header without __metadata__, metadata, {name: float64 numpy array}) by the format's specification, and the
    layout's invariants asserted: header length a multiple of 8, offsets contiguous from 0 to the file's end."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0, f"header length {n} is not a multiple of 8"
    header = json.loads(raw[8:8 + n])
    metadata = header.pop("__metadata__", {})
    data = raw[8 + n:]
    spans = sorted(tuple(v["data_offsets"]) for v in header.values())
    assert spans[0][0] == 0 and spans[-1][1] == len(data), f"offsets {spans} do not cover {len(data)} data bytes"
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), f"offsets {spans} are not contiguous"
    arrays = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        chunk = data[b:e]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(chunk, dtype="<u2").astype(np.uint32) << 16
            a = bits.view(np.float32).astype(np.float64)
        else:
            a = np.frombuffer(chunk, dtype={"F32": "<f4", "F16": "<f2", "F64": "<f8"}[info["dtype"]]).astype(np.float64)
        arrays[name] = a.reshape(info["shape"])
    return header, metadata, arrays


# ------------------------------------------------------------------------- fake transformers module trees

def named(name, base):
    """A subclass of `base` whose class name is transformers' `name` (the capture matches by class name)."""
    return type(name, (base,), {})


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(d))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class Attention(nn.Module):
    """Causal single-head attention: mixes positions, so the rows' order matters."""

    def __init__(self, d):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d, bias=False) for _ in range(4))

    def forward(self, x):
        S = x.shape[1]
        a = self.q_proj(x) @ self.k_proj(x).transpose(1, 2) / x.shape[-1] ** 0.5
        a = a + torch.full((S, S), float("-inf")).triu(1)
        return self.o_proj(torch.softmax(a, -1) @ self.v_proj(x))


class SwiGLU(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoe(nn.Module):
    """Top-2 softmax MoE over (B, S, H) input, returning (output, router logits) as Mixtral's block does."""

    def __init__(self, d, f, experts=4, expert_class=SwiGLU, shared=None):
        super().__init__()
        self.gate = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList(expert_class(d, f) for _ in range(experts))
        if shared is not None:
            setattr(self, shared, expert_class(d, f))

    def forward(self, hidden_states):
        B, S, H = hidden_states.shape
        x = hidden_states.reshape(-1, H)
        logits = self.gate(x)
        w, i = torch.topk(torch.softmax(logits, -1), 2, dim=-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(i == e)
            if rows.numel():
                out.index_add_(0, rows, expert(x[rows]) * w[rows, slot, None])
        for name in ("shared_expert", "shared_experts"):
            if hasattr(self, name):
                out = out + getattr(self, name)(x)
        return out.view(B, S, H), logits


class DecoderLayer(nn.Module):
    def __init__(self, d, ffn_attribute, ffn):
        super().__init__()
        self.self_attn = Attention(d)
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(d), RMSNorm(d)
        self.ffn_attribute = ffn_attribute
        setattr(self, ffn_attribute, ffn)

    def ffn(self):
        return getattr(self, self.ffn_attribute)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        out = self.ffn()(self.post_attention_layernorm(x))
        return x + (out[0] if isinstance(out, tuple) else out)


class Backbone(nn.Module):
    def __init__(self, d, layers):
        super().__init__()
        self.embed_tokens = nn.Embedding(64, d)
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(d)

    def forward(self, input_ids, attention_mask=None):
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class CausalLM(nn.Module):
    def __init__(self, d, layers):
        super().__init__()
        self.model = Backbone(d, layers)
        self.lm_head = nn.Linear(d, 64, bias=False)

    def forward(self, input_ids=None, attention_mask=None):
        return self.lm_head(self.model(input_ids, attention_mask))


D, F = 16, 24


def decoder_model(prefix, ffns):
    """{prefix}ForCausalLM(model={prefix}Model(layers={prefix}DecoderLayer...)) with the given FFN per layer."""
    torch.manual_seed(len(prefix) + len(ffns))
    layers = [named(f"{prefix}DecoderLayer", DecoderLayer)(D, attribute, module) for attribute, module in ffns]
    lm = named(f"{prefix}ForCausalLM", CausalLM)(D, layers)
    lm.model.__class__ = named(f"{prefix}Model", Backbone)
    return lm


def expected_decoder_inputs(lm, input_ids, mask=None):
    """Each layer's FFN input, by walking the layers directly (no hooks): {layer index: rows}."""
    with torch.no_grad():
        x = lm.model.embed_tokens(input_ids)
        rows = {}
        for i, layer in enumerate(lm.model.layers):
            x = x + layer.self_attn(layer.input_layernorm(x))
            h = layer.post_attention_layernorm(x)
            rows[i] = h[mask.bool()] if mask is not None else h.reshape(-1, D)
            out = layer.ffn()(h)
            x = x + (out[0] if isinstance(out, tuple) else out)
    return rows


def mixtral(attribute="block_sparse_moe", layers=3):
    return decoder_model("Mixtral", [(attribute, named("MixtralSparseMoeBlock", SparseMoe)(D, F))
                                     for _ in range(layers)])


def qwen2_moe(mlp_only_layers=(1,)):
    mlp = named("Qwen2MoeMLP", SwiGLU)
    ffns = []
    for i in range(4):
        if i in mlp_only_layers:
            ffns.append(("mlp", mlp(D, F)))
        else:
            block = named("Qwen2MoeSparseMoeBlock", SparseMoe)(D, F, expert_class=mlp, shared="shared_expert")
            block.shared_expert_gate = nn.Linear(D, 1, bias=False)
            ffns.append(("mlp", block))
    return decoder_model("Qwen2Moe", ffns)


def deepseek(version, first_k_dense_replace=1, layers=3):
    mlp = named(f"DeepseekV{version}MLP", SwiGLU)
    moe = named(f"DeepseekV{version}MoE", SparseMoe)
    return decoder_model(f"DeepseekV{version}", [("mlp", mlp(D, F) if i < first_k_dense_replace else
                                                  moe(D, F, expert_class=mlp, shared="shared_experts"))
                                                 for i in range(layers)])


def olmoe():
    return decoder_model("Olmoe", [("mlp", named("OlmoeSparseMoeBlock", SparseMoe)(D, F)) for _ in range(2)])


def mistral():
    return decoder_model("Mistral", [("mlp", named("MistralMLP", SwiGLU)(D, F)) for _ in range(2)])


# Switch Transformers: encoder.block.{i}.layer.1.mlp, decoder.block.{i}.layer.2.mlp; sparse every 2nd block.
class LayerFF(nn.Module):
    def __init__(self, sparse):
        super().__init__()
        self.layer_norm = RMSNorm(D)
        self.mlp = named("SwitchTransformersSparseMLP", SparseMoe)(D, F) if sparse else \
            named("SwitchTransformersDenseActDense", SwiGLU)(D, F)

    def forward(self, x):
        out = self.mlp(self.layer_norm(x))
        return x + (out[0] if isinstance(out, tuple) else out)


class SelfAttentionLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer_norm, self.SelfAttention = RMSNorm(D), Attention(D)

    def forward(self, x):
        return x + self.SelfAttention(self.layer_norm(x))


class CrossLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer_norm, self.EncDecAttention = RMSNorm(D), nn.Linear(D, D, bias=False)

    def forward(self, x, encoded):
        return x + self.EncDecAttention(self.layer_norm(x)) + encoded.mean(1, keepdim=True)


class SwitchBlock(nn.Module):
    def __init__(self, decoder, sparse):
        super().__init__()
        parts = [SelfAttentionLayer()] + ([CrossLayer()] if decoder else []) + [LayerFF(sparse)]
        self.layer = nn.ModuleList(parts)

    def forward(self, x, encoded=None):
        for part in self.layer:
            x = part(x, encoded) if isinstance(part, CrossLayer) else part(x)
        return x


class SwitchStack(nn.Module):
    def __init__(self, decoder, blocks=4, step=2):
        super().__init__()
        self.block = nn.ModuleList(named("SwitchTransformersBlock", SwitchBlock)(decoder, i % step == 1)
                                   for i in range(blocks))

    def forward(self, x, encoded=None):
        for b in self.block:
            x = b(x, encoded)
        return x


class SwitchModel(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(7)
        self.shared = nn.Embedding(64, D)
        self.encoder = named("SwitchTransformersStack", SwitchStack)(False)
        self.decoder = named("SwitchTransformersStack", SwitchStack)(True)

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None):
        encoded = self.encoder(self.shared(input_ids))
        return self.decoder(self.shared(decoder_input_ids), encoded)


SwitchForConditionalGeneration = named("SwitchTransformersForConditionalGeneration", SwitchModel)


def expected_switch(model, batch):
    """{key: rows}: the sparse blocks' MLP inputs by walking the stacks directly."""
    out = {}
    with torch.no_grad():
        encoded = None
        for stack, ids, mask in (("encoder", batch["input_ids"], batch["attention_mask"]),
                                 ("decoder", batch["decoder_input_ids"], batch["decoder_attention_mask"])):
            x = model.shared(ids)
            for i, block in enumerate(getattr(model, stack).block):
                for part in block.layer:
                    if isinstance(part, LayerFF) and type(part.mlp).__name__ == "SwitchTransformersSparseMLP":
                        key = ("" if stack == "encoder" else "decoder.") + f"layers.{i}.moe_input"
                        out.setdefault(key, []).append(part.layer_norm(x)[mask.bool()])
                    x = part(x, encoded) if isinstance(part, CrossLayer) else part(x)
            encoded = x
    return {k: torch.cat(v) for k, v in out.items()}


def token_batches(count=3, B=2, S=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 64, (B, S), generator=g) for _ in range(count)]


def expected_keys_values(lm, batches, moe_layers):
    rows = {}
    for ids in batches:
        for i, r in expected_decoder_inputs(lm, ids).items():
            rows.setdefault(i, []).append(r)
    return {f"layers.{i}.moe_input": torch.cat(rows[i]) for i in moe_layers}


def same(a, b):
    return set(a) == set(b) and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in b)


def max_difference(a, b):
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in b) if set(a) == set(b) else float("inf")


# ------------------------------------------------------------------------------------------------ checks

def test_families():
    batches = token_batches()
    cases = [
        ("mixtral (model.layers.{i}.block_sparse_moe)", mixtral(), [0, 1, 2], "mixtral"),
        ("mixtral, transformers 5 (model.layers.{i}.mlp)", mixtral("mlp"), [0, 1, 2], "mixtral"),
        ("qwen2_moe, mlp_only_layers=[1] not captured", qwen2_moe(), [0, 2, 3], "qwen2_moe"),
        ("deepseek V3, first_k_dense_replace=1: layer 0 dense", deepseek(3), [1, 2], "deepseek"),
        ("deepseek V2, first_k_dense_replace=2", deepseek(2, first_k_dense_replace=2, layers=4), [2, 3], "deepseek"),
        ("olmoe", olmoe(), [0, 1], "olmoe"),
    ]
    for label, lm, moe_layers, family in cases:
        want = expected_keys_values(lm, batches, moe_layers)
        got = mc.capture(lm, batches)
        check(f"{label}: keys {sorted(want)}", sorted(got) == sorted(want), sorted(got))
        check(f"{label}: values = the direct walk, bit for bit (float32, {len(batches)} batches of 2 x 7)",
              same(got, want), f"max |diff| {max_difference(got, want):.3g}")
        blocks = mc.find_moe_blocks(lm)
        check(f"{label}: find_moe_blocks says family {family}, in layer order",
              all(b.family == family for b in blocks) and [b.layer for b in blocks] == moe_layers,
              [(b.name, b.key) for b in blocks])
        got_named = mc.capture(lm, batches, family=family)
        check(f"{label}: family='{family}' = auto", same(got_named, got))

    # Dense FFNs (the moefy path) only when asked for.
    lm = mistral()
    want = expected_keys_values(lm, batches, [0, 1])
    check("mistral dense FFNs with family='mistral': keys and values", same(mc.capture(lm, batches, family="mistral"),
                                                                             want))
    expect("mistral dense FFNs under family='auto': no MoE block, with the hint",
           ["model: no MoE block found in a MistralForCausalLM", "family='mistral'"], mc.capture, lm, batches)

    # Switch: two stacks; the decoder's keys get the stack prefix; each stack's own padding mask.
    model = SwitchForConditionalGeneration()
    g = torch.Generator().manual_seed(3)
    batch = {"input_ids": torch.randint(0, 64, (2, 6), generator=g),
             "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]]),
             "decoder_input_ids": torch.randint(0, 64, (2, 4), generator=g),
             "decoder_attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])}
    want = expected_switch(model, batch)
    got = mc.capture(model, [batch])
    check("switch_transformers: keys layers.{1,3} and decoder.layers.{1,3} (first stack unprefixed)",
          sorted(got) == ["decoder.layers.1.moe_input", "decoder.layers.3.moe_input", "layers.1.moe_input",
                          "layers.3.moe_input"], sorted(got))
    check("switch_transformers: values = the direct walk; encoder 9 rows, decoder 6 (each stack's mask)",
          same(got, want) and got["layers.1.moe_input"].shape[0] == 9 and got["decoder.layers.3.moe_input"].shape[0] == 6,
          {k: list(v.shape) for k, v in got.items()})
    check("calibration_key: compress's rule", mc.calibration_key("encoder", 1, "encoder") == "layers.1.moe_input" and
          mc.calibration_key("decoder", 3, "encoder") == "decoder.layers.3.moe_input")


def test_options():
    lm = mixtral()
    batches = token_batches(count=4, B=2, S=8)
    want = expected_keys_values(lm, batches, [0, 1, 2])

    # Padding: positions with attention_mask 0 are left out, in order.
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]])
    got = mc.capture(lm, [{"input_ids": batches[0], "attention_mask": mask}])
    direct = expected_decoder_inputs(lm, batches[0], mask)
    check("attention_mask: padded positions left out (13 of 16 rows), values as the walk",
          all(torch.equal(got[f"layers.{i}.moe_input"], direct[i]) for i in range(3)) and
          got["layers.0.moe_input"].shape == (13, D), list(got["layers.0.moe_input"].shape))

    # max_tokens: the first rows; batches after the cap is met are not run.
    pulled = []

    def counting():
        for b in batches:
            pulled.append(1)
            yield b

    got = mc.capture(lm, counting(), max_tokens=20)
    check("max_tokens=20: the first 20 rows of each key; 2 of the 4 batches of 16 tokens run",
          all(torch.equal(got[k], want[k][:20]) for k in want) and len(pulled) == 2,
          f"rows {[v.shape[0] for v in got.values()]}, batches run {len(pulled)}")
    got = mc.capture(lm, batches, max_tokens=10 ** 9)
    check("max_tokens above the total: every row", same(got, want))

    # dtype.
    for name, torch_dtype in (("bfloat16", torch.bfloat16), ("float16", torch.float16), ("float64", torch.float64)):
        got = mc.capture(lm, batches, dtype=name)
        check(f"dtype={name}: the float32 rows converted", same(got, {k: v.to(torch_dtype) for k, v in want.items()}))
    check("dtype=torch.bfloat16 accepted", mc.capture(lm, batches[:1], dtype=torch.bfloat16)["layers.0.moe_input"].dtype
          == torch.bfloat16)

    # Batches as tuples, and forward=.
    got = mc.capture(lm, [(b,) for b in batches])
    check("batches as tuples: model(*batch)", same(got, want))
    calls = []
    got = mc.capture(lm, batches, forward=lambda m, b: calls.append(1) or m(input_ids=b))
    check("forward=(model, batch): used for every batch", same(got, want) and len(calls) == 4)

    # modules=: any architecture.
    blocks = {"layers.7.moe_input": lm.model.layers[1].block_sparse_moe}
    got = mc.capture(lm, batches, modules=blocks)
    check("modules={key: module}: that module only, under that key",
          list(got) == ["layers.7.moe_input"] and torch.equal(got["layers.7.moe_input"], want["layers.1.moe_input"]))

    # windows().
    ids = list(range(64)) * 16 + list(range(6))  # 1030 ids
    ws = list(mc.windows(ids, 128, 4))
    check("windows(1030 ids, 128, 4): [4,128], [4,128], [1,6], in order, nothing dropped",
          [list(w.shape) for w in ws] == [[4, 128], [4, 128], [1, 6]] and
          torch.cat([w.reshape(-1) for w in ws]).tolist() == ids, [list(w.shape) for w in ws])
    check("windows(bytes): byte values", next(mc.windows(b"\x00\xff", 2)).tolist() == [[0, 255]])

    # Hooks removed and the training flag restored, after success and after an error.
    lm.train()
    mc.capture(lm, batches[:1])
    check("after capture: no hook left, training mode restored",
          all(not m._forward_pre_hooks for m in lm.modules()) and lm.training)

    def boom(model, batch):
        model(batch)
        raise RuntimeError("boom")

    try:
        mc.capture(lm, batches, forward=boom)
    except RuntimeError:
        pass
    check("after an error in the forward: no hook left, training mode restored",
          all(not m._forward_pre_hooks for m in lm.modules()) and lm.training)
    was_eval = []
    mc.capture(lm, batches[:1], forward=lambda m, b: was_eval.append(not m.training) or m(b))
    check("the model runs in eval mode under no_grad",
          was_eval == [True] and not mc.capture(lm, batches[:1])["layers.0.moe_input"].requires_grad)


def test_errors():
    lm = mixtral()
    batches = token_batches(count=1)
    expect("no MoE block: a plain module", ["model: no MoE block found in a Sequential", "MixtralSparseMoeBlock"],
           mc.capture, nn.Sequential(nn.Linear(4, 4)), batches)
    expect("no block of the named family", ["model: no MoE block found in a MixtralForCausalLM",
                                            "OlmoeSparseMoeBlock (olmoe)", "family='olmoe'"],
           mc.capture, lm, batches, family="olmoe")
    expect("unknown family", ["family: expected 'auto' or one of", "'mixtral'", "got 'gpt2'"],
           mc.capture, lm, batches, family="gpt2")
    expect("family not a string", ["family: expected", "got None"], mc.capture, lm, batches, family=None)
    expect("empty batches (a list)", "batches: expected at least one batch, got none", mc.capture, lm, [])
    expect("empty batches (a generator)", "batches: expected at least one batch, got none",
           mc.capture, lm, (b for b in []))
    expect("batches not iterable", "batches: expected an iterable of batches, got NoneType", mc.capture, lm, None)
    expect("a batch of another kind", ["batches: each batch must be", "got int"], mc.capture, lm, [3])
    expect("bad dtype (capture)", ["dtype: expected one of 'float32', 'bfloat16', 'float16', 'float64'", "got 'int8'"],
           mc.capture, lm, batches, dtype="int8")
    expect("bad dtype (a torch dtype)", ["dtype: expected one of", "torch.int32"], mc.capture, lm, batches,
           dtype=torch.int32)
    for bad in (0, -3, 1.5, True, "10"):
        expect(f"max_tokens={bad!r}", ["max_tokens: expected None or an integer >= 1", f"got {bad!r}"],
               mc.capture, lm, batches, max_tokens=bad)
    both = mixtral()
    both.model.layers.append(named("OlmoeDecoderLayer", DecoderLayer)(D, "mlp",
                                                                       named("OlmoeSparseMoeBlock", SparseMoe)(D, F)))
    expect("two families at once", ["family: the model holds blocks of several families (mixtral, olmoe)",
                                     "pass family="], mc.capture, both, batches)
    stray = nn.Module()
    stray.moe = named("MixtralSparseMoeBlock", SparseMoe)(D, F)
    expect("a block's class at an unknown path", ["module 'moe' is a MixtralSparseMoeBlock", "layer index is unknown"],
           mc.capture, stray, batches)
    unused = mixtral()
    unused.model.layers[2].block_sparse_moe = named("MixtralSparseMoeBlock", SparseMoe)(D, F)
    unused.model.layers[2].forward = lambda x: x  # a block the forward never calls
    expect("a block the forward never calls", ["the block 'model.layers.2.block_sparse_moe'", "saw no tokens"],
           mc.capture, unused, batches)
    expect("modules= not a dict of modules", "modules: expected a non-empty dict", mc.capture, lm, batches,
           modules={"k": 3})
    expect("a mask that does not match the tokens", "batches: the attention mask's shape [2, 3] does not match",
           mc.capture, lm, [{"input_ids": batches[0], "attention_mask": torch.ones(2, 3)}])
    expect("family='tiny_moe' on a torch module", "family: 'tiny_moe' is the embedded functional model",
           mc.capture, lm, batches, family="tiny_moe")
    expect("windows: seq_len 0", "seq_len: expected an integer >= 1, got 0", lambda: list(mc.windows([1, 2], 0)))
    if "with_kwargs" not in __import__("inspect").signature(nn.Module.register_forward_pre_hook).parameters:
        kw = mixtral()
        kw.model.layers[0].forward = lambda x, layer=kw.model.layers[0]: x + layer.block_sparse_moe(hidden_states=x)[0]
        expect(f"a block called with keywords only, torch {torch.__version__} (no with_kwargs pre-hooks)",
               ["'model.layers.0.block_sparse_moe' was called without positional arguments", "torch >= 2.0"],
               mc.capture, kw, batches)


def test_writer(tmp):
    g = torch.Generator().manual_seed(5)
    t = {"layers.0.moe_input": torch.randn(37, 16, generator=g) * 3,
         "layers.10.moe_input": torch.randn(5, 16, generator=g),
         "layers.2.moe_input": torch.randn(9, 16, generator=g).double()}
    path = os.path.join(tmp, "w.safetensors")
    mc.write_calibration(path, t, metadata={"source": "test"})
    header, metadata, arrays = parse_safetensors(path)
    order = sorted(header, key=lambda n: header[n]["data_offsets"][0])
    check("writer, dtype=None: each tensor's own dtype (F32, F64), values exact",
          {k: v["dtype"] for k, v in header.items()} == {"layers.0.moe_input": "F32", "layers.10.moe_input": "F32",
                                                          "layers.2.moe_input": "F64"} and
          all(np.array_equal(arrays[k], t[k].double().numpy()) for k in t))
    check("writer: the reference layout (decreasing item size, then name), header padded to 8, metadata kept",
          order == ["layers.2.moe_input", "layers.0.moe_input", "layers.10.moe_input"] and metadata == {"source": "test"},
          order)
    for dtype, code, convert in (("float32", "F32", lambda a: a.float().double()),
                                 ("bfloat16", "BF16", lambda a: a.to(torch.bfloat16).double()),
                                 ("float16", "F16", lambda a: torch.from_numpy(a.numpy().astype(np.float16)).double()),
                                 ("float64", "F64", lambda a: a.double())):
        mc.write_calibration(path, t, dtype=dtype)
        header, metadata, arrays = parse_safetensors(path)
        check(f"writer dtype={dtype}: {code}, values round to nearest even as torch/numpy convert, no metadata",
              all(header[k]["dtype"] == code and np.array_equal(arrays[k], convert(t[k]).numpy()) for k in t)
              and metadata == {})
        back, _ = mc.read_calibration(path)
        check(f"read_calibration reads {code} back", all(torch.equal(back[k].double(), convert(t[k])) for k in t))
    mc.write_calibration(path, {"layers.0.moe_input": np.arange(12, dtype=np.float32).reshape(3, 4)})
    check("writer: numpy input", parse_safetensors(path)[2]["layers.0.moe_input"].tolist() ==
          np.arange(12.0).reshape(3, 4).tolist())
    check("writer: no temporary left beside the file", sorted(os.listdir(tmp)) == ["w.safetensors"], os.listdir(tmp))
    before = open(path, "rb").read()
    expect("writer: empty dict", "tensors: expected a non-empty dict of name -> tensor, got an empty dict",
           mc.write_calibration, path, {})
    expect("writer: a 1-D tensor", "tensors['x']: expected a 2-D tensor T x hidden with T >= 1, got shape [4]",
           mc.write_calibration, path, {"x": torch.ones(4)})
    expect("writer: zero rows", "got shape [0, 4]", mc.write_calibration, path, {"x": torch.ones(0, 4)})
    nan = torch.ones(3, 4)
    nan[1, 2] = float("nan")
    expect("writer: NaN", "tensors['x']: element (1, 2) is nan; calibration tokens must be finite",
           mc.write_calibration, path, {"x": nan})
    big = torch.ones(2, 2)
    big[0, 1] = 1e5
    expect("writer: float16 overflow", "tensors['x']: element (0, 1) 100000.0 overflows float16",
           mc.write_calibration, path, {"x": big}, dtype="float16")
    expect("writer: bad dtype", ["dtype: expected one of", "got 'float8'"], mc.write_calibration, path,
           {"x": torch.ones(2, 2)}, dtype="float8")
    expect("writer: an int tensor with dtype=None", "tensors['x'].dtype: expected one of",
           mc.write_calibration, path, {"x": torch.ones(2, 2, dtype=torch.int32)})
    expect("writer: the name __metadata__", "names must be non-empty strings other than '__metadata__'",
           mc.write_calibration, path, {"__metadata__": torch.ones(2, 2)})
    expect("writer: metadata not strings", "metadata: expected a dict of str -> str", mc.write_calibration, path,
           {"x": torch.ones(2, 2)}, metadata={"n": 3})
    check("writer: a refused write leaves the existing file as it was, and no temporary",
          open(path, "rb").read() == before and sorted(os.listdir(tmp)) == ["w.safetensors"])


# ----------------------------------------------------------------------------------- the embedded model

def calibration_text():
    """The text the committed files were captured on: the first 1024 training bytes (train_tiny_moe.py)."""
    sys.path.insert(0, os.path.join(REPO, "models"))
    import tiny_moe
    text = tiny_moe.corpus()
    if hashlib.sha256(text).hexdigest() != "e702fc128a22ec5f42b88d701ba068de1515b336f5af4e0d6e144a3795587db2":
        return None
    return tiny_moe.split(text)[0][:1024]


COMMITTED_SOURCE = "source=train_tiny_moe.py: the first 1024 training bytes, 8 windows of 128"


def openblas_core(env):
    """(OpenBLAS version string, core name) that torch loads under `env`, or None where torch's BLAS is another."""
    code = ("import ctypes, torch\n"
            "paths = sorted({l.split()[-1] for l in open('/proc/self/maps') if 'openblas' in l.lower() and '/' in l})\n"
            "for p in paths:\n"
            "    try:\n"
            "        b = ctypes.CDLL(p); b.openblas_get_corename.restype = ctypes.c_char_p\n"
            "        b.openblas_get_config.restype = ctypes.c_char_p\n"
            "        print(b.openblas_get_config().decode().split()[1], b.openblas_get_corename().decode()); break\n"
            "    except (OSError, AttributeError): pass\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.split()
    return tuple(out) if len(out) == 2 else None


def test_embedded(tmp, tool):
    text = calibration_text()
    if text is None:
        skip("the embedded model against its committed calibration", "/usr/share/common-licenses is not the "
             "corpus the models were trained on (its SHA-256 differs)")
        return
    text_path = os.path.join(tmp, "calibration.txt")
    with open(text_path, "wb") as f:
        f.write(text)
    mc.set_blas_threads(1)
    captured = {}
    for name in ("tiny-moe", "tiny-dense"):
        model_dir = os.path.join(REPO, "models", name)
        committed_path = os.path.join(model_dir, "calibration.safetensors")
        _, committed_meta, committed = parse_safetensors(committed_path)
        committed = {k: torch.from_numpy(v) for k, v in committed.items()}
        model = mc.load_embedded(model_dir)
        got = mc.capture(model, mc.windows(text, 128, 8))
        scale_ok, worst = True, 0.0
        for k, ref in committed.items():
            diff = float((got[k].double() - ref).abs().max()) / float(ref.abs().max())
            worst = max(worst, diff)
            scale_ok &= diff <= 1e-5 and float((got[k].double() - ref).norm() / ref.norm()) <= 1e-5
        bitwise = all(torch.equal(got[k].double(), committed[k]) for k in committed)
        check(f"{name}: capture (8 windows of 128, in process) = the committed calibration within 1e-5 of each "
              f"layer's max |x|", sorted(got) == sorted(committed) and scale_ok and
              all(v.shape == (1024, 128) and v.dtype == torch.float32 for v in got.values()),
              f"max |diff| / max |x| = {worst:.3g}, bit for bit: {bitwise}" + ("" if bitwise else
              " (the float32 GEMM kernels torch's BLAS picks for this CPU sum in another order than the committed "
              "run's)"))
        captured[name] = (got, bitwise)
        one = mc.capture(model, mc.windows(text, 128, 1))
        check(f"{name}: batch size 1 = batch size 8 (bit for bit here; the tolerance above otherwise)",
              max_difference(one, got) <= 1e-5 * max(float(v.abs().max()) for v in got.values()),
              f"bit for bit: {same(one, got)}")
        part = mc.capture(model, mc.windows(text, 128, 8), max_tokens=300, dtype="bfloat16")
        check(f"{name}: max_tokens=300, bfloat16 = the first 300 rows rounded",
              same(part, {k: v[:300].to(torch.bfloat16) for k, v in got.items()}))

        # The CLI under the committed run's OpenBLAS kernels: the committed file byte for byte.
        out = os.path.join(tmp, f"{name}.safetensors")
        env = dict(os.environ, OPENBLAS_CORETYPE="Haswell", PYTHONPATH=os.path.join(REPO, "python"))
        r = subprocess.run([sys.executable, "-m", "moecomp_capture", model_dir, "--text", text_path, "-o", out,
                            "--metadata", COMMITTED_SOURCE], env=env, capture_output=True, text=True)
        check(f"{name}: python3 -m moecomp_capture exits 0 and says what it wrote", r.returncode == 0 and
              json.loads(r.stdout)["tokens"] == 1024, (r.stdout + r.stderr).strip()[-300:])
        if r.returncode != 0:
            continue
        core = openblas_core(env)
        same_file = open(out, "rb").read() == open(committed_path, "rb").read()
        _, meta, written = parse_safetensors(out)
        equal_values = all(np.array_equal(written[k], committed[k].numpy()) for k in committed)
        if core is not None and core[0] == "0.3.21" and core[1] == "Haswell":
            check(f"{name}: the CLI's file = the committed file byte for byte (OpenBLAS {core[0]}, "
                  f"OPENBLAS_CORETYPE=Haswell, 1 thread)", same_file and equal_values and meta == committed_meta,
                  hashlib.sha256(open(out, "rb").read()).hexdigest())
            if same_file:
                captured[name] = ({k: torch.from_numpy(v.astype(np.float32)) for k, v in written.items()}, True)
        else:
            skip(f"{name}: the CLI's file byte for byte", f"torch's BLAS here is {core or 'not OpenBLAS'}, not the "
                 f"OpenBLAS 0.3.21 Haswell kernels of the committed run (bit for bit: {same_file})")
            check(f"{name}: the CLI's file = the committed values within 1e-5", max(
                float(np.abs(written[k] - committed[k].numpy()).max() / np.abs(committed[k].numpy()).max())
                for k in committed) <= 1e-5)

    # The CLI's refusals: exit 2, one error line, nothing written.
    empty = os.path.join(tmp, "empty.txt")
    open(empty, "wb").close()
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    for label, args, fragment in (
            ("an empty text", ["--text", empty, "-o", os.path.join(tmp, "x.safetensors")], "--text: '"),
            ("a bad --dtype", ["--text", text_path, "-o", os.path.join(tmp, "x.safetensors"), "--dtype", "int4"],
             "--dtype: expected one of"),
            ("-o the model's weights", ["--text", text_path, "-o",
                                        os.path.join(REPO, "models", "tiny-moe", "model.safetensors")], "-o: '"),
            ("--seq-len 0", ["--text", text_path, "-o", os.path.join(tmp, "x.safetensors"), "--seq-len", "0"],
             "--seq-len: expected an integer >= 1, got 0"),
            ("a model directory without config.json", [tmp, "--text", text_path, "-o",
                                                       os.path.join(tmp, "x.safetensors")], "model_dir: expected")):
        r = subprocess.run([sys.executable, "-m", "moecomp_capture", *args], env=env, capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        check(f"CLI refuses {label}: exit 2, one error line", r.returncode == 2 and len(lines) == 1 and
              lines[0].startswith("moecomp_capture: error:") and fragment in lines[0] and
              not os.path.exists(os.path.join(tmp, "x.safetensors")), r.stderr.strip())
    model = mc.load_embedded()
    expect("embedded: empty batches", "batches: expected at least one batch, got none", mc.capture, model, [])
    expect("embedded: family='mixtral'", "family: the embedded model is captured as 'auto' or 'tiny_moe'",
           mc.capture, model, [torch.zeros(1, 4, dtype=torch.long)], family="mixtral")
    expect("embedded: a 1-D batch", "batches: each batch of the embedded model must be a B x S tensor",
           mc.capture, model, [torch.zeros(4, dtype=torch.long)])
    expect("load_embedded: not a model directory", "model_dir: expected a directory with config.json",
           mc.load_embedded, tmp)

    # The consumer: `moecomp compress` reads the files (F32 and BF16) as calibration tokens.
    if tool is None:
        skip("moecomp compress reads the captured files", "the moecomp tool is not built (pass its path)")
        return
    ours, bitwise = captured["tiny-moe"]
    mc.write_calibration(os.path.join(tmp, "ours.safetensors"), ours)
    mc.write_calibration(os.path.join(tmp, "ours-bf16.safetensors"),
                         mc.capture(mc.load_embedded(), mc.windows(text, 128, 8), max_tokens=512), dtype="bfloat16")
    reports = {}
    for label, calibration in (("committed", os.path.join(REPO, "models", "tiny-moe", "calibration.safetensors")),
                               ("ours", os.path.join(tmp, "ours.safetensors")),
                               ("ours-bf16", os.path.join(tmp, "ours-bf16.safetensors"))):
        out = os.path.join(tmp, f"compressed-{label}")
        r = subprocess.run([tool, "compress", os.path.join(REPO, "models", "tiny-moe"), "-o", out, "--method", "prune",
                            "--calibration", calibration, "--threads", "1", "--quiet", "--json"],
                           capture_output=True, text=True)
        reports[label] = json.loads(r.stdout) if r.returncode == 0 else None
        check(f"moecomp compress --method prune --calibration {label}: exit 0", r.returncode == 0, r.stderr.strip())
    if all(reports.values()):
        layers = {k: v["layers"] for k, v in reports.items()}
        if bitwise:
            check("moecomp compress: our float32 file (the committed bytes) gives the committed file's scores and "
                  "kept experts on all 4 layers",
                  [(lay["scores"], lay["kept"], lay["calibration_tokens"]) for lay in layers["ours"]] ==
                  [(lay["scores"], lay["kept"], lay["calibration_tokens"]) for lay in layers["committed"]] and
                  len(layers["ours"]) == 4)
        else:  # tokens within 1e-5: a token whose top-2 is a near tie may route elsewhere
            worst = max(abs(a - b) for o, c in zip(layers["ours"], layers["committed"])
                        for a, b in zip(o["scores"], c["scores"]))
            check("moecomp compress: our float32 file (within 1e-5 of the committed) gives the committed file's "
                  "frequency scores within 4/1024 on all 4 layers, 1024 tokens each", worst <= 4 / 1024 and
                  [lay["calibration_tokens"] for lay in layers["ours"]] == [1024] * 4, f"max |diff| {worst}")
        check("moecomp compress: the BF16 file of 512 tokens is read as 512 calibration tokens per layer",
              [lay["calibration_tokens"] for lay in layers["ours-bf16"]] == [512] * 4,
              [lay["calibration_tokens"] for lay in layers["ours-bf16"]])


def main():
    tool = (sys.argv[1] if len(sys.argv) > 1 else "") or os.environ.get("MOECOMP_CLI")
    if tool and not os.access(tool, os.X_OK):
        check(f"the moecomp tool named is executable ({tool})", False, "not built? build moecomp_cli first")
        tool = None
    elif not tool:
        default = os.path.join(REPO, "build", "default", "examples", "cli", "moecomp")
        tool = default if os.access(default, os.X_OK) else None
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="test_capture-") as tmp:
        test_families()
        test_options()
        test_errors()
        os.makedirs(os.path.join(tmp, "writer"))
        test_writer(os.path.join(tmp, "writer"))
        test_embedded(tmp, tool)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
