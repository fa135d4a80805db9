"""Seed inputs for residual_fuzzer: small valid residual files of every format and value dtype, written by the
numpy transcription of the layout (tests/peers/residual_format.py), into the corpus folder given as the only
argument."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "peers"))
import residual_format  # noqa: E402

corpus = sys.argv[1]
os.makedirs(corpus, exist_ok=True)
rng = np.random.default_rng(7)
for fmt in ("csr16", "bitmap", "2:4"):
    for dtype in ("fp32", "fp16", "bf16"):
        for rows, cols in ((3, 8), (5, 20)):
            a = rng.standard_normal((rows, cols)).astype(np.float32)
            if fmt == "2:4":
                a.reshape(rows, -1, 4)[:, :, 2:] = 0
            else:
                a[rng.random((rows, cols)) < 0.7] = 0
            name = f"seed-{fmt.replace(':', 'of')}-{dtype}-{rows}x{cols}.bin"
            with open(os.path.join(corpus, name), "wb") as f:
                f.write(residual_format.encode(a, fmt, dtype))
