"""Devices of different speeds: measure each one, then split batches in proportion.

With an even split every step waits for the slowest device. If device ``i`` processes
``s_i`` examples per second, giving it a share of the batch proportional to ``s_i``
makes all devices finish together; :func:`mgpu.parallel.split_and_load` and
:func:`mgpu.loop.train` take such ``weights=``, and
:func:`mgpu.probes.timing.device_speeds` measures them. A :class:`CoTenant` makes one of
several identical devices slower, to try this out.
"""

from __future__ import annotations

from mgpu.backend import mx
from mgpu.probes.timing import Benchmark

__all__ = ["CoTenant"]


class CoTenant:
    """Another job sharing a device: pushes ``n`` products of ``size x size`` matrices
    per step.

    It makes one of several identical devices slower in a controlled, repeatable way,
    standing in for a slower GPU model or a GPU that another process also uses.

    >>> slow = CoTenant(mx.cpu(1), n=2, size=64)
    >>> slow(mx.cpu(0)), slow(mx.cpu(1))  # only its own device gets the extra work
    (0, 2)
    """

    def __init__(self, device: mx.Context, n: int = 8, size: int = 512):
        self.device, self.n = device, n
        self._a = mx.nd.ones((size, size), ctx=device) / size

    @classmethod
    def taking(cls, device: mx.Context, seconds: float, size: int = 512) -> CoTenant:
        """A co-tenant whose work per step takes about ``seconds`` on ``device`` alone.

        >>> CoTenant.taking(mx.cpu(1), 0.001, size=64).n >= 1
        True
        """
        probe = cls(device, n=4, size=size)
        probe(device)  # warm-up
        with Benchmark(verbose=False) as timer:
            probe(device)
        per_product = timer.seconds / 4
        return cls(device, n=max(1, round(seconds / per_product)), size=size)

    def __call__(self, device: mx.Context) -> int:
        if device != self.device:
            return 0
        for _ in range(self.n):
            mx.nd.dot(self._a, self._a)
        return self.n
