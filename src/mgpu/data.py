"""Fashion-MNIST from IDX files, read with NumPy, and minibatches over them.

The files are looked for, in this order, in ``$MGPU_DATA_DIR``, in MXNet's dataset cache
(``~/.mxnet/datasets/fashion-mnist``) and in Debian's
``/usr/share/datasets/fashion-mnist`` (package ``dataset-fashion-mnist``). Each of the
four files may be gzipped (``.gz``) or not.
"""

from __future__ import annotations

import gzip
import numbers
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "DataError",
    "Dataset",
    "FILES",
    "NUM_CLASSES",
    "data_dirs",
    "find_data_dir",
    "iter_batches",
    "load_fashion_mnist",
    "read_idx",
]

#: The four IDX files of a Fashion-MNIST directory.
FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
NAME = "fashion-mnist"
#: The number of Fashion-MNIST's classes (its labels are 0 .. 9).
NUM_CLASSES = 10
DEBIAN_PACKAGE = "dataset-fashion-mnist"
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4",
               0x0E: ">f8"}


class DataError(RuntimeError):
    """A data set that is missing, truncated or corrupt."""


@dataclass
class Dataset:
    """Images as ``uint8`` arrays of shape (N, 1, 28, 28), labels as ``int32``."""

    name: str
    source: Path
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray

    def __repr__(self) -> str:
        return (
            f"Dataset({self.name!r}, train={len(self.train_labels)}, "
            f"test={len(self.test_labels)}, source={str(self.source)!r})"
        )


def data_dirs() -> list[Path]:
    """The directories searched for Fashion-MNIST, in order (``$MGPU_DATA_DIR`` alone
    when set).

    >>> [str(p) for p in data_dirs()][-1]
    '/usr/share/datasets/fashion-mnist'
    """
    if os.environ.get("MGPU_DATA_DIR"):
        return [Path(os.environ["MGPU_DATA_DIR"]).expanduser()]
    return [Path("~/.mxnet/datasets").expanduser() / NAME,
            Path("/usr/share/datasets") / NAME]


def _file_in(directory: Path, stem: str) -> Path | None:
    for candidate in (directory / (stem + ".gz"), directory / stem):
        if candidate.is_file():
            return candidate
    return None


def _complete(directory: Path) -> bool:
    return all(_file_in(directory, stem) for stem in FILES.values())


def _download() -> Path | None:
    """Fetch the official files with MXNet's own downloader (it checks their SHA-1)."""
    from mgpu.backend import mx

    root = Path("~/.mxnet/datasets").expanduser() / NAME
    try:
        for train in (True, False):
            mx.gluon.data.vision.FashionMNIST(root=str(root), train=train)
    except Exception:  # offline, proxy, checksum: any failure means "not available"
        return None
    return root if _complete(root) else None


def find_data_dir(data_dir: str | os.PathLike | None = None,
                  download: bool = True) -> Path:
    """Return the first directory holding all four IDX files of Fashion-MNIST.

    A directory the user gave, as ``data_dir`` or else in ``$MGPU_DATA_DIR``, is the
    only place looked at: if it lacks the files, that is an error, never a quiet switch
    to other data. Otherwise :func:`data_dirs` is searched and, failing that, MXNet's
    official download is tried when ``download`` is true.

    >>> find_data_dir(data_dir="/nonexistent")
    Traceback (most recent call last):
    ...
    mgpu.data.DataError: data_dir='/nonexistent' does not exist: ...
    """
    given = "data_dir"
    if data_dir is None and os.environ.get("MGPU_DATA_DIR"):
        data_dir, given = os.environ["MGPU_DATA_DIR"], "MGPU_DATA_DIR"
    if data_dir is not None:
        return _given_dir(Path(data_dir).expanduser(), f"{given}={str(data_dir)!r}")
    dirs = data_dirs()  # $MGPU_DATA_DIR is unset here
    for d in dirs:
        if _complete(d):
            return d
    if download:
        got = _download()
        if got is not None:
            return got
    raise DataError(
        f"{NAME} not found. Looked in: {', '.join(str(d) for d in dirs)}"
        + ("; the download failed (offline?)" if download else "")
        + f". Put the four IDX files ({', '.join(FILES.values())}, .gz or raw) in one "
        "of these places (set MGPU_DATA_DIR to use your own) or install the Debian "
        f"package: apt-get install {DEBIAN_PACKAGE}."
    )


def _given_dir(d: Path, given: str) -> Path:
    """The directory the user named if it holds the four files, else a
    :class:`DataError`."""
    if not d.exists():
        raise DataError(f"{given} does not exist: point it at the directory that holds "
                        f"the four {NAME} files ({', '.join(FILES.values())}, .gz or "
                        "raw)")
    if not d.is_dir():
        raise DataError(f"{given} is a file, not a directory: point it at the "
                        f"directory that holds the four {NAME} files")
    missing = [s for s in FILES.values() if not _file_in(d, s)]
    if missing:
        raise DataError(f"{NAME} not found in {d} ({given}): missing "
                        f"{', '.join(missing)} (.gz or raw)")
    return d


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file (gzipped or raw) into a NumPy array, checking its header and
    length.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x-idx1-ubyte"
    >>> _ = p.write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9]))
    >>> read_idx(p)
    array([7, 8, 9], dtype=uint8)
    """
    path = Path(path)
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                raw = f.read()
        else:
            raw = path.read_bytes()
    except (OSError, EOFError, zlib.error) as err:
        raise DataError(
            f"{path} is not a readable gzip file ({err}); it is truncated or corrupt: "
            "delete it and fetch it again"
        ) from err
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise DataError(f"{path} is not an IDX file (bad magic number "
                        f"{raw[:4].hex() or 'none'})")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if ndim == 0 or len(raw) < header:
        raise DataError(f"{path} is truncated: its IDX header is incomplete")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    expected = header + int(np.prod(dims)) * dtype.itemsize
    if len(raw) != expected:
        state = "truncated" if len(raw) < expected else "corrupt (trailing bytes)"
        raise DataError(
            f"{path} has {len(raw)} bytes but its header {dims} promises {expected}: "
            f"the file is {state}; delete it and fetch it again"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)


def _subset(images, labels, n, rng, what):
    if n is None:
        return images, labels
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise DataError(f"{what}={n!r} must be a whole number of examples (or None for "
                        "all)")
    if not 1 <= n <= len(labels):
        raise DataError(f"{what}={n} is out of range: the split has {len(labels)} "
                        "examples")
    idx = np.sort(rng.choice(len(labels), size=n, replace=False))
    return images[idx], labels[idx]


def load_fashion_mnist(
    subset: int | None = None,
    test_subset: int | None = None,
    seed: int = 0,
    data_dir: str | os.PathLike | None = None,
    download: bool = True,
) -> Dataset:
    """Load the whole data set into memory (well under a second for Fashion-MNIST).

    ``subset`` / ``test_subset`` keep a random sample of that many training / test
    examples (chosen with ``seed``), so that CPU runs fit a time budget.

    >>> ds = load_fashion_mnist(subset=1000, test_subset=500)
    >>> ds.train_images.shape, ds.test_labels.shape
    ((1000, 1, 28, 28), (500,))
    """
    directory = find_data_dir(data_dir, download)
    arrays = {key: read_idx(_file_in(directory, stem)) for key, stem in FILES.items()}
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise DataError(
                f"{directory}: {split} images {images.shape} and labels {labels.shape} "
                "do not match (expected (N, rows, cols) images and N labels)"
            )
        bad = (labels < 0) | (labels >= NUM_CLASSES)
        if bad.any():
            raise DataError(
                f"{_file_in(directory, FILES[split + '_labels'])} holds "
                f"{int(bad.sum())} labels outside 0..{NUM_CLASSES - 1} (e.g. "
                f"{np.unique(labels[bad])[:5].tolist()}): it is corrupt or not {NAME}; "
                "delete it and fetch it again")
    rng = np.random.RandomState(seed)
    train = _subset(arrays["train_images"], arrays["train_labels"], subset, rng,
                    "subset")
    test = _subset(arrays["test_images"], arrays["test_labels"], test_subset, rng,
                   "test_subset")
    return Dataset(
        name=NAME,
        source=directory,
        train_images=train[0][:, None],
        train_labels=train[1].astype(np.int32),
        test_images=test[0][:, None],
        test_labels=test[1].astype(np.int32),
    )


def iter_batches(
    images: np.ndarray,
    labels: np.ndarray,
    batch_size: int,
    shuffle: bool = False,
    seed: int | None = None,
    min_last: int = 1,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(X, y)`` minibatches as float32 arrays, ``X`` scaled to [0, 1].

    The last batch is smaller when ``batch_size`` does not divide the data (60,000 = 234
    x 256 + 96); it is dropped only if it has fewer than ``min_last`` examples (e.g.
    fewer than devices).

    >>> X = np.zeros((10, 1, 2, 2), np.uint8); y = np.arange(10)
    >>> [len(b[1]) for b in iter_batches(X, y, 4)]
    [4, 4, 2]
    >>> [len(b[1]) for b in iter_batches(X, y, 4, min_last=3)]
    [4, 4]
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if len(images) != len(labels):
        raise ValueError(f"{len(images)} images but {len(labels)} labels")
    n = len(labels)
    order = np.random.RandomState(seed).permutation(n) if shuffle else np.arange(n)
    for start in range(0, n, batch_size):
        idx = order[start : start + batch_size]
        if len(idx) < min_last:
            return
        if not shuffle:
            idx = slice(start, start + len(idx))
        yield images[idx].astype(np.float32) / 255, labels[idx].astype(np.float32)
