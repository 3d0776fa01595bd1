"""Small charts as inline SVG, for `retimer report`: no plotting library, nothing fetched.

Why hand-made: a report must open anywhere with no network, and it draws only steps, lines
and bars. A `Chart` is plain data, so the optional PNG output (retimer.report.png) draws the
same charts with matplotlib. Every text that reaches the SVG is escaped here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

PALETTE = ("#2a6fdb", "#e4572e", "#17a398", "#8c5fbf", "#f2a541", "#4a4e69", "#d81159",
           "#6a994e")
ROLE_COLORS = {"target": "#8a8a8a", "upstream": "#e39b2d", "client": "#2a6fdb",
               "reference": "#444444"}  # reference: a line every group is read against
BASE_COLOR = "#c8c8c8"  # the part of a bar every bar shares (Chart.bar_base)


@dataclass(slots=True)
class Series:
    """One line: `role` (target, upstream, client) or a group's palette index picks its look."""

    label: str
    x: list[float]
    y: list[float]
    role: str = ""
    color_index: int = 0
    dashed: bool = False
    step: bool = True
    key: str = ""  # the legend's name, when the label is too long for a small chart

    @property
    def legend_text(self) -> str:
        return self.key or self.label

    @property
    def color(self) -> str:
        return ROLE_COLORS.get(self.role) or PALETTE[self.color_index % len(PALETTE)]


@dataclass(slots=True)
class Chart:
    """Lines (`series`) or horizontal bars (`bars`: label, value, text shown)."""

    title: str
    x_label: str = ""
    y_label: str = ""
    series: list[Series] = field(default_factory=list)
    bars: list[tuple[str, float, str]] = field(default_factory=list)
    log_x: bool = False
    x_max: float | None = None  # bars: the axis end (e.g. 1.0 for shares)
    bar_base: float = 0.0  # bars: a part every bar shares, drawn first in grey (then the rest)
    bar_base_label: str = ""  # what that part is, for its tooltip
    note: str = ""  # shown when there is nothing to draw


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks, v = [], first
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 10))
        v += step
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks between lo and hi (> 0), thinned to at most 8."""
    out = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        out += [m * 10.0 ** e for m in (1, 2, 5) if lo <= m * 10.0 ** e <= hi]
    while len(out) > 8:
        out = out[::2]
    return out or [lo]


def fmt(v: float) -> str:
    """A tick label: 1.5k, 250, 0.25."""
    a = abs(v)
    if a >= 10_000:
        return f"{v / 1000:.0f}k"
    if a >= 1000:
        return f"{v / 1000:.1f}".rstrip("0").rstrip(".") + "k"
    if a >= 10 or v == 0:
        return f"{v:.0f}"
    return f"{v:.2f}".rstrip("0").rstrip(".")


def thin(x: list[float], y: list[float], limit: int = 600) -> tuple[list[float], list[float]]:
    """At most `limit` points, the first and last kept (a staircase finer than a pixel)."""
    if len(x) <= limit:
        return x, y
    idx = sorted({round(i * (len(x) - 1) / (limit - 1)) for i in range(limit)})
    return [x[i] for i in idx], [y[i] for i in idx]


def render(chart: Chart, width: int = 300, height: int = 170, css_class: str = "") -> str:
    """The chart as one <svg> element; a chart of two or more lines gets its legend below
    the plot (the SVG grows by its rows), so a screenshot or a copied chart still says
    which line is which."""
    left, right, top, bottom = 46, 10, 24, 32
    pw, ph = width - left - right, height - top - bottom
    drawn = [s for s in chart.series if s.x]
    legend = _legend(drawn, 6, height, width - 12) if len(drawn) > 1 and not chart.bars else []
    total = height + (LEGEND_ROW * (1 + legend[-1][1]) + 4 if legend else 0)
    cls = f' class="{escape(css_class)}"' if css_class else ""
    out = [f'<svg{cls} xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total}" '
           f'viewBox="0 0 {width} {total}" role="img" aria-label="{escape(chart.title)}">',
           f'<text class="title" x="4" y="14">{escape(fit_text(chart.title, width - 8, 7.0))}'
           "</text>"]
    if chart.bars:
        label_w = min(220, 6 * max(len(b[0]) for b in chart.bars) + 10)
        out += _bars(chart, label_w, top, width - label_w - 60, ph)
    elif drawn:
        out += _lines(chart, left, top, pw, ph)
        if legend:
            out += ['<g class="legend">', *(item for item, _ in legend), "</g>"]
    else:
        out.append(f'<text class="note" x="{left + pw / 2:.0f}" y="{top + ph / 2:.0f}" '
                   f'text-anchor="middle">{escape(chart.note or "no data")}</text>')
    out.append("</svg>")
    return "".join(out)


def fit_text(text: str, width: float, char_px: float) -> str:
    """The text cut with an ellipsis to about `width` px (the whole text is in a tooltip)."""
    room = max(1, int(width / char_px))
    return text if len(text) <= room else text[:room - 1] + "\u2026"


LEGEND_ROW = 14  # px per legend row
KEY_CHAR_PX = 5.9  # a generous width per character of the 10 px legend text: no overlaps
KEY_SAMPLE_PX = 24  # the line sample and its gap before the text


def _legend(series: list[Series], x0: float, y0: float, width: float) -> list[tuple[str, int]]:
    """One legend entry per series (a line sample in its colour and dash, then its name),
    laid out left to right and wrapped into rows; returns (svg, row) pairs. A name too long
    for the row is cut with an ellipsis; the whole label stays in the entry's tooltip."""
    items: list[tuple[str, int]] = []
    x, row = x0, 0
    for s in series:
        text = fit_text(s.legend_text, width - KEY_SAMPLE_PX, KEY_CHAR_PX)
        w = KEY_SAMPLE_PX + KEY_CHAR_PX * len(text) + 12
        if x > x0 and x + w > x0 + width:
            x, row = x0, row + 1
        y = y0 + LEGEND_ROW * row + 8
        dash = ' stroke-dasharray="4 3"' if s.dashed else ""
        role = f" s-{escape(s.role)}" if s.role else ""
        items.append((
            f'<g class="key{role}"><title>{escape(s.label)}</title>'
            f'<line x1="{x:.0f}" x2="{x + 18:.0f}" y1="{y:.0f}" y2="{y:.0f}" stroke="{s.color}" '
            f'stroke-width="2"{dash}/><text class="key" x="{x + KEY_SAMPLE_PX - 2:.0f}" '
            f'y="{y + 3.5:.1f}">{escape(text)}</text></g>', row))
        x += w
    return items


def _lines(chart: Chart, left: float, top: float, pw: float, ph: float) -> list[str]:
    xs = [v for s in chart.series for v in s.x]
    ys = [v for s in chart.series for v in s.y]
    if chart.log_x:
        lo = min(v for v in xs if v > 0) if any(v > 0 for v in xs) else 1.0
        hi = max(max(xs), lo * 10)
        lo, hi = lo / 1.15, hi * 1.15
        ticks = log_ticks(lo, hi)

        def sx(v: float) -> float:
            v = max(v, lo)
            return left + pw * (math.log(v / lo) / math.log(hi / lo))
    else:
        hi = max(xs) if xs and max(xs) > 0 else 1.0
        ticks = nice_ticks(0.0, hi)
        hi = max(hi, ticks[-1])

        def sx(v: float) -> float:
            return left + pw * v / hi
    y_hi = max(ys) * 1.04 if ys and max(ys) > 0 else 1.0  # a line at the top stays visible
    y_ticks = nice_ticks(0.0, y_hi, 4)
    y_hi = max(y_hi, y_ticks[-1])

    def sy(v: float) -> float:
        return top + ph - ph * v / y_hi

    out = [f'<rect class="plot" x="{left}" y="{top}" width="{pw:.0f}" height="{ph:.0f}"/>']
    for t in ticks:
        out.append(f'<line class="grid" x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="{top}" '
                   f'y2="{top + ph:.0f}"/><text class="tick" x="{sx(t):.1f}" '
                   f'y="{top + ph + 12:.0f}" text-anchor="middle">{fmt(t)}</text>')
    for t in y_ticks:
        out.append(f'<line class="grid" x1="{left}" x2="{left + pw:.0f}" y1="{sy(t):.1f}" '
                   f'y2="{sy(t):.1f}"/><text class="tick" x="{left - 4}" y="{sy(t) + 3:.1f}" '
                   f'text-anchor="end">{fmt(t)}</text>')
    out.append(f'<text class="axis" x="{left + pw / 2:.0f}" y="{top + ph + 26:.0f}" '
               f'text-anchor="middle">{escape(chart.x_label)}</text>')
    out.append(f'<text class="axis" transform="translate(10 {top + ph / 2:.0f}) rotate(-90)" '
               f'text-anchor="middle">{escape(chart.y_label)}</text>')
    for s in chart.series:
        if not s.x:
            continue
        x, y = thin(s.x, s.y)
        d = [f"M{sx(x[0]):.1f} {sy(y[0]):.1f}"]
        for a, b in zip(x[1:], y[1:], strict=True):
            d.append(f"H{sx(a):.1f}V{sy(b):.1f}" if s.step else f"L{sx(a):.1f} {sy(b):.1f}")
        dash = ' stroke-dasharray="4 3"' if s.dashed else ""
        role = f" s-{escape(s.role)}" if s.role else ""
        out.append(f'<path class="series{role}" d="{"".join(d)}" stroke="{s.color}"{dash}>'
                   f"<title>{escape(s.label)}</title></path>")
    return out


def _bars(chart: Chart, left: float, top: float, pw: float, ph: float) -> list[str]:
    hi = chart.x_max or max((v for _, v, _ in chart.bars), default=1.0) or 1.0
    band = ph / max(1, len(chart.bars))
    bar = min(22.0, band * 0.7)
    out = [f'<line class="axisline" x1="{left}" x2="{left}" y1="{top}" y2="{top + ph:.0f}"/>']
    for i, (label, value, text) in enumerate(chart.bars):
        y = top + band * i + (band - bar) / 2
        w = pw * max(0.0, min(value, hi)) / hi
        base = pw * max(0.0, min(chart.bar_base, value, hi)) / hi
        mid = y + bar / 2 + 3
        out.append(
            f'<text class="tick" x="{left - 4}" y="{mid:.1f}" text-anchor="end">'
            f"{escape(fit_text(label, left - 8, 6.0))}</text>"
            + (f'<rect class="bar base" x="{left}" y="{y:.1f}" width="{base:.1f}" '
               f'height="{bar:.1f}" fill="{BASE_COLOR}"><title>{escape(chart.bar_base_label)}'
               "</title></rect>" if base > 0 else "")
            + f'<rect class="bar" x="{left + base:.1f}" y="{y:.1f}" '
            f'width="{max(w - base, 0.5):.1f}" height="{bar:.1f}" fill="{PALETTE[i % len(PALETTE)]}">'
            f"<title>{escape(label)}: {escape(text)}</title></rect>"
            f'<text class="tick" x="{left + w + 4:.1f}" y="{mid:.1f}">{escape(text)}</text>'
        )
    return out
