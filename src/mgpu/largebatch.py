"""Large batches: learning-rate rules, and BatchNorm over per-device ("ghost") batches.

- :func:`scaled_lr` is the learning rate that a rule (constant, square root, linear,
  linear with warm-up) gives ``k`` times the batch at a given step;
  :func:`train_schedule` trains a Gluon model on one device with such a schedule and
  records the loss of every step and the test accuracy of every epoch (:class:`Curves`).
- :class:`GhostBatchNorm` normalises each group of examples of a batch with the group's
  own mean and variance, exactly what plain BatchNorm does on ``groups`` devices that
  each hold one group; :func:`with_ghost_batch_norm` puts it in place of every BatchNorm
  of a network, and :func:`average_ghost_statistics` averages the groups' running
  statistics, as :func:`~mgpu.step.average_running_statistics` averages those of the
  devices.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from mgpu.backend import mx
from mgpu.checks import check_devices, positive_int, positive_number
from mgpu.data import Dataset, iter_batches
from mgpu.step import StepResult, gluon_step

__all__ = ["RULES", "Curves", "GhostBatchNorm", "average_ghost_statistics", "scaled_lr",
           "train_schedule", "with_ghost_batch_norm"]

nd = mx.nd
gluon = mx.gluon
nn = gluon.nn

#: The learning-rate rules for ``k`` times the batch: keep it, multiply it by
#: ``sqrt(k)``, by ``k``, or by ``k`` after a linear warm-up from the base rate.
RULES = ("constant", "sqrt", "linear", "warmup")


def scaled_lr(rule: str, base_lr: float, k: int, step: int = 0,
              warmup_steps: int = 0) -> float:
    """The learning rate of ``rule`` for ``k`` times the base batch, at step ``step``
    (from 0).

    ``"warmup"`` rises linearly from ``base_lr`` to ``k * base_lr`` over
    ``warmup_steps`` steps and stays there (Goyal et al., 2017); the other rules ignore
    ``step``.

    >>> [scaled_lr(r, 0.1, 4) for r in ("constant", "sqrt", "linear")]
    [0.1, 0.2, 0.4]
    >>> [round(scaled_lr("warmup", 0.1, 4, s, warmup_steps=3), 3) for s in range(5)]
    [0.1, 0.2, 0.3, 0.4, 0.4]
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    base_lr = positive_number("base_lr", base_lr, "e.g. base_lr=0.05")
    k = positive_int("k", k)
    if rule == "constant":
        return base_lr
    if rule == "sqrt":
        return base_lr * math.sqrt(k)
    if rule == "linear" or step >= warmup_steps:
        return base_lr * k
    return base_lr + (k * base_lr - base_lr) * step / warmup_steps


@dataclass
class Curves:
    """What :func:`train_schedule` measured: per step and per epoch."""

    batch_size: int
    #: mean training loss of each step
    step_loss: list[float] = field(default_factory=list)
    #: the learning rate of each step
    step_lr: list[float] = field(default_factory=list)
    #: mean training loss of each epoch
    epoch_loss: list[float] = field(default_factory=list)
    #: test accuracy after each epoch
    test_acc: list[float] = field(default_factory=list)

    @property
    def diverged(self) -> bool:
        """Whether a step's loss was NaN or infinite (the run then stopped at the end of
        that epoch)."""
        return any(not math.isfinite(v) for v in self.step_loss)


def train_schedule(
    net: gluon.Block,
    data: Dataset,
    batch_size: int,
    lr: Callable[[int], float],
    num_epochs: int,
    device: mx.Context | None = None,
) -> Curves:
    """Train ``net`` (initialised on ``device``) with SGD and the learning rate
    ``lr(step)``.

    The batches are taken in a fixed order (no shuffling), so two runs with the same
    batch see the same examples in the same order. A loss that is NaN or infinite stops
    the run at the end of its epoch: that epoch and the remaining ones are recorded with
    test accuracy 0, the remaining ones with loss NaN and no steps.

    >>> ds = Dataset("toy", None, np.zeros((64, 1, 28, 28), np.uint8),
    ...              np.zeros(64, np.int32), np.zeros((16, 1, 28, 28), np.uint8),
    ...              np.zeros(16, np.int32))
    >>> net = gluon.nn.Dense(10); net.initialize()
    >>> c = train_schedule(net, ds, 32, lambda step: 0.1, num_epochs=2)
    >>> len(c.step_loss), c.test_acc
    (4, [1.0, 1.0])
    """
    from mgpu.loop import evaluate_accuracy, run_epoch

    batch_size = positive_int("batch_size", batch_size)
    num_epochs = positive_int("num_epochs", num_epochs)
    if not callable(lr):
        raise TypeError("lr must be a function of the step, e.g. lambda step: 0.1; "
                        f"got {lr!r}")
    device = device or mx.cpu()
    devices = check_devices([device], "device")
    if batch_size > len(data.train_labels):
        raise ValueError(f"batch_size={batch_size} exceeds the "
                         f"{len(data.train_labels)} training examples: use a smaller "
                         "batch or more data")
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": lr(0)},
                            kvstore=None)
    update = gluon_step(net, trainer, devices, allreduce=False)  # trainer.step(len(y))
    curves = Curves(batch_size)
    means: list[nd.NDArray] = []  # this epoch's mean loss of each step

    def step(X: np.ndarray, y: np.ndarray) -> StepResult:
        rate = positive_number("lr(step)", lr(len(curves.step_lr)),
                               "lr must return a positive rate")
        trainer.set_learning_rate(rate)
        losses, outputs, labels = update(X, y)
        means.append(losses[0].mean())
        curves.step_lr.append(rate)
        return losses, outputs, labels

    for _ in range(num_epochs):
        if curves.diverged:
            curves.epoch_loss.append(math.nan)
            curves.test_acc.append(0.0)
            continue
        means.clear()
        run_epoch(step, iter_batches(data.train_images, data.train_labels, batch_size,
                                     min_last=batch_size),
                  devices, stop_on_non_finite=False)
        values = [float(m.asscalar()) for m in means]
        curves.step_loss += values
        curves.epoch_loss.append(float(np.mean(values)))
        ok = all(math.isfinite(v) for v in values)
        accuracy = evaluate_accuracy(net, data.test_images, data.test_labels,
                                     devices) if ok else 0.0
        curves.test_acc.append(accuracy)
    return curves


class GhostBatchNorm(nn.HybridBlock):
    """BatchNorm that normalises each of ``groups`` equal slices of the batch on its
    own.

    A batch of ``N`` examples is cut into ``groups`` consecutive slices of
    ``N / groups``, as ``split_and_load`` cuts it for ``groups`` devices. In training,
    each slice is normalised with its own mean and variance per channel, and each slice
    updates its own running statistics: ``running_mean`` and ``running_var`` hold
    ``groups`` blocks of ``channels`` values, one after the other (flat, so that the
    BatchNorm operator updates them in place also when the block is hybridized). In
    prediction, each slice is normalised with its own running statistics. This is plain
    BatchNorm on ``groups`` devices, computed on one device; ``groups=1`` normalises
    over the whole batch, which is what ``SyncBatchNorm`` computes across devices.
    Hoffer et al. (2017) call the slices *ghost batches*.

    >>> bn = GhostBatchNorm(channels=3, groups=2); bn.initialize()
    >>> x = nd.array(np.arange(24).reshape(4, 3, 2, 1))
    >>> with mx.autograd.record():
    ...     y = bn(x)
    >>> y[:2].mean(axis=(0, 2, 3)).abs().max().asscalar() < 1e-6  # slice 0 has mean 0
    True
    >>> bn.running_mean.shape  # 2 groups x 3 channels
    (6,)
    """

    def __init__(self, channels: int, groups: int, momentum: float = 0.9,
                 epsilon: float = 1e-5, **kwargs):
        super().__init__(**kwargs)
        self.channels = positive_int("channels", channels)
        self.groups = positive_int("groups", groups)
        self._bn = {"eps": epsilon, "momentum": momentum, "fix_gamma": False, "axis": 1}
        with self.name_scope():
            self.gamma = self.params.get("gamma", shape=(channels,), init="ones")
            self.beta = self.params.get("beta", shape=(channels,), init="zeros")
            self.running_mean = self.params.get(
                "running_mean", grad_req="null", shape=(groups * channels,),
                init="zeros", differentiable=False)
            self.running_var = self.params.get(
                "running_var", grad_req="null", shape=(groups * channels,), init="ones",
                differentiable=False)

    def hybrid_forward(self, F, x, gamma, beta, running_mean,  # noqa: N803
                       running_var):
        """Normalise ``x`` slice by slice (``F`` is ``mx.nd`` or ``mx.sym``)."""
        g = self.groups
        # (N, C, H, W) -> (g, N/g, C, H, W) -> (N/g, g, C, H, W) -> (N/g, g*C, H, W):
        # channel c of slice i becomes channel i*C + c, and BatchNorm normalises every
        # channel on its own.
        y = F.reshape(x, shape=(-4, g, -1, -2)).transpose((1, 0, 2, 3, 4))
        y = F.BatchNorm(y.reshape(shape=(0, -3, -2)), F.tile(gamma, reps=(g,)),
                        F.tile(beta, reps=(g,)), running_mean, running_var, **self._bn)
        return y.reshape(shape=(0, -4, g, -1, -2)).transpose((1, 0, 2, 3, 4)) \
            .reshape(shape=(-3, -2))

    def __repr__(self) -> str:
        return f"GhostBatchNorm(channels={self.channels}, groups={self.groups})"


def with_ghost_batch_norm(net: gluon.HybridBlock, groups: int) -> int:
    """Put a :class:`GhostBatchNorm` of ``groups`` in place of every BatchNorm of
    ``net``.

    ``net`` must be initialised and have seen a batch (so that every layer knows its
    channels); each new layer starts from the old one's ``gamma``, ``beta`` and running
    statistics (copied to every group) on the same devices. The BatchNorm layers must
    sit in ``HybridSequential`` containers, as in :func:`~mgpu.models.resnet18_28`.
    Returns how many layers were replaced.

    >>> net = mx.gluon.nn.HybridSequential()
    >>> net.add(mx.gluon.nn.Conv2D(4, 3), mx.gluon.nn.BatchNorm(), mx.gluon.nn.Dense(2))
    >>> net.initialize(); _ = net(nd.zeros((4, 1, 5, 5)))
    >>> with_ghost_batch_norm(net, groups=2), net[1]
    (1, GhostBatchNorm(channels=4, groups=2))
    """
    groups = positive_int("groups", groups)
    replaced, missed = [], []

    def swap(block: gluon.Block) -> None:
        if not isinstance(block, nn.HybridSequential):
            return
        for i in range(len(block)):
            bn = block[i]
            if not isinstance(bn, nn.BatchNorm):
                continue
            try:
                devices = bn.gamma.list_ctx()
            except RuntimeError as err:
                raise ValueError("with_ghost_batch_norm needs an initialised net that "
                                 "has seen a batch: call net.initialize() and net(X) "
                                 "first") from err
            channels = bn.gamma.shape[0]
            ghost = GhostBatchNorm(channels, groups)
            ghost.initialize(ctx=devices)
            for name in ("gamma", "beta", "running_mean", "running_var"):
                old, new = getattr(bn, name), getattr(ghost, name)
                value = old.data(devices[0]).copyto(mx.cpu())
                new.set_data(value if new.shape == old.shape
                             else nd.tile(value, (groups,)))
            block.register_child(ghost, str(i))
            # HybridSequential names its children "0", "1", ...
            if block[i] is not ghost:
                raise RuntimeError(f"could not replace layer {i} of {block.name}")
            replaced.append(ghost)

    net.apply(swap)

    def left(block: gluon.Block) -> None:
        if isinstance(block, nn.BatchNorm):
            missed.append(block.name)

    net.apply(left)
    if missed:
        raise ValueError(f"{len(missed)} BatchNorm layer(s) of {net.name} are not in a "
                         f"HybridSequential and were not replaced: {missed[:3]}")
    return len(replaced)


def average_ghost_statistics(net: gluon.Block) -> int:
    """Set every group's running statistics to the mean over the groups; return how many
    layers.

    The counterpart for :class:`GhostBatchNorm` of
    :func:`~mgpu.step.average_running_statistics`.

    >>> bn = GhostBatchNorm(channels=2, groups=2); bn.initialize()
    >>> # group 0: [0, 1], group 1: [2, 3]
    >>> bn.running_mean.set_data(nd.array([0, 1, 2, 3]))
    >>> average_ghost_statistics(bn), bn.running_mean.data().asnumpy().tolist()
    (1, [1.0, 2.0, 1.0, 2.0])
    """
    layers = []
    net.apply(lambda b: layers.append(b) if isinstance(b, GhostBatchNorm) else None)
    for bn in layers:
        for p in (bn.running_mean, bn.running_var):
            for a in p.list_data():
                rows = a.reshape((bn.groups, bn.channels))
                mean = rows.mean(axis=0, keepdims=True)
                a[:] = mean.broadcast_to(rows.shape).reshape(-1)
    return len(layers)
