"""Mixed precision: 16-bit numbers, what they lose, and what the book does about it.

- :func:`cpu_bf16_flags`: the CPU features that decide whether bfloat16 arithmetic
  runs on this CPU, and how fast (read from ``/proc/cpuinfo``).
- :func:`cast_fractions`: what a cast to float16 does to values such as gradients:
  the fraction flushed to zero (underflow) and the fraction that became infinite
  (overflow), with an optional loss scale.
- :class:`DynamicLossScale`: the dynamic loss scale of MXNet's AMP
  (``mxnet/contrib/amp/loss_scaler.py``), by hand: halve on an overflow and skip the
  step, double after ``growth_interval`` good steps.
- :class:`Float16Allreduce`: the allreduce of Horovod's ``Compression.fp16``
  (``horovod/mxnet/compression.py``): cast the gradients to float16, sum them, cast the
  sum back; half the bytes. ``mgpu.ReplicatedOptimizer(..., compression="fp16")``
  trains with it.

Training in bfloat16 with MXNet's AMP patches MXNet's operators for the whole process,
so it runs in a fresh process: ``python -m mgpu amp_train`` (see
:mod:`mgpu.programs.precision`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mgpu.backend import mx
from mgpu.checks import positive_int, positive_number
from mgpu.collectives import FusedAllreduce

__all__ = ["BF16_FLAGS", "CastFractions", "DynamicLossScale", "Float16Allreduce",
           "cast_fractions", "cpu_bf16_flags"]

nd = mx.nd
NDArray = nd.NDArray

#: The CPU flags (as ``/proc/cpuinfo`` names them) that bfloat16 depends on.
#: ``avx512f``, ``avx512bw``, ``avx512vl`` and ``avx512dq`` together are what oneDNN
#: calls ``avx512_core``, which the oneDNN of MXNet 1.9.1 (v2.x) requires for bfloat16
#: at all (``has_data_type_support`` in ``src/cpu/platform.cpp``); ``avx512_bf16``
#: (bfloat16 dot products) and ``amx_bf16`` (matrix tiles) make it fast.
BF16_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "amx_bf16")


def cpu_bf16_flags(cpuinfo: str | None = None) -> dict[str, bool]:
    """Which of :data:`BF16_FLAGS` the CPU has: read from ``cpuinfo`` (the text of
    ``/proc/cpuinfo``; by default, read from the file).

    >>> flags = cpu_bf16_flags("flags\\t: fpu sse2 avx2 avx512f avx512bw avx512vl\\n")
    >>> [flag for flag, has in flags.items() if has]
    ['avx512f', 'avx512bw', 'avx512vl']
    """
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        if not path.exists():
            raise FileNotFoundError("cpu_bf16_flags reads /proc/cpuinfo, which this "
                                    "system does not have (Linux only); pass its text "
                                    "as cpuinfo")
        cpuinfo = path.read_text()
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            flags.update(value.split())
    if not flags:
        raise ValueError("cpu_bf16_flags found no 'flags' line in cpuinfo; pass the "
                         "text of /proc/cpuinfo")
    return {flag: flag in flags for flag in BF16_FLAGS}


@dataclass(frozen=True)
class CastFractions:
    """What a cast did to an array's non-zero values: the fractions of them that became
    zero and that became infinite."""

    flushed: float  #: non-zero values that became 0 (underflow)
    overflowed: float  #: finite values that became +-inf (overflow)

    @property
    def kept(self) -> float:
        """The fraction that stayed finite and non-zero."""
        return 1.0 - self.flushed - self.overflowed


def cast_fractions(values: np.ndarray, dtype: str = "float16",
                   scale: float = 1.0) -> CastFractions:
    """Cast ``values * scale`` to ``dtype``; count the non-zero values lost to zero and
    to infinity.

    float16's smallest positive number is ``2**-24`` (about 6e-8) and its largest
    65504; rounding to the nearest, a value of at most half the smallest, ``2**-25``,
    becomes 0: a gradient of 1e-8 does, unless a loss scale ``scale`` multiplies it
    first.

    >>> g = np.array([1e-9, 1e-8, 1e-3, 1.0], np.float32)
    >>> cast_fractions(g)
    CastFractions(flushed=0.5, overflowed=0.0)
    >>> cast_fractions(g, scale=2.0**16)
    CastFractions(flushed=0.0, overflowed=0.25)
    """
    scale = positive_number("scale", scale)
    values = np.asarray(values, dtype=np.float64).ravel()
    nonzero = values[(values != 0) & np.isfinite(values)]
    if nonzero.size == 0:
        raise ValueError("cast_fractions got no finite non-zero values; pass e.g. a "
                         "model's gradients")
    try:
        with np.errstate(over="ignore"):
            cast = (nonzero * scale).astype(np.dtype(dtype))
    except TypeError:
        raise ValueError(f"dtype={dtype!r} is not a NumPy float type; pass e.g. "
                         "'float16'") from None
    n = nonzero.size
    return CastFractions(flushed=float((cast == 0).sum()) / n,
                         overflowed=float(np.isinf(cast).sum()) / n)


@dataclass
class DynamicLossScale:
    """A dynamic loss scale, as MXNet's AMP keeps one (``LossScaler`` in
    ``mxnet/contrib/amp/loss_scaler.py``: start at ``2**16``, double after 2000 good
    steps, at most ``2**24``).

    Each step multiplies the loss by ``scale`` (and the gradients come out
    multiplied by it too); then :meth:`update` is told whether every gradient was
    finite. On an overflow the step is skipped and the scale halved; after
    ``growth_interval`` good steps in a row it is doubled. :attr:`history` keeps the
    scale of every step.

    >>> ls = DynamicLossScale(scale=8.0, growth_interval=2)
    >>> [ls.update(finite) for finite in (True, True, False, True)]
    [True, True, False, True]
    >>> ls.history, ls.scale
    ([8.0, 8.0, 16.0, 8.0], 8.0)
    """

    scale: float = 2.0**16
    growth_interval: int = 2000
    factor: float = 2.0
    max_scale: float = 2.0**24
    good_steps: int = 0  #: good steps in a row since the last change
    history: list[float] = field(default_factory=list)  #: the scale of every step

    def __post_init__(self) -> None:
        self.scale = positive_number("scale", self.scale)
        self.growth_interval = positive_int("growth_interval", self.growth_interval)
        if not self.factor > 1:
            raise ValueError(f"factor={self.factor!r} must be greater than 1; pass "
                             "e.g. 2.0")

    def update(self, finite: bool) -> bool:
        """Record a step at the current scale; ``finite`` says whether its gradients
        were all finite. Returns whether to apply the step (skip it on an overflow)."""
        self.history.append(self.scale)
        if not finite:
            self.scale /= self.factor
            self.good_steps = 0
            return False
        self.good_steps += 1
        if self.good_steps == self.growth_interval:
            self.scale = min(self.max_scale, self.scale * self.factor)
            self.good_steps = 0
        return True


class Float16Allreduce:
    """The allreduce of Horovod's ``Compression.fp16``: cast every float32 gradient to
    float16, sum the float16 copies over the devices
    (:class:`mgpu.collectives.FusedAllreduce`), cast the sum back into the gradient, in
    place.

    ``tensors[t][i]`` is tensor ``t`` on device ``i``. :attr:`nbytes` is the bytes of
    one device's float16 copies, half of the float32 gradients': the bytes the
    allreduce moves are halved too.

    >>> grads = [[mx.nd.ones((3,), ctx=mx.cpu(i)) * (i + 1) for i in range(2)]]
    >>> reduce = Float16Allreduce(grads)
    >>> reduce(); grads[0][1].asnumpy().tolist(), reduce.nbytes
    ([3.0, 3.0, 3.0], 6)
    """

    def __init__(self, tensors: Sequence[Sequence[NDArray]]):
        self.tensors = [list(arrays) for arrays in tensors]
        for t, arrays in enumerate(self.tensors):
            for a in arrays:
                if not isinstance(a, NDArray) or a.dtype != np.float32:
                    raise ValueError(f"Float16Allreduce: tensor {t} holds a "
                                     f"{getattr(a, 'dtype', type(a).__name__)} array; "
                                     "pass float32 NDArrays (the gradients)")
        self.halves = [[nd.zeros(a.shape, ctx=a.context, dtype=np.float16)
                        for a in arrays] for arrays in self.tensors]
        self._reduce = FusedAllreduce(self.halves)  # checks devices and shapes
        #: Bytes of one device's float16 copies (half the float32 gradients' bytes).
        self.nbytes = sum(h[0].size * 2 for h in self.halves)

    def __call__(self) -> None:
        """Cast to float16, sum over the devices, cast back."""
        for arrays, halves in zip(self.tensors, self.halves, strict=True):
            for a, h in zip(arrays, halves, strict=True):
                nd.cast(a, dtype=np.float16, out=h)
        self._reduce()
        for arrays, halves in zip(self.tensors, self.halves, strict=True):
            for a, h in zip(arrays, halves, strict=True):
                nd.cast(h, dtype=np.float32, out=a)
