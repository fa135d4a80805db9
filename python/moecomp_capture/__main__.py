"""python3 -m moecomp_capture [MODEL_DIR] --text FILE -o OUT: the embedded model's calibration file from a text.

MODEL_DIR is a checkpoint directory of the repository's functional model (config.json and model.safetensors;
default models/tiny-moe, models/tiny-dense is its dense twin). The text's bytes are its tokens (the model is
byte-level), cut into windows of --seq-len bytes, --batch-size windows to a batch. Writes `layers.{i}.moe_input`
(T x hidden) per layer. For a Hugging Face model use the Python API (docs/capture.md).
Exit status: 0 written, 2 bad usage or input (one `moecomp_capture: error:` line), nothing written then.
"""
import argparse
import json
import os
import sys


from . import capture, load_embedded, set_blas_threads, windows, write_calibration
from .safetensors_io import dtype_name


def _parser():
    p = argparse.ArgumentParser(prog="python3 -m moecomp_capture", description=__doc__.splitlines()[0],
                                epilog="Regenerating models/tiny-moe/calibration.safetensors: docs/capture.md")
    p.add_argument("model_dir", nargs="?", default=None,
                   help="the embedded model's directory (default: the repository's models/tiny-moe)")
    p.add_argument("--text", required=True, help="the calibration text: a file whose bytes are the tokens")
    p.add_argument("-o", "--output", required=True, help="the calibration file to write (.safetensors)")
    p.add_argument("--seq-len", type=int, default=128, help="bytes per window (default 128)")
    p.add_argument("--batch-size", type=int, default=8, help="windows per forward (default 8)")
    p.add_argument("--max-tokens", type=int, default=None, help="keep the first N tokens of each layer")
    p.add_argument("--dtype", default="float32", help="float32 (default), bfloat16, float16 or float64")
    p.add_argument("--threads", type=int, default=1, help="torch's and OpenBLAS's threads (default 1, as training ran)")
    p.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE",
                   help="a __metadata__ entry of the file (repeatable; default: source = what was captured)")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    return p


def main(argv=None):
    p = _parser()
    a = p.parse_args(argv)
    try:
        dtype = dtype_name(a.dtype, "--dtype")
        for option, value in (("--seq-len", a.seq_len), ("--batch-size", a.batch_size), ("--threads", a.threads)):
            if value < 1:
                raise ValueError(f"{option}: expected an integer >= 1, got {value}")
        if a.max_tokens is not None and a.max_tokens < 1:
            raise ValueError(f"--max-tokens: expected an integer >= 1, got {a.max_tokens}")
        metadata = {}
        for entry in a.metadata:
            key, sep, value = entry.partition("=")
            if not sep or not key:
                raise ValueError(f"--metadata: expected KEY=VALUE, got {entry!r}")
            metadata[key] = value
        if not os.path.isfile(a.text):
            raise ValueError(f"--text: expected a regular file, got '{a.text}'")
        with open(a.text, "rb") as f:
            text = f.read()
        if not text:
            raise ValueError(f"--text: '{a.text}' is empty; expected at least one byte")
        model = load_embedded(a.model_dir)
        inputs = {os.path.realpath(os.path.join(model.model_dir, n)) for n in os.listdir(model.model_dir)
                  if n.endswith(".json") or (n.endswith(".safetensors") and n != "calibration.safetensors")}
        inputs.add(os.path.realpath(a.text))
        if os.path.realpath(a.output) in inputs:
            raise ValueError(f"-o: '{a.output}' is an input (the text or the model's files); name another file")
        set_blas_threads(a.threads)
        tensors = capture(model, windows(text, a.seq_len, a.batch_size), max_tokens=a.max_tokens, dtype=dtype)
        tokens = next(iter(tensors.values())).shape[0]
        if not metadata:
            metadata = {"source": f"moecomp_capture: {os.path.basename(a.text)}, the first {tokens} bytes, "
                                  f"windows of {a.seq_len}"}
        write_calibration(a.output, tensors, metadata=metadata)
    except (ValueError, OSError) as e:
        print(f"moecomp_capture: error: {e}", file=sys.stderr)
        return 2
    if not a.quiet:
        shape = list(next(iter(tensors.values())).shape)
        print(json.dumps({"output": a.output, "model": model.model_dir, "tensors": sorted(tensors), "shape": shape,
                          "dtype": dtype, "tokens": tokens}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
