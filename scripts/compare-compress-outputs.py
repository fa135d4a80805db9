#!/usr/bin/env python3
"""Runs two builds of `moecomp compress` (BEFORE and AFTER, e.g. before and after a refactoring) over every
method and option set on the embedded models and on a synthetic checkpoint of every family's layout, and
compares what they write: every file byte for byte (SHA-256), except compression_report.json, which is compared
as JSON with its timings (seconds, steps_seconds, peak_rss_bytes) left out. Prints one line per run and exits 1
on any difference.

Usage: scripts/compare-compress-outputs.py BEFORE/moecomp AFTER/moecomp"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reliability"))
sys.argv.append(sys.argv[2] if len(sys.argv) > 2 else "")  # test_hostile reads its tool from argv[1]
import numpy as np  # noqa: E402
import test_hostile  # noqa: E402
import output_digest  # noqa: E402

EMBEDDED = os.path.normpath(os.path.join(HERE, "..", "models", "tiny-moe"))
DENSE = os.path.normpath(os.path.join(HERE, "..", "models", "tiny-dense"))


def digest(folder):
    return output_digest.digest(folder, output_digest.TIMINGS | {"model"})


def main():
    before, after = sys.argv[1], sys.argv[2]
    runs = []
    for merge in ("frequency", "average", "fix-dom"):
        runs.append((EMBEDDED, ["--method", "hc-smoe", "--merge", merge]))
    for features in ("router-logits", "weights"):
        runs.append((EMBEDDED, ["--method", "hc-smoe", "--features", features, "--merge", "average"]))
    runs.append((EMBEDDED, ["--method", "hc-smoe", "--linkage", "ward", "--experts", "3"]))
    for merge in ("uniform", "dominant", "learned"):
        runs.append((EMBEDDED, ["--method", "cka-merge", "--merge", merge, "--experts", "5"]))
    for similarity in ("weights", "surrogate"):
        runs.append((EMBEDDED, ["--method", "cka-merge", "--similarity", similarity]))
    for criterion in ("frequency", "reap"):
        runs.append((EMBEDDED, ["--method", "prune", "--criterion", criterion, "--experts", "3"]))
    runs.append((EMBEDDED, ["--method", "resmoe", "--restore-dense"]))
    runs.append((EMBEDDED, ["--method", "resmoe", "--keep", "0.1", "--format", "bitmap", "--values", "fp16"]))
    runs.append((DENSE, ["--method", "moefy"]))
    runs.append((DENSE, ["--method", "moefy", "--experts", "16", "--top-k", "2", "--n-init", "2", "--seed", "3"]))
    differences = 0
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(20261128)
        for family in ("mixtral", "mixtral-fused", "olmoe", "qwen2_moe", "deepseek", "switch"):
            folder = os.path.join(tmp, f"fam-{family}")
            test_hostile.synthetic_family(folder, family, rng)
            for method in ("prune", "hc-smoe", "cka-merge", "resmoe"):
                extra = [] if method == "resmoe" else ["--experts", "4"]
                runs.append((folder, ["--method", method, *extra]))
        for k, (model, args) in enumerate(runs):
            outs = []
            for label, tool in (("before", before), ("after", after)):
                out = os.path.join(tmp, f"{label}-{k}")
                r = subprocess.run([tool, "compress", model, "-o", out, "--quiet", "--threads", "2", *args],
                                   capture_output=True, text=True)
                outs.append((r.returncode, r.stderr.strip(), digest(out) if r.returncode == 0 else None))
            same = outs[0] == outs[1]
            differences += not same
            what = f"{os.path.basename(model)} {' '.join(args)}"
            files = len(outs[0][2] or {})
            print(f"{'same' if same else 'DIFF'} {what}: exit {outs[0][0]}/{outs[1][0]}, {files} files"
                  + ("" if same else f"; before {outs[0][1]!r} after {outs[1][1]!r}"), flush=True)
            if not same and outs[0][2] and outs[1][2]:
                for name in sorted(set(outs[0][2]) | set(outs[1][2])):
                    if outs[0][2].get(name) != outs[1][2].get(name):
                        print(f"     {name} differs")
    print(f"{len(runs) - differences} same, {differences} different")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
