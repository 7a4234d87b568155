"""Run one of the book's programs in a fresh Python process and read its reports.

Some settings MXNet reads only once, when it starts (``MXNET_OMP_MAX_THREADS``,
``MXNET_CPU_WORKER_NTHREADS``, ...), its profiler works once per process, and a process
that has run other work holds that work's memory: such a measurement runs in a process
of its own. :func:`run_program` starts ``python -m mgpu NAME --name value ...`` (see
:mod:`mgpu.programs.registry`) with the given environment and returns what the program
reported (:func:`mgpu.programs.report.read_reports`). Standard library only.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from mgpu.programs.registry import PROGRAMS
from mgpu.programs.report import read_reports

__all__ = ["program_argv", "run_program"]


def program_argv(name: str, **kwargs: object) -> list[str]:
    """The command line that runs the program ``name`` with ``kwargs`` in a fresh
    Python: every value written as a Python literal, which ``python -m mgpu`` reads
    back.

    >>> program_argv("kv_reduce_timeline", kvstore="local", width=4)[1:]
    ['-m', 'mgpu', 'kv_reduce_timeline', '--kvstore', "'local'", '--width', '4']
    """
    if name not in PROGRAMS:
        raise ValueError(f"program {name!r} is not one of the book's programs: "
                         f"{', '.join(PROGRAMS)}")
    argv = [sys.executable, "-m", "mgpu", name]
    for key, value in kwargs.items():
        argv += [f"--{key.replace('_', '-')}", repr(value)]
    return argv


def run_program(name: str, *, env: Mapping[str, str] | None = None,
                timeout: float = 600, **kwargs: object) -> list[dict]:
    """Run the program ``name`` with ``kwargs`` in a fresh Python with ``env`` added to
    the environment; return its reports, in order.

    A program that exits with an error (or reports nothing) raises a RuntimeError with
    its name, its exit code and the end of its stderr.

    >>> run_program("thread_census", devices=1)[0]["cpu(0)"] > 1
    True
    """
    bad = {k: v for k, v in (env or {}).items() if not isinstance(v, str)}
    if bad:
        raise TypeError("env values must be str (environment variables hold text), "
                        f"got {bad}")
    argv = program_argv(name, **kwargs)
    try:
        done = subprocess.run(argv, env={**os.environ, **(env or {})},
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{name} in a fresh process did not finish in "
                           f"{timeout:g} s; give it a larger timeout") from None
    reports = read_reports(done.stdout)
    if done.returncode == 0 and reports:
        return reports
    lines = done.stderr.strip().splitlines() or ["(no output)"]
    why = f"exit code {done.returncode}" + ("" if done.returncode else ", no report")
    raise RuntimeError(f"{name} in a fresh process failed ({why}): {lines[-1]}\n"
                       "The end of its stderr:\n" + "\n".join(lines[-15:]))
