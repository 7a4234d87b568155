"""Sphinx extension of the mgpu book: the book as a PDF, built and linked.

- **The printed edition.** ``tools/pdf.py`` prints an edition's single-page build (the
  ``singlehtml`` builder, from the execution cache) with headless Chromium. In that build only,
  the pages get the printed book's stylesheet (``_static/mgpu-book.css``: A4 pages, page
  numbers, each chapter on a new page) and ``_templates/layout.html`` a title page and a table
  of contents with every chapter and section (context ``mgpu_book``). ``tools/pdf.py`` writes
  the page numbers into that table.
- **The link.** Every page of the HTML editions offers its edition's PDF in the header's
  download menu (``_downloads/mgpu-<language>.pdf``, which ``tools/site.py`` publishes), beside
  sphinx-book-theme's entry that prints the page (``mgpu.css`` has the print rules for it).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.util.i18n import format_date

# The repository, where the package tools is: the PDF's name is tools/pdf.py's.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.pdf import pdf_name  # noqa: E402


def _words(language: str | None) -> dict[str, str]:
    if (language or "en").startswith("zh"):
        return {"edition": "中文版", "version": "版本", "built": "构建于", "contents": "目录",
                "book": "全书（.pdf）", "book_tip": "整本书的 PDF（A4）", "page": "打印本页",
                "subtitle": "在多个设备和多台机器上训练神经网络，每一页都经过实际执行"}
    return {"edition": "English edition", "version": "Version", "built": "Built",
            "contents": "Contents", "book": "Book (.pdf)", "page": "Print this page",
            "book_tip": "The whole book as a PDF (A4)",
            "subtitle": "Training one network on several devices and machines, every page executed"}


def _add_book_style(app: Sphinx) -> None:
    if app.builder.name == "singlehtml":
        app.add_css_file("mgpu-book.css")


def _book_context(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any],
                  doctree: Any) -> None:
    """The title page's and the table of contents' words (singlehtml builds only)."""
    if app.builder.name != "singlehtml" or pagename != app.config.root_doc:
        return
    words = _words(app.config.language)
    context["mgpu_book"] = {
        "title": app.env.titles[app.config.root_doc].astext(),
        "subtitle": words["subtitle"],
        "authors": app.config.author,
        "edition": words["edition"],
        "version": f"{words['version']} {app.config.release}",
        # SOURCE_DATE_EPOCH, when set, fixes the date (reproducible builds).
        "built": f"{words['built']} {format_date('%Y-%m-%d', language='en')}",
        "contents": words["contents"],
        # Sphinx's singlehtml table of contents links a section as "#document-<page>#<id>",
        # which leads nowhere: "#<id>".
        "toc": re.sub(r'href="#document-[^"#]*#', 'href="#', context.get("toc", "")),
    }


def _link_book(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any],
               doctree: Any) -> None:
    """The download menu: the edition's PDF, and the theme's print entry named for what it does."""
    if app.builder.name != "html":
        return
    words = _words(app.config.language)
    for group in context.get("header_buttons", []):
        buttons = group.get("buttons", [])
        for i, button in enumerate(buttons):
            if button.get("label") == "download-pdf-button":
                button["text"] = words["page"]
                buttons.insert(i, {
                    "type": "link",
                    "url": context["pathto"](f"_downloads/{pdf_name(app.config.language)}", 1),
                    "text": words["book"],
                    "tooltip": words["book_tip"],
                    "icon": "fas fa-book",
                    "label": "download-book-pdf-button",
                })
                return


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", _add_book_style)
    app.connect("html-page-context", _book_context)
    # After sphinx-book-theme's add_header_buttons (priority 501).
    app.connect("html-page-context", _link_book, priority=600)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
