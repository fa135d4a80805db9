"""An independent numpy transcription of moecomp's residual file (docs/sparse.md, "Formats" and "The residual
file"), written from the documentation: encode a dense 2-D array into its bytes, and decode bytes back into a
dense float32 array. The peer test checks the tool against it in both directions; the fuzzer's seeds come from
it."""
import struct
import zlib

import numpy as np

MAGIC = b"MOERESID"
FORMATS = {"csr16": 0, "bitmap": 1, "2:4": 2}
DTYPES = {"fp32": (0, "<f4"), "fp16": (1, "<f2"), "bf16": (2, None)}


def _to_bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype="<f4").view("<u4").astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def _values_bytes(values, dtype):
    code, np_dtype = DTYPES[dtype]
    if np_dtype is None:
        return _to_bf16_bits(values).tobytes()
    return np.asarray(values, dtype=np.float32).astype(np_dtype).tobytes()


def _values_from(raw, dtype, count):
    code, np_dtype = DTYPES[dtype]
    if np_dtype is None:
        bits = np.frombuffer(raw, dtype="<u2", count=count).astype("<u4") << 16
        return bits.view("<f4").astype(np.float32)
    return np.frombuffer(raw, dtype=np_dtype, count=count).astype(np.float32)


def _stored(a):
    """Entries whose bits are not +0."""
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32) != 0


def encode(a, fmt, dtype):
    """The file bytes of the 2-D array a (its non-+0 entries stored) in format fmt with value dtype dtype."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    rows, cols = a.shape
    mask = _stored(a)
    if fmt == "csr16":
        counts = mask.sum(axis=1)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype("<u8").tobytes()
        r, c = np.nonzero(mask)
        structure = c.astype("<u2").tobytes()
        values = _values_bytes(a[r, c], dtype)
        count = int(mask.sum())
    elif fmt == "bitmap":
        offsets = b""
        structure = np.packbits(mask, axis=1, bitorder="little").tobytes()
        values = _values_bytes(a[mask], dtype)
        count = int(mask.sum())
    else:
        offsets = b""
        groups = mask.reshape(rows, cols // 4, 4)
        codes = np.zeros((rows, cols // 4), dtype=np.uint8)
        vals = np.zeros((rows, cols // 4, 2), dtype=np.float32)
        for i in range(rows):
            for g in range(cols // 4):
                take = [q for q in range(4) if groups[i, g, q]]
                assert len(take) <= 2
                for q in range(4):
                    if len(take) < 2 and q not in take:
                        take.append(q)
                take.sort()
                codes[i, g] = take[0] | (take[1] << 2)
                vals[i, g] = a[i, 4 * g + take[0]], a[i, 4 * g + take[1]]
        if codes.shape[1] % 2:
            codes = np.concatenate([codes, np.zeros((rows, 1), dtype=np.uint8)], axis=1)
        structure = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8).tobytes()
        values = _values_bytes(vals.ravel(), dtype)
        count = rows * cols // 2
    sections, pos, table = [offsets, structure, values], 128, b""
    body = b""
    for s in sections:
        start = (pos + 63) // 64 * 64
        body += b"\0" * (start - pos) + s
        table += struct.pack("<QQ", start, len(s))
        pos = start + len(s)
    header = MAGIC + struct.pack("<HHIqqBB6xQ", 1, 0, 128, rows, cols, FORMATS[fmt], DTYPES[dtype][0], count)
    header += table + struct.pack("<QI16x", pos, zlib.crc32(body))
    header += struct.pack("<I", zlib.crc32(header))
    assert len(header) == 128
    return header + body


def decode(data):
    """(dense float32 array, format name, dtype name, count) from file bytes."""
    assert data[:8] == MAGIC
    major, minor, hbytes, rows, cols, fcode, dcode, count = struct.unpack_from("<HHIqqBB6xQ", data, 8)
    assert (major, minor, hbytes) == (1, 0, 128)
    table = [struct.unpack_from("<QQ", data, 48 + 16 * k) for k in range(3)]
    size, crc = struct.unpack_from("<QI", data, 96)
    assert size == len(data) and crc == zlib.crc32(data[128:])
    assert struct.unpack_from("<I", data, 124)[0] == zlib.crc32(data[:124])
    fmt = {v: k for k, v in FORMATS.items()}[fcode]
    dtype = {v[0]: k for k, v in DTYPES.items()}[dcode]
    sec = [data[o:o + n] for o, n in table]
    values = _values_from(sec[2], dtype, count)
    out = np.zeros((rows, cols), dtype=np.float32)
    if fmt == "csr16":
        offsets = np.frombuffer(sec[0], dtype="<u8")
        columns = np.frombuffer(sec[1], dtype="<u2")
        for i in range(rows):
            out[i, columns[offsets[i]:offsets[i + 1]]] = values[offsets[i]:offsets[i + 1]]
    elif fmt == "bitmap":
        bits = np.unpackbits(np.frombuffer(sec[1], dtype=np.uint8).reshape(rows, -1), axis=1,
                             bitorder="little")[:, :cols].astype(bool)
        out[bits] = values
    else:
        codes = np.frombuffer(sec[1], dtype=np.uint8).reshape(rows, -1)
        k = 0
        for i in range(rows):
            for g in range(cols // 4):
                code = (codes[i, g // 2] >> (4 * (g % 2))) & 0xF
                out[i, 4 * g + (code & 3)] = values[k]
                out[i, 4 * g + (code >> 2)] = values[k + 1]
                k += 2
    return out, fmt, dtype, count
