"""Seed inputs for calibration_fuzzer: small safetensors files of calibration tokens as moecomp's `calibrate`
command writes them (layers.<l>.moe_input, T x hidden) in F32, F64, F16 and BF16, with a NaN, an infinity,
an integer tensor, a 1-D and an empty tensor among them, written by the format's specification (json +
struct + numpy) into the corpus folder given as the only argument."""
import json
import os
import struct
import sys

import numpy as np

corpus = sys.argv[1]
os.makedirs(corpus, exist_ok=True)


def write(path, tensors):
    header, blob, offset = {'__metadata__': {'format': 'pt'}}, b'', 0
    for name, (dtype, array) in tensors.items():
        raw = np.ascontiguousarray(array).tobytes()
        header[name] = {'dtype': dtype, 'shape': list(array.shape), 'data_offsets': [offset, offset + len(raw)]}
        blob += raw
        offset += len(raw)
    text = json.dumps(header, separators=(',', ':')).encode()
    text += b' ' * (-len(text) % 8)
    with open(os.path.join(corpus, path), 'wb') as f:
        f.write(struct.pack('<Q', len(text)) + text + blob)


x = np.linspace(-2, 2, 12, dtype='<f4').reshape(3, 4)
write('f32.safetensors', {'layers.0.moe_input': ('F32', x), 'layers.1.moe_input': ('F32', x[:1])})
write('f64.safetensors', {'layers.0.moe_input': ('F64', x.astype('<f8'))})
write('f16.safetensors', {'layers.0.moe_input': ('F16', x.astype('<f2'))})
write('bf16.safetensors', {'layers.0.moe_input': ('BF16', (x.view('<u4') >> 16).astype('<u2'))})
bad = x.copy()
bad[1, 2] = np.nan
bad[2, 3] = np.inf
write('nonfinite.safetensors', {'layers.0.moe_input': ('F32', bad), 'big': ('F64', np.array([[1e300, 1.0]], '<f8'))})
write('others.safetensors', {'i32': ('I32', np.arange(6, dtype='<i4').reshape(2, 3)),
                             'flat': ('F32', np.arange(4, dtype='<f4')),
                             'empty': ('F32', np.zeros((0, 4), dtype='<f4'))})
