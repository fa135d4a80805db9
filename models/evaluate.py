#!/usr/bin/env python3
"""Held-out perplexity of the embedded model, original or compressed (any checkpoint in its Mixtral layout:
merged or pruned experts, a reduced num_local_experts, ResMoE restored dense).

    /usr/bin/python3 models/evaluate.py [MODEL_DIR ...]      default: models/tiny-moe

The held-out bytes are MODEL_DIR/heldout.bin when present, else models/tiny-moe/heldout.bin, else they are cut
from /usr/share/common-licenses as train_tiny_moe.py cuts them.
"""
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
    dirs = sys.argv[1:] or [os.path.join(HERE, "tiny-moe")]
    for model_dir in dirs:
        weights, config = tiny_moe.load(model_dir)
        ppl = tiny_moe.perplexity(weights, config, held_out(model_dir))
        print(f"{model_dir}: held-out perplexity {ppl:.4f} ({config['num_local_experts']} experts, "
              f"top-{config['num_experts_per_tok']})")


if __name__ == "__main__":
    main()
