"""Checks of user input at mgpu's public boundaries: clear errors instead of MXNet's
deep ones.

Each check names the argument, says what was wrong and how to fix it. They look at
Python values and NumPy arrays only, never at the devices' results, so they cost no
synchronisation.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np

from mgpu.backend import mx

__all__ = ["check_devices", "check_labels", "positive_int", "positive_number"]


def positive_int(name: str, value: object, minimum: int = 1) -> int:
    """``value`` as an ``int`` of at least ``minimum``; a ``ValueError`` or
    ``TypeError`` otherwise.

    >>> positive_int("num_epochs", 3)
    3
    >>> positive_int("batch_size", 0)
    Traceback (most recent call last):
    ...
    ValueError: batch_size must be at least 1, got 0
    >>> positive_int("batch_size", 2.5)
    Traceback (most recent call last):
    ...
    TypeError: batch_size must be a whole number, got 2.5 (float)
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a whole number, got {value!r} "
                        f"({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def positive_number(name: str, value: object, hint: str = "") -> float:
    """``value`` as a finite ``float`` greater than zero.

    >>> positive_number("lr", 0.1)
    0.1
    >>> positive_number("lr", float("nan"), "e.g. lr=0.1")
    Traceback (most recent call last):
    ...
    ValueError: lr must be a positive finite number, got nan; e.g. lr=0.1
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r} "
                        f"({type(value).__name__})")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value}"
                         + (f"; {hint}" if hint else ""))
    return float(value)


def check_devices(devices: Sequence[mx.Context],
                  name: str = "devices") -> list[mx.Context]:
    """A non-empty list of distinct MXNet devices.

    >>> check_devices([mx.cpu(0), mx.cpu(1)])
    [cpu(0), cpu(1)]
    >>> check_devices(["cpu(0)"])
    Traceback (most recent call last):
    ...
    TypeError: devices[0] is the str 'cpu(0)', not an MXNet device: use mx.cpu(i), ...
    """
    if isinstance(devices, mx.Context):
        raise TypeError(f"{name} must be a list of devices, got the single device "
                        f"{devices}; use [{devices}]")
    devices = list(devices)
    if not devices:
        raise ValueError(f"{name} is empty: pass at least one device, "
                         "e.g. mgpu.devices(2)")
    for i, d in enumerate(devices):
        if not isinstance(d, mx.Context):
            raise TypeError(f"{name}[{i}] is the {type(d).__name__} {d!r}, not an "
                            "MXNet device: use mx.cpu(i), mx.gpu(i) or mgpu.devices(n)")
        if d in devices[:i]:
            raise ValueError(f"{name} lists {d} twice (positions {devices.index(d)} "
                             f"and {i}): each device can hold one copy of the model; "
                             "use distinct devices")
    return devices


def check_labels(labels: np.ndarray, num_classes: int, name: str = "labels") -> None:
    """Labels must be whole numbers in ``0 .. num_classes - 1``.

    >>> check_labels(np.array([0, 9, 3]), 10)
    >>> check_labels(np.array([0, 10, -1]), 10)
    Traceback (most recent call last):
    ...
    ValueError: labels must lie in 0..9 (the model has 10 outputs), but 2 of 3 ...
    """
    labels = np.asarray(labels)
    if labels.size == 0:
        return
    if not np.issubdtype(labels.dtype, np.integer) and (
            not np.all(np.isfinite(labels)) or np.any(labels != np.round(labels))):
        examples = labels[labels != np.round(labels)][:3].tolist()
        raise ValueError(f"{name} must be whole class numbers; found non-integer "
                         f"values such as {examples}")
    bad = (labels < 0) | (labels >= num_classes)
    if bad.any():
        values = np.unique(labels[bad])[:5].tolist()
        raise ValueError(
            f"{name} must lie in 0..{num_classes - 1} (the model has {num_classes} "
            f"outputs), but {int(bad.sum())} of {labels.size} do not: values "
            f"{values}; fix the labels or give the model as many outputs as there are "
            "classes")
