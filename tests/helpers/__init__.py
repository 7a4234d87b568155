"""Helpers for the tests (import them with ``from helpers import ...``; pytest puts ``tests``
on ``sys.path``, see ``pythonpath`` in pyproject.toml)."""

from __future__ import annotations

import gzip
import struct

import numpy as np


def write_idx(path, array: np.ndarray, gz: bool = True) -> None:
    """Write ``array`` (uint8) as an IDX file, as the official files are written."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    raw = header + array.astype(np.uint8).tobytes()
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(raw)
    else:
        path.write_bytes(raw)
