#!/usr/bin/env python3
"""`moecomp train-router` (gating::train_router) against a torch transcription of D2DMoE's router training:
the router R(z) = |W2 relu(W1 z + b1) + b2| (bias optional), MSE mean over tokens and experts (or MoEfication's
BCE-with-logits to the targets over their minibatch maximum), torch.optim.Adam (coupled weight decay), Hugging
Face's LambdaLR schedules (constant, linear, cosine, with warm-up), clip_grad_norm_, batches in order over the
training tokens (the last floor(fraction T) held out), epochs repeating until the step count.

* From the same initial weights (--init) without shuffling, after 200 steps: every weight within 1e-9 relative
  (float64, the Frobenius norm of the difference over that of the weights) and 1e-4 (float32), for every
  objective, schedule and option; the recorded losses within the same tolerance.
* Shuffled training gives the same bytes at 1, 2 and 3 threads.
* The validation MSE is the held-out tokens' MSE of the final router (numpy), the top-1 agreement numpy's.
* Bad input exits 2 with one line: d_h = 0, fewer training tokens than one batch, a learning rate of 0, Y with
  another row count, --init weights of the wrong shape.

Usage: test_train_router_torch.py PATH/TO/moecomp"""
import json
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_common import ToolRunner, require  # noqa: E402

np, torch = require("numpy", "torch")

T, D, N, H = 240, 24, 12, 16


def transcription(z, y, w, *, dtype, steps, batch, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                  schedule="constant", warmup=0, clip=0.0, objective="norm", validation=0.1):
    """D2DMoE's router training, in torch, batches in order. Returns the weights and the per-epoch losses."""
    torch.set_default_dtype(dtype)
    total = z.shape[0]
    held = int(math.floor(validation * total))
    train = total - held
    zt = torch.tensor(z, dtype=dtype)
    yt = torch.tensor(y, dtype=dtype)
    params = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in w.items()}
    order = [params[k] for k in ("w1", "b1", "w2", "b2") if k in params]
    opt = torch.optim.Adam(order, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)

    def factor(s):
        if s < warmup:
            return s / max(1, warmup)
        progress = (s - warmup) / max(1, steps - warmup)
        if schedule == "linear":
            return max(0.0, 1.0 - progress)
        if schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)

    def forward(x):
        hidden = x @ params["w1"].T + (params["b1"] if "b1" in params else 0)
        return torch.relu(hidden) @ params["w2"].T + (params["b2"] if "b2" in params else 0)

    def loss_of(u, target):
        if objective == "norm":
            return torch.nn.functional.mse_loss(u.abs(), target)
        scale = target.max()
        labels = target / scale if scale > 0 else torch.zeros_like(target)
        return torch.nn.functional.binary_cross_entropy_with_logits(u, labels)

    step, losses, sums, entries = 0, [], 0.0, 0
    while step < steps:
        for first in range(0, train, batch):
            if step == steps:
                break
            xb, yb = zt[first:min(train, first + batch)], yt[first:min(train, first + batch)]
            opt.zero_grad()
            loss = loss_of(forward(xb), yb)
            loss.backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(order, clip)
            opt.step()
            sched.step()
            step += 1
            sums += float(loss) * xb.shape[0] * y.shape[1]
            entries += xb.shape[0] * y.shape[1]
            if first + batch >= train or step == steps:
                losses.append(sums / entries)
                sums, entries = 0.0, 0
    return {k: v.detach().numpy() for k, v in params.items()}, losses


class Checker(ToolRunner):
    def train(self, out, z, y, *args):
        r = self.run("train-router", z, y, "-o", out, "--json", *args)
        if r.returncode != 0:
            return None, r.stderr.strip()
        summary = json.loads(r.stdout.strip().splitlines()[-1])
        weights = {k: np.load(os.path.join(out, k + ".npy")) for k in ("w1", "b1", "w2", "b2")
                   if os.path.exists(os.path.join(out, k + ".npy"))}
        return (summary, weights), ""


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(20261128)
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(tool, tmp)
        z = rng.standard_normal((T, D))
        # Targets as the paper's: the output norms of N random ReLU experts on the tokens.
        experts = rng.standard_normal((N, 8, D)) / np.sqrt(D)
        downs = rng.standard_normal((N, D, 8)) / np.sqrt(8)
        y = np.stack([np.linalg.norm(np.maximum(z @ experts[e].T, 0) @ downs[e].T, axis=1) for e in range(N)], axis=1)
        init = {"w1": rng.uniform(-1, 1, (H, D)) / np.sqrt(D), "b1": rng.uniform(-1, 1, H) / np.sqrt(D),
                "w2": rng.uniform(-1, 1, (N, H)) / np.sqrt(H), "b2": rng.uniform(-1, 1, N) / np.sqrt(H)}
        cases = [
            ("norm, constant lr", dict(lr=3e-3), []),
            ("norm with biases", dict(lr=3e-3), ["--bias"]),
            ("norm, cosine with warm-up, weight decay, clipping", dict(lr=5e-3, schedule="cosine", warmup=20,
                                                                       weight_decay=0.01, clip=0.5,
                                                                       betas=(0.9, 0.95)),
             ["--schedule", "cosine", "--warmup", "20", "--weight-decay", "0.01", "--max-grad-norm", "0.5",
              "--beta2", "0.95"]),
            ("norm, linear decay, batch 17 (a partial last batch)", dict(lr=3e-3, schedule="linear", batch=17),
             ["--schedule", "linear", "--batch-size", "17"]),
            ("moefication objective", dict(lr=3e-3, objective="moefication"), ["--objective", "moefication"]),
        ]
        for dtype, tol, name in ((np.float64, 1e-9, "float64"), (np.float32, 1e-4, "float32")):
            zf, yf = z.astype(dtype), y.astype(dtype)
            np.save(c.path("z.npy"), zf)
            np.save(c.path("y.npy"), yf)
            for label, kwargs, args in cases:
                bias = "--bias" in args
                init_dir = c.path(f"init-{name}")
                os.makedirs(init_dir, exist_ok=True)
                for k, v in init.items():
                    np.save(os.path.join(init_dir, k + ".npy"), v.astype(dtype))
                w0 = {k: v.astype(dtype) for k, v in init.items() if bias or k in ("w1", "w2")}
                kw = dict(dtype=torch.float64 if dtype == np.float64 else torch.float32, steps=200, batch=16)
                kw.update(kwargs)
                want, losses = transcription(zf, yf, w0, **kw)
                extra = [] if "batch" in kwargs else ["--batch-size", "16"]
                got, err = c.train(c.path(f"out-{name}-{len(c.path(''))}-{label[:4]}"), c.path("z.npy"), c.path("y.npy"),
                                   "--hidden", str(H), "--init", init_dir, "--no-shuffle", "--steps", "200",
                                   "--lr", repr(kwargs["lr"]), "--threads", "2", *extra, *args)
                if got is None:
                    c.check(f"{name} {label}", False, err)
                    continue
                summary, weights = got
                worst = max(np.linalg.norm(weights[k].astype(np.float64) - want[k]) / np.linalg.norm(want[k])
                            for k in want)
                c.check(f"{name} {label}: weights after 200 steps equal torch's", worst <= tol and
                        set(weights) == set(want), f"worst relative difference {worst:.2e} (tolerance {tol:g})")
                loss_gap = max(abs(a - b) / max(abs(b), 1e-300) for a, b in zip(summary["train_loss"], losses))
                c.check(f"{name} {label}: the recorded training losses are torch's",
                        len(summary["train_loss"]) == len(losses) and loss_gap <= 10 * tol,
                        f"{len(losses)} records, worst relative difference {loss_gap:.2e}")
                # The validation figures from the final weights, by numpy.
                held = int(math.floor(0.1 * T))
                zv, yv = zf[T - held:].astype(np.float64), yf[T - held:].astype(np.float64)
                u = np.maximum(zv @ weights["w1"].T + weights.get("b1", 0), 0) @ weights["w2"].T + weights.get("b2", 0)
                if "moefication" in label:
                    labels = yv / yv.max()
                    loss = np.mean(np.maximum(u, 0) - u * labels + np.log1p(np.exp(-np.abs(u))))
                    scores = 1 / (1 + np.exp(-u))
                else:
                    loss = np.mean((np.abs(u) - yv) ** 2)
                    scores = np.abs(u)
                agree = np.mean(np.argmax(scores, axis=1) == np.argmax(yv, axis=1))
                c.check(f"{name} {label}: validation MSE and top-1 agreement are numpy's",
                        abs(summary["validation_mse"] - loss) <= 1e3 * tol * loss and
                        abs(summary["top1_agreement"] - agree) < 1e-12,
                        f"{summary['validation_mse']:.6g} vs {loss:.6g}, {summary['top1_agreement']} vs {agree}")

        # Shuffled training: the same bytes at any thread count.
        np.save(c.path("z.npy"), z.astype(np.float32))
        np.save(c.path("y.npy"), y.astype(np.float32))
        runs = []
        for threads in (1, 2, 3):
            got, err = c.train(c.path(f"shuffled-{threads}"), c.path("z.npy"), c.path("y.npy"), "--hidden", str(H),
                               "--epochs", "3", "--seed", "5", "--bias", "--threads", str(threads))
            runs.append(None if got is None else b"".join(got[1][k].tobytes() for k in sorted(got[1])))
        c.check("shuffled training: identical weights at 1, 2 and 3 threads", runs[0] is not None and
                runs[0] == runs[1] == runs[2], "bytes compared")

        # Bad input.
        c.expect_directory_error("d_h = 0", ["train-router", c.path("z.npy"), c.path("y.npy"), "--hidden", "0"],
                                 "--hidden")
        c.expect_directory_error("fewer training tokens than one batch", ["train-router", c.path("z.npy"),
                                 c.path("y.npy"), "--batch-size", "300"], "batch", "216 training tokens")
        c.expect_directory_error("a learning rate of 0", ["train-router", c.path("z.npy"), c.path("y.npy"), "--lr", "0"],
                                 "--lr")
        np.save(c.path("y_short.npy"), y[:10].astype(np.float32))
        c.expect_directory_error("Y with another row count", ["train-router", c.path("z.npy"), c.path("y_short.npy")],
                                 "y_short.npy", "240 rows")
        bad_init = c.path("bad-init")
        os.makedirs(bad_init)
        np.save(os.path.join(bad_init, "w1.npy"), np.zeros((3, D), np.float32))
        np.save(os.path.join(bad_init, "w2.npy"), np.zeros((N, H), np.float32))
        c.expect_directory_error("--init of the wrong shape", ["train-router", c.path("z.npy"), c.path("y.npy"),
                                 "--init", bad_init, "--hidden", str(H)], "--init", "w1.npy", f"({H}, {D})")
        print(f"{c.checks - c.failures} passed, {c.failures} failed")
        return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
