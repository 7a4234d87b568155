"""Timing asynchronous MXNet work honestly: a timer that waits, step and device speeds,
and the engine's own timeline of which operator ran when, on which device and thread."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mgpu.backend import mx
from mgpu.step import forward_backward

__all__ = ["Benchmark", "EngineEvent", "device_speeds", "engine_operations",
           "engine_timeline", "event_category", "op_overhead", "step_time"]

# What the engine did, by operator name (the rest is forward and backward computation).
_SUM_OPS = {"add_n", "ElementwiseSum", "amp_multicast", "KVStoreReduce", "_grad_add",
            "broadcast_add", "elemwise_add", "_plus"}
_UPDATE_OPS = {"sgd_update", "sgd_mom_update", "multi_sgd_update", "_mul_scalar",
               "_div_scalar", "broadcast_sub", "elemwise_sub", "_minus", "SetValueOp"}
_ENGINE_OPS = {"DeleteVariable", "WaitForVar", "WaitForAll"}


class Benchmark:
    """Time a block of MXNet work, waiting for the engine to finish it before stopping
    the clock.

    MXNet returns from an operator call as soon as the work is *queued*; without a
    synchronisation point a timer measures only how fast Python pushed the work.
    ``Benchmark`` calls :func:`mx.nd.waitall` before starting and before stopping (pass
    ``sync=False`` to measure the push alone). The elapsed seconds are in ``.seconds``
    afterwards.

    >>> with Benchmark("ten sums", verbose=False) as b:
    ...     x = sum(mx.nd.ones((100, 100)) for _ in range(10))
    >>> b.seconds > 0
    True
    """

    def __init__(self, description: str = "done", sync: bool = True,
                 verbose: bool = True):
        self.description, self.sync, self.verbose = description, sync, verbose
        self.seconds = float("nan")

    def __enter__(self) -> Benchmark:
        mx.nd.waitall()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        if self.sync:
            mx.nd.waitall()
        self.seconds = time.perf_counter() - self._start
        if self.verbose:
            print(f"{self.description}: {self.seconds:.4f} s")


def step_time(
    net: mx.gluon.Block,
    devices: Sequence[mx.Context],
    X: np.ndarray,
    y: np.ndarray,
    weights: Sequence[float] | None = None,
    extra_work: Callable[[mx.Context], object] | None = None,
    repeats: int = 5,
) -> float:
    """Median seconds of one forward and backward pass of ``(X, y)`` split over
    ``devices``.

    ``net`` must already be initialised on ``devices``. ``extra_work(device)`` is called
    for every device in every step (e.g. a :class:`mgpu.probes.hetero.CoTenant`). One
    untimed step warms up first.

    >>> net = mx.gluon.nn.Dense(3); net.initialize(ctx=[mx.cpu(0), mx.cpu(1)])
    >>> X, y = np.ones((8, 4), np.float32), np.zeros(8, np.float32)
    >>> step_time(net, [mx.cpu(0), mx.cpu(1)], X, y, repeats=2) > 0
    True
    """
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    devices = list(devices)
    times = []
    for _ in range(repeats + 1):  # the first step is a warm-up
        with Benchmark(verbose=False) as timer:
            forward_backward(net, X, y, devices, loss, weights)
            if extra_work is not None:
                for d in devices:
                    extra_work(d)
        times.append(timer.seconds)
    return float(np.median(times[1:]))


def device_speeds(
    net: mx.gluon.Block,
    devices: Sequence[mx.Context],
    X: np.ndarray,
    y: np.ndarray,
    extra_work: Callable[[mx.Context], object] | None = None,
    repeats: int = 5,
) -> list[float]:
    """Examples per second of each device *alone* on the batch ``(X, y)``.

    Use the result as ``weights=`` for :func:`mgpu.parallel.split_and_load` or
    :func:`mgpu.loop.train`.

    >>> net = mx.gluon.nn.Dense(3); net.initialize(ctx=[mx.cpu(0), mx.cpu(1)])
    >>> X, y = np.ones((8, 4), np.float32), np.zeros(8, np.float32)
    >>> len(device_speeds(net, [mx.cpu(0), mx.cpu(1)], X, y, repeats=2))
    2
    """
    return [len(y) / step_time(net, [d], X, y, None, extra_work, repeats)
            for d in devices]


def op_overhead(
    devices: Sequence[mx.Context] = (mx.cpu(0), mx.cpu(1)),
    n: int = 500,
    repeats: int = 3,
) -> float:
    """Seconds per operation of a stream of tiny copies, from Python's push to the
    engine's completion: the *per-operation overhead* this book uses everywhere.

    ``n`` copies of a 16-element array from ``devices[0]`` to ``devices[1]`` move almost
    no data, so their wall time, waited for with :func:`mx.nd.waitall`, is almost all
    fixed cost: the Python call, the engine's scheduling and the copy's launch, partly
    overlapping as Python pushes while the engine runs. The result is the least over
    ``repeats`` of that time divided by ``n``: other work on the machine only adds
    time, so the least is the closest to the cost itself.

    >>> 0 < op_overhead(n=50, repeats=2) < 0.01
    True
    """
    if len(devices) != 2:
        raise ValueError(f"op_overhead: devices must be two devices (from, to), got "
                         f"{len(devices)}; pass e.g. (mx.cpu(0), mx.cpu(1))")
    if n < 1 or repeats < 1:
        raise ValueError(f"op_overhead: n and repeats must be at least 1, got n={n}, "
                         f"repeats={repeats}")
    source = mx.nd.ones((16,), ctx=devices[0])
    target = mx.nd.zeros((16,), ctx=devices[1])
    times = []
    for _ in range(repeats):
        mx.nd.waitall()
        start = time.perf_counter()
        for _ in range(n):
            source.copyto(target)
        mx.nd.waitall()
        times.append((time.perf_counter() - start) / n)
    return min(times)


@dataclass(frozen=True)
class EngineEvent:
    """One operator as MXNet's profiler saw it: its device, its thread, and when.

    ``device`` is the context the operator was pushed with, not the queue that ran it:
    MXNet's profiler files each operator under its context (``cpu(1)`` -> 1, pinned
    memory -> ``cpu_num_ + gpu_num_``, the number of processors in a CPU-only build:
    ``Profiler::DeviceIndex`` in ``src/profiler/profiler.h``), while operators pushed as
    ``FnProperty::kCPUPrioritized`` run on the CPU priority threads that all CPU devices
    share (``src/engine/threaded_engine_perdevice.cc``). ``thread`` tells which thread
    ran it.
    """

    name: str  #: the operator, e.g. ``"dot"`` or ``"CopyCPU2CPU"``
    #: the operator's device id as the profiler files it (its "process id")
    device: int
    thread: int  #: the engine thread that ran it
    start_ms: float  #: milliseconds after the first event
    end_ms: float


def engine_timeline(work: Callable[[], object]) -> list[EngineEvent]:
    """Run ``work()`` under MXNet's profiler and return every operator it ran, in start
    order.

    The profiler records each operator with its device and the thread that ran it, so
    a timeline shows what ran in parallel and on which thread. MXNet's profiler can be
    configured only once per process, so a second call raises a ``RuntimeError`` that
    says so.

    >>> a = [mx.nd.ones((64, 64), ctx=mx.cpu(i)) for i in range(2)]
    >>> events = engine_timeline(lambda: [mx.nd.dot(x, x) for x in a])
    >>> sorted({(e.name, e.device) for e in events if e.name == "dot"})
    [('dot', 0), ('dot', 1)]
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.json"
        mx.nd.waitall()
        try:
            mx.profiler.set_config(profile_all=True, aggregate_stats=False,
                                   filename=str(path))
        except mx.base.MXNetError:
            raise RuntimeError(
                "engine_timeline runs once per process: MXNet 1.9's profiler cannot "
                "be configured again after it wrote its trace; take the second "
                "timeline in a fresh process (another kernel, or mgpu.train_fresh for "
                "training)") from None
        mx.profiler.set_state("run")
        try:
            work()
            mx.nd.waitall()
        finally:
            mx.profiler.set_state("stop")
            mx.profiler.dump()
        trace = json.loads(path.read_text())["traceEvents"]
    begun: dict[tuple, list[float]] = {}
    spans = []
    for e in trace:
        key = (e.get("name"), e.get("pid"), e.get("tid"))
        if e.get("ph") == "B":
            begun.setdefault(key, []).append(e["ts"])
        elif e.get("ph") == "E" and begun.get(key):
            spans.append((begun[key].pop(), e["ts"], key))
    if not spans:
        return []
    t0 = min(start for start, _, _ in spans)
    return sorted((EngineEvent(name, int(pid), int(tid), (a - t0) / 1e3, (b - t0) / 1e3)
                   for a, b, (name, pid, tid) in spans), key=lambda ev: ev.start_ms)


#: The operation that separates the pieces of work of :func:`engine_operations`.
_MARKER_OP = "erf"


def event_category(name: str) -> str | None:
    """What kind of engine operator ``name`` is: ``"copy"``, ``"sum"`` (the sums and
    packing of an allreduce), ``"sgd"`` (the scalar and elementwise operators of an SGD
    update), ``"compute"`` (everything else: forward and backward), or ``None`` for the
    engine's own bookkeeping (``DeleteVariable``...). Names only: a loss's
    ``_mul_scalar`` counts as ``"sgd"`` too, and ``CopyCPU2CPU`` is also what
    ``p[:] = x`` runs on one device.

    >>> [event_category(n) for n in ("Convolution", "CopyCPU2CPU", "add_n",
    ...                               "_div_scalar", "DeleteVariable")]
    ['compute', 'copy', 'sum', 'sgd', None]
    """
    if name in _ENGINE_OPS:
        return None
    if name.startswith("Copy"):
        return "copy"
    if name in _SUM_OPS:
        return "sum"
    if name in _UPDATE_OPS:
        return "sgd"
    return "compute"


def engine_operations(*works: Callable[[], object]) -> list[list[EngineEvent]]:
    """The operations MXNet's engine runs for each of ``works``: the book's one way of
    counting engine operations (``len()`` of each list).

    The works run in turn under one :func:`engine_timeline` (MXNet's profiler records
    once per process), each followed by a wait and one ``erf`` operation that marks
    where the next begins. The engine's bookkeeping (``DeleteVariable``...,
    :func:`event_category`) is left out. The trace profiler leaves the
    engine's bulking on, so the count is that of a run without a profiler: the
    imperative backward pass runs as ``ImperativeBulk`` operations of up to 15
    operators (``Imperative::Backward``, ``src/imperative/imperative.cc``), each
    counted once. MXNet's profiler with ``aggregate_stats=True`` turns bulking off
    while it runs (``ThreadedEngine::bulk_size``, ``src/engine/threaded_engine.h``)
    and counts every operator.

    Warm the works up first: a first call may push one-off operations of MXNet's own
    (such as seeding random generators). The example runs in a fresh process, as the
    profiler would refuse a second recording:

    >>> import subprocess, sys
    >>> program = (
    ...     "import mgpu; a = mgpu.mx.nd.ones((8, 8))\\n"
    ...     "mgpu.mx.nd.dot(a, a).wait_to_read()  # warm-up\\n"
    ...     "pieces = mgpu.engine_operations(lambda: mgpu.mx.nd.dot(a, a),\\n"
    ...     "                                lambda: [a + 1 for _ in range(3)])\\n"
    ...     "print([[e.name for e in piece] for piece in pieces])")
    >>> subprocess.run([sys.executable, "-c", program], capture_output=True,
    ...                text=True, check=True).stdout
    "[['dot'], ['_plus_scalar', '_plus_scalar', '_plus_scalar']]\\n"
    >>> engine_operations()
    Traceback (most recent call last):
    ...
    ValueError: engine_operations: works is empty; pass one or more functions, e.g. ...
    """
    if not works:
        raise ValueError("engine_operations: works is empty; pass one or more "
                         "functions, e.g. engine_operations(lambda: step(X, y))")
    marker = mx.nd.zeros((1,))
    marker.wait_to_read()

    def run_all() -> None:
        for work in works:
            work()
            mx.nd.waitall()
            getattr(mx.nd, _MARKER_OP)(marker)
            mx.nd.waitall()

    pieces: list[list[EngineEvent]] = [[]]
    for event in engine_timeline(run_all):
        if event.name == _MARKER_OP:
            pieces.append([])
        elif event_category(event.name) is not None:
            pieces[-1].append(event)
    if len(pieces) != len(works) + 1:
        raise RuntimeError(
            f"engine_operations: found {len(pieces) - 1} marker operations "
            f"({_MARKER_OP!r}) for {len(works)} works; a work that runs {_MARKER_OP!r} "
            "itself cannot be counted this way")
    return pieces[:-1]
