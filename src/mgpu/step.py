"""One data-parallel step: split, forward and backward on every device, sum, update.

:func:`forward_backward` is the part every kind of model shares. :func:`scratch_step`
and :func:`gluon_step` build a step for a from-scratch model (a function
``net(X, params)`` and one parameter list per device) or for a Gluon block with a
:class:`gluon.Trainer`. Both return a function
``step(X, y) -> (losses, outputs, labels)``, one entry per device, that queues the work
and returns at once: the caller decides when to wait for the devices.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from mgpu.backend import mx
from mgpu.collectives import FusedAllreduce, allreduce_many
from mgpu.parallel import split_and_load

__all__ = ["Step", "StepResult", "average_running_statistics", "forward_backward",
           "gluon_step", "scratch_step", "sgd"]

nd = mx.nd
autograd = mx.autograd
gluon = mx.gluon

# What a step returns: per device, the losses, the network's outputs and the labels.
StepResult = tuple[list[nd.NDArray], list[nd.NDArray], list[nd.NDArray]]
# A training step: ``step(X, y)`` on one minibatch of NumPy images and labels.
Step = Callable[[np.ndarray, np.ndarray], StepResult]


def forward_backward(
    net: Callable,
    X: np.ndarray,
    y: np.ndarray,
    devices: Sequence[mx.Context],
    loss: gluon.loss.Loss,
    weights: Sequence[float] | None = None,
    device_params: Sequence[Sequence[nd.NDArray]] | None = None,
) -> StepResult:
    """Split ``(X, y)`` over ``devices``, then run the forward and backward pass on each
    one.

    MXNet queues the work of every device and runs the devices in parallel. For a
    from-scratch model pass ``device_params`` (one parameter list per device): device
    ``i`` then computes ``net(X_i, device_params[i])``; a Gluon block holds a copy of
    its parameters on each device and is called as ``net(X_i)``. Afterwards every device
    holds the gradient of its own shard.

    >>> from mgpu import get_params, lenet_forward, lenet_params
    >>> devs = [mx.cpu(0), mx.cpu(1)]
    >>> params = [get_params(lenet_params(), d) for d in devs]
    >>> X, y = np.random.rand(8, 1, 28, 28).astype("float32"), np.arange(8) % 10
    >>> losses, outputs, labels = forward_backward(
    ...     lenet_forward, X, y, devs, gluon.loss.SoftmaxCrossEntropyLoss(),
    ...     device_params=params)
    >>> [lo.shape for lo in losses], params[1][0].grad.context
    ([(4,), (4,)], cpu(1))
    """
    X_shards, y_shards = split_and_load((X, y), devices, even_split=False,
                                        weights=weights)
    with autograd.record():
        if device_params is None:
            outputs = [net(Xs) for Xs in X_shards]
        else:
            outputs = [net(Xs, W)
                       for Xs, W in zip(X_shards, device_params, strict=True)]
        losses = [loss(out, ys) for out, ys in zip(outputs, y_shards)]
    for lo in losses:
        lo.backward()
    return losses, outputs, y_shards


def sgd(params: Sequence[nd.NDArray], lr: float, batch_size: int) -> None:
    """Minibatch SGD, in place: ``p -= lr * grad / batch_size`` for every parameter.

    >>> p = nd.ones((2,)); p.attach_grad(); p.grad[:] = 4
    >>> sgd([p], lr=0.5, batch_size=2); p.asnumpy().tolist()
    [0.0, 0.0]
    """
    for p in params:
        p[:] = p - lr * p.grad / batch_size


def scratch_step(
    net: Callable,
    device_params: Sequence[Sequence[nd.NDArray]],
    devices: Sequence[mx.Context],
    lr: float,
    *,
    allreduce: bool = True,
    loss: gluon.loss.Loss | None = None,
    weights: Sequence[float] | None = None,
) -> Step:
    """A data-parallel SGD step for a from-scratch model ``net(X, params)``.

    1. split the minibatch over the devices, 2. forward and backward on every device,
    3. allreduce each parameter's gradient so every device holds the sum, 4. the same
    SGD update on every device, which keeps all copies identical. With
    ``allreduce=False`` step 3 is left out and every device trains on its own shard
    alone.

    >>> from mgpu import get_params, lenet_forward, lenet_params
    >>> devs = [mx.cpu(0), mx.cpu(1)]
    >>> params = [get_params(lenet_params(), d) for d in devs]
    >>> step = scratch_step(lenet_forward, params, devs, lr=0.1)
    >>> X, y = np.random.rand(8, 1, 28, 28).astype("float32"), np.arange(8) % 10
    >>> losses, outputs, labels = step(X, y)
    >>> [lo.context for lo in losses], outputs[1].shape
    ([cpu(0), cpu(1)], (4, 10))
    >>> all((params[0][i] == params[1][i].copyto(mx.cpu(0))).min() == 1
    ...     for i in range(8))
    True
    """
    loss = loss or gluon.loss.SoftmaxCrossEntropyLoss()
    grads = [[W[i].grad for W in device_params] for i in range(len(device_params[0]))]
    reduce = FusedAllreduce(grads) if allreduce else None  # buffers allocated once

    def step(X: np.ndarray, y: np.ndarray) -> StepResult:
        losses, outputs, labels = forward_backward(net, X, y, devices, loss, weights,
                                                   device_params)
        if reduce is not None:
            reduce()
        for W in device_params:
            sgd(W, lr, len(y))
        return losses, outputs, labels

    return step


def gluon_step(
    net: gluon.Block,
    trainer: gluon.Trainer,
    devices: Sequence[mx.Context],
    *,
    allreduce: bool = True,
    loss: gluon.loss.Loss | None = None,
    weights: Sequence[float] | None = None,
    batch_scale: int = 1,
) -> Step:
    """The same step for a Gluon block, whose :class:`gluon.Trainer` applies the update.

    With ``allreduce=True`` the book's :class:`~mgpu.collectives.FusedAllreduce` sums
    the gradients and ``trainer.update`` applies them (the Trainer must have no
    KVStore). With ``allreduce=False``, ``trainer.step`` does both, through the
    Trainer's KVStore if it has one. The update divides by ``len(y) * batch_scale``:
    under a distributed KVStore each worker sees ``1/batch_scale`` of the global batch.

    >>> devs = [mx.cpu(0), mx.cpu(1)]
    >>> net = mx.gluon.nn.Dense(10); net.initialize(ctx=devs)
    >>> trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
    ...                         kvstore=None)
    >>> step = gluon_step(net, trainer, devs)
    >>> losses, outputs, labels = step(np.ones((6, 4), "float32"), np.arange(6) % 10)
    >>> [o.shape for o in outputs]
    [(3, 10), (3, 10)]
    """
    loss = loss or gluon.loss.SoftmaxCrossEntropyLoss()
    # Made at the first step: the gradients exist only then.
    reduce: list[FusedAllreduce] = []

    def step(X: np.ndarray, y: np.ndarray) -> StepResult:
        losses, outputs, labels = forward_backward(net, X, y, devices, loss, weights)
        if allreduce:
            if not reduce:
                params = net.collect_params().values()
                reduce.append(FusedAllreduce([p.list_grad() for p in params
                                              if p.grad_req != "null"]))
            reduce[0]()
            trainer.update(len(y) * batch_scale)
        else:
            trainer.step(len(y) * batch_scale)
        return losses, outputs, labels

    return step


def average_running_statistics(net: gluon.Block) -> int:
    """Average BatchNorm's running means and variances across devices, in place; return
    how many.

    They have no gradient, so neither an allreduce of the gradients nor a KVStore
    touches them: each device's copy follows the statistics of its own shards, and the
    copies drift apart. Evaluating then scores each device's slice of the test batch
    with different statistics. Averaging them (with
    :func:`~mgpu.collectives.allreduce_many`, then dividing by the number of devices)
    makes every copy of the model identical again.

    >>> devs = [mx.cpu(0), mx.cpu(1)]
    >>> bn = mx.gluon.nn.BatchNorm(in_channels=3); bn.initialize(ctx=devs)
    >>> for i, d in enumerate(devs):
    ...     bn.running_mean.data(d)[:] = i
    >>> average_running_statistics(bn), bn.running_mean.data(devs[1]).asnumpy().tolist()
    (2, [0.5, 0.5, 0.5])
    """
    stats = [p.list_data() for name, p in net.collect_params().items()
             if name.endswith(("running_mean", "running_var"))]
    if not stats or len(stats[0]) < 2:
        return 0
    allreduce_many(stats)
    for copies in stats:
        for a in copies:
            a /= len(copies)
    return len(stats)
