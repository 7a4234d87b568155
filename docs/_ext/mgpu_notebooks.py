"""Sphinx extension of the mgpu book: notebooks that open in Jupyter, one set per edition.

The notebook MyST-NB executes (``jupyter_execute/<page>.ipynb``) keeps the page's MyST in its
Markdown cells: directives (``{literalinclude}``, ``{glue:figure}``, admonitions), roles
(``{doc}``, ``{glue:text}``, ``{cite:p}``) and English text only. A reader's Jupyter shows those
as raw text. Here each page's notebook is written from the page's *resolved* doctree instead, the
one the HTML is written from, in this edition's language:

- the text between code cells becomes Markdown cells (glued values as their text, included
  source code as code blocks, admonitions as block quotes, cross-references as links to the
  other notebooks, figures as images attached to the cell, mathematics as ``$...$``);
- each code cell is the executed cell, with its outputs (less the glue outputs, which the page
  shows in the text, and those the page removes).

The notebooks replace the download of ``_sources/<page>.ipynb``, and ``_downloads/`` gets a zip
of them all (``mgpu-notebooks-<language>.zip``), laid out so that the files the notebooks read by
relative path (``mgpu_notebook_files``, relative to the docs directory) are where they look.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
from docutils import nodes
from docutils.utils import new_document
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

# In the zip: <folder>/notebooks/<page>.ipynb, and each of mgpu_notebook_files at its path
# relative to the docs directory, resolved from notebooks/ (``../bench/results.json`` ->
# <folder>/bench/results.json).
NOTEBOOK_DIR = "notebooks"


def zip_name(language: str) -> str:
    """The name of the edition's zip of notebooks, e.g. ``mgpu-notebooks-en.zip``."""
    return f"mgpu-notebooks-{language}.zip"


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>$|])")


def _escape(text: str) -> str:
    """Text as Markdown that shows it literally (no emphasis, links, HTML or mathematics)."""
    return _MD_SPECIAL.sub(r"\\\1", text)


def _code_span(text: str) -> str:
    ticks = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _fence(code: str, language: str = "") -> str:
    ticks = "`" * max(3, max((len(m) for m in re.findall(r"`+", code)), default=0) + 1)
    return f"{ticks}{language}\n{code.rstrip()}\n{ticks}"


def _quote(text: str) -> str:
    """``text`` as a Markdown block quote."""
    return "\n".join("> " + line if line else ">" for line in text.splitlines())


class MarkdownWriter(nodes.NodeVisitor):
    """Markdown for the nodes of one page's resolved doctree (the parts between code cells).

    A docutils node visitor: :meth:`block` gives a node's Markdown blocks, :meth:`inline` its
    Markdown text in running text (a node is written differently in the two places: a ``literal``
    is a code span in a paragraph, its plain text as a block of its own). Each ``visit_<class>``
    either writes its node whole and skips it (``nodes.SkipNode``), or lets its children write
    into a new frame (:meth:`open`) and says what to make of their Markdown, which
    :meth:`depart_Node` does; in running text, a block's children are written in place
    (:meth:`keep`). As in Sphinx's translators, the methods are looked up along the node's class
    hierarchy: ``addnodes.literal_strong`` is written as ``strong``, ``nodes.note`` as an
    ``Admonition``, anything else as a ``TextElement`` or an ``Element``.
    """

    def __init__(self, app: Sphinx, docname: str, notebooks: set[str]) -> None:
        super().__init__(new_document(f"<notebook {docname}>"))
        self.app, self.docname, self.notebooks = app, docname, notebooks
        self.attachments: dict[str, dict[str, str]] = {}
        self.section_level = 0
        # What is being written: one frame per open node, (running text?, Markdown parts).
        self.frames: list[tuple[bool, list[str]]] = []
        # Per visited node not skipped: what to make of its frame on departure (None: in place).
        self.closers: list[Callable[[Any], list[str]] | None] = []

    # --- walking -----------------------------------------------------------------------------
    def dispatch_visit(self, node: nodes.Node) -> None:
        for cls in type(node).__mro__:
            method = getattr(self, f"visit_{cls.__name__}", None)
            if method is not None:
                method(node)
                return
        raise NotImplementedError(f"{type(self).__name__}: no visit method for {node!r}")

    def dispatch_departure(self, node: nodes.Node) -> None:
        self.depart_Node(node)

    def write(self, *parts: str) -> None:
        self.frames[-1][1].extend(parts)

    @property
    def in_text(self) -> bool:
        """Whether the node being visited is in running text (an inline's Markdown)."""
        return self.frames[-1][0]

    def open(self, in_text: bool, close: Callable[[Any], list[str]]) -> None:
        """The node's children write into a new frame; on departure ``close`` gets their
        Markdown (running text: one string; blocks: the non-blank ones) and gives the node's."""
        self.frames.append((in_text, []))
        self.closers.append(close)

    def keep(self) -> None:
        """The node's children write in place: the node adds nothing of its own."""
        self.closers.append(None)

    def depart_Node(self, node: nodes.Node) -> None:
        close = self.closers.pop()
        if close is not None:
            in_text, parts = self.frames.pop()
            self.write(*close("".join(parts) if in_text else [p for p in parts if p.strip()]))

    def walk(self, children: list[nodes.Node], in_text: bool) -> list[str]:
        self.frames.append((in_text, []))
        try:
            for child in children:
                child.walkabout(self)
        finally:
            parts = self.frames.pop()[1]
        return parts

    def block(self, node: nodes.Node) -> list[str]:
        """The Markdown blocks of ``node`` (blank ones too)."""
        return self.walk([node], in_text=False)

    def blocks(self, node: nodes.Element) -> list[str]:
        """The non-blank Markdown blocks of ``node``'s children."""
        return [b for b in self.walk(node.children, in_text=False) if b.strip()]

    def inline(self, node: nodes.Node) -> str:
        return "".join(self.walk([node], in_text=True))

    def inlines(self, node: nodes.Element) -> str:
        return "".join(self.walk(node.children, in_text=True))

    # --- links -------------------------------------------------------------------------------
    def link_target(self, node: nodes.reference) -> str | None:
        """Where a reference points from a notebook: another notebook, or a web address."""
        uri = node.get("refuri")
        if not uri:
            return None  # a target on the same page: the text alone
        if re.match(r"^[a-z][a-z0-9+.-]*:", uri) and not uri.startswith("file:"):
            return uri  # http(s), mailto: as it is
        page = uri.split("#")[0]
        if page.endswith(".html"):
            page = page[: -len(".html")]
            if page in self.notebooks:
                return f"{page}.ipynb"
        return None  # a page without notebook (e.g. the API reference), or a local file

    # --- anywhere ----------------------------------------------------------------------------
    def visit_Text(self, node: nodes.Text) -> None:
        text = node.astext()
        self.write(_escape(text.replace("\n", " ") if self.in_text else text))
        raise nodes.SkipNode

    def visit_Element(self, node: nodes.Element) -> None:
        """Containers, compounds, toctree wrappers...: their children's blocks."""
        if self.in_text:
            self.keep()
        else:
            self.open(False, lambda blocks: blocks)

    def visit_TextElement(self, node: nodes.TextElement) -> None:
        """Any other text: one block of running text."""
        if self.in_text:
            self.keep()
        else:
            self.open(True, lambda text: [text])

    def visit_image(self, node: nodes.image) -> None:
        self.write(self.image(node))
        raise nodes.SkipNode

    def visit_raw(self, node: nodes.raw) -> None:
        if node.get("format") == "html":
            self.write(node.astext())
        raise nodes.SkipNode

    def visit_target(self, node: nodes.Node) -> None:
        raise nodes.SkipNode

    visit_comment = visit_system_message = visit_target

    def visit_label(self, node: nodes.Element) -> None:
        """Left out between blocks (a footnote writes its own label), kept in running text."""
        if self.in_text:
            self.keep()
        else:
            raise nodes.SkipNode

    visit_substitution_definition = visit_label
    visit_index = visit_label  # sphinx.addnodes.index

    # --- in running text ---------------------------------------------------------------------
    def visit_literal(self, node: nodes.literal) -> None:
        if not self.in_text:
            return self.visit_TextElement(node)
        self.write(_code_span(node.astext()))
        raise nodes.SkipNode

    def visit_strong(self, node: nodes.strong) -> None:
        if not self.in_text:
            return self.visit_TextElement(node)
        self.open(True, lambda text: [f"**{text}**"])

    def visit_emphasis(self, node: nodes.emphasis) -> None:
        if not self.in_text:
            return self.visit_TextElement(node)
        self.open(True, lambda text: [f"*{text}*"])

    def visit_math(self, node: nodes.math) -> None:
        if not self.in_text:
            return self.visit_TextElement(node)
        self.write(f"${node.astext()}$")
        raise nodes.SkipNode

    def visit_reference(self, node: nodes.reference) -> None:
        if not self.in_text:
            return self.visit_TextElement(node)
        target = self.link_target(node)
        self.open(True, lambda text: [f"[{text}]({target})" if target else text])

    def visit_footnote_reference(self, node: nodes.Element) -> None:
        if not self.in_text:
            return self.visit_TextElement(node)
        self.write(f"[{_escape(node.astext())}]")
        raise nodes.SkipNode

    visit_citation_reference = visit_footnote_reference

    # --- between blocks (in running text, their children write in place) --------------------
    def visit_section(self, node: nodes.section) -> None:
        if self.in_text:
            return self.keep()
        self.section_level += 1

        def close(blocks: list[str]) -> list[str]:
            self.section_level -= 1
            return blocks

        self.open(False, close)

    def visit_title(self, node: nodes.title) -> None:
        if self.in_text:
            return self.keep()
        level = min(max(self.section_level, 1), 6)
        self.open(True, lambda text: [f"{'#' * level} {text}"])

    def visit_paragraph(self, node: nodes.paragraph) -> None:
        self.visit_TextElement(node)

    def visit_rubric(self, node: nodes.rubric) -> None:
        if self.in_text:
            return self.keep()
        self.open(True, lambda text: [f"**{text}**"])

    def visit_literal_block(self, node: nodes.literal_block) -> None:
        if self.in_text:
            return self.keep()
        language = node.get("language", "") or ""
        # Sphinx's "default" (highlight_language) is Python 3; "none" is plain text.
        language = {"default": "python", "python3": "python", "none": ""}.get(language, language)
        self.write(_fence(node.astext(), language))
        raise nodes.SkipNode

    def visit_math_block(self, node: nodes.math_block) -> None:
        if self.in_text:
            return self.keep()
        self.write(f"$$\n{node.astext().strip()}\n$$")
        raise nodes.SkipNode

    def visit_bullet_list(self, node: nodes.bullet_list) -> None:
        if self.in_text:
            return self.keep()
        self.write("\n".join(self.list_item(item, "- ") for item in node.children))
        raise nodes.SkipNode

    def visit_enumerated_list(self, node: nodes.enumerated_list) -> None:
        if self.in_text:
            return self.keep()
        start = node.get("start", 1)
        self.write("\n".join(self.list_item(item, f"{start + i}. ")
                             for i, item in enumerate(node.children)))
        raise nodes.SkipNode

    def visit_definition_list(self, node: nodes.definition_list) -> None:
        if self.in_text:
            return self.keep()
        for item in node.children:
            term = next(c for c in item.children if isinstance(c, nodes.term))
            definition = next(c for c in item.children if isinstance(c, nodes.definition))
            self.write(f"**{self.inlines(term)}**  \n" + "\n\n".join(self.blocks(definition)))
        raise nodes.SkipNode

    def visit_Admonition(self, node: nodes.Element) -> None:
        """An admonition, topic or sidebar: a block quote under its title in bold."""
        if self.in_text:
            return self.keep()
        title = next((c for c in node.children if isinstance(c, nodes.title)), None)
        heading = self.inlines(title) if title is not None else node.tagname.capitalize()
        body = [b for c in node.children if c is not title for b in self.block(c)]
        self.write(_quote("\n\n".join([f"**{heading}**", *body])))
        raise nodes.SkipNode

    visit_topic = visit_sidebar = visit_Admonition

    def visit_block_quote(self, node: nodes.block_quote) -> None:
        if self.in_text:
            return self.keep()
        self.open(False, lambda blocks: [_quote("\n\n".join(blocks))])

    def visit_figure(self, node: nodes.figure) -> None:
        if self.in_text:
            return self.keep()
        for child in node.children:
            if isinstance(child, nodes.image):
                self.write(self.image(child))
            elif isinstance(child, nodes.caption):
                self.write(f"*{self.figure_number(node)}{self.inlines(child)}*")
            elif isinstance(child, nodes.legend):
                self.write(*self.blocks(child))
            else:
                self.write(*self.block(child))
        raise nodes.SkipNode

    def visit_table(self, node: nodes.table) -> None:
        if self.in_text:
            return self.keep()
        self.write(self.table(node))
        raise nodes.SkipNode

    def visit_footnote(self, node: nodes.Element) -> None:
        if self.in_text:
            return self.keep()
        label = next((c for c in node.children if isinstance(c, nodes.label)), None)
        rest = [b for c in node.children if c is not label for b in self.block(c)]
        mark = f"[{_escape(label.astext())}] " if label is not None else ""
        self.write(mark + " ".join(rest))
        raise nodes.SkipNode

    visit_citation = visit_footnote

    def visit_transition(self, node: nodes.transition) -> None:
        if self.in_text:
            return self.keep()
        self.write("---")
        raise nodes.SkipNode

    # --- parts -------------------------------------------------------------------------------
    def image(self, node: nodes.image) -> str:
        """The image, attached to its Markdown cell (the notebook needs no file beside it)."""
        # After Sphinx's image collector: relative to the source directory (MyST-NB's images,
        # written to jupyter_execute/, as "../_build/...", or "/..." before it).
        uri = node.get("candidates", {}).get("*") or node.get("uri", "")
        srcdir = Path(self.app.srcdir)
        candidates = [srcdir / uri.lstrip("/"), Path(uri), srcdir / Path(self.docname).parent / uri]
        found = next((p for p in candidates if p.is_file()), None)
        alt = _escape(node.get("alt", "")).replace("\n", " ")
        if found is None:
            logger.warning("mgpu_notebooks: %s: image %s not found for the notebook",
                           self.docname, uri, type="mgpu", subtype="notebook")
            return alt
        mime = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
                ".svg": "image/svg+xml", ".gif": "image/gif"}.get(found.suffix.lower())
        if mime is None:
            return alt
        data = found.read_bytes()
        name = hashlib.sha256(data).hexdigest()[:16] + found.suffix.lower()
        self.attachments[name] = {mime: base64.b64encode(data).decode("ascii")}
        return f"![{alt}](attachment:{name})"

    def figure_number(self, figure: nodes.figure) -> str:
        ids = figure.get("ids", [])
        numbers = self.app.env.toc_fignumbers.get(self.docname, {}).get("figure", {})
        number = next((numbers[i] for i in ids if i in numbers), None)
        if not number:
            return ""
        label = self.app.config.numfig_format.get("figure", "Fig. %s")
        return _escape(label % ".".join(map(str, number))) + " "

    def list_item(self, item: nodes.Node, marker: str) -> str:
        text = "\n\n".join(self.blocks(item)) if isinstance(item, nodes.Element) else ""
        pad = " " * len(marker)
        lines = text.splitlines() or [""]
        return "\n".join([marker + lines[0], *[(pad + line) if line else "" for line in lines[1:]]])

    def table(self, table: nodes.table) -> str:
        rows: list[list[str]] = []
        header_rows = 0
        for group in table.findall(nodes.tgroup):
            for part in group.children:
                if not isinstance(part, (nodes.thead, nodes.tbody)):
                    continue
                for row in part.children:
                    cells = [" ".join(self.blocks(entry)).replace("\n", " ") for entry in row]
                    rows.append(cells)
                    if isinstance(part, nodes.thead):
                        header_rows += 1
        if not rows:
            return ""
        width = max(len(r) for r in rows)
        rows = [r + [""] * (width - len(r)) for r in rows]
        head = rows[0] if header_rows else [""] * width
        body = rows[1:] if header_rows else rows
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * width]
        lines += ["| " + " | ".join(r) + " |" for r in body]
        title = next((c for c in table.children if isinstance(c, nodes.title)), None)
        caption = f"*{self.inlines(title)}*\n\n" if title is not None else ""
        return caption + "\n".join(lines)


def _is_code_cell(node: nodes.Node) -> bool:
    return isinstance(node, nodes.container) and node.get("nb_element") == "cell_code"


def _clean_outputs(cell: Any, removed: bool) -> list[Any]:
    """The cell's outputs as a reader should see them: no glue data, none the page removes,
    and each run of text on one stream once. MyST-NB's ``coalesce_streams`` merges a cell's
    stream outputs into the first one in place and can leave the later ones behind, so the
    notebook would print a line twice: a stream output whose text the previous output of the
    same stream already ends with is dropped, and consecutive ones are joined."""
    if removed:
        return []
    kept: list[Any] = []
    for out in cell.get("outputs", []):
        if "scrapbook" in out.get("metadata", {}):
            continue
        previous = kept[-1] if kept else None
        if (out.get("output_type") == "stream" and previous is not None
                and previous.get("output_type") == "stream"
                and previous.get("name") == out.get("name")):
            text, before = "".join(out.get("text", "")), "".join(previous.get("text", ""))
            if not before.endswith(text):
                kept[-1] = copy.deepcopy(previous)  # a NotebookNode, as nbformat expects
                kept[-1]["text"] = before + text
            continue
        kept.append(out)
    return kept


def notebook_from_doctree(app: Sphinx, docname: str, doctree: nodes.document,
                          executed: Any, notebooks: set[str]) -> Any:
    """A clean notebook of ``docname``: Markdown from the doctree, code cells from ``executed``."""
    writer = MarkdownWriter(app, docname, notebooks)
    cells: list[Any] = []
    pending: list[str] = []

    def flush() -> None:
        text = "\n\n".join(b for b in pending if b.strip()).strip()
        if text:
            cell = nbformat.v4.new_markdown_cell(text)
            used = {k: v for k, v in writer.attachments.items() if f"attachment:{k}" in text}
            if used:
                cell["attachments"] = used
            cells.append(cell)
        pending.clear()
        writer.attachments.clear()

    def walk(node: nodes.Element) -> None:
        for child in node.children:
            if _is_code_cell(child):
                flush()
                source = executed.cells[child["cell_index"]]
                tags = source.get("metadata", {}).get("tags", [])
                cell = nbformat.v4.new_code_cell(
                    source.source, metadata=copy.deepcopy(source.get("metadata", {})),
                    outputs=_clean_outputs(source, "remove-output" in tags))
                cell["execution_count"] = source.get("execution_count")
                cells.append(cell)
            elif isinstance(child, nodes.section) or (
                    isinstance(child, nodes.Element) and any(
                        _is_code_cell(n) for n in child.findall(nodes.container))):
                if isinstance(child, nodes.section):
                    writer.section_level += 1
                walk(child)
                if isinstance(child, nodes.section):
                    writer.section_level -= 1
            else:
                pending.extend(writer.block(child))

    walk(doctree)
    flush()
    nb = nbformat.v4.new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    })
    needed = [f for f in app.config.mgpu_notebook_files
              if any(_reads(c, f) for c in cells if c.cell_type == "code")]
    if needed:
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(_files_note(app, needed)))
    return nb


def _reads(cell: Any, path: str) -> bool:
    """Whether a code cell names ``path``, or imports it (``bench.targets`` for
    ``../bench/targets.py``)."""
    module = Path(path.lstrip("./")).with_suffix("").as_posix().replace("/", ".")
    return path in cell.source or (path.endswith(".py") and module in cell.source)


def _files_note(app: Sphinx, files: list[str]) -> str:
    names = ", ".join(f"`{f}`" for f in files)
    archive = zip_name(app.config.language or "en")
    if (app.config.language or "en").startswith("zh"):
        return (f"> 本笔记本会读取 {names}：请在所有笔记本的压缩包 `{archive}` 解压后的 "
                f"`{NOTEBOOK_DIR}/` 目录中运行它，压缩包里带有这些文件。")
    return (f"> This notebook reads {names}: run it from the `{NOTEBOOK_DIR}/` folder of the zip "
            f"of all notebooks, `{archive}`, which holds those files.")


# --- Sphinx hooks ----------------------------------------------------------------------------
def _executed_notebook(app: Sphinx, docname: str) -> Path:
    # MyST-NB writes the executed notebooks to <outdir>/../jupyter_execute/.
    return Path(app.outdir).parent / "jupyter_execute" / f"{docname}.ipynb"


def _notebook_pages(app: Sphinx) -> set[str]:
    return {d for d in app.env.found_docs if _executed_notebook(app, d).is_file()}


def _target(app: Sphinx, docname: str) -> Path:
    return Path(app.outdir) / "_sources" / f"{docname}.ipynb"


def _write_notebook(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    if app.builder.format != "html":
        return
    executed_path = _executed_notebook(app, docname)
    if not executed_path.is_file():
        return
    executed = nbformat.read(executed_path, as_version=4)
    nb = notebook_from_doctree(app, docname, doctree, executed, _notebook_pages(app))
    target = _target(app, docname)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)


def _write_zip(app: Sphinx, exception: Exception | None) -> None:
    """All the edition's notebooks, and the files they read, in ``_downloads/``."""
    if exception is not None or app.builder.format != "html":
        return
    language = app.config.language or "en"
    folder = f"mgpu-notebooks-{language}"
    archive = Path(app.outdir) / "_downloads" / zip_name(language)
    archive.parent.mkdir(parents=True, exist_ok=True)
    srcdir = Path(app.srcdir)
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for docname in sorted(_notebook_pages(app)):
            nb = _target(app, docname)
            if nb.is_file():
                z.write(nb, f"{folder}/{NOTEBOOK_DIR}/{docname}.ipynb")
        for name in app.config.mgpu_notebook_files:
            inside = (Path(NOTEBOOK_DIR) / name).as_posix()
            parts: list[str] = []
            for part in inside.split("/"):  # resolve "..": notebooks/../bench -> bench
                if part == "..":
                    parts.pop()
                else:
                    parts.append(part)
            z.write(srcdir / name, f"{folder}/{'/'.join(parts)}")
        z.writestr(f"{folder}/README.md", _zip_readme(language))
    logger.info("mgpu_notebooks: %s", archive)


def _zip_readme(language: str) -> str:
    """The zip's README.md: how to run the notebooks, command by command. The package they import
    is in the book's source archive (``_downloads/mgpu-source.tar.gz`` of the English edition,
    which the Chinese one shares; the "Source" menu of every page)."""
    folder = f"mgpu-notebooks-{language}"
    lines = [
        ("tar xzf mgpu-source.tar.gz", "# -> mgpu/"),
        (f"unzip {zip_name(language)}", f"# -> {folder}/"),
        ("python3.11 -m venv venv", ""),
        (". venv/bin/activate", ""),
        ("cd mgpu", ""),
        ("pip install -e '.[cpu,plot]' jupyter", ""),
        (f"cd ../{folder}/{NOTEBOOK_DIR}", ""),
        ("jupyter lab", ""),
    ]
    commands = "```bash\n" + "".join(
        f"{command:<40}{comment}".rstrip() + "\n" for command, comment in lines) + "```\n"
    if language.startswith("zh"):
        return (
            "# mgpu 的 Jupyter 笔记本\n\n"
            "本书的每一章都是这里的一个笔记本（`notebooks/`）。运行它们需要 Python 3.11 和软件包 "
            "`mgpu`，它在本书的源代码压缩包 `mgpu-source.tar.gz` 里：在本书任一页面顶部的"
            "“源代码”菜单中下载（它在网站上的位置是 `en/_downloads/mgpu-source.tar.gz`，"
            "两个版本共用）。"
            "把两个文件放在同一目录中，然后运行：\n\n"
            + commands +
            "\n有 NVIDIA GPU 的机器上，把 `'.[cpu,plot]'` 换成 `'.[gpu,plot]'`。"
            "Fashion-MNIST 数据集在第一次使用时由 MXNet 下载（或者用环境变量 `MGPU_DATA_DIR` "
            "指向已有的数据文件，见源代码中的 `README.md`）。\n"
        )
    return (
        "# The notebooks of mgpu\n\n"
        "Each chapter of the book is a notebook here (`notebooks/`). They need Python 3.11 and "
        "the package `mgpu`, which is in the book's source archive, `mgpu-source.tar.gz`: "
        "download it from the \"Source\" menu at the top of any page of the book (on the site "
        "it is `en/_downloads/mgpu-source.tar.gz`, shared by both editions). With both files in "
        "one folder, run:\n\n"
        + commands +
        "\nOn a machine with NVIDIA GPUs, use `'.[gpu,plot]'` instead of `'.[cpu,plot]'`. "
        "MXNet downloads Fashion-MNIST the first time it is needed (or set `MGPU_DATA_DIR` to a "
        "folder that holds its files; see `README.md` in the source).\n"
    )


def _drop_source_download(app: Sphinx, pagename: str, templatename: str,
                          context: dict[str, Any], doctree: Any) -> None:
    """The download menu offers the notebook, not the page's MyST source: the source is in
    the book's source archive, and the book does not copy it (``html_copy_source = False``),
    so the theme's ``.md`` button (sphinx-book-theme's ``add_header_buttons``) would lead
    nowhere."""
    for button in context.get("header_buttons", []):
        if button.get("label") == "download-buttons":
            button["buttons"] = [b for b in button.get("buttons", [])
                                 if b.get("label") != "download-source-button"]


def _digest_of_this_file() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def setup(app: Sphinx) -> dict[str, Any]:
    # Files the notebooks read by relative path (from the docs directory); the zip holds them.
    app.add_config_value("mgpu_notebook_files", [], "env", types=(list,))
    # A change to this converter rewrites every page (and so every notebook) of the next build.
    app.add_config_value("mgpu_notebooks_version", _digest_of_this_file(), "html", types=(str,))
    app.connect("doctree-resolved", _write_notebook)
    app.connect("build-finished", _write_zip)
    app.connect("html-page-context", _drop_source_download, priority=502)  # after the theme's
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": False}


