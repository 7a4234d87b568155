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
from mgpu.parallel import split_and_load, split_sizes

__all__ = ["Step", "StepResult", "accumulate_backward", "average_running_statistics",
           "check_accumulate", "forward_backward", "gluon_step", "scratch_step", "sgd"]

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
    return _record(net, X_shards, y_shards, loss, device_params)


def _record(net, X_shards, y_shards, loss, device_params) -> StepResult:
    """Forward (recorded) and backward of every device's shard."""
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


def check_accumulate(accumulate: int, batch: int | None = None, devices: int = 1,
                     weights: Sequence[float] | None = None) -> list[int]:
    """Check that ``accumulate`` is a number of micro-batches and that every device's
    share of a ``batch`` (if given) has that many examples; return the shares
    (:func:`~mgpu.parallel.split_sizes`; ``[]`` without ``batch``).

    >>> check_accumulate(4, 32, 2)
    [16, 16]
    >>> check_accumulate(4, 6, 2)
    Traceback (most recent call last):
    ...
    ValueError: accumulate=4: device 0's share of a batch of 6 has 3 examples, ...
    """
    if isinstance(accumulate, bool) or not isinstance(accumulate, int | np.integer):
        raise TypeError(f"accumulate must be a whole number of micro-batches, got "
                        f"{accumulate!r} ({type(accumulate).__name__})")
    if accumulate < 1:
        raise ValueError(f"accumulate={accumulate}: the number of micro-batches per "
                         "batch must be at least 1 (1 = no accumulation)")
    if batch is None:
        return []
    shares = split_sizes(batch, devices, even_split=False, weights=weights)
    for i, n in enumerate(shares):
        if n < accumulate:
            raise ValueError(
                f"accumulate={accumulate}: device {i}'s share of a batch of {batch} "
                f"has {n} examples, too few for {accumulate} micro-batches; use "
                f"accumulate <= {n} or a larger batch")
    return shares


def accumulate_backward(
    net: Callable,
    X: np.ndarray,
    y: np.ndarray,
    devices: Sequence[mx.Context],
    loss: gluon.loss.Loss,
    accumulate: int,
    weights: Sequence[float] | None = None,
    device_params: Sequence[Sequence[nd.NDArray]] | None = None,
) -> StepResult:
    """:func:`forward_backward` in ``accumulate`` micro-batches: each device's share
    of ``(X, y)`` is cut into ``accumulate`` nearly equal parts, and the forward and
    backward pass runs on one part of every device at a time.

    Each micro-batch's activations are let go once its backward pass is queued, so
    about one micro-batch's are alive at a time (MXNet's engine may start the next
    forward pass before the last backward pass has freed them). The gradients must have
    ``grad_req="add"`` and be zero beforehand: each backward pass then adds into them,
    and afterwards every device holds the gradient of its whole share. Returns, per
    device, the losses, outputs and labels of the micro-batches joined in order.

    >>> from mgpu import get_params, lenet_forward, lenet_params
    >>> devs = [mx.cpu(0), mx.cpu(1)]
    >>> params = [get_params(lenet_params(), d) for d in devs]
    >>> for W in params:
    ...     for p in W:
    ...         p.attach_grad(grad_req="add")
    >>> X, y = np.random.rand(8, 1, 28, 28).astype("float32"), np.arange(8) % 10
    >>> losses, outputs, labels = accumulate_backward(
    ...     lenet_forward, X, y, devs, gluon.loss.SoftmaxCrossEntropyLoss(), 2,
    ...     device_params=params)
    >>> [lo.shape for lo in losses], outputs[1].shape
    ([(4,), (4,)], (4, 10))
    """
    check_accumulate(accumulate, len(y), len(devices), weights)
    X_shards, y_shards = split_and_load((X, y), devices, even_split=False,
                                        weights=weights)
    bounds = [np.linspace(0, len(ys), accumulate + 1).round().astype(int)
              for ys in y_shards]
    parts: list[StepResult] = []
    for j in range(accumulate):
        cut = [(int(b[j]), int(b[j + 1])) for b in bounds]
        Xj = [Xs[a:e] for Xs, (a, e) in zip(X_shards, cut, strict=True)]
        yj = [ys[a:e] for ys, (a, e) in zip(y_shards, cut, strict=True)]
        parts.append(_record(net, Xj, yj, loss, device_params))
    losses, outputs, labels = (
        [nd.concat(*(p[what][i] for p in parts), dim=0) for i in range(len(devices))]
        for what in range(3))
    return losses, outputs, labels


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
    accumulate: int = 1,
) -> Step:
    """A data-parallel SGD step for a from-scratch model ``net(X, params)``.

    1. split the minibatch over the devices, 2. forward and backward on every device,
    3. allreduce each parameter's gradient so every device holds the sum, 4. the same
    SGD update on every device, which keeps all copies identical. With
    ``allreduce=False`` step 3 is left out and every device trains on its own shard
    alone.

    Gradient accumulation: with ``accumulate=m`` step 2 runs in ``m`` micro-batches
    (:func:`accumulate_backward`), and steps 3 and 4 run once per batch. The gradients
    sum in place: the parameters' gradients are re-attached with ``grad_req="add"``
    (this changes the arrays of ``device_params``) and zeroed at the start of every
    batch, which costs no memory beyond the gradients themselves (separate sum
    buffers would cost a second copy). The step's ``reducer`` is its
    :class:`~mgpu.collectives.FusedAllreduce` (``None`` without ``allreduce``), whose
    ``calls`` counts the allreduces.

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
    >>> step4 = scratch_step(lenet_forward, params, devs, lr=0.1, accumulate=4)
    >>> _ = step4(X, y); step4.reducer.calls  # 4 micro-batches per device, 1 allreduce
    1
    """
    loss = loss or gluon.loss.SoftmaxCrossEntropyLoss()
    check_accumulate(accumulate)
    if accumulate > 1:  # gradients that sum over the micro-batches
        for W in device_params:
            for p in W:
                p.attach_grad(grad_req="add")
    grads = [[W[i].grad for W in device_params] for i in range(len(device_params[0]))]
    reduce = FusedAllreduce(grads) if allreduce else None  # buffers allocated once

    def step(X: np.ndarray, y: np.ndarray) -> StepResult:
        if accumulate == 1:
            losses, outputs, labels = forward_backward(net, X, y, devices, loss,
                                                       weights, device_params)
        else:
            for copies in grads:
                for g in copies:
                    g[:] = 0
            losses, outputs, labels = accumulate_backward(
                net, X, y, devices, loss, accumulate, weights, device_params)
        if reduce is not None:
            reduce()
        for W in device_params:
            sgd(W, lr, len(y))
        return losses, outputs, labels

    step.reducer = reduce  # type: ignore[attr-defined]
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
    accumulate: int = 1,
) -> Step:
    """The same step for a Gluon block, whose :class:`gluon.Trainer` applies the update.

    With ``allreduce=True`` the book's :class:`~mgpu.collectives.FusedAllreduce` sums
    the gradients and ``trainer.update`` applies them (the Trainer must have no
    KVStore). With ``allreduce=False``, ``trainer.step`` does both, through the
    Trainer's KVStore if it has one. The update divides by ``len(y) * batch_scale``:
    under a distributed KVStore each worker sees ``1/batch_scale`` of the global batch.

    With ``accumulate=m`` the forward and backward pass runs in ``m`` micro-batches per
    device (:func:`accumulate_backward`) and the sum and update once per batch: at the
    first step the parameters get ``grad_req="add"`` (their gradients sum in place, no
    second copy) and every step zeroes them first. The step's ``reducer`` is its
    :class:`~mgpu.collectives.FusedAllreduce` once the first step has made it (else
    ``None``); its ``calls`` counts the allreduces.

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
    check_accumulate(accumulate)
    # Made at the first step: the gradients exist only then.
    reduce: list[FusedAllreduce] = []

    def step(X: np.ndarray, y: np.ndarray) -> StepResult:
        if accumulate == 1:
            losses, outputs, labels = forward_backward(net, X, y, devices, loss,
                                                       weights)
        else:
            check_accumulate(accumulate, len(y), len(devices), weights)
            params = [p for p in net.collect_params().values() if p.grad_req != "null"]
            for p in params:
                p.grad_req = "add"  # new, zero gradients the first time only
                p.zero_grad()
            losses, outputs, labels = accumulate_backward(
                net, X, y, devices, loss, accumulate, weights)
        if allreduce:
            if not reduce:
                params = net.collect_params().values()
                reduce.append(FusedAllreduce([p.list_grad() for p in params
                                              if p.grad_req != "null"]))
                step.reducer = reduce[0]  # type: ignore[attr-defined]
            reduce[0]()
            trainer.update(len(y) * batch_scale)
        else:
            trainer.step(len(y) * batch_scale)
        return losses, outputs, labels

    step.reducer = None  # type: ignore[attr-defined]
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
