#!/usr/bin/env python3
"""`mpirun -n 2 moecomp compress` against one process (issue 37; docs/cli.md, "compress on several processes").

1. Every MoE method on the embedded model and on a synthetic 4-layer checkpoint (Mixtral layout, bf16), and moefy
   and sadmoe on the embedded dense models (rank 0 runs them alone): the output directory of 2 ranks equals one process's file for file, byte for
   byte (compression_report.json as JSON without its timings and the peak RSS).
2. SIGTERM to one rank mid-run: no OUT_DIR and no staging directory remain; the other rank exits non-zero with
   exactly one line on its stderr, a "moecomp: error:" line.
3. Another command (pdist) under the launcher is refused with one line from rank 0, writing nothing.
4. An error on one rank (a non-finite calibration value in its layer): that rank's one line, the other rank
   silent, both non-zero, nothing left.

Usage: test_compress_mpi.py MOECOMP [MPIRUN]. Exits 77 (skipped) without mpirun."""
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reliability"))
TOOL = os.path.abspath(sys.argv[1])
MPIRUN = sys.argv[2] if len(sys.argv) > 2 else shutil.which("mpirun")
sys.argv[1:] = [TOOL]  # test_hostile reads its tool from argv[1]
import numpy as np  # noqa: E402
import test_hostile  # noqa: E402
from output_digest import digest  # noqa: E402

MODELS = os.path.normpath(os.path.join(HERE, "..", "..", "models"))
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive", MOECOMP_HUGEPAGES="0")
if os.geteuid() == 0:  # Open MPI refuses root unless told
    ENV.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
failures = 0


def check(label, ok, detail=""):
    global failures
    failures += 0 if ok else 1
    print(f"{'ok  ' if ok else 'FAIL'} {label}{': ' + detail if detail and not ok else ''}", flush=True)


def mpirun(ranks, *args, **kwargs):
    return [MPIRUN, "-n", str(ranks), "--oversubscribe", *kwargs.get("mpi", []), TOOL, *args]


def same_output(tmp, label, model, args):
    one, two = os.path.join(tmp, "one"), os.path.join(tmp, "two")
    for d in (one, two):
        shutil.rmtree(d, ignore_errors=True)
    r1 = subprocess.run([TOOL, "compress", model, "-o", one, "--quiet", *args], env=ENV, capture_output=True, text=True)
    r2 = subprocess.run(mpirun(2, "compress", model, "-o", two, "--quiet", *args), env=ENV, capture_output=True,
                        text=True, timeout=600)
    if r1.returncode != 0 or r2.returncode != 0:
        check(label, False, f"exit {r1.returncode} / {r2.returncode}: {r1.stderr.strip()} | {r2.stderr.strip()}")
        return
    a, b = digest(one), digest(two)
    differing = sorted(f for f in set(a) | set(b) if a.get(f) != b.get(f))
    check(f"{label}: 2 ranks write one process's {len(a)} files", not differing, f"differ: {differing}")


def kill_one_rank(tmp):
    """SIGTERM to rank 1 while both ranks compress; what is left, and what rank 0 says."""
    model = os.path.join(tmp, "big")
    # About 4 s of resmoe on one process (150 MB of bf16 experts): long enough to be killed in the middle.
    test_hostile.synthetic_family(model, "mixtral", np.random.default_rng(7), experts=8, hidden=512, ffn=1536,
                                  tokens=512, layers=4)
    out, logs = os.path.join(tmp, "killed"), os.path.join(tmp, "logs")
    run = subprocess.Popen(mpirun(2, "compress", model, "-o", out, "--quiet", "--method", "resmoe",
                                  mpi=["--output-filename", logs]),
                           env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ranks = []
    deadline = time.time() + 60
    while time.time() < deadline and (len(ranks) < 2 or not glob.glob(out + ".moecomp-tmp-*")):
        time.sleep(0.05)
        ranks = subprocess.run(["pgrep", "-P", str(run.pid)], capture_output=True, text=True).stdout.split()
    time.sleep(1.0)  # well into the layers
    victim = None
    for pid in ranks:  # rank 1: the process whose environment says so
        try:
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"OMPI_COMM_WORLD_RANK=1" in environ:
            victim = int(pid)
    check("the two ranks started and rank 0 made the staging directory", victim is not None and
          bool(glob.glob(out + ".moecomp-tmp-*")), f"ranks {ranks}")
    if victim is None:
        run.kill()
        return
    os.kill(victim, signal.SIGTERM)
    try:
        run.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        run.kill()
        run.communicate()
    check("mpirun exits non-zero", run.returncode != 0, f"exit {run.returncode}")
    check("no OUT_DIR", not os.path.exists(out))
    check("no staging directory", not glob.glob(out + ".moecomp-tmp-*"), str(glob.glob(out + ".moecomp-tmp-*")))
    check("nothing else beside OUT_DIR", sorted(os.listdir(tmp)) == ["big", "logs"], str(os.listdir(tmp)))
    rank0 = glob.glob(os.path.join(logs, "*", "rank.0", "stderr"))
    lines = open(rank0[0]).read().splitlines() if rank0 else []
    check("rank 0 says one error line", len(lines) == 1 and lines[0].startswith("moecomp: error: "), repr(lines))


def one_rank_fails(tmp, four):
    """A non-finite calibration value in layer 3, which rank 1 compresses ({1, 3}: assign_layers on four equal
    layers): rank 1 says so in one line, rank 0 says nothing, both exit non-zero, nothing is left."""
    model = os.path.join(tmp, "bad-calibration")
    shutil.copytree(four, model)
    tensors = {}
    for name, (dtype, shape, raw) in test_hostile.read_safetensors(os.path.join(model, "calibration.safetensors")).items():
        tensors[name] = (dtype, np.frombuffer(raw, dtype=np.float32).reshape(shape).copy())
    tensors["layers.3.moe_input"][1][5, 7] = np.nan
    test_hostile.write_safetensors(os.path.join(model, "calibration.safetensors"), tensors)
    out, logs = os.path.join(tmp, "failed-out"), os.path.join(tmp, "failed-logs")
    r = subprocess.run(mpirun(2, "compress", model, "-o", out, "--quiet", "--method", "hc-smoe",
                              mpi=["--output-filename", logs]), env=ENV, capture_output=True, text=True, timeout=300)
    said = [open(f).read().splitlines() for f in sorted(glob.glob(os.path.join(logs, "*", "rank.*", "stderr")))]
    check("a failure on rank 1 (layer 3's calibration): mpirun exits non-zero", r.returncode != 0, f"exit {r.returncode}")
    check("rank 1 says one error line naming the calibration, rank 0 nothing",
          len(said) == 2 and said[0] == [] and len(said[1]) == 1 and said[1][0].startswith("moecomp: error: ") and
          "layers.3.moe_input" in said[1][0], repr(said))
    check("no OUT_DIR and no staging directory after the failure",
          not os.path.exists(out) and not glob.glob(out + ".moecomp-tmp-*"))


def other_command_refused(tmp):
    """Any command but compress under a 2-rank launch: refused before it reads or writes anything."""
    x, d, logs = os.path.join(tmp, "X.npy"), os.path.join(tmp, "D.npy"), os.path.join(tmp, "pdist-logs")
    np.save(x, np.random.default_rng(3).standard_normal((10, 4)).astype(np.float32))
    r = subprocess.run(mpirun(2, "pdist", x, "-o", d, mpi=["--output-filename", logs]), env=ENV, capture_output=True,
                       text=True, timeout=120)
    rank0 = glob.glob(os.path.join(logs, "*", "rank.0", "stderr"))
    rank1 = glob.glob(os.path.join(logs, "*", "rank.1", "stderr"))
    lines = open(rank0[0]).read().splitlines() if rank0 else []
    quiet = rank1 and open(rank1[0]).read() == ""
    check("pdist under mpirun -n 2: refused, no output, one line from rank 0 and none from rank 1",
          r.returncode != 0 and not os.path.exists(d) and len(lines) == 1 and quiet and
          lines[0] == "moecomp: error: 'pdist' runs on one process, and this launch has 2 ranks: only compress spreads "
                      "its work over ranks (start 'pdist' without mpirun or srun)", repr(lines))


def main():
    if not MPIRUN or not os.path.exists(MPIRUN):
        print("skipped: no mpirun")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        four = os.path.join(tmp, "four-layers")
        test_hostile.synthetic_family(four, "mixtral", np.random.default_rng(37), experts=8, hidden=32, ffn=24,
                                      tokens=96, layers=4)
        runs = []
        for model in (os.path.join(MODELS, "tiny-moe"), four):
            name = os.path.basename(model)
            runs += [(f"{name} hc-smoe", model, ["--method", "hc-smoe"]),
                     (f"{name} hc-smoe fix-dom", model, ["--method", "hc-smoe", "--merge", "fix-dom"]),
                     (f"{name} cka-merge learned", model, ["--method", "cka-merge", "--merge", "learned"]),
                     (f"{name} m-smoe", model, ["--method", "m-smoe"]),
                     (f"{name} resmoe --restore-dense", model, ["--method", "resmoe", "--restore-dense"]),
                     (f"{name} prune reap", model, ["--method", "prune", "--criterion", "reap"]),
                     (f"{name} prune --global", model, ["--method", "prune", "--global"])]
        runs.append(("tiny-dense moefy (rank 0 alone)", os.path.join(MODELS, "tiny-dense"), ["--method", "moefy"]))
        runs.append(("tiny-dense-hoyer sadmoe (rank 0 alone)", os.path.join(MODELS, "tiny-dense-hoyer"),
                     ["--method", "sadmoe", "--router-steps", "30", "--n-init", "2"]))
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        for label, model, args in runs:
            same_output(work, label, model, args)
        other_command_refused(work)
        one_rank_fails(work, four)
        kill_dir = os.path.join(tmp, "kill")
        os.makedirs(kill_dir)
        kill_one_rank(kill_dir)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
