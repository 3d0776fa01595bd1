"""`retimer report --png DIR`: the report's charts as PNG files, drawn with matplotlib.

Why optional: the HTML report needs no library; PNG files are for slides and papers, and
matplotlib is a large dependency (`pip install 'retimer[report]'`). The charts are the same
`svgplot.Chart` data the HTML draws, and like the HTML each image carries its colour key: a
distribution chart its own legend, a page of stream panels one key for all its panels.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Literal

from retimer.report.page import MAX_STREAM_CHARTS, stream_chart
from retimer.report.svgplot import BASE_COLOR, PALETTE, ROLE_COLORS, Chart, fit_text
from retimer.report.views import Report, StreamView
from retimer.report.whatif import combined
from retimer.report.whatif_view import whatif_chart

if TYPE_CHECKING:  # matplotlib is optional: imported when drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

STREAMS_PER_IMAGE = 24
PANEL_TITLE_CHARS = 46  # a longer title would run into the next panel's
# the stream panels' three lines, as svgplot draws them (report.stream_chart's roles)
STREAM_KEY: tuple[tuple[str, str, Literal["--", "-"]], ...] = (
    ("target schedule", "target", "--"), ("upstream arrivals", "upstream", "-"),
    ("client received", "client", "-"))


class PngUnavailable(Exception):
    """matplotlib is not installed."""


def available() -> None:
    """Raise PngUnavailable (one line for the user) when matplotlib is missing."""
    _pyplot()


def _pyplot() -> ModuleType:
    """matplotlib.pyplot, drawing off-screen. Typed as ModuleType (no annotation names one
    module), so what it returns is checked where it is used: `_draw`'s Axes, the Figures."""
    try:
        import matplotlib
    except ImportError:
        raise PngUnavailable(
            "--png needs matplotlib: pip install 'retimer[report]' (or: pip install matplotlib)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw(ax: Axes, chart: Chart, small: bool = False) -> None:
    size = 7 if small else 9
    title = fit_text(chart.title, PANEL_TITLE_CHARS, 1.0) if small else chart.title
    ax.set_title(title, fontsize=size + 1, loc="left")
    if chart.bars:
        labels = [b[0] for b in chart.bars]
        base = [min(chart.bar_base, b[1]) for b in chart.bars]
        if chart.bar_base > 0:
            ax.barh(range(len(labels)), base, color=BASE_COLOR)
        ax.barh(range(len(labels)), [b[1] - lo for b, lo in zip(chart.bars, base, strict=True)],
                left=base, color=[PALETTE[i % len(PALETTE)] for i in range(len(labels))])
        ax.set_yticks(range(len(labels)), labels, fontsize=size)
        ax.invert_yaxis()
        ax.set_xlim(0, chart.x_max or None)
        for i, b in enumerate(chart.bars):
            ax.text(b[1], i, f" {b[2]}", va="center", fontsize=size)
        return
    drawn = [s for s in chart.series if s.x]
    if not drawn:
        ax.text(0.5, 0.5, chart.note or "no data", ha="center", va="center",
                transform=ax.transAxes, fontsize=size)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    for s in drawn:
        ax.plot(s.x, s.y, drawstyle="steps-post" if s.step else "default", color=s.color,
                linestyle="--" if s.dashed else "-", linewidth=1.2, label=s.label)
    if chart.log_x:
        ax.set_xscale("log")
    ax.set_xlabel(chart.x_label, fontsize=size)
    ax.set_ylabel(chart.y_label, fontsize=size)
    ax.tick_params(labelsize=size - 1)
    ax.grid(alpha=0.3)
    if not small and len(drawn) > 1:  # below the plot, where it hides no line
        ax.legend(fontsize=size - 1, loc="upper left", bbox_to_anchor=(0.0, -0.16),
                  ncol=2 if len(drawn) > 3 else 1, frameon=False)


def distribution_figure(chart: Chart) -> Figure:
    """One distribution (or bar) chart as a matplotlib Figure, its legend included."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4 if chart.series else 1 + 0.4 * len(chart.bars)))
    _draw(ax, chart)
    return fig


def streams_figure(views: list[StreamView]) -> Figure:
    """Up to STREAMS_PER_IMAGE stream panels in one Figure, with one colour key on top
    for all of them (a key per small panel would hide its lines)."""
    from matplotlib.lines import Line2D

    plt = _pyplot()
    cols = min(4, len(views))
    rows = -(-len(views) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.2 * rows + 0.4), squeeze=False)
    for ax in axes.flat[len(views):]:
        ax.set_visible(False)
    for ax, view in zip(axes.flat, views, strict=False):
        _draw(ax, stream_chart(view), small=True)
    handles = [Line2D([], [], color=ROLE_COLORS[role], linestyle=style, linewidth=1.6)
               for _, role, style in STREAM_KEY]
    top = 1 - 0.4 / (2.2 * rows + 0.4)
    fig.legend(handles, [label for label, _, _ in STREAM_KEY], loc="upper center", ncol=3,
               fontsize=9, frameon=False, bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout(rect=(0, 0, 1, top))
    return fig


def write_pngs(report: Report, directory: Path) -> list[Path]:
    """One PNG per distribution chart, and the per-stream charts STREAMS_PER_IMAGE at a time."""
    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name, chart in zip(("ttft", "rate", "upstream-bound"), report.distributions, strict=False):
        fig = distribution_figure(chart)
        path = directory / f"{name}.png"
        fig.savefig(path, dpi=120, bbox_inches="tight")  # "tight": the legend below the plot
        plt.close(fig)
        written.append(path)
    if report.whatif:
        fig = distribution_figure(whatif_chart(combined(report.whatif)))
        path = directory / "whatif.png"
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        written.append(path)
    views = report.streams[:MAX_STREAM_CHARTS]
    for page, start in enumerate(range(0, len(views), STREAMS_PER_IMAGE), 1):
        fig = streams_figure(views[start:start + STREAMS_PER_IMAGE])
        path = directory / f"streams-{page}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
