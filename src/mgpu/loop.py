"""The whole training loop, for from-scratch models and Gluon blocks, on one or many
devices.

:func:`train` builds a step (:mod:`mgpu.step`) and runs it over the epochs;
:func:`worker_shard` is each worker's part of the data under a distributed KVStore;
:func:`evaluate_accuracy` scores a model data-parallel; :class:`History` holds what was
measured.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from mgpu.backend import mx
from mgpu.checks import check_devices, check_labels, positive_int, positive_number
from mgpu.data import Dataset, iter_batches
from mgpu.models import lenet_forward, lenet_params
from mgpu.parallel import get_params, split_and_load, split_sizes
from mgpu.step import Step, average_running_statistics, gluon_step, scratch_step

__all__ = ["KVSTORES", "History", "NonFiniteLossError", "evaluate_accuracy", "train",
           "worker_shard"]

nd = mx.nd
gluon = mx.gluon

#: The KVStore types of MXNet 1.9. ``mx.kv.create`` turns any other name into a
#: ``local`` store without a word (src/kvstore/kvstore.cc), so :func:`train` accepts
#: only these.
KVSTORES = ("local", "device", "nccl", "dist_sync", "dist_async", "dist_sync_device",
            "dist_device_sync", "dist_async_device")


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite: :func:`train` stopped at that batch."""


def evaluate_accuracy(
    net: Callable,
    images: np.ndarray,
    labels: np.ndarray,
    devices: Sequence[mx.Context],
    batch_size: int = 512,
    device_params: Sequence[Sequence[nd.NDArray]] | None = None,
) -> float:
    """Accuracy of ``net`` on ``(images, labels)``, data parallel over ``devices``.

    Each batch is split over the devices; every device counts its correct predictions
    and the counts are summed once at the end (a single synchronisation). For a
    from-scratch model pass ``device_params`` (one parameter list per device).

    >>> devs = [mx.cpu(0), mx.cpu(1)]
    >>> params = [get_params(lenet_params(), d) for d in devs]
    >>> X, y = np.zeros((6, 1, 28, 28), np.uint8), np.zeros(6, np.int32)
    >>> # Zero images, zero logits: every prediction is class 0, as every label.
    >>> evaluate_accuracy(lenet_forward, X, y, devs, device_params=params)
    1.0
    """
    devices = check_devices(devices)
    batch_size = positive_int("batch_size", batch_size)
    if len(labels) == 0:
        raise ValueError("evaluate_accuracy got no examples: pass a non-empty test set")
    correct = [nd.zeros((1,), ctx=d) for d in devices]
    for X, y in iter_batches(images, labels, batch_size):
        k = min(len(devices), len(y))  # a tiny last batch uses fewer devices
        Xs, ys = split_and_load((X, y), devices[:k], even_split=False)
        for i, (a, b) in enumerate(zip(Xs, ys)):
            params = None if device_params is None else device_params[i]
            out = _forward(net, a, params, "images")
            correct[i] += (out.argmax(axis=1) == b).sum()
    return float(sum(c.asscalar() for c in correct)) / len(labels)


def worker_shard(
    images: np.ndarray, labels: np.ndarray, batch_size: int, num_workers: int, rank: int
) -> tuple[np.ndarray, np.ndarray]:
    """The part of the training data that worker ``rank`` of ``num_workers`` trains on.

    ``batch_size`` is the global batch, so each worker processes
    ``batch_size // num_workers`` examples per step. The shards are equal and cut to
    whole local batches: under ``dist_sync`` a worker with one batch more would push
    once more and wait forever for the others, and the worker's ``Trainer`` refuses a
    step whose batch size differs from the first one (``_check_and_rescale_grad`` in
    ``mxnet/gluon/trainer.py``), before anything is pushed.

    >>> X, y = np.zeros((1000, 1, 28, 28)), np.arange(1000)
    >>> [len(part) for part in worker_shard(X, y, 128, num_workers=2, rank=1)]
    [448, 448]
    """
    if batch_size % num_workers:
        raise ValueError(f"batch_size={batch_size} does not split evenly over "
                         f"{num_workers} workers; use a multiple of {num_workers}")
    local_batch = batch_size // num_workers
    per = len(labels) // num_workers
    per -= per % local_batch
    if per == 0:
        raise ValueError(f"{len(labels)} examples over {num_workers} workers leave "
                         f"fewer than one batch of {local_batch} per worker; use a "
                         "smaller batch_size")
    return images[rank * per : (rank + 1) * per], labels[rank * per : (rank + 1) * per]


@dataclass
class History:
    """What :func:`train` measured, one entry per epoch."""

    devices: list[str]
    batch_size: int
    lr: float
    model: str
    reduction: str = ""  #: what summed the gradients, e.g. ``"mgpu.FusedAllreduce"``
    loss: list[float] = field(default_factory=list)
    train_acc: list[float] = field(default_factory=list)
    test_acc: list[float] = field(default_factory=list)
    epoch_time: list[float] = field(default_factory=list)
    images_per_sec: list[float] = field(default_factory=list)
    dropped_per_epoch: int = 0

    @property
    def label(self) -> str:
        """A short label for plots and tables, e.g. ``'2 x cpu, batch 512, lr 0.4'``."""
        kinds = sorted({d.split("(")[0] for d in self.devices})
        return (f"{len(self.devices)} x {'+'.join(kinds)}, batch {self.batch_size}, "
                f"lr {self.lr:g}")

    def summary(self) -> dict:
        """The last epoch's figures, and the mean epoch time after the first (warm-up)
        epoch."""
        times = self.epoch_time[1:] or self.epoch_time
        return {
            "devices": len(self.devices),
            "batch_size": self.batch_size,
            "lr": self.lr,
            "test_acc": self.test_acc[-1],
            "train_acc": self.train_acc[-1],
            "epoch_time": float(np.mean(times)),
            "images_per_sec": float(np.mean(self.images_per_sec[1:]
                                            or self.images_per_sec)),
        }

    def _add_epoch(self, loss: float, correct: float, seen: int, elapsed: float,
                   test_acc: float) -> None:
        # One epoch's sums (as _run_epoch returns them) and test accuracy, as per-epoch
        # figures.
        self.loss.append(loss / seen)
        self.train_acc.append(correct / seen)
        self.test_acc.append(test_acc)
        self.epoch_time.append(elapsed)
        self.images_per_sec.append(seen / elapsed)

    def report(self, epoch: int, num_epochs: int) -> str:
        """One line on epoch ``epoch`` (counted from 1)."""
        i = epoch - 1
        return (f"epoch {epoch}/{num_epochs}: loss {self.loss[i]:.3f}, train acc "
                f"{self.train_acc[i]:.3f}, test acc {self.test_acc[i]:.3f}, "
                f"{self.epoch_time[i]:.1f} s ({self.images_per_sec[i]:,.0f} images/s) "
                f"on {self.devices}, batch {self.batch_size}, lr {self.lr:g}")


def _initialise(net: gluon.Block, devices: list[mx.Context], seed: int) -> None:
    """Put ``net``'s parameters on ``devices``: initialise them (seeded) unless they
    already are."""
    params = net.collect_params()
    try:
        for p in params.values():
            p.list_ctx()  # raises while a parameter has not been initialised
    except RuntimeError:
        mx.random.seed(seed)
        # Gluon initialises every parameter once (on the CPU) and copies it to each
        # device, so all devices start from identical weights.
        net.initialize(mx.init.Xavier(), ctx=devices, force_reinit=True)
    else:
        params.reset_ctx(devices)


def _run_epoch(step: Step, batches, devices, progress: bool, total: int, epoch: int,
               lr: float) -> tuple:
    """Run ``step`` over ``batches``; return (loss sum, correct count, examples,
    seconds).

    The loop queues only the training steps. It keeps each batch's losses, outputs and
    labels (a few kilobytes per batch), and the epoch's loss sum and count of correct
    predictions are computed from them once, at the end, with a handful of operations
    per device instead of four per batch and device; the seconds include that. Stops
    with :class:`NonFiniteLossError` at the first batch whose loss is not finite: each
    step reads the losses of the step two batches back, which also bounds how far Python
    runs ahead of the devices (at most two steps queued beyond the one whose losses it
    reads) without making the devices wait for Python.
    """
    # Per batch: (losses, outputs, labels), each with one array per device.
    kept: list[tuple] = []
    seen = 0
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, total=total, desc=f"epoch {epoch}", leave=False)
    nd.waitall()
    start = time.perf_counter()
    for b, (X, y) in enumerate(batches):
        kept.append(step(X, y))
        seen += len(y)
        if b >= IN_FLIGHT and not _finite(kept[b - IN_FLIGHT][0]):
            raise _non_finite(kept, devices, epoch, lr)
    if not all(_finite(losses) for losses, _, _ in kept[-IN_FLIGHT:]):
        raise _non_finite(kept, devices, epoch, lr)
    loss, correct = 0.0, 0.0
    for i in range(len(devices)):
        losses, outputs, labels = ([batch[part][i] for batch in kept]
                                   for part in range(3))
        loss += nd.concat(*losses, dim=0).sum().asscalar()
        outputs, labels = nd.concat(*outputs, dim=0), nd.concat(*labels, dim=0)
        right = outputs.argmax(axis=1) == labels.astype(outputs.dtype)
        correct += right.sum().asscalar()
    nd.waitall()
    return loss, correct, seen, time.perf_counter() - start


#: How many batches :func:`_run_epoch` lets Python queue before it reads a batch's
#: losses.
IN_FLIGHT = 2


def _finite(losses: Sequence[nd.NDArray]) -> bool:
    """Whether every loss of one batch, on every device, is finite (waits for them)."""
    return all(np.isfinite(lo.asnumpy()).all() for lo in losses)


def _non_finite(kept, devices, epoch: int, lr: float) -> NonFiniteLossError:
    """The error for the first batch whose loss is not finite on some device."""
    for b, (losses, _, _) in enumerate(kept):
        for device, lo in zip(devices, losses):
            values = lo.asnumpy()
            bad = values[~np.isfinite(values)]
            if bad.size:
                return NonFiniteLossError(
                    f"the training loss became {bad[0]} in epoch {epoch}, batch "
                    f"{b + 1} (on {device}); training stopped there. Likely causes: a "
                    f"learning rate too large for this model and batch (lr={lr:g}: try "
                    "one ten times smaller), or input images with NaN or infinite "
                    "values")
    return NonFiniteLossError(f"the training loss is not finite in epoch {epoch}")


def _check_args(devices, num_epochs, batch_size, eval_batch_size, lr, weights) -> tuple:
    """The arguments of :func:`train` that are numbers and devices, checked and
    normalised."""
    devices = check_devices(devices)
    batch_size = positive_int("batch_size", batch_size)
    if batch_size < len(devices):
        raise ValueError(
            f"batch_size={batch_size} is smaller than the {len(devices)} devices: "
            "every device needs at least one example per batch; use batch_size >= "
            f"{len(devices)}")
    if weights is not None:
        split_sizes(batch_size, len(devices), weights=weights)  # checks the weights
    lr = positive_number("lr", lr, "use a learning rate such as 0.1 (a negative one "
                         "climbs the loss)")
    return (devices, positive_int("num_epochs", num_epochs), batch_size,
            positive_int("eval_batch_size", eval_batch_size), lr)


def _check_data(data: Dataset) -> None:
    """A :class:`~mgpu.data.Dataset` with examples, matching lengths, finite images."""
    if not isinstance(data, Dataset):
        raise TypeError("data must be an mgpu.Dataset (see mgpu.load_fashion_mnist), "
                        f"got {type(data).__name__}")
    for split in ("train", "test"):
        images = getattr(data, f"{split}_images")
        labels = getattr(data, f"{split}_labels")
        if len(labels) == 0:
            raise ValueError(f"data has no {split}ing examples: train needs at least "
                             "one (check the subset sizes given to load_fashion_mnist)")
        if len(images) != len(labels):
            raise ValueError(f"data.{split}_images has {len(images)} examples but "
                             f"data.{split}_labels has {len(labels)}; they must match")
        if images.shape[1:] != data.train_images.shape[1:]:
            raise ValueError(f"data.test_images have shape {images.shape[1:]} per "
                             "example but data.train_images "
                             f"{data.train_images.shape[1:]}; they must match")
        if images.dtype.kind == "f" and not np.all(np.isfinite(images)):
            raise ValueError(f"data.{split}_images contains NaN or infinite values; "
                             "clean the images before training")


def _create_kvstore(kvstore: str | mx.kv.KVStore | None) -> mx.kv.KVStore | None:
    """A KVStore object from a name, refusing names MXNet would quietly make 'local'."""
    if kvstore is None or isinstance(kvstore, mx.kv.KVStore):
        return kvstore
    if kvstore not in KVSTORES:
        raise ValueError(f"kvstore={kvstore!r} is not a KVStore type of MXNet 1.9 "
                         "(MXNet would quietly create a 'local' one); use one of "
                         f"{', '.join(KVSTORES)}")
    if kvstore.startswith("dist") and "DMLC_ROLE" not in os.environ:
        raise ValueError(f"kvstore={kvstore!r} needs a parameter-server cluster, but "
                         "this process is not part of one (DMLC_ROLE is not set): run "
                         "it with mgpu.run_local_cluster, or on one machine use "
                         "'device' or 'local'")
    try:
        return mx.kv.create(kvstore)
    except mx.base.MXNetError as err:
        raise ValueError(f"kvstore={kvstore!r} cannot be created with this MXNet "
                         f"build: {_reason(err)}") from None


def _reason(err: Exception) -> str:
    """The last meaningful line of an MXNet error: its message, not the C++ stack."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return next((ln for ln in reversed(lines) if "Error" in ln or "Check failed" in ln),
                lines[-1] if lines else type(err).__name__)


def _forward(net, X: nd.NDArray, params, what: str) -> nd.NDArray:
    """``net(X)`` or ``net(X, params)``, with a clear error when the model cannot take
    ``X``."""
    try:
        return net(X) if params is None else net(X, params)
    except (mx.base.MXNetError, ValueError, TypeError, IndexError) as err:
        raise ValueError(
            f"the model cannot take {what} of shape {X.shape[1:]} per example: "
            f"{_reason(err)}. Give it images of the shape it was built for (the book's "
            "models take 1x28x28), and, for a from-scratch model, the parameters it "
            "expects") from None


def _num_outputs(net, images: np.ndarray, device: mx.Context, params) -> int:
    """Run the model on one training example; return its number of outputs (classes)."""
    X = nd.array(images[:1].astype(np.float32) / 255, ctx=device)
    out = _forward(net, X, params, "data.train_images")
    if out.ndim != 2:
        raise ValueError(f"the model's output has shape {out.shape}; train needs one "
                         "row of class scores per example, shape (N, classes)")
    return out.shape[1]


def train(
    net: Callable | gluon.Block,
    data: Dataset,
    devices: Sequence[mx.Context],
    num_epochs: int = 2,
    batch_size: int = 256,
    lr: float = 0.2,
    *,
    params: Sequence[nd.NDArray] | None = None,
    allreduce: bool = True,
    kvstore: str | mx.kv.KVStore | None = None,
    weights: Sequence[float] | None = None,
    optimizer: str = "sgd",
    seed: int = 0,
    progress: bool | None = None,
    verbose: bool = True,
    eval_batch_size: int = 512,
) -> History:
    """Train ``net`` on ``data`` with data parallelism over ``devices``; return the
    history.

    ``net`` is a from-scratch model (a function ``net(X, params)`` such as
    :func:`mgpu.models.lenet_forward`, with ``params`` its CPU parameters; the LeNet's
    are created when omitted), trained by :func:`mgpu.step.scratch_step`, or a Gluon
    block, trained by :func:`mgpu.step.gluon_step` with a :class:`gluon.Trainer`.

    Who sums the gradients: with ``allreduce=True`` (the default) the book's own
    :class:`~mgpu.collectives.FusedAllreduce`. For a Gluon block, pass
    ``allreduce=False`` and a ``kvstore`` (an MXNet KVStore name such as ``"device"``,
    ``"local"`` or ``"dist_sync"``, or a KVStore object) to let MXNet's KVStore do it;
    ``allreduce=False`` without a KVStore sums nothing, and every device trains on its
    own shard. With a distributed KVStore each worker trains on :func:`worker_shard` of
    the data and ``batch_size`` is the global batch.

    ``batch_size`` is the global minibatch, split over the devices (by ``weights`` if
    given). A last batch with fewer examples than devices is dropped; every other batch
    is used, including a short last one, and the update is scaled by its real size.
    Shuffling and initialisation use ``seed``, so the same call gives the same
    accuracies.
    """
    devices, num_epochs, batch_size, eval_batch_size, lr = _check_args(
        devices, num_epochs, batch_size, eval_batch_size, lr, weights)
    _check_data(data)
    if allreduce and kvstore is not None:
        raise ValueError(f"allreduce=True and kvstore={kvstore!r} would both sum the "
                         "gradients: pass allreduce=False to let the KVStore sum them")
    kvstore = _create_kvstore(kvstore)
    images, labels = data.train_images, data.train_labels
    local_batch, workers = batch_size, 1
    if kvstore is not None and kvstore.type.startswith("dist"):
        workers = kvstore.num_workers
        images, labels = worker_shard(images, labels, batch_size, workers, kvstore.rank)
        local_batch = batch_size // workers
    if len(labels) < len(devices):
        raise ValueError(f"{len(labels)} training examples cannot fill one batch on "
                         f"{len(devices)} devices: use more data or fewer devices")
    step, device_params, model, reduction = _make_step(
        net, devices, lr, params, allreduce, kvstore, weights, optimizer, seed, workers)
    classes = _num_outputs(net, images, devices[0], device_params and device_params[0])
    check_labels(labels, classes, "data.train_labels")
    check_labels(data.test_labels, classes, "data.test_labels")

    hist = History(devices=[str(d) for d in devices], batch_size=batch_size, lr=lr,
                   model=model, reduction=reduction)
    tail = len(labels) % local_batch
    hist.dropped_per_epoch = tail if 0 < tail < len(devices) else 0
    progress = sys.stderr.isatty() if progress is None else progress
    for epoch in range(num_epochs):
        batches = iter_batches(images, labels, local_batch, shuffle=True,
                               seed=seed + epoch, min_last=len(devices))
        loss, correct, seen, elapsed = _run_epoch(
            step, batches, devices, progress, -(-len(labels) // local_batch), epoch + 1,
            lr)
        if device_params is None:  # a Gluon block: one set of BatchNorm statistics
            average_running_statistics(net)
        hist._add_epoch(loss, correct, seen, elapsed, evaluate_accuracy(
            net, data.test_images, data.test_labels, devices, eval_batch_size,
            device_params))
        if verbose:
            print(hist.report(epoch + 1, num_epochs), flush=True)
    return hist


def _make_step(net, devices, lr, params, allreduce, kvstore, weights, optimizer, seed,
               workers):
    """The step for ``net``: (step, per-device parameters or None, model name,
    reduction)."""
    reduction = "mgpu.FusedAllreduce" if allreduce else (
        "none" if kvstore is None else f"KVStore {getattr(kvstore, 'type', kvstore)!r}")
    if isinstance(net, gluon.Block):
        if optimizer not in mx.optimizer.Optimizer.opt_registry:
            raise ValueError(f"optimizer={optimizer!r} is not an MXNet optimizer; use "
                             "e.g. 'sgd', 'nag' or 'adam'")
        _initialise(net, devices, seed)
        net.hybridize()
        trainer = gluon.Trainer(net.collect_params(), optimizer, {"learning_rate": lr},
                                kvstore=kvstore)
        step = gluon_step(net, trainer, devices, allreduce=allreduce, weights=weights,
                          batch_scale=workers)
        return step, None, type(net).__name__, reduction
    if not callable(net):
        raise TypeError(f"net must be a Gluon block or a function net(X, params), got "
                        f"{type(net).__name__}")
    if kvstore is not None:
        raise ValueError("a from-scratch model has no Trainer, so no KVStore: pass "
                         "kvstore=None (its gradients are summed by allreduce=True)")
    if params is None:
        if net is not lenet_forward:
            raise ValueError(
                "a from-scratch model needs its parameters: pass params=[...]")
        params = lenet_params(seed)
    device_params = [get_params(params, d) for d in devices]
    step = scratch_step(net, device_params, devices, lr, allreduce=allreduce,
                        weights=weights)
    return step, device_params, getattr(net, "__name__", "model"), reduction
