#!/usr/bin/env python3
"""`moecomp compress --method sadmoe` end to end on the embedded dense model (models/tiny-dense), against an
independent reading of its output (struct and numpy, float64):

* the checkpoint is moefy's (the same split, byte for byte) plus per FFN the trained router
  `PREFIX.sadmoe.router.w1` (d_h x H) and `.w2` (E x d_h) in the gate's dtype, and config.json's
  `moecomp_sadmoe` record (experts, expert size, d_h, objective, tau, layers);
* the router: its scores |W2 relu(W1 x)| on the held-out calibration tokens (the last tenth) choose, for each
  tau of the report, the experts with score >= tau max score; the report's mean experts per token is numpy's,
  its FLOPs ratio is SADMoE's Appendix B closed form for that mean (k / E + d_h (d + E) / (3 d I)), and its output
  error is numpy's split-FFN forward (the selected experts summed with weight 1) against the dense FFN;
* top-k with the trained router likewise;
* a router trained with the moefication objective is written and measured the same way (sigmoid scores);
* bad input exits 2 with one line and nothing written: tau outside [0, 1], d_h = 0, sadmoe without calibration
  tokens, sadmoe on an MoE model, a router option with another method.

Usage: test_sadmoe_python.py PATH/TO/moecomp"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

(np,) = require("numpy")
from test_compress_python import read_checkpoint, decode, calibration, silu  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DENSE = os.path.normpath(os.path.join(HERE, "..", "..", "models", "tiny-dense"))
EMBEDDED = os.path.normpath(os.path.join(HERE, "..", "..", "models", "tiny-moe"))


class Checker(ToolRunner):
    def compress(self, out, *args):
        r = self.run("compress", DENSE, "-o", out, "--quiet", "--json", *args)
        if r.returncode != 0:
            self.check("compress " + " ".join(args), False, r.stderr.strip())
            return None
        return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(tool, tmp)
        cal = calibration(DENSE)
        moefy_out, sad_out = c.path("moefy"), c.path("sadmoe")
        c.compress(moefy_out, "--method", "moefy")
        moefy = read_checkpoint(moefy_out)
        for objective in ("norm", "moefication"):
            report = c.compress(sad_out, "--method", "sadmoe", "--router-objective", objective, "--router-epochs", "3",
                                "--tau", "0.2,0.5,0.8")
            if report is None:
                continue
            written = read_checkpoint(sad_out)
            config = json.load(open(os.path.join(sad_out, "config.json")))
            record = config.get("moecomp_sadmoe", {})
            E, S, dh = record.get("num_experts"), record.get("expert_size"), record.get("router_hidden")
            extra = {k for k in written if k not in moefy}
            same = all(written[k] == moefy[k] for k in moefy)
            c.check(f"{objective}: moefy's tensors byte for byte, plus the routers", same and extra == {
                f"model.layers.{i}.mlp.sadmoe.router.{w}" for i in range(4) for w in ("w1", "w2")},
                f"{len(extra)} new tensors")
            c.check(f"{objective}: config.json's moecomp_sadmoe", record.get("objective") == objective and
                    record.get("tau") == 0.2 and E == 32 and S == 32 and dh == 128 and
                    record.get("layers") == [f"model.layers.{i}.mlp" for i in range(4)], f"{record}")
            bad_count = bad_ratio = 0
            worst = 0.0
            for i, layer in enumerate(report["layers"]):
                p = f"model.layers.{i}.mlp."
                w1, w2 = decode(written[p + "sadmoe.router.w1"]), decode(written[p + "sadmoe.router.w2"])
                gate, up, down = (decode(written[p + n]) for n in ("gate_proj.weight", "up_proj.weight", "down_proj.weight"))
                x = cal[f"layers.{i}.moe_input"].astype(np.float32).astype(np.float64)
                held = int(np.floor(0.1 * x.shape[0]))
                xv = x[x.shape[0] - held:]
                u = np.maximum(xv @ w1.T, 0) @ w2.T
                scores = np.abs(u) if objective == "norm" else 1 / (1 + np.exp(-u))
                hidden = silu(xv @ gate.T) * (xv @ up.T)
                dense = hidden @ down.T
                H, I = x.shape[1], gate.shape[0]
                for point in layer["dynamic_k"]:
                    chosen = scores >= point["tau"] * scores.max(axis=1, keepdims=True)
                    k = chosen.sum(axis=1).mean()
                    mask = np.repeat(chosen, S, axis=1)  # expert e = neurons [e S, (e + 1) S)
                    y = (hidden * mask) @ down.T
                    err = np.linalg.norm(y - dense) / np.linalg.norm(dense)
                    bad_count += abs(point["mean_experts"] - k) > 1e-9
                    ratio = k / E + dh * (H + E) / (3.0 * H * I)
                    bad_ratio += abs(point["flops_ratio"] - ratio) > 1e-12
                    # float32 sums of 32 experts against one float64 product: 1e-5 absolute where the error is 0
                    worst = max(worst, abs(point["output_relative_error"] - err) / (err + 1e-2))
                top = np.argsort(-scores, axis=1, kind="stable")[:, :8]
                chosen = np.zeros_like(scores, dtype=bool)
                np.put_along_axis(chosen, top, True, axis=1)
                y = (hidden * np.repeat(chosen, S, axis=1)) @ down.T
                err = np.linalg.norm(y - dense) / np.linalg.norm(dense)
                worst = max(worst, abs(layer["router"]["top_k_output_relative_error"] - err) / (err + 1e-2))
            c.check(f"{objective}: each tau's mean experts per token is numpy's", bad_count == 0, f"{bad_count} differ")
            c.check(f"{objective}: each FLOPs ratio is Appendix B's closed form for its mean k", bad_ratio == 0,
                    f"{bad_ratio} differ")
            c.check(f"{objective}: the output errors (dynamic-k and top-k) are numpy's", worst < 1e-3,
                    f"worst |moecomp - numpy| / (numpy + 0.01): {worst:.2e}")
            c.check(f"{objective}: the router learned something (validation top-1 agreement above chance, 1/32)",
                    all(l["router"]["top1_agreement"] > 2 / 32 for l in report["layers"]),
                    f"{[round(l['router']['top1_agreement'], 3) for l in report['layers']]}")

        # inspect reads the sadmoe record and checks the routers against it.
        r = c.run("inspect", sad_out, "--json")
        summary = json.loads(r.stdout) if r.returncode == 0 else {}
        c.check("inspect: the sadmoe record", summary.get("sadmoe_experts") == 32 and
                summary.get("sadmoe_router_hidden") == 128, r.stderr.strip() or f"{summary}")
        import struct
        shard = os.path.join(sad_out, "model-00001-of-00005.safetensors")
        with open(shard, "rb") as f:
            raw = f.read()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        name = "model.layers.0.mlp.sadmoe.router.w2"
        if name in header:
            header[name]["shape"] = [header[name]["shape"][1], header[name]["shape"][0]]
            text = json.dumps(header, separators=(",", ":")).encode()
            text += b" " * (n - len(text))  # the same header length: the data offsets stay valid
            with open(shard, "wb") as f:
                f.write(raw[:8] + text[:n] + raw[8 + n:])
        r = c.run("inspect", sad_out)
        lines = r.stderr.strip().splitlines()
        c.check("inspect: a router tensor of the wrong shape exits 2 naming it", r.returncode == 2 and len(lines) == 1 and
                name in lines[0] and "(32, 128)" in lines[0], r.stderr.strip())
        c.expect_directory_error("fewer calibration tokens than one router batch",
                                 ["compress", DENSE, "--method", "sadmoe", "--router-batch-size", "5000"],
                                 "training tokens", "batch")
        r = c.run("compress", "-o", c.path("default"), "--method", "sadmoe", "--router-epochs", "1", "--quiet", "--json")
        model = json.loads(r.stdout.strip().splitlines()[-1])["model"] if r.returncode == 0 else r.stderr.strip()
        c.check("compress --method sadmoe without MODEL_DIR splits the Hoyer-ReLU twin",
                model.endswith("tiny-dense-hoyer"), model)
        c.expect_directory_error("tau above 1", ["compress", DENSE, "--method", "sadmoe", "--tau", "0.5,1.5"], "--tau")
        c.expect_directory_error("d_h = 0", ["compress", DENSE, "--method", "sadmoe", "--router-hidden", "0"],
                                 "--router-hidden")
        bare = c.path("bare")
        os.makedirs(bare)
        for name in ("config.json", "model.safetensors"):
            os.symlink(os.path.join(DENSE, name), os.path.join(bare, name))
        c.expect_directory_error("sadmoe without calibration tokens", ["compress", bare, "--method", "sadmoe"],
                                 "calibration")
        c.expect_directory_error("sadmoe on an MoE model", ["compress", EMBEDDED, "--method", "sadmoe"],
                                 "sadmoe splits dense checkpoints")
        c.expect_directory_error("a router option with moefy", ["compress", DENSE, "--method", "moefy", "--tau", "0.5"],
                                 "--tau", "not a moefy option")
        print(f"{c.checks - c.failures} passed, {c.failures} failed")
        return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
