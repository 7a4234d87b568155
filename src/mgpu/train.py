"""Data-parallel training: one step from scratch, and the whole loop for scratch or Gluon models."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from mgpu._mx import mx
from mgpu.data import Dataset, iter_batches
from mgpu.models import lenet, lenet_params
from mgpu.parallel import allreduce_many, get_params, split_and_load

__all__ = ["History", "evaluate_accuracy", "sgd", "train", "train_batch"]

nd = mx.nd
autograd = mx.autograd
gluon = mx.gluon


def sgd(params: Sequence[nd.NDArray], lr: float, batch_size: int) -> None:
    """Minibatch SGD, in place: ``p -= lr * grad / batch_size`` for every parameter.

    >>> p = nd.ones((2,)); p.attach_grad(); p.grad[:] = 4
    >>> sgd([p], lr=0.5, batch_size=2); p.asnumpy().tolist()
    [0.0, 0.0]
    """
    for p in params:
        p[:] = p - lr * p.grad / batch_size


def train_batch(
    X: np.ndarray,
    y: np.ndarray,
    device_params: Sequence[Sequence[nd.NDArray]],
    devices: Sequence[mx.Context],
    lr: float,
    net: Callable = lenet,
    loss: gluon.loss.Loss | None = None,
    weights: Sequence[float] | None = None,
) -> tuple[list[nd.NDArray], list[nd.NDArray], list[nd.NDArray]]:
    """One data-parallel SGD step for a from-scratch model.

    1. split the minibatch over the devices, 2. forward and backward on every device (MXNet runs
    them in parallel), 3. allreduce each parameter's gradient so every device holds the sum,
    4. the same SGD update on every device, which keeps all copies identical.

    Returns, one entry per device, the losses, the network's outputs and the labels. Nothing
    waits for the devices: the caller decides when to synchronise.

    >>> devs = [mx.cpu(0), mx.cpu(1)]
    >>> params = [get_params(lenet_params(), d) for d in devs]
    >>> X, y = np.random.rand(8, 1, 28, 28).astype("float32"), np.arange(8) % 10
    >>> losses, outputs, labels = train_batch(X, y, params, devs, lr=0.1)
    >>> [lo.context for lo in losses], outputs[1].shape
    ([cpu(0), cpu(1)], (4, 10))
    >>> all((params[0][i] == params[1][i].copyto(mx.cpu(0))).min() == 1 for i in range(8))
    True
    """
    loss = loss or gluon.loss.SoftmaxCrossEntropyLoss()
    X_shards, y_shards = split_and_load((X, y), devices, even_split=False, weights=weights)
    with autograd.record():
        outputs = [net(Xs, W) for Xs, W in zip(X_shards, device_params)]
        losses = [loss(out, ys) for out, ys in zip(outputs, y_shards)]
    for lo in losses:
        lo.backward()
    allreduce_many([[W[i].grad for W in device_params] for i in range(len(device_params[0]))])
    for W in device_params:
        sgd(W, lr, len(y))
    return losses, outputs, y_shards


def _gluon_step(net, trainer, own_allreduce, X, y, devices, loss, weights, step_size):
    """The same step for a Gluon block: the Trainer (or mgpu's allreduce) sums the gradients."""
    X_shards, y_shards = split_and_load((X, y), devices, even_split=False, weights=weights)
    with autograd.record():
        outputs = [net(Xs) for Xs in X_shards]
        losses = [loss(out, ys) for out, ys in zip(outputs, y_shards)]
    for lo in losses:
        lo.backward()
    if own_allreduce:
        grads = [p.list_grad() for p in net.collect_params().values() if p.grad_req != "null"]
        if grads:
            allreduce_many(grads)
        trainer.update(step_size)
    else:
        trainer.step(step_size)
    return losses, outputs, y_shards


def _predict_fn(net, device_params):
    if device_params is None:
        return lambda X, i: net(X)
    return lambda X, i: net(X, device_params[i])


def evaluate_accuracy(
    net: Callable,
    images: np.ndarray,
    labels: np.ndarray,
    devices: Sequence[mx.Context],
    batch_size: int = 512,
    device_params: Sequence[Sequence[nd.NDArray]] | None = None,
) -> float:
    """Accuracy of ``net`` on ``(images, labels)``, data parallel over ``devices``.

    Each batch is split over the devices; every device counts its correct predictions and the
    counts are summed once at the end (a single synchronisation). For a from-scratch model pass
    ``device_params`` (one parameter list per device).

    >>> devs = [mx.cpu(0), mx.cpu(1)]
    >>> params = [get_params(lenet_params(), d) for d in devs]
    >>> X, y = np.zeros((6, 1, 28, 28), np.uint8), np.zeros(6, np.int32)
    >>> evaluate_accuracy(lenet, X, y, devs, device_params=params)  # zero logits: argmax is 0
    1.0
    """
    predict = _predict_fn(net, device_params)
    correct = [nd.zeros((1,), ctx=d) for d in devices]
    for X, y in iter_batches(images, labels, batch_size):
        k = min(len(devices), len(y))  # a tiny last batch uses fewer devices
        Xs, ys = split_and_load((X, y), devices[:k], even_split=False)
        for i, (a, b) in enumerate(zip(Xs, ys)):
            correct[i] += (predict(a, i).argmax(axis=1) == b).sum()
    return float(sum(c.asscalar() for c in correct)) / len(labels)


@dataclass
class History:
    """What :func:`train` measured, one entry per epoch."""

    devices: list[str]
    batch_size: int
    lr: float
    model: str
    kvstore: str | None = None
    loss: list[float] = field(default_factory=list)
    train_acc: list[float] = field(default_factory=list)
    test_acc: list[float] = field(default_factory=list)
    epoch_time: list[float] = field(default_factory=list)
    images_per_sec: list[float] = field(default_factory=list)
    dropped_per_epoch: int = 0
    device_params: list | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        """A short label for plots and tables, e.g. ``'2 x cpu, batch 512, lr 0.4'``."""
        kinds = sorted({d.split("(")[0] for d in self.devices})
        return f"{len(self.devices)} x {'+'.join(kinds)}, batch {self.batch_size}, lr {self.lr:g}"

    def summary(self) -> dict:
        """The last epoch's figures and the mean epoch time (after the first, warm-up epoch)."""
        times = self.epoch_time[1:] or self.epoch_time
        return {
            "devices": len(self.devices),
            "batch_size": self.batch_size,
            "lr": self.lr,
            "test_acc": self.test_acc[-1],
            "train_acc": self.train_acc[-1],
            "epoch_time": float(np.mean(times)),
            "images_per_sec": float(np.mean(self.images_per_sec[1:] or self.images_per_sec)),
        }


def _use_progress(progress: bool | None) -> bool:
    return sys.stderr.isatty() if progress is None else progress


def _prepare_gluon(net, devices, seed, kvstore, lr, optimizer):
    params = net.collect_params()
    initialised = all(p._data is not None or p._deferred_init for p in params.values())
    if not initialised:
        mx.random.seed(seed)
        # Gluon initialises every parameter once (on the CPU) and copies it to each device,
        # so all devices start from identical weights.
        net.initialize(mx.init.Xavier(), ctx=list(devices), force_reinit=True)
    else:
        params.reset_ctx(list(devices))
    if hasattr(net, "hybridize"):
        net.hybridize()
    own = kvstore == "mgpu"
    trainer = gluon.Trainer(params, optimizer, {"learning_rate": lr},
                            kvstore=None if own else kvstore)
    return trainer, own


def train(
    net: Callable | gluon.Block,
    data: Dataset,
    devices: Sequence[mx.Context],
    num_epochs: int = 2,
    batch_size: int = 256,
    lr: float = 0.2,
    *,
    params: Sequence[nd.NDArray] | None = None,
    kvstore: str | mx.kv.KVStore = "mgpu",
    weights: Sequence[float] | None = None,
    optimizer: str = "sgd",
    seed: int = 0,
    progress: bool | None = None,
    verbose: bool = True,
    eval_batch_size: int = 512,
) -> History:
    """Train ``net`` on ``data`` with data parallelism over ``devices``; return the history.

    ``net`` is either a from-scratch model (a function ``net(X, params)`` such as
    :func:`mgpu.models.lenet`, with ``params`` its CPU parameters; the LeNet's are created when
    omitted) trained with :func:`train_batch`, or a Gluon block trained with a
    :class:`gluon.Trainer`. For Gluon, ``kvstore="mgpu"`` sums the gradients with
    :func:`mgpu.parallel.allreduce_many`; any MXNet KVStore
    name (``"device"``, ``"local"``, ``"dist_sync"``, ...) or object hands that to MXNet instead.
    With a distributed KVStore each worker trains on its own shard of the data and ``batch_size``
    is the global batch, split evenly over the workers.

    ``batch_size`` is the global minibatch, split over the devices (by ``weights`` if given). A last
    batch with fewer examples than devices is dropped; every other batch is used, including a short
    last one, and the update is scaled by its real size. Shuffling and initialisation use ``seed``,
    so the same call gives the same accuracies.
    """
    devices = list(devices)
    if not devices:
        raise ValueError("train needs at least one device; see mgpu.devices(n)")
    if batch_size < len(devices):
        raise ValueError(
            f"batch_size={batch_size} is smaller than the {len(devices)} devices: every device "
            f"needs at least one example per batch; use batch_size >= {len(devices)}"
        )
    is_gluon = isinstance(net, gluon.Block)
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    images, labels = data.train_images, data.train_labels
    kv_name = kvstore if isinstance(kvstore, str) else getattr(kvstore, "type", "kvstore")
    step_scale = 1
    if is_gluon:
        kv = kvstore
        if isinstance(kvstore, str) and kvstore.startswith("dist"):
            kv = mx.kv.create(kvstore)
        if isinstance(kv, mx.kv.KVStore) and kv.type.startswith("dist"):
            workers, rank = kv.num_workers, kv.rank
            if batch_size % workers:
                raise ValueError(
                    f"batch_size={batch_size} does not split evenly over {workers} workers; "
                    f"use a multiple of {workers}"
                )
            # Equal shards: workers with unequal batch counts would wait for each other forever.
            per = len(labels) // workers
            # The servers' optimizer keeps the gradient scale of the first step (MXNet raises
            # if the batch size changes), so every step needs the full batch: cut each shard
            # to whole batches.
            per -= per % (batch_size // workers)
            if per == 0:
                raise ValueError(
                    f"{len(labels)} examples over {workers} workers leave fewer than one batch "
                    f"of {batch_size // workers} per worker; use a smaller batch_size"
                )
            images = images[rank * per : (rank + 1) * per]
            labels = labels[rank * per : (rank + 1) * per]
            batch_size //= workers
            step_scale = workers
        trainer, own = _prepare_gluon(net, devices, seed, kv, lr, optimizer)
        device_params = None
        model_name = type(net).__name__
    else:
        if params is None:
            if net is not lenet:
                raise ValueError("a from-scratch model needs its parameters: pass params=[...]")
            params = lenet_params(seed)
        device_params = [get_params(params, d) for d in devices]
        model_name = getattr(net, "__name__", "model")
        kv_name = "mgpu.allreduce_many"

    hist = History(devices=[str(d) for d in devices], batch_size=batch_size * step_scale, lr=lr,
                   model=model_name, kvstore=kv_name, device_params=device_params)
    n_batches = -(-len(labels) // batch_size)
    tail = len(labels) % batch_size
    hist.dropped_per_epoch = tail if 0 < tail < len(devices) else 0
    use_bar = _use_progress(progress)
    for epoch in range(num_epochs):
        loss_sum = [nd.zeros((1,), ctx=d) for d in devices]
        correct = [nd.zeros((1,), ctx=d) for d in devices]
        seen = 0
        batches = iter_batches(images, labels, batch_size, shuffle=True, seed=seed + epoch,
                               min_last=len(devices))
        if use_bar:
            from tqdm.auto import tqdm

            batches = tqdm(batches, total=n_batches, desc=f"epoch {epoch + 1}", leave=False)
        previous = None
        nd.waitall()
        start = time.perf_counter()
        for X, y in batches:
            if is_gluon:
                losses, outs, ys = _gluon_step(net, trainer, own, X, y, devices, loss, weights,
                                               len(y) * step_scale)
            else:
                losses, outs, ys = train_batch(X, y, device_params, devices, lr, net, loss,
                                               weights)
            for i, (lo, o, b) in enumerate(zip(losses, outs, ys)):
                loss_sum[i] += lo.sum()
                correct[i] += (o.argmax(axis=1) == b).sum()
            seen += len(y)
            # Keep at most two batches in flight: wait for the previous one, not for this one,
            # so that devices overlap but Python cannot queue a whole epoch ahead.
            if previous is not None:
                previous.wait_to_read()
            previous = loss_sum[-1]
        nd.waitall()
        elapsed = time.perf_counter() - start
        test_acc = evaluate_accuracy(net, data.test_images, data.test_labels, devices,
                                     eval_batch_size, device_params)
        hist.loss.append(sum(s.asscalar() for s in loss_sum) / seen)
        hist.train_acc.append(sum(c.asscalar() for c in correct) / seen)
        hist.test_acc.append(test_acc)
        hist.epoch_time.append(elapsed)
        hist.images_per_sec.append(seen / elapsed)
        if verbose:
            print(
                f"epoch {epoch + 1}/{num_epochs}: loss {hist.loss[-1]:.3f}, train acc "
                f"{hist.train_acc[-1]:.3f}, test acc {test_acc:.3f}, {elapsed:.1f} s "
                f"({seen / elapsed:,.0f} images/s) on {hist.devices}, batch {batch_size}, "
                f"lr {lr:g}",
                flush=True,
            )
    return hist
