#!/usr/bin/env python3
"""`moecomp dispatch` checked against torch's stable sort + bincount and a transcription of vLLM's
moe_align_block_size.

* counts = torch.bincount of the ids (sentinel E excluded); the pairs in expert order = torch.sort(stable=True)
  of the flat ids (block size 1: sorted_token_ids is exactly that order, expert_ids the sorted ids).
* Padding: the moe_align_block_size transcription (per expert, its pairs in flat order, then the sentinel
  T*K up to a multiple of the block size; one expert id per block; offsets = cumulative padded counts).
* Invariants: every kept (token, slot) pair appears exactly once; capacity keeps each expert's earliest pairs.
* The error contract: ids outside [0, E], a float array, a zero block size, a missing --experts.

Usage: test_dispatch_torch.py PATH/TO/moecomp"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

np, torch = require("numpy", "torch")


def align_block_size(ids, e, block, capacity=0):
    """vLLM's moe_align_block_size semantics, written out (plus GShard capacity, earlier pairs first)."""
    flat = ids.ravel()
    sentinel = flat.size
    per_expert = [[] for _ in range(e)]
    for p, x in enumerate(flat):
        if x == e:
            continue
        if capacity and len(per_expert[x]) >= capacity:
            continue
        per_expert[x].append(p)
    sorted_ids, expert_ids, offsets = [], [], [0]
    for x in range(e):
        run = per_expert[x]
        padded = -(-len(run) // block) * block
        sorted_ids += run + [sentinel] * (padded - len(run))
        expert_ids += [x] * (padded // block)
        offsets.append(offsets[-1] + padded)
    counts = [len(r) for r in per_expert]
    return [np.array(v, dtype=np.int64) for v in (sorted_ids, expert_ids, counts, offsets)]


class Checker(ToolRunner):

    def plan(self, ids, e, *args):
        np.save(self.path("ids.npy"), ids)
        out = self.path("plan")
        r = self.run("dispatch", self.path("ids.npy"), "--experts", str(e), "-o", out, "--json", *args)
        if r.returncode != 0:
            return None, r.stderr.strip()
        return {n: np.load(os.path.join(out, n + ".npy")) for n in ("sorted_token_ids", "expert_ids", "counts", "offsets")}, \
            json.loads(r.stdout)

    def run_checks(self, rng):
        for t, k, e in [(100, 2, 8), (257, 4, 16), (64, 8, 60)]:
            ids = np.stack([rng.choice(e, k, replace=False) for _ in range(t)]).astype(np.int64)
            ids[rng.random(ids.shape) < 0.05] = e  # a few unused slots
            got, j = self.plan(ids, e)
            flat = torch.from_numpy(ids.ravel())
            used = flat[flat != e]
            counts = torch.bincount(used, minlength=e).numpy()
            order = torch.sort(flat, stable=True).indices.numpy()
            order = order[ids.ravel()[order] != e]
            ok = got is not None and np.array_equal(got["counts"], counts) \
                and np.array_equal(got["sorted_token_ids"], order) \
                and np.array_equal(got["expert_ids"], ids.ravel()[order])
            self.check(f"T={t} K={k} E={e}: torch stable sort + bincount", ok, j if got is None else "equal")
            for block in (4, 16, 64):
                for capacity in (0, 7):
                    # --repeat builds the same plan several times (the last one is written)
                    got, j = self.plan(ids, e, "--block-size", str(block), *(["--capacity", str(capacity)] if capacity else []),
                                       *(["--repeat", "3"] if block == 16 else []))
                    ref = align_block_size(ids, e, block, capacity)
                    ok = got is not None and all(np.array_equal(got[n], r) for n, r in
                                                 zip(("sorted_token_ids", "expert_ids", "counts", "offsets"), ref))
                    if ok:  # every kept pair once, the padding the sentinel
                        s = got["sorted_token_ids"]
                        real = s[s != ids.size]
                        ok = len(real) == len(set(real.tolist())) == int(got["counts"].sum()) \
                            and j["num_tokens_post_pad"] == len(s) and len(s) % block == 0
                    self.check(f"T={t} K={k} E={e} block {block} capacity {capacity}: moe_align_block_size", ok,
                               j if got is None else "equal")

    def errors(self, rng):
        ids = rng.integers(0, 4, size=(6, 2)).astype(np.int64)
        np.save(self.path("ok.npy"), ids)
        bad = ids.copy()
        bad[2, 1] = 9
        np.save(self.path("bad.npy"), bad)
        np.save(self.path("float.npy"), ids.astype(np.float64))
        self.expect_error("id > E", ["dispatch", self.path("bad.npy"), "--experts", "4"], "(2, 1)", "9")
        self.expect_error("float ids", ["dispatch", self.path("float.npy"), "--experts", "4"], "int32 or int64")
        self.expect_error("block 0", ["dispatch", self.path("ok.npy"), "--experts", "4", "--block-size", "0"],
                          "--block-size")
        self.expect_error("no --experts", ["dispatch", self.path("ok.npy")], "--experts")
        self.expect_error("--repeat -1", ["dispatch", self.path("ok.npy"), "--experts", "4", "--repeat", "-1"], "--repeat")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    rng = np.random.default_rng(20261124)
    with tempfile.TemporaryDirectory(prefix="moecomp-dispatch-") as tmp:
        c = Checker(sys.argv[1], tmp)
        c.run_checks(rng)
        c.errors(rng)
    print(f"{c.checks - c.failures} of {c.checks} checks passed")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
