"""Figures for the book: training curves and timing bars, in English or Chinese.

Every plotting function takes ``lang`` (``"en"`` or ``"zh"``): the axis labels and
legend words that the function writes itself come from ``LABELS[lang]``, and a Chinese
figure draws all of its words with a CJK font (:func:`mgpu.book.diagrams.cjk_font`,
Debian's ``fonts-noto-cjk``). Words that the caller passes (bar names, a title, a y
label) are the caller's, in the caller's language.

The figures are sized for the page. A figure is shown at ``CSS_DPI`` (96) CSS pixels per
inch, as SVG is, and scaled down to the content column when it is wider (about 800 px in
a 1366-px window); the book's figures are ``WIDTH`` (7.5) inches wide, so they fit the
column at full size and a word of ``FONT["small"]`` points is 12.7 px on screen
(:func:`smallest_text_px` measures it). Plots are shown as palette PNGs at ``DPI``,
1.5 times the CSS pixels (sharp on most screens, at most ``MAX_PX`` wide); the
diagrams of :mod:`mgpu.book.diagrams` as SVG (:func:`vector`), their words drawn as
outlines, so that Chinese needs no font on the reader's machine.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "figure",
    "plot_bars",
    "plot_history",
    "plot_timeline",
    "png_bytes",
    "smallest_text_px",
    "svg_bytes",
    "vector",
]

#: Width of the book's figures, in inches: at ``CSS_DPI`` they fit the content column.
WIDTH = 7.5
#: CSS pixels per inch of a figure on the page (SVG's own scale: 72 pt = 96 px).
CSS_DPI = 96
#: Width of the content column in a 1366-px window, in CSS pixels.
COLUMN_PX = 800
#: Resolution of the PNG figures (dots per inch): 1.5 image pixels per CSS pixel, sharp
#: on most screens while the site stays within its 15 MB (192 dpi made it 15.1 MB).
DPI = 144
#: The widest PNG figure, in pixels (a wider figure is drawn at a lower resolution).
MAX_PX = 1600
#: Font sizes in points: on screen, a point is 96/72 = 1.33 CSS px (a figure at full
#: size).
FONT = {"small": 9.5, "text": 10.0, "label": 11.0, "title": 12.0}
#: Margin that ``bbox_inches="tight"`` leaves around a figure's contents, in inches.
_PAD = 0.1

#: The words the plotting functions write themselves, per language.
LABELS: dict[str, dict[str, str]] = {
    "en": {
        "epoch": "epoch",
        "loss": "training loss",
        "accuracy": "accuracy",
        "run": "{n} x {kinds}, batch {batch}, lr {lr:g}",
        "test": "{label} (test)",
        "train": "{label} (train)",
        "test_key": "test (solid)",
        "train_key": "train (dashed)",
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
        "test_key": "测试（实线）",
        "train_key": "训练（虚线）",
        "seconds_per_epoch": "每个迭代周期的秒数",
        "milliseconds": "毫秒",
    },
}


def _words(lang: str) -> dict[str, str]:
    """The words of ``lang``, or a clear error naming the languages there are."""
    if lang not in LABELS:
        raise ValueError(f"lang must be one of {sorted(LABELS)}, got {lang!r}: pass "
                         "'en' for the English edition's figure, 'zh' for the Chinese "
                         "one")
    return LABELS[lang]


def _family(lang: str) -> list[str]:
    """The font families of a figure in ``lang``: a CJK font first for Chinese."""
    if lang == "zh":
        from mgpu.book.diagrams import cjk_font

        return [cjk_font(), "DejaVu Sans"]
    return ["DejaVu Sans"]


def _set_font(fig, lang: str) -> None:
    """Draw every word of ``fig`` (titles, labels, ticks, legends) in ``lang``'s font.

    The family is set on each text itself, not in ``rcParams``: the figure is rendered
    later (when it is displayed or glued), outside any ``rc_context`` of the plotting
    function.
    """
    from matplotlib.text import Text

    family = _family(lang)
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


def png_bytes(fig, dpi: float | None = None) -> bytes:
    """``fig`` as a PNG with a palette of at most 256 colours: a third of the bytes of
    matplotlib's RGBA PNG for the book's figures (lines, bars and text), with no visible
    difference.

    At ``dpi`` (default ``DPI``), lowered if need be so that the image is at most
    ``MAX_PX`` pixels wide. A figure with a transparent background keeps its
    transparency.

    >>> from matplotlib.figure import Figure
    >>> fig = Figure(figsize=(2, 1)); _ = fig.add_subplot().plot([0, 1], [1, 0])
    >>> data = png_bytes(fig)
    >>> data[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
    True
    >>> from PIL import Image; import io
    >>> Image.open(io.BytesIO(data)).mode
    'P'
    >>> Image.open(io.BytesIO(png_bytes(Figure(figsize=(20, 1))))).width <= MAX_PX
    True
    """
    import io

    from PIL import Image

    dpi = DPI if dpi is None else dpi
    raw = io.BytesIO()
    fig.savefig(raw, format="png", dpi=dpi, bbox_inches="tight", pad_inches=_PAD)
    image = Image.open(raw)
    # Too wide: drawn again, smaller (text stays sharp, unlike a resized image).
    while image.width > MAX_PX:
        dpi *= (MAX_PX - 4) / image.width
        raw = io.BytesIO()
        fig.savefig(raw, format="png", dpi=dpi, bbox_inches="tight", pad_inches=_PAD)
        image = Image.open(raw)
    transparent = image.mode == "RGBA" and image.getextrema()[3][0] < 255
    if transparent:
        palette = image.quantize(256, method=Image.Quantize.FASTOCTREE,
                                 dither=Image.Dither.NONE)
    else:
        palette = image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT,
                                                dither=Image.Dither.NONE)
    out = io.BytesIO()
    palette.save(out, format="png", optimize=True)
    return out.getvalue()


def svg_bytes(fig) -> bytes:
    """``fig`` as SVG, its words drawn as outlines (no font needed to show Chinese), the
    same bytes for the same figure (no date, fixed ids).

    Its size is the figure's, in points: shown at 96 CSS pixels per inch.

    >>> from matplotlib.figure import Figure
    >>> fig = Figure(figsize=(2, 1)); _ = fig.text(0.5, 0.5, "device")
    >>> data = svg_bytes(fig); data.startswith(b"<?xml") and b"<svg" in data
    True
    >>> b"<text" in data, data == svg_bytes(fig)
    (False, True)
    """
    import io

    import matplotlib as mpl

    out = io.BytesIO()
    with mpl.rc_context({"svg.fonttype": "path", "svg.hashsalt": "mgpu"}):
        fig.savefig(out, format="svg", bbox_inches="tight", pad_inches=_PAD,
                    metadata={"Date": None})
    return _minify(out.getvalue().decode("utf-8")).encode("utf-8")


def _short(x: float) -> str:
    """A coordinate to a hundredth of a point; a scale factor to four digits."""
    text = f"{x:.2f}" if abs(x) >= 1 else f"{x:.4g}"
    return text.rstrip("0").rstrip(".") if "." in text and "e" not in text else text


def _minify(svg: str) -> str:
    """matplotlib's SVG in about 80 % of the bytes: no metadata or comments, coordinates
    to a hundredth of a point, no indentation.

    >>> _minify('<svg> <!-- a --> <path d="M 1.23456 7 L 2.5 3.333"/> </svg>')
    '<svg><path d="M 1.23 7 L 2.5 3.33"/></svg>'
    >>> _minify('<g transform="scale(0.015625)"/>')
    '<g transform="scale(0.01562)"/>'
    """
    import re

    svg = re.sub(r"<metadata>.*?</metadata>|<!--.*?-->", "", svg, flags=re.S)
    svg = re.sub(r"-?\d+\.\d{3,}", lambda m: _short(float(m.group())), svg)
    svg = re.sub(r">\s+<", "><", svg)
    return re.sub(r"\s*\n\s*", " ", svg)


def vector(fig):
    """Mark ``fig`` to be shown as SVG (:func:`svg_bytes`), not as a PNG; return it.

    For drawings of boxes, arrows and words (the diagrams), which SVG keeps sharp at
    every size in few bytes; a plot of many points or bars stays a PNG.

    >>> from matplotlib.figure import Figure
    >>> _format(vector(Figure())), _format(Figure())
    ('svg', 'png')
    """
    fig._mgpu_format = "svg"
    return fig


def _format(fig) -> str:
    return getattr(fig, "_mgpu_format", "png")


def _shown_width_in(fig) -> float:
    """The width in inches of what :func:`png_bytes` and :func:`svg_bytes` save."""
    fig.draw_without_rendering()  # lays the figure out and makes its tick labels
    return fig.get_tightbbox().width + 2 * _PAD


def _png_output(fig):
    """IPython's PNG of a plot: the bytes, and their width in CSS pixels."""
    if _format(fig) != "png":
        return None
    data = png_bytes(fig)
    return data, {"width": round(_shown_width_in(fig) * CSS_DPI)}


def _svg_output(fig):
    """IPython's SVG representation of a diagram (see :func:`vector`)."""
    return svg_bytes(fig).decode("utf-8") if _format(fig) == "svg" else None


def _show_in_notebooks() -> None:
    """In IPython/Jupyter, display figures as images (what ``%matplotlib inline`` does
    for pyplot figures; ours are plain :class:`~matplotlib.figure.Figure` objects): a
    palette PNG (:func:`png_bytes`) shown ``CSS_DPI`` pixels per inch wide, or SVG for a
    figure marked by :func:`vector`."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        from matplotlib.figure import Figure

        formatters = shell.display_formatter.formatters
        for mime in list(formatters):  # one representation only: no PDF or JPEG copies
            if mime != "text/plain":
                formatters[mime].pop(Figure, None)
        formatters["image/png"].for_type(Figure, _png_output)
        formatters["image/svg+xml"].for_type(Figure, _svg_output)


def _shown_texts(fig) -> list:
    """The words ``fig`` draws: every visible, non-empty text, tick labels included (but
    not those of an axes that is switched off)."""
    from matplotlib.text import Text

    fig.draw_without_rendering()
    hidden = {id(t) for ax in fig.axes if not ax.axison
              for axis in (ax.xaxis, ax.yaxis) for t in axis.findobj(Text)}
    return [t for t in fig.findobj(Text)
            if t.get_visible() and t.get_text().strip() and id(t) not in hidden]


def smallest_text_px(fig, column_px: float = COLUMN_PX) -> float:
    """The font size, in CSS pixels on screen, of the smallest words of ``fig`` as the
    book shows it: ``CSS_DPI`` pixels per inch, scaled down to fit a column
    ``column_px`` wide.

    >>> round(smallest_text_px(plot_bars(["a", "b"], [1.0, 2.0])), 1)  # 10 pt
    13.3
    >>> fig = figure(20, 3); _ = fig.add_subplot().plot([0, 1])  # scaled to 40 %
    >>> smallest_text_px(fig) < 9
    True
    """
    width_px = _shown_width_in(fig) * CSS_DPI
    px_per_pt = CSS_DPI / 72 * min(1.0, column_px / width_px)
    return min(t.get_fontsize() for t in _shown_texts(fig)) * px_per_pt


def figure(width: float = WIDTH, height: float = 3.4, layout: str = "tight"):
    """A figure of ``width`` x ``height`` inches for the book, with a ``layout``.

    The book's figures are ``WIDTH`` inches wide, the width of the page's column; a
    wider one is scaled down on the page, and its words with it
    (:func:`smallest_text_px`). It is not registered with pyplot: nothing is shown until
    the caller shows it (as a cell's value or through MyST-NB's ``glue``), and nothing
    leaks between calls. In IPython it is displayed as a palette PNG
    (:func:`png_bytes`), or as SVG once marked by :func:`vector`.

    >>> fig = figure(4, 3); ax = fig.add_subplot()
    >>> tuple(fig.get_size_inches())
    (4.0, 3.0)
    """
    from matplotlib.figure import Figure

    _show_in_notebooks()
    return Figure(figsize=(width, height), layout=layout)


def _text_width_in(text: str, points: float) -> float:
    """Roughly how wide ``text`` is at ``points`` (CJK characters count double)."""
    import unicodedata

    ems = sum(1.0 if unicodedata.east_asian_width(c) in "WF" else 0.6 for c in text)
    return ems * points / 72


def plot_history(histories: Sequence, labels: Sequence[str] | None = None,
                 title: str = "", xlabel: str | None = None,
                 ylabels: tuple[str, str] | None = None, lang: str = "en"):
    """Loss (left) and train/test accuracy (right) per epoch of one or more runs.

    ``histories`` are :class:`mgpu.loop.History` objects; ``labels`` default to each
    run's devices, batch and learning rate, in ``lang``. The axis labels and the
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
    ['1 个 cpu，批量 256，学习率 0.1']
    >>> sorted(t.get_text() for t in fig.legends[0].get_texts())
    ['1 x cpu, batch 256, lr 0.1', 'test (solid)', 'train (dashed)']
    """
    from matplotlib.lines import Line2D

    words = _words(lang)
    xlabel = words["epoch"] if xlabel is None else xlabel
    ylabels = (words["loss"], words["accuracy"]) if ylabels is None else ylabels
    if labels is None:
        labels = [words["run"].format(
            n=len(h.devices), batch=h.batch_size, lr=h.lr,
            kinds="+".join(sorted({d.split("(")[0] for d in h.devices})))
            for h in histories]
    fig = figure(WIDTH, 3.7, layout="constrained")
    ax_loss, ax_acc = fig.subplots(1, 2)
    runs = []
    for h, lab in zip(histories, labels, strict=True):
        epochs = range(1, len(h.loss) + 1)
        (line,) = ax_loss.plot(epochs, h.loss, marker="o", label=lab)
        ax_acc.plot(epochs, h.test_acc, marker="o", color=line.get_color(),
                    label=words["test"].format(label=lab))
        ax_acc.plot(epochs, h.train_acc, ls="--", color=line.get_color(),
                    label=words["train"].format(label=lab))
        runs.append(line)
    ax_loss.set(xlabel=xlabel, ylabel=ylabels[0])
    ax_acc.set(xlabel=xlabel, ylabel=ylabels[1])
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
        _style(ax)
    keys = [Line2D([], [], color="#555555", marker="o", label=words["test_key"]),
            Line2D([], [], color="#555555", ls="--", label=words["train_key"])]
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

    words = _words(lang)
    ylabel = words["seconds_per_epoch"] if ylabel is None else ylabel
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

    xlabel = _words(lang)["milliseconds"] if xlabel is None else xlabel

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
