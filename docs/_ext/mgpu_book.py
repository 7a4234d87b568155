"""Sphinx extension of the mgpu book: everything ``conf.py`` used to do besides settings.

- **Execution cache.** MyST-NB's cache keys each page on its code only, but the outputs also
  depend on the ``mgpu`` package (every page) and on data files (``mgpu_page_data``). On
  ``config-inited``, in builds that use the cache (``nb_execution_mode = "cache"``; the gettext
  build runs with ``off`` and leaves the cache alone), a changed package clears the cache and a
  changed data file drops its page's cached execution. Both editions share the cache, so the
  first build after a change executes and the second reuses.
- **Re-reading.** A changed package re-reads every page (the config value ``mgpu_package_hash``
  rebuilds the environment); a page re-reads when one of its data files changes (a Sphinx
  dependency of that page).
- **Notebook downloads.** Each executed page offers its notebook, with outputs, for download
  (written by ``_ext/mgpu_notebooks.py``).
- **Per-language settings** (``mgpu_per_language``).
- **The Chinese search**: the glossary's Chinese terms (``mgpu_search_glossary``) as words of
  jieba (a user dictionary, ``html_search_options["dict"]``), of the index and of the query; and
  the stemmer on the Sphinx versions whose JavaScript asks for a ``ChineseStemmer`` that does not
  exist.
- **The source**: ``_downloads/`` of each edition gets the source archive (the files git tracks
  or would track) and the README as a page; every page's header links to them
  (``_templates/source-menu.html``).
- **Figures open at full size**: each figure's image is a link to its file.
- **One edition's figures.** ``{only}`` blocks of the other edition are dropped when a page is
  read, so that its hidden figures take no figure numbers.
"""

from __future__ import annotations

import copy
import hashlib
import posixpath
import re
from pathlib import Path
from typing import Any

import sphinx
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging

logger = logging.getLogger(__name__)


# --- what executed pages depend on besides their code ---------------------------------------
def _digest(files: list[Path], root: Path | None = None) -> str:
    """SHA-256 of the files' contents (and of their names relative to ``root``, if given)."""
    h = hashlib.sha256()
    for f in files:
        if root is not None:
            h.update(f.relative_to(root).as_posix().encode())
        h.update(f.read_bytes() if f.is_file() else b"<missing>")
    return h.hexdigest()


def _package_hash(config: Config) -> str:
    package = Path(config.mgpu_package_dir)
    if not package.is_dir():
        return ""
    return _digest(sorted(package.rglob("*.py")), root=package)


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


def _stamp_differs(stamp: Path, digest: str) -> bool:
    return not (stamp.is_file() and stamp.read_text() == digest)


def _write_stamp(stamp: Path, digest: str) -> None:
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(digest)


def _invalidate_cache(app: Sphinx, config: Config) -> None:
    """Drop cached executions whose outputs are stale although their code did not change.

    The stamps (digests of what the outputs were computed from) live beside the cache, which
    both editions share: the first build after a change drops the cached executions (and
    executes the pages again), the next build reuses them.
    """
    if config.nb_execution_mode != "cache":  # e.g. gettext with nb_execution_mode=off
        return
    from jupyter_cache import get_cache

    # Resolved as MyST-NB resolves it.
    cache_dir = Path(config.nb_execution_cache_path or Path(app.outdir).parent / ".jupyter_cache")
    cache_dir = cache_dir.resolve()
    stamp = cache_dir.parent / "mgpu-source.sha256"
    if _stamp_differs(stamp, config.mgpu_package_hash):
        if cache_dir.exists():
            logger.info("mgpu_book: mgpu changed since the last build: clearing %s", cache_dir)
            get_cache(str(cache_dir)).clear_cache()
        _write_stamp(stamp, config.mgpu_package_hash)
    srcdir = Path(app.srcdir).resolve()
    for page, files in config.mgpu_page_data.items():
        digest = _digest([Path(f) for f in files])
        stamp = cache_dir.parent / f"data-{page}.sha256"
        if not _stamp_differs(stamp, digest):
            continue
        if cache_dir.exists():
            cache = get_cache(str(cache_dir))
            for record in cache.list_cache_records():
                if Path(record.uri).resolve().with_suffix("") == srcdir / page:
                    logger.info("mgpu_book: data of %r changed: dropping its cached execution",
                                page)
                    cache.remove_cache(record.pk)
        _write_stamp(stamp, digest)


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


# --- the Chinese search: jieba's words, and the glossary's terms as words -------------------
# Sphinx 9.0 moved the Chinese search to Snowball's english-stemmer.js (sphinx-doc/sphinx#13574)
# but language_data.js still names the stemmer class after the language, ``ChineseStemmer``,
# which does not exist: the search page throws a ReferenceError and finds nothing (issue
# sphinx-doc/sphinx#14229). Fixed upstream by deriving the class name from the stemmer's file
# name, sphinx-doc/sphinx#14416, listed in CHANGES.rst under Sphinx 9.1.1 (the first release
# with the fix; 9.1 needs Python 3.12+). Sphinx 8 and older ship a porter stemmer for Chinese.
CHINESE_STEMMER_BROKEN = (9, 0, 0) <= sphinx.version_info[:3] < (9, 1, 1)

CJK_RUN = re.compile(r"[\u4e00-\u9fff]+")
# jieba's frequency for the glossary's terms in its user dictionary: high enough that jieba
# keeps each term whole in every sentence of the book (with the frequency jieba computes when
# none is given, 拉取 was split in 3 sentences of 18).
GLOSSARY_WORD_FREQUENCY = 100000


def glossary_terms(glossary: Path, column: str) -> list[str]:
    """The Chinese terms of the glossary's table: each run of Chinese characters of ``column``
    (``延后执行（惰性求值）`` gives 延后执行 and 惰性求值), in table order, without repeats."""
    rows = [line.strip() for line in glossary.read_text("utf-8").splitlines()
            if line.strip().startswith("|")]
    if not rows:
        return []
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    if column not in header:
        raise ValueError(f"{glossary}: no column {column!r} in the glossary's table ({header})")
    index, terms = header.index(column), []
    for row in rows[2:]:  # after the header and its |---| line
        cells = [c.strip() for c in row.strip("|").split("|")]
        if index < len(cells):
            terms += [t for t in CJK_RUN.findall(cells[index]) if t not in terms]
    return terms


# The query side. searchtools.js splits a query only at spaces and punctuation, so a Chinese
# query is looked up as one word: a glossary term is found as it is typed (it is an index term),
# but "参数服务器的作用" is not. This splitter (language_data.js's ``splitQuery``) cuts a run of
# Chinese that is not itself an index term into the longest index terms it contains, from the
# left, and drops the characters between them (which would otherwise be required words that no
# page has); a run with no index term in it is kept whole.
ZH_SPLIT_QUERY_JS = r"""
var splitQuery = (query) => {
  const parts = query
    .split(/[^\p{Letter}\p{Number}_\p{Emoji_Presentation}]+/gu)
    .filter((term) => term);
  const index = typeof Search !== "undefined" && Search._index ? Search._index : null;
  if (!index) return parts;
  const has = (table, word) => Object.prototype.hasOwnProperty.call(table || {}, word);
  const known = (word) =>
    has(index.terms, word.toLowerCase()) || has(index.titleterms, word.toLowerCase());
  const result = [];
  parts.forEach((part) => {
    if (known(part) || !/\p{Script=Han}/u.test(part)) {
      result.push(part);
      return;
    }
    const found = [];
    let i = 0;
    while (i < part.length) {
      let j = Math.min(part.length, i + 16);
      while (j > i + 1 && !known(part.slice(i, j))) j--;
      if (known(part.slice(i, j))) {
        found.push(part.slice(i, j));
        i = j;
      } else {
        i += 1;
      }
    }
    result.push(...(found.length ? found : [part]));
  });
  return result;
};
"""


def _glossary_words_file(config: Config) -> Path | None:
    """Where the jieba dictionary of the glossary's terms goes: html_search_options' ``dict``."""
    path = (config.html_search_options or {}).get("dict")
    return Path(path) if path else None


def _chinese_search(app: Sphinx, config: Config) -> None:
    """The Chinese edition's search: the glossary's Chinese terms become words of jieba (a user
    dictionary written to ``html_search_options["dict"]``, which Sphinx's Chinese search loads),
    index terms of every page that uses them, and words of the query (``ZH_SPLIT_QUERY_JS``)."""
    search_language = config.html_search_language or config.language or ""
    if not search_language.startswith("zh"):
        return
    from sphinx.search.zh import SearchChinese  # imports jieba: only in Chinese builds

    terms: list[str] = []
    if config.mgpu_search_glossary:
        glossary = Path(app.confdir) / config.mgpu_search_glossary
        terms = glossary_terms(glossary, config.mgpu_search_glossary_column)
        if not terms:
            raise ValueError(f"{glossary}: no Chinese term in column "
                             f"{config.mgpu_search_glossary_column!r} of its table")
        words = _glossary_words_file(config)
        if words is None:
            raise ValueError("mgpu_search_glossary needs html_search_options['dict']: the file "
                             "jieba's dictionary of the glossary's terms is written to")
        text = "".join(f"{t} {GLOSSARY_WORD_FREQUENCY}\n" for t in terms)
        words.parent.mkdir(parents=True, exist_ok=True)
        if not words.is_file() or words.read_text("utf-8") != text:
            words.write_text(text, "utf-8")
        # A new term re-writes (and re-indexes) every page.
        config.mgpu_search_glossary_digest = hashlib.sha256(text.encode()).hexdigest()
    glossary_set = frozenset(terms)

    class SearchChineseGlossary(SearchChinese):
        """Sphinx's Chinese search, with the glossary's terms as index terms wherever they occur
        (even where jieba's HMM glues a term to its neighbour: 个键) and as words of the query."""

        if CHINESE_STEMMER_BROKEN:
            language_name = "English"  # language_data.js: window.Stemmer = EnglishStemmer;
        js_splitter_code = ZH_SPLIT_QUERY_JS

        def split(self, input: str) -> list[str]:  # noqa: A002 (Sphinx's name)
            words = super().split(input)
            return words + [t for t in glossary_set if t in input]

        def word_filter(self, stemmed_word: str) -> bool:
            # Sphinx drops words of one character; the glossary has one (键, key).
            return super().word_filter(stemmed_word) or stemmed_word in glossary_set

    app.add_search_language(SearchChineseGlossary)


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
    # The source the book carries (_downloads/<mgpu_source_archive>, and README.html), from
    # this directory (relative to the docs); "" writes none. mgpu_repository_url: the public
    # repository, if there is one (the header's source menu links to it).
    app.add_config_value("mgpu_source_root", "", "html", types=(str,))
    app.add_config_value("mgpu_source_archive", "mgpu-source.tar.gz", "html", types=(str,))
    app.add_config_value("mgpu_repository_url", "", "html", types=(str,))
    app.add_config_value("mgpu_search_glossary", "", "html", types=(str,))
    app.add_config_value("mgpu_search_glossary_column", "Chinese", "html", types=(str,))
    app.add_config_value("mgpu_search_glossary_digest", "", "html", types=(str,))
    # Computed from mgpu_package_dir on config-inited; a new value re-reads every page.
    app.add_config_value("mgpu_package_hash", "", "env", types=(str,))
    app.connect("config-inited", _resolve_paths, priority=400)
    app.connect("config-inited", _invalidate_cache)
    app.connect("config-inited", _per_language)
    app.connect("config-inited", _chinese_search)  # after _per_language
    app.connect("source-read", _note_data_dependencies)
    app.connect("doctree-read", _drop_other_editions)
    app.connect("doctree-resolved", _translate_exec_table)
    app.connect("doctree-resolved", _link_figures)
    app.connect("html-page-context", _offer_notebook, priority=400)
    app.connect("html-page-context", _offer_source)
    app.connect("builder-inited", _write_source)  # before the theme's buttons
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
