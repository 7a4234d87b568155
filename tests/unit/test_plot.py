"""The book's plots in both editions: words in the figure's language, drawn with a font that has
their glyphs, and the same numbers in both."""

from __future__ import annotations

import io
import re
import warnings

import pytest

matplotlib = pytest.importorskip("matplotlib")

import mgpu  # noqa: E402
from mgpu.book import plot, style  # noqa: E402
from mgpu.loop import History  # noqa: E402
from mgpu.probes.engine import QueueRun  # noqa: E402
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
    assert fig.axes[0].get_xlabel() == style.LABELS["zh"]["plot"]["epoch"] == "迭代周期"
    assert fig.axes[1].get_ylabel() == "准确率"
    legend = fig.axes[1].get_legend_handles_labels()[1]
    run = "2 个 CPU，批量 512，学习率 0.2"
    assert legend == [f"{run}（测试）", f"{run}（训练）"]
    assert plot.plot_timeline(EVENTS, lang="zh").axes[0].get_xlabel() == "毫秒"


def test_every_language_has_every_word():
    en, zh = style.LABELS["en"], style.LABELS["zh"]
    assert set(en) == set(zh) == {"plot", "queue_memory", "diagram"}
    for kind in en:
        assert set(en[kind]) == set(zh[kind]), kind


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


# --- Legible where shown (mgpu.book.style): the page shows a figure CSS_DPI pixels per inch
# wide, scaled down to the content column (COLUMN_PX at a 1366-px window) when wider.

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
    run = QueueRun(False, 2, 4.0, 0.1, 1.0, 100.0, 108.0, [(0.0, 100.0), (0.5, 108.0)])
    yield "queue_memory", plot.draw_queue_memory([run], lang)


def _png_text_px(fig) -> float:
    """The smallest words' size on screen, from the PNG the page shows: font size in points
    x dpi / 72 x (displayed width / pixel width)."""
    from PIL import Image

    data, meta = style._png_output(fig)
    width = Image.open(io.BytesIO(data)).width
    assert width <= style.MAX_PX
    inches = fig.get_tightbbox().width + 0.2  # what bbox_inches="tight" saves
    dpi = width / inches  # DPI, or less for a figure wider than MAX_PX at DPI
    assert dpi == pytest.approx(min(style.DPI, style.MAX_PX / inches), rel=0.01)
    assert meta["width"] == pytest.approx(inches * style.CSS_DPI, abs=2)
    shown = min(meta["width"], style.COLUMN_PX)
    smallest = min(t.get_fontsize() for t in style._shown_texts(fig))
    return smallest * dpi / 72 * shown / width


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_plots_are_legible_on_the_page(lang):
    for name, fig in _book_figures(lang):
        assert style._format(fig) == "png" and style._svg_output(fig) is None, name
        px = _png_text_px(fig)
        assert px >= MIN_TEXT_PX, f"{name}: smallest words {px:.1f} px on screen"
        assert style.smallest_text_px(fig) == pytest.approx(px, rel=0.03), name
        shown = style._png_output(fig)[1]["width"]
        assert shown <= style.COLUMN_PX, f"{name}: {shown} px, wider than the column"


def test_the_measure_catches_small_or_shrunken_words():
    fig = plot.figure()
    fig.add_subplot().plot([0, 1], label="x")
    fig.axes[0].legend(fontsize=6)
    assert style.smallest_text_px(fig) < MIN_TEXT_PX  # 6 pt = 8 px
    wide = plot.figure(14, 3)  # 10-pt ticks, scaled to 60 %
    wide.add_subplot().plot([0, 1])
    assert style.smallest_text_px(wide) < MIN_TEXT_PX
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
    assert Image.open(io.BytesIO(style.png_bytes(fig))).width <= style.MAX_PX


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_draw_queue_memory(lang):
    runs = [QueueRun(True, 2, 4.0, 1.0, 1.0, 100.0, 104.0, [(0.0, 100.0), (1.0, 104.0)]),
            QueueRun(False, 2, 4.0, 0.1, 1.0, 100.0, 108.0, [(0.0, 100.0), (0.5, 108.0)])]
    fig = plot.draw_queue_memory(runs, lang)
    assert mgpu.draw_queue_memory is plot.draw_queue_memory
    ax = fig.axes[0]
    assert len(ax.lines) == 5  # two runs, their two "pushed" markers, the legend's marker entry
    words = style.LABELS[lang]["queue_memory"]
    assert ax.get_xlabel() == words["time"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        words["wait"], words["nowait"], words["pushed"]]


def test_one_style_module():
    """The plots and the diagrams share mgpu.book.style and do not import each other."""
    import ast
    from pathlib import Path

    for module in ("plot", "diagrams"):
        tree = ast.parse(Path(style.__file__).with_name(f"{module}.py").read_text("utf-8"))
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert "mgpu.book.style" in imported, module
        assert not imported & {"mgpu.book.plot", "mgpu.book.diagrams"}, module
    assert mgpu.cjk_font is style.cjk_font and mgpu.vector is style.vector
