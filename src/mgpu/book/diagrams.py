"""The book's diagrams, drawn with matplotlib, in English or in Chinese.

Each function returns a plain :class:`~matplotlib.figure.Figure` (as
:mod:`mgpu.book.plot` does) and takes ``lang`` (``"en"`` or ``"zh"``) and ``labels``, a
mapping that replaces some of the words of ``mgpu.book.style.LABELS``, so that the
Chinese edition draws the same diagram with Chinese words. The Chinese diagrams need a
CJK font (Debian's ``fonts-noto-cjk``); :func:`mgpu.book.style.cjk_font` finds it.

The diagrams are shown as SVG (:func:`mgpu.book.style.vector`), their words drawn as
outlines: sharp at every size, and Chinese needs no font on the reader's machine. They
are sized for the page as the plots are, about ``mgpu.book.style.WIDTH`` inches wide
with words of at least ``mgpu.book.style.FONT["small"]`` points. They read in light and
in dark mode: the background is transparent, the words are dark on light boxes with
outlines, and the arrows have mid-tone colours. Every artist carries a ``gid`` naming
what it is (``"box"``, ``"arrow"``, ``"link"``...); ``parts`` counts them.

- :func:`draw_step`: one data-parallel training step.
- :func:`draw_allreduce`: reduce-to-one, reduce-scatter/all-gather and ring, with the
  bytes on each link.
- :func:`draw_parameter_server`: workers, servers and the scheduler, push and pull.
- :func:`draw_engine_queues`: each device's engine queue on a timeline, from
  :func:`mgpu.probes.timing.engine_timeline`.

matplotlib is imported on first use.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from mgpu.book.style import FONT, WIDTH, font_family, show_in_notebooks, vector, words
from mgpu.probes.timing import event_category

# parts is this module's own helper (the tests use it too): mgpu exports the drawing
# functions.
__all__ = [
    "draw_allreduce",
    "draw_engine_queues",
    "draw_parameter_server",
    "draw_step",
]

# Colours: light or mid-tone fills under dark words, outlined; mid-tone lines that show
# on a white page and on a dark one (#121212).
_TEXT = "#111111"
_OUTLINE = "#333333"
_MUTED = "#8a8a8a"  # axis ticks and spines: readable on white and on #121212
_FILL = {
    "data": "#fdd0a2", "device": "#c6dbef", "forward": "#a1d99b", "backward": "#74c476",
    "allreduce": "#fc9272", "update": "#bcbddc", "lane": "#eef2f7", "tag": "#f7f7f7",
    "worker": "#c6dbef", "server": "#fdae6b", "scheduler": "#bcbddc", "note": "#f7f7f7",
}
_BLUE, _ORANGE = "#4f81bd", "#c8642a"  # arrows: gradients/push, sums/pull
_CATEGORY_COLOR = {"compute": "#74c476", "copy": "#6baed6", "sum": "#fd8d3c",
                   "sgd": "#9e9ac8"}

class _Style:
    """The words and the font of one diagram."""

    def __init__(self, lang: str, labels: Mapping[str, str] | None):
        self.words = words(lang, "diagram", labels)
        self.family = font_family(lang)

    def __call__(self, key: str, **values) -> str:
        return self.words[key].format(**values)


def _canvas(width: float, height: float, cols: int = 1):
    """A figure with ``cols`` blank panels, each measured in inches from its lower left,
    shown as SVG."""
    from matplotlib.figure import Figure

    show_in_notebooks()
    fig = vector(Figure(figsize=(width, height), facecolor="none"))
    axes = []
    for c in range(cols):
        ax = fig.add_axes((c / cols, 0, 1 / cols, 1))
        ax.set_xlim(0, width / cols)
        ax.set_ylim(0, height)
        ax.set_aspect("equal")
        ax.axis("off")
        axes.append(ax)
    return fig, axes


class _Node(NamedTuple):
    """A box of a diagram: its centre, its size and its patch (arrows stop at its
    outline)."""

    x: float
    y: float
    w: float
    h: float
    patch: object


def _box(ax, style: _Style, x: float, y: float, w: float, h: float, text: str,
         fill: str, gid: str = "box", fontsize: float = FONT["text"],
         zorder: float = 1) -> _Node:
    """A rounded box centred on ``(x, y)`` with its words."""
    from matplotlib.patches import FancyBboxPatch

    patch = ax.add_patch(FancyBboxPatch(
        (x - w / 2, y - h / 2), w, h, gid=gid, facecolor=fill, edgecolor=_OUTLINE,
        linewidth=1.1, boxstyle="round,pad=0,rounding_size=0.06", zorder=zorder))
    if text:
        ax.text(x, y, text, ha="center", va="center", color=_TEXT, fontsize=fontsize,
                fontfamily=style.family, gid="text", linespacing=1.25,
                zorder=zorder + 0.1)
    return _Node(x, y, w, h, patch)


def _tag(ax, style: _Style, x: float, y: float, text: str, gid: str = "link",
         fontsize: float = FONT["small"]) -> None:
    """Dark words on a small light outlined box (a link's label, a note, a title)."""
    ax.text(x, y, text, ha="center", va="center", color=_TEXT, fontsize=fontsize,
            fontfamily=style.family, gid=gid, linespacing=1.25, zorder=5,
            bbox={"boxstyle": "round,pad=0.25", "facecolor": _FILL["tag"],
                  "edgecolor": _OUTLINE, "linewidth": 0.7})


def _arrow(ax, start, end, color: str = _BLUE, both: bool = False, rad: float = 0.0,
           dashed: bool = False, gid: str = "arrow") -> None:
    """An arrow between two points, or between two boxes (from outline to outline)."""
    from matplotlib.patches import FancyArrowPatch

    ends = [(p.x, p.y) if isinstance(p, _Node) else p for p in (start, end)]
    ax.add_patch(FancyArrowPatch(
        *ends, arrowstyle="<|-|>" if both else "-|>",
        patchA=start.patch if isinstance(start, _Node) else None,
        patchB=end.patch if isinstance(end, _Node) else None,
        mutation_scale=11, color=color, linewidth=1.6, gid=gid,
        linestyle="--" if dashed else "-", shrinkA=2, shrinkB=2,
        connectionstyle=f"arc3,rad={rad}", zorder=2))


def parts(fig):
    """How many artists of each kind (``gid``) a diagram has: boxes, arrows, words...

    Returns a ``collections.Counter`` keyed by ``gid``.

    >>> sorted(parts(draw_step(k=2)).items())
    [('arrow', 8), ('box', 8), ('lane', 2), ('link', 2), ('text', 10)]
    """
    return Counter(artist.get_gid() for ax in fig.axes for artist in ax.get_children()
                   if artist.get_gid())


def draw_step(lang: str = "en", labels: Mapping[str, str] | None = None, k: int = 2,
              batch_size: int = 256):
    """One data-parallel step on ``k`` devices: split the minibatch, forward and
    backward on every device, allreduce the gradients, and the same update on every
    device.

    One lane per device; ``k`` arrows of each kind (split, forward to backward,
    gradients to the allreduce, sums to the updates).

    >>> fig = draw_step(k=3)
    >>> p = parts(fig); p["lane"], p["box"], p["arrow"]
    (3, 11, 12)
    >>> sorted(t.get_text() for t in fig.axes[0].texts if t.get_gid() == "link")[:1]
    ['85 examples']
    """
    from mgpu.checks import positive_int

    k = positive_int("k", k)
    s = _Style(lang, labels)
    lane_h, gap = 0.85, 0.2
    height = k * lane_h + (k - 1) * gap + 0.3
    fig, (ax,) = _canvas(7.6, height)
    ys = [height - 0.15 - lane_h / 2 - i * (lane_h + gap) for i in range(k)]
    mid = height / 2
    shard = batch_size // k
    batch = _box(ax, s, 0.62, mid, 1.14, min(height - 0.3, 1.3),
                 s("minibatch", b=batch_size), _FILL["data"])
    for y in ys:  # the lanes first, under everything else
        _box(ax, s, 4.9, y, 5.1, lane_h, "", _FILL["lane"], gid="lane", zorder=0.5)
    reduce = _box(ax, s, 5.6, mid, 0.9, height - 0.3, s("allreduce"),
                  _FILL["allreduce"], zorder=1.5)
    for i, y in enumerate(ys):
        ax.text(2.45, y + lane_h / 2 - 0.14, s("device", i=i), ha="left", va="center",
                color=_TEXT, fontsize=FONT["small"], fontfamily=s.family, gid="text",
                zorder=1)
        fwd = _box(ax, s, 2.9, y - 0.08, 0.9, 0.42, s("forward"), _FILL["forward"])
        bwd = _box(ax, s, 4.25, y - 0.08, 0.9, 0.42, s("backward"), _FILL["backward"])
        upd = _box(ax, s, 6.9, y - 0.08, 0.8, 0.42, s("update"), _FILL["update"])
        _arrow(ax, (batch.x + batch.w / 2, mid), (fwd.x - fwd.w / 2, fwd.y))
        _tag(ax, s, 1.78, (mid + fwd.y) / 2 if k > 1 else mid + 0.25,
             s("slice", b=shard if i < k - 1 else batch_size - shard * (k - 1)))
        _arrow(ax, fwd, bwd)
        _arrow(ax, (bwd.x + bwd.w / 2, bwd.y), (reduce.x - reduce.w / 2, bwd.y))
        _arrow(ax, (reduce.x + reduce.w / 2, upd.y), (upd.x - upd.w / 2, upd.y),
               color=_ORANGE)
    return fig


def _ring_positions(k: int, cx: float, cy: float,
                    r: float) -> list[tuple[float, float]]:
    """``k`` points clockwise on a circle, the first one top left (a square for 4)."""
    import math

    angles = [2 * math.pi * (i - 0.5) / k for i in range(k)]
    return [(cx + r * math.sin(a), cy + r * math.cos(a)) for a in angles]


def _fmt(x: float) -> str:
    return f"{x:g}"


def draw_allreduce(lang: str = "en", labels: Mapping[str, str] | None = None,
                   k: int = 4):
    """Three ways to allreduce ``P`` bytes over ``k`` devices, and what each link
    carries.

    Left, reduce to device 0 then broadcast: ``k-1`` links carry ``P`` each way and
    device 0 moves ``2(k-1)P``. Middle, reduce-scatter then all-gather: every pair of
    devices exchanges ``P/k`` each way in each phase. Right, a ring: ``2(k-1)`` steps of
    ``P/k`` to the next device. Below each panel, the time per device at bandwidth
    ``β``.

    >>> p = parts(draw_allreduce(k=4))
    >>> p["box"], p["arrow"], p["link"], p["title"], p["note"]
    (12, 13, 13, 3, 3)
    """
    from mgpu.checks import positive_int

    k = positive_int("k", k, minimum=2)
    s = _Style(lang, labels)
    width, height = WIDTH, 3.55
    fig, axes = _canvas(width, height, cols=3)
    cx, cy, r = width / 6, 1.85, 1.05
    pos = _ring_positions(k, cx, cy, r)
    each, steps = _fmt(2 * (k - 1) / k), 2 * (k - 1)
    nodes = []
    titles = ("reduce_to_one", "scatter_gather", "ring")
    for ax, title in zip(axes, titles, strict=True):
        _tag(ax, s, cx, 3.3, s(title), gid="title", fontsize=FONT["label"])
        nodes.append([_box(ax, s, x, y, 0.78, 0.36, s("device", i=i), _FILL["device"])
                      for i, (x, y) in enumerate(pos)])

    def along(i: int, j: int, t: float) -> tuple[float, float]:
        return pos[i][0] * (1 - t) + pos[j][0] * t, pos[i][1] * (1 - t) + pos[j][1] * t

    # Reduce to one: every other device <-> device 0, P each way; the key to the labels
    # on the last link, which has room beside it.
    ax, dev = axes[0], nodes[0]
    for i in range(1, k):
        _arrow(ax, dev[i], dev[0], both=True, color=_ORANGE)
        words = s("per_phase", amount="P") if i == k - 1 else "P"
        _tag(ax, s, *along(i, 0, 0.5), words)
    _tag(ax, s, cx, 0.4, s("total_root", root=_fmt(2 * (k - 1))), gid="note",
         fontsize=FONT["small"])
    # Reduce-scatter + all-gather: every pair, P/k each way in each phase.
    ax, dev = axes[1], nodes[1]
    for i in range(k):
        for j in range(i + 1, k):
            _arrow(ax, dev[i], dev[j], both=True)
            _tag(ax, s, *along(i, j, 0.5 if (j - i) % 2 else 0.3), "P/k")
    _tag(ax, s, cx, 0.4, s("total_even", each=each), gid="note", fontsize=FONT["small"])
    # Ring: device i -> device i+1 only, P/k per step.
    ax, dev = axes[2], nodes[2]
    for i in range(k):
        j = (i + 1) % k
        _arrow(ax, dev[i], dev[j], rad=-0.3, color=_BLUE)
        x, y = along(i, j, 0.5)  # the label sits outside the ring, on the arrow's curve
        _tag(ax, s, cx + (x - cx) * 1.45, cy + (y - cy) * 1.45,
             s("per_step", amount="P/k") if i == 0 else "P/k")
    _tag(ax, s, cx, 0.4, s("total_ring", each=each, steps=steps), gid="note",
         fontsize=FONT["small"])
    return fig


def draw_parameter_server(lang: str = "en", labels: Mapping[str, str] | None = None,
                          workers: int = 3, servers: int = 2, keys: int = 6):
    """A parameter server: every worker pushes its gradients to the servers and pulls
    the new weights back; each server holds a share of the keys; a scheduler connects
    them.

    Which keys each server holds follows MXNet's rule for small arrays, server
    ``(9973 * key) % servers``. Per step a worker sends and receives ``P`` bytes and a
    server ``m*P/n`` each way (``m`` workers, ``n`` servers).

    >>> p = parts(draw_parameter_server(workers=3, servers=2))
    >>> p["box"], p["arrow"], p["control"]
    (6, 12, 5)
    """
    from mgpu.checks import positive_int

    m, n = positive_int("workers", workers), positive_int("servers", servers)
    s = _Style(lang, labels)
    width, height = max(WIDTH, 1.95 * max(m, n) + 1.75), 4.6
    fig, (ax,) = _canvas(width, height)
    span = width - 1.75  # the scheduler's column on the right
    wx = [0.15 + span * (i + 0.5) / m for i in range(m)]
    sx = [0.15 + span * (j + 0.5) / n for j in range(n)]
    ys, yw = 3.25, 0.85
    servers_, workers_ = [], []
    for j, x in enumerate(sx):
        held = [str(key) for key in range(keys) if (key * 9973) % n == j][:3]
        words = s("server", i=j) + "\n" + s("server_keys", keys=", ".join(held))
        servers_.append(_box(ax, s, x, ys, 1.5, 0.66, words, _FILL["server"]))
        _tag(ax, s, x, ys + 0.6, s("server_traffic", m=m, n=n))
    for i, x in enumerate(wx):
        workers_.append(_box(ax, s, x, yw, 1.3, 0.42, s("worker", i=i),
                             _FILL["worker"]))
        _tag(ax, s, x, yw - 0.47, s("worker_traffic"))
    for w in workers_:
        for sv in servers_:
            _arrow(ax, (w.x - 0.12, w.y + w.h / 2), (sv.x - 0.12, sv.y - sv.h / 2),
                   color=_BLUE)
            _arrow(ax, (sv.x + 0.12, sv.y - sv.h / 2), (w.x + 0.12, w.y + w.h / 2),
                   color=_ORANGE)
    # The key to the colours, once, in the middle of the links.
    for dx, color, word in ((-0.75, _BLUE, "push"), (0.75, _ORANGE, "pull")):
        x, y = 0.15 + span / 2 + dx, (ys + yw) / 2
        _arrow(ax, (x - 0.65, y), (x - 0.25, y), color=color, gid="key")
        _tag(ax, s, x + 0.1, y, s(word), gid="legend", fontsize=FONT["text"])
    # The scheduler, on the right, talks to every node (dashed: control messages only).
    sch = _box(ax, s, width - 0.75, (ys + yw) / 2, 1.2, 0.42, s("scheduler"),
               _FILL["scheduler"])
    for node in [*servers_, *workers_]:
        _arrow(ax, sch, node, color=_MUTED, dashed=True, gid="control", both=True)
    _tag(ax, s, sch.x, sch.y - 0.6, s("control"))
    _tag(ax, s, 0.15 + span / 2, 4.3, s("sharding"), gid="note")
    return fig


def draw_engine_queues(events: Sequence, lang: str = "en",
                       labels: Mapping[str, str] | None = None):
    """Each device's engine queue on a timeline: one bar per operator, coloured by its
    kind (``event_category``): compute, copies, the allreduce's sums, the update's
    operators.

    ``events`` come from :func:`mgpu.probes.timing.engine_timeline`; the engine's
    bookkeeping (``DeleteVariable``...) is left out.

    >>> from mgpu.probes.timing import EngineEvent
    >>> fig = draw_engine_queues([EngineEvent("Convolution", 0, 1, 0.0, 2.0),
    ...                           EngineEvent("CopyCPU2CPU", 1, 2, 2.0, 2.5),
    ...                           EngineEvent("DeleteVariable", 1, 2, 2.5, 2.6)])
    >>> parts(fig)["bar"], [t.get_text() for t in fig.axes[0].get_yticklabels()]
    (2, ['device 0', 'device 1'])
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    s = _Style(lang, labels)
    shown = [(e, event_category(e.name)) for e in events]
    shown = [(e, c) for e, c in shown if c is not None]
    if not shown:
        raise ValueError("draw_engine_queues: no operators to draw (pass the events of "
                         "mgpu.engine_timeline(work) for some work)")
    devices = sorted({e.device for e, _ in shown})
    used = [c for c in _CATEGORY_COLOR if any(c == cat for _, cat in shown)]
    show_in_notebooks()
    height = 0.5 * len(devices) + 1.2 + 0.3 * -(-len(used) // 2)
    fig = vector(Figure(figsize=(WIDTH, height), facecolor="none",
                        layout="constrained"))
    ax = fig.subplots()
    ax.set_facecolor("none")
    t0 = min(e.start_ms for e, _ in shown)
    for e, c in shown:
        ax.barh(devices.index(e.device), max(e.end_ms - e.start_ms, 0.02),
                left=e.start_ms - t0, height=0.6, color=_CATEGORY_COLOR[c],
                edgecolor=_OUTLINE, linewidth=0.3, gid="bar", clip_on=False)
    # First: tick_params would reset the labels' style.
    ax.tick_params(colors=_MUTED, labelsize=FONT["text"])
    ax.set_yticks(range(len(devices)), [s("device", i=d) for d in devices])
    ax.invert_yaxis()
    ax.set_xlabel(s("time"), color=_MUTED, fontfamily=s.family, fontsize=FONT["label"])
    for t in ax.get_yticklabels():  # device names: dark words on light boxes
        t.set_fontfamily(s.family)
        t.set_color(_TEXT)
        t.set_bbox({"boxstyle": "round,pad=0.25", "facecolor": _FILL["tag"],
                    "edgecolor": _OUTLINE, "linewidth": 0.7})
    for spine in ax.spines.values():
        spine.set_color(_MUTED)
    handles = [Patch(facecolor=_CATEGORY_COLOR[c], edgecolor=_OUTLINE, label=s(c))
               for c in used]
    legend = fig.legend(handles=handles, loc="outside lower center",
                        ncols=min(len(used), 2), frameon=True,
                        prop={"family": s.family, "size": FONT["text"]})
    legend.get_frame().set(facecolor=_FILL["tag"], edgecolor=_OUTLINE, alpha=1.0)
    for t in legend.get_texts():
        t.set_color(_TEXT)
    return fig
