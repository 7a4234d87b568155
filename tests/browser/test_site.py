"""The published book as a reader sees it, in headless Chromium (run with `nox -s browser`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser  # deselected by default; `nox -s browser` runs -m browser

DOCS = Path(__file__).parents[2] / "docs"
SHOTS = DOCS / "_build" / "screenshots"
LANGS = ("en", "zh_CN")
PAGES = sorted(p.stem for p in DOCS.glob("*.md") if p.stem != "README")
EXECUTED = sorted(p.stem for p in DOCS.glob("*.md") if "{code-cell}" in p.read_text("utf-8"))
WITH_FIGURES = sorted(p.stem for p in DOCS.glob("*.md") if "mgpu.plot." in p.read_text("utf-8"))


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


@pytest.mark.parametrize("name", ["multi-device-scratch", "index"])
def test_language_switcher_round_trip(page, site_url, name):
    _open(page, f"{site_url}/en/{name}.html")
    page.locator("a.mgpu-lang-switch").first.click()
    page.wait_for_load_state("networkidle")
    assert page.url == f"{site_url}/zh_CN/{name}.html"
    assert page.locator("html").get_attribute("lang") in ("zh-CN", "zh_CN", "zh")
    page.locator("a.mgpu-lang-switch").first.click()
    page.wait_for_load_state("networkidle")
    assert page.url == f"{site_url}/en/{name}.html"


def test_root_index_sends_readers_to_an_edition(page, site_url):
    _open(page, f"{site_url}/index.html")
    page.wait_for_url("**/index.html")
    assert "/en/" in page.url or "/zh_CN/" in page.url


def _search(page, site_url, lang, query):
    _open(page, f"{site_url}/{lang}/search.html?q={query}")
    page.wait_for_selector("#search-results ul.search li", timeout=15000)
    links = page.eval_on_selector_all("#search-results ul.search li a",
                                      "els => els.map(e => e.getAttribute('href'))")
    return {href.split("/")[-1].split(".html")[0] for href in links}


def test_search_english(page, site_url):
    found = _search(page, site_url, "en", "allreduce")
    assert {"multi-device-scratch", "multi-device-gluon"} <= found, found


def test_search_chinese(page, site_url):
    found = _search(page, site_url, "zh_CN", "梯度")
    assert {"multi-device-scratch", "multi-device-gluon"} <= found, found
    found = _search(page, site_url, "zh_CN", "数据并行")
    assert "preface" in found, found


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
