#!/usr/bin/env python3
"""The moecomp tool against a hostile user and a careless script (docs/cli.md: outputs, signals, numerical
outcomes, resources). One check per promise, in groups:

1. outputs of one run are written together or not at all; two outputs naming one file are refused;
2. no temporary file survives a catchable signal or a file-size limit, and no special file (device, FIFO,
   directory) is ever replaced;
3. numerical trouble is scaled away where the mathematics allows, and reported (exit 3, one error line,
   JSON status, nothing written) where it does not;
4. results are bit-identical at 1, 2, 3 and 7 threads, for every command;
5. what one command writes the next one accepts (linkage's +inf heights in fcluster);
6. resources: an impossible memory need fails fast with exit 2, naming the need and the way out; -o does
   not double the peak memory; absurd thread counts cost nothing;
7. the small print of the argument parser and the messages.

Run as root it also runs itself again as an unprivileged user (uid 65534), where the permission cases apply;
a scratch character device (made with mknod, as root) and a FIFO stand in for /dev entries.

Usage: test_reliability.py PATH/TO/moecomp [--as-user]"""
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

import numpy as np

TOOL = os.path.abspath(sys.argv[1])
AS_USER = "--as-user" in sys.argv
MARKER = ".moecomp-tmp-"


class Suite:
    def __init__(self, tmp):
        self.tmp = tmp
        self.checks = self.failures = 0
        self.rng = np.random.default_rng(20261123)

    def path(self, *names):
        return os.path.join(self.tmp, *names)

    def save(self, name, array):
        p = self.path(name)
        np.save(p, array)
        return p

    def run(self, *args, limits=None, timeout=300):
        def preexec():
            for which, value in (limits or {}).items():
                resource.setrlimit(which, (value, value))
        return subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                              preexec_fn=preexec if limits else None)

    def check(self, label, ok, detail=""):
        self.checks += 1
        if not ok:
            self.failures += 1
        print(f"{'ok  ' if ok else 'FAIL'} {label}{': ' + detail if detail else ''}", flush=True)

    def leftovers(self, folder=None):
        folder = folder or self.tmp
        return [f for f in os.listdir(folder) if MARKER in f]

    def one_error_line(self, r, status=2, *fragments):
        lines = r.stderr.strip().splitlines()
        return (r.returncode == status and len(lines) == 1 and lines[0].startswith("moecomp: error:")
                and all(f in lines[0] for f in fragments))

    def expect_refused(self, label, args, *fragments, untouched=(), absent=(), status=2, limits=None):
        """Exit `status` with one error line holding every fragment; files in `untouched` keep their bytes,
        files in `absent` are not created, and no temporary is left."""
        before = {p: open(p, "rb").read() for p in untouched if os.path.isfile(p)}
        r = self.run(*args, limits=limits)
        ok = self.one_error_line(r, status, *fragments)
        ok = ok and all(open(p, "rb").read() == b for p, b in before.items())
        ok = ok and not any(os.path.exists(p) for p in absent) and not self.leftovers()
        self.check(label, ok, r.stderr.strip() or f"exit {r.returncode}")
        return r


# ---------------------------------------------------------------------------------------------- 1. outputs

def group_outputs(s):
    a = s.save("a.npy", np.full(6, 1 / 6))
    b = s.save("b.npy", np.full(6, 1 / 6))
    M = s.save("M.npy", s.rng.random((6, 6)))
    plan, u, v = s.path("plan.npy"), s.path("u.npy"), s.path("v.npy")
    for p in (plan, u, v):
        if os.path.exists(p):
            os.remove(p)
    s.expect_refused("emd: --duals in a missing directory writes no plan",
                     ["emd", a, b, M, "-o", plan, "--duals", s.path("nodir", "u.npy")], "--duals", "nodir",
                     absent=[plan])
    s.expect_refused("emd: --duals-v in a missing directory writes neither plan nor u",
                     ["emd", a, b, M, "-o", plan, "--duals", u, "--duals-v", s.path("nodir", "v.npy")],
                     "--duals-v", absent=[plan, u])
    clouds = [s.save(f"cloud{j}.npy", s.rng.standard_normal((12, 3))) for j in range(3)]
    perms = s.path("perms.npy")
    s.expect_refused("barycenter-free: -o in a missing directory writes no --perms",
                     ["barycenter-free", *clouds, "--perms", perms, "-o", s.path("nodir", "B.npy")], "-o",
                     absent=[perms])
    keep = s.path("keep.npy")
    with open(keep, "wb") as f:
        f.write(b"precious")
    for label, args in [("--duals and -o", ["emd", a, b, M, "--duals", keep, "-o", keep]),
                        ("--duals and --duals-v", ["emd", a, b, M, "--duals", keep, "--duals-v", keep]),
                        ("-o and --duals spelt ./x and x", ["emd", a, b, M, "-o", keep, "--duals",
                                                            os.path.join(s.tmp, ".", "keep.npy")]),
                        ("--perms and -o", ["barycenter-free", *clouds, "--perms", keep, "-o", keep])]:
        s.expect_refused(f"one file for two outputs ({label})", args, "the same file", untouched=[keep])
    link = s.path("link.npy")
    os.symlink(keep, link)
    s.expect_refused("one file for two outputs (a link to it)", ["emd", a, b, M, "-o", keep, "--duals", link],
                     "the same file", untouched=[keep])
    hard = s.path("hard.npy")
    os.link(keep, hard)
    s.expect_refused("one file for two outputs (a hard link to it)", ["emd", a, b, M, "-o", keep, "--duals", hard],
                     "the same file", untouched=[keep])
    os.remove(hard)
    # All outputs are written when all can be.
    r = s.run("emd", a, b, M, "-o", plan, "--duals", u, "--duals-v", v)
    s.check("emd writes plan, u and v together", r.returncode == 0 and all(map(os.path.isfile, (plan, u, v))),
            r.stderr.strip())
    # A link to a regular file is followed: the file is replaced, the link stays a link.
    r = s.run("emd", a, b, M, "-o", link)
    s.check("-o through a symbolic link replaces its target and keeps the link",
            r.returncode == 0 and os.path.islink(link) and np.load(keep).shape == (6, 6), r.stderr.strip())


# ---------------------------------------------------------------------------------------------- 2. temporaries

def group_temporaries(s, as_root):
    x = s.save("x.npy", s.rng.standard_normal((200, 4)))
    # Special files are refused and left as they were.
    fifo = s.path("fifo")
    os.mkfifo(fifo)
    s.expect_refused("-o on a FIFO is refused", ["pdist", x, "-o", fifo], "FIFO", "not a regular file")
    s.check("the FIFO is still a FIFO", stat.S_ISFIFO(os.lstat(fifo).st_mode))
    folder = s.path("a-directory")
    os.mkdir(folder)
    s.expect_refused("-o on a directory is refused", ["pdist", x, "-o", folder], "directory")
    if as_root:
        device = s.path("null-device")
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers, in scratch space
        s.expect_refused("-o on a character device is refused", ["pdist", x, "-o", device], "character device")
        s.check("the device is still a character device", stat.S_ISCHR(os.lstat(device).st_mode))
        dangling = s.path("dangling.npy")
        os.symlink(device, dangling)
        s.expect_refused("-o on a link to a device is refused", ["pdist", x, "-o", dangling], "character device")
    else:
        readonly = s.path("read-only")
        os.mkdir(readonly, 0o555)
        s.expect_refused("-o in a read-only directory is refused before any work",
                         ["pdist", x, "-o", os.path.join(readonly, "d.npy")], "not writable")
        locked = s.path("locked.npy")
        with open(locked, "wb") as f:
            f.write(b"read-only content")
        os.chmod(locked, 0o444)
        s.expect_refused("-o on a read-only file is refused and the file kept", ["pdist", x, "-o", locked],
                         "not writable", untouched=[locked])
    # A file-size limit: the write fails cleanly (SIGXFSZ is ignored), nothing is left.
    big = s.save("big.npy", s.rng.standard_normal((2000, 4)))
    out = s.path("limited.npy")
    s.expect_refused("a file-size limit fails the write with exit 2 and leaves nothing",
                     ["pdist", big, "-o", out], "File too large", absent=[out],
                     limits={resource.RLIMIT_FSIZE: 1 << 20})
    # Catchable signals while a large output is being written: the temporary goes with the process.
    wide = s.save("wide.npy", s.rng.standard_normal((9000, 2)))
    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGPIPE", "SIGUSR1", "SIGALRM", "SIGXCPU"):
        number = getattr(signal, name)
        target = s.path(f"killed-{name}.npy")
        seen = False
        for _ in range(5):  # the write lasts a fraction of a second: watch for the temporary, then strike
            p = subprocess.Popen([TOOL, "pdist", wide, "-o", target], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            deadline = time.time() + 60
            while p.poll() is None and time.time() < deadline:
                if any(f.startswith(f"killed-{name}.npy{MARKER}") for f in os.listdir(s.tmp)):
                    p.send_signal(number)
                    seen = True
                    break
                time.sleep(0.0005)
            p.wait()
            if seen:
                break
            if os.path.exists(target):
                os.remove(target)
        s.check(f"{name} during the write leaves no temporary and no output",
                seen and p.returncode == -number and not s.leftovers() and not os.path.exists(target),
                f"temporary seen {seen}, exit {p.returncode}, left {s.leftovers()}")


# ---------------------------------------------------------------------------------------------- 3. numerics

def pdist_reference(x, metric):
    from scipy.spatial.distance import pdist
    return pdist(x, metric)


def group_numerics(s):
    base = s.rng.standard_normal((60, 8))
    out = s.path("d.npy")
    for dtype, factor, label in ((np.float64, 1e200, "float64 x 1e200"), (np.float64, 1e-200, "float64 x 1e-200"),
                                 (np.float32, 3e19, "float32 x 3e19"), (np.float32, 1e-30, "float32 x 1e-30")):
        x = (base * factor).astype(dtype)
        path = s.save("scaled.npy", x)
        for metric in ("euclidean", "cosine", "correlation"):
            r = s.run("pdist", path, "--metric", metric, "-o", out)
            if r.returncode != 0:
                s.check(f"pdist {metric} on {label}", False, r.stderr.strip())
                continue
            d = np.load(out)
            exact = x.astype(np.float64) / factor
            ref = pdist_reference(exact, metric) * (factor if metric == "euclidean" else 1.0)
            tol = 1e-12 if dtype == np.float64 else 2e-6
            err = np.max(np.abs(d - ref) / np.abs(ref))
            s.check(f"pdist {metric} on {label}: finite and right", np.all(np.isfinite(d)) and err < tol,
                    f"max relative error {err:.2e}")
    # linkage, in memory and in O(n d) memory, on points whose distance updates would square past float64.
    from scipy.cluster.hierarchy import linkage as scipy_linkage
    points = s.rng.standard_normal((50, 4))
    huge = s.save("huge-points.npy", points * 1e200)
    for method in ("single", "ward", "centroid", "median", "average"):
        for low_memory in ((), ("--low-memory",)):
            if low_memory and method == "average":
                continue
            label = f"linkage {method}{' --low-memory' if low_memory else ''} on points x 1e200"
            r = s.run("linkage", huge, "--method", method, *low_memory, "-o", out)
            if r.returncode != 0:
                s.check(label, False, r.stderr.strip())
                continue
            z, ref = np.load(out), scipy_linkage(points, method)
            err = np.max(np.abs(z[:, 2] / 1e200 - ref[:, 2]) / ref[:, 2])
            s.check(f"{label}: finite, scipy's merges and heights", np.all(np.isfinite(z)) and err < 1e-12 and
                    np.array_equal(z[:, :2], ref[:, :2]), f"max relative error {err:.2e}")
    # Sinkhorn and the fixed-support barycenter at a regularisation where exp(-M / reg) underflows.
    n = 8
    a = s.save("ha.npy", np.full(n, 1 / n))
    b = s.save("hb.npy", np.full(n, 1 / n))
    M = s.save("hM.npy", s.rng.random((n, n)) + 0.5)
    plan = s.path("sinkhorn-plan.npy")
    r = s.expect_refused("sinkhorn plain at reg 1e-6: exit 3, one error line, nothing written",
                         ["sinkhorn", a, b, M, "--reg", "1e-6", "-o", plan, "--json"], "numerical failure",
                         "--method log", absent=[plan], status=3)
    try:
        status = json.loads(r.stdout)["status"]
    except (ValueError, KeyError):
        status = None
    s.check("sinkhorn plain at reg 1e-6: the JSON says numerical_error", status == "numerical_error", r.stdout.strip())
    r = s.run("sinkhorn", a, b, M, "--reg", "1e-6", "--method", "log", "-o", plan)
    s.check("sinkhorn log at reg 1e-6 works", r.returncode in (0,) and os.path.isfile(plan), r.stderr.strip())
    A = s.save("hA.npy", np.full((n, 3), 1 / n))
    bary = s.path("fixed-barycenter.npy")
    s.expect_refused("barycenter-fixed at reg 1e-6: exit 3, nothing written",
                     ["barycenter-fixed", A, M, "--reg", "1e-6", "-o", bary], "numerical failure", "--log-domain",
                     absent=[bary], status=3)


# ---------------------------------------------------------------------------------------------- 4. determinism

def group_determinism(s):
    def same_at_every_thread_count(label, args, outputs):
        results = {}
        for t in (1, 2, 3, 7):
            r = s.run(*args, "--threads", t)
            if r.returncode != 0:
                s.check(f"{label} at {t} threads", False, r.stderr.strip())
                return
            results[t] = [open(p, "rb").read() for p in outputs]
        differing = [t for t in (2, 3, 7) if results[t] != results[1]]
        s.check(f"{label}: bit-identical at 1, 2, 3 and 7 threads", not differing, f"differs at {differing}")

    for dtype in (np.float32, np.float64):
        x = s.save("det.npy", s.rng.standard_normal((600, 300)).astype(dtype))
        out = s.path("det-out.npy")
        for metric in ("euclidean", "sqeuclidean", "cosine", "correlation"):
            same_at_every_thread_count(f"pdist {metric} {np.dtype(dtype).name}",
                                       ["pdist", x, "--metric", metric, "-o", out], [out])
        for method in ("average", "ward"):
            same_at_every_thread_count(f"linkage {method} {np.dtype(dtype).name}",
                                       ["linkage", x, "--method", method, "-o", out], [out])
    n = 300
    a = s.save("da.npy", np.full(n, 1 / n))
    M = s.save("dM.npy", s.rng.random((n, n)))
    out, u = s.path("det-out.npy"), s.path("det-u.npy")
    for method in ("plain", "log", "stabilized"):
        same_at_every_thread_count(f"sinkhorn {method}", ["sinkhorn", a, a, M, "--reg", "0.05", "--method", method,
                                                          "-o", out], [out])
    same_at_every_thread_count("emd", ["emd", a, a, M, "-o", out, "--duals", u], [out, u])
    same_at_every_thread_count("assign", ["assign", M, "-o", out], [out])
    clouds = [s.save(f"dc{j}.npy", s.rng.standard_normal((64, 16))) for j in range(3)]
    same_at_every_thread_count("barycenter-free", ["barycenter-free", *clouds, "-o", out, "--perms", u], [out, u])


# ---------------------------------------------------------------------------------------------- 5. pipelines

def group_pipelines(s):
    # Two groups at infinite distance from each other: linkage merges them last, at height +inf.
    n = 6
    square = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            square[i, j] = abs(i - j) if (i < 3) == (j < 3) else np.inf
    condensed = square[np.triu_indices(n, 1)]
    d = s.save("inf-condensed.npy", condensed)
    z = s.path("Z.npy")
    r = s.run("linkage", d, "--condensed", "--method", "single", "-o", z)
    s.check("linkage accepts +inf distances", r.returncode == 0 and np.isinf(np.load(z)[-1, 2]), r.stderr.strip())
    labels = s.path("labels.npy")
    r = s.run("fcluster", z, "--maxclust", "2", "-o", labels)
    ok = r.returncode == 0 and list(np.load(labels)) == [0, 0, 0, 1, 1, 1]
    s.check("fcluster accepts the Z that linkage wrote (+inf height)", ok, r.stderr.strip())
    r = s.run("fcluster", z, "--distance", "10", "-o", labels)
    s.check("fcluster --distance below the +inf merge keeps the two groups",
            r.returncode == 0 and len(set(np.load(labels))) == 2, r.stderr.strip())


# ---------------------------------------------------------------------------------------------- 6. resources

def group_resources(s):
    cap = {resource.RLIMIT_AS: 3 << 30}
    x = s.save("many.npy", s.rng.standard_normal((60000, 8)))
    start = time.time()
    r = s.expect_refused("pdist of 60000 rows under a 3 GiB limit fails fast, naming the need",
                         ["pdist", x, "-o", s.path("never.npy")], "needs about", "GB", "available", limits=cap)
    s.check("... within 5 seconds", time.time() - start < 5, f"{time.time() - start:.1f} s")
    pts = s.save("points100k.npy", s.rng.standard_normal((100000, 2)))
    r = s.expect_refused("linkage of 100000 points names --low-memory", ["linkage", pts, "--method", "ward"],
                         "needs about", "--low-memory", limits=cap)
    r = s.expect_refused("linkage average of 100000 points says which methods --low-memory has",
                         ["linkage", pts, "--method", "average"], "--low-memory", "single, ward", limits=cap)

    def peak_rss(args):
        code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
                "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
        r = subprocess.run([sys.executable, "-c", code, TOOL, *args], capture_output=True, text=True)
        return int(r.stdout.strip()) * 1024 if r.returncode == 0 else None

    for dtype in (np.float32, np.float64):
        y = s.save("rss.npy", s.rng.standard_normal((6000, 8)).astype(dtype))
        without = peak_rss(["pdist", y])
        with_o = peak_rss(["pdist", y, "-o", s.path("rss-out.npy")])
        ok = without is not None and with_o is not None and with_o < 1.25 * without
        s.check(f"pdist {np.dtype(dtype).name}: -o costs no second copy of the output",
                ok, f"peak {with_o and with_o / 1e6:.0f} MB with -o, {without and without / 1e6:.0f} MB without")
    # More threads than CPUs only add overhead (4096 made a 3000-point linkage 400 times slower): the count is
    # capped at the CPUs this process may use, which the summary reports.
    pts = s.save("points3k.npy", s.rng.standard_normal((3000, 4)))
    cpus = len(os.sched_getaffinity(0))
    used = {}
    for t in (0, 1, 4096):
        r = s.run("linkage", pts, "--method", "average", "--threads", t, "--json")
        used[t] = json.loads(r.stdout).get("threads") if r.returncode == 0 else None
    s.check("--threads 4096 and 0 run on the CPUs there are, 1 on one", used == {0: cpus, 1: 1, 4096: cpus},
            f"threads used {used}, CPUs {cpus}")


# ---------------------------------------------------------------------------------------------- 7. small print

def group_small_print(s):
    r = s.run()
    s.check("no arguments: exit 2 and one error line on stderr", s.one_error_line(r, 2, "no command"),
            r.stderr.strip())
    x = s.save("sx.npy", s.rng.standard_normal((10, 3)))
    s.expect_refused("a flag given twice", ["pdist", x, "--json", "--json"], "--json given twice")
    n = 5
    a = s.save("sa.npy", np.full(n, 1 / n))
    M = s.save("sM.npy", s.rng.random((n, n)))
    for text in ("0x10", " 0.1", "0.1 ", "inf", "nan", "1e400", "1e-400", "", "0.1.2"):
        s.expect_refused(f"--reg {text!r} is refused", ["sinkhorn", a, a, M, "--reg", text], "--reg")
    r = s.run("sinkhorn", a, a, M, "--reg", "0.1", "--tol", "1e-320", "--max-iter", "5")
    s.check("--tol 1e-320 (positive, finite, subnormal) is accepted", r.returncode == 0 and "error" not in r.stderr,
            r.stderr.strip())
    for text in ("0x10", " 3", "3 ", "3.0", "1e3", "99999999999999999999"):
        s.expect_refused(f"--max-iter {text!r} is refused", ["sinkhorn", a, a, M, "--reg", "0.1", "--max-iter", text],
                         "--max-iter")
    b = np.full(n, 1 / n)
    b[0] += 1e-6
    bpath = s.save("sb.npy", b)
    s.expect_refused("unequal masses: the message shows the difference", ["emd", a, bpath, M],
                     "sum(a) = 1", "sum(b) = 1.000001")
    huge = s.save("huge.npy", np.full((3, 3), 1e308))
    r = s.run("assign", huge, "--json")
    try:
        cost = json.loads(r.stdout)["cost"]
    except (ValueError, KeyError):
        cost = None
    s.check("assign: a total that overflows is \"inf\" in the JSON, with a warning", r.returncode == 0
            and cost == "inf" and "warning" in r.stderr, f"cost {cost!r}, stderr {r.stderr.strip()!r}")
    h = s.save("sh.npy", np.ones(3))  # total mass 3: the cost, 3e308, exceeds float64
    r = s.run("emd", h, h, huge, "--json")
    try:
        cost = json.loads(r.stdout)["cost"]
    except (ValueError, KeyError):
        cost = None
    s.check("emd: the same rule for a cost beyond float64", r.returncode == 0 and cost == "inf" and
            "cost is inf" in r.stderr, f"cost {cost!r}, stderr {r.stderr.strip()!r}")


def main():
    as_root = os.geteuid() == 0
    who = "root" if as_root else f"uid {os.geteuid()}"
    with tempfile.TemporaryDirectory(prefix="moecomp-reliability-") as tmp:
        s = Suite(tmp)
        for name, group in (("outputs", group_outputs), ("temporaries", lambda s: group_temporaries(s, as_root)),
                            ("numerics", group_numerics), ("determinism", group_determinism),
                            ("pipelines", group_pipelines), ("resources", group_resources),
                            ("small print", group_small_print)):
            print(f"== {name} (as {who})", flush=True)
            group(s)
        failures, checks = s.failures, s.checks
    if as_root and not AS_USER:
        # Again as an unprivileged user, where permissions apply (read-only directories).
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            print("FAIL: running as root but setpriv (util-linux) is missing for the unprivileged run")
            failures += 1
        else:
            # The checkout may sit where the user cannot read (root's home): the tool (linked only against
            # system libraries) and this script run from copies in a folder everyone can read.
            with tempfile.TemporaryDirectory(prefix="moecomp-reliability-user-") as shared:
                os.chmod(shared, 0o755)
                tool, script = os.path.join(shared, "moecomp"), os.path.join(shared, "test_reliability.py")
                shutil.copy2(TOOL, tool)
                shutil.copy2(os.path.abspath(__file__), script)
                os.chmod(tool, 0o755)
                os.chmod(script, 0o644)
                r = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
                                    script, tool, "--as-user"], cwd="/tmp")
            checks += 1
            if r.returncode != 0:
                print(f"FAIL: the unprivileged run failed (exit {r.returncode})")
                failures += 1
    print(f"reliability ({who}): {checks - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
