#!/usr/bin/env python3
"""`moecomp inspect` against an independent reading of the same checkpoints (json, struct and numpy).

* The embedded model (models/tiny-moe, written by Python): --json gives the tensor count and bytes the header
  gives, the Mixtral family, 8 experts, top-2 renormalised, MoE layers 0-3, and the top_k routing rule.
* --tensor NAME -o OUT.npy writes the tensor exactly as numpy decodes it (bf16 -> float32 by a shift;
  --dtype float64), and 3-D tensors as their matrices stacked.
* A 2-shard copy with model.safetensors.index.json written here reads the same; so do small checkpoints in
  Qwen2-MoE and DeepSeek-V3 naming (layers found by their rules, DeepSeek's routing rule), and a family the
  built-in layouts do not know, given as a JSON file in --layouts DIR.
* The dense twin (models/tiny-dense, Mistral naming) is described as dense: its layers, FFN size and activation.
* The text output names the family and the MoE layers; --tensors lists every tensor with dtype and shape.
* Bad input: exit 2, one "moecomp: error:" line naming the problem, no output file.

Usage: test_inspect_python.py PATH/TO/moecomp"""
import json
import os
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

(np,) = require("numpy")

HERE = os.path.dirname(os.path.abspath(__file__))
EMBEDDED = os.path.normpath(os.path.join(HERE, "..", "..", "models", "tiny-moe"))
DENSE = os.path.normpath(os.path.join(HERE, "..", "..", "models", "tiny-dense"))
CODES = {"F32": "<f4", "F64": "<f8", "BF16": "<u2", "F16": "<f2", "I64": "<i8", "I32": "<i4"}


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    header.pop("__metadata__", None)
    return header, 8 + n


def decode(path, name):
    header, start = read_header(path)
    info = header[name]
    b, e = info["data_offsets"]
    with open(path, "rb") as f:
        f.seek(start + b)
        raw = f.read(e - b)
    values = np.frombuffer(raw, dtype=CODES[info["dtype"]]).reshape(info["shape"])
    if info["dtype"] == "BF16":
        values = (values.astype(np.uint32) << 16).view(np.float32)
    return values


def write_safetensors(path, tensors):
    """tensors: name -> (dtype name, array of that dtype's numpy code)."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (dtype, array) in sorted(tensors.items()):
        raw = np.ascontiguousarray(array.astype(CODES[dtype])).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


class Checker(ToolRunner):

    def inspect(self, *args):
        r = self.run("inspect", *args, "--json")
        if r.returncode != 0:
            self.check("inspect " + " ".join(args), False, r.stderr.strip())
            return None
        return json.loads(r.stdout.strip().splitlines()[-1])

    def fields(self, label, summary, **want):
        bad = {k: (summary.get(k), v) for k, v in want.items() if summary is None or summary.get(k) != v}
        self.check(label, summary is not None and not bad, f"{want}" if not bad else f"(got, wanted) {bad}")


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(17)
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(tool, tmp)
        model = os.path.join(EMBEDDED, "model.safetensors")
        header, _ = read_header(model)
        total = sum(e - b for b, e in (t["data_offsets"] for t in header.values()))
        s = c.inspect(EMBEDDED)
        c.fields("embedded model", s, family="mixtral", experts=8, top_k=2, normalize_top_k=True,
                 moe_layers=[0, 1, 2, 3], hidden_size=128, expert_size=256, gated=True, activation="silu",
                 routing_rule="top_k", tensors=len(header), tensor_bytes=total, files=1)

        dense_header, _ = read_header(os.path.join(DENSE, "model.safetensors"))
        c.fields("the dense twin", c.inspect(DENSE), family="mistral", dense_layers=[0, 1, 2, 3], hidden_size=128,
                 ffn_size=1024, gated=True, activation="silu", tensors=len(dense_header))
        r = c.run("inspect", DENSE)
        c.check("the dense twin, as text", r.returncode == 0 and "dense: 4 layers with an FFN of 1024 neurons" in r.stdout,
                r.stdout + r.stderr)

        # One tensor out, exactly as numpy decodes it.
        name = "model.layers.2.block_sparse_moe.experts.5.w3.weight"
        out = c.path("w3.npy")
        r = c.run("inspect", EMBEDDED, "--tensor", name, "-o", out)
        got = np.load(out) if r.returncode == 0 else None
        want = decode(model, name)
        c.check("--tensor bf16 -> float32", got is not None and got.dtype == np.float32 and np.array_equal(got, want),
                f"shape {None if got is None else got.shape}, {r.stderr.strip()}")
        r = c.run("inspect", EMBEDDED, "--tensor", name, "-o", out, "--dtype", "float64")
        got = np.load(out) if r.returncode == 0 else None
        c.check("--tensor --dtype float64", got is not None and got.dtype == np.float64 and np.array_equal(got, want),
                r.stderr.strip())
        norm = "model.norm.weight"
        r = c.run("inspect", EMBEDDED, "--tensor", norm, "-o", out)
        got = np.load(out) if r.returncode == 0 else None
        c.check("--tensor of a 1-D tensor: one row", got is not None and got.shape == (1, 128)
                and np.array_equal(got[0], decode(model, norm)), r.stderr.strip())

        # A 2-shard copy with an index.
        sharded = c.path("sharded")
        os.makedirs(sharded)
        shutil.copy(os.path.join(EMBEDDED, "config.json"), sharded)
        names = sorted(header)
        halves = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
                  "model-00002-of-00002.safetensors": names[len(names) // 2:]}
        weight_map = {}
        for shard, part in halves.items():
            write_safetensors(os.path.join(sharded, shard),
                              {n: (header[n]["dtype"], decode(model, n) if header[n]["dtype"] != "BF16" else
                                   (decode(model, n).view(np.uint32) >> 16).astype(np.uint16)) for n in part})
            weight_map.update({n: shard for n in part})
        with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
        s = c.inspect(sharded)
        c.fields("sharded copy", s, family="mixtral", files=2, tensors=len(header), tensor_bytes=total,
                 moe_layers=[0, 1, 2, 3])
        r = c.run("inspect", sharded, "--tensor", name, "-o", out)
        got = np.load(out) if r.returncode == 0 else None
        c.check("--tensor from a shard", got is not None and np.array_equal(got, want), r.stderr.strip())

        # Qwen2-MoE naming: 4 layers, sparse step 2, layer 3 dense by mlp_only_layers -> layer 1 only.
        qwen = c.path("qwen")
        os.makedirs(qwen)
        E, I, H, S = 4, 3, 8, 6
        t = {"model.layers.1.mlp.gate.weight": ("F32", rng.standard_normal((E, H)))}
        for e in range(E):
            for w, shape in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
                t[f"model.layers.1.mlp.experts.{e}.{w}.weight"] = ("BF16", rng.integers(0, 2**15, shape))
        for w, shape in (("gate_proj", (S, H)), ("up_proj", (S, H)), ("down_proj", (H, S))):
            t[f"model.layers.1.mlp.shared_expert.{w}.weight"] = ("F32", rng.standard_normal(shape))
        t["model.layers.1.mlp.shared_expert_gate.weight"] = ("F32", rng.standard_normal((1, H)))
        write_safetensors(os.path.join(qwen, "model.safetensors"), t)
        with open(os.path.join(qwen, "config.json"), "w") as f:
            json.dump({"model_type": "qwen2_moe", "num_hidden_layers": 4, "num_experts": E, "num_experts_per_tok": 2,
                       "hidden_size": H, "moe_intermediate_size": I, "shared_expert_intermediate_size": S,
                       "decoder_sparse_step": 2, "mlp_only_layers": [3], "norm_topk_prob": False,
                       "hidden_act": "silu"}, f)
        c.fields("qwen2_moe naming", c.inspect(qwen), family="qwen2_moe", moe_layers=[1], experts=E,
                 shared_expert_size=S, normalize_top_k=False, routing_rule="top_k")

        # DeepSeek-V3 naming: the first layer dense, sigmoid scores, the noaux_tc rule.
        deepseek = c.path("deepseek")
        os.makedirs(deepseek)
        E, I, H = 8, 2, 4
        t = {}
        for layer in (1, 2):
            p = f"model.layers.{layer}.mlp."
            t[p + "gate.weight"] = ("F32", rng.standard_normal((E, H)))
            t[p + "gate.e_score_correction_bias"] = ("F32", rng.standard_normal(E))
            for e in range(E):
                for w, shape in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
                    t[f"{p}experts.{e}.{w}.weight"] = ("F32", rng.standard_normal(shape))
        write_safetensors(os.path.join(deepseek, "model.safetensors"), t)
        with open(os.path.join(deepseek, "config.json"), "w") as f:
            json.dump({"model_type": "deepseek_v3", "num_hidden_layers": 3, "n_routed_experts": E,
                       "num_experts_per_tok": 2, "hidden_size": H, "moe_intermediate_size": I,
                       "first_k_dense_replace": 1, "moe_layer_freq": 1, "scoring_func": "sigmoid",
                       "topk_method": "noaux_tc", "n_group": 4, "topk_group": 2, "routed_scaling_factor": 2.5,
                       "norm_topk_prob": True, "hidden_act": "silu"}, f)
        c.fields("deepseek_v3 naming", c.inspect(deepseek), family="deepseek", moe_layers=[1, 2], scoring="sigmoid",
                 topk_method="noaux_tc", routing_rule="deepseek_v3")

        # A new family is a new JSON file: --layouts DIR.
        layouts = c.path("layouts")
        os.makedirs(layouts)
        with open(os.path.join(layouts, "toy.json"), "w") as f:
            json.dump({"family": "toy", "model_types": ["toy_moe"],
                       "config": {"num_experts": "experts", "top_k": "k"},
                       "defaults": {"scoring": "softmax", "normalize_top_k": True, "activation": "relu"},
                       "stacks": [{"name": "blocks", "layers": "blocks", "prefix": "blocks.{layer}.moe."}],
                       "router": {"weight": "router"},
                       "experts": {"gate": "expert{expert}.fc1", "down": "expert{expert}.fc2"}}, f)
        toy = c.path("toy")
        os.makedirs(toy)
        t = {"blocks.0.moe.router": ("F32", rng.standard_normal((3, 5)))}
        for e in range(3):
            t[f"blocks.0.moe.expert{e}.fc1"] = ("F16", rng.standard_normal((7, 5)))
            t[f"blocks.0.moe.expert{e}.fc2"] = ("F16", rng.standard_normal((5, 7)))
        write_safetensors(os.path.join(toy, "model.safetensors"), t)
        with open(os.path.join(toy, "config.json"), "w") as f:
            json.dump({"model_type": "toy_moe", "blocks": 1, "experts": 3, "k": 1}, f)
        c.fields("a family from --layouts", c.inspect(toy, "--layouts", layouts), family="toy", experts=3, top_k=1,
                 gated=False, activation="relu", hidden_size=5, expert_size=7, moe_layers=[0])

        # Text output.
        r = c.run("inspect", EMBEDDED, "--tensors")
        lines = r.stdout.splitlines()
        c.check("text output", r.returncode == 0 and any(l.startswith("model: mixtral") for l in lines)
                and "MoE layers: decoder: 0 1 2 3" in lines
                and f"  {name}  BF16  (256, 128)" in lines and len(lines) == 3 + len(header), r.stdout[:300])
        r = c.run("inspect", model)
        c.check("a file: the config.json beside it is used", r.returncode == 0 and "model: mixtral" in r.stdout, r.stdout)

        # Bad input.
        bad = c.path("bad")
        os.makedirs(bad)
        with open(os.path.join(bad, "model.safetensors"), "wb") as f:
            f.write(open(model, "rb").read()[:1000])
        c.expect_error("missing path", ["inspect", c.path("nothing"), "--tensor", name], "nothing")
        c.expect_error("truncated file", ["inspect", bad, "--tensor", name], "is not a valid safetensors file")
        shutil.copy(os.path.join(EMBEDDED, "model.safetensors"), os.path.join(bad, "model.safetensors"))
        with open(os.path.join(bad, "config.json"), "w") as f:
            json.dump({"model_type": "jamba"}, f)
        c.expect_error("unknown architecture", ["inspect", bad, "--tensor", name],
                       "unknown architecture", "model_type 'jamba'")
        with open(os.path.join(bad, "config.json"), "w") as f:
            json.dump({"model_type": "mixtral", "num_hidden_layers": 4, "num_experts_per_tok": 2}, f)
        c.expect_error("config lacks a key", ["inspect", bad, "--tensor", name], "lacks \"num_local_experts\"")
        c.expect_error("unknown tensor", ["inspect", EMBEDDED, "--tensor", "no.such"],
                       "option --tensor must name a tensor", "no.such")
        c.expect_error("-o without --tensor", ["inspect", EMBEDDED], "--tensor NAME and -o OUT.npy go together")
        c.expect_error("bad --layouts", ["inspect", EMBEDDED, "--tensor", name, "--layouts", c.path("nothing")],
                       "is not a directory")

        print(f"{c.checks} checks, {c.failures} failures")
        sys.exit(1 if c.failures else 0)


if __name__ == "__main__":
    main()
