#!/usr/bin/env python3
"""Regenerates a calibration file of an embedded model from its training text, with as many tokens as asked.

    /usr/bin/python3 models/make_calibration.py MODEL_DIR [--tokens N] [--dtype f32|bf16] [-o OUT]

`layers.{i}.moe_input` is layer i's MoE-block input (tiny-moe) or FFN input (the dense models): the
post-attention RMSNorm's output, N x hidden float32 (or bf16), on the first N bytes of the training text (the
licence collection train_tiny_moe.py trains on, its training split), cut into windows of 128 bytes and run by
the checkpoint's saved weights 8 windows per forward, on one thread. It is what train_tiny_moe.py writes with
--calibration-tokens N: with N = 1024 (the default) the computation of the committed calibration.safetensors,
and the first 1,024 rows of any larger file are that file's. SADMoE's router training wants far more tokens:

    /usr/bin/python3 models/make_calibration.py models/tiny-dense --tokens 16384
        -> models/tiny-dense/calibration-16384.safetensors (33.6 MB in f32, 16.8 MB in bf16: not committed,
           models/.gitignore; about 10 s on one core)

OUT defaults to MODEL_DIR/calibration.safetensors for N = 1024 and f32 (the committed file), else to
MODEL_DIR/calibration-N.safetensors (-bf16 before the suffix for bf16). N is a multiple of 128, at most the
213,768 training bytes. The text's SHA-256 is checked as train_tiny_moe.py checks it (--any-corpus to skip).
Exit 2 with one line on bad input.
"""
import argparse
import hashlib
import os
import sys

if __name__ == "__main__":
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = "1"

import torch

import tiny_moe
from train_tiny_moe import CORPUS_SHA256


def default_output(model_dir, tokens, dtype):
    if tokens == 1024 and dtype == "f32":
        return os.path.join(model_dir, "calibration.safetensors")
    return os.path.join(model_dir, f"calibration-{tokens}{'-bf16' if dtype == 'bf16' else ''}.safetensors")


def main():
    p = argparse.ArgumentParser(prog="make_calibration.py", description=__doc__.splitlines()[0])
    p.add_argument("model_dir")
    p.add_argument("--tokens", type=int, default=1024, metavar="N", help="training bytes (a multiple of 128)")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("-o", "--output", default=None)
    p.add_argument("--any-corpus", action="store_true", help="accept a corpus whose SHA-256 differs")
    a = p.parse_args()
    torch.set_num_threads(1)

    def fail(message):
        print(f"make_calibration.py: error: {message}", file=sys.stderr)
        sys.exit(2)

    text = tiny_moe.corpus()
    digest = hashlib.sha256(text).hexdigest()
    if digest != CORPUS_SHA256 and not a.any_corpus:
        fail(f"the corpus's SHA-256 is {digest}, not the recorded {CORPUS_SHA256} (--any-corpus to go on)")
    train, _ = tiny_moe.split(text)
    try:
        tiny_moe.check_calibration_tokens(a.tokens, len(train))
    except ValueError as e:
        fail(f"--tokens: {e}")
    try:
        weights, config = tiny_moe.load(a.model_dir)
    except (OSError, ValueError, KeyError) as e:
        fail(f"{a.model_dir}: cannot read the checkpoint: {e}")
    inputs = tiny_moe.calibration_inputs(weights, config, train, a.tokens)
    if a.dtype == "bf16":
        inputs = [t.to(torch.bfloat16) for t in inputs]
    out = a.output or default_output(a.model_dir, a.tokens, a.dtype)
    tiny_moe.write_safetensors(out, {f"layers.{i}.moe_input": t for i, t in enumerate(inputs)},
                               {"source": tiny_moe.calibration_source(a.tokens)})
    print(f"wrote {out}: {len(inputs)} layers x {a.tokens} x {inputs[0].shape[1]} {a.dtype}, "
          f"{os.path.getsize(out)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
