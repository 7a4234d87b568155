"""Checkpoints: one file that holds everything a training run needs to go on exactly.

A :class:`Checkpoint` holds the parameters (one copy: after the allreduce every device
holds the same), the optimizer's state as ``gluon.Trainer.save_states`` writes it, the
epoch reached (which fixes the data order, the position and the random state, see
:func:`mgpu.loop.train`), what must match on a resume (:meth:`Checkpoint.check`) and the
history so far. :func:`save_checkpoint` writes it atomically with a SHA-256 checksum and
keeps the previous good file; :func:`load_checkpoint` verifies the checksum and falls
back to the previous file, with a warning, when the newest one is torn or corrupt.

The file: a first line ``mgpu-checkpoint 1 sha256=<hex>``, then the checksummed body:
one line of JSON (the header), the parameters as an ``.npz`` archive, the optimizer's
bytes.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Checkpoint", "CheckpointError", "CheckpointMismatchError",
           "load_checkpoint", "previous_path", "save_checkpoint"]

#: The first words of every checkpoint file, with the format's version.
MAGIC = b"mgpu-checkpoint 1"


class CheckpointError(ValueError):
    """No good checkpoint could be read (both the file and the previous one are bad)."""


class CheckpointMismatchError(ValueError):
    """A checkpoint belongs to another run: another model, optimizer or classes."""


@dataclass(frozen=True)
class Checkpoint:
    """What a training run needs to go on after ``epoch`` complete epochs.

    ``params`` maps each parameter's name to its value (in the model's order);
    ``states`` are the optimizer's bytes (empty for a from-scratch model trained by
    plain SGD, which has none); ``meta`` is what must match on a resume (``model``,
    ``optimizer``, ``classes``, ``seed``); ``history`` is
    :class:`mgpu.loop.History` as a dictionary.

    >>> ckpt = Checkpoint(2, {"w": np.zeros((2, 3), np.float32)}, b"",
    ...                   {"model": "toy", "optimizer": "sgd", "classes": 3, "seed": 0})
    >>> ckpt.shapes
    {'w': (2, 3)}
    """

    epoch: int  #: how many epochs are complete
    params: dict[str, np.ndarray]
    states: bytes
    meta: dict
    history: dict = field(default_factory=dict)

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Each parameter's shape, by name."""
        return {name: tuple(a.shape) for name, a in self.params.items()}

    def check(self, shapes: dict[str, tuple[int, ...]], path: str | os.PathLike = "",
              **expected: object) -> None:
        """Raise :class:`CheckpointMismatchError` unless the checkpoint fits a run with
        these parameter ``shapes`` (by name, in order) and these ``meta`` values.

        >>> ckpt = Checkpoint(1, {"w": np.zeros(3)}, b"", {"optimizer": "sgd"})
        >>> ckpt.check({"w": (3,)}, optimizer="sgd")
        >>> ckpt.check({"w": (3,)}, "run.ckpt", optimizer="adam")
        Traceback (most recent call last):
        mgpu.checkpoint.CheckpointMismatchError: the checkpoint run.ckpt was written ...
        """
        where = f"the checkpoint {os.fspath(path)}" if path else "the checkpoint"
        afresh = "pass another checkpoint path to start afresh"
        for key, value in expected.items():
            found = self.meta.get(key)
            if found != value:
                raise CheckpointMismatchError(
                    f"{where} was written with {key}={found!r}, but this run has "
                    f"{key}={value!r}: resume with the same {key}, or {afresh}")
        mine = self.shapes
        if list(mine) != list(shapes) or mine != dict(shapes):
            raise CheckpointMismatchError(
                f"{where} holds another model: {_first_difference(mine, shapes)}; "
                f"resume with the model it was written for, or {afresh}")


def _first_difference(found: dict, expected: dict) -> str:
    """The first parameter in which two ``{name: shape}`` lists differ, in words."""
    for (n1, s1), (n2, s2) in zip(found.items(), expected.items()):
        if n1 != n2:
            return f"parameter {n1!r} in the checkpoint where the model has {n2!r}"
        if tuple(s1) != tuple(s2):
            return f"parameter {n1!r} has shape {tuple(s1)}, the model's {tuple(s2)}"
    return f"it has {len(found)} parameters, the model {len(expected)}"


def previous_path(path: str | os.PathLike) -> Path:
    """Where :func:`save_checkpoint` keeps the previous good checkpoint.

    >>> previous_path("runs/lenet.ckpt").name
    'lenet.ckpt.prev'
    """
    path = Path(path)
    return path.with_name(path.name + ".prev")


def _encode(ckpt: Checkpoint) -> bytes:
    """The checkpoint's file content: checksum line, header line, parameters, states."""
    buf = io.BytesIO()
    np.savez(buf, **ckpt.params)
    arrays = buf.getvalue()
    header = {"epoch": ckpt.epoch, "meta": ckpt.meta, "history": ckpt.history,
              "params": [[n, list(a.shape), str(a.dtype)]
                         for n, a in ckpt.params.items()],
              "bytes": {"params": len(arrays), "states": len(ckpt.states)}}
    body = json.dumps(header).encode() + b"\n" + arrays + ckpt.states
    digest = hashlib.sha256(body).hexdigest().encode()
    return MAGIC + b" sha256=" + digest + b"\n" + body


def _decode(content: bytes) -> Checkpoint:
    """The checkpoint in ``content``; ValueError saying what is wrong if it is bad."""
    first, _, body = content.partition(b"\n")
    if not first.startswith(MAGIC + b" sha256="):
        raise ValueError("it does not start like an mgpu checkpoint")
    if hashlib.sha256(body).hexdigest().encode() != first[len(MAGIC) + 8:]:
        raise ValueError(f"its SHA-256 checksum does not match its {len(body)} bytes "
                         "(torn or corrupted)")
    line, _, rest = body.partition(b"\n")
    header = json.loads(line)
    n = header["bytes"]["params"]
    with np.load(io.BytesIO(rest[:n])) as arrays:
        params = {name: arrays[name] for name, _, _ in header["params"]}
    return Checkpoint(header["epoch"], params, rest[n:], header["meta"],
                      header["history"])


def save_checkpoint(path: str | os.PathLike, ckpt: Checkpoint) -> Path:
    """Write ``ckpt`` to ``path`` atomically; keep the previous good file; return
    ``path``.

    The new content goes to ``path.tmp`` (flushed and fsynced), the current file, if
    it is good, becomes :func:`previous_path`, and ``path.tmp`` is renamed over
    ``path`` (``os.replace`` is atomic): a crash at any moment leaves a good checkpoint
    on disk, at worst one epoch older.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> ckpt = Checkpoint(1, {"w": np.ones(2)}, b"", {})
    >>> save_checkpoint(d / "a.ckpt", ckpt).name, (d / "a.ckpt.prev").exists()
    ('a.ckpt', False)
    >>> _ = save_checkpoint(d / "a.ckpt", ckpt)
    >>> sorted(p.name for p in d.iterdir())
    ['a.ckpt', 'a.ckpt.prev']
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"checkpoint={os.fspath(path)!r} is a directory; pass "
                                "a file path such as 'runs/lenet.ckpt'")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(_encode(ckpt))
        f.flush()
        os.fsync(f.fileno())
    if _read(path)[0] is not None:  # keep the current one only if it is good
        os.replace(path, previous_path(path))
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    return path


def _fsync_dir(directory: Path) -> None:
    """Make the renames in ``directory`` durable (where the system allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _read(path: Path) -> tuple[Checkpoint | None, str]:
    """The checkpoint in ``path``, or None and what is wrong with the file."""
    try:
        content = path.read_bytes()
    except FileNotFoundError:
        return None, "it does not exist"
    try:
        return _decode(content), ""
    except (ValueError, KeyError, OSError, EOFError) as err:
        return None, str(err) or type(err).__name__
    except Exception as err:  # noqa: BLE001 - any unreadable archive is a bad file
        return None, f"it cannot be read ({type(err).__name__}: {err})"


def load_checkpoint(path: str | os.PathLike) -> Checkpoint | None:
    """The newest good checkpoint at ``path``, or None when there is none yet.

    If ``path`` is torn or corrupt (its checksum does not match) or missing while the
    previous file is there, this warns, naming the file and what is wrong, and returns
    the previous good checkpoint (:func:`previous_path`). If neither is good it raises
    :class:`CheckpointError` naming both. A left-over ``path.tmp`` (a write that did
    not finish) is ignored.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "a.ckpt"
    >>> load_checkpoint(path) is None
    True
    >>> _ = save_checkpoint(path, Checkpoint(1, {"w": np.ones(2)}, b"", {}))
    >>> _ = save_checkpoint(path, Checkpoint(2, {"w": np.ones(2)}, b"", {}))
    >>> _ = path.write_bytes(path.read_bytes()[:-9])  # torn
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     load_checkpoint(path).epoch
    1
    >>> "checksum does not match" in str(caught[0].message)
    True
    """
    path = Path(path)
    prev = previous_path(path)
    ckpt, problem = _read(path)
    if ckpt is not None:
        return ckpt
    if not path.exists() and not prev.exists():
        return None
    older, older_problem = _read(prev)
    if older is None:
        raise CheckpointError(
            f"no good checkpoint: {os.fspath(path)}: {problem}; {os.fspath(prev)}: "
            f"{older_problem}. Delete both to start afresh, or pass another checkpoint "
            "path")
    warnings.warn(f"checkpoint {os.fspath(path)} is not usable ({problem}); resuming "
                  f"from the previous one, {os.fspath(prev)} (epoch {older.epoch})",
                  stacklevel=2)
    return older
