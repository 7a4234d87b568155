"""mgpu: data-parallel training with Apache MXNet/Gluon, the code of the mgpu book.

The folders show the architecture:

- the training library the chapters teach, flat: :mod:`mgpu.hardware` (which devices),
  :mod:`mgpu.data`, :mod:`mgpu.models`, :mod:`mgpu.parallel` (``split_and_load``,
  ``get_params``), :mod:`mgpu.collectives` (allreduce from scratch), :mod:`mgpu.step`,
  :mod:`mgpu.loop` (the one training loop), :mod:`mgpu.largebatch`, :mod:`mgpu.checks`,
  and :mod:`mgpu.backend` (MXNet, imported once);
- :mod:`mgpu.probes`: instruments that look inside MXNet (timing, the engine, KVStore,
  a slower co-tenant);
- :mod:`mgpu.programs`: the programs run in other processes (``python -m mgpu NAME``),
  one registry and one report format;
- :mod:`mgpu.cluster`: processes and launchers (a local parameter-server cluster,
  ``mxlaunch``, ``horovodrun``), standard library only: they never import MXNet;
- :mod:`mgpu.book`: the book's own tools (claims tied to measurements, budgets, figures,
  diagrams).

Every name the chapters use is also ``mgpu.<name>``. ``import mgpu`` imports nothing
else; the first such name imports its module, and with it MXNet through
:mod:`mgpu.backend` (which sets ``MXNET_CPU_TEMP_COPY`` first, unless it is set).

>>> import mgpu
>>> mgpu.split_sizes(12, 3)
[4, 4, 4]
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import re
from pathlib import Path
from types import MappingProxyType

__version__ = importlib.metadata.version("mgpu")

#: The modules whose ``__all__`` names are ``mgpu.<name>``, in the order of the book.
PUBLIC_MODULES = (
    "mgpu.backend", "mgpu.hardware", "mgpu.checks", "mgpu.data", "mgpu.models",
    "mgpu.parallel", "mgpu.collectives", "mgpu.step", "mgpu.loop", "mgpu.checkpoint",
    "mgpu.largebatch",
    "mgpu.precision", "mgpu.sharded", "mgpu.memory",
    "mgpu.probes.timing", "mgpu.probes.engine", "mgpu.probes.kvstore",
    "mgpu.probes.hetero", "mgpu.probes.links", "mgpu.programs.registry",
    "mgpu.programs.report",
    "mgpu.programs.run", "mgpu.programs.fresh", "mgpu.programs.engine",
    "mgpu.programs.memory",
    "mgpu.programs.ps", "mgpu.programs.restart", "mgpu.programs.kvstore",
    "mgpu.programs.horovod", "mgpu.programs.precision",
    "mgpu.cluster.processes", "mgpu.cluster.job", "mgpu.cluster.local",
    "mgpu.cluster.mxlaunch", "mgpu.cluster.horovodrun", "mgpu.cluster.hosts",
    "mgpu.book.claims",
    "mgpu.book.budget", "mgpu.book.style", "mgpu.book.plot", "mgpu.book.diagrams",
)


def public_names(module: str) -> list[str]:
    """The ``__all__`` of one of the package's modules, read from its source without
    importing it (so that ``import mgpu`` imports nothing).

    >>> public_names("mgpu.backend")
    ['mx']
    """
    path = Path(__file__).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    found = re.search(r"^__all__ = (\[.*?\])", path.read_text("utf-8"), re.M | re.S)
    if found is None:
        raise ImportError(f"{module} has no __all__ = [...] list")
    return ast.literal_eval(found.group(1))


#: The module of each public name (``mgpu.<name>`` imports it on first use).
EXPORTS = MappingProxyType({name: module for module in PUBLIC_MODULES
                            for name in public_names(module)})

__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> object:
    """``mgpu.<name>``: import its module (and MXNet, with the book's settings)."""
    if name not in EXPORTS:
        raise AttributeError(f"module 'mgpu' has no attribute {name!r}")
    importlib.import_module("mgpu.backend")
    value = getattr(importlib.import_module(EXPORTS[name]), name)
    globals()[name] = value  # the next use is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(EXPORTS))
