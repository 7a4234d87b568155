"""Figures for the book: training curves and timing bars (matplotlib)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["plot_bars", "plot_history", "plot_timeline"]


def _show_in_notebooks() -> None:
    """In IPython/Jupyter, display figures as PNG images (what ``%matplotlib inline`` does for
    pyplot figures; ours are plain :class:`~matplotlib.figure.Figure` objects)."""
    try:
        from IPython import get_ipython
        from IPython.core.pylabtools import select_figure_formats
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        select_figure_formats(shell, {"png"}, bbox_inches="tight", dpi=110)


def _figure(width: float, height: float):
    """A figure that is not registered with pyplot: nothing is shown until the caller shows it
    (as a cell's value or through MyST-NB's ``glue``), and nothing leaks between calls."""
    from matplotlib.figure import Figure

    _show_in_notebooks()
    return Figure(figsize=(width, height), layout="tight")


def plot_history(histories: Sequence, labels: Sequence[str] | None = None, title: str = "",
                 xlabel: str = "epoch", ylabels: tuple[str, str] = ("training loss", "accuracy")):
    """Loss (left) and train/test accuracy (right) per epoch for one or more training runs.

    ``histories`` are :class:`mgpu.train.History` objects; ``labels`` default to their ``label``.
    Axis labels are parameters so that a translated page can pass its own words.

    >>> from mgpu.train import History
    >>> h = History(["cpu(0)"], 256, 0.1, "lenet", loss=[1.0, 0.5], train_acc=[0.6, 0.8],
    ...             test_acc=[0.7, 0.8], epoch_time=[1.0, 1.0], images_per_sec=[1.0, 1.0])
    >>> fig = plot_history([h]); len(fig.axes)
    2
    """
    labels = list(labels) if labels is not None else [h.label for h in histories]
    fig = _figure(9, 3.4)
    ax_loss, ax_acc = fig.subplots(1, 2)
    for h, lab in zip(histories, labels, strict=True):
        epochs = range(1, len(h.loss) + 1)
        (line,) = ax_loss.plot(epochs, h.loss, marker="o", label=lab)
        ax_acc.plot(epochs, h.test_acc, marker="o", color=line.get_color(), label=f"{lab} (test)")
        ax_acc.plot(epochs, h.train_acc, ls="--", color=line.get_color(),
                    label=f"{lab} (train)")
    ax_loss.set(xlabel=xlabel, ylabel=ylabels[0])
    ax_acc.set(xlabel=xlabel, ylabel=ylabels[1])
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    ax_acc.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return fig


def plot_bars(names: Sequence[str], values: Sequence[float], ylabel: str = "seconds per epoch",
              title: str = "", fmt: str = "{:.2f}"):
    """A bar chart with each bar's value written on it (epoch times, throughputs, ratios).

    >>> fig = plot_bars(["1 device", "2 devices"], [3.2, 3.4]); len(fig.axes[0].patches)
    2
    """
    import matplotlib as mpl

    fig = _figure(max(4.0, 1.3 * len(names) + 1), 3.2)
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
    return fig


def plot_timeline(events: Sequence, title: str = "", xlabel: str = "milliseconds",
                  row_label: str = "cpu({})"):
    """One row per device's engine queue, one bar per operator (from
    :func:`mgpu.timing.engine_timeline`): what ran in parallel, and where the copies ran.

    >>> from mgpu.timing import EngineEvent
    >>> fig = plot_timeline([EngineEvent("dot", 0, 1, 0.0, 2.0),
    ...                      EngineEvent("CopyCPU2CPU", 1, 2, 1.0, 1.5)])
    >>> len(fig.axes[0].patches)
    2
    """
    import matplotlib as mpl
    from matplotlib.patches import Patch

    devices = sorted({e.device for e in events})
    names = sorted({e.name for e in events})
    colors = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {n: colors[i % len(colors)] for i, n in enumerate(names)}
    fig = _figure(9, 0.7 * len(devices) + 1.4)
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
    return fig
