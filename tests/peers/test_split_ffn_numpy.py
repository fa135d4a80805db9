#!/usr/bin/env python3
"""`moecomp split-ffn` checked with numpy: the MoEfication split reproduces the dense FFN.

* For a GLU FFN (SiLU gate, with biases) and a plain one, in float32 and float64: the directory holds
  labels (int64, d_ff), perm (int64, a permutation, expert by expert in increasing original index), w1 / w3
  (E x d_ff/E x d), w2 (E x d x d_ff/E), b1 / b3 (E x d_ff/E) and router (E x d); every expert has exactly
  d_ff/E neurons, each expert's slices are the original rows / columns of its neurons, and with every expert
  switched on the experts' summed outputs equal the dense FFN's (1e-10 relative in float64, 1e-4 in float32).
* An existing output directory is replaced whole (files of a previous run do not survive).
* The error contract: exit 2, one "moecomp: error:" line naming the problem, and no directory (nor a
  temporary one) left behind.

Usage: test_split_ffn_numpy.py PATH/TO/moecomp"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

(np,) = require("numpy")


def silu(v):
    return v / (1.0 + np.exp(-v))


def ffn(x, w1, w2, w3=None, b1=None, b3=None):
    g = x @ w1.T + (0 if b1 is None else b1)
    h = silu(g) if w3 is None else silu(g) * (x @ w3.T + (0 if b3 is None else b3))
    return h @ w2.T


class Checker(ToolRunner):

    def record(self, label, problem):
        self.checks += 1
        if problem:
            self.failures += 1
            print(f"FAIL {label}: {problem}")
        else:
            print(f"ok   {label}")

    def split(self, label, d_ff, d, experts, dtype, glu, biases, rng):
        parts = {"w1": rng.standard_normal((d_ff, d)), "w2": rng.standard_normal((d, d_ff))}
        if glu:
            parts["w3"] = rng.standard_normal((d_ff, d))
        if biases:
            parts["b1"] = rng.standard_normal(d_ff)
            if glu:
                parts["b3"] = rng.standard_normal(d_ff)
        parts = {k: v.astype(dtype) for k, v in parts.items()}
        args = []
        for k, v in parts.items():
            np.save(self.path(k + ".npy"), v)
            args += ["--" + k, self.path(k + ".npy")]
        out = self.path("split")
        r = self.run("split-ffn", *args, "--experts", str(experts), "-o", out, "--json", "--n-init", "2")
        name = f"{label} d_ff={d_ff} d={d} E={experts} {np.dtype(dtype).name}"
        if r.returncode != 0:
            self.record(name, f"exit {r.returncode}: {r.stderr.strip()}")
            return
        summary = json.loads(r.stdout)
        got = {f[:-4]: np.load(os.path.join(out, f)) for f in os.listdir(out)}
        s = d_ff // experts
        want_files = {"labels", "perm", "w1", "w2", "router"} | ({"w3"} if glu else set()) | (
            {"b1"} if biases else set()) | ({"b3"} if biases and glu else set())
        problem = None
        if set(got) != want_files:
            problem = f"files {sorted(got)}, wanted {sorted(want_files)}"
        else:
            labels, perm = got["labels"], got["perm"]
            if labels.dtype != np.int64 or perm.dtype != np.int64 or sorted(perm.tolist()) != list(range(d_ff)):
                problem = "labels / perm are not int64 / a permutation"
            elif np.bincount(labels, minlength=experts).tolist() != [s] * experts:
                problem = f"sizes {np.bincount(labels).tolist()}"
            elif got["w1"].shape != (experts, s, d) or got["w2"].shape != (experts, d, s):
                problem = f"shapes w1 {got['w1'].shape} w2 {got['w2'].shape}"
            else:
                p = perm.reshape(experts, s)
                if any((labels[p[e]] != e).any() or (np.diff(p[e]) <= 0).any() for e in range(experts)):
                    problem = "perm is not expert by expert in increasing original index"
                elif not (np.array_equal(got["w1"], parts["w1"][p]) and
                          np.array_equal(got["w2"], np.stack([parts["w2"][:, p[e]] for e in range(experts)]))):
                    problem = "expert slices are not the original rows / columns"
                else:
                    x = rng.standard_normal((5, d))
                    dense = ffn(x, *(parts[k].astype(np.float64) if k in parts else None
                                     for k in ("w1", "w2", "w3", "b1", "b3")))
                    summed = sum(ffn(x, got["w1"][e].astype(np.float64), got["w2"][e].astype(np.float64),
                                     got["w3"][e].astype(np.float64) if glu else None,
                                     got["b1"][e].astype(np.float64) if biases else None,
                                     got["b3"][e].astype(np.float64) if biases and glu else None)
                                 for e in range(experts))
                    err = np.abs(summed - dense).max() / np.abs(dense).max()
                    tol = 1e-10 if dtype == np.float64 else 1e-4
                    if err > tol:
                        problem = f"summed expert outputs differ from the dense FFN by {err:.2e} (allowed {tol})"
                    elif summary.get("status") != "ok" or summary.get("assignment_gap", 1) > 1e-9:
                        problem = f"summary {summary}"
        self.record(name, problem)


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(20261124)
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(tool, tmp)
        c.tmp = tmp
        for dtype in (np.float64, np.float32):
            c.split("GLU with biases", 96, 16, 6, dtype, glu=True, biases=True, rng=rng)
            c.split("plain, no biases", 120, 8, 4, dtype, glu=False, biases=False, rng=rng)
            c.split("plain with b1", 64, 12, 8, dtype, glu=False, biases=True, rng=rng)
        # A second run into the same directory replaces it whole: the GLU run's w3.npy must be gone.
        c.split("GLU again", 96, 16, 6, np.float64, glu=True, biases=True, rng=rng)
        c.split("then plain into the same directory", 96, 16, 6, np.float64, glu=False, biases=False, rng=rng)
        c.record("replaced whole", None if not os.path.exists(c.path("split/w3.npy")) else "w3.npy survived")

        w1, w2 = c.path("e_w1.npy"), c.path("e_w2.npy")
        np.save(w1, rng.standard_normal((10, 4)))
        np.save(w2, rng.standard_normal((4, 10)))
        zero = rng.standard_normal((10, 4))
        zero[3] = 0
        np.save(c.path("zero.npy"), zero)
        np.save(c.path("bad_w2.npy"), rng.standard_normal((5, 10)))
        c.expect_directory_error("d_ff not a multiple of E", ["split-ffn", "--w1", w1, "--w2", w2, "--experts", "3"],
                       "--experts", "multiple")
        c.expect_directory_error("missing --experts", ["split-ffn", "--w1", w1, "--w2", w2], "--experts", "required")
        c.expect_directory_error("missing --w2", ["split-ffn", "--w1", w1, "--experts", "2"], "--w2", "required")
        c.expect_directory_error("zero gate row", ["split-ffn", "--w1", c.path("zero.npy"), "--w2", w2, "--experts", "2"],
                       "w1 row 3 is zero")
        c.expect_directory_error("w2 shape", ["split-ffn", "--w1", w1, "--w2", c.path("bad_w2.npy"), "--experts", "2"],
                       "w2 must be 4 x 10")
        c.expect_directory_error("--b3 without --w3", ["split-ffn", "--w1", w1, "--w2", w2, "--b3", w1, "--experts", "2"],
                       "--b3", "--w3")
        print(f"{c.checks - c.failures} passed, {c.failures} failed")
        sys.exit(1 if c.failures else 0)


if __name__ == "__main__":
    main()
