"""A calibration file's writer and reader in the safetensors format, without the `safetensors` package.

The format: an 8-byte little-endian unsigned header length N, N bytes of JSON (padded with spaces so that the data
starts at a multiple of 8), then the tensors' raw little-endian bytes. The header maps each tensor's name to
{"dtype", "shape", "data_offsets": [begin, end)} relative to the data's start; "__metadata__" holds strings.
Tensors are laid out as the reference writer lays them out: by decreasing item size, then by name.
"""
import json
import math
import os
import struct
import tempfile

import numpy as np
import torch

# The dtypes `moecomp compress` reads calibration tokens in (model::read_calibration_tokens).
DTYPES = {
    "float32": ("F32", torch.float32, "<f4"),
    "bfloat16": ("BF16", torch.bfloat16, "<i2"),  # bf16 has no numpy dtype: its bits
    "float16": ("F16", torch.float16, "<f2"),
    "float64": ("F64", torch.float64, "<f8"),
}
_ALIASES = {"f32": "float32", "fp32": "float32", "float": "float32", "bf16": "bfloat16", "f16": "float16",
            "fp16": "float16", "half": "float16", "f64": "float64", "fp64": "float64", "double": "float64"}
_BY_TORCH = {torch_dtype: name for name, (_, torch_dtype, _) in DTYPES.items()}
_BY_CODE = {code: name for name, (code, _, _) in DTYPES.items()}


def dtype_name(dtype, argument="dtype"):
    """The canonical name ('float32', 'bfloat16', 'float16', 'float64') of a dtype given as a string (any case,
    'F32', 'bf16', ...) or a torch dtype; ValueError naming `argument` otherwise."""
    if isinstance(dtype, torch.dtype):
        if dtype in _BY_TORCH:
            return _BY_TORCH[dtype]
    elif isinstance(dtype, str):
        key = dtype.strip().lower()
        key = _ALIASES.get(key, key)
        if key in DTYPES:
            return key
        if dtype.strip().upper() in _BY_CODE:
            return _BY_CODE[dtype.strip().upper()]
    raise ValueError(f"{argument}: expected one of {', '.join(repr(n) for n in DTYPES)} (or a torch dtype of "
                     f"those), got {dtype!r}")


def _to_tensor(value, name):
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.ascontiguousarray(value))
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"tensors[{name!r}]: expected a torch.Tensor or numpy array, got {type(value).__name__}")
    return value.detach().to("cpu")


def encode(tensor, dtype):
    """(safetensors dtype code, the tensor converted to `dtype` (a canonical name), its little-endian bytes)."""
    code, torch_dtype, numpy_dtype = DTYPES[dtype]
    t = tensor.to(torch_dtype).contiguous()
    array = t.view(torch.int16).numpy() if torch_dtype == torch.bfloat16 else t.numpy()
    return code, t, array.astype(numpy_dtype, copy=False).tobytes()


def write_calibration(path, tensors, *, dtype=None, metadata=None):
    """Writes `tensors` ({name: T x hidden tensor}, torch or numpy) to `path` as safetensors and returns the path.

    dtype: None keeps each tensor's own dtype (it must be float32, bfloat16, float16 or float64); a name
    ('float32', 'bfloat16', 'float16', 'float64') or torch dtype converts every tensor (round to nearest even).
    metadata: optional {str: str}, written as the header's "__metadata__".
    The file is written to a temporary beside `path` and renamed over it, so `path` is never half written.
    ValueError (naming the argument, what was expected and what was given) for: no tensors, a name that is not a
    non-empty string or is "__metadata__", a tensor that is not 2-D with at least one row, a value that is not
    finite after the conversion (float16 overflows beyond 65504; `moecomp compress` refuses non-finite tokens),
    a bad dtype, metadata that is not a dict of strings.
    """
    if not isinstance(tensors, dict) or not tensors:
        raise ValueError(f"tensors: expected a non-empty dict of name -> tensor, got "
                         f"{'an empty dict' if isinstance(tensors, dict) else type(tensors).__name__}")
    target = None if dtype is None else dtype_name(dtype)
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                     for k, v in metadata.items()):
            raise ValueError(f"metadata: expected a dict of str -> str, got {metadata!r}")
    prepared = {}
    for name, value in tensors.items():
        if not isinstance(name, str) or not name or name == "__metadata__":
            raise ValueError(f"tensors: names must be non-empty strings other than '__metadata__', got {name!r}")
        t = _to_tensor(value, name)
        if t.dim() != 2 or t.shape[0] < 1 or t.shape[1] < 1:
            raise ValueError(f"tensors[{name!r}]: expected a 2-D tensor T x hidden with T >= 1, got shape "
                             f"{list(t.shape)}")
        kind = target or dtype_name(t.dtype, f"tensors[{name!r}].dtype")
        code, converted, raw = encode(t, kind)
        finite = torch.isfinite(converted)
        if not bool(finite.all()):
            row, col = (int(i) for i in (~finite).nonzero()[0])
            original = float(t[row, col])
            why = (f"{original!r} overflows {kind}" if math.isfinite(original) else f"is {original!r}")
            raise ValueError(f"tensors[{name!r}]: element ({row}, {col}) {why}; calibration tokens must be finite")
        prepared[name] = (code, list(t.shape), raw, converted.element_size())
    order = sorted(prepared, key=lambda n: (-prepared[n][3], n))
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = dict(metadata)
    for name in order:
        code, shape, raw, _ = prepared[name]
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=".moecomp_capture-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for name in order:
                f.write(prepared[name][2])
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
    return path


def read_calibration(path):
    """({name: tensor in its stored dtype}, metadata dict) of a safetensors file with F32/BF16/F16/F64 tensors."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"path: '{path}' is {len(raw)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"path: '{path}' declares a {n}-byte header but holds {len(raw) - 8} bytes after the length")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", None) or {}
    data = memoryview(raw)[8 + n:]
    tensors = {}
    for name, info in header.items():
        if info["dtype"] not in _BY_CODE:
            raise ValueError(f"path: tensor {name!r} of '{path}' is {info['dtype']}; expected F32, BF16, F16 or F64")
        kind = _BY_CODE[info["dtype"]]
        _, torch_dtype, numpy_dtype = DTYPES[kind]
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype=numpy_dtype).astype(numpy_dtype[1:], copy=True)
        t = torch.from_numpy(array)
        if torch_dtype == torch.bfloat16:
            t = t.view(torch.bfloat16)
        tensors[name] = t.reshape(info["shape"])
    return tensors, metadata
