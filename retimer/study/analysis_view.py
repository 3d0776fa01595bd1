"""What `retimer study analyze` shows: a plain-language line per comparison, the tables, the
JSON for scripts, and a self-contained HTML page with a plot of ratings by condition. Pure:
an Analysis in, text out.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict

from retimer.study.analysis import Analysis, Comparison

__all__ = ["analysis_html", "analysis_json", "analysis_lines", "analysis_section", "p_text",
           "page", "summary_line"]

TESTS = {"welch": "Welch's t test on per-participant means",
         "paired": "paired difference of per-participant means (Wilcoxon signed-rank p)",
         "mixed-model": "linear mixed model: score ~ condition + position + (1 | participant)"}
COLORS = ("#2a6fdb", "#e4572e", "#17a398", "#8c5fbf", "#f2a541", "#4a4e69")


def p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def _num(x: float, digits: int = 2) -> str:
    return "n/a" if math.isnan(x) else f"{x:.{digits}f}"


def _upstream_bound(analysis: Analysis) -> int:
    return sum(n for reason, n in analysis.data.excluded.items() if "upstream" in reason)


def summary_line(analysis: Analysis, c: Comparison) -> str:
    """"slow was rated 1.4 points lower on speed, 95 % CI 1.0-1.8, p < 0.001, 24 participants,
    3 streams excluded as upstream-bound"."""
    lower = c.estimate < 0
    size = abs(c.estimate)
    low, high = sorted((abs(c.ci[0]), abs(c.ci[1]))) if (c.ci[0] < 0) == (c.ci[1] < 0) else \
        (None, None)
    if low is not None and high is not None:
        interval = f"95 % CI {low:.1f}-{high:.1f}"
    else:
        interval = f"95 % CI {c.ci[0]:+.1f} to {c.ci[1]:+.1f}"
    words = "lower" if lower else "higher"
    bound = _upstream_bound(analysis)
    tail = f", {bound} stream{'s' if bound != 1 else ''} excluded as upstream-bound" if bound else ""
    return (f"{c.condition} was rated {size:.1f} points {words} than {c.reference} on {c.scale}, "
            f"{interval}, {p_text(c.p)}, {c.participants} participants{tail}")


def analysis_lines(analysis: Analysis) -> list[str]:
    data = analysis.data
    lines = [f"study {data.study}: {len(data.participants)} participants, {len(data.rows)} rated "
             f"responses; design {analysis.design}"
             + (" with repeated units or positions" if analysis.design == "within" and data.repeated
                else ""),
             ""]
    lines += [summary_line(analysis, c) for c in analysis.comparisons]
    lines += ["", "manipulation check (medians of the unit streams)",
              f"  {'condition':<14} {'streams':>7} {'TTFT target':>12} {'got':>8} "
              f"{'tok/s target':>13} {'got':>8}"]
    for m in analysis.manipulation:
        lines.append(f"  {m.condition:<14} {m.streams:>7} {_ms(m.target_ttft_ms):>12} "
                     f"{_ms(m.ttft_ms):>8} {_rate(m.target_tps):>13} {_rate(m.tps):>8}")
    lines += ["", "ratings (each participant's mean counts once)",
              f"  {'scale':<10} {'condition':<14} {'people':>6} {'ratings':>7} {'mean':>5} "
              f"{'sd':>5}  95 % CI"]
    for d in analysis.described:
        lines.append(f"  {d.scale:<10} {d.condition:<14} {d.participants:>6} {d.ratings:>7} "
                     f"{_num(d.mean):>5} {_num(d.sd):>5}  {_num(d.ci[0])}-{_num(d.ci[1])}")
    if analysis.comparisons:
        lines += ["", "tests"]
        for c in analysis.comparisons:
            extra = "".join(f", {k.replace('_p', '')} {p_text(v)}" for k, v in c.also.items())
            effect = f", {c.effect_size[0]} {_num(c.effect_size[1])}" if c.effect_size else ""
            lines.append(f"  {c.scale}: {c.condition} - {c.reference} = {c.estimate:+.2f} "
                         f"[{c.ci[0]:+.2f}, {c.ci[1]:+.2f}], {p_text(c.p)}{effect}{extra} "
                         f"({TESTS[c.test]})")
    left = [f"  {n} {reason}" for reason, n in data.excluded.most_common()]
    if data.unrated:
        left.append(f"  {len(data.unrated)} participants with streams but no ratings: "
                    f"{', '.join(data.unrated[:8])}{' ...' if len(data.unrated) > 8 else ''}")
    lines += ["", "left out" if left else "left out: nothing", *left]
    if analysis.notes:
        lines += ["", "notes", *(f"  {n}" for n in analysis.notes)]
    return lines


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def analysis_json(analysis: Analysis) -> dict[str, object]:
    data = analysis.data
    return {
        "study": data.study, "design": analysis.design, "repeated": data.repeated,
        "participants": len(data.participants), "rated_responses": len(data.rows),
        "conditions": data.conditions, "reference": data.conditions[0], "scales": data.scales,
        "manipulation": [vars(m) for m in analysis.manipulation],
        "described": [{**vars(d), "ci": list(d.ci)} for d in analysis.described],
        "comparisons": [{**vars(c), "ci": list(c.ci), "summary": summary_line(analysis, c),
                         "effect_size": (None if c.effect_size is None else
                                         {"name": c.effect_size[0], "value": c.effect_size[1]})}
                        for c in analysis.comparisons],
        "excluded": dict(data.excluded), "unrated_participants": data.unrated,
        "notes": analysis.notes,
    }


def _plot(analysis: Analysis, scale: str) -> str:
    """Each participant's mean per condition (dots) and the condition's mean with its 95 %
    interval (a bar), on the 1-7 scale."""
    width, height, left, top, bottom = 420, 230, 40, 14, 34
    conditions = analysis.data.conditions
    step = (width - left - 10) / max(1, len(conditions))
    y = lambda v: top + (7 - v) / 6 * (height - top - bottom)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{html.escape(scale)} ratings by condition">']
    for tick in range(1, 8):
        parts.append(f'<line x1="{left}" x2="{width - 10}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
                     f'stroke="#e3e3e3"/><text x="{left - 8}" y="{y(tick) + 4:.1f}" '
                     f'text-anchor="end" font-size="11" fill="#555">{tick}</text>')
    described = {d.condition: d for d in analysis.described if d.scale == scale}
    per = _participant_means(analysis, scale)
    for i, c in enumerate(conditions):
        cx = left + step * (i + 0.5)
        color = COLORS[i % len(COLORS)]
        for j, v in enumerate(sorted(per.get(c, []))):
            jitter = ((j * 7) % 11 - 5) * step / 40
            parts.append(f'<circle cx="{cx + jitter:.1f}" cy="{y(v):.1f}" r="2.6" fill="{color}" '
                         'fill-opacity="0.45"/>')
        d = described.get(c)
        if d is not None and not math.isnan(d.ci[0]):
            parts.append(f'<line x1="{cx + step / 4:.1f}" x2="{cx + step / 4:.1f}" '
                         f'y1="{y(d.ci[0]):.1f}" y2="{y(d.ci[1]):.1f}" stroke="#222" '
                         f'stroke-width="2"/><circle cx="{cx + step / 4:.1f}" cy="{y(d.mean):.1f}" '
                         'r="4.5" fill="#222"/>')
        parts.append(f'<text x="{cx:.1f}" y="{height - 12}" text-anchor="middle" font-size="12" '
                     f'fill="#222">{html.escape(c)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _participant_means(analysis: Analysis, scale: str) -> dict[str, list[float]]:
    sums: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in analysis.data.rows:
        if scale in r.scores:
            sums[(r.condition, r.participant)].append(r.scores[scale])
    out: dict[str, list[float]] = defaultdict(list)
    for (condition, _), values in sums.items():
        out[condition].append(sum(values) / len(values))
    return out


def analysis_section(analysis: Analysis) -> str:
    """The analysis as an HTML section (the page's body; the report embeds the same)."""
    lines = analysis_lines(analysis)
    plots = "".join(f'<figure><figcaption>{html.escape(s)}: each dot a participant\'s mean, '
                    f"the bar the condition's mean and 95 % CI</figcaption>{_plot(analysis, s)}"
                    "</figure>" for s in analysis.data.scales)
    summary = "".join(f"<li>{html.escape(summary_line(analysis, c))}</li>"
                      for c in analysis.comparisons)
    return (f'<section class="analysis"><h2>Analysis: study {html.escape(analysis.data.study)}'
            f"</h2><ul class=\"summary\">{summary}</ul>{plots}"
            f"<pre>{html.escape(chr(10).join(lines))}</pre></section>")


def page(title: str, section: str) -> str:
    """A self-contained page around an analysis section."""
    style = ("body{font:15px/1.45 system-ui,sans-serif;margin:1.5rem auto;max-width:60rem;"
             "padding:0 1rem;color:#1d1d1b}figure{display:inline-block;margin:.5rem 1rem .5rem 0}"
             "figcaption{font-size:.85rem;color:#555;max-width:520px}pre{background:#f6f8fa;"
             "padding:.8rem;overflow-x:auto;font-size:.85rem}.summary li{margin:.3rem 0}")
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>'
            f"{html.escape(title)}</title><style>{style}</style></head><body>{section}</body></html>")


def analysis_html(analysis: Analysis) -> str:
    return page(f"Analysis: {analysis.data.study}", analysis_section(analysis))
