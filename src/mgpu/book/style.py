"""The style of the book's figures, in one place: sizes, fonts, words per language, PNG
and SVG output, and how IPython shows a figure.

:mod:`mgpu.book.plot` (curves, bars, timelines) and :mod:`mgpu.book.diagrams` (boxes and
arrows) both draw with what is here, and neither imports the other.

The figures are sized for the page. A figure is shown at ``CSS_DPI`` (96) CSS pixels per
inch, as SVG is, and scaled down to the content column when it is wider (about 800 px in
a 1366-px window); the book's figures are ``WIDTH`` (7.5) inches wide, so they fit the
column at full size and a word of ``FONT["small"]`` points is 12.7 px on screen
(:func:`smallest_text_px` measures it). Plots are shown as palette PNGs at ``DPI``,
1.5 times the CSS pixels (sharp on most screens, at most ``MAX_PX`` wide); the
diagrams of :mod:`mgpu.book.diagrams` as SVG (:func:`vector`), their words drawn as
outlines, so that Chinese needs no font on the reader's machine.

The words a figure writes itself come from ``LABELS[lang][kind]``, and a Chinese figure
draws its words with a CJK font (:func:`cjk_font`, Debian's ``fonts-noto-cjk``).

matplotlib is imported on first use.
"""

from __future__ import annotations

from collections.abc import Mapping

# LABELS, words and font_family are the figure modules' own helpers: mgpu exports the
# font check, the output formats and the display hook.
__all__ = [
    "FontError",
    "cjk_font",
    "png_bytes",
    "show_in_notebooks",
    "smallest_text_px",
    "svg_bytes",
    "vector",
]

# --- sizes ---------------------------------------------------------------------------

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

# --- words ---------------------------------------------------------------------------

#: The words the figures write themselves, per language and kind of figure: ``"plot"``
#: (:mod:`mgpu.book.plot`'s curves, bars and timelines), ``"queue_memory"``
#: (:func:`mgpu.book.plot.draw_queue_memory`) and ``"diagram"``
#: (:mod:`mgpu.book.diagrams`; ``{i}``, ``{k}``... are filled in by the drawing).
LABELS: dict[str, dict[str, dict[str, str]]] = {
    "en": {
        "plot": {
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
        "queue_memory": {
            "time": "seconds",
            "memory": "resident memory above the start (MB)",
            "wait": "waits every step",
            "nowait": "never waits",
            "pushed": "Python done pushing",
        },
        "diagram": {
            "device": "device {i}",
            "minibatch": "minibatch\n{b} examples",
            "slice": "{b} examples",
            "forward": "forward",
            "backward": "backward",
            "allreduce": "allreduce:\nsum the\ngradients",
            "update": "update",
            "reduce_to_one": "reduce to device 0,\nthen broadcast",
            "scatter_gather": "reduce-scatter,\nthen all-gather",
            "ring": "ring",
            "per_phase": "{amount} each way,\nper phase",
            "per_step": "{amount} per step",
            "total_root": "device 0: 2(k−1)P/β\n= {root}P/β; others: 2P/β",
            "total_even": "every device: 2(k−1)P/(kβ)\n= {each}P/β",
            "total_ring": "every device: 2(k−1)P/(kβ)\n= {each}P/β in {steps} steps",
            "worker": "worker {i}",
            "server": "server {i}",
            "server_keys": "keys {keys}, …",
            "scheduler": "scheduler",
            "push": "push",
            "pull": "pull",
            "worker_traffic": "sends P, receives P",
            "server_traffic": "{m}P/{n} in, {m}P/{n} out",
            "control": "registration,\nbarriers",
            "sharding": "small arrays: whole, on server (9973 · key) mod n\n"
                        "arrays of ≥ 10⁶ numbers: 1/n on every server",
            "time": "milliseconds",
            "compute": "compute (forward, backward)",
            "copy": "copies (CopyCPU2CPU...)",
            "sum": "sums and packing (allreduce)",
            "sgd": "scalar and elementwise (update)",
        },
    },
    "zh": {
        "plot": {
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
        "queue_memory": {
            "time": "秒",
            "memory": "常驻内存相对起点的增量（MB）",
            "wait": "每步都等待",
            "nowait": "从不等待",
            "pushed": "Python 推送完毕",
        },
        "diagram": {
            "device": "设备 {i}",
            "minibatch": "小批量\n{b} 个样本",
            "slice": "{b} 个样本",
            "forward": "前向传播",
            "backward": "反向传播",
            "allreduce": "全归约：\n对梯度\n求和",
            "update": "更新",
            "reduce_to_one": "归约到设备 0，\n再广播",
            "scatter_gather": "归约分散，\n再全收集",
            "ring": "环形",
            "per_phase": "每个阶段\n每个方向 {amount}",
            "per_step": "每步 {amount}",
            "total_root": "设备 0：2(k−1)P/β\n= {root}P/β；其他设备：2P/β",
            "total_even": "每个设备：2(k−1)P/(kβ)\n= {each}P/β",
            "total_ring": "每个设备：2(k−1)P/(kβ)\n= {each}P/β，共 {steps} 步",
            "worker": "工作节点 {i}",
            "server": "服务器 {i}",
            "server_keys": "键 {keys}, …",
            "scheduler": "调度器",
            "push": "推送",
            "pull": "拉取",
            "worker_traffic": "发送 P，接收 P",
            "server_traffic": "收 {m}P/{n}，发 {m}P/{n}",
            "control": "注册、\n同步屏障",
            "sharding": "小数组：整个放在服务器 (9973 · 键) mod n 上\n"
                        "不少于 10⁶ 个数的数组：每台服务器各存 1/n",
            "time": "毫秒",
            "compute": "计算（前向、反向传播）",
            "copy": "复制（CopyCPU2CPU 等）",
            "sum": "求和与打包（全归约）",
            "sgd": "标量与逐元素运算（更新）",
        },
    },
}


def words(lang: str, kind: str,
          replace: Mapping[str, str] | None = None) -> dict[str, str]:
    """The words of a ``kind`` of figure in ``lang``, with some of them replaced by
    ``replace``; a clear error names the languages, kinds or words there are.

    >>> words("zh", "plot")["epoch"]
    '迭代周期'
    >>> words("en", "diagram", {"forward": "fwd"})["forward"]
    'fwd'
    >>> words("fr", "plot")
    Traceback (most recent call last):
    ...
    ValueError: lang must be one of ['en', 'zh'], got 'fr': pass 'en' for the ...
    """
    if lang not in LABELS:
        raise ValueError(f"lang must be one of {sorted(LABELS)}, got {lang!r}: pass "
                         "'en' for the English edition's figure, 'zh' for the Chinese "
                         "one")
    if kind not in LABELS[lang]:
        raise ValueError(f"kind must be one of {sorted(LABELS[lang])}, got {kind!r}")
    table = LABELS[lang][kind]
    unknown = set(replace or {}) - set(table)
    if unknown:
        raise ValueError(f"unknown label(s) {sorted(unknown)}: the {kind}'s words are "
                         f"{sorted(table)}")
    return {**table, **(replace or {})}


# --- fonts ---------------------------------------------------------------------------


class FontError(RuntimeError):
    """No font on this machine can draw Chinese characters."""


def cjk_font() -> str:
    """The family name of a font that draws Chinese (Noto Sans CJK preferred).

    matplotlib's font list is cached; fonts installed after the cache was written are
    found by looking at the font files themselves. Raises :class:`FontError`, naming the
    Debian package to install, when there is none.

    >>> "CJK" in cjk_font() or "Han" in cjk_font() or "WenQuanYi" in cjk_font()
    True
    """
    from matplotlib import font_manager as fm

    def best() -> str | None:
        names = {f.name for f in fm.fontManager.ttflist if _is_cjk_name(f.name)}
        # Sans before Serif, Simplified Chinese before the other regions.
        rank = sorted(names, key=lambda n: ("Serif" in n, "SC" not in n.split(), n))
        return rank[0] if rank else None

    name = best()
    if name is None:  # the cache predates the fonts: add the files that look like CJK
        for path in fm.findSystemFonts():
            if _is_cjk_name(path.rsplit("/", 1)[-1]):
                try:
                    fm.fontManager.addfont(path)
                except (OSError, RuntimeError, ValueError):
                    continue
        name = best()
    if name is None:
        raise FontError(
            "no font that can draw Chinese characters was found, so the Chinese "
            "diagrams cannot be drawn: install Debian's fonts-noto-cjk package "
            "(apt-get install fonts-noto-cjk, as root) and run again")
    return name


def _is_cjk_name(name: str) -> bool:
    low = name.lower().replace(" ", "")
    return any(s in low
               for s in ("cjk", "sourcehan", "wenquanyi", "wqy", "droidsansfallback"))


def font_family(lang: str) -> list[str]:
    """The font families of a figure in ``lang``: a CJK font first for Chinese (looked
    up only then).

    >>> font_family("en")
    ['DejaVu Sans']
    >>> font_family("zh")[1:]
    ['DejaVu Sans']
    """
    return [cjk_font(), "DejaVu Sans"] if lang == "zh" else ["DejaVu Sans"]


# --- output --------------------------------------------------------------------------


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


# --- on the page ---------------------------------------------------------------------


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


def show_in_notebooks() -> None:
    """In IPython/Jupyter, display figures as images (what ``%matplotlib inline`` does
    for pyplot figures; ours are plain :class:`~matplotlib.figure.Figure` objects): a
    palette PNG (:func:`png_bytes`) shown ``CSS_DPI`` pixels per inch wide, or SVG for a
    figure marked by :func:`vector`.

    Outside IPython it does nothing; the book's figure functions call it.

    >>> show_in_notebooks()  # not in IPython here: nothing to do
    """
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

    >>> from matplotlib.figure import Figure
    >>> fig = Figure(figsize=(WIDTH, 2)); _ = fig.text(0.5, 0.5, "ten", fontsize=10)
    >>> round(smallest_text_px(fig), 1)  # 10 pt
    13.3
    >>> fig = Figure(figsize=(20, 3)); _ = fig.add_subplot().plot([0, 1])
    >>> smallest_text_px(fig) < 9  # scaled to 40 %
    True
    """
    width_px = _shown_width_in(fig) * CSS_DPI
    px_per_pt = CSS_DPI / 72 * min(1.0, column_px / width_px)
    return min(t.get_fontsize() for t in _shown_texts(fig)) * px_per_pt
