#!/usr/bin/env python3
"""`moecomp prune` checked against torch.nn.utils.prune.l1_unstructured (torch's L1Unstructured mask).

* Tie-free data (distinct magnitudes by construction), float32 and float64, several shapes and amounts,
  including amounts whose count round(amount x size) is a half rounded to even (torch uses Python's round):
  the kept set equals torch's mask exactly, and --json's kept count equals torch's.
* --keep F keeps size - round((1 - F) x size) entries.
* Tied data: ties at the threshold are kept by the lowest flat index (torch's topk order is unspecified, so
  this is checked against its definition, not against torch).
* Row, column-block and 2:4 scopes against numpy transcriptions of their definitions.
* The error contract: exit 2, one "moecomp: error:" line naming the option, no output file.

Usage: test_prune_torch.py PATH/TO/moecomp"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

np, torch = require("numpy", "torch")
import torch.nn.utils.prune as torch_prune  # noqa: E402


def distinct(rng, shape, dtype):
    size = int(np.prod(shape))
    mags = (rng.permutation(size) + 1).astype(np.float64) / size
    signs = np.where(rng.random(size) < 0.5, -1.0, 1.0)
    return (mags * signs).reshape(shape).astype(dtype)


def torch_mask(w, amount):
    t = torch.from_numpy(np.ascontiguousarray(w))
    return torch_prune.L1Unstructured(amount=amount).compute_mask(t, default_mask=torch.ones_like(t)).numpy() != 0


def keep_by_rule(w, kept):
    """The definition: the `kept` largest |w|, ties kept by the lowest flat index."""
    flat = np.abs(w.astype(np.float64)).ravel()
    order = np.lexsort((np.arange(flat.size), -flat))  # by |w| descending, then index ascending
    mask = np.zeros(flat.size, dtype=bool)
    mask[order[:kept]] = True
    return mask.reshape(w.shape)


class Checker(ToolRunner):

    def prune(self, w, *args):
        np.save(self.path("w.npy"), w)
        out = self.path("p.npy")
        r = self.run("prune", self.path("w.npy"), "-o", out, "--json", *args)
        if r.returncode != 0:
            return None, None, r.stderr.strip()
        return np.load(out), json.loads(r.stdout), ""

    def against_torch(self, rng):
        cases = [((1, 5), 0.5), ((1, 7), 0.5), ((5, 5), 0.1), ((5, 5), 0.3), ((64, 96), 0.75), ((64, 96), 0.25),
                 ((128, 384), 0.75), ((3, 333), 0.5), ((10, 10), 0.0), ((10, 10), 1.0), ((33, 77), 0.9)]
        for shape, amount in cases:
            for dtype in (np.float64, np.float32):
                w = distinct(rng, shape, dtype)
                p, j, err = self.prune(w, "--sparsity", repr(amount))
                mask = torch_mask(w, amount)
                ok = p is not None and np.array_equal(p != 0, mask) and np.array_equal(p[mask], w[mask]) \
                    and j["kept"] == int(mask.sum())
                self.check(f"sparsity {amount} {shape} {np.dtype(dtype).name}", ok,
                           err or f"kept {j['kept']} (torch {int(mask.sum())})")
        w = distinct(rng, (7, 9), np.float64)
        for keep in (0.25, 0.5, 0.9):
            p, j, err = self.prune(w, "--keep", repr(keep))
            kept = w.size - round((1 - keep) * w.size)
            ok = p is not None and np.array_equal(p != 0, keep_by_rule(w, kept))
            self.check(f"keep {keep} (7, 9)", ok, err or f"kept {j['kept']}, expected {kept}")

    def ties(self, rng):
        w = rng.integers(-3, 4, size=(20, 30)).astype(np.float64)
        w[w == 0] = 1.0
        for amount in (0.3, 0.5, 0.8):
            p, j, err = self.prune(w, "--sparsity", repr(amount))
            kept = w.size - round(amount * w.size)
            ok = p is not None and np.array_equal(p != 0, keep_by_rule(w, kept)) and j["kept"] == kept
            self.check(f"ties: lowest flat index kept, sparsity {amount}", ok, err or f"kept {j['kept']}")

    def scopes(self, rng):
        w = distinct(rng, (12, 40), np.float64)
        p, _, err = self.prune(w, "--sparsity", "0.5", "--scope", "row")
        ref = np.stack([keep_by_rule(w[i:i + 1], 40 - round(0.5 * 40))[0] for i in range(12)])
        self.check("row scope", p is not None and np.array_equal(p != 0, ref), err or "per-row definition")
        p, _, err = self.prune(w, "--sparsity", "0.75", "--scope", "column-block", "--column-block", "16")
        ref = np.zeros_like(ref)
        for c0 in range(0, 40, 16):
            blk = w[:, c0:c0 + 16]
            ref[:, c0:c0 + 16] = keep_by_rule(blk, blk.size - round(0.75 * blk.size))
        self.check("column-block scope", p is not None and np.array_equal(p != 0, ref), err or "per-block definition")
        p, j, err = self.prune(w, "--scope", "2:4")
        ref = np.zeros_like(ref)
        for i in range(12):
            for g in range(0, 40, 4):
                ref[i, g:g + 4] = keep_by_rule(w[i:i + 1, g:g + 4], 2)[0]
        self.check("2:4 scope", p is not None and np.array_equal(p != 0, ref) and j["kept"] == w.size // 2,
                   err or "2 of every 4")

    def errors(self, rng):
        w = distinct(rng, (4, 6), np.float64)
        np.save(self.path("e.npy"), w)
        bad = w.copy()
        bad[1, 2] = np.nan
        np.save(self.path("nan.npy"), bad)
        e = self.path("e.npy")
        self.expect_error("sparsity > 1", ["prune", e, "--sparsity", "1.5"], "--sparsity", "[0, 1]")
        self.expect_error("both", ["prune", e, "--sparsity", "0.5", "--keep", "0.5"], "--keep", "not both")
        self.expect_error("neither", ["prune", e], "--sparsity")
        self.expect_error("2:4 on 6 columns? no: 4:5", ["prune", e, "--scope", "4:5"], "--scope", "multiple")
        self.expect_error("bad scope", ["prune", e, "--sparsity", "0.5", "--scope", "diagonal"], "--scope", "diagonal")
        self.expect_error("NaN", ["prune", self.path("nan.npy"), "--sparsity", "0.5"], "nan.npy", "(1, 2)")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    rng = np.random.default_rng(20261124)
    with tempfile.TemporaryDirectory(prefix="moecomp-prune-") as tmp:
        c = Checker(sys.argv[1], tmp)
        c.against_torch(rng)
        c.ties(rng)
        c.scopes(rng)
        c.errors(rng)
    print(f"{c.checks - c.failures} of {c.checks} checks passed")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
