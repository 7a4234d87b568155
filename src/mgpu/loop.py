"""The training loop, for from-scratch models and Gluon blocks, on one or many
devices.

:func:`train` builds a step (:mod:`mgpu.step`) and runs it over the epochs. It is made
of public pieces, which Horovod's ranks, the large-batch schedules, the KVStore probes
and the replay of a cluster reuse: :func:`check_data`, :func:`initialise` and
:func:`num_outputs` prepare a run; :func:`run_epoch` runs a step over one epoch's
batches (:class:`EpochSums`); :func:`train_epochs` is the loop over the epochs, with the
batches of :func:`epoch_batches`, recording each epoch with :meth:`History.add_epoch`.
:func:`worker_shard` is each worker's part of the data under a distributed KVStore;
:func:`evaluate_accuracy` scores a model data-parallel; :class:`History` holds what was
measured. With ``checkpoint=PATH``, :func:`train` saves a
:class:`~mgpu.checkpoint.Checkpoint` after every epoch and resumes from it.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from mgpu.backend import mx
from mgpu.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from mgpu.checks import check_devices, check_labels, positive_int, positive_number
from mgpu.data import Dataset, iter_batches
from mgpu.models import lenet_forward, lenet_params
from mgpu.parallel import get_params, split_and_load, split_sizes
from mgpu.step import (
    Step,
    average_running_statistics,
    check_accumulate,
    gluon_step,
    scratch_step,
)

__all__ = ["IN_FLIGHT", "KVSTORES", "EpochSums", "History", "NonFiniteLossError",
           "check_data", "epoch_batches", "evaluate_accuracy", "initialise",
           "num_outputs", "run_epoch", "train", "train_epochs", "worker_shard"]

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


@dataclass(frozen=True)
class EpochSums:
    """What :func:`run_epoch` measured over one epoch: sums over the examples, and the
    time."""

    loss: float  #: the sum of every example's training loss
    correct: float  #: how many training examples the model predicted right
    seen: int  #: how many training examples the epoch used
    seconds: float  #: the epoch's wall-clock time, waiting for the devices included


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
    accumulate: int = 1  #: micro-batches per device and step (gradient accumulation)
    resumed: int = 0  #: epochs read from a checkpoint rather than run by this call

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

    def add_epoch(self, sums: EpochSums, test_acc: float) -> None:
        """Record one epoch: :func:`run_epoch`'s sums as per-example figures, and the
        test accuracy.

        >>> hist = History(["cpu(0)"], batch_size=4, lr=0.1, model="LeNet")
        >>> hist.add_epoch(EpochSums(loss=6.0, correct=3.0, seen=4, seconds=2.0), 0.5)
        >>> hist.loss, hist.train_acc, hist.test_acc, hist.images_per_sec
        ([1.5], [0.75], [0.5], [2.0])
        """
        self.loss.append(sums.loss / sums.seen)
        self.train_acc.append(sums.correct / sums.seen)
        self.test_acc.append(test_acc)
        self.epoch_time.append(sums.seconds)
        self.images_per_sec.append(sums.seen / sums.seconds)

    def report(self, epoch: int, num_epochs: int) -> str:
        """One line on epoch ``epoch`` (counted from 1)."""
        i = epoch - 1
        return (f"epoch {epoch}/{num_epochs}: loss {self.loss[i]:.3f}, train acc "
                f"{self.train_acc[i]:.3f}, test acc {self.test_acc[i]:.3f}, "
                f"{self.epoch_time[i]:.1f} s ({self.images_per_sec[i]:,.0f} images/s) "
                f"on {self.devices}, batch {self.batch_size}, lr {self.lr:g}")


def initialise(net: gluon.Block, devices: Sequence[mx.Context], seed: int) -> None:
    """Put ``net``'s parameters on ``devices``: initialise them (seeded) unless they
    already are.

    >>> net = gluon.nn.Dense(2, in_units=3)
    >>> initialise(net, [mx.cpu(0), mx.cpu(1)], seed=0)
    >>> net.weight.list_ctx()
    [cpu(0), cpu(1)]
    """
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


def run_epoch(
    step: Step,
    batches: Iterable[tuple[np.ndarray, np.ndarray]],
    devices: Sequence[mx.Context],
    *,
    epoch: int = 1,
    lr: float | None = None,
    stop_on_non_finite: bool = True,
    progress: bool = False,
    total: int | None = None,
) -> EpochSums:
    """Run ``step`` over ``batches``; return the epoch's loss sum, count of correct
    predictions, examples and seconds.

    The loop queues only the training steps. It keeps each batch's losses, outputs and
    labels (a few kilobytes per batch), and the epoch's loss sum and count of correct
    predictions are computed from them once, at the end, with a handful of operations
    per device instead of four per batch and device; the seconds include that. Stops
    with :class:`NonFiniteLossError` at the first batch whose loss is not finite: each
    step reads the losses of the step two batches back, which also bounds how far Python
    runs ahead of the devices (at most two steps queued beyond the one whose losses it
    reads) without making the devices wait for Python. With
    ``stop_on_non_finite=False`` it reads no loss before the end and runs every batch.
    ``epoch`` and ``lr`` are named in that error; ``progress`` shows a progress bar of
    ``total`` batches.

    >>> devs = [mx.cpu(0), mx.cpu(1)]
    >>> params = [get_params(lenet_params(), d) for d in devs]
    >>> step = scratch_step(lenet_forward, params, devs, lr=0.1)
    >>> X, y = np.zeros((8, 1, 28, 28), np.uint8), np.zeros(8, np.int32)
    >>> sums = run_epoch(step, iter_batches(X, y, 4), devs)
    >>> sums.seen, sums.correct  # zero images: every prediction is class 0
    (8, 8.0)
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
        if (stop_on_non_finite and b >= IN_FLIGHT
                and not _finite(kept[b - IN_FLIGHT][0])):
            raise _non_finite(kept, devices, epoch, lr)
    if stop_on_non_finite and not all(_finite(losses)
                                      for losses, _, _ in kept[-IN_FLIGHT:]):
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
    return EpochSums(loss, correct, seen, time.perf_counter() - start)


#: How many batches :func:`run_epoch` lets Python queue before it reads a batch's
#: losses.
IN_FLIGHT = 2


def _finite(losses: Sequence[nd.NDArray]) -> bool:
    """Whether every loss of one batch, on every device, is finite (waits for them)."""
    return all(np.isfinite(lo.asnumpy()).all() for lo in losses)


def _non_finite(kept, devices, epoch: int, lr: float | None) -> NonFiniteLossError:
    """The error for the first batch whose loss is not finite on some device."""
    rate = "" if lr is None else f"lr={lr:g}: "
    for b, (losses, _, _) in enumerate(kept):
        for device, lo in zip(devices, losses):
            values = lo.asnumpy()
            bad = values[~np.isfinite(values)]
            if bad.size:
                return NonFiniteLossError(
                    f"the training loss became {bad[0]} in epoch {epoch}, batch "
                    f"{b + 1} (on {device}); training stopped there. Likely causes: a "
                    f"learning rate too large for this model and batch ({rate}try "
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


def check_data(data: Dataset) -> None:
    """Check that ``data`` is a :class:`~mgpu.data.Dataset` with examples, matching
    lengths, one image shape and finite images; raise a clear error if not.

    >>> empty = np.zeros((0, 1, 28, 28), np.uint8)
    >>> check_data(Dataset("toy", None, empty, np.zeros(0, np.int32), empty,
    ...                    np.zeros(0, np.int32)))
    Traceback (most recent call last):
    ValueError: data has no training examples: train needs at least one (check ...)
    """
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


def num_outputs(net: Callable | gluon.Block, images: np.ndarray, device: mx.Context,
                params: Sequence[nd.NDArray] | None = None) -> int:
    """Run the model on one training example; return its number of outputs (classes).

    ``params`` are a from-scratch model's parameters on ``device`` (None for a Gluon
    block); a model that cannot take the images, or gives no row of scores per example,
    raises a ValueError that says so.

    >>> images, params = np.zeros((5, 1, 28, 28), np.uint8), lenet_params()
    >>> num_outputs(lenet_forward, images, mx.cpu(), get_params(params, mx.cpu()))
    10
    """
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
    checkpoint: str | os.PathLike | None = None,
    accumulate: int = 1,
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
    accuracies. ``accumulate=m`` splits each device's share of a batch into ``m``
    micro-batches whose gradients are summed before one reduction and update.

    With ``checkpoint=PATH`` every epoch ends by writing a
    :class:`~mgpu.checkpoint.Checkpoint` to ``PATH``
    (:func:`~mgpu.checkpoint.save_checkpoint`: atomic, checksummed, the previous one
    kept), and a call with a ``PATH`` that holds one resumes after its last complete
    epoch, running only the epochs left of ``num_epochs``: on the same devices the
    result equals an uninterrupted run bit for bit. What it holds: the parameters (one
    copy), the optimizer's state (the Trainer's ``save_states``: with several devices
    MXNet keeps one updater per device and saves the first, which is exact here because
    after the reduction every device's gradients, weights and so states are identical;
    ``load_states`` loads it into all of them), the epoch, and the history. MXNet 1.9.1
    has no call that reads its generators' state (``mxnet/random.py`` only seeds), so
    every epoch starts with ``mx.random.seed(seed + epoch)`` and shuffles with ``seed +
    epoch``: the epoch fixes the random state, the data order and the position (the loop
    draws from no global NumPy or Python generator: shuffles use their own
    ``RandomState(seed + epoch)``). Devices, ``lr``, ``batch_size`` and the number of
    workers may change on a resume; another model, optimizer, number of classes or seed
    is refused. Under a distributed KVStore rank 0 alone writes, and the Trainer updates
    on the workers (``update_on_kvstore=False``: ``save_states`` refuses a distributed
    store that updates on the servers).
    """
    devices, num_epochs, batch_size, eval_batch_size, lr = _check_args(
        devices, num_epochs, batch_size, eval_batch_size, lr, weights)
    accumulate = positive_int("accumulate", accumulate)
    path = None if checkpoint is None else _checkpoint_path(checkpoint)
    check_data(data)
    if allreduce and kvstore is not None:
        raise ValueError(f"allreduce=True and kvstore={kvstore!r} would both sum the "
                         "gradients: pass allreduce=False to let the KVStore sum them")
    kvstore = _create_kvstore(kvstore)
    images, labels = data.train_images, data.train_labels
    local_batch, workers = batch_size, 1
    dist = kvstore is not None and kvstore.type.startswith("dist")
    if dist and path is not None and "async" in kvstore.type:
        raise ValueError(f"checkpoint= needs the optimizer's state on the workers, but "
                         f"kvstore={kvstore.type!r} updates on the servers (MXNet "
                         "allows no other way in async mode): use 'dist_sync'")
    if dist:
        workers = kvstore.num_workers
        images, labels = worker_shard(images, labels, batch_size, workers, kvstore.rank)
        local_batch = batch_size // workers
    if len(labels) < len(devices):
        raise ValueError(f"{len(labels)} training examples cannot fill one batch on "
                         f"{len(devices)} devices: use more data or fewer devices")
    check_accumulate(accumulate, local_batch, len(devices), weights)
    step, device_params, model, reduction, trainer = _make_step(
        net, devices, lr, params, allreduce, kvstore, weights, optimizer, seed, workers,
        accumulate, dist and path is not None)
    classes = num_outputs(net, images, devices[0], device_params and device_params[0])
    check_labels(labels, classes, "data.train_labels")
    check_labels(data.test_labels, classes, "data.test_labels")

    hist = History(devices=[str(d) for d in devices], batch_size=batch_size, lr=lr,
                   model=model, reduction=reduction, accumulate=accumulate)
    arrays = _named_arrays(net, device_params, devices[0])
    meta = {"classes": classes, "model": model,
            "optimizer": optimizer if trainer is not None else "sgd", "seed": seed}
    if path is not None:
        _resume(path, net, arrays, trainer, device_params, hist, meta, devices, verbose)
        if dist:  # after the resume: every worker takes rank 0's parameters
            _set_up_kvstore(trainer)
    tail = len(labels) % local_batch
    hist.dropped_per_epoch = tail if 0 < tail < len(devices) else 0
    progress = sys.stderr.isatty() if progress is None else progress

    def test_accuracy() -> float:
        if device_params is None:  # a Gluon block: one set of BatchNorm statistics
            average_running_statistics(net)
        return evaluate_accuracy(net, data.test_images, data.test_labels, devices,
                                 eval_batch_size, device_params)

    shuffled = epoch_batches(images, labels, local_batch, seed, min_last=len(devices))

    def batches(epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        mx.random.seed(seed + epoch)  # the random state is a function of the epoch
        return shuffled(epoch)

    def save(epoch: int) -> None:
        if path is not None and (not dist or kvstore.rank == 0):
            states = b"" if trainer is None else _trainer_states(trainer)
            params = {name: a.asnumpy() for name, a in arrays}
            save_checkpoint(path, Checkpoint(epoch, params, states, meta, asdict(hist)))

    return train_epochs(
        step, batches, devices, hist, num_epochs, test_accuracy,
        steps=-(-len(labels) // local_batch), progress=progress, verbose=verbose,
        start=hist.resumed, after_epoch=save)


def _checkpoint_path(checkpoint: object) -> Path:
    """``checkpoint`` as a Path to a file, or a clear error."""
    if not isinstance(checkpoint, str | os.PathLike) or not os.fspath(checkpoint):
        raise TypeError("checkpoint must be a file path such as 'runs/lenet.ckpt', "
                        f"got {checkpoint!r}")
    path = Path(checkpoint)
    if path.is_dir():
        raise ValueError(f"checkpoint={os.fspath(path)!r} is a directory; pass a file "
                         "path inside it, such as 'runs/lenet.ckpt'")
    return path


def _named_arrays(net, device_params, device: mx.Context) -> list[tuple[str, object]]:
    """The model's parameters on ``device``, each with a name that does not depend on
    how many blocks the process made before: a from-scratch model's by position, a
    Gluon block's by structure (``'0.weight'``, as ``save_parameters`` names them)."""
    if device_params is not None:
        return [(f"param{i}", W) for i, W in enumerate(device_params[0])]
    return [(name, p.data(device)) for name, p in _structural(net).items()]


def _structural(net: gluon.Block) -> dict:
    """``net``'s parameters by structural name, as ``save_parameters`` names them."""
    return net._collect_params_with_prefix()  # noqa: SLF001 - MXNet's own naming


def _trainer_states(trainer: gluon.Trainer) -> bytes:
    """The bytes ``trainer.save_states`` writes (it takes only a file name)."""
    with tempfile.TemporaryDirectory() as tmp:
        file = os.path.join(tmp, "states")
        trainer.save_states(file)
        return Path(file).read_bytes()


def _set_up_kvstore(trainer: gluon.Trainer) -> None:
    """Make ``trainer`` set up its distributed KVStore now, and wait until it has.

    The Trainer sets it up at its first step (``gluon/trainer.py`` ``step``): every
    worker pulls rank 0's parameters, then pushes its gradients and pulls their sum.
    With ``update_on_kvstore=False`` and the gradients in main memory, the second pull
    writes the gradient array itself (``kvstore_dist.h`` ``PushPullImpl``:
    ``comm_buf = merged``), not the parameters the first one writes, so the engine does
    not order the two; a server without an optimizer answers every pull with the last
    sum it made (``kvstore_dist_server.h``: ``ApplyUpdates``,
    ``DefaultStorageResponse``), so a late parameter pull returns the first step's
    gradient sum (5 of 19 two-worker starts here). ``save_states`` sets the store up
    as its first act; ``waitall`` waits for the pull.
    """
    _trainer_states(trainer)
    nd.waitall()


def _load_trainer_states(trainer: gluon.Trainer, states: bytes,
                         devices: Sequence[mx.Context], lr: float) -> None:
    """Load ``states`` into ``trainer`` (every device's updater) at learning rate
    ``lr``."""
    with tempfile.TemporaryDirectory() as tmp:
        file = os.path.join(tmp, "states")
        Path(file).write_bytes(states)
        trainer.load_states(file)
    trainer.set_learning_rate(lr)  # the saved optimizer brings the old one
    # The optimizer counts each device's updates apart (Adam's bias correction reads
    # the count), keyed by device id; a device the saved run did not have gets the
    # count of the first one, which every device shared.
    counts = getattr(trainer.optimizer, "_all_index_update_counts", None)
    if counts:
        first = counts[min(counts)]
        for d in devices:
            counts.setdefault(d.device_id, dict(first))


def _resume(path: Path, net, arrays, trainer, device_params, hist: History, meta: dict,
            devices, verbose: bool) -> None:
    """Load the checkpoint at ``path``, if there is one, into the model (every device's
    copy), the trainer and ``hist``."""
    saved = load_checkpoint(path)
    if saved is None:
        return
    saved.check({name: tuple(a.shape) for name, a in arrays}, path, **meta)
    values = [nd.array(v, dtype=v.dtype) for v in saved.params.values()]
    if device_params is not None:
        for W in device_params:
            for w, v in zip(W, values):
                v.copyto(w)
    else:
        for p, v in zip(_structural(net).values(), values):
            p.set_data(v)
    if trainer is not None and saved.states:
        _load_trainer_states(trainer, saved.states, devices, hist.lr)
    for name in ("loss", "train_acc", "test_acc", "epoch_time", "images_per_sec"):
        setattr(hist, name, list(saved.history.get(name, [])))
    hist.resumed = saved.epoch
    if verbose:
        print(f"resuming after epoch {saved.epoch} from {path.name}", flush=True)


def epoch_batches(
    images: np.ndarray, labels: np.ndarray, batch_size: int, seed: int,
    min_last: int = 1,
) -> Callable[[int], Iterator[tuple[np.ndarray, np.ndarray]]]:
    """The minibatches of every epoch: ``batches(epoch)`` shuffles the examples with
    ``seed + epoch`` and yields them as :func:`~mgpu.data.iter_batches` does.

    >>> X, y = np.zeros((10, 1, 2, 2), np.uint8), np.arange(10)
    >>> batches = epoch_batches(X, y, 4, seed=0, min_last=3)
    >>> [len(b) for _, b in batches(0)], sorted(next(batches(1))[1]) != sorted(
    ...     next(batches(2))[1])
    ([4, 4], True)
    """
    def batches(epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        return iter_batches(images, labels, batch_size, shuffle=True, seed=seed + epoch,
                            min_last=min_last)

    return batches


def train_epochs(
    step: Step,
    batches: Callable[[int], Iterable[tuple[np.ndarray, np.ndarray]]],
    devices: Sequence[mx.Context],
    hist: History,
    num_epochs: int,
    evaluate: Callable[[], float],
    *,
    steps: int | None = None,
    progress: bool = False,
    verbose: bool = False,
    prefix: str = "",
    start: int = 0,
    after_epoch: Callable[[int], None] | None = None,
) -> History:
    """The training loop: for each of ``num_epochs`` epochs, :func:`run_epoch` of
    ``step`` over ``batches(epoch)``, then :meth:`History.add_epoch` with the test
    accuracy ``evaluate()``; return ``hist``.

    Epochs count from 0 in ``batches`` and from 1 in messages. ``evaluate`` runs after
    every epoch (the place to make the devices' copies one model first, as
    :func:`train` does with BatchNorm's statistics). ``verbose`` prints
    :meth:`History.report` after every epoch, behind ``prefix``; ``progress`` shows a
    progress bar of ``steps`` batches. ``start`` epochs are done already (a resume: the
    loop runs epochs ``start`` to ``num_epochs - 1``); ``after_epoch(e)`` runs once
    epoch ``e`` (counted from 1) is recorded, e.g. to save a checkpoint.

    >>> devs = [mx.cpu(0), mx.cpu(1)]
    >>> params = [get_params(lenet_params(), d) for d in devs]
    >>> step = scratch_step(lenet_forward, params, devs, lr=0.1)
    >>> X, y = np.zeros((8, 1, 28, 28), np.uint8), np.zeros(8, np.int32)
    >>> hist = train_epochs(
    ...     step, epoch_batches(X, y, 4, seed=0), devs,
    ...     History([str(d) for d in devs], batch_size=4, lr=0.1, model="LeNet"), 2,
    ...     lambda: evaluate_accuracy(lenet_forward, X, y, devs, device_params=params))
    >>> hist.train_acc, hist.test_acc
    ([1.0, 1.0], [1.0, 1.0])
    """
    for epoch in range(start, num_epochs):
        sums = run_epoch(step, batches(epoch), devices, epoch=epoch + 1, lr=hist.lr,
                         progress=progress, total=steps)
        hist.add_epoch(sums, evaluate())
        if after_epoch is not None:
            after_epoch(epoch + 1)
        if verbose:
            print(prefix + hist.report(epoch + 1, num_epochs), flush=True)
    return hist


def _make_step(net, devices, lr, params, allreduce, kvstore, weights, optimizer, seed,
               workers, accumulate=1, update_on_workers=False):
    """The step for ``net``: (step, per-device parameters or None, model name,
    reduction, Trainer or None)."""
    reduction = "mgpu.FusedAllreduce" if allreduce else (
        "none" if kvstore is None else f"KVStore {getattr(kvstore, 'type', kvstore)!r}")
    if isinstance(net, gluon.Block):
        if optimizer not in mx.optimizer.Optimizer.opt_registry:
            raise ValueError(f"optimizer={optimizer!r} is not an MXNet optimizer; use "
                             "e.g. 'sgd', 'nag' or 'adam'")
        initialise(net, devices, seed)
        net.hybridize()
        # The parameters in the network's structural order: given a ParameterDict, the
        # Trainer sorts the names, which carry counters that depend on how many blocks
        # the process made before, so its state's indices would not match another
        # process's (a checkpoint read by a resumed run).
        trainer = gluon.Trainer(list(_structural(net).values()), optimizer,
                                {"learning_rate": lr}, kvstore=kvstore,
                                update_on_kvstore=False if update_on_workers else None)
        step = gluon_step(net, trainer, devices, allreduce=allreduce, weights=weights,
                          batch_scale=workers, accumulate=accumulate)
        return step, None, type(net).__name__, reduction, trainer
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
                        weights=weights, accumulate=accumulate)
    return step, device_params, getattr(net, "__name__", "model"), reduction, None
