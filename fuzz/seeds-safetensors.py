"""Seed inputs for safetensors_fuzzer: small valid safetensors files of every dtype moecomp reads, with and
without metadata, 0-d and empty tensors, unknown fields, and tensors listed out of data order, written by
the format's specification (json + struct + numpy) into the corpus folder given as the only argument."""
import json
import os
import struct
import sys

import numpy as np

corpus = sys.argv[1]
os.makedirs(corpus, exist_ok=True)


def write(path, tensors, metadata=None, extra=None, reverse=False):
    header, blob, offset = {}, b'', 0
    if metadata is not None:
        header['__metadata__'] = metadata
    for name, (dtype, array) in tensors.items():
        raw = np.ascontiguousarray(array).tobytes()
        header[name] = {'dtype': dtype, 'shape': list(array.shape), 'data_offsets': [offset, offset + len(raw)]}
        if extra:
            header[name].update(extra)
        blob += raw
        offset += len(raw)
    if reverse:
        header = dict(reversed(list(header.items())))
    text = json.dumps(header, separators=(',', ':')).encode()
    text += b' ' * (-len(text) % 8)
    with open(os.path.join(corpus, path), 'wb') as f:
        f.write(struct.pack('<Q', len(text)) + text + blob)


write('floats.safetensors', {'w': ('F32', np.arange(6, dtype='<f4').reshape(2, 3)),
                             'd': ('F64', np.array([1.5, -2.0], dtype='<f8')),
                             'h': ('F16', np.arange(4, dtype='<f2'))}, {'format': 'pt'})
write('bf16.safetensors', {'b': ('BF16', np.array([0x3f80, 0xc000, 0x7f80], dtype='<u2'))})
write('fp8.safetensors', {'e4': ('F8_E4M3', np.arange(0, 256, 15, dtype=np.uint8)),
                          'e5': ('F8_E5M2', np.arange(0, 256, 31, dtype=np.uint8).reshape(3, 3))})
write('ints.safetensors', {'a': ('I64', np.array([-1, 2**40], dtype='<i8')), 'b': ('I32', np.arange(3, dtype='<i4')),
                           'c': ('I16', np.arange(2, dtype='<i2')), 'd': ('U16', np.arange(2, dtype='<u2')),
                           'e': ('I8', np.arange(3, dtype=np.int8)), 'f': ('U8', np.arange(3, dtype=np.uint8)),
                           'g': ('BOOL', np.array([1, 0], dtype=np.uint8)), 'h': ('U32', np.arange(2, dtype='<u4')),
                           'i': ('U64', np.arange(2, dtype='<u8'))}, reverse=True)
write('shapes.safetensors', {'scalar': ('F32', np.array(3.0, dtype='<f4')), 'empty': ('F32', np.zeros((0, 4), '<f4')),
                             'cube': ('F32', np.arange(8, dtype='<f4').reshape(2, 2, 2))},
      {'a': '', 'b': 'ü'}, extra={'note': [1, {'x': None}]})
write('none.safetensors', {})
