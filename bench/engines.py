"""In-process devices, the parameter server and Horovod on the same work.

ResNet-18's 62 gradients (11,172,810 numbers) are summed across 2 and 4 processes on this
machine, by MXNet's parameter server (``dist_sync`` through :func:`mgpu.run_local_cluster`, one
server) and by Horovod (``horovodrun`` with Gloo's ring allreduce, on loopback); then one epoch of
LeNet is trained with each, by 2 processes, at one global batch. Each job starts its processes
afresh; the figures are the workers' own timings, not the start-up.
"""

from __future__ import annotations

import sys

import mgpu
from bench.common import BATCH, figure, log

PROCESSES = (2, 4)
TRAIN_SUBSET = 2048


def _median_over_workers(reports: list[dict]) -> list[float]:
    """Per round, the slowest worker's milliseconds (the round ends when every worker is done)."""
    rounds = zip(*(r["ms"] for r in reports))
    return [max(r) for r in rounds]


def allreduce_ps(k: int, rounds: int) -> list[float]:
    result = mgpu.run_local_cluster(mgpu.push_pull_timing, k, args=(rounds,), timeout=300)
    return _median_over_workers(result.reports())


def allreduce_horovod(k: int, rounds: int) -> list[float]:
    result = mgpu.run_horovod([sys.executable, "-m", "mgpu", "hvd_allreduce_timing",
                               "--rounds", str(rounds)], np=k, timeout=300)
    return _median_over_workers(result.reports())


def training(engine: str) -> dict:
    """One epoch of LeNet by 2 processes: each process's epoch time and the test accuracy."""
    args = {"subset": TRAIN_SUBSET, "test_subset": 500, "num_epochs": 1,
            "batch_size": BATCH, "lr": 0.2}
    if engine == "dist_sync":
        reports = mgpu.run_local_cluster(mgpu.train_demo, 2, args=tuple(args.values()),
                                         timeout=300).reports()
    else:
        words = [w for k, v in args.items() for w in (f"--{k.replace('_', '-')}", str(v))]
        reports = mgpu.run_horovod([sys.executable, "-m", "mgpu", "hvd_train", *words], np=2,
                                   timeout=300).reports()
    epoch = max(r["epoch_time"][-1] for r in reports)
    return {"epoch_seconds": epoch, "images_per_sec": TRAIN_SUBSET / epoch,
            "test_acc": reports[0]["test_acc"], "processes": len(reports)}


def run(cfg: dict) -> dict:
    rounds = cfg["allreduce_rounds"]
    res = {"setup": {
        "tensors": "ResNet-18's 62 gradients (mgpu.gradient_shapes(mgpu.resnet18_28()))",
        "processes": list(PROCESSES), "rounds": rounds,
        "dist_sync": "mgpu.run_local_cluster(mgpu.push_pull_timing, k): 1 scheduler, 1 server, "
                     "k workers on 127.0.0.1; push every gradient, pull the sums",
        "horovod": "horovodrun --gloo --network-interface lo -np k python -m mgpu "
                   "hvd_allreduce_timing: hvd.allreduce_ of every gradient",
        "per_round": "the slowest worker's time (a round ends when every worker is done)",
        "training": f"LeNet, {TRAIN_SUBSET} images, global batch {BATCH}, 2 processes, 1 epoch",
    }}
    if not mgpu.horovod_available():
        res["horovod_missing"] = "horovod.mxnet is not installed in this environment"
    for k in PROCESSES:
        res[f"{k}_processes"] = {"dist_sync": figure(allreduce_ps(k, rounds), "ms")}
        if mgpu.horovod_available():
            res[f"{k}_processes"]["horovod"] = figure(allreduce_horovod(k, rounds), "ms")
        log(f"  engines, {k} processes: " + ", ".join(
            f"{n} {v['median']:.1f} ms" for n, v in res[f"{k}_processes"].items()))
    res["training"] = {"dist_sync": training("dist_sync")}
    if mgpu.horovod_available():
        res["training"]["horovod"] = training("horovod")
    res["time_ratio_dist_sync_to_horovod"] = {
        f"{k}_processes": res[f"{k}_processes"]["dist_sync"]["median"]
        / res[f"{k}_processes"]["horovod"]["median"]
        for k in PROCESSES if "horovod" in res[f"{k}_processes"]}
    return res
