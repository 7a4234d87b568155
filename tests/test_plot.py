"""The book's plots in both editions: words in the figure's language, drawn with a font that has
their glyphs, and the same numbers in both."""

from __future__ import annotations

import io
import re
import warnings

import pytest

matplotlib = pytest.importorskip("matplotlib")

import mgpu  # noqa: E402
from mgpu import plot  # noqa: E402
from mgpu.timing import EngineEvent  # noqa: E402
from mgpu.train import History  # noqa: E402

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
