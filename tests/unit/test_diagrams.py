"""The book's diagrams: the right number of boxes, arrows and words, in English and in Chinese,
drawn with a font that has the glyphs, and readable on a light page and on a dark one."""

from __future__ import annotations

import io
import re
import warnings

import pytest

matplotlib = pytest.importorskip("matplotlib")

from matplotlib import font_manager  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import mgpu  # noqa: E402
from mgpu.book import style  # noqa: E402
from mgpu.book.diagrams import parts  # noqa: E402
from mgpu.book.style import FontError, cjk_font  # noqa: E402
from mgpu.probes.timing import event_category  # noqa: E402

draw_allreduce, draw_engine_queues = mgpu.draw_allreduce, mgpu.draw_engine_queues
draw_parameter_server, draw_step = mgpu.draw_parameter_server, mgpu.draw_step
from mgpu.probes.timing import EngineEvent  # noqa: E402

LANGS = ["en", "zh"]
CJK = re.compile(r"[\u4e00-\u9fff]")
EVENTS = [
    EngineEvent("Convolution", 0, 1, 0.0, 2.0),
    EngineEvent("Convolution", 1, 2, 0.1, 2.1),
    EngineEvent("CopyCPU2CPU", 1, 2, 2.1, 2.3),
    EngineEvent("add_n", 0, 1, 2.3, 2.4),
    EngineEvent("_div_scalar", 0, 1, 2.4, 2.5),
    EngineEvent("DeleteVariable", 1, 2, 2.5, 2.5),
    EngineEvent("WaitForVar", 0, 1, 2.5, 2.6),
]


def _texts(fig) -> list:
    """Every visible Text artist of a figure: in the axes, on the ticks, in the legends."""
    return [t for t in fig.findobj(matplotlib.text.Text)
            if t.get_text().strip() and t.get_visible()]


def _all_figures(lang):
    return [draw_step(lang), draw_allreduce(lang), draw_parameter_server(lang),
            draw_engine_queues(EVENTS, lang)]


def _luminance(color) -> float:
    """WCAG relative luminance of a colour."""
    def channel(c):
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b, _ = to_rgba(color)
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def _contrast(a, b) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_step_has_one_lane_and_four_arrows_per_device(lang, k):
    fig = draw_step(lang, k=k)
    assert isinstance(fig, Figure)
    p = parts(fig)
    # minibatch + allreduce + forward, backward, update per device
    assert p["lane"] == k and p["box"] == 2 + 3 * k
    assert p["arrow"] == 4 * k  # split, forward->backward, ->allreduce, ->update
    assert p["link"] == k  # the size of each slice
    assert p["text"] == 2 + 4 * k  # box words and one device name per lane


@pytest.mark.parametrize("lang", LANGS)
def test_step_slices_add_up_to_the_batch(lang):
    fig = draw_step(lang, k=3, batch_size=256)
    sizes = [int(re.match(r"\d+", t.get_text()).group()) for t in fig.axes[0].texts
             if t.get_gid() == "link"]
    assert sorted(sizes) == [85, 85, 86] and sum(sizes) == 256


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("k", [2, 3, 4])
def test_allreduce_draws_the_links_of_each_algorithm(lang, k):
    fig = draw_allreduce(lang, k=k)
    p = parts(fig)
    links = (k - 1) + k * (k - 1) // 2 + k  # to device 0, every pair, the ring
    assert len(fig.axes) == 3
    assert p["box"] == 3 * k and p["arrow"] == links and p["link"] == links
    assert p["title"] == 3 and p["note"] == 3


@pytest.mark.parametrize("lang", LANGS)
def test_allreduce_labels_carry_p_and_the_per_device_totals_for_k4(lang):
    fig = draw_allreduce(lang, k=4)
    left, middle, ring = ([t.get_text() for t in ax.texts] for ax in fig.axes)
    assert sum("P" in t and "P/k" not in t for t in left if "β" not in t) == 3
    assert sum("P/k" in t for t in middle) == 6 and sum("P/k" in t for t in ring) == 4
    notes = [" ".join(t.get_text().split()) for ax in fig.axes for t in ax.texts
             if t.get_gid() == "note"]
    assert "2(k−1)P/β = 6P/β" in notes[0]
    assert all("2(k−1)P/(kβ)" in n and "1.5P/β" in n for n in notes[1:])
    assert "6" in notes[2]  # 2(k-1) steps


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize(("m", "n"), [(3, 2), (4, 1), (2, 3)])
def test_parameter_server_links_every_worker_to_every_server(lang, m, n):
    fig = draw_parameter_server(lang, workers=m, servers=n)
    p = parts(fig)
    assert p["box"] == m + n + 1  # workers, servers, scheduler
    assert p["arrow"] == 2 * m * n  # a push and a pull per worker and server
    assert p["control"] == m + n  # the scheduler talks to every node
    assert p["legend"] == 2 and p["key"] == 2 and p["note"] == 1
    assert p["link"] == m + n + 1  # traffic under each node, and the scheduler's role


def test_parameter_server_shards_keys_as_mxnet_does():
    texts = [t.get_text() for t in draw_parameter_server(servers=2).axes[0].texts]
    assert any("keys 0, 2, 4" in t for t in texts) and any("keys 1, 3, 5" in t for t in texts)


@pytest.mark.parametrize("lang", LANGS)
def test_engine_queues_draw_one_bar_per_operator(lang):
    fig = draw_engine_queues(EVENTS, lang)
    assert parts(fig)["bar"] == 5  # the engine's bookkeeping is left out
    rows = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert rows == [style.LABELS[lang]["diagram"]["device"].format(i=i) for i in (0, 1)]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [style.LABELS[lang]["diagram"][c] for c in ("compute", "copy", "sum", "sgd")]


def test_engine_queues_need_operators():
    with pytest.raises(ValueError, match="no operators"):
        draw_engine_queues(EVENTS[-2:])


def test_event_categories():
    assert [event_category(n) for n in ("ImperativeBulk", "CopyCPU2GPU", "broadcast_add",
                                        "sgd_update", "WaitForVar")] == \
        ["compute", "copy", "sum", "sgd", None]


@pytest.mark.parametrize("draw", [draw_step, draw_allreduce, draw_parameter_server])
def test_words_follow_the_language(draw):
    en = " ".join(t.get_text() for t in _texts(draw("en")))
    zh = " ".join(t.get_text() for t in _texts(draw("zh")))
    assert not CJK.search(en)
    assert CJK.search(zh)


def test_chinese_diagrams_use_a_cjk_font_that_has_every_glyph():
    family = cjk_font()
    path = font_manager.findfont(font_manager.FontProperties(family=family),
                                 fallback_to_default=False)
    assert "cjk" in path.lower() or "han" in path.lower() or "wqy" in path.lower()
    for fig in _all_figures("zh"):
        for t in _texts(fig):
            if CJK.search(t.get_text()):
                assert t.get_fontfamily()[0] == family, t.get_text()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "Glyph ... missing from font(s)" would fail here
            fig.savefig(io.BytesIO(), format="png", dpi=40)


def test_english_diagrams_do_not_need_a_cjk_font(monkeypatch):
    monkeypatch.setattr(style, "cjk_font", lambda: pytest.fail("CJK font looked up"))
    for fig in _all_figures("en"):
        assert all(t.get_fontfamily()[0] == "DejaVu Sans" for t in _texts(fig)
                   if t.get_gid())


def test_missing_cjk_font_names_the_package(monkeypatch):
    monkeypatch.setattr(font_manager.fontManager, "ttflist", [])
    monkeypatch.setattr(font_manager, "findSystemFonts", lambda *a, **k: [])
    with pytest.raises(FontError, match="fonts-noto-cjk"):
        cjk_font()
    with pytest.raises(FontError, match="apt-get install fonts-noto-cjk"):
        draw_step("zh")


@pytest.mark.parametrize("lang", LANGS)
def test_readable_on_light_and_dark_pages(lang):
    """Transparent background; words dark on light boxes; lines mid-tone, visible on both."""
    for fig in _all_figures(lang):
        assert to_rgba(fig.get_facecolor())[3] == 0
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=40, facecolor=fig.get_facecolor())
        from PIL import Image

        buf.seek(0)
        assert Image.open(buf).convert("RGBA").getpixel((0, 0))[3] == 0  # a clear corner
        for t in fig.findobj(matplotlib.text.Text):
            if t.get_gid() or (t.get_bbox_patch() is not None):
                box = t.get_bbox_patch()
                assert _luminance(t.get_color()) < 0.05
                if box is not None:
                    assert _contrast(t.get_color(), box.get_facecolor()) > 7
        for patch in fig.findobj(matplotlib.patches.FancyBboxPatch):
            if patch.get_gid() in ("box", "lane"):
                assert _contrast("#111111", patch.get_facecolor()) > 7  # dark words fit
                assert _luminance(patch.get_edgecolor()) < 0.05  # an outline on light pages
        for arrow in fig.findobj(matplotlib.patches.FancyArrowPatch):
            for page in ("#ffffff", "#121212"):
                assert _contrast(arrow.get_edgecolor(), page) >= 3, arrow.get_gid()


@pytest.mark.parametrize("bad", [{"lang": "fr"}, {"labels": {"nope": "x"}}])
def test_bad_language_or_label_is_named(bad):
    with pytest.raises(ValueError, match="fr|nope"):
        draw_step(**bad)


def test_labels_replace_words():
    fig = draw_step(labels={"forward": "fwd"})
    assert sum(t.get_text() == "fwd" for t in fig.axes[0].texts) == 2


def test_allreduce_needs_two_devices():
    with pytest.raises(ValueError, match="at least 2"):
        draw_allreduce(k=1)


def test_exported_from_the_package():
    assert mgpu.draw_step is draw_step and mgpu.FontError is FontError


# --- Shown as SVG, legible where shown (mgpu.book.style: CSS_DPI pixels per inch, scaled down to
# the content column when wider).

MIN_TEXT_PX = 9  # the smallest words, on screen
CHAPTER_FIGURES = {  # the arguments the chapters draw with (cost-model, engine)
    "step": lambda lang: draw_step(lang, k=2, batch_size=256),
    "allreduce": lambda lang: draw_allreduce(lang, k=4),
    "parameter_server": lambda lang: draw_parameter_server(lang, workers=3, servers=2),
    "engine_queues": lambda lang: draw_engine_queues(EVENTS * 40, lang),
}


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", CHAPTER_FIGURES)
def test_diagrams_are_svg_with_words_as_outlines(lang, name):
    fig = CHAPTER_FIGURES[name](lang)
    assert style._format(fig) == "svg" and style._png_output(fig) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a missing glyph would fail here
        svg = style._svg_output(fig)
    assert svg.startswith("<?xml") and "<svg" in svg
    assert "<text" not in svg  # words drawn as outlines: no font needed to read them
    assert svg == style._svg_output(fig)  # same figure, same bytes: no date, no random ids
    assert len(svg.encode()) < 150_000, f"{name}: {len(svg.encode())} bytes"
    if lang == "zh":  # every Chinese character has its outline, in the CJK font
        font = font_manager.get_font(font_manager.findfont(cjk_font()))
        chars = {c for t in _texts(fig) for c in t.get_text() if CJK.match(c)}
        assert chars
        for c in chars:
            assert f"{font.postscript_name}-{ord(c):x}" in svg, c


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", CHAPTER_FIGURES)
def test_diagrams_are_legible_on_the_page(lang, name):
    fig = CHAPTER_FIGURES[name](lang)
    svg = style.svg_bytes(fig).decode()
    width_pt = float(re.search(r'<svg[^>]* width="([\d.]+)pt"', svg).group(1))
    shown = min(width_pt * 96 / 72, style.COLUMN_PX)  # CSS px: 72 pt = 96 px
    smallest = min(t.get_fontsize() for t in style._shown_texts(fig))
    px = smallest * 96 / 72 * shown / (width_pt * 96 / 72)
    assert px >= MIN_TEXT_PX, f"{name}: smallest words {px:.1f} px on screen"
    assert style.smallest_text_px(fig) == pytest.approx(px, rel=0.02)
    assert width_pt * 96 / 72 <= style.COLUMN_PX, f"{name}: wider than the column"


@pytest.mark.parametrize(("m", "n"), [(4, 1), (2, 3), (5, 2)])
def test_wider_parameter_servers_stay_legible(m, n):
    assert style.smallest_text_px(draw_parameter_server(workers=m, servers=n)) >= MIN_TEXT_PX


def test_engine_queue_legend_is_below_the_bars():
    fig = draw_engine_queues(EVENTS, "en")
    fig.draw_without_rendering()
    renderer = fig._get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    assert legend.y1 <= fig.axes[0].get_tightbbox(renderer).y0 + 1
