"""Looking at MXNet's engine from the outside: its threads, and the memory a long queue
holds.

The engine chapter measures what the Python *frontend* and the C++ *backend* (the
engine's worker threads) each do. Two of its experiments need a process of their own,
because MXNet reads its thread settings once, when the engine starts, and because a
process that has run other work holds that work's memory:

- :func:`thread_census`: how many threads a fresh process has after importing MXNet and
  after running work on 1, 2, ... CPU devices, with given environment variables.
- :func:`queue_memory`: a loop that pushes work faster than the engine runs it, with or
  without waiting every step, and the process's resident memory over time;
  :func:`mgpu.book.plot.draw_queue_memory` draws it.

:func:`thread_count`, :func:`resident_mb` and :func:`resident_peak_mb` are the
measurements, for the current process. The programs the fresh processes run are in
:mod:`mgpu.programs.engine`; this module imports MXNet only inside its functions, so
that they can count a process's threads before MXNet starts any.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from mgpu.programs.run import run_program

__all__ = [
    "QueueRun",
    "queue_memory",
    "resident_mb",
    "resident_peak_mb",
    "thread_census",
    "thread_count",
]


def thread_count() -> int:
    """The number of threads of this process (the entries of ``/proc/self/task``, on
    Linux).

    >>> thread_count() >= 1
    True
    """
    try:
        return len(os.listdir("/proc/self/task"))
    except FileNotFoundError:
        raise RuntimeError("thread_count needs Linux's /proc file system, which this "
                           "machine does not have; run the engine chapter on Linux"
                           ) from None


def resident_mb() -> float:
    """The resident memory of this process now (``VmRSS`` in ``/proc/self/status``), in
    MB.

    >>> resident_mb() > 1
    True
    """
    return _status_mb("VmRSS")


def resident_peak_mb() -> float:
    """The peak resident memory of this process (``VmHWM`` in ``/proc/self/status``),
    in MB: since it started, or since a reset by writing ``5`` to
    ``/proc/self/clear_refs``.

    >>> resident_peak_mb() > 1
    True
    """
    return _status_mb("VmHWM")


def _status_mb(field: str) -> float:
    """A memory ``field`` of ``/proc/self/status`` (``VmRSS``, ``VmHWM``, ...), in MB.

    >>> _status_mb("VmRSS") > 1 and _status_mb("VmHWM") > 1
    True

    (The kernel updates ``VmHWM`` lazily: just after a reset through ``clear_refs`` it
    can lag a little behind ``VmRSS``.)
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024 / 1e6
    except FileNotFoundError:
        pass
    raise RuntimeError(f"{field} (for resident_mb and queue_memory) needs Linux's "
                       "/proc/self/status, which this machine does not have; run the "
                       "engine chapter on Linux")


def thread_census(devices: int, env: Mapping[str, str] | None = None,
                  timeout: float = 300) -> dict[str, int]:
    """Threads of a fresh process: at start, after importing MXNet, after using each CPU
    device.

    The process imports MXNet (through ``mgpu``), then sums a 1000 x 1000 array on
    ``cpu(0)``, ``cpu(1)``, ... in turn and counts its threads after each. ``env`` is
    added to the environment: e.g. ``{"MXNET_CPU_WORKER_NTHREADS": "2"}``, which MXNet
    reads only when its engine starts. The keys of the result are ``"start"``,
    ``"import"`` and ``"cpu(i)"``.

    >>> counts = thread_census(2)
    >>> list(counts), counts["cpu(1)"] > counts["cpu(0)"] > counts["import"]
    (['start', 'import', 'cpu(0)', 'cpu(1)'], True)
    """
    from mgpu.checks import positive_int  # (it imports MXNet)

    devices = positive_int("devices", devices)
    return run_program("thread_census", env=env, timeout=timeout, devices=devices)[-1]


@dataclass(frozen=True)
class QueueRun:
    """What :func:`queue_memory` measured: times, memory, and memory over time."""

    wait: bool  #: whether the loop waited for every step
    steps: int  #: the number of steps pushed
    batch_mb: float  #: the size of one step's input, in MB
    push_s: float  #: seconds until Python had pushed the last step
    finish_s: float  #: seconds until the engine had finished them all
    start_mb: float  #: resident memory when the loop started
    #: the peak resident memory during the loop (``VmHWM``, reset when the loop started)
    peak_mb: float
    #: (seconds since the start, resident MB), sampled
    samples: list[tuple[float, float]]

    @property
    def growth_mb(self) -> float:
        """How far the resident memory rose above its level at the start of the loop, at
        its highest during the loop.

        >>> QueueRun(True, 2, 4.0, 1.0, 1.0, 100.0, 105.0, []).growth_mb
        5.0
        """
        return self.peak_mb - self.start_mb


def queue_memory(wait: bool, steps: int = 40, size: int = 1024,
                 env: Mapping[str, str] | None = None,
                 timeout: float = 600) -> QueueRun:
    """Push ``steps`` steps of work in a fresh process; record its memory as they run.

    Every step allocates a new ``size`` x ``size`` float32 input with ``mx.nd.empty``
    (MXNet allocates it at once, in the frontend), asks the engine to fill it, and
    pushes a matrix product and a sum on it. With ``wait=True`` Python waits for each
    step's sum before pushing the next; with ``wait=False`` it pushes all the steps at
    once, and every pushed input stays allocated until the engine has run the operations
    that read it.

    The process runs with glibc's ``MALLOC_MMAP_THRESHOLD_`` at 128 KiB (unless ``env``
    sets it): every buffer then comes from the operating system and goes back to it when
    MXNet frees it, so the resident memory follows the live arrays instead of glibc's
    caches.

    The peak is the process's ``VmHWM`` (``/proc/self/status``), reset when the loop
    starts by writing ``5`` to ``/proc/self/clear_refs`` (Linux 4.0 or later), so it
    covers the loop only. ``ru_maxrss`` would not do: it keeps the peak carried over by
    ``exec`` (``exec_mmap`` in Linux's ``fs/exec.c``), which ``clear_refs`` does not
    reset, and a process that Python's ``subprocess`` starts carries over its parent's.

    >>> run = queue_memory(wait=True, steps=3, size=64)
    >>> run.steps, run.finish_s >= run.push_s, run.peak_mb >= run.start_mb
    (3, True, True)
    """
    from mgpu.checks import positive_int  # (it imports MXNet)

    if not isinstance(wait, bool):
        raise TypeError(f"wait must be True or False, got {wait!r}")
    steps = positive_int("steps", steps)
    size = positive_int("size", size, minimum=4)
    env = {"MALLOC_MMAP_THRESHOLD_": "131072", **(env or {})}
    r = run_program("queue_memory", env=env, timeout=timeout, wait=wait, steps=steps,
                    size=size)[-1]
    return QueueRun(wait, steps, size * size * 4 / 1e6, r["push_s"], r["finish_s"],
                    r["start_mb"], r["peak_mb"], [tuple(s) for s in r["samples"]])

