"""The book's plots in both editions: words in the figure's language, drawn with a font that has
their glyphs, and the same numbers in both."""

from __future__ import annotations

import io
import re
import warnings

import pytest

matplotlib = pytest.importorskip("matplotlib")

import mgpu  # noqa: E402
from mgpu.book import plot  # noqa: E402
from mgpu.loop import History  # noqa: E402
from mgpu.probes.timing import EngineEvent  # noqa: E402

CJK = re.compile(r"[\u4e00-\u9fff]")
H = History(["cpu(0)", "cpu(1)"], 512, 0.2, "lenet", loss=[1.0, 0.5], train_acc=[0.6, 0.8],
            test_acc=[0.7, 0.8], epoch_time=[1.0, 1.0], images_per_sec=[1.0, 1.0])
EVENTS = [EngineEvent("dot", 0, 1, 0.0, 2.0), EngineEvent("CopyCPU2CPU", 1, 2, 1.0, 1.5)]


def _figures(lang):
    names = {"en": ["1 device", "2 devices"], "zh": ["1 个设备", "2 个设备"]}[lang]
    return [plot.plot_history([H], lang=lang), plot.plot_bars(names, [3.2, 3.4], lang=lang),
            plot.plot_timeline(EVENTS, lang=lang)]


def _words(fig) -> list[str]:
    fig.canvas.draw()  # makes the tick labels
    return [t.get_text() for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip()]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_words_are_in_the_figures_language(lang):
    for fig in _figures(lang):
        words = " ".join(_words(fig))
        assert bool(CJK.search(words)) == (lang == "zh"), words


def test_chinese_labels_come_from_the_table():
    fig = plot.plot_history([H], lang="zh")
    assert fig.axes[0].get_xlabel() == plot.LABELS["zh"]["epoch"] == "迭代周期"
    assert fig.axes[1].get_ylabel() == "准确率"
    legend = fig.axes[1].get_legend_handles_labels()[1]
    run = "2 个 cpu，批量 512，学习率 0.2"
    assert legend == [f"{run}（测试）", f"{run}（训练）"]
    assert plot.plot_timeline(EVENTS, lang="zh").axes[0].get_xlabel() == "毫秒"


def test_every_language_has_every_word():
    assert set(plot.LABELS["en"]) == set(plot.LABELS["zh"])


def test_chinese_figures_render_without_missing_glyphs():
    """Every Chinese word is drawn with the CJK font: no 'Glyph ... missing' warning."""
    for fig in _figures("zh"):
        family = {tuple(t.get_fontfamily()) for t in fig.findobj(matplotlib.text.Text)
                  if CJK.search(t.get_text())}
        assert family and all(mgpu.cjk_font() in f for f in family), family
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fig.savefig(io.BytesIO(), format="png")


def test_same_numbers_in_both_languages():
    en, zh = (plot.plot_bars(["a", "b"], [3.2, 3.4], lang=lang) for lang in ("en", "zh"))
    heights = [[p.get_height() for p in f.axes[0].patches] for f in (en, zh)]
    assert heights[0] == heights[1] == [3.2, 3.4]


def test_unknown_language_is_refused():
    with pytest.raises(ValueError, match="lang must be one of"):
        plot.plot_bars(["a"], [1.0], lang="fr")


def test_hardware_line_in_chinese():
    line = "Xeon, 2 cores, no GPU; mxnet 1.9.1"
    assert mgpu.hardware_in(line, "en") == line
    assert mgpu.hardware_in(line, "zh") == "Xeon，2 个核心，无 GPU；mxnet 1.9.1"
    assert mgpu.hardware_in(mgpu.hardware_summary(), "zh") == mgpu.hardware_summary("zh")
    with pytest.raises(ValueError, match="summary must be a line of"):
        mgpu.hardware_in("two cores", "zh")
    with pytest.raises(ValueError, match="lang must be"):
        mgpu.hardware_in(line, "de")


# --- Legible where shown: the page shows a figure CSS_DPI pixels per inch wide, scaled
# down to the content column (COLUMN_PX at a 1366-px window) when wider.

MIN_TEXT_PX = 9  # the smallest words, on screen


def _book_figures(lang):
    """Every kind of figure the chapters make with mgpu.book.plot, with chapter-like inputs."""
    zh = lang == "zh"
    two = [H, History(["cpu(0)"], 256, 0.1, "lenet", loss=[1.2, 0.6], train_acc=[0.5, 0.7],
                      test_acc=[0.55, 0.72], epoch_time=[1.0, 1.0],
                      images_per_sec=[1.0, 1.0])]
    names = [f"{'算法' if zh else 'algorithm'}\n{i}" for i in range(8)]
    yield "history", plot.plot_history(two, lang=lang)
    yield from ((f"bars{n}", plot.plot_bars(names[:n], range(1, n + 1), lang=lang))
                for n in (2, 4, 6))
    yield "bars8", plot.plot_bars(names, range(1, 9), lang=lang, reference=4)
    yield "timeline", plot.plot_timeline(EVENTS * 3, lang=lang)
    from mgpu.probes.engine import QueueRun, draw_queue_memory

    run = QueueRun(False, 2, 4.0, 0.1, 1.0, 100.0, 108.0, [(0.0, 100.0), (0.5, 108.0)])
    yield "queue_memory", draw_queue_memory([run], lang)


def _png_text_px(fig) -> float:
    """The smallest words' size on screen, from the PNG the page shows: font size in points
    x dpi / 72 x (displayed width / pixel width)."""
    from PIL import Image

    data, meta = plot._png_output(fig)
    width = Image.open(io.BytesIO(data)).width
    assert width <= plot.MAX_PX
    inches = fig.get_tightbbox().width + 0.2  # what bbox_inches="tight" saves
    dpi = width / inches  # DPI, or less for a figure wider than MAX_PX at DPI
    assert dpi == pytest.approx(min(plot.DPI, plot.MAX_PX / inches), rel=0.01)
    assert meta["width"] == pytest.approx(inches * plot.CSS_DPI, abs=2)
    shown = min(meta["width"], plot.COLUMN_PX)
    smallest = min(t.get_fontsize() for t in plot._shown_texts(fig))
    return smallest * dpi / 72 * shown / width


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_plots_are_legible_on_the_page(lang):
    for name, fig in _book_figures(lang):
        assert plot._format(fig) == "png" and plot._svg_output(fig) is None, name
        px = _png_text_px(fig)
        assert px >= MIN_TEXT_PX, f"{name}: smallest words {px:.1f} px on screen"
        assert plot.smallest_text_px(fig) == pytest.approx(px, rel=0.03), name
        shown = plot._png_output(fig)[1]["width"]
        assert shown <= plot.COLUMN_PX, f"{name}: {shown} px, wider than the column"


def test_the_measure_catches_small_or_shrunken_words():
    fig = plot.figure()
    fig.add_subplot().plot([0, 1], label="x")
    fig.axes[0].legend(fontsize=6)
    assert plot.smallest_text_px(fig) < MIN_TEXT_PX  # 6 pt = 8 px
    wide = plot.figure(14, 3)  # 10-pt ticks, scaled to 60 %
    wide.add_subplot().plot([0, 1])
    assert plot.smallest_text_px(wide) < MIN_TEXT_PX
    assert _png_text_px(wide) < MIN_TEXT_PX


@pytest.mark.parametrize("name", ["history", "timeline"])
def test_legends_do_not_cover_the_data(name):
    fig = dict(_book_figures("en"))[name]
    fig.draw_without_rendering()
    renderer = fig._get_renderer()
    for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes)]:
        if legend is None:
            continue
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(renderer)), name


def test_many_bars_lie_one_under_the_other():
    fig = plot.plot_bars(["LeNet\n2 devices", "LeNet\n4 devices"] * 4, range(8),
                         ylabel="speed-up", reference=1.0)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "speed-up"
    assert [t.get_text() for t in ax.get_yticklabels()][:2] == ["LeNet 2 devices",
                                                                 "LeNet 4 devices"]
    assert [tuple(line.get_xdata()) for line in ax.lines] == [(1.0, 1.0)]  # vertical
    assert plot._one_line("融合\n(small=0)") == "融合(small=0)"
    assert plot._one_line("NumPy\n（参照）") == "NumPy（参照）"
    few = plot.plot_bars(["a", "b"], [1, 2], reference=1.5).axes[0]
    assert [tuple(line.get_ydata()) for line in few.lines] == [(1.5, 1.5)]  # horizontal


def test_png_stays_within_max_px():
    from PIL import Image

    fig = plot.figure(16, 2)
    fig.add_subplot().plot([0, 1])
    assert Image.open(io.BytesIO(plot.png_bytes(fig))).width <= plot.MAX_PX
