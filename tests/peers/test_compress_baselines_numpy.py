#!/usr/bin/env python3
"""The papers' baselines in `moecomp compress` (issue 34) against numpy transcriptions of their definitions, on
the embedded model (models/tiny-moe: 4 layers, 8 SwiGLU experts, softmax top-2 renormalised, bf16 weights,
1,024 calibration tokens a layer). Every reference here is computed in float64 from the checkpoint's own values.

* S-prune (--criterion router-score): each expert's softmax probability summed over the tokens, / T; the N
  largest kept (ties to the lowest index). Scores to 1e-6 relative, kept sets exactly.
* O-prune (--criterion output): over every subset of N experts (C(8, 6) = 28, C(8, 4) = 70), the layer output
  routed over the subset's logits only (softmax over the subset, top-2, renormalised) against the original layer
  output, squared Frobenius error; the argmin kept exactly, its error to 1e-4 relative (moecomp runs the experts
  in float32). --samples S >= C(E, N) is the exhaustive search; --samples 10 keeps one of its subsets, no better
  than the exhaustive best, the same for the same seed.
* Global F-prune / S-prune (--global): each layer's scores (top-2 counts / 2T, or the S-prune score), each layer's
  top-2 first, then N x L - 2 L more by score over all layers (ties to the lower layer, then expert): each
  layer's kept set exactly, the written router rows and config.json's record.
* --align weights with hc-smoe and cka-merge: each member's neurons matched to its group's dominant by
  scipy.optimize.linear_sum_assignment on the squared distances of the design rows [W1_i | W3_i | W2[:, i]], the
  aligned members merged with the report's coefficients: every written weight is numpy's merge rounded to
  bfloat16 (one ulp allowed only where numpy's value lies within 1e-6 relative of a rounding midpoint).
* Bad input: exit 2, one line, nothing written.

Usage: test_compress_baselines_numpy.py PATH/TO/moecomp"""
import itertools
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402
from test_compress_python import (EMBEDDED, PREFIX, calibration, decode, experts_of, read_checkpoint,  # noqa: E402
                                  silu)

np, scipy_optimize = require("numpy", "scipy.optimize")

LAYERS, E, K = 4, 8, 2


def softmax(logits):
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def expert_outputs(x, experts):
    return np.stack([(silu(x @ w1.T) * (x @ w3.T)) @ w2.T for w1, w3, w2 in experts])


def routed(outputs, logits, subset):
    """The layer output with the router restricted to `subset`: softmax over its logits, top-2, renormalised."""
    sub = logits[:, subset]
    p = softmax(sub)
    idx = np.argsort(-p, axis=1, kind="stable")[:, :K]
    w = np.take_along_axis(p, idx, axis=1)
    w /= w.sum(axis=1, keepdims=True)
    y = np.zeros((logits.shape[0], outputs.shape[2]))
    chosen = np.asarray(subset)[idx]
    for k in range(K):
        y += w[:, k:k + 1] * outputs[chosen[:, k], np.arange(logits.shape[0])]
    return y


def frequency_scores(logits):
    idx = np.argsort(-softmax(logits), axis=1, kind="stable")[:, :K]
    return np.bincount(idx.ravel(), minlength=E) / idx.size


def router_scores(logits):
    s = softmax(logits).sum(axis=0)
    return s / s.sum()


def top(scores, n):
    return sorted(np.argsort(-np.asarray(scores), kind="stable")[:n].tolist())


def global_allocation(scores, n):
    kept = [top(s, K) for s in scores]
    rest = [(-s[e], l, e) for l, s in enumerate(scores) for e in range(E) if e not in kept[l]]
    rest.sort()
    for _, l, e in rest[:(n - K) * LAYERS]:
        kept[l].append(e)
    return [sorted(k) for k in kept]


def bf16_bounds_ok(written, exact):
    """written (bf16 values) is numpy's exact value rounded to bf16, except within 1e-6 relative of a midpoint."""
    exact32 = exact.astype(np.float32)
    bits = exact32.view(np.uint32).astype(np.uint64)
    down = ((bits >> 16) << 16).astype(np.uint32).view(np.float32).astype(np.float64)
    up = (((bits >> 16) + 1) << 16).astype(np.uint32).view(np.float32).astype(np.float64)
    nearest = np.where(np.abs(exact - down) <= np.abs(up - exact), down, up)
    mid = 0.5 * (down + up)
    near_mid = np.abs(exact - mid) <= 1e-6 * np.abs(exact) + 1e-30
    ok = (written == nearest) | (near_mid & ((written == down) | (written == up)))
    return bool(ok.all()), int((~ok).sum())


def design(w1, w3, w2):
    return np.concatenate([w1, w3, w2.T], axis=1)


class Checker(ToolRunner):
    def compress(self, name, *args):
        out = self.path(name)
        shutil.rmtree(out, ignore_errors=True)
        r = self.run("compress", EMBEDDED, "-o", out, "--quiet", *args)
        if r.returncode != 0:
            self.check(f"{name} runs", False, r.stderr.strip())
            return None, None
        report = json.load(open(os.path.join(out, "compression_report.json")))
        return out, report


def main():
    tool = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="moecomp-baselines-")
    c = Checker(tool, tmp)
    source = read_checkpoint(EMBEDDED)
    calib = calibration()
    xs = [calib[f"layers.{l}.moe_input"] for l in range(LAYERS)]
    routers = [decode(source[PREFIX.format(l) + "gate.weight"]) for l in range(LAYERS)]
    experts = [experts_of(source, l, E) for l in range(LAYERS)]
    logits = [x @ r.T for x, r in zip(xs, routers)]
    outputs = [expert_outputs(x, ex) for x, ex in zip(xs, experts)]

    # S-prune.
    out, report = c.compress("s-prune", "--method", "prune", "--criterion", "router-score", "--experts", "4")
    if report:
        for l, layer in enumerate(report["layers"]):
            want = router_scores(logits[l])
            got = np.asarray(layer["scores"])
            c.check(f"S-prune layer {l} scores", np.allclose(got, want, rtol=1e-6, atol=1e-9),
                    f"max gap {np.max(np.abs(got - want)):.2e}")
            c.check(f"S-prune layer {l} kept", layer["kept"] == top(want, 4), f"{layer['kept']} vs {top(want, 4)}")

    # O-prune, exhaustively, at 8 -> 6 and 8 -> 4.
    for n in (6, 4):
        best = []
        for l in range(LAYERS):
            ref = routed(outputs[l], logits[l], list(range(E)))
            errors = {s: float(((routed(outputs[l], logits[l], list(s)) - ref) ** 2).sum())
                      for s in itertools.combinations(range(E), n)}
            s_best = min(errors, key=lambda s: (errors[s], s))
            ranked = sorted(errors.values())
            best.append((list(s_best), errors[s_best], ranked[1] / ranked[0] - 1 if ranked[0] > 0 else float("inf")))
        out, report = c.compress(f"o-prune-{n}", "--method", "prune", "--criterion", "output", "--experts", str(n))
        if report:
            for l, layer in enumerate(report["layers"]):
                want, err, margin = best[l]
                c.check(f"O-prune 8->{n} layer {l} kept", layer["kept"] == want,
                        f"{layer['kept']} vs numpy's {want} (runner-up {100 * margin:.3f}% worse)")
                got_err = -max(layer["scores"][e] for e in layer["kept"])
                c.check(f"O-prune 8->{n} layer {l} error", abs(got_err - err) <= 1e-4 * err,
                        f"{got_err:.6e} vs {err:.6e}")
        if n == 4:
            _, full = c.compress("o-prune-70", "--method", "prune", "--criterion", "output", "--experts", "4",
                                 "--samples", "70")
            if full and report:
                c.check("O-prune --samples 70 = exhaustive", [x["kept"] for x in full["layers"]] ==
                        [x["kept"] for x in report["layers"]], "kept sets")
            outs = [c.compress(f"o-prune-s{i}", "--method", "prune", "--criterion", "output", "--experts", "4",
                               "--samples", "10", "--seed", "3") for i in (0, 1)]
            if all(r for _, r in outs):
                sampled = [x["kept"] for x in outs[0][1]["layers"]]
                c.check("O-prune --samples 10: same seed, same subsets",
                        sampled == [x["kept"] for x in outs[1][1]["layers"]], f"{sampled}")
                worse = all(-max(x["scores"][e] for e in x["kept"]) >= best[l][1] * (1 - 1e-4)
                            for l, x in enumerate(outs[0][1]["layers"]))
                c.check("O-prune --samples 10: no better than the exhaustive best", worse, "")

    # Global F-prune and S-prune.
    for criterion, score in (("frequency", frequency_scores), ("router-score", router_scores)):
        scores = [score(lg) for lg in logits]
        want = global_allocation(scores, 4)
        out, report = c.compress(f"global-{criterion}", "--method", "prune", "--criterion", criterion, "--global",
                                 "--experts", "4")
        if not report:
            continue
        got = [x["kept"] for x in report["layers"]]
        c.check(f"global {criterion}: kept sets", got == want, f"{got} vs numpy's {want}")
        c.check(f"global {criterion}: {4 * LAYERS} experts in all", sum(len(k) for k in got) == 4 * LAYERS,
                f"{[len(k) for k in got]}")
        config = json.load(open(os.path.join(out, "config.json")))
        record = config["moecomp_compression"]
        c.check(f"global {criterion}: config.json", record.get("experts_per_layer") == [len(k) for k in want] and
                config["num_local_experts"] == max(len(k) for k in want), f"{record.get('experts_per_layer')}")
        written = read_checkpoint(out)
        rows_ok = all(np.array_equal(decode(written[PREFIX.format(l) + "gate.weight"]), routers[l][want[l]])
                      for l in range(LAYERS))
        c.check(f"global {criterion}: router rows are the kept rows", rows_ok, "")
        experts_ok = all(written[PREFIX.format(l) + f"experts.{j}.w1.weight"][2] ==
                         source[PREFIX.format(l) + f"experts.{e}.w1.weight"][2]
                         for l in range(LAYERS) for j, e in enumerate(want[l]))
        c.check(f"global {criterion}: kept experts are the input's bytes", experts_ok, "")

    # Alignment before merging: hc-smoe (frequency coefficients, id map) and cka-merge (uniform, merged rows).
    for method, extra in (("hc-smoe", []), ("cka-merge", [])):
        out, report = c.compress(f"{method}-aligned", "--method", method, "--experts", "4", "--align", "weights", *extra)
        if not report:
            continue
        written = read_checkpoint(out)
        for l, layer in enumerate(report["layers"]):
            groups, dominants, coef = layer["groups"], layer["dominants"], layer["coefficients"]
            ok_all, bad = True, 0
            for g, dom in enumerate(dominants):
                members = [dom] + [e for e in groups[g] if e != dom]
                a = design(*experts[l][dom])
                merged = np.zeros_like(a)
                for e in members:
                    b = design(*experts[l][e])
                    if e == dom:
                        perm = np.arange(a.shape[0])
                    else:
                        cost = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T
                        _, perm = scipy_optimize.linear_sum_assignment(cost)
                    merged += coef[e] * b[perm]
                H = a.shape[1] // 3
                slot = dom if method == "hc-smoe" else g
                for i, (name, ref) in enumerate((("w1", merged[:, :H]), ("w3", merged[:, H:2 * H]),
                                                 ("w2", merged[:, 2 * H:].T))):
                    got = decode(written[PREFIX.format(l) + f"experts.{slot}.{name}.weight"])
                    ok, n_bad = bf16_bounds_ok(got, ref)
                    ok_all, bad = ok_all and ok, bad + n_bad
            c.check(f"{method} --align weights layer {l}: merged experts = numpy's aligned merge", ok_all,
                    f"{bad} weights off")
        if method == "hc-smoe":
            _, plain = c.compress("hc-smoe-plain", "--method", "hc-smoe", "--experts", "4")
            if plain:
                a = [x["output_relative_error"] for x in report["layers"]]
                p = [x["output_relative_error"] for x in plain["layers"]]
                print(f"     hc-smoe 8->4 layer output error: aligned {np.round(a, 3)}, unaligned {np.round(p, 3)}")

    # Bad input: one line, nothing written.
    base = ["compress", EMBEDDED, "--quiet"]
    c.expect_directory_error("--samples 0", base + ["--method", "prune", "--criterion", "output", "--samples", "0"],
                             "--samples")
    c.expect_directory_error("--samples without output", base + ["--method", "prune", "--samples", "5"],
                             "--samples", "criterion output")
    c.expect_directory_error("--samples with hc-smoe", base + ["--method", "hc-smoe", "--samples", "5"], "--samples")
    c.expect_directory_error("--global with reap", base + ["--method", "prune", "--criterion", "reap", "--global"],
                             "--global", "frequency or router-score")
    c.expect_directory_error("--align with prune", base + ["--method", "prune", "--align", "weights"], "--align",
                             "merge")
    c.expect_directory_error("--align with resmoe", base + ["--method", "resmoe", "--align", "weights"], "--align")
    c.expect_directory_error("--align with fix-dom", base + ["--method", "hc-smoe", "--merge", "fix-dom", "--align",
                                                            "weights"], "--align", "fix-dom")
    c.expect_directory_error("unknown --align", base + ["--method", "hc-smoe", "--align", "both"], "--align",
                             "none, weights or activations")
    c.expect_directory_error("unknown --criterion", base + ["--method", "prune", "--criterion", "enumerate"],
                             "--criterion", "output")

    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{c.checks - c.failures} of {c.checks} checks passed")
    sys.exit(1 if c.failures else 0)


if __name__ == "__main__":
    main()
