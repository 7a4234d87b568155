"""What every benchmark part shares: sizes, devices, measured figures and the run's metadata.

A *figure* is the median of repeated measurements, with its unit and every sample. Repeats of
the configurations being compared are interleaved (A, B, A, B, ...) by :func:`interleave`, so
that a change in the machine's load hits all of them alike.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import mgpu
from mgpu import mx

HERE = Path(__file__).resolve().parent

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


def median(xs) -> float:
    return float(statistics.median(xs))


def figure(samples, unit: str, **extra) -> dict:
    """A measured figure: its median, unit and every sample."""
    return {"median": median(samples), "unit": unit, "samples": [float(s) for s in samples],
            **extra}


def ratio(samples, reference, unit: str) -> dict:
    """The figure of ``samples[i] / reference[i]``: each pair was measured in the same repeat."""
    return figure([a / b for a, b in zip(samples, reference, strict=True)], unit)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cpus(k: int) -> list:
    return [mx.cpu(i) for i in range(k)]


def warm_up_data() -> mgpu.Dataset:
    """Images that are not measured: one epoch over them precedes every measured run."""
    return mgpu.load_fashion_mnist(subset=WARMUP_SUBSET, test_subset=TEST_SUBSET, seed=1)


def interleave(runs: dict[str, Callable[[int], Any]], reps: int, label: str) -> dict[str, list]:
    """Call every run once per repeat, in turn; return what each returned, per repeat.

    ``runs[name](rep)`` measures one configuration; the repeat number serves as a seed.
    """
    samples: dict[str, list] = {name: [] for name in runs}
    for rep in range(reps):
        for name, run in runs.items():
            samples[name].append(run(rep))
            log(f"  {label} rep {rep + 1}: {name}: {_show(samples[name][-1])}")
    return samples


def _show(value) -> str:
    if isinstance(value, tuple):
        return ", ".join(_show(v) for v in value)
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3f}"
    return str(value)


def meta(mode: str, parts: list[str]) -> dict:
    """Where, when and how the run measured (completed by :func:`finish_meta`)."""
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "mode": mode, "settings": SETTINGS[mode], "parts": parts,
        "hardware": mgpu.hardware_summary(), "cpu_count": os.cpu_count(),
        "python": platform.python_version(), "mxnet": mx.__version__, "numpy": np.__version__,
        "platform": platform.platform(),
        "environment": {k: v for k, v in os.environ.items()
                        if k.startswith(("MXNET_", "OMP_", "MKL", "MGPU_"))},
        "load_average_at_start": list(os.getloadavg()),
    }


def finish_meta(info: dict, seconds: float) -> None:
    info["load_average_at_end"] = list(os.getloadavg())
    info["duration_s"] = round(seconds, 1)
