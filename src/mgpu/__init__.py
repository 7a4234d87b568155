"""mgpu: data-parallel training with Apache MXNet/Gluon, the code of the mgpu book.

One module per concept:

- :mod:`mgpu.devices`: which devices to train on (GPUs, or CPU "virtual devices").
- :mod:`mgpu.parallel`: ``split_and_load``, ``allreduce`` and ``get_params``, from scratch.
- :mod:`mgpu.models`: the from-scratch LeNet, the Gluon LeNet and a ResNet-18 for 28x28 images.
- :mod:`mgpu.data`: Fashion-MNIST (and MNIST) from IDX files, and minibatches.
- :mod:`mgpu.train`: a data-parallel training step and the whole loop.
- :mod:`mgpu.plot`: training curves and timing bars.
- :mod:`mgpu.budget`: how much training the hardware affords (full runs on GPUs, less on CPUs).
- :mod:`mgpu.dist`: a local MXNet parameter-server cluster (several "machines" on one host).
"""

from __future__ import annotations

import importlib.metadata

from mgpu._mx import mx  # noqa: F401  (fails early with install advice)
from mgpu.budget import Budget, budget
from mgpu.data import DataError, Dataset, iter_batches, load_fashion_mnist
from mgpu.devices import DeviceError, devices, hardware_summary, num_gpus, try_all_gpus, try_gpu
from mgpu.dist import ClusterError, ClusterResult, run_local_cluster
from mgpu.models import LeNet, lenet, lenet_params, resnet18_28
from mgpu.parallel import (
    allreduce,
    allreduce_many,
    allreduce_ring,
    get_params,
    split_and_load,
    split_sizes,
)
from mgpu.train import History, evaluate_accuracy, train, train_batch

__version__ = importlib.metadata.version("mgpu")

__all__ = [
    "Budget",
    "budget",
    "ClusterError",
    "ClusterResult",
    "Dataset",
    "DataError",
    "DeviceError",
    "History",
    "LeNet",
    "allreduce",
    "allreduce_many",
    "allreduce_ring",
    "devices",
    "evaluate_accuracy",
    "get_params",
    "hardware_summary",
    "iter_batches",
    "lenet",
    "lenet_params",
    "load_fashion_mnist",
    "num_gpus",
    "resnet18_28",
    "run_local_cluster",
    "split_and_load",
    "split_sizes",
    "train",
    "train_batch",
    "try_all_gpus",
    "try_gpu",
]


def __getattr__(name: str):
    """Import the optional submodules (``mgpu.plot`` needs matplotlib) on first use."""
    import importlib

    if name in ("plot", "timing", "hetero", "dist"):
        return importlib.import_module(f"mgpu.{name}")
    raise AttributeError(f"module 'mgpu' has no attribute {name!r}")
