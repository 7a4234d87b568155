"""What a reader sees of each chapter's code: teaching code only, the checks behind the page.

The chapters (``docs/*.md``, MyST-NB notebooks) check their claims with ``mgpu.require``, glue
their numbers with ``mgpu.glue`` and let measurements choose sentences with ``mgpu.verdict``.
Those calls run in cells tagged ``remove-cell``: the page does not show them, and neither do the
downloadable notebooks, which are written from the page. These tests read the chapters' source.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[2] / "docs"
CHAPTERS = sorted(p for p in DOCS.glob("*.md") if "code-cell" in p.read_text(encoding="utf-8"))

CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
MACHINERY = re.compile(r"\b(glue|pick|verdict|require)\s*\(")
CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")
VERDICT = re.compile(r"^[ \t]*:{3,}\{verdict\}\s+(\S+)|\{verdict\}`\s*([\w-]+)\s*;", re.M)
CASE = re.compile(r"^[ \t]*:{3,}\{case\}\s+(.+)$", re.M)
WIDTH = 88  # the content column holds about 85 monospace characters at 1366 px


@dataclass
class Cell:
    line: int  # of the fence, 1-based
    tags: list[str]
    source: str  # without the options

    @property
    def hidden(self) -> bool:
        return "remove-cell" in self.tags or "remove-input" in self.tags


def cells(text: str) -> list[Cell]:
    """The code cells of a MyST notebook, with their tags (``:tags:`` or a YAML block)."""
    found = []
    for m in CELL.finditer(text):
        body = m.group(1).splitlines()
        tags: list[str] = []
        if body and body[0].strip() == "---":
            end = body.index("---", 1)
            options, body = body[1:end], body[end + 1:]
        else:
            options = []
            while body and body[0].startswith(":"):
                options.append(body.pop(0)[1:])
        for option in options:
            name, _, value = option.partition(":")
            if name.strip() == "tags":
                tags = re.findall(r"[\w-]+", value)
        found.append(Cell(text.count("\n", 0, m.start()) + 1, tags, "\n".join(body)))
    return found


def chapter_cells(path: Path) -> list[Cell]:
    return cells(path.read_text(encoding="utf-8"))


def where(path: Path, cell: Cell) -> str:
    return f"{path.name}:{cell.line}"


def test_cell_parser_reads_tags():
    text = ("```{code-cell} ipython3\n:tags: [remove-cell]\nx = 1\n```\n\n"
            "```{code-cell} ipython3\n---\ntags: [remove-output]\n---\ny = 2\n```\n"
            "```{code-cell} ipython3\nz = 3\n```\n")
    parsed = cells(text)
    assert [c.tags for c in parsed] == [["remove-cell"], ["remove-output"], []]
    assert [c.source for c in parsed] == ["x = 1", "y = 2", "z = 3"]
    assert [c.hidden for c in parsed] == [True, False, False]


def test_there_are_chapters():
    assert len(CHAPTERS) >= 12, [p.name for p in CHAPTERS]


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_visible_cells_teach(path):
    """No visible cell calls the build's machinery, holds Chinese, or a sentence string."""
    problems = []
    for cell in chapter_cells(path):
        if cell.hidden:
            continue
        if MACHINERY.search(cell.source):
            problems.append(f"{where(path, cell)}: glue/pick/verdict/require in a shown cell")
        if CJK.search(cell.source):
            problems.append(f"{where(path, cell)}: Chinese text in a shown cell")
        tree = ast.parse(cell.source)
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.body
                      and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if id(node) in docstrings:  # a function's docstring teaches, like a comment
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                words = node.value.split()
                if len(words) >= 6 and node.value.rstrip().endswith((".", "!", "?")):
                    problems.append(f"{where(path, cell)}: a sentence in code: {node.value!r}")
    assert not problems, "\n".join(problems)


SRC = Path(__file__).parents[2] / "src"
MGPU_MODULES = {".".join(p.relative_to(SRC).with_suffix("").parts[:-1] if p.name == "__init__.py"
                         else p.relative_to(SRC).with_suffix("").parts)
                for p in (SRC / "mgpu").rglob("*.py")}
INCLUDE = re.compile(r"^```\{literalinclude\}\s+\.\./src/(\S+)\n((?::[\w-]+:.*\n)*)", re.M)


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapters_use_the_package_one_way(path):
    """Every cell imports the package as ``import mgpu`` and uses ``mgpu.<name>``: no
    ``from mgpu import ...``, no ``import mgpu.x``, no ``mgpu.<module>.<name>``, no private
    name."""
    problems = []
    for cell in chapter_cells(path):
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mgpu"):
                problems.append(f"{where(path, cell)}: from {node.module} import ...")
            if isinstance(node, ast.Import) and any(a.name.startswith("mgpu.") for a in node.names):
                problems.append(f"{where(path, cell)}: import of a submodule of mgpu")
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "mgpu"
                    and (f"mgpu.{node.attr}" in MGPU_MODULES or node.attr.startswith("_"))):
                problems.append(f"{where(path, cell)}: mgpu.{node.attr}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapters_include_public_functions_whole(path):
    """A chapter shows the package's code by ``:pyobject:`` (a public name) or by explicit
    markers, never by line numbers or by a private function."""
    problems = []
    for m in INCLUDE.finditer(path.read_text(encoding="utf-8")):
        options = dict(re.findall(r"^:([\w-]+):\s*(.*)$", m.group(2), re.M))
        obj = options.get("pyobject", "")
        if not (SRC / m.group(1)).is_file():
            problems.append(f"{m.group(1)}: no such file")
        if any(part.startswith("_") for part in obj.split(".")):
            problems.append(f"{m.group(1)}: private {obj}")
        if "lines" in options or not (obj or {"start-after", "start-at"} & set(options)):
            problems.append(f"{m.group(1)}: by lines, not by :pyobject: or markers")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_visible_code_fits_the_column(path):
    long = [f"{where(path, cell)}: {len(line)} columns: {line.strip()[:60]}"
            for cell in chapter_cells(path) if not cell.hidden
            for line in cell.source.splitlines() if len(line) > WIDTH]
    assert not long, "\n".join(long)


def _assigned(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _read(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_notebooks_run_without_hidden_cells(path):
    """The downloadable notebooks leave the hidden cells out, so shown cells never need them."""
    defined_visibly: set[str] = set()
    hidden_only: dict[str, int] = {}
    problems = []
    for cell in chapter_cells(path):
        tree = ast.parse(cell.source)
        if cell.hidden:
            for name in _assigned(tree) - defined_visibly:
                hidden_only.setdefault(name, cell.line)
            continue
        for name in sorted(_read(tree) & hidden_only.keys()):
            problems.append(f"{where(path, cell)} reads {name!r}, defined only in the hidden "
                            f"cell at line {hidden_only[name]}")
        assigned = _assigned(tree)
        defined_visibly |= assigned
        for name in assigned:
            hidden_only.pop(name, None)
    assert not problems, "\n".join(problems)


def prose_of(text: str) -> str:
    """The Markdown outside code blocks and double-backtick code spans (syntax examples)."""
    kept, fence = [], None
    for line in text.splitlines():
        marker = re.match(r"\s*(`{3,}|~{3,})", line)
        if fence is None and marker:
            fence = marker.group(1)
        elif fence is not None and line.strip() == fence:
            fence = None
        elif fence is None:
            kept.append(line)
    return re.sub(r"``[^\n]+?``", "", "\n".join(kept))


def _key_pattern(key: str) -> re.Pattern[str]:
    """A key as glued: ``f"{name}_faster"`` stands for any ``<word>_faster``."""
    parts = re.split(r"\{[^}]*\}", key)
    return re.compile(r"\w+".join(re.escape(p) for p in parts) + r"\Z")


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_verdict_is_decided_by_a_hidden_cell(path):
    text = path.read_text(encoding="utf-8")
    decided = {m.group(1) for cell in cells(text) if cell.hidden
               for m in re.finditer(r"verdict\(\s*f?[\"']([^\"']+)[\"']", cell.source)}
    prose = prose_of(text)
    shown = {block or role for block, role in VERDICT.findall(prose)}
    patterns = {key: _key_pattern(key) for key in decided}
    undecided = [k for k in shown if not any(p.match(k) for p in patterns.values())]
    unshown = [k for k, p in patterns.items() if not any(p.match(s) for s in shown)]
    assert not undecided, f"{path.name}: verdicts no hidden cell decides: {sorted(undecided)}"
    assert not unshown, f"{path.name}: verdicts no page shows: {sorted(unshown)}"
    for block in re.split(r"^[ \t]*:{3,}\{verdict\}", prose, flags=re.M)[1:]:
        cases = [c.split() for c in CASE.findall(block.split("\n::::\n")[0])]
        assert len(cases) >= 2, f"{path.name}: a verdict with fewer than two cases"


def test_the_checker_catches_machinery_in_shown_cells():
    text = ("```{code-cell} ipython3\nmgpu.glue('x', 1)\n```\n"
            "```{code-cell} ipython3\n:tags: [remove-cell]\nsecret = mgpu.require(True, 'ok')\n"
            "```\n```{code-cell} ipython3\nprint(secret)\n```\n")
    shown = [c for c in cells(text) if not c.hidden]
    assert MACHINERY.search(shown[0].source)
    assert "secret" in _read(ast.parse(shown[1].source))
