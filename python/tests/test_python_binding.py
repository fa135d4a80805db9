#!/usr/bin/env python3
"""The Python binding (python/moecomp_python.cpp, docs/python.md) against its peers, in one process: pdist and
linkage against scipy, route against torch, cka against numpy's closed form, emd against POT, merge_experts against
numpy transcriptions; inputs from numpy and torch read in place (the addresses moecomp sees are the arrays' own),
`out` written in place into a torch tensor, and the errors (ValueError / TypeError with the argument's name).
kmeans against scikit-learn's lloyd, linear_sum_assignment against scipy, sinkhorn against POT.
Data: moecomp.normal, moecomp's own seeded generator. Run with PYTHONPATH holding the built module (ctest sets it)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "peers"))
from peer_common import require  # noqa: E402

np, spatial, hierarchy, optimize, ot, torch, skcluster = require(
    "numpy", "scipy.spatial.distance", "scipy.cluster.hierarchy", "scipy.optimize", "ot", "torch", "sklearn.cluster")
import moecomp  # noqa: E402  (built with the project: a missing module is a failure, never a skip)

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


def test_generator():
    a, b = moecomp.normal(3, 4, seed=7), moecomp.normal(3, 4, seed=7)
    check("normal: the same seed gives the same numbers", np.array_equal(a, b) and a.shape == (3, 4))
    check("normal: another stream gives others", not np.array_equal(a, moecomp.normal(3, 4, seed=7, stream=1)))


def main():
    for test in (test_generator, test_pdist, test_linkage, test_route, test_cka, test_emd, test_kmeans,
                 test_linear_sum_assignment, test_sinkhorn, test_merge):
        test()
    print(f"{checks - failures}/{checks} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
