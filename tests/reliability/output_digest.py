"""A compressed checkpoint directory as comparable values: every file's SHA-256, and compression_report.json as
JSON without the keys no two runs share (timings, memory; the caller may add more, such as "model"). Shared by
scripts/compare-compress-outputs.py, tests/mpi/test_compress_mpi.py and bench/compress_mpi_scaling.py."""
import hashlib
import json
import os

TIMINGS = frozenset({"seconds", "steps_seconds", "peak_rss_bytes"})


def without(value, keys):
    """`value` (parsed JSON) with every object's `keys` left out, at any depth."""
    if isinstance(value, dict):
        return {k: without(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [without(v, keys) for v in value]
    return value


def digest(folder, ignored=TIMINGS):
    """{relative path: SHA-256, or for compression_report.json its JSON without `ignored`} for every file."""
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder)
            if name == "compression_report.json":
                out[rel] = json.dumps(without(json.load(open(path)), ignored), sort_keys=True)
            else:
                out[rel] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return out
