"""tools/pdf.py's layout of code in Chromium, on a page made for it: a line longer than the
text wraps, and its further rows show that it goes on; nothing of the text changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.pdf import LINES_JS, OVERFLOW_JS

pytestmark = pytest.mark.browser

BOOK_CSS = (Path(__file__).parents[2] / "docs" / "_static" / "mgpu-book.css").read_text()
WIDTH_PX = 400
# A code block as Pygments writes it: tokens in spans, a string token over two lines, a blank
# line, an indented line longer than the block, and the newline that ends the block.
CODE = ('<span class="k">def</span> <span class="nf">f</span>():\n'
        '    <span class="s">"a string that\ngoes on"</span>\n'
        '\n'
        '    <span class="k">return</span> [' + ", ".join(["value"] * 16) + ']\n')
PAGE = f"""<!doctype html><html><head><style>{BOOK_CSS}
body {{ margin: 0; }}
article {{ width: {WIDTH_PX}px; }}
pre {{ white-space: pre-wrap; font: 12px/18px monospace; margin: 0; padding: 0; }}
</style></head><body><article class="bd-article"><section id="code"><pre>{CODE}</pre>
</section></article></body></html>"""


@pytest.fixture
def printed(page):
    page.set_viewport_size({"width": WIDTH_PX + 40, "height": 800})
    page.emulate_media(media="print")
    page.set_content(PAGE)
    return page


def _rows(page, line: int) -> list[dict]:
    """The rows of line ``line`` (0-based) of the block: each row's left edge and top."""
    return page.evaluate("""(n) => {
      const line = document.querySelectorAll('pre .mgpu-line')[n];
      const range = document.createRange();
      range.selectNodeContents(line);
      const rows = {};
      for (const r of range.getClientRects()) {
        const top = Math.round(r.top);
        if (r.width > 0) rows[top] = Math.min(rows[top] ?? 1e9, r.left);
      }
      return Object.entries(rows).map(([top, left]) => ({top: +top, left}));
    }""", line)


def test_each_line_is_a_block_and_the_text_is_unchanged(printed):
    assert printed.evaluate(LINES_JS) == 1  # one line wraps
    lines = printed.evaluate("() => [...document.querySelectorAll('pre .mgpu-line')]"
                             ".map(l => [l.textContent, l.getBoundingClientRect().height])")
    text = printed.evaluate("() => document.querySelector('pre').textContent")
    original = printed.evaluate("(html) => { const p = document.createElement('pre');"
                                " p.innerHTML = html; return p.textContent; }", CODE)
    # The same text, the newlines apart; no line for the block's last newline.
    assert [t for t, _ in lines] == original.rstrip("\n").split("\n")
    assert text == original.replace("\n", "")
    # One row each, the blank line too; two or more for the long one.
    assert [h for _, h in lines[:4]] == [18, 18, 18, 18]
    assert lines[4][1] >= 36
    # The string token goes on in the next line with its class.
    assert printed.evaluate("() => [...document.querySelectorAll('pre .s')]"
                            ".map(s => s.textContent)") == ['"a string that', 'goes on"']


def test_a_wrapped_line_goes_on_indented_with_a_bar(printed):
    printed.evaluate(LINES_JS)
    ch = printed.evaluate("""() => {
      const probe = document.createElement('span');
      probe.textContent = '0'.repeat(10);
      document.querySelector('pre').appendChild(probe);
      const width = probe.getBoundingClientRect().width / 10;
      probe.remove();
      return width;
    }""")
    rows = _rows(printed, 4)
    assert len(rows) >= 2
    # Its first row starts at the block's edge (its own four spaces are text); the next ones
    # two characters past its indentation.
    assert rows[0]["left"] == pytest.approx(0, abs=0.5)
    assert [r["left"] for r in rows[1:]] == [pytest.approx(6 * ch, abs=0.5)] * (len(rows) - 1)
    bars = printed.evaluate("""() => [...document.querySelectorAll('pre .mgpu-line')]
      .map(l => getComputedStyle(l, '::before').borderLeftStyle)""")
    assert bars == ["none"] * 4 + ["solid"]
    assert printed.evaluate(OVERFLOW_JS) == []


def test_overflow_names_a_block_wider_than_the_text(printed):
    """The check of tools/pdf.py (and of the printed chapter's browser test) can fail."""
    printed.evaluate("() => { document.querySelector('pre').style.whiteSpace = 'pre'; }")
    found = printed.evaluate(OVERFLOW_JS)
    assert [(where, what) for where, what, _ in found] == [("code", "pre")]


def test_an_empty_block_a_tab_and_an_id(printed):
    """An empty block stays as it was; a tab goes on to the next multiple of eight columns; an
    element that goes on over a newline keeps its id in its first line only."""
    printed.evaluate("""() => {
      const article = document.querySelector('article');
      article.innerHTML = '<pre id="empty"></pre>'
        + '<pre id="tab">   \\t' + 'x '.repeat(80) + '\\n</pre>'
        + '<pre id="ids"><span id="t">one\\ntwo</span>\\n</pre>';
    }""")
    assert printed.evaluate(LINES_JS) == 1
    assert printed.evaluate("() => document.querySelector('#empty').innerHTML") == ""
    hang = printed.evaluate("() => document.querySelector('#tab .mgpu-line')"
                            ".style.getPropertyValue('--mgpu-hang')")
    assert hang == "10ch"
    assert printed.evaluate("() => document.querySelectorAll('[id=\"t\"]').length") == 1
    assert printed.evaluate("() => document.getElementById('t').textContent") == "one"
    assert printed.evaluate("() => [...document.querySelectorAll('#ids .mgpu-line')]"
                            ".map(l => l.textContent)") == ["one", "two"]


def test_a_deep_indentation_keeps_the_first_row_at_the_edge(printed):
    """The hang is at most 40% of the width: a line indented further still starts at the
    block's edge, and its further rows at 40% of the width."""
    printed.evaluate("""() => {
      document.querySelector('article').innerHTML =
        '<pre>' + ' '.repeat(60) + 'y '.repeat(120) + '\\n</pre>';
    }""")
    assert printed.evaluate(LINES_JS) == 1
    rows = _rows(printed, 0)
    assert rows[0]["left"] == pytest.approx(0, abs=0.5)
    assert [r["left"] for r in rows[1:]] == [pytest.approx(0.4 * WIDTH_PX, abs=0.5)] * (
        len(rows) - 1)
