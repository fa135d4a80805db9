#!/usr/bin/env python3
"""`moecomp expert-features` checked with numpy transcriptions of each representation.

* outputs / mean-output: each expert's FFN on the same tokens, gated (SwiGLU-style: act(x W1^T + b1) *
  (x W3^T + b3)) and not, with and without biases, for silu, gelu (erf form), gelu_tanh and relu; float64 to
  1e-12 relative, float32 to 2e-5;
* vectorized: row e = concat(W1_e.ravel(), W2_e.ravel(), W3_e.ravel()) exactly;
* surrogate: row e = (W2_e @ (W1_e * W3_e)).ravel() (W2_e @ W1_e without W3);
* weight-distances: scipy.spatial.distance.pdist of the vectorized rows (float64), to 1e-12 relative, for 3
  experts (one pair at a time) and 20 experts of 18,200 entries a matrix (across pairs, two chunks);
* router-logits: x @ R.T + b;
* the error contract: exit 2, one "moecomp: error:" line naming the option, no output file: mismatched shapes,
  missing --inputs, NaN weights, a 2-D --w1, an unknown kind or activation.

Usage: test_expert_features_numpy.py PATH/TO/moecomp"""
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

np, special, distance = require("numpy", "scipy.special", "scipy.spatial.distance")

ACTIVATIONS = {
    "silu": lambda v: v / (1.0 + np.exp(-v)),
    "gelu": lambda v: 0.5 * v * (1.0 + special.erf(v / math.sqrt(2.0))),
    "gelu_tanh": lambda v: 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3))),
    "relu": lambda v: np.maximum(v, 0.0),
}


def ffn(x, w1, w2, w3, b1, b3, b2, act):
    h = ACTIVATIONS[act](x @ w1.T + (0 if b1 is None else b1))
    if w3 is not None:
        h = h * (x @ w3.T + (0 if b3 is None else b3))
    return h @ w2.T + (0 if b2 is None else b2)


class Checker(ToolRunner):

    def save(self, name, a):
        p = self.path(name + ".npy")
        np.save(p, a)
        return p

    def run_kind(self, kind, parts, *extra):
        args = ["expert-features", "--kind", kind]
        for k, v in parts.items():
            if v is not None:
                args += ["--" + k, self.save(k, v)]
        out = self.path("f.npy")
        r = self.run(*args, *extra, "-o", out)
        if r.returncode != 0:
            return None, r.stderr.strip()
        return np.load(out), ""

    def stacks(self, rng):
        for dtype, tol in [(np.float64, 1e-12), (np.float32, 2e-5)]:
            for gated in (True, False):
                for biases in (False, True):
                    e, d, d_ff, n = 3, 12, 20, 300  # n > 256: two token tiles
                    w1 = rng.standard_normal((e, d_ff, d)) / math.sqrt(d)
                    w2 = rng.standard_normal((e, d, d_ff)) / math.sqrt(d_ff)
                    w3 = rng.standard_normal((e, d_ff, d)) / math.sqrt(d) if gated else None
                    b1 = rng.standard_normal((e, d_ff)) if biases else None
                    b3 = rng.standard_normal((e, d_ff)) if biases and gated else None
                    b2 = rng.standard_normal((e, d)) if biases else None
                    x = rng.standard_normal((n, d))
                    cast = (lambda a: None if a is None else a.astype(dtype))
                    parts = {"w1": cast(w1), "w2": cast(w2), "w3": cast(w3), "b1": cast(b1), "b3": cast(b3), "b2": cast(b2)}
                    pd = {k: (None if v is None else v.astype(np.float64)) for k, v in parts.items()}
                    name = f"{np.dtype(dtype).name} gated={gated} biases={biases}"
                    for act in ACTIVATIONS:
                        ref = np.stack([ffn(x.astype(dtype).astype(np.float64), pd["w1"][i], pd["w2"][i],
                                            None if pd["w3"] is None else pd["w3"][i],
                                            None if pd["b1"] is None else pd["b1"][i],
                                            None if pd["b3"] is None else pd["b3"][i],
                                            None if pd["b2"] is None else pd["b2"][i], act) for i in range(e)])
                        got, err = self.run_kind("outputs", {**parts, "inputs": x.astype(dtype)}, "--activation", act)
                        worst = np.max(np.abs(got - ref)) / np.max(np.abs(ref)) if got is not None else float("inf")
                        self.check(f"outputs {name} {act}", got is not None and got.shape == (e, n, d) and worst <= tol,
                                   err or f"max rel {worst:.1e}")
                        got, err = self.run_kind("mean-output", {**parts, "inputs": x.astype(dtype)}, "--activation", act)
                        mref = ref.mean(axis=1)
                        worst = np.max(np.abs(got - mref)) / np.max(np.abs(mref)) if got is not None else float("inf")
                        self.check(f"mean-output {name} {act}", got is not None and got.shape == (e, d) and worst <= 10 * tol,
                                   err or f"max rel {worst:.1e}")
                    got, err = self.run_kind("vectorized", parts)
                    vref = np.concatenate([pd["w1"].reshape(e, -1), pd["w2"].reshape(e, -1)]
                                          + ([pd["w3"].reshape(e, -1)] if gated else []), axis=1)
                    self.check(f"vectorized {name}", got is not None and np.array_equal(got, vref.astype(dtype)),
                               err or f"shape {got.shape}")
                    unbiased = {k: v for k, v in parts.items() if k in ("w1", "w2", "w3")}
                    if not biases:
                        self.check_distances(f"weight-distances {name}", unbiased, vref)
                    got, err = self.run_kind("surrogate", parts)
                    sref = np.stack([(pd["w2"][i] @ (pd["w1"][i] * pd["w3"][i] if gated else pd["w1"][i])).ravel()
                                     for i in range(e)])
                    worst = np.max(np.abs(got - sref)) / np.max(np.abs(sref)) if got is not None else float("inf")
                    self.check(f"surrogate {name}", got is not None and got.shape == (e, d * d) and worst <= tol,
                               err or f"max rel {worst:.1e}")
        for dtype in (np.float32, np.float64):  # 20 experts: the path across pairs; 18,200 entries: two chunks
            big = {k: rng.standard_normal(shape).astype(dtype) for k, shape in
                   (("w1", (20, 140, 130)), ("w2", (20, 130, 140)), ("w3", (20, 140, 130)))}
            vbig = np.concatenate([big[k].reshape(20, -1).astype(np.float64) for k in ("w1", "w2", "w3")], axis=1)
            self.check_distances(f"weight-distances {np.dtype(dtype).name} 20 experts", big, vbig)
        x = rng.standard_normal((50, 8))
        router = rng.standard_normal((6, 8))
        bias = rng.standard_normal(6)
        np.save(self.path("x.npy"), x)
        np.save(self.path("r.npy"), router)
        np.save(self.path("rb.npy"), bias)
        r = self.run("expert-features", "--kind", "router-logits", "--inputs", self.path("x.npy"), "--router",
                     self.path("r.npy"), "--router-bias", self.path("rb.npy"), "-o", self.path("l.npy"))
        ok = r.returncode == 0 and np.allclose(np.load(self.path("l.npy")), x @ router.T + bias, rtol=1e-12, atol=1e-12)
        self.check("router-logits float64", ok, r.stderr.strip() or "x @ R.T + b")

    def check_distances(self, name, parts, vectorized):
        got, err = self.run_kind("weight-distances", parts)
        ref = distance.pdist(vectorized)
        worst = np.max(np.abs(got - ref) / ref) if got is not None else float("inf")
        self.check(name, got is not None and got.dtype == np.float64 and got.shape == ref.shape and worst <= 1e-12,
                   err or f"max rel {worst:.1e}")

    def errors(self, rng):
        w1 = self.save("e_w1", rng.standard_normal((2, 6, 4)))
        w2 = self.save("e_w2", rng.standard_normal((2, 4, 6)))
        w2_bad = self.save("e_w2bad", rng.standard_normal((2, 5, 6)))
        w3_bad = self.save("e_w3bad", rng.standard_normal((3, 6, 4)))
        x = self.save("e_x", rng.standard_normal((5, 4)))
        nan = rng.standard_normal((2, 6, 4))
        nan[1, 2, 3] = np.nan
        nan_path = self.save("e_nan", nan)
        flat = self.save("e_flat", rng.standard_normal((6, 4)))
        base = ["expert-features", "--w1", w1]
        self.expect_error("w2 shape", base + ["--w2", w2_bad, "--kind", "vectorized"], "--w2", "4 x 6")
        self.expect_error("w3 count", base + ["--w2", w2, "--w3", w3_bad, "--kind", "surrogate"], "--w3", "2 experts")
        self.expect_error("missing --inputs", base + ["--w2", w2, "--kind", "outputs"], "--inputs")
        self.expect_error("NaN weight", ["expert-features", "--w1", nan_path, "--w2", w2, "--kind", "vectorized"],
                          "--w1", "(1, 2, 3)")
        self.expect_error("2-D --w1", ["expert-features", "--w1", flat, "--w2", w2, "--kind", "vectorized"], "--w1", "3-D")
        self.expect_error("bad kind", base + ["--w2", w2, "--kind", "weights"], "--kind", "weights")
        b1 = self.save("e_b1", rng.standard_normal((2, 6)))
        self.expect_error("weight-distances with biases", base + ["--w2", w2, "--b1", b1, "--kind", "weight-distances"],
                          "--kind", "--b1")
        self.expect_error("bad activation", base + ["--w2", w2, "--kind", "outputs", "--inputs", x, "--activation", "tanh"],
                          "--activation", "tanh")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    rng = np.random.default_rng(20261124)
    with tempfile.TemporaryDirectory(prefix="moecomp-features-") as tmp:
        c = Checker(sys.argv[1], tmp)
        c.stacks(rng)
        c.errors(rng)
    print(f"{c.checks - c.failures} of {c.checks} checks passed")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
