"""The measured side of :mod:`mgpu.memory`: a process's peak memory while it trains.

A process's peak is the most it ever held, so each measurement runs in a fresh process:
:func:`measure_peak_memory` runs the program :func:`peak_memory` there
(``python -m mgpu peak_memory``). It sets ``MXNET_CPU_TEMP_COPY=1`` there: MXNet keeps
that many scratch buffers ("temp space", shared by the CPU devices; the book uses 64 for
speed, see :mod:`mgpu.backend`), each grown to the largest request it served and never
shrunk, and operators take them in turn. With 64 buffers the peak keeps growing for
many steps as more of them reach full size (about 0.5 GB more after six steps of LeNet
with a batch of 2,048, measured), which would hide what one step needs.
"""

from __future__ import annotations

from pathlib import Path

from mgpu.programs.report import report
from mgpu.programs.run import run_program

__all__ = ["measure_peak_memory", "peak_memory", "process_memory"]


def process_memory(status: str | None = None) -> dict[str, int]:
    """This process's resident memory now (``VmRSS``) and its peak so far (``VmHWM``),
    in bytes, from ``/proc/self/status`` (or the given text of such a file).

    >>> process_memory("VmHWM:\\t  2048 kB\\nVmRSS:\\t  1024 kB\\n")
    {'rss': 1048576, 'peak': 2097152}
    """
    if status is None:
        status = Path("/proc/self/status").read_text()
    found = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            number, unit = value.split()
            if unit != "kB":
                raise ValueError(f"/proc/self/status gives {key} in {unit!r}, not kB")
            found["rss" if key == "VmRSS" else "peak"] = int(number) * 1024
    if len(found) != 2:
        raise RuntimeError("/proc/self/status has no VmRSS and VmHWM lines: the peak "
                           "memory measurement needs Linux")
    return {"rss": found["rss"], "peak": found["peak"]}


def peak_memory(batch_size: int = 2048, accumulate: int = 1, steps: int = 3,
                devices: int = 1, momentum: float = 0.9, seed: int = 0) -> None:
    """Program: train the Gluon LeNet for ``steps`` batches of ``batch_size`` random
    images on ``devices`` CPU devices with :func:`mgpu.step.gluon_step` (momentum SGD,
    ``accumulate`` micro-batches per device); report the process's resident memory
    before the first step (``rss_before``, MXNet loaded, model and data in place) and
    its peak after the last (``peak_after``), in bytes.

    All the devices live in this one process: with one device the growth is one
    device's training memory.
    """
    import numpy as np

    from mgpu.backend import mx
    from mgpu.loop import initialise
    from mgpu.models import LeNet
    from mgpu.step import check_accumulate, gluon_step

    devs = [mx.cpu(i) for i in range(devices)]
    check_accumulate(accumulate, batch_size, devices)
    rng = np.random.RandomState(seed)
    X = rng.rand(batch_size, 1, 28, 28).astype(np.float32)
    y = rng.randint(0, 10, batch_size).astype(np.int32)
    net = LeNet()
    initialise(net, devs, seed)
    net.hybridize()
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd",
                               {"learning_rate": 0.05, "momentum": momentum},
                               kvstore=None)
    step = gluon_step(net, trainer, devs, accumulate=accumulate)
    mx.nd.waitall()
    before = process_memory()
    for _ in range(steps):
        losses, _, _ = step(X, y)
        mx.nd.waitall()
    after = process_memory()
    report(batch_size=batch_size, accumulate=accumulate, devices=devices, steps=steps,
           rss_before=before["rss"], peak_before=before["peak"],
           peak_after=after["peak"], loss=float(losses[0].mean().asscalar()),
           allreduces=step.reducer.calls if step.reducer else 0)


def measure_peak_memory(batch_size: int = 2048, accumulate: int = 1, steps: int = 3,
                        devices: int = 1, temp_copies: int = 1,
                        timeout: float = 600) -> dict:
    """Run :func:`peak_memory` in a fresh process with ``MXNET_CPU_TEMP_COPY`` set to
    ``temp_copies``; return its report with ``growth``: the bytes the training added
    to the process's peak (``peak_after - rss_before``).

    >>> r = measure_peak_memory(batch_size=64, steps=1)
    >>> r["growth"] > 0, r["accumulate"]
    (True, 1)
    """
    if isinstance(temp_copies, bool) or not isinstance(temp_copies, int) \
            or temp_copies < 1:
        raise ValueError(f"temp_copies={temp_copies!r} must be a whole number of "
                         "scratch buffers, at least 1")
    found = run_program("peak_memory", timeout=timeout,
                        env={"MXNET_CPU_TEMP_COPY": str(temp_copies)},
                        batch_size=batch_size,
                        accumulate=accumulate, steps=steps, devices=devices)[-1]
    return {**found, "growth": found["peak_after"] - found["rss_before"]}
