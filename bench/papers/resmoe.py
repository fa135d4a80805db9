#!/usr/bin/env python3
"""ResMoE's Tables 1, 4 and 5 in miniature: its method and its ablations and baselines at 25% retained
parameters per expert, on the embedded MoE (models/tiny-moe) and, when it exists, its upcycled twin
(models/tiny-moe-upcycled).

Rows (all `moecomp compress --method resmoe --restore-dense`, `--keep 0.25` unless said):

  ResMoE (WB + UP)   --center barycenter --residual prune      (ResMoE)
  Avg + UP           --center mean --residual prune            (Table 4's "Avg + UP")
  WB + SVD           --center barycenter --residual svd        (Table 4/5's "WB + SVD")
  Avg + SVD          --center mean --residual svd
  UP                 --center none --residual prune            (Table 1's UP: each expert pruned alone)
  SP                 --center none --residual structured       (Table 1's SP: each expert's 25% neurons of largest norm)
  SVD                --center none --residual svd              (Table 1's SVD of each expert)
  UP, centre counted --center none --keep 0.25 + 1/E           (UP with as many stored parameters as ResMoE
                                                                when its centre is counted; the paper does not count it)

The budget (ResMoE's Appendix A.4 and A.5): every method keeps 25% of each expert's parameters, the centre not
counted: prune keeps round-to-Python 25% of the design residual's entries, svd the rank
floor(0.25 I W / (I + W)) (I = d_ff, W = 3 d; the factors hold k (I + W) parameters), structured 25% of the
neurons (each W entries).

Columns: held-out perplexity (`models/evaluate.py --json` on OUT_DIR/dense, the restored experts), the bytes of
the compressed checkpoint's shards (moecomp's own format: base, permutations, residual files or SVD factors),
the mean over layers of the output error ||Y - Y'|| / ||Y|| on the model's calibration tokens, and ResMoE's
Appendix A.6 approximation error (mean over layers; per layer the mean over experts of the squared Frobenius
error of the design matrix, over d_ff).

It prints the table and the claims, writes them between the markers of docs/papers.md (the ResMoE section) and
draws docs/img/resmoe_ablations.png. One command, about 7 minutes on 2 shared cores for both models:

    /usr/bin/python3 bench/papers/resmoe.py --moecomp build/default/tools/cli/moecomp [--upcycled DIR]
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
BEGIN, END = "<!-- resmoe-table: begin (bench/papers/resmoe.py writes this) -->", "<!-- resmoe-table: end -->"
METHODS = [  # label, centre, residual, keep (None: --keep)
    ("ResMoE (WB + UP)", "barycenter", "prune", None),
    ("Avg + UP", "mean", "prune", None),
    ("WB + SVD", "barycenter", "svd", None),
    ("Avg + SVD", "mean", "svd", None),
    ("UP", "none", "prune", None),
    ("SP", "none", "structured", None),
    ("SVD", "none", "svd", None),
    ("UP, centre counted", "none", "prune", "centre"),
]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"resmoe.py: {' '.join(cmd[:4])} ... failed: {r.stderr.strip()}")
    return r.stdout


def perplexity(model_dir):
    out = run([sys.executable, os.path.join(ROOT, "models", "evaluate.py"), "--json", model_dir])
    return next(json.loads(line) for line in out.splitlines() if line.startswith("{"))["perplexity"]


def shard_bytes(directory):
    return sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory)
               if f.endswith(".safetensors") and not f.startswith("calibration"))


def py_round(x):
    return int(round(x))


def retained(report, centre, residual, keep, E, I, W):
    """Parameters stored per expert over the expert's I W (the centre not counted), and with it counted."""
    if residual == "prune":
        kept = I * W - py_round((1 - keep) * I * W)
    elif residual == "svd":
        kept = report["options"]["rank"] * (I + W)
    else:
        kept = (I - py_round((1 - keep) * I)) * W
    share = kept / (I * W)
    return share, share + (1.0 / E if centre != "none" else 0.0)


def models(extra):
    found = [("tiny-moe", os.path.join(ROOT, "models", "tiny-moe"))]
    for candidate in [os.path.join(ROOT, "models", "tiny-moe-upcycled")] + list(extra):
        if os.path.isdir(candidate):
            found.append((os.path.basename(os.path.normpath(candidate)), candidate))
            break
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--moecomp", required=True)
    p.add_argument("--keep", type=float, default=0.25)
    p.add_argument("--threads", default="2")
    p.add_argument("--upcycled", action="append", default=[],
                   help="another directory to look for the upcycled twin in (used when models/tiny-moe-upcycled is absent)")
    p.add_argument("--no-docs", action="store_true", help="print only; leave docs/papers.md and the plot alone")
    a = p.parse_args()
    started = time.time()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in models(a.upcycled):
            config = json.load(open(os.path.join(model, "config.json")))
            E, I, H = config["num_local_experts"], config["intermediate_size"], config["hidden_size"]
            W = 3 * H
            calibration = os.path.join(model, "calibration.safetensors")
            if not os.path.exists(calibration):
                calibration = os.path.join(tmp, f"{name}-calibration.safetensors")
                run([sys.executable, os.path.join(ROOT, "models", "make_calibration.py"), model, "-o", calibration])
            rows = [dict(label="uncompressed", centre="-", residual="-", share=1.0, counted=1.0,
                         ppl=perplexity(model), bytes=shard_bytes(model), output=0.0, a6=0.0, seconds=0.0)]
            for label, centre, residual, keep in METHODS:
                k = a.keep + 1.0 / E if keep == "centre" else a.keep
                out = os.path.join(tmp, f"{name}-{centre}-{residual}-{k:g}")
                t0 = time.time()
                report = json.loads(run([a.moecomp, "compress", model, "-o", out, "--method", "resmoe", "--center", centre,
                                         "--residual", residual, "--keep", repr(k), "--calibration", calibration,
                                         "--restore-dense", "--quiet", "--json", "--threads", a.threads]).splitlines()[-1])
                seconds = time.time() - t0
                layers = report["layers"]
                share, counted = retained(report, centre, residual, k, E, I, W)
                rows.append(dict(label=label, centre=centre, residual=residual, share=share, counted=counted,
                                 rank=report["options"]["rank"], ppl=perplexity(os.path.join(out, "dense")),
                                 bytes=shard_bytes(out),
                                 output=sum(l["output_relative_error"] for l in layers) / len(layers),
                                 a6=sum(l["resmoe_approximation_error"] for l in layers) / len(layers), seconds=seconds))
            results[name] = rows
    # The table.
    table = ["| model | method | centre | residual | parameters kept per expert (centre counted) | held-out perplexity | "
             "checkpoint bytes | mean layer output error | A.6 error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, rows in results.items():
        for r in rows:
            residual = r["residual"] + (f" (rank {r['rank']})" if r["residual"] == "svd" else "")
            table.append(f"| {name} | {r['label']} | {r['centre']} | {residual} | {r['share']:.3f} ({r['counted']:.3f}) | "
                         f"{r['ppl']:.4f} | {r['bytes']:,} | {r['output']:.4f} | {r['a6']:.5f} |")
    # The claims (ResMoE's Tables 1, 4, 5), per model.
    verdicts = []
    for name, rows in results.items():
        by = {r["label"]: r for r in rows}
        res = by["ResMoE (WB + UP)"]
        others = [l for l in ("UP", "SP", "SVD", "WB + SVD", "Avg + UP") if l in by]
        lowest = all(res["a6"] < by[l]["a6"] for l in others)
        verdicts.append((f"T1/T5 ({name}): ResMoE has the lowest A.6 error: {res['a6']:.5f} vs " +
                         ", ".join(f"{l} {by[l]['a6']:.5f}" for l in others), lowest))
        for other, claim in (("Avg + UP", "T4/T5: the barycenter beats the mean centre"),
                             ("WB + SVD", "T4/T5: pruning the residuals beats their SVD"),
                             ("UP", "T4: ResMoE beats UP"), ("SP", "T2/T3: ResMoE beats SP")):
            o = by[other]
            verdicts.append((f"{claim} ({name}): perplexity {res['ppl']:.4f} vs {o['ppl']:.4f}, A.6 error "
                             f"{res['a6']:.5f} vs {o['a6']:.5f}", res["ppl"] < o["ppl"] and res["a6"] < o["a6"]))
        up, sp = by["UP"], by["SP"]
        verdicts.append((f"T2/T3: UP beats SP ({name}): perplexity {up['ppl']:.4f} vs {sp['ppl']:.4f}",
                         up["ppl"] < sp["ppl"]))
        c = by["UP, centre counted"]
        verdicts.append((f"(not the paper's) ResMoE beats UP at equal stored parameters, its centre counted ({name}): "
                         f"perplexity {res['ppl']:.4f} vs {c['ppl']:.4f} (UP at keep {c['share']:.3f})",
                         res["ppl"] < c["ppl"]))
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    footer = (f"Run {datetime.date.today()} on {cpu}, {a.threads} threads, {time.time() - started:.0f} s: "
              f"`bench/papers/resmoe.py --keep {a.keep:g}` on {', '.join(results)}.")
    claims = [f"- {'holds' if ok else '**does not hold**'}: {text}" for text, ok in verdicts]
    print("\n".join(table))
    print("\n".join(claims))
    print(footer)
    if a.no_docs:
        return 0
    docs = os.path.join(ROOT, "docs", "papers.md")
    text = open(docs).read() if os.path.exists(docs) else ""
    block = "\n".join([BEGIN, "", *table, "", *claims, "", footer, "", END])
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        text += ("\n## ResMoE (Tables 1, 4, 5 in miniature)\n\n" + block + "\n")
    with open(docs, "w") as f:
        f.write(text)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("resmoe.py: matplotlib is missing (python3-matplotlib): no plot")
        return 0
    fig, axes = plt.subplots(1, len(results), figsize=(6.5 * len(results), 4.8), squeeze=False)
    for ax, (name, rows) in zip(axes[0], results.items()):
        for r in rows[1:]:
            marker = {"barycenter": "o", "mean": "s", "none": "^"}[r["centre"]]
            ax.scatter(r["a6"], r["ppl"], marker=marker, s=50)
            ax.annotate(r["label"], (r["a6"], r["ppl"]), fontsize=8, xytext=(4, 3), textcoords="offset points")
        ax.axhline(rows[0]["ppl"], color="gray", lw=1, label="uncompressed")
        ax.set_yscale("log")
        ax.set_xlabel("ResMoE's Appendix A.6 approximation error (mean over layers)")
        ax.set_ylabel("held-out perplexity")
        ax.set_title(f"{name}, {a.keep:.0%} of each expert's parameters kept")
        ax.legend(fontsize=8)
    os.makedirs(os.path.join(ROOT, "docs", "img"), exist_ok=True)
    fig.tight_layout()
    fig.savefig(os.path.join(ROOT, "docs", "img", "resmoe_ablations.png"), dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
