"""The published site (docs/_build/html) as it is uploaded: run with `nox -s site` after
`nox -s docs`. Offline link check of both editions, site weight, figures' alt text, and the
downloadable notebooks: clean Markdown, Chinese in the Chinese set, and they run from the zip."""

from __future__ import annotations

import html.parser
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tools.outputs_catalog import CODE as OUTPUT_CODE
from tools.outputs_catalog import ENGLISH_RUN

pytestmark = pytest.mark.site  # deselected by default; `nox -s site` runs -m site

# The published site (`nox -s docs`); MGPU_SITE checks another copy of it.
SITE = Path(os.environ.get("MGPU_SITE") or Path(__file__).parents[2] / "docs" / "_build" / "html")
LANGS = ("en", "zh_CN")
# Both HTML editions together, without the PDFs. Issue 18's target was 15 MB; the two chapters
# of issue 28 brought the site to 16.6 MB, and the next cut is the theme's fontawesome.js (1.56
# MB, every icon of FontAwesome), which its webfonts could replace.
MAX_SITE_BYTES = 17 * 10**6
# Notebooks executed from the zip: short chapters, and those that read files by relative path.
RUN_FROM_ZIP = ("status", "performance", "maintainers")
CJK = re.compile(r"[\u4e00-\u9fff]")
CJK_TERM = re.compile(r"[\u4e00-\u9fff]+")
MYST_SYNTAX = re.compile(r"(```\{|:::\{|\{[a-z][a-z0-9:-]*\}`)")
# Fenced code blocks, and code spans that hold a backtick (opened by two or more), of a
# notebook's Markdown: the MyST they hold is an example. A role's own single backticks stay.
CODE = re.compile(r"^(`{3,})[^`\n]*\n.*?^\1[ \t]*$|(`{2,})[^`\n].*?\2", re.S | re.M)


@pytest.fixture(scope="module", autouse=True)
def built_site():
    if not all((SITE / lang / "index.html").is_file() for lang in LANGS):
        pytest.fail(f"no built site in {SITE}: run 'nox -s docs' first")


class _Links(html.parser.HTMLParser):
    """The ``id``s of a page, its links (href, src) and its images' alt text."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.images: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if a.get(key):
                self.ids.add(a[key])
        for key in ("href", "src"):
            if a.get(key) and tag in ("a", "link", "script", "img", "source", "iframe"):
                self.links.append(a[key])
        if tag == "img":
            self.images.append((a.get("src", ""), a.get("alt")))


def _parse(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text("utf-8"))
    return parser


@pytest.fixture(scope="module")
def pages() -> dict[Path, _Links]:
    return {p: _parse(p) for p in sorted(SITE.rglob("*.html"))}


class _Prose(html.parser.HTMLParser):
    """The text of a page's article that is prose: not code, code output, maths, a title of a
    work or its authors' names."""

    # Code, program output and maths; titles of works (italic, as in a bibliography).
    SKIP_TAGS = {"pre", "code", "kbd", "samp", "script", "style", "math", "em", "cite"}
    SKIP_CLASSES = {"highlight", "math", "cell_input", "cell_output", "sig", "citation"}
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
            "track", "wbr"}

    def __init__(self) -> None:
        super().__init__()
        self.open: list[tuple[str, bool]] = []  # (tag, skipped) of the open elements
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        cited = tag == "a" and "references.html#" in (a.get("href") or "")  # authors' names
        self.open.append((tag, tag in self.SKIP_TAGS or cited
                          or bool(classes & self.SKIP_CLASSES)))

    def handle_endtag(self, tag):
        if any(t == tag for t, _ in self.open):  # an end tag with no open element is ignored
            while self.open.pop()[0] != tag:
                pass

    def handle_data(self, data):
        tags = [t for t, _ in self.open]
        if "article" in tags and not any(skipped for _, skipped in self.open):
            self.text.append(data)


# ENGLISH_RUN (tools/outputs_catalog.py): four or more English words in a row, a sentence or
# a phrase left untranslated.
# Pages whose text is mostly names of code or of works: the API reference, the bibliography.
NOT_PROSE = {"api.html", "references.html", "genindex.html", "py-modindex.html", "search.html"}


def _chinese_prose_pages():
    """The Chinese edition's pages of prose (not in :data:`NOT_PROSE`): ``(name, html)``."""
    for page in sorted((SITE / "zh_CN").glob("*.html")):
        if page.name not in NOT_PROSE:
            yield page.name, page.read_text("utf-8")


def test_the_chinese_pages_have_no_english_prose():
    found = {}
    for name, text in _chinese_prose_pages():
        parser = _Prose()
        parser.feed(text)
        runs = ENGLISH_RUN.findall(" ".join(parser.text))
        if runs:
            found[name] = runs
    assert found == {}


class _Text(_Prose):
    """All the text of a page but its code and maths: citations and emphasis included."""

    SKIP_TAGS = {"pre", "code", "kbd", "samp", "script", "style", "math", "title"}
    SKIP_CLASSES = {"highlight", "math", "sig"}

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        classes = set((dict(attrs).get("class") or "").split())
        self.open.append((tag, tag in self.SKIP_TAGS or bool(classes & self.SKIP_CLASSES)))

    def handle_data(self, data):
        if not any(skipped for _, skipped in self.open):
            self.text.append(data)


def test_the_chinese_pages_say_no_et_al():
    """Citations and prose of the Chinese edition write 「等人」 (_ext/mgpu_zh.py's reference
    style): "et al." anywhere in a page's text, citations included, is left-over English."""
    found = {}
    for page in sorted((SITE / "zh_CN").glob("*.html")):
        if page.name == "references.html":  # the works' own bibliographic entries
            continue
        parser = _Text()
        parser.feed(page.read_text("utf-8"))
        hits = re.findall(r".{0,30}\bet\s+al\b.{0,10}", " ".join(parser.text), re.I)
        if hits:
            found[page.name] = hits
    assert found == {}


class _Attributes(html.parser.HTMLParser):
    """``(tag, attribute, value)`` of the attributes a reader meets: labels read aloud, tooltips,
    images' alt text, placeholders. A citation's tooltip (a link into the bibliography, the
    work's entry) is a title of a work, and is left out."""

    READ = ("aria-label", "title", "alt", "placeholder")
    VOID = _Prose.VOID

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, str]] = []
        self.open: list[tuple[str, bool]] = []  # (tag, inside a citation) of the open elements

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        citation = (bool(self.open and self.open[-1][1])
                    or "bibtex-citation" in (a.get("class") or "").split())
        cited = tag == "a" and (citation or "references.html#" in (a.get("href") or ""))
        for key in self.READ:
            if a.get(key) and not (cited and key == "title"):
                self.found.append((tag, key, a[key]))
        if tag not in self.VOID:
            self.open.append((tag, citation))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in self.VOID:
            self.open.pop()

    def handle_endtag(self, tag):
        if any(t == tag for t, _ in self.open):
            while self.open.pop()[0] != tag:
                pass


# Labels the themes write in English whatever the language (sphinx-book-theme's navigation).
ENGLISH_LABELS = {"Main", "Page"}


def test_the_chinese_pages_have_no_english_attributes():
    """What a reader of the Chinese edition hears (aria-label), sees on hovering (title) or in
    place of an image (alt), or in an empty field (placeholder), is Chinese: no run of four
    English words, and none of the themes' one-word English labels."""
    found = {}
    for page in sorted((SITE / "zh_CN").glob("*.html")):
        parser = _Attributes()
        parser.feed(page.read_text("utf-8"))
        bad = sorted({f"<{tag} {key}={value!r}>" for tag, key, value in parser.found
                      if ENGLISH_RUN.search(value)
                      or (key == "aria-label" and value.strip() in ENGLISH_LABELS)})
        if bad:
            found[page.name] = bad
    assert found == {}


class _Outputs(_Prose):
    """The text of a page's cell outputs (div.cell_output): printed text, tables and Markdown a
    cell displays; not the code spans and maths inside them. Each printed line, table cell or
    paragraph is a line of ``"".join(self.text)``."""

    SKIP_TAGS = {"code", "kbd", "script", "style", "math"}
    SKIP_CLASSES = {"math"}
    # Elements that end a line of the text: blocks, table cells, line breaks.
    BREAKS = {"br", "p", "pre", "div", "table", "tr", "td", "th", "caption", "li", "ul", "ol",
              "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote"}

    def handle_starttag(self, tag, attrs):
        if tag in self.BREAKS:
            self.text.append("\n")
        if tag in self.VOID:
            return
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        self.open.append((tag, tag in self.SKIP_TAGS or bool(classes & self.SKIP_CLASSES),
                          "cell_output" in classes))

    def handle_endtag(self, tag):
        if tag in self.BREAKS:
            self.text.append("\n")
        if any(t == tag for t, *_ in self.open):
            while self.open.pop()[0] != tag:
                pass

    def handle_data(self, data):
        if (any(output for *_, output in self.open)
                and not any(skipped for _, skipped, _ in self.open)):
            self.text.append(data)


def test_the_chinese_outputs_are_in_chinese():
    """What the cells of a Chinese page print or display is in Chinese too: no run of four
    English words in a line of a cell output (names of code, joined without spaces, do not
    count). A line of code stays as the program printed it, in English by design: an exception
    (``DeviceError: ...``), a command line, CPU flags (``avx512f: no``), what
    tools/outputs_catalog.py's CODE matches, as the catalog's check of the outputs does."""
    found = {}
    for name, text in _chinese_prose_pages():
        parser = _Outputs()
        parser.feed(text)
        runs = [run for line in "".join(parser.text).splitlines()
                if not OUTPUT_CODE.match(line) for run in ENGLISH_RUN.findall(line)]
        if runs:
            found[name] = runs
    assert found == {}


def test_both_editions_together_weigh_at_most_max_site_bytes():
    """The HTML editions: every file but the PDFs (tests/site/test_pdf.py weighs them)."""
    size = sum(f.stat().st_size for f in SITE.rglob("*")
               if f.is_file() and not (f.parent.name == "_downloads" and f.suffix == ".pdf"))
    limit = MAX_SITE_BYTES / 1e6
    assert size <= MAX_SITE_BYTES, f"the site is {size / 1e6:.1f} MB (at most {limit:.0f} MB)"


def test_no_build_leftovers_are_published():
    leftovers = [p for p in SITE.rglob("*")
                 if p.name in (".doctrees", "jupyter_execute", ".buildinfo", ".jupyter_cache")]
    assert not leftovers, f"build files in the published site: {leftovers}"


def test_every_published_image_is_shown_by_a_page(pages):
    for lang in LANGS:
        shown = {unquote(urlsplit(link).path).rsplit("/", 1)[-1]
                 for page, parsed in pages.items() if page.is_relative_to(SITE / lang)
                 for link in parsed.links if "_images/" in link}
        unused = sorted(f.name for f in (SITE / lang / "_images").glob("*") if f.name not in shown)
        assert not unused, f"{lang}/_images holds images no page shows: {unused}"


def test_figures_are_palette_pngs():
    """mgpu.book.style.png_bytes: at most 256 colours, a third of the bytes of an RGBA PNG."""
    from PIL import Image

    for lang in LANGS:
        for image in (SITE / lang / "_images").glob("*.png"):
            with Image.open(image) as opened:
                assert opened.mode == "P", (image, opened.mode)


def test_every_link_resolves_offline(pages):
    """Every relative href/src (pages, language switcher, downloads, scripts) and its #anchor."""
    broken = []
    for page, parsed in pages.items():
        for link in parsed.links:
            url = urlsplit(link)
            if url.scheme or url.netloc or link.startswith(("data:", "javascript:")):
                continue  # other sites are not checked offline (and tests/browser forbids loads)
            target = page if not url.path else (page.parent / unquote(url.path)).resolve()
            if url.path.endswith("/"):
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(SITE)}: {link}")
                continue
            if url.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(url.fragment) not in ids:
                    broken.append(f"{page.relative_to(SITE)}: {link} (no such anchor)")
    assert not broken, f"{len(broken)} broken links:\n" + "\n".join(broken[:50])


def test_the_language_switcher_links_every_page_to_its_other_edition(pages):
    for lang, other in (("en", "zh_CN"), ("zh_CN", "en")):
        for page in (SITE / lang).glob("*.html"):
            if page.name in ("genindex.html", "search.html", "py-modindex.html"):
                continue
            assert f"../{other}/{page.name}" in pages[page].links, page


def test_every_figure_has_alt_text(pages):
    missing = [f"{page.relative_to(SITE)}: {src}" for page, parsed in pages.items()
               for src, alt in parsed.images if not (alt or "").strip()]
    assert not missing, "images without alt text:\n" + "\n".join(missing)


def test_a_bilingual_404_page():
    text = (SITE / "404.html").read_text("utf-8")
    assert "Page not found" in text and "页面不存在" in text


def _zip(lang: str) -> Path:
    return SITE / lang / "_downloads" / f"mgpu-notebooks-{lang}.zip"


def _notebooks(lang: str) -> dict[str, dict]:
    with zipfile.ZipFile(_zip(lang)) as z:
        return {Path(n).stem: json.loads(z.read(n)) for n in z.namelist()
                if n.endswith(".ipynb")}


@pytest.mark.parametrize("lang", LANGS)
def test_the_zip_holds_every_downloadable_notebook(lang):
    offered = {p.stem for p in (SITE / lang / "_sources").glob("*.ipynb")}
    assert offered and set(_notebooks(lang)) == offered


@pytest.mark.parametrize("lang", LANGS)
def test_notebooks_hold_no_myst_syntax(lang):
    found = []
    for name, nb in _notebooks(lang).items():
        for i, cell in enumerate(nb["cells"]):
            text = CODE.sub("", "".join(cell["source"]))  # code shows syntax as examples
            if cell["cell_type"] == "markdown" and MYST_SYNTAX.search(text):
                found.append(f"{name} cell {i}: {MYST_SYNTAX.search(text).group(0)}")
    assert not found, "MyST syntax in the notebooks' Markdown:\n" + "\n".join(found)


@pytest.mark.parametrize("lang", LANGS)
def test_notebooks_print_each_line_once(lang):
    """A cell's text on one stream is one output: two in a row are how a line printed once
    came to show twice (MyST-NB's coalesce_streams merges them into the first in place)."""
    found = []
    for name, nb in _notebooks(lang).items():
        for i, cell in enumerate(nb["cells"]):
            streams = [(o["output_type"], o.get("name")) for o in cell.get("outputs", [])]
            if any(a == b == ("stream", a[1]) for a, b in zip(streams, streams[1:])):
                found.append(f"{name} cell {i}")
    assert not found, "stream outputs in a row (text printed twice?):\n" + "\n".join(found)


@pytest.mark.parametrize("lang", LANGS)
def test_downloads_are_the_clean_notebooks(lang):
    for name, nb in _notebooks(lang).items():
        download = json.loads((SITE / lang / "_sources" / f"{name}.ipynb").read_text("utf-8"))
        assert download == nb, name


def test_the_chinese_notebooks_are_in_chinese():
    for name, nb in _notebooks("zh_CN").items():
        text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
        english = "".join("".join(c["source"]) for c in _notebooks("en")[name]["cells"]
                          if c["cell_type"] == "markdown")
        assert CJK.search(text) and text != english, name


@pytest.mark.parametrize("name", RUN_FROM_ZIP)
def test_notebooks_run_from_the_zip(tmp_path, name):
    with zipfile.ZipFile(_zip("en")) as z:
        z.extractall(tmp_path)
    notebook = tmp_path / "mgpu-notebooks-en" / "notebooks" / f"{name}.ipynb"
    assert notebook.is_file(), sorted(p.name for p in notebook.parent.iterdir())
    run = subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
         "--ExecutePreprocessor.timeout=600", "--output-dir", str(tmp_path / "out"),
         str(notebook)],
        capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    executed = json.loads((tmp_path / "out" / f"{name}.ipynb").read_text("utf-8"))
    errors = [o for c in executed["cells"] for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors


# --- the Chinese search, the source, the figures ----------------------------------------------
def _glossary_terms_zh() -> list[str]:
    """The Chinese column of docs/glossary.md's table; each run of Chinese characters is a term
    (延后执行（惰性求值） gives two)."""
    docs = Path(__file__).parents[2] / "docs"
    rows = [line for line in (docs / "glossary.md").read_text("utf-8").splitlines()
            if line.startswith("|")]
    column = [c.strip() for c in rows[0].strip("|").split("|")].index("Chinese")
    terms: list[str] = []
    for row in rows[2:]:
        terms += [t for t in CJK_TERM.findall(row.strip("|").split("|")[column])
                  if t not in terms]
    return terms


def _search_index(lang: str) -> dict:
    text = (SITE / lang / "searchindex.js").read_text("utf-8")
    return json.loads(text[text.index("(") + 1: text.rindex(")")])


def test_the_chinese_search_index_has_every_glossary_term():
    """Each Chinese term of the glossary is a term of the Chinese search index, on the glossary
    page at least (Sphinx's jieba split 参数服务器, 学习率, 数据并行 into smaller words, and the
    search, which looks a Chinese query up whole, found nothing)."""
    index = _search_index("zh_CN")
    glossary = index["docnames"].index("glossary")
    terms = _glossary_terms_zh()
    assert len(terms) >= 40 and "全归约" in terms, terms
    missing, elsewhere = [], []
    for term in terms:
        docs = _as_list(index["terms"].get(term)) + _as_list(index["titleterms"].get(term))
        if not docs:
            missing.append(term)
        elif glossary not in docs:
            elsewhere.append(term)
    assert not missing, f"glossary terms that are not terms of the Chinese index: {missing}"
    assert not elsewhere, f"terms not indexed on the glossary page: {elsewhere}"


def _as_list(value) -> list:
    return [] if value is None else value if isinstance(value, list) else [value]


@pytest.mark.parametrize("lang", LANGS)
def test_every_page_links_to_the_source(pages, lang):
    """The header of every page links to the source archive (a tar of the repository's files,
    the package and the book's sources among them) and to the README page: the English
    edition's copies, which the Chinese edition shares (``tools.site.share_static``)."""
    import tarfile

    archive = (SITE / "en" / "_downloads" / "mgpu-source.tar.gz").resolve()
    assert lang == "en" or not (SITE / lang / "_downloads" / archive.name).exists()
    # The README page is shared too when both editions render it alike.
    readme = next(p.resolve() for p in (SITE / lang / "_downloads" / "README.html",
                                        SITE / "en" / "_downloads" / "README.html")
                  if p.is_file())
    for page, parsed in pages.items():
        if page.parent != SITE / lang:  # the pages, not _downloads/README.html itself
            continue
        targets = {(page.parent / unquote(urlsplit(link).path)).resolve()
                   for link in parsed.links if not urlsplit(link).scheme}
        assert archive in targets and readme in targets, page
    with tarfile.open(archive, "r:gz") as tar:
        names = set(tar.getnames())
    assert {"mgpu/pyproject.toml", "mgpu/README.md", "mgpu/src/mgpu/__init__.py",
            "mgpu/docs/conf.py", "mgpu/noxfile.py"} <= names
    assert not [n for n in names if "/_build/" in n or "/.nox/" in n or n.endswith(".pyc")]
    assert "nox -s docs" in readme.read_text("utf-8")


class _FigureImages(html.parser.HTMLParser):
    """``(src, href of the enclosing link or None)`` of every image inside a <figure>."""

    def __init__(self) -> None:
        super().__init__()
        self.figures = 0
        self.links: list[str | None] = []
        self.found: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure":
            self.figures += 1
        elif tag == "a":
            self.links.append(a.get("href"))
        elif tag == "img" and self.figures:
            self.found.append((a.get("src", ""), next((h for h in reversed(self.links) if h),
                                                      None)))

    def handle_endtag(self, tag):
        if tag == "figure":
            self.figures -= 1
        elif tag == "a" and self.links:
            self.links.pop()


@pytest.mark.parametrize("lang", LANGS)
def test_every_figure_links_to_its_image(lang):
    """A click on a figure opens its image at full size: each figure's image is a link to its
    own file."""
    count, wrong = 0, []
    for page in sorted((SITE / lang).glob("*.html")):
        parser = _FigureImages()
        parser.feed(page.read_text("utf-8"))
        for src, href in parser.found:
            count += 1
            if href != src:
                wrong.append(f"{page.name}: {src} -> {href}")
    assert count > 10, f"only {count} figures in {lang}"
    assert not wrong, "figures that do not link to their image:\n" + "\n".join(wrong)
