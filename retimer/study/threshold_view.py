"""What `retimer study analyze` shows of a staircase study: a plain-language line for the group,
a table of the participants' thresholds, the JSON for scripts, and an HTML section with two
plots (each participant's walk, and the thresholds with their intervals). Pure: Thresholds in,
text out.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict

from retimer.study.threshold import Fitted, Thresholds

__all__ = ["threshold_json", "threshold_lines", "threshold_section", "threshold_summary"]

COLORS = ("#2a6fdb", "#e4572e", "#17a398", "#8c5fbf", "#f2a541", "#4a4e69")


def _v(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def _what(t: Thresholds) -> str:
    return "a TTFT of" if t.vary == "ttft" else "a rate of"


def _end(value: float, t: Thresholds) -> str:
    if value == 0 or math.isinf(value):
        fastest = (value == 0) == (t.vary == "ttft")
        return f"beyond the {'fastest' if fastest else 'slowest'} level"
    return _v(value)


def _interval(ci: tuple[float, float] | None) -> str:
    """A participant's interval; an end the answers do not bound (0 or infinity) is left open:
    ">420" (420 or more), "<1800", "any"."""
    if ci is None:
        return "-"
    low, high = (None if v == 0 or math.isinf(v) else v for v in ci)
    if low is None and high is None:
        return "any"
    if low is None:
        return f"<{_v(high)}"
    return f">{_v(low)}" if high is None else f"{_v(low)}-{_v(high)}"


def _finite(ci: tuple[float, float] | None) -> list[float | None] | None:
    """An interval for JSON: an end the data do not bound is null."""
    return [None if v == 0 or math.isinf(v) else v for v in ci] if ci else None


def _beyond(t: Thresholds) -> str:
    faster = sum(1 for p in t.censored if p.censored == "faster")
    slower = len(t.censored) - faster
    parts = ([f"{faster} called every level slow"] if faster else []) + \
        ([f"{slower} called no level slow"] if slower else [])
    return f"; {' and '.join(parts)}: counted at the range's ends" if parts else ""


def threshold_summary(t: Thresholds) -> str:
    """"threshold: a TTFT of 640 ms was called slow 50 % of the time (95 % CI 480-850 ms, the
    median of 12 participants' thresholds; 4 called no level slow: counted at the range's
    ends)"."""
    bound = sum(n for reason, n in t.excluded.items() if "upstream" in reason)
    tail = f", {bound} unit{'s' if bound != 1 else ''} excluded as upstream-bound" if bound else ""
    n = t.counted
    if t.group is None:
        why = " (half or more are beyond the levels" + _beyond(t)[1:] + ")" if t.censored else ""
        return f"no group threshold could be estimated ({len(t.people)} participants{why}{tail})"
    if t.group_ci:
        low, high = (_end(v, t) for v in t.group_ci)
        if "beyond" in low or "beyond" in high:
            ends = [e if "beyond" in e else f"{e} {t.unit}" for e in (low, high)]
            interval = f"95 % CI from {ends[0]} to {ends[1]}"
        else:
            interval = f"95 % CI {low}-{high} {t.unit}"
    else:
        interval = "no interval"
    return (f"threshold: {_what(t)} {_v(t.group)} {t.unit} was called slow {t.target:.0%} of the "
            f"time ({interval}, the median of {n} participant{'s' if n != 1 else ''}' "
            f"thresholds{_beyond(t)}{tail})")


def threshold_lines(t: Thresholds) -> list[str]:
    lines = [f"study {t.study}: a staircase on {t.vary}, {len(t.people)} participants, "
             f"{len(t.trials)} answered units; thresholds read at {t.target:.1%} \"slow\"", "",
             threshold_summary(t), "",
             f"{'participant':<12} {'answers':>7} {'slow':>5} {'threshold':>10} "
             f"{'95 % CI':>15} {'slope':>6}  method"]
    for p in t.people:
        ci = _interval(p.ci)
        slope = f"{p.slope:.1f}" if p.slope is not None else "-"
        lines.append(f"{p.participant[:12]:<12} {p.trials:>7} {p.slow_share:>5.0%} "
                     f"{_v(p.threshold):>10} {ci:>15} {slope:>6}  {p.method}"
                     + (f" ({p.note})" if p.note else ""))
    open_ended = any(p.ci and _interval(p.ci)[0] in "<>a" for p in t.people)
    lines.append(f"(thresholds in {t.unit}; a psychometric fit is logistic in the log of the "
                 "delivered stimulus" + ("; >x or <x: the answers bound that interval on one "
                                         "side only" if open_ended else "") + ")")
    if t.excluded:
        lines += ["", "left out: " + "; ".join(f"{n} {reason}" for reason, n in
                                               sorted(t.excluded.items()))]
    lines += [f"note: {n}" for n in t.notes]
    return lines


def _fitted_json(p: Fitted) -> dict[str, object]:
    return {"participant": p.participant, "answers": p.trials, "slow_share": p.slow_share,
            "threshold": p.threshold, "ci": _finite(p.ci), "slope": p.slope,
            "method": p.method, "reversals": p.reversals, "note": p.note,
            "censored": p.censored or None}


def threshold_json(t: Thresholds) -> dict[str, object]:
    return {"study": t.study, "design": "staircase", "vary": t.vary, "unit": t.unit,
            "target": t.target, "summary": threshold_summary(t),
            "group": {"threshold": t.group, "estimate": "median",
                      "ci": _finite(t.group_ci),
                      "participants": t.counted, "estimated": len(t.estimated),
                      "beyond_fastest": sum(1 for p in t.censored if p.censored == "faster"),
                      "beyond_slowest": sum(1 for p in t.censored if p.censored == "slower")},
            "participants": [_fitted_json(p) for p in t.people],
            "excluded": dict(t.excluded), "notes": t.notes}


def _scale(t: Thresholds) -> tuple[float, float]:
    values = [x.level for x in t.trials] + [p.threshold for p in t.estimated if p.threshold] + \
        [v for ci in (*(p.ci for p in t.people), t.group_ci) if ci for v in ci if 0 < v < math.inf]
    return math.log(min(values)) - 0.1, math.log(max(values)) + 0.1


def _walks(t: Thresholds) -> str:
    """Each participant's levels unit by unit (filled: called slow), log scale."""
    width, height, left, top, bottom = 520, 240, 52, 14, 30
    low, high = _scale(t)
    units = max((x.unit for x in t.trials), default=1) or 1
    y = lambda v: top + (high - math.log(v)) / (high - low) * (height - top - bottom)  # noqa: E731
    x = lambda u: left + u / units * (width - left - 12)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="each participant\'s staircase">']
    for tick in _ticks(low, high):
        parts.append(f'<line x1="{left}" x2="{width - 12}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
                     f'stroke="#eee"/><text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" '
                     f'font-size="10" fill="#555">{_v(tick)}</text>')
    parts.append(f'<text x="{(left + width) / 2:.0f}" y="{height - 6}" text-anchor="middle" '
                 f'font-size="10" fill="#555">unit</text>')
    walks: dict[str, list[tuple[int, float, bool]]] = defaultdict(list)
    for trial in t.trials:
        walks[trial.participant].append((trial.unit, trial.level, trial.slow))
    for i, (person, steps) in enumerate(sorted(walks.items())):
        color = COLORS[i % len(COLORS)]
        points = " ".join(f"{x(u):.1f},{y(v):.1f}" for u, v, _ in sorted(steps))
        parts.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="1.2" '
                     'stroke-opacity="0.7"/>')
        for u, v, slow in steps:
            fill = color if slow else "#fff"
            parts.append(f'<circle cx="{x(u):.1f}" cy="{y(v):.1f}" r="2.6" fill="{fill}" '
                         f'stroke="{color}"><title>{html.escape(person)} unit {u}: {_v(v)} '
                         f'{t.unit}, {"slow" if slow else "not slow"}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def _estimates(t: Thresholds) -> str:
    """Each participant's threshold with its interval, and the group's, log scale."""
    people = t.people
    row = 22
    width, left, right, top = 520, 90, 12, 10
    height = top + row * (len(people) + 1) + 28
    low, high = _scale(t)
    x = lambda v: left + (math.log(v) - low) / (high - low) * (width - left - right)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             'aria-label="thresholds with 95 % intervals">']
    for tick in _ticks(low, high):
        parts.append(f'<line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{top}" y2="{height - 24}" '
                     f'stroke="#eee"/><text x="{x(tick):.1f}" y="{height - 10}" text-anchor="middle" '
                     f'font-size="10" fill="#555">{_v(tick)}</text>')
    rows: list[tuple[str, float | None, tuple[float, float] | None, str]] = [
        (p.participant, p.threshold, p.ci, COLORS[i % len(COLORS)]) for i, p in enumerate(people)]
    rows.append(("group", t.group, t.group_ci, "#222"))
    for i, (label, value, ci, color) in enumerate(rows):
        cy = top + row * (i + 0.5)
        parts.append(f'<text x="{left - 8}" y="{cy + 4:.1f}" text-anchor="end" font-size="11" '
                     f'fill="#222">{html.escape(label[:14])}</text>')
        if ci is not None:  # an end beyond the levels (0 or inf) reaches the plot's edge
            ci = (max(ci[0], math.exp(low)), min(ci[1], math.exp(high)))
            parts.append(f'<line x1="{x(ci[0]):.1f}" x2="{x(ci[1]):.1f}" y1="{cy:.1f}" y2="{cy:.1f}" '
                         f'stroke="{color}" stroke-width="2"/>')
        if value is not None:
            parts.append(f'<circle cx="{x(value):.1f}" cy="{cy:.1f}" r="4" fill="{color}"/>')
    parts.append("</svg>")
    return "".join(parts)


def _ticks(low: float, high: float) -> list[float]:
    """Round values (1, 2, 5 x 10^k) inside exp(low)..exp(high)."""
    out: list[float] = []
    for k in range(math.floor(low / math.log(10)) - 1, math.ceil(high / math.log(10)) + 1):
        for m in (1, 2, 5):
            v = m * 10.0**k
            if low <= math.log(v) <= high:
                out.append(v)
    return out


def threshold_section(t: Thresholds) -> str:
    """The staircase analysis as an HTML section (the page's body; the report embeds it)."""
    unit = "ms" if t.vary == "ttft" else "tok/s"
    return (f'<section class="analysis"><h2>Analysis: study {html.escape(t.study)} (staircase on '
            f"{t.vary})</h2><ul class=\"summary\"><li>{html.escape(threshold_summary(t))}</li></ul>"
            f"<figure><figcaption>each participant's levels ({unit}, log scale) unit by unit; a "
            f"filled dot was called slow</figcaption>{_walks(t)}</figure>"
            f"<figure><figcaption>thresholds ({unit}) with 95 % intervals</figcaption>"
            f"{_estimates(t)}</figure><pre>{html.escape(chr(10).join(threshold_lines(t)))}</pre>"
            "</section>")
