"""Sphinx extension of the mgpu book: sentences that a measurement chooses between.

A hidden code cell measures and glues an outcome with ``mgpu.verdict(key, outcome)``; the
chapter's Markdown holds every sentence the outcome may choose, one ``{case}`` each::

    ::::{verdict} queue_grew
    :::{case} true
    Without waiting, the memory grew far beyond that of the loop that waits.
    :::
    :::{case} false
    Here the memory of the loop that never waits did not grow much more.
    :::
    ::::

All cases are read, so the gettext builder puts every sentence in the catalog and the Chinese
edition translates them like the rest of the page. When a page is written (a post-transform, as
MyST-NB resolves ``{glue:text}`` references to other pages) the case whose name matches the
glued outcome replaces the directive; the others are dropped. An outcome without a case, or a
verdict without a glued outcome, is an error that names the page and the key (``-W`` makes it
fail the build). A case may name several outcomes: ``:::{case} slower same``.

Where a block cannot stand (a table cell, a word inside a sentence), the role chooses between
plain words: ``{verdict}`target_met; true: met; false: not met``` (key first, then one
``outcomes: words`` part for each case, separated by semicolons). The whole cell or paragraph
is one message of the catalog, so the Chinese edition translates the words inside the role.
"""

from __future__ import annotations

import ast
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective, SphinxRole

logger = logging.getLogger(__name__)


class verdict_node(nodes.General, nodes.Element):  # noqa: N801 (docutils' node naming)
    """The sentences of one verdict until the page is written; ``key`` and ``docname``."""


class case_node(nodes.General, nodes.Element):  # noqa: N801
    """One outcome's sentences; ``outcomes`` is the list of names it stands for."""


class VerdictDirective(SphinxDirective):
    """``{verdict} key``: its content is ``{case}`` directives only."""

    required_arguments = 1
    has_content = True

    def run(self) -> list[nodes.Node]:
        node = verdict_node(key=self.arguments[0], docname=self.env.docname)
        self.set_source_info(node)
        self.state.nested_parse(self.content, self.content_offset, node)
        strays = [c for c in node.children if not isinstance(c, case_node)]
        seen: set[str] = set()
        for case in node.children:
            if isinstance(case, case_node):
                repeated = seen.intersection(case["outcomes"])
                if repeated:
                    raise self.error(f"verdict {node['key']!r}: the outcome "
                                     f"{sorted(repeated)[0]!r} has two cases: keep one")
                seen.update(case["outcomes"])
        if strays or len(seen) < 2:
            raise self.error(
                f"verdict {node['key']!r}: its content must be two or more {{case}} "
                "directives and nothing else (the prose around it belongs outside)")
        return [node]


class CaseDirective(SphinxDirective):
    """``{case} name [name ...]``: the sentences shown when the verdict is one of the names."""

    required_arguments = 1
    optional_arguments = 8
    has_content = True

    def run(self) -> list[nodes.Node]:
        node = case_node(outcomes=list(self.arguments))
        self.set_source_info(node)
        self.state.nested_parse(self.content, self.content_offset, node)
        return [node]


class InlineVerdict(SphinxRole):
    """``{verdict}`key; true: words; false: other words``: plain words chosen by an outcome."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        key, *parts = [p.strip() for p in self.text.split(";")]
        node = verdict_node(self.rawtext, key=key, docname=self.env.docname)
        self.set_source_info(node)
        seen: set[str] = set()
        for part in parts:
            outcomes, colon, words = part.partition(":")
            names = outcomes.split()
            if not colon or not names or seen.intersection(names):
                msg = self.inliner.reporter.error(
                    f"verdict {key!r}: write the role as `key; outcome: words; other: words` "
                    f"(each outcome once); {part!r} is not of that form", line=self.lineno)
                return [], [msg]
            seen.update(names)
            case = case_node(outcomes=names)
            case += nodes.Text(words.strip())
            node += case
        if len(seen) < 2:
            msg = self.inliner.reporter.error(
                f"verdict {key!r}: the role needs two or more cases", line=self.lineno)
            return [], [msg]
        return [node], []


def glued_outcome(output_folder: str, docname: str, key: str) -> str | None:
    """The outcome ``mgpu.verdict`` glued under ``key`` in ``docname``, or ``None``."""
    from myst_nb.ext.glue.crossref import read_glue_cache

    output = read_glue_cache(output_folder, docname).get(key)
    if output is None:
        return None
    text = output.get("data", {}).get("text/plain", "")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = text
    return str(value)


class ChooseVerdicts(SphinxPostTransform):
    """Replace each verdict with the sentences of the case that its outcome names."""

    default_priority = 4  # before MyST-NB resolves the glue references in the chosen case

    def apply(self, **kwargs: Any) -> None:
        keep_all = self.app.builder.name == "gettext"
        folder = self.env.mystnb_config.output_folder  # type: ignore[attr-defined]
        for node in list(self.document.findall(verdict_node)):
            if keep_all:
                continue
            outcome = glued_outcome(folder, node["docname"], node["key"])
            chosen = [c for c in node.children if outcome in c["outcomes"]]
            if not chosen:
                known = sorted(o for c in node.children for o in c["outcomes"])
                problem = ("nothing was glued under that key: glue it with mgpu.verdict in a "
                           "hidden cell" if outcome is None else
                           f"the build's outcome is {outcome!r}, which has no case (cases: "
                           f"{', '.join(known)})")
                logger.warning("verdict %r of %s: %s", node["key"], node["docname"], problem,
                               location=node)
                node.parent.remove(node)
                continue
            node.replace_self(chosen[0].children)


def _unwrap(self: Any, node: nodes.Element) -> None:
    """Writers see the cases' paragraphs only (the gettext build keeps every case)."""


def setup(app: Sphinx) -> dict[str, Any]:
    for node in (verdict_node, case_node):
        app.add_node(node, **{fmt: (_unwrap, _unwrap)
                              for fmt in ("html", "latex", "text", "man", "texinfo")})
    app.add_directive("verdict", VerdictDirective)
    app.add_directive("case", CaseDirective)
    app.add_role("verdict", InlineVerdict())
    app.add_post_transform(ChooseVerdicts)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
