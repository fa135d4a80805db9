#!/usr/bin/env python3
"""`moecomp sinkhorn` against POT's ot.sinkhorn (0.8.2 conventions).

* plain (sinkhorn_knopp), log (sinkhorn_log), stabilized (sinkhorn_stabilized, POT's check period 20, which
  the default check_every = 0 must resolve to; an explicit --check-every 10 against print_period = 10) and
  epsilon_scaling on random histograms and squared Euclidean costs scaled to [0, 1], reg 5e-2 and 1e-2: the
  plan to 1e-6 relative (max |P - P_pot| / max P_pot), the cost to 1e-6, and the iteration count (POT's
  log niter + 1; epsilon_scaling: outer steps). The n = 700 case takes the float-kernel path of `plain`.
* log at reg = 1e-3 (iteration limit): finite, and equal to POT's sinkhorn_log to 1e-6.
* float32 input: the plan to 1e-3 of POT's float64 plan.
* forbidden pairs (+inf costs, 20% of them) for plain, log and stabilized: the same plans as POT, and the cost
  over the allowed pairs; a row forbidden everywhere and a -inf cost are refused.
* The CLI's error contract: exit 2, one "moecomp: error:" line naming the argument, no output file, and an
  existing output file left untouched.

Usage: test_sinkhorn_pot.py PATH/TO/moecomp"""
import json
import os
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

np, ot = require("numpy", "ot")
warnings.simplefilter("ignore")

POT_METHOD = {"plain": "sinkhorn", "log": "sinkhorn_log", "stabilized": "sinkhorn_stabilized",
              "epsilon_scaling": "sinkhorn_epsilon_scaling"}


class Checker(ToolRunner):
    """check() and expect_error() come from peer_common.ToolRunner."""


def problem(rng, n, m, dtype=np.float64):
    a = rng.random(n) + 0.1
    b = rng.random(m) + 0.1
    a /= a.sum()
    b /= b.sum()
    x, y = rng.random((n, 2)), rng.random((m, 2))
    M = ot.dist(x, y)
    M /= M.max()
    return a.astype(dtype), b.astype(dtype), M.astype(dtype)


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(tool, tmp)
        paths = [c.path(f) for f in ("a.npy", "b.npy", "M.npy")]
        out = c.path("plan.npy")

        def compare(label, a, b, M, reg, method, extra=(), pot_kwargs=None, check_iterations=True, rtol=1e-6):
            for p, v in zip(paths, (a, b, M)):
                np.save(p, v)
            args = ["sinkhorn", *paths, "--reg", repr(reg), "--method", method, "-o", out, "--json", *extra]
            r = c.run(*args)
            if r.returncode != 0:
                c.check(label, False, r.stderr.strip())
                return
            js = json.loads(r.stdout)
            got = np.load(out)
            want, log = ot.sinkhorn(a.astype(np.float64), b.astype(np.float64), M.astype(np.float64), reg,
                                    method=POT_METHOD[method], log=True, **(pot_kwargs or {}))
            rel = float(np.abs(got - want).max() / np.abs(want).max())
            allowed = np.isfinite(M)  # +inf marks a forbidden pair: plan 0 there, and no cost
            pot_cost = float(np.sum(np.where(allowed, want, 0.0) * np.where(allowed, M, 0.0)))
            niter = log.get("niter", log.get("n_iter"))
            ok = (rel <= rtol and np.isfinite(got).all() and abs(js["cost"] - pot_cost) <= rtol * abs(pot_cost)
                  and (not check_iterations or js["iterations"] == niter + 1)
                  and {"cost", "iterations", "converged", "marginal_error", "seconds"} <= set(js))
            c.check(label, ok, f"plan rel diff {rel:.2e}, iterations {js['iterations']} (POT niter {niter}), "
                    f"cost {js['cost']:.12g} vs {pot_cost:.12g}, {js['status']}")

        for n, m in ((1, 5), (6, 1), (40, 30), (200, 150), (700, 600)):
            a, b, M = problem(rng, n, m)
            for reg in (5e-2, 1e-2):
                for method in ("plain", "log", "stabilized", "epsilon_scaling"):
                    if method == "epsilon_scaling" and n * m > 50000:
                        continue
                    # No --check-every: the library default (check_every = 0) must resolve to POT's period
                    # for the method (20 for stabilized, 10 otherwise), or the iteration counts differ.
                    compare(f"{method} {n}x{m} reg {reg}", a, b, M, reg, method)
        a, b, M = problem(rng, 120, 100)
        compare("log 120x100 reg 1e-3 (iteration limit)", a, b, M, 1e-3, "log")
        compare("plain tol 1e-5 max-iter 50", a, b, M, 1e-2, "plain", ("--tol", "1e-5", "--max-iter", "50"),
                {"stopThr": 1e-5, "numItermax": 50})
        # An explicit period overrides POT's: stabilized every 10 = POT's print_period = 10, and the default
        # period (20) stops at a different iteration on this problem.
        a, b, M = problem(rng, 200, 150)
        compare("stabilized --check-every 10 (POT print_period 10)", a, b, M, 1e-2, "stabilized",
                ("--check-every", "10"), {"print_period": 10})
        _, log10 = ot.sinkhorn(a, b, M, 1e-2, method="sinkhorn_stabilized", log=True, print_period=10)
        _, log20 = ot.sinkhorn(a, b, M, 1e-2, method="sinkhorn_stabilized", log=True)
        c.check("stabilized periods 10 and 20 stop apart (the case above is discriminating)",
                log10.get("niter", log10.get("n_iter")) != log20.get("niter", log20.get("n_iter")),
                f"POT niter {log10.get('niter', log10.get('n_iter'))} vs {log20.get('niter', log20.get('n_iter'))}")
        # Forbidden pairs (+inf costs, POT's convention): the same plans as POT, cost over the allowed pairs.
        for n, m in ((30, 20), (700, 600)):
            a, b, M = problem(rng, n, m)
            M[rng.random((n, m)) < 0.2] = np.inf
            M[np.arange(n), np.arange(n) % m] = 0.5  # every row and column keeps an allowed pair
            for method in ("plain", "log", "stabilized"):
                compare(f"{method} {n}x{m} with 20% forbidden (+inf) pairs", a, b, M, 5e-2, method)
        a32, b32, M32 = problem(rng, 50, 40, np.float32)
        compare("float32 plain", a32, b32, M32, 5e-2, "plain", check_iterations=False, rtol=1e-3)

        # The error contract.
        a, b, M = problem(rng, 4, 3)
        for p, v in zip(paths, (a, b, M)):
            np.save(p, v)
        neg, heavy, nan_m, bad_shape = (c.path(f) for f in ("neg.npy", "heavy.npy", "nanm.npy", "shape.npy"))
        x = a.copy()
        x[1] = -0.2
        np.save(neg, x)
        np.save(heavy, 2 * a)
        y = M.copy()
        y[2, 1] = np.nan
        np.save(nan_m, y)
        np.save(bad_shape, np.ones((3, 3)) / 9)
        c.expect_error("missing --reg", ["sinkhorn", *paths], "--reg")
        c.expect_error("reg 0", ["sinkhorn", *paths, "--reg", "0"], "--reg", "0")
        c.expect_error("unknown method", ["sinkhorn", *paths, "--reg", "0.1", "--method", "greenkhorn"],
                       "--method", "greenkhorn")
        c.expect_error("negative mass", ["sinkhorn", neg, paths[1], paths[2], "--reg", "0.1"], "a must", "-0.2")
        c.expect_error("unequal masses", ["sinkhorn", heavy, paths[1], paths[2], "--reg", "0.1"], "equal total mass")
        c.expect_error("NaN cost", ["sinkhorn", paths[0], paths[1], nan_m, "--reg", "0.1"], "(2, 1)")
        c.expect_error("cost shape", ["sinkhorn", paths[0], paths[1], bad_shape, "--reg", "0.1"], "(4, 3)", "(3, 3)")
        c.expect_error("2-D histogram", ["sinkhorn", bad_shape, paths[1], paths[2], "--reg", "0.1"], "1-D")
        # The library checks the period (0 means POT's for the method); the tool names the option.
        c.expect_error("check-every -1", ["sinkhorn", *paths, "--reg", "0.1", "--check-every", "-1"],
                       "option --check-every", "params.check_every", "-1")
        c.expect_error("max-iter 0", ["sinkhorn", *paths, "--reg", "0.1", "--max-iter", "0"], "--max-iter")
        forbidden_row, minus_inf = c.path("forbidden_row.npy"), c.path("minus_inf.npy")
        y = M.copy()
        y[2, :] = np.inf
        np.save(forbidden_row, y)
        y = M.copy()
        y[1, 2] = -np.inf
        np.save(minus_inf, y)
        c.expect_error("a row forbidden everywhere", ["sinkhorn", paths[0], paths[1], forbidden_row, "--reg", "0.1"],
                       "row 2", "forbidden")
        c.expect_error("-inf cost", ["sinkhorn", paths[0], paths[1], minus_inf, "--reg", "0.1"], "-inf", "(1, 2)")

        print(f"{c.checks - c.failures} passed, {c.failures} failed")
        sys.exit(1 if c.failures else 0)


if __name__ == "__main__":
    main()
