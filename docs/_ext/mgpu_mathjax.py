"""Sphinx extension of the mgpu book: MathJax served from the site itself, and nothing more.

sphinx-mathjax-offline copies all of MathJax 3 (24 MB: every component, the speech rule engine,
both output formats) into each edition, for the two dozen formulas of the book. The pages load
one combined component, ``tex-chtml.js`` (TeX input with the base and AMS macros, CommonHTML
output, the menu), and the CommonHTML fonts it asks for. This extension copies those only, from
the MathJax that sphinx-mathjax-offline ships (a dependency for its files, not an extension).

The formulas must stay within what ``tex-chtml.js`` holds: a macro that MathJax's ``autoload``
would fetch from ``input/tex/extensions/`` (``\\color``, ``\\cancel``, ...) is not shipped, and
the browser tests (``nox -s browser``) fail on the missing file.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.config import Config

# What the pages load, relative to MathJax's directory.
MATHJAX_FILES = ["tex-chtml.js"]
MATHJAX_DIRS = ["output/chtml/fonts/woff-v2"]


def mathjax_source() -> Path:
    """The MathJax 3 directory inside the installed sphinx-mathjax-offline."""
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("sphinx-mathjax-offline is not installed: its MathJax files are "
                           "copied into the book (pip install -e '.[docs]')")
    return Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"


def _set_path(app: Sphinx, config: Config) -> None:
    config.mathjax_path = "mathjax/tex-chtml.js"  # in _static/


def _copy(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    source = mathjax_source()
    target = Path(app.outdir) / "_static" / "mathjax"
    shutil.rmtree(target, ignore_errors=True)  # e.g. all of MathJax, from an older build
    for name in MATHJAX_FILES:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, target / name)
    for name in MATHJAX_DIRS:
        shutil.copytree(source / name, target / name)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("config-inited", _set_path)
    app.connect("build-finished", _copy)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
