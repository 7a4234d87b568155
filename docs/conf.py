"""Sphinx configuration of the mgpu book (English source; Chinese through gettext).

Settings only: the hooks live in the extensions of ``_ext/``: ``mgpu_book.py`` (execution cache,
editions, figures), ``mgpu_verdict.py`` (sentences chosen by measurements), ``mgpu_search.py``
(the Chinese search), ``mgpu_source.py`` (the source the book carries), ``mgpu_notebooks.py``
(the notebook downloads), ``mgpu_mathjax.py`` (the offline MathJax), ``mgpu_zh.py`` (the
Chinese edition's citations and theme strings), ``mgpu_outputs.py`` (its cell outputs) and
``mgpu_pdf.py`` (the PDF of each edition).
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import version as _version
from pathlib import Path

DOCS = Path(__file__).parent
sys.path.insert(0, str(DOCS / "_ext"))

project = "mgpu: data-parallel training with MXNet"
author = "the mgpu authors"
copyright = "2026, the mgpu authors"  # noqa: A001
release = _version("mgpu")  # pyproject.toml's version, as installed
version = ".".join(release.split(".")[:2])

extensions = [
    "mgpu_book",  # _ext/mgpu_book.py
    "mgpu_verdict",  # _ext/mgpu_verdict.py: {verdict} sentences chosen by a measurement
    "mgpu_search",  # _ext/mgpu_search.py: the Chinese search finds the glossary's terms
    "mgpu_source",  # _ext/mgpu_source.py: the source archive and README, linked from every page
    "mgpu_notebooks",  # _ext/mgpu_notebooks.py: clean .ipynb downloads and their zip
    "mgpu_mathjax",  # _ext/mgpu_mathjax.py: the MathJax files the pages load, served locally
    "mgpu_zh",  # _ext/mgpu_zh.py: Chinese citations (author_year_zh), the themes' zh strings
    "mgpu_outputs",  # _ext/mgpu_outputs.py: the Chinese edition's cell outputs in Chinese
    "mgpu_pdf",  # _ext/mgpu_pdf.py: the printed edition's title page and style, the PDF's link
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx_copybutton",
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
numfig = True  # figures with a :name: are numbered ("Fig. 3"), per page order

# --- execution: once, cached, failing loudly ------------------------------------------------
nb_execution_mode = "cache"
nb_execution_cache_path = str(DOCS / "_build" / ".jupyter_cache")
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_timeout = 1800
nb_merge_streams = True
nb_render_markdown_format = "myst"  # tables printed with IPython.display.Markdown render as tables
# The catalogs hold the page sources' text only, never cell outputs (their numbers change with
# every run): the gettext builder renders no Markdown output.
nb_mime_priority_overrides = [("gettext", "text/markdown", None)]

# What the executed pages depend on besides their own code (MyST-NB's cache keys on the code
# only): the package, for every page, and data files, per page. See _ext/mgpu_book.py.
mgpu_package_dir = "../src/mgpu"
mgpu_page_data = {page: ["../bench/results.json"] for page in ("performance", "maintainers")}
mgpu_page_data["status"] = ["../constraints.txt"]  # it reports the versions the build used
# Files the downloadable notebooks read by relative path: the zip of notebooks holds them.
mgpu_notebook_files = ["../bench/results.json", "../bench/targets.py"]

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
# Tooltips that do not stick on touch screens, a language switch that keeps the section, and
# tables that show that they scroll sideways (_static/mgpu.js).
html_js_files = [("mgpu.js", {"defer": "defer"})]
html_sourcelink_suffix = ""  # serve .ipynb/.md downloads as themselves, not as .txt
# The pages' MyST sources are in the source archive, not copied beside each edition (1 MB).
html_copy_source = False
html_theme_options = {
    "use_download_button": True,
    "use_fullscreen_button": False,
    "show_toc_level": 2,
    "home_page_in_toc": True,
    "article_header_end": ["lang-switch.html", "source-menu.html", "article-header-buttons.html"],
    "search_bar_text": "Search this book...",
}
html_last_updated_fmt = ""

# The book carries its source: _downloads/mgpu-source.tar.gz (the repository's files) and
# _downloads/README.html in each edition, linked from every page's header (the "Source" menu).
mgpu_source_root = ".."
# Where the site is published from a public repository (the GitHub Pages workflow sets
# MGPU_REPOSITORY_URL to it), the header also links to it: the menu, and the theme's button.
mgpu_repository_url = os.environ.get("MGPU_REPOSITORY_URL", "").strip().rstrip("/")
if mgpu_repository_url:
    html_theme_options.update({
        "repository_url": mgpu_repository_url,
        "use_repository_button": True,
        # The theme guesses the host from the address and fails the build on an unknown one.
        "repository_provider": next((p for p in ("gitlab", "bitbucket")
                                     if p in mgpu_repository_url.lower()), "github"),
    })
copybutton_prompt_text = r">>> |\.\.\. "
copybutton_prompt_is_regexp = True
# Code gets a copy button, cell outputs do not (MyST-NB wraps them in div.output).
copybutton_selector = "div:not(.output) > div.highlight pre"

# --- i18n ------------------------------------------------------------------------------------
locale_dirs = ["locales/"]
gettext_compact = False
gettext_uuid = False

# The Chinese search finds every term of the glossary: _ext/mgpu_book.py writes jieba's user
# dictionary of the Chinese column of glossary.md's table to html_search_options["dict"] (under
# _build, not committed), and makes the terms index terms and words of the query.
mgpu_search_glossary = "glossary.md"

# The Chinese edition: its own title, and a search index of Chinese words (jieba splits them).
mgpu_per_language = {
    "zh": {
        "project": "mgpu：用 MXNet 进行数据并行训练",
        "html_title": "mgpu：用 MXNet 进行数据并行训练",
        "html_search_language": "zh",
        "html_search_options": {"dict": str(DOCS / "_build" / "jieba-glossary.txt")},
        # 「Goyal 等人（2017）」, 「（Goyal 等人，2017）」: _ext/mgpu_zh.py's reference style.
        "bibtex_reference_style": "author_year_zh",
        # The footer: sphinx-book-theme's "By {author}" and pydata's "© Copyright {copyright}".
        "author": "mgpu 项目组",
        "copyright": "2026，mgpu 项目组",
        # The search box's placeholder (pydata-sphinx-theme's search_bar_text).
        "html_theme_options": {**html_theme_options, "search_bar_text": "搜索本书……"},
    },
}
