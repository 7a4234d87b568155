#!/usr/bin/env python
"""Benchmarks for the mgpu book: training-loop overhead, allreduce, scaling and data loading.

    python bench/run.py            # the full run (about 10-15 minutes on 2 CPU cores)
    python bench/run.py --quick    # smaller subsets and fewer repeats (a few minutes)
    python bench/run.py --docs-times docs-times.json   # also record the book's build times

Writes ``results.json`` and PNG bar charts next to this file (or into ``--out-dir``) and prints a
summary table. Every figure is the median of repeats; every ratio compares two measurements
taken in the same run, interleaved (A, B, A, B, ...) so that a change in the machine's load hits
both. CPU "devices" share the machine's cores: the figures say how the code behaves on this
machine, not how GPUs would (the GPU figures of the original tutorials are recorded separately,
as literature values).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import mgpu
from mgpu import mx

HERE = Path(__file__).resolve().parent
nd, gluon, autograd = mx.nd, mx.gluon, mx.autograd

#: Sizes of each part, quick and full.
SETTINGS = {
    "quick": dict(overhead_subset=2048, overhead_epochs=1, overhead_reps=2, lenet_subset=2048,
                  resnet_subset=512, scaling_reps=1, allreduce_rounds=4, data_reps=2),
    "full": dict(overhead_subset=2560, overhead_epochs=2, overhead_reps=8, lenet_subset=5120,
                 resnet_subset=1536, scaling_reps=3, allreduce_rounds=15, data_reps=5),
}
BATCH = 256
LR = 0.1
WARMUP_SUBSET = 512  # two batches: builds the hybridized graph and fills the memory pools
TEST_SUBSET = 512
RESNET_WIDTH = 16
TEMP_COPY = 4  # MXNET_CPU_TEMP_COPY for the scaling_temp_copy part: MXNet's own default
PARTS = ["data", "overhead", "scaling", "scaling_temp_copy", "allreduce"]

#: What the original tutorials measured on GPUs (d2l 2019 notebooks): literature, not measured here.
GPU_REFERENCE = {
    "source": "d2l 2019 notebooks (the same Gluon code as the seeds): literature values, "
              "measured on GPUs by the original tutorials, not by this script",
    "resnet18_fashion_mnist": [
        {"gpus": 1, "batch_size": 256, "lr": 0.1, "seconds_per_epoch": 13.2, "test_acc": 0.93},
        {"gpus": 2, "batch_size": 512, "lr": 0.2, "seconds_per_epoch": 7.3, "test_acc": 0.92},
    ],
    "lenet_from_scratch_fashion_mnist": [
        {"gpus": 1, "batch_size": 256, "lr": 0.2, "seconds_per_epoch": 1.8, "test_acc": 0.80},
        {"gpus": 2, "batch_size": 256, "lr": 0.2, "seconds_per_epoch": 2.5, "test_acc": 0.84},
    ],
    "note": "ResNet-18 there is the standard width (64); here it runs at width 16 on CPU devices.",
}


def median(xs):
    return float(statistics.median(xs))


def figure(samples, unit: str, **extra) -> dict:
    """A measured figure: its median, unit and every sample."""
    return {"median": median(samples), "unit": unit, "samples": [float(s) for s in samples],
            **extra}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cpus(k: int) -> list:
    return [mx.cpu(i) for i in range(k)]


# --------------------------------------------------------------------------------------------
# a. Overhead of mgpu.train against a plain Gluon loop
# --------------------------------------------------------------------------------------------


def _fresh_lenet(devices, seed=0):
    net = mgpu.LeNet()
    mx.random.seed(seed)
    net.initialize(mx.init.Xavier(), ctx=devices)
    net.hybridize()
    return net


def plain_gluon_epoch(net, trainer, images, labels, devices, metrics=False, seed=0) -> float:
    """One epoch of the minimal hand-written loop; returns images per second.

    ``metrics=True`` adds what mgpu.train does per batch besides training (summing the loss and
    counting correct predictions on every device), to measure what that costs.
    """
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    loss_sum = [nd.zeros((1,), ctx=d) for d in devices]
    correct = [nd.zeros((1,), ctx=d) for d in devices]
    seen = 0
    nd.waitall()
    start = time.perf_counter()
    for X, y in mgpu.iter_batches(images, labels, BATCH, shuffle=True, seed=seed):
        Xs = gluon.utils.split_and_load(X, devices, even_split=False)
        ys = gluon.utils.split_and_load(y, devices, even_split=False)
        with autograd.record():
            outs = [net(a) for a in Xs]
            losses = [loss_fn(o, b) for o, b in zip(outs, ys)]
        for lo in losses:
            lo.backward()
        trainer.step(len(y))
        if metrics:
            for i, (lo, o, b) in enumerate(zip(losses, outs, ys)):
                loss_sum[i] += lo.sum()
                correct[i] += (o.argmax(axis=1) == b).sum()
        seen += len(y)
    nd.waitall()
    return seen / (time.perf_counter() - start)


def bench_overhead(cfg) -> dict:
    devices = cpus(2)
    epochs = cfg["overhead_epochs"]
    data = mgpu.load_fashion_mnist(subset=cfg["overhead_subset"], test_subset=TEST_SUBSET)
    warm = mgpu.load_fashion_mnist(subset=WARMUP_SUBSET, test_subset=TEST_SUBSET, seed=1)

    def via_train(reduction):
        def run(seed):
            net = mgpu.LeNet()
            kw = dict(batch_size=BATCH, lr=LR, verbose=False, progress=False, seed=seed,
                      **reduction)
            mgpu.train(net, warm, devices, num_epochs=1, **kw)
            return statistics.mean(
                mgpu.train(net, data, devices, num_epochs=epochs, **kw).images_per_sec)
        return run

    def via_plain(metrics):
        def run(seed):
            net = _fresh_lenet(devices, seed)
            trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": LR})
            plain_gluon_epoch(net, trainer, warm.train_images, warm.train_labels, devices,
                              metrics, seed)
            return statistics.mean(
                plain_gluon_epoch(net, trainer, data.train_images, data.train_labels, devices,
                                  metrics, seed + e) for e in range(epochs))
        return run

    configs = {
        "mgpu.train (allreduce=True)": via_train(dict(allreduce=True)),
        "mgpu.train (kvstore='device')": via_train(dict(allreduce=False, kvstore="device")),
        "plain Gluon loop (Trainer default kvstore='device')": via_plain(False),
        "plain Gluon loop + mgpu.train's per-batch metrics": via_plain(True),
    }
    samples = {name: [] for name in configs}
    for rep in range(cfg["overhead_reps"]):
        for name, run in configs.items():
            samples[name].append(run(rep))
            log(f"  overhead rep {rep + 1}: {name}: {samples[name][-1]:,.0f} images/s")
    plain = "plain Gluon loop (Trainer default kvstore='device')"

    def ratio(name):
        per_rep = [a / b for a, b in zip(samples[name], samples[plain])]
        return figure(per_rep, "ratio (per repeat, to the plain loop in the same repeat)")

    return {
        "setup": {"model": "Gluon LeNet (mgpu.LeNet)", "devices": [str(d) for d in devices],
                  "batch_size": BATCH, "lr": LR, "train_images": len(data.train_labels),
                  "epochs_measured_per_repeat": epochs,
                  "per_repeat_figure": "mean images/s of the measured epochs",
                  "warm_up": f"one epoch over {WARMUP_SUBSET} other images before each run",
                  "what": "training throughput only: mgpu.train's test evaluation after the "
                          "epoch is not in History.images_per_sec"},
        "images_per_sec": {n: figure(s, "images/s") for n, s in samples.items()},
        "ratio_train_mgpu_to_plain": ratio("mgpu.train (allreduce=True)"),
        "ratio_train_device_to_plain": ratio("mgpu.train (kvstore='device')"),
        "ratio_plain_with_metrics_to_plain": ratio(
            "plain Gluon loop + mgpu.train's per-batch metrics"),
    }


# --------------------------------------------------------------------------------------------
# b. Allreduce of ResNet-18-sized gradients
# --------------------------------------------------------------------------------------------


def resnet18_shapes() -> list[tuple[int, ...]]:
    net = mgpu.resnet18_28()
    net.initialize()
    net(nd.zeros((1, 1, 28, 28)))
    return [p.shape for p in net.collect_params().values()]


def op_overhead_us(reps: int = 3, n: int = 500) -> float:
    """Python-side cost of one engine operation: pushing a copy of a 16-element array."""
    a, b = nd.ones((16,), ctx=mx.cpu(0)), nd.zeros((16,), ctx=mx.cpu(1))
    times = []
    for _ in range(reps):
        nd.waitall()
        start = time.perf_counter()
        for _ in range(n):
            a.copyto(b)
        nd.waitall()
        times.append((time.perf_counter() - start) / n * 1e6)
    return median(times)


def allreduce_on(k: int, shapes, rounds: int) -> dict:
    """Time every algorithm on ``k`` CPU devices; return figures per algorithm."""
    devices = cpus(k)
    rng = np.random.RandomState(k)
    values = [[rng.randn(*s).astype(np.float32) for _ in devices] for s in shapes]
    origin = [[nd.array(v, ctx=d) for v, d in zip(vs, devices)] for vs in values]
    grads = [[nd.zeros(s, ctx=d) for d in devices] for s in shapes]
    expected = [np.sum(vs, axis=0) for vs in values]

    def restore():
        for src, dst in zip(origin, grads):
            for a, b in zip(src, dst):
                a.copyto(b)
        nd.waitall()

    algos = {
        # The seeds' algorithm: sum on the first device, copy the sum back.
        "reduce-then-broadcast (seeds)": lambda: [mgpu.allreduce(g) for g in grads],
        "allreduce_scatter_gather (per tensor)":
            lambda: [mgpu.allreduce_scatter_gather(g) for g in grads],
        "FusedAllreduce, no fusion (small=0)": mgpu.FusedAllreduce(grads, small=0),
        "FusedAllreduce": mgpu.FusedAllreduce(grads),
    }
    keys = list(range(len(shapes)))
    for name in ("local", "device"):
        kv = mx.kv.create(name)
        kv.init(keys, [g[0] for g in grads])
        if hasattr(kv, "pushpull"):
            algos[f"KVStore '{name}'"] = lambda kv=kv: kv.pushpull(keys, grads, out=grads)
        else:  # pragma: no cover - older MXNet
            algos[f"KVStore '{name}'"] = lambda kv=kv: (kv.push(keys, grads),
                                                       kv.pull(keys, out=grads))
    for name, run in algos.items():  # once, checked: a fast wrong answer is no answer
        restore()
        run()
        for g, e in zip(grads, expected):
            for a in g:
                np.testing.assert_allclose(a.asnumpy(), e, rtol=1e-4, atol=1e-4,
                                           err_msg=f"{name} on {k} devices")
    total = {n: [] for n in algos}
    push = {n: [] for n in algos}
    for _ in range(rounds):
        for name, run in algos.items():
            restore()
            start = time.perf_counter()
            run()
            pushed = time.perf_counter()
            nd.waitall()
            total[name].append((time.perf_counter() - start) * 1e3)
            push[name].append((pushed - start) * 1e3)
    local = "KVStore 'local'"
    log(f"  allreduce on {k} devices: " + ", ".join(
        f"{n} {median(total[n]):.1f} ms" for n in algos))
    return {
        name: {
            "ms": figure(total[name], "ms"),
            "python_push_ms": figure(push[name], "ms",
                                     what="time until the call returned (work queued)"),
            "ratio_to_local": figure([a / b for a, b in zip(total[name], total[local])],
                                     "ratio (per round, to KVStore 'local' in the same round)"),
        } for name in algos
    }


def bench_allreduce(cfg) -> dict:
    shapes = resnet18_shapes()
    sizes = [int(np.prod(s)) for s in shapes]
    out = {"setup": {
        "shapes": "every parameter of mgpu.resnet18_28() (width 64), including BatchNorm's "
                  "running statistics (which have no gradient)",
        "tensors": len(shapes), "elements": sum(sizes), "megabytes": sum(sizes) * 4 / 1e6,
        "dtype": "float32", "rounds": cfg["allreduce_rounds"],
        "method": "random gradients restored before every call (not timed); waitall, call, "
                  "waitall; algorithms interleaved round by round; every result checked against "
                  "the NumPy sum once",
        "kvstore": "created and initialised once per device count; one pushpull of all keys per "
                   "call",
    }, "engine_op_overhead_us": {"median": op_overhead_us(), "unit": "microseconds per operation",
                                 "what": "Python time to push one copy of a 16-element array"}}
    for k in (2, 4):
        out[f"{k}_devices"] = allreduce_on(k, shapes, cfg["allreduce_rounds"])
        nd.waitall()
    return out


# --------------------------------------------------------------------------------------------
# c. Scaling over 1, 2 and 4 CPU devices
# --------------------------------------------------------------------------------------------


def bench_scaling(cfg) -> dict:
    models = {
        "lenet": (mgpu.LeNet, cfg["lenet_subset"], "Gluon LeNet (mgpu.LeNet)"),
        "resnet18_w16": (lambda: mgpu.resnet18_28(width=RESNET_WIDTH), cfg["resnet_subset"],
                         f"mgpu.resnet18_28(width={RESNET_WIDTH}) (ResNet-18 at 1/4 of the "
                         "standard width 64)"),
    }
    warm = mgpu.load_fashion_mnist(subset=WARMUP_SUBSET, test_subset=TEST_SUBSET, seed=1)
    out = {"setup": {"global_batch_size": BATCH, "lr": LR, "reduction": "mgpu.FusedAllreduce",
                     "devices": "cpu(0) ... cpu(k-1): CPU devices sharing the machine's cores",
                     "warm_up": f"one epoch over {WARMUP_SUBSET} other images before each run",
                     "what": "images/s of one training epoch (History.images_per_sec)"}}
    for key, (make, subset, label) in models.items():
        data = mgpu.load_fashion_mnist(subset=subset, test_subset=TEST_SUBSET)
        samples = {k: [] for k in (1, 2, 4)}
        acc = {k: [] for k in (1, 2, 4)}
        busy = {k: [] for k in (1, 2, 4)}
        for rep in range(cfg["scaling_reps"]):
            for k in samples:
                net = make()
                kw = dict(batch_size=BATCH, lr=LR, verbose=False, progress=False, seed=rep)
                mgpu.train(net, warm, cpus(k), num_epochs=1, **kw)
                cpu0, wall0 = time.process_time(), time.perf_counter()
                hist = mgpu.train(net, data, cpus(k), num_epochs=1, **kw)
                busy[k].append((time.process_time() - cpu0) / (time.perf_counter() - wall0))
                samples[k].append(hist.images_per_sec[0])
                acc[k].append(hist.test_acc[0])
                log(f"  scaling {key} rep {rep + 1}: {k} device(s) {samples[k][-1]:,.1f} images/s")
        out[key] = {
            "model": label, "train_images": subset,
            "images_per_sec": {str(k): figure(s, "images/s") for k, s in samples.items()},
            "speedup_vs_1_device": {
                str(k): figure([a / b for a, b in zip(s, samples[1])],
                               "ratio (per repeat, to 1 device in the same repeat)")
                for k, s in samples.items() if k != 1},
            "test_acc_after_one_epoch": {str(k): figure(a, "fraction") for k, a in acc.items()},
            "cores_busy": {str(k): figure(b, "process CPU seconds per wall-clock second",
                                          what="over the whole train() call (the epoch and the "
                                               "test evaluation)")
                           for k, b in busy.items()},
        }
    out["gpu_reference_literature"] = GPU_REFERENCE
    return out


def bench_scaling_temp_copy(cfg, mode: str, copies: int) -> dict:
    """The scaling part again, in a child process with ``MXNET_CPU_TEMP_COPY=copies``.

    MXNet gives all CPU devices one shared pool of scratch ("temp space") buffers, 4 by default,
    each guarded by an engine variable: operators on different CPU devices that draw the same
    buffer wait for each other. More buffers let the devices run at the same time. The variable
    is read when MXNet starts, hence the separate process.
    """
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MXNET_CPU_TEMP_COPY": str(copies)}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--only", "scaling", "--out-dir",
               tmp, "--no-plots"] + (["--quick"] if mode == "quick" else [])
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        child = json.loads((Path(tmp) / "results.json").read_text())
    out = child["scaling"]
    out.pop("gpu_reference_literature", None)
    out["setup"]["environment"] = {"MXNET_CPU_TEMP_COPY": str(copies)}
    out["setup"]["what"] += "; measured in a child process with MXNET_CPU_TEMP_COPY set"
    return out


# --------------------------------------------------------------------------------------------
# d. Data: loading and iterating
# --------------------------------------------------------------------------------------------


def bench_data(cfg) -> dict:
    reps = cfg["data_reps"]
    load = []
    for _ in range(reps):
        start = time.perf_counter()
        full = mgpu.load_fashion_mnist()
        load.append(time.perf_counter() - start)
    images, labels = full.train_images, full.train_labels

    def iterate():
        start = time.perf_counter()
        for _ in mgpu.iter_batches(images, labels, BATCH, shuffle=True, seed=0):
            pass
        return time.perf_counter() - start

    dataset = gluon.data.ArrayDataset(images, labels)

    def loader(convert):
        start = time.perf_counter()
        for X, _ in gluon.data.DataLoader(dataset, batch_size=BATCH, shuffle=True):
            if convert:
                X.astype("float32") / 255
        nd.waitall()
        return time.perf_counter() - start

    runs = {"mgpu.iter_batches (float32 NumPy, scaled to [0, 1])": iterate,
            "gluon DataLoader(ArrayDataset) (uint8 NDArray)": lambda: loader(False),
            "gluon DataLoader(ArrayDataset) + astype(float32) / 255": lambda: loader(True)}
    times = {n: [] for n in runs}
    for _ in range(reps):
        for name, run in runs.items():
            times[name].append(run())
    base = "mgpu.iter_batches (float32 NumPy, scaled to [0, 1])"
    return {
        "setup": {"source": str(full.source), "train_images": len(labels),
                  "batch_size": BATCH, "shuffle": True, "dataloader_workers": 0,
                  "files": sorted(p.name for p in Path(full.source).iterdir())},
        "load_fashion_mnist_seconds": figure(load, "s", what="all 70,000 images and labels "
                                             "into memory, from the IDX files"),
        "epoch_seconds": {n: figure(t, "s") for n, t in times.items()},
        "dataloader_to_iter_batches_time_ratio": {
            n: figure([a / b for a, b in zip(t, times[base])], "ratio of epoch times")
            for n, t in times.items() if n != base},
    }


# --------------------------------------------------------------------------------------------
# Targets, notes, plots, table
# --------------------------------------------------------------------------------------------


def targets(res: dict) -> list[dict]:
    rows = []

    def add(name, value, unit, target, ok):
        rows.append({"figure": name, "value": value, "unit": unit, "target": target, "met": ok})

    if "overhead" in res:
        r = res["overhead"]["ratio_train_mgpu_to_plain"]["median"]
        add("mgpu.train / plain Gluon loop (LeNet, 2 CPU devices)", r, "ratio", ">= 0.97",
            r >= 0.97)
    if "allreduce" in res:
        for k in (2, 4):
            rows_k = res["allreduce"][f"{k}_devices"]
            ours = {n: v for n, v in rows_k.items() if not n.startswith("KVStore")
                    and "seeds" not in n}
            best = min(ours, key=lambda n: ours[n]["ratio_to_local"]["median"])
            r = ours[best]["ratio_to_local"]["median"]
            add(f"best from-scratch allreduce / KVStore 'local', {k} devices ({best})", r,
                "ratio", "<= 1.0", r <= 1.0)
    for part, how in (("scaling", "mgpu's MXNET_CPU_TEMP_COPY="
                       + os.environ.get("MXNET_CPU_TEMP_COPY", "4")),
                      ("scaling_temp_copy", "MXNET_CPU_TEMP_COPY="
                       + res.get("scaling_temp_copy", {}).get("setup", {})
                       .get("environment", {}).get("MXNET_CPU_TEMP_COPY", "?"))):
        if part in res:
            for key in ("lenet", "resnet18_w16"):
                r = res[part][key]["speedup_vs_1_device"]["2"]["median"]
                add(f"{key}: 2 CPU devices / 1 device, images/s ({how})", r, "ratio", ">= 0.9",
                    r >= 0.9)
    if "data" in res:
        s = res["data"]["load_fashion_mnist_seconds"]["median"]
        add("load_fashion_mnist() (full data set)", s, "s", "<= 1", s <= 1.0)
    return rows


def notes(res: dict) -> list[str]:
    """Plain-words explanations, written from this run's own figures."""
    out = []
    if "overhead" in res:
        o = res["overhead"]
        r = o["ratio_train_mgpu_to_plain"]["median"]
        m = o["ratio_plain_with_metrics_to_plain"]["median"]
        d = o["ratio_train_device_to_plain"]["median"]
        out.append(
            f"Overhead: mgpu.train (kvstore='mgpu') ran at {r:.2f}x the plain loop's images/s, "
            f"with kvstore='device' (the plain loop's own) at {d:.2f}x. Adding mgpu.train's "
            f"per-batch loss and accuracy bookkeeping to the plain loop alone gives {m:.2f}x: "
            "that is what the running train loss/accuracy cost per batch (a few extra engine "
            "operations per device and batch). Per-repeat ratios of mgpu.train to the plain "
            f"loop ranged from {min(o['ratio_train_mgpu_to_plain']['samples']):.2f} to "
            f"{max(o['ratio_train_mgpu_to_plain']['samples']):.2f}: differences of a few per "
            "cent are within this machine's noise.")
    if "allreduce" in res:
        a = res["allreduce"]
        us = a["engine_op_overhead_us"]["median"]
        for k in (2, 4):
            rows = a[f"{k}_devices"]
            seed = rows["reduce-then-broadcast (seeds)"]
            ring = rows["allreduce_scatter_gather (per tensor)"]
            out.append(
                f"Allreduce, {k} devices: each engine operation costs about {us:.0f} us of Python "
                f"here, so per-tensor algorithms are bound by Python: the seeds' version spent "
                f"{seed['python_push_ms']['median']:.0f} of its {seed['ms']['median']:.0f} ms "
                f"queuing work, the per-tensor ring "
                f"{ring['python_push_ms']['median']:.0f} of {ring['ms']['median']:.0f} ms (it "
                "makes views, copies and sums of k chunks: O(k^2) operations per tensor). The "
                "fused allreduce_many queues 2k-1 operations per big tensor plus 2k for all "
                "small tensors together, and spreads the summing over the devices.")
    if "scaling" in res:
        s, t = res["scaling"], res.get("scaling_temp_copy")
        for key in ("lenet", "resnet18_w16"):
            r2 = s[key]["speedup_vs_1_device"]["2"]["median"]
            r4 = s[key]["speedup_vs_1_device"]["4"]["median"]
            c1, c2 = (s[key]["cores_busy"][k]["median"] for k in ("1", "2"))
            own = os.environ.get("MXNET_CPU_TEMP_COPY", "4")
            text = (f"Scaling {key}: with MXNET_CPU_TEMP_COPY={own} (mgpu sets it when it "
                    f"imports MXNet) 2 CPU devices ran at {r2:.2f}x and 4 "
                    f"at {r4:.2f}x the images/s of 1 device, on {os.cpu_count()} cores; the "
                    f"process kept {c1:.2f} cores busy with 1 device and {c2:.2f} with 2.")
            if t is not None:
                copies = t["setup"]["environment"]["MXNET_CPU_TEMP_COPY"]
                t2 = t[key]["speedup_vs_1_device"]["2"]["median"]
                t4 = t[key]["speedup_vs_1_device"]["4"]["median"]
                tc2 = t[key]["cores_busy"]["2"]["median"]
                text += (f" With MXNET_CPU_TEMP_COPY={copies} (MXNet's own default) 2 "
                         f"devices ran at {t2:.2f}x and 4 at {t4:.2f}x, keeping {tc2:.2f} cores "
                         "busy with 2 devices.")
            out.append(text)
        out.append(
            "Why CPU devices hardly overlap by default: MXNet 1.9 gives all CPU devices ONE "
            "shared pool of scratch buffers ('temp space', MXNET_CPU_TEMP_COPY, default 4; "
            "GPUs get their own per device). An operator that needs scratch space locks the "
            "buffer it draws, so operators of cpu(0) and cpu(1) queue behind each other and the "
            "devices take turns on the cores. Found while preparing this benchmark by "
            "bisecting LeNet's step: its layers alone ran on both cores at once, adding the "
            "softmax cross-entropy loss made the two devices serial, and more temp-space "
            "copies made them parallel again. Raising MXNET_CPU_TEMP_COPY costs memory (each "
            "copy grows to the largest scratch space requested from it).")
    return out


def plots(res: dict, out_dir: Path) -> list[str]:
    from mgpu.plot import plot_bars

    written = []

    def save(fig, name):
        path = out_dir / name
        fig.savefig(path, dpi=110)
        written.append(path.name)

    short = {"mgpu.train (allreduce=True)": "mgpu.train\n(allreduce)",
             "mgpu.train (kvstore='device')": "mgpu.train\n(device)",
             "plain Gluon loop (Trainer default kvstore='device')": "plain loop",
             "plain Gluon loop + mgpu.train's per-batch metrics": "plain loop\n+ metrics"}
    if "overhead" in res:
        ips = res["overhead"]["images_per_sec"]
        save(plot_bars([short[n] for n in ips], [v["median"] for v in ips.values()],
                       ylabel="images / s", title="LeNet on 2 CPU devices: training loops",
                       fmt="{:,.0f}"), "overhead.png")
    if "allreduce" in res:
        names = {"reduce-then-broadcast (seeds)": "seeds",
                 "allreduce_scatter_gather (per tensor)": "scatter\ngather",
                 "FusedAllreduce, no fusion (small=0)": "fused\n(small=0)",
                 "FusedAllreduce": "fused", "KVStore 'local'": "kv local",
                 "KVStore 'device'": "kv device"}
        for k in (2, 4):
            rows = res["allreduce"][f"{k}_devices"]
            save(plot_bars([names[n] for n in rows], [v["ms"]["median"] for v in rows.values()],
                           ylabel="ms per allreduce", fmt="{:.1f}",
                           title=f"ResNet-18 gradients (11.2 M floats), {k} CPU devices"),
                 f"allreduce_{k}dev.png")
    if "scaling" in res:
        labels, values = [], []
        for part, tag in (("scaling", ""), ("scaling_temp_copy", "\nTEMP_COPY")):
            if part not in res:
                continue
            for key, name in (("lenet", "LeNet"), ("resnet18_w16", "ResNet-18/16")):
                for k in ("2", "4"):
                    labels.append(f"{name}\n{k} dev{tag}")
                    values.append(res[part][key]["speedup_vs_1_device"][k]["median"])
        save(plot_bars(labels, values, ylabel="images/s relative to 1 device", fmt="{:.2f}",
                       title=f"Scaling over CPU devices ({os.cpu_count()} cores)"),
             "scaling.png")
    if "data" in res:
        d = res["data"]
        ep = d["epoch_seconds"]
        lab = ["load all\n(load_fashion_mnist)", "epoch:\niter_batches",
               "epoch:\nDataLoader", "epoch: DataLoader\n+ float32"]
        vals = [d["load_fashion_mnist_seconds"]["median"]] + [v["median"] for v in ep.values()]
        save(plot_bars(lab, vals, ylabel="seconds", fmt="{:.2f}",
                       title="Fashion-MNIST: loading and one epoch of batches of 256"),
             "data.png")
    return written


def table(rows: list[dict], res: dict) -> str:
    w = max([len(r["figure"]) for r in rows] + [6])
    lines = [f"{'figure':<{w}} {'value':>9}  {'target':<8} met"]
    lines.append("-" * len(lines[0]))
    for r in rows:
        lines.append(f"{r['figure']:<{w}} {r['value']:>9.3f}  {r['target']:<8} "
                     f"{'yes' if r['met'] else 'NO'}")
    if "allreduce" in res:
        lines.append("")
        lines.append(f"{'allreduce of ResNet-18 gradients':<40} {'2 dev ms':>9} {'x local':>8} "
                     f"{'4 dev ms':>9} {'x local':>8}")
        for name in res["allreduce"]["2_devices"]:
            a, b = res["allreduce"]["2_devices"][name], res["allreduce"]["4_devices"][name]
            lines.append(f"{name:<40} {a['ms']['median']:>9.1f} "
                         f"{a['ratio_to_local']['median']:>8.2f} {b['ms']['median']:>9.1f} "
                         f"{b['ratio_to_local']['median']:>8.2f}")
    if "overhead" in res:
        lines.append("")
        for name, v in res["overhead"]["images_per_sec"].items():
            lines.append(f"{name:<60} {v['median']:>10,.0f} images/s")
    for part in ("scaling", "scaling_temp_copy"):
        if part in res:
            env = res[part]["setup"].get("environment", {})
            how = ", ".join(f"{k}={v}" for k, v in env.items()) or (
                "mgpu default, MXNET_CPU_TEMP_COPY=" + os.environ.get("MXNET_CPU_TEMP_COPY", "4"))
            lines.append("")
            for key in ("lenet", "resnet18_w16"):
                ips = res[part][key]["images_per_sec"]
                lines.append(f"{key:<14} images/s on 1 / 2 / 4 CPU devices: " + " / ".join(
                    f"{ips[k]['median']:,.0f}" for k in ("1", "2", "4")) + f"  ({how})")
    if "data" in res:
        lines.append("")
        for name, v in res["data"]["epoch_seconds"].items():
            lines.append(f"{name:<60} {v['median']:>8.2f} s per epoch")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smaller subsets and fewer repeats (a few minutes on 2 cores)")
    parser.add_argument("--docs-times", type=Path, metavar="FILE",
                        help="a JSON file with the book's cold/warm build seconds, copied in")
    parser.add_argument("--out-dir", type=Path, default=HERE,
                        help="where results.json and the PNGs go (default: bench/)")
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"comma-separated parts to run (default: all of {','.join(PARTS)})")
    parser.add_argument("--temp-copy", type=int, default=TEMP_COPY, metavar="N",
                        help="MXNET_CPU_TEMP_COPY for the scaling_temp_copy part "
                             f"(default {TEMP_COPY})")
    parser.add_argument("--no-plots", action="store_true", help="write results.json only")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s) {sorted(unknown)}: use {', '.join(PARTS)}")
    docs = None
    if args.docs_times:
        try:
            docs = {"source": str(args.docs_times),
                    "timings": json.loads(args.docs_times.read_text())}
        except (OSError, json.JSONDecodeError) as err:
            parser.error(f"--docs-times {args.docs_times}: {err}")
    mode = "quick" if args.quick else "full"
    cfg = SETTINGS[mode]
    args.out_dir.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    res: dict = {"meta": {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "mode": mode, "settings": cfg, "parts": parts,
        "hardware": mgpu.hardware_summary(), "cpu_count": os.cpu_count(),
        "python": platform.python_version(), "mxnet": mx.__version__, "numpy": np.__version__,
        "platform": platform.platform(),
        "environment": {k: v for k, v in os.environ.items()
                        if k.startswith(("MXNET_", "OMP_", "MKL", "MGPU_"))},
        "load_average_at_start": list(os.getloadavg()),
    }}
    funcs = {"data": bench_data, "overhead": bench_overhead, "scaling": bench_scaling,
             "scaling_temp_copy": lambda c: bench_scaling_temp_copy(c, mode, args.temp_copy),
             "allreduce": bench_allreduce}
    for part in parts:
        log(f"[{time.perf_counter() - started:6.0f} s] {part} ...")
        res[part] = funcs[part](cfg)
    res["docs_build"] = docs if docs is not None else {
        "note": "not given: pass --docs-times FILE (this script never builds the docs)"}
    res["targets"] = targets(res)
    res["notes"] = notes(res)
    res["meta"]["load_average_at_end"] = list(os.getloadavg())
    res["meta"]["duration_s"] = round(time.perf_counter() - started, 1)
    res["meta"]["plots"] = [] if args.no_plots else plots(res, args.out_dir)
    path = args.out_dir / "results.json"
    path.write_text(json.dumps(res, indent=2) + "\n")
    print(f"mgpu benchmarks ({mode}), {res['meta']['hardware']}, "
          f"{res['meta']['duration_s']:.0f} s, load average {res['meta']['load_average_at_start']}"
          f" -> {res['meta']['load_average_at_end']}")
    print(table(res["targets"], res))
    print(f"\nwrote {', '.join([str(path), *res['meta']['plots']])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
