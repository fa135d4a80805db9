#!/usr/bin/env python3
"""models/evaluate.py on SADMoE checkpoints (issue 35): a synthetic one built from models/tiny-dense in a temporary
directory (the FFNs unpermuted, an identity `moefy.permutation`, seeded random two-layer routers), checked against
the dense model and an independent numpy reading of the routers.

* tau = 0 runs every expert: the dense model's perplexity (1e-4 relative), mean_experts = E, and a FLOPs ratio of
  1 + C_R / C_FFN (C_R = d_h (d + E), C_FFN = 3 d I); top-k = E the same; the same again with router biases and
  the "moefication" (sigmoid) objective.
* At tau in (0, 1]: mean_experts in [1, E] and non-increasing in tau, below E at tau = 1; the FLOPs ratio is
  (k C_E + C_R) / C_FFN of the reported k; layer 0's mean experts per token equal numpy's dynamic-k (float64) on
  the layer's FFN inputs (the dense model's, which no FFN before it changes) to 1e-3; top-k = K gives K.
* Without --tau or --top-k the config's tau is used.
* --json: one line per setting with checkpoint, perplexity, bytes_on_disk (the sum of the directory's model
  .safetensors sizes), routing, tau or top_k, mean_experts, flops_ratio.
* Bad input exits 2 with one `evaluate.py: error:` line: a router tensor of the wrong shape (naming the tensor,
  the expected and the actual shape), a missing router tensor, tau outside [0, 1], top-k above E.

Usage: /usr/bin/python3 tests/peers/test_evaluate_sadmoe.py"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import require  # noqa: E402

np, torch = require("numpy", "torch")

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.normpath(os.path.join(HERE, "..", "..", "models"))
DENSE = os.path.join(MODELS, "tiny-dense")
EVALUATE = os.path.join(MODELS, "evaluate.py")
sys.path.insert(0, MODELS)
import tiny_moe  # noqa: E402

E, DH = 8, 16


class Checker:
    def __init__(self):
        self.checks = self.failures = 0

    def check(self, label, ok, detail):
        self.checks += 1
        if not ok:
            self.failures += 1
        print(f"{'ok  ' if ok else 'FAIL'} {label}: {detail}", flush=True)

    def evaluate(self, *args):
        """The JSON records of `evaluate.py --json ARGS`, or None (reported as a failure) when it fails."""
        r = subprocess.run([sys.executable, EVALUATE, "--json", *args], capture_output=True, text=True,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        if r.returncode != 0:
            self.check(f"evaluate.py {' '.join(args)}", False, f"exit {r.returncode}: {r.stderr.strip()}")
            return None
        return [json.loads(line) for line in r.stdout.strip().splitlines()]

    def expect_error(self, label, args, *fragments):
        r = subprocess.run([sys.executable, EVALUATE, *args], capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        ok = (r.returncode == 2 and len(lines) == 1 and lines[0].startswith("evaluate.py: error:")
              and all(f in lines[0] for f in fragments) and not r.stdout.strip())
        self.check(f"error {label}", ok, lines[0] if len(lines) == 1 else f"exit {r.returncode}, {r.stderr!r}")


def make_checkpoint(path, seed, bias=False, objective="norm", tau=0.5, bad=None, drop=None):
    """tiny-dense's weights (bytes as stored) plus a SADMoE record and seeded routers in `path`."""
    os.makedirs(path)
    weights = tiny_moe.read_safetensors(os.path.join(DENSE, "model.safetensors"))
    config = json.load(open(os.path.join(DENSE, "config.json")))
    H, I, L = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    rng = np.random.default_rng(seed)
    prefixes = [f"model.layers.{i}.mlp" for i in range(L)]
    routers = {}
    for p in prefixes:
        r = p + ".sadmoe.router."
        routers[r + "w1"] = rng.standard_normal((DH, H)) / np.sqrt(H)
        routers[r + "w2"] = rng.standard_normal((E, DH)) / np.sqrt(DH)
        if bias:
            routers[r + "b1"] = 0.1 * rng.standard_normal(DH)
            routers[r + "b2"] = 0.1 * rng.standard_normal(E)
        weights[p + ".moefy.permutation"] = torch.arange(I, dtype=torch.int32)
    if bad is not None:
        routers[bad[0]] = np.zeros(bad[1])
    for name, value in routers.items():
        if name != drop:
            weights[name] = torch.tensor(value, dtype=torch.float32)
    config["moecomp_sadmoe"] = {"num_experts": E, "expert_size": I // E, "router_hidden": DH, "router_bias": bias,
                                "objective": objective, "tau": tau, "layers": prefixes}
    tiny_moe.write_safetensors(os.path.join(path, "model.safetensors"), weights, {"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return routers, config


def numpy_layer0_experts(routers, held, tau):
    """Layer 0's mean experts per token under dynamic-k at tau, in float64 from the dense model's FFN inputs."""
    weights, dense_config = tiny_moe.load(DENSE)
    data = torch.tensor(list(held), dtype=torch.long)
    n = (len(data) - 1) // 128
    ids = data[: n * 128].view(n, 128)
    inputs = []
    with torch.no_grad():
        for i in range(0, n, 32):
            captured = []
            tiny_moe.forward(weights, dense_config, ids[i:i + 32], moe_inputs=captured)
            inputs.append(captured[0].double().numpy())
    x = np.concatenate(inputs)
    r = "model.layers.0.mlp.sadmoe.router."
    z = np.maximum(x @ routers[r + "w1"].astype(np.float32).astype(np.float64).T, 0)
    scores = np.abs(z @ routers[r + "w2"].astype(np.float32).astype(np.float64).T)
    keep = scores >= tau * scores.max(axis=1, keepdims=True)
    return keep.sum(axis=1).mean()


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="test_evaluate_sadmoe-")
    try:
        dense_config = json.load(open(os.path.join(DENSE, "config.json")))
        H, I = dense_config["hidden_size"], dense_config["intermediate_size"]
        c_ffn, c_r = 3 * H * I, DH * (H + E)
        base = c.evaluate(DENSE)
        if base is None:
            return 1
        dense_ppl = base[0]["perplexity"]
        c.check("the dense model", base[0]["kind"] == "dense" and 2.8 < dense_ppl < 3.0, f"perplexity {dense_ppl:.6f}")

        ck = os.path.join(tmp, "sadmoe")
        routers, _ = make_checkpoint(ck, seed=1)
        records = c.evaluate("--tau", "0,0.25,0.5,0.75,1", "--top-k", f"{E},2", ck)
        if records is None or len(records) != 7:
            c.check("seven records for five taus and two top-ks", False, repr(records))
            return 1
        by = {(r["routing"], r.get("tau", r.get("top_k"))): r for r in records}

        # (i) tau = 0 and (ii) top-k = E: the dense FFN, at the dense cost plus the router's.
        for key in (("tau", 0.0), ("top_k", E)):
            r = by[key]
            rel = abs(r["perplexity"] - dense_ppl) / dense_ppl
            c.check(f"{key[0]} = {key[1]}: the dense perplexity", rel < 1e-4,
                    f"{r['perplexity']:.6f} vs {dense_ppl:.6f} (relative {rel:.1e})")
            c.check(f"{key[0]} = {key[1]}: every expert", r["mean_experts"] == E and r["mean_experts_per_layer"] == [E] * 4,
                    f"mean_experts {r['mean_experts']}")
            want = 1 + c_r / c_ffn
            c.check(f"{key[0]} = {key[1]}: FLOPs ratio 1 + C_R / C_FFN", abs(r["flops_ratio"] - want) < 1e-12,
                    f"{r['flops_ratio']:.6f} vs {want:.6f}")

        # (iii) dynamic-k between 1 and E, fewer experts as tau rises.
        means = [by[("tau", t)]["mean_experts"] for t in (0.0, 0.25, 0.5, 0.75, 1.0)]
        c.check("mean_experts in [1, E]", all(1 <= m <= E for m in means), ", ".join(f"{m:.3f}" for m in means))
        c.check("mean_experts non-increasing in tau, below E at tau = 1",
                all(a >= b for a, b in zip(means, means[1:])) and means[-1] < E and means[2] < E,
                ", ".join(f"{m:.3f}" for m in means))
        for t in (0.5, 1.0):
            r = by[("tau", t)]
            want = (r["mean_experts"] * c_ffn / E + c_r) / c_ffn
            c.check(f"tau = {t}: FLOPs ratio (k C_E + C_R) / C_FFN", abs(r["flops_ratio"] - want) < 1e-12,
                    f"{r['flops_ratio']:.6f} at k = {r['mean_experts']:.4f}")
            ppl = r["perplexity"]
            c.check(f"tau = {t}: a finite perplexity above the dense one", dense_ppl < ppl < 1e6, f"{ppl:.4f}")
        held = open(os.path.join(MODELS, "tiny-moe", "heldout.bin"), "rb").read() \
            if os.path.exists(os.path.join(MODELS, "tiny-moe", "heldout.bin")) else tiny_moe.split(tiny_moe.corpus())[1]
        for t in (0.5, 0.75):
            want = numpy_layer0_experts(routers, held, t)
            got = by[("tau", t)]["mean_experts_per_layer"][0]
            c.check(f"tau = {t}: layer 0's experts per token equal numpy's dynamic-k", abs(got - want) < 1e-3,
                    f"{got:.5f} vs {want:.5f}")
        r = by[("top_k", 2)]
        c.check("top-k = 2: two experts per token", r["mean_experts"] == 2.0 and r["perplexity"] > dense_ppl,
                f"mean_experts {r['mean_experts']}, perplexity {r['perplexity']:.4f}")

        # (iv) the JSON record.
        size = os.path.getsize(os.path.join(ck, "model.safetensors"))
        fields = {"checkpoint", "perplexity", "bytes_on_disk", "routing", "mean_experts", "flops_ratio", "num_experts",
                  "expert_size", "mean_experts_per_layer"}
        r = by[("tau", 0.5)]
        c.check("--json: the fields", fields <= set(r) and r["tau"] == 0.5 and r["checkpoint"] == ck
                and r["num_experts"] == E and r["expert_size"] == I // E, ", ".join(sorted(r)))
        c.check("--json: bytes_on_disk is the model file's size", all(x["bytes_on_disk"] == size for x in records),
                f"{r['bytes_on_disk']} vs {size}")
        default = c.evaluate(ck)
        c.check("no --tau or --top-k: the config's tau", default is not None and len(default) == 1
                and default[0]["tau"] == 0.5 and default[0]["mean_experts"] == by[("tau", 0.5)]["mean_experts"],
                repr(default and {k: default[0][k] for k in ("routing", "tau", "mean_experts")}))

        # Biases and MoEfication's sigmoid objective: tau = 0 is still the dense model.
        ck2 = os.path.join(tmp, "sadmoe-bias-sigmoid")
        make_checkpoint(ck2, seed=2, bias=True, objective="moefication")
        recs = c.evaluate("--tau", "0,0.9", ck2)
        if recs is not None:
            rel = abs(recs[0]["perplexity"] - dense_ppl) / dense_ppl
            c.check("biases, sigmoid: tau = 0 is the dense model", rel < 1e-4 and recs[0]["mean_experts"] == E,
                    f"relative {rel:.1e}, mean_experts {recs[0]['mean_experts']}")
            c.check("biases, sigmoid: tau = 0.9 routes fewer", 1 <= recs[1]["mean_experts"] < E,
                    f"mean_experts {recs[1]['mean_experts']:.3f}")

        # (v) bad input.
        w1 = "model.layers.2.mlp.sadmoe.router.w1"
        bad = os.path.join(tmp, "bad-shape")
        make_checkpoint(bad, seed=3, bad=(w1, (DH + 1, H)))
        c.expect_error("a router w1 of the wrong shape", ["--tau", "0.5", bad], w1, f"[{DH + 1}, {H}]", f"[{DH}, {H}]")
        w2 = "model.layers.1.mlp.sadmoe.router.w2"
        bad2 = os.path.join(tmp, "bad-shape-w2")
        make_checkpoint(bad2, seed=3, bad=(w2, (E, DH + 2)))
        c.expect_error("a router w2 of the wrong shape", [bad2], w2, f"[{E}, {DH + 2}]", f"[{E}, {DH}]")
        missing = os.path.join(tmp, "missing")
        make_checkpoint(missing, seed=3, bias=True, drop="model.layers.0.mlp.sadmoe.router.b2")
        c.expect_error("router_bias without b2", [missing], "model.layers.0.mlp.sadmoe.router.b2", "missing")
        c.expect_error("tau above 1", ["--tau", "0.5,1.5", ck], "--tau", "1.5", "[0, 1]")
        c.expect_error("tau below 0", ["--tau=-0.1", ck], "--tau", "-0.1", "[0, 1]")
        c.expect_error("tau not a number", ["--tau", "x", ck], "--tau", "'x'")
        c.expect_error("top-k above E", ["--top-k", str(E + 1), ck], "--top-k", str(E + 1), str(E))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{c.checks - c.failures} passed, {c.failures} failed")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
