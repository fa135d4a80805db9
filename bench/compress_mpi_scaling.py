#!/usr/bin/env python3
"""Issue 37's scaling figure: `moecomp compress` on a synthetic 4-layer checkpoint (Mixtral layout, bf16), one
process of one thread against `mpirun -n 2` ranks of one thread each, per method; the outputs compared byte for
byte. Also the launcher's own cost (mpirun -n 2 through MPI_Init and the model's reading, then an option refused),
which is part of where the time beyond half goes.

Usage: bench/compress_mpi_scaling.py build/mine/tools/cli/moecomp [--hidden 1024 --ffn 2048 --tokens 1024]
       [--methods hc-smoe,resmoe,prune,cka-merge] [--repeats 1]"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reliability"))


def timed(command, env):
    start = time.perf_counter()
    r = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(command)}\n{r.stderr}")
    return seconds


def main():
    a = argparse.ArgumentParser()
    a.add_argument("tool")
    a.add_argument("--hidden", type=int, default=1024)
    a.add_argument("--ffn", type=int, default=2048)
    a.add_argument("--experts", type=int, default=8)
    a.add_argument("--tokens", type=int, default=1024)
    a.add_argument("--methods", default="hc-smoe,cka-merge,prune,resmoe")
    a.add_argument("--repeats", type=int, default=1)
    args = a.parse_args()
    tool = os.path.abspath(args.tool)
    sys.argv[1:] = [tool]
    import numpy as np
    import test_hostile
    from output_digest import digest

    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    mpirun = [shutil.which("mpirun"), "-n", "2", "--oversubscribe", "--bind-to", "core"]
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model")
        test_hostile.synthetic_family(model, "mixtral", np.random.default_rng(37), experts=args.experts,
                                      hidden=args.hidden, ffn=args.ffn, tokens=args.tokens, layers=4)
        size = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model))
        # The launcher, MPI_Init and MPI_Finalize of two ranks on the embedded model, whose layers take milliseconds:
        # the fixed cost of a two-rank run over a one-process one.
        tiny = os.path.join(HERE, "..", "models", "tiny-moe")
        def tiny_run(command):
            shutil.rmtree(os.path.join(tmp, "tiny"), ignore_errors=True)
            return timed([*command, tool, "compress", tiny, "-o", os.path.join(tmp, "tiny"), "--method", "prune",
                          "--quiet", "--threads", "1"], env)
        launcher = min(tiny_run(mpirun) for _ in range(3)) - min(tiny_run([]) for _ in range(3))
        print(f"4 MoE layers of {args.experts} experts of {args.ffn} x {args.hidden} (bf16), {args.tokens} calibration "
              f"tokens, {size / 1e6:.0f} MB; the fixed cost of 2 ranks (launch, MPI_Init, MPI_Finalize; the embedded "
              f"model's run on 2 ranks less on 1): {launcher:.2f} s")
        print(f"{'method':<12} {'1 process':>10} {'2 ranks':>10} {'ratio':>7}  output")
        for method in args.methods.split(","):
            extra = ["--method", method] + ([] if method == "resmoe" else ["--experts", str(args.experts // 2)])
            one, two = os.path.join(tmp, "one"), os.path.join(tmp, "two")
            t1 = t2 = float("inf")
            for _ in range(args.repeats):
                for d in (one, two):
                    shutil.rmtree(d, ignore_errors=True)
                t1 = min(t1, timed([tool, "compress", model, "-o", one, "--quiet", "--threads", "1", *extra], env))
                t2 = min(t2, timed([*mpirun, tool, "compress", model, "-o", two, "--quiet", "--threads", "1", *extra],
                                   env))
            same = digest(one) == digest(two)
            layer_seconds = sum(l["seconds"] for l in json.load(open(os.path.join(one, "compression_report.json")))["layers"])
            # The 2-rank report holds every layer's seconds as its rank measured them; the split is assign_layers'
            # (largest first to the lightest rank), here on equal layers: 0, 2 to rank 0 and 1, 3 to rank 1.
            layers = json.load(open(os.path.join(two, "compression_report.json")))["layers"]
            per_rank = [0.0, 0.0]
            load = [0.0, 0.0]
            for k in sorted(range(len(layers)), key=lambda k: -layers[k]["bytes_before"]):
                r = 0 if load[0] <= load[1] else 1
                load[r] += layers[k]["bytes_before"]
                per_rank[r] += layers[k]["seconds"]
            print(f"{method:<12} {t1:>9.2f}s {t2:>9.2f}s {t2 / t1:>7.3f}  {'identical' if same else 'DIFFERENT'}"
                  f"  (1 process: {layer_seconds:.2f} s in layers; 2 ranks: {per_rank[0]:.2f} / {per_rank[1]:.2f} s in "
                  f"layers, {t2 - max(per_rank):.2f} s beyond the slower rank's layers)")


if __name__ == "__main__":
    main()
