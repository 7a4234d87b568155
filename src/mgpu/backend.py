"""Import MXNet once, with an error that says how to install it."""

from __future__ import annotations

import os

# MXNet 1.x gives all CPU devices ONE shared pool of scratch buffers ("temp space", 4 by
# default); operators of cpu(0) and cpu(1) that draw the same buffer wait for each
# other, so CPU "devices" take turns instead of running side by side (the benchmarks
# measured about 1.0x on 2 devices with 4 buffers and 2.0x with 64, for LeNet on 2
# cores). More buffers cost some memory (about +0.4 GB at 64 in that benchmark). MXNet
# reads the variable once, when its resource manager is created (ResourceManager::Get in
# src/resource.cc, at the first operator that needs temp space); it is set here, before
# MXNet is imported, so that it is in place before any operator runs. A value set by the
# user wins.
os.environ.setdefault("MXNET_CPU_TEMP_COPY", "64")

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
