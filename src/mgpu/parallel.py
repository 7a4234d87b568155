"""Moving data to the devices, written from scratch: batches and parameters.

These are two of the functions the from-scratch chapter teaches: splitting a minibatch
across devices (:func:`split_and_load`, with :func:`split_sizes`) and giving every
device its own copy of the parameters (:func:`get_params`). The third, summing gradients
across devices, is in :mod:`mgpu.collectives`. MXNet has its own versions
(``gluon.utils.split_and_load`` and the KVStore); the book compares them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mgpu.backend import mx
from mgpu.checks import check_devices

__all__ = ["SplitError", "get_params", "split_and_load", "split_sizes"]

NDArray = mx.nd.NDArray


class SplitError(ValueError):
    """A batch that cannot be split over the devices as asked."""


def split_sizes(
    n: int, k: int, even_split: bool = True, weights: Sequence[float] | None = None
) -> list[int]:
    """How many of ``n`` examples each of ``k`` devices gets.

    Without ``weights`` the split is even; a remainder is an error when ``even_split``
    is true and is otherwise spread one example at a time over the first devices. With
    ``weights`` (one positive number per device, e.g. its measured speed) the sizes are
    proportional to the weights, rounded by largest remainder, and every device still
    gets at least one example.

    >>> split_sizes(256, 2)
    [128, 128]
    >>> split_sizes(38, 8, even_split=False)
    [5, 5, 5, 5, 5, 5, 4, 4]
    >>> split_sizes(100, 2, weights=[3, 1])
    [75, 25]
    >>> split_sizes(10, 3)
    Traceback (most recent call last):
    ...
    mgpu.parallel.SplitError: a batch of 10 examples does not split evenly over 3 ...
    """
    if k < 1:
        raise SplitError("no devices given: pass a non-empty list of devices")
    if n < k:
        raise SplitError(
            f"a batch of {n} examples cannot be split over {k} devices: every device "
            f"needs at least one example; use a batch of at least {k} examples or "
            "fewer devices"
        )
    if weights is not None:
        w = np.asarray(weights, dtype=float)
        if w.shape != (k,):
            raise SplitError(f"got {w.size} weights for {k} devices; give one weight "
                             "per device")
        if not np.all(np.isfinite(w)) or np.any(w <= 0):
            raise SplitError("weights must be positive finite numbers, got "
                             f"{list(weights)}")
        # Proportional shares, rounded by largest remainder; then no device left empty.
        share = n * w / w.sum()
        sizes = np.floor(share).astype(int)
        order = np.argsort(-(share - sizes), kind="stable")
        sizes[order[: n - int(sizes.sum())]] += 1
        while (sizes == 0).any():
            sizes[np.argmax(sizes)] -= 1
            sizes[np.argmin(sizes)] += 1
        return [int(s) for s in sizes]
    q, r = divmod(n, k)
    if r and even_split:
        uneven = [q + 1] * r + [q] * (k - r)
        raise SplitError(
            f"a batch of {n} examples does not split evenly over {k} devices "
            f"({n} = {k} x {q} + {r}); use a batch size divisible by {k}, "
            f"or even_split=False to get sizes {uneven}"
        )
    return [q + 1] * r + [q] * (k - r)


def _load_one(data, sizes: list[int], devices: Sequence[mx.Context]) -> list[NDArray]:
    parts, start = [], 0
    for size, dev in zip(sizes, devices, strict=True):
        piece = data[start : start + size]
        if isinstance(piece, NDArray):
            parts.append(piece.as_in_context(dev))
        else:  # numpy: each slice straight to its device, never the whole batch first
            parts.append(mx.nd.array(piece, ctx=dev, dtype=piece.dtype))
        start += size
    return parts


def split_and_load(
    data,
    devices: Sequence[mx.Context],
    even_split: bool = True,
    weights: Sequence[float] | None = None,
):
    """Split ``data`` along axis 0 and copy slice ``i`` to ``devices[i]``.

    ``data`` is a NumPy array or an NDArray, or a tuple of them with the same number of
    examples (a batch with several inputs, e.g. images and labels): then each is split
    with the same sizes and a tuple of lists is returned. See :func:`split_sizes` for
    ``even_split`` and ``weights``.

    >>> X = np.arange(12).reshape(6, 2)
    >>> parts = split_and_load(X, [mx.cpu(0), mx.cpu(1)])
    >>> [(p.shape, p.context) for p in parts]
    [((3, 2), cpu(0)), ((3, 2), cpu(1))]
    >>> xs, ys = split_and_load((X, np.arange(6)), [mx.cpu(0), mx.cpu(1)])
    >>> ys[1].asnumpy().tolist()
    [3, 4, 5]
    """
    devices = check_devices(devices)
    if isinstance(data, tuple | list):
        if not data:
            raise SplitError("split_and_load got an empty tuple of inputs")
        lengths = [_num_examples(d) for d in data]
        if len(set(lengths)) != 1:
            raise SplitError(
                "the inputs of one batch have different numbers of examples "
                f"{lengths}; every input must have the same size along axis 0"
            )
        sizes = split_sizes(lengths[0], len(devices), even_split, weights)
        return tuple(_load_one(d, sizes, devices) for d in data)
    sizes = split_sizes(_num_examples(data), len(devices), even_split, weights)
    return _load_one(data, sizes, devices)


def _num_examples(data) -> int:
    shape = getattr(data, "shape", None)
    if shape is None:
        raise SplitError(
            "split_and_load needs a NumPy array or an NDArray, got "
            f"{type(data).__name__}"
        )
    if len(shape) == 0:
        raise SplitError("cannot split a 0-d array: the batch needs an axis 0 of "
                         "examples")
    return int(shape[0])


def get_params(params: Sequence[NDArray], device: mx.Context) -> list[NDArray]:
    """Copy parameters to ``device`` and attach a gradient buffer to each copy.

    >>> w = [mx.nd.ones((2, 2))]
    >>> (c,) = get_params(w, mx.cpu(1))
    >>> c.context, c.grad.shape
    (cpu(1), (2, 2))
    """
    copies = [p.copyto(device) for p in params]
    for c in copies:
        c.attach_grad()
    return copies
