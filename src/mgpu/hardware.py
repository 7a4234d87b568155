"""Choosing the devices to train on.

The book's code never assumes GPUs. :func:`devices` returns GPUs when the machine has
them and otherwise CPU "virtual devices" ``cpu(0), cpu(1), ...``: MXNet treats each as a
separate device with its own arrays and its own engine queue, so every multi-device idea
runs for real on a laptop.

The environment variable ``MGPU_DEVICES`` overrides the choice, e.g.
``MGPU_DEVICES=cpu:4`` (four CPU devices) or ``MGPU_DEVICES=gpu:0,1`` (the first two
GPUs).
"""

from __future__ import annotations

import numbers
import os
import platform
import re

from mgpu.backend import mx

__all__ = [
    "DeviceError",
    "devices",
    "hardware_in",
    "hardware_summary",
    "num_gpus",
    "parse_devices",
    "try_all_gpus",
    "try_gpu",
]

ENV_VAR = "MGPU_DEVICES"


class DeviceError(ValueError):
    """A request for devices that this machine cannot satisfy."""


def num_gpus() -> int:
    """Number of GPUs MXNet can use (0 with the CPU build or without a driver).

    >>> num_gpus() >= 0
    True
    """
    try:
        return mx.context.num_gpus()
    except mx.base.MXNetError:  # driver missing or broken: no usable GPU
        return 0


def try_gpu(i: int = 0) -> mx.Context:
    """Return ``gpu(i)`` if it exists, else ``cpu()``.

    >>> try_gpu(0) in (mx.gpu(0), mx.cpu())
    True
    """
    return mx.gpu(i) if num_gpus() > i else mx.cpu()


def try_all_gpus() -> list[mx.Context]:
    """Return every GPU, or ``[cpu()]`` when there is none.

    >>> len(try_all_gpus()) >= 1
    True
    """
    n = num_gpus()
    return [mx.gpu(i) for i in range(n)] if n else [mx.cpu()]


def parse_devices(spec: str) -> list[mx.Context]:
    """Parse a device spec such as ``"cpu:4"``, ``"gpu:0,1"`` or ``"gpu:2"``.

    ``cpu:N`` means N CPU devices ``cpu(0) ... cpu(N-1)``; ``gpu:N`` (one number) means
    the first N GPUs; ``gpu:I,J,...`` names GPUs by index.

    >>> parse_devices("cpu:3")
    [cpu(0), cpu(1), cpu(2)]
    >>> parse_devices("tpu:1")
    Traceback (most recent call last):
    ...
    mgpu.hardware.DeviceError: cannot parse device spec 'tpu:1': use 'cpu:N', ...
    """
    m = re.fullmatch(r"\s*(cpu|gpu)\s*:\s*(\d+(?:\s*,\s*\d+)*)\s*", spec)
    if not m:
        raise DeviceError(
            f"cannot parse device spec {spec!r}: use 'cpu:N', 'gpu:N' or 'gpu:I,J,...'"
        )
    kind, nums = m.group(1), [int(x) for x in m.group(2).split(",")]
    if len(nums) == 1:
        if nums[0] < 1:
            raise DeviceError(f"device spec {spec!r} asks for no device; use a count "
                              "of 1 or more")
        ids = list(range(nums[0]))
    else:
        ids = nums
        if len(set(ids)) != len(ids):
            raise DeviceError(f"device spec {spec!r} names a device twice")
    if kind == "gpu":
        have = num_gpus()
        missing = [i for i in ids if i >= have]
        if missing:
            asked = f"{len(ids)} GPU(s)" if len(nums) == 1 else f"gpu({missing[0]})"
            raise DeviceError(
                f"device spec {spec!r} asks for {asked} but this machine has "
                f"{have} GPU(s); unset {ENV_VAR} or use 'cpu:N' to train on CPU devices"
            )
        return [mx.gpu(i) for i in ids]
    return [mx.cpu(i) for i in ids]


def devices(n: int | None = None) -> list[mx.Context]:
    """Return ``n`` devices to train on: GPUs when present, else CPU devices.

    With GPUs, ``n`` defaults to all of them and asking for more than exist is an error
    (never a silent fallback to the CPU). Without GPUs, ``n`` defaults to 1 and the
    devices are ``cpu(0) ... cpu(n-1)``. ``MGPU_DEVICES`` (see :func:`parse_devices`)
    replaces the pool the devices are taken from.

    >>> import os; os.environ.pop("MGPU_DEVICES", None) and None
    >>> devices(2) if num_gpus() == 0 else [mx.cpu(0), mx.cpu(1)]
    [cpu(0), cpu(1)]
    >>> devices(0)
    Traceback (most recent call last):
    ...
    mgpu.hardware.DeviceError: devices(0): ask for at least one device
    """
    if n is not None and (isinstance(n, bool) or not isinstance(n, numbers.Integral)):
        raise DeviceError(f"devices({n!r}): the number of devices must be a whole "
                          "number, e.g. devices(2)")
    if n is not None and n < 1:
        raise DeviceError(f"devices({n}): ask for at least one device")
    spec = os.environ.get(ENV_VAR, "").strip()
    if spec:
        pool = parse_devices(spec)
        if n is None:
            return pool
        if n > len(pool):
            raise DeviceError(
                f"asked for {n} devices but {ENV_VAR}={spec!r} provides {len(pool)}; "
                f"raise the count in {ENV_VAR} or ask for fewer devices"
            )
        return pool[:n]
    have = num_gpus()
    if have:
        if n is None:
            return [mx.gpu(i) for i in range(have)]
        if n > have:
            raise DeviceError(
                f"asked for {n} GPUs but this machine has {have}; ask for at most "
                f"{have}, or set {ENV_VAR}=cpu:{n} to use {n} CPU devices instead"
            )
        return [mx.gpu(i) for i in range(n)]
    return [mx.cpu(i) for i in range(n or 1)]


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware_summary(lang: str = "en") -> str:
    """One line naming the hardware and MXNet build, printed beside every measured
    figure.

    ``lang="zh"`` gives the same line in Chinese (see :func:`hardware_in`).

    >>> "mxnet 1.9" in hardware_summary()
    True
    >>> "个核心" in hardware_summary("zh")
    True
    """
    gpus = num_gpus()
    cores = os.cpu_count() or 1
    what = f"{gpus} GPU(s)" if gpus else "no GPU"
    line = f"{_cpu_name()}, {cores} cores, {what}; mxnet {mx.__version__}"
    return hardware_in(line, lang)


_HARDWARE = re.compile(r"^(?P<cpu>.*), (?P<cores>\d+) cores, "
                       r"(?:no GPU|(?P<gpus>\d+) GPU\(s\)); mxnet (?P<mxnet>\S+)$")


def hardware_in(summary: str, lang: str) -> str:
    """A line of :func:`hardware_summary` (in English, e.g. read from a results file) in
    ``lang``.

    >>> hardware_in("Xeon, 2 cores, no GPU; mxnet 1.9.1", "zh")
    'Xeon，2 个核心，无 GPU；mxnet 1.9.1'
    >>> hardware_in("Xeon, 8 cores, 2 GPU(s); mxnet 1.9.1", "zh")
    'Xeon，8 个核心，2 个 GPU；mxnet 1.9.1'
    """
    if lang not in ("en", "zh"):
        raise ValueError(f"lang must be 'en' or 'zh', got {lang!r}")
    if lang == "en":
        return summary
    found = _HARDWARE.match(summary)
    if found is None:
        raise ValueError("summary must be a line of mgpu.hardware_summary() (\"<cpu>, "
                         "<n> cores, no GPU; mxnet <version>\"), got "
                         f"{summary!r}: pass that line unchanged")
    gpus = f"{found['gpus']} 个 GPU" if found["gpus"] else "无 GPU"
    return f"{found['cpu']}，{found['cores']} 个核心，{gpus}；mxnet {found['mxnet']}"
