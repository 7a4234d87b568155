"""Stamps: a file recording the digest of what a step was done from, so that it is done once.

``nox -s docs`` skips the install, the Horovod check and the catalog extraction when nothing
they depend on changed (and says so in its log, which ``bench/docs_build.py`` reads); the
book's Sphinx extension keeps its execution cache with the same :func:`digest`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["digest", "install_once", "record", "unchanged"]


def digest(*parts: str | bytes | Path) -> str:
    """SHA-256 over strings, bytes and the contents of files (a file that is missing counts too).

    >>> digest("a", b"b") == digest("a", "b") != digest("ab")
    True
    >>> digest(Path("no-such-file")) == digest("missing no-such-file")
    True
    """
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            part = part.read_bytes() if part.is_file() else f"missing {part}"
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


def unchanged(stamp: Path, wanted: str) -> bool:
    """Whether the file ``stamp`` records the digest ``wanted`` (a missing stamp records none)."""
    return stamp.is_file() and stamp.read_text() == wanted


def record(stamp: Path, wanted: str) -> None:
    """Write the digest ``wanted`` to the file ``stamp`` (creating its folder)."""
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(wanted)


def install_once(stamp: Path, spec: str, sources: Sequence[Path],
                 install: Callable[[], object], log: Callable[[str], object]) -> bool:
    """``install()`` unless ``stamp`` records ``spec`` and ``sources`` as they are now.

    Returns whether it installed; when it does not, it logs why (naming the ``sources``).
    """
    wanted = digest(spec, *sources)
    if unchanged(stamp, wanted):
        names = " and ".join(source.name for source in sources)
        log(f"{spec}: installed already ({names} unchanged)")
        return False
    install()
    record(stamp, wanted)
    return True
