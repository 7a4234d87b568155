"""``python -m mgpu PROGRAM [--name value ...]``: run one of the book's worker programs.

A launcher on several machines (MXNet's ``launch.py``, :mod:`mgpu.cluster.mxlaunch`,
``horovodrun``) starts the same command line on every host, often through ``ssh``, which
joins the arguments with spaces and loses any quoting. Code such as
``python -c "import mgpu; ..."`` does not survive that; this entry point does: every
argument is a plain word. Values are Python literals (``2048``, ``0.2``, ``"(2, 3)"``)
or, failing that, strings; dashes in names become underscores.

Programs: ``train_demo``, ``push_pull_demo`` and ``push_pull_timing``
(:mod:`mgpu.programs.ps`, for a parameter-server cluster), ``kv_reduce_timeline``,
``kv_step_timeline``, ``kv_push_pull_traffic`` and ``kv_train_traffic``
(:mod:`mgpu.probes.kvstore`), ``hvd_train``, ``hvd_allreduce`` and
``hvd_allreduce_timing`` (``train_demo``, ``allreduce_demo`` and ``allreduce_timing`` of
:mod:`mgpu.programs.horovod`, under ``horovodrun``).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Sequence

PROGRAMS = {
    "train_demo": ("mgpu.programs.ps", "train_demo"),
    "push_pull_demo": ("mgpu.programs.ps", "push_pull_demo"),
    "push_pull_timing": ("mgpu.programs.ps", "push_pull_timing"),
    "kv_reduce_timeline": ("mgpu.probes.kvstore", "reduce_timeline"),
    "kv_step_timeline": ("mgpu.probes.kvstore", "step_timeline"),
    "kv_push_pull_traffic": ("mgpu.probes.kvstore", "push_pull_traffic"),
    "kv_train_traffic": ("mgpu.probes.kvstore", "train_traffic"),
    "hvd_train": ("mgpu.programs.horovod", "train_demo"),
    "hvd_allreduce": ("mgpu.programs.horovod", "allreduce_demo"),
    "hvd_allreduce_timing": ("mgpu.programs.horovod", "allreduce_timing"),
}


def _value(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse(argv: Sequence[str]) -> tuple[Callable, dict]:
    """The program and its keyword arguments from a command line.

    >>> fn, kwargs = parse(["hvd_allreduce", "--kill-rank", "1", "--shape", "(2, 3)"])
    >>> fn.__name__, kwargs
    ('allreduce_demo', {'kill_rank': 1, 'shape': (2, 3)})
    """
    import importlib

    if not argv or argv[0] not in PROGRAMS:
        raise SystemExit("usage: python -m mgpu PROGRAM [--name value ...], PROGRAM "
                         f"one of {', '.join(PROGRAMS)}"
                         + (f" (not {argv[0]!r})" if argv else ""))
    module, name = PROGRAMS[argv[0]]
    rest = list(argv[1:])
    if len(rest) % 2 or any(not a.startswith("--") for a in rest[::2]):
        raise SystemExit(f"arguments must come in pairs '--name value', got {rest}")
    kwargs = {k[2:].replace("-", "_"): _value(v) for k, v in zip(rest[::2], rest[1::2])}
    return getattr(importlib.import_module(module), name), kwargs


def main(argv: Sequence[str] | None = None) -> None:
    fn, kwargs = parse(sys.argv[1:] if argv is None else argv)
    fn(**kwargs)


if __name__ == "__main__":
    main()
