"""The arguments of a local cluster job, checked before any process starts.

:func:`check_job` turns what :func:`mgpu.cluster.local.run_local_cluster` was given
into a :class:`Job`, or raises ``TypeError`` or ``ValueError`` (a missing script
``FileNotFoundError``) with a message that names the argument, says what was wrong and
how to fix it. Standard library only: :mod:`mgpu.checks` imports MXNet.
"""

from __future__ import annotations

import ast
import functools
import math
import numbers
import operator
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RESERVED", "Job", "check_job", "check_port"]

#: The variables the launcher sets for every process; ``env`` may not set them.
RESERVED = frozenset({"DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT",
                      "DMLC_NUM_SERVER", "DMLC_NUM_WORKER", "DMLC_NODE_HOST"})


@dataclass(frozen=True)
class Job:
    """What every attempt of one
    :func:`~mgpu.cluster.local.run_local_cluster` call starts, checked."""

    #: what the workers' wrapper runs, ``["script", path, *args]`` or
    #: ``["code", source, *args]``
    argv: list[str]
    num_workers: int
    num_servers: int
    timeout: float
    env: dict[str, str]  #: the caller's additions to every process's environment
    ps_verbose: int
    port: int | None  #: the scheduler's port, or None to pick one per attempt
    pick_port: Callable[[], int]  #: what picks a port when ``port`` is None


def _worker_argv(program, args) -> list[str]:
    """The arguments of the workers' wrapper that run ``program`` with ``args``."""
    if isinstance(program, os.PathLike):
        path = Path(program)
        if path.is_dir():
            raise IsADirectoryError(f"program: {path} is a directory, not a script; "
                                    "pass the path of the Python file the workers "
                                    "should run")
        if not path.is_file():
            raise FileNotFoundError(f"program: the worker script {path} does not exist "
                                    f"(looked for {path.resolve()}); pass the path of "
                                    "an existing Python file")
        return ["script", str(path), *map(str, args)]
    if isinstance(program, str):
        one_line = program.strip()
        if one_line.endswith(".py") and "\n" not in one_line and " " not in one_line:
            raise ValueError(
                f"{program!r} looks like a file name, but a str is run as Python code; "
                f"pass pathlib.Path({program!r}) to run a script"
            )
        return ["code", program, *map(str, args)]
    if callable(program):
        kwargs: dict = {}
        if isinstance(program, functools.partial):
            args, kwargs = (*program.args, *args), dict(program.keywords)
            program = program.func
        module = getattr(program, "__module__", None)
        name = getattr(program, "__qualname__", repr(program))
        if module in (None, "__main__") or "<" in name or "." in name:
            raise ValueError(
                f"{name} cannot be imported by the workers: pass a module-level "
                "function of an importable module (not one defined in __main__ or a "
                "notebook), or code as a str"
            )
        call = repr((tuple(args), kwargs))
        try:
            literal = ast.literal_eval(call) == (tuple(args), kwargs)
        except (ValueError, SyntaxError):
            literal = False
        if not literal:
            raise ValueError(f"arguments for {name} must be Python literals, got "
                             f"{call}")
        code = (f"from {module} import {name}\n_args, _kwargs = {call}\n"
                f"{name}(*_args, **_kwargs)\n")
        return ["code", code]
    raise TypeError(f"program must be a pathlib.Path, Python code (str) or a function, "
                    f"not {_kind(program)}; pass e.g. pathlib.Path('train.py')")


def _kind(value: object) -> str:
    """How an error message shows a value it rejects: its type and its repr."""
    return f"{type(value).__name__} {value!r}"


def _is_int(value: object) -> bool:
    return not isinstance(value, bool) and hasattr(type(value), "__index__")


def _count(name: str, value: object, what: str, example: int) -> int:
    if not _is_int(value):
        raise TypeError(f"{name} must be an int (the number of {what}), not "
                        f"{_kind(value)}; pass e.g. {name}={example}")
    if operator.index(value) < 1:
        raise ValueError(f"{name} must be at least 1 (the number of {what}), not "
                         f"{value!r}; pass e.g. {name}={example}")
    return operator.index(value)


def check_port(value: object, name: str, fix: str) -> int:
    """``value`` as a TCP port number (1 to 65535); the error names ``name`` and ends
    with ``fix``.

    >>> check_port(9091, "port", "pass e.g. port=9091")
    9091
    >>> check_port(0, "port", "pass e.g. port=9091")
    Traceback (most recent call last):
    ...
    ValueError: port must be from 1 to 65535, not 0; pass e.g. port=9091
    """
    if not _is_int(value):
        raise TypeError(f"{name} must be an int from 1 to 65535, not {_kind(value)}; "
                        f"{fix}")
    if not 1 <= operator.index(value) <= 65535:
        raise ValueError(f"{name} must be from 1 to 65535, not {value!r}; {fix}")
    return operator.index(value)


def _environment(env: object) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise TypeError("env must be a mapping of variable names to str values, such "
                        f"as {{'OMP_NUM_THREADS': '1'}}, not {_kind(env)}")
    for key, value in env.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise (ValueError if isinstance(key, str) else TypeError)(
                f"env has the key {key!r}, which is not an environment variable name; "
                "use non-empty str keys without '=', such as 'OMP_NUM_THREADS'")
        if not isinstance(value, str):
            number = isinstance(value, numbers.Number) and not isinstance(value, bool)
            fix = (f"pass {{{key!r}: {str(value)!r}}}" if number
                   else "pass a str, or leave the key out")
            raise TypeError(f"env[{key!r}] must be a str, not {_kind(value)}: "
                            f"environment variables hold text; {fix}")
        if "\0" in value:
            raise ValueError(f"env[{key!r}] contains a NUL character, which an "
                             "environment variable cannot hold")
    clash = sorted(RESERVED & set(env))
    if clash:
        raise ValueError(f"env must not set {', '.join(clash)}: these are set by the "
                         "launcher for every process (from num_workers, num_servers "
                         "and port); remove them from env")
    return dict(env)


def check_job(program: object, num_workers: object, num_servers: object,
              args: object, timeout: object, env: object, ps_verbose: object,
              port: object, pick_port: object) -> Job:
    """The arguments of :func:`~mgpu.cluster.local.run_local_cluster`, checked: a
    :class:`Job`, or an error that names the argument and says how to fix it.

    >>> check_job("pass", 2, 1, [], 60, None, 0, None, lambda: 9091).argv
    ['code', 'pass']
    >>> check_job("pass", 0, 1, [], 60, None, 0, None, lambda: 9091)
    Traceback (most recent call last):
    ...
    ValueError: num_workers must be at least 1 (the number of worker processes), ...
    """
    num_workers = _count("num_workers", num_workers, "worker processes", 2)
    num_servers = _count("num_servers", num_servers, "server processes", 1)
    if isinstance(args, (str, bytes, bytearray)) or not isinstance(args, Sequence):
        single = isinstance(args, (str, bytes)) or not isinstance(args, Iterable)
        fix = (f"pass args=[{args!r}] for a single argument" if single
               else "pass args=list(...) to collect them")
        raise TypeError(f"args must be a list or tuple of the program's arguments, not "
                        f"{_kind(args)}; {fix}")
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"timeout must be a number of seconds (int or float), not "
                        f"{_kind(timeout)}; pass e.g. timeout=120")
    if not (math.isfinite(timeout) and timeout > 0):
        raise ValueError("timeout must be a positive, finite number of seconds, not "
                         f"{timeout!r}: a job whose node died waits forever, so the "
                         "launcher needs a limit; pass e.g. timeout=120")
    if not _is_int(ps_verbose) or operator.index(ps_verbose) not in (0, 1, 2):
        raise (ValueError if _is_int(ps_verbose) else TypeError)(
            "ps_verbose must be 0 (quiet), 1 (log the nodes as they connect) or 2 "
            f"(log every message), not {_kind(ps_verbose)}")
    argv, env = _worker_argv(program, args), _environment(env)
    if not callable(pick_port):
        raise TypeError("pick_port must be a function without arguments that returns "
                        "a free port, such as mgpu.cluster.processes.free_port, not "
                        f"{_kind(pick_port)}")
    if port is not None:
        port = check_port(port, "port", "pass e.g. port=9091, or leave port out to "
                                        "let the launcher pick a free one")
    return Job(argv, num_workers, num_servers, float(timeout), env,
               operator.index(ps_verbose), port, pick_port)
