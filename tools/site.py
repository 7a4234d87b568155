"""The published site: the editions' build directories, reduced to what readers load.

:func:`publish` assembles ``docs/_build/html``: each edition without build leftovers
(doctrees, ``.buildinfo``, source maps, images no page shows), the Chinese edition loading the
static files it shares with the English one from there, and ``docs/_root``'s pages at the root.
"""

from __future__ import annotations

import filecmp
import re
import shutil
from pathlib import Path

__all__ = ["IMAGE_LINK", "STATIC_LINK", "UNLOADED", "prune_images", "publish", "share_static",
           "site_size"]

# Files of an edition that no page loads: source maps (only a browser's developer tools ask for
# them), and the themes' templates; _static/locales (the theme's catalogs) is build-time only.
UNLOADED = ("*.map", "webpack-macros.html", "sbt-webpack-macros.html")
STATIC_LINK = re.compile(r'((?:src|href)=")((?:\.\./)*)_static/([^"?#]+)')
IMAGE_LINK = re.compile(r'_images/([^"\'?#]+)')


def share_static(site: Path, base: str, edition: str) -> int:
    """Let ``edition``'s pages load the static files identical to ``base``'s from ``base``.

    The editions are published side by side, and most of ``_static`` (the theme, MathJax,
    fonts) is the same in both: ``edition`` keeps only the files of its own (its language
    data, search stemmer, options), and its pages' ``src``/``href`` to the others point to
    ``../<base>/_static/``. Returns the bytes saved.
    """
    ours, theirs = site / edition / "_static", site / base / "_static"
    shared = {f.relative_to(ours).as_posix() for f in ours.rglob("*") if f.is_file()
              and (theirs / f.relative_to(ours)).is_file()
              and filecmp.cmp(f, theirs / f.relative_to(ours), shallow=False)}
    for page in (site / edition).rglob("*.html"):
        depth = len(page.relative_to(site / edition).parts) - 1

        def point(m: re.Match, depth: int = depth) -> str:
            if len(m.group(2)) // 3 != depth or m.group(3) not in shared:
                return m.group(0)
            return f"{m.group(1)}{'../' * (depth + 1)}{base}/_static/{m.group(3)}"

        text = page.read_text("utf-8")
        page.write_text(STATIC_LINK.sub(point, text), "utf-8")
    saved = 0
    for name in shared:
        saved += (ours / name).stat().st_size
        (ours / name).unlink()
    for folder in sorted((d for d in ours.rglob("*") if d.is_dir()), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
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
    if "en" in languages:
        for language in languages:
            if language != "en":
                share_static(site, "en", language)
    for page in sorted(root_pages.iterdir()):
        shutil.copyfile(page, site / page.name)
    (site / ".nojekyll").touch()
    return site


def site_size(site: Path) -> int:
    """Bytes of every file under ``site``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = (Path(tmp) / "a.html").write_text("12345")
    ...     site_size(Path(tmp))
    5
    """
    return sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
