"""What the executed cells print, as the published pages show it: readable, not raw dumps.

Run with `nox -s site` after `nox -s docs`. Reads every cell output of both editions
(``div.cell_output``): no printed dict, no object repr, no bare ``True``/``False`` left by a
cell's last value, no float printed to its last digit.
"""

from __future__ import annotations

import html.parser
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.site

SITE = Path(__file__).parents[2] / "docs" / "_build" / "html"
LANGS = ("en", "zh_CN")

DUMPS = {
    "a printed dict": re.compile(r"\{\s*['\"][^'\"]+['\"]\s*:|\{\s*\d+\s*:\s"),
    "an object's repr": re.compile(r"^\s*[A-Z]\w+\(\w+=[^\n]*\)\s*$", re.M),
    "a bare boolean": re.compile(r"\A\s*(True|False)\s*\Z"),
    "an unrounded float": re.compile(r"\d\.\d{7,}|\d\.\d{5,}e[-+]\d\d"),
}


class _Outputs(html.parser.HTMLParser):
    """The text of every ``div.cell_output`` of a page, one string per output block."""

    def __init__(self) -> None:
        super().__init__()
        self.outputs: list[str] = []
        self._depth = 0  # of open divs inside an output, 0 outside one

    def handle_starttag(self, tag, attrs):
        if tag != "div":
            return
        if self._depth:
            self._depth += 1
        elif "cell_output" in (dict(attrs).get("class") or "").split():
            self._depth = 1
            self.outputs.append("")

    def handle_endtag(self, tag):
        if tag == "div" and self._depth:
            self._depth -= 1

    def handle_data(self, data):
        if self._depth:
            self.outputs[-1] += data


def outputs(page: Path) -> list[str]:
    parser = _Outputs()
    parser.feed(page.read_text("utf-8"))
    return parser.outputs


def dumps_in(text: str) -> list[str]:
    # Indented lines quote another program's output (a launcher's error shows a worker's last
    # lines of stdout as they were): they are evidence, not the cell's own way of printing.
    own = "\n".join(line for line in text.splitlines() if not line.startswith("    "))
    return [name for name, pattern in DUMPS.items() if pattern.search(own)]


def test_the_patterns_catch_dumps():
    assert dumps_in("{'cpu(0)': 7, 'cpu(1)': 8}") == ["a printed dict"]
    assert dumps_in("Budget(epochs=2, subset=1024)") == ["an object's repr"]
    assert dumps_in("True\n") == ["a bare boolean"]
    assert dumps_in("loss 0.049314502626657486") == ["an unrounded float"]
    assert dumps_in("2.9802322387695312e-08") == ["an unrounded float"]
    assert dumps_in("epoch 1: loss 0.493, test acc 0.81, 2.35 s") == []
    assert dumps_in("largest relative difference: 3.0e-06") == []
    assert dumps_in("the same outputs: True") == []
    assert dumps_in("FusedAllreduce(small=1), numbers to sum on cpu(0): 350,592") == []
    assert dumps_in("Last lines of its stdout:\n    {\"rank\": 1, \"round\": 0}") == []




@pytest.mark.parametrize("lang", LANGS)
def test_outputs_are_readable(lang):
    pages = sorted((SITE / lang).glob("*.html"))
    assert pages, f"no built site in {SITE / lang}: run 'nox -s docs' first"
    problems = []
    seen = 0
    for page in pages:
        for text in outputs(page):
            seen += 1
            for name in dumps_in(text):
                problems.append(f"{lang}/{page.name}: {name}: {text.strip()[:120]!r}")
    assert seen > 50, f"only {seen} outputs found: has the page markup changed?"
    assert not problems, "\n".join(problems)
