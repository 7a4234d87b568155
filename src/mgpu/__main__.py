"""``python -m mgpu PROGRAM [--name value ...]``: run one of the book's worker programs.

A launcher on several machines (MXNet's ``launch.py``, :mod:`mgpu.cluster.mxlaunch`,
``horovodrun``) starts the same command line on every host, often through ``ssh``, which
joins the arguments with spaces and loses any quoting. Code such as
``python -c "import mgpu; ..."`` does not survive that; this entry point does: every
argument is a plain word. Values are Python literals (``2048``, ``0.2``, ``"(2, 3)"``)
or, failing that, strings; dashes in names become underscores.

The programs and their names: :data:`mgpu.programs.registry.PROGRAMS`; from Python,
:func:`mgpu.programs.run.run_program` runs one in a fresh process.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Sequence

from mgpu.programs.registry import PROGRAMS, find_program


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
    if not argv or argv[0] not in PROGRAMS:
        raise SystemExit("usage: python -m mgpu PROGRAM [--name value ...], PROGRAM "
                         f"one of {', '.join(PROGRAMS)}"
                         + (f" (not {argv[0]!r})" if argv else ""))
    rest = list(argv[1:])
    if len(rest) % 2 or any(not a.startswith("--") for a in rest[::2]):
        raise SystemExit(f"arguments must come in pairs '--name value', got {rest}")
    kwargs = {k[2:].replace("-", "_"): _value(v) for k, v in zip(rest[::2], rest[1::2])}
    return find_program(argv[0]), kwargs


def main(argv: Sequence[str] | None = None) -> None:
    fn, kwargs = parse(sys.argv[1:] if argv is None else argv)
    fn(**kwargs)


if __name__ == "__main__":
    main()
