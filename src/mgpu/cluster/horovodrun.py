"""Running ``horovodrun`` on loopback: every process of the job recorded, none left.

``horovodrun`` starts the ranks of a Horovod job (on remote hosts over ``ssh``) and ends
the job when one of them fails. :func:`run_horovod` runs it in a subprocess with a time
limit, records every process the job started, and stops them all with
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

from mgpu.cluster.processes import descendants, stop_processes, wait_for_exit
from mgpu.programs.report import read_reports

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
) -> HorovodResult:
    """Run ``horovodrun -np NP -H HOSTS --gloo --network-interface lo PROGRAM`` on
    loopback.

    ``program`` is the command every rank runs, e.g.
    ``[sys.executable, "-m", "mgpu", "hvd_train"]``; ``hosts`` is horovodrun's ``-H``
    (default ``localhost:NP``: every rank on this machine). While the job runs, every
    process it starts (``horovodrun``'s helpers and the ranks) is recorded in ``pids``;
    ``left_running`` lists those still alive a few seconds after ``horovodrun`` exited
    (it should be empty). After ``timeout`` seconds the job is killed. With ``check`` a
    failed or timed-out job raises :class:`HorovodError`, whose first line says how it
    ended and whose ``result`` holds the output. Nothing is left running on return.
    """
    if isinstance(program, str):
        raise TypeError("program must be a list of arguments, e.g. [sys.executable, "
                        "'-m', 'mgpu', 'hvd_allreduce'], not a str")
    command = [horovodrun_path(), "-np", str(int(np)), "-H",
               hosts or f"localhost:{int(np)}", "--gloo", "--network-interface", "lo",
               *map(str, program)]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    seen: set[int] = set()
    with open(os.devnull, "rb") as devnull, \
            tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdin=devnull, stdout=out, stderr=err,
                                env=full_env, cwd=cwd, start_new_session=True)
        seen.add(proc.pid)
        timed_out = False
        while proc.poll() is None:
            seen |= descendants(proc.pid)
            if time.perf_counter() - start > timeout:
                timed_out = True
                stop_processes(seen)
                proc.wait()
                break
            time.sleep(_POLL)
        elapsed = time.perf_counter() - start
        ended = time.time()
        # What horovodrun leaves behind: give the ranks a moment to exit, then record
        # the rest.
        left = wait_for_exit(seen, _LEFT_GRACE)
        stop_processes(left)
        out.seek(0)
        err.seek(0)
        result = HorovodResult(command, None if timed_out else proc.returncode,
                               out.read().decode(errors="replace"),
                               err.read().decode(errors="replace"), elapsed, ended,
                               sorted(seen), left)
    if check and (timed_out or result.returncode != 0):
        how = (f"did not finish within {timeout:g} s and was killed" if timed_out
               else f"exited with code {result.returncode} after {elapsed:.1f} s")
        raise HorovodError(f"horovodrun {how}: {result.why()}", result)
    return result
