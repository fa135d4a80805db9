#!/usr/bin/env python3
"""Side-by-side: `moecomp kmeans` against scikit-learn KMeans (lloyd) and faiss Kmeans, same data, one run.

Workload (issue 12): Lloyd on 8192 x 512 float32 normal data, k = 64, exactly 20 iterations (tol 0) from
the same initial centres (64 distinct rows). moecomp's time is the "seconds" of its --json (the fit alone,
no file I/O); the peers are timed in-process around fit / train. Peers run with OpenBLAS on --threads
threads (OMP_NUM_THREADS / OPENBLAS_NUM_THREADS set before numpy loads), and so does moecomp (--threads).
Best of --repeat runs each. The table gives seconds per iteration, the ratios (peer / moecomp), and the
GEMM floor: the assignment's 2 n k d flops per iteration at this machine's measured sgemm rate (numpy,
same threads). Agreement: the labels equal scikit-learn's (same starts, same iterations) and the inertia
relative difference.

    /usr/bin/python3 bench/peers/kmeans_vs_sklearn_faiss.py --moecomp build/default/tools/cli/moecomp
"""
import argparse
import os
import sys

THREADS = "2"
for i, a in enumerate(sys.argv):
    if a == "--threads" and i + 1 < len(sys.argv):
        THREADS = sys.argv[i + 1]
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = THREADS

import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import sklearn  # noqa: E402
from sklearn.cluster import KMeans  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import timed  # noqa: E402

try:
    import faiss  # noqa: E402
except ImportError:  # reported in the table
    faiss = None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--moecomp", required=True)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", default=THREADS)
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--d", type=int, default=512)
    p.add_argument("--k", type=int, default=64)
    p.add_argument("--iterations", type=int, default=20)
    a = p.parse_args()
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(12)
    n, d, k, it = a.n, a.d, a.k, a.iterations
    x = rng.standard_normal((n, d)).astype(np.float32)
    c0 = x[rng.choice(n, k, replace=False)].copy()

    # GEMM floor: the assignment's 2 n k d flops at numpy's sgemm rate on these shapes.
    ct = np.ascontiguousarray(c0.T)
    t_gemm, _ = timed(lambda: x @ ct, 5)
    big_a = rng.standard_normal((2048, 2048)).astype(np.float32)
    t_big, _ = timed(lambda: big_a @ big_a, 3)
    sgemm = 2 * 2048 ** 3 / t_big
    floor = 2 * n * k * d / sgemm

    with tempfile.TemporaryDirectory() as tmp:
        xp, cp, lp = (os.path.join(tmp, f) for f in ("x.npy", "c0.npy", "labels.npy"))
        np.save(xp, x)
        np.save(cp, c0)
        ours = float("inf")
        # moecomp's GEMMs are single-threaded by design (its parallelism is its own row tiles, --threads):
        # the peers' BLAS thread count is not passed on to it.
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS=a.threads)
        for _ in range(a.repeat):
            r = subprocess.run([a.moecomp, "kmeans", xp, "--k", str(k), "--init", cp, "--max-iter", str(it), "--tol",
                                "0", "-o", lp, "--json", "--threads", a.threads], check=True, capture_output=True,
                               text=True, env=env)
            summary = json.loads(r.stdout)
            ours = min(ours, summary["seconds"])
        labels = np.load(lp)
        iterations = summary["iterations"]

    ref = KMeans(n_clusters=k, init=c0, n_init=1, max_iter=it, tol=0.0, algorithm="lloyd")
    t_sk, _ = timed(lambda: ref.fit(x), a.repeat)
    differing = int((labels != ref.labels_).sum())
    inertia_rel = abs(summary["inertia"] - ref.inertia_) / ref.inertia_

    rows = [("scikit-learn " + sklearn.__version__ + " KMeans lloyd", t_sk / ref.n_iter_,
             f"{differing} of {n} labels differ (float32 centre sums: sklearn in float32, moecomp in double), "
             f"inertia rel {inertia_rel:.1e}, {ref.n_iter_} / {iterations} it")]
    if faiss is not None:
        faiss.omp_set_num_threads(int(a.threads))

        def faiss_fit():
            km = faiss.Kmeans(d, k, niter=it, verbose=False, seed=1234, max_points_per_centroid=n)
            km.train(x, init_centroids=c0)
            return km

        t_fa, km = timed(faiss_fit, a.repeat)
        _, fl = km.index.search(x, 1)
        rows.append((f"faiss {faiss.__version__} Kmeans", t_fa / it,
                     f"{(fl[:, 0] == labels).mean() * 100:.1f}% labels equal (faiss: own centre update)"))
    else:
        rows.append(("faiss (not installed: apt-get install python3-faiss)", float("nan"), ""))

    per_it = ours / iterations
    print(f"# {datetime.date.today()} {platform.machine()}, {os.cpu_count()} CPUs, {a.threads} threads; numpy "
          f"{np.__version__}; sgemm {sgemm / 1e9:.0f} GFLOP/s (2048^3), assignment GEMM {2 * n * k * d / t_gemm / 1e9:.0f} "
          f"GFLOP/s")
    print(f"workload: Lloyd {n} x {d} float32, k = {k}, {it} iterations from the same starts")
    print("| peer | peer s/it | moecomp s/it | ratio | GEMM floor s/it | agreement |")
    print("|---|---|---|---|---|---|")
    for name, t, note in rows:
        print(f"| {name} | {t:.5f} | {per_it:.5f} | {t / per_it:.2f}x | {floor:.5f} | {note} |")


if __name__ == "__main__":
    main()
