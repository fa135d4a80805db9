"""Seed inputs for npy_fuzzer: a few valid .npy files of each format version, byte order and layout, written
by NumPy's own writer (the format's reference), into the corpus folder given as the only argument."""
import os
import sys

import numpy as np
import numpy.lib.format as fmt

corpus = sys.argv[1]
os.makedirs(corpus, exist_ok=True)
cases = [(np.arange(12, dtype='<f4').reshape(3, 4), (1, 0)),
         (np.asfortranarray(np.arange(6, dtype='<f8').reshape(2, 3)), (1, 0)),
         (np.arange(5, dtype='>i8'), (2, 0)), (np.array(2.5), (3, 0)),
         (np.asfortranarray(np.arange(24, dtype='>i4').reshape(2, 3, 4)), (1, 0))]
for i, (array, version) in enumerate(cases):
    with open(os.path.join(corpus, f'seed{i}.npy'), 'wb') as f:
        fmt.write_array(f, array, version=version)
