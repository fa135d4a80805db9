#!/usr/bin/env python3
"""ResMoE's ablations (`moecomp compress --method resmoe --center C --residual R [--rank K]`) on the embedded
model (models/tiny-moe, bf16, 4 layers of 8 experts, d_ff 256, d 128), against a numpy transcription of
docs/compress.md ("resmoe's ablations") read from the written files:

* --center mean: the base is the element-wise mean of the experts' design matrices [W1 | W3 | W2^T] (float64,
  then float32, then bf16), no permutations are stored; the residual files hold D = design - base pruned to
  256 * 384 - round(0.75 * 256 * 384) entries of largest |D| (ties to the lowest flat index), bf16 values.
* --center none --residual prune (UP): no base, no permutations; the residuals are each expert pruned alone.
* --center none --residual structured (SP): each expert keeps exactly its 64 neurons (256 - round(0.75 * 256))
  of largest design-row norm ||[W1_i | W3_i | W2[:, i]]||; the kept rows are the weights, the rest zero.
* --residual svd --values fp32: the factors u (256 x 38, U_k S_k) and v (38 x 384, V_k^T) reproduce
  numpy.linalg.svd's rank-38 truncation of D (38 = floor(0.25 * 256 * 384 / 640), ResMoE's Appendix A.5) to
  1e-6 relative Frobenius error (float32 factors: each entry within 2^-24 relative), v's rows orthonormal to
  1e-6, ||u[:, r]|| = sigma_r to 1e-6; --rank 5 with the barycenter stores rank-5 factors and the permutations.
* Every variant: ResMoE's Appendix A.6 error (mean over experts of ||D - stored||_F^2, over d_ff) is numpy's
  to 1e-6 relative; dense/ (--restore-dense) holds bf16(base + stored residual), un-permuted (svd: within one
  bf16 unit, the float32 product's rounding may differ).
* Bad input: exit 2, one `moecomp: error:` line naming the option, no OUT_DIR: an unknown --center, --rank
  above min(d_ff, 3 d) = 256, --rank without --residual svd, --center / --residual with another method.

Usage: test_resmoe_ablations_numpy.py PATH/TO/moecomp"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

(np,) = require("numpy")
import residual_format  # noqa: E402
from test_compress_python import EMBEDDED, PREFIX, bf16_round, decode, read_checkpoint  # noqa: E402

E, I, H, L = 8, 256, 128, 4
W = 3 * H


def py_round(x):
    """Python's round (half to even) of a float, as the library counts."""
    return int(round(x))


def design(tensors, layer, e):
    p = f"{PREFIX.format(layer)}experts.{e}."
    return np.concatenate([decode(tensors[p + "w1.weight"]), decode(tensors[p + "w3.weight"]),
                           decode(tensors[p + "w2.weight"]).T], axis=1)


def stored_residual(stored, layer, e):
    """The decoded residual files of expert e in the design layout (I x 3H, float64)."""
    p = f"{PREFIX.format(layer)}resmoe.experts.{e}."
    parts = [residual_format.decode(stored[p + w + ".residual"][2])[0].astype(np.float64) for w in ("w1", "w3", "w2")]
    return np.concatenate([parts[0], parts[1], parts[2].T], axis=1)


def magnitude_prune(d, keep):
    """l1_unstructured with the library's tie rule: the kept entries of largest |d|, ties to the lowest flat index."""
    flat = d.ravel()
    kept = flat.size - py_round((1.0 - keep) * flat.size)
    order = np.lexsort((np.arange(flat.size), -np.abs(flat)))[:kept]
    out = np.zeros_like(flat)
    out[order] = flat[order]
    return out.reshape(d.shape)


class Checker(ToolRunner):

    def __init__(self, tool, tmp):
        super().__init__(tool, tmp)
        self.original = read_checkpoint(EMBEDDED)

    def compress(self, label, *args):
        out = self.path(label.replace(" ", "_"))
        if os.path.exists(out):
            shutil.rmtree(out)
        r = self.run("compress", "-o", out, "--quiet", "--method", "resmoe", *args)
        self.check(f"{label}: exit 0", r.returncode == 0, r.stderr.strip()[-300:])
        if r.returncode != 0:
            return None, None, None
        report = json.load(open(os.path.join(out, "compression_report.json")))
        dense = read_checkpoint(os.path.join(out, "dense")) if "--restore-dense" in args else None
        return read_checkpoint(out), report, dense

    def names(self, label, stored, base, perms, svd):
        moe = {n for n in stored if ".block_sparse_moe." in n}
        want = {f"{PREFIX.format(i)}gate.weight" for i in range(L)}
        for i in range(L):
            p = f"{PREFIX.format(i)}resmoe."
            if base:
                want |= {p + f"base.{w}.weight" for w in ("w1", "w3", "w2")}
            if perms:
                want.add(p + "permutations")
            for e in range(E):
                want |= ({p + f"experts.{e}.svd.u", p + f"experts.{e}.svd.v"} if svd else
                         {p + f"experts.{e}.{w}.residual" for w in ("w1", "w3", "w2")})
        self.check(f"{label}: the stored tensors", moe == want, f"{len(moe)} MoE tensors, want {len(want)}; "
                   f"extra {sorted(moe - want)[:3]}, missing {sorted(want - moe)[:3]}")

    def base_of(self, stored, layer):
        p = f"{PREFIX.format(layer)}resmoe.base."
        if p + "w1.weight" not in stored:
            return np.zeros((I, W))
        return np.concatenate([decode(stored[p + "w1.weight"]), decode(stored[p + "w3.weight"]),
                               decode(stored[p + "w2.weight"]).T], axis=1)

    def perms_of(self, stored, layer):
        name = f"{PREFIX.format(layer)}resmoe.permutations"
        if name not in stored:
            return np.tile(np.arange(I), (E, 1))
        return np.frombuffer(stored[name][2], dtype="<i4").reshape(E, I)

    def dense_matches(self, label, dense, stored_of, tolerance_ulps=0):
        """dense/ expert e = bf16(base + stored residual), row i = design row p(i)."""
        worst, bad = 0.0, 0
        for i in range(L):
            for e in range(E):
                base, perm, resid = stored_of(i, e)
                want = bf16_round((base.astype(np.float32) + resid.astype(np.float32))[perm])
                got = design(dense, i, e)
                diff = np.abs(got - want)
                unit = np.maximum(np.abs(want), 1e-30) * 2.0 ** -8
                bad += int((diff > tolerance_ulps * unit).sum())
                worst = max(worst, float((diff / unit).max()))
        self.check(f"{label}: dense/ is bf16(base + stored residual)", bad == 0,
                   f"{bad} entries off by more than {tolerance_ulps} bf16 units (worst {worst:.2f})")

    def a6(self, label, report, squared):
        worst = 0.0
        for i, layer in enumerate(report["layers"]):
            want = np.mean(squared[i]) / I
            worst = max(worst, abs(layer["resmoe_approximation_error"] - want) / want)
        self.check(f"{label}: Appendix A.6 error is numpy's", worst <= 1e-6, f"worst relative difference {worst:.1e}")
        return [np.mean(s) / I for s in squared]


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(sys.argv[1], tmp)
        orig = c.original

        # --center mean: the unaligned mean, magnitude-pruned residuals.
        stored, report, dense = c.compress("mean prune", "--center", "mean", "--restore-dense")
        if stored:
            c.names("mean prune", stored, base=True, perms=False, svd=False)
            bad_base = bad_res = 0
            squared = []
            for i in range(L):
                designs = [design(orig, i, e) for e in range(E)]
                base = c.base_of(stored, i)
                bad_base += int(not np.array_equal(base, bf16_round(np.mean(designs, axis=0).astype(np.float32))))
                row = []
                for e in range(E):
                    d = designs[e] - base
                    want = bf16_round(magnitude_prune(d, 0.25).astype(np.float32))
                    got = stored_residual(stored, i, e)
                    bad_res += int(not np.array_equal(got, want))
                    row.append(float(((d - got) ** 2).sum()))
                squared.append(row)
            c.check("mean prune: base = bf16(mean of the unaligned experts)", bad_base == 0, f"{bad_base} of {L} differ")
            c.check("mean prune: residual = the 25% largest |design - base|, bf16", bad_res == 0,
                    f"{bad_res} of {L * E} experts differ")
            c.a6("mean prune", report, squared)
            c.dense_matches("mean prune", dense, lambda i, e: (c.base_of(stored, i), np.arange(I),
                                                                stored_residual(stored, i, e)))
            c.check("mean prune: report and config name the centre",
                    report["options"]["center"] == "mean" and report["options"]["residual"] == "prune" and
                    json.load(open(c.path("mean_prune/config.json")))["moecomp_compression"]["center"] == "mean",
                    str(report["options"]))

        # --center none --residual prune: UP, each expert alone.
        stored, report, _ = c.compress("none prune", "--center", "none")
        if stored:
            c.names("none prune", stored, base=False, perms=False, svd=False)
            bad, squared = 0, []
            for i in range(L):
                row = []
                for e in range(E):
                    d = design(orig, i, e)
                    got = stored_residual(stored, i, e)
                    bad += int(not np.array_equal(got, magnitude_prune(d, 0.25)))
                    row.append(float(((d - got) ** 2).sum()))
                squared.append(row)
            c.check("none prune (UP): each expert's 25% largest weights, exactly", bad == 0, f"{bad} of {L * E} differ")
            c.a6("none prune", report, squared)

        # --center none --residual structured: SP, the 64 neurons of largest design-row norm.
        stored, report, dense = c.compress("none structured", "--center", "none", "--residual", "structured",
                                           "--restore-dense")
        if stored:
            c.names("none structured", stored, base=False, perms=False, svd=False)
            bad, squared = 0, []
            for i in range(L):
                row = []
                for e in range(E):
                    d = design(orig, i, e)
                    norms = (d ** 2).sum(axis=1)
                    keep = np.sort(np.lexsort((np.arange(I), -norms))[:I - py_round(0.75 * I)])
                    got = stored_residual(stored, i, e)
                    rows = np.flatnonzero(np.abs(got).sum(axis=1) > 0)
                    bad += int(not (np.array_equal(rows, keep) and np.array_equal(got[keep], d[keep])))
                    row.append(float(((d - got) ** 2).sum()))
                squared.append(row)
            c.check("none structured (SP): exactly the 64 neurons of largest row norm, their weights", bad == 0,
                    f"{bad} of {L * E} experts differ")
            c.a6("none structured", report, squared)
            c.dense_matches("none structured", dense, lambda i, e: (np.zeros((I, W)), np.arange(I),
                                                                     stored_residual(stored, i, e)))

        # --residual svd --values fp32 on the mean centre: numpy.linalg.svd's truncation.
        stored, report, dense = c.compress("mean svd", "--center", "mean", "--residual", "svd", "--values", "fp32",
                                           "--restore-dense")
        k = (I * W) // 4 // (I + W)  # floor(0.25 * 256 * 384 / 640) = 38
        if stored:
            c.names("mean svd", stored, base=True, perms=False, svd=True)
            c.check("mean svd: the budget rank", k == 38 and report["options"]["rank"] == k and
                    json.load(open(c.path("mean_svd/config.json")))["moecomp_compression"]["rank"] == k,
                    f"rank {report['options']['rank']}")
            worst_r = worst_o = worst_s = worst_tail = 0.0
            squared = []
            for i in range(L):
                base = c.base_of(stored, i)
                row = []
                for e in range(E):
                    p = f"{PREFIX.format(i)}resmoe.experts.{e}.svd."
                    u, v = decode(stored[p + "u"]), decode(stored[p + "v"])
                    d = design(orig, i, e) - base
                    U, S, Vt = np.linalg.svd(d, full_matrices=False)
                    rk = (U[:, :k] * S[:k]) @ Vt[:k]
                    got = u @ v
                    worst_r = max(worst_r, np.linalg.norm(got - rk) / np.linalg.norm(rk))
                    worst_o = max(worst_o, np.abs(v @ v.T - np.eye(k)).max())
                    worst_s = max(worst_s, np.abs(np.linalg.norm(u, axis=0) / S[:k] - 1).max())
                    err = float(((d - got) ** 2).sum())
                    worst_tail = max(worst_tail, abs(err - (S[k:] ** 2).sum()) / (S[k:] ** 2).sum())
                    row.append(err)
                squared.append(row)
            c.check("mean svd: u v is numpy's rank-38 truncation", worst_r <= 1e-6, f"worst relative error {worst_r:.1e}")
            c.check("mean svd: v's rows orthonormal", worst_o <= 1e-6, f"worst |v v^T - I| {worst_o:.1e}")
            c.check("mean svd: ||u[:, r]|| is sigma_r", worst_s <= 1e-6, f"worst relative difference {worst_s:.1e}")
            c.check("mean svd: the error is the tail's sum of sigma^2", worst_tail <= 1e-4, f"worst {worst_tail:.1e}")
            c.a6("mean svd", report, squared)
            c.check("mean svd: residual bytes = (256 + 384) x 38 x 4 per expert",
                    all(b == (I + W) * k * 4 for layer in report["layers"] for b in layer["residual_bytes"]),
                    str(report["layers"][0]["residual_bytes"][:2]))

            def svd_stored(i, e):
                p = f"{PREFIX.format(i)}resmoe.experts.{e}.svd."
                return c.base_of(stored, i), np.arange(I), decode(stored[p + "u"]) @ decode(stored[p + "v"])
            c.dense_matches("mean svd", dense, svd_stored, tolerance_ulps=1)

        # --rank with the barycenter: the permutations stored, rank-5 factors.
        stored, report, _ = c.compress("barycenter svd rank 5", "--residual", "svd", "--rank", "5")
        if stored:
            c.names("barycenter svd rank 5", stored, base=True, perms=True, svd=True)
            shapes = {stored[f"{PREFIX.format(i)}resmoe.experts.{e}.svd.{f}"][1] for i in range(L) for e in range(E)
                      for f in ("u", "v")}
            c.check("barycenter svd rank 5: factor shapes, bf16", shapes == {(I, 5), (5, W)} and
                    stored[f"{PREFIX.format(0)}resmoe.experts.0.svd.u"][0] == "BF16", str(shapes))
            squared = []
            for i in range(L):
                base, perms = c.base_of(stored, i), c.perms_of(stored, i)
                row = []
                for e in range(E):
                    p = f"{PREFIX.format(i)}resmoe.experts.{e}.svd."
                    d = np.empty((I, W))
                    d[perms[e]] = design(orig, i, e)  # expert row i goes to base row p(i)
                    d -= base
                    row.append(float(((d - decode(stored[p + "u"]) @ decode(stored[p + "v"])) ** 2).sum()))
                squared.append(row)
            c.a6("barycenter svd rank 5", report, squared)

        c.expect_directory_error("an unknown --center", ["compress", "--method", "resmoe", "--center", "median"],
                                 "--center", "barycenter, mean or none", "'median'")
        c.expect_directory_error("an unknown --residual", ["compress", "--method", "resmoe", "--residual", "lowrank"],
                                 "--residual", "prune, svd or structured", "'lowrank'")
        c.expect_directory_error("--rank above the matrix rank", ["compress", "--method", "resmoe", "--residual", "svd",
                                 "--rank", "257"], "--rank", "1 to 256", "got 257")
        c.expect_directory_error("--rank without svd", ["compress", "--method", "resmoe", "--rank", "4"],
                                 "--rank", "residual svd", "got rank 4 with residual prune")
        c.expect_directory_error("--center for another method", ["compress", "--method", "prune", "--center", "mean"],
                                 "--center", "resmoe only")
        c.expect_directory_error("--residual for another method", ["compress", "--method", "hc-smoe", "--residual",
                                 "svd"], "--residual", "resmoe only")
        c.expect_directory_error("--rank for another method", ["compress", "--method", "cka-merge", "--rank", "3"],
                                 "--rank", "resmoe only")
        print(f"{c.checks - c.failures} of {c.checks} checks passed")
        return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
