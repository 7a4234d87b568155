"""The catalog of the Chinese edition's cell outputs (docs/locales/zh_CN/outputs.po) and the
extension that applies it (docs/_ext/mgpu_outputs.py), on a small doctree."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from babel.messages.pofile import read_po
from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document

DOCS = Path(__file__).parents[2] / "docs"
CATALOG = DOCS / "locales" / "zh_CN" / "outputs.po"
sys.path.insert(0, str(DOCS / "_ext"))

import mgpu_outputs  # noqa: E402  (docs/_ext)

from tools.outputs_catalog import ENGLISH_RUN, draft_msgid, is_prose  # noqa: E402

SAMPLE = """\
msgid ""
msgstr ""

msgid "waits: pushed in {} s, finished in {} s, memory peaked {} MB above the start"
msgstr "等待：推送用时 {} 秒，完成用时 {} 秒，内存峰值比开始时高 {} MB"

msgid "numbers to sum"
msgstr "要求和的数"

msgid "device {}'s products"
msgstr "设备 {} 的矩阵乘积"

msgid "{} imperative: {} ms per step"
msgstr "{} 命令式：每步 {} 毫秒"

msgid "largest parameter difference, {} devices vs {} after epoch {}: {}"
msgstr "第 {2} 个迭代周期之后，{0} 个设备与 {1} 个设备的参数最大差异：{3}"

msgid "broken {} and {}"
msgstr "坏的 {}"
"""


# Scoped templates that keep a cell as printed (msgstr == msgid): names of code that the
# page's general template would translate. (page, msgid)
KEPT_AS_PRINTED = {("kvstore", "device")}  # the "store" column: the KVStore type `device`


@pytest.fixture(scope="module")
def messages():
    with CATALOG.open("rb") as f:
        return [m for m in read_po(f) if m.id]


@pytest.fixture
def templates(tmp_path):
    po = tmp_path / "outputs.po"
    po.write_text(SAMPLE, "utf-8")
    return mgpu_outputs.read_templates(po)


def filled(msgid: str, value: str = "1") -> str:
    return mgpu_outputs.PLACEHOLDER.sub(value, msgid)


def test_the_catalog_is_complete_and_chinese(messages):
    assert len(messages) > 100
    for m in messages:
        assert m.string, f"no translation of {m.id!r}"
        assert not m.fuzzy, m.id
        assert mgpu_outputs.valid(m.id, m.string), f"placeholders of {m.id!r}"
        assert not ENGLISH_RUN.search(m.string), f"English prose in the msgstr of {m.id!r}"
        if m.context:
            assert (DOCS / f"{m.context}.md").is_file(), f"msgctxt {m.context!r}: no such page"
        if (m.context, m.id) in KEPT_AS_PRINTED:
            assert m.string == m.id, m.id
            continue
        assert re.search(r"[\u4e00-\u9fff]", m.string), f"no Chinese in {m.string!r}"


def test_each_template_matches_its_own_line_and_nothing_longer(messages):
    templates = [mgpu_outputs.compile_template(m.id, m.string, m.context) for m in messages]
    for m, template in zip(messages, templates):
        line = filled(m.id)
        assert mgpu_outputs.translate(line, [template]) is not None, m.id
        for longer in (f"{line} and more words", f"some more words {line}",
                       f"{line}, plus extra text"):
            assert mgpu_outputs.translate(longer, [template]) is None, (m.id, longer)


def test_a_msgstr_with_other_placeholders_is_left_out_with_a_warning(tmp_path, caplog):
    po = tmp_path / "outputs.po"
    po.write_text(SAMPLE, "utf-8")
    # Sphinx's logger of the extension; once a Sphinx app has run, "sphinx" stops propagating
    logger = logging.getLogger("sphinx.mgpu_outputs")
    logger.addHandler(caplog.handler)
    try:
        templates = mgpu_outputs.read_templates(po)
    finally:
        logger.removeHandler(caplog.handler)
    assert len(templates) == 5
    assert mgpu_outputs.translate("broken 1 and 2", templates) is None
    # (a record may reach caplog twice: through this handler and by propagating)
    warnings = {r.getMessage() for r in caplog.records if r.levelno == logging.WARNING}
    assert warnings == {
        "outputs.po: the msgstr of 'broken {} and {}' must use each of its 2 placeholders once"}


def test_other_braces_of_a_msgstr_are_text():
    """Values fill the numbered placeholders only: a msgstr with another brace (which
    str.format would reject) does not break the build."""
    template = mgpu_outputs.compile_template("keys {} in {}", "键 {1} 中的 {0}：{a} {")
    assert mgpu_outputs.translate("keys 3 in cpu(0)", [template]) == "键 cpu(0) 中的 3：{a} {"


def test_lines_are_translated_with_their_values(templates):
    text = ("waits: pushed in 0.71 s, finished in 0.71 s, memory peaked 6 MB above the start\n"
            "    LeNet imperative:    47.2 ms per step\n"
            "largest parameter difference, 4 devices vs 2 after epoch 3: 5.96e-08\n"
            "something else entirely\n")
    assert mgpu_outputs.translate_lines(text, templates) == (
        "等待：推送用时 0.71 秒，完成用时 0.71 秒，内存峰值比开始时高 6 MB\n"
        "    LeNet 命令式：每步 47.2 毫秒\n"
        "第 3 个迭代周期之后，4 个设备与 2 个设备的参数最大差异：5.96e-08\n"
        "something else entirely\n")


def test_a_value_is_never_prose(templates):
    # "{} imperative: ..." must not swallow words into its value
    assert mgpu_outputs.translate("the model imperative: 3 ms per step", templates) is None


def test_a_word_in_brackets_is_prose_and_a_call_is_a_name(templates):
    # a word after "(" or before ")" is prose: the value would swallow "(width 16)"
    for model in ("ResNet-18 (width 16)", "ResNet-18 (16 wide)"):
        assert mgpu_outputs.translate(f"{model} imperative: 3 ms per step", templates) is None
    assert mgpu_outputs.translate("seed(42) imperative: 3 ms per step", templates) == (
        "seed(42) 命令式：每步 3 毫秒")
    width = mgpu_outputs.compile_template("{} (width {})", "{}（宽度 {}）")
    assert mgpu_outputs.translate("ResNet-18 (width 16)", [width]) == "ResNet-18（宽度 16）"


def test_a_page_uses_its_own_templates_first(tmp_path):
    po = tmp_path / "outputs.po"
    po.write_text(SAMPLE + '''
msgid "ran"
msgstr "是否运行"

msgctxt "performance"
msgid "ran"
msgstr "运行次数"

msgctxt "kvstore"
msgid "numbers to sum"
msgstr "numbers to sum"
''', "utf-8")
    templates = mgpu_outputs.read_templates(po)
    translate = mgpu_outputs.translate
    assert translate("ran", mgpu_outputs.for_page(templates, "memory")) == "是否运行"
    assert translate("ran", mgpu_outputs.for_page(templates, "performance")) == "运行次数"
    assert translate("numbers to sum", mgpu_outputs.for_page(templates, "kvstore")) == (
        "numbers to sum")  # kept as printed on its page
    assert translate("numbers to sum", mgpu_outputs.for_page(templates, "memory")) == "要求和的数"


def test_html_cells_are_translated(templates):
    table = ("<table><tr><th>owner</th><th>numbers to sum</th></tr>"
             "<tr><td>device 1’s products</td><td>350,592</td></tr></table>")
    assert mgpu_outputs.translate_html(table, templates) == (
        "<table><tr><th>owner</th><th>要求和的数</th></tr>"
        "<tr><td>设备 1 的矩阵乘积</td><td>350,592</td></tr></table>")


def doctree() -> nodes.document:
    """A code cell (input and outputs) as MyST-NB builds it, and a paragraph of prose."""
    document = new_document("page", get_default_settings(Parser))
    cell = nodes.container(classes=["cell"])
    code = "print('numbers to sum')\n"
    cell_input = nodes.container(classes=["cell_input"])
    cell_input += nodes.literal_block(code, code)
    output = nodes.container(classes=["cell_output"])
    text = "numbers to sum\nnot in the catalog\n"
    output += nodes.literal_block(text, text, classes=["output", "stream"])
    table = nodes.table()
    entry = nodes.entry()
    entry += nodes.paragraph("", "device 0’s products")
    table += entry
    output += table
    output += nodes.raw("", "<p>numbers to sum</p>", format="html")
    cell += [cell_input, output]
    document += cell
    document += nodes.paragraph("", "numbers to sum")
    return document


def test_a_doctree_s_outputs_are_translated_and_nothing_else(templates):
    document = doctree()
    mgpu_outputs.translate_outputs(document, templates)
    cell_input, output = document[0].children
    assert cell_input.astext() == "print('numbers to sum')\n"  # code stays
    block = output[0]
    assert block.astext() == "要求和的数\nnot in the catalog\n"
    assert block.rawsource == block.astext()
    assert output[1].astext() == "设备 0 的矩阵乘积"
    assert output[2].astext() == "<p>要求和的数</p>"
    assert document[1].astext() == "numbers to sum"  # prose is the page catalogs' job


def test_raw_html_of_an_output_is_translated_once():
    """A raw HTML node inside a cell output that is also a glued HTML output (text_html)."""
    document = new_document("page", get_default_settings(Parser))
    output = nodes.container(classes=["cell_output"])
    output += nodes.raw("", "<p>a 1</p>", format="html", classes=["output", "text_html"])
    document += output
    again = mgpu_outputs.compile_template("a {}", "a a {}")  # would grow on a second pass
    mgpu_outputs.translate_outputs(document, [again])
    assert output[0].astext() == "<p>a a 1</p>"


def app(tmp_path: Path, language: str) -> SimpleNamespace:
    """What the extension's event handlers read of a Sphinx app."""
    (tmp_path / "outputs.po").write_text(SAMPLE, "utf-8")
    return SimpleNamespace(
        srcdir=str(tmp_path),
        config=SimpleNamespace(language=language, mgpu_outputs_catalog="outputs.po"),
        env=SimpleNamespace(dependencies=[], note_dependency=lambda path: None))


def test_an_english_build_is_left_untouched(tmp_path):
    english = app(tmp_path, "en")
    document = doctree()
    before = document.pformat()
    mgpu_outputs._note_catalog(english, document)
    mgpu_outputs._translate_page(english, document, "page")
    assert document.pformat() == before
    assert not hasattr(english, "_mgpu_output_templates")


def test_a_chinese_build_translates_and_notes_the_catalog(tmp_path):
    chinese = app(tmp_path, "zh_CN")
    noted: list[str] = []
    chinese.env.note_dependency = noted.append
    document = doctree()
    mgpu_outputs._note_catalog(chinese, document)
    mgpu_outputs._translate_page(chinese, document, "page")
    assert noted == [str(tmp_path / "outputs.po")]
    assert document[0][1][0].astext() == "要求和的数\nnot in the catalog\n"


def test_a_page_with_only_glued_html_notes_the_catalog(tmp_path):
    """The dependency note looks at the nodes that translate_outputs translates."""
    chinese = app(tmp_path, "zh_CN")
    noted: list[str] = []
    chinese.env.note_dependency = noted.append
    document = new_document("page", get_default_settings(Parser))
    paragraph = nodes.paragraph()
    paragraph += nodes.raw("", "<b>numbers to sum</b>", format="html", classes=["text_html"])
    document += paragraph
    mgpu_outputs._note_catalog(chinese, document)
    assert noted == [str(tmp_path / "outputs.po")]
    mgpu_outputs._translate_page(chinese, document, "page")
    assert paragraph[0].astext() == "<b>要求和的数</b>"


def test_the_tool_finds_prose_and_drafts_msgids():
    assert is_prose("memory peaked 6 MB above the start")
    assert is_prose("owner")
    assert not is_prose("[cpu(0), cpu(1)]")
    assert not is_prose("MXNetError: Check failed: invalid file")
    assert not is_prose("KVStoreReduce")
    assert draft_msgid(" devices: cpu(0) cpu(1), 1,024 images in 0.5 s ") == (
        "devices: {} {}, {} images in {} s")
