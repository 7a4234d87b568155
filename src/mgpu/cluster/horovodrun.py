"""Running ``horovodrun``: every process of the job recorded, none left.

``horovodrun`` starts the ranks of a Horovod job (on remote hosts over ``ssh``) and ends
the job when one of them fails. :func:`run_horovod` runs it in a subprocess with a time
limit, on loopback or across emulated hosts (:class:`mgpu.cluster.hosts.Hosts`), records
every process the job started, on every host, and stops them all with
:func:`mgpu.cluster.processes.stop_processes`; :class:`HorovodResult` holds what the
ranks printed. The programs the ranks run are in :mod:`mgpu.programs.horovod`.

Standard library only: nothing here imports MXNet or Horovod (:func:`horovod_available`
tries the import in another process).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mgpu.cluster.processes import descendants, stop_processes, wait_for_exit
from mgpu.programs.report import read_reports

if TYPE_CHECKING:  # pragma: no cover
    from mgpu.cluster.hosts import Host, Hosts

__all__ = ["INSTALL_HINT", "HorovodError", "HorovodResult", "horovod_available",
           "horovodrun_path", "run_horovod"]

#: How to get Horovod for this package (it is compiled against the installed MXNet).
INSTALL_HINT = (
    "Horovod is not installed in this Python environment (or was built without "
    "MXNet). The project's sessions build it: `nox -s tests` or `nox -s docs`. By "
    "hand, in a venv that has mxnet==1.9.1 and numpy<1.24, with g++, make and cmake "
    "installed:\n"
    "    HOROVOD_WITH_MXNET=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 "
    "HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 "
    "HOROVOD_CPU_OPERATIONS=gloo \\\n"
    "    pip install --no-build-isolation horovod==0.28.1"
)
_POLL = 0.05  # seconds between two looks at the job's processes
_LEFT_GRACE = 5.0  # seconds the ranks get to exit after horovodrun did
_HOSTS_POLL = 0.25  # seconds between two looks at the processes of emulated hosts


def horovod_available() -> bool:
    """Whether ``horovod.mxnet`` imports here (checked in a fresh process, which it
    initialises).

    Importing Horovod's MXNet module loads its compiled library; the check runs in a
    subprocess so that the caller's process stays free of it.
    """
    probe = subprocess.run([sys.executable, "-c", "import horovod.mxnet"],
                           capture_output=True)
    return probe.returncode == 0


class HorovodError(RuntimeError):
    """``horovodrun`` failed or ran out of time; ``result`` holds what it printed."""

    def __init__(self, message: str, result: HorovodResult):
        super().__init__(message)
        self.result = result


@dataclass
class HorovodResult:
    """What one :func:`run_horovod` job did."""

    command: list[str]  #: the ``horovodrun`` command line
    #: ``horovodrun``'s exit status, or ``None`` if stopped at the timeout
    returncode: int | None
    stdout: str
    stderr: str
    elapsed: float  #: seconds from the start of ``horovodrun`` to its exit
    ended: float  #: ``time.time()`` when ``horovodrun`` exited (or was stopped)
    #: every process of the job that was seen
    pids: list[int] = field(default_factory=list)
    #: still alive after horovodrun exited
    left_running: list[int] = field(default_factory=list)
    #: the job's processes seen in each emulated host, by host name (empty on loopback)
    by_host: dict[str, list[int]] = field(default_factory=dict)

    def reports(self) -> list[dict]:
        """Every JSON object the ranks printed (``horovodrun`` prefixes lines with
        ``[rank]``)."""
        return read_reports(self.stdout)

    def error_line(self) -> str:
        """The first line of the error ``horovodrun`` reported (empty if none)."""
        for line in (self.stderr + "\n" + self.stdout).splitlines():
            text = line.strip()
            if text.startswith(("RuntimeError:", "horovodrun: error", "ValueError:")):
                return text
        return ""

    def why(self) -> str:
        """:meth:`error_line`, or else the last three lines of stderr, joined by "/".

        >>> HorovodResult([], 1, "", "one\\ntwo\\n", 0.0, 0.0).why()
        'one / two'
        """
        lines = [ln.strip() for ln in self.stderr.splitlines() if ln.strip()]
        return self.error_line() or (" / ".join(lines[-3:]) if lines
                                     else "(no output on stderr)")


def horovodrun_path() -> str:
    """The ``horovodrun`` beside this Python (its venv), else the one on ``PATH``."""
    beside = Path(sys.executable).parent / "horovodrun"
    found = str(beside) if beside.is_file() else shutil.which("horovodrun")
    if not found:
        raise ImportError(f"horovodrun not found.\n{INSTALL_HINT}")
    return found


def run_horovod(
    program: Sequence[str],
    np: int = 2,
    hosts: str | None = None,
    *,
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    cwd: str | os.PathLike | None = None,
    network_interface: str | None = None,
    emulated: Hosts | None = None,
) -> HorovodResult:
    """Run ``horovodrun -np NP -H HOSTS --gloo --network-interface IFACE PROGRAM``, on
    loopback or across emulated hosts.

    ``program`` is the command every rank runs, e.g.
    ``[sys.executable, "-m", "mgpu", "hvd_train"]``; ``hosts`` is horovodrun's ``-H``
    (default ``localhost:NP``: every rank on this machine) and ``network_interface``
    its ``--network-interface`` (default ``lo``). While the job runs, every process it
    starts (``horovodrun``'s helpers and the ranks) is recorded in ``pids``;
    ``left_running`` lists those still alive a few seconds after ``horovodrun`` exited
    (it should be empty: they are stopped). After ``timeout`` seconds the job is
    killed. With ``check`` a failed or timed-out job raises :class:`HorovodError`,
    whose first line says how it ended and whose ``result`` holds the output. Nothing
    is left running on return.

    Across emulated hosts, give ``emulated``, a :class:`mgpu.cluster.hosts.Hosts`
    inside its ``with`` block (made with ``ssh=True``, the default)::

        with mgpu.Hosts(2, mgpu.Link(rate="1gbit")) as cluster:
            result = mgpu.run_horovod([sys.executable, "-m", "mgpu", "hvd_allreduce"],
                                      np=2, emulated=cluster)

    Then ``hosts`` defaults to one rank on each of the first ``np`` hosts
    (``ADDRESS1:1,ADDRESS2:1``; give e.g. ``f"{cluster[0].address}:2"`` for another
    placement: addresses, not names, with ``:slots``) and ``network_interface`` to
    ``eth0``, the name every emulated host gives its link. ``horovodrun`` runs inside
    the host named first in ``-H``, as on a cluster where one launches from one of the
    nodes: it checks the interface it is given on the machine it runs on (its ranks'
    rendezvous address is that interface's address), and the launching machine has no
    interface that the hosts can reach under the name ``eth0``. (Horovod 0.28.1 uses
    that interface for its first Gloo context only; its collectives bind to the address
    of the machine's name, which each emulated host resolves to its own address: see
    :mod:`mgpu.cluster.hosts`.) It starts the ranks of
    its own host directly and those of the other hosts through ``ssh``, with the
    run's key (:meth:`~mgpu.cluster.hosts.Hosts.env` puts that ``ssh`` first on
    ``PATH``; ``env`` is added on top), after checking that it can log into each of
    them; ``--disable-cache`` keeps it from remembering that check for hosts that will
    be gone. Every rank runs the same ``program`` in the same ``cwd`` (as on a
    cluster: the same Python, by full path, and files at the same paths on every
    host). Every process that appears in a host while the job runs (the ranks, the
    ``sshd`` sessions that started them) counts as the job's: ``by_host`` lists them
    by host name, ``pids`` holds them too, and those still alive after
    ``horovodrun`` exited (a remote rank whose ``ssh`` was cut, say) are stopped and
    listed in ``left_running``.
    """
    if isinstance(program, str):
        raise TypeError("program must be a list of arguments, e.g. [sys.executable, "
                        "'-m', 'mgpu', 'hvd_allreduce'], not a str")
    np = int(np)
    launch_in: Host | None = None
    if emulated is not None:
        hosts, launch_in = _across(emulated, np, hosts)
        if network_interface is None:
            network_interface = "eth0"
        elif network_interface == "lo":
            raise ValueError("network_interface='lo' cannot join emulated hosts: each "
                             "host's loopback is its own; leave it out (eth0) or give "
                             "the interface of the hosts' link")
    command = [horovodrun_path(), "-np", str(np), "-H", hosts or f"localhost:{np}",
               "--gloo", "--network-interface", network_interface or "lo",
               *(["--disable-cache"] if emulated is not None else []),
               *map(str, program)]
    base = {**os.environ, "PYTHONUNBUFFERED": "1"}
    full_env = {**(base if emulated is None else emulated.env(base)), **(env or {})}
    argv = command if launch_in is None else emulated.command(launch_in, command)
    watch = _HostWatch(emulated)
    seen: set[int] = set()
    with open(os.devnull, "rb") as devnull, \
            tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=devnull, stdout=out, stderr=err,
                                env=full_env, cwd=cwd, start_new_session=True)
        seen.add(proc.pid)
        timed_out = False
        while proc.poll() is None:
            seen |= descendants(proc.pid)
            watch.look()
            if time.perf_counter() - start > timeout:
                timed_out = True
                stop_processes(seen | watch.pids())
                proc.wait()
                break
            time.sleep(_POLL)
        elapsed = time.perf_counter() - start
        ended = time.time()
        # What horovodrun leaves behind: give the ranks a moment to exit, then record
        # the rest.
        watch.look(force=True)
        left = wait_for_exit(seen | watch.pids(), _LEFT_GRACE)
        stop_processes(left)
        left += watch.stop_newcomers()
        out.seek(0)
        err.seek(0)
        result = HorovodResult(command, None if timed_out else proc.returncode,
                               out.read().decode(errors="replace"),
                               err.read().decode(errors="replace"), elapsed, ended,
                               sorted(seen | watch.pids()), sorted(set(left)),
                               watch.by_host())
    if check and (timed_out or result.returncode != 0):
        how = (f"did not finish within {timeout:g} s and was killed" if timed_out
               else f"exited with code {result.returncode} after {elapsed:.1f} s")
        raise HorovodError(f"horovodrun {how}: {result.why()}", result)
    return result


def _across(emulated: Hosts, np: int, hosts: str | None) -> tuple[str, Host]:
    """``-H`` for a job across ``emulated`` (default: one slot on each of the first
    ``np`` hosts) and the host named first in it, where ``horovodrun`` runs."""
    if not emulated.hosts:
        raise ValueError("emulated must be a mgpu.Hosts inside its with block "
                         "(with mgpu.Hosts(2) as cluster: ... emulated=cluster)")
    if hosts is None:
        if np > len(emulated.hosts):
            raise ValueError(f"np={np} ranks, one per host, need {np} hosts but "
                             f"emulated has {len(emulated.hosts)}: make more hosts or "
                             "give hosts='ADDRESS:SLOTS,...' with several slots a host")
        hosts = ",".join(f"{h.address}:1" for h in emulated.hosts[:np])
    named = [entry.split(":")[0].strip() for entry in hosts.split(",")]
    first = named[0]
    by_address = {h.address: h for h in emulated.hosts}
    if first not in by_address:
        raise ValueError(f"hosts must name the emulated hosts by address, e.g. "
                         f"'{emulated.hosts[0].address}:1'; its first entry {first!r} "
                         f"is none of {', '.join(by_address)}")
    if not emulated.ssh and set(named) != {first}:
        raise ValueError("horovodrun starts the ranks of other hosts over ssh, but "
                         "emulated was made with ssh=False: make it with ssh=True "
                         "(the default)")
    return hosts, by_address[first]


class _HostWatch:
    """The processes that appear in emulated hosts while a job runs (nothing without
    hosts)."""

    def __init__(self, emulated: Hosts | None):
        self.emulated = emulated
        hosts = emulated.hosts if emulated is not None else []
        self.before = {h.name: set(emulated.processes(h))  # type: ignore[union-attr]
                       for h in hosts}
        self.seen: dict[str, set[int]] = {h.name: set() for h in hosts}
        self.last = 0.0

    def look(self, force: bool = False) -> None:
        if self.emulated is None or (not force
                                     and time.monotonic() - self.last < _HOSTS_POLL):
            return
        self.last = time.monotonic()
        for host in self.emulated.hosts:
            self.seen[host.name] |= set(self.emulated.processes(host)) - self.before[
                host.name]

    def pids(self) -> set[int]:
        return set().union(*self.seen.values())

    def by_host(self) -> dict[str, list[int]]:
        return {name: sorted(pids) for name, pids in self.seen.items()}

    def stop_newcomers(self) -> list[int]:
        """Stop what appeared in the hosts since the last look (and is still there);
        return it."""
        if self.emulated is None:
            return []
        known = self.pids()
        self.look(force=True)
        late = self.pids() - known
        if late:
            stop_processes(late)
        return sorted(late)
