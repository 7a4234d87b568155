"""The PDF of each edition, as a reader downloads it from the published site.

Run with `nox -s site` after `nox -s docs` (which prints the PDFs; `nox -s pdf` reprints them).
Each PDF: a plausible number of numbered A4 pages, every chapter's title in its text and in its
bookmarks, a table of contents whose page numbers and links lead to the chapters, no text drawn
past the margins, every line of every code block and output of the HTML edition printed whole,
its glued numbers of four digits or more as often as the pages show them (the same execution),
its language and title, its fonts embedded, a CJK font (not Type 3 glyphs) in the Chinese one.
"""

from __future__ import annotations

import html.parser
import io
import logging
import os
import re
from functools import cache
from pathlib import Path

import pytest

from tools.pdf import pdf_name

pytestmark = pytest.mark.site

# The published site (`nox -s docs`); MGPU_SITE checks another copy of it.
SITE = Path(os.environ.get("MGPU_SITE") or Path(__file__).parents[2] / "docs" / "_build" / "html")
LANGS = ("en", "zh_CN")
MAX_PDF_BYTES = 10 * 10**6  # issue 30: about 10 MB each at most
MM = 72 / 25.4  # PDF points per millimetre
A4 = (210 * MM, 297 * MM)
MARGIN = 17 * MM  # left and right, mgpu-book.css's @page rule
# A book of 14 chapters and its reference part is longer than this, and a runaway layout (a
# figure per page, a table cut into a column of words) is longer than that.
MIN_PAGES, MAX_PAGES = 150, 600
NUMBER = re.compile(r"[-−+]?\d[\d.,]*(e[-+]?\d+)?( ?(%|×|s|ms|MB|GB/s|x))?")  # a glued number

logging.getLogger("pypdf").setLevel(logging.ERROR)  # "exceeds defined trailer size": harmless


def _pdf(lang: str) -> Path:
    path = SITE / lang / "_downloads" / pdf_name(lang)
    if not path.is_file():
        pytest.fail(f"no PDF at {path}: run 'nox -s docs' (or 'nox -s pdf') first")
    return path


@cache
def _reader(lang: str):
    from pypdf import PdfReader

    return PdfReader(io.BytesIO(_pdf(lang).read_bytes()))


@cache
def _page_texts(lang: str) -> tuple[str, ...]:
    return tuple(page.extract_text() or "" for page in _reader(lang).pages)


@cache
def _pdfium(lang: str):
    import pypdfium2 as pdfium

    return pdfium.PdfDocument(_pdf(lang).read_bytes())


@cache
def _whole(lang: str) -> str:
    """The text of the book without its page numbers (a paragraph may go on over the next
    page), and without whitespace."""
    texts = _page_texts(lang)
    return _squeeze("".join("".join(_body(texts, n)) for n in range(1, len(texts) + 1)))


def _squeeze(text: str) -> str:
    """Text without whitespace: a title wrapped over two lines still matches."""
    return re.sub(r"\s+", "", text)


class _Toc(html.parser.HTMLParser):
    """The chapter titles of an edition's index page (its table of contents, toctree-l1), and
    the glued values (``span.pasted-text``) and the text of each ``<pre>`` of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.titles: list[str] = []
        self.pasted: list[str] = []
        self.code: list[str] = []  # the text of each <pre> (code and outputs)
        self._in: str | None = None
        self._li_l1 = False
        self._pre = 0

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        if tag == "pre":
            self._pre += 1
            if self._pre == 1:
                self.code.append("")
        if tag == "li":
            self._li_l1 = "toctree-l1" in classes
        elif tag == "a" and self._li_l1 and "reference" in classes:
            self._in, self._li_l1 = "title", False
            self.titles.append("")
        elif tag == "span" and "pasted-text" in classes:
            self._in = "pasted"
            self.pasted.append("")

    def handle_endtag(self, tag):
        if tag == "pre":
            self._pre = max(0, self._pre - 1)
        if tag in ("a", "span"):
            self._in = None

    def handle_data(self, data):
        if self._pre:
            self.code[-1] += data
        if self._in == "title":
            self.titles[-1] += data
        elif self._in == "pasted":
            self.pasted[-1] += data


def _parsed(page: Path) -> _Toc:
    parser = _Toc()
    parser.feed(page.read_text("utf-8"))
    return parser


def _chapter_titles(lang: str) -> list[str]:
    # The index page's main table of contents (the article's, not the sidebar's repeat).
    article = (SITE / lang / "index.html").read_text("utf-8").split('<article', 1)[1]
    parser = _Toc()
    parser.feed(article)
    titles = [t.strip() for t in parser.titles if t.strip()]
    assert len(titles) >= 14, titles
    return titles


def cut_lines(pdf: bytes, margin: float = MARGIN, slack: float = 1.0) -> list[tuple[int, str]]:
    """Each run of text drawn past the left or right margin, as (page, text): a line that runs
    off the text's width and off the box that holds it. (A box that clips its overflow draws
    only what it shows: :func:`test_every_code_line_is_printed_whole` finds that.)"""
    import pypdfium2 as pdfium

    found = []
    document = pdfium.PdfDocument(pdf)
    for number in range(len(document)):
        page = document[number]
        width, _ = page.get_size()
        text = page.get_textpage()
        for k in range(text.count_rects()):
            left, bottom, right, top = text.get_rect(k)
            if right > width - margin + slack or left < margin - slack:
                found.append((number + 1, text.get_text_bounded(left, bottom, right, top)))
    return found


def _pdf_with_line_at(x: float) -> bytes:
    """A one-page A4 PDF with one line of Courier text starting ``x`` points from the left."""
    text = f"BT /F1 10 Tf {x:.1f} 700 Td (total = sum(g.copyto(ctx) for g in grads)) Tj ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {A4[0]:.2f} {A4[1]:.2f}] "
        "/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Courier >>",
        f"<< /Length {len(text)} >>\nstream\n{text}\nendstream",
    ]
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode()
    out += f"trailer << /Size {len(objects) + 1} /Root 1 0 R >>\n".encode()
    out += f"startxref\n{xref}\n%%EOF\n".encode()
    return out


def test_cut_lines_finds_a_line_past_the_margin():
    """The check can fail: the same line inside the text and running past its right edge."""
    assert cut_lines(_pdf_with_line_at(MARGIN + 10)) == []
    found = cut_lines(_pdf_with_line_at(A4[0] - MARGIN - 100))
    assert [page for page, _ in found] == [1] and "total" in found[0][1]


@pytest.mark.parametrize("lang", LANGS)
def test_no_line_runs_past_the_text_width(lang):
    assert cut_lines(_pdf(lang).read_bytes()) == []


# The pages of the site that are not in the book (generated by Sphinx).
NOT_IN_BOOK = {"genindex.html", "search.html", "py-modindex.html", "404.html"}


@pytest.mark.parametrize("lang", LANGS)
def test_every_code_line_is_printed_whole(lang):
    """Every line of every code block and output of the HTML edition is in the PDF's text,
    whole: a line cut at the edge of its box (Chromium draws only what a box shows) is not."""
    whole = _whole(lang)
    checked, cut = 0, {}
    for page in sorted((SITE / lang).glob("*.html")):
        if page.name in NOT_IN_BOOK:
            continue
        lines = [_squeeze(line) for block in _parsed(page).code for line in block.splitlines()]
        lines = [line for line in lines if len(line) >= 8]
        checked += len(lines)
        lost = [line for line in lines if line not in whole]
        if lost:
            cut[page.name] = lost[:5]
    assert checked >= 1000, checked
    assert cut == {}


def _body(texts: tuple[str, ...], number: int) -> list[str]:
    """The lines of page ``number`` (1-based) without its page number (Chromium draws the foot
    first: the number is the first line of the page's text)."""
    lines = [line.strip() for line in texts[number - 1].strip().splitlines()]
    return lines[1:] if lines and lines[0] == str(number) else lines


@pytest.mark.parametrize("lang", LANGS)
def test_a4_pages_numbered_at_the_foot(lang):
    """A plausible page count; every page A4; each page but the title page carries its number
    in its bottom margin, and nothing else is there."""
    reader = _reader(lang)
    assert MIN_PAGES <= len(reader.pages) <= MAX_PAGES, len(reader.pages)
    for page in reader.pages:
        assert abs(float(page.mediabox.width) - A4[0]) < 2
        assert abs(float(page.mediabox.height) - A4[1]) < 2
    document = _pdfium(lang)
    feet = [document[n].get_textpage().get_text_bounded(0, 0, A4[0], 18 * MM).strip()
            for n in range(len(document))]  # the band below the text: the bottom margin
    assert feet[0] == ""
    assert [(n, foot) for n, foot in enumerate(feet[1:], start=2) if foot != str(n)] == []


@pytest.mark.parametrize("lang", LANGS)
def test_every_chapter_title_is_in_the_text_and_the_bookmarks(lang):
    from pypdf.generic import Destination

    reader = _reader(lang)
    titles = _chapter_titles(lang)
    whole = _whole(lang)
    assert [t for t in titles if _squeeze(t) not in whole] == []
    top = [item for item in reader.outline if isinstance(item, Destination)]
    assert [item.title for item in top] == titles
    # Each bookmark opens the page where its chapter starts.
    for item in top:
        page = reader.get_destination_page_number(item)
        assert _squeeze(item.title) in _squeeze(_page_texts(lang)[page]), item.title


@pytest.mark.parametrize("lang", LANGS)
def test_the_table_of_contents_gives_each_chapter_its_page(lang):
    """The contents pages print each chapter's title and a page number, and that page starts
    the chapter (its title is a line of the page)."""
    texts = _page_texts(lang)
    # The contents' lines: a title, then its page number (the dotted leader is not text).
    numbered: dict[str, int] = {}
    for text in texts[1:10]:
        for line in text.splitlines():
            match = re.match(r"(.*\S)\s+(\d+)\s*$", line)
            if match:
                numbered.setdefault(_squeeze(match.group(1)), int(match.group(2)))
    for title in _chapter_titles(lang):
        page = numbered.get(_squeeze(title))
        assert page, f"{title!r} has no page number in the table of contents"
        # A line of that page (or two, where the title wraps) is the title. (The text's order
        # is the drawing order: a list's labels may come before the heading.)
        lines = [_squeeze(line) for line in _body(texts, page)]
        heads = set(lines) | {a + b for a, b in zip(lines, lines[1:])}
        assert _squeeze(title) in heads, (title, page, lines[:5])


@pytest.mark.parametrize("lang", LANGS)
def test_the_contents_link_to_their_pages(lang):
    """Each entry of the table of contents is a link to the page its number gives."""
    reader = _reader(lang)
    links = []
    for number in range(2, 7):
        for annotation in reader.pages[number - 1].get("/Annots") or []:
            annotation = annotation.get_object()
            if annotation.get("/Subtype") == "/Link" and "/Dest" in annotation:
                links.append((number, annotation))
    assert len(links) >= 100, len(links)  # 14 chapters and their sections, the reference part
    pages = {name.lstrip("/"): reader.get_destination_page_number(dest) + 1
             for name, dest in reader.named_destinations.items()}
    document = _pdfium(lang)
    wrong = []
    for number, link in links:
        target = pages[str(link["/Dest"]).lstrip("/")]
        # The number printed at the right end of the link's box is the page it leads to.
        box = document[number - 1].get_textpage().get_text_bounded(
            *(float(v) for v in link["/Rect"]))
        if re.findall(r"\d+", box)[-1:] != [str(target)]:  # a title's maths may follow it
            wrong.append((number, box.strip(), target))
    assert wrong == []


@pytest.mark.parametrize("lang", LANGS)
def test_the_same_execution_as_the_html_edition(lang):
    """The glued numbers of the HTML edition's pages (timings and accuracies, which vary from
    run to run) are in the PDF's text, each at least as often as the pages show it. Numbers
    of four digits or more (a shorter one is found anywhere) and numbers only: a glued sentence
    may go on over the next page, and a page's text is in drawing order, not reading order."""
    import collections

    whole = _whole(lang)
    shown = collections.Counter()
    for page in sorted((SITE / lang).glob("*.html")):
        if page.name not in NOT_IN_BOOK:
            shown.update(_squeeze(v) for v in _parsed(page).pasted
                         if NUMBER.fullmatch(v.strip()) and len(re.findall(r"\d", v)) >= 4)
    assert sum(shown.values()) >= 150, sum(shown.values())
    short = {value: (count, whole.count(value)) for value, count in shown.items()
             if whole.count(value) < count}
    assert short == {}


def _cjk_mapped(font) -> int:
    """How many CJK characters a font's ToUnicode map gives its glyphs (hex code points)."""
    if "/ToUnicode" not in font:
        return 0
    cmap = font["/ToUnicode"].get_object().get_data().decode("latin-1")
    return sum(1 for h in re.findall(r"<([0-9A-Fa-f]{4})>\s*$", cmap, re.M)
               if 0x3000 <= int(h, 16) <= 0x9FFF or 0xFF00 <= int(h, 16) <= 0xFFEF)


def _fonts(lang: str) -> list[tuple[str, str, bool, int]]:
    """Each font of the PDF: its base name, subtype, whether its glyphs are in the PDF (a font
    program, or a Type 3 font's glyph procedures) and how many CJK characters it maps."""
    fonts, seen = [], set()
    for page in _reader(lang).pages:
        for ref in ((page.get("/Resources") or {}).get("/Font") or {}).values():
            key = getattr(ref, "idnum", id(ref))  # a font shared by pages is listed once
            if key in seen:
                continue
            seen.add(key)
            font = ref.get_object()
            subtype = str(font.get("/Subtype"))
            described = font
            if subtype == "/Type0":
                described = font["/DescendantFonts"][0].get_object()
            descriptor = described.get("/FontDescriptor")
            descriptor = descriptor.get_object() if descriptor is not None else {}
            embedded = subtype == "/Type3" or any(
                key in descriptor for key in ("/FontFile", "/FontFile2", "/FontFile3"))
            fonts.append((str(font.get("/BaseFont")), subtype, embedded, _cjk_mapped(font)))
    return fonts


@pytest.mark.parametrize("lang", LANGS)
def test_the_pdf_says_its_language_and_title(lang):
    """``/Lang`` (screen readers, text search), the title and bookmarks open beside the pages."""
    reader = _reader(lang)
    root = reader.trailer["/Root"]
    assert root["/Lang"] == {"en": "en", "zh_CN": "zh-CN"}[lang]
    assert root["/PageMode"] == "/UseOutlines"
    assert reader.metadata.title == _book_title(lang)


def _book_title(lang: str) -> str:
    """The book's title: the index page's first heading."""
    article = (SITE / lang / "index.html").read_text("utf-8").split("<h1>", 1)[1]
    return re.sub(r"<[^>]+>", "", article.split("</h1>", 1)[0]).replace("#", "").strip()


@pytest.mark.parametrize("lang", LANGS)
def test_every_font_is_embedded(lang):
    fonts = _fonts(lang)
    assert fonts and [f for f in fonts if not f[2]] == []


def test_the_chinese_pdf_embeds_a_cjk_font():
    """The Chinese text is set in an embedded CJK font (a TrueType program, not Type 3 glyph
    procedures, which viewers render unhinted), and it is text a reader can search and copy:
    no Kangxi radicals in place of characters, no ligatures."""
    fonts = _fonts("zh_CN")
    cjk = [f for f in fonts if f[1] == "/Type0" and f[2] and f[3] >= 100]
    assert cjk, fonts[:20]
    text = "".join(_page_texts("zh_CN"))
    assert "数据并行" in text and "设备" in text
    assert re.findall(r"[\u2e80-\u2fdf\ufb00-\ufb06]", text) == []


@pytest.mark.parametrize("lang", LANGS)
def test_no_chinese_in_type3_glyphs(lang):
    assert [f for f in _fonts(lang) if f[1] == "/Type3" and f[3]] == []


@pytest.mark.parametrize("lang", LANGS)
def test_each_pdf_weighs_at_most_max_pdf_bytes(lang):
    size = _pdf(lang).stat().st_size
    assert size <= MAX_PDF_BYTES, f"{pdf_name(lang)} is {size / 1e6:.1f} MB"
