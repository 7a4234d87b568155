"""Sphinx extension of the mgpu book: the Chinese edition shows its cell outputs in Chinese.

The book is executed once; both editions show the same outputs, which the code prints in
English. ``locales/zh_CN/outputs.po`` (``mgpu_outputs_catalog``; not under ``LC_MESSAGES``, it
is no page's catalog) holds templates: a msgid is an output line, or a table cell's whole text,
with each variable part written ``{}``; its msgstr is the Chinese, with the same placeholders
(``{0}``, ``{1}`` to reorder them)::

    msgid "waits: pushed in {} s, finished in {} s, memory peaked {} MB above the start"
    msgstr "等待：推送用时 {} 秒，完成用时 {} 秒，内存峰值比开始时高 {} MB"

A word that means different things on different pages (a column "ran" holding a count on one
page and the processes that ran on another) gets a template of its page: ``msgctxt`` is the
page's docname. A page uses the templates of its own docname first, then those with no context.
A page's template whose msgstr equals its msgid keeps a cell as printed (a name of code, such as
the KVStore type ``device``, which the page's general template would translate)::

    msgctxt "performance"
    msgid "ran"
    msgstr "运行次数"

When a page of a ``zh`` edition is written, every line of a text output and every paragraph
(table cell) or text of raw HTML in a cell output whose WHOLE text matches a template is
replaced; the values are inserted as they were printed. A value never holds a lowercase English
word, so a template cannot match a longer line that has more words. Lines that match nothing,
and code cells' inputs, stay as they are. ``tools/outputs_catalog.py`` lists the outputs that no
template matches.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

PLACEHOLDER = re.compile(r"\{(\d*)\}")
# A placeholder of a compiled target: always numbered. Other braces of a msgstr are text.
NUMBERED = re.compile(r"\{(\d+)\}")
# A lowercase English word of 3+ letters standing alone: prose, never a value (a value is a
# number, a device such as cpu(0), a file name, a name such as AMD EPYC or True). A word after
# "(" or before ")" is prose too ("ResNet-18 (width 16)"); a word before "(" is a call's name.
PROSE_WORD = re.compile(r"(?<![\w.'/-])[a-z]{3,}(?![\w.(/-])")
# Typographic quotes (Sphinx's smart quotes) match the plain ones of the catalog.
QUOTES = str.maketrans({"’": "'", "‘": "'", "“": '"', "”": '"'})
# Text of raw HTML between tags (an HTML table's cells, its caption).
HTML_TEXT = re.compile(r"(?<=>)([^<>]+)(?=<)")


@dataclass(frozen=True)
class Template:
    """One msgid as an anchored regex, and its msgstr with placeholders numbered ``{0}``…;
    ``context`` is the docname of the page it is for, ``""`` for every page."""

    pattern: re.Pattern[str]
    target: str
    msgid: str = ""
    context: str = ""


def placeholders(text: str) -> list[int]:
    """The indices of ``text``'s placeholders, ``{}`` counted in order, ``{n}`` as written."""
    found, auto = [], 0
    for match in PLACEHOLDER.finditer(text):
        if match.group(1):
            found.append(int(match.group(1)))
        else:
            found.append(auto)
            auto += 1
    return found


def _literal(text: str) -> str:
    """``text`` as a regex; a run of blanks matches any run of blanks (columns printed to a
    width that the values change)."""
    return r"\s+".join(re.escape(word) for word in re.split(r" +", text))


def compile_template(msgid: str, msgstr: str, context: str = "") -> Template:
    """``msgid`` as a regex matching a whole text, ``(.+?)`` for each placeholder."""
    parts = PLACEHOLDER.split(msgid.translate(QUOTES))[::2]
    pattern = "(.+?)".join(_literal(part) for part in parts)
    numbered = iter(range(len(placeholders(msgstr))))
    target = PLACEHOLDER.sub(lambda m: "{" + (m.group(1) or str(next(numbered))) + "}", msgstr)
    return Template(re.compile(pattern), target, msgid, context or "")


def valid(msgid: str, msgstr: str) -> bool:
    """A template with a translation that uses each of the msgid's values once, and some text."""
    count = len(placeholders(msgid))
    return (bool(msgstr) and bool(PLACEHOLDER.sub("", msgid).strip())
            and sorted(placeholders(msgstr)) == list(range(count)))


def read_templates(path: Path) -> list[Template]:
    """The catalog's templates, the longest text first (the most specific wins); a template
    whose msgstr does not use the msgid's placeholders is left out, with a warning. Each keeps
    its ``msgctxt`` (a docname) as its context: :func:`for_page` chooses a page's."""
    from babel.messages.pofile import read_po

    with path.open("rb") as f:
        catalog = read_po(f)
    templates = []
    for message in catalog:
        if not message.id or message.fuzzy:
            continue
        if not valid(message.id, message.string):
            logger.warning("%s: the msgstr of %r must use each of its %d placeholders once",
                           path.name, message.id, len(placeholders(message.id)),
                           type="mgpu", subtype="outputs")
            continue
        templates.append((len(PLACEHOLDER.sub("", message.id)), message.id, message.string,
                          message.context or ""))
    templates.sort(key=lambda t: -t[0])
    return [compile_template(msgid, msgstr, context)
            for _, msgid, msgstr, context in templates]


def for_page(templates: list[Template], docname: str) -> list[Template]:
    """The templates a page uses: those of its docname first, then those of every page."""
    return ([t for t in templates if t.context == docname]
            + [t for t in templates if not t.context])


def fill(target: str, values: list[str]) -> str:
    """``target`` with each ``{n}`` replaced by ``values[n]``; any other brace stays text."""
    return NUMBERED.sub(lambda m: values[int(m.group(1))], target)


def find(text: str, templates: list[Template]) -> tuple[Template, list[str]] | None:
    """The first template whose msgid matches the whole of ``text`` (stripped) with no prose
    in a value, and the values as printed; ``None`` if none does."""
    core = text.strip()
    if not core:
        return None
    plain = core.translate(QUOTES)
    for template in templates:
        match = template.pattern.fullmatch(plain)
        if match and not any(PROSE_WORD.search(v) for v in match.groups()):
            return template, [core[match.start(i):match.end(i)]
                              for i in range(1, len(match.groups()) + 1)]
    return None


def translate(text: str, templates: list[Template]) -> str | None:
    """The translation of ``text`` (stripped; its surrounding blanks kept), or ``None``."""
    found = find(text, templates)
    if found is None:
        return None
    template, values = found
    core = text.strip()
    start = text.index(core)
    return text[:start] + fill(template.target, values) + text[start + len(core):]


def translate_lines(text: str, templates: list[Template]) -> str:
    """``text`` with each line that a template matches translated."""
    return "".join(translate(line, templates) or line for line in text.splitlines(True))


def translate_html(markup: str, templates: list[Template]) -> str:
    """Raw HTML with the text between its tags translated where a template matches it."""
    def one(match: re.Match[str]) -> str:
        done = translate(html.unescape(match.group(1)), templates)
        return match.group(1) if done is None else html.escape(done, quote=False)

    return HTML_TEXT.sub(one, markup)


def _is_output(node: nodes.Node) -> bool:
    return isinstance(node, nodes.container) and "cell_output" in node.get("classes", [])


def _is_glued_html(node: nodes.Node) -> bool:
    return isinstance(node, nodes.raw) and "text_html" in node.get("classes", [])


def output_nodes(doctree: nodes.Node) -> Iterator[nodes.Element]:
    """Each node whose text is an output, once: the literal blocks, raw HTML and paragraphs
    inside cell outputs, and raw HTML glued into the page outside them."""
    seen: set[int] = set()
    outputs = [*doctree.findall(_is_output), *doctree.findall(_is_glued_html)]
    for output in outputs:
        for node in output.findall(lambda n: isinstance(
                n, (nodes.literal_block, nodes.raw, nodes.paragraph))):
            if id(node) not in seen:
                seen.add(id(node))
                yield node


def translate_outputs(doctree: nodes.Node, templates: list[Template]) -> None:
    """Translate the text of every cell output of ``doctree`` (and raw HTML of glued outputs):
    ``templates`` are the page's (:func:`for_page`)."""
    for node in list(output_nodes(doctree)):
        text = node.astext()
        if isinstance(node, nodes.literal_block):
            done: str | None = translate_lines(text, templates)
        elif isinstance(node, nodes.raw):
            done = translate_html(text, templates) if node.get("format") == "html" else None
        else:
            done = translate(text, templates)
        if done is None or done == text:
            continue
        node.children = []
        node += nodes.Text(done)
        if not isinstance(node, nodes.paragraph):
            node.rawsource = done


def _catalog(app: Sphinx) -> Path:
    return Path(app.srcdir) / app.config.mgpu_outputs_catalog


def _chinese(app: Sphinx) -> bool:
    return (app.config.language or "").startswith("zh") and _catalog(app).is_file()


def _note_catalog(app: Sphinx, doctree: nodes.document) -> None:
    """A page with outputs is read again (and written) when the catalog changes."""
    if _chinese(app) and next(output_nodes(doctree), None) is not None:
        app.env.note_dependency(str(_catalog(app)))


def _translate_page(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    if not _chinese(app):
        return
    if not hasattr(app, "_mgpu_output_templates"):  # once per build
        app._mgpu_output_templates = read_templates(_catalog(app))  # type: ignore[attr-defined]
    templates = app._mgpu_output_templates  # type: ignore[attr-defined]
    translate_outputs(doctree, for_page(templates, docname))


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("mgpu_outputs_catalog", "locales/zh_CN/outputs.po", "env",
                         types=(str,))
    app.connect("doctree-read", _note_catalog)
    app.connect("doctree-resolved", _translate_page)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
