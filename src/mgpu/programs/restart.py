"""A checkpointed parameter-server job, a worker killed mid-epoch, and the restart with
one worker fewer.

ps-lite cannot replace a dead worker, and Horovod's elastic mode exists for TensorFlow,
Keras and PyTorch only, not for MXNet: a job that loses a worker ends, and is started
again. :func:`train_checkpointed` is the worker program (``python -m mgpu
train_checkpointed``): LeNet trained by :func:`mgpu.loop.train` over ``dist_sync``
with a checkpoint written by the worker with rank 0 after every epoch, which every
worker resumes from.
:func:`restart_after_kill` runs the whole story: a job of several workers, one of them
killed during the epoch after the first checkpoint (a whole emulated host with
:class:`mgpu.cluster.hosts.Hosts`, or one worker process on this machine's loopback),
then the same job restarted with one worker fewer, each worker on its new shard and the
learning rate scaled with the global batch; it returns what was lost as a
:class:`RestartRun`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from mgpu.cluster.hosts import Hosts
from mgpu.programs.report import read_reports, report

__all__ = ["RestartRun", "restart_after_kill", "train_checkpointed"]

_POLL = 0.01  # seconds between looks at the checkpoint file


def _saved(checkpoint: Path) -> int:
    """How many complete epochs the checkpoint file ``checkpoint`` holds (0: none)."""
    from mgpu.checkpoint import load_checkpoint

    ckpt = load_checkpoint(checkpoint)
    return 0 if ckpt is None else int(ckpt.epoch)


def _kill_time(checkpoint: Path, into: float) -> float:
    """When to kill: ``into`` of an epoch after ``checkpoint`` was written, an epoch
    taking as long as the last one it records."""
    from mgpu.checkpoint import load_checkpoint

    written = checkpoint.stat().st_mtime
    ckpt = load_checkpoint(checkpoint)
    return written + into * float(ckpt.history["epoch_time"][-1])


def _kill_when_saved(checkpoint: Path, into: float, rank: int) -> None:
    """Wait until ``checkpoint`` is written anew, then ``into`` of an epoch more
    (:func:`_kill_time`), then kill this process with ``SIGKILL``, reporting the time
    first."""
    start = time.time()
    while not (checkpoint.exists() and checkpoint.stat().st_mtime >= start):
        time.sleep(_POLL)
    time.sleep(max(0.0, _kill_time(checkpoint, into) - time.time()))
    report(rank=rank, event="killed", at=time.time())
    os.kill(os.getpid(), signal.SIGKILL)


def train_checkpointed(checkpoint: str, subset: int = 1536, test_subset: int = 300,
                       num_epochs: int = 3, batch_size: int = 96, lr: float = 0.2,
                       seed: int = 0, kill_rank: int | None = None,
                       kill_into: float = 0.5) -> None:
    """Worker program: :func:`~mgpu.programs.ps.train_demo`'s LeNet over ``dist_sync``,
    with ``mgpu.train(..., checkpoint=checkpoint)``.

    The worker with rank 0 writes the checkpoint after every epoch (a file on a disk
    every worker can read); every worker starts from it when it exists, so a job
    started again runs only the epochs left of ``num_epochs``. ``batch_size`` is the
    global batch (each worker takes ``batch_size // workers`` of its shard). With
    ``kill_rank``, that worker kills itself with ``SIGKILL`` during the epoch after
    the next checkpoint, ``kill_into`` of the way through it (taking the epoch to last
    as long as the one before). Prints one JSON line: the rank, the workers,
    the epochs the checkpoint held at the start (``resumed_after``), the accuracies
    and epoch times of every epoch so far, and a checksum of the parameters.
    """
    from mgpu.backend import mx
    from mgpu.data import load_fashion_mnist
    from mgpu.hardware import devices
    from mgpu.loop import train
    from mgpu.models import LeNet
    from mgpu.programs.ps import params_checksum

    data = load_fashion_mnist(subset=subset, test_subset=test_subset, seed=seed)
    kv = mx.kv.create("dist_sync")
    if kill_rank is not None and kv.rank == kill_rank:
        threading.Thread(target=_kill_when_saved,
                         args=(Path(checkpoint), kill_into, kv.rank),
                         daemon=True).start()
    net = LeNet()
    hist = train(net, data, devices(1), num_epochs=num_epochs, batch_size=batch_size,
                 lr=lr, allreduce=False, kvstore=kv, seed=seed, verbose=False,
                 progress=False, checkpoint=checkpoint)
    report(rank=kv.rank, num_workers=kv.num_workers, resumed_after=hist.resumed,
           batch_size=hist.batch_size, lr=hist.lr, test_acc=hist.test_acc,
           epoch_time=hist.epoch_time, checksum=params_checksum(net), done=time.time())


@dataclass(frozen=True)
class RestartRun:
    """What :func:`restart_after_kill` saw: the killed job, then the restarted one.

    Times are wall-clock seconds (``time.time()``): the emulated hosts share this
    machine's clock and file system.

    >>> run = RestartRun("loopback", 3, 96, 0.2, 64, 0.2 * 2 / 3, 3, saved=1,
    ...                  how_it_ended="", started=0.0, written=10.0, killed=10.5,
    ...                  ended=10.75, restarted=11.0, finished=20.0,
    ...                  resumed=[{"resumed_after": 1, "test_acc": [0.5, 0.6, 0.7]}])
    >>> run.lost_seconds, run.ended_after, run.recomputed, run.test_acc
    (0.5, 0.25, 1, 0.7)
    """

    where: str  #: ``"hosts"`` (a host killed) or ``"loopback"`` (a worker process)
    workers: int  #: workers of the first job; the restart has one fewer
    batch_size: int  #: the first job's global batch
    lr: float  #: the first job's learning rate
    restart_batch_size: int  #: the restart's global batch (same batch per worker)
    restart_lr: float  #: the restart's learning rate, ``lr`` scaled like the batch
    num_epochs: int  #: the epochs planned
    saved: int  #: complete epochs in the checkpoint when the worker was killed
    how_it_ended: str  #: the launcher's message about the first job
    started: float  #: the first job was launched
    written: float  #: the checkpoint the restart resumed from was written
    killed: float  #: the worker (or host) was killed
    ended: float  #: the launcher had ended the first job
    restarted: float  #: the second job was launched
    finished: float  #: the second job had ended
    left_after_kill: dict = field(default_factory=dict)  #: processes left, by host
    left_after_restart: dict = field(default_factory=dict)  #: the same, after it
    resumed: list = field(default_factory=list)  #: the restarted workers' reports

    @property
    def lost_seconds(self) -> float:
        """The unfinished epoch's work, from the checkpoint's writing to the kill."""
        return self.killed - self.written

    @property
    def ended_after(self) -> float:
        """Seconds from the kill to the end of the first job."""
        return self.ended - self.killed

    @property
    def resumed_after(self) -> int:
        """The epochs the restarted workers found in the checkpoint."""
        return min(r["resumed_after"] for r in self.resumed)

    @property
    def recomputed(self) -> int:
        """Epochs trained twice (the killed job had begun epoch ``saved + 1``)."""
        return self.saved + 1 - self.resumed_after

    @property
    def test_acc(self) -> float:
        """The restarted job's final test accuracy."""
        return float(self.resumed[0]["test_acc"][-1])


def _checked(workers: int, batch_size: int, kill_into: float) -> None:
    from mgpu.checks import positive_int

    if positive_int("workers", workers) < 2:
        raise ValueError(f"workers={workers}: a restart with one worker fewer needs at "
                         "least 2 workers; use workers=2 or more")
    positive_int("batch_size", batch_size)
    if not (isinstance(kill_into, (int, float)) and 0 <= kill_into < 1):
        raise ValueError(f"kill_into must be a share of an epoch, at least 0 and below "
                         f"1 (0.5: half-way through), not {kill_into!r}")
    if batch_size % workers:
        raise ValueError(f"batch_size={batch_size} does not split over {workers} "
                         f"workers: use a multiple of {workers}")


def _wait_saved(checkpoint: Path, alive, timeout: float) -> float:
    """Wait for ``checkpoint`` to exist while the job is ``alive()``; its mtime."""
    deadline = time.monotonic() + timeout
    while not checkpoint.exists():
        if not alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the job ended or timed out before its first "
                               f"checkpoint {checkpoint} was written")
        time.sleep(_POLL)
    return checkpoint.stat().st_mtime


def _mxlaunch(hosts, on, workers: int, program: list[str], cwd: Path, name: str,
              timeout: float) -> subprocess.Popen:
    """``mxlaunch --launcher ssh`` on the first host of ``on`` (the scheduler there),
    the server and workers on the hosts ``on``, round robin."""
    hostfile = hosts.hostfile(cwd / f"{name}-hosts", hosts=on)
    argv = [sys.executable, "-m", "mgpu.cluster.mxlaunch", "--host-ip", on[0].address,
            "--timeout", str(int(timeout)), "--keepalive", "1", "-n", str(workers),
            "-s", "1", "-H", str(hostfile), "--launcher", "ssh", *program]
    return subprocess.Popen(hosts.command(on[0], argv), cwd=cwd, text=True,
                            env=hosts.env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _program(**kwargs: object) -> list[str]:
    argv = [sys.executable, "-m", "mgpu", "train_checkpointed"]
    for key, value in kwargs.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


def restart_after_kill(hosts: Hosts | None = None, *, workers: int = 3,
                       subset: int = 1536, test_subset: int = 300, num_epochs: int = 3,
                       batch_size: int = 96, lr: float = 0.2, seed: int = 0,
                       kill_into: float = 0.5, timeout: float = 120.0) -> RestartRun:
    """Kill one worker of a checkpointed ``dist_sync`` job during the epoch after its
    first checkpoint, then restart the job with one worker fewer; return what was
    lost.

    Both jobs run :func:`train_checkpointed` with one checkpoint file in a temporary
    directory, which every host reads and writes: emulated hosts share this machine's
    file system (real machines need a shared file system, or a copy). With ``hosts``
    (a :class:`~mgpu.cluster.hosts.Hosts` of at least ``workers`` hosts), ``mxlaunch
    --launcher ssh`` runs on the first host with the scheduler, and the server and
    first worker there too, one worker on each other host; ``kill_into`` of the way
    through the epoch after the first checkpoint (an epoch lasting as long as the
    first), every process of the last host is killed, and the launcher ends the job.
    The restart runs on the hosts left. With ``hosts=None`` both jobs run on this
    machine's loopback (:func:`~mgpu.cluster.local.run_local_cluster`) and the worker
    with rank ``workers - 1`` kills itself instead. The restart keeps each worker's
    batch, so the global batch shrinks by ``(workers - 1) / workers`` and so does the
    learning rate (the linear rule).

    >>> restart_after_kill(workers=1)
    Traceback (most recent call last):
    ...
    ValueError: workers=1: a restart with one worker fewer needs at least 2 workers...
    """
    _checked(workers, batch_size, kill_into)
    fewer = workers - 1
    restart_batch = batch_size // workers * fewer
    restart_lr = lr * fewer / workers
    common = dict(subset=subset, test_subset=test_subset, num_epochs=num_epochs,
                  seed=seed)
    with tempfile.TemporaryDirectory(prefix="mgpu-restart-") as tmp:
        checkpoint = Path(tmp) / "lenet.ckpt"
        first = dict(checkpoint=str(checkpoint), batch_size=batch_size, lr=lr, **common)
        again = dict(checkpoint=str(checkpoint), batch_size=restart_batch,
                     lr=restart_lr, **common)
        if hosts is None:
            killed = _kill_on_loopback(workers, first, checkpoint, kill_into, timeout)
            resumed = _restart_on_loopback(fewer, again, timeout)
        else:
            if len(hosts) < workers:
                raise ValueError(f"{workers} workers, one per host, need {workers} "
                                 f"hosts; hosts has {len(hosts)}: make more")
            used = list(hosts)[:workers]
            killed = _kill_a_host(hosts, used, workers, first, checkpoint, kill_into,
                                  timeout, Path(tmp))
            resumed = _restart_on_hosts(hosts, used[:fewer], fewer, again, timeout,
                                        Path(tmp))
    return RestartRun(where="loopback" if hosts is None else "hosts", workers=workers,
                      batch_size=batch_size, lr=lr, restart_batch_size=restart_batch,
                      restart_lr=restart_lr, num_epochs=num_epochs, **killed, **resumed)


def _kill_on_loopback(workers, first, checkpoint, kill_into, timeout) -> dict:
    from mgpu.cluster.local import ClusterError, run_local_cluster
    from mgpu.cluster.processes import running

    job = partial(train_checkpointed, kill_rank=workers - 1, kill_into=kill_into,
                  **first)
    started = time.time()
    try:
        run_local_cluster(job, workers, timeout=timeout)
    except ClusterError as err:
        ended = time.time()
        result = err.result
        message = str(err).splitlines()[0]
    else:
        raise RuntimeError("the job finished: its worker was never killed (a job too "
                           "short?)")
    kills = [r for r in result.reports() if r.get("event") == "killed"]
    if not kills:
        raise RuntimeError(f"the job failed before the kill: {message}")
    left = running(result.pids, groups=True)
    return dict(saved=_saved(checkpoint), how_it_ended=message, started=started,
                written=checkpoint.stat().st_mtime, killed=kills[0]["at"], ended=ended,
                left_after_kill={"this machine": left} if left else {})


def _restart_on_loopback(fewer, again, timeout) -> dict:
    from mgpu.cluster.local import run_local_cluster
    from mgpu.cluster.processes import running

    restarted = time.time()
    result = run_local_cluster(partial(train_checkpointed, **again), fewer,
                               timeout=timeout)
    finished = time.time()
    left = running(result.pids, groups=True)
    return dict(resumed=sorted(result.reports(), key=lambda r: r["rank"]),
                restarted=restarted, finished=finished,
                left_after_restart={"this machine": left} if left else {})


def _kill_a_host(hosts, used, workers, first, checkpoint, kill_into, timeout,
                 cwd) -> dict:
    started = time.time()
    proc = _mxlaunch(hosts, used, workers, _program(**first), cwd, "first", timeout)
    try:
        written = _wait_saved(checkpoint, lambda: proc.poll() is None, timeout)
        time.sleep(max(0.0, _kill_time(checkpoint, kill_into) - time.time()))
        hosts.kill(used[-1])
        killed = time.time()
        _, err = proc.communicate(timeout=timeout)
        ended = time.time()
    finally:
        if proc.poll() is None:
            for host in used:
                hosts.kill(host)
            proc.wait()
    said = [m for m in err.splitlines() if m.startswith("mxlaunch: ")]
    return dict(saved=_saved(checkpoint), started=started, written=written,
                killed=killed, ended=ended,
                how_it_ended=f"status {proc.returncode}: "
                + (said[0] if said else err.strip()[-300:]),
                left_after_kill=hosts.left(10.0))


def _restart_on_hosts(hosts, used, fewer, again, timeout, cwd) -> dict:
    restarted = time.time()
    proc = _mxlaunch(hosts, used, fewer, _program(**again), cwd, "again", timeout)
    out, err = proc.communicate(timeout=timeout + 30)
    finished = time.time()
    if proc.returncode != 0:
        tail = " / ".join(err.strip().splitlines()[-3:])
        raise RuntimeError(f"the restarted job failed ({proc.returncode}): {tail}")
    return dict(resumed=sorted(read_reports(out), key=lambda r: r["rank"]),
                restarted=restarted, finished=finished,
                left_after_restart=hosts.left(10.0))
