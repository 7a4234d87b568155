"""Sphinx extension of the mgpu book: the execution cache, the editions and their pages.

The Chinese search lives in ``_ext/mgpu_search.py``, the source the book carries in
``_ext/mgpu_source.py``, the verdicts in ``_ext/mgpu_verdict.py``.

- **Execution cache.** MyST-NB's cache keys each page on its code only, but the outputs also
  depend on the ``mgpu`` package (every page) and on data files (``mgpu_page_data``). On
  ``config-inited``, in builds that use the cache (``nb_execution_mode = "cache"``; the gettext
  build runs with ``off`` and leaves the cache alone), a changed package clears the cache and a
  changed data file drops its page's cached execution. Both editions share the cache, so the
  first build after a change executes and the second reuses. A build with
  ``mgpu_cached_only = True`` (the single-page editions that ``tools/pdf.py`` prints) executes
  nothing: it fails when the cache is stale, and when a page was executed all the same.
- **Re-reading.** A changed package re-reads every page (the config value ``mgpu_package_hash``
  rebuilds the environment); a page re-reads when one of its data files changes (a Sphinx
  dependency of that page).
- **Notebook downloads.** Each executed page offers its notebook, with outputs, for download
  (written by ``_ext/mgpu_notebooks.py``).
- **Per-language settings** (``mgpu_per_language``).
- **Figures open at full size**: each figure's image is a link to its file.
- **One edition's figures.** ``{only}`` blocks of the other edition are dropped when a page is
  read, so that its hidden figures take no figure numbers.
"""

from __future__ import annotations

import copy
import posixpath
import sys
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ExtensionError
from sphinx.util import logging

# The repository, where the package tools is: one digest for the stamps of nox and of this cache.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.stamps import digest, record, unchanged  # noqa: E402

logger = logging.getLogger(__name__)


# --- what executed pages depend on besides their code ---------------------------------------
def _package_hash(config: Config) -> str:
    """SHA-256 of the package's modules: their names (relative to it) and their contents."""
    package = Path(config.mgpu_package_dir)
    if not package.is_dir():
        return ""
    files = sorted(package.rglob("*.py"))
    return digest(*(f.relative_to(package).as_posix() for f in files), *files)


def _resolve_paths(app: Sphinx, config: Config) -> None:
    """Make the paths of ``mgpu_package_dir`` and ``mgpu_page_data`` absolute (from confdir)."""
    confdir = Path(app.confdir)
    if config.mgpu_package_dir:
        config.mgpu_package_dir = str((confdir / config.mgpu_package_dir).resolve())
    config.mgpu_page_data = {
        page: [str((confdir / f).resolve()) for f in files]
        for page, files in config.mgpu_page_data.items()
    }
    config.mgpu_package_hash = _package_hash(config)


def _invalidate_cache(app: Sphinx, config: Config) -> None:
    """Drop cached executions whose outputs are stale although their code did not change.

    The stamps (digests of what the outputs were computed from) live beside the cache, which
    both editions share: the first build after a change drops the cached executions (and
    executes the pages again), the next build reuses them.
    """
    if config.nb_execution_mode != "cache":  # e.g. gettext with nb_execution_mode=off
        return
    from jupyter_cache import get_cache

    cache_dir = _cache_dir(app, config)
    stamp = cache_dir.parent / "mgpu-source.sha256"
    if not unchanged(stamp, config.mgpu_package_hash):
        _refuse_execution(config, "the cached outputs were not computed with this src/mgpu "
                          "(it changed, or the book was never built)")
        if cache_dir.exists():
            logger.info("mgpu_book: mgpu changed since the last build: clearing %s", cache_dir)
            get_cache(str(cache_dir)).clear_cache()
        record(stamp, config.mgpu_package_hash)
    srcdir = Path(app.srcdir).resolve()
    for page, files in config.mgpu_page_data.items():
        wanted = digest(*(Path(f) for f in files))
        stamp = cache_dir.parent / f"data-{page}.sha256"
        if unchanged(stamp, wanted):
            continue
        _refuse_execution(config, f"the data of page {page!r} changed since the book was built")
        if cache_dir.exists():
            cache = get_cache(str(cache_dir))
            for entry in cache.list_cache_records():
                if Path(entry.uri).resolve().with_suffix("") == srcdir / page:
                    logger.info("mgpu_book: data of %r changed: dropping its cached execution",
                                page)
                    cache.remove_cache(entry.pk)
        record(stamp, wanted)


def _cache_dir(app: Sphinx, config: Config) -> Path:
    """The execution cache, resolved as MyST-NB resolves it."""
    path = config.nb_execution_cache_path or Path(app.outdir).parent / ".jupyter_cache"
    return Path(path).resolve()


def _refuse_execution(config: Config, why: str) -> None:
    if config.mgpu_cached_only:
        raise ExtensionError(f"mgpu_book: {why}, and this build (mgpu_cached_only) executes "
                             "nothing: build the book first (nox -s docs)")


def _cached_executions(app: Sphinx) -> set[tuple[int, str]]:
    """The cache's records: a page executed in a build adds one (a new key, its file)."""
    from jupyter_cache import get_cache

    cache_dir = _cache_dir(app, app.config)
    if not cache_dir.exists():
        return set()
    return {(r.pk, r.uri) for r in get_cache(str(cache_dir)).list_cache_records()}


def _watch_executions(app: Sphinx) -> None:
    """In ``mgpu_cached_only`` builds, fail the build if a page was executed all the same."""
    if not app.config.mgpu_cached_only:
        return
    before = _cached_executions(app)

    def check(app: Sphinx, exception: Exception | None) -> None:
        from jupyter_cache import get_cache

        added = _cached_executions(app) - before
        if not added:
            return
        # Forgotten again: a second build must not find these executions and pass.
        cache = get_cache(str(_cache_dir(app, app.config)))
        for pk, _ in added:
            cache.remove_cache(pk)
        if exception is None:
            executed = ", ".join(sorted(uri for _, uri in added))
            raise ExtensionError(f"mgpu_book: {len(added)} page(s) executed in a build that "
                                 f"must only read the cache: {executed}; build the book "
                                 "first (nox -s docs)")

    app.connect("build-finished", check)


def _note_data_dependencies(app: Sphinx, docname: str, source: list[str]) -> None:
    """A page re-reads (and, once its cached execution is gone, re-executes) with its data."""
    for f in app.config.mgpu_page_data.get(docname, ()):
        app.env.note_dependency(f, docname=docname)


# --- each executed page offers its notebook (.ipynb, with outputs) for download --------------
def _notebook_for(app: Sphinx, pagename: str) -> Path:
    # MyST-NB writes the executed notebooks to <outdir>/../jupyter_execute/.
    return Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"


def _offer_notebook(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any],
                    doctree: Any) -> None:
    if _notebook_for(app, pagename).is_file():
        context["ipynb_source"] = f"{pagename}.ipynb"


# --- languages -------------------------------------------------------------------------------
def _per_language(app: Sphinx, config: Config) -> None:
    """Tag the edition (``lang_en``, ``lang_zh_CN``) and apply ``mgpu_per_language[language]``
    (or that of its base language, ``zh`` for ``zh_CN``)."""
    language = config.language or "en"
    # Pages choose per-edition content (e.g. figures drawn with Chinese words) with
    # ``{only} lang_zh_CN``: the execution is shared, the tag is the edition's.
    app.tags.add(f"lang_{language}")
    overrides = config.mgpu_per_language.get(language)
    if overrides is None:
        overrides = config.mgpu_per_language.get(language.split("_")[0], {})
    for name, value in overrides.items():
        # A copy: themes add their defaults to html_theme_options in place, which would change
        # mgpu_per_language (an "env" value) and make Sphinx re-read every page of the next build.
        config[name] = copy.deepcopy(value)


# --- each edition numbers only its own figures ------------------------------------------------
def _drop_other_editions(app: Sphinx, doctree: Any) -> None:
    """Resolve the ``{only}`` blocks against the edition's tags as soon as a page is read.

    Sphinx resolves ``only`` nodes when it writes a page, but it numbers the figures earlier,
    from the doctrees as read: a page that holds an English and a Chinese copy of each figure
    (``{only} not lang_zh_CN`` / ``{only} lang_zh_CN``) numbered both, so the Chinese edition's
    figures were 2, 4, 6. Resolving them here (``sphinx.util.nodes.process_only_nodes``, what
    the writers call) leaves each edition only its own figures to number. The gettext builder
    keeps both, so that the catalogs see every block.
    """
    if app.builder.format != "html":
        return
    from sphinx.util.nodes import process_only_nodes

    process_only_nodes(doctree, app.builder.tags)


# --- every figure opens at full size -----------------------------------------------------------
def _image_address(app: Sphinx, docname: str, image: Any) -> str | None:
    """Where ``image``'s file is in the built site, relative to the page ``docname``; ``None``
    for an image from another host or inlined as data.

    The choice Sphinx's ``Builder.post_process_images`` makes when it writes the page (later):
    the first candidate the builder supports, copied to ``_images/`` under the name the
    environment gave it. An image MyST-NB wrote straight to the output directory (a value glued
    from another page) is not in the environment: its address is its ``uri`` already.
    """
    from sphinx.util.osutil import relative_uri

    candidates = image.get("candidates", {})
    if "?" in candidates:
        return None  # a remote image
    uri = image.get("uri", "")
    if "*" not in candidates:
        uri = next((candidates[t] for t in app.builder.supported_image_types
                    if t in candidates), uri)
    if not uri or uri.startswith(("data:", "http:", "https:", "//")):
        return None
    if uri in app.env.images:
        imgpath = relative_uri(app.builder.get_target_uri(docname), app.builder.imagedir)
        return posixpath.join(imgpath, app.env.images[uri][1])
    return uri


def _link_figures(app: Sphinx, doctree: Any, docname: str) -> None:
    """Wrap the image of every figure in a link to its file, so that a click (or a tap on a
    phone) shows it at full size.

    Sphinx links only the images it scales (``html_scaled_image_link``: those with a width,
    height or scale); the book's figures are drawn at the size they are shown. The link is the
    one Sphinx makes for a scaled image (``a.image-reference``), with the class
    ``mgpu-figure-link``; the image keeps its alt text, which names the link.
    """
    if app.builder.format != "html":
        return
    from docutils import nodes

    for figure in doctree.findall(nodes.figure):
        for image in list(figure.findall(nodes.image)):
            if isinstance(image.parent, nodes.reference):
                continue  # linked already (a :target:)
            address = _image_address(app, docname, image)
            if address is None:
                continue
            link = nodes.reference("", "", internal=True, refuri=address,
                                   classes=["mgpu-figure-link"])
            image.replace_self(link)
            link.append(image)


# --- MyST-NB's execution table in the Chinese edition ----------------------------------------
# myst_nb/ext/execution_tables.py writes its header (and the execution method) in English.
EXEC_TABLE_HEADER = ["Document", "Modified", "Method", "Run Time (s)", "Status"]
EXEC_TABLE_WORDS = {
    "zh": {"Document": "页面", "Modified": "修改时间", "Method": "执行方式",
           "Run Time (s)": "运行时间（秒）", "Status": "状态",
           "cache": "缓存", "auto": "自动", "force": "强制", "inline": "内联", "off": "不执行"},
}


def _translate_exec_table(app: Sphinx, doctree: Any, docname: str) -> None:
    """Put the header and methods of ``{nb-exec-table}`` into the edition's language."""
    from docutils import nodes

    words = EXEC_TABLE_WORDS.get((app.config.language or "en").split("_")[0])
    if not words:
        return
    for table in doctree.findall(nodes.table):
        head = next(table.findall(nodes.thead), None)
        if head is None or [e.astext() for e in head.findall(nodes.entry)] != EXEC_TABLE_HEADER:
            continue
        for body in table.findall(nodes.tbody):
            for row in body.findall(nodes.row):
                method = list(row.findall(nodes.entry))[2]
                for text in list(method.findall(nodes.Text)):
                    text.parent.replace(text, nodes.Text(words.get(text.astext(), text.astext())))
        for text in list(head.findall(nodes.Text)):
            text.parent.replace(text, nodes.Text(words[text.astext()]))


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("mgpu_package_dir", "", "env", types=(str,))
    app.add_config_value("mgpu_page_data", {}, "env", types=(dict,))
    app.add_config_value("mgpu_per_language", {}, "env", types=(dict,))
    # The glossary (a page with a table) whose Chinese column holds the terms the Chinese
    # search must find, and the digest of those terms (computed; a change re-indexes every page).
    # repository, if there is one (the header's source menu links to it).
    # Computed from mgpu_package_dir on config-inited; a new value re-reads every page.
    app.add_config_value("mgpu_package_hash", "", "env", types=(str,))
    # True: execute nothing, only read the cache (tools/pdf.py's single-page editions).
    app.add_config_value("mgpu_cached_only", False, "", types=(bool,))
    app.connect("config-inited", _resolve_paths, priority=400)
    app.connect("config-inited", _invalidate_cache)
    app.connect("config-inited", _per_language)
    app.connect("builder-inited", _watch_executions)
    app.connect("source-read", _note_data_dependencies)
    app.connect("doctree-read", _drop_other_editions)
    app.connect("doctree-resolved", _translate_exec_table)
    app.connect("doctree-resolved", _link_figures)
    app.connect("html-page-context", _offer_notebook, priority=400)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
