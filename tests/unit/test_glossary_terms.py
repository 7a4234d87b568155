"""The Chinese edition says each concept with one term: the glossary's (docs/glossary.md).

Two checks over every catalog of the Chinese edition (docs/locales/zh_CN/LC_MESSAGES/*.po, and
docs/locales/zh_CN/outputs.po for what the code prints):
no translation uses a rejected variant of a glossary term, and wherever an English paragraph
names one of a curated set of terms, its translation uses that term's Chinese word. Text in
code (``x``, `x`) and in roles ({doc}`x`, :func:`x`) is ignored, except the sentences of a
{verdict}`...` role, which are prose.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po, write_po

DOCS = Path(__file__).resolve().parents[2] / "docs"
LOCALES = DOCS / "locales" / "zh_CN" / "LC_MESSAGES"

# A variant that some translation once used -> the glossary term (its English column) to use
# instead. Latin variants match in any case.
REJECTED = {
    "服务器节点": "server",
    "归约-散播": "reduce-scatter",
    "归约-分散": "reduce-scatter",
    "运行统计量": "running statistics",
    "移动平均统计量": "running statistics",
    "所有者": "owner device",
    "warmup": "warm-up",
    "热身": "warm-up",
    "过时程度": "staleness",
    "过时梯度": "staleness",
    "notebook": "notebook (Jupyter)",
    "服务端": "server",
    "滑动平均": "moving average",
    "运行均值": "running statistics",
    "所有方": "owner device",
    "陈旧性": "staleness",
    "种子教程": "seeds",
}

# Glossary terms whose English word means one thing throughout the book: every paragraph that
# names one (as a word, singular or plural) is translated with the glossary's Chinese term.
CONSISTENT = [
    "server",
    "worker",
    "reduce-scatter",
    "all-gather",
    "allreduce",
    "checkpoint",
    "gradient accumulation",
    "running statistics",
    "owner device",
    "warm-up",
    "staleness",
    "throughput",
    "speed-up",
    "launcher",
    "scheduler",
    "parameter server",
    "mixed precision",
    "micro-batch",
    "loss scaling",
]

# A second sense of a CONSISTENT word, with its own Chinese term: a paragraph that uses this term
# instead passes (the engine's "worker" is a thread, 工作线程, not a worker process).
SECOND_SENSES = {
    "worker": "工作线程",
    "speed-up": "加速",  # the effect ("no speed-up", 没有加速); the ratio is 加速比
}

# (page, start of the msgid) -> why that paragraph may say the term otherwise.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("glossary", "MXNet's scheduler that runs operations"): "the engine, not the PS process",
    ("outputs", "main run, {}: data, overhead"): "benchmark names, as the code prints them",
    ("outputs", "measured again, {}: allreduce"): "a benchmark name, as the code prints it",
}

_CODE = re.compile(r"(\{[\w:.-]+\}|:[\w:.~-]+:)?(``.*?``|`[^`]*`)")
_MARKUP = re.compile(r"<[^<>]*>|\]\([^()]*\)|https?://\S+")  # HTML tags, link targets, URLs
_CJK = re.compile(r"[\u4e00-\u9fff]")


def prose(text: str) -> str:
    """``text`` without code, role placeholders and markup (a {verdict} role keeps its
    sentences)."""

    def keep(match: re.Match) -> str:
        return match.group(2)[1:-1] if match.group(1) == "{verdict}" else " "

    return _MARKUP.sub(" ", _CODE.sub(keep, text))


def glossary(path: Path = DOCS / "glossary.md") -> dict[str, str]:
    """The glossary's table: English term -> Chinese term."""
    rows = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 3 and cells[0] != "English":
            rows[cells[0]] = cells[1]
    return rows


def catalogs(locales: Path = LOCALES) -> dict[str, Catalog]:
    """Every page's catalog, and the catalog of the cells' printed outputs (outputs.po)."""
    found = {}
    outputs = locales.parent / "outputs.po"
    for po in [*sorted(locales.glob("*.po")), *[outputs][:outputs.exists()]]:
        with po.open("rb") as f:
            found[po.stem] = read_po(f)
    return found


def translations(cats: dict[str, Catalog]):
    """(page, msgid, msgstr) of every translated message; an English message left as it is
    (a glossary table's English cell, a line of code) is no translation."""
    for page, cat in cats.items():
        for m in cat:
            if not m.id or not isinstance(m.id, str) or not isinstance(m.string, str):
                continue
            if not m.string or m.fuzzy or (m.string == m.id and not _CJK.search(m.id)):
                continue
            yield page, m.id, m.string


def rejected_uses(cats: dict[str, Catalog], terms: dict[str, str]) -> list[str]:
    found = []
    for page, msgid, msgstr in translations(cats):
        text = prose(msgstr)
        for variant, term in REJECTED.items():
            if variant.lower() in text.lower():
                found.append(f"{page}.po, msgid {msgid[:60]!r}: {variant!r} -> use the glossary's "
                             f"term for {term!r}: {terms.get(term, '?')!r}")
    return found


def _word(term: str) -> re.Pattern:
    parts = [re.escape(p) for p in re.split(r"[\s-]+", term)]
    return re.compile(r"\b" + r"[\s-]".join(parts) + r"(?:s|es)?\b", re.IGNORECASE)


def inconsistent_uses(cats: dict[str, Catalog], terms: dict[str, str],
                      exceptions: dict[tuple[str, str], str] = EXCEPTIONS) -> list[str]:
    patterns = {term: _word(term) for term in CONSISTENT}
    found = []
    for page, msgid, msgstr in translations(cats):
        if any(page == p and msgid.startswith(prefix) for p, prefix in exceptions):
            continue
        english, chinese = prose(msgid), prose(msgstr)
        for term, pattern in patterns.items():
            if not pattern.search(english) or terms[term] in chinese:
                continue
            if term in SECOND_SENSES and SECOND_SENSES[term] in chinese:
                continue
            found.append(f"{page}.po, msgid {msgid[:60]!r}: says {term!r} but its msgstr "
                         f"lacks {terms[term]!r}")
    return found


def test_rejected_variants_name_glossary_terms():
    terms = glossary()
    assert {"server", "running statistics", "owner device", "warm-up"} <= set(terms)
    assert not [t for t in REJECTED.values() if t not in terms]
    assert not [t for t in CONSISTENT if t not in terms]
    for variant, term in REJECTED.items():
        assert variant not in terms[term], (variant, term)


def test_no_rejected_variant():
    found = rejected_uses(catalogs(), glossary())
    assert not found, "translations use a rejected term:\n" + "\n".join(found)


def test_glossary_terms_used_consistently():
    found = inconsistent_uses(catalogs(), glossary())
    assert not found, "translations miss the glossary's term:\n" + "\n".join(found)


def _one(msgid: str, msgstr: str) -> dict[str, Catalog]:
    cat = Catalog(locale="zh_CN")
    cat.add(msgid, msgstr)
    return {"page": cat}


@pytest.mark.parametrize(("msgid", "msgstr", "rejected", "inconsistent"), [
    ("The server sums.", "服务器求和。", 0, 0),
    ("The server sums.", "服务器节点求和。", 1, 0),
    ("The servers sum.", "由它们求和。", 0, 1),
    ("A warm-up round.", "一个 warmup 回合。", 1, 1),
    ("A Warm-up round.", "一个预热回合。", 0, 0),
    ("Run `server` here.", "在这里运行 `server`。", 0, 0),  # code is not prose
    ("Call {doc}`multi-machine` and ``notebook``.", "见 {doc}`multi-machine` 和 ``notebook``。",
     0, 0),
    ("{verdict}`x; true: the running statistics; false: none`",
     "{verdict}`x; true: 运行统计量; false: 无`", 1, 1),
    ("running statistics", "running statistics", 0, 0),  # an English cell left as it is
    ('A <a href="notebooks.zip">zip</a>.', '一个<a href="notebooks.zip">压缩包</a>。', 0, 0),
])
def test_checks_catch_planted_errors(msgid, msgstr, rejected, inconsistent):
    terms = glossary()
    cats = _one(msgid, msgstr)
    assert len(rejected_uses(cats, terms)) == rejected
    assert len(inconsistent_uses(cats, terms, exceptions={})) == inconsistent


def test_checks_catch_an_edited_catalog(tmp_path):
    """A copy of a real catalog with a rejected variant planted in one message fails both."""
    with (LOCALES / "multi-machine.po").open("rb") as f:
        cat = read_po(f)
    message = next(m for m in cat if m.id and "server" in m.id and "服务器" in m.string)
    terms = glossary()
    for planted, check in (("服务器节点", rejected_uses), ("存储进程", inconsistent_uses)):
        message.string = message.string.replace("服务器", planted)
        with (tmp_path / "multi-machine.po").open("wb") as f:
            write_po(f, cat)
        found = check(catalogs(tmp_path), terms)
        assert found and all(message.id[:60] in line for line in found), found
        message.string = message.string.replace(planted, "服务器")
