"""mgpu: data-parallel training with Apache MXNet/Gluon, the code of the mgpu book.

One module per concept; every public name is also available as ``mgpu.<name>``:

- :mod:`mgpu.devices`: which devices to train on (GPUs, or CPU "virtual devices").
- :mod:`mgpu.data`: Fashion-MNIST from IDX files, and minibatches.
- :mod:`mgpu.models`: the from-scratch LeNet, the Gluon LeNet, a ResNet-18 for 28x28.
- :mod:`mgpu.parallel`: ``split_and_load`` and ``get_params``, from scratch.
- :mod:`mgpu.allreduce`: summing gradients across devices from scratch (3 algorithms).
- :mod:`mgpu.step`: one data-parallel training step, for from-scratch and Gluon models.
- :mod:`mgpu.train`: the training loop, evaluation and each worker's data shard.
- :mod:`mgpu.timing`: timing asynchronous work; step times and device speeds.
- :mod:`mgpu.engine`: the engine's threads and the memory a long queue holds, in fresh
  processes.
- :mod:`mgpu.fresh`: training in a fresh process, for settings MXNet reads at start-up.
- :mod:`mgpu.hetero`: a co-tenant job that makes one device slower.
- :mod:`mgpu.checks`: checks of user input, with errors that say what to fix.
- :mod:`mgpu.budget`: how much training the hardware affords (less on CPUs than GPUs).
- :mod:`mgpu.launch`: a local MXNet parameter-server cluster (several "machines" on one
  host), with the standard library only.
- :mod:`mgpu.dist`: the book's worker programs for such a cluster.
- :mod:`mgpu.kvprobe`: inside MXNet's KVStore (owners, servers, bytes on the wire).
- :mod:`mgpu.largebatch`: learning-rate rules for large batches, and BatchNorm over
  per-device ("ghost") batches.
- :mod:`mgpu.book`: how the chapters tie their sentences to the measurements.
- :mod:`mgpu.plot`: training curves and bar charts (imported on first use: matplotlib).
"""

from __future__ import annotations

import importlib.metadata

from mgpu._mx import mx  # noqa: F401  (fails early with install advice)
from mgpu.allreduce import (
    SMALL_TENSOR,
    FusedAllreduce,
    Traffic,
    allreduce,
    allreduce_many,
    allreduce_scatter_gather,
    ring_allreduce,
)
from mgpu.book import ClaimError, Table, glue, require, verdict
from mgpu.budget import Budget, budget
from mgpu.checks import check_devices, check_labels, positive_int, positive_number
from mgpu.data import (
    FILES,
    NUM_CLASSES,
    DataError,
    Dataset,
    data_dirs,
    find_data_dir,
    iter_batches,
    load_fashion_mnist,
    read_idx,
)
from mgpu.devices import (
    DeviceError,
    devices,
    hardware_in,
    hardware_summary,
    num_gpus,
    parse_devices,
    try_all_gpus,
    try_gpu,
)
from mgpu.diagrams import (
    FontError,
    cjk_font,
    draw_allreduce,
    draw_engine_queues,
    draw_parameter_server,
    draw_step,
)
from mgpu.dist import (
    params_checksum,
    push_pull_demo,
    push_pull_timing,
    replay_workers,
    train_demo,
)
from mgpu.engine import (
    QueueRun,
    draw_queue_memory,
    queue_memory,
    resident_mb,
    thread_census,
    thread_count,
)
from mgpu.fresh import MODELS, train_fresh
from mgpu.hetero import CoTenant
from mgpu.horovod import (
    HorovodError,
    HorovodResult,
    RankFailure,
    horovod_available,
    rank_failure,
    run_horovod,
    train_horovod,
)
from mgpu.kvprobe import (
    device_owners,
    push_pull_traffic,
    reduce_timeline,
    server_shares,
    socket_bytes,
    step_timeline,
    train_traffic,
)
from mgpu.largebatch import (
    RULES,
    Curves,
    GhostBatchNorm,
    average_ghost_statistics,
    scaled_lr,
    train_schedule,
    with_ghost_batch_norm,
)
from mgpu.launch import (
    ClusterError,
    ClusterResult,
    ClusterTimeout,
    PortInUseError,
    ProcessResult,
    cluster_env,
    descendants,
    free_port,
    processes,
    run_local_cluster,
    running,
)
from mgpu.models import (
    LENET_SHAPES,
    LeNet,
    gradient_shapes,
    lenet_forward,
    lenet_params,
    resnet18_28,
)
from mgpu.parallel import SplitError, get_params, split_and_load, split_sizes
from mgpu.step import (
    Step,
    average_running_statistics,
    forward_backward,
    gluon_step,
    scratch_step,
    sgd,
)
from mgpu.timing import (
    Benchmark,
    EngineEvent,
    device_speeds,
    engine_operations,
    engine_timeline,
    op_overhead,
    step_time,
)
from mgpu.train import (
    KVSTORES,
    History,
    NonFiniteLossError,
    evaluate_accuracy,
    train,
    worker_shard,
)

__version__ = importlib.metadata.version("mgpu")

__all__ = [
    "FILES",
    "KVSTORES",
    "NUM_CLASSES",
    "LENET_SHAPES",
    "MODELS",
    "SMALL_TENSOR",
    "RULES",
    "Benchmark",
    "ClaimError",
    "Budget",
    "ClusterError",
    "ClusterResult",
    "ClusterTimeout",
    "CoTenant",
    "Curves",
    "DataError",
    "Dataset",
    "DeviceError",
    "EngineEvent",
    "FontError",
    "FusedAllreduce",
    "GhostBatchNorm",
    "History",
    "HorovodError",
    "HorovodResult",
    "LeNet",
    "NonFiniteLossError",
    "PortInUseError",
    "ProcessResult",
    "QueueRun",
    "RankFailure",
    "SplitError",
    "Step",
    "Table",
    "Traffic",
    "allreduce",
    "allreduce_many",
    "allreduce_scatter_gather",
    "average_ghost_statistics",
    "average_running_statistics",
    "budget",
    "check_devices",
    "check_labels",
    "cjk_font",
    "cluster_env",
    "data_dirs",
    "descendants",
    "device_speeds",
    "device_owners",
    "devices",
    "draw_allreduce",
    "draw_engine_queues",
    "draw_parameter_server",
    "draw_queue_memory",
    "draw_step",
    "engine_operations",
    "engine_timeline",
    "op_overhead",
    "evaluate_accuracy",
    "find_data_dir",
    "forward_backward",
    "free_port",
    "get_params",
    "glue",
    "gradient_shapes",
    "gluon_step",
    "hardware_in",
    "hardware_summary",
    "horovod_available",
    "iter_batches",
    "lenet_forward",
    "lenet_params",
    "load_fashion_mnist",
    "num_gpus",
    "params_checksum",
    "parse_devices",
    "positive_int",
    "processes",
    "positive_number",
    "push_pull_demo",
    "push_pull_timing",
    "push_pull_traffic",
    "queue_memory",
    "rank_failure",
    "read_idx",
    "reduce_timeline",
    "replay_workers",
    "require",
    "resident_mb",
    "resnet18_28",
    "ring_allreduce",
    "run_horovod",
    "run_local_cluster",
    "running",
    "scaled_lr",
    "scratch_step",
    "server_shares",
    "sgd",
    "socket_bytes",
    "split_and_load",
    "split_sizes",
    "step_time",
    "step_timeline",
    "thread_census",
    "thread_count",
    "train",
    "train_demo",
    "train_fresh",
    "train_horovod",
    "train_traffic",
    "train_schedule",
    "try_all_gpus",
    "try_gpu",
    "verdict",
    "with_ghost_batch_norm",
    "worker_shard",
]


def __getattr__(name: str):
    """Import :mod:`mgpu.plot` (it needs matplotlib) on first use."""
    if name == "plot":
        import importlib

        return importlib.import_module("mgpu.plot")
    raise AttributeError(f"module 'mgpu' has no attribute {name!r}")
