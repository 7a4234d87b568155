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

import importlib
import importlib.metadata
from types import MappingProxyType

__version__ = importlib.metadata.version("mgpu")

#: The module of each public name (``mgpu.<name>`` imports it on first use).
EXPORTS = MappingProxyType({
    name: module
    for module, names in {
        "mgpu.backend": (
            "mx",
        ),
        "mgpu.hardware": (
            "DeviceError", "devices", "hardware_in", "hardware_summary", "num_gpus",
            "parse_devices", "try_all_gpus", "try_gpu",
        ),
        "mgpu.checks": (
            "check_devices", "check_labels", "positive_int", "positive_number",
        ),
        "mgpu.data": (
            "FILES", "NUM_CLASSES", "DataError", "Dataset", "data_dirs",
            "find_data_dir", "iter_batches", "load_fashion_mnist", "read_idx",
        ),
        "mgpu.models": (
            "LENET_SHAPES", "LeNet", "gradient_shapes", "lenet_forward",
            "lenet_params", "resnet18_28",
        ),
        "mgpu.parallel": (
            "SplitError", "get_params", "split_and_load", "split_sizes",
        ),
        "mgpu.collectives": (
            "SMALL_TENSOR", "FusedAllreduce", "Traffic", "allreduce",
            "allreduce_many", "allreduce_scatter_gather", "ring_allreduce",
        ),
        "mgpu.step": (
            "Step", "average_running_statistics", "forward_backward", "gluon_step",
            "scratch_step", "sgd",
        ),
        "mgpu.loop": (
            "IN_FLIGHT", "KVSTORES", "History", "NonFiniteLossError",
            "evaluate_accuracy", "train", "worker_shard",
        ),
        "mgpu.largebatch": (
            "RULES", "Curves", "GhostBatchNorm", "average_ghost_statistics",
            "scaled_lr", "train_schedule", "with_ghost_batch_norm",
        ),
        "mgpu.probes.timing": (
            "Benchmark", "EngineEvent", "device_speeds", "engine_operations",
            "engine_timeline", "op_overhead", "step_time",
        ),
        "mgpu.probes.engine": (
            "QueueRun", "draw_queue_memory", "queue_memory", "resident_mb",
            "thread_census", "thread_count",
        ),
        "mgpu.probes.kvstore": (
            "BIGARRAY_BOUND", "device_owners", "push_pull_traffic",
            "reduce_timeline", "server_shares", "socket_bytes", "step_timeline",
            "train_traffic",
        ),
        "mgpu.probes.hetero": (
            "CoTenant",
        ),
        "mgpu.programs.fresh": (
            "MODELS", "train_fresh",
        ),
        "mgpu.programs.ps": (
            "params_checksum", "push_pull_demo", "push_pull_timing",
            "replay_workers", "train_demo",
        ),
        "mgpu.programs.horovod": (
            "HorovodError", "HorovodResult", "RankFailure", "horovod_available",
            "rank_failure", "run_horovod", "train_horovod",
        ),
        "mgpu.cluster.local": (
            "ClusterError", "ClusterResult", "ClusterTimeout", "PortInUseError",
            "ProcessResult", "cluster_env", "descendants", "free_port", "processes",
            "run_local_cluster", "running",
        ),
        "mgpu.book.claims": (
            "ClaimError", "Table", "glue", "require", "verdict",
        ),
        "mgpu.book.budget": (
            "Budget", "budget",
        ),
        "mgpu.book.plot": (
            "figure", "plot_bars", "plot_history", "plot_timeline",
        ),
        "mgpu.book.diagrams": (
            "FontError", "cjk_font", "draw_allreduce", "draw_engine_queues",
            "draw_parameter_server", "draw_step", "event_category",
        ),
    }.items()
    for name in names
})

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
