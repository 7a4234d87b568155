"""A local MXNet parameter-server cluster: scheduler, servers and workers as separate
processes.

MXNet's distributed KVStore (``dist_sync``, ``dist_async``) runs on ps-lite: one
*scheduler* process introduces the nodes to each other, *server* processes hold the
parameters and sum what the workers push, and *worker* processes run the training
script. Every process learns its role and where the scheduler is from ``DMLC_*``
environment variables. :func:`run_local_cluster` starts such a cluster on one host, with
every process bound to 127.0.0.1, runs a program on every worker, collects each worker's
output and shuts the whole cluster down.

ps-lite has no fault tolerance: when one node dies the others wait for it forever. The
launcher therefore watches every process and ends the job itself, with a
:class:`ClusterError` naming the process that failed, as soon as any process exits with
an error, or when ``timeout`` expires. Every process runs in its own session (process
group); on the way out each group is sent ``SIGTERM``, then ``SIGKILL``, so nothing is
left running.

The launcher may also die itself, for instance killed with ``SIGKILL``, before it can
stop anything. Every process therefore watches a pipe whose write end only the launcher
holds; when the launcher dies, the operating system closes that end, and each process
kills its own process group at once.

This module uses the standard library only: it starts MXNet in other processes and never
imports it. Its arguments are checked by :func:`mgpu.cluster.job.check_job`, its
processes stopped by :func:`mgpu.cluster.processes.stop_processes`. The worker programs
of the book are in :mod:`mgpu.programs.ps`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mgpu.cluster.job import Job, check_job, check_port
from mgpu.cluster.processes import (  # running: for the doctests
    LOOPBACK,
    free_port,
    running,  # noqa: F401
    stop_processes,
)
from mgpu.programs.report import read_reports

__all__ = [
    "ClusterError",
    "ClusterResult",
    "ClusterTimeout",
    "GUARD",
    "Node",
    "PortInUseError",
    "ProcessResult",
    "cluster_env",
    "run_local_cluster",
    "watch",
]

_POLL = 0.05  # seconds between checks of the processes
_SHUTDOWN_GRACE = 10.0  # seconds the scheduler and servers get after the workers end
_PORT_ATTEMPTS = 3

#: Every process of the cluster runs this first. Its first argument is the read end of
#: a pipe whose write end only the launcher holds. The read returns b"" (end of file)
#: once that end is closed: by the launcher after the job, or by the kernel when the
#: launcher dies, even by SIGKILL. The thread then kills the process's whole group, so
#: nothing outlives the launcher.
# [start GUARD]
GUARD = r"""
import os, signal, sys, threading
def _guard(fd):
    while os.read(fd, 64):
        pass
    os.killpg(os.getpgrp(), signal.SIGKILL)
threading.Thread(target=_guard, args=(int(sys.argv.pop(1)),), daemon=True).start()
"""
# [end GUARD]

# The scheduler and the servers: importing mxnet runs the node's loop until the job is
# over.
_SERVICE = GUARD + "import mxnet\n"

# Every worker program runs inside this wrapper. An uncaught exception ends the process
# at once with os._exit: a normal interpreter exit would destroy the KVStore, whose
# destructor waits in a barrier for the other workers, which themselves wait for the
# failed one, forever.
_BOOT = GUARD + r"""
import traceback
kind, target = sys.argv[1], sys.argv[2]
def _leave(code):
    sys.stdout.flush(); sys.stderr.flush(); os._exit(code)
try:
    if kind == "script":
        sys.argv = [target, *sys.argv[3:]]
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        import runpy
        runpy.run_path(target, run_name="__main__")
    else:
        sys.argv = ["-c", *sys.argv[3:]]
        exec(compile(target, "<worker>", "exec"), {"__name__": "__main__"})
except SystemExit as e:
    if e.code not in (None, 0):
        if not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        _leave(e.code if isinstance(e.code, int) else 1)
except BaseException:
    traceback.print_exc()
    _leave(1)
"""


@dataclass
class ProcessResult:
    """What one process of the cluster did: its exit status, output and running time."""

    role: str  #: ``"worker"``, ``"server"`` or ``"scheduler"``
    index: int  #: launch order within its role (a worker's ps-lite rank may differ)
    pid: int
    returncode: int | None
    stdout: str
    stderr: str
    elapsed: float  #: seconds from start to exit (or to the end of the job)

    @property
    def name(self) -> str:
        """``'worker 1'``, ``'server 0'`` or ``'scheduler'``."""
        return "scheduler" if self.role == "scheduler" else f"{self.role} {self.index}"

    def json(self) -> list[dict]:
        """The JSON objects the process printed, one per line (other lines are skipped).

        >>> ProcessResult("worker", 0, 1, 0, 'hello\\n{"rank": 0}\\n', "", 1.0).json()
        [{'rank': 0}]
        """
        return read_reports(self.stdout)


@dataclass
class ClusterResult:
    """What :func:`run_local_cluster` did: a :class:`ProcessResult` per process."""

    workers: list[ProcessResult]
    servers: list[ProcessResult]
    scheduler: ProcessResult | None
    port: int  #: the scheduler's port on 127.0.0.1
    elapsed: float  #: wall time of the whole job, start-up and shutdown included
    #: ports abandoned because they were taken
    ports_tried: list[int] = field(default_factory=list)

    @property
    def processes(self) -> list[ProcessResult]:
        """Every process the launcher started (scheduler, servers, workers)."""
        head = [self.scheduler] if self.scheduler is not None else []
        return head + self.servers + self.workers

    @property
    def pids(self) -> list[int]:
        """The PIDs of every process started (check them with
        :func:`~mgpu.cluster.processes.running`)."""
        return [p.pid for p in self.processes]

    def reports(self) -> list[dict]:
        """Every JSON line the workers printed, in worker order."""
        return [r for w in self.workers for r in w.json()]


class ClusterError(RuntimeError):
    """A cluster job that failed: a process died, the timeout expired, or a port was
    taken.

    ``failed`` is the process that ended the job (``None`` on a timeout) and ``result``
    holds what every process printed. All processes have been stopped when this is
    raised.
    """

    def __init__(self, message: str, result: ClusterResult | None = None,
                 failed: ProcessResult | None = None):
        super().__init__(message)
        self.result = result
        self.failed = failed


class ClusterTimeout(ClusterError):
    """The job ran longer than its ``timeout`` (often: workers waiting for each
    other)."""


class PortInUseError(ClusterError):
    """The scheduler's port on 127.0.0.1 is taken by another program."""


def _port_is_free(port: int, host: str = LOOPBACK) -> bool:
    # ZeroMQ binds with SO_REUSEADDR; do the same so that TIME_WAIT leftovers do not
    # count.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def cluster_env(role: str, port: int, num_workers: int = 2, num_servers: int = 1,
                ps_verbose: int = 0) -> dict[str, str]:
    """The ``DMLC_*`` variables that tell a process its role and where the scheduler is.

    ``DMLC_NODE_HOST`` makes servers and workers bind to 127.0.0.1 too; without it
    ps-lite binds them to the first network interface it finds.

    >>> env = cluster_env("worker", 9091)
    >>> tuple(env[k] for k in ("DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT",
    ...                        "PS_VERBOSE"))
    ('worker', '127.0.0.1', '9091', '0')
    """
    if role not in ("scheduler", "server", "worker"):
        raise ValueError("role must be 'scheduler', 'server' or 'worker', not "
                         f"{role!r}")
    return {
        "DMLC_ROLE": role,
        "DMLC_PS_ROOT_URI": LOOPBACK,
        "DMLC_PS_ROOT_PORT": str(port),
        "DMLC_NUM_SERVER": str(num_servers),
        "DMLC_NUM_WORKER": str(num_workers),
        "DMLC_NODE_HOST": LOOPBACK,
        "PS_VERBOSE": str(ps_verbose),
    }


def _env_for(job: Job, role: str, port: int) -> dict[str, str]:
    """The environment of a process of ``role``: this one's, less its ``DMLC_*`` and
    ``PS_*`` variables, plus the cluster's and the caller's."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "PS_"))}
    e["PYTHONUNBUFFERED"] = "1"
    e.update(cluster_env(role, port, job.num_workers, job.num_servers, job.ps_verbose))
    e.update(job.env)
    return e


class Node:
    """One process of a running cluster: started at once, in a session of its own, its
    output in ``workdir``; the launcher polls it and records when it ended."""

    def __init__(self, role: str, index: int, code: str, argv: Sequence[str],
                 env: Mapping[str, str], workdir: Path, guard_fd: int):
        self.role, self.index = role, index
        self.out_path = workdir / f"{role}{index}.out"
        self.err_path = workdir / f"{role}{index}.err"
        cmd = [sys.executable, "-c", code, str(guard_fd), *argv]
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.start = time.perf_counter()
            self.popen = subprocess.Popen(cmd, env=env, stdout=out, stderr=err,
                                          stdin=subprocess.DEVNULL,
                                          start_new_session=True, pass_fds=(guard_fd,))
        self.end: float | None = None

    def poll(self) -> int | None:
        """The exit status, or None while the process runs (the first status seen
        records the end time)."""
        code = self.popen.poll()
        if code is not None and self.end is None:
            self.end = time.perf_counter()
        return code

    def result(self) -> ProcessResult:
        """What the process did, its output read back from its files."""

        def read(p):
            return p.read_text(encoding="utf-8", errors="replace") if p.exists() else ""

        end = self.end if self.end is not None else time.perf_counter()
        return ProcessResult(self.role, self.index, self.popen.pid,
                             self.popen.returncode, read(self.out_path),
                             read(self.err_path), end - self.start)


class _Failed(Exception):
    """A process exited with an error (raised while the others still run)."""

    def __init__(self, proc: Node):
        super().__init__(proc.role, proc.index)
        self.proc = proc


class _Deadline(Exception):
    """The job's ``timeout`` passed with workers still running."""


def watch(procs: list[Node], deadline: float) -> None:
    """Wait for the workers; raise ``_Failed`` or ``_Deadline`` (this module's own
    exceptions) if they do not finish."""
    workers = [p for p in procs if p.role == "worker"]
    while True:
        failed = [p for p in procs if p.poll() not in (None, 0)]
        if failed:
            raise _Failed(min(failed, key=lambda p: p.end))
        if all(w.poll() == 0 for w in workers):
            break
        if time.perf_counter() > deadline:
            raise _Deadline
        time.sleep(_POLL)
    # The workers are done: the scheduler and the servers stop by themselves, normally
    # at once.
    services_end = min(deadline, time.perf_counter() + _SHUTDOWN_GRACE)
    while any(p.poll() is None for p in procs) and time.perf_counter() < services_end:
        time.sleep(_POLL)


def _stop(procs: list[Node]) -> None:
    """Stop every process group (SIGTERM, a grace period, SIGKILL), reap it all."""
    stop_processes([p.popen.pid for p in procs])
    for p in procs:
        p.popen.wait()
        p.poll()


def _how_it_ended(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "an unknown signal"
        return f"was killed by signal {-code} ({name})"
    return f"exited with code {code}"


def _tail(text: str, lines: int = 12) -> str:
    kept = [line for line in text.rstrip().splitlines() if line.strip()][-lines:]
    return "\n".join("    " + line for line in kept) if kept else "    (empty)"


def _failure_message(p: ProcessResult, num_workers: int) -> str:
    who = f"worker {p.index} of {num_workers}" if p.role == "worker" else p.name
    out = "" if p.stderr.strip() else f"\nLast lines of its stdout:\n{_tail(p.stdout)}"
    return (f"{who} (pid {p.pid}) {_how_it_ended(p.returncode)} after {p.elapsed:.1f} "
            "s; the other processes would have waited for it forever, so the launcher "
            "stopped the whole job.\nLast lines of its "
            f"stderr:\n{_tail(p.stderr)}{out}")


def _timeout_message(result: ClusterResult, timeout: float) -> str:
    busy = [w for w in result.workers if w.returncode is None or w.returncode < 0]
    names = ", ".join(str(w.index) for w in busy) or "none"
    tails = "".join(
        f"\nworker {w.index} (pid {w.pid}), last lines of its "
        + (f"stderr:\n{_tail(w.stderr, 6)}" if w.stderr.strip()
           else f"stdout:\n{_tail(w.stdout, 6)}")
        for w in busy)
    return (f"the job did not finish within {timeout:g} s (workers still running: "
            f"{names}); all processes were stopped. Workers that wait forever usually "
            "mean another node died or the workers ran unequal numbers of "
            f"batches.{tails}")


def _start(procs: list[Node], job: Job, port: int, workdir: Path,
           guard_fd: int) -> None:
    """Start the scheduler, the servers and the workers, adding each to ``procs`` at
    once."""
    try:
        for role, count, code, argv in (("scheduler", 1, _SERVICE, []),
                                        ("server", job.num_servers, _SERVICE, []),
                                        ("worker", job.num_workers, _BOOT, job.argv)):
            for i in range(count):
                procs.append(Node(role, i, code, argv, _env_for(job, role, port),
                                   workdir, guard_fd))
    finally:
        os.close(guard_fd)  # only the children read the pipe (see GUARD)


def _launch_once(job: Job, port: int) -> ClusterResult:
    """Run the job once with its scheduler on ``port``; raise :class:`ClusterError` if
    it fails."""
    ending: _Failed | _Deadline | None = None
    with tempfile.TemporaryDirectory(prefix="mgpu-cluster-") as tmp:
        procs: list[Node] = []
        begin = time.perf_counter()
        guard_fd, launcher_fd = os.pipe()  # neither end is inherited unless passed
        try:
            _start(procs, job, port, Path(tmp), guard_fd)
            watch(procs, begin + job.timeout)
        except (_Failed, _Deadline) as e:
            ending = e
        finally:
            _stop(procs)
            os.close(launcher_fd)  # any process still alive now kills its own group
        elapsed = time.perf_counter() - begin
        results = [p.result() for p in procs]
    result = ClusterResult(workers=[r for r in results if r.role == "worker"],
                           servers=[r for r in results if r.role == "server"],
                           scheduler=results[0], port=port, elapsed=elapsed)
    if isinstance(ending, _Deadline):
        raise ClusterTimeout(_timeout_message(result, job.timeout), result)
    if isinstance(ending, _Failed):
        failed = results[procs.index(ending.proc)]
        if failed.role == "scheduler" and "bind failed" in failed.stderr:
            raise PortInUseError(
                f"the scheduler could not bind port {port} on {LOOPBACK} (ps-lite: "
                "'bind failed'): another program holds it, or a killed job's socket is "
                "still closing; pass another port, or none to pick a free one", result,
                failed)
        raise ClusterError(_failure_message(failed, job.num_workers), result, failed)
    return result


def run_local_cluster(
    program: str | os.PathLike | Callable[..., object],
    num_workers: int = 2,
    num_servers: int = 1,
    args: Sequence[object] = (),
    *,
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
    ps_verbose: int = 0,
    pick_port: Callable[[], int] = free_port,
) -> ClusterResult:
    """Run ``program`` on ``num_workers`` workers of a fresh local parameter-server
    cluster.

    The cluster is 1 scheduler, ``num_servers`` servers and ``num_workers`` workers,
    each a separate Python process on 127.0.0.1. ``program`` is what every worker runs:

    - a :class:`pathlib.Path` to a script, run as ``python script *args``;
    - a ``str`` of Python code, run like ``python -c code *args``;
    - an importable module-level function, called as ``function(*args)``, or a
      ``functools.partial`` of one (arguments must be Python literals).

    The program creates its KVStore with ``mx.kv.create("dist_sync")`` (or
    ``"dist_async"``); ps-lite numbers the workers itself, so ``kv.rank`` need not equal
    the launch order.

    Returns when every worker has exited with code 0. Raises :class:`ClusterError` as
    soon as any process exits otherwise (naming it, with how it ended and the end of its
    stderr), :class:`ClusterTimeout` after ``timeout`` seconds, and
    :class:`PortInUseError` when ``port`` is taken. Without ``port`` a free one is
    picked, and another if the scheduler's bind fails. In every case all processes are
    stopped before the function returns. ``env`` adds variables (e.g.
    ``{"OMP_NUM_THREADS": "1"}``); ``ps_verbose=2`` makes ps-lite log its start-up.

    ``pick_port`` is what picks the port when ``port`` is not given: a function without
    arguments, called once per attempt (by default
    :func:`~mgpu.cluster.processes.free_port`).

    Bad arguments raise ``TypeError`` or ``ValueError`` (a missing script
    ``FileNotFoundError``) with a message that names the argument and says how to fix
    it, before any process starts.

    >>> code = ("import mxnet as mx; kv = mx.kv.create('dist_sync'); "
    ...         "print(kv.num_workers)")
    >>> r = run_local_cluster(code, num_workers=1)
    >>> r.workers[0].returncode, r.workers[0].stdout, running(r.pids)
    (0, '1\\n', [])
    """
    job = check_job(program, num_workers, num_servers, args, timeout, env, ps_verbose,
                    port, pick_port)
    if job.port is not None:
        if not _port_is_free(job.port):
            raise PortInUseError(f"port {job.port} on {LOOPBACK} is already in use; "
                                 "pass another port, or none to let the launcher pick "
                                 "a free one")
        return _launch_once(job, job.port)
    tried: list[int] = []
    for _ in range(_PORT_ATTEMPTS):
        use = check_port(job.pick_port(), "the port returned by pick_port",
                         "pick_port must return a free TCP port, as free_port does")
        try:
            result = _launch_once(job, use)
        except PortInUseError as err:
            tried.append(use)
            last = err
            continue
        except ClusterError as err:
            err.result.ports_tried = tried
            raise
        result.ports_tried = tried
        return result
    last.result.ports_tried = tried
    raise PortInUseError(f"the scheduler could not bind any of ports {tried} on "
                         f"{LOOPBACK} (ps-lite: 'bind failed')", last.result,
                         last.failed)
