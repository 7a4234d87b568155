"""Import MXNet once, with an error that says how to install it."""

from __future__ import annotations

try:
    import mxnet as mx
except ImportError as err:  # pragma: no cover - exercised only without mxnet
    raise ImportError(
        "mgpu needs Apache MXNet 1.9.1, which is not installed (or failed to import: "
        f"{err}). Install exactly one build:\n"
        "    pip install 'mgpu[cpu]'   # CPU build (mxnet==1.9.1)\n"
        "    pip install 'mgpu[gpu]'   # NVIDIA GPUs, CUDA 11.2 (mxnet-cu112==1.9.1)\n"
        "mxnet 1.9.1 also needs numpy<1.24."
    ) from err
except AttributeError as err:  # pragma: no cover - numpy too new
    raise ImportError(
        f"mxnet failed to import ({err}); mxnet 1.9.1 needs numpy<1.24: "
        "pip install 'numpy>=1.21,<1.24'"
    ) from err

__all__ = ["mx"]
