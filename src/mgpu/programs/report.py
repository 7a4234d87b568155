"""The one report format of the book's programs: one JSON object per line on stdout.

A program run in another process (a worker of a cluster, a Horovod rank, a measurement
that needs a fresh MXNet) calls :func:`report` for each result; whoever started it reads
the results back with :func:`read_reports`. Standard library only: the cluster code,
which never imports MXNet, reads reports too.
"""

from __future__ import annotations

import json
import sys

__all__ = ["read_reports", "report"]


def report(**fields: object) -> None:
    """Print one result as a JSON line, in one write (processes sharing a stdout do not
    interleave inside it), flushed at once.

    >>> report(rank=0, loss=0.5)
    {"rank": 0, "loss": 0.5}
    """
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def read_reports(text: str) -> list[dict]:
    """Every JSON object in ``text``, in order; other output is skipped.

    Objects may share a line (several writers on one stdout), and ``horovodrun``
    prefixes each line of a rank with ``[rank]<stdout>:``.

    >>> read_reports('hello\\n[1]<stdout>:{"rank": 1}\\n{"a": 1}{"b": [2]}\\n{oops}\\n')
    [{'rank': 1}, {'a': 1}, {'b': [2]}]
    """
    decoder, found = json.JSONDecoder(), []
    for line in text.splitlines():
        if line.startswith("[") and "]<stdout>:" in line:
            line = line.split("]<stdout>:", 1)[1]
        i = line.find("{")
        while i >= 0:
            try:
                obj, end = decoder.raw_decode(line, i)
            except ValueError:
                i = line.find("{", i + 1)
                continue
            if isinstance(obj, dict):
                found.append(obj)
            i = line.find("{", end)
    return found
