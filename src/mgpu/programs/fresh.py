"""Training in a fresh Python process, for settings MXNet reads only once, when it
starts.

``MXNET_OMP_MAX_THREADS`` (OpenMP threads per CPU device's worker) and
``MXNET_CPU_TEMP_COPY`` (the CPU devices' shared scratch buffers) take effect only in a
process whose MXNet engine has not started yet. A chapter that compares such settings
side by side runs each in a fresh process with :func:`train_fresh`, which runs the
program :func:`train_and_report` there (``python -m mgpu train_fresh``).
"""

from __future__ import annotations

from collections.abc import Mapping

from mgpu.programs.report import report
from mgpu.programs.run import run_program

__all__ = ["MODELS", "train_and_report", "train_fresh"]

#: The models :func:`train_fresh` can build, by name.
MODELS = ("lenet_forward", "LeNet", "resnet18_28")


def train_fresh(
    model: str,
    devices: int,
    env: Mapping[str, str],
    *,
    subset: int | None = None,
    test_subset: int | None = None,
    width: int = 64,
    timeout: float = 1800,
    **train_kwargs: object,
) -> dict:
    """Train ``model`` on ``devices`` CPU devices in a fresh process with ``env`` added.

    ``model`` is one of :data:`MODELS`; ``subset``/``test_subset`` are passed to
    :func:`mgpu.data.load_fashion_mnist`, ``width`` to :func:`mgpu.models.resnet18_28`,
    and the other keyword arguments (``num_epochs``, ``batch_size``, ``lr``, ``seed``,
    ...) to :func:`mgpu.loop.train`. Returns :meth:`mgpu.loop.History.summary` with
    the per-epoch throughput and accuracy.

    >>> r = train_fresh("LeNet", 1, {"MXNET_OMP_MAX_THREADS": "1"}, subset=256,
    ...                 test_subset=64, num_epochs=1, batch_size=128, lr=0.1)
    >>> sorted(r)[:3], r["devices"]
    (['batch_size', 'devices', 'epoch_time'], 1)
    """
    if model not in MODELS:
        raise ValueError(f"model={model!r} is not one of {', '.join(MODELS)}")
    return run_program("train_fresh", env=env, timeout=timeout, model=model,
                       devices=devices, subset=subset, test_subset=test_subset,
                       width=width, **train_kwargs)[-1]


def train_and_report(model: str, devices: int, subset: int | None = None,
                     test_subset: int | None = None, width: int = 64,
                     **train_kwargs: object) -> None:
    """Program: train ``model`` (one of :data:`MODELS`) on ``devices`` CPU devices with
    :func:`mgpu.loop.train`; report :meth:`mgpu.loop.History.summary` with the
    per-epoch throughput and test accuracy.

    The arguments are :func:`train_fresh`'s, which runs this in a fresh process.
    """
    from mgpu.backend import mx
    from mgpu.data import load_fashion_mnist
    from mgpu.loop import train
    from mgpu.models import LeNet, lenet_forward, resnet18_28

    data = load_fashion_mnist(subset=subset, test_subset=test_subset)
    net = {"lenet_forward": lambda: lenet_forward, "LeNet": LeNet,
           "resnet18_28": lambda: resnet18_28(width=width)}[model]()
    hist = train(net, data, [mx.cpu(i) for i in range(devices)], verbose=False,
                 progress=False, **train_kwargs)
    report(**hist.summary(), images_per_sec_per_epoch=hist.images_per_sec,
           test_acc_per_epoch=hist.test_acc)
