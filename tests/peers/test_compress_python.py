#!/usr/bin/env python3
"""`moecomp compress` end to end on the embedded model (models/tiny-moe), against an independent reading of its
input and output (json, struct and numpy) and the library-level `moecomp merge`.

For each method and option set:
* exit 0; OUT_DIR holds config.json, the shards and their index, compression_report.json, and the model
  directory's other files; every shard parses, the index names every tensor once, each tensor's bytes are
  shape x dtype.
* config.json: num_local_experts is N for cka-merge and prune, 8 for hc-smoe, num_experts_per_tok unchanged,
  and a moecomp_compression record (hc-smoe: the id maps of the report).
* Every tensor outside the MoE layers is byte for byte the input's.
* hc-smoe and cka-merge: each written expert equals, after rounding to bfloat16, the output of `moecomp merge`
  (the library's merge_experts) run on that layer's weights with the report's groups and dominants, the
  layer's calibration tokens and its router; cka-merge's router rows too. hc-smoe --expert-storage duplicated
  writes the merged expert of each member into the member's slot and keeps the router.
* hc-smoe's expert storage (issue 34): the default (distinct) and --expert-storage duplicated of the same
  compression: the distinct form holds experts 0 .. S-1 and an I64 `gate.expert_map` per layer (the report's
  id map, onto 0 .. S-1); each duplicated slot r is byte for byte distinct expert map[r]; every other tensor is
  byte-identical; the tensor bytes differ by exactly 4 x (8 - S) x 3 x 256 x 128 x 2 - 4 x 64; each layer's
  bytes_written is the bytes of its tensors in the files; the report, config.json and `moecomp inspect --json`
  say which form; evaluate.py's expand_expert_maps turns the distinct tensors into the duplicated ones (torch,
  when importable). The option with another method, a bad value and a distinct checkpoint as input exit 2.
* prune: the kept experts are the N largest scores, ties to the lowest index; with --criterion frequency
  the scores are numpy's top-2 counts of the router's logits over 2T; the kept experts' tensors are the input's
  bytes, the router rows are the kept rows.
* Each layer's reported output error is numpy's (float64 MoE forward of the input layer and of the written
  layer on the calibration tokens: softmax, top-2 renormalised, SwiGLU experts), within 2e-4 relative.
* resmoe: the checkpoint holds the router as it was, the base expert, the permutations and one residual file
  per expert matrix (U8 tensors); dense/ (--restore-dense) holds, after rounding to bfloat16, exactly what
  `moecomp residual-decode` (the library's restore) gives from them; ResMoE's approximation error is numpy's.
* moefy (on models/tiny-dense, the default MODEL_DIR for it): every tensor but the FFNs is the input's bytes;
  each FFN's gate and up rows and down columns are the input's bytes permuted by the stored permutation; the
  permutation, router and expert tensors equal `moecomp split-ffn` (the library's moefication_split) on that
  layer's weights; each expert is 32 neurons in increasing original index; the router rows are numpy's centres
  of the experts' normalised gate rows (to bfloat16); the reported error is numpy's top-k forward, and with
  --top-k E it is 0 up to rounding; the FLOPs model is the closed form.
* The checkpoint is the same bytes with and without the huge-page restart (MOECOMP_HUGEPAGES=0).
* Without calibration tokens hc-smoe runs from weights and reports no error.
* An interrupted run (SIGINT while layer 2 runs: ended by the signal) and a run failing at layer 4 (calibration without
  layers.3.moe_input) leave no OUT_DIR and no temporary directory.
* prune --criterion reap --matmul bf16: the scores move within 1e-2 of the exact ones, not zero, the same kept experts.
* Bad input: exit 2, one "moecomp: error:" line naming the problem, no OUT_DIR (--matmul fp16 among them).

Usage: test_compress_python.py PATH/TO/moecomp"""
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

(np,) = require("numpy")

HERE = os.path.dirname(os.path.abspath(__file__))
EMBEDDED = os.path.normpath(os.path.join(HERE, "..", "..", "models", "tiny-moe"))
DENSE = os.path.normpath(os.path.join(HERE, "..", "..", "models", "tiny-dense"))
CODES = {"F32": "<f4", "F64": "<f8", "BF16": "<u2", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1"}
SIZES = {"F32": 4, "F64": 8, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "U8": 1}
PREFIX = "model.layers.{}.block_sparse_moe."


def read_file(path):
    """name -> (dtype, shape, raw bytes) of one safetensors file, checking the layout as it goes."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    out, end = {}, 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, e = info["data_offsets"]
        assert b == end, f"{path}: {name} is not contiguous"
        assert e - b == int(np.prod(info["shape"], dtype=np.int64)) * SIZES[info["dtype"]], f"{path}: {name} size"
        out[name] = (info["dtype"], tuple(info["shape"]), data[8 + n + b:8 + n + e])
        end = e
    assert 8 + n + end == len(data), f"{path}: trailing bytes"
    return out


def read_checkpoint(directory):
    index = os.path.join(directory, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_file(os.path.join(directory, "model.safetensors"))
    weight_map = json.load(open(index))["weight_map"]
    tensors = {}
    for shard in sorted(set(weight_map.values())):
        for name, t in read_file(os.path.join(directory, shard)).items():
            assert weight_map.get(name) == shard and name not in tensors, f"index disagrees on {name}"
            tensors[name] = t
    assert set(tensors) == set(weight_map), "index names a missing tensor"
    return tensors


def decode(t):
    dtype, shape, raw = t
    v = np.frombuffer(raw, dtype=CODES[dtype]).reshape(shape)
    if dtype == "BF16":
        v = (v.astype(np.uint32) << 16).view(np.float32)
    return v.astype(np.float64)


def bf16_round(a):
    """float32 -> bfloat16 (round to nearest even) -> float64, as moecomp rounds."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def calibration(directory=EMBEDDED):
    return {k: decode(v) for k, v in read_file(os.path.join(directory, "calibration.safetensors")).items()}


def experts_of(tensors, layer, count):
    p = PREFIX.format(layer)
    return [tuple(decode(tensors[f"{p}experts.{e}.{w}.weight"]) for w in ("w1", "w3", "w2")) for e in range(count)]


def silu(v):
    return v / (1.0 + np.exp(-v))


def moe_forward(x, router, experts, top_k=2):
    """Mixtral's sparse MoE block in float64: softmax, top-k (ties to the lowest index), renormalised."""
    logits = x @ router.T
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    idx = np.argsort(-p, axis=1, kind="stable")[:, :top_k]
    w = np.take_along_axis(p, idx, axis=1)
    w /= w.sum(axis=1, keepdims=True)
    outputs = np.stack([(silu(x @ w1.T) * (x @ w3.T)) @ w2.T for w1, w3, w2 in experts])
    y = np.zeros_like(x)
    for k in range(top_k):
        y += w[:, k:k + 1] * outputs[idx[:, k], np.arange(x.shape[0])]
    return y


class Checker(ToolRunner):

    def __init__(self, tool, tmp):
        super().__init__(tool, tmp)
        self.original = read_checkpoint(EMBEDDED)
        self.config = json.load(open(os.path.join(EMBEDDED, "config.json")))
        self.calibration = calibration()

    def compress(self, label, out, *args):
        if os.path.exists(out):
            shutil.rmtree(out)
        r = self.run("compress", "-o", out, "--quiet", *args)
        self.check(f"{label}: exit 0, table on stdout", r.returncode == 0 and "total:" in r.stdout,
                   r.stderr.strip() or r.stdout.strip().splitlines()[-1])
        if r.returncode != 0:
            return None
        files = sorted(os.listdir(out))
        want = {"config.json", "compression_report.json", "model.safetensors.index.json", "train_log.json"}
        self.check(f"{label}: the output's files", want <= set(files) and
                   sum(f.endswith(".safetensors") for f in files) == 5, str(files))
        return json.load(open(os.path.join(out, "compression_report.json")))

    def common(self, label, out, report, experts_in_config):
        written = read_checkpoint(out)
        config = json.load(open(os.path.join(out, "config.json")))
        self.check(f"{label}: config keys", config["num_local_experts"] == experts_in_config and
                   config["num_experts_per_tok"] == 2 and config["moecomp_compression"]["method"] == report["method"],
                   f"num_local_experts {config['num_local_experts']}")
        moe = [n for n in self.original if ".block_sparse_moe." in n]
        same = all(written[n] == self.original[n] for n in self.original if n not in moe)
        self.check(f"{label}: non-MoE tensors byte for byte", same, f"{len(self.original) - len(moe)} tensors")
        names = {n for n in written if ".block_sparse_moe." in n}
        want = {f"{PREFIX.format(i)}gate.weight" for i in range(4)} | {
            f"{PREFIX.format(i)}experts.{e}.{w}.weight" for i in range(4) for e in range(experts_in_config)
            for w in ("w1", "w2", "w3")}
        self.check(f"{label}: MoE tensor names and shapes", names == want and all(
            written[f"{PREFIX.format(i)}gate.weight"][1] == (experts_in_config, 128) for i in range(4)),
            f"{len(names)} MoE tensors")
        # The reported errors against numpy's forward of the input and the written layers.
        worst = 0.0
        for i, layer in enumerate(report["layers"]):
            x = self.calibration[f"layers.{i}.moe_input"]
            router_in = decode(self.original[f"{PREFIX.format(i)}gate.weight"])
            y = moe_forward(x, router_in, experts_of(self.original, i, 8))
            z = moe_forward(x, decode(written[f"{PREFIX.format(i)}gate.weight"]), experts_of(written, i, experts_in_config))
            error = np.linalg.norm(y - z) / np.linalg.norm(y)
            worst = max(worst, abs(error - layer["output_relative_error"]) / max(error, 1e-12))
        self.check(f"{label}: the reported errors are numpy's", worst <= 2e-4, f"worst relative difference {worst:.2e}")
        return written

    def library_merge(self, label, layer, groups, dominants, method, router_rule=None):
        """`moecomp merge` on one layer of the input: the library's merge_experts with the same data."""
        folder = self.path(f"merge-{label}-{layer}".replace(" ", "_"))
        os.makedirs(folder, exist_ok=True)
        experts = experts_of(self.original, layer, 8)
        for k, w in enumerate(("w1", "w3", "w2")):
            np.save(os.path.join(folder, f"{w}.npy"), np.stack([e[k] for e in experts]).astype(np.float32))
        labels = np.zeros(8, dtype=np.int64)
        for g, members in enumerate(groups):
            labels[members] = g
        np.save(os.path.join(folder, "groups.npy"), labels)
        np.save(os.path.join(folder, "dominants.npy"), np.array(dominants, dtype=np.int64))
        np.save(os.path.join(folder, "x.npy"), self.calibration[f"layers.{layer}.moe_input"].astype(np.float32))
        np.save(os.path.join(folder, "router.npy"),
                decode(self.original[f"{PREFIX.format(layer)}gate.weight"]).astype(np.float32))
        out = os.path.join(folder, "out")
        args = ["merge", "--w1", f"{folder}/w1.npy", "--w2", f"{folder}/w2.npy", "--w3", f"{folder}/w3.npy",
                "--groups", f"{folder}/groups.npy", "--method", method, "--inputs", f"{folder}/x.npy",
                "--router", f"{folder}/router.npy", "--dominants", f"{folder}/dominants.npy", "--no-errors", "-o", out]
        if router_rule:
            args += ["--router-rule", router_rule]
        r = self.run(*args)
        assert r.returncode == 0, r.stderr
        return {n: np.load(os.path.join(out, f"{n}.npy")) for n in ("w1", "w3", "w2", "map")} | (
            {"router": np.load(os.path.join(out, "router.npy"))} if os.path.exists(os.path.join(out, "router.npy")) else {})

    def merged_match(self, label, written, report, method, slots_from_map):
        mismatches = 0
        for i, layer in enumerate(report["layers"]):
            lib = self.library_merge(label, i, layer["groups"], layer["dominants"], method)
            count = 8 if slots_from_map else len(layer["groups"])
            for slot in range(count):
                g = int(lib["map"][slot]) if slots_from_map else slot
                for k, w in enumerate(("w1", "w3", "w2")):
                    got = decode(written[f"{PREFIX.format(i)}experts.{slot}.{w}.weight"])
                    mismatches += int(not np.array_equal(got, bf16_round(lib[w][g])))
            router = decode(written[f"{PREFIX.format(i)}gate.weight"])
            if slots_from_map:
                mismatches += int(not np.array_equal(router, decode(self.original[f"{PREFIX.format(i)}gate.weight"])))
                mismatches += int(layer["id_map"] != [int(v) for v in lib["map"]])
            else:
                mismatches += int(not np.array_equal(router, bf16_round(lib["router"])))
        self.check(f"{label}: the written experts are the library's merge", mismatches == 0,
                   f"{mismatches} tensors differ from `moecomp merge`")


def tensor_bytes(directory):
    """The tensor data bytes of a checkpoint directory's *.safetensors files (headers left out)."""
    return sum(len(t[2]) for t in read_checkpoint(directory).values())


def expert_storage(c):
    """hc-smoe 8 -> 4 written distinct (the default) and duplicated, read independently and compared."""
    d, u = c.path("distinct"), c.path("duplicated")
    rd = c.compress("hc-smoe (distinct, the default)", d, "--method", "hc-smoe")
    ru = c.compress("hc-smoe --expert-storage duplicated", u, "--method", "hc-smoe", "--expert-storage", "duplicated")
    if not rd or not ru:
        return
    wd, wu = read_checkpoint(d), read_checkpoint(u)
    cd, cu = (json.load(open(os.path.join(x, "config.json"))) for x in (d, u))
    moe = lambda names: {n for n in names if ".block_sparse_moe." in n}  # noqa: E731
    c.check("distinct and duplicated: the same compression (groups, id maps, errors)",
            [(l["groups"], l["id_map"], l["output_relative_error"]) for l in rd["layers"]] ==
            [(l["groups"], l["id_map"], l["output_relative_error"]) for l in ru["layers"]], "per layer")
    c.check("distinct and duplicated: every tensor outside the MoE experts byte-identical (routers included)",
            all(wd[n] == wu[n] for n in wu if ".experts." not in n) and
            set(wd) - moe(wd) == set(wu) - moe(wu), f"{len(set(wu) - moe(wu))} non-MoE tensors")
    bad, stored = [], []
    for i, layer in enumerate(rd["layers"]):
        p = PREFIX.format(i)
        m = wd.get(p + "gate.expert_map")
        ids = [int(v) for v in np.frombuffer(m[2], "<i8")] if m and m[0] == "I64" and m[1] == (8,) else None
        S = max(ids) + 1 if ids else 0
        stored.append(S)
        want = {p + "gate.weight", p + "gate.expert_map"} | {f"{p}experts.{s}.{w}.weight" for s in range(S)
                                                              for w in ("w1", "w3", "w2")}
        if ids is None or ids != layer["id_map"] or sorted(set(ids)) != list(range(S)) or \
                {n for n in wd if n.startswith(p)} != want:
            bad.append((i, "map or names", ids))
            continue
        for r in range(8):  # the duplicated slot r is the distinct expert map[r], byte for byte
            for w in ("w1", "w3", "w2"):
                if wu[f"{p}experts.{r}.{w}.weight"] != wd[f"{p}experts.{ids[r]}.{w}.weight"]:
                    bad.append((i, r, w))
        on_disk = sum(len(t[2]) for n, t in wd.items() if n.startswith(p))
        if layer["bytes_written"] != on_disk or layer["stored_experts"] != S or \
                layer["expert_map_tensor"] != p + "gate.expert_map" or layer["bytes_after"] != on_disk - 64:
            bad.append((i, "bytes", layer["bytes_written"], on_disk))
        if ru["layers"][i]["bytes_written"] != sum(len(t[2]) for n, t in wu.items() if n.startswith(p)) or \
                ru["layers"][i]["stored_experts"] != 8:
            bad.append((i, "duplicated bytes"))
    c.check("distinct: experts 0 .. S-1 and the I64 id map per layer; each duplicated slot is its mapped distinct "
            "expert; bytes_written = the layer's tensor bytes on disk", not bad, f"stored {stored}; {bad[:2]}")
    saved = sum((8 - s) * 3 * 256 * 128 * 2 for s in stored) - 4 * 64
    bd, bu = tensor_bytes(d), tensor_bytes(u)
    files = lambda x: sum(os.path.getsize(os.path.join(x, f)) for f in os.listdir(x) if f.endswith(".safetensors"))  # noqa: E731
    c.check("distinct: smaller by (8 - S) experts a layer less the maps' bytes; totals.bytes_written",
            bu - bd == saved and rd["totals"]["bytes_written"] == sum(l["bytes_written"] for l in rd["layers"]) and
            ru["totals"]["bytes_written"] - rd["totals"]["bytes_written"] == saved,
            f"tensor bytes {bu} -> {bd} ({bu - bd} saved, expected {saved}); files on disk {files(u)} -> {files(d)}")
    c.check("the report, config.json and the option record say which form was written",
            rd["expert_storage"] == rd["options"]["expert_storage"] == "distinct" and
            ru["expert_storage"] == ru["options"]["expert_storage"] == "duplicated" and
            cd["moecomp_compression"]["expert_storage"] == "distinct" and
            cu["moecomp_compression"]["expert_storage"] == "duplicated" and
            cd["num_local_experts"] == cu["num_local_experts"] == 8, str(cd["moecomp_compression"].get("expert_storage")))
    r = c.run("inspect", d, "--json")
    info = json.loads(r.stdout) if r.returncode == 0 else {}
    ru_info = json.loads(c.run("inspect", u, "--json").stdout or "{}")
    c.check("moecomp inspect: the distinct form's stored experts and id maps; the duplicated one's 8 per id",
            info.get("expert_storage") == "distinct" and info.get("stored_experts") == stored and
            info.get("expert_maps") == [v for l in rd["layers"] for v in l["id_map"]] and
            ru_info.get("expert_storage") == "per_router_id" and ru_info.get("stored_experts") == [8] * 4 and
            "expert_maps" not in ru_info, r.stderr.strip() or str(info.get("stored_experts")))
    text = c.run("inspect", d).stdout
    c.check("moecomp inspect (text): one line per layer with the id map",
            text.count("experts stored distinct: layer ") == 4 and
            f"id map ({PREFIX.format(0)}gate.expert_map) [{' '.join(map(str, rd['layers'][0]['id_map']))}]" in text,
            text.strip().splitlines()[-1] if text.strip() else "")
    c.expect_directory_error("a distinct checkpoint as compress's input", ["compress", d, "--method", "hc-smoe"],
                             "stores its experts distinct", "gate.expert_map", "--expert-storage duplicated")
    try:
        import torch  # noqa: F401
    except ImportError:
        print("note: torch is not importable: evaluate.py's reading of the distinct form is not checked here")
        return
    sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
    import evaluate
    import tiny_moe
    (ed, _), (eu, _) = tiny_moe.load(d), tiny_moe.load(u)
    evaluate.expand_expert_maps(ed)
    c.check("evaluate.py: expand_expert_maps gives the duplicated form's tensors exactly (so its perplexity)",
            sorted(ed) == sorted(eu) and all(torch.equal(ed[k], eu[k]) for k in eu), f"{len(eu)} tensors")


def main():
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(tool, tmp)
        out = c.path("out")

        for merge in ("frequency", "fix-dom", "average"):
            label = f"hc-smoe --merge {merge} --expert-storage duplicated"
            report = c.compress(label, out, "--method", "hc-smoe", "--merge", merge, "--expert-storage", "duplicated")
            if report:
                written = c.common(label, out, report, 8)
                c.merged_match(label, written, report, merge, slots_from_map=True)
                config = json.load(open(os.path.join(out, "config.json")))
                c.check(f"{label}: id maps in config.json", config["moecomp_compression"]["id_maps"] == {
                    l["layer"]: l["id_map"] for l in report["layers"]}, "as the report")

        expert_storage(c)

        for merge in ("uniform", "dominant", "learned"):
            label = f"cka-merge --merge {merge}"
            report = c.compress(label, out, "--method", "cka-merge", "--merge", merge, "--experts", "5")
            if report:
                written = c.common(label, out, report, 5)
                c.merged_match(label, written, report, merge, slots_from_map=False)

        for criterion in ("frequency", "reap"):
            label = f"prune --criterion {criterion}"
            report = c.compress(label, out, "--method", "prune", "--criterion", criterion, "--experts", "3")
            if not report:
                continue
            written = c.common(label, out, report, 3)
            bad = 0
            for i, layer in enumerate(report["layers"]):
                scores = np.array(layer["scores"])
                order = sorted(range(8), key=lambda e: (-scores[e], e))[:3]
                bad += int(layer["kept"] != sorted(order))
                if criterion == "frequency":
                    x = c.calibration[f"layers.{i}.moe_input"]
                    logits = x @ decode(c.original[f"{PREFIX.format(i)}gate.weight"]).T
                    top = np.argsort(-logits, axis=1, kind="stable")[:, :2]
                    counts = np.bincount(top.ravel(), minlength=8) / top.size
                    bad += int(not np.allclose(scores, counts, rtol=0, atol=1e-12))
                for slot, e in enumerate(layer["kept"]):
                    for w in ("w1", "w2", "w3"):
                        bad += int(written[f"{PREFIX.format(i)}experts.{slot}.{w}.weight"] !=
                                   c.original[f"{PREFIX.format(i)}experts.{e}.{w}.weight"])
                router = decode(written[f"{PREFIX.format(i)}gate.weight"])
                bad += int(not np.array_equal(router, decode(c.original[f"{PREFIX.format(i)}gate.weight"])[layer["kept"]]))
            c.check(f"{label}: kept experts, scores, bytes and router rows", bad == 0, f"{bad} differences")
            if criterion == "reap":
                # --matmul bf16: the calibration forwards (REAP's expert outputs, the layer error) run as bfloat16 dot
                # products on tokens rounded to bfloat16 (docs/core.md, "Matmul precision"): the scores move, by the
                # tokens' rounding, within 1e-2 of the exact ones; on this model the kept experts are the same.
                exact = report
                fast = c.compress(f"{label} --matmul bf16", out, "--method", "prune", "--criterion", criterion,
                                  "--experts", "3", "--matmul", "bf16")
                if fast:
                    pairs = [(np.array(a["scores"]), np.array(b["scores"])) for a, b in zip(exact["layers"], fast["layers"])]
                    moved = max(float(np.max(np.abs(a - b) / np.abs(a))) for a, b in pairs)
                    c.check(f"{label} --matmul bf16: scores within 1e-2 of exact's and not equal, the same kept experts, "
                            "the report's options.matmul",
                            0 < moved <= 1e-2 and [l["kept"] for l in exact["layers"]] == [l["kept"] for l in fast["layers"]]
                            and exact["options"]["matmul"] == "exact" and fast["options"]["matmul"] == "bf16",
                            f"largest relative change {moved:.2e}")

        # resmoe: the base, the permutations and the residual files in the checkpoint; the restored experts in
        # dense/ are the library's restore (`moecomp residual-decode`) of those, rounded to bf16.
        report = c.compress("resmoe --restore-dense", out, "--method", "resmoe", "--restore-dense")
        if report:
            dense = c.common("resmoe --restore-dense (dense/)", os.path.join(out, "dense"), report, 8)
            stored = read_checkpoint(out)
            moe_names = {n for n in stored if ".block_sparse_moe." in n}
            want = {f"{PREFIX.format(i)}gate.weight" for i in range(4)} | {
                f"{PREFIX.format(i)}resmoe.{k}" for i in range(4)
                for k in ("base.w1.weight", "base.w3.weight", "base.w2.weight", "permutations")} | {
                f"{PREFIX.format(i)}resmoe.experts.{e}.{w}.residual" for i in range(4) for e in range(8)
                for w in ("w1", "w3", "w2")}
            c.check("resmoe: the stored tensors", moe_names == want and all(
                stored[f"{PREFIX.format(i)}gate.weight"] == c.original[f"{PREFIX.format(i)}gate.weight"] for i in range(4)),
                f"{len(moe_names)} MoE tensors, router as the input's")
            bad, worst = 0, 0.0
            folder = c.path("resmoe-decode")
            os.makedirs(folder, exist_ok=True)
            for i, layer in enumerate(report["layers"]):
                p = f"{PREFIX.format(i)}resmoe."
                perms = np.frombuffer(stored[p + "permutations"][2], dtype="<i4").reshape(8, 256)
                restored_base = {}
                squared = []
                for e in range(8):
                    np.save(os.path.join(folder, "p.npy"), perms[e].astype(np.int64))
                    for w in ("w1", "w3", "w2"):
                        np.save(os.path.join(folder, "base.npy"), decode(stored[p + f"base.{w}.weight"]).astype(np.float32))
                        with open(os.path.join(folder, "r.bin"), "wb") as f:
                            f.write(stored[p + f"experts.{e}.{w}.residual"][2])
                        args = ["residual-decode", f"{folder}/base.npy", f"{folder}/r.bin", "-o", f"{folder}/out.npy"]
                        r = c.run(*(args + (["--permutation", f"{folder}/p.npy"] if w != "w2" else [])))
                        assert r.returncode == 0, r.stderr
                        decoded = np.load(f"{folder}/out.npy")
                        restored_base[w] = decoded if w == "w2" else decoded[np.argsort(perms[e])]  # base order
                        if w == "w2":
                            decoded = decoded[:, perms[e]]  # neurons are W2's columns: column i = base column p(i)
                        got = decode(dense[f"{PREFIX.format(i)}experts.{e}.{w}.weight"])
                        bad += int(not np.array_equal(got, bf16_round(decoded)))
                    # ResMoE's approximation error: || design_e - (B + R) in the base's order ||^2.
                    design = np.concatenate([decode(c.original[f"{PREFIX.format(i)}experts.{e}.{w}.weight"])
                                             for w in ("w1", "w3")] +
                                            [decode(c.original[f"{PREFIX.format(i)}experts.{e}.w2.weight"]).T], axis=1)
                    approx = np.concatenate([restored_base["w1"], restored_base["w3"], restored_base["w2"].T], axis=1)
                    squared.append(float(((design - approx[perms[e]].astype(np.float64)) ** 2).sum()))
                error = np.mean(squared) / 256
                worst = max(worst, abs(error - layer["resmoe_approximation_error"]) / error)
            c.check("resmoe: dense/ holds the library's restore of the stored base and residuals", bad == 0,
                    f"{bad} of 96 tensors differ")
            c.check("resmoe: ResMoE's approximation error is numpy's", worst <= 1e-3, f"worst relative difference {worst:.1e}")
            c.check("resmoe: about a quarter of the residual entries kept, bf16 values",
                    report["options"]["keep"] == 0.25 and report["options"]["values"] == "bf16" and
                    report["totals"]["bits_per_weight"] < 8, f"{report['totals']['bits_per_weight']:.2f} bits per weight")
        report = c.compress("resmoe without --restore-dense", out, "--method", "resmoe", "--keep", "0.5")
        if report:
            c.check("resmoe without --restore-dense: no dense/", not os.path.exists(os.path.join(out, "dense")) and
                    report["options"]["keep"] == 0.5, str(report["options"]))

        # moefy: the dense twin split into experts of 32 neurons, top-8 of 32 (the defaults).
        dense = read_checkpoint(DENSE)
        dense_calibration = calibration(DENSE)
        report = c.compress("moefy", out, "--method", "moefy")
        if report:
            written = read_checkpoint(out)
            config = json.load(open(os.path.join(out, "config.json")))
            record = config.get("moecomp_moefy", {})
            c.check("moefy: config keys", record.get("num_experts") == 32 and record.get("expert_size") == 32 and
                    record.get("top_k") == 8 and record.get("router") == "moefy.router.weight" and
                    config["model_type"] == "mistral" and config["intermediate_size"] == 1024, str(record))
            mlp = "model.layers.{}.mlp."
            ffn = {mlp.format(i) + f"{w}_proj.weight" for i in range(4) for w in ("gate", "up", "down")}
            c.check("moefy: the other tensors byte for byte", all(written[n] == dense[n] for n in dense if n not in ffn),
                    f"{len(dense) - len(ffn)} tensors")
            c.check("moefy: the tensor names", set(written) == set(dense) | {
                mlp.format(i) + t for i in range(4) for t in ("moefy.router.weight", "moefy.permutation")},
                str(sorted(set(written) - set(dense))))
            bad, worst, worst_dense, split_bad = 0, 0.0, 0.0, 0
            for i, layer in enumerate(report["layers"]):
                p = mlp.format(i)
                perm = decode(written[p + "moefy.permutation"]).astype(np.int64)
                gate_in, up_in, down_in = (decode(dense[p + f"{w}_proj.weight"]) for w in ("gate", "up", "down"))
                gate, up, down = (decode(written[p + f"{w}_proj.weight"]) for w in ("gate", "up", "down"))
                router = decode(written[p + "moefy.router.weight"])
                experts = perm.reshape(32, 32)
                bad += int(sorted(perm.tolist()) != list(range(1024)))
                bad += int(not all((np.diff(e) > 0).all() for e in experts))
                bad += int(not (np.array_equal(gate, gate_in[perm]) and np.array_equal(up, up_in[perm]) and
                                np.array_equal(down, down_in[:, perm])))
                # The router: each expert's centre of normalised gate rows, rounded to bfloat16.
                unit = gate_in / np.linalg.norm(gate_in, axis=1, keepdims=True)
                centres = np.stack([unit[e].mean(axis=0) for e in experts])
                bad += int(np.abs(router - bf16_round(centres)).max() > 2 * 2.0 ** -8 * np.abs(centres).max())
                # The library-level split on the same weights.
                weights_dir = c.path(f"moefy-weights-{i}")
                os.makedirs(weights_dir, exist_ok=True)
                for name, m in (("w1", gate_in), ("w3", up_in), ("w2", down_in)):
                    np.save(os.path.join(weights_dir, name + ".npy"), m.astype(np.float32))
                split = c.path(f"moefy-split-{i}")
                r = c.run("split-ffn", "--w1", os.path.join(weights_dir, "w1.npy"), "--w2",
                          os.path.join(weights_dir, "w2.npy"), "--w3", os.path.join(weights_dir, "w3.npy"),
                          "--experts", "32", "-o", split)
                if r.returncode != 0:
                    split_bad += 1
                else:
                    split_bad += int(not np.array_equal(np.load(os.path.join(split, "perm.npy")), perm))
                    split_bad += int(not np.array_equal(bf16_round(np.load(os.path.join(split, "router.npy"))), router))
                # The reported error: numpy's top-8 forward against the dense FFN, float64.
                x = dense_calibration[f"layers.{i}.moe_input"]
                h = silu(x @ gate.T) * (x @ up.T)
                y = h @ down.T
                scores = x @ router.T
                top = np.argsort(-scores, axis=1, kind="stable")[:, :8]
                keep = np.zeros((x.shape[0], 32))
                np.put_along_axis(keep, top, 1.0, axis=1)
                z = (h * np.repeat(keep, 32, axis=1)) @ down.T
                error = np.linalg.norm(y - z) / np.linalg.norm(y)
                worst = max(worst, abs(error - layer["output_relative_error"]) / error)
                bad += int(layer["balanced_kmeans"]["smallest_expert"] != 32 or layer["balanced_kmeans"]["largest_expert"] != 32 or
                           layer["balanced_kmeans"]["assignment_gap"] > 1e-9)
            c.check("moefy: permuted FFN bytes, experts of 32 in increasing index, router = numpy's centres", bad == 0,
                    f"{bad} differences")
            c.check("moefy: the split is the library's (moecomp split-ffn)", split_bad == 0, f"{split_bad} differences")
            c.check("moefy: the reported errors are numpy's", worst <= 2e-4, f"worst relative difference {worst:.2e}")
            f = report["flops"]
            c.check("moefy: the FLOPs model", f["dense_ffn_macs_per_token"] == 3 * 128 * 1024 and
                    f["moe_macs_per_token"] == 8 * 3 * 128 * 32 + 128 * 32 and
                    abs(f["ratio"] - (8 * 3 * 128 * 32 + 128 * 32) / (3 * 128 * 1024)) < 1e-12, str(f))
        report = c.compress("moefy --top-k 32", out, DENSE, "--method", "moefy", "--top-k", "32", "--experts", "32")
        if report:
            worst = max(l["output_relative_error"] for l in report["layers"])
            c.check("moefy --top-k 32: every expert on is the dense FFN", worst < 1e-6, f"worst error {worst:.1e}")
        report = c.compress("moefy --experts 8 --top-k 2", out, DENSE, "--method", "moefy", "--experts", "8",
                            "--top-k", "2", "--n-init", "2")
        if report:
            written = read_checkpoint(out)
            perm = decode(written["model.layers.2.mlp.moefy.permutation"]).astype(np.int64)
            c.check("moefy --experts 8: experts of 128 neurons, router 8 x 128",
                    report["layers"][2]["expert_size"] == 128 and written["model.layers.2.mlp.moefy.router.weight"][1] == (8, 128)
                    and all((np.diff(e) > 0).all() for e in perm.reshape(8, 128)) and report["options"]["n_init"] == 2,
                    str(report["options"]))

        # The tool runs itself again with glibc's huge-page tunable; with MOECOMP_HUGEPAGES=0 it does not. The
        # checkpoint is the same bytes either way.
        same = c.path("no-huge-pages")
        for directory, env in ((out, {}), (same, {"MOECOMP_HUGEPAGES": "0"})):
            shutil.rmtree(directory, ignore_errors=True)
            subprocess.run([tool, "compress", "-o", directory, "--method", "cka-merge", "--quiet"],
                           env={**os.environ, **env}, capture_output=True)
        shards = sorted(f for f in os.listdir(out) if f.endswith(".safetensors")) if os.path.isdir(out) else []
        c.check("with and without huge pages: the same checkpoint bytes", bool(shards) and os.path.isdir(same) and all(
            open(os.path.join(out, f), "rb").read() == open(os.path.join(same, f), "rb").read() for f in shards),
            f"{len(shards)} shards")

        # Without calibration tokens: hc-smoe from weights, no error reported.
        bare = c.path("bare-model")
        shutil.copytree(EMBEDDED, bare, ignore=shutil.ignore_patterns("calibration.safetensors", "heldout.bin"))
        report = c.compress("hc-smoe without calibration", out, bare, "--method", "hc-smoe")
        if report:
            c.check("hc-smoe without calibration: weights features, average merge, no errors",
                    report["options"]["features"] == "weights" and report["options"]["merge"] == "average" and
                    all(l["output_relative_error"] is None for l in report["layers"]), str(report["options"]))
            # The groups and representatives against scipy: average linkage of the Euclidean distances between
            # the flattened weights, cut into 4, numbered by first appearance; each group's member nearest its
            # mean (moecomp computes the distances from the stacks, without the flattened features).
            (hierarchy,) = require("scipy.cluster.hierarchy")
            bad = []
            for i, layer in enumerate(report["layers"]):
                flat = np.stack([np.concatenate([m.ravel() for m in (w1, w2, w3)])
                                 for w1, w3, w2 in experts_of(c.original, i, 8)])
                raw = hierarchy.fcluster(hierarchy.linkage(flat, "average"), 4, "maxclust")
                order = {v: k for k, v in enumerate(dict.fromkeys(raw))}
                groups = [[e for e in range(8) if order[raw[e]] == g] for g in range(len(order))]
                dominants = [min(g, key=lambda e: (np.linalg.norm(flat[e] - flat[g].mean(axis=0)), e)) for g in groups]
                if groups != layer["groups"] or dominants != layer["dominants"]:
                    bad.append((i, groups, layer["groups"], dominants, layer["dominants"]))
            c.check("hc-smoe on weights: groups and representatives are scipy's and numpy's", not bad, str(bad[:1]))
        # cka-merge on weight distances: the groups are `moecomp partition` on numpy's distance matrix.
        report = c.compress("cka-merge --similarity weights", out, "--method", "cka-merge", "--similarity", "weights")
        if report:
            bad = []
            for i, layer in enumerate(report["layers"]):
                flat = np.stack([np.concatenate([m.ravel() for m in (w1, w2, w3)])
                                 for w1, w3, w2 in experts_of(c.original, i, 8)])
                d = np.sqrt(((flat[:, None, :] - flat[None, :, :]) ** 2).sum(axis=2))
                path, labels_path = c.path("d.npy"), c.path("labels.npy")
                np.save(path, d)
                r = c.run("partition", path, "--groups", "4", "-o", labels_path)
                labels = np.load(labels_path) if r.returncode == 0 else np.zeros(8)
                groups = [[e for e in range(8) if labels[e] == g] for g in range(4)]
                if groups != layer["groups"]:
                    bad.append((i, groups, layer["groups"]))
            c.check("cka-merge --similarity weights: the groups are moecomp partition's on numpy's distances", not bad,
                    str(bad[:1]))

        # Interrupted: SIGINT while layer 2 runs (the --progress lines say where it is).
        if os.path.exists(out):
            shutil.rmtree(out)
        p = subprocess.Popen([tool, "compress", "-o", out, "--method", "cka-merge", "--merge", "learned", "--progress"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sent = False
        for line in p.stderr:
            if not sent and "layer 2 of 4" in line:
                p.send_signal(signal.SIGINT)
                sent = True
        p.wait()
        leftovers = [f for f in os.listdir(tmp) if ".moecomp-tmp-" in f]
        c.check("interrupted at layer 2: ended by SIGINT (the shell's 130), no OUT_DIR, no temporary directory",
                sent and p.returncode == -signal.SIGINT and not os.path.exists(out) and not leftovers,
                f"exit {p.returncode}, leftovers {leftovers}")

        # A failure at the last layer: the calibration file lacks layers.3.moe_input.
        partial = c.path("partial.safetensors")
        cal = read_file(os.path.join(EMBEDDED, "calibration.safetensors"))
        header, blobs, offset = {}, [], 0
        for name in sorted(k for k in cal if k != "layers.3.moe_input"):
            dtype, shape, raw = cal[name]
            header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
            blobs.append(raw)
            offset += len(raw)
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(partial, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
        c.expect_directory_error("calibration without the last layer", ["compress", "--method", "hc-smoe",
                                 "--calibration", partial, "--quiet"], "layers.3.moe_input")
        c.expect_directory_error("--matmul fp16", ["compress", "--method", "prune", "--matmul", "fp16", "--quiet"],
                                 "--matmul", "expected exact or bf16", "'fp16'")

        # Bad input.
        c.expect_directory_error("a missing model directory", ["compress", c.path("nowhere"), "--method", "prune"],
                                 "nowhere", "is not a directory")
        broken = c.path("broken-model")
        shutil.copytree(EMBEDDED, broken)
        with open(os.path.join(broken, "model.safetensors"), "r+b") as f:
            f.truncate(1000)
        c.expect_directory_error("a truncated checkpoint", ["compress", broken, "--method", "prune"], "model.safetensors")
        llama = c.path("llama-model")
        shutil.copytree(EMBEDDED, llama)
        cfg = json.load(open(os.path.join(llama, "config.json")))
        cfg["model_type"] = "jamba"
        json.dump(cfg, open(os.path.join(llama, "config.json"), "w"))
        c.expect_directory_error("an unknown architecture", ["compress", llama, "--method", "prune"],
                                 "unknown architecture", "jamba")
        c.expect_directory_error("--experts above E", ["compress", "--method", "hc-smoe", "--experts", "9"],
                                 "--experts", "1 to 8", "got 9")
        c.expect_directory_error("--experts below top-k", ["compress", "--method", "prune", "--experts", "1"],
                                 "--experts", "top-k")
        c.expect_directory_error("prune without calibration", ["compress", bare, "--method", "prune"],
                                 "needs calibration tokens")
        c.expect_directory_error("an unknown method", ["compress", "--method", "zip"], "--method", "zip")
        c.expect_directory_error("a merge method on a dense model", ["compress", DENSE, "--method", "hc-smoe"],
                                 "--method hc-smoe compresses MoE checkpoints", "is a dense model (model_type 'mistral')",
                                 "--method moefy")
        c.expect_directory_error("moefy on an MoE model", ["compress", EMBEDDED, "--method", "moefy"],
                                 "--method moefy splits dense checkpoints", "is an MoE model (model_type 'mixtral')")
        c.expect_directory_error("moefy --experts not a divisor", ["compress", "--method", "moefy", "--experts", "24"],
                                 "--experts", "divisor", "1024", "got 24")
        c.expect_directory_error("moefy --top-k above E", ["compress", "--method", "moefy", "--experts", "8",
                                 "--top-k", "9"], "--top-k", "1 to 8", "got 9")
        c.expect_directory_error("moefy with a merge option", ["compress", "--method", "moefy", "--merge", "average"],
                                 "--merge", "not a moefy option")
        c.expect_directory_error("--top-k for another method", ["compress", "--method", "prune", "--top-k", "2"],
                                 "--top-k", "moefy and sadmoe only")
        c.expect_directory_error("--keep outside (0, 1]", ["compress", "--method", "resmoe", "--keep", "1.5"], "--keep")
        c.expect_directory_error("--keep for another method", ["compress", "--method", "prune", "--keep", "0.5"],
                                 "--keep", "resmoe only")
        c.expect_directory_error("an option of another method", ["compress", "--method", "prune", "--linkage", "ward"],
                                 "--linkage", "hc-smoe only")
        c.expect_directory_error("--expert-storage for another method", ["compress", "--method", "prune",
                                 "--expert-storage", "duplicated"], "--expert-storage", "hc-smoe, m-smoe and cka-merge")
        c.expect_directory_error("--expert-storage of another value", ["compress", "--method", "hc-smoe",
                                 "--expert-storage", "shared"], "--expert-storage",
                                 "expected distinct or duplicated, got 'shared'")

        print(f"{c.checks - c.failures} of {c.checks} checks passed")
        return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
