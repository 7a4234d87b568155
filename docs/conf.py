"""Sphinx configuration of the mgpu book (English source; Chinese through gettext)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

DOCS = Path(__file__).parent
ROOT = DOCS.parent

project = "mgpu: data-parallel training with MXNet"
author = "the mgpu authors"
copyright = "2026, the mgpu authors"  # noqa: A001
release = "0.1.0"

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx_copybutton",
    "sphinx-mathjax-offline",  # MathJax served from _static: the book works offline
    "sphinxcontrib.bibtex",  # references.bib: every literature number cites its source
]
bibtex_bibfiles = ["references.bib"]
bibtex_default_style = "plain"
bibtex_reference_style = "author_year"
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "_root", "_templates", "jupyter_execute", "**.ipynb_checkpoints",
                    "locales", "README.md"]
myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 3

# --- execution: once, cached, failing loudly ------------------------------------------------
nb_execution_mode = "cache"
nb_execution_cache_path = str(DOCS / "_build" / ".jupyter_cache")
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_timeout = 1800
nb_merge_streams = True
nb_render_markdown_format = "myst"  # tables printed with IPython.display.Markdown render as tables


def _package_hash() -> str:
    h = hashlib.sha256()
    for f in sorted((ROOT / "src" / "mgpu").rglob("*.py")):
        h.update(f.relative_to(ROOT).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _invalidate_cache_when_package_changes() -> None:
    """The cache keys on each page's code only; outputs also depend on ``src/mgpu``."""
    cache = Path(nb_execution_cache_path)
    stamp = cache.parent / "mgpu-source.sha256"
    digest = _package_hash()
    if stamp.is_file() and stamp.read_text() == digest:
        return
    if cache.exists():
        print("mgpu changed since the last build: clearing the execution cache")
        shutil.rmtree(cache)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(digest)


if os.environ.get("MGPU_KEEP_CACHE") != "1":
    _invalidate_cache_when_package_changes()

# --- warnings are errors (-W -n in nox); what cannot be resolved offline is listed here ------
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(mx|mxnet|nd|np|numpy|gluon|matplotlib)\..*"),
    (r"py:.*", r"(NDArray|Context|Path|PathLike|Callable|Sequence|Iterator|Figure)"),
    (r"py:.*", r"(optional|os\.PathLike|collections\.abc\..*|pathlib\..*)"),
]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_mock_imports: list[str] = []
suppress_warnings = ["mystnb.unknown_mime_type"]

# --- HTML ------------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = "mgpu"
html_favicon = "_static/favicon.svg"
html_context = {"default_mode": "light"}
templates_path = ["_templates"]
html_static_path = ["_static"]
html_css_files = ["mgpu.css"]
html_sourcelink_suffix = ""  # serve .ipynb/.md downloads as themselves, not as .txt
html_theme_options = {
    "use_download_button": True,
    "use_fullscreen_button": False,
    "show_toc_level": 2,
    "home_page_in_toc": True,
    "article_header_end": ["lang-switch.html", "article-header-buttons.html"],
}
html_last_updated_fmt = ""
copybutton_prompt_text = r">>> |\.\.\. "
copybutton_prompt_is_regexp = True

# --- i18n ------------------------------------------------------------------------------------
locale_dirs = ["locales/"]
gettext_compact = False
gettext_uuid = False


# --- each executed chapter offers its notebook (.ipynb, with outputs) for download ------------
def _notebook_for(app, pagename: str) -> Path:
    return Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"


def _offer_notebook(app, pagename, templatename, context, doctree):
    if _notebook_for(app, pagename).is_file():
        context["ipynb_source"] = f"{pagename}.ipynb"


def _copy_notebooks(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    for pagename in app.env.found_docs:
        nb = _notebook_for(app, pagename)
        if nb.is_file():
            target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(nb, target)


# Pages that read data files: when a file changes, the page is re-read and re-executed although
# its code did not change (MyST-NB's cache keys on the code only).
PAGE_DATA = {"performance": [ROOT / "bench" / "results.json"]}


def _digest(files) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes() if f.is_file() else b"<missing>")
    return h.hexdigest()


def _data_changed(app, env, added, changed, removed):
    # A changed mgpu changes every page's output: re-read them all (the execution cache was
    # cleared above, so they are executed again).
    package = _package_hash()
    if getattr(env, "mgpu_package_hash", None) != package:
        env.mgpu_package_hash = package
        return sorted(env.found_docs)
    stamps = getattr(env, "mgpu_data_stamps", {})
    outdated = []
    for page, files in PAGE_DATA.items():
        digest = _digest(files)
        if stamps.get(page) != digest:
            outdated.append(page)
        stamps[page] = digest
        # Shared by both editions: drop the cached execution once, when the data changed.
        stamp = Path(nb_execution_cache_path).parent / f"data-{page}.sha256"
        if not stamp.is_file() or stamp.read_text() != digest:
            from jupyter_cache import get_cache

            cache = get_cache(nb_execution_cache_path)
            for record in cache.list_cache_records():
                if Path(record.uri).stem == page:
                    cache.remove_cache(record.pk)
            stamp.write_text(digest)
    env.mgpu_data_stamps = stamps
    return [p for p in outdated if p in env.found_docs]


def _fix_chinese_search_stemmer() -> None:
    """Sphinx 9's Chinese search stems Latin words with the English stemmer but its JavaScript
    asks for a ``ChineseStemmer`` that does not exist, so the search page throws a
    ``ReferenceError``. Name the stemmer the JavaScript really loads."""
    from sphinx.search import languages
    from sphinx.search.zh import SearchChinese

    class SearchChineseEnglishStemmer(SearchChinese):
        language_name = "English"  # english-stemmer.js defines EnglishStemmer

    languages["zh"] = SearchChineseEnglishStemmer


def _per_language(app, config):
    """The Chinese edition indexes Chinese words (jieba splits them) for its search."""
    if (config.language or "en").startswith("zh"):
        config.html_search_language = "zh"
        _fix_chinese_search_stemmer()
        config.html_title = "mgpu：用 MXNet 进行数据并行训练"
        config.project = "mgpu：用 MXNet 进行数据并行训练"


def setup(app):
    app.connect("config-inited", _per_language)
    app.connect("env-get-outdated", _data_changed)
    app.connect("html-page-context", _offer_notebook, priority=400)  # before the theme's buttons
    app.connect("build-finished", _copy_notebooks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
