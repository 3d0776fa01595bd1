"""`retimer report --png DIR`: the report's charts as PNG files, drawn with matplotlib.

Why optional: the HTML report needs no library; PNG files are for slides and papers, and
matplotlib is a large dependency (`pip install 'retimer[report]'`). The charts are the same
`svgplot.Chart` data the HTML draws.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .report import MAX_STREAM_CHARTS, Report, stream_chart
from .svgplot import PALETTE, Chart

STREAMS_PER_IMAGE = 24


class PngUnavailable(Exception):
    """matplotlib is not installed."""


def available() -> None:
    """Raise PngUnavailable (one line for the user) when matplotlib is missing."""
    _pyplot()


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PngUnavailable(
            "--png needs matplotlib: pip install 'retimer[report]' (or: pip install matplotlib)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw(ax: Any, chart: Chart, small: bool = False) -> None:
    size = 7 if small else 9
    ax.set_title(chart.title, fontsize=size + 1, loc="left")
    if chart.bars:
        labels = [b[0] for b in chart.bars]
        ax.barh(range(len(labels)), [b[1] for b in chart.bars],
                color=[PALETTE[i % len(PALETTE)] for i in range(len(labels))])
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
    if not small:
        ax.legend(fontsize=size - 1)


def write_pngs(report: Report, directory: Path) -> list[Path]:
    """One PNG per distribution chart, and the per-stream charts STREAMS_PER_IMAGE at a time."""
    plt = _pyplot()
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name, chart in zip(("ttft", "rate", "upstream-bound"), report.distributions, strict=False):
        fig, ax = plt.subplots(figsize=(7, 4 if chart.series else 1 + 0.4 * len(chart.bars)))
        _draw(ax, chart)
        fig.tight_layout()
        path = directory / f"{name}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    views = report.streams[:MAX_STREAM_CHARTS]
    for page, start in enumerate(range(0, len(views), STREAMS_PER_IMAGE), 1):
        batch = views[start:start + STREAMS_PER_IMAGE]
        cols = min(4, len(batch))
        rows = -(-len(batch) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.2 * rows), squeeze=False)
        for ax in axes.flat[len(batch):]:
            ax.set_visible(False)
        for ax, view in zip(axes.flat, batch, strict=False):
            _draw(ax, stream_chart(view), small=True)
        fig.tight_layout()
        path = directory / f"streams-{page}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
