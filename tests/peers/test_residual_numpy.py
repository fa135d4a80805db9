#!/usr/bin/env python3
"""`moecomp residual-encode` / `residual-decode` against numpy (and torch's l1_unstructured for the mask).

* The residual R = P W - B (row i of W goes to base row P[i]) pruned with torch.nn.utils.prune.l1_unstructured's
  mask (tie-free data), then encoded: the tool's file is byte for byte the file that an independent numpy
  transcription of the documented layout (residual_format.py) writes for that R, for every format (csr16,
  bitmap, 2:4 with 2:4 pruning) and value dtype (fp32, fp16, bf16), and --json's counts and sizes agree.
* --json's squared_error (ResMoE's approximation error, Appendix A.6) equals ||P W - (B + stored R)||_F^2 from
  numpy in float64.
* residual-decode gives B + R in float32 exactly as numpy adds them, in W's own row order with --permutation;
  files written by the transcription decode the same way (both directions of the layout).
* Corrupt files: truncated, bad checksum, wrong version, shape disagreeing with the base, column index out of
  range, row offsets not monotone, bitmap popcount disagreeing with the count (checksums recomputed, so the
  content checks are reached): exit 2, one "moecomp: error:" line, no output file.

Usage: test_residual_numpy.py PATH/TO/moecomp"""
import json
import os
import struct
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

np, torch = require("numpy", "torch")
import torch.nn.utils.prune as torch_prune  # noqa: E402
import residual_format  # noqa: E402


def distinct_residual(rng, shape):
    """B and W whose difference has distinct magnitudes (no ties at any threshold), exactly representable."""
    size = int(np.prod(shape))
    mags = (rng.permutation(size) + 1).astype(np.float32) / 1024
    signs = np.where(rng.random(size) < 0.5, -1.0, 1.0).astype(np.float32)
    base = (rng.integers(-64, 64, size=shape) / 16).astype(np.float32)
    return base, (base + (mags * signs).reshape(shape)).astype(np.float32)


def torch_pruned(r, amount):
    t = torch.from_numpy(np.ascontiguousarray(r))
    mask = torch_prune.L1Unstructured(amount=amount).compute_mask(t, default_mask=torch.ones_like(t)).numpy() != 0
    return np.where(mask, r, np.float32(0)), int(mask.sum())


def two_of_four(r):
    """The 2 largest |r| of each group of 4 (ties by the lower position), the rest 0."""
    g = r.reshape(r.shape[0], -1, 4)
    order = np.argsort(-np.abs(g), axis=2, kind="stable")[:, :, :2]
    out = np.zeros_like(g)
    np.put_along_axis(out, order, np.take_along_axis(g, order, axis=2), axis=2)
    return out.reshape(r.shape)


def as_stored(r, dtype):
    """What decoding gives for values stored as dtype."""
    return residual_format.decode(residual_format.encode(r, "bitmap", dtype))[0]


def fix_checksums(b):
    b = bytearray(b)
    struct.pack_into("<I", b, 104, zlib.crc32(bytes(b[128:])))
    struct.pack_into("<I", b, 124, zlib.crc32(bytes(b[:124])))
    return bytes(b)


class Checker(ToolRunner):

    def encode(self, *args):
        out = self.path("r.bin")
        if os.path.exists(out):
            os.remove(out)
        r = self.run("residual-encode", self.path("b.npy"), self.path("w.npy"), "-o", out, "--json", *args)
        if r.returncode != 0:
            return None, None, r.stderr.strip()
        with open(out, "rb") as f:
            return f.read(), json.loads(r.stdout), ""

    def decode(self, residual, *args):
        out = self.path("back.npy")
        r = self.run("residual-decode", self.path("b.npy"), residual, "-o", out, *args)
        return (np.load(out), "") if r.returncode == 0 else (None, r.stderr.strip())

    def formats(self, rng):
        for shape in ((48, 80), (7, 36), (130, 20)):
            base, w = distinct_residual(rng, shape)
            perm = rng.permutation(shape[0])
            np.save(self.path("b.npy"), base)
            np.save(self.path("w.npy"), w)
            np.save(self.path("p.npy"), perm.astype(np.int64))
            r = np.zeros_like(w)
            r[perm] = w - base[perm]  # R(p(i), :) = W(i, :) - B(p(i), :)
            for fmt in ("csr16", "bitmap", "2:4", "auto"):
                for dtype in ("fp32", "fp16", "bf16"):
                    label = f"{shape} {fmt} {dtype}"
                    if fmt == "2:4":
                        expected, kept = two_of_four(r), w.size // 2
                        args = ["--format", "2:4"]
                    else:
                        expected, kept = torch_pruned(r, 0.75)
                        args = ["--sparsity", "0.75", "--format", fmt]
                    data, j, err = self.encode(*args, "--values", dtype, "--permutation", self.path("p.npy"))
                    if data is None:
                        self.check(label, False, err)
                        continue
                    chosen = j["format"]
                    reference = residual_format.encode(expected, chosen, dtype)
                    # ResMoE's approximation error of the matrix: ||P W - (B + stored R)||_F^2, in float64.
                    error = float(np.sum((r.astype(np.float64) - as_stored(expected, dtype).astype(np.float64)) ** 2))
                    ok = (data == reference and j["kept"] == kept and j["bytes"] == len(data)
                          and abs(j["squared_error"] - error) <= 1e-9 * max(error, 1e-30)
                          and abs(j["bits_per_weight"] - 8 * len(data) / w.size) < 1e-9
                          and (fmt == "auto" or chosen == fmt))
                    self.check(f"encode {label}", ok, err or f"{len(data)} bytes as {chosen}, kept {j['kept']} "
                               f"(torch {kept}); byte-identical to the numpy transcription: {data == reference}; "
                               f"squared error {j['squared_error']:.9g} (numpy {error:.9g})")
                    back, err = self.decode(self.path("r.bin"), "--permutation", self.path("p.npy"))
                    want = (base[perm] + as_stored(expected, dtype)[perm]).astype(np.float32)
                    self.check(f"decode {label}", back is not None and np.array_equal(back.view(np.uint32),
                                                                                   want.view(np.uint32)),
                               err or "W(i) = B(p(i)) + R(p(i)) exactly in float32")
            # Sizes: at 25% kept with fp16 values, auto picks the bitmap (1/8 + 0.25 x 2 bytes per weight).
            _, j, _ = self.encode("--sparsity", "0.75", "--values", "fp16")
            self.check(f"auto at 25% fp16 {shape}", j is not None and j["format"] == "bitmap", f"{j and j['format']}")

    def transcription_to_tool(self, rng):
        base, w = distinct_residual(rng, (24, 40))
        np.save(self.path("b.npy"), base)
        r, _ = torch_pruned(w - base, 0.5)
        for fmt in ("csr16", "bitmap", "2:4"):
            rr = two_of_four(w - base) if fmt == "2:4" else r
            with open(self.path("t.bin"), "wb") as f:
                f.write(residual_format.encode(rr, fmt, "bf16"))
            back, err = self.decode(self.path("t.bin"))
            want = (base + as_stored(rr, "bf16")).astype(np.float32)
            self.check(f"numpy-written {fmt} file decodes", back is not None and np.array_equal(back, want), err or "")

    def corrupt(self, rng):
        base, w = distinct_residual(rng, (6, 40))
        np.save(self.path("b.npy"), base)
        np.save(self.path("w.npy"), w)
        csr, _, _ = self.encode("--sparsity", "0.5", "--format", "csr16")
        bitmap, _, _ = self.encode("--sparsity", "0.5", "--format", "bitmap")
        cases = {
            "truncated": (csr[:-3], ["truncated"]),
            "bad checksum": (csr[:-1] + bytes([csr[-1] ^ 1]), ["data checksum does not match"]),
            "wrong version": (fix_checksums(csr[:8] + struct.pack("<H", 2) + csr[10:]), ["version 2.0 is not supported"]),
            "column index out of range": (fix_checksums(csr[:192] + struct.pack("<H", 40) + csr[194:]),
                                          ["column index 40 of row", "out of range"]),
            "row offsets not monotone": (fix_checksums(csr[:128 + 24] + struct.pack("<Q", 0) + csr[128 + 32:]),
                                         ["row offsets must be non-decreasing"]),
            "bitmap popcount": (fix_checksums(bitmap[:128] + bytes([bitmap[128] ^ 1]) + bitmap[129:]),
                                ["the bitmap marks"]),
        }
        for label, (data, fragments) in cases.items():
            with open(self.path("bad.bin"), "wb") as f:
                f.write(data)
            self.expect_error(label, ["residual-decode", self.path("b.npy"), self.path("bad.bin")], "bad.bin",
                              *fragments)
        np.save(self.path("b5.npy"), base[:5])
        self.expect_error("shape disagreeing with the base",
                          ["residual-decode", self.path("b5.npy"), self.path("r.bin")], "6 x 40", "5 x 40")
        self.expect_error("W's shape", ["residual-encode", self.path("b5.npy"), self.path("w.npy"), "--keep", "0.5"],
                          "(6, 40)", "(5, 40)")
        np.save(self.path("pbad.npy"), np.array([0, 1, 1, 3, 4, 5]))
        self.expect_error("not a permutation", ["residual-encode", self.path("b.npy"), self.path("w.npy"), "--keep",
                                                "0.5", "--permutation", self.path("pbad.npy")], "--permutation", "twice")
        self.expect_error("2:4 and --keep", ["residual-encode", self.path("b.npy"), self.path("w.npy"), "--format",
                                             "2:4", "--keep", "0.5"], "--format", "--keep")
        self.expect_error("2:4 format, matrix scope", ["residual-encode", self.path("b.npy"), self.path("w.npy"),
                                                       "--format", "2:4", "--scope", "matrix", "--keep", "0.5"],
                          "--format", "2:4")
        big = w.copy()
        big[2, 3] = 1e6
        np.save(self.path("big.npy"), big)
        self.expect_error("fp16 overflow", ["residual-encode", self.path("b.npy"), self.path("big.npy"), "--keep",
                                            "0.5", "--values", "fp16"], "--values", "fp16")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    rng = np.random.default_rng(20261126)
    with tempfile.TemporaryDirectory(prefix="moecomp-residual-") as tmp:
        c = Checker(sys.argv[1], tmp)
        c.formats(rng)
        c.transcription_to_tool(rng)
        c.corrupt(rng)
    print(f"{c.checks - c.failures} of {c.checks} checks passed")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
