"""Figures for the book: training curves and timing bars (matplotlib), in English or Chinese.

Every plotting function takes ``lang`` (``"en"`` or ``"zh"``): the axis labels and legend words
that the function writes itself come from ``LABELS[lang]``, and a Chinese figure draws all of its
words with a CJK font (:func:`mgpu.diagrams.cjk_font`, Debian's ``fonts-noto-cjk``). Words that
the caller passes (bar names, a title, a y label) are the caller's, in the caller's language.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["figure", "plot_bars", "plot_history", "plot_timeline", "png_bytes"]

#: Resolution of the figures shown in notebooks and the book (dots per inch).
DPI = 110

#: The words the plotting functions write themselves, per language.
LABELS: dict[str, dict[str, str]] = {
    "en": {
        "epoch": "epoch",
        "loss": "training loss",
        "accuracy": "accuracy",
        "run": "{n} x {kinds}, batch {batch}, lr {lr:g}",
        "test": "{label} (test)",
        "train": "{label} (train)",
        "seconds_per_epoch": "seconds per epoch",
        "milliseconds": "milliseconds",
    },
    "zh": {
        "epoch": "迭代周期",
        "loss": "训练损失",
        "accuracy": "准确率",
        "run": "{n} 个 {kinds}，批量 {batch}，学习率 {lr:g}",
        "test": "{label}（测试）",
        "train": "{label}（训练）",
        "seconds_per_epoch": "每个迭代周期的秒数",
        "milliseconds": "毫秒",
    },
}


def _words(lang: str) -> dict[str, str]:
    """The words of ``lang``, or a clear error naming the languages there are."""
    if lang not in LABELS:
        raise ValueError(f"lang must be one of {sorted(LABELS)}, got {lang!r}: pass 'en' for "
                         "the English edition's figure or 'zh' for the Chinese one")
    return LABELS[lang]


def _family(lang: str) -> list[str]:
    """The font families of a figure in ``lang``: a CJK font first for Chinese."""
    if lang == "zh":
        from mgpu.diagrams import cjk_font

        return [cjk_font(), "DejaVu Sans"]
    return ["DejaVu Sans"]


def _set_font(fig, lang: str) -> None:
    """Draw every word of ``fig`` (titles, labels, ticks, legends) with ``lang``'s fonts.

    The family is set on each text itself, not in ``rcParams``: the figure is rendered later
    (when it is displayed or glued), outside any ``rc_context`` of the plotting function.
    """
    from matplotlib.text import Text

    family = _family(lang)
    for text in fig.findobj(Text):
        text.set_fontfamily(family)
    for ax in fig.axes:  # tick labels made at draw time copy the first tick's properties
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis.get_major_ticks():
                tick.label1.set_fontfamily(family)
                tick.label2.set_fontfamily(family)


def png_bytes(fig, dpi: int = DPI) -> bytes:
    """``fig`` as a PNG with a palette of at most 256 colours: a third of the bytes of matplotlib's
    RGBA PNG for the book's figures (lines, bars and text), with no visible difference.

    A figure with a transparent background (the diagrams) keeps its transparency.

    >>> from matplotlib.figure import Figure
    >>> fig = Figure(figsize=(2, 1)); _ = fig.add_subplot().plot([0, 1], [1, 0])
    >>> data = png_bytes(fig)
    >>> data[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
    True
    >>> from PIL import Image; import io
    >>> Image.open(io.BytesIO(data)).mode
    'P'
    """
    import io

    from PIL import Image

    raw = io.BytesIO()
    fig.savefig(raw, format="png", dpi=dpi, bbox_inches="tight")
    image = Image.open(raw)
    if image.mode == "RGBA" and image.getextrema()[3][0] < 255:  # some pixels transparent
        palette = image.quantize(256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    else:
        palette = image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT,
                                                dither=Image.Dither.NONE)
    out = io.BytesIO()
    palette.save(out, format="png", optimize=True)
    return out.getvalue()


def _show_in_notebooks() -> None:
    """In IPython/Jupyter, display figures as PNG images (what ``%matplotlib inline`` does for
    pyplot figures; ours are plain :class:`~matplotlib.figure.Figure` objects), made by
    :func:`png_bytes`."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        from matplotlib.figure import Figure

        formatters = shell.display_formatter.formatters
        for mime in list(formatters):  # one representation only: no SVG, PDF or JPEG copies
            if mime != "text/plain":
                formatters[mime].pop(Figure, None)
        formatters["image/png"].for_type(Figure, png_bytes)


def figure(width: float, height: float):
    """A figure of ``width`` x ``height`` inches for the book, with a tight layout.

    It is not registered with pyplot: nothing is shown until the caller shows it (as a cell's
    value or through MyST-NB's ``glue``), and nothing leaks between calls. In IPython it is
    displayed as a palette PNG (:func:`png_bytes`).

    >>> fig = figure(4, 3); ax = fig.add_subplot()
    >>> tuple(fig.get_size_inches())
    (4.0, 3.0)
    """
    from matplotlib.figure import Figure

    _show_in_notebooks()
    return Figure(figsize=(width, height), layout="tight")


def plot_history(histories: Sequence, labels: Sequence[str] | None = None, title: str = "",
                 xlabel: str | None = None, ylabels: tuple[str, str] | None = None,
                 lang: str = "en"):
    """Loss (left) and train/test accuracy (right) per epoch for one or more training runs.

    ``histories`` are :class:`mgpu.train.History` objects; ``labels`` default to each run's
    devices, batch and learning rate, in ``lang``.
    The axis labels and the legend's "(test)" and "(train)" are in ``lang`` (``"en"`` or
    ``"zh"``) unless ``xlabel`` and ``ylabels`` are given.

    >>> from mgpu.train import History
    >>> h = History(["cpu(0)"], 256, 0.1, "lenet", loss=[1.0, 0.5], train_acc=[0.6, 0.8],
    ...             test_acc=[0.7, 0.8], epoch_time=[1.0, 1.0], images_per_sec=[1.0, 1.0])
    >>> fig = plot_history([h]); len(fig.axes)
    2
    >>> plot_history([h], lang="zh").axes[1].get_ylabel()
    '准确率'
    >>> plot_history([h], lang="zh").axes[0].get_legend_handles_labels()[1]
    ['1 个 cpu，批量 256，学习率 0.1']
    """
    words = _words(lang)
    xlabel = words["epoch"] if xlabel is None else xlabel
    ylabels = (words["loss"], words["accuracy"]) if ylabels is None else ylabels
    if labels is None:
        labels = [words["run"].format(n=len(h.devices), batch=h.batch_size, lr=h.lr,
                                      kinds="+".join(sorted({d.split("(")[0] for d in h.devices})))
                  for h in histories]
    fig = figure(9, 3.4)
    ax_loss, ax_acc = fig.subplots(1, 2)
    for h, lab in zip(histories, labels, strict=True):
        epochs = range(1, len(h.loss) + 1)
        (line,) = ax_loss.plot(epochs, h.loss, marker="o", label=lab)
        ax_acc.plot(epochs, h.test_acc, marker="o", color=line.get_color(),
                    label=words["test"].format(label=lab))
        ax_acc.plot(epochs, h.train_acc, ls="--", color=line.get_color(),
                    label=words["train"].format(label=lab))
    ax_loss.set(xlabel=xlabel, ylabel=ylabels[0])
    ax_acc.set(xlabel=xlabel, ylabel=ylabels[1])
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    ax_acc.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    _set_font(fig, lang)
    return fig


def plot_bars(names: Sequence[str], values: Sequence[float], ylabel: str | None = None,
              title: str = "", fmt: str = "{:.2f}", lang: str = "en"):
    """A bar chart with each bar's value written on it (epoch times, throughputs, ratios).

    ``names``, ``ylabel`` (default: seconds per epoch) and ``title`` are written in ``lang``'s
    font: pass them in the language of the figure.

    >>> fig = plot_bars(["1 device", "2 devices"], [3.2, 3.4]); len(fig.axes[0].patches)
    2
    >>> plot_bars(["一个设备", "两个设备"], [3.2, 3.4], lang="zh").axes[0].get_ylabel()
    '每个迭代周期的秒数'
    """
    import matplotlib as mpl

    words = _words(lang)
    ylabel = words["seconds_per_epoch"] if ylabel is None else ylabel

    fig = figure(max(4.0, 1.3 * len(names) + 1), 3.2)
    ax = fig.subplots()
    colors = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
    bars = ax.bar(list(names), list(values), color=colors[: len(values)])
    for bar, v in zip(bars, values, strict=True):
        ax.annotate(fmt.format(v), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=9)
    ax.set_ylabel(ylabel)
    ax.margins(y=0.15)
    ax.grid(axis="y", alpha=0.3)
    if title:
        ax.set_title(title)
    _set_font(fig, lang)
    return fig


def plot_timeline(events: Sequence, title: str = "", xlabel: str | None = None,
                  row_label: str = "cpu({})", lang: str = "en"):
    """One row per device's engine queue, one bar per operator (from
    :func:`mgpu.timing.engine_timeline`): what ran in parallel, and where the copies ran.

    The x label (default: milliseconds) is in ``lang``; the operators keep MXNet's names.

    >>> from mgpu.timing import EngineEvent
    >>> fig = plot_timeline([EngineEvent("dot", 0, 1, 0.0, 2.0),
    ...                      EngineEvent("CopyCPU2CPU", 1, 2, 1.0, 1.5)])
    >>> len(fig.axes[0].patches)
    2
    """
    import matplotlib as mpl
    from matplotlib.patches import Patch

    xlabel = _words(lang)["milliseconds"] if xlabel is None else xlabel

    devices = sorted({e.device for e in events})
    names = sorted({e.name for e in events})
    colors = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {n: colors[i % len(colors)] for i, n in enumerate(names)}
    fig = figure(9, 0.7 * len(devices) + 1.4)
    ax = fig.subplots()
    for e in events:
        row = devices.index(e.device)
        ax.barh(row, max(e.end_ms - e.start_ms, 1e-3), left=e.start_ms, height=0.6,
                color=color[e.name], edgecolor="black", linewidth=0.3)
    ax.set_yticks(range(len(devices)), [row_label.format(d) for d in devices])
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    handles = [Patch(color=color[n], label=n) for n in names]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="x", alpha=0.3)
    if title:
        ax.set_title(title)
    _set_font(fig, lang)
    return fig
