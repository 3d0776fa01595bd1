"""What `retimer study analyze` shows: a plain-language line per comparison, the tables, the
JSON for scripts, and a self-contained HTML page with a plot of ratings by condition. Pure:
an Analysis in, text out.
"""

from __future__ import annotations

import dataclasses
import html
import math
from collections import defaultdict

from retimer.study.analysis import Analysis, Comparison

__all__ = ["analysis_html", "analysis_json", "finite", "analysis_lines", "analysis_section", "p_text",
           "page", "summary_line"]

TESTS = {"welch": "Welch's t test on per-participant means",
         "paired": "paired t test on per-participant differences",
         "mixed-model": "the mixed model below, Satterthwaite df"}
COMPANIONS = {"paired-t": "paired t", "wilcoxon": "Wilcoxon signed-rank, Hodges-Lehmann",
              "mann-whitney": "Mann-Whitney, Hodges-Lehmann shift", "welch": "Welch t"}
SLOW_TESTS = {"mcnemar": "McNemar's exact test", "paired-t": "paired t on per-person shares",
              "welch": "Welch's t on per-person shares"}
COLORS = ("#2a6fdb", "#e4572e", "#17a398", "#8c5fbf", "#f2a541", "#4a4e69")


def p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def _num(x: float, digits: int = 2) -> str:
    return "n/a" if math.isnan(x) else f"{x:.{digits}f}"


def _interval(ci: tuple[float, float], digits: int = 2) -> str:
    if math.isinf(ci[0]) or math.isinf(ci[1]):
        return "[unbounded: too few people]"
    return f"[{ci[0]:+.{digits}f}, {ci[1]:+.{digits}f}]"


def _df(df: float | None) -> str:
    if df is None or math.isinf(df):
        return ""
    return f"df {df:.0f}" if abs(df - round(df)) < 0.05 else f"df {df:.1f}"


def _upstream_bound(analysis: Analysis) -> int:
    return sum(n for reason, n in analysis.data.excluded.items() if "upstream" in reason)


def _points(value: float) -> str:
    return f"{abs(value):.1f} {'lower' if value < 0 else 'higher'}"


def summary_line(analysis: Analysis, c: Comparison) -> str:
    """"slow was rated 1.4 points lower than fast on speed, 95 % CI 1.0-1.8 lower, p < 0.001,
    24 participants, 3 streams excluded as upstream-bound": the interval in the words' own
    direction ("from 0.9 lower to 0.3 higher" when it spans no difference)."""
    size = abs(c.estimate)
    words = "lower" if c.estimate < 0 else "higher"
    low, high = c.ci
    if (low < 0) == (high < 0) and low != 0 and high != 0:
        near, far = sorted((abs(low), abs(high)))
        interval = f"95 % CI {near:.1f}-{far:.1f} {words}"
    else:
        interval = f"95 % CI from {_points(low)} to {_points(high)}"
    holm = (f" (Holm-adjusted over {c.family} comparisons on {c.scale}: {p_text(c.p_holm)})"
            if c.p_holm is not None else "")
    bound = _upstream_bound(analysis)
    tail = f", {bound} stream{'s' if bound != 1 else ''} excluded as upstream-bound" if bound else ""
    return (f"{c.condition} was rated {size:.1f} points {words} than {c.reference} on {c.scale}, "
            f"{interval}, {p_text(c.p)}{holm}, {c.participants} participants{tail}")


def _test_lines(c: Comparison) -> list[str]:
    df = _df(c.df)
    effect = (f", {c.effect_size.name} {_num(c.effect_size.value)} "
              f"{_interval(c.effect_size.ci)}" if c.effect_size else "")
    holm = f", Holm {p_text(c.p_holm)}" if c.p_holm is not None else ""
    lines = [f"  {c.scale}: {c.condition} - {c.reference} = {c.estimate:+.2f} "
             f"{_interval(c.ci)}{', ' + df if df else ''}, {p_text(c.p)}{holm}{effect} "
             f"({TESTS[c.test]})"]
    for o in c.companions:
        odf = _df(o.df)
        lines.append(f"      beside: {COMPANIONS[o.test]} {o.estimate:+.2f} {_interval(o.ci)}"
                     f"{', ' + odf if odf else ''}, {p_text(o.p)}")
    return lines


def analysis_lines(analysis: Analysis) -> list[str]:
    data = analysis.data
    people = len(data.participants)
    lines = [f"study {data.study}: {people} participant{'s' if people != 1 else ''}, "
             f"{len(data.rows)} rated "
             f"responses; design {analysis.design}"
             + (" with repeated units or positions" if analysis.design == "within" and data.repeated
                else "") + f"; reference {data.conditions[0]} ({data.reference_from})",
             ""]
    lines += [summary_line(analysis, c) for c in analysis.comparisons]
    cw = max([len("condition"), *(len(c) for c in data.conditions)]) + 1  # columns as wide as their names
    lines += ["", "manipulation check (medians of the unit streams)",
              f"  {'condition':<{cw}} {'streams':>7} {'TTFT target':>12} {'got':>8} "
              f"{'tok/s target':>13} {'got':>8}"]
    for m in analysis.manipulation:
        lines.append(f"  {m.condition:<{cw}} {m.streams:>7} {_ms(m.target_ttft_ms):>12} "
                     f"{_ms(m.ttft_ms):>8} {_rate(m.target_tps):>13} {_rate(m.tps):>8}")
    within = any(d.within_ci for d in analysis.described)
    sw = max([len("scale"), *(len(d.scale) for d in analysis.described)]) + 1
    lines += ["", "ratings (each participant's mean counts once" + (
                  "; within-person: the 95 % CI with each person's own level taken out, "
                  "Cousineau-Morey)" if within else ")"),
              f"  {'scale':<{sw}} {'condition':<{cw}} {'people':>6} {'ratings':>7} {'mean':>5} "
              f"{'sd':>5}  95 % CI" + ("         within-person" if within else "")]
    for d in analysis.described:
        own = f"  [{_num(d.within_ci[0])}, {_num(d.within_ci[1])}]" if d.within_ci else ""
        lines.append(f"  {d.scale:<{sw}} {d.condition:<{cw}} {d.participants:>6} {d.ratings:>7} "
                     f"{_num(d.mean):>5} {_num(d.sd):>5}  {f'[{_num(d.ci[0])}, {_num(d.ci[1])}]':<14}{own}")
    if analysis.omnibus:
        lines += ["", "do the conditions differ at all (before the pairs)"]
        lines += [f"  {o.scale}: F({o.df1:g}, {o.df2:.1f}) = {o.f:.2f}, {p_text(o.p)} ({o.test})"
                  for o in analysis.omnibus]
    if analysis.comparisons:
        lines += ["", "tests (an interval and its p from the same test; Holm over each scale's "
                  "pairs)"]
        for c in analysis.comparisons:
            lines += _test_lines(c)
    for model in analysis.models:
        sds = ", ".join(f"{k} {v:.2f}" for k, v in model.sds.items())
        cors = "".join(f"; correlation {k} {v:+.2f}" for k, v in model.correlations.items())
        lines += ["", f"model for {model.scale}: {model.formula}",
                  f"  {model.observations} ratings of {model.participants} participants; "
                  f"{model.method}", f"  SDs: {sds}{cors}"]
        if model.simplified:
            lines.append(f"  simpler than the design's maximal model ({model.maximal}): "
                         f"{model.simplified}")
    lines += _secondary_lines(analysis)
    left = [f"  {n} {_counted(n, reason)}" for reason, n in data.excluded.most_common()]
    if data.unrated_units:
        left.append(f"  {data.unrated_units} unit response{'s' if data.unrated_units != 1 else ''}"
                    " with no rating")
    if data.unrated:
        left.append(f"  {len(data.unrated)} {_counted(len(data.unrated), 'participants')} with "
                    "streams but no ratings: "
                    f"{_names(data.unrated)}")
    if one := data.one_condition:
        left.append(f"  {len(one)} participant{'s' if len(one) != 1 else ''} rated one "
                    f"condition only (not in the paired tests; in the mixed model): {_names(one)}")
    lines += ["", "left out" if left else "left out: nothing", *left]
    if analysis.notes:
        lines += ["", "notes", *(f"  {n}" for n in analysis.notes)]
    if analysis.software:
        lines += ["", "software: " + ", ".join(f"{k} {v}" for k, v in analysis.software.items())]
    return lines


_NOUNS = {"lines": "line", "streams": "stream", "ratings": "rating", "responses": "response",
          "participants": "participant"}


def _counted(n: int, phrase: str) -> str:
    """`phrase` (which names a plural: "responses the upstream paced") after the number `n`:
    its first plural noun made singular for 1 ("1 response the upstream paced")."""
    if n != 1:
        return phrase
    words = phrase.split(" ")
    for i, word in enumerate(words):
        if word in _NOUNS:
            words[i] = _NOUNS[word]
            break
    return " ".join(words)


def _names(people: list[str]) -> str:
    return f"{', '.join(people[:8])}{' ...' if len(people) > 8 else ''}"


def _secondary_lines(analysis: Analysis) -> list[str]:
    """The ordinal check and the "did it feel slow?" answers."""
    lines: list[str] = []
    if analysis.ordinal:
        lines += ["", "ordinal check (proportional-odds logit, SEs clustered by participant): "
                  "odds of a higher rating"]
        lines += [f"  {o.scale}: {o.condition} against {o.reference}: x{o.odds_ratio:.2f} "
                  f"[{o.ci[0]:.2f}, {o.ci[1]:.2f}], {p_text(o.p)}" for o in analysis.ordinal]
    if analysis.slow_shares:
        lines += ["", "called slow (the page's yes/no question): " + ", ".join(
            f"{s.condition} {s.slow}/{s.answered} ({s.share:.0%})" for s in analysis.slow_shares)]
        for c in analysis.slow_comparisons:
            lines.append(f"  {c.condition} against {c.reference}: {c.measure} {_figure(c.estimate)} "
                         f"[{_figure(c.ci[0])}, {_figure(c.ci[1])}], {p_text(c.p)} "
                         f"({SLOW_TESTS[c.test]}, {c.participants} participants)")
    return lines


def _figure(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:+.2f}" if x < 0 else f"{x:.2f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _comparison_json(analysis: Analysis, c: Comparison) -> dict[str, object]:
    out = dataclasses.asdict(c)
    out["ci"] = list(c.ci)
    out["summary"] = summary_line(analysis, c)
    if c.effect_size is not None:
        out["effect_size"] = {**dataclasses.asdict(c.effect_size), "ci": list(c.effect_size.ci)}
    out["companions"] = [{**dataclasses.asdict(o), "ci": list(o.ci)} for o in c.companions]
    return out


def finite(value: object) -> object:
    """JSON has no NaN or infinity: an unknown or unbounded figure is null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def analysis_json(analysis: Analysis) -> dict[str, object]:
    """The figures for scripts (an unbounded interval's end, or a figure with no value: null)."""
    data = analysis.data
    figures: dict[str, object] = {
        "study": data.study, "design": analysis.design, "repeated": data.repeated,
        "participants": len(data.participants), "rated_responses": len(data.rows),
        "conditions": data.conditions, "reference": data.conditions[0],
        "reference_from": data.reference_from, "scales": data.scales,
        "manipulation": [vars(m) for m in analysis.manipulation],
        "described": [{**vars(d), "ci": list(d.ci)} for d in analysis.described],
        "omnibus": [dataclasses.asdict(o) for o in analysis.omnibus],
        "comparisons": [_comparison_json(analysis, c) for c in analysis.comparisons],
        "models": [dataclasses.asdict(m) for m in analysis.models],
        "ordinal": [dataclasses.asdict(o) for o in analysis.ordinal],
        "slow": {"shares": [{**dataclasses.asdict(s), "share": s.share}
                            for s in analysis.slow_shares],
                 "comparisons": [dataclasses.asdict(c) for c in analysis.slow_comparisons]},
        "excluded": dict(data.excluded), "unrated_participants": data.unrated,
        "unrated_units": data.unrated_units, "one_condition_participants": data.one_condition,
        "notes": analysis.notes, "software": analysis.software,
    }
    return finite(figures)  # type: ignore[return-value]


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
        ci = (d.within_ci or d.ci) if d is not None else None
        if d is not None and ci is not None and not math.isnan(ci[0]):
            parts.append(f'<line x1="{cx + step / 4:.1f}" x2="{cx + step / 4:.1f}" '
                         f'y1="{y(ci[0]):.1f}" y2="{y(ci[1]):.1f}" stroke="#222" '
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
    bar = ("the bar the condition's mean and its within-person 95 % interval (Cousineau-Morey:"
           " people's own levels taken out, as the within-person test sees them)"
           if analysis.design == "within" else "the bar the condition's mean and 95 % CI")
    plots = "".join(f'<figure><figcaption>{html.escape(s)}: each dot a participant\'s mean, '
                    f"{html.escape(bar)}</figcaption>{_plot(analysis, s)}"
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
