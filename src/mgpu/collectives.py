"""Allreduce from scratch: sum a tensor's copies on several devices and give every
device the sum.

Three algorithms, from the simplest to the one ``mgpu.train`` uses:

- :func:`allreduce`: reduce on the first device, then copy the sum back (the
  from-scratch chapter's version).
- :func:`allreduce_scatter_gather`: reduce-scatter then all-gather, so that every device
  sums ``1/k`` of each tensor; its two phases are :func:`reduce_scatter` and
  :func:`all_gather` (chunks cut by :func:`chunk_bounds`), which the sharded optimizer
  (:mod:`mgpu.sharded`) uses apart.
- :func:`ring_allreduce`: the same two phases over a ring, each device talking only to
  its neighbour, with a count of the bytes every device sends.
- :class:`FusedAllreduce`: all of a model's gradients at once, the small ones packed
  into one buffer, each tensor summed on its own "owner" device. It checks its arrays
  and allocates its buffers once, when it is created, and is then called once per
  training step. :func:`allreduce_many` is the one-off form.

``bench`` measures all of them against MXNet's KVStore.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from mgpu.backend import mx
from mgpu.checks import positive_int

__all__ = [
    "SMALL_TENSOR",
    "FusedAllreduce",
    "Traffic",
    "all_gather",
    "allreduce",
    "allreduce_many",
    "allreduce_scatter_gather",
    "chunk_bounds",
    "reduce_scatter",
    "ring_allreduce",
]

NDArray = mx.nd.NDArray

#: Tensors with fewer elements than this are packed into one buffer by
#: :class:`FusedAllreduce`.
SMALL_TENSOR = 1 << 16


def _check_tensors(tensors: Sequence[Sequence[NDArray]], name: str,
                  single: bool = False) -> list[mx.Context]:
    """Check ``tensors[t][i]`` (tensor ``t`` on device ``i``); return the devices, in
    order.

    Every tensor needs one array per device, all of one shape and dtype, on the same
    devices in the same order. The error names the function (``name``), the tensor and
    the array; with ``single=True`` the caller passed one tensor's arrays and the
    messages speak of arrays only.

    >>> _check_tensors([[mx.nd.ones((2,), ctx=mx.cpu(0)),
    ...                  mx.nd.ones((2,), ctx=mx.cpu(1))]], "f")
    [cpu(0), cpu(1)]
    >>> _check_tensors([[mx.nd.ones((2,)), mx.nd.ones((3,), ctx=mx.cpu(1))]], "f")
    Traceback (most recent call last):
    ...
    ValueError: f: tensor 0: array 1 has shape (3,) and dtype float32 but array 0 ...
    """
    if single and not tensors[0]:
        raise ValueError(f"{name} got no arrays: pass one array per device")
    if not tensors:
        raise ValueError(f"{name} got no tensors: pass one list of per-device arrays "
                         "per tensor")
    if not tensors[0]:
        raise ValueError(f"{name}: tensor 0 has no arrays: pass one array per device")
    contexts: list[mx.Context] = []
    for t, arrays in enumerate(tensors):
        where = "" if single else f"tensor {t}, "
        for i, a in enumerate(arrays):
            if not isinstance(a, NDArray):
                raise TypeError(f"{name}: {where}item {i} is a {type(a).__name__}, "
                                "not an mx.nd.NDArray")
        ctxs = [a.context for a in arrays]
        if t == 0:
            contexts = ctxs
            for i, c in enumerate(ctxs):
                if c in ctxs[:i]:
                    raise ValueError(
                        f"{name}: arrays {ctxs.index(c)} and {i} both live on {c} (two "
                        "arrays on one device); pass exactly one array per device")
        elif len(ctxs) != len(contexts):
            raise ValueError(f"{name}: tensor {t} has {len(ctxs)} arrays but tensor 0 "
                             f"has {len(contexts)}; pass one array per device for "
                             "every tensor")
        elif ctxs != contexts:
            raise ValueError(f"{name}: tensor {t} lives on {ctxs} but tensor 0 on "
                             f"{contexts}; keep the same device order for every tensor")
        first = arrays[0]
        for i, a in enumerate(arrays[1:], start=1):
            if a.shape != first.shape or a.dtype != first.dtype:
                raise ValueError(
                    f"{name}: {'' if single else f'tensor {t}: '}array {i} has shape "
                    f"{a.shape} and dtype {np.dtype(a.dtype).name} but array 0 has "
                    f"shape {first.shape} and dtype {np.dtype(first.dtype).name}; all "
                    "arrays must be copies of the same tensor"
                )
    return contexts


def allreduce(arrays: Sequence[NDArray]) -> None:
    """Sum same-shaped arrays that live on different devices; write the sum back into
    each.

    The reduction happens on the first array's device, then the sum is copied back to
    the others. Every array is updated *in place* (``a[:] = total``), so the caller's
    references (e.g. each device's gradients) see the sum; rebinding a list entry
    instead would leave the other devices training on their own gradients.

    >>> a = [mx.nd.ones((2,), ctx=mx.cpu(i)) * (i + 1) for i in range(3)]
    >>> allreduce(a)
    >>> [x.asnumpy().tolist() for x in a]
    [[6.0, 6.0], [6.0, 6.0], [6.0, 6.0]]
    """
    _check_tensors([arrays], "allreduce", single=True)
    total = arrays[0]
    for a in arrays[1:]:
        total += a.copyto(total.context)
    for a in arrays[1:]:
        total.copyto(a)


def chunk_bounds(n: int, k: int) -> list[int]:
    """The bounds of ``k`` nearly equal chunks of ``n`` elements: the ``k`` starts,
    then the end. Chunk ``i`` is ``[bounds[i], bounds[i + 1])``; the first ``n % k``
    chunks hold one element more.

    >>> chunk_bounds(10, 4)
    [0, 3, 6, 8, 10]
    """
    if int(n) != n or n < 0:
        raise ValueError(f"chunk_bounds: n={n!r} is not a number of elements; pass an "
                         "int >= 0")
    k = positive_int("k", k)
    q, r = divmod(int(n), k)
    bounds = [0]
    for i in range(k):
        bounds.append(bounds[-1] + q + (1 if i < r else 0))
    return bounds


def reduce_scatter(arrays: Sequence[NDArray],
                   traffic: Traffic | None = None) -> list[NDArray]:
    """The first phase of an allreduce: device ``i`` sums chunk ``i`` of every array.

    Every array (one per device, ``k`` devices) is cut into the ``k`` chunks of
    :func:`chunk_bounds`; device ``i`` copies chunk ``i`` of every other array and
    sums the ``k`` copies with one ``add_n``. Returns the ``k`` sums, sum ``i`` on
    device ``i``, as new flat arrays: ``arrays`` are not changed. A ``traffic`` given
    counts the bytes each device sends and receives. Every array needs at least one
    element per device.

    >>> a = [mx.nd.arange(4, ctx=mx.cpu(i)) * (i + 1) for i in range(2)]
    >>> [s.asnumpy().tolist() for s in reduce_scatter(a)]
    [[0.0, 3.0], [6.0, 9.0]]
    """
    _check_tensors([arrays], "reduce_scatter", single=True)
    k, n = len(arrays), arrays[0].size
    if n < k:
        raise ValueError(f"reduce_scatter: an array of {n} elements cannot be cut into "
                         f"one chunk per device ({k} devices); use allreduce for "
                         "arrays this small")
    itemsize = np.dtype(arrays[0].dtype).itemsize
    # Views: reading them reads `arrays`.
    flat = [a.reshape((-1,)) for a in arrays]
    b = chunk_bounds(n, k)
    # The sums go to fresh arrays, not into `arrays`: MXNet tracks dependencies per
    # array, not per chunk, so writing chunk i of array i in place would make every
    # later read of array i (for the other chunks) wait for it, and the devices would
    # take turns.
    sums = []
    for i in range(k):
        ctx = arrays[i].context
        parts = [flat[j][b[i] : b[i + 1]] for j in range(k)]
        copies = [p.copyto(ctx) for j, p in enumerate(parts) if j != i]
        sums.append(mx.nd.add_n(parts[i], *copies) if copies else parts[i].copy())
        if traffic is not None:
            size = (b[i + 1] - b[i]) * itemsize
            for j in range(k):
                if j != i:
                    traffic.sent[j] += size
                    traffic.received[i] += size
                    traffic.links.add((j, i))
    return sums


def all_gather(chunks: Sequence[NDArray], arrays: Sequence[NDArray],
               traffic: Traffic | None = None) -> None:
    """The second phase of an allreduce: copy chunk ``i`` (on device ``i``) into
    chunk ``i`` of every array, in place.

    ``chunks`` are what :func:`reduce_scatter` returns (or any ``k`` arrays of the
    sizes of :func:`chunk_bounds`, chunk ``i`` on device ``i``); ``arrays`` are one
    array per device. A ``traffic`` given counts the bytes sent and received.

    >>> a = [mx.nd.zeros((3,), ctx=mx.cpu(i)) for i in range(2)]
    >>> all_gather([mx.nd.array([1, 2], ctx=mx.cpu(0)),
    ...             mx.nd.array([3], ctx=mx.cpu(1))], a)
    >>> a[1].asnumpy().tolist()
    [1.0, 2.0, 3.0]
    """
    _check_tensors([arrays], "all_gather", single=True)
    k, n = len(arrays), arrays[0].size
    b = chunk_bounds(n, k)
    if len(chunks) != k:
        raise ValueError(f"all_gather got {len(chunks)} chunks for {k} arrays; pass "
                         "one chunk per device")
    for i, c in enumerate(chunks):
        if c.size != b[i + 1] - b[i]:
            raise ValueError(f"all_gather: chunk {i} has {c.size} elements but chunk "
                             f"{i} of an array of {n} over {k} devices has "
                             f"{b[i + 1] - b[i]}; cut the arrays with chunk_bounds")
    itemsize = np.dtype(arrays[0].dtype).itemsize
    flat = [a.reshape((-1,)) for a in arrays]
    for i, total in enumerate(chunks):
        for j in range(k):
            if traffic is not None and j != i:
                size = total.size * itemsize
                traffic.sent[i] += size
                traffic.received[j] += size
                traffic.links.add((i, j))
            total.reshape((-1,)).copyto(flat[j][b[i] : b[i + 1]])


def allreduce_scatter_gather(arrays: Sequence[NDArray]) -> None:
    """Allreduce in two phases that spread the work: reduce-scatter, then all-gather.

    Every array is cut into ``k`` chunks (``k`` devices). 1. Reduce-scatter: device
    ``i`` copies chunk ``i`` of every other array and sums the ``k`` copies with one
    ``add_n``, so each device sums ``1/k`` of the elements instead of device 0 summing
    all of them. 2. All-gather: each summed chunk is copied into every array. Every
    device receives ``2(k-1)/k`` of the tensor in all, less than two tensors whatever
    ``k``, where reduce-then-broadcast makes the first device receive ``k-1`` tensors
    and send ``k-1``. Each device talks to every other one directly (a ring allreduce
    moves the same bytes, but only between neighbours). The result is written in place,
    as by :func:`allreduce`. Arrays with fewer elements than devices are reduced on the
    first device.

    >>> a = [mx.nd.arange(5, ctx=mx.cpu(i)) * (i + 1) for i in range(3)]
    >>> allreduce_scatter_gather(a)
    >>> [x.asnumpy().tolist() for x in a]
    [[0.0, 6.0, 12.0, 18.0, 24.0], [0.0, 6.0, 12.0, 18.0, 24.0],
     [0.0, 6.0, 12.0, 18.0, 24.0]]
    """
    _check_tensors([arrays], "allreduce_scatter_gather", single=True)
    k, n = len(arrays), arrays[0].size
    if k == 1:
        return
    if n < k:  # not one element per device: sum on the first device, then copy back
        mx.nd.add_n(*arrays[:1], *(a.copyto(arrays[0].context) for a in arrays[1:]),
                    out=arrays[0])
        for a in arrays[1:]:
            arrays[0].copyto(a)
        return
    all_gather(reduce_scatter(arrays), arrays)


@dataclass
class Traffic:
    """What each device sent during :func:`ring_allreduce` (or :func:`reduce_scatter`
    and :func:`all_gather`): bytes, and to which devices."""

    sent: list[int]  #: bytes sent by device ``i``
    received: list[int]  #: bytes received by device ``i``
    #: (sender, receiver) pairs used
    links: set[tuple[int, int]] = field(default_factory=set)

    def per_device(self, nbytes: int) -> list[float]:
        """Bytes sent by each device as a multiple of the tensor's size ``nbytes``.

        >>> Traffic([6, 6], [6, 6]).per_device(6)
        [1.0, 1.0]
        """
        return [s / nbytes for s in self.sent]


def ring_allreduce(arrays: Sequence[NDArray]) -> Traffic:
    """Ring allreduce: ``k-1`` steps of reduce-scatter, then ``k-1`` steps of
    all-gather.

    The devices form a ring; at every step device ``i`` sends one chunk (``1/k`` of the
    tensor) to device ``i+1`` only. Reduce-scatter: at step ``s`` device ``i`` sends
    chunk ``i-s`` (mod ``k``), which its neighbour adds to its own copy; after ``k-1``
    steps device ``i`` holds the full sum of chunk ``i+1``. All-gather: the summed
    chunks travel once more around the ring, overwriting the stale ones. Every device
    sends ``2(k-1)/k`` of the tensor, whatever ``k``, and the returned :class:`Traffic`
    counts it. The sum is written in place.

    >>> a = [mx.nd.arange(6, ctx=mx.cpu(i)) * (i + 1) for i in range(3)]
    >>> traffic = ring_allreduce(a)
    >>> a[2].asnumpy().tolist()
    [0.0, 6.0, 12.0, 18.0, 24.0, 30.0]
    >>> [round(x, 3) for x in traffic.per_device(6 * 4)], sorted(traffic.links)
    ([1.333, 1.333, 1.333], [(0, 1), (1, 2), (2, 0)])
    """
    _check_tensors([arrays], "ring_allreduce", single=True)
    k, n = len(arrays), arrays[0].size
    traffic = Traffic([0] * k, [0] * k)
    if k == 1:
        return traffic
    if n < k:
        raise ValueError(f"ring_allreduce: a tensor of {n} elements cannot be cut into "
                         f"one chunk per device ({k} devices); use allreduce for "
                         "tensors this small")
    itemsize = np.dtype(arrays[0].dtype).itemsize
    # Views: writing into them writes into `arrays`.
    flat = [a.reshape((-1,)) for a in arrays]
    b = chunk_bounds(n, k)

    def chunk(i: int, c: int) -> NDArray:
        return flat[i][b[c] : b[c + 1]]

    for phase in ("reduce-scatter", "all-gather"):
        for s in range(k - 1):
            # Every device sends first, then every device applies what it received: the
            # chunk a device sends at this step is never the one it receives.
            sends = [(i, (i - s + (phase == "all-gather")) % k) for i in range(k)]
            inbox = []
            for i, c in sends:
                dst = (i + 1) % k
                inbox.append((dst, c, chunk(i, c).copyto(arrays[dst].context)))
                size = (b[c + 1] - b[c]) * itemsize
                traffic.sent[i] += size
                traffic.received[dst] += size
                traffic.links.add((i, dst))
            for dst, c, received in inbox:
                if phase == "reduce-scatter":
                    mine = chunk(dst, c)
                    mine += received
                else:
                    received.copyto(chunk(dst, c))
    return traffic


@dataclass
class _Unit:
    """One reduction of :class:`FusedAllreduce`: a big tensor, or the packed buffer."""

    arrays: list[NDArray]  # one per device: the tensor's arrays, or the packing buffers
    owner: int  # the device that sums this unit and sends the sum back
    others: list[int]  # the other devices
    inbox: list[NDArray]  # on the owner: one buffer per other device, for its copy


class FusedAllreduce:
    """Allreduce many tensors at once (e.g. a model's gradients), in place, every step.

    ``tensors[t][i]`` is tensor ``t`` on device ``i`` (e.g.
    ``[p.list_grad() for p in params]``). Calling :func:`allreduce` once per tensor
    costs a few engine operations per tensor and device, tens of microseconds of Python
    each; for a ResNet's 62 gradients, most of them small, that overhead takes as long
    as the arithmetic. So each call:

    1. *Fuses*: the float32 tensors with fewer than ``small`` elements are copied into
       one flat buffer per device, with one multi-tensor copy, and travel as one tensor.
    2. *Spreads*: each big tensor, and the buffer, is summed on one device (its
       "owner"): the other devices copy it there, one ``add_n`` sums the copies, and the
       owner copies the sum back. Owners are chosen so that every device sums about the
       same number of elements.
    3. Copies the packed tensors back out of the buffer.

    The arrays are checked and the buffers (about ``k-1`` copies of the gradients,
    spread over the devices) allocated once, here; each call then only queues the
    operations. Create it once per training run, after the gradients exist, and call it
    after every backward pass. ``calls`` counts the calls so far.

    >>> grads = [[mx.nd.ones(shape, ctx=mx.cpu(i)) * (i + 1) for i in range(2)]
    ...          for shape in [(2, 3), (4,), (100_000,)]]
    >>> reduce = FusedAllreduce(grads)
    >>> reduce()
    >>> [float(g[i].mean().asscalar()) for g in grads for i in range(2)]
    [3.0, 3.0, 3.0, 3.0, 3.0, 3.0]
    """

    def __init__(self, tensors: Sequence[Sequence[NDArray]], small: int = SMALL_TENSOR):
        contexts = _check_tensors(tensors, "FusedAllreduce")
        self.calls = 0
        self.tensors = [list(arrays) for arrays in tensors]
        self.devices = contexts
        k = len(contexts)
        sizes = [a[0].size for a in self.tensors]
        # Only float32 tensors are packed: the multi-tensor copy used below
        # (amp_multicast) handles float32 everywhere but not every other type on every
        # build.
        small_f32 = [0 < n < small and a[0].dtype == np.float32 and a[0].ndim > 0
                     for a, n in zip(self.tensors, sizes, strict=True)]
        self.packed = [t for t, yes in enumerate(small_f32) if yes] if k > 1 else []
        offsets = np.cumsum([0] + [sizes[t] for t in self.packed]).tolist()
        buffers = ([mx.nd.zeros((offsets[-1],), ctx=c) for c in contexts]
                   if self.packed else [])
        shapes = [self.tensors[t][0].shape for t in self.packed]
        self.views = [[buf[offsets[m] : offsets[m + 1]].reshape(shape)
                       for m, shape in enumerate(shapes)] for buf in buffers]
        # Units: each big tensor alone, and the packed buffer. Largest first, each goes
        # to the device that has the least to sum so far, so every device sums about 1/k
        # of the elements.
        in_buffer = set(self.packed)
        jobs = [(offsets[-1], buffers)] if self.packed else []
        jobs += [(sizes[t], self.tensors[t]) for t in range(len(sizes))
                 if t not in in_buffer]
        jobs.sort(key=lambda job: -job[0])
        load = [0] * k
        self.units: list[_Unit] = []
        for n, arrays in jobs if k > 1 else []:
            owner = load.index(min(load))
            load[owner] += n
            others = [i for i in range(k) if i != owner]
            inbox = [mx.nd.empty(arrays[0].shape, ctx=contexts[owner],
                                 dtype=arrays[0].dtype) for _ in others]
            self.units.append(_Unit(arrays, owner, others, inbox))

    def __call__(self) -> None:
        """Sum every tensor over the devices; write the sum into each device's array."""
        k, packed = len(self.devices), self.packed
        self.calls += 1
        if packed:  # 1. fuse: one copy per device packs every small tensor
            for i in range(k):
                mx.nd.amp_multicast(*(self.tensors[t][i] for t in packed),
                                    num_outputs=len(packed), out=self.views[i])
        for unit in self.units:  # 2. each unit summed on its owner, then copied back
            owner = unit.arrays[unit.owner]
            for i, box in zip(unit.others, unit.inbox, strict=True):
                unit.arrays[i].copyto(box)
            mx.nd.add_n(owner, *unit.inbox, out=owner)
            for i in unit.others:
                owner.copyto(unit.arrays[i])
        if packed:  # 3. unfuse
            for i in range(k):
                mx.nd.amp_multicast(*self.views[i], num_outputs=len(packed),
                                    out=[self.tensors[t][i] for t in packed])


def allreduce_many(tensors: Sequence[Sequence[NDArray]],
                   small: int = SMALL_TENSOR) -> None:
    """Allreduce many tensors once: ``FusedAllreduce(tensors, small)()``.

    A training loop should create one :class:`FusedAllreduce` and call it every step,
    which checks the arrays and allocates the buffers only once.

    >>> grads = [[mx.nd.ones((3,), ctx=mx.cpu(i)) * (i + 1) for i in range(2)]]
    >>> allreduce_many(grads); grads[0][1].asnumpy().tolist()
    [3.0, 3.0, 3.0]
    """
    FusedAllreduce(tensors, small)()
