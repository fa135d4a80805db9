#!/usr/bin/env python3
"""The Python binding (python/moecomp_python.cpp, docs/python.md) against its peers, in one process: pdist and
linkage against scipy, route against torch, cka against numpy's closed form, emd against POT, merge_experts against
numpy transcriptions; inputs from numpy and torch read in place (the addresses moecomp sees are the arrays' own),
`out` written in place into a torch tensor, and the errors (ValueError / TypeError with the argument's name).
kmeans against scikit-learn's lloyd, linear_sum_assignment against scipy, sinkhorn against POT; align against
scipy's assignment, prune and the residuals against torch's l1_unstructured, partition_experts against brute force,
cka_matrix against the closed form, dispatch_plan against a numpy transcription, moe_layer_forward against torch;
compress_layer against compress_checkpoint's layer, and compress_checkpoint against the tool (`moecomp compress`):
the same checkpoint byte for byte.
Data: moecomp.normal, moecomp's own seeded generator, and the embedded model (models/tiny-moe).
Run with PYTHONPATH holding the built module (ctest sets it and passes the tool's path as the first argument)."""
import itertools
import json
import os
import pathlib
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MODELS = os.path.join(ROOT, "models")
sys.path.insert(0, os.path.join(ROOT, "tests", "peers"))
sys.path.insert(0, os.path.join(ROOT, "python"))
from peer_common import require  # noqa: E402

np, spatial, hierarchy, optimize, ot, torch, skcluster = require(
    "numpy", "scipy.spatial.distance", "scipy.cluster.hierarchy", "scipy.optimize", "ot", "torch", "sklearn.cluster")
import moecomp  # noqa: E402  (built with the project: a missing module is a failure, never a skip)
import torch.nn.utils.prune  # noqa: E402,F401
from moecomp_capture.safetensors_io import read_calibration  # noqa: E402

checks = failures = 0


def check(label, ok, detail=""):
    global checks, failures
    checks += 1
    if not ok:
        failures += 1
    print(f"{'ok  ' if ok else 'FAIL'} {label}{': ' + str(detail) if detail != '' else ''}")


def expect(label, exc, fragment, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc as e:
        check(label, fragment in str(e), str(e))
        return
    except Exception as e:  # noqa: BLE001
        check(label, False, f"raised {type(e).__name__}: {e}")
        return
    check(label, False, "no exception")


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-300)) if a.size else 0.0


def test_pdist():
    x = moecomp.normal(120, 17, seed=1)
    for metric in ("euclidean", "sqeuclidean", "cosine", "correlation"):
        want = spatial.pdist(x, metric)
        check(f"pdist {metric} float64 = scipy", rel(moecomp.pdist(x, metric), want) <= 1e-10)
        got32 = moecomp.pdist(x.astype(np.float32), metric)
        check(f"pdist {metric} float32 = scipy to 2e-4", got32.dtype == np.float32 and rel(got32, want) <= 2e-4)
    # torch in, torch out: read and written in place.
    t = torch.from_numpy(x.astype(np.float32))
    check("a torch tensor is read in place", moecomp._address(t) == t.data_ptr())
    check("a numpy array is read in place", moecomp._address(x) == x.ctypes.data)
    out = torch.zeros(120 * 119 // 2, dtype=torch.float32)
    r = moecomp.pdist(t, out=out)
    check("pdist out=torch tensor: written in place and returned", r is out and rel(out.numpy(), spatial.pdist(x)) <= 2e-4)
    # Rows of a wider array (row stride > cols): viewed, not copied.
    wide = moecomp.normal(50, 40, seed=2)
    part = wide[:, :9]
    check("a column slice is viewed in place", moecomp._address(part) == part.ctypes.data)
    check("pdist of a column slice = scipy", rel(moecomp.pdist(part), spatial.pdist(np.ascontiguousarray(part))) <= 1e-10)
    ro = x.copy()
    ro.setflags(write=False)
    check("a read-only array is accepted", rel(moecomp.pdist(ro), spatial.pdist(x)) <= 1e-10)
    check("a list goes through numpy.asarray", rel(moecomp.pdist(x.tolist()), spatial.pdist(x)) <= 1e-10)
    expect("bad metric", ValueError, "pdist: metric: expected euclidean", moecomp.pdist, x, "manhattan")
    expect("int input", TypeError, "pdist: x must be float32 or float64, got int32", moecomp.pdist,
           torch.zeros(3, 3, dtype=torch.int32))
    expect("column-major input", ValueError, "pdist: x: as_matrix_view: DLTensor is column-major", moecomp.pdist, t.T)
    expect("out of the wrong size", ValueError, "pdist", moecomp.pdist, x, out=np.zeros(3))
    expect("out of another dtype", TypeError, "out must have x's dtype (float64)", moecomp.pdist, x,
           out=np.zeros(120 * 119 // 2, dtype=np.float32))
    frozen = np.zeros(120 * 119 // 2)
    frozen.setflags(write=False)
    expect("read-only out", ValueError, "pdist: out must be writable", moecomp.pdist, x, out=frozen)


def test_linkage():
    x = moecomp.normal(60, 5, seed=3)
    for method in ("single", "complete", "average", "weighted", "ward", "centroid", "median"):
        z = moecomp.linkage(x, method)
        want = hierarchy.linkage(x, method)
        same = np.array_equal(z[:, [0, 1, 3]], want[:, [0, 1, 3]]) and rel(z[:, 2], want[:, 2]) <= 1e-10
        check(f"linkage {method} = scipy (merges, sizes; heights to 1e-10)", same)
    z = moecomp.linkage(torch.from_numpy(x), "average", "cosine")
    check("linkage average cosine from torch = scipy",
          rel(z, hierarchy.linkage(x, "average", metric="cosine")) <= 1e-10)
    expect("bad method", ValueError, "linkage: ", moecomp.linkage, x, "nearest")


def test_route():
    logits = torch.from_numpy(moecomp.normal(256, 64, seed=4).astype(np.float32))
    for renormalize in (False, True):
        ids, w = moecomp.route(logits, "top_k", 8, renormalize=renormalize)
        p = torch.softmax(logits.double(), dim=-1)
        tw, ti = torch.topk(p, 8, dim=-1)
        if renormalize:
            tw = tw / tw.sum(dim=-1, keepdim=True)
        check(f"route top-8 softmax (renormalize {renormalize}): torch.topk's ids",
              np.array_equal(ids, ti.numpy()) and ids.dtype == np.int64)
        check(f"route top-8 softmax (renormalize {renormalize}): weights to 1e-6", rel(w, tw.numpy()) <= 1e-6)
    ids, w = moecomp.route(logits.double(), "top_p", tau=0.5)
    p = torch.softmax(logits.double(), dim=-1).numpy()
    ok = True
    for t in range(p.shape[0]):
        order = np.argsort(-p[t], kind="stable")
        need = int(np.searchsorted(np.cumsum(p[t][order]), 0.5) + 1)
        ok = ok and list(ids[t][:need]) == list(order[:need]) and all(ids[t][need:] == 64)
    check("route top_p 0.5: the smallest prefix reaching p, unused slots E", ok)
    expect("route bad rule", ValueError, "route: rule: expected top_k", moecomp.route, logits, "greedy")
    expect("route k > E", ValueError, "route_fixed", moecomp.route, logits, "top_k", 65)


def test_cka():
    x = moecomp.normal(200, 30, seed=5)
    y = x @ moecomp.normal(30, 12, seed=6) + 0.5 * moecomp.normal(200, 12, seed=7)

    def linear_cka(a, b):
        a, b = a - a.mean(0), b - b.mean(0)
        return np.linalg.norm(b.T @ a) ** 2 / (np.linalg.norm(a.T @ a) * np.linalg.norm(b.T @ b))
    r = moecomp.cka(x, y)
    check("cka linear = the centred closed form to 1e-12", abs(r["cka"] - linear_cka(x, y)) <= 1e-12 and r["status"] == "ok",
          r["cka"])
    r32 = moecomp.cka(torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.float32)))
    check("cka linear float32 from torch to 1e-5", abs(r32["cka"] - linear_cka(x, y)) <= 1e-5)
    expect("cka mixed dtypes", TypeError, "cka: y must have x's dtype", moecomp.cka, x, y.astype(np.float32))
    expect("cka unequal samples", ValueError, "cka", moecomp.cka, x, y[:100])


def test_emd():
    n, m = 40, 30
    a = np.abs(moecomp.normal(1, n, seed=8)[0]) + 0.1
    b = np.abs(moecomp.normal(1, m, seed=9)[0]) + 0.1
    a, b = a / a.sum(), b / b.sum()
    cost = np.abs(moecomp.normal(n, m, seed=10))
    plan, total, status = moecomp.emd(a, b, cost)
    want = ot.emd(a, b, cost)
    check("emd cost = POT's to 1e-12", abs(total - float(np.sum(want * cost))) <= 1e-12 and status == "ok", total)
    check("emd plan = POT's (unique optimum) to 1e-12", np.max(np.abs(plan - want)) <= 1e-12)
    expect("emd unequal masses", ValueError, "emd", moecomp.emd, a, 2 * b, cost)


def test_kmeans():
    k = 8
    blobs = np.repeat(3 * moecomp.normal(k, 6, seed=20), 50, axis=0) + moecomp.normal(k * 50, 6, seed=21)
    c0 = blobs[::50][:k] + 0.5 * moecomp.normal(k, 6, seed=22)
    r = moecomp.kmeans(blobs, k, centers=c0)
    ref = skcluster.KMeans(n_clusters=k, init=c0, n_init=1, max_iter=300, tol=1e-4, algorithm="lloyd").fit(blobs)
    check("kmeans given start = scikit-learn's lloyd: the labels", np.array_equal(r["labels"], ref.labels_))
    check("kmeans given start: centres and inertia to 1e-9", rel(r["centers"], ref.cluster_centers_) <= 1e-9 and
          abs(r["inertia"] - ref.inertia_) <= 1e-9 * ref.inertia_ and r["iterations"] == ref.n_iter_,
          (r["iterations"], ref.n_iter_))
    check("kmeans sizes count the labels", list(r["sizes"]) == np.bincount(r["labels"], minlength=k).tolist())
    bal = moecomp.kmeans(blobs.astype(np.float32), k, size_min=50, size_max=50, seed=3)
    check("kmeans balanced (size bounds 50): every cluster holds 50", all(s == 50 for s in bal["sizes"]),
          list(bal["sizes"]))
    expect("kmeans k > n", ValueError, "kmeans: ", moecomp.kmeans, blobs[:3], 4)
    expect("kmeans centers of the wrong shape", ValueError, "kmeans: centers must be k x d = 8 x 6",
           moecomp.kmeans, blobs, k, centers=c0[:3])


def test_linear_sum_assignment():
    cost = moecomp.normal(30, 45, seed=23)
    rows, cols, total, status = moecomp.linear_sum_assignment(cost)
    want_r, want_c = optimize.linear_sum_assignment(cost)
    check("linear_sum_assignment = scipy's (30 x 45)", np.array_equal(rows, want_r) and np.array_equal(cols, want_c)
          and abs(total - cost[want_r, want_c].sum()) <= 1e-12 and status == "ok")
    _, cols, total, _ = moecomp.linear_sum_assignment(cost[:, :30], maximize=True)
    want_r, want_c = optimize.linear_sum_assignment(cost[:, :30], maximize=True)
    check("linear_sum_assignment maximize = scipy's (a column slice, in place)", np.array_equal(cols, want_c))
    expect("linear_sum_assignment tall", ValueError, "at most as many rows as columns", moecomp.linear_sum_assignment,
           np.ascontiguousarray(cost.T))


def test_sinkhorn():
    n, m = 50, 40
    a = np.abs(moecomp.normal(1, n, seed=24)[0]) + 0.1
    b = np.abs(moecomp.normal(1, m, seed=25)[0]) + 0.1
    a, b = a / a.sum(), b / b.sum()
    pa, pb = moecomp.normal(n, 2, seed=26), moecomp.normal(m, 2, seed=27)
    cost = ((pa[:, None, :] - pb[None, :, :]) ** 2).sum(-1)
    cost /= cost.max()
    for method, pot in (("plain", "sinkhorn"), ("log", "sinkhorn_log"), ("stabilized", "sinkhorn_stabilized")):
        plan, total, status, iterations = moecomp.sinkhorn(a, b, cost, 5e-2, method)
        want = ot.sinkhorn(a, b, cost, 5e-2, method=pot, numItermax=1000, stopThr=1e-9)
        check(f"sinkhorn {method} reg 5e-2 = POT's plan to 1e-6", rel(plan, want) <= 1e-6 and status == "ok",
              (rel(plan, want), iterations))
    expect("sinkhorn reg 0", ValueError, "sinkhorn: ", moecomp.sinkhorn, a, b, cost, 0.0)


def test_merge():
    e, d, f = 6, 16, 24
    w1 = torch.from_numpy(moecomp.normal(e * f, d, seed=11).reshape(e, f, d).astype(np.float32))
    w3 = torch.from_numpy(moecomp.normal(e * f, d, seed=12).reshape(e, f, d).astype(np.float32))
    w2 = torch.from_numpy(moecomp.normal(e * d, f, seed=13).reshape(e, d, f).astype(np.float32))
    groups = np.array([0, 1, 0, 2, 1, 0], dtype=np.int64)
    r = moecomp.merge_experts(w1, w2, groups, w3=w3, method="average")
    ok = all(np.allclose(r["w1"][g], w1.numpy()[groups == g].astype(np.float64).mean(0), rtol=0, atol=1e-6)
             and np.allclose(r["w2"][g], w2.numpy()[groups == g].astype(np.float64).mean(0), rtol=0, atol=1e-6)
             and np.allclose(r["w3"][g], w3.numpy()[groups == g].astype(np.float64).mean(0), rtol=0, atol=1e-6)
             for g in range(3))
    check("merge_experts average = the members' mean", ok and list(r["map"]) == list(groups))
    check("a torch stack of experts is read in place", moecomp._address(w1) == w1.data_ptr())
    freq = np.array([0.3, 0.1, 0.2, 0.15, 0.05, 0.2])
    router = moecomp.normal(e, d, seed=14).astype(np.float32)
    r = moecomp.merge_experts(w1, w2, groups, w3=w3, method="frequency", frequencies=freq, router=router,
                              router_rule="merged")
    ok = True
    for g in range(3):
        mem = np.flatnonzero(groups == g)
        c = freq[mem] / (freq[mem].sum() + 1e-7)  # HC-SMoE's freq: the epsilon once in the denominator
        ok = ok and np.allclose(r["w1"][g], np.tensordot(c, w1.numpy()[mem].astype(np.float64), 1), atol=1e-6)
        ok = ok and np.allclose(r["router"][g], c @ router[mem].astype(np.float64), atol=1e-6)
    check("merge_experts frequency: HC-SMoE's weights, router rows merged the same way", ok)
    x = moecomp.normal(300, d, seed=15).astype(np.float32)
    r = moecomp.merge_experts(w1, w2, groups, w3=w3, method="fix-dom", x=x, router=router)
    check("merge_experts fix-dom with tokens: errors reported, id map kept",
          r["router"] is None and r["router_rule"] == "map" and all(np.isfinite(r["errors"])) and
          all(t > 0 for t in r["tokens"]), r["errors"])
    r = moecomp.merge_experts(w1, w2, groups, w3=w3, method="learned", x=x, router=router, max_iterations=20)
    ok = all(abs(sum(r["coefficients"][i] for i in np.flatnonzero(groups == g)) - 1) <= 1e-12 for g in range(3))
    check("merge_experts learned: coefficients on the simplex per group, router rows merged",
          ok and r["router"].shape == (3, d) and min(r["coefficients"]) >= 0)
    # 16-bit storage: torch bfloat16 stacks (results as torch.bfloat16) and numpy float16; each merged weight is the
    # members' exact mean rounded once (the sum of at most 3 16-bit values is exact in double, one division rounds it
    # correctly, and a mean that is not a 16-bit tie is far from one).
    for name, stack, to16 in (("bfloat16 (torch)", w1.bfloat16(), lambda v: torch.from_numpy(v).bfloat16()),
                              ("float16 (numpy)", w1.numpy().astype(np.float16), lambda v: v.astype(np.float16))):
        w16 = stack if isinstance(stack, torch.Tensor) else stack
        w2_16 = w2.bfloat16() if isinstance(stack, torch.Tensor) else w2.numpy().astype(np.float16)
        r = moecomp.merge_experts(w16, w2_16, groups, method="average")
        src = (stack.double() if isinstance(stack, torch.Tensor) else torch.from_numpy(stack.astype(np.float64))).numpy()
        ok = True
        for g in range(3):
            mem = np.flatnonzero(groups == g)
            want = to16(src[mem].sum(0) / len(mem))
            got = r["w1"][g]
            ok = ok and (torch.equal(got, want) if isinstance(want, torch.Tensor) else np.array_equal(got, want))
        kind = type(r["w1"]).__name__ + " " + str(r["w1"].dtype)
        check(f"merge_experts average, {name} stacks: the exact mean rounded once, bit for bit ({kind})", ok)
    expect("merge_experts bf16 with float64 tokens", TypeError, "x must be float32 (float32 for 16-bit weights)",
           moecomp.merge_experts, w1.bfloat16(), w2.bfloat16(), groups, method="fix-dom", x=x.astype(np.float64))
    expect("merge_experts groups not covering", ValueError, "groups must cover every id", moecomp.merge_experts,
           w1, w2, np.array([0, 2, 0, 2, 2, 0], dtype=np.int64), w3=w3)
    expect("merge_experts fix-dom without tokens", ValueError, "method fix-dom needs calibration tokens x",
           moecomp.merge_experts, w1, w2, groups, w3=w3, method="fix-dom")
    expect("merge_experts bad method", ValueError, "merge_experts: method: expected average",
           moecomp.merge_experts, w1, w2, groups, method="mean")
    expect("merge_experts int32 groups", TypeError, "groups must be int64", moecomp.merge_experts, w1, w2,
           groups.astype(np.int32))


def test_align():
    a = moecomp.normal(20, 9, seed=30)
    b = moecomp.normal(30, 9, seed=31)
    perm = np.random.default_rng(0).permutation(30)[:20]
    b[perm] = a + 0.01 * moecomp.normal(20, 9, seed=32)  # a's rows planted (noisy) among b's
    p, cost, status = moecomp.align_rows(a, b)
    want_r, want_c = optimize.linear_sum_assignment(spatial.cdist(a, b, "sqeuclidean"))
    check("align_rows weights = scipy's assignment of the squared distances (20 x 30)",
          np.array_equal(p, want_c) and np.array_equal(p, perm) and status == "ok" and
          abs(cost - spatial.cdist(a, b, "sqeuclidean")[want_r, want_c].sum()) <= 1e-9, cost)
    p, cost, _ = moecomp.align_rows(a, b, "inner")
    _, want_c = optimize.linear_sum_assignment(a @ b.T, maximize=True)
    check("align_rows inner = scipy's maximising assignment of the inner products", np.array_equal(p, want_c) and
          abs(cost - float((a * b[p]).sum())) <= 1e-9)
    # A torch stack: expert e is the reference with its neurons shuffled, plus noise; align_stack finds each
    # shuffle (scipy on the design rows [W1 | W3 | W2^T] agrees) and permute_neurons undoes it.
    e, f, d = 4, 16, 8
    rng = np.random.default_rng(1)
    ref = [moecomp.normal(f, d, seed=33), moecomp.normal(f, d, seed=34), moecomp.normal(d, f, seed=35)]
    shuffles = [np.arange(f)] + [rng.permutation(f) for _ in range(e - 1)]
    w1 = np.stack([ref[0][s] for s in shuffles]) + 0.01 * moecomp.normal(e * f, d, seed=36).reshape(e, f, d)
    w3 = np.stack([ref[1][s] for s in shuffles])
    w2 = np.stack([ref[2][:, s] for s in shuffles])
    t1, t3, t2 = (torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for v in (w1, w3, w2))
    perms, cost, status = moecomp.align_stack(t1, t2, w3=t3)
    design = [np.hstack([t1[k].double().numpy(), t3[k].double().numpy(), t2[k].double().numpy().T]) for k in range(e)]
    ok = perms.shape == (e, f) and status == "ok"
    for k in range(e):
        _, cols = optimize.linear_sum_assignment(spatial.cdist(design[0], design[k], "sqeuclidean"))
        ok = ok and np.array_equal(perms[k], cols) and np.array_equal(shuffles[k][perms[k]], np.arange(f))
    check("align_stack (torch float32, gated) = scipy on the design rows; each planted shuffle found", ok)
    dm = moecomp.design_matrix(t1[2], t2[2], w3=t3[2])
    check("design_matrix = [W1 | W3 | W2^T]", dm.dtype == np.float32 and np.array_equal(dm, design[2].astype(np.float32)))
    out = moecomp.permute_neurons(t1[2], t2[2], perms[2], w3=t3[2])
    check("permute_neurons: rows of w1, w3 and columns of w2 gathered by p",
          np.array_equal(out["w1"], t1[2].numpy()[perms[2]]) and np.array_equal(out["w3"], t3[2].numpy()[perms[2]])
          and np.array_equal(out["w2"], t2[2].numpy()[:, perms[2]]))
    x = torch.from_numpy(moecomp.normal(10, d, seed=37))
    f_of = lambda a1, a3, a2: (torch.nn.functional.silu(x @ a1.T) * (x @ a3.T)) @ a2.T  # noqa: E731
    same = f_of(*(torch.from_numpy(out[k]).double() for k in ("w1", "w3", "w2")))
    check("permute_neurons: the same function (torch) to 1e-12",
          rel(same, f_of(t1[2].double(), t3[2].double(), t2[2].double())) <= 1e-12)
    perms_c, _, _ = moecomp.align_stack(t1, t2, w3=t3, objective="correlation",
                                         x=moecomp.normal(200, d, seed=38).astype(np.float32))
    check("align_stack correlation on tokens: the planted shuffles",
          all(np.array_equal(shuffles[k][perms_c[k]], np.arange(f)) for k in range(e)))
    expect("align_rows more rows than b", ValueError, "align_rows", moecomp.align_rows, b, a)
    expect("align_stack correlation without tokens", ValueError, "align_stack", moecomp.align_stack, t1, t2,
           w3=t3, objective="correlation")
    expect("align_rows bad objective", ValueError, "align_rows: objective: expected weights", moecomp.align_rows,
           a, b, "cosine")


def test_prune():
    w = moecomp.normal(64, 48, seed=40).astype(np.float32)
    lin = torch.nn.Linear(48, 64, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(w))
    torch.nn.utils.prune.l1_unstructured(lin, "weight", amount=0.75)
    want = (lin.weight_mask * torch.from_numpy(w)).numpy()
    got, kept, threshold = moecomp.prune(w, sparsity=0.75)
    check("prune sparsity 0.75 = torch's l1_unstructured mask and values", np.array_equal(got, want) and
          kept == int((want != 0).sum()) and threshold == float(np.abs(want[want != 0]).min()), kept)
    got_keep, _, _ = moecomp.prune(w, keep=0.25)
    check("prune keep 0.25 = sparsity 0.75", np.array_equal(got_keep, got))
    got, kept, _ = moecomp.prune(w, sparsity=0.5, scope="row")
    _, idx = torch.topk(torch.from_numpy(np.abs(w)), 24, dim=1)
    want = np.zeros_like(w)
    np.put_along_axis(want, idx.numpy(), np.take_along_axis(w, idx.numpy(), 1), 1)
    check("prune scope row: each row's torch.topk of |w|", np.array_equal(got, want) and kept == 64 * 24)
    got, kept, _ = moecomp.prune(w, scope="n_of_m")
    groups = np.abs(w).reshape(64, 12, 4)
    order = np.argsort(-groups, axis=2, kind="stable")[:, :, :2]
    mask = np.zeros_like(groups, dtype=bool)
    np.put_along_axis(mask, order, True, 2)
    check("prune 2:4: the 2 largest of every 4 (numpy)", np.array_equal(got, np.where(mask.reshape(64, 48), w, 0))
          and kept == 64 * 24)
    # bfloat16 in place (torch): ties are many; moecomp keeps the lowest flat index among equal magnitudes.
    wb = torch.from_numpy(w).bfloat16()
    before = wb.clone()
    r, kept, _ = moecomp.prune(wb, sparsity=0.6, out=wb)
    mags = before.float().abs().numpy().ravel()
    keep_n = w.size - int(round(0.6 * w.size))
    order = np.lexsort((np.arange(mags.size), -mags))[:keep_n]
    want = torch.zeros_like(before).view(-1)
    want[torch.from_numpy(order)] = before.view(-1)[torch.from_numpy(order)]
    check("prune bfloat16 torch tensor in place (out=w): the largest |w|, ties to the lowest index",
          r is wb and torch.equal(wb.view(-1), want) and kept == keep_n)
    expect("prune both sparsity and keep", ValueError, "prune: give exactly one of sparsity and keep", moecomp.prune,
           w, sparsity=0.5, keep=0.5)
    expect("prune sparsity > 1", ValueError, "prune", moecomp.prune, w, sparsity=1.5)
    expect("prune out of another dtype", TypeError, "prune: out must have w's dtype", moecomp.prune, w, sparsity=0.5,
           out=np.zeros((64, 48)))


def test_residuals():
    n, f = 32, 24
    base = moecomp.normal(n, f, seed=41).astype(np.float32)
    p = np.random.default_rng(2).permutation(n).astype(np.int64)  # row i of w goes to base row p[i]
    w = base[p] + 0.1 * moecomp.normal(n, f, seed=42).astype(np.float32)
    res, info = moecomp.encode_residual(base, w, permutation=p, keep=0.25)
    r = np.zeros_like(base)
    r[p] = w - base[p]  # R(p(i), :) = w(i, :) - base(p(i), :), in float32
    lin = torch.nn.Linear(f, n, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(r))
    torch.nn.utils.prune.l1_unstructured(lin, "weight", amount=0.75)
    rp = (lin.weight_mask * torch.from_numpy(r)).numpy()
    dec = moecomp.decode_residual(res)
    check("encode_residual keep 0.25: the decoded residual = torch's pruned P W - B (fp32 values exact)",
          isinstance(res, bytes) and res[:8] == b"MOERESID" and np.array_equal(dec, rp) and info["kept"] == n * f // 4,
          info)
    check("encode_residual: squared_error = ||R - pruned R||^2 to 1e-12",
          abs(info["squared_error"] - float(((r.astype(np.float64) - rp) ** 2).sum())) <= 1e-12 * info["squared_error"])
    restored = moecomp.restore_dense(base, res, permutation=p)
    check("restore_dense: out(i) = base(p(i)) + R(p(i)) (float32, exact)",
          np.array_equal(restored, (base + rp)[p]))
    res16, info16 = moecomp.encode_residual(base, w, permutation=p, keep=0.25, values="fp16", format="bitmap")
    check("encode_residual values fp16, bitmap: each stored value rounded once to binary16",
          info16["format"] == "bitmap" and np.array_equal(moecomp.decode_residual(res16),
                                                          rp.astype(np.float16).astype(np.float32)))
    bb = torch.from_numpy(base).bfloat16()
    out = torch.empty_like(bb)
    resb, _ = moecomp.encode_residual(bb, torch.from_numpy(w).bfloat16(), keep=0.5)
    r2 = moecomp.restore_dense(bb, resb, out=out)
    want = (bb.float() + torch.from_numpy(moecomp.decode_residual(resb))).bfloat16()
    check("restore_dense bfloat16 base into a torch out: the float sum rounded once", r2 is out and torch.equal(out, want))
    # One expert against a base expert (ResMoE): the design residual pruned as one matrix, split in three.
    d, i = 8, 16
    b1, b3, b2 = (moecomp.normal(*s, seed=43 + k).astype(np.float32) for k, s in enumerate(((i, d), (i, d), (d, i))))
    q = np.random.default_rng(3).permutation(i).astype(np.int64)
    e1 = b1[q] + 0.1 * moecomp.normal(i, d, seed=50).astype(np.float32)
    e3 = b3[q] + 0.1 * moecomp.normal(i, d, seed=51).astype(np.float32)
    e2 = b2[:, q] + 0.1 * moecomp.normal(d, i, seed=52).astype(np.float32)
    got = moecomp.encode_expert_residual(b1, b2, e1, e2, base_w3=b3, w3=e3, permutation=q, keep=0.25)
    design = np.zeros((i, 3 * d), dtype=np.float32)
    design[q] = np.hstack([e1, e3, e2.T]) - np.hstack([b1, b3, b2.T])[q]
    lin = torch.nn.Linear(3 * d, i, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(design))
    torch.nn.utils.prune.l1_unstructured(lin, "weight", amount=0.75)
    dp = (lin.weight_mask * torch.from_numpy(design)).numpy()
    check("encode_expert_residual: the design residual pruned as one matrix (torch), split into w1, w3, w2^T",
          np.array_equal(moecomp.decode_residual(got["w1"]), dp[:, :d]) and
          np.array_equal(moecomp.decode_residual(got["w3"]), dp[:, d:2 * d]) and
          np.array_equal(moecomp.decode_residual(got["w2"]), dp[:, 2 * d:].T) and got["kept"] == i * 3 * d // 4)
    expect("decode_residual of bytes that are not a residual file", ValueError, "decode_residual: ",
           moecomp.decode_residual, b"MOERESID" + bytes(200))
    expect("decode_residual of a str", TypeError, "decode_residual: residual must be bytes", moecomp.decode_residual,
           "abc")
    expect("encode_residual shapes differ", ValueError, "encode_residual", moecomp.encode_residual, base, w[:, :5],
           keep=0.5)


def test_partition():
    pts = moecomp.normal(8, 3, seed=60)
    dist = spatial.squareform(spatial.pdist(pts))

    def brute(groups, max_size=0):
        best, best_labels = None, None
        for assign in itertools.product(range(groups), repeat=8):
            if assign[0] != 0 or len(set(assign)) != groups:
                continue
            sizes = np.bincount(assign, minlength=groups)
            if max_size and sizes.max() > max_size:
                continue
            a = np.array(assign)
            within = sum(dist[j, k] for j in range(8) for k in range(j + 1, 8) if a[j] == a[k])
            if best is None or within < best - 1e-12:
                best, best_labels = within, a
        # numbered as moecomp numbers them: by each group's smallest member
        _, first = np.unique(best_labels, return_index=True)
        relabel = {old: new for new, old in enumerate(best_labels[np.sort(first)])}
        return best, np.array([relabel[v] for v in best_labels])

    for groups, max_size in ((3, 0), (2, 4), (4, 0)):
        want, labels = brute(groups, max_size)
        r = moecomp.partition_experts(dist, groups, max_size=max_size)
        check(f"partition_experts exact, 8 experts into {groups} (max_size {max_size}) = brute force",
              abs(r["within"] - want) <= 1e-12 and np.array_equal(r["labels"], labels) and r["optimal"] and
              r["method"] == "exact", (r["within"], want))
        h = moecomp.partition_experts(dist, groups, max_size=max_size, method="heuristic", seed=1)
        check(f"partition_experts heuristic, 8 into {groups}: the optimum, bound below it",
              abs(h["within"] - want) <= 1e-12 and h["lower_bound"] <= h["objective"] + 1e-12 and h["method"] == "heuristic")
    expect("partition_experts 0 groups", ValueError, "partition_experts", moecomp.partition_experts, dist, 0)
    asym = dist.copy()
    asym[0, 1] += 1
    expect("partition_experts asymmetric distances", ValueError, "partition_experts", moecomp.partition_experts, asym, 2)


def test_cka_matrix():
    e, n, d = 5, 60, 7
    base = moecomp.normal(n, d, seed=61)
    feats = np.stack([base @ moecomp.normal(d, d, seed=62 + k) + 0.3 * moecomp.normal(n, d, seed=70 + k)
                      for k in range(e)])

    def linear_cka(a, b):
        a, b = a - a.mean(0), b - b.mean(0)
        return np.linalg.norm(b.T @ a) ** 2 / (np.linalg.norm(a.T @ a) * np.linalg.norm(b.T @ b))
    want = np.array([[linear_cka(feats[a], feats[b]) for b in range(e)] for a in range(e)])
    r = moecomp.cka_matrix(feats)
    check("cka_matrix linear = the closed form for every pair to 1e-12", rel(r["cka"], want) <= 1e-12 and
          r["undefined_pairs"] == 0 and np.array_equal(r["cka"], r["cka"].T))
    t = torch.from_numpy(feats.astype(np.float32))
    r32 = moecomp.cka_matrix(t)
    check("cka_matrix float32 torch stack (read in place) to 1e-5", rel(r32["cka"], want) <= 1e-5 and
          moecomp._address(t) == t.data_ptr())
    rb = moecomp.cka_matrix(feats, "rbf")
    check("cka_matrix rbf: each entry = cka(x, y, 'rbf')", all(
        abs(rb["cka"][a, b] - moecomp.cka(feats[a], feats[b], "rbf")["cka"]) <= 1e-12 for a in range(e) for b in range(e)))
    flat = feats.copy()
    flat[2] = 1.0
    r = moecomp.cka_matrix(flat)
    check("cka_matrix: a constant input's pairs undefined (0), counted", r["undefined_pairs"] == e and
          r["first_undefined"] == "constant_input" and r["cka"][2, 0] == 0, r["undefined_pairs"])
    expect("cka_matrix 2-D input", ValueError, "cka_matrix: features", moecomp.cka_matrix, feats[0])


def test_dispatch():
    t, e, k = 50, 6, 2
    ids, _ = moecomp.route(moecomp.normal(t, e, seed=80), "top_k", k)
    ids[3, 1] = e  # an unused slot
    for block, cap in ((1, 0), (4, 0), (4, 7)):
        plan = moecomp.dispatch_plan(ids, e, block_size=block, capacity=cap)
        flat = ids.ravel()
        sorted_ids, expert_ids, offsets, counts = [], [], [0], []
        position = np.full(flat.size, -1)
        for x in range(e):
            pairs = [p for p in range(flat.size) if flat[p] == x]
            if cap:
                pairs = pairs[:cap]
            counts.append(len(pairs))
            for p in pairs:
                position[p] = len(sorted_ids)
                sorted_ids.append(p)
            pad = -len(pairs) % block
            sorted_ids += [flat.size] * pad
            expert_ids += [x] * ((len(pairs) + pad) // block)
            offsets.append(len(sorted_ids))
        dropped = int(sum(1 for p in range(flat.size) if flat[p] < e) - sum(counts))
        ok = (np.array_equal(plan["sorted_token_ids"], sorted_ids) and np.array_equal(plan["expert_ids"], expert_ids)
              and np.array_equal(plan["offsets"], offsets) and np.array_equal(plan["counts"], counts) and
              np.array_equal(plan["position"], position) and plan["num_tokens_post_pad"] == len(sorted_ids) and
              plan["dropped"] == dropped)
        check(f"dispatch_plan block {block}, capacity {cap} = the numpy transcription (stable sort, padding, "
              f"first pairs kept)", ok)
    expect("dispatch_plan id above E", ValueError, "dispatch_plan", moecomp.dispatch_plan,
           np.full((2, 2), 9, dtype=np.int64), e)
    expect("dispatch_plan int32 ids", TypeError, "dispatch_plan: ids must be int64", moecomp.dispatch_plan,
           ids.astype(np.int32), e)


def test_moe_layer_forward():
    t, d, f, e = 40, 16, 24, 6
    x = torch.from_numpy(moecomp.normal(t, d, seed=90))
    router = torch.from_numpy(moecomp.normal(e, d, seed=91))
    w1, w3 = (torch.from_numpy(moecomp.normal(e * f, d, seed=s).reshape(e, f, d)) for s in (92, 93))
    w2 = torch.from_numpy(moecomp.normal(e * d, f, seed=94).reshape(e, d, f))

    def torch_layer(x, router, w1, w3, w2, k, renorm, expert_map=None):
        p = torch.softmax(x @ router.T, dim=-1)
        tw, ti = torch.topk(p, k, dim=-1)
        if renorm:
            tw = tw / tw.sum(-1, keepdim=True)
        y = torch.zeros_like(x)
        for tok in range(x.shape[0]):
            for slot in range(k):
                m = int(ti[tok, slot]) if expert_map is None else int(expert_map[int(ti[tok, slot])])
                h = torch.nn.functional.silu(w1[m] @ x[tok]) * (w3[m] @ x[tok])
                y[tok] += tw[tok, slot] * (w2[m] @ h)
        return y
    y = moecomp.moe_layer_forward(x, router, w1, w2, w3=w3, top_k=2, renormalize=True)
    check("moe_layer_forward top-2 renormalised (float64) = torch's Mixtral block to 1e-12",
          rel(y, torch_layer(x, router, w1, w3, w2, 2, True)) <= 1e-12)
    y32 = moecomp.moe_layer_forward(x.float(), router.float(), w1.float(), w2.float(), w3=w3.float(), top_k=2)
    check("moe_layer_forward float32 to 1e-5", y32.dtype == np.float32 and
          rel(y32, torch_layer(x, router, w1, w3, w2, 2, False)) <= 1e-5)
    emap = np.array([0, 1, 0, 2, 1, 2], dtype=np.int64)
    y = moecomp.moe_layer_forward(x, router, w1[:3], w2[:3], w3=w3[:3], top_k=2, expert_map=emap)
    check("moe_layer_forward with an expert_map (6 router ids onto 3 experts) = torch",
          rel(y, torch_layer(x, router, w1, w3, w2, 2, False, emap)) <= 1e-12)
    s1, s3 = (torch.from_numpy(moecomp.normal(32, d, seed=s).reshape(1, 32, d)) for s in (95, 96))
    s2 = torch.from_numpy(moecomp.normal(d, 32, seed=97).reshape(1, d, 32))
    gate = torch.from_numpy(moecomp.normal(1, d, seed=98)[0])
    y = moecomp.moe_layer_forward(x, router, w1, w2, w3=w3, top_k=2, shared_w1=s1, shared_w3=s3, shared_w2=s2,
                                  shared_gate=gate)
    shared = (torch.nn.functional.silu(x @ s1[0].T) * (x @ s3[0].T)) @ s2[0].T
    want = torch_layer(x, router, w1, w3, w2, 2, False) + torch.sigmoid(x @ gate)[:, None] * shared
    check("moe_layer_forward with a gated shared expert (Qwen2-MoE) = torch", rel(y, want) <= 1e-12)
    # matmul="bf16": the definition transcribed in float64 (tokens and, before w2, the hidden activations rounded
    # to bfloat16; the bfloat16 weights as they are), against moecomp's bfloat16 dot products with float sums.
    b1, b3, b2 = (w.bfloat16() for w in (w1, w3, w2))
    xf, rf = x.float(), router.float()

    def bf16_contract(xf):
        p = torch.softmax(xf.double() @ rf.double().T, dim=-1)
        tw, ti = torch.topk(p, 2, dim=-1)
        xr = xf.bfloat16().double()
        y = torch.zeros_like(xr)
        for tok in range(xr.shape[0]):
            for slot in range(2):
                m = int(ti[tok, slot])
                h = torch.nn.functional.silu(b1[m].double() @ xr[tok]) * (b3[m].double() @ xr[tok])
                y[tok] += tw[tok, slot] * (b2[m].double() @ h.float().bfloat16().double())
        return y
    yb = moecomp.moe_layer_forward(xf, rf, b1, b2, w3=b3, top_k=2, matmul="bf16")
    ye = moecomp.moe_layer_forward(xf, rf, b1, b2, w3=b3, top_k=2)
    check("moe_layer_forward matmul='bf16' = the bf16 contract transcribed in float64 to 1e-4, and not exact's",
          rel(yb, bf16_contract(xf)) <= 1e-4 and rel(ye, bf16_contract(xf)) > 1e-4)
    expect("moe_layer_forward matmul='fp16'", ValueError, "matmul_precision: expected exact or bf16, got 'fp16'",
           moecomp.moe_layer_forward, xf, rf, b1, b2, w3=b3, matmul="fp16")
    expect("moe_layer_forward x of the wrong width", ValueError, "moe_layer_forward", moecomp.moe_layer_forward,
           x[:, :5], router, w1, w2, w3=w3)
    expect("moe_layer_forward bf16 stacks with float64 tokens", TypeError, "x must be float32",
           moecomp.moe_layer_forward, x, router.float(), w1.bfloat16(), w2.bfloat16())

def raw_tensors(path):
    """{name: the tensor's stored bytes} of a safetensors file, any dtype."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return {name: raw[8 + n + info["data_offsets"][0]:8 + n + info["data_offsets"][1]] for name, info in header.items()}


def bf16_bytes(a):
    """The bfloat16 bytes of float32 values that are bfloat16 values (exact)."""
    return torch.from_numpy(np.ascontiguousarray(a)).bfloat16().view(torch.int16).numpy().tobytes()


def tiny_layer(index=0):
    """Layer `index` of the embedded model as float32 torch stacks (from its bf16 checkpoint) and its tokens."""
    tensors, _ = read_calibration(os.path.join(MODELS, "tiny-moe", "model.safetensors"))
    calibration, _ = read_calibration(os.path.join(MODELS, "tiny-moe", "calibration.safetensors"))
    prefix = f"model.layers.{index}.block_sparse_moe."
    stack = {w: torch.stack([tensors[f"{prefix}experts.{e}.{w}.weight"].float() for e in range(8)])
             for w in ("w1", "w3", "w2")}
    return stack, tensors[prefix + "gate.weight"].float(), calibration[f"layers.{index}.moe_input"], tensors


def test_compress_layer():
    stack, router, x, _ = tiny_layer(0)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        for method, options in (("hc-smoe", {"experts": 4}), ("prune", {"experts": 4}),
                                ("cka-merge", {"experts": 4}), ("resmoe", {"keep": 0.5})):
            report = moecomp.compress_checkpoint(os.path.join(MODELS, "tiny-moe"), out, method, **options)
            r = moecomp.compress_layer(stack["w1"], stack["w2"], router, x, w3=stack["w3"], method=method,
                                       storage="bfloat16", **options)
            prefix = "model.layers.0.block_sparse_moe."
            raw = {}
            for name in sorted(os.listdir(out)):
                if name.endswith(".safetensors"):
                    raw.update(raw_tensors(os.path.join(out, name)))
            n = r["router"].shape[0]
            ok = bf16_bytes(r["router"]) == raw[prefix + "gate.weight"]
            if method == "resmoe":
                part = r["resmoe"]
                ok = ok and all(bf16_bytes(part["base_" + w]) == raw[f"{prefix}resmoe.base.{w}.weight"]
                                for w in ("w1", "w3", "w2"))
                ok = ok and part["permutations"].astype("<i4").tobytes() == raw[prefix + "resmoe.permutations"]
                ok = ok and all(part["residuals"][e][w] == raw[f"{prefix}resmoe.experts.{e}.{w}.residual"]
                                for e in range(8) for w in ("w1", "w3", "w2"))
            elif method == "hc-smoe":  # distinct storage (the default): stack expert k as expert k, the id map
                S = r["w1"].shape[0]
                ok = ok and all(bf16_bytes(r[w][k]) == raw[f"{prefix}experts.{k}.{w}.weight"]
                                for k in range(S) for w in ("w1", "w3", "w2"))
                ok = ok and np.asarray(r["slots"]).astype("<i8").tobytes() == raw[prefix + "gate.expert_map"]
                ok = ok and f"{prefix}experts.{S}.w1.weight" not in raw
            else:
                ok = ok and all(bf16_bytes(r[w][r["slots"][k]]) == raw[f"{prefix}experts.{k}.{w}.weight"]
                                for k in range(n) for w in ("w1", "w3", "w2"))
            layer = report["layers"][0]
            # the checkpoint's own fields (the layer's name, its bytes) are compress_checkpoint's
            own = ("layer", "seconds", "steps_seconds", "bytes_before", "bytes_after", "bytes_written", "bits_per_weight",
                   "stored_experts", "expert_map_tensor")
            # compress_checkpoint merges a bf16 layer as bf16 (docs/compress.md, "The pipeline"): its group errors
            # measure the merged experts as stored, compress_layer's float ones before rounding (1e-4 apart).
            own = own + ("group_merge_errors",)
            groups_close = rel(r["report"].get("group_merge_errors", []), layer.get("group_merge_errors", [])) <= 1e-4
            same_report = all(r["report"][key] == layer[key] for key in layer if key not in own)
            check(f"compress_layer {method} (torch float32 stacks, storage bfloat16) = compress_checkpoint's layer 0: "
                  f"tensors bit for bit, the report's fields (group errors to 1e-4)",
                  ok and same_report and groups_close and r["error"] == layer["output_relative_error"],
                  [key for key in layer if key not in own and r["report"][key] != layer[key]])
    # In place: the library reads the caller's stacks (a column slice of a wider torch tensor included).
    wide = torch.zeros(8, 256, 130)
    wide[:, :, :128] = stack["w1"]
    part = wide[:, :, :128]
    r1 = moecomp.compress_layer(stack["w1"], stack["w2"], router, x, w3=stack["w3"], method="hc-smoe", experts=4)
    r2 = moecomp.compress_layer(part, stack["w2"], router, x, w3=stack["w3"], method="hc-smoe", experts=4)
    check("compress_layer reads a torch stack in place (its address), and a strided slice of a wider one, unchanged",
          moecomp._address(stack["w1"]) == stack["w1"].data_ptr() and moecomp._address(part) == wide.data_ptr() and
          all(np.array_equal(r1[w], r2[w]) for w in ("w1", "w3", "w2", "slots", "router")))
    check("compress_layer hc-smoe: 4 merged experts, an id map of 8, the router kept, the error measured",
          r1["w1"].shape == (4, 256, 128) and len(r1["slots"]) == 8 and r1["router"].shape == (8, 128) and
          0 < r1["error"] < 1 and r1["options"]["merge"] == "frequency")
    p = moecomp.compress_layer(stack["w1"], stack["w2"], router, None, w3=stack["w3"], method="hc-smoe", experts=4)
    check("compress_layer without tokens: features on weights, average merge, error NaN",
          p["options"]["features"] == "weights" and p["options"]["merge"] == "average" and np.isnan(p["error"]))
    mapped = moecomp.compress_layer(stack["w1"], stack["w2"], router, x, w3=stack["w3"], method="cka-merge",
                                    experts=4, similarity_tokens=16, augment=8, merge_router="map")
    rows = moecomp.compress_layer(stack["w1"], stack["w2"], router, x, w3=stack["w3"], method="cka-merge",
                                  experts=4, similarity_tokens=16, augment=8)
    check("compress_layer cka-merge merge_router map: the router kept (8 rows), 8 slots, the experts of merged rows'",
          mapped["router"].shape == (8, 128) and len(mapped["slots"]) == 8 and rows["router"].shape == (4, 128) and
          np.array_equal(mapped["w1"], rows["w1"]) and mapped["report"]["augmented_tokens"] == 8 and
          mapped["report"]["similarity_tokens"] == 16, mapped["options"])
    ms = moecomp.compress_layer(stack["w1"], stack["w2"], router, x, w3=stack["w3"], method="m-smoe", experts=4)
    check("compress_layer m-smoe: 4 merged experts, 8 slots, the router kept",
          ms["w1"].shape == (4, 256, 128) and len(ms["slots"]) == 8 and ms["router"].shape == (8, 128) and
          ms["options"]["merge"] == "frequency", ms["options"])
    expect("compress_layer bfloat16 stacks", TypeError, "compress_layer: w1 must be float32", moecomp.compress_layer,
           stack["w1"].bfloat16(), stack["w2"], router, x, method="prune")
    expect("compress_layer keep with hc-smoe", ValueError, "compress_layer: keep is for resmoe only",
           moecomp.compress_layer, stack["w1"], stack["w2"], router, x, w3=stack["w3"], method="hc-smoe", keep=0.5)
    expect("compress_layer too many experts", ValueError, "compress_layer: experts must be 1 to 8",
           moecomp.compress_layer, stack["w1"], stack["w2"], router, x, w3=stack["w3"], method="prune", experts=9)
    expect("compress_layer prune without tokens", ValueError, "criterion frequency needs calibration tokens",
           moecomp.compress_layer, stack["w1"], stack["w2"], router, None, w3=stack["w3"], method="prune")
    expect("compress_layer a router of the wrong shape", ValueError, "compress_layer: router must be 8 x 128",
           moecomp.compress_layer, stack["w1"], stack["w2"], router[:5], x, w3=stack["w3"], method="hc-smoe")
    expect("compress_layer an unknown model key", ValueError, "compress_layer: model: unknown key 'topk'",
           moecomp.compress_layer, stack["w1"], stack["w2"], router, x, w3=stack["w3"], method="hc-smoe",
           model={"topk": 2})


def find_tool():
    candidates = sys.argv[1:2] + [os.path.join(ROOT, "build", "default", d, "cli", "moecomp") for d in ("tools", "examples")]
    return next((c for c in candidates if c and os.path.isfile(c) and os.access(c, os.X_OK)), None)


def tree(root):
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            files[os.path.relpath(path, root)] = open(path, "rb").read()
    return files


def comparable(report_bytes):
    r = json.loads(report_bytes)
    r.pop("model")
    r["totals"].pop("seconds")
    r["totals"].pop("peak_rss_bytes")
    for layer in r["layers"]:
        layer.pop("seconds")
        layer.pop("steps_seconds")
    return r


def test_compress_checkpoint():
    tool = find_tool()
    check("the moecomp tool is found (ctest passes it; else build/default/tools/cli/moecomp)", tool is not None, tool)
    model, dense = os.path.join(MODELS, "tiny-moe"), os.path.join(MODELS, "tiny-dense")
    runs = (("hc-smoe", ["--experts", "4"], {"experts": 4}),
            ("hc-smoe", ["--experts", "4", "--expert-storage", "duplicated"], {"experts": 4, "expert_storage": "duplicated"}),
            ("prune", ["--experts", "4", "--criterion", "reap"], {"experts": 4, "criterion": "reap"}),
            ("cka-merge", ["--experts", "4", "--merge", "dominant"], {"experts": 4, "merge": "dominant"}),
            ("m-smoe", ["--experts", "6"], {"experts": 6}),
            ("cka-merge", ["--experts", "4", "--similarity-tokens", "128", "--augment", "64", "--router", "map",
                           "--seed", "3"],
             {"experts": 4, "similarity_tokens": 128, "augment": 64, "merge_router": "map", "seed": 3}),
            ("resmoe", ["--keep", "0.3", "--restore-dense"], {"keep": 0.3, "restore_dense": True}),
            ("hc-smoe", ["--experts", "4", "--align", "weights"], {"experts": 4, "align": "weights"}),
            ("prune", ["--experts", "4", "--criterion", "router-score", "--global"],
             {"experts": 4, "criterion": "router-score", "global_prune": True}),
            ("prune", ["--experts", "4", "--criterion", "output", "--samples", "20", "--seed", "2"],
             {"experts": 4, "criterion": "output", "samples": 20, "seed": 2}),
            ("resmoe", ["--center", "mean", "--residual", "svd", "--rank", "8", "--restore-dense"],
             {"center": "mean", "residual": "svd", "rank": 8, "restore_dense": True}),
            ("moefy", ["--experts", "16", "--top-k", "3", "--n-init", "2"], {"experts": 16, "top_k": 3, "restarts": 2}),
            ("sadmoe", ["--expert-size", "64", "--n-init", "2", "--router-steps", "20", "--router-hidden", "32",
                        "--tau", "0.2,0.6"],
             {"expert_size": 64, "restarts": 2, "router_steps": 20, "router_hidden": 32, "tau": [0.2, 0.6]}))
    with tempfile.TemporaryDirectory() as tmp:
        for run, (method, args, kwargs) in enumerate(runs):
            if tool is None:
                break
            source = dense if method in ("moefy", "sadmoe") else model
            a, b = os.path.join(tmp, f"{run}-{method}-tool"), os.path.join(tmp, f"{run}-{method}-python")
            done = subprocess.run([tool, "compress", source, "-o", a, "--method", method, "--quiet", *args],
                                  capture_output=True, text=True)
            steps = []
            report = moecomp.compress_checkpoint(source, b, method, progress=lambda *s: steps.append(s), **kwargs)
            ta, tb = tree(a), tree(b)
            same = done.returncode == 0 and sorted(ta) == sorted(tb) and all(
                ta[f] == tb[f] for f in ta if f != "compression_report.json")
            check(f"compress_checkpoint {method} {' '.join(args)} = the tool's checkpoint, every file byte for byte "
                  f"({len(ta)} files)", same, "" if same else done.stderr.strip() or sorted(set(ta) ^ set(tb)) or
                  [f for f in ta if f in tb and ta[f] != tb[f] and f != "compression_report.json"])
            check(f"compress_checkpoint {method}: compression_report.json = the tool's but for times, memory and "
                  f"'model'; returned as a dict", same and comparable(ta["compression_report.json"]) ==
                  comparable(tb["compression_report.json"]) and report == json.loads(tb["compression_report.json"]))
            check(f"compress_checkpoint {method}: progress heard every step, the last 'rest'",
                  steps[0][:2] == (0, 4) and steps[0][3] in ("loading", "scores") and steps[-1][2] == "rest" and len(steps) > 8,
                  steps[0])
        # Replacing an existing output whole; nothing left beside it.
        out = os.path.join(tmp, "out")
        os.makedirs(os.path.join(out, "stale"))
        moecomp.compress_checkpoint(model, out, "prune", experts=6)
        check("compress_checkpoint replaces an existing out_dir whole, leaves no staging or old copy",
              "stale" not in os.listdir(out) and sorted(os.listdir(tmp)) == sorted(
                  [f"{k}-{m}{s}" for k, (m, _, _) in enumerate(runs) for s in ("-tool", "-python") if tool] +
                  ["out"]))

        # The output never touches an input.
        for label, target in (("model_dir itself", model), ("inside model_dir", os.path.join(model, "out")),
                              ("a directory holding model_dir", MODELS)):
            expect(f"compress_checkpoint refuses out_dir = {label}", ValueError, "compress_checkpoint: out_dir",
                   moecomp.compress_checkpoint, model, target, "prune", experts=4)
        check("... and creates nothing there", not os.path.exists(os.path.join(model, "out")) and not any(
            ".moecomp-tmp-" in n for n in os.listdir(MODELS) + os.listdir(model)))

        # Interrupted: the progress callback's exception (KeyboardInterrupt, or a signal) ends the run, nothing
        # written, the old output kept.
        before = tree(out)

        def interrupt(layer, layers, name, step):
            if layer == 2:
                raise KeyboardInterrupt

        def signal_at_layer_1(layer, layers, name, step):
            if layer == 1 and step == "loading":
                os.kill(os.getpid(), signal.SIGINT)

        for label, callback in (("a KeyboardInterrupt raised by progress", interrupt),
                                ("SIGINT (Ctrl-C) during the run", signal_at_layer_1)):
            try:
                moecomp.compress_checkpoint(model, out, "hc-smoe", progress=callback)
                raised = None
            except KeyboardInterrupt:
                raised = "KeyboardInterrupt"
            check(f"compress_checkpoint interrupted by {label}: KeyboardInterrupt, the old out_dir intact, no staging",
                  raised == "KeyboardInterrupt" and tree(out) == before and not any(
                      ".moecomp-tmp-" in n for n in os.listdir(tmp)), raised)
        expect("compress_checkpoint: what progress raises (ZeroDivisionError) ends the run", ZeroDivisionError, "division",
               moecomp.compress_checkpoint, model, os.path.join(tmp, "never"), "prune", experts=4,
               progress=lambda *s: 1 / 0)
        check("... and nothing is written", not os.path.exists(os.path.join(tmp, "never")) and
              not any(".moecomp-tmp-" in n for n in os.listdir(tmp)))

        # A layer whose output overflows: RuntimeError naming it, nothing written.
        raw = bytearray(open(os.path.join(model, "model.safetensors"), "rb").read())
        (n,) = struct.unpack("<Q", raw[:8])
        bad = os.path.join(tmp, "overflow")
        os.makedirs(bad)
        for name, info in json.loads(raw[8:8 + n]).items():
            if name.startswith("model.layers.1.block_sparse_moe.experts."):
                begin, end = (8 + n + o for o in info["data_offsets"])
                big = torch.frombuffer(raw[begin:end], dtype=torch.bfloat16) * 1e30
                raw[begin:end] = big.view(torch.int16).numpy().tobytes()
        open(os.path.join(bad, "model.safetensors"), "wb").write(raw)
        for name in ("config.json", "calibration.safetensors"):
            shutil.copy(os.path.join(model, name), bad)
        expect("compress_checkpoint: a layer's output error not finite is a RuntimeError naming it", RuntimeError,
               "compress_checkpoint: MoE layer model.layers.1.block_sparse_moe: the compressed layer's output error",
               moecomp.compress_checkpoint, bad, os.path.join(tmp, "nan-out"), "prune", experts=4)
        check("... and nothing is written", not os.path.exists(os.path.join(tmp, "nan-out")) and
              not any(".moecomp-tmp-" in n for n in os.listdir(tmp)))

        # Arguments.
        expect("compress_checkpoint keep with hc-smoe", ValueError, "compress_checkpoint: keep is for resmoe only",
               moecomp.compress_checkpoint, model, os.path.join(tmp, "x"), "hc-smoe", keep=0.5)
        expect("compress_checkpoint expert_storage with prune", ValueError,
               "compress_checkpoint: expert_storage is for hc-smoe, m-smoe and cka-merge with merge_router map only, and method is prune", moecomp.compress_checkpoint,
               model, os.path.join(tmp, "x"), "prune", expert_storage="duplicated")
        expect("compress_checkpoint align with prune", ValueError,
               "compress_checkpoint: align is for hc-smoe and cka-merge only, and method is prune",
               moecomp.compress_checkpoint, model, os.path.join(tmp, "x"), "prune", align="weights")
        expect("compress_checkpoint global_prune with reap", ValueError, "compress_checkpoint: global_prune is for prune with criterion",
               moecomp.compress_checkpoint, model, os.path.join(tmp, "x"), "prune", criterion="reap", global_prune=True)
        expect("compress_checkpoint center unknown", ValueError, "compress_checkpoint: center",
               moecomp.compress_checkpoint, model, os.path.join(tmp, "x"), "resmoe", center="median")
        expect("compress_checkpoint bad expert_storage", ValueError, "expected distinct or duplicated, got 'shared'",
               moecomp.compress_checkpoint, model, os.path.join(tmp, "x"), "hc-smoe", expert_storage="shared")
        expect("compress_checkpoint augment with m-smoe", ValueError,
               "compress_checkpoint: augment is for cka-merge only", moecomp.compress_checkpoint, model,
               os.path.join(tmp, "x"), "m-smoe", augment=4)
        expect("compress_checkpoint similarity_tokens below 0", ValueError,
               "compress_checkpoint: similarity_tokens and augment must be >= 0", moecomp.compress_checkpoint, model,
               os.path.join(tmp, "x"), "cka-merge", similarity_tokens=-1)
        expect("compress_checkpoint merge_router unknown", ValueError, "compress_checkpoint: router rule: expected",
               moecomp.compress_checkpoint, model, os.path.join(tmp, "x"), "cka-merge", merge_router="rows")
        expect("compress_checkpoint bad method", ValueError, "compress_checkpoint: method: expected hc-smoe",
               moecomp.compress_checkpoint, model, os.path.join(tmp, "x"), "merge")
        expect("compress_checkpoint experts beyond the model's", ValueError, "compress_checkpoint: experts must be 1 to 8",
               moecomp.compress_checkpoint, model, os.path.join(tmp, "x"), "prune", experts=9)
        expect("compress_checkpoint router_lr with hc-smoe", ValueError,
               "compress_checkpoint: router_lr is for sadmoe only, and method is hc-smoe", moecomp.compress_checkpoint,
               model, os.path.join(tmp, "x"), "hc-smoe", router_lr=0.1)
        expect("compress_checkpoint experts and expert_size", ValueError, "give experts or expert_size, not both",
               moecomp.compress_checkpoint, dense, os.path.join(tmp, "x"), "moefy", experts=8, expert_size=32)
        expect("compress_checkpoint sadmoe tau outside [0, 1]", ValueError, "compress_checkpoint: tau: expected "
               "thresholds in [0, 1]", moecomp.compress_checkpoint, dense, os.path.join(tmp, "x"), "sadmoe", tau=[0.5, 2])
        expect("compress_checkpoint hc-smoe on a dense model", ValueError, "method moefy or sadmoe splits its FFNs",
               moecomp.compress_checkpoint, dense, os.path.join(tmp, "x"), "hc-smoe")
        expect("compress_checkpoint moefy on an MoE model", ValueError, "method moefy splits dense checkpoints",
               moecomp.compress_checkpoint, model, os.path.join(tmp, "x"), "moefy")
        expect("compress_checkpoint a missing calibration file", ValueError, "compress_checkpoint: calibration: no file",
               moecomp.compress_checkpoint, model, os.path.join(tmp, "x"), "hc-smoe", calibration=os.path.join(tmp, "no"))
        expect("compress_checkpoint progress not callable", TypeError, "progress must be callable",
               moecomp.compress_checkpoint, model, os.path.join(tmp, "x"), "hc-smoe", progress=3)
        r = moecomp.compress_checkpoint(pathlib.Path(dense), pathlib.Path(tmp) / "moefy", "moefy", restarts=1,
                                        layouts=os.path.join(ROOT, "layouts"))
        check("compress_checkpoint moefy with pathlib paths and layouts= given", r["method"] == "moefy" and
              os.path.isfile(os.path.join(tmp, "moefy", "config.json")))


def test_compress_checkpoint_in_parts():
    """One checkpoint from several processes (docs/python.md): two parts, each a process's call with its layers
    from assign_layers and a shared work_dir, then one call with every part's records; the checkpoint equals one
    call's, file for file. The parts run here one after the other; the mpi4py example in docs/python.md runs them
    as ranks."""
    model = os.path.join(MODELS, "tiny-moe")
    split = moecomp.assign_layers(model, 2)
    check("assign_layers: the 4 layers over 2 parts, 2 each, by bytes", split == [[0, 2], [1, 3]], split)
    runs = (("hc-smoe", {"experts": 4}), ("prune", {"experts": 4, "criterion": "router-score", "global_prune": True}),
            ("resmoe", {"keep": 0.3, "restore_dense": True}), ("cka-merge", {"experts": 4, "merge": "learned"}))
    with tempfile.TemporaryDirectory() as tmp:
        for method, kwargs in runs:
            whole, parts = os.path.join(tmp, f"{method}-whole"), os.path.join(tmp, f"{method}-parts")
            moecomp.compress_checkpoint(model, whole, method, **kwargs)
            work = tempfile.mkdtemp(dir=tmp, prefix=f"{method}-work-")
            records = []
            for layers in split:  # each part: its own process in a real run
                part = moecomp.compress_checkpoint(model, parts, method, layers=layers, work_dir=work, **kwargs)
                records += part["layers"]
            check(f"compress_checkpoint {method} in parts: each part returns its layers' records, OUT_DIR not yet there",
                  sorted(r["index"] for r in records) == [0, 1, 2, 3] and not os.path.exists(parts))
            report = moecomp.compress_checkpoint(model, parts, method, work_dir=work, layer_reports=records, **kwargs)
            ta, tb = tree(whole), tree(parts)
            same = sorted(ta) == sorted(tb) and all(ta[f] == tb[f] for f in ta if f != "compression_report.json")
            check(f"compress_checkpoint {method} in parts = one call's checkpoint, every file byte for byte "
                  f"({len(ta)} files)", same,
                  "" if same else sorted(set(ta) ^ set(tb)) or [f for f in ta if ta[f] != tb.get(f)])
            check(f"compress_checkpoint {method} in parts: the report but for times, memory and 'model'; work_dir "
                  f"moved to out_dir", comparable(ta["compression_report.json"]) == comparable(tb["compression_report.json"])
                  and report["method"] == method and not os.path.exists(work))
        work = tempfile.mkdtemp(dir=tmp)
        part = moecomp.compress_checkpoint(model, os.path.join(tmp, "x"), "prune", experts=4, layers=[0], work_dir=work)
        expect("layer_reports missing a layer names it", ValueError, "layer_reports has no record of layer 1",
               moecomp.compress_checkpoint, model, os.path.join(tmp, "x"), "prune", experts=4, work_dir=work,
               layer_reports=part["layers"])
        expect("a part's layers out of order", ValueError, "layers must be ascending distinct layer indices in [0, 4), "
               "got 1 at position 1", moecomp.compress_checkpoint, model, os.path.join(tmp, "x"), "prune", experts=4,
               layers=[2, 1], work_dir=work)
        expect("layers without work_dir", ValueError, "layers and layer_reports need work_dir",
               moecomp.compress_checkpoint, model, os.path.join(tmp, "x"), "prune", experts=4, layers=[0])
        expect("a finish without every layer's record", ValueError, "layer_reports has no record of layer 0",
               moecomp.compress_checkpoint, model, os.path.join(tmp, "x"), "prune", experts=4, work_dir=work,
               layer_reports=[])


def test_generator():
    a, b = moecomp.normal(3, 4, seed=7), moecomp.normal(3, 4, seed=7)
    check("normal: the same seed gives the same numbers", np.array_equal(a, b) and a.shape == (3, 4))
    check("normal: another stream gives others", not np.array_equal(a, moecomp.normal(3, 4, seed=7, stream=1)))


def main():
    for test in (test_generator, test_pdist, test_linkage, test_route, test_cka, test_emd, test_kmeans,
                 test_linear_sum_assignment, test_sinkhorn, test_merge, test_align, test_prune, test_residuals,
                 test_partition, test_cka_matrix, test_dispatch, test_moe_layer_forward, test_compress_layer,
                 test_compress_checkpoint, test_compress_checkpoint_in_parts):
        test()
    print(f"{checks - failures}/{checks} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
