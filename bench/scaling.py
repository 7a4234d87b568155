"""Scaling over 1, 2 and 4 CPU devices: LeNet and ResNet-18 at width 16, with mgpu.train.

:func:`run` measures in this process (where mgpu sets ``MXNET_CPU_TEMP_COPY``, 64 unless the
environment says otherwise); :func:`run_temp_copy` measures the same again in a child process
with another value, since MXNet reads the variable only when it starts.

The fair baseline: each CPU device's engine worker gets ``omp_get_num_procs() / 2`` OpenMP
threads by default (MXNet 1.9, src/engine/openmp.cc), so one device alone leaves cores idle that
two devices use. The configuration ``1_all_cores`` trains on one device in a fresh process with
``MXNET_OMP_MAX_THREADS`` set to every core, interleaved with the others, and the speed-ups are
also given against it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mgpu
from bench import common
from bench.common import BATCH, LR, figure, interleave, ratio

RESNET_WIDTH = 16
DEVICES = (1, 2, 4)
MODELS = {
    "lenet": ("mgpu.LeNet (Gluon)", "lenet_subset", mgpu.LeNet),
    "resnet18_w16": (f"mgpu.resnet18_28(width={RESNET_WIDTH}): ResNet-18 at 1/4 of the standard "
                     "width 64", "resnet_subset", lambda: mgpu.resnet18_28(width=RESNET_WIDTH)),
}
#: The names :func:`mgpu.train_fresh` knows the models by, for the fair baseline.
FRESH_NAMES = {"lenet": "LeNet", "resnet18_w16": "resnet18_28"}
ALL_CORES = "1_all_cores"


def _in_process(make, data, warm, k: int):
    """A measurement of ``k`` devices in this process: (images/s, test accuracy, busy cores)."""
    def measure(rep):
        net = make()
        kw = dict(batch_size=BATCH, lr=LR, verbose=False, progress=False, seed=rep)
        mgpu.train(net, warm, common.cpus(k), num_epochs=1, **kw)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        hist = mgpu.train(net, data, common.cpus(k), num_epochs=1, **kw)
        busy = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
        return hist.images_per_sec[0], hist.test_acc[0], busy
    return measure


def _all_cores(key: str, data):
    """One device using every core, in a fresh process: two epochs, the second measured (the
    first warms up, as the in-process runs' warm-up epoch does)."""
    def measure(rep):
        r = mgpu.train_fresh(FRESH_NAMES[key], 1, {"MXNET_OMP_MAX_THREADS": str(os.cpu_count())},
                             subset=len(data.train_labels), test_subset=common.TEST_SUBSET,
                             width=RESNET_WIDTH, num_epochs=2, batch_size=BATCH, lr=LR, seed=rep)
        return r["images_per_sec_per_epoch"][-1], r["test_acc_per_epoch"][-1], None
    return measure


def one_model(make, data, warm, reps: int, key: str, fair: bool) -> dict:
    """Images/s, test accuracy and busy cores of one epoch on 1, 2 and 4 devices, interleaved
    (and, with ``fair``, on one device using every core)."""
    runs = {str(k): _in_process(make, data, warm, k) for k in DEVICES}
    if fair:
        runs[ALL_CORES] = _all_cores(key, data)
    samples = interleave(runs, reps, f"scaling {key}")
    ips = {k: [s[0] for s in v] for k, v in samples.items()}
    devices = [str(k) for k in DEVICES]
    return {
        "train_images": len(data.train_labels),
        "images_per_sec": {k: figure(v, "images/s") for k, v in ips.items()},
        "speedup_vs_1_device": {
            k: ratio(ips[k], ips["1"], "ratio (per repeat, to 1 device in the same repeat)")
            for k in devices[1:]},
        "fair_speedup_vs_1_device_all_cores": {
            k: ratio(ips[k], ips[ALL_CORES], "ratio (per repeat, to 1 device using every core "
                     "in the same repeat)") for k in devices} if fair else None,
        "test_acc_after_one_epoch": {k: figure([s[1] for s in v], "fraction")
                                     for k, v in samples.items()},
        "cores_busy": {k: figure([samples[k][i][2] for i in range(reps)],
                                 "process CPU seconds per wall-clock second",
                                 what="over the whole train() call (the epoch and the test "
                                      "evaluation)")
                       for k in devices},
    }


def run(cfg: dict, fair: bool = True) -> dict:
    warm = common.warm_up_data()
    res = {"setup": {
        "global_batch_size": BATCH, "lr": LR, "reduction": "mgpu.FusedAllreduce",
        "devices": "cpu(0) ... cpu(k-1): CPU devices sharing the machine's cores",
        "warm_up_images": common.WARMUP_SUBSET, "repeats": cfg["scaling_reps"],
        "measured": "images/s of one training epoch (History.images_per_sec)",
        "models": {key: label for key, (label, _, _) in MODELS.items()},
        "environment": {"MXNET_CPU_TEMP_COPY": os.environ.get("MXNET_CPU_TEMP_COPY")},
        "omp_threads_per_device": "MXNet's default, omp_get_num_procs() / 2 on x86, unless "
                                  "MXNET_OMP_MAX_THREADS is set",
        "fair_baseline": (f"{ALL_CORES}: 1 device in a fresh process with "
                          f"MXNET_OMP_MAX_THREADS={os.cpu_count()} (every core)") if fair else None,
    }}
    for key, (_, subset, make) in MODELS.items():
        data = mgpu.load_fashion_mnist(subset=cfg[subset], test_subset=common.TEST_SUBSET)
        res[key] = one_model(make, data, warm, cfg["scaling_reps"], key, fair)
    return res


def run_temp_copy(mode: str, copies: int) -> dict:
    """The scaling part again, in a child process with ``MXNET_CPU_TEMP_COPY=copies``.

    MXNet gives all CPU devices one shared pool of scratch ("temp space") buffers, 4 by default,
    each guarded by an engine variable: operators on different CPU devices that draw the same
    buffer wait for each other. More buffers let the devices run at the same time. The fair
    baseline is not repeated there: it does not depend on the temp space.
    """
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MXNET_CPU_TEMP_COPY": str(copies)}
        cmd = [sys.executable, str(common.HERE / "run.py"), "--only", "scaling", "--out-dir", tmp,
               "--no-fair-baseline"]
        subprocess.run(cmd + (["--quick"] if mode == "quick" else []), env=env, check=True,
                       stdout=subprocess.DEVNULL)
        child = json.loads((Path(tmp) / "results.json").read_text())
    res = child["scaling"]
    res["setup"]["measured_in"] = "a child process started with MXNET_CPU_TEMP_COPY set"
    return res
