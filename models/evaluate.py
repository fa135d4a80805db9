#!/usr/bin/env python3
"""Held-out perplexity of the embedded models, original or compressed: any checkpoint of tiny-moe in its
Mixtral layout (merged or pruned experts, a reduced num_local_experts, ResMoE restored dense), and tiny-dense
in its Mistral layout, as trained or split into experts by `moecomp compress --method moefy`.

    /usr/bin/python3 models/evaluate.py [--top-k K[,K...]] [MODEL_DIR ...]      default: models/tiny-moe

A moefy checkpoint is evaluated with the top-k its config records, or with each K of --top-k (K = its number
of experts is the dense FFN).

The held-out bytes are MODEL_DIR/heldout.bin when present, else models/tiny-moe/heldout.bin, else they are cut
from /usr/share/common-licenses as train_tiny_moe.py cuts them.
"""
import argparse
import hashlib
import os
import sys

import torch

import tiny_moe
from train_tiny_moe import CORPUS_SHA256

HERE = os.path.dirname(os.path.abspath(__file__))


def held_out(model_dir):
    for path in (os.path.join(model_dir, "heldout.bin"), os.path.join(HERE, "tiny-moe", "heldout.bin")):
        if os.path.exists(path):
            return open(path, "rb").read()
    text = tiny_moe.corpus()
    if hashlib.sha256(text).hexdigest() != CORPUS_SHA256:
        print("evaluate: warning: /usr/share/common-licenses differs from the training corpus (SHA-256); the "
              "held-out bytes are not the recorded ones", file=sys.stderr)
    return tiny_moe.split(text)[1]


def main():
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--top-k", default=None, help="moefy checkpoints: comma-separated experts per token")
    p.add_argument("dirs", nargs="*")
    a = p.parse_args()
    dirs = a.dirs or [os.path.join(HERE, "tiny-moe")]
    for model_dir in dirs:
        weights, config = tiny_moe.load(model_dir)
        held = held_out(model_dir)
        moefy = config.get("moecomp_moefy")
        if moefy is not None:
            for k in [int(v) for v in a.top_k.split(",")] if a.top_k else [moefy["top_k"]]:
                ppl = tiny_moe.perplexity(weights, config, held, top_k=k)
                print(f"{model_dir}: held-out perplexity {ppl:.4f} (moefy: {moefy['num_experts']} experts of "
                      f"{moefy['expert_size']} neurons, top-{k})")
        elif "num_local_experts" in config:
            ppl = tiny_moe.perplexity(weights, config, held)
            print(f"{model_dir}: held-out perplexity {ppl:.4f} ({config['num_local_experts']} experts, "
                  f"top-{config['num_experts_per_tok']})")
        else:
            ppl = tiny_moe.perplexity(weights, config, held)
            print(f"{model_dir}: held-out perplexity {ppl:.4f} (dense FFN of {config['intermediate_size']} neurons)")


if __name__ == "__main__":
    main()
