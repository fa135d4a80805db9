#!/usr/bin/env python3
"""Side-by-side: moecomp's safetensors reader and writer against the Python route, same workloads, one run.

The `safetensors` package is not in Debian, so the Python route is what a script does without it: read the
8-byte length, json.loads the header and check the offsets; numpy.frombuffer over the mapped file and a
uint32 shift for bf16 -> float32 (and torch's .float() on torch.frombuffer, 2 threads); json.dumps plus two
writes for a file. Workloads as in bench/bench_safetensors.cpp:
  open   a 1,000-tensor shard header (Mixtral's naming), parsed and checked;
  bf16   one Mixtral expert matrix (14336 x 4096 bf16, 117 MB) to float32; floor: 117 MB read + 235 MB written
         at the copy bandwidth numpy measures here;
  write  that matrix written to /dev/shm.
moecomp's times are bench_safetensors's (Google Benchmark, real time).

    /usr/bin/python3 bench/peers/safetensors_vs_numpy.py --bench build/default/bench/bench_safetensors
"""
import argparse
import datetime
import json
import mmap
import os
import platform
import struct
import subprocess
import sys
import time
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import timed  # noqa: E402

ROWS, COLS = 14336, 4096


def shard_bytes():
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    names = [f"model.layers.{layer}.block_sparse_moe.experts.{expert}.{w}.weight"
             for layer in range(32) for expert in range(8) for w in ("w1", "w2", "w3")]
    names += [f"model.layers.{i % 32}.extra.{i}.weight" for i in range(len(names), 1000)]
    for name in sorted(names):
        shape = [2, 2] if ".experts." in name else [4]
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + 16]}
        offset += 16
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(offset)


def python_open(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    header.pop("__metadata__", None)
    position = 0
    for name, t in sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"])):
        begin, end = t["data_offsets"]
        assert begin == position and end - begin == int(np.prod(t["shape"])) * 4, name
        position = end
    return len(header)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", required=True, help="the bench_safetensors binary")
    p.add_argument("--threads", default="2")
    a = p.parse_args()
    torch.set_num_threads(int(a.threads))
    warnings.filterwarnings("ignore", message=".*not writable.*")  # torch.frombuffer over a read-only map
    scratch = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"

    run = subprocess.run([a.bench, "--benchmark_format=json", "--benchmark_repetitions=1"], check=True,
                         capture_output=True, text=True)
    ours = {b["name"].split("/")[0]: b["real_time"] * {"ms": 1e-3, "us": 1e-6, "ns": 1e-9}[b["time_unit"]]
            for b in json.loads(run.stdout)["benchmarks"]}

    path = os.path.join(scratch, "peer_open.safetensors")
    with open(path, "wb") as f:
        f.write(shard_bytes())
    open_s, count = timed(lambda: python_open(path), 20)
    os.remove(path)

    rng = np.random.default_rng(17)
    matrix = (rng.standard_normal((ROWS, COLS), dtype=np.float32) * 0.02)
    bits = (matrix.view(np.uint32) >> 16).astype(np.uint16)  # truncated to bf16: the values do not matter
    path = os.path.join(scratch, "peer_bf16.safetensors")
    header = json.dumps({"w1": {"dtype": "BF16", "shape": [ROWS, COLS], "data_offsets": [0, bits.nbytes]}},
                        separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)

    def python_write():
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header)
            f.write(bits.tobytes())

    write_s, _ = timed(python_write, 3)
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        start = 8 + len(header)
        source = np.frombuffer(mapped, dtype=np.uint16, count=ROWS * COLS, offset=start).reshape(ROWS, COLS)
        numpy_s, converted = timed(lambda: (source.astype(np.uint32) << 16).view(np.float32), 3)
        tensor = torch.frombuffer(mapped, dtype=torch.bfloat16, count=ROWS * COLS, offset=start).reshape(ROWS, COLS)
        torch_s, by_torch = timed(lambda: tensor.float(), 3)
        assert np.array_equal(by_torch.numpy(), converted)
        del source, tensor, converted, by_torch
        mapped.close()
    os.remove(path)

    copy = np.empty_like(matrix)
    np.copyto(copy, matrix)
    copy_s, _ = timed(lambda: np.copyto(copy, matrix), 3)
    bandwidth = 2 * matrix.nbytes / copy_s
    floor = (ROWS * COLS * 6) / bandwidth

    print(f"# {datetime.date.today()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{a.threads} threads; copy bandwidth {bandwidth / 1e9:.1f} GB/s")
    print(f"open {count}-tensor header:  moecomp {ours['open_1000_tensors'] * 1e3:.3f} ms   "
          f"python json {open_s * 1e3:.3f} ms   ratio {open_s / ours['open_1000_tensors']:.1f}x")
    print(f"bf16 -> f32 14336x4096:    moecomp {ours['bf16_to_float'] * 1e3:.1f} ms   numpy {numpy_s * 1e3:.1f} ms "
          f"(ratio {numpy_s / ours['bf16_to_float']:.2f}x)   torch {torch_s * 1e3:.1f} ms "
          f"(ratio {torch_s / ours['bf16_to_float']:.2f}x)   floor {floor * 1e3:.1f} ms")
    print(f"write 117 MB to {scratch}:   moecomp {ours['write_expert'] * 1e3:.1f} ms   python {write_s * 1e3:.1f} ms   "
          f"ratio {write_s / ours['write_expert']:.2f}x")


if __name__ == "__main__":
    main()
