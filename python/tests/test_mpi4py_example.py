#!/usr/bin/env python3
"""python/examples/compress_mpi4py.py under `mpirun -n 2` writes the checkpoint of one compress_checkpoint call,
file for file (compression_report.json without its timings, memory and model path), for hc-smoe, resmoe with
restore_dense and a global prune on the embedded model. Exits 77 without mpirun or mpi4py.

Usage: test_mpi4py_example.py MPIRUN (PYTHONPATH holding the built module)."""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "compress_mpi4py.py")
MODEL = os.path.join(HERE, "..", "..", "models", "tiny-moe")
IGNORED = {"seconds", "steps_seconds", "peak_rss_bytes", "model"}


def tree(root):
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            data = open(path, "rb").read()
            if name == "compression_report.json":
                def strip(v):
                    if isinstance(v, dict):
                        return {k: strip(x) for k, x in v.items() if k not in IGNORED}
                    return [strip(x) for x in v] if isinstance(v, list) else v
                out[os.path.relpath(path, root)] = json.dumps(strip(json.loads(data)), sort_keys=True)
            else:
                out[os.path.relpath(path, root)] = hashlib.sha256(data).hexdigest()
    return out


def main():
    mpirun = sys.argv[1] if len(sys.argv) > 1 else None
    skip = 1 if os.environ.get("MOECOMP_REQUIRE_PEERS") == "1" else 77  # CI: a missing mpi4py is a failure
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        print("no mpi4py (python3-mpi4py): " + ("FAILED, MOECOMP_REQUIRE_PEERS=1" if skip == 1 else "skipped"))
        return skip
    if not mpirun or not os.path.exists(mpirun):
        print("no mpirun: skipped")
        return 77
    import moecomp
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    failures = 0
    runs = (("hc-smoe", {"experts": 4}), ("resmoe", {"restore_dense": True}),
            ("prune", {"experts": 4, "criterion": "frequency", "global_prune": True}))
    with tempfile.TemporaryDirectory() as tmp:
        for method, options in runs:
            one, two = os.path.join(tmp, method + "-one"), os.path.join(tmp, method + "-ranks")
            moecomp.compress_checkpoint(MODEL, one, method, **options)
            r = subprocess.run([mpirun, "-n", "2", "--oversubscribe", sys.executable, EXAMPLE, MODEL, two, method,
                                *[f"{k}={json.dumps(v)}" for k, v in options.items()]],
                               env=env, capture_output=True, text=True, timeout=300)
            a, b = tree(one), tree(two) if r.returncode == 0 else {}
            ok = r.returncode == 0 and a == b and not [n for n in os.listdir(tmp) if ".parts-" in n]
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} mpirun -n 2 compress_mpi4py.py {method}: one call's {len(a)} files"
                  + ("" if ok else f": exit {r.returncode} {r.stderr.strip()[-400:]}"
                     f" differing {[f for f in set(a) | set(b) if a.get(f) != b.get(f)]}"), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
