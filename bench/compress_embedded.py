#!/usr/bin/env python3
"""`moecomp compress` on the embedded models (models/tiny-moe; models/tiny-dense for moefy), every method: the median wall time of 3 runs, the
peak resident memory (the report's getrusage figure), the layers' output errors and, with --perplexity, the
held-out perplexity of the output (models/evaluate.py; python3-torch).

    /usr/bin/python3 bench/compress_embedded.py PATH/TO/moecomp [--perplexity]
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EVALUATE = os.path.join(HERE, "..", "models", "evaluate.py")
RUNS = [
    ("hc-smoe", []), ("hc-smoe", ["--merge", "fix-dom"]), ("hc-smoe", ["--features", "weights", "--merge", "average"]),
    ("cka-merge", []), ("cka-merge", ["--merge", "dominant"]), ("cka-merge", ["--merge", "learned"]),
    ("resmoe", ["--restore-dense"]), ("prune", []), ("prune", ["--criterion", "reap"]),
    ("moefy", []), ("moefy", ["--top-k", "16"]), ("moefy", ["--experts", "8", "--top-k", "4"]),
]


def main():
    tool, perplexity = sys.argv[1], "--perplexity" in sys.argv[2:]
    print("| method | options | seconds (median of 3) | peak RSS | bits per weight | layer errors | perplexity |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        for method, options in RUNS:
            times = []
            for _ in range(3):
                shutil.rmtree(out, ignore_errors=True)
                start = time.time()
                r = subprocess.run([tool, "compress", "-o", out, "--method", method, "--quiet", "--json", *options],
                                   capture_output=True, text=True)
                times.append(time.time() - start)
                if r.returncode != 0:
                    sys.exit(f"{method} {options}: {r.stderr.strip()}")
            report = json.loads(r.stdout.strip().splitlines()[-1])
            errors = ", ".join(f"{l['output_relative_error']:.3f}" for l in report["layers"])
            ppl = "-"
            if perplexity:
                target = os.path.join(out, "dense") if method == "resmoe" else out
                e = subprocess.run([sys.executable, EVALUATE, target], capture_output=True, text=True)
                ppl = e.stdout.strip().split("perplexity ")[-1].split(" ")[0] if e.returncode == 0 else "error"
            print(f"| {method} | {' '.join(options) or 'defaults'} | {statistics.median(times):.2f} | "
                  f"{report['totals']['peak_rss_bytes'] / 1e6:.1f} MB | {report['totals']['bits_per_weight']:.2f} | "
                  f"{errors} | {ppl} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
