#!/usr/bin/env python3
"""`moecomp merge` against numpy transcriptions of the reference code's semantics (float64 throughout).

* frequency: HC-SMoE's `_merge_mlp_experts_by_usage_frequency_weighting`: W = sum f W / (sum f + 1e-7) for W1, W3
  and W2, a group of unused experts zeroed; with the frequencies given, and counted from the router (top-2 counts
  normalised per layer, HC-SMoE's `compute_all_usages`).
* fix-dom: HC-SMoE's `fix-dom-same` (`_merge_moe_experts_with_dominant_same_rule`, mode normal, uniform
  coefficients): each member's routed tokens concatenated, act = silu(X W1^T) * (X W3^T), its
  `compute_covariance` (unbiased, 1e-7 on the product of the deviations), argmax over dim 0, the row-normalised
  P, W1 = P cat(W1), W2 = cat(W2) P^T.
* uniform, learned: the fourth paper's Eq. 6: the router rows merged with the experts' coefficients; learned's
  reported objectives recomputed here at the uniform and the returned coefficients (on the simplex, lower).
* aligned: each member aligned to the dominant by scipy.optimize.linear_sum_assignment on the squared distances
  of the design rows, permuted, averaged.
* dominant: the most frequent member's weights and router row, exactly.
* The reported merge errors recomputed (average, with a router).
* Bad input: exit 2, one "moecomp: error:" line naming the option, no output directory.

Usage: test_merge_numpy.py PATH/TO/moecomp"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

np, optimize, spatial = require("numpy", "scipy.optimize", "scipy.spatial")

E, D_FF, D, T = 6, 20, 12, 300
GROUPS = np.array([0, 1, 0, 2, 1, 0], dtype=np.int64)


def silu(v):
    return v / (1.0 + np.exp(-v))


def expert_out(x, w1, w3, w2):
    return (silu(x @ w1.T) * (x @ w3.T)) @ w2.T


def top_k(x, router, k):
    """HC-SMoE's routing: softmax over all E logits, the top-k (ties to the lowest index) and their probabilities."""
    z = x @ router.T
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    ids = np.argsort(-z, axis=1, kind="stable")[:, :k]
    return ids, np.take_along_axis(p, ids, axis=1)


def hc_covariance(a, b):
    """HC-SMoE's compute_covariance: Pearson over the token axis with 1e-7 on the product of the deviations."""
    ca, cb = a - a.mean(axis=0), b - b.mean(axis=0)
    cov = ca.T @ cb / (a.shape[0] - 1)
    sa, sb = a.std(axis=0, ddof=1), b.std(axis=0, ddof=1)
    return cov / (sa[:, None] * sb[None, :] + 1e-7)


def fix_dom_same(w1, w3, w2, members, dom, x, ids):
    """HC-SMoE's fix-dom-same on one group (dominant moved to position 0, uniform coefficients)."""
    order = [dom] + [e for e in members if e != dom]
    rows = np.concatenate([np.nonzero((ids == e).any(axis=1))[0] for e in members])  # concatenated token sets
    xs = x[rows]
    acts = [silu(xs @ w1[e].T) * (xs @ w3[e].T) for e in order]
    n = len(order)
    p = np.zeros((D_FF, n * D_FF))
    p[:, :D_FF] = np.eye(D_FF)
    for j in range(1, n):
        match = np.argmax(hc_covariance(acts[0], acts[j]), axis=0)  # member neuron b -> dominant neuron
        p[match, j * D_FF + np.arange(D_FF)] = 1.0
    p /= p.sum(axis=1, keepdims=True)
    cat1 = np.concatenate([w1[e] for e in order], axis=0)
    cat3 = np.concatenate([w3[e] for e in order], axis=0)
    cat2 = np.concatenate([w2[e] for e in order], axis=1)
    return p @ cat1, p @ cat3, cat2 @ p.T


class Checker(ToolRunner):

    def merge(self, name, method, *flags):
        out = self.path(name)
        r = self.run("merge", "--w1", self.path("w1.npy"), "--w2", self.path("w2.npy"), "--w3", self.path("w3.npy"),
                     "--groups", self.path("groups.npy"), "--method", method, "-o", out, "--json", *flags)
        if r.returncode != 0:
            raise RuntimeError(f"moecomp merge --method {method} {flags} failed: {r.stderr.strip()}")
        load = lambda f: np.load(os.path.join(out, f)) if os.path.exists(os.path.join(out, f)) else None  # noqa: E731
        return {k: load(k + ".npy") for k in ("w1", "w2", "w3", "router", "map")}, json.loads(r.stdout)

    def close(self, label, got, want, rtol):
        err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-300)
        self.check(label, err <= rtol, f"max relative difference {err:.2e} (allowed {rtol:.0e})")


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(20261126)
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(tool, tmp)
        w1 = rng.standard_normal((E, D_FF, D)) / np.sqrt(D)
        w3 = rng.standard_normal((E, D_FF, D)) / np.sqrt(D)
        w2 = rng.standard_normal((E, D, D_FF)) / np.sqrt(D_FF)
        x = rng.standard_normal((T, D))
        router = rng.standard_normal((E, D))
        freq = np.array([0.3, 0.2, 0.1, 0.0, 0.25, 0.15])
        for name, value in (("w1", w1), ("w2", w2), ("w3", w3), ("x", x), ("router", router), ("freq", freq),
                            ("groups", GROUPS)):
            np.save(c.path(name + ".npy"), value)
        members = [np.nonzero(GROUPS == g)[0] for g in range(3)]

        # frequency, given: HC-SMoE's formula. Group 2 is expert 3 alone, with f = 0: HC-SMoE's rule would zero it,
        # and the tool refuses that (docs/cli.md, merge); with f_3 > 0 the formula holds for every group.
        c.expect_directory_error("frequency: a group of total frequency 0 is refused, not zeroed",
                                 ["merge", "--w1", c.path("w1.npy"), "--w2", c.path("w2.npy"), "--groups",
                                  c.path("groups.npy"), "--method", "frequency", "--frequencies", c.path("freq.npy")],
                                 "--frequencies", "group 2 (experts 3)", "all zeros")
        freq = np.array([0.3, 0.2, 0.1, 0.05, 0.25, 0.15])
        np.save(c.path("freq.npy"), freq)
        out, s = c.merge("freq", "frequency", "--frequencies", c.path("freq.npy"))
        for g, m in enumerate(members):
            z = freq[m].sum() + 1e-7
            for k, w in (("w1", w1), ("w3", w3), ("w2", w2)):
                c.close(f"frequency group {g} {k}", out[k][g], np.tensordot(freq[m], w[m], axes=1) / z, 1e-12)
        c.check("frequency: map = groups", np.array_equal(out["map"], GROUPS), f"{out['map']}")
        c.check("frequency: no router.npy (the router is kept)", out["router"] is None, "router.npy written")

        # frequency counted from the router on the tokens: HC-SMoE's top-2 counts normalised to sum 1.
        ids2, _ = top_k(x, router, 2)
        counted = np.bincount(ids2.ravel(), minlength=E) / ids2.size
        out, s = c.merge("freq_counted", "frequency", "--inputs", c.path("x.npy"), "--router", c.path("router.npy"))
        for g, m in enumerate(members):
            want = np.tensordot(counted[m], w1[m], axes=1) / (counted[m].sum() + 1e-7)
            c.close(f"frequency (counted) group {g} w1", out["w1"][g], want, 1e-12)
        dominants = [int(m[np.argmax(counted[m])]) for m in members]
        c.check("dominants: the most frequent members", s["dominants"] == dominants, f"{s['dominants']} vs {dominants}")

        # fix-dom-same, every routed token (no cap), the dominants as given.
        np.save(c.path("dom.npy"), np.array([2, 4, 3], dtype=np.int64))
        out, s = c.merge("fixdom", "fix-dom", "--inputs", c.path("x.npy"), "--router", c.path("router.npy"),
                         "--dominants", c.path("dom.npy"), "--token-cap", "0")
        for g, (m, dom) in enumerate(zip(members, [2, 4, 3])):
            want1, want3, want2 = fix_dom_same(w1, w3, w2, list(m), dom, x, ids2)
            c.close(f"fix-dom group {g} w1", out["w1"][g], want1, 1e-10)
            c.close(f"fix-dom group {g} w3", out["w3"][g], want3, 1e-10)
            c.close(f"fix-dom group {g} w2", out["w2"][g], want2, 1e-10)
        routed_once = [int((np.isin(ids2, m)).any(axis=1).sum()) for m in members]
        c.check("fix-dom: tokens reported are the group's distinct routed tokens", s["tokens"] == routed_once,
                f"{s['tokens']} vs {routed_once}")

        # uniform: experts and router rows by 1/|G| (the fourth paper's Eq. 6).
        out, s = c.merge("uniform", "uniform", "--router", c.path("router.npy"))
        for g, m in enumerate(members):
            c.close(f"uniform group {g} w2", out["w2"][g], w2[m].mean(axis=0), 1e-12)
            c.close(f"uniform group {g} router row", out["router"][g], router[m].mean(axis=0), 1e-12)
        c.check("uniform: router.npy is g x d", out["router"].shape == (3, D), f"{out['router'].shape}")
        out, s = c.merge("uniform_no_router", "uniform")
        c.check("uniform without a router: the id map, no router.npy", out["router"] is None and s["router_rule"] == "map",
                f"router_rule {s['router_rule']}")

        # dominant: the most frequent member and its router row, exactly.
        out, s = c.merge("dominant", "dominant", "--router", c.path("router.npy"), "--frequencies", c.path("freq.npy"))
        for g, m in enumerate(members):
            dom = int(m[np.argmax(freq[m])])
            c.check(f"dominant group {g}: expert {dom} exactly",
                    np.array_equal(out["w1"][g], w1[dom]) and np.array_equal(out["w2"][g], w2[dom])
                    and np.array_equal(out["router"][g], router[dom]), "differs")

        # aligned: LAP on the design rows' squared distances to the dominant, then the mean.
        out, s = c.merge("aligned", "aligned", "--dominants", c.path("dom.npy"))
        for g, (m, dom) in enumerate(zip(members, [2, 4, 3])):
            design = lambda e: np.concatenate([w1[e], w3[e], w2[e].T], axis=1)  # noqa: E731
            acc1, acc3, acc2 = np.zeros((D_FF, D)), np.zeros((D_FF, D)), np.zeros((D, D_FF))
            for e in m:
                _, p = optimize.linear_sum_assignment(spatial.distance.cdist(design(dom), design(e), "sqeuclidean"))
                acc1 += w1[e][p]
                acc3 += w3[e][p]
                acc2 += w2[e][:, p]
            c.close(f"aligned group {g} w1", out["w1"][g], acc1 / len(m), 1e-12)
            c.close(f"aligned group {g} w2", out["w2"][g], acc2 / len(m), 1e-12)

        # learned: the router rows by the learned coefficients; the objectives recomputed here.
        out, s = c.merge("learned", "learned", "--inputs", c.path("x.npy"), "--router", c.path("router.npy"),
                         "--token-cap", "0")
        alpha = np.array(s["coefficients"])
        ids, probs = top_k(x, router, 2)
        for g, m in enumerate(members):
            a = alpha[m]
            c.check(f"learned group {g}: on the simplex", abs(a.sum() - 1) < 1e-12 and (a >= 0).all(), f"{a}")
            c.close(f"learned group {g} router row", out["router"][g], a @ router[m], 1e-12)
            c.close(f"learned group {g} w1", out["w1"][g], np.tensordot(a, w1[m], axes=1), 1e-12)
            rows = np.nonzero(np.isin(ids, m).any(axis=1))[0]
            xs = x[rows]
            weight = np.stack([np.where(ids[rows] == e, probs[rows], 0).sum(axis=1) for e in m], axis=1)
            y = sum(weight[:, i:i + 1] * expert_out(xs, w1[e], w3[e], w2[e]) for i, e in enumerate(m))
            y /= weight.sum(axis=1, keepdims=True)

            def objective(coef):
                return np.mean(np.sum((y - expert_out(xs, *(np.tensordot(coef, w[m], axes=1) for w in (w1, w3, w2))))
                                      ** 2, axis=1))
            if len(m) > 1:
                initial, final = objective(np.full(len(m), 1 / len(m))), objective(a)
                c.check(f"learned group {g}: objective at the start", abs(initial - s["objective_initial"][g]) <= 1e-9 * initial,
                        f"{s['objective_initial'][g]} vs {initial}")
                c.check(f"learned group {g}: objective at the end", abs(final - s["objective_final"][g]) <= 1e-9 * final,
                        f"{s['objective_final'][g]} vs {final}")
                c.check(f"learned group {g}: lowered", final < initial, f"{final} vs {initial}")
                # The end is a stationary point of the simplex problem: no coordinate direction descends much.
                grad = np.array([(objective(a + 1e-6 * np.eye(len(m))[i]) - objective(a - 1e-6 * np.eye(len(m))[i])) / 2e-6
                                 for i in range(len(m))])
                support = a > 1e-9
                spread = grad[support].max() - grad[support].min() if support.any() else 0
                c.check(f"learned group {g}: KKT (equal gradients on the support)", spread <= 1e-3 * np.abs(grad).max(),
                        f"gradient {grad}, coefficients {a}")

        # The merge errors (average, routed): sum ||y - f_merged||^2 / sum ||y||^2 over the group's tokens.
        out, s = c.merge("avg", "average", "--inputs", c.path("x.npy"), "--router", c.path("router.npy"))
        for g, m in enumerate(members):
            rows = np.nonzero(np.isin(ids, m).any(axis=1))[0]
            xs = x[rows]
            weight = np.stack([np.where(ids[rows] == e, probs[rows], 0).sum(axis=1) for e in m], axis=1)
            y = sum(weight[:, i:i + 1] * expert_out(xs, w1[e], w3[e], w2[e]) for i, e in enumerate(m))
            y /= weight.sum(axis=1, keepdims=True)
            merged = expert_out(xs, out["w1"][g], out["w3"][g], out["w2"][g])
            want = np.sum((y - merged) ** 2) / np.sum(y ** 2)
            c.check(f"average group {g}: merge error", abs(s["errors"][g] - want) <= 1e-9 * want + 1e-20,
                    f"{s['errors'][g]} vs {want}")

        # Bad input.
        base = ["merge", "--w1", c.path("w1.npy"), "--w2", c.path("w2.npy")]
        np.save(c.path("gap.npy"), np.array([0, 2, 0, 2, 2, 0], dtype=np.int64))
        np.save(c.path("short.npy"), np.array([0, 1, 0], dtype=np.int64))
        np.save(c.path("fshort.npy"), np.array([0.5, 0.5]))
        np.save(c.path("fneg.npy"), np.array([0.3, -0.1, 0.3, 0.2, 0.2, 0.1]))
        np.save(c.path("w2t.npy"), np.transpose(w2, (0, 2, 1)))
        g = ["--groups", c.path("groups.npy")]
        c.expect_directory_error("groups not covering 0..g-1", base + ["--groups", c.path("gap.npy"), "--method", "average"],
                                 "--groups", "no expert in group 1")
        c.expect_directory_error("groups of the wrong length", base + ["--groups", c.path("short.npy"), "--method", "average"],
                                 "--groups", "6 entries")
        c.expect_directory_error("mismatched shapes", ["merge", "--w1", c.path("w1.npy"), "--w2", c.path("w2t.npy")] + g +
                                 ["--method", "average"], "--w2", "12 x 20")
        c.expect_directory_error("frequencies of the wrong length", base + g + ["--method", "frequency", "--frequencies",
                                 c.path("fshort.npy")], "--frequencies", "6 entries")
        c.expect_directory_error("negative frequencies", base + g + ["--method", "frequency", "--frequencies",
                                 c.path("fneg.npy")], "--frequencies", ">= 0", "-0.1")
        c.expect_directory_error("fix-dom without inputs", base + g + ["--method", "fix-dom"], "--inputs", "fix-dom")
        c.expect_directory_error("learned without inputs", base + g + ["--method", "learned", "--router", c.path("router.npy")],
                                 "--inputs", "learned")
        c.expect_directory_error("unknown method", base + g + ["--method", "mean"], "--method", "average, frequency")
        c.expect_directory_error("router rule merged without router", base + g + ["--method", "uniform", "--router-rule",
                                 "merged"], "--router")
        print(f"{c.checks - c.failures} of {c.checks} checks passed")
        return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
