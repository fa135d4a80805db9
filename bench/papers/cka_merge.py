#!/usr/bin/env python3
"""The fourth paper's ("Diversifying the expert knowledge", [4]) Tables 1, 3 and 4 in miniature, on the embedded
MoEs: tiny-moe (from scratch), tiny-moe-upcycled and tiny-qwen-moe-upcycled, each reduced by 25% and 50% of its
experts.

Main table (its Table 1-2): the baselines it compares against, count-guided pruning (F-prune per layer:
--criterion frequency), "Enumerate" (O-prune: --criterion output) and router-guided merging (M-SMoE: --method
m-smoe), against its own grouping and merging (--method cka-merge): data-centric (CKA of the expert outputs, the
uniform and the learned merge) and model-centric (the surrogate weights W2 (W1 . W3), no data for the grouping).
Ablations at 50% fewer experts on the upcycled twin (its Tables 3-4): the tokens used for the similarity
(--similarity-tokens 128, 512, all 1,024; augmentation off), and the augmentation (--augment 1024 seeded mixes)
with the router rows merged or kept with an id map (--router map).
Each row: held-out perplexity (`models/evaluate.py`), bytes on disk, the mean layer output error.

The claims checked (the paper's numbers are zero-shot accuracies on Mixtral, DeepSeek and Qwen; here perplexity):
  C1  its best strategy beats every baseline (count-guided, Enumerate, router-guided) at 25% and 50% (Table 1);
  C2  the model-centric strategy (surrogate weights) beats every data-involved baseline (Table 1);
  C3  more samples for the similarity help: 512 tokens beat 128 (Table 3);
  C4  merging the router rows beats keeping the router (Table 4 against Table 1's runs with merged routers).

It prints the tables, writes them between the markers of docs/papers.md (the fourth paper's section) and draws
docs/img/cka_merge_table1.png. One command, about 9 minutes on 2 cores:

    /usr/bin/python3 bench/papers/cka_merge.py --moecomp build/default/tools/cli/moecomp
"""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import papers_common as pc  # noqa: E402

BEGIN, END = "<!-- cka-merge-table: begin (bench/papers/cka_merge.py writes this) -->", "<!-- cka-merge-table: end -->"
MODELS = [("tiny-moe (from scratch)", "tiny-moe", 8), ("tiny-moe-upcycled", "tiny-moe-upcycled", 8),
          ("tiny-qwen-moe-upcycled", "tiny-qwen-moe-upcycled", 32)]
REDUCTIONS = (("25%", 3, 4), ("50%", 1, 2))
BASELINES = ["count-guided (F-prune)", "Enumerate (O-prune)", "router-guided (M-SMoE)"]
OURS = ["CKA + uniform merge", "CKA + learned merge", "surrogate weights + uniform"]
MAIN = [("count-guided (F-prune)", ["--method", "prune", "--criterion", "frequency"]),
        ("Enumerate (O-prune)", ["--method", "prune", "--criterion", "output"]),
        ("router-guided (M-SMoE)", ["--method", "m-smoe"]),
        ("CKA + uniform merge", ["--method", "cka-merge", "--similarity", "cka"]),
        ("CKA + learned merge", ["--method", "cka-merge", "--similarity", "cka", "--merge", "learned"]),
        ("surrogate weights + uniform", ["--method", "cka-merge", "--similarity", "surrogate"])]
ABLATIONS = [("similarity on 128 tokens", ["--similarity-tokens", "128"]),
             ("similarity on 512 tokens", ["--similarity-tokens", "512"]),
             ("similarity on all 1,024 tokens", []),
             ("augmented (1,024 mixes), router rows merged", ["--augment", "1024"]),
             ("augmented (1,024 mixes), router kept (id map)", ["--augment", "1024", "--router", "map"]),
             ("not augmented, router kept (id map)", ["--router", "map"])]


def fmt(v, digits=2):
    return "-" if v is None or v != v else f"{v:.{digits}f}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--moecomp", required=True)
    p.add_argument("--no-docs", action="store_true", help="print only; leave docs/papers.md and the plot alone")
    a = p.parse_args()
    started = time.time()
    models = [(label, os.path.join(pc.MODELS_DIR, d)) for label, d, _ in MODELS
              if os.path.isdir(os.path.join(pc.MODELS_DIR, d))]
    experts = {label: e for label, _, e in MODELS}
    ablation_model = models[1] if len(models) > 1 else models[0]
    ablation_n = experts[ablation_model[0]] // 2
    with tempfile.TemporaryDirectory() as tmp:
        jobs, keys = [], []

        def add(key, model, args):
            keys.append(key)
            out = os.path.join(tmp, str(len(keys)))
            jobs.append(lambda: (out, pc.compress(a.moecomp, model, out, args)))
        for label, model in models:
            for r, num, den in REDUCTIONS:
                n = experts[label] * num // den
                for name, args in MAIN:
                    add(("main", label, r, name), model, args + ["--experts", str(n)])
        for name, args in ABLATIONS:
            add(("ablation", name), ablation_model[1],
                ["--method", "cka-merge", "--similarity", "cka", "--experts", str(ablation_n)] + args)
        done = pc.parallel(jobs)
        evaluated = pc.evaluate([m for _, m in models] + [out for out, _ in done])
        original = {label: evaluated[m] for label, m in models}
        results = {}
        for key, (out, report) in zip(keys, done):
            errors = [layer.get("output_relative_error") for layer in report["layers"]]
            results[key] = (evaluated[out]["perplexity"], evaluated[out]["bytes_on_disk"], pc.mean(errors))

    lines = ["| model | method | 25% fewer experts: perplexity | bytes on disk | layer error | 50% fewer: perplexity "
             "| bytes on disk | layer error |", "|---|---|---|---|---|---|---|---|"]
    for label, _ in models:
        o = original[label]
        lines.append(f"| {label} | original ({experts[label]} experts) | {fmt(o['perplexity'], 3)} | "
                     f"{o['bytes_on_disk']:,} | 0 | {fmt(o['perplexity'], 3)} | {o['bytes_on_disk']:,} | 0 |")
        for name, _ in MAIN:
            cells = []
            for r, _, _ in REDUCTIONS:
                ppl, size, err = results[("main", label, r, name)]
                cells += [fmt(ppl), f"{size:,}", fmt(err, 3)]
            lines.append(f"| {label} | {name} | " + " | ".join(cells) + " |")
    lines += ["", f"Ablations on {ablation_model[0]} at {experts[ablation_model[0]]} → {ablation_n} experts (its "
              "Tables 3-4; CKA grouping, uniform merge):", "", "| setting | perplexity | layer error |", "|---|---|---|"]
    for name, _ in ABLATIONS:
        ppl, _, err = results[("ablation", name)]
        lines.append(f"| {name} | {fmt(ppl)} | {fmt(err, 3)} |")

    def ppl(label, r, name):
        return results[("main", label, r, name)][0]
    claims = ["", "| claim | model | holds here? | evidence |", "|---|---|---|---|"]
    for label, _ in models:
        for r, _, _ in REDUCTIONS:
            best_ours = min(OURS, key=lambda m: ppl(label, r, m))
            best_base = min(BASELINES, key=lambda m: ppl(label, r, m))
            o, b = ppl(label, r, best_ours), ppl(label, r, best_base)
            claims.append(f"| C1 its best strategy beats every baseline, {r} fewer | {label} | "
                          f"{'yes' if o < b else 'no'} | {best_ours} {fmt(o)}; best baseline, {best_base}, {fmt(b)} |")
            s = ppl(label, r, "surrogate weights + uniform")
            claims.append(f"| C2 model-centric (surrogate) beats every baseline, {r} fewer | {label} | "
                          f"{'yes' if s < b else 'no'} | surrogate {fmt(s)}; {best_base} {fmt(b)} |")
    ab = {name: results[("ablation", name)][0] for name, _ in ABLATIONS}
    t128, t512 = ab["similarity on 128 tokens"], ab["similarity on 512 tokens"]
    claims.append(f"| C3 512 tokens for the similarity beat 128 | {ablation_model[0]} | "
                  f"{'yes' if t512 < t128 else 'tie' if t512 == t128 else 'no'} | 128: {fmt(t128)}, 512: {fmt(t512)}, "
                  f"1,024: {fmt(ab['similarity on all 1,024 tokens'])} |")
    merged, kept = ab["augmented (1,024 mixes), router rows merged"], ab["augmented (1,024 mixes), router kept (id map)"]
    claims.append(f"| C4 merging the router rows beats keeping the router | {ablation_model[0]} | "
                  f"{'yes' if merged < kept else 'no'} | augmented: merged {fmt(merged)}, kept {fmt(kept)}; not "
                  f"augmented: merged {fmt(ab['similarity on all 1,024 tokens'])}, kept "
                  f"{fmt(ab['not augmented, router kept (id map)'])} |")
    text = lines + claims + ["", pc.footer(started, "bench/papers/cka_merge.py")]
    print("\n".join(text))
    if a.no_docs:
        return
    pc.write_block(BEGIN, END, text)
    pc.perplexity_bars("cka_merge_table1.png",
                       [label for label, _ in models], [name for name, _ in MAIN],
                       [r for r, _, _ in REDUCTIONS], ppl,
                       {label: o["perplexity"] for label, o in original.items()})

if __name__ == "__main__":
    main()
