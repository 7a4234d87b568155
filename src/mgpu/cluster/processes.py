"""Processes on this machine, read from ``/proc``, and the one way the package stops
them.

:func:`stop_processes` is what the local cluster (:mod:`mgpu.cluster.local`), MXNet's
launcher (:mod:`mgpu.cluster.mxlaunch`) and the Horovod runner
(:mod:`mgpu.cluster.horovodrun`) all use to end a job: ``SIGTERM`` to every process
(to its whole process group when it leads one), :data:`TERM_GRACE` seconds to exit,
then ``SIGKILL`` to whatever is left. :func:`free_port` is the one way they pick a
port. Standard library only: nothing here imports MXNet.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess  # noqa: F401  (the doctests use it)
import sys  # noqa: F401  (the doctests use it)
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = [
    "LOOPBACK",
    "TERM_GRACE",
    "descendants",
    "free_port",
    "processes",
    "running",
    "stop_processes",
    "wait_for_exit",
]

#: The only address the book's local jobs use (nothing listens on a network interface).
LOOPBACK = "127.0.0.1"
#: Seconds between ``SIGTERM`` and ``SIGKILL`` when a job is stopped.
TERM_GRACE = 3.0
_POLL = 0.05  # seconds between two looks at /proc


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it when binding to
    port 0).

    >>> 1024 <= free_port() <= 65535
    True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def processes() -> list[tuple[int, int, int]]:
    """``(pid, parent pid, process group)`` of every live process (zombies excluded),
    from ``/proc``.

    >>> os.getpid() in [pid for pid, _, _ in processes()]
    True
    """
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X"):
            found.append((int(entry.name), int(fields[1]), int(fields[2])))
    return found


def running(pids: Sequence[int], groups: bool = False) -> list[int]:
    """Those of ``pids`` that are still running (zombies count as gone), read from
    ``/proc``.

    With ``groups=True`` the list also holds every live process of the process groups
    that ``pids`` lead: the children a program started, which outlive it unless they are
    stopped.

    >>> running([os.getpid()]) == [os.getpid()]
    True
    """
    wanted = set(pids)
    alive = [pid for pid, _, group in processes()
             if pid in wanted or groups and group in wanted]
    return sorted(alive, key=lambda p: (p not in wanted, p))


def descendants(root: int) -> set[int]:
    """The live children of process ``root``, their children, and so on.

    >>> child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    >>> child.pid in descendants(os.getpid())
    True
    >>> child.kill(); child.wait() and None
    """
    tree: dict[int, list[int]] = {}
    for pid, parent, _ in processes():
        tree.setdefault(parent, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def wait_for_exit(pids: Iterable[int], seconds: float,
                  groups: bool = False) -> list[int]:
    """Wait up to ``seconds`` for ``pids`` (with ``groups``, their process groups too)
    to end; return what still runs then, as :func:`running` does.

    >>> wait_for_exit([os.getpid()], 0.1) == [os.getpid()]
    True
    """
    wanted = sorted(set(pids))
    deadline = time.monotonic() + seconds
    left = running(wanted, groups)
    while left and time.monotonic() < deadline:
        time.sleep(_POLL)
        left = running(wanted, groups)
    return left


def _signal(pids: Iterable[int], sig: int) -> None:
    """Send ``sig`` to each process group that one of ``pids`` leads, else to the
    process."""
    table = processes()
    groups = {group for _, _, group in table}
    alive = {pid for pid, _, _ in table}
    for pid in pids:
        send = os.killpg if pid in groups else os.kill if pid in alive else None
        if send is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                send(pid, sig)


def stop_processes(pids: Iterable[int], grace: float = TERM_GRACE) -> list[int]:
    """Stop ``pids`` and the process groups they lead: ``SIGTERM``, up to ``grace``
    seconds to exit, then ``SIGKILL`` to what is left; return what was left (``[]``
    when ``SIGTERM`` was enough).

    A process started with ``start_new_session=True`` leads a group of its own, which
    holds the children it starts: they are stopped with it. The caller reaps its own
    children afterwards (``Popen.wait``); a zombie counts as stopped.

    >>> child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
    ...                          start_new_session=True)
    >>> stop_processes([child.pid]), child.wait()
    ([], -15)
    """
    wanted = sorted(set(pids))
    _signal(wanted, signal.SIGTERM)
    left = wait_for_exit(wanted, grace, groups=True)
    if left:
        _signal(wanted + left, signal.SIGKILL)
        wait_for_exit(left, grace)
    return left
