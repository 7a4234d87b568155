"""Print the book: an edition's single-page build to one PDF, with headless Chromium.

``nox -s pdf`` and ``nox -s docs`` run it in a venv with the ``pdf`` extra (Playwright, pypdf)::

    python -m tools.pdf docs/_build/singlehtml/en/index.html docs/_build/pdf/mgpu-en.pdf

The page is laid out as printed (A4, ``_static/mgpu-book.css``) and checked first: a code block,
output, table, image or formula wider than the text fails, naming it; each line of code is set
as a block, so that a line that wraps shows where it goes on. The first printing gives
the page of every chapter and section (Chromium makes a named destination of every HTML id
that a link leads to); the table of contents printed alone with those numbers replaces its
placeholder pages. Last, the PDF gets bookmarks for the chapters and sections, and its title.
A report (pages, bytes, seconds, how many code lines wrap, the table of contents) is written
beside the PDF as JSON.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import time
from pathlib import Path

# The text's width on an A4 page with mgpu-book.css's margins (17 mm each side), in CSS pixels
# (96 per inch): the layout is checked at this width.
TEXT_WIDTH_PX = round((210 - 2 * 17) / 25.4 * 96)
TEXT_HEIGHT_PX = round((297 - 18 - 20) / 25.4 * 96)  # its height (18 mm above, 20 mm below)

# The table of contents' links, each as [level, title, id of the element it leads to]. A
# chapter's link leads to the empty <span id="document-..."> Sphinx puts before the chapter's
# section, which starts the new page: the link's target is the section's heading. A section's
# id is unique in its chapter only ("summary", "exercises"): the section of this chapter gets a
# unique id, and the link leads to its heading.
TOC_JS = """() => {
  let chapter = document;
  return [...document.querySelectorAll('.mgpu-book-toc a.reference.internal')].map(a => {
    const level = +((a.closest('li').className.match(/toctree-l(\\d)/) || [0, 1])[1]);
    const id = decodeURIComponent(a.hash.slice(1));
    let target = level === 1 ? document.getElementById(id)
                              : chapter.querySelector('#' + CSS.escape(id));
    if (target && target.tagName === 'SPAN' && !target.textContent.trim()
        && target.nextElementSibling) target = target.nextElementSibling;
    if (!target) return [level, a.textContent.trim(), ''];
    // The title is one flex item: its words, maths and code keep their spaces.
    const title = document.createElement('span');
    title.className = 'mgpu-toc-title';
    while (a.firstChild) title.appendChild(a.firstChild);
    a.appendChild(title);
    if (level === 1) chapter = target;
    else if (document.querySelectorAll('[id="' + CSS.escape(target.id) + '"]').length > 1) {
      target.id = chapter.id + '--' + target.id;
    }
    // The section's heading, not the section: a section's box may start at the foot of a page
    // whose next page holds its heading (headings do not end a page).
    const head = target.querySelector(':scope > h1, :scope > h2, :scope > h3, :scope > h4');
    if (head) {
      if (!head.id) head.id = target.id + '--title';
      target = head;
    }
    a.hash = '#' + target.id;
    return [level, a.textContent.trim(), target.id];
  });
}"""

# Page numbers into the table of contents: one span per link (a placeholder as wide as three
# digits in the first printing).
NUMBER_JS = """(numbers) => {
  document.querySelectorAll('.mgpu-book-toc a.reference.internal').forEach((a, i) => {
    let span = a.querySelector('.mgpu-toc-page');
    if (!span) { span = document.createElement('span'); span.className = 'mgpu-toc-page';
                 a.appendChild(span); }
    span.textContent = numbers[i];
  });
}"""

# What runs past the text's right edge in the printed layout: [section id, what, its start].
OVERFLOW_JS = """() => {
  const article = document.querySelector('article.bd-article');
  const edge = article.getBoundingClientRect().right + 1;
  const found = [];
  for (const el of article.querySelectorAll(
      'pre, table, img, div.cell_output, mjx-container[display="true"]')) {
    const box = el.getBoundingClientRect();
    if (box.width === 0) continue;
    if (box.right > edge || el.scrollWidth > el.clientWidth + 1) {
      const section = el.closest('section[id]');
      found.push([section ? section.id : '', el.tagName.toLowerCase(),
                  (el.textContent || el.getAttribute('src') || '').trim().slice(0, 60)]);
    }
  }
  return found;
}"""


def pdf_name(language: str | None) -> str:
    """The file name of an edition's PDF (in ``docs/_build/pdf/`` and the edition's
    ``_downloads/``).

    >>> pdf_name("zh_CN")
    'mgpu-zh_CN.pdf'
    """
    return f"mgpu-{language or 'en'}.pdf"


class PrintError(RuntimeError):
    """The page cannot be printed as a book (something is too wide, a link leads nowhere)."""


def _read(pdf: bytes):
    from pypdf import PdfReader

    return PdfReader(io.BytesIO(pdf))


def _destination_pages(reader) -> dict[str, int]:
    """The page (1-based) of each named destination of a PDF: Chromium names them by HTML id."""
    return {name.lstrip("/"): reader.get_destination_page_number(dest) + 1
            for name, dest in reader.named_destinations.items()}


# Everything the layout depends on, loaded: every image (the theme loads figures lazily, as
# they scroll into view: a printing would lay some out before they load), the web fonts, and
# MathJax's typesetting, which starts after the page loads.
READY_JS = """async () => {
  const images = [...document.images];
  images.forEach(img => { img.loading = 'eager'; });
  await Promise.all(images.map(img => img.decode().catch(() => null)));
  await document.fonts.ready;
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  return images.filter(img => !img.complete || !img.naturalWidth).map(img => img.src);
}"""

# Each line of each code block and output as a block of its own (span.mgpu-line, the tokens
# of a line that goes on over several kept as they were), so that a line longer than the text,
# which wraps (mgpu.css), shows where it goes on: its further rows are indented two characters
# past the line's own indentation, with a bar beside them (mgpu-book.css: .mgpu-wrapped). The
# text is unchanged but for the newlines, which the blocks replace. Returns how many lines
# wrap.
LINES_JS = """() => {
  const all = [];
  for (const pre of document.querySelectorAll('article pre')) {
    if (!pre.textContent.trim()) continue;
    const lines = [];
    const path = [];          // the elements open at this point of the block, outermost first
    let clones = [];          // their copies in the current line
    const copied = new Set(); // elements copied once already: their copies lose the id
    const copy = (el) => {
      const c = el.cloneNode(false);
      if (copied.has(el)) c.removeAttribute('id');
      copied.add(el);
      return c;
    };
    const newLine = () => {
      const line = document.createElement('span');
      line.className = 'mgpu-line';
      lines.push(line);
      clones = [];
      let tip = line;
      for (const el of path) {
        const c = copy(el);
        tip.appendChild(c);
        tip = c;
        clones.push(c);
      }
    };
    const tip = () => clones.length ? clones[clones.length - 1] : lines[lines.length - 1];
    const walk = (node) => {
      for (const child of [...node.childNodes]) {
        if (child.nodeType === Node.TEXT_NODE) {
          child.data.split('\\n').forEach((part, i) => {
            if (i > 0) newLine();
            if (part) tip().appendChild(document.createTextNode(part));
          });
        } else if (child.nodeType === Node.ELEMENT_NODE) {
          const c = copy(child);
          tip().appendChild(c);
          path.push(child); clones.push(c);
          walk(child);
          path.pop(); clones.pop();
        }
      }
    };
    newLine();
    walk(pre);
    if (lines.length > 1 && !lines[lines.length - 1].textContent) lines.pop();  // the last newline
    pre.replaceChildren(...lines);
    for (const line of lines) {
      let indent = 0;  // in columns: a tab goes on to the next multiple of eight
      for (const c of line.textContent.match(/^[ \\t]*/)[0]) {
        indent = c === ' ' ? indent + 1 : (Math.floor(indent / 8) + 1) * 8;
      }
      line.style.setProperty('--mgpu-hang', (indent + 2) + 'ch');
    }
    all.push([pre, lines]);
  }
  // Measured once everything is set: one layout, not one per line.
  const wrapped = [];
  for (const [pre, lines] of all) {
    const style = getComputedStyle(pre);
    const row = parseFloat(style.lineHeight) || 1.2 * parseFloat(style.fontSize);
    wrapped.push(...lines.filter(line => line.getBoundingClientRect().height > 1.5 * row));
  }
  wrapped.forEach(line => line.classList.add('mgpu-wrapped'));
  return wrapped.length;
}"""

# A code cell, output, code block or doctest shorter than 40% of a page is not split over two
# pages (a longer one may be: moved whole, it would leave the page before half empty).
KEEP_JS = """() => {
  for (const el of document.querySelectorAll(
      'div.cell_input, div.cell_output, div[class*="highlight-"]')) {
    if (el.getBoundingClientRect().height < 0.4 * {page_height}) el.style.breakInside = 'avoid';
  }
}""".replace("{page_height}", str(TEXT_HEIGHT_PX))


def _print(page) -> bytes:
    # The page size and margins are mgpu-book.css's @page rule; its footer has the numbers.
    return page.pdf(prefer_css_page_size=True, print_background=True)


def _add_bookmarks(writer, toc: list[list], pages: list[int], *, title: str, author: str,
                   language: str) -> None:
    """A bookmark per chapter (level 1) and section (level 2), the metadata and the language
    (``/Lang``, which screen readers and text search use)."""
    from pypdf.generic import NameObject, TextStringObject

    parents: dict[int, object] = {}
    for (level, text, _), page in zip(toc, pages):
        parent = parents.get(level - 1)
        parents[level] = writer.add_outline_item(title=text, page_number=page - 1, parent=parent)
    writer.add_metadata({"/Title": title, "/Author": author, "/Creator": "mgpu tools/pdf.py"})
    writer.page_mode = "/UseOutlines"
    writer.root_object[NameObject("/Lang")] = TextStringObject(language)


def _print_numbered(page, toc: list[list], html: Path):
    """The book (a pypdf ``PdfWriter``), and the page of each entry of its table of contents.

    The book is printed with placeholders in its table of contents, which gives the page of each
    entry; then the title page and the table alone, with the numbers, whose pages' drawing and
    its resources (not their links, which lead to the book's destinations) take the
    placeholders' place. Printing the whole book again would not do: Chromium may break a later
    page differently when only the digits of the table changed (a heading at the foot of a page
    in chapter 9), which makes the numbers wrong again. The numbers' boxes have a fixed width,
    so the table keeps its lines and pages.
    """
    from pypdf import PdfWriter
    from pypdf.generic import NameObject

    page.evaluate(NUMBER_JS, ["888"] * len(toc))
    body = _read(_print(page))
    where = _destination_pages(body)
    pages = [where.get(target) for _, _, target in toc]
    if None in pages:
        lost = [text for (_, text, _), n in zip(toc, pages) if n is None]
        raise PrintError(f"{html}: no destination in the PDF for {lost}")
    first = where["mgpu-book-toc"]
    last = where[page.evaluate("() => document.querySelector('article section[id]').id")] - 1
    page.evaluate(NUMBER_JS, [str(n) for n in pages])
    page.evaluate("() => { document.querySelector('article.bd-article').style.display = 'none'; }")
    try:
        contents = _read(_print(page))
    finally:
        page.evaluate("() => { document.querySelector('article.bd-article').style.display = ''; }")
    if len(contents.pages) != last:
        raise PrintError(f"{html}: the table of contents changed its length when its page "
                         "numbers were written (_static/mgpu-book.css: .mgpu-toc-page)")
    writer = PdfWriter(clone_from=body)
    for index in range(first - 1, last):
        target, source = writer.pages[index], contents.pages[index]
        for key in ("/Contents", "/Resources"):
            target[NameObject(key)] = source.raw_get(key).clone(writer)
    return writer, pages


def print_book(html: Path, out: Path, *, chromium: Path) -> dict:
    """Print ``html`` (a single-page edition) to ``out``; return the report (also written as
    ``out`` with the suffix ``.json``)."""
    from playwright.sync_api import sync_playwright

    start = time.perf_counter()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium))
        try:
            page = browser.new_page(viewport={"width": TEXT_WIDTH_PX, "height": 1000})
            page.emulate_media(media="print")
            page.goto(html.resolve().as_uri(), wait_until="load")
            if not page.evaluate("() => !!(document.querySelector('.mgpu-title')"
                                 " && document.getElementById('mgpu-book-toc'))"):
                raise PrintError(f"html: {html} is not a single-page edition of the book (build "
                                 "it with sphinx-build -b singlehtml: nox -s pdf)")
            broken = page.evaluate(READY_JS)
            if broken:
                raise PrintError(f"{html}: images that do not load: {broken}")
            wrapped = page.evaluate(LINES_JS)
            page.evaluate(KEEP_JS)
            title = page.evaluate("() => document.querySelector('.mgpu-title').textContent.trim()")
            author = page.evaluate(
                "() => document.querySelector('.mgpu-authors').textContent.trim()")
            language = page.evaluate("() => document.documentElement.lang || 'en'")
            too_wide = page.evaluate(OVERFLOW_JS)
            if too_wide:
                listed = "\n".join(f"  #{where}: <{what}> {text!r}"
                                    for where, what, text in too_wide)
                raise PrintError(f"{html}: {len(too_wide)} element(s) wider than the printed "
                                 f"text ({TEXT_WIDTH_PX} px); shorten or wrap them:\n{listed}")
            toc = page.evaluate(TOC_JS)
            missing = [text for _, text, target in toc if not target]
            if missing:
                raise PrintError(f"{html}: table-of-contents entries lead nowhere: {missing}")
            writer, pages = _print_numbered(page, toc, html)
        finally:
            browser.close()
    _add_bookmarks(writer, toc, pages, title=title, author=author, language=language)
    # The placeholder pages' drawings are referenced by nothing now (one pass: objects that
    # only refer to each other, such as the page tree the clone replaced, stay; a few KB).
    writer.compress_identical_objects(remove_duplicates=False, remove_unreferenced=True)
    buffer = io.BytesIO()
    writer.write(buffer)
    pdf = buffer.getvalue()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(pdf)
    tmp.replace(out)

    report = {
        "pdf": out.name,
        "pages": len(writer.pages),
        "bytes": len(pdf),
        "seconds": round(time.perf_counter() - start, 1),
        "wrapped_code_lines": wrapped,
        "toc": [{"level": level, "title": text, "page": n}
                for (level, text, _), n in zip(toc, pages)],
    }
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, ensure_ascii=False, indent=1) + "\n", "utf-8")
    tmp.replace(out.with_suffix(".json"))
    return report


def main(argv: list[str] | None = None) -> int:
    """The command line: ``python -m tools.pdf HTML PDF [--chromium PATH]``; 0 when printed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("html", type=Path, help="the single-page edition's index.html")
    parser.add_argument("pdf", type=Path, help="the PDF to write")
    parser.add_argument("--chromium", type=Path, default=Path("/usr/bin/chromium"),
                        help="the Chromium binary (default: Debian's /usr/bin/chromium)")
    args = parser.parse_args(argv)
    # pypdf warns about the object count of Chromium's PDFs ("exceeds defined trailer size"),
    # which it reads all the same.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    if not args.html.is_file():
        parser.error(f"html: {args.html} is not a file: build the single-page edition first")
    if not args.chromium.is_file():
        parser.error(f"--chromium: {args.chromium} is not a file: apt-get install chromium, or "
                     "name a Chromium binary")
    try:
        report = print_book(args.html, args.pdf, chromium=args.chromium)
    except PrintError as err:
        parser.exit(1, f"tools.pdf: {err}\n")
    print(f"{args.pdf}: {report['pages']} pages, {report['bytes'] / 1e6:.1f} MB, "
          f"{report['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
