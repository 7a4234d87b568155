"""Training with Horovod: one process per device, gradients summed by a ring allreduce.

Horovod replaces MXNet's parameter server with collective operations between the
training processes themselves: no scheduler, no server, every rank sends its gradients
to its neighbour on a ring. ``horovodrun`` starts the ranks (on remote hosts over
``ssh``) and ends the job when one of them fails.

- :func:`train_horovod` trains a Gluon block in one rank:
  :func:`mgpu.loop.worker_shard` of the data, Horovod's ``DistributedTrainer`` and rank
  0's initial weights broadcast to every rank. As with ``dist_sync``, ``batch_size`` is
  the *global* batch.
- ``allreduce_demo`` and ``train_demo`` are the book's worker programs: each rank prints
  one JSON line per result. Run them with ``horovodrun ... python -m mgpu hvd_train`` or
  from Python with :func:`mgpu.cluster.horovodrun.run_horovod`.
- :func:`rank_failure` kills (or freezes) one rank of an ``allreduce_demo`` job and
  reports what the other ranks did and when: a :class:`RankFailure`.

Horovod is imported on first use: :func:`train_horovod` and the worker programs need it
installed (built against MXNet, with Gloo), :func:`rank_failure` needs its
``horovodrun``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mgpu.cluster.horovodrun import (
    INSTALL_HINT,
    HorovodError,
    HorovodResult,
    run_horovod,
)
from mgpu.programs.report import report

if TYPE_CHECKING:  # pragma: no cover
    from mxnet import gluon

    import mgpu.loop
    from mgpu.data import Dataset

# The worker programs allreduce_demo and train_demo are used through this module
# (mgpu.programs.horovod.*) or `python -m mgpu`: mgpu.train_demo is the parameter-server
# one.
__all__ = ["RankFailure", "rank_failure", "train_horovod"]


def _hvd():
    """``horovod.mxnet``, initialised; an ImportError that says how to install it."""
    try:
        import horovod.mxnet as hvd
    except ImportError as err:
        raise ImportError(f"{INSTALL_HINT}\n(import horovod.mxnet failed: {err})"
                          ) from err
    if not hvd.is_initialized():
        hvd.init()
    return hvd


def train_horovod(
    net: gluon.Block,
    data: Dataset,
    num_epochs: int = 2,
    batch_size: int = 256,
    lr: float = 0.2,
    *,
    device=None,
    optimizer: str = "sgd",
    seed: int = 0,
    verbose: bool = True,
    eval_batch_size: int = 512,
) -> mgpu.loop.History:
    """Train the Gluon block ``net`` in this Horovod rank; return the rank's
    :class:`~mgpu.loop.History`.

    Every rank of the job calls this with the same arguments. ``batch_size`` is the
    global batch, as under ``dist_sync``: rank ``r`` of ``k`` trains on
    :func:`~mgpu.loop.worker_shard` of the training data, ``batch_size // k`` examples
    per step. Each rank initialises the network with its own seed (``seed + rank``);
    ``hvd.broadcast_parameters`` then gives every rank rank 0's weights, as a parameter
    server's first pull would. Horovod's ``DistributedTrainer`` sums the gradients of
    all ranks (an allreduce) and divides by ``k`` times the local batch, i.e. by the
    global batch, before the same SGD update on every rank. ``device`` is this rank's
    device (default ``mx.cpu()``).
    """
    from mgpu.backend import mx
    from mgpu.checks import positive_int, positive_number
    from mgpu.loop import (
        History,
        check_data,
        epoch_batches,
        evaluate_accuracy,
        initialise,
        num_outputs,
        train_epochs,
        worker_shard,
    )
    from mgpu.step import gluon_step

    hvd = _hvd()
    if not isinstance(net, mx.gluon.Block):
        raise TypeError("train_horovod trains a Gluon block, not "
                        f"{type(net).__name__}: pass e.g. mgpu.LeNet()")
    num_epochs = positive_int("num_epochs", num_epochs)
    batch_size = positive_int("batch_size", batch_size)
    lr = positive_number("lr", lr, "use a learning rate such as 0.1")
    check_data(data)
    rank, size = hvd.rank(), hvd.size()
    images, labels = worker_shard(data.train_images, data.train_labels, batch_size,
                                  size, rank)
    local_batch = batch_size // size
    devices = [device if device is not None else mx.cpu()]
    initialise(net, devices, seed + rank)  # differs between ranks until the broadcast
    net.hybridize()
    num_outputs(net, images, devices[0])  # a forward pass: every shape is known
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    trainer = hvd.DistributedTrainer(net.collect_params(), optimizer,
                                     {"learning_rate": lr})
    # trainer.step(local batch): Horovod sums the ranks' gradients and scales by
    # 1 / (k * local).
    step = gluon_step(net, trainer, devices, allreduce=False)
    hist = History(devices=[str(d) for d in devices], batch_size=batch_size, lr=lr,
                   model=type(net).__name__,
                   reduction=f"Horovod allreduce over {size} ranks")
    # worker_shard cut the shard to whole batches: every rank runs the same
    # number of steps
    return train_epochs(
        step, epoch_batches(images, labels, local_batch, seed), devices, hist,
        num_epochs, lambda: evaluate_accuracy(net, data.test_images, data.test_labels,
                                              devices, eval_batch_size),
        verbose=verbose, prefix=f"rank {rank} of {size}: ")


#: what ``allreduce_demo``'s rank ``kill_rank`` does before its second round, and
#: the event it reports just before
STRUCK = {"kill": "killing myself", "stop": "stopping myself", "sleep": "sleeping"}
HOWS = tuple(STRUCK)


def allreduce_demo(shape: Sequence[int] = (2, 3), rounds: int = 1,
                   kill_rank: int | None = None, how: str = "kill",
                   keeper: bool = False, meet: str | None = None,
                   sleep: float = 0.0) -> None:
    """Worker program: rank ``r`` allreduces ``(r + 1) * ones(shape)`` (a sum),
    ``rounds`` times.

    With two ranks every rank receives arrays of ``1 + 2 = 3``. Before its second round
    the rank ``kill_rank`` prints the time and, with ``how="kill"``, kills itself with
    ``SIGKILL`` (the process is gone and the kernel closes its sockets, as when it
    crashes); with ``how="stop"`` it stops itself with ``SIGSTOP`` (it stays, silent,
    its sockets open, as on a machine that hangs); with ``how="sleep"`` it sleeps
    ``sleep`` seconds, then goes on (a program that is stuck or slow, while its
    Horovod background thread runs on). A rank whose allreduce fails prints
    the time and the error, then raises it. With ``keeper`` the rank runs in a child
    process and its parent, the process ``horovodrun`` watches, outlives a rank that
    was killed: ``horovodrun`` does not see it die, and the other ranks are on their
    own. In ``meet``, a directory, the ranks wait for each other before ``hvd.init()``,
    so that a short ``HOROVOD_GLOO_TIMEOUT_SECONDS`` does not cut the rendezvous of a
    rank that was slow to start. Prints one JSON line per round and event (a round's
    line holds ``host``, the host ``horovodrun -H`` ran the rank on).
    """
    if how not in HOWS:
        raise ValueError(f"how must be 'kill', 'stop' or 'sleep', not {how!r}")
    if keeper:
        _keep(["--shape", repr(tuple(shape)), "--rounds", repr(rounds),
               "--kill-rank", repr(kill_rank), "--how", how, "--meet", repr(meet),
               "--sleep", repr(float(sleep))])
    from mgpu.backend import mx

    if meet is not None:
        import horovod.mxnet  # noqa: F401  (loading Horovod is the slow part)

        _meet(Path(meet), int(os.environ["HOROVOD_RANK"]),
              int(os.environ["HOROVOD_SIZE"]))
    hvd = _hvd()
    rank = hvd.rank()
    for step in range(rounds):
        if step == 1 and rank == kill_rank:
            report(rank=rank, event=STRUCK[how], pid=os.getpid(), time=time.time())
            if how == "sleep":
                time.sleep(sleep)
            else:
                stop = how == "stop"
                os.kill(os.getpid(), signal.SIGSTOP if stop else signal.SIGKILL)
        try:
            summed = hvd.allreduce(mx.nd.ones(tuple(shape)) * (rank + 1),
                                   average=False, name=f"demo{step}").asnumpy()
        except Exception as err:
            report(rank=rank, event="allreduce failed", pid=os.getpid(),
                   time=time.time(), error=str(err).strip().splitlines()[0])
            raise
        report(rank=rank, size=hvd.size(), round=step, pid=os.getpid(), host=_host(),
               sent=rank + 1, received=summed.tolist(), time=time.time())


def _host() -> str:
    """The host this rank runs on, as ``horovodrun -H`` named it (its address)."""
    return os.environ.get("HOROVOD_HOSTNAME", "")


def _keep(options: list[str]) -> None:
    """Run this rank in a child process; exit with its status, or outlive it if a
    signal killed it (then ``horovodrun`` sees nothing until it ends the job)."""
    child = subprocess.run([sys.executable, "-m", "mgpu", "hvd_allreduce", *options])
    if child.returncode < 0:  # killed by a signal: wait for horovodrun's SIGTERM
        while True:
            time.sleep(60)
    sys.exit(child.returncode)


def _meet(directory: Path, rank: int, size: int, timeout: float = 300.0) -> None:
    """Wait until ``size`` ranks have signed in ``directory`` (a barrier on one
    machine).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _meet(Path(d), 0, 1)
    """
    (directory / f"rank{rank}").touch()
    deadline = time.monotonic() + timeout
    while len(list(directory.glob("rank*"))) < size:
        if time.monotonic() > deadline:
            raise TimeoutError(f"meet: only {len(list(directory.glob('rank*')))} of "
                               f"{size} ranks arrived in {directory} in {timeout:g} s")
        time.sleep(0.01)


def allreduce_timing(rounds: int = 5, width: int = 64, phases: int = 1,
                     meet: str | None = None) -> None:
    """Worker program: allreduce ResNet-18's gradients (62 arrays, at ``width``) with
    Horovod, one warm-up round and ``rounds`` timed ones per phase.

    Every round sums every gradient over the ranks, in place (``hvd.allreduce_``),
    between two waits; Horovod fuses the arrays that are ready together into one buffer
    and sums it with Gloo's ring allreduce. Prints one JSON line per phase with the rank
    and each round's milliseconds, like :func:`mgpu.programs.ps.push_pull_timing` does
    for the parameter server. With ``meet`` every phase starts with
    :func:`~mgpu.programs.ps.wait_to_go`, so that a launcher can change the hosts' links
    between phases (:mod:`mgpu.probes.links`).
    """
    from mgpu.backend import mx
    from mgpu.models import gradient_shapes, resnet18_28
    from mgpu.programs.ps import wait_to_go

    hvd = _hvd()
    grads = [mx.nd.ones(s) for s in gradient_shapes(resnet18_28(width=width))]
    for phase in range(int(phases)):
        if meet is not None:
            wait_to_go(meet, phase, hvd.rank())
        times = []
        for r in range(rounds + 1):  # the first round warms up
            mx.nd.waitall()
            start = time.perf_counter()
            for i, g in enumerate(grads):
                hvd.allreduce_(g, average=False, name=f"timing{phase}.{r}.{i}")
            mx.nd.waitall()
            times.append((time.perf_counter() - start) * 1e3)
        report(rank=hvd.rank(), size=hvd.size(), pid=os.getpid(), phase=phase,
               tensors=len(grads), numbers=sum(g.size for g in grads), ms=times[1:])


def train_demo(subset: int = 2048, test_subset: int = 500, num_epochs: int = 1,
               batch_size: int = 256, lr: float = 0.2, seed: int = 0) -> None:
    """Worker program: train the Gluon LeNet with :func:`train_horovod`, report as JSON.

    Every rank loads the same ``subset`` of Fashion-MNIST and trains on its own shard;
    the line it prints has the same fields as :func:`mgpu.programs.ps.train_demo`'s:
    rank, size, examples per epoch, accuracies, epoch times and a checksum of the final
    parameters, plus its process id and ``host``, the host ``horovodrun -H`` ran it on.
    """
    from mgpu.data import load_fashion_mnist
    from mgpu.models import LeNet
    from mgpu.programs.ps import params_checksum

    hvd = _hvd()
    data = load_fashion_mnist(subset=subset, test_subset=test_subset, seed=seed)
    net = LeNet()
    hist = train_horovod(net, data, num_epochs=num_epochs, batch_size=batch_size, lr=lr,
                         seed=seed, verbose=False)
    # This rank's examples per epoch.
    examples = round(hist.images_per_sec[-1] * hist.epoch_time[-1])
    report(rank=hvd.rank(), num_workers=hvd.size(), pid=os.getpid(), host=_host(),
           netns=os.readlink("/proc/self/ns/net"), examples=examples,
           batch_size=hist.batch_size, test_acc=hist.test_acc[-1],
           train_acc=hist.train_acc[-1], loss=hist.loss[-1],
           epoch_time=hist.epoch_time, checksum=params_checksum(net))


# --- a rank that dies
# ------------------------------------------------------------------------------


@dataclass
class RankFailure:
    """What the ranks of a :func:`rank_failure` job did when one of them was killed,
    stopped or put to sleep."""

    how: str  #: ``"kill"`` (``SIGKILL``), ``"stop"`` (``SIGSTOP``) or ``"sleep"``
    victim: int  #: the rank that was killed, stopped or put to sleep
    hide_exit: bool  #: whether a keeper process hid the victim's exit from horovodrun
    gloo_timeout: int  #: ``HOROVOD_GLOO_TIMEOUT_SECONDS`` given to the ranks
    #: the whole job, as :func:`~mgpu.cluster.horovodrun.run_horovod` saw it
    result: HorovodResult
    #: ``time.time()`` when the victim killed or stopped itself, or fell asleep
    struck: float
    #: seconds from ``struck`` to the failure, for each rank whose allreduce failed
    failed_after: dict[int, float]
    gloo_error: str  #: Gloo's error in the other ranks' log, without addresses
    gloo_source: str  #: where Gloo raised it, e.g. ``gloo/transport/tcp/pair.cc:598``
    #: each rank's exit status as horovodrun printed it (128 + signal if killed); it
    #: prints none for 0, and sometimes none for a rank it terminated
    exit_codes: dict[int, int]
    #: seconds from ``struck`` to the end of the second allreduce, for each rank
    #: whose second allreduce succeeded
    finished_after: dict[int, float] = field(default_factory=dict)
    sleep: float = 0.0  #: how long the victim slept (``how="sleep"``)

    @property
    def ended_after(self) -> float:
        """Seconds from the kill (stop, sleep) to the exit of ``horovodrun``."""
        return self.result.ended - self.struck

    @property
    def left_running(self) -> list[int]:
        """Processes of the job still alive after ``horovodrun`` exited."""
        return self.result.left_running


def _gloo_error(log: str) -> tuple[str, str]:
    """Gloo's message in a rank's log and the source line that raised it; addresses
    are left out.

    >>> _gloo_error("[0]<stderr>:[...] Horovod background loop uncaught exception: "
    ...             "[/b/third_party/gloo/gloo/transport/tcp/pair.cc:589] "
    ...             "Read error [127.0.0.1]:46004: Connection reset by peer")
    ('Read error: Connection reset by peer', 'gloo/transport/tcp/pair.cc:589')
    >>> _gloo_error("nothing went wrong")
    ('', '')
    """
    import re

    found = re.search(r"uncaught exception: \[([^\]]+)\] (.*)", log)
    if not found:
        return "", ""
    message = re.sub(r" ?\[[0-9a-fA-F.:]+\]:\d+", "", found.group(2)).strip()
    return message, found.group(1).split("third_party/gloo/")[-1]


def rank_failure(
    how: str = "kill",
    *,
    victim: int = 1,
    np: int = 2,
    hide_exit: bool = False,
    gloo_timeout: int = 5,
    timeout: float = 120.0,
    sleep: float | None = None,
) -> RankFailure:
    """Run ``allreduce_demo`` under ``horovodrun --gloo``, kill (``how="kill"``),
    stop (``how="stop"``) or put to sleep (``how="sleep"``) rank ``victim`` after its
    first round, and report what the other ranks did.

    ``SIGKILL`` ends the process and the kernel closes its sockets; ``SIGSTOP`` freezes
    it with its sockets open, as a machine that hangs would. The ranks get
    ``HOROVOD_GLOO_TIMEOUT_SECONDS=gloo_timeout`` (Horovod's default is 30) and meet
    before ``hvd.init()``, so a short timeout cuts no rendezvous. With ``hide_exit``
    (for ``"kill"``) every rank runs under a keeper process that outlives a killed
    rank, so ``horovodrun`` cannot see the victim die: the other ranks are on their
    own. A stopped rank never exits, so ``horovodrun`` cannot see it either. A
    sleeping rank sleeps ``sleep`` seconds (three Gloo timeouts unless given), then
    goes on; its Horovod background thread runs all the while. The job
    runs on loopback through :func:`~mgpu.cluster.horovodrun.run_horovod` (``timeout``
    seconds at most);
    ``left_running`` lists its processes still alive after ``horovodrun`` exited.

    >>> rank_failure("hang")
    Traceback (most recent call last):
    ...
    ValueError: how must be 'kill', 'stop' or 'sleep', not 'hang'
    """
    import re
    import tempfile

    from mgpu.checks import positive_int

    if how not in HOWS:
        raise ValueError(f"how must be 'kill', 'stop' or 'sleep', not {how!r}")
    np = positive_int("np", np, minimum=2)
    gloo_timeout = positive_int("gloo_timeout", gloo_timeout)
    if not 0 <= int(victim) < np:
        raise ValueError(f"victim must be a rank from 0 to {np - 1}, got {victim}")
    if hide_exit and how != "kill":
        raise ValueError(f"hide_exit=True is for how='kill': with how={how!r} the rank "
                         "does not exit, so horovodrun cannot see it anyway")
    if sleep is None:
        sleep = 3.0 * gloo_timeout
    if how == "sleep" and not sleep >= 0:
        raise ValueError(f"sleep must be a number of seconds >= 0, got {sleep!r}")
    with tempfile.TemporaryDirectory(prefix="mgpu-meet-") as meet:
        program = [sys.executable, "-m", "mgpu", "hvd_allreduce", "--rounds", "3",
                   "--kill-rank", str(int(victim)), "--how", how,
                   "--keeper", str(bool(hide_exit)), "--meet", meet,
                   "--sleep", repr(float(sleep) if how == "sleep" else 0.0)]
        result = run_horovod(program, np=np, timeout=timeout, check=False,
                             env={"HOROVOD_GLOO_TIMEOUT_SECONDS": str(gloo_timeout)})
    reports = result.reports()
    struck = [r["time"] for r in reports if r.get("event") == STRUCK[how]]
    if not struck:
        raise HorovodError(f"rank {victim} never reached its second round: "
                           f"{result.why()}", result)
    failed = {r["rank"]: r["time"] - struck[0] for r in reports
              if r.get("event") == "allreduce failed"}
    codes = {int(rank): int(code) for rank, code in re.findall(
        r"Process (\d+) exit with status code (\d+)\.", result.stdout)}
    finished = {r["rank"]: r["time"] - struck[0] for r in reports
                if r.get("round") == 1 and "time" in r}
    message, source = _gloo_error(result.stderr)
    return RankFailure(how, int(victim), bool(hide_exit), gloo_timeout, result,
                       struck[0], failed, message, source, codes, finished,
                       float(sleep) if how == "sleep" else 0.0)
