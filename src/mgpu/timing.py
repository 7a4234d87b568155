"""Timing asynchronous MXNet work honestly."""

from __future__ import annotations

import time

from mgpu._mx import mx

__all__ = ["Benchmark"]


class Benchmark:
    """Time a block of MXNet work, waiting for the engine to finish it before stopping the clock.

    MXNet returns from an operator call as soon as the work is *queued*; without a
    synchronisation point a timer measures only how fast Python pushed the work. ``Benchmark``
    calls :func:`mx.nd.waitall` before starting and before stopping (pass ``sync=False`` to
    measure the push alone). The elapsed seconds are in ``.seconds`` afterwards.

    >>> with Benchmark("ten sums", verbose=False) as b:
    ...     x = sum(mx.nd.ones((100, 100)) for _ in range(10))
    >>> b.seconds > 0
    True
    """

    def __init__(self, description: str = "done", sync: bool = True, verbose: bool = True):
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
