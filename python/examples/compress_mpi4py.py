#!/usr/bin/env python3
"""One checkpoint from several MPI ranks through the Python binding (docs/python.md, "In parts over processes").

    mpirun -n 4 python3 compress_mpi4py.py MODEL_DIR OUT_DIR METHOD [key=value ...]

Each rank compresses the layers moecomp.assign_layers gives it into a shared work directory beside OUT_DIR; rank 0
gathers the layer records and finishes, which moves the work directory to OUT_DIR. The checkpoint is the one a
single moecomp.compress_checkpoint call writes. Options are keyword arguments of compress_checkpoint, e.g.
experts=4 (numbers are read as such)."""
import json
import os
import shutil
import sys
import tempfile

from mpi4py import MPI

import moecomp


def main():
    model, out, method = sys.argv[1:4]
    options = {}
    for item in sys.argv[4:]:
        key, value = item.split("=", 1)
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    # Rank 0 makes the work directory beside OUT_DIR (the finish renames it, so the same file system).
    work = None
    if rank == 0:
        parent = os.path.dirname(os.path.abspath(out))
        work = tempfile.mkdtemp(dir=parent, prefix=os.path.basename(out) + ".parts-")
    work = comm.bcast(work, root=0)
    try:
        mine = moecomp.assign_layers(model, size)[rank]
        part = moecomp.compress_checkpoint(model, out, method, layers=mine, work_dir=work, **options)
        failed = None
    except Exception as e:  # every rank must reach the gather: failures travel with the records
        part, failed = {"layers": []}, f"rank {rank}: {e}"
    gathered = comm.gather((part["layers"], failed), root=0)
    if rank != 0:
        return 0
    errors = [f for _, f in gathered if f]
    if errors:
        shutil.rmtree(work, ignore_errors=True)  # nothing left behind
        print("error: " + "; ".join(errors), file=sys.stderr)
        return 1
    records = [record for layers, _ in gathered for record in layers]
    report = moecomp.compress_checkpoint(model, out, method, work_dir=work, layer_reports=records, **options)
    print(f"{method}: {len(report['layers'])} layers on {size} ranks, wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
