#!/usr/bin/env python3
"""The moecomp tool against the hostile and careless cases of issue 32 (docs/cli.md: "Inputs", "Outputs",
"Signals and limits"). One group per kind of break, each with variants of the reproduction:

1. an output that is, holds or lies inside an input (compress -o MODEL_DIR, an ancestor, a link, --report in
   the model directory): exit 2, the input byte for byte as it was;
2. --report is an output like any other: checked before any work (a FIFO, a device, a directory, -o's own path,
   a file inside OUT_DIR), written through a random O_EXCL temporary (a planted link at the old fixed name is
   left alone);
3. a missing --method, -o or value: exit 2, one line (no crash);
4. signals: every catchable fatal signal, at any point before the commit, ends the run by that signal with no
   OUT_DIR (a previous one as it was) and no staging directory; SIGKILL's leftover is removed by the next run,
   a live run's is not;
5. special files as inputs: a FIFO, a character device or a directory where a file is read fails at once
   (exit 2), never blocks, never reads without bound;
6. every family's layout is written as it is read (the fused Mixtral layout included): prune's kept experts
   are the input's bytes, every method's checkpoint reads back;
7. non-finite expert weights and bad calibration files are refused (exit 2, naming the tensor or the file),
   never silently accepted;
8. the option parser: integers are decimal digits, in range, exclusive options refused, options that need
   another refused without it; library errors name the option (DeepSeek's grouped router and --experts).

Run as root it also makes a character device with mknod (the /dev/full-like stand-in of the reproductions).

Usage: test_hostile.py PATH/TO/moecomp"""
import hashlib
import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

TOOL = os.path.abspath(sys.argv[1])
HERE = os.path.dirname(os.path.abspath(__file__))
EMBEDDED = os.path.normpath(os.path.join(HERE, "..", "..", "models", "tiny-moe"))
MARKER = ".moecomp-tmp-"
CODES = {"F32": "<f4", "F64": "<f8", "BF16": "<u2", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1"}


def tree_digest(folder):
    """name -> (kind, sha256 of the bytes or the link's target) for everything under `folder`."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = os.path.join(root, name)
            rel = os.path.relpath(p, folder)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = ("dir", "")
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", hashlib.sha256(f.read()).hexdigest())
    return out


def write_safetensors(path, tensors):
    """tensors: name -> (dtype name, array)."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (dtype, array) in sorted(tensors.items()):
        raw = np.ascontiguousarray(array.astype(CODES[dtype])).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    """name -> (dtype, shape, raw bytes)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


def read_checkpoint(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        out = {}
        for shard in sorted(set(json.load(open(index))["weight_map"].values())):
            out.update(read_safetensors(os.path.join(folder, shard)))
        return out
    return read_safetensors(os.path.join(folder, "model.safetensors"))


# -------------------------------------------------------------------------------------- synthetic families

def bf16(a):
    """float32 values as bfloat16 bit patterns (round to nearest even)."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def synthetic_family(folder, family, rng, experts=8, hidden=16, ffn=8, tokens=64, dtype="BF16", layers=2):
    """A checkpoint of `family`'s layout with `layers` MoE layers (2 for switch, whatever is asked) and its
    calibration.safetensors. Returns the MoE prefixes and the expert tensor names per layer (for the checks)."""
    moe_layers = layers
    os.makedirs(folder)
    E, H, I = experts, hidden, ffn
    t, calib = {}, {}

    def weights(shape, scale=0.3):
        w = rng.standard_normal(shape).astype(np.float32) * scale
        return (dtype, bf16(w)) if dtype == "BF16" else (dtype, w)

    def swiglu(prefix, names, e):
        g, u, d = names
        t[prefix + g.format(expert=e)] = weights((I, H))
        if u:
            t[prefix + u.format(expert=e)] = weights((I, H))
        t[prefix + d.format(expert=e)] = weights((H, I))

    layers = []
    if family in ("mixtral", "olmoe", "qwen2_moe", "deepseek"):
        pre = {"mixtral": "model.layers.{}.block_sparse_moe.", "olmoe": "model.layers.{}.mlp.",
               "qwen2_moe": "model.layers.{}.mlp.", "deepseek": "model.layers.{}.mlp."}[family]
        names = (("experts.{expert}.w1.weight", "experts.{expert}.w3.weight", "experts.{expert}.w2.weight")
                 if family == "mixtral" else
                 ("experts.{expert}.gate_proj.weight", "experts.{expert}.up_proj.weight",
                  "experts.{expert}.down_proj.weight"))
        for layer in range(moe_layers):
            p = pre.format(layer)
            t[p + "gate.weight"] = weights((E, H), 1.0)
            for e in range(E):
                swiglu(p, names, e)
            if family == "qwen2_moe":
                for w, shape in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
                    t[f"{p}shared_expert.{w}.weight"] = weights(shape)
                t[p + "shared_expert_gate.weight"] = weights((1, H))
            if family == "deepseek":
                t[p + "gate.e_score_correction_bias"] = ("F32", rng.standard_normal(E).astype(np.float32) * 0.1)
                for w, shape in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
                    t[f"{p}shared_experts.{w}.weight"] = weights(shape)
            layers.append((p, [[p + n.format(expert=e) for n in names] for e in range(E)]))
            calib[f"layers.{layer}.moe_input"] = ("F32", rng.standard_normal((tokens, H)).astype(np.float32))
        config = {"mixtral": {"model_type": "mixtral", "num_local_experts": E, "intermediate_size": I},
                  "olmoe": {"model_type": "olmoe", "num_experts": E, "intermediate_size": I, "norm_topk_prob": False},
                  "qwen2_moe": {"model_type": "qwen2_moe", "num_experts": E, "moe_intermediate_size": I,
                                "shared_expert_intermediate_size": I, "decoder_sparse_step": 1, "mlp_only_layers": [],
                                "norm_topk_prob": False},
                  "deepseek": {"model_type": "deepseek_v3", "n_routed_experts": E, "moe_intermediate_size": I,
                               "n_shared_experts": 1, "first_k_dense_replace": 0, "moe_layer_freq": 1,
                               "scoring_func": "sigmoid", "topk_method": "noaux_tc", "n_group": 2, "topk_group": 1,
                               "routed_scaling_factor": 2.5, "norm_topk_prob": True}}[family]
        config.update({"num_hidden_layers": moe_layers, "num_experts_per_tok": 2, "hidden_size": H, "hidden_act": "silu"})
    elif family == "mixtral-fused":
        for layer in range(moe_layers):
            p = f"model.layers.{layer}.mlp."
            t[p + "gate.weight"] = weights((E, H), 1.0)
            t[p + "experts.gate_up_proj"] = weights((E, 2 * I, H))
            t[p + "experts.down_proj"] = weights((E, H, I))
            layers.append((p, None))
            calib[f"layers.{layer}.moe_input"] = ("F32", rng.standard_normal((tokens, H)).astype(np.float32))
        config = {"model_type": "mixtral", "num_local_experts": E, "intermediate_size": I, "num_hidden_layers": moe_layers,
                  "num_experts_per_tok": 2, "hidden_size": H, "hidden_act": "silu"}
    elif family == "switch":
        for stack, key, fmt in (("encoder", "layers", "encoder.block.{}.layer.1.mlp."),
                                ("decoder", "decoder.layers", "decoder.block.{}.layer.2.mlp.")):
            for layer in (1,):
                p = fmt.format(layer)
                t[p + "router.classifier.weight"] = weights((E, H), 1.0)
                for e in range(E):
                    swiglu(p, ("experts.expert_{expert}.wi.weight", None, "experts.expert_{expert}.wo.weight"), e)
                layers.append((p, [[p + f"experts.expert_{e}.wi.weight", p + f"experts.expert_{e}.wo.weight"]
                                   for e in range(E)]))
                calib[f"{key}.{layer}.moe_input"] = ("F32", rng.standard_normal((tokens, H)).astype(np.float32))
        config = {"model_type": "switch_transformers", "num_layers": 2, "num_decoder_layers": 2, "num_experts": E,
                  "d_model": H, "d_ff": I, "dense_act_fn": "relu", "encoder_sparse_step": 2, "decoder_sparse_step": 2}
    else:
        raise ValueError(family)
    t["model.embed_tokens.weight"] = ("F32", rng.standard_normal((10, H)).astype(np.float32))
    write_safetensors(os.path.join(folder, "model.safetensors"), t)
    write_safetensors(os.path.join(folder, "calibration.safetensors"), calib)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    return layers


# ---------------------------------------------------------------------------------------------- the suite

class Suite:
    def __init__(self, tmp):
        self.tmp = tmp
        self.checks = self.failures = 0
        self.rng = np.random.default_rng(20261128)

    def path(self, *names):
        return os.path.join(self.tmp, *names)

    def run(self, *args, timeout=120, cwd=None):
        try:
            return subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                                  cwd=cwd, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            return subprocess.CompletedProcess(e.cmd, "timeout", "", f"timed out after {timeout} s")

    def check(self, label, ok, detail=""):
        self.checks += 1
        if not ok:
            self.failures += 1
        print(f"{'ok  ' if ok else 'FAIL'} {label}{': ' + detail if detail else ''}", flush=True)

    def leftovers(self, folder=None):
        folder = folder or self.tmp
        return [f for f in os.listdir(folder) if MARKER in f or ".moecomp-old-" in f]

    @staticmethod
    def one_error_line(r, status=2, *fragments):
        if r.returncode == "timeout":
            return False
        lines = r.stderr.strip().splitlines()
        return (r.returncode == status and len(lines) == 1 and lines[0].startswith("moecomp: error:")
                and all(f in lines[0] for f in fragments))

    def refused(self, label, args, *fragments, guard=(), absent=(), status=2, timeout=60, cwd=None):
        """Exit `status` with one error line holding every fragment; everything under `guard` (files or folders)
        as it was, nothing in `absent` created, no temporary left."""
        before = {g: tree_digest(g) if os.path.isdir(g) else open(g, "rb").read() for g in guard}
        r = self.run(*args, timeout=timeout, cwd=cwd)
        ok = self.one_error_line(r, status, *fragments)
        after_ok = all((tree_digest(g) if os.path.isdir(g) else open(g, "rb").read()) == b for g, b in before.items())
        ok = ok and after_ok and not any(os.path.lexists(p) for p in absent) and not self.leftovers()
        self.check(label, ok, (r.stderr.strip() or f"exit {r.returncode}") + ("" if after_ok else "; AN INPUT CHANGED"))
        return r

    def model_copy(self, name):
        p = self.path(name)
        if os.path.exists(p):
            shutil.rmtree(p)
        shutil.copytree(EMBEDDED, p)
        return p


# ---------------------------------------------------------------------------------------------- 1. inputs

def outputs_versus_inputs(s):
    m = s.model_copy("m")
    base = ["compress", "--method", "prune", "--experts", "4", "--quiet"]
    s.refused("compress -o MODEL_DIR refuses, the model intact", [*base[:1], m, "-o", m, *base[1:]], "-o", "input",
              guard=[m])
    s.refused("compress -o MODEL_DIR/ (trailing slash) refuses", ["compress", m, "-o", m + "/", *base[1:]], "-o",
              guard=[m])
    s.refused("compress -o an ancestor of MODEL_DIR refuses", ["compress", m, "-o", s.tmp, *base[1:]], "-o", "holds",
              guard=[m])
    s.refused("compress -o inside MODEL_DIR refuses", ["compress", m, "-o", os.path.join(m, "out"), *base[1:]], "-o",
              "inside", guard=[m], absent=[os.path.join(m, "out")])
    link = s.path("mlink")
    os.symlink(m, link)
    s.refused("compress -o a link to MODEL_DIR refuses", ["compress", m, "-o", link, *base[1:]], "-o", guard=[m])
    s.refused("compress MODEL_DIR by a link, -o the real directory, refuses", ["compress", link, "-o", m, *base[1:]],
              "-o", guard=[m])
    os.remove(link)
    s.refused("compress -o MODEL_DIR spelt with .. refuses",
              ["compress", m, "-o", os.path.join(m, "..", "m"), *base[1:]], "-o", guard=[m])
    s.refused("compress -o '.' refuses", ["compress", m, "-o", ".", *base[1:]], "-o", guard=[m], cwd=s.tmp)
    # The embedded model is an input too when MODEL_DIR is left out.
    inside = os.path.join(EMBEDDED, "out")
    s.refused("compress (embedded model) -o inside it refuses", ["compress", "-o", inside, *base[1:]], "-o", "embedded",
              guard=[EMBEDDED], absent=[inside])
    # --calibration is an input: OUT_DIR may not hold it.
    d = s.path("d")
    os.makedirs(d)
    shutil.copy(os.path.join(m, "calibration.safetensors"), os.path.join(d, "c.safetensors"))
    s.refused("compress -o a directory holding --calibration refuses",
              ["compress", m, "-o", d, "--calibration", os.path.join(d, "c.safetensors"), *base[1:]], "--calibration",
              guard=[d, m])
    s.refused("--report inside MODEL_DIR refuses", ["compress", m, "-o", s.path("o"), "--report",
                                                    os.path.join(m, "config.json"), *base[1:]], "--report", "inside",
              guard=[m], absent=[s.path("o")])
    layouts = os.path.join(s.path("lay"), "x")
    os.makedirs(layouts)
    shutil.copy(os.path.join(HERE, "..", "..", "layouts", "mixtral.json"), layouts)
    s.refused("compress -o a directory holding --layouts DIR refuses",
              ["compress", m, "-o", s.path("lay"), "--layouts", layouts, *base[1:]], "--layouts", guard=[s.path("lay")])
    shutil.rmtree(s.path("lay"))
    # A file output may not replace a file input either.
    x = s.path("x.npy")
    np.save(x, s.rng.standard_normal((5, 3)))
    s.refused("pdist -o its own input refuses", ["pdist", x, "-o", x], "-o", "input", guard=[x])
    shutil.rmtree(d)


# ---------------------------------------------------------------------------------------------- 2. --report

def report_option(s):
    m = s.model_copy("m")
    out = s.path("o")
    base = ["compress", m, "-o", out, "--method", "prune", "--experts", "4", "--quiet"]
    victim = s.path("victim")
    with open(victim, "w") as f:
        f.write("keep\n")
    planted = s.path("r.json.moecomp-tmp")
    os.symlink(victim, planted)
    r = s.run(*base, "--report", s.path("r.json"))
    ok = (r.returncode == 0 and open(victim).read() == "keep\n" and os.path.islink(planted)
          and json.load(open(s.path("r.json")))["method"] == "prune")
    s.check("--report beside a planted link at the old fixed temporary name: the victim untouched", ok, r.stderr.strip())
    os.remove(planted)
    shutil.rmtree(out, ignore_errors=True)
    fifo = s.path("fifo")
    os.mkfifo(fifo)
    s.refused("--report a FIFO refuses at once, before any work", [*base, "--report", fifo], "--report", "FIFO",
              absent=[out], timeout=30)
    s.check("--report FIFO: still a FIFO", stat.S_ISFIFO(os.lstat(fifo).st_mode))
    if os.geteuid() == 0:
        device = s.path("fakefull")
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        s.refused("--report a character device refuses", [*base, "--report", device], "--report", "character device",
                  absent=[out])
        s.check("--report device: still a character device", stat.S_ISCHR(os.lstat(device).st_mode))
        os.remove(device)
    s.refused("--report a directory refuses before any work", [*base, "--report", s.tmp], "--report", "directory",
              absent=[out])
    s.refused("--report -o's own path refuses", [*base, "--report", out], "--report", absent=[out])
    os.makedirs(out)
    with open(os.path.join(out, "keep"), "w") as f:
        f.write("old")
    s.refused("--report inside the OUT_DIR that is replaced refuses", [*base, "--report", os.path.join(out, "r.json")],
              "--report", "inside the output directory", guard=[out])
    s.refused("--report and --json's file? --report with an empty name refuses", [*base, "--report", ""], "--report")
    shutil.rmtree(out)
    os.remove(fifo)


# ---------------------------------------------------------------------------------------------- 3. crashes

def missing_arguments(s):
    out = s.path("o")
    for label, args, fragment in [
            ("no --method and no arguments", ["compress"], "--method"),
            ("no --method", ["compress", "-o", out], "--method"),
            ("--method without a value", ["compress", "-o", out, "--method"], "--method"),
            ("--method= empty", ["compress", "-o", out, "--method="], "--method"),
            ("no -o", ["compress", "--method", "prune"], "-o"),
            ("-o empty", ["compress", "--method", "prune", "-o", ""], "-o")]:
        s.refused(f"compress with {label}: exit 2, one line", args, fragment, absent=[out])


# ---------------------------------------------------------------------------------------------- 4. signals

def start_compress(s, out, *extra):
    m = s.path("m")
    return subprocess.Popen([TOOL, "compress", m, "-o", out, "--method", "hc-smoe", "--merge", "fix-dom",
                             "--progress", "--threads", "1", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)


def wait_for_line(p, fragment, timeout=120):
    deadline = time.time() + timeout
    seen = []
    while time.time() < deadline:
        line = p.stderr.readline()
        if not line:
            return False, seen
        seen.append(line.strip())
        if fragment in line:
            return True, seen
    return False, seen


def signals(s):
    s.model_copy("m")
    out = s.path("sig-out")
    fatal = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGALRM, signal.SIGPIPE, signal.SIGXCPU, signal.SIGVTALRM, signal.SIGPROF, signal.SIGSEGV,
             signal.SIGABRT]
    for k, sig in enumerate(fatal):
        previous = k % 2 == 1  # every other case with an OUT_DIR of an earlier run, to be left as it was
        if previous:
            os.makedirs(out)
            with open(os.path.join(out, "old"), "w") as f:
                f.write("earlier run")
        p = start_compress(s, out)
        reached, seen = wait_for_line(p, "layer 2 of 4")
        p.send_signal(sig)
        rest = p.stderr.read()
        p.wait()
        errors = [l for l in rest.splitlines() if l.startswith("moecomp: error:")]
        kept = (open(os.path.join(out, "old")).read() == "earlier run" and os.listdir(out) == ["old"]) if previous \
            else not os.path.exists(out)
        ok = reached and p.returncode == -sig and kept and not s.leftovers() and len(errors) == 1
        s.check(f"{signal.Signals(sig).name} during layer 2: ends by the signal, "
                f"{'the earlier OUT_DIR as it was' if previous else 'no OUT_DIR'}, no staging directory", ok,
                f"exit {p.returncode}, {errors}, leftovers {s.leftovers()}")
        shutil.rmtree(out, ignore_errors=True)

    # Late signals: at the last progress line (the other tensors, the config, the report, the commit) the run
    # ends by the signal; OUT_DIR is then absent or (the signal after the commit) complete; never exit 0.
    # The run is stopped (SIGSTOP) when it prints its last progress line; if it is still alive then (state T),
    # the signal is sent and the run continued: it must end by the signal, never exit 0. A run that finished
    # before it could be stopped proves nothing about the signal and only its outputs are checked.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        p = start_compress(s, out)
        reached, _ = wait_for_line(p, "writing the other tensors")
        stopped = False
        try:
            p.send_signal(signal.SIGSTOP)
            for _ in range(200):
                with open(f"/proc/{p.pid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                if state in ("T", "t", "Z", "X"):
                    break
                time.sleep(0.005)
            stopped = state in ("T", "t")
        except (OSError, ProcessLookupError):
            pass
        if stopped:
            p.send_signal(sig)
            p.send_signal(signal.SIGCONT)
        p.stderr.read()
        p.wait()
        complete = os.path.exists(os.path.join(out, "compression_report.json")) and os.path.exists(
            os.path.join(out, "config.json"))
        ok = reached and (p.returncode == -sig if stopped else p.returncode == 0) and \
            (not os.path.exists(out) or complete) and not s.leftovers()
        s.check(f"{signal.Signals(sig).name} at the last step: never exit 0, no partial OUT_DIR, no staging", ok,
                f"{'signalled while stopped' if stopped else 'finished before it could be stopped'}, exit "
                f"{p.returncode}, OUT_DIR {'complete' if complete else 'absent' if not os.path.exists(out) else 'PARTIAL'}")
        shutil.rmtree(out, ignore_errors=True)

    # SIGPIPE from a closed stderr pipe (the reproduction: --progress 2>&1 | head -c 64).
    r = subprocess.run(f"'{TOOL}' compress '{s.path('m')}' -o '{out}' --method hc-smoe --progress 2>&1 | head -c 64 "
                       ">/dev/null; echo ${PIPESTATUS[0]}", shell=True, executable="/bin/bash",
                       capture_output=True, text=True, timeout=300)
    s.check("SIGPIPE (progress into a closed pipe): no OUT_DIR, no staging directory",
            r.stdout.strip() == str(128 + signal.SIGPIPE) and not os.path.exists(out) and not s.leftovers(),
            f"exit {r.stdout.strip()}, leftovers {s.leftovers()} {r.stderr.strip()}")

    # SIGKILL cannot be handled: its staging directory stays, and the next run into the same OUT_DIR removes it.
    p = start_compress(s, out)
    reached, _ = wait_for_line(p, "layer 2 of 4")
    p.kill()
    p.wait()
    stale = s.leftovers()
    # A live run's staging directory is not taken for stale: run A stopped (SIGSTOP) while run B completes.
    a = start_compress(s, out)
    reached_a, _ = wait_for_line(a, "layer 2 of 4")
    a.send_signal(signal.SIGSTOP)
    live = [f for f in s.leftovers() if f not in stale]
    r = s.run("compress", s.path("m"), "-o", out, "--method", "prune", "--experts", "4", "--quiet", timeout=300)
    survivors = s.leftovers()
    ok = (reached and reached_a and len(stale) == 1 and len(live) == 1 and r.returncode == 0
          and stale[0] not in survivors and live[0] in survivors)
    s.check("SIGKILL's staging directory is removed by the next run; a live run's is kept", ok,
            f"stale {stale}, live {live}, after {survivors}, exit {r.returncode}: {r.stderr.strip()}")
    a.send_signal(signal.SIGTERM)
    a.send_signal(signal.SIGCONT)
    a.stderr.read()
    a.wait()
    s.check("the stopped run, ended by SIGTERM, removes its staging directory and leaves B's OUT_DIR",
            a.returncode == -signal.SIGTERM and not s.leftovers() and
            json.load(open(os.path.join(out, "compression_report.json")))["method"] == "prune",
            f"exit {a.returncode}, leftovers {s.leftovers()}")
    shutil.rmtree(out, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- 5. special files

def special_inputs(s):
    out = s.path("o")
    fifo_model = s.model_copy("fifo-model")
    os.remove(os.path.join(fifo_model, "model.safetensors"))
    os.mkfifo(os.path.join(fifo_model, "model.safetensors"))
    s.refused("a FIFO as model.safetensors: exit 2 at once", ["compress", fifo_model, "-o", out, "--method", "prune"],
              "model.safetensors", absent=[out], timeout=30)
    s.refused("inspect: a FIFO as model.safetensors: exit 2 at once", ["inspect", fifo_model], "model.safetensors",
              timeout=30)
    index_model = s.model_copy("index-model")
    os.mkfifo(os.path.join(index_model, "model.safetensors.index.json"))
    s.refused("a FIFO as the shard index: exit 2 at once", ["compress", index_model, "-o", out, "--method", "prune"],
              "index", absent=[out], timeout=30)
    config_model = s.model_copy("config-model")
    os.remove(os.path.join(config_model, "config.json"))
    os.mkfifo(os.path.join(config_model, "config.json"))
    s.refused("inspect: a FIFO as config.json: exit 2 at once", ["inspect", config_model], "config.json", timeout=30)
    os.remove(os.path.join(config_model, "config.json"))
    os.symlink("/dev/zero", os.path.join(config_model, "config.json"))
    s.refused("inspect: config.json a link to /dev/zero: exit 2 at once", ["inspect", config_model], "config.json",
              timeout=30)
    base = s.path("base.npy")
    np.save(base, np.zeros((4, 3), np.float32))
    res_fifo = s.path("res.fifo")
    os.mkfifo(res_fifo)
    s.refused("residual-decode: a FIFO as RES: exit 2 at once", ["residual-decode", base, res_fifo, "-o", s.path("w.npy")],
              "res.fifo", absent=[s.path("w.npy")], timeout=30)
    s.refused("residual-decode: /dev/zero as RES: exit 2 at once, no unbounded read",
              ["residual-decode", base, "/dev/zero", "-o", s.path("w.npy")], "/dev/zero", absent=[s.path("w.npy")],
              timeout=30)
    os.makedirs(s.path("adir"))
    s.refused("residual-decode: a directory as RES: exit 2", ["residual-decode", base, s.path("adir"), "-o",
                                                             s.path("w.npy")], "directory", absent=[s.path("w.npy")],
              timeout=30)
    os.rmdir(s.path("adir"))
    s.refused("pdist: a FIFO as X.npy: exit 2 at once", ["pdist", res_fifo], "res.fifo", timeout=30)
    for p in (fifo_model, index_model, config_model):
        shutil.rmtree(p)
    os.remove(res_fifo)


# ---------------------------------------------------------------------------------------------- 6. layouts

def every_family(s):
    for family in ("mixtral", "mixtral-fused", "olmoe", "qwen2_moe", "deepseek", "switch"):
        folder = s.path(f"fam-{family}")
        layers = synthetic_family(folder, family, s.rng)
        original = read_checkpoint(folder)
        experts_after = 4
        for method, extra in (("prune", ["--experts", str(experts_after)]),
                              ("hc-smoe", ["--experts", str(experts_after)]),
                              ("cka-merge", ["--experts", str(experts_after)]),
                              ("resmoe", ["--restore-dense"])):
            out = s.path(f"fam-{family}-{method}")
            r = s.run("compress", folder, "-o", out, "--method", method, "--quiet", "--json", *extra, timeout=300)
            ok = r.returncode == 0
            detail = r.stderr.strip()
            if ok:
                written = read_checkpoint(out)
                report = json.loads(r.stdout.strip().splitlines()[-1])
                # resmoe's checkpoint holds a base and residuals; its dense/ is the family's own layout.
                back = s.run("inspect", os.path.join(out, "dense") if method == "resmoe" else out, "--json")
                ok = back.returncode == 0
                detail = back.stderr.strip() or detail
                if ok and method == "prune":
                    # The kept experts' tensors are the input's bytes, in the layout they were read in.
                    for (prefix, names), layer in zip(layers, report["layers"]):
                        kept = layer["kept"]
                        if names is None:  # fused: E x 2I x H and E x H x I
                            for key in ("experts.gate_up_proj", "experts.down_proj"):
                                dt, shape, raw = original[prefix + key]
                                per = len(raw) // shape[0]
                                want = b"".join(raw[e * per:(e + 1) * per] for e in kept)
                                got = written[prefix + key]
                                ok = ok and got[2] == want and got[1] == [len(kept)] + shape[1:]
                        else:
                            for slot, e in enumerate(kept):
                                for n_in, n_out in zip(names[e], names[slot]):
                                    ok = ok and written[n_out][2] == original[n_in][2]
                    detail = f"kept experts {'are' if ok else 'are NOT'} the input's bytes"
                if ok and method == "hc-smoe":  # stored distinct (issue 34): inspect reads the form as written
                    info = json.loads(back.stdout)
                    ok = (info.get("expert_storage") == "distinct" and
                          info.get("stored_experts") == [l["stored_experts"] for l in report["layers"]] and
                          info.get("expert_maps") == [v for l in report["layers"] for v in l["id_map"]])
                    detail = f"stored distinct: {info.get('stored_experts')} experts per layer, id maps as reported"
            s.check(f"{family}: compress --method {method} writes a checkpoint that reads back", ok, detail)
            shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(folder)


# ---------------------------------------------------------------------------------------------- 7. numbers

def non_finite_and_calibration(s):
    out = s.path("o")
    for family, bad in (("mixtral", "nan"), ("mixtral-fused", "inf")):
        folder = s.path(f"nan-{family}")
        synthetic_family(folder, family, s.rng, dtype="F32")
        t = read_safetensors(os.path.join(folder, "model.safetensors"))
        name = ("model.layers.1.block_sparse_moe.experts.3.w2.weight" if family == "mixtral"
                else "model.layers.1.mlp.experts.down_proj")
        tensors = {k: (dt, np.frombuffer(raw, CODES[dt]).reshape(shape).copy()) for k, (dt, shape, raw) in t.items()}
        tensors[name][1].reshape(-1)[5] = np.nan if bad == "nan" else np.inf
        write_safetensors(os.path.join(folder, "model.safetensors"), tensors)
        for method, extra in (("prune", ["--criterion", "frequency"]), ("prune", ["--criterion", "reap"]),
                              ("hc-smoe", ["--features", "router-logits", "--merge", "average"]),
                              ("hc-smoe", ["--features", "weights"]), ("cka-merge", []), ("resmoe", [])):
            s.refused(f"{family}: a {bad} expert weight: compress --method {method} {' '.join(extra)} refuses, "
                      "naming the tensor", ["compress", folder, "-o", out, "--method", method, "--quiet", *extra],
                      name, bad, absent=[out], guard=[folder])
        shutil.rmtree(folder)

    m = s.model_copy("cal")
    cal = os.path.join(m, "calibration.safetensors")
    calibration = read_safetensors(cal)
    os.remove(cal)
    os.makedirs(cal)
    s.refused("a directory as MODEL_DIR/calibration.safetensors refuses (not 'no calibration')",
              ["compress", m, "-o", out, "--method", "hc-smoe"], "calibration.safetensors", "directory", absent=[out])
    os.rmdir(cal)
    os.mkfifo(cal)
    s.refused("a FIFO as MODEL_DIR/calibration.safetensors refuses at once",
              ["compress", m, "-o", out, "--method", "hc-smoe"], "calibration.safetensors", "FIFO", absent=[out],
              timeout=30)
    os.remove(cal)
    os.symlink("/dev/zero", cal)
    s.refused("calibration.safetensors a link to /dev/zero refuses at once",
              ["compress", m, "-o", out, "--method", "hc-smoe"], "calibration.safetensors", absent=[out], timeout=30)
    os.remove(cal)
    s.refused("--calibration '' refuses", ["compress", m, "-o", out, "--method", "hc-smoe", "--calibration", ""],
              "--calibration", absent=[out])
    ints = {k: ("I32", np.frombuffer(raw, "<f4").reshape(shape).astype(np.int32)) for k, (_, shape, raw) in
            calibration.items()}
    write_safetensors(cal, ints)
    s.refused("I32 calibration tokens refuse, naming the dtype", ["compress", m, "-o", out, "--method", "prune"],
              "I32", absent=[out])
    floats = {k: ("F32", np.frombuffer(raw, "<f4").reshape(shape).copy()) for k, (_, shape, raw) in calibration.items()}
    floats["layers.2.moe_input"][1][3, 4] = np.nan
    write_safetensors(cal, floats)
    s.refused("a NaN calibration token refuses, naming the tensor", ["compress", m, "-o", out, "--method", "prune"],
              "layers.2.moe_input", absent=[out])
    shutil.rmtree(m)


# ---------------------------------------------------------------------------------------------- 8. options

def options(s):
    out = s.path("o")
    ids = s.save_ids = s.path("ids.npy")
    np.save(ids, np.array([[0, 1], [2, 3]], np.int64))
    s.refused("dispatch --experts 2^62: exit 2 naming --experts", ["dispatch", ids, "--experts", "4611686018427387904",
                                                                    "-o", out], "--experts", absent=[out])
    s.refused("dispatch --block-size 2^40: exit 2 naming --block-size",
              ["dispatch", ids, "--experts", "4", "--block-size", "1099511627776", "-o", out], "--block-size",
              absent=[out])
    s.refused("dispatch --experts 2^31 - 1 with --block-size 2^30: exit 2, the memory named",
              ["dispatch", ids, "--experts", "2147483647", "--block-size", "1073741824", "-o", out], "memory",
              absent=[out])
    for value in ("+4", " 4", "4 ", "0x4", "4.0", "4e0", "--4", ""):
        s.refused(f"dispatch --experts '{value}': decimal digits only", ["dispatch", ids, "--experts", value, "-o", out],
                  "--experts", absent=[out])
    m = s.path("m")
    if not os.path.exists(m):
        s.model_copy("m")
    s.refused("compress --seed -1 refuses (no wrap)", ["compress", m, "-o", out, "--method", "hc-smoe", "--seed", "-1"],
              "--seed", absent=[out])
    s.refused("compress --experts +4 refuses", ["compress", m, "-o", out, "--method", "prune", "--experts", "+4"],
              "--experts", absent=[out])
    logits = s.path("l.npy")
    np.save(logits, s.rng.standard_normal((6, 8)))
    s.refused("gate --top-k with --tau refuses", ["gate", logits, "--top-k", "2", "--tau", "0.5", "-o", s.path("w.npy")],
              "--top-k", absent=[s.path("w.npy")])
    s.refused("gate --n-group without a DeepSeek rule refuses", ["gate", logits, "--top-k", "2", "--n-group", "2",
                                                                  "-o", s.path("w.npy")], "--n-group")
    s.refused("gate --max-k with --top-k refuses", ["gate", logits, "--top-k", "2", "--max-k", "3", "-o", s.path("w.npy")],
              "--max-k")
    w = s.path("w.npy")
    np.save(w, s.rng.standard_normal((6, 8)))
    s.refused("prune --column-block without --scope column-block refuses",
              ["prune", w, "--keep", "0.5", "--column-block", "4", "-o", s.path("p.npy")], "--column-block",
              absent=[s.path("p.npy")])
    # -o with a trailing slash names the directory.
    r = s.run("dispatch", ids, "--experts", "4", "-o", out + "/")
    s.check("dispatch -o OUT/ (trailing slash) writes OUT", r.returncode == 0 and os.path.exists(os.path.join(out, "counts.npy")),
            r.stderr.strip())
    shutil.rmtree(out, ignore_errors=True)
    r = s.run("compress", m, "-o", out + "/", "--method", "prune", "--experts", "4", "--quiet")
    s.check("compress -o OUT/ (trailing slash) writes OUT", r.returncode == 0 and os.path.isdir(out), r.stderr.strip())
    shutil.rmtree(out, ignore_errors=True)

    # merge --method frequency: a group no token routes to would become all zeros.
    E, I, H = 4, 3, 5
    files = {}
    for name, shape in (("w1", (E, I, H)), ("w3", (E, I, H)), ("w2", (E, H, I))):
        files[name] = s.path(f"{name}.npy")
        np.save(files[name], s.rng.standard_normal(shape))
    groups, freq = s.path("g.npy"), s.path("f.npy")
    np.save(groups, np.array([0, 0, 1, 1], np.int64))
    np.save(freq, np.array([0.5, 0.5, 0.0, 0.0]))
    s.refused("merge --method frequency with a group of total frequency 0 refuses, naming the group",
              ["merge", "--w1", files["w1"], "--w2", files["w2"], "--w3", files["w3"], "--groups", groups, "--method",
               "frequency", "--frequencies", freq, "-o", out], "--frequencies", "group 1", absent=[out])

    # DeepSeek-V3 (n_group 2, topk_group 1, top-2 of 8): the default --experts is one the router can route; an
    # explicit count it cannot is refused before any work, naming --experts.
    ds = s.path("ds")
    synthetic_family(ds, "deepseek", s.rng)
    for method in ("cka-merge", "prune"):
        r = s.run("compress", ds, "-o", out, "--method", method, "--quiet", "--json")
        experts = json.loads(r.stdout.strip().splitlines()[-1])["experts_after"] if r.returncode == 0 else None
        s.check(f"deepseek_v3 (n_group 2): compress --method {method} with the default --experts routes", r.returncode == 0
                and experts is not None and experts % 2 == 0 and experts // 2 >= 2, f"{r.stderr.strip()} experts {experts}")
        shutil.rmtree(out, ignore_errors=True)
        s.refused(f"deepseek_v3 (n_group 2): compress --method {method} --experts 3 refuses naming --experts",
                  ["compress", ds, "-o", out, "--method", method, "--experts", "3"], "--experts", "n_group 2",
                  absent=[out])
    shutil.rmtree(ds)

    # sinkhorn --method stabilized failing at a tiny reg: the hint does not recommend stabilized.
    a, b, M = s.path("a.npy"), s.path("b.npy"), s.path("M.npy")
    np.save(a, np.full(8, 1 / 8))
    np.save(b, np.full(8, 1 / 8))
    np.save(M, s.rng.random((8, 8)) * 100)
    r = s.run("sinkhorn", a, b, M, "--reg", "1e-6", "--method", "stabilized", "-o", s.path("P.npy"))
    line = r.stderr.strip()
    s.check("sinkhorn --method stabilized failing: exit 3, the hint names --method log and not stabilized",
            r.returncode == 3 and "--method log" in line and "stabilized)" not in line and "(or stabilized" not in line,
            line)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        s = Suite(tmp)
        s.model_copy("m")
        for group in (outputs_versus_inputs, report_option, missing_arguments, special_inputs, every_family,
                      non_finite_and_calibration, options, signals):
            try:
                group(s)
            except Exception as e:  # a crash of the harness counts as a failure and the rest still runs
                s.check(f"{group.__name__} ran to its end", False, f"{type(e).__name__}: {e}")
        print(f"{s.checks - s.failures} passed, {s.failures} failed")
        return 1 if s.failures else 0


if __name__ == "__main__":
    sys.exit(main())
