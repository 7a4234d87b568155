"""Sphinx extension of the mgpu book: the book carries its source.

``_downloads/`` of each edition gets the source archive (the files git tracks or would track)
and the README as a page; every page's header links to them (``_templates/source-menu.html``),
and to the public repository when ``mgpu_repository_url`` names one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)


# --- the book carries its source --------------------------------------------------------------
# Directories never archived when the source is not a git work tree (a build from the archive).
NOT_SOURCE = {".git", ".nox", ".venv", ".pytest_cache", ".ruff_cache", "__pycache__", "_build",
              "jupyter_execute", ".ipynb_checkpoints"}


def _git(root: Path, *args: str) -> str | None:
    """``git -C root args``'s output, or ``None`` if git or the work tree is not there."""
    import subprocess

    # safe.directory: CI builds as root in a checkout another user owns, which git refuses.
    command = ["git", "-c", "safe.directory=*", "-C", str(root), *args]
    try:
        done = subprocess.run(command, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.decode("utf-8", "surrogateescape")


def source_files(root: Path) -> list[str]:
    """The files of the source, relative to ``root``: the files git tracks or would track (not
    ignored), as they are in the work tree, so that the archive holds the source the book was
    built from (in CI, a clean checkout: the commit); outside a git work tree, every file but
    the build's and the tools' directories (``NOT_SOURCE``) and what .gitignore names."""
    import fnmatch

    listed = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", ".")
    if listed is not None and listed.strip("\0"):
        return sorted(f for f in listed.split("\0") if f and (root / f).is_file())
    ignore = root / ".gitignore"
    patterns = [line.strip().strip("/") for line in
                (ignore.read_text("utf-8").splitlines() if ignore.is_file() else [])
                if line.strip() and not line.startswith(("#", "!"))]

    def ignored(name: str) -> bool:  # the path, or a folder or file name in it, matches
        parts = name.split("/")
        return any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch("/".join(parts[:i]), p)
                   or fnmatch.fnmatch(part, p)
                   for p in patterns for i, part in enumerate(parts, 1))

    return sorted(name for f in root.rglob("*") if f.is_file()
                  and not NOT_SOURCE & set(f.relative_to(root).parts)
                  and not ignored(name := f.relative_to(root).as_posix()))


def write_source_archive(root: Path, target: Path, prefix: str = "mgpu") -> int:
    """``target`` (.tar.gz): the source files of ``root`` under ``prefix/``, with the time of
    the last commit (or SOURCE_DATE_EPOCH) as every file's time, so that the same source gives
    the same bytes. Returns the number of files."""
    import gzip
    import io
    import os
    import tarfile

    stamp = os.environ.get("SOURCE_DATE_EPOCH") or (_git(root, "log", "-1", "--format=%ct")
                                                     or "0").strip() or "0"
    mtime = int(stamp)
    files = source_files(root)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in files:
            path = root / name
            info = tarfile.TarInfo(f"{prefix}/{name}")
            data = path.read_bytes()
            info.size, info.mtime = len(data), mtime
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as out, gzip.GzipFile(filename="", mode="wb", fileobj=out,
                                                  mtime=mtime, compresslevel=9) as gz:
        gz.write(buffer.getvalue())
    return len(files)


README_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mgpu: README</title>
<link rel="icon" href="../_static/favicon.svg">
<style>
body {{ max-width: 52rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.55;
       font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; }}
pre {{ background: #f3f4f6; padding: .75rem 1rem; white-space: pre-wrap;
      overflow-wrap: anywhere; }}
code {{ font-size: .92em; }}
.table {{ overflow-x: auto; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #ccc; padding: .3rem .5rem; vertical-align: top; text-align: left; }}
nav {{ font-size: .95em; border-bottom: 1px solid #ddd; padding-bottom: .5rem; }}
</style>
</head>
<body>
<nav><a href="../index.html">{back}</a> · <a href="{archive}">{archive}</a></nav>
{body}
</body>
</html>
"""


def write_readme_page(readme: Path, target: Path, archive: str, back: str) -> None:
    """The repository's README.md as a page of its own (``target``), beside the archive."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark").enable("table").render(readme.read_text("utf-8"))
    body = body.replace("<table>", '<div class="table"><table>').replace(
        "</table>", "</table></div>")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(README_PAGE.format(body=body, archive=archive, back=back), "utf-8")


def _write_source(app: Sphinx) -> None:
    """``_downloads/``: the source archive and the README page that every page's header links to
    (``_templates/source-menu.html``); written before the pages, which give the archive's size."""
    if app.builder.format != "html" or not app.config.mgpu_source_root:
        return
    root = (Path(app.confdir) / app.config.mgpu_source_root).resolve()
    downloads = Path(app.outdir) / "_downloads"
    archive = downloads / app.config.mgpu_source_archive
    count = write_source_archive(root, archive)
    readme = root / "README.md"
    if readme.is_file():
        zh = (app.config.language or "en").startswith("zh")
        write_readme_page(readme, downloads / "README.html", archive.name,
                          "← 返回本书" if zh else "← back to the book")
    app.env.mgpu_source_size = archive.stat().st_size  # type: ignore[attr-defined]
    logger.info("mgpu_book: %s (%d files, %.2f MB)", archive, count,
                archive.stat().st_size / 1e6)


def _offer_source(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any],
                  doctree: Any) -> None:
    if not app.config.mgpu_source_root:
        return
    size = getattr(app.env, "mgpu_source_size", 0)
    context["mgpu_source"] = {
        "archive": f"_downloads/{app.config.mgpu_source_archive}",
        "readme": "_downloads/README.html",
        "megabytes": f"{size / 1e6:.1f}",
        "repository": app.config.mgpu_repository_url,
    }


def setup(app: Sphinx) -> dict[str, Any]:
    # The source the book carries (_downloads/<mgpu_source_archive>, and README.html), from
    # this directory (relative to the docs); "" writes none. mgpu_repository_url: the public
    # repository, if there is one (the header's source menu links to it).
    app.add_config_value("mgpu_source_root", "", "html", types=(str,))
    app.add_config_value("mgpu_source_archive", "mgpu-source.tar.gz", "html", types=(str,))
    app.add_config_value("mgpu_repository_url", "", "html", types=(str,))
    app.connect("html-page-context", _offer_source)
    app.connect("builder-inited", _write_source)  # before the theme's buttons
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
