#!/usr/bin/env python3
"""`moecomp barycenter-fixed` against POT's ot.bregman.barycenter (0.8.2).

* method 'sinkhorn' (default) and 'sinkhorn_log' (--log-domain), uniform and given weights, n = 30 .. 300
  points on a line, k = 2 .. 5 histograms, reg 5e-2 .. 5e-3: the barycenter to 1e-6 relative (max abs
  difference / max) and the iteration count (POT's niter + 1).
* --max-iter / --tol passed through (POT numItermax / stopThr).
* The CLI's error contract: exit 2, one "moecomp: error:" line naming the argument, no output file, and an
  existing output file left untouched.

Usage: test_barycenter_fixed_pot.py PATH/TO/moecomp"""
import json
import os
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

np, ot = require("numpy", "ot")
warnings.simplefilter("ignore")


class Checker(ToolRunner):
    """check() and expect_error() come from peer_common.ToolRunner."""


def problem(rng, n, k):
    A = rng.random((n, k)) + 0.05
    A /= A.sum(0)
    x = np.linspace(0.0, 1.0, n)[:, None]
    M = ot.dist(x, x)
    M /= M.max()
    return A, M


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(11)
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(tool, tmp)
        a_path, m_path, w_path, out = (c.path(f) for f in ("A.npy", "M.npy", "w.npy", "bary.npy"))

        def compare(label, A, M, reg, weights=None, log_domain=False, extra=(), pot_kwargs=None):
            np.save(a_path, A)
            np.save(m_path, M)
            args = ["barycenter-fixed", a_path, m_path, "--reg", repr(reg), "-o", out, "--json", *extra]
            if weights is not None:
                np.save(w_path, weights)
                args += ["--weights", w_path]
            if log_domain:
                args.append("--log-domain")
            r = c.run(*args)
            if r.returncode != 0:
                c.check(label, False, r.stderr.strip())
                return
            js = json.loads(r.stdout)
            got = np.load(out)
            want, log = ot.bregman.barycenter(A, M, reg, weights=weights,
                                              method="sinkhorn_log" if log_domain else "sinkhorn", log=True,
                                              **(pot_kwargs or {}))
            rel = float(np.abs(got - want).max() / np.abs(want).max())
            ok = rel <= 1e-6 and js["iterations"] == log["niter"] + 1 and "seconds" in js
            c.check(label, ok, f"rel diff {rel:.2e}, iterations {js['iterations']} (POT niter {log['niter']}), "
                    f"{js['status']}")

        for n, k, reg in ((30, 2, 5e-2), (100, 3, 1e-2), (300, 5, 5e-3)):
            A, M = problem(rng, n, k)
            w = rng.random(k)
            w /= w.sum()
            for log_domain in (False, True):
                tag = "log" if log_domain else "sinkhorn"
                compare(f"{tag} n={n} k={k} reg={reg} uniform", A, M, reg, log_domain=log_domain)
                compare(f"{tag} n={n} k={k} reg={reg} weighted", A, M, reg, w, log_domain)
        A, M = problem(rng, 60, 3)
        compare("max-iter 15 tol 1e-9", A, M, 1e-2, extra=("--max-iter", "15", "--tol", "1e-9"),
                pot_kwargs={"numItermax": 15, "stopThr": 1e-9})

        # The error contract.
        A, M = problem(rng, 5, 2)
        np.save(a_path, A)
        np.save(m_path, M)
        neg, short_m, bad_w, wide_w = (c.path(f) for f in ("neg.npy", "short.npy", "badw.npy", "widew.npy"))
        x = A.copy()
        x[2, 1] = -0.5
        np.save(neg, x)
        np.save(short_m, M[:4, :4])
        np.save(bad_w, np.array([0.5, 0.6]))
        np.save(wide_w, np.array([0.2, 0.3, 0.5]))
        c.expect_error("missing --reg", ["barycenter-fixed", a_path, m_path], "--reg")
        c.expect_error("negative reg", ["barycenter-fixed", a_path, m_path, "--reg", "-1"], "--reg", "-1")
        c.expect_error("negative mass", ["barycenter-fixed", neg, m_path, "--reg", "0.1"], "column 1 of A", "-0.5")
        c.expect_error("M shape", ["barycenter-fixed", a_path, short_m, "--reg", "0.1"], "(5, 5)", "(4, 4)")
        c.expect_error("weights sum", ["barycenter-fixed", a_path, m_path, "--reg", "0.1", "--weights", bad_w],
                       "--weights", "sum to 1")
        c.expect_error("weights size", ["barycenter-fixed", a_path, m_path, "--reg", "0.1", "--weights", wide_w],
                       "--weights", "(2,)")
        c.expect_error("1-D A", ["barycenter-fixed", bad_w, m_path, "--reg", "0.1"], "2-D")

        print(f"{c.checks - c.failures} passed, {c.failures} failed")
        sys.exit(1 if c.failures else 0)


if __name__ == "__main__":
    main()
