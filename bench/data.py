"""Data: loading all of Fashion-MNIST, and one epoch of batches three ways."""

from __future__ import annotations

import time
from pathlib import Path

import mgpu
from bench.common import BATCH, figure, interleave, ratio
from mgpu import mx

nd, gluon = mx.nd, mx.gluon

RUNS = {
    "iter_batches": "mgpu.iter_batches: float32 NumPy batches scaled to [0, 1]",
    "dataloader": "gluon.data.DataLoader(ArrayDataset): uint8 NDArray batches",
    "dataloader_float32": "the DataLoader plus astype('float32') / 255 on every batch",
}


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(cfg: dict) -> dict:
    reps = cfg["data_reps"]
    loads = interleave({"load": lambda _: _seconds(mgpu.load_fashion_mnist)}, reps, "data")
    full = mgpu.load_fashion_mnist()
    images, labels = full.train_images, full.train_labels
    dataset = gluon.data.ArrayDataset(images, labels)

    def iterate():
        for _ in mgpu.iter_batches(images, labels, BATCH, shuffle=True, seed=0):
            pass

    def loader(convert):
        for X, _ in gluon.data.DataLoader(dataset, batch_size=BATCH, shuffle=True):
            if convert:
                X.astype("float32") / 255
        nd.waitall()

    times = interleave({
        "iter_batches": lambda _: _seconds(iterate),
        "dataloader": lambda _: _seconds(lambda: loader(False)),
        "dataloader_float32": lambda _: _seconds(lambda: loader(True)),
    }, reps, "data epoch")
    return {
        "setup": {"source": str(full.source), "train_images": len(labels),
                  "batch_size": BATCH, "shuffle": True, "dataloader_workers": 0, "repeats": reps,
                  "files": sorted(p.name for p in Path(full.source).iterdir()), "runs": RUNS},
        "load_fashion_mnist_seconds": figure(loads["load"], "s", what="all 70,000 images and "
                                             "labels into memory, from the IDX files"),
        "epoch_seconds": {n: figure(t, "s") for n, t in times.items()},
        "time_ratio_to_iter_batches": {
            n: ratio(t, times["iter_batches"], "ratio of epoch times (same repeat)")
            for n, t in times.items() if n != "iter_batches"},
    }
