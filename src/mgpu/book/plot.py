"""Figures for the book: training curves and timing bars, in English or Chinese.

Every plotting function takes ``lang`` (``"en"`` or ``"zh"``): the axis labels and
legend words that the function writes itself come from ``mgpu.book.style.LABELS``, and
a Chinese figure draws all of its words with a CJK font
(:func:`mgpu.book.style.cjk_font`, Debian's ``fonts-noto-cjk``). Words that the caller
passes (bar names, a title, a y label) are the caller's, in the caller's language.

The figures are sized for the page and shown as palette PNGs, as
:mod:`mgpu.book.style` says.
"""

from __future__ import annotations

from collections.abc import Sequence

from mgpu.book.style import FONT, WIDTH, font_family, show_in_notebooks, words

__all__ = [
    "draw_queue_memory",
    "figure",
    "plot_bars",
    "plot_history",
    "plot_timeline",
]


def _set_font(fig, lang: str) -> None:
    """Draw every word of ``fig`` (titles, labels, ticks, legends) in ``lang``'s font.

    The family is set on each text itself, not in ``rcParams``: the figure is rendered
    later (when it is displayed or glued), outside any ``rc_context`` of the plotting
    function.
    """
    from matplotlib.text import Text

    family = font_family(lang)
    for text in fig.findobj(Text):
        text.set_fontfamily(family)
    # Tick labels made at draw time copy the first tick's properties.
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis.get_major_ticks():
                tick.label1.set_fontfamily(family)
                tick.label2.set_fontfamily(family)


def _style(ax) -> None:
    """The book's sizes for an axes' tick labels and axis labels."""
    ax.tick_params(labelsize=FONT["text"])
    ax.xaxis.label.set_fontsize(FONT["label"])
    ax.yaxis.label.set_fontsize(FONT["label"])
    ax.title.set_fontsize(FONT["title"])


def figure(width: float = WIDTH, height: float = 3.4, layout: str = "tight"):
    """A figure of ``width`` x ``height`` inches for the book, with a ``layout``.

    The book's figures are ``WIDTH`` inches wide, the width of the page's column; a
    wider one is scaled down on the page, and its words with it
    (:func:`~mgpu.book.style.smallest_text_px`). It is not registered with pyplot:
    nothing is shown until the caller shows it (as a cell's value or through MyST-NB's
    ``glue``), and nothing leaks between calls. In IPython it is displayed as a palette
    PNG (:func:`~mgpu.book.style.png_bytes`), or as SVG once marked by
    :func:`~mgpu.book.style.vector`.

    >>> fig = figure(4, 3); ax = fig.add_subplot()
    >>> tuple(fig.get_size_inches())
    (4.0, 3.0)
    """
    from matplotlib.figure import Figure

    show_in_notebooks()
    return Figure(figsize=(width, height), layout=layout)


def _text_width_in(text: str, points: float) -> float:
    """Roughly how wide ``text`` is at ``points`` (CJK characters count double)."""
    import unicodedata

    ems = sum(1.0 if unicodedata.east_asian_width(c) in "WF" else 0.6 for c in text)
    return ems * points / 72


def _kinds(devices: Sequence[str], lang: str) -> str:
    """The device types of ``devices`` (``"cpu(0)"``, ...): as MXNet writes them in
    English, upper case in Chinese prose.

    >>> _kinds(["gpu(1)", "cpu(0)", "gpu(0)"], "en"), _kinds(["cpu(0)"], "zh")
    ('cpu+gpu', 'CPU')
    """
    kinds = "+".join(sorted({d.split("(")[0] for d in devices}))
    return kinds.upper() if lang == "zh" else kinds


def plot_history(histories: Sequence, labels: Sequence[str] | None = None,
                 title: str = "", xlabel: str | None = None,
                 ylabels: tuple[str, str] | None = None, lang: str = "en"):
    """Loss (left) and train/test accuracy (right) per epoch of one or more runs.

    ``histories`` are :class:`mgpu.loop.History` objects; ``labels`` default to each
    run's devices, batch and learning rate, in ``lang`` (a Chinese label names the
    device type in upper case, 「1 个 CPU」). The axis labels and the
    legend's words are in ``lang`` (``"en"`` or ``"zh"``) unless ``xlabel`` and
    ``ylabels`` are given. The legend, under the plots, gives each run's colour and the
    key to the accuracy's lines (test solid, train dashed).

    >>> from mgpu.loop import History
    >>> h = History(["cpu(0)"], 256, 0.1, "lenet", loss=[1.0, 0.5],
    ...             train_acc=[0.6, 0.8], test_acc=[0.7, 0.8], epoch_time=[1.0, 1.0],
    ...             images_per_sec=[1.0, 1.0])
    >>> fig = plot_history([h]); len(fig.axes)
    2
    >>> plot_history([h], lang="zh").axes[1].get_ylabel()
    '准确率'
    >>> plot_history([h], lang="zh").axes[0].get_legend_handles_labels()[1]
    ['1 个 CPU，批量 256，学习率 0.1']
    >>> sorted(t.get_text() for t in fig.legends[0].get_texts())
    ['1 x cpu, batch 256, lr 0.1', 'test (solid)', 'train (dashed)']
    """
    from matplotlib.lines import Line2D

    wording = words(lang, "plot")
    xlabel = wording["epoch"] if xlabel is None else xlabel
    ylabels = (wording["loss"], wording["accuracy"]) if ylabels is None else ylabels
    if labels is None:
        labels = [wording["run"].format(
            n=len(h.devices), batch=h.batch_size, lr=h.lr,
            kinds=_kinds(h.devices, lang)) for h in histories]
    fig = figure(WIDTH, 3.7, layout="constrained")
    ax_loss, ax_acc = fig.subplots(1, 2)
    runs = []
    for h, lab in zip(histories, labels, strict=True):
        epochs = range(1, len(h.loss) + 1)
        (line,) = ax_loss.plot(epochs, h.loss, marker="o", label=lab)
        ax_acc.plot(epochs, h.test_acc, marker="o", color=line.get_color(),
                    label=wording["test"].format(label=lab))
        ax_acc.plot(epochs, h.train_acc, ls="--", color=line.get_color(),
                    label=wording["train"].format(label=lab))
        runs.append(line)
    ax_loss.set(xlabel=xlabel, ylabel=ylabels[0])
    ax_acc.set(xlabel=xlabel, ylabel=ylabels[1])
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
        _style(ax)
    keys = [Line2D([], [], color="#555555", marker="o", label=wording["test_key"]),
            Line2D([], [], color="#555555", ls="--", label=wording["train_key"])]
    handles = [*runs, *keys]
    names = [*labels, *(k.get_label() for k in keys)]
    column = max(_text_width_in(n, FONT["text"]) for n in names) + 0.75  # with its line
    ncols = max(1, min(len(names), int(WIDTH // column)))
    order = _row_major(len(names), ncols)
    fig.legend([handles[i] for i in order], [names[i] for i in order],
               loc="outside lower center", fontsize=FONT["text"], ncols=ncols,
               frameon=False)
    if title:
        fig.suptitle(title, fontsize=FONT["title"])
    _set_font(fig, lang)
    return fig


def _row_major(n: int, ncols: int) -> list[int]:
    """The order in which to give ``n`` legend entries to matplotlib, which fills its
    columns one after the other, so that they read row by row.

    >>> _row_major(5, 3)  # shown as 0 1 2 / 3 4
    [0, 3, 1, 4, 2]
    """
    sizes = [len(c) for c in _split(n, ncols)]
    slots = [(r, c) for r in range(max(sizes, default=0)) for c in range(ncols)
             if r < sizes[c]]
    where = {slot: i for i, slot in enumerate(slots)}  # row by row
    return [where[(r, c)] for c in range(ncols) for r in range(sizes[c])]


def _split(n: int, parts: int) -> list[range]:
    """``range(n)`` cut as ``numpy.array_split`` cuts it (the first parts longer)."""
    q, r = divmod(n, parts)
    bounds = [i * q + min(i, r) for i in range(parts + 1)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:])]


def _one_line(name: str) -> str:
    """A bar's name on one line: its line breaks become spaces (none beside Chinese)."""
    import unicodedata

    lines = name.split("\n")
    out = lines[0]
    for line in lines[1:]:
        wide = [c for c in (out[-1:], line[:1])
                if c and unicodedata.east_asian_width(c) in "WF"]
        out += ("" if wide else " ") + line
    return out


def plot_bars(names: Sequence[str], values: Sequence[float], ylabel: str | None = None,
              title: str = "", fmt: str = "{:.2f}", lang: str = "en",
              horizontal: bool | None = None, reference: float | None = None):
    """A bar chart with each bar's value written on it (times, throughputs, ratios).

    ``names``, ``ylabel`` (the values' label; default: seconds per epoch) and ``title``
    are written in ``lang``'s font: pass them in the language of the figure. Up to six
    bars stand side by side (a name's line breaks are kept); more lie one under the
    other (``horizontal``, the default from seven bars on), each name on one line.
    ``reference`` draws a line across the bars at that value (for example 1.0 for
    ratios).

    >>> fig = plot_bars(["1 device", "2 devices"], [3.2, 3.4]); len(fig.axes[0].patches)
    2
    >>> plot_bars(["一个设备", "两个设备"], [3.2, 3.4], lang="zh").axes[0].get_ylabel()
    '每个迭代周期的秒数'
    >>> fig = plot_bars([f"run\\n{i}" for i in range(8)], range(8), reference=4)
    >>> fig.axes[0].get_xlabel(), fig.axes[0].get_yticklabels()[0].get_text()
    ('seconds per epoch', 'run 0')
    """
    import matplotlib as mpl

    wording = words(lang, "plot")
    ylabel = wording["seconds_per_epoch"] if ylabel is None else ylabel
    names, values = list(names), list(values)
    n = len(names)
    horizontal = n > 6 if horizontal is None else horizontal
    colors = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = [colors[i % len(colors)] for i in range(n)]
    if horizontal:
        fig = figure(WIDTH, 0.36 * n + 1.0)
        ax = fig.subplots()
        bars = ax.barh(range(n), values, height=0.65, color=colors)
        ax.set_yticks(range(n), [_one_line(name) for name in names])
        ax.invert_yaxis()
        for bar, v in zip(bars, values, strict=True):
            end = (bar.get_width(), bar.get_y() + bar.get_height() / 2)
            ax.annotate(fmt.format(v), end, xytext=(3, 0), textcoords="offset points",
                        ha="left", va="center", fontsize=FONT["text"])
        ax.set_xlabel(ylabel)
        ax.margins(x=0.15)
        ax.grid(axis="x", alpha=0.3)
        if reference is not None:
            ax.axvline(reference, color="black", linewidth=0.8)
    else:
        fig = figure(WIDTH, 3.4)
        ax = fig.subplots()
        bars = ax.bar(range(n), values, width=0.6, color=colors)
        ax.set_xticks(range(n), names)
        # Fewer than four bars: each no wider than a quarter of the axes.
        pad = max(0.0, (4 - n) / 2)
        ax.set_xlim(-0.5 - pad, n - 0.5 + pad)
        for bar, v in zip(bars, values, strict=True):
            top = (bar.get_x() + bar.get_width() / 2, bar.get_height())
            ax.annotate(fmt.format(v), top, ha="center", va="bottom",
                        fontsize=FONT["text"])
        ax.set_ylabel(ylabel)
        ax.margins(y=0.15)
        ax.grid(axis="y", alpha=0.3)
        if reference is not None:
            ax.axhline(reference, color="black", linewidth=0.8)
    if title:
        ax.set_title(title)
    _style(ax)
    _set_font(fig, lang)
    return fig


def plot_timeline(events: Sequence, title: str = "", xlabel: str | None = None,
                  row_label: str = "cpu({})", lang: str = "en"):
    """One row per device's engine queue, one bar per operator (from
    :func:`mgpu.probes.timing.engine_timeline`): what ran in parallel, and where the
    copies ran.

    The x label (default: milliseconds) is in ``lang``; the operators keep MXNet's
    names, in a legend under the plot.

    >>> from mgpu.probes.timing import EngineEvent
    >>> fig = plot_timeline([EngineEvent("dot", 0, 1, 0.0, 2.0),
    ...                      EngineEvent("CopyCPU2CPU", 1, 2, 1.0, 1.5)])
    >>> len(fig.axes[0].patches)
    2
    """
    import matplotlib as mpl
    from matplotlib.patches import Patch

    xlabel = words(lang, "plot")["milliseconds"] if xlabel is None else xlabel

    devices = sorted({e.device for e in events})
    names = sorted({e.name for e in events})
    colors = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {n: colors[i % len(colors)] for i, n in enumerate(names)}
    rows = -(-len(names) // 3)  # legend rows, three names a row
    fig = figure(WIDTH, 0.5 * len(devices) + 1.2 + 0.25 * rows, layout="constrained")
    ax = fig.subplots()
    for e in events:
        row = devices.index(e.device)
        ax.barh(row, max(e.end_ms - e.start_ms, 1e-3), left=e.start_ms, height=0.6,
                color=color[e.name], edgecolor="black", linewidth=0.3)
    ax.set_yticks(range(len(devices)), [row_label.format(d) for d in devices])
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    handles = [Patch(color=color[n], label=n) for n in names]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(names), 3),
               fontsize=FONT["text"], frameon=False)
    ax.grid(axis="x", alpha=0.3)
    if title:
        ax.set_title(title)
    _style(ax)
    _set_font(fig, lang)
    return fig


def draw_queue_memory(runs: Sequence, lang: str = "en", title: str = ""):
    """The resident memory of :func:`~mgpu.probes.engine.queue_memory` runs over time,
    one line per run, with a dotted line where Python had pushed its last step.

    ``runs`` are :class:`mgpu.probes.engine.QueueRun` objects.

    >>> from mgpu.probes.engine import QueueRun
    >>> run = QueueRun(False, 2, 4.0, 0.1, 1.0, 100.0, 108.0,
    ...                [(0.0, 100.0), (0.5, 108.0)])
    >>> fig = draw_queue_memory([run])
    >>> len(fig.axes[0].lines)  # the run, its marker, the legend's
    3
    """
    wording = words(lang, "queue_memory")
    family = font_family(lang)
    fig = figure(7, 3.2)
    ax = fig.subplots()
    for run in runs:
        t = [s[0] for s in run.samples]
        mb = [s[1] - run.start_mb for s in run.samples]
        (line,) = ax.plot(t, mb, label=wording["wait" if run.wait else "nowait"])
        ax.axvline(run.push_s, color=line.get_color(), ls=":", lw=1)
    ax.set_xlabel(wording["time"], fontfamily=family)
    ax.set_ylabel(wording["memory"], fontfamily=family)
    ax.plot([], [], color="gray", ls=":", lw=1, label=wording["pushed"])
    ax.legend(prop={"family": family, "size": 8})
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title, fontfamily=family, fontsize=9)
    return fig
