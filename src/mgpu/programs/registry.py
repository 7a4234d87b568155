"""The book's programs by name: what ``python -m mgpu NAME --name value`` runs.

A program is a function of a module of :mod:`mgpu.programs` that reports its results
with :func:`mgpu.programs.report.report`. The registry names each one as
``"module:function"`` and imports it only when asked, so that reading it imports
neither MXNet nor the program's module. Standard library only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import MappingProxyType

__all__ = ["PROGRAMS", "find_program"]

#: Every program, by the name ``python -m mgpu NAME`` knows it: ``"module:function"``.
PROGRAMS = MappingProxyType({
    # workers of a local parameter-server cluster (mgpu.cluster.local, mxlaunch)
    "train_demo": "mgpu.programs.ps:train_demo",
    "push_pull_demo": "mgpu.programs.ps:push_pull_demo",
    "push_pull_timing": "mgpu.programs.ps:push_pull_timing",
    # a checkpointed job, restarted with one worker fewer (mgpu.programs.restart)
    "train_checkpointed": "mgpu.programs.restart:train_checkpointed",
    # the KVStore chapter: fresh processes (the profiler) and dist_sync workers
    "kv_reduce_timeline": "mgpu.programs.kvstore:reduce_timeline",
    "kv_step_timeline": "mgpu.programs.kvstore:step_timeline",
    "kv_push_pull_traffic": "mgpu.programs.kvstore:push_pull_traffic",
    "kv_train_traffic": "mgpu.programs.kvstore:train_traffic",
    # Horovod ranks, under horovodrun
    "hvd_train": "mgpu.programs.horovod:train_demo",
    "hvd_allreduce": "mgpu.programs.horovod:allreduce_demo",
    "hvd_allreduce_timing": "mgpu.programs.horovod:allreduce_timing",
    # settings MXNet reads once, when it starts: a fresh process each
    "train_fresh": "mgpu.programs.fresh:train_and_report",
    "thread_census": "mgpu.programs.engine:count_threads",
    "queue_memory": "mgpu.programs.engine:fill_queue",
    # mixed precision: AMP patches MXNet for the whole process
    "amp_train": "mgpu.programs.precision:amp_train",
    # the memory chapter: a process's peak memory while it trains
    "peak_memory": "mgpu.programs.memory:peak_memory",
})


def find_program(name: str) -> Callable[..., None]:
    """The function of the program ``name`` (one of :data:`PROGRAMS`), its module
    imported.

    >>> find_program("kv_reduce_timeline").__name__
    'reduce_timeline'
    """
    if name not in PROGRAMS:
        raise ValueError(f"program {name!r} is not one of the book's programs: "
                         f"{', '.join(PROGRAMS)}")
    module, function = PROGRAMS[name].split(":")
    return getattr(importlib.import_module(module), function)
