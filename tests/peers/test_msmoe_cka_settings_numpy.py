#!/usr/bin/env python3
"""`moecomp compress --method m-smoe` and cka-merge's Table 3-4 settings (--similarity-tokens, --augment, --router)
end to end on the embedded model (models/tiny-moe), against an independent numpy (and scipy) transcription.

* m-smoe, 8 -> 6 and 8 -> 4: per layer the routing frequencies are numpy's top-2 counts of the router's logits;
  the dominants are the N largest (ties to the lowest index); every other expert joins the dominant whose
  logit column over the calibration tokens has the largest cosine with its own (ties to the lowest dominant);
  groups numbered by first appearance: the report's dominants and groups exactly. Each merged expert is numpy's
  weight matching (scipy's linear_sum_assignment maximising the inner products of the design rows
  [W1_i | W3_i | W2[:, i]] of the dominant and each member) followed by the frequency-weighted mean
  sum f_e theta_e / (sum f_e + 1e-7), in float64, rounded to float32
  and then to bfloat16: every written element equal, except elements whose float64 value lies within 1e-12 of the
  tensor's largest magnitude from a bfloat16 rounding boundary (counted; summation order decides those); each member's slot holds its group's expert, the router is
  the input's bytes, config.json keeps 8 experts and holds the id maps; the reported errors are numpy's forward.
* cka-merge --similarity-tokens N: the report's partition attains numpy's minimum of the within-group sum of
  1 - linear CKA (the fourth paper's Eq. 5, whose minimiser minimises that sum) of the experts' outputs on the
  first N calibration tokens, over every partition of the 8 experts into the groups (brute force).
* cka-merge --augment A: numpy's transcription of moecomp's generator (splitmix64-seeded xoshiro256**, Lemire's
  bounded integers, k 2^-24 floats) gives the mixed tokens; the report's partition attains the minimum on the
  first N tokens plus those mixes; the same seed gives the same bytes; --augment 0 gives the bytes of a run
  without the option.
* cka-merge --router map against the default (merged): the same groups and experts; the map run keeps the
  router's bytes and 8 expert slots (slot e = its group's expert of the merged run), the merged run's router
  rows are numpy's uniform mean of the members' rows rounded to bfloat16. --router dominant: the same groups and
  experts, each group's row the input's bytes of its most frequent member (numpy's top-2 counts).
* Bad input: exit 2, one "moecomp: error:" line, no OUT_DIR: m-smoe without calibration tokens,
  --similarity-tokens 0, more similarity tokens than the layer has, each new option with another method,
  --augment with --similarity weights, --router auto.

Usage: test_msmoe_cka_settings_numpy.py PATH/TO/moecomp"""
import itertools
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import require  # noqa: E402

(np, scipy_optimize) = require("numpy", "scipy.optimize")
from test_compress_python import (EMBEDDED, PREFIX, Checker, decode, experts_of, read_checkpoint,  # noqa: E402
                                  silu)

M64 = (1 << 64) - 1
AUGMENT_STREAM = 0x6175676D656E74  # "augment", compress_layer.hpp's augment_stream


# ------------------------------------------------------------------------------------------ moecomp's generator

def splitmix(state):
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M64


class Generator:
    """random_generator(seed, stream): xoshiro256** seeded by splitmix64 (core/random.hpp)."""

    def __init__(self, seed, stream):
        _, s = splitmix(seed)
        _, v = splitmix(stream ^ 0x6A09E667F3BCC909)
        s ^= v
        self.state = []
        for _ in range(4):
            s, word = splitmix(s)
            self.state.append(word)

    def next(self):
        s = self.state
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def uniform_index(self, bound):
        product = self.next() * bound
        high, low = product >> 64, product & M64
        if low < bound:
            threshold = ((1 << 64) - bound) % bound
            while low < threshold:
                product = self.next() * bound
                high, low = product >> 64, product & M64
        return high

    def uniform_float(self):
        return (self.next() >> 40) * 2.0 ** -24


def augmented_tokens(x, n, count, seed):
    """The similarity's tokens: the first n rows of x (float32), then `count` mixes."""
    head = x[:n].astype(np.float32)
    rng = Generator(seed, AUGMENT_STREAM)
    rows = []
    for _ in range(count):
        a = rng.uniform_index(n)
        b = rng.uniform_index(n)
        lam = rng.uniform_float()
        # Both products are exact in float64 (24-bit lambda times a float32), so one rounding to float64, then
        # one to float32, as the library computes.
        rows.append((lam * head[a].astype(np.float64) + (1.0 - lam) * head[b].astype(np.float64)).astype(np.float32))
    return np.concatenate([head, np.array(rows, dtype=np.float32).reshape(count, x.shape[1])]) if count else head


# ------------------------------------------------------------------------------------------ transcriptions

def frequencies(x, router, k=2):
    top = np.argsort(-(x @ router.T), axis=1, kind="stable")[:, :k]
    return np.bincount(top.ravel(), minlength=router.shape[0]) / top.size


def msmoe_groups(x, router, n):
    """M-SMoE's dominants and groups, as the docs define them."""
    f = frequencies(x, router)
    order = sorted(range(len(f)), key=lambda e: (-f[e], e))
    dominants = sorted(order[:n])
    logits = x @ router.T  # T x E
    norms = np.linalg.norm(logits, axis=0)
    joins = []
    for e in range(len(f)):
        if e in dominants:
            joins.append(e)
            continue
        best, best_d = -np.inf, dominants[0]
        for d in dominants:
            scale = norms[e] * norms[d]
            c = float(logits[:, e] @ logits[:, d]) / scale if scale > 0 else 0.0
            if c > best:
                best, best_d = c, d
        joins.append(best_d)
    labels, doms = [], []
    for e in range(len(f)):
        if joins[e] not in doms:
            doms.append(joins[e])
        labels.append(doms.index(joins[e]))
    return f, doms, labels


def aligned_frequency_merge(experts, dominant, members, f, epsilon=1e-7):
    """Weight matching of each member to the dominant (maximum total inner product of the design rows), then the
    frequency-weighted mean sum f_e theta_e / (sum f_e + epsilon), in float64."""
    def design(e):
        w1, w3, w2 = experts[e]
        return np.concatenate([w1, w3, w2.T], axis=1)
    ref = design(dominant)
    total = [np.zeros_like(m) for m in experts[dominant]]
    for e in members:
        if e == dominant:
            p = np.arange(ref.shape[0])
        else:
            rows, cols = scipy_optimize.linear_sum_assignment(ref @ design(e).T, maximize=True)
            p = cols[np.argsort(rows)]
        w1, w3, w2 = experts[e]
        total[0] += f[e] * w1[p]
        total[1] += f[e] * w3[p]
        total[2] += f[e] * w2[:, p]
    return [t / (sum(f[e] for e in members) + epsilon) for t in total]


def bf16_bits(a):
    """float32 -> bfloat16 bits, round to nearest even."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint16)


def near_bf16_boundary(v, rel=1e-12):
    """Whether float64 values are within rel times the tensor's largest magnitude of a bfloat16 rounding boundary
    (moving them that far changes their bfloat16, through float32 as the library rounds): where float64 sums in
    another order (the library's coefficients times each member, numpy's sum then one division) may round either way, e.g.
    a mean that cancels to 0 exactly in numpy and to 1e-19 in the library."""
    eps = rel * float(np.abs(v).max())
    return bf16_bits((v - eps).astype(np.float32)) != bf16_bits((v + eps).astype(np.float32))


def expert_outputs(x, experts):
    return [(silu(x @ w1.T) * (x @ w3.T)) @ w2.T for w1, w3, w2 in experts]


def cka_distances(outputs):
    centred = [o - o.mean(axis=0, keepdims=True) for o in outputs]
    gram = [np.linalg.norm(c.T @ c) for c in centred]
    n = len(outputs)
    d = np.zeros((n, n))
    for a in range(n):
        for b in range(n):
            if a != b:
                cka = np.linalg.norm(centred[a].T @ centred[b]) ** 2 / (gram[a] * gram[b])
                d[a, b] = 1.0 - cka
    return d


def partitions(n, k):
    """Every partition of range(n) into k non-empty groups, each once: label lists numbered by first appearance."""
    for labels in itertools.product(range(k), repeat=n):
        seen = 0
        for g in labels:
            if g > seen:
                break
            seen = max(seen, g + 1)
        else:
            if seen == k:
                yield list(labels)


def within(d, labels):
    lab = np.array(labels)
    return float(sum(d[np.ix_(lab == g, lab == g)].sum() for g in set(labels)))


def labels_of(groups):
    labels = [0] * sum(len(g) for g in groups)
    for g, members in enumerate(groups):
        for e in members:
            labels[e] = g
    return labels


# ------------------------------------------------------------------------------------------ the checks

class Settings(Checker):

    def shard_bytes(self, out):
        return b"".join(open(os.path.join(out, f), "rb").read() for f in sorted(os.listdir(out)) if f.endswith(".safetensors"))

    def msmoe(self, n):
        label = f"m-smoe --experts {n}"
        out = self.path(f"msmoe{n}")
        report = self.compress(label, out, "--method", "m-smoe", "--experts", str(n), "--expert-storage", "duplicated")
        if not report:
            return
        written = self.common(label, out, report, 8)
        config = json.load(open(os.path.join(out, "config.json")))
        self.check(f"{label}: id maps in config.json", config["moecomp_compression"]["id_maps"] == {
            l["layer"]: l["id_map"] for l in report["layers"]}, "as the report")
        self.check(f"{label}: options", report["options"]["merge"] == "frequency" and report["options"]["router"] == "map",
                   str(report["options"]))
        bad_groups = bad_bytes = ambiguous = ambiguous_differ = compared = 0
        for i, layer in enumerate(report["layers"]):
            x = self.calibration[f"layers.{i}.moe_input"]
            router = decode(self.original[f"{PREFIX.format(i)}gate.weight"])
            f, doms, labels = msmoe_groups(x, router, n)
            ok = (layer["dominants"] == doms and labels_of(layer["groups"]) == labels and layer["id_map"] == labels
                  and np.allclose(layer["frequencies"], f, rtol=0, atol=1e-12) and layer["router"] == "map")
            if not ok:
                print(f"     layer {i}: moecomp dominants {layer['dominants']} groups {layer['groups']}, numpy {doms} {labels}")
            bad_groups += int(not ok)
            bad_bytes += int(written[f"{PREFIX.format(i)}gate.weight"] != self.original[f"{PREFIX.format(i)}gate.weight"])
            experts = experts_of(self.original, i, 8)
            merged = [aligned_frequency_merge(experts, d, [e for e in range(8) if labels[e] == g], f)
                      for g, d in enumerate(doms)]
            for e in range(8):
                for k, w in enumerate(("w1", "w3", "w2")):
                    dtype, shape, raw = written[f"{PREFIX.format(i)}experts.{e}.{w}.weight"]
                    got = np.frombuffer(raw, dtype="<u2").reshape(shape)
                    want64 = merged[labels[e]][k]
                    want = bf16_bits(want64.astype(np.float32))
                    edge = near_bf16_boundary(want64)
                    differ = got != want
                    ambiguous += int(edge.sum())
                    ambiguous_differ += int((differ & edge).sum())
                    compared += got.size
                    bad_bytes += int((differ & ~edge).sum())
        self.check(f"{label}: dominants, groups, frequencies as numpy's", bad_groups == 0, f"{bad_groups} layers differ")
        self.check(f"{label}: merged experts (weight matching, frequency mean) and the kept router as numpy's in bf16",
                   bad_bytes == 0, f"{bad_bytes} differences in {compared} elements; {ambiguous} at a rounding boundary, "
                   f"{ambiguous_differ} of them rounded the other way")

    def partition_check(self, label, report, tokens_of):
        """The report's partition of each layer attains numpy's minimum within-group sum."""
        worst = 0.0
        for i, layer in enumerate(report["layers"]):
            xs = tokens_of(i)
            d = cka_distances(expert_outputs(xs.astype(np.float64), experts_of(self.original, i, 8)))
            best = min(within(d, p) for p in partitions(8, len(layer["groups"])))
            mine = within(d, labels_of(layer["groups"]))
            worst = max(worst, (mine - best) / best)
        self.check(f"{label}: each layer's partition is numpy's optimum", worst <= 1e-5,
                   f"worst relative excess {worst:.1e}")

    def similarity_tokens(self):
        for n in (32, 256):
            label = f"cka-merge --similarity-tokens {n}"
            out = self.path(f"simtok{n}")
            report = self.compress(label, out, "--method", "cka-merge", "--similarity-tokens", str(n))
            if not report:
                continue
            self.common(label, out, report, 4)
            self.check(f"{label}: recorded", report["options"]["similarity_tokens"] == n and all(
                l["similarity_tokens"] == n and l["augmented_tokens"] == 0 and l["calibration_tokens"] == 1024
                for l in report["layers"]), str(report["options"]))
            self.partition_check(label, report, lambda i: self.calibration[f"layers.{i}.moe_input"][:n])

    def augment(self):
        plain = self.path("plain")
        base = self.compress("cka-merge (default)", plain, "--method", "cka-merge")
        zero = self.path("aug0")
        self.compress("cka-merge --augment 0", zero, "--method", "cka-merge", "--augment", "0")
        self.check("--augment 0: the bytes of a run without it", self.shard_bytes(plain) == self.shard_bytes(zero), "shards")
        if base:
            self.partition_check("cka-merge (all tokens)", base, lambda i: self.calibration[f"layers.{i}.moe_input"])
        reports = {}
        for seed in (0, 5):
            label = f"cka-merge --similarity-tokens 64 --augment 192 --seed {seed}"
            out = self.path(f"aug{seed}")
            report = self.compress(label, out, "--method", "cka-merge", "--similarity-tokens", "64", "--augment",
                                   "192", "--seed", str(seed))
            if not report:
                continue
            reports[seed] = report
            self.common(label, out, report, 4)
            self.check(f"{label}: recorded", report["options"]["augment"] == 192 and all(
                l["augmented_tokens"] == 192 and l["similarity_tokens"] == 64 for l in report["layers"]), "per layer")
            self.partition_check(label, report, lambda i, seed=seed: augmented_tokens(
                self.calibration[f"layers.{i}.moe_input"], 64, 192, seed))
            again = self.path(f"aug{seed}-again")
            self.compress(label + " (again)", again, "--method", "cka-merge", "--similarity-tokens", "64", "--augment",
                          "192", "--seed", str(seed))
            self.check(f"{label}: the same bytes twice", self.shard_bytes(out) == self.shard_bytes(again), "shards")
        if len(reports) == 2:
            differ = sum(a["groups"] != b["groups"] for a, b in zip(reports[0]["layers"], reports[5]["layers"]))
            print(f"     seeds 0 and 5: {differ} of 4 layers grouped differently")

    def router_map(self):
        merged_out, map_out = self.path("merged"), self.path("map")
        merged = self.compress("cka-merge --router merged", merged_out, "--method", "cka-merge", "--router", "merged")
        mapped = self.compress("cka-merge --router map", map_out, "--method", "cka-merge", "--router", "map",
                               "--expert-storage", "duplicated")
        if not merged or not mapped:
            return
        w_merged = self.common("cka-merge --router merged", merged_out, merged, 4)
        w_map = self.common("cka-merge --router map", map_out, mapped, 8)
        config = json.load(open(os.path.join(map_out, "config.json")))
        bad = 0
        for i, (a, b) in enumerate(zip(merged["layers"], mapped["layers"])):
            p = PREFIX.format(i)
            bad += int(a["groups"] != b["groups"] or a["router"] != "merged" or b["router"] != "map")
            labels = labels_of(b["groups"])
            bad += int(b["id_map"] != labels or config["moecomp_compression"]["id_maps"][b["layer"]] != labels)
            bad += int(w_map[f"{p}gate.weight"] != self.original[f"{p}gate.weight"])
            for e in range(8):
                for w in ("w1", "w3", "w2"):
                    bad += int(w_map[f"{p}experts.{e}.{w}.weight"] != w_merged[f"{p}experts.{labels[e]}.{w}.weight"])
            router = decode(self.original[f"{p}gate.weight"])
            rows = np.stack([router[[e for e in range(8) if labels[e] == g]].mean(axis=0) for g in range(4)])
            got = np.frombuffer(w_merged[f"{p}gate.weight"][2], dtype="<u2").reshape(4, 128)
            edge = near_bf16_boundary(rows)
            bad += int(((got != bf16_bits(rows.astype(np.float32))) & ~edge).sum())
        self.check("cka-merge --router map vs merged: groups, experts, kept router, id maps, merged rows", bad == 0,
                   f"{bad} differences")
        dom_out = self.path("dominant-rows")
        dominant = self.compress("cka-merge --router dominant", dom_out, "--method", "cka-merge", "--router", "dominant")
        if dominant:
            w_dom = self.common("cka-merge --router dominant", dom_out, dominant, 4)
            bad = 0
            for i, (a, b) in enumerate(zip(merged["layers"], dominant["layers"])):
                p = PREFIX.format(i)
                bad += int(a["groups"] != b["groups"] or b["router"] != "dominant")
                raw = w_dom[f"{p}gate.weight"][2]
                original = self.original[f"{p}gate.weight"][2]
                row = 128 * 2
                f = frequencies(self.calibration[f"layers.{i}.moe_input"], decode(self.original[f"{p}gate.weight"]))
                for g, d in enumerate(b["dominants"]):
                    most = max(b["groups"][g], key=lambda e: (f[e], -e))  # the most frequent, ties to the lowest
                    bad += int(d != most or raw[g * row:(g + 1) * row] != original[d * row:(d + 1) * row])
                for g in range(4):
                    for w in ("w1", "w3", "w2"):
                        bad += int(w_dom[f"{p}experts.{g}.{w}.weight"] != w_merged[f"{p}experts.{g}.{w}.weight"])
            self.check("cka-merge --router dominant: each group's row is its most frequent member's bytes, the experts "
                       "as merged's",
                       bad == 0, f"{bad} differences")

    def errors(self):
        bare = self.path("bare")
        os.makedirs(bare, exist_ok=True)
        for name in ("config.json", "model.safetensors"):
            if not os.path.exists(os.path.join(bare, name)):
                os.symlink(os.path.join(EMBEDDED, name), os.path.join(bare, name))
        self.expect_directory_error("m-smoe without calibration", ["compress", bare, "--method", "m-smoe"],
                                    "m-smoe", "calibration")
        self.expect_directory_error("--similarity-tokens 0", ["compress", "--method", "cka-merge", "--similarity-tokens",
                                                              "0"], "--similarity-tokens")
        self.expect_directory_error("more similarity tokens than the layer has",
                                    ["compress", "--method", "cka-merge", "--similarity-tokens", "5000"],
                                    "--similarity-tokens", "5000", "1024")
        for option, value, method in (("--similarity-tokens", "16", "hc-smoe"), ("--augment", "4", "m-smoe"),
                                      ("--router", "map", "prune"), ("--router", "map", "m-smoe")):
            self.expect_directory_error(f"{option} with {method}", ["compress", "--method", method, option, value],
                                        option, "cka-merge only")
        self.expect_directory_error("--augment with --similarity weights",
                                    ["compress", "--method", "cka-merge", "--similarity", "weights", "--augment", "4"],
                                    "--augment", "cka")
        self.expect_directory_error("--router auto", ["compress", "--method", "cka-merge", "--router", "auto"],
                                    "--router", "auto")
        self.expect_directory_error("--merge with m-smoe", ["compress", "--method", "m-smoe", "--merge", "uniform"],
                                    "--merge")


def main():
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        c = Settings(tool, tmp)
        for n in (6, 4):
            c.msmoe(n)
        c.similarity_tokens()
        c.augment()
        c.router_map()
        c.errors()
        print(f"{c.checks - c.failures} of {c.checks} checks passed")
        return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
