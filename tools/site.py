"""The published site: the editions' build directories, reduced to what readers load.

:func:`publish` assembles ``docs/_build/html``: each edition without build leftovers
(doctrees, ``.buildinfo``, source maps, images no page shows) and with its PDF (if built), the
Chinese edition loading the static files it shares with the English one from there, and
``docs/_root``'s pages at the root.
"""

from __future__ import annotations

import filecmp
import os
import re
import shutil
from pathlib import Path

from tools.pdf import pdf_name

__all__ = ["IMAGE_LINK", "LINK", "SHARED", "SOURCE_LINK", "UNLOADED", "prune_images",
           "prune_sources", "publish", "publish_pdfs", "share_static", "site_size"]

# Files of an edition that no page loads: source maps (only a browser's developer tools ask for
# them), and the themes' templates; _static/locales (the theme's catalogs) is build-time only.
UNLOADED = ("*.map", "webpack-macros.html", "sbt-webpack-macros.html")
# The folders whose files identical in two editions are published once: the theme, MathJax and
# fonts (_static), and the source archive and its README (_downloads; the notebooks differ).
SHARED = ("_static", "_downloads")
LINK = re.compile(r'((?:src|href)=")([^"?#:]+)')  # a relative link, without query or anchor
IMAGE_LINK = re.compile(r'_images/([^"\'?#]+)')
SOURCE_LINK = re.compile(r'_sources/([^"\'?#]+)')


def share_static(site: Path, base: str, edition: str) -> int:
    """Let ``edition``'s pages load the files of :data:`SHARED` folders that are identical to
    ``base``'s from ``base``.

    The editions are published side by side, and most of ``_static`` (the theme, MathJax,
    fonts) and the source archive in ``_downloads`` are the same in both: ``edition`` keeps
    only the files of its own (its language data, search stemmer, options, its notebooks),
    and its pages' ``src``/``href`` to the others point to ``../<base>/<folder>/``. Returns
    the bytes saved.
    """
    shared = set()
    for folder in SHARED:
        ours, theirs = site / edition / folder, site / base / folder
        shared |= {f"{folder}/{f.relative_to(ours).as_posix()}" for f in ours.rglob("*")
                   if f.is_file() and (theirs / f.relative_to(ours)).is_file()
                   and filecmp.cmp(f, theirs / f.relative_to(ours), shallow=False)}
    for page in (site / edition).rglob("*.html"):
        here = page.parent.relative_to(site / edition)

        def point(m: re.Match, here: Path = here, page: Path = page) -> str:
            target = os.path.normpath(here / m.group(2)).replace(os.sep, "/")
            if target not in shared:
                return m.group(0)
            return m.group(1) + os.path.relpath(site / base / target, page.parent)

        text = page.read_text("utf-8")
        page.write_text(LINK.sub(point, text), "utf-8")
    saved = 0
    for name in shared:
        saved += (site / edition / name).stat().st_size
        (site / edition / name).unlink()
    for folder in SHARED:
        for empty in sorted((d for d in (site / edition / folder).rglob("*") if d.is_dir()),
                            reverse=True):
            if not any(empty.iterdir()):
                empty.rmdir()
    return saved


def prune_images(edition: Path) -> None:
    """Delete the files of ``edition/_images`` that no page of the edition shows.

    Sphinx copies each page's images into ``_images`` but never deletes one: after a figure
    changes, the old file stays in the build directory.
    """
    shown = {name for page in edition.rglob("*.html")
             for name in IMAGE_LINK.findall(page.read_text("utf-8"))}
    for image in (edition / "_images").glob("*"):
        if image.is_file() and image.name not in shown:
            image.unlink()


def prune_sources(edition: Path) -> None:
    """Delete the files of ``edition/_sources`` that no page links to (the notebooks stay).

    A build directory keeps what earlier builds wrote there, such as pages' MyST sources
    from before ``html_copy_source = False``: they must not be published.
    """
    linked = {name for page in edition.rglob("*.html")
              for name in SOURCE_LINK.findall(page.read_text("utf-8"))}
    for source in (edition / "_sources").rglob("*"):
        if source.is_file() and source.relative_to(edition / "_sources").as_posix() not in linked:
            source.unlink()


def publish(build: Path, root_pages: Path, languages: tuple[str, ...]) -> Path:
    """Assemble the published site in ``build/html`` from the editions in ``build/sphinx``.

    Only what readers load: no doctrees, no ``jupyter_execute/``, no ``.buildinfo``, no image
    that no page shows; the files of ``root_pages`` (``docs/_root``) at its root. The directory
    is rebuilt from scratch each time, so nothing stale survives in it.
    """
    site = build / "html"
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    for language in languages:
        shutil.copytree(build / "sphinx" / language, site / language,
                        ignore=shutil.ignore_patterns(".buildinfo", ".doctrees", *UNLOADED))
        shutil.rmtree(site / language / "_static" / "locales", ignore_errors=True)
        prune_images(site / language)
        prune_sources(site / language)
    publish_pdfs(build, site, languages)
    if "en" in languages:
        for language in languages:
            if language != "en":
                share_static(site, "en", language)
    for page in sorted(root_pages.iterdir()):
        shutil.copyfile(page, site / page.name)
    (site / ".nojekyll").touch()
    return site


def publish_pdfs(build: Path, site: Path, languages: tuple[str, ...]) -> list[Path]:
    """Copy each edition's PDF (``build/pdf/mgpu-<language>.pdf``, where it was built) into
    its ``_downloads/`` in ``site``; return the copies.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     build, site = Path(tmp) / "build", Path(tmp) / "site"
    ...     (build / "pdf").mkdir(parents=True)
    ...     _ = (build / "pdf" / "mgpu-en.pdf").write_bytes(b"%PDF-1.4")
    ...     [p.relative_to(site).as_posix() for p in publish_pdfs(build, site, ("en", "zh_CN"))]
    ['en/_downloads/mgpu-en.pdf']
    """
    copies = []
    for language in languages:
        pdf = build / "pdf" / pdf_name(language)
        if pdf.is_file():
            copy = site / language / "_downloads" / pdf.name
            copy.parent.mkdir(parents=True, exist_ok=True)
            tmp = copy.with_name(copy.name + ".tmp")  # a served site never shows half a PDF
            shutil.copyfile(pdf, tmp)
            tmp.replace(copy)
            copies.append(copy)
    return copies


def site_size(site: Path) -> int:
    """Bytes of every file under ``site``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = (Path(tmp) / "a.html").write_text("12345")
    ...     site_size(Path(tmp))
    5
    """
    return sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
