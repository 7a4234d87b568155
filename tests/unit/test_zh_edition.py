"""The Chinese edition's citations and theme strings (docs/_ext/mgpu_zh.py).

The reference style ``author_year_zh`` formats citations the Chinese way, and the English
edition keeps sphinxcontrib-bibtex's ``author_year``; a small Sphinx project built in both
languages shows them, and the themes' strings that the book's catalogs correct.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("sphinxcontrib.bibtex")  # the docs extra: not in every venv

from pybtex.database import parse_string  # noqa: E402
from pybtex.plugin import find_plugin as find_pybtex_plugin  # noqa: E402
from pybtex_docutils import Backend  # noqa: E402
from sphinxcontrib.bibtex.plugin import find_plugin  # noqa: E402
from sphinxcontrib.bibtex.style.referencing import format_references  # noqa: E402
from sphinxcontrib.bibtex.style.template import SphinxReferenceInfo  # noqa: E402

DOCS = Path(__file__).parents[2] / "docs"
EXT = DOCS / "_ext"
LOCALES = DOCS / "locales" / "zh_CN" / "LC_MESSAGES"
sys.path.insert(0, str(EXT))
import mgpu_zh  # noqa: E402

BIB = r"""
@article{one, author = {Krizhevsky, Alex}, title = {One weird trick}, journal = {arXiv},
  year = {2014}}
@article{two, author = {Sergeev, Alexander and Del Balso, Mike}, title = {Horovod},
  journal = {arXiv}, year = {2018}}
@inproceedings{three, author = {Hoffer, Elad and Hubara, Itay and Soudry, Daniel},
  title = {Train longer}, booktitle = {NeurIPS}, year = {2017}}
@misc{others, author = {Li, Mu and Smola, Alexander J. and others}, title = {Gluon},
  year = {2017}}
"""
ENTRIES = parse_string(BIB, "bibtex").entries


def cite(style_name: str, role: str, *keys: str) -> str:
    """The text of the citation ``{cite:<role>}`keys``` in the reference style ``style_name``."""
    style = find_plugin("sphinxcontrib.bibtex.style.referencing", style_name)()
    formatted = {e.key: e for e in find_pybtex_plugin("pybtex.style.formatting", "plain")()
                 .format_entries(ENTRIES.values())}
    # A reference to a bibliography on the same page: no builder is asked for an address.
    info = SphinxReferenceInfo(builder=SimpleNamespace(name="html"), fromdocname="page",
                               todocname="page", citation_id="id1", title=None, pre_text="",
                               post_text="")
    references = [(ENTRIES[k], formatted[k], info) for k in keys]
    rendered = format_references(style, role, references).render(Backend())
    # pybtex joins the parts of a last name ("Del Balso") with a no-break space.
    return "".join(node.astext() for node in rendered).replace("\xa0", " ")


CASES = [  # (role, keys, English, Chinese)
    ("t", ["one"], "Krizhevsky [2014]", "Krizhevsky（2014）"),
    ("p", ["one"], "[Krizhevsky, 2014]", "（Krizhevsky，2014）"),
    ("t", ["two"], "Sergeev and Del Balso [2018]", "Sergeev 和 Del Balso（2018）"),
    ("p", ["two"], "[Sergeev and Del Balso, 2018]", "（Sergeev 和 Del Balso，2018）"),
    ("t", ["three"], "Hoffer et al. [2017]", "Hoffer 等人（2017）"),
    ("p", ["three"], "[Hoffer et al., 2017]", "（Hoffer 等人，2017）"),
    ("ts", ["three"], "Hoffer, Hubara, and Soudry [2017]", "Hoffer、Hubara 和 Soudry（2017）"),
    ("p", ["others"], "[Li et al., 2017]", "（Li 等人，2017）"),
    ("p", ["three", "two"], "[Hoffer et al., 2017, Sergeev and Del Balso, 2018]",
     "（Hoffer 等人，2017；Sergeev 和 Del Balso，2018）"),
    ("t", ["one", "two"], "Krizhevsky [2014], Sergeev and Del Balso [2018]",
     "Krizhevsky（2014）和 Sergeev 和 Del Balso（2018）"),
]


@pytest.mark.parametrize(("role", "keys", "english", "chinese"), CASES)
def test_citations_in_both_editions(role, keys, english, chinese):
    mgpu_zh.register_reference_style()
    assert cite("author_year", role, *keys) == english
    assert cite(mgpu_zh.REFERENCE_STYLE_ZH, role, *keys) == chinese


def test_no_english_in_chinese_citations():
    mgpu_zh.register_reference_style()
    for role, keys, _, _ in CASES:
        text = cite(mgpu_zh.REFERENCE_STYLE_ZH, role, *keys)
        assert not re.search(r"et al|\band\b|[\[\],]", text), text


@pytest.mark.parametrize("po", ["sphinx.po", "booktheme.po"])
def test_the_theme_catalogs_are_complete(po):
    """Every message of the book's catalogs of the themes' domains is translated, none fuzzy,
    and each one ends as its English does (no stray 「。」 on a tooltip)."""
    from babel.messages.pofile import read_po

    with (LOCALES / po).open("rb") as f:
        catalog = read_po(f)
    messages = [m for m in catalog if m.id]
    assert messages
    for m in messages:
        assert m.string and not m.fuzzy, m.id
        assert m.string.endswith("。") == m.id.endswith("."), (m.id, m.string)


# --- a small project built in both languages ------------------------------------------------
CONF = f"""
import sys
sys.path.insert(0, {str(EXT)!r})
extensions = ["mgpu_book", "mgpu_zh", "myst_nb", "sphinxcontrib.bibtex"]
bibtex_bibfiles = ["references.bib"]
bibtex_default_style = "plain"
bibtex_reference_style = "author_year"
nb_execution_mode = "off"
html_theme = "sphinx_book_theme"
html_theme_options = {{"use_download_button": True,
                       "article_header_end": ["lang-switch.html", "article-header-buttons.html"]}}
templates_path = [{str(DOCS / "_templates")!r}]
html_last_updated_fmt = ""
html_search_language = "en"
locale_dirs = ["locales/"]
gettext_compact = False
author = "the authors"
mgpu_per_language = {{"zh": {{"bibtex_reference_style": "author_year_zh", "author": "项目组"}}}}
"""
PAGE = """# Page

## Section

A rule {cite:p}`three`, as {cite:t}`three` found.

```{bibliography}
```
"""
PO = """msgid ""
msgstr ""
"Language: zh_CN\\n"
"Content-Type: text/plain; charset=utf-8\\n"

msgid "A rule {cite:p}`three`, as {cite:t}`three` found."
msgstr "一条规则 {cite:p}`three`，正如 {cite:t}`three` 所发现的。"
"""


def build(tmp_path: Path, language: str) -> str:
    pytest.importorskip("sphinx_book_theme")
    src = tmp_path / "src"
    messages = src / "locales" / "zh_CN" / "LC_MESSAGES"
    if not src.exists():
        messages.mkdir(parents=True)
        (src / "conf.py").write_text(CONF, encoding="utf-8")
        (src / "index.md").write_text(PAGE, encoding="utf-8")
        (src / "references.bib").write_text(BIB, encoding="utf-8")
        (messages / "index.po").write_text(PO, encoding="utf-8")
        for po in ("sphinx.po", "booktheme.po"):
            (messages / po).write_bytes((LOCALES / po).read_bytes())
    out = tmp_path / language
    run = subprocess.run([sys.executable, "-m", "sphinx", "-q", "-b", "html", "-D",
                          f"language={language}", str(src), str(out)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return (out / "index.html").read_text("utf-8")


def text_of(html: str) -> str:
    article = html[html.index("<article"):html.index("</article>")]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", article))


def test_a_chinese_page(tmp_path):
    html = build(tmp_path, "zh_CN")
    # Citations; no space beside a full-width parenthesis.
    assert "一条规则（Hoffer 等人，2017），正如 Hoffer 等人（2017）所发现的。" in text_of(html)
    assert "et al" not in text_of(html)
    # The themes' strings the book corrects, and its templates' attributes.
    assert 'title="打印为 PDF"' in html and "列印" not in html
    assert 'title="链接到此标题"' in html
    assert re.search(r"最后更新于 \d+ 年 \d+ 月 \d+ 日。", html)
    assert "作者：项目组" in html
    assert 'aria-label="主导航"' in html and 'aria-label="本页目录"' in html
    assert 'title="阅读本页的英文版"' in html
    assert not re.search(r'aria-label="(Main|Page)"|Read this page', html)


def test_an_english_page(tmp_path):
    html = build(tmp_path, "en")
    assert "A rule [Hoffer et al., 2017], as Hoffer et al. [2017] found." in text_of(html)
    assert 'title="Print to PDF"' in html and 'title="Link to this heading"' in html
    assert 'aria-label="Main"' in html and 'aria-label="Page"' in html
    assert "By the authors" in html
