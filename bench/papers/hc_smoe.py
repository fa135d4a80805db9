#!/usr/bin/env python3
"""HC-SMoE's Tables 2-3, 4 and 7 in miniature, on the embedded MoEs: the from-scratch tiny-moe, its upcycled twin
(models/tiny-moe-upcycled, the same shape) and the fine-grained Qwen2-MoE twin (models/tiny-qwen-moe-upcycled: 32
experts, top-4, a shared expert), each reduced by 25% and 50% of its experts (8 -> 6, 4; 32 -> 24, 16).

Main table (HC-SMoE's Table 2-3): the pruning baselines O-prune (--criterion output: the subset whose layer output
is closest, all 28 / 70 subsets), S-prune and F-prune (HC-SMoE's global ranking: --criterion router-score /
frequency --global), the merging baseline M-SMoE (--method m-smoe, when the tool has it), HC-SMoE with average and
single linkage (expert-output features, frequency merge: the paper's defaults), and HC-SMoE with neurons aligned
before the merge (--align weights, moecomp's addition). Each row: held-out perplexity (`models/evaluate.py`),
bytes of the model's *.safetensors on disk, the mean over layers of the layer output error on the calibration
tokens (||Y - Y'|| / ||Y||, the report's) and, for the merges, the largest group of each layer.
Ablations at 8 -> 6 on the upcycled twin: linkage x metric (Table 4) and the merge (Table 7).

The claims checked (the paper's numbers are zero-shot accuracies on Qwen and Mixtral; here perplexity):
  C1  HC-SMoE (avg) beats every pruning baseline (O-, S-, F-prune) at 25% and at 50% (Tables 2-3);
  C2  HC-SMoE (avg) beats M-SMoE (Tables 2-3);
  C3  average linkage on expert outputs is the best linkage x metric pair (Table 4; within 1% of the best is a tie);
  C4  the merge hardly matters: frequency, average and fix-dom within 5% of each other's perplexity (Table 7:
      within 0.3 points of accuracy).

It prints the tables, writes them between the markers of docs/papers.md (the HC-SMoE section) and draws
docs/img/hc_smoe_table3.png. One command, about 9 minutes on 2 cores:

    /usr/bin/python3 bench/papers/hc_smoe.py --moecomp build/default/tools/cli/moecomp
"""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import papers_common as pc  # noqa: E402

BEGIN, END = "<!-- hc-smoe-table: begin (bench/papers/hc_smoe.py writes this) -->", "<!-- hc-smoe-table: end -->"
MODELS = [("tiny-moe (from scratch)", "tiny-moe", 8), ("tiny-moe-upcycled", "tiny-moe-upcycled", 8),
          ("tiny-qwen-moe-upcycled", "tiny-qwen-moe-upcycled", 32)]
REDUCTIONS = (("25%", 3, 4), ("50%", 1, 2))  # experts kept = E x numerator / denominator
PRUNING = ["O-prune", "S-prune (global)", "F-prune (global)"]


def main_rows(has_msmoe):
    rows = [("O-prune", ["--method", "prune", "--criterion", "output"]),
            ("S-prune (global)", ["--method", "prune", "--criterion", "router-score", "--global"]),
            ("F-prune (global)", ["--method", "prune", "--criterion", "frequency", "--global"])]
    if has_msmoe:
        rows.append(("M-SMoE", ["--method", "m-smoe"]))
    rows += [("HC-SMoE (avg)", ["--method", "hc-smoe"]),
             ("HC-SMoE (single)", ["--method", "hc-smoe", "--linkage", "single"]),
             ("HC-SMoE (avg) + aligned", ["--method", "hc-smoe", "--align", "weights"])]
    return rows


def ablation_rows():
    rows = []
    for linkage in ("single", "complete", "average"):
        for metric in ("router-logits", "weights", "outputs"):
            rows.append((f"{linkage} / {metric}", ["--method", "hc-smoe", "--linkage", linkage, "--features", metric]))
    for merge in ("frequency", "average", "fix-dom"):
        rows.append((f"merge {merge}", ["--method", "hc-smoe", "--merge", merge]))
    return rows


def fmt(v, digits=2):
    return "-" if v is None or v != v else f"{v:.{digits}f}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--moecomp", required=True)
    p.add_argument("--no-docs", action="store_true", help="print only; leave docs/papers.md and the plot alone")
    a = p.parse_args()
    started = time.time()
    has_msmoe = "m-smoe" in pc.run([a.moecomp, "compress", "--help"])
    models = [(label, os.path.join(pc.MODELS_DIR, d)) for label, d, _ in MODELS
              if os.path.isdir(os.path.join(pc.MODELS_DIR, d))]
    experts = {label: e for label, _, e in MODELS}
    kept = {(label, r): experts[label] * num // den for label, _ in models for r, num, den in REDUCTIONS}
    ablation_model = models[1] if len(models) > 1 else models[0]
    with tempfile.TemporaryDirectory() as tmp:
        jobs, keys = [], []
        for label, model in models:
            for n, _, _ in REDUCTIONS:
                for name, args in main_rows(has_msmoe):
                    keys.append(("main", label, n, name))
                    out = os.path.join(tmp, f"{len(keys)}")
                    jobs.append(lambda model=model, out=out, args=args, n=kept[(label, n)]: (out, pc.compress(
                        a.moecomp, model, out, args + ["--experts", str(n)])))
        for name, args in ablation_rows():
            keys.append(("ablation", ablation_model[0], 6, name))
            out = os.path.join(tmp, f"{len(keys)}")
            jobs.append(lambda out=out, args=args: (out, pc.compress(a.moecomp, ablation_model[1], out,
                                                                    args + ["--experts", "6"])))
        done = pc.parallel(jobs)
        evaluated = pc.evaluate([m for _, m in models] + [out for out, _ in done])
        original = {label: evaluated[m] for label, m in models}
        results = {}
        for key, (out, report) in zip(keys, done):
            errors = [layer.get("output_relative_error") for layer in report["layers"]]
            largest = [max(len(g) for g in layer["groups"]) for layer in report["layers"] if layer.get("groups")]
            results[key] = (evaluated[out]["perplexity"], evaluated[out]["bytes_on_disk"], pc.mean(errors),
                            largest)

    lines = ["| model | method | 25% fewer experts: perplexity | bytes on disk | layer error | largest group | 50% "
             "fewer: perplexity | bytes on disk | layer error | largest group |", "|---|---|---|---|---|---|---|---|---|---|"]
    for label, _ in models:
        o = original[label]
        lines.append(f"| {label} | original ({experts[label]} experts) | {fmt(o['perplexity'], 3)} | {o['bytes_on_disk']:,} | 0 | - | "
                     f"{fmt(o['perplexity'], 3)} | {o['bytes_on_disk']:,} | 0 | - |")
        for name, _ in main_rows(has_msmoe):
            cells = []
            for n, _, _ in REDUCTIONS:
                ppl, size, err, largest = results[("main", label, n, name)]
                cells += [fmt(ppl), f"{size:,}", fmt(err, 3), ", ".join(map(str, largest)) or "-"]
            lines.append(f"| {label} | {name} | " + " | ".join(cells) + " |")
    lines += ["", f"Ablations on {ablation_model[0]} at 8 → 6 (HC-SMoE's Tables 4 and 7; expert-output features, "
              "average linkage and the frequency merge unless named):", "",
              "| linkage / metric or merge | perplexity | layer error | largest group per layer |", "|---|---|---|---|"]
    for name, _ in ablation_rows():
        ppl, _, err, largest = results[("ablation", ablation_model[0], 6, name)]
        lines.append(f"| {name} | {fmt(ppl)} | {fmt(err, 3)} | {', '.join(map(str, largest))} |")

    def ppl(label, n, name):
        return results[("main", label, n, name)][0]
    claims = ["", "| claim | model | holds here? | evidence |", "|---|---|---|---|"]
    for label, _ in models:
        for n, _, _ in REDUCTIONS:
            hc = ppl(label, n, "HC-SMoE (avg)")
            best_name = min(PRUNING, key=lambda m: ppl(label, n, m))
            best = ppl(label, n, best_name)
            claims.append(f"| C1 HC-SMoE beats the pruning baselines, {n} fewer experts | {label} | "
                          f"{'yes' if hc < best else 'no'} | HC-SMoE {fmt(hc)}, best pruning ({best_name}) {fmt(best)} |")
            if has_msmoe:
                ms = ppl(label, n, "M-SMoE")
                claims.append(f"| C2 HC-SMoE beats M-SMoE, {n} fewer experts | {label} | {'yes' if hc < ms else 'no'} | "
                              f"HC-SMoE {fmt(hc)}, M-SMoE {fmt(ms)} |")
    ab = {name: results[("ablation", ablation_model[0], 6, name)][0] for name, _ in ablation_rows()}
    pairs = [n for n in ab if "/" in n]
    best_pair = min(pairs, key=lambda n: ab[n])
    gap = ab["average / outputs"] / ab[best_pair] - 1
    verdict = "yes" if best_pair == "average / outputs" else f"tie ({100 * gap:.1f}% behind)" if gap <= 0.01 else "no"
    claims.append(f"| C3 average linkage on expert outputs is the best pair | {ablation_model[0]} | {verdict} | best: "
                  f"{best_pair} ({fmt(ab[best_pair])}); average / outputs {fmt(ab['average / outputs'])} |")
    merges = [ab[f"merge {m}"] for m in ("frequency", "average", "fix-dom")]
    spread = max(merges) / min(merges) - 1
    claims.append(f"| C4 the merge hardly matters (within 5%) | {ablation_model[0]} | {'yes' if spread <= 0.05 else 'no'} "
                  f"| frequency / average / fix-dom: {' / '.join(fmt(v) for v in merges)} ({100 * spread:.0f}% apart) |")
    text = lines + claims + ["", pc.footer(started, "bench/papers/hc_smoe.py")]
    print("\n".join(text))
    if a.no_docs:
        return
    pc.write_block(BEGIN, END, text)
    pc.perplexity_bars("hc_smoe_table3.png",
                       [label for label, _ in models], [name for name, _ in main_rows(has_msmoe)],
                       [r for r, _, _ in REDUCTIONS], ppl,
                       {label: o["perplexity"] for label, o in original.items()})

if __name__ == "__main__":
    main()
