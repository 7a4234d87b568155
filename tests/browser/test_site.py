"""The published book as a reader sees it, in headless Chromium (run with `nox -s browser`)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tools.pdf import OVERFLOW_JS

pytestmark = pytest.mark.browser  # deselected by default; `nox -s browser` runs -m browser

DOCS = Path(__file__).parents[2] / "docs"
SHOTS = DOCS / "_build" / "screenshots"
SITE = Path(os.environ.get("MGPU_SITE") or DOCS / "_build" / "html")  # as tests/browser/conftest
LANGS = ("en", "zh_CN")
PAGES = sorted(p.stem for p in DOCS.glob("*.md") if p.stem != "README")
EXECUTED = sorted(p.stem for p in DOCS.glob("*.md") if "{code-cell}" in p.read_text("utf-8"))
DRAWS = re.compile(r"\bmgpu\.(plot_\w+|figure|draw_\w+)\(")  # the book's plotting calls
WITH_FIGURES = sorted(p.stem for p in DOCS.glob("*.md") if DRAWS.search(p.read_text("utf-8")))


def test_the_pages_with_figures_are_found():
    """The chapters that draw figures (the check below must not select nothing)."""
    assert len(WITH_FIGURES) >= 6, WITH_FIGURES


def _open(page, url):
    response = page.goto(url, wait_until="networkidle")
    assert response is not None and response.ok, f"{url}: HTTP {response and response.status}"
    return response


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", PAGES)
def test_page_renders_offline(page, site_url, lang, name):
    _open(page, f"{site_url}/{lang}/{name}.html")
    assert page.locator("article h1").first.inner_text().strip(), "page has no title"
    if name in EXECUTED:  # its results: cell outputs, or values glued into the text
        shown = page.locator(".cell_output").count() + page.locator(".pasted-text").count()
        assert shown > 0, "executed page shows no output and no glued value"
        assert page.locator('.pasted-text:text-is("")').count() == 0, "an empty glued value"
    sizes = page.eval_on_selector_all(
        "article img", "els => els.map(e => [e.currentSrc, e.complete, e.naturalWidth])"
    )
    broken = [src for src, complete, width in sizes if not (complete and width > 0)]
    assert not broken, f"images that did not load: {broken}"
    if name in WITH_FIGURES:
        assert len(sizes) > 0, "page draws figures but shows none"
    assert not page.foreign_requests, f"requests to other hosts: {page.foreign_requests}"
    errors = [e for e in page.console_errors if not e.startswith("Failed to load resource")]
    assert not errors, f"console errors: {page.console_errors}"
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{lang}-{name}.png"), full_page=True)


def test_root_index_sends_readers_to_an_edition(page, site_url):
    _open(page, f"{site_url}/index.html")
    page.wait_for_url("**/index.html")
    assert "/en/" in page.url or "/zh_CN/" in page.url


def test_root_index_without_scripts_offers_each_edition_and_its_pdf(browser, site_url):
    """Without JavaScript the root page stays: it links both editions and both PDFs; a click
    on a PDF's link opens that edition's book."""
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(f"{site_url}/index.html")
        assert page.url == f"{site_url}/index.html"
        assert page.locator('a[href$="/index.html"]').count() == 2
        for lang in ("en", "zh_CN"):
            url = f"{site_url}/{lang}/_downloads/mgpu-{lang}.pdf"
            with page.expect_response(url) as response:
                page.locator(f'a[type="application/pdf"][href^="{lang}/"]').click()
            assert response.value.ok
            assert response.value.headers["content-type"] == "application/pdf"
            # (the body the page holds is Chromium's viewer; the file is what the server sends)
            assert page.request.get(url).body()[:5] == b"%PDF-"
            page.goto(f"{site_url}/index.html")
    finally:
        context.close()


CJK = "[\u4e00-\u9fff]"


def _figures(page, url):
    """``(alt, src)`` of every figure image of a page, in page order."""
    _open(page, url)
    return page.eval_on_selector_all(
        "article figure img", "els => els.map(e => [e.getAttribute('alt') || '', e.currentSrc])")


@pytest.mark.parametrize("name", ["multi-device-gluon", "performance"])
def test_chinese_figures_are_the_chinese_ones(page, site_url, name):
    """The Chinese page shows the figures drawn with Chinese words, not the English PNGs."""
    import re

    en = _figures(page, f"{site_url}/en/{name}.html")
    zh = _figures(page, f"{site_url}/zh_CN/{name}.html")
    assert zh and len(zh) == len(en), f"figures: {len(en)} in English, {len(zh)} in Chinese"
    for (alt_en, src_en), (alt_zh, src_zh) in zip(en, zh, strict=True):
        assert re.search(CJK, alt_zh), f"the Chinese figure's alt text is not Chinese: {alt_zh!r}"
        assert not re.search(CJK, alt_en), f"the English figure's alt text is Chinese: {alt_en!r}"
        png_en = page.request.get(src_en).body()
        png_zh = page.request.get(src_zh).body()
        assert png_en != png_zh, f"the Chinese page shows the English image {src_en}"
    # Each edition numbers only its own figures: the same numbers in both (hidden copies in
    # `{only}` blocks take none).
    numbers = {}
    for lang in LANGS:
        _open(page, f"{site_url}/{lang}/{name}.html")
        numbers[lang] = [re.sub(r"[^0-9.]", "", n).strip(".") for n in page.eval_on_selector_all(
            "article figure .caption-number", "els => els.map(e => e.textContent)")]
    assert numbers["en"] == numbers["zh_CN"] and len(set(numbers["en"])) == len(en), numbers


def test_chinese_result_table_has_chinese_headers(page, site_url):
    """A result table of the Chinese edition: its headers and rows are Chinese, its values glued."""
    import re

    _open(page, f"{site_url}/zh_CN/multi-device-gluon.html")
    tables = page.locator("article table")
    assert tables.count() > 0, "no table on the page"
    found = None
    for i in range(tables.count()):
        table = tables.nth(i)
        if table.locator(".pasted-text").count() >= 8:  # the results table: glued values
            found = table
            break
    assert found is not None, "no result table with glued values"
    headers = found.locator("th").all_inner_texts()
    assert headers and all(re.search(CJK, h) for h in headers if re.search("[A-Za-z]{3}", h)), \
        f"English headers in the Chinese table: {headers}"
    assert sum(bool(re.search(CJK, h)) for h in headers) >= len(headers) // 2, headers
    first_column = [r.strip() for r in found.locator("tbody tr td:first-child").all_inner_texts()]
    assert all(re.search(CJK, c) for c in first_column), first_column


@pytest.mark.parametrize("name", ["multi-device-gluon", "heterogeneous", "auto-parallelism",
                                  "batch-size", "engine", "kvstore", "horovod", "status"])
def test_chinese_outputs_carry_no_english_sentences(page, site_url, name):
    """The rendered outputs of a Chinese page (glued text, figure captions) are Chinese: no run
    of four or more English words."""
    import re

    _open(page, f"{site_url}/zh_CN/{name}.html")
    texts = page.eval_on_selector_all(
        "article .pasted-text, article figcaption",
        "els => els.map(e => e.innerText)")
    sentence = re.compile(r"\b[A-Za-z]{2,}(?:[ ,]+[a-z]{2,}){3,}")
    english = [t for t in texts if sentence.search(t.replace("ResNet-18", ""))]
    assert not english, f"English in the Chinese page's outputs: {english[:3]}"


def test_chinese_theme_labels(page, site_url):
    """The light/dark switcher, the footer's author line, the sidebar toggles' tooltips and the
    search box are Chinese in the Chinese edition."""
    _open(page, f"{site_url}/zh_CN/index.html")
    label = page.locator(".theme-switch-button").first.get_attribute("aria-label")
    assert label == "颜色模式", label
    footer = page.locator("footer.bd-footer-content").first.inner_text()
    assert "mgpu 项目组" in footer and "版权所有" in footer, footer
    assert not any(w in footer for w in ("authors", "By ", "Copyright")), footer
    _open(page, f"{site_url}/zh_CN/status.html")  # a page with sections: both sidebar toggles
    for button in (".primary-toggle", ".secondary-toggle"):  # sphinx-book-theme's sidebars
        toggle = page.locator(f".bd-header-article {button}").first
        # Bootstrap moves a tooltip's title to data-bs-original-title once it sets it up.
        tip = toggle.get_attribute("title") or toggle.get_attribute("data-bs-original-title")
        label = toggle.get_attribute("aria-label")
        assert tip and re.search(CJK, tip) and label == tip, (button, tip, label)
    placeholder = page.locator(".bd-search input").first.get_attribute("placeholder")
    assert re.search(CJK, placeholder), placeholder


def test_chinese_execution_table_has_chinese_headers(page, site_url):
    _open(page, f"{site_url}/zh_CN/status.html")
    headers = page.locator("article table").last.locator("th").all_inner_texts()
    assert headers and all(re.search(CJK, h) for h in headers), headers


def test_code_has_copy_buttons_and_outputs_do_not(page, site_url):
    _open(page, f"{site_url}/en/multi-device-scratch.html")
    page.wait_for_selector(".cell_input button.copybtn", state="attached")
    assert page.locator(".cell_input button.copybtn").count() > 0
    assert page.locator(".cell_output button.copybtn").count() == 0


@pytest.mark.parametrize("lang", LANGS)
def test_status_page_reports_versions_and_execution(page, site_url, lang):
    _open(page, f"{site_url}/{lang}/status.html")
    assert page.locator("article table").count() >= 2, "versions table and execution table"
    assert page.locator("article").inner_text().count("1.9.1") >= 1, "MXNet's version"


def test_missing_page_gets_the_bilingual_404(page, site_url):
    response = page.goto(f"{site_url}/en/no-such-page.html")
    page.console_errors.clear()  # the 404 itself is the point here
    assert response is not None and response.status == 404
    text = page.locator("body").inner_text()
    assert "Page not found" in text and "页面不存在" in text
    page.locator("a[hreflang=en]").click()
    page.wait_for_load_state("networkidle")
    assert page.url == f"{site_url}/en/index.html"


# --- a reader's actions, at a laptop's and a phone's window size ------------------------------
# Each test below clicks (or taps) what a reader would and asserts what it does, not only that a
# control exists: the table of contents of both editions once opened on no phone and closed on
# no desktop while every test that looked for the toggle passed.
READ = "multi-device-scratch"  # a chapter with sections, code, outputs and figures
SEED_CHAPTERS = ("multi-device-scratch", "multi-device-gluon")
WITH_TABLES = sorted(p.stem for p in DOCS.glob("*.md")
                     if re.search(r"^\|.*\|\s*$", p.read_text("utf-8"), re.M)
                     or "Table.from_" in p.read_text("utf-8"))


def glossary_terms_zh() -> list[str]:
    """The Chinese column of the glossary's table, each run of Chinese characters a term
    (延后执行（惰性求值） gives two)."""
    rows = [line for line in (DOCS / "glossary.md").read_text("utf-8").splitlines()
            if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    column = header.index("Chinese")
    terms = []
    for row in rows[2:]:
        for term in re.findall(CJK + "+", row.strip("|").split("|")[column]):
            if term not in terms:
                terms.append(term)
    return terms


def _press(page, locator):
    """Click (desktop) or tap (phone) ``locator`` where the reader sees it: at the centre of its
    (first) box, which must be on screen and not covered by anything else."""
    locator.wait_for(state="visible")
    # The first line's box: a link that wraps onto two lines has a bounding box whose centre
    # may be on other text.
    box = locator.evaluate("el => { const r = el.getClientRects()[0];"
                           " return r && {x: r.x, y: r.y, width: r.width, height: r.height}; }")
    assert box and box["width"] > 0 and box["height"] > 0, "nothing to press"
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    viewport = page.viewport_size
    assert 0 <= x <= viewport["width"] and 0 <= y <= viewport["height"], f"off screen: {box}"
    on_top = locator.evaluate(
        "(el, [x, y]) => { const top = document.elementFromPoint(x, y);"
        " return top === el || el.contains(top); }", [x, y])
    assert on_top, "another element covers it"
    if getattr(page, "size", "desktop") == "phone":
        page.touchscreen.tap(x, y)
    else:
        page.mouse.click(x, y)


def _on_screen(locator) -> bool:
    """Visible, with a box of some size that overlaps the window."""
    if not locator.is_visible():
        return False
    box = locator.bounding_box()
    if not box or box["width"] < 10 or box["height"] < 10:
        return False
    view = locator.page.viewport_size
    return box["x"] + box["width"] > 0 and box["x"] < view["width"] and box["y"] < view["height"]


def _settles(page, check, timeout=3000) -> bool:
    """Whether ``check()`` becomes true within ``timeout`` ms (the themes animate their sidebars
    and dialogs: a closing dialog stays on screen for its transition)."""
    for _ in range(timeout // 100):
        if check():
            return True
        page.wait_for_timeout(100)
    return check()


def _toc(page):
    """The table of contents' link to the Gluon chapter, wherever the theme puts it (the sidebar,
    or the dialog it opens on a narrow screen)."""
    return page.locator(".bd-sidebar-primary nav.bd-docs-nav a[href='multi-device-gluon.html'], "
                        "#pst-primary-sidebar-modal nav.bd-docs-nav "
                        "a[href='multi-device-gluon.html']").first


@pytest.mark.parametrize("lang", LANGS)
def test_the_table_of_contents_opens_and_closes(reader, site_url, lang):
    """The toggle at the top left shows and hides the table of contents: hidden on a phone until
    tapped (then in a dialog, which a tap outside or Escape closes), shown on a desktop until
    clicked (then the article takes the room), and back again."""
    _open(reader, f"{site_url}/{lang}/{READ}.html")
    toggles = reader.locator(".primary-toggle")
    visible = [i for i in range(toggles.count()) if toggles.nth(i).is_visible()]
    assert len(visible) == 1, f"{len(visible)} visible sidebar toggles"
    toggle = toggles.nth(visible[0])
    toc = _toc(reader)
    article = reader.locator("article.bd-article")
    if reader.size == "phone":
        assert not _on_screen(toc), "the table of contents shows before the toggle is tapped"
        for close in ("outside", "Escape"):
            _press(reader, toggle)
            reader.wait_for_function("document.getElementById('pst-primary-sidebar-modal').open")
            assert _settles(reader, lambda: _on_screen(toc)), "the toggle showed no contents"
            if close == "Escape":
                reader.keyboard.press("Escape")
            else:  # a tap on the page beside the dialog
                reader.touchscreen.tap(reader.viewport_size["width"] - 8,
                                       reader.viewport_size["height"] // 2)
            reader.wait_for_function("!document.getElementById('pst-primary-sidebar-modal').open")
            assert _settles(reader, lambda: not _on_screen(toc)), f"still shown after {close}"
        # and the reader can go to another chapter from it
        _press(reader, toggle)
        reader.wait_for_function("document.getElementById('pst-primary-sidebar-modal').open")
        _press(reader, _toc(reader))
        reader.wait_for_url("**/multi-device-gluon.html")
    else:
        assert _on_screen(toc), "the table of contents is not shown on a desktop"
        width = article.bounding_box()["width"]
        _press(reader, toggle)
        assert _settles(reader, lambda: not _on_screen(toc)), "the toggle did not hide it"
        reader.wait_for_timeout(400)  # the theme's 0.2 s slide
        wider = article.bounding_box()["width"]
        assert wider > width + 100, f"the article did not take the room: {width} -> {wider}"
        _press(reader, toggle)
        assert _settles(reader, lambda: _on_screen(toc)), "the toggle did not bring it back"
    assert not reader.console_errors, reader.console_errors


@pytest.mark.parametrize("lang", LANGS)
def test_tooltips_do_not_stick(reader, site_url, lang):
    """A tooltip goes away once the reader has pressed its button and moved on; a phone shows
    none (a tap would leave it over the page)."""
    _open(reader, f"{site_url}/{lang}/{READ}.html")
    toggle = reader.locator(".bd-header-article .primary-toggle").first
    shown = reader.locator(".tooltip.show")
    if reader.size == "desktop":
        toggle.hover()
        reader.wait_for_timeout(900)  # the theme's 0.5 s delay
        assert shown.count() == 1, "no tooltip on hover (the check below would prove nothing)"
        _press(reader, toggle)
        reader.mouse.move(700, 600)
    else:
        _press(reader, toggle)
        reader.keyboard.press("Escape")
        _press(reader, reader.locator(".bd-header-article .theme-switch-button").first)
        reader.touchscreen.tap(200, 600)
    reader.wait_for_timeout(900)
    assert shown.count() == 0, f"a tooltip stayed: {shown.all_inner_texts()}"


@pytest.mark.parametrize("lang", LANGS)
def test_one_search_box_that_finds(reader, site_url, lang):
    """One way to search is on screen (the sidebar's field on a desktop, the magnifier on a
    phone), and what the reader types there finds the chapters."""
    _open(reader, f"{site_url}/{lang}/{READ}.html")
    fields = reader.locator(".search-button-field, form.bd-search")
    buttons = reader.locator(".search-button")
    n_fields = sum(_on_screen(fields.nth(i)) for i in range(fields.count()))
    n_buttons = sum(_on_screen(buttons.nth(i)) for i in range(buttons.count()))
    if reader.size == "desktop":
        assert (n_fields, n_buttons) == (1, 0), f"{n_fields} search fields, {n_buttons} buttons"
        opener = next(fields.nth(i) for i in range(fields.count()) if _on_screen(fields.nth(i)))
    else:
        assert (n_fields, n_buttons) == (0, 1), f"{n_fields} search fields, {n_buttons} buttons"
        opener = next(buttons.nth(i) for i in range(buttons.count())
                      if _on_screen(buttons.nth(i)))
    query = "allreduce" if lang == "en" else "参数服务器"
    _press(reader, opener)
    box = reader.locator("#pst-search-dialog input[type=search]")
    box.wait_for(state="visible")
    box.fill(query)
    box.press("Enter")
    reader.wait_for_url("**/search.html?q=*")
    found = _results(reader)
    expected = {"multi-device-scratch", "multi-device-gluon"} if lang == "en" else {
        "multi-machine", "glossary"}
    assert expected <= found, found


def _results(page) -> set[str]:
    """The pages the search page lists, once it has finished."""
    page.wait_for_selector("#search-results .search-summary", timeout=20000)
    links = page.eval_on_selector_all("#search-results ul.search li a",
                                      "els => els.map(e => e.getAttribute('href'))")
    return {href.split("/")[-1].split(".html")[0] for href in links}


def _search(page, site_url, lang, query) -> set[str]:
    from urllib.parse import quote

    _open(page, f"{site_url}/{lang}/search.html?q={quote(query)}")
    return _results(page)


@pytest.mark.parametrize("query,pages", [
    ("allreduce", {"multi-device-scratch", "multi-device-gluon", "horovod"}),
    ("BatchNorm", {"batch-size", "multi-device-gluon"}),
    ("parameter server", {"multi-machine", "kvstore"}),
])
def test_english_search_finds_the_chapters(desktop, site_url, query, pages):
    found = _search(desktop, site_url, "en", query)
    assert pages <= found, found


def _article_text(path: Path) -> str:
    import html as html_module

    text = path.read_text("utf-8")
    match = re.search(r'<article class="bd-article"[^>]*>(.*?)</article>', text, re.S)
    return html_module.unescape(re.sub(r"<[^>]+>", "", match.group(1))) if match else ""


def test_chinese_search_finds_every_glossary_term(desktop, site_url):
    """Every Chinese term of the glossary, typed as it is, finds the glossary and every chapter
    whose text uses it (jieba once split 参数服务器, 学习率 or 数据并行 when indexing, and the
    search, which does not split a query, found none of them)."""
    site = SITE / "zh_CN"
    texts = {p.stem: _article_text(site / f"{p.stem}.html") for p in DOCS.glob("*.md")
             if (site / f"{p.stem}.html").is_file()}
    terms = glossary_terms_zh()
    assert len(terms) >= 40 and "全归约" in terms, terms
    missed = {}
    for term in terms:
        found = _search(desktop, site_url, "zh_CN", term)
        using = {page for page, text in texts.items() if term in text}
        if not ({"glossary"} | using) <= found:
            missed[term] = sorted(({"glossary"} | using) - found)
    assert not missed, f"pages the search does not find: {missed}"
    # A query that is a sentence, not a term: split into the index's words.
    assert "multi-machine" in _search(desktop, site_url, "zh_CN", "参数服务器的作用")
    assert not desktop.console_errors, desktop.console_errors


@pytest.mark.parametrize("lang", LANGS)
def test_the_language_switch_keeps_the_page_and_the_section(reader, site_url, lang):
    """The switch leads to the same page of the other edition, at the section being read."""
    other = "zh_CN" if lang == "en" else "en"
    _open(reader, f"{site_url}/{lang}/{READ}.html#the-model")
    _press(reader, reader.locator("a.mgpu-lang-switch").first)
    reader.wait_for_url(f"{site_url}/{other}/{READ}.html#the-model")
    reader.wait_for_load_state("networkidle")
    assert reader.locator("html").get_attribute("lang").startswith(other[:2])
    top = reader.locator("#the-model").bounding_box()["y"]
    assert 0 <= top < reader.viewport_size["height"] / 2, f"the section is not in view: {top}"
    # Scrolled by the reader (no address to go by): the section whose heading passed the top.
    target = reader.locator("#summary h2, #summary h1").first
    target.evaluate("el => window.scrollTo(0, el.getBoundingClientRect().top + window.scrollY"
                    " - 80)")
    reader.wait_for_timeout(300)
    _press(reader, reader.locator("a.mgpu-lang-switch").first)
    reader.wait_for_url(f"{site_url}/{lang}/{READ}.html#summary")
    # From the top of a page: no section.
    _open(reader, f"{site_url}/{lang}/index.html")
    _press(reader, reader.locator("a.mgpu-lang-switch").first)
    reader.wait_for_url(f"{site_url}/{other}/index.html")


@pytest.mark.parametrize("lang", LANGS)
def test_downloads_are_valid_files(desktop, site_url, lang, tmp_path):
    """What the header's menus and the index offer: the chapter's notebook (JSON with cells),
    the zip of all notebooks (it opens; its README gives the commands) and the source archive
    (a tar with the package), and the README page."""
    import io
    import json
    import tarfile
    import zipfile

    _open(desktop, f"{site_url}/{lang}/{READ}.html")
    # The chapter's notebook, from the download menu.
    _press(desktop, desktop.locator(".dropdown-download-buttons > button"))
    link = desktop.locator(".dropdown-download-buttons a.btn-download-notebook-button")
    link.wait_for(state="visible")
    notebook = json.loads(desktop.request.get(link.evaluate("a => a.href")).body())
    assert notebook["nbformat"] == 4 and any(c["cell_type"] == "code" for c in notebook["cells"])
    desktop.keyboard.press("Escape")
    # The source archive and the README, from the source menu (its label in the edition's
    # language).
    button = desktop.locator(".mgpu-source-button")
    assert button.inner_text().strip() == ("Source" if lang == "en" else "源代码")
    _press(desktop, button)
    archive_link = desktop.locator("a.mgpu-source-archive")
    archive_link.wait_for(state="visible")
    with desktop.expect_download() as download:
        _press(desktop, archive_link)
    path = download.value.path()
    with tarfile.open(path, "r:gz") as tar:
        names = set(tar.getnames())
    assert {"mgpu/pyproject.toml", "mgpu/README.md", "mgpu/src/mgpu/__init__.py",
            f"mgpu/docs/{READ}.md"} <= names, sorted(names)[:20]
    _press(desktop, button)
    _press(desktop, desktop.locator("a.mgpu-source-readme"))
    desktop.wait_for_url("**/_downloads/README.html")
    assert "mgpu" in desktop.locator("h1").first.inner_text()
    # The zip of all notebooks, from the index page.
    _open(desktop, f"{site_url}/{lang}/index.html")
    zip_link = desktop.locator(f"article a[href$='mgpu-notebooks-{lang}.zip']").first
    zip_link.scroll_into_view_if_needed()
    with desktop.expect_download() as download:
        _press(desktop, zip_link)
    with zipfile.ZipFile(io.BytesIO(Path(download.value.path()).read_bytes())) as z:
        names = z.namelist()
        readme = z.read(f"mgpu-notebooks-{lang}/README.md").decode("utf-8")
        notebooks = [n for n in names if n.endswith(".ipynb")]
        assert notebooks and all(json.loads(z.read(n))["cells"] for n in notebooks)
    for command in ("tar xzf mgpu-source.tar.gz", "pip install -e '.[cpu,plot]' jupyter",
                    "jupyter lab", f"cd ../mgpu-notebooks-{lang}/notebooks"):
        assert command in readme, (command, readme)


@pytest.mark.parametrize("lang", LANGS)
def test_a_figure_opens_at_full_size(reader, site_url, lang):
    """Every figure's image is a link to its file; a click (a tap) on it shows the image alone,
    at its own size, which is larger than on the page."""
    _open(reader, f"{site_url}/{lang}/multi-device-gluon.html")
    images = reader.locator("article figure img")
    assert images.count() > 0
    pairs = images.evaluate_all(
        "els => els.map(e => [e.currentSrc, e.closest('a') ? e.closest('a').href : null,"
        " e.getAttribute('alt') || ''])")
    for src, href, alt in pairs:
        assert href == src, f"the figure {src} links to {href}"
        assert alt.strip(), f"the figure {src} has no alt text"
    first = images.first
    first.scroll_into_view_if_needed()
    shown_width = first.bounding_box()["width"]
    natural = first.evaluate("e => e.naturalWidth")
    _press(reader, first)
    reader.wait_for_url(pairs[0][0])
    assert reader.evaluate("document.images.length") == 1
    assert reader.evaluate("document.images[0].naturalWidth") == natural
    assert natural > shown_width, (natural, shown_width)


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", SEED_CHAPTERS)
def test_no_code_block_overflows_at_1366(desktop, site_url, lang, name):
    """Every code block and output of the seed chapters fits its box in the 1366-px layout."""
    _open(desktop, f"{site_url}/{lang}/{name}.html")
    over = desktop.eval_on_selector_all("article pre", """els => els
        .filter(e => e.scrollWidth > e.clientWidth + 1)
        .map(e => e.textContent.split('\\n').reduce((a, b) => b.length > a.length ? b : a))""")
    assert not over, f"{len(over)} blocks overflow; their longest lines: {over[:5]}"


TABLES_FIT = """els => els.map(table => {
    const article = table.closest('article');
    const limit = article.getBoundingClientRect().right + 1;
    let box = table.parentElement, scroller = null;
    while (box && box !== article) {
        const style = getComputedStyle(box);
        if (['auto', 'scroll'].includes(style.overflowX)) { scroller = box; break; }
        box = box.parentElement;
    }
    const right = table.getBoundingClientRect().right;
    const fits = right <= limit;
    const wrapped = scroller !== null && scroller.getBoundingClientRect().right <= limit
        && scroller.scrollWidth > scroller.clientWidth
        && getComputedStyle(scroller).maskImage.includes('gradient');
    return {fits, wrapped, head: table.querySelector('th') ? table.querySelector('th').innerText
        : '', width: Math.round(table.getBoundingClientRect().width)};
})"""


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", WITH_TABLES)
def test_tables_fit_or_scroll_with_a_cue(reader, site_url, lang, name):
    """A table fits the column or scrolls sideways in a box whose edge with more columns fades
    out."""
    _open(reader, f"{site_url}/{lang}/{name}.html")
    tables = reader.eval_on_selector_all("article table", TABLES_FIT)
    bad = [t for t in tables if not (t["fits"] or t["wrapped"])]
    assert not bad, f"tables that run off the column: {bad}"


@pytest.mark.parametrize("lang", LANGS)
def test_the_download_menu_offers_the_book_as_a_pdf(desktop, site_url, lang):
    """The download menu of a chapter: the whole book's PDF of the edition (a click opens it)
    beside the entry that prints the page, each named in the edition's language."""
    _open(desktop, f"{site_url}/{lang}/{READ}.html")
    _press(desktop, desktop.locator(".dropdown-download-buttons > button"))
    book = desktop.locator(".dropdown-download-buttons a.btn-download-book-pdf-button")
    book.wait_for(state="visible")
    assert book.inner_text().strip() == ("Book (.pdf)" if lang == "en" else "全书（.pdf）")
    printing = desktop.locator(".dropdown-download-buttons .btn-download-pdf-button")
    assert printing.inner_text().strip() == ("Print this page" if lang == "en" else "打印本页")
    # It opens in a new tab (the theme's menu links open one), at the PDF's address.
    url = f"{site_url}/{lang}/_downloads/mgpu-{lang}.pdf"
    with desktop.context.expect_page() as opened:
        _press(desktop, book)
    opened.value.wait_for_url(url)
    pdf = desktop.request.get(url)
    assert pdf.ok and pdf.headers["content-type"] == "application/pdf"
    assert pdf.body().startswith(b"%PDF-") and len(pdf.body()) > 10**6


# The printable width of an A4 page with Chromium's default print margins (1 cm each side).
A4_PRINT_PX = round((210 - 20) / 25.4 * 96)


@pytest.mark.parametrize("lang", LANGS)
def test_a_printed_chapter_wraps_its_code_and_keeps_its_number(desktop, site_url, lang):
    """A chapter laid out as the browser prints it (print media, at an A4 page's width; the
    print dialog itself cannot be driven headless): no code block, output or table is wider than
    the text (nothing is cut off, nothing scrolls), and the printed title is the chapter's
    numbered one."""
    desktop.set_viewport_size({"width": A4_PRINT_PX, "height": 1000})
    desktop.emulate_media(media="print")
    _open(desktop, f"{site_url}/{lang}/{READ}.html")
    too_wide = desktop.evaluate(OVERFLOW_JS)  # what tools/pdf.py checks before it prints
    assert too_wide == []
    titles = [t.strip() for t in desktop.locator("h1:visible").all_inner_texts()]
    assert len(titles) == 1 and re.match(r"4\. \S", titles[0]), titles
