"""Sharding the optimizer state (ZeRO stage 1), by hand.

In plain data parallelism every device holds the full parameters, the full gradients
and the full optimizer state (momentum: one more copy of the parameters; Adam: two),
and applies the same update. :class:`ShardedSGD` and :class:`ShardedAdam` keep every
device's parameters and gradients but cut the optimizer state into ``k`` chunks, one
per device, and split the step in three:

1. reduce-scatter the gradients (:func:`~mgpu.collectives.reduce_scatter`): device
   ``i`` gets the sum of chunk ``i`` of the flattened gradients;
2. device ``i`` updates chunk ``i`` of the flattened parameters, with chunk ``i`` of
   the optimizer state, the only state it holds;
3. all-gather the updated chunks (:func:`~mgpu.collectives.all_gather`), so every
   device holds all the parameters again.

The two phases are the two halves of an allreduce, so a step moves the bytes of one
allreduce, ``2(k-1)/k`` of the parameters per device (counted in
:attr:`ShardedSGD.traffic`), and each device holds ``1/k`` of the state
(:meth:`ShardedSGD.state_bytes`). :class:`ReplicatedOptimizer` is the unsharded
reference: the book's allreduce, then MXNet's own optimizer on every device.
:func:`optimizer_step` makes either one a training step for
:func:`mgpu.loop.train_epochs`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from mgpu.backend import mx
from mgpu.checks import positive_number
from mgpu.collectives import (
    FusedAllreduce,
    Traffic,
    all_gather,
    chunk_bounds,
    reduce_scatter,
)
from mgpu.precision import Float16Allreduce
from mgpu.step import Step, StepResult, forward_backward

__all__ = ["ReplicatedOptimizer", "ShardedAdam", "ShardedSGD", "optimizer_step"]

nd = mx.nd
NDArray = nd.NDArray


def _check_params(device_params: Sequence[Sequence[NDArray]], name: str) -> list:
    """Check one float32 parameter list per device, the same shapes on each, with
    gradients attached; return the devices."""
    if not device_params or not device_params[0]:
        raise ValueError(f"{name} got no parameters: pass one list of parameters per "
                         "device, e.g. [mgpu.get_params(mgpu.lenet_params(), d) for d "
                         "in devices]")
    devices = []
    for i, params in enumerate(device_params):
        if len(params) != len(device_params[0]):
            raise ValueError(f"{name}: device {i} has {len(params)} parameters but "
                             f"device 0 has {len(device_params[0])}; pass the same "
                             "model's parameters on every device")
        for t, p in enumerate(params):
            if not isinstance(p, NDArray):
                raise TypeError(f"{name}: parameter {t} of device {i} is a "
                                f"{type(p).__name__}, not an mx.nd.NDArray")
            if p.dtype != np.float32 or p.shape != device_params[0][t].shape:
                raise ValueError(f"{name}: parameter {t} of device {i} has shape "
                                 f"{p.shape} and dtype {np.dtype(p.dtype).name}; every "
                                 "device needs float32 copies of the same parameters")
            if p.grad is None:
                raise ValueError(f"{name}: parameter {t} of device {i} has no gradient;"
                                 " call attach_grad() on it (mgpu.get_params does)")
            if p.context != params[0].context:
                raise ValueError(f"{name}: the parameters of device {i} live on "
                                 f"{params[0].context} and {p.context}; keep each "
                                 "device's parameters on that device")
        if params[0].context in devices:
            raise ValueError(f"{name}: devices {devices.index(params[0].context)} and "
                             f"{i} are both {params[0].context}; pass one parameter "
                             "list per device")
        devices.append(params[0].context)
    return devices


class ShardedSGD:
    """SGD with momentum, its momentum sharded over the devices (ZeRO stage 1).

    ``device_params[i]`` are device ``i``'s copies of the parameters, with gradients
    (``mgpu.get_params``). After the backward pass of every device, :meth:`step`
    reduce-scatters the gradients, updates chunk ``i`` of the flattened parameters on
    device ``i`` and all-gathers them. The update is MXNet's ``sgd_mom_update``
    (``src/operator/optimizer_op-inl.h``), written out, with ``rescale_grad =
    1 / batch_size``::

        mom = momentum * mom - lr * wd * w - lr * rescale_grad * grad
        w = w + mom

    (``momentum=0`` keeps no state: ``w -= lr * (rescale_grad * grad + wd * w)``.)
    ``wd`` applies to every parameter, as MXNet's optimizer does when it is not told
    the parameters' names. Each device also keeps one flat working buffer of all
    ``size`` values (:meth:`working_bytes`): the gradients are gathered into it for the
    reduce-scatter, then the parameters for the update and the all-gather: the
    parameters here are separate arrays. DeepSpeed's ZeRO and PyTorch's FSDP instead
    flatten the parameters once, when they wrap the model, and make them views of the
    flat buffer, which saves that copy.

    >>> from mgpu import get_params, lenet_params
    >>> devs = [mx.cpu(0), mx.cpu(1)]
    >>> params = [get_params(lenet_params(), d) for d in devs]
    >>> for W in params:
    ...     for p in W:
    ...         p.grad[:] = 1
    >>> opt = ShardedSGD(params, lr=0.1, momentum=0.9)
    >>> opt.step(batch_size=2)
    >>> opt.size, opt.state_bytes()   # 1/2 of the momentum on each device
    (129068, [258136, 258136])
    >>> opt.working_bytes()   # the flat working buffer: all the values, on each device
    [516272, 516272]
    >>> sum(opt.traffic.sent) == 2 * (2 - 1) * opt.size * 4   # one allreduce's bytes
    True
    """

    #: The names of the optimizer state kept per parameter element (one momentum).
    state_names: tuple[str, ...] = ("momentum",)

    def __init__(self, device_params: Sequence[Sequence[NDArray]], lr: float,
                 momentum: float = 0.9, wd: float = 0.0):
        self.devices = _check_params(device_params, type(self).__name__)
        self.params = [list(W) for W in device_params]
        self.lr = positive_number("lr", lr)
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum={momentum!r} is not in [0, 1); pass e.g. 0.9, "
                             "or 0 for plain SGD")
        if wd < 0:
            raise ValueError(f"wd={wd!r} is negative; pass a weight decay >= 0")
        self.momentum, self.wd = float(momentum), float(wd)
        if self.momentum == 0:
            self.state_names = ()
        k = len(self.devices)
        #: How many parameters (elements) the model has.
        self.size = sum(p.size for p in self.params[0])
        if self.size < k:
            raise ValueError(f"{type(self).__name__}: {self.size} parameters cannot be "
                             f"cut into one chunk per device ({k} devices)")
        #: Where chunk ``i`` of the flattened parameters starts and ends.
        self.bounds = chunk_bounds(self.size, k)
        # One flat working buffer per device: the gradients, then the parameters.
        self._flat = [nd.zeros((self.size,), ctx=d) for d in self.devices]
        offsets = np.cumsum([0] + [p.size for p in self.params[0]]).tolist()
        self._views = [[flat[offsets[t] : offsets[t + 1]].reshape(p.shape)
                        for t, p in enumerate(self.params[0])] for flat in self._flat]
        #: Device ``i``'s optimizer state is ``states[i]``, each array one chunk.
        self.states = [[nd.zeros((self.bounds[i + 1] - self.bounds[i],), ctx=d)
                        for _ in self.state_names] for i, d in enumerate(self.devices)]
        #: The bytes each device sent and received during the last :meth:`step`.
        self.traffic = Traffic([0] * k, [0] * k)
        #: How many steps were taken.
        self.steps = 0

    def state_bytes(self) -> list[int]:
        """The bytes of optimizer state each device holds, counted from its arrays."""
        return [sum(s.size * np.dtype(s.dtype).itemsize for s in states)
                for states in self.states]

    def working_bytes(self) -> list[int]:
        """The bytes of the flat working buffer each device holds, counted from its
        arrays: as many values as the model has, whatever the number of devices."""
        return [flat.size * np.dtype(flat.dtype).itemsize for flat in self._flat]

    def _update(self, i: int, w: NDArray, g: NDArray, rescale: float) -> NDArray:
        """Device ``i``'s new chunk of the parameters, from chunk ``w`` and summed
        gradient chunk ``g``; updates its state in place."""
        if not self.state_names:
            return w - self.lr * (rescale * g + self.wd * w)
        (mom,) = self.states[i]
        mom[:] = self.momentum * mom - self.lr * self.wd * w - self.lr * rescale * g
        return w + mom

    def step(self, batch_size: int) -> None:
        """Reduce-scatter the gradients, update each device's chunk, all-gather the
        parameters: every device's parameters then hold the updated values."""
        if not (isinstance(batch_size, int | np.integer) and batch_size > 0):
            raise ValueError(f"batch_size={batch_size!r} is not a positive int; pass "
                             "the number of examples of the step (all devices)")
        k = len(self.devices)
        self.traffic = Traffic([0] * k, [0] * k)
        self.steps += 1
        for i, W in enumerate(self.params):
            nd.concat(*(p.grad.reshape((-1,)) for p in W), dim=0, out=self._flat[i])
        # reduce_scatter returns new arrays, so the buffer is free again afterwards
        # (MXNet's engine lets the concat below wait for the reads of the gradients).
        grad_chunks = reduce_scatter(self._flat, self.traffic)
        for i, W in enumerate(self.params):
            nd.concat(*(p.reshape((-1,)) for p in W), dim=0, out=self._flat[i])
        b = self.bounds
        new = [self._update(i, self._flat[i][b[i] : b[i + 1]], g, 1 / batch_size)
               for i, g in enumerate(grad_chunks)]
        all_gather(new, self._flat, self.traffic)
        for i in range(k):
            nd.amp_multicast(*self._views[i], num_outputs=len(self._views[i]),
                             out=self.params[i])


class ShardedAdam(ShardedSGD):
    """Adam, its two moments sharded over the devices (ZeRO stage 1).

    The same three phases as :class:`ShardedSGD`; the update is MXNet's ``Adam``
    (``python/mxnet/optimizer/optimizer.py`` and ``adam_update``), written out, at step
    ``t`` with ``rescale_grad = 1 / batch_size``::

        lr_t = lr * sqrt(1 - beta2**t) / (1 - beta1**t)
        g = rescale_grad * grad + wd * w
        mean = beta1 * mean + (1 - beta1) * g
        var = beta2 * var + (1 - beta2) * g * g
        w = w - lr_t * mean / (sqrt(var) + epsilon)

    >>> from mgpu import get_params, lenet_params
    >>> devs = [mx.cpu(0), mx.cpu(1)]
    >>> params = [get_params(lenet_params(), d) for d in devs]
    >>> opt = ShardedAdam(params, lr=0.001)
    >>> opt.state_bytes()   # two moments, half of the parameters each, 4 bytes
    [516272, 516272]
    """

    state_names = ("mean", "var")

    def __init__(self, device_params: Sequence[Sequence[NDArray]], lr: float = 0.001,
                 beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8,
                 wd: float = 0.0):
        for name, beta in (("beta1", beta1), ("beta2", beta2)):
            if not 0 <= beta < 1:
                raise ValueError(f"{name}={beta!r} is not in [0, 1); pass e.g. 0.9 "
                                 "(beta1) or 0.999 (beta2)")
        self.beta1, self.beta2 = float(beta1), float(beta2)
        self.epsilon = positive_number("epsilon", epsilon)
        super().__init__(device_params, lr, momentum=0.5, wd=wd)
        self.momentum = 0.0  # not used by Adam

    def _update(self, i: int, w: NDArray, g: NDArray, rescale: float) -> NDArray:
        t = self.steps
        lr_t = self.lr * math.sqrt(1 - self.beta2**t) / (1 - self.beta1**t)
        mean, var = self.states[i]
        g = rescale * g + self.wd * w
        mean[:] = self.beta1 * mean + (1 - self.beta1) * g
        var[:] = self.beta2 * var + (1 - self.beta2) * g * g
        return w - lr_t * mean / (nd.sqrt(var) + self.epsilon)


class ReplicatedOptimizer:
    """The unsharded reference: the book's allreduce of the gradients, then MXNet's own
    optimizer ``name`` (``"sgd"``, ``"adam"``, ...) on every device, each device with
    the full optimizer state, as a Gluon Trainer without a KVStore does.

    ``kwargs`` go to ``mx.optimizer.create`` (``learning_rate``, ``momentum``, ``wd``,
    ...); :meth:`step` sets ``rescale_grad = 1 / batch_size``. With
    ``compression="fp16"`` the gradients are summed in float16, as Horovod's
    ``Compression.fp16`` does (:class:`mgpu.precision.Float16Allreduce`);
    :attr:`allreduce_bytes` is the bytes of one device's gradients as they travel.

    >>> from mgpu import get_params, lenet_params
    >>> devs = [mx.cpu(0), mx.cpu(1)]
    >>> params = [get_params(lenet_params(), d) for d in devs]
    >>> for W in params:
    ...     for p in W:
    ...         p.grad[:] = 1
    >>> opt = ReplicatedOptimizer(params, "sgd", learning_rate=0.1, momentum=0.9)
    >>> opt.step(batch_size=2)
    >>> opt.state_bytes()   # the full momentum on each device
    [516272, 516272]
    >>> opt.allreduce_bytes, ReplicatedOptimizer(params, "sgd",
    ...                                          compression="fp16").allreduce_bytes
    (516272, 258136)
    """

    def __init__(self, device_params: Sequence[Sequence[NDArray]], name: str, *,
                 compression: str | None = None, **kwargs: float):
        self.devices = _check_params(device_params, "ReplicatedOptimizer")
        self.params = [list(W) for W in device_params]
        try:
            self.optimizers = [mx.optimizer.create(name, **kwargs)
                               for _ in self.devices]
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"ReplicatedOptimizer: MXNet cannot create optimizer "
                             f"{name!r} with {kwargs}: {e}") from None
        self.updaters = [mx.optimizer.get_updater(o) for o in self.optimizers]
        grads = [[W[t].grad for W in self.params] for t in range(len(self.params[0]))]
        if compression not in (None, "fp16"):
            raise ValueError(f"compression={compression!r} is not None or 'fp16' "
                             "(Horovod's Compression.none and Compression.fp16)")
        self._reduce: Callable[[], None] | None = None
        if len(self.devices) > 1:
            self._reduce = (FusedAllreduce(grads) if compression is None
                            else Float16Allreduce(grads))
        #: The bytes of one device's gradients as the allreduce sums them.
        self.allreduce_bytes = sum(g[0].size for g in grads) * (
            2 if compression else 4)

    def state_bytes(self) -> list[int]:
        """The bytes of optimizer state each device holds (after the first step),
        counted from its arrays."""
        def nbytes(state: object) -> int:
            if state is None:
                return 0
            if isinstance(state, tuple | list):
                return sum(nbytes(s) for s in state)
            return state.size * np.dtype(state.dtype).itemsize

        return [sum(nbytes(s) for s in u.states.values()) for u in self.updaters]

    def step(self, batch_size: int) -> None:
        """Allreduce the gradients, then the same update on every device."""
        if not (isinstance(batch_size, int | np.integer) and batch_size > 0):
            raise ValueError(f"batch_size={batch_size!r} is not a positive int; pass "
                             "the number of examples of the step (all devices)")
        if self._reduce is not None:
            self._reduce()
        for W, opt, update in zip(self.params, self.optimizers, self.updaters,
                                  strict=True):
            opt.rescale_grad = 1 / batch_size
            for t, p in enumerate(W):
                update(t, p.grad, p)


def optimizer_step(
    net: Callable,
    device_params: Sequence[Sequence[NDArray]],
    devices: Sequence[mx.Context],
    optimizer: ShardedSGD | ReplicatedOptimizer,
    *,
    loss: mx.gluon.loss.Loss | None = None,
) -> Step:
    """A data-parallel step for a from-scratch model ``net(X, params)`` whose update is
    ``optimizer.step(len(y))``: a :class:`ShardedSGD`, :class:`ShardedAdam` or
    :class:`ReplicatedOptimizer` made over the same ``device_params``. It returns
    ``step(X, y) -> (losses, outputs, labels)``, like :func:`mgpu.step.scratch_step`.

    >>> from mgpu import get_params, lenet_forward, lenet_params
    >>> devs = [mx.cpu(0), mx.cpu(1)]
    >>> params = [get_params(lenet_params(), d) for d in devs]
    >>> step = optimizer_step(lenet_forward, params, devs,
    ...                       ShardedSGD(params, lr=0.1, momentum=0.9))
    >>> X, y = np.random.rand(8, 1, 28, 28).astype("float32"), np.arange(8) % 10
    >>> losses, outputs, labels = step(X, y)
    >>> bool((params[0][0] == params[1][0].copyto(mx.cpu(0))).min() == 1)
    True
    """
    if [p.context for p in (W[0] for W in device_params)] != list(devices):
        raise ValueError("optimizer_step: device_params live on "
                         f"{[W[0].context for W in device_params]} but devices are "
                         f"{list(devices)}; pass the devices the parameters live on")
    if optimizer.params[0][0] is not device_params[0][0]:
        raise ValueError("optimizer_step: the optimizer was made over other parameters;"
                         " make it over the same device_params")
    loss = loss or mx.gluon.loss.SoftmaxCrossEntropyLoss()

    def step(X: np.ndarray, y: np.ndarray) -> StepResult:
        result = forward_backward(net, X, y, devices, loss,
                                  device_params=device_params)
        optimizer.step(len(y))
        return result

    return step
