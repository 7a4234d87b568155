"""The parallel primitives of data parallelism, written from scratch.

These are the functions the from-scratch chapter teaches: splitting a minibatch across devices
(:func:`split_and_load`), summing gradients across devices (:func:`allreduce`) and giving every
device its own copy of the parameters (:func:`get_params`). MXNet has its own versions
(``gluon.utils.split_and_load`` and the KVStore); the book compares them.

:func:`allreduce` is the simplest allreduce (sum on the first device, copy back). Two faster ones
follow: :func:`allreduce_ring` spreads the summing of one tensor over the devices, and
:func:`allreduce_many` handles all of a model's gradients at once, packing the small ones
together; ``mgpu.train`` uses it. ``bench/run.py`` measures all of them against the KVStore.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mgpu._mx import mx

__all__ = [
    "SplitError",
    "allreduce",
    "allreduce_many",
    "allreduce_ring",
    "get_params",
    "split_and_load",
    "split_sizes",
]

NDArray = mx.nd.NDArray


class SplitError(ValueError):
    """A batch that cannot be split over the devices as asked."""


def split_sizes(
    n: int, k: int, even_split: bool = True, weights: Sequence[float] | None = None
) -> list[int]:
    """How many of ``n`` examples each of ``k`` devices gets.

    Without ``weights`` the split is even; a remainder is an error when ``even_split`` is true and
    is otherwise spread one example at a time over the first devices. With ``weights`` (one
    positive number per device, e.g. its measured speed) the sizes are proportional to the weights,
    rounded by largest remainder, and every device still gets at least one example.

    >>> split_sizes(256, 2)
    [128, 128]
    >>> split_sizes(38, 8, even_split=False)
    [5, 5, 5, 5, 5, 5, 4, 4]
    >>> split_sizes(100, 2, weights=[3, 1])
    [75, 25]
    >>> split_sizes(10, 3)
    Traceback (most recent call last):
    ...
    mgpu.parallel.SplitError: a batch of 10 examples does not split evenly over 3 devices ...
    """
    if k < 1:
        raise SplitError("no devices given: pass a non-empty list of devices")
    if n < k:
        raise SplitError(
            f"a batch of {n} examples cannot be split over {k} devices: every device needs at "
            f"least one example; use a batch of at least {k} examples or fewer devices"
        )
    if weights is not None:
        w = np.asarray(weights, dtype=float)
        if w.shape != (k,):
            raise SplitError(f"got {w.size} weights for {k} devices; give one weight per device")
        if not np.all(np.isfinite(w)) or np.any(w <= 0):
            raise SplitError(f"weights must be positive finite numbers, got {list(weights)}")
        # Proportional shares, rounded by largest remainder; then no device is left empty.
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
        else:  # numpy: copy each slice straight to its device, never the whole batch first
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

    ``data`` is a NumPy array or an NDArray, or a tuple of them with the same number of examples
    (a batch with several inputs, e.g. images and labels): then each is split with the same
    sizes and a tuple of lists is returned. See :func:`split_sizes` for ``even_split`` and
    ``weights``.

    >>> X = np.arange(12).reshape(6, 2)
    >>> parts = split_and_load(X, [mx.cpu(0), mx.cpu(1)])
    >>> [(p.shape, p.context) for p in parts]
    [((3, 2), cpu(0)), ((3, 2), cpu(1))]
    >>> xs, ys = split_and_load((X, np.arange(6)), [mx.cpu(0), mx.cpu(1)])
    >>> ys[1].asnumpy().tolist()
    [3, 4, 5]
    """
    devices = list(devices)
    if isinstance(data, tuple | list):
        if not data:
            raise SplitError("split_and_load got an empty tuple of inputs")
        lengths = [_num_examples(d) for d in data]
        if len(set(lengths)) != 1:
            raise SplitError(
                f"the inputs of one batch have different numbers of examples {lengths}; "
                "every input must have the same size along axis 0"
            )
        sizes = split_sizes(lengths[0], len(devices), even_split, weights)
        return tuple(_load_one(d, sizes, devices) for d in data)
    sizes = split_sizes(_num_examples(data), len(devices), even_split, weights)
    return _load_one(data, sizes, devices)


def _num_examples(data) -> int:
    shape = getattr(data, "shape", None)
    if shape is None:
        raise SplitError(
            f"split_and_load needs a NumPy array or an NDArray, got {type(data).__name__}"
        )
    if len(shape) == 0:
        raise SplitError("cannot split a 0-d array: the batch needs an axis 0 of examples")
    return int(shape[0])


def _check_allreduce(arrays: Sequence[NDArray], name: str = "allreduce") -> None:
    if not arrays:
        raise ValueError(f"{name} got no arrays: pass one array per device")
    for i, a in enumerate(arrays):
        if not isinstance(a, NDArray):
            raise TypeError(f"{name}: item {i} is a {type(a).__name__}, not an mx.nd.NDArray")
    first = arrays[0]
    for i, a in enumerate(arrays[1:], start=1):
        if a.shape != first.shape or a.dtype != first.dtype:
            raise ValueError(
                f"{name}: array {i} has shape {a.shape} and dtype {np.dtype(a.dtype).name} "
                f"but array 0 has shape {first.shape} and dtype {np.dtype(first.dtype).name}; "
                "all arrays must be copies of the same tensor"
            )
    seen: dict[mx.Context, int] = {}
    for i, a in enumerate(arrays):
        if a.context in seen:
            raise ValueError(
                f"{name}: arrays {seen[a.context]} and {i} both live on {a.context}; "
                "pass exactly one array per device"
            )
        seen[a.context] = i


def allreduce(arrays: Sequence[NDArray]) -> None:
    """Sum same-shaped arrays that live on different devices; write the sum back into each.

    The reduction happens on the first array's device, then the sum is copied back to the others.
    Every array is updated *in place* (``a[:] = total``), so the caller's references (e.g. each
    device's gradients) see the sum; rebinding a list entry instead would leave the other devices
    training on their own gradients.

    >>> a = [mx.nd.ones((2,), ctx=mx.cpu(i)) * (i + 1) for i in range(3)]
    >>> allreduce(a)
    >>> [x.asnumpy().tolist() for x in a]
    [[6.0, 6.0], [6.0, 6.0], [6.0, 6.0]]
    """
    _check_allreduce(arrays)
    total = arrays[0]
    for a in arrays[1:]:
        total += a.copyto(total.context)
    for a in arrays[1:]:
        total.copyto(a)


def _chunk_bounds(n: int, k: int) -> list[int]:
    """Where ``k`` nearly equal chunks of ``n`` elements start (and the last one ends)."""
    q, r = divmod(n, k)
    bounds = [0]
    for i in range(k):
        bounds.append(bounds[-1] + q + (1 if i < r else 0))
    return bounds


def allreduce_ring(arrays: Sequence[NDArray]) -> None:
    """Allreduce in two phases that spread the work over the devices (reduce-scatter, all-gather).

    Every array is cut into ``k`` chunks (``k`` devices). 1. Reduce-scatter: device ``i`` copies
    chunk ``i`` of every other array and sums the ``k`` copies with one ``add_n``, so each device
    sums ``1/k`` of the elements instead of device 0 summing all of them. 2. All-gather: each
    summed chunk is copied into every array. Every device receives ``2(k-1)/k`` of the tensor in
    all, less than two tensors whatever ``k``, where reduce-then-broadcast makes the first device
    receive ``k-1`` tensors and send ``k-1`` (the idea behind ring allreduce). The result is
    written in place, as by :func:`allreduce`. Arrays with fewer elements than devices are reduced
    on the first device.

    >>> a = [mx.nd.arange(5, ctx=mx.cpu(i)) * (i + 1) for i in range(3)]
    >>> allreduce_ring(a)
    >>> [x.asnumpy().tolist() for x in a]
    [[0.0, 6.0, 12.0, 18.0, 24.0], [0.0, 6.0, 12.0, 18.0, 24.0], [0.0, 6.0, 12.0, 18.0, 24.0]]
    """
    _check_allreduce(arrays, "allreduce_ring")
    k, n = len(arrays), arrays[0].size
    if k == 1:
        return
    if n < k:  # not one element per device: sum on the first device, then copy back
        mx.nd.add_n(*arrays[:1], *(a.copyto(arrays[0].context) for a in arrays[1:]),
                    out=arrays[0])
        for a in arrays[1:]:
            arrays[0].copyto(a)
        return
    flat = [a.reshape((-1,)) for a in arrays]  # views: writing into them writes into `arrays`
    b = _chunk_bounds(n, k)
    # Reduce-scatter. The sums go to fresh arrays, not into `arrays`: MXNet tracks dependencies
    # per array, not per chunk, so writing chunk i of array i in place would make every later
    # read of array i (for the other chunks) wait for it, and the devices would take turns.
    sums = []
    for i in range(k):
        ctx = arrays[i].context
        parts = [flat[j][b[i] : b[i + 1]] for j in range(k)]
        sums.append(mx.nd.add_n(parts[i], *(p.copyto(ctx) for j, p in enumerate(parts) if j != i)))
    # All-gather: every device receives every summed chunk.
    for i, total in enumerate(sums):
        for j in range(k):
            total.copyto(flat[j][b[i] : b[i + 1]])


#: Tensors with fewer elements than this are packed into one buffer by :func:`allreduce_many`.
SMALL_TENSOR = 1 << 16


@dataclass
class _Unit:
    """One reduction of :func:`allreduce_many`: a big tensor, or the buffer of packed small ones."""

    tensor: int | None  # index into the caller's list; None for the packed buffer
    owner: int  # the device that sums this unit and sends the sum back
    others: list[int]  # the other devices
    inbox: list[NDArray]  # on the owner: one buffer per other device, for its copy


@dataclass
class _Plan:
    """What :func:`allreduce_many` allocates once for a given set of shapes and devices."""

    packed: list[int]  # indices of the small tensors that travel in one buffer
    buffers: list[NDArray]  # per device: the flat buffer for the packed tensors
    views: list[list[NDArray]]  # per device: views of that buffer, shaped like each small tensor
    units: list[_Unit]


_PLANS: OrderedDict[tuple, _Plan] = OrderedDict()
_MAX_PLANS = 4
# The arrays last checked by allreduce_many, by handle, with what the check found. Checking
# shapes, types and devices of 400 arrays costs milliseconds of Python, and a training loop
# passes the same gradient buffers every step. The arrays are kept alive here so that their
# handles cannot be reused by other arrays.
_LAST_CHECKED: list[tuple] = [((), None, None)]


def _check_many(tensors: Sequence[Sequence[NDArray]]) -> tuple:
    """Validate the arguments of :func:`allreduce_many`; return (shapes and types, devices)."""
    if not tensors:
        raise ValueError("allreduce_many got no tensors: pass one list of per-device arrays "
                         "per tensor")
    k = len(tensors[0])
    if k == 0:
        raise ValueError("allreduce_many: tensor 0 has no arrays: pass one array per device")
    contexts = None
    key = []
    for t, arrays in enumerate(tensors):
        if len(arrays) != k:
            raise ValueError(f"allreduce_many: tensor {t} has {len(arrays)} arrays but tensor 0 "
                             f"has {k}; pass one array per device for every tensor")
        for i, a in enumerate(arrays):
            if not isinstance(a, NDArray):
                raise TypeError(f"allreduce_many: tensor {t}, item {i} is a {type(a).__name__}, "
                                "not an mx.nd.NDArray")
        shape, dtype = arrays[0].shape, arrays[0].dtype
        ctxs = tuple(a.context for a in arrays)
        if contexts is None:
            contexts = ctxs
            if len(set(ctxs)) != k:
                raise ValueError(f"allreduce_many: tensor 0 has two arrays on one device "
                                 f"{list(ctxs)}; pass exactly one array per device")
        elif ctxs != contexts:
            raise ValueError(f"allreduce_many: tensor {t} lives on {list(ctxs)} but tensor 0 on "
                             f"{list(contexts)}; keep the same device order for every tensor")
        for i, a in enumerate(arrays[1:], start=1):
            if a.shape != shape or a.dtype != dtype:
                raise ValueError(
                    f"allreduce_many: tensor {t}: array {i} has shape {a.shape} and dtype "
                    f"{np.dtype(a.dtype).name} but array 0 has shape {shape} and dtype "
                    f"{np.dtype(dtype).name}; all arrays of a tensor must be copies of it"
                )
        key.append((shape, np.dtype(dtype).name))
    return tuple(key), contexts


def _check_many_cached(tensors: Sequence[Sequence[NDArray]]) -> tuple:
    """:func:`_check_many`, skipped when the very same arrays were checked last time."""
    try:
        handles = (*map(len, tensors), *(a.handle.value for arrays in tensors for a in arrays))
    except AttributeError:  # not an NDArray: _check_many says which
        return _check_many(tensors)
    last = _LAST_CHECKED[0]
    if handles == last[0]:
        return last[1]
    found = _check_many(tensors)
    _LAST_CHECKED[0] = (handles, found, [list(a) for a in tensors])
    return found


def _make_plan(shapes: tuple, contexts: tuple, small: int) -> _Plan:
    k = len(contexts)
    sizes = [int(np.prod(shape)) for shape, _ in shapes]
    # Only float32 tensors are packed: the multi-tensor copy used below (amp_multicast) handles
    # float32 everywhere but not every other type on every build.
    packed = [t for t, ((shape, dtype), n) in enumerate(zip(shapes, sizes, strict=True))
              if 0 < n < small and dtype == "float32" and len(shape) > 0]
    offsets = np.cumsum([0] + [sizes[t] for t in packed]).tolist()
    buffers = [mx.nd.zeros((offsets[-1],), ctx=c) for c in contexts] if packed else []
    views = [[buf[offsets[m] : offsets[m + 1]].reshape(shapes[t][0])
              for m, t in enumerate(packed)] for buf in buffers]
    # Units: each big tensor alone, and the packed buffer. Largest first, each goes to the device
    # that has the least to sum so far, so that every device sums about 1/k of the elements.
    jobs = [(offsets[-1], None, "float32")] if packed else []
    in_buffer = set(packed)
    jobs += [(sizes[t], t, shapes[t][1]) for t in range(len(shapes)) if t not in in_buffer]
    jobs.sort(key=lambda job: -job[0])
    load = [0] * k
    units = []
    for n, t, dtype in jobs:
        owner = load.index(min(load))
        load[owner] += n
        shape = (offsets[-1],) if t is None else shapes[t][0]
        others = [i for i in range(k) if i != owner]
        inbox = [mx.nd.empty(shape, ctx=contexts[owner], dtype=dtype) for _ in others]
        units.append(_Unit(t, owner, others, inbox))
    return _Plan(packed, buffers, views, units)


def allreduce_many(tensors: Sequence[Sequence[NDArray]], small: int = SMALL_TENSOR) -> None:
    """Allreduce many tensors at once (e.g. all of a model's gradients), in place.

    ``tensors[t][i]`` is tensor ``t`` on device ``i`` (e.g. ``[p.list_grad() for p in params]``).
    Calling :func:`allreduce` once per tensor costs a few engine operations per tensor and
    device, tens of microseconds of Python each; for a ResNet's 100-odd tensors, most of them
    small, that overhead takes as long as the arithmetic. So:

    1. *Fuse*: the float32 tensors with fewer than ``small`` elements are copied into one flat
       buffer per device, with one multi-tensor copy, and travel as one tensor.
    2. *Spread*: each big tensor, and the buffer, is summed on one device (its "owner"): the other
       devices copy it there, one ``add_n`` sums the copies, and the owner copies the sum back.
       Owners are chosen so that every device sums about the same number of elements.
    3. The packed tensors are copied back out of the buffer.

    The buffers (about ``k-1`` copies of the gradients, spread over the devices) are allocated on
    the first call for a given set of shapes and devices and reused by later calls; the last few
    such plans are kept.

    >>> grads = [[mx.nd.ones(shape, ctx=mx.cpu(i)) * (i + 1) for i in range(2)]
    ...          for shape in [(2, 3), (4,), (100_000,)]]
    >>> allreduce_many(grads)
    >>> [float(g[i].mean().asscalar()) for g in grads for i in range(2)]
    [3.0, 3.0, 3.0, 3.0, 3.0, 3.0]
    """
    shapes, contexts = _check_many_cached(tensors)
    k = len(contexts)
    if k == 1:
        return
    key = (shapes, contexts, small)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _make_plan(shapes, contexts, small)
        while len(_PLANS) > _MAX_PLANS:
            _PLANS.popitem(last=False)
    else:
        _PLANS.move_to_end(key)
    packed = plan.packed
    if packed:  # 1. fuse: one operation per device copies all small tensors into its buffer
        for i in range(k):
            mx.nd.amp_multicast(*(tensors[t][i] for t in packed), num_outputs=len(packed),
                                out=plan.views[i])
    for unit in plan.units:  # 2. each unit summed on its owner, then copied back
        arrays = plan.buffers if unit.tensor is None else tensors[unit.tensor]
        owner = arrays[unit.owner]
        for i, box in zip(unit.others, unit.inbox, strict=True):
            arrays[i].copyto(box)
        mx.nd.add_n(owner, *unit.inbox, out=owner)
        for i in unit.others:
            owner.copyto(arrays[i])
    if packed:  # 3. unfuse
        for i in range(k):
            mx.nd.amp_multicast(*plan.views[i], num_outputs=len(packed),
                                out=[tensors[t][i] for t in packed])


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
