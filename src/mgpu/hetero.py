"""Devices of different speeds: measure each one, then split batches in proportion.

With an even split every step waits for the slowest device. If device ``i`` processes ``s_i``
examples per second, giving it a share of the batch proportional to ``s_i`` makes all devices
finish together; :func:`mgpu.parallel.split_and_load` and :func:`mgpu.train.train` take such
``weights=``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from mgpu._mx import mx
from mgpu.parallel import split_and_load

__all__ = ["CoTenant", "device_speeds", "step_time"]


class CoTenant:
    """Another job sharing a device: pushes ``n`` products of ``size x size`` matrices per step.

    It makes one of several identical devices slower in a controlled, repeatable way, standing in
    for a slower GPU model or a GPU that another process also uses.

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
        mx.nd.waitall()
        start = time.perf_counter()
        probe(device)
        mx.nd.waitall()
        per_product = (time.perf_counter() - start) / 4
        return cls(device, n=max(1, round(seconds / per_product)), size=size)

    def __call__(self, device: mx.Context) -> int:
        if device != self.device:
            return 0
        for _ in range(self.n):
            mx.nd.dot(self._a, self._a)
        return self.n


def _forward_backward(net, X, y, devices, weights, extra_work, loss):
    Xs, ys = split_and_load((X, y), devices, even_split=False, weights=weights)
    with mx.autograd.record():
        losses = [loss(net(a), b) for a, b in zip(Xs, ys)]
    for lo in losses:
        lo.backward()
    if extra_work is not None:
        for d in devices:
            extra_work(d)


def step_time(
    net: mx.gluon.Block,
    devices: Sequence[mx.Context],
    X: np.ndarray,
    y: np.ndarray,
    weights: Sequence[float] | None = None,
    extra_work: Callable[[mx.Context], object] | None = None,
    repeats: int = 5,
) -> float:
    """Median seconds of one forward and backward pass of ``(X, y)`` split over ``devices``.

    ``net`` must already be initialised on ``devices``. ``extra_work(device)`` is called for every
    device in every step (e.g. a :class:`CoTenant`). One untimed step warms up first.

    >>> net = mx.gluon.nn.Dense(3); net.initialize(ctx=[mx.cpu(0), mx.cpu(1)])
    >>> X, y = np.ones((8, 4), np.float32), np.zeros(8, np.float32)
    >>> step_time(net, [mx.cpu(0), mx.cpu(1)], X, y, repeats=2) > 0
    True
    """
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    times = []
    for r in range(repeats + 1):
        mx.nd.waitall()
        start = time.perf_counter()
        _forward_backward(net, X, y, list(devices), weights, extra_work, loss)
        mx.nd.waitall()
        if r:  # the first step is a warm-up
            times.append(time.perf_counter() - start)
    return float(np.median(times))


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
    :func:`mgpu.train.train`.

    >>> net = mx.gluon.nn.Dense(3); net.initialize(ctx=[mx.cpu(0), mx.cpu(1)])
    >>> X, y = np.ones((8, 4), np.float32), np.zeros(8, np.float32)
    >>> len(device_speeds(net, [mx.cpu(0), mx.cpu(1)], X, y, repeats=2))
    2
    """
    return [len(y) / step_time(net, [d], X, y, None, extra_work, repeats) for d in devices]
