"""The engine chapter's programs, each run in a fresh process by
:mod:`mgpu.probes.engine`: MXNet reads its thread settings once, when its engine starts,
and a process that has run other work holds that work's memory.

- :func:`count_threads` (``python -m mgpu thread_census``) for
  :func:`mgpu.probes.engine.thread_census`;
- :func:`fill_queue` (``python -m mgpu queue_memory``) for
  :func:`mgpu.probes.engine.queue_memory`.

This module imports MXNet only inside the programs: :func:`count_threads` counts the
threads of the process before MXNet is imported.
"""

from __future__ import annotations

import sys
import threading
import time

from mgpu.probes.engine import resident_mb, resident_peak_mb, thread_count
from mgpu.programs.report import report

__all__ = ["count_threads", "fill_queue"]


def count_threads(devices: int) -> None:
    """Program: report the threads of this process at the start, after importing MXNet,
    and after a sum on each of ``cpu(0)``, ... ``cpu(devices - 1)`` in turn.

    Reports one dict with the keys ``"start"``, ``"import"`` and ``"cpu(i)"``; the
    process must not have imported MXNet yet.
    """
    if "mxnet" in sys.modules:
        raise RuntimeError("count_threads must start before MXNet is imported: run it "
                           "in a fresh process (python -m mgpu thread_census)")
    counts = {"start": thread_count()}
    from mgpu.backend import mx

    counts["import"] = thread_count()
    for i in range(devices):
        a = mx.nd.ones((1000, 1000), ctx=mx.cpu(i))
        # A reduction: MXNet runs it with OpenMP threads when it has several.
        a.sum().wait_to_read()
        counts[f"cpu({i})"] = thread_count()
    report(**counts)


def fill_queue(wait: bool, steps: int, size: int) -> None:
    """Program: push ``steps`` steps of work on ``size`` x ``size`` inputs, waiting for
    each (``wait``) or not; report the times, the resident memory at the start and at
    its peak during the loop, and samples of it every 5 ms.

    :func:`mgpu.probes.engine.queue_memory` describes the work and the measurement, and
    runs this in a fresh process.
    """
    from mgpu.backend import mx

    n = size
    w = mx.nd.ones((n, n // 4), ctx=mx.cpu(0)) / n
    mx.nd.dot(mx.nd.ones((n, n)), w).wait_to_read()  # warm up
    samples, done = [], threading.Event()

    def sample(t0):
        while not done.is_set():
            samples.append((time.perf_counter() - t0, resident_mb()))
            time.sleep(0.005)

    start_mb = resident_mb()
    # Reset the peak (VmHWM) to the current resident memory, so that it covers the loop
    # only: ru_maxrss keeps the peak carried over by exec, here the parent process's.
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError as e:
        sys.exit("queue_memory needs Linux 4.0 or later: resetting the peak memory "
                 f"(VmHWM) by writing 5 to /proc/self/clear_refs failed: {e}")
    t0 = time.perf_counter()
    sampler = threading.Thread(target=sample, args=(t0,))
    sampler.start()
    for i in range(steps):
        batch = mx.nd.empty((n, n), ctx=mx.cpu(0))  # allocated now, by the frontend
        batch[:] = i                                # filled later, by the engine
        out = mx.nd.dot(batch, w).sum()
        if wait:
            out.wait_to_read()
    push_s = time.perf_counter() - t0
    mx.nd.waitall()
    finish_s = time.perf_counter() - t0
    time.sleep(0.05)
    done.set()
    sampler.join()
    report(push_s=push_s, finish_s=finish_s, start_mb=start_mb,
           peak_mb=resident_peak_mb(), samples=samples)
