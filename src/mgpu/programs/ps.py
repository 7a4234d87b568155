"""Worker programs for a local MXNet parameter-server cluster, and a checksum of
parameters.

:func:`~mgpu.cluster.local.run_local_cluster` (in :mod:`mgpu.cluster.local`) starts a
scheduler, servers and workers as separate processes on one host and runs a program on
every worker. The functions :func:`push_pull_demo` and :func:`train_demo` are small
worker programs used by the book and the tests: pass them to
:func:`~mgpu.cluster.local.run_local_cluster` and each worker prints one JSON line per
result.
"""

from __future__ import annotations

import hashlib
import os
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mgpu.programs.report import report

if TYPE_CHECKING:  # pragma: no cover
    from mxnet import gluon

__all__ = ["params_checksum", "push_pull_demo", "push_pull_timing", "replay_workers",
           "train_demo", "wait_to_go"]


def push_pull_demo(shape: Sequence[int] = (2, 3), rounds: int = 1,
                   kill_rank: int | None = None,
                   extra_round_rank: int | None = None) -> None:
    """Worker program: worker ``r`` pushes ``(r + 1) * ones(shape)`` and pulls the sum,
    ``rounds`` times, printing one JSON line per round.

    With ``dist_sync`` and no optimizer on the servers, a pull returns the sum of the
    values the workers pushed in that round: ``1 + 2 = 3`` with two workers. Two faults
    can be staged: with ``kill_rank`` that worker kills itself with ``SIGKILL`` before
    its second round; with ``extra_round_rank`` that worker runs one round more than the
    others, like a worker with one batch more. Either way the other workers block in a
    pull that never completes. Run it with ``run_local_cluster(push_pull_demo, 2)``.
    """
    from mgpu.backend import mx

    kv = mx.kv.create("dist_sync")
    shape = tuple(shape)
    kv.init(0, mx.nd.zeros(shape))
    out = mx.nd.zeros(shape)
    for step in range(rounds + (kv.rank == extra_round_rank)):
        if step == 1 and kv.rank == kill_rank:
            report(rank=kv.rank, event="killing myself", pid=os.getpid())
            os.kill(os.getpid(), signal.SIGKILL)
        kv.push(0, mx.nd.ones(shape) * (kv.rank + 1))
        kv.pull(0, out=out)
        report(rank=kv.rank, num_workers=kv.num_workers, round=step,
               pushed=kv.rank + 1, pulled=out.asnumpy().tolist())


def params_checksum(net: gluon.Block) -> str:
    """A short SHA-256 of a Gluon block's parameter values (equal values, equal
    checksum).

    >>> from mgpu import LeNet, mx
    >>> a, b = LeNet(), LeNet()
    >>> for n in (a, b):
    ...     n.initialize(mx.init.Constant(0.5)); _ = n(mx.nd.zeros((1, 1, 28, 28)))
    >>> params_checksum(a) == params_checksum(b)
    True
    """
    h = hashlib.sha256()
    # In the order the block registered them: the names carry global layer counters
    # ("conv9", "conv10"), so sorting them could pair different layers of two nets.
    for p in net.collect_params().values():
        h.update(p.data().asnumpy().tobytes())
    return h.hexdigest()[:16]


def train_demo(subset: int = 2048, test_subset: int = 500, num_epochs: int = 1,
               batch_size: int = 256, lr: float = 0.2, kvstore: str = "dist_sync",
               seed: int = 0) -> None:
    """Worker program: train the Gluon LeNet with ``mgpu.train`` over a distributed
    KVStore.

    Every worker loads the same ``subset`` of Fashion-MNIST (same ``seed``);
    ``mgpu.train`` gives each its own equal shard and splits the global ``batch_size``
    over the workers. Prints one JSON line with the worker's rank, examples per epoch,
    accuracies, epoch times and a checksum of its final parameters. Run it with
    ``run_local_cluster(train_demo, 2)``.
    """
    from mgpu.backend import mx
    from mgpu.data import load_fashion_mnist
    from mgpu.hardware import devices
    from mgpu.loop import train
    from mgpu.models import LeNet

    data = load_fashion_mnist(subset=subset, test_subset=test_subset, seed=seed)
    kv = mx.kv.create(kvstore)
    net = LeNet()
    hist = train(net, data, devices(1), num_epochs=num_epochs, batch_size=batch_size,
                 lr=lr, allreduce=False, kvstore=kv, seed=seed, verbose=False,
                 progress=False)
    # This worker's examples per epoch.
    examples = round(hist.images_per_sec[-1] * hist.epoch_time[-1])
    report(rank=kv.rank, num_workers=kv.num_workers, examples=examples,
           batch_size=hist.batch_size, test_acc=hist.test_acc[-1],
           train_acc=hist.train_acc[-1], loss=hist.loss[-1],
           epoch_time=hist.epoch_time, checksum=params_checksum(net))


def replay_workers(num_workers: int = 1, subset: int = 2048, test_subset: int = 500,
                   num_epochs: int = 1, batch_size: int = 256, lr: float = 0.2,
                   seed: int = 0, order_seed: int | None = None) -> tuple[float, str]:
    """Train in this process what :func:`train_demo`'s ``num_workers`` workers train
    under ``dist_sync``; return the test accuracy and :func:`params_checksum`.

    The CPU device ``cpu(i)`` stands in for the worker with rank ``i``: it gets that
    worker's shard (:func:`~mgpu.loop.worker_shard`), shuffled as
    :func:`~mgpu.loop.train` shuffles it (with ``order_seed + epoch``), and every step
    sums the devices' gradients and takes one SGD step for the global batch, as the
    servers do. Data and initial weights come from ``seed``, as in :func:`train_demo`;
    ``order_seed`` (default ``seed``) changes only the order of the images (which
    share a batch, and in which sequence).

    >>> acc, checksum = replay_workers(2, subset=256, test_subset=100, batch_size=64)
    >>> 0 <= acc <= 1, len(checksum)
    (True, 16)
    """
    import numpy as np

    from mgpu.backend import mx
    from mgpu.checks import positive_int
    from mgpu.data import load_fashion_mnist
    from mgpu.loop import (
        History,
        epoch_batches,
        evaluate_accuracy,
        initialise,
        train_epochs,
        worker_shard,
    )
    from mgpu.models import LeNet
    from mgpu.step import gluon_step

    num_workers = positive_int("num_workers", num_workers)
    data = load_fashion_mnist(subset=subset, test_subset=test_subset, seed=seed)
    shards = [worker_shard(data.train_images, data.train_labels, batch_size,
                           num_workers, rank) for rank in range(num_workers)]
    devices = [mx.cpu(rank) for rank in range(num_workers)]
    net = LeNet()
    initialise(net, devices, seed)  # the initial weights of mgpu.train
    net.hybridize()
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": lr},
                               kvstore=None)
    step = gluon_step(net, trainer, devices)  # sum the gradients, one update
    order_seed = seed if order_seed is None else order_seed
    workers = [epoch_batches(X, y, batch_size // num_workers, order_seed)
               for X, y in shards]

    def batches(epoch: int):
        # Worker r's local batch t is the r-th slice of global batch t, as split over
        # the devices.
        for parts in zip(*(worker(epoch) for worker in workers)):
            yield (np.concatenate([X for X, _ in parts]),
                   np.concatenate([y for _, y in parts]))

    hist = History(devices=[str(d) for d in devices], batch_size=batch_size, lr=lr,
                   model=type(net).__name__, reduction="dist_sync, replayed")
    train_epochs(step, batches, devices, hist, num_epochs, lambda: evaluate_accuracy(
        net, data.test_images, data.test_labels, devices[:1]))
    return hist.test_acc[-1], params_checksum(net)


def push_pull_timing(rounds: int = 5, width: int = 64, numbers: int | None = None,
                     phases: int = 1, meet: str | None = None,
                     threshold: float | None = None) -> None:
    """Worker program: push and pull ResNet-18's gradients (62 arrays) through
    ``dist_sync``.

    Every round pushes every gradient and pulls the sum back (the parameter server's
    allreduce), between two waits; prints one JSON line with the worker's rank and each
    round's milliseconds. ``width`` is :func:`mgpu.models.resnet18_28`'s; with
    ``numbers`` the worker pushes one array of that many numbers instead. With
    ``threshold`` the store compresses the pushes to 2 bits per number.

    ``phases`` repeats the measurement (one warm-up round, then ``rounds``), one JSON
    line per phase. With ``meet``, a directory that the launching machine can see too
    (emulated hosts share its file system), every phase starts with a barrier: the
    worker creates ``ready<phase>.<rank>`` there and waits for ``go<phase>``, so that
    the launcher can change the links between phases
    (:func:`mgpu.probes.links.push_pull_across_hosts`).
    """
    import time

    from mgpu.backend import mx
    from mgpu.models import gradient_shapes, resnet18_28

    kv = mx.kv.create("dist_sync")
    if threshold is not None:
        kv.set_gradient_compression({"type": "2bit", "threshold": threshold})
    shapes = ([(int(numbers),)] if numbers is not None
              else gradient_shapes(resnet18_28(width=width)))
    grads = [mx.nd.ones(s) for s in shapes]
    keys = list(range(len(grads)))
    kv.init(keys, grads)
    for phase in range(int(phases)):
        if meet is not None:
            wait_to_go(meet, phase, kv.rank)
        times = []
        for _ in range(rounds + 1):  # the first round warms up
            mx.nd.waitall()
            start = time.perf_counter()
            kv.push(keys, grads)
            kv.pull(keys, out=grads)
            mx.nd.waitall()
            times.append((time.perf_counter() - start) * 1e3)
        report(rank=kv.rank, num_workers=kv.num_workers, phase=phase,
               tensors=len(grads), numbers=sum(g.size for g in grads), ms=times[1:])


def wait_to_go(meet: str, phase: int, rank: int, timeout: float = 600.0) -> None:
    """Sign in as ready for ``phase`` in the directory ``meet``
    (``ready<phase>.<rank>``) and wait until the launcher creates ``go<phase>`` there.

    >>> import pathlib, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (pathlib.Path(d) / "go0").touch()
    ...     wait_to_go(d, 0, 1)
    ...     sorted(p.name for p in pathlib.Path(d).iterdir())
    ['go0', 'ready0.1']
    """
    import time
    from pathlib import Path

    directory = Path(meet)
    (directory / f"ready{phase}.{rank}").touch()
    deadline = time.monotonic() + timeout
    while not (directory / f"go{phase}").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {rank} waited {timeout:g} s for go{phase} in "
                               f"{directory}: the launcher never started phase {phase}")
        time.sleep(0.01)
