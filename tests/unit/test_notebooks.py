"""The downloadable notebooks' Markdown (docs/_ext/mgpu_notebooks.py), from doctrees built by hand:
each kind of node, in running text and between blocks, and the cells of a page."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("sphinx")

from docutils import nodes  # noqa: E402
from docutils.core import publish_doctree  # noqa: E402
from sphinx import addnodes  # noqa: E402

EXT = Path(__file__).parents[2] / "docs" / "_ext" / "mgpu_notebooks.py"


def _extension():
    spec = importlib.util.spec_from_file_location("mgpu_notebooks", EXT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


notebooks = _extension()
APP = SimpleNamespace(srcdir=str(EXT.parents[1]), env=SimpleNamespace(toc_fignumbers={}),
                      config=SimpleNamespace(numfig_format={}, mgpu_notebook_files=[],
                                             language="en"))

PAGE = """
Title
=====

Some *em* and **strong** text with ``code`` and a `link <https://example.org>`_ and
a `page <other.html#x>`_ and :math:`a^2` [#f]_.

.. note:: Mind *this*.

   Second paragraph.

- one
- two

  nested para

3. three
4. four

term
   its definition

> not a quote

    quoted block

.. math::

   E = mc^2

.. rubric:: Rubric

----

+-----+-----+
| a   | b   |
+=====+=====+
| 1   | 2   |
+-----+-----+

.. [#f] A footnote.
"""

MARKDOWN = """# Title

Some *em* and **strong** text with `code` and a [link](https://example.org) and a \
[page](other.ipynb) and $a^2$ [1].

> **Note**
>
> Mind *this*.
>
> Second paragraph.

- one
- two

  nested para

3. three
4. four

**term**\x20\x20
its definition

\\> not a quote

> quoted block

$$
E = mc^2
$$

**Rubric**

---

| a | b |
|---|---|
| 1 | 2 |

[1] A footnote."""


def _writer():
    return notebooks.MarkdownWriter(APP, "page", {"other"})


def test_every_kind_of_node_as_markdown():
    doctree = publish_doctree(PAGE, settings_overrides={"report_level": 5})
    assert "\n\n".join(_writer().blocks(doctree)) == MARKDOWN


def test_a_node_is_written_by_where_it_is():
    """A literal is a code span in running text, its plain text as a block of its own; a
    subclass is written as its base class (Sphinx's literal_strong as strong)."""
    literal = nodes.literal("", "a*b")
    writer = _writer()
    assert writer.inline(literal) == "`a*b`" and writer.block(literal) == ["a\\*b"]
    assert writer.inline(addnodes.literal_strong("", "x")) == "**x**"
    assert writer.block(nodes.raw("", "<b>x</b>", format="html")) == ["<b>x</b>"]
    assert writer.block(nodes.raw("", "x", format="latex")) == []
    assert writer.inline(nodes.paragraph("", "two\nlines")) == "two lines"
    code = nodes.literal_block("", "print(1)", language="default")
    assert writer.block(code) == ["```python\nprint(1)\n```"]


def test_code_cells_split_the_markdown():
    """A page's text between code cells becomes Markdown cells; each code cell keeps its
    outputs, less the glue data."""
    section = nodes.section("", nodes.title("", "Page"), nodes.paragraph("", "Before."))
    cell = nodes.container("", nb_element="cell_code", cell_index=0)
    section += [cell, nodes.paragraph("", "After.")]
    doctree = nodes.document(None, None)
    doctree += section
    glue = nbformat.v4.new_output("display_data", {"text/plain": "1"},
                                  metadata={"scrapbook": {"name": "x"}})
    shown = nbformat.v4.new_output("stream", name="stdout", text="hello\n")
    executed = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "print('hello')", outputs=[glue, shown])])
    nb = notebooks.notebook_from_doctree(APP, "page", doctree, executed, set())
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "markdown"]
    assert nb.cells[0].source == "# Page\n\nBefore." and nb.cells[2].source == "After."
    assert nb.cells[1].source == "print('hello')" and nb.cells[1].outputs == [shown]
