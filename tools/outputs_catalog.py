"""The catalog of the Chinese edition's cell outputs (docs/locales/zh_CN/outputs.po), checked
against the English edition as last built (docs/_build/html/en).

    python tools/outputs_catalog.py --missing   # outputs with English prose no template matches
    python tools/outputs_catalog.py --unused    # templates that match no output of the book
    python tools/outputs_catalog.py --draft     # po entries (numbers -> {}) for the missing ones

Run it with the docs venv (.nox/docs/bin/python): it uses docs/_ext/mgpu_outputs.py, the
extension that applies the catalog, and so Sphinx and Babel. The outputs are read from the HTML:
each line of a text output and the whole text of each table cell in a ``div.cell_output``. Each
page is checked with the templates it uses: its own (``msgctxt``, its docname) first, then those
of every page.

The module itself is plain Python (Sphinx and Babel are imported only by the functions that use
them): tests/site/test_published.py imports :data:`ENGLISH_RUN` and :data:`CODE` from here.
"""

from __future__ import annotations

import argparse
import html.parser
import re
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
CATALOG = DOCS / "locales" / "zh_CN" / "outputs.po"
HTML = DOCS / "_build" / "html" / "en"

# Four or more English words in a row, separated by spaces: a sentence or a phrase left
# untranslated (names joined without spaces, such as an operator list "Convolution,Pooling",
# are code). tests/site/test_published.py's tests of the Chinese pages use it.
ENGLISH_RUN = re.compile(r"[A-Za-z][\w'’-]*(?:[,;:]?\s+[A-Za-z][\w'’-]*){3,}")
# An English word of 3+ letters standing alone (not part of a name such as cpu(0), add_n,
# lenet.ckpt, float32).
WORD = re.compile(r"(?<![\w.(/'’-])[A-Za-z]{3,}(?![\w(./'’-])")
# Words that are names, not prose: units, hardware, libraries, values Python prints.
NAMES = {"amd", "epyc", "intel", "xeon", "cpu", "gpu", "gpus", "mxnet", "numpy", "lenet", "resnet",
         "true", "false", "none", "nan", "inf", "adam", "sgd", "pcie", "nvlink", "gbe", "ddr",
         "openmp", "horovod", "gloo", "kvstore", "dist_sync", "relu", "gluon", "python",
         "sha", "omp_num_threads", "mbit", "gbit", "avx", "amx", "sigkill", "pid", "ssh",
         "float", "bfloat", "mxlaunch", "horovodrun",
         # values of settings shown as they are set: DMLC_ROLE=worker, KVStore('local')
         "worker", "local",
         "beta"}  # a symbol of the cost model (beta = 3.18 GB/s)
# Code, not prose: an exception as Python prints it ("MXNetError: ..."; it stays as the program
# printed it), a JSON record, a call, a command line, a list of CPU flags ("avx512f: no").
# tests/site/test_published.py skips the output lines it matches.
CODE = re.compile(r"^\s*([A-Z]\w*(Error|Exception|Timeout)\b|\{.*\}$|[\w.]+\(.*\)$"
                  r"|(horovodrun|mpirun|python)\s+-|(\w+: (yes|no)\s*)+$"
                  # Gloo's errors, quoted as Horovod reported them
                  r"|Read error: |Timed out waiting )")
# Values of a draft's msgid: lists, devices, hexadecimal checksums, numbers.
VALUE = re.compile(r"\[[^\]]*\]|\b\w+\(\d+\)|\b[0-9a-f]{16}\b"
                   r"|(?<![\w.])[-+]?\d+(?:,\d{3})*(?:\.\d+)*(?:e[-+]?\d+)?(?![\w])")

sys.path.insert(0, str(DOCS / "_ext"))


class _Outputs(html.parser.HTMLParser):
    """The texts of a page's cell outputs: lines of ``pre``, whole cells of tables."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "wbr"}
    UNITS = {"pre", "th", "td", "caption"}

    def __init__(self) -> None:
        super().__init__()
        self.open: list[tuple[str, bool]] = []  # (tag, starts a cell output)
        self.inside = 0  # open cell outputs
        self.unit: tuple[str, int, list[str]] | None = None  # (tag, depth, text)
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.VOID:
            return
        output = "cell_output" in (dict(attrs).get("class") or "").split()
        self.open.append((tag, output))
        self.inside += output
        if self.inside and self.unit is None and tag in self.UNITS:
            self.unit = (tag, len(self.open), [])

    def handle_endtag(self, tag: str) -> None:
        if not any(t == tag for t, _ in self.open):
            return
        while True:
            closed, output = self.open.pop()
            self.inside -= output
            if self.unit is not None and len(self.open) < self.unit[1]:
                self._close_unit()
            if closed == tag:
                break

    def _close_unit(self) -> None:
        kind, _, parts = self.unit  # type: ignore[misc]
        text = "".join(parts)
        if kind == "pre":
            self.texts += [line for line in text.splitlines() if line.strip()]
        else:
            self.texts.append(" ".join(text.split()))
        self.unit = None

    def handle_data(self, data: str) -> None:
        if self.unit is not None:
            self.unit[2].append(data)


def output_texts(page: str) -> list[str]:
    """The output lines and table cells of an HTML page, in page order."""
    parser = _Outputs()
    parser.feed(page)
    return parser.texts


def is_prose(text: str) -> bool:
    """English prose: four words in a row, or a word of 3+ letters that is no name (names:
    :data:`NAMES`, and words with a capital inside, such as LeNet, KVStoreReduce, GPU)."""
    if CODE.match(text):
        return False
    return bool(ENGLISH_RUN.search(text)) or any(
        w.lower() not in NAMES and not re.search("[A-Z]", w[1:]) for w in WORD.findall(text))


def draft_msgid(text: str) -> str:
    """``text`` stripped, with its values (numbers, devices, lists, checksums) as ``{}``."""
    return VALUE.sub("{}", text.strip())


def book_outputs(html_dir: Path) -> dict[str, list[str]]:
    """The output texts of each page (its docname) of the edition in ``html_dir``, each once."""
    return {page.stem: list(dict.fromkeys(output_texts(page.read_text("utf-8"))))
            for page in sorted(html_dir.glob("*.html"))}


def missing(outputs: dict[str, list[str]], templates: list) -> dict[str, str]:
    """The outputs with English prose that no template of their page translates, with the
    page each is first on."""
    from mgpu_outputs import for_page, translate

    left: dict[str, str] = {}
    for page, texts in outputs.items():
        mine = for_page(templates, page)
        for text in texts:
            if is_prose(text) and translate(text, mine) is None:
                left.setdefault(text, page)
    return left


def unused(catalog: Path, outputs: dict[str, list[str]]) -> list[str]:
    """The templates of ``catalog`` that translate no output, as ``msgid`` or
    ``context: msgid``. A template is used when a page it applies to translates an output with
    it: a page's own template, or a longer one, takes first every output it matches."""
    from babel.messages.pofile import read_po
    from mgpu_outputs import PLACEHOLDER, compile_template, find, for_page

    with catalog.open("rb") as f:
        messages = [m for m in read_po(f) if m.id]
    # Every template, even one whose msgstr is empty or wrong (read_templates leaves those
    # out), in read_templates' order.
    ordered = sorted(messages, key=lambda m: -len(PLACEHOLDER.sub("", m.id)))
    templates = [compile_template(m.id, m.string or m.id, m.context or "") for m in ordered]
    used: set[tuple[str, str]] = set()
    for page, texts in outputs.items():
        mine = for_page(templates, page)
        for text in texts:
            found = find(text, mine)
            if found is not None:
                used.add((found[0].context, found[0].msgid))
    return [f"{m.context}: {m.id}" if m.context else m.id for m in messages
            if (m.context or "", m.id) not in used]


def po_entry(msgid: str, page: str) -> str:
    """A po entry to translate: ``msgid``, with the page it was found on as its reference."""
    escaped = msgid.replace("\\", "\\\\").replace('"', '\\"')
    return f'#: {page}\nmsgid "{escaped}"\nmsgstr ""\n'


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module's docstring): 1 when something is missing or unused."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--missing", action="store_true")
    what.add_argument("--unused", action="store_true")
    what.add_argument("--draft", action="store_true")
    parser.add_argument("--html", type=Path, default=HTML, help="an edition's built HTML")
    parser.add_argument("--catalog", type=Path, default=CATALOG)
    args = parser.parse_args(argv)
    from mgpu_outputs import read_templates

    outputs = book_outputs(args.html)
    templates = read_templates(args.catalog) if args.catalog.is_file() else []
    if args.unused:
        found = unused(args.catalog, outputs)
        for msgid in found:
            print(msgid)
        return 1 if found else 0
    left = missing(outputs, templates)
    if args.missing:
        for text, page in left.items():
            print(f"{page}: {text}")
        return 1 if left else 0
    drafts: dict[str, str] = {}
    for text, page in left.items():
        drafts.setdefault(draft_msgid(text), page)
    print("\n".join(po_entry(msgid, page) for msgid, page in drafts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
