"""Training in a fresh Python process, for settings MXNet reads only once, when it
starts.

``MXNET_OMP_MAX_THREADS`` (OpenMP threads per CPU device's worker) and
``MXNET_CPU_TEMP_COPY`` (the CPU devices' shared scratch buffers) take effect only in a
process whose MXNet engine has not started yet. A chapter that compares such settings
side by side runs each in a fresh process with :func:`train_fresh`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping

__all__ = ["MODELS", "train_fresh"]

#: The models :func:`train_fresh` can build, by name.
MODELS = ("lenet_forward", "LeNet", "resnet18_28")

_PROGRAM = r"""
import json, sys
import mgpu
spec = json.loads(sys.argv[1])
model, width = spec.pop("model"), spec.pop("width")
data = mgpu.load_fashion_mnist(subset=spec.pop("subset"),
                               test_subset=spec.pop("test_subset"))
net = {"lenet_forward": lambda: mgpu.lenet_forward, "LeNet": mgpu.LeNet,
       "resnet18_28": lambda: mgpu.resnet18_28(width=width)}[model]()
devices = [mgpu.mx.cpu(i) for i in range(spec.pop("devices"))]
hist = mgpu.train(net, data, devices, verbose=False, progress=False, **spec)
print("MGPU-RESULT " + json.dumps({**hist.summary(), "images_per_sec_per_epoch":
      hist.images_per_sec, "test_acc_per_epoch": hist.test_acc}))
"""


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
    spec = {"model": model, "width": width, "subset": subset,
            "test_subset": test_subset, "devices": devices, **train_kwargs}
    return _run_program(_PROGRAM, [json.dumps(spec)], env, "training", timeout)


def _run_program(program: str, args: list[str], env: Mapping[str, str], what: str,
                 timeout: float) -> dict:
    """Run ``program`` in a fresh Python with ``env`` added; return its ``MGPU-RESULT``
    line.

    ``what`` names the work in the error raised when the program prints no result.

    >>> _run_program('import json; print("MGPU-RESULT " + json.dumps({"x": 1}))', [],
    ...              {}, "printing", 60)
    {'x': 1}
    """
    bad = {k: v for k, v in env.items() if not isinstance(v, str)}
    if bad:
        raise TypeError("env values must be str (environment variables hold text), "
                        f"got {bad}")
    done = subprocess.run([sys.executable, "-c", program, *args],
                          env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    for line in done.stdout.splitlines():
        if line.startswith("MGPU-RESULT "):
            return json.loads(line[len("MGPU-RESULT "):])
    lines = done.stderr.strip().splitlines() or ["(no output)"]
    raise RuntimeError(f"{what} in a fresh process failed (exit code "
                       f"{done.returncode}): {lines[-1]}\nThe end of its stderr:\n"
                       + "\n".join(lines[-15:]))
