"""The Chinese edition's message catalogs: extracted again only when their sources change."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tools.stamps import digest, record, unchanged

__all__ = ["catalog_sources", "update_catalogs"]


def catalog_sources(docs: Path, lock: Path) -> list[Path]:
    """What the extracted messages depend on: pages, conf and extensions, templates, catalogs
    (under ``docs``), and the lock ``lock`` (the versions of Sphinx and its extensions)."""
    files = [*docs.glob("*.md"), docs / "conf.py", *docs.glob("_ext/*.py"),
             *docs.glob("_templates/**/*"), *docs.glob("locales/**/*.po"), lock]
    return sorted(f for f in files if f.is_file())


def update_catalogs(docs: Path, build: Path, lock: Path, run: Callable[..., object],
                    log: Callable[[str], object], force: bool = True) -> None:
    """Extract the English messages (.pot) and merge them into the Chinese catalogs (.po).

    ``run(*command, silent=False)`` runs a command in the session's venv (nox's
    ``session.run``). With ``force=False``, skipped when none of :func:`catalog_sources` changed
    since the last extraction (a stamp in ``build`` records them, as they were after it).
    """
    pot, stamp = build / "gettext", build / "catalogs.sha256"

    def sources() -> str:
        files = catalog_sources(docs, lock)
        return digest(*(f.relative_to(docs.parent).as_posix() for f in files), *files)

    if not force and pot.is_dir() and unchanged(stamp, sources()):
        log("catalogs: no page, catalog or conf changed since the last extraction, "
            "not extracted again")
        return
    # From the execution cache (filled by the English build; executed here if it is empty): the
    # captions of glued figures exist only when the notebook's glue data does.
    run("sphinx-build", "-b", "gettext", "-q", "-D", "nb_execution_mode=cache",
        str(docs), str(pot))
    run("sphinx-intl", "update", "-p", str(pot), "-l", "zh_CN", "-d", str(docs / "locales"),
        "-w", "100", silent=True)
    record(stamp, sources())
