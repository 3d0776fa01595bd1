"""`retimer report`: one self-contained HTML page from a record log. Sans-io: records in, text out.

Why one file with inline SVG: a report is mailed, attached and opened offline; nothing in it
is fetched. People read a timeline faster than a table of milliseconds, so each stream gets
its cumulative tokens over time: the target schedule (the profile's due times), the upstream's
arrivals and what the client got. Distributions are grouped by study condition when the
records carry one, else by profile. Every string from the log is escaped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from typing import Any

import numpy as np

from .metrics import TRACE_UNIT_MS, decode_side
from .svgplot import Chart, Series, render

MAX_STREAM_CHARTS = 500  # a page of more small charts is slow to open; the table lists all


@dataclass(slots=True)
class StreamView:
    """One record as the report draws it: its three cumulative-token staircases."""

    number: int
    record: dict[str, Any]
    group: str
    target: tuple[list[float], list[float]] | None = None
    upstream: tuple[list[float], list[float]] | None = None
    client: tuple[list[float], list[float]] | None = None


@dataclass(slots=True)
class Report:
    """Everything the HTML (and the PNG files) show."""

    title: str
    group_by: str  # "condition" or "profile"
    streams: list[StreamView]
    distributions: list[Chart] = field(default_factory=list)
    bad_lines: int = 0


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) \
        and math.isfinite(v) else None


def _get(rec: dict[str, Any], side: str, key: str) -> float | None:
    part = rec.get(side)
    return _num(part.get(key)) if isinstance(part, dict) else None


def _staircase(t: np.ndarray, n: np.ndarray) -> tuple[list[float], list[float]] | None:
    if len(t) == 0:
        return None
    return [0.0, *t.tolist()], [0.0, *np.cumsum(n).astype(float).tolist()]


def stream_view(number: int, rec: dict[str, Any], group_by: str) -> StreamView:
    view = StreamView(number, rec, str(rec.get(group_by) or "-"))
    trace = rec.get("trace")
    if not isinstance(trace, dict):
        return view
    unit = _num(trace.get("unit_ms")) or TRACE_UNIT_MS
    view.upstream = _staircase(*decode_side(trace.get("upstream"), unit))
    view.client = _staircase(*decode_side(trace.get("emitted"), unit))
    if _get(rec, "target", "ttft_ms") is not None:  # passthrough streams have no schedule
        view.target = _staircase(*decode_side(trace.get("emitted"), unit, key="due"))
    return view


def stream_chart(v: StreamView) -> Chart:
    rec = v.record
    # the schedule last, dashed: on time, it lies on the client's line and must still show
    series = [Series(label, *data, role=role, dashed=role == "target")
              for label, data, role in (("upstream arrivals", v.upstream, "upstream"),
                                        ("client received", v.client, "client"),
                                        ("target schedule", v.target, "target"))
              if data is not None]
    title = f"#{v.number} {v.group} · {rec.get('protocol') or '?'}"
    return Chart(title, "ms since request", "tokens", series,
                 note="no trace in this record" if not series else "")


def _ecdf(values: list[float], label: str, color: int, dashed: bool = False) -> Series:
    xs = sorted(values)
    ys = [(i + 1) / len(xs) for i in range(len(xs))]
    return Series(label, [xs[0], *xs], [0.0, *ys], color_index=color, dashed=dashed,
                  role="upstream" if dashed else "")


def _distribution(records: list[dict[str, Any]], groups: list[str], key: str, side_key: str,
                  title: str, unit: str, group_by: str) -> Chart:
    series = []
    for i, g in enumerate(groups):
        vals = [v for r in records if str(r.get(group_by) or "-") == g
                and (v := _get(r, "emitted", side_key)) is not None and v > 0]
        if vals:
            series.append(_ecdf(vals, f"{g} (client, {len(vals)} streams)", i))
    up = [v for r in records if (v := _get(r, "upstream", side_key)) is not None and v > 0]
    if up:
        series.append(_ecdf(up, f"upstream, all streams ({len(up)})", 0, dashed=True))
    xs = [x for s in series for x in s.x]
    log_x = bool(xs) and min(xs) > 0 and max(xs) / min(xs) > 30
    return Chart(title, unit + (" (log scale)" if log_x else ""), "share of streams", series,
                 log_x=log_x, note=f"no {key} in the records")


def build(records: list[dict[str, Any]], title: str, bad_lines: int = 0) -> Report:
    group_by = "condition" if any(r.get("condition") is not None for r in records) else "profile"
    views = [stream_view(i + 1, r, group_by) for i, r in enumerate(records)]
    groups = sorted({v.group for v in views})
    dists = [
        _distribution(records, groups, "TTFT", "ttft_ms", f"TTFT by {group_by}", "ms",
                      group_by),
        _distribution(records, groups, "rate", "tps", f"Output rate by {group_by}",
                      "tokens/s", group_by),
    ]
    bars = []
    for g in groups:
        flags = [bool(v.record.get("upstream_bound")) for v in views if v.group == g]
        share = sum(flags) / len(flags)
        bars.append((g, share, f"{share:.0%} ({sum(flags)}/{len(flags)})"))
    dists.append(Chart(f"Upstream-bound share by {group_by}", series=[], bars=bars, x_max=1.0))
    return Report(title, group_by, views, dists, bad_lines)


# ---------------------------------------------------------------- HTML

CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.meta{color:#555;margin:0 0 12px}
table{border-collapse:collapse;font-size:12.5px}td,th{border-bottom:1px solid #ddd;
padding:3px 8px;text-align:right;white-space:nowrap}th{background:#f4f4f4}
td.l,th.l{text-align:left}td.wrap{white-space:normal;min-width:150px}
td.url{max-width:420px;overflow:hidden;text-overflow:ellipsis}
.charts,.grid{display:flex;flex-wrap:wrap;gap:10px}
svg{background:#fff;border:1px solid #e3e3e3;border-radius:4px}
svg .title{font-size:11.5px;font-weight:600;fill:#333}svg .tick{font-size:10px;fill:#555}
svg .axis{font-size:10px;fill:#555}svg .note{font-size:11px;fill:#888}
svg .plot{fill:#fcfcfc;stroke:#ccc}svg .grid{stroke:#eee}svg .axisline{stroke:#999}
svg path.series{fill:none;stroke-width:1.6}svg path.s-target{stroke-width:1.3}
.legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:18px;
height:0;border-top:2px solid;vertical-align:middle;margin-right:5px}
"""


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _ratings(recs: list[dict[str, Any]]) -> str:
    """Mean of each numeric rating: records may carry `rating` as a number or a mapping."""
    sums: dict[str, list[float]] = {}
    for r in recs:
        rating = r.get("rating")
        items = rating.items() if isinstance(rating, dict) else [("rating", rating)]
        for k, v in items:
            if (x := _num(v)) is not None:
                sums.setdefault(str(k), []).append(x)
    return ", ".join(f"{k} {sum(v) / len(v):.2f} (n={len(v)})" for k, v in sorted(sums.items()))


def _group_table(report: Report) -> str:
    head = ["streams", "complete", "TTFT p50", "TTFT p90", "target TTFT p50", "upstream TTFT p50",
            "rate p50", "target rate", "upstream rate p50", "upstream-bound", "ratings"]
    rows = [f'<tr><th class="l">{escape(report.group_by)}</th>'
            + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for g in sorted({v.group for v in report.streams}):
        recs = [v.record for v in report.streams if v.group == g]

        def vals(side: str, key: str, recs: list[dict[str, Any]] = recs) -> list[float]:
            return [x for r in recs if (x := _get(r, side, key)) is not None]
        bound = sum(bool(r.get("upstream_bound")) for r in recs)
        targets = sorted({x for x in vals("target", "tps")})
        ttft = vals("emitted", "ttft_ms")
        cells = [str(len(recs)), str(sum(r.get("outcome") == "complete" for r in recs)),
                 _ms(_pct(ttft, 50)), _ms(_pct(ttft, 90)),
                 _ms(_pct(vals("target", "ttft_ms"), 50)),
                 _ms(_pct(vals("upstream", "ttft_ms"), 50)),
                 _rate(_pct(vals("emitted", "tps"), 50)),
                 "/".join(_rate(t) for t in targets) or "-",
                 _rate(_pct(vals("upstream", "tps"), 50)), f"{bound / len(recs):.0%}",
                 escape(_ratings(recs)) or "-"]
        rows.append(f'<tr class="group"><td class="l">{escape(g)}</td>'
                    + "".join(f"<td>{c}</td>" for c in cells[:-1])
                    + f'<td class="l wrap">{cells[-1]}</td></tr>')
    return '<table class="groups">' + "".join(rows) + "</table>"


def _stream_table(report: Report) -> str:
    extra = [k for k in ("condition", "participant") if any(k in v.record for v in report.streams)]
    head = ["#", "time", "profile", *extra, "protocol", "outcome", "tokens", "TTFT target",
            "upstream", "client", "rate target", "upstream", "client", "upstream-bound", "url"]
    left = {"time", "profile", *extra, "protocol", "outcome", "url"}
    rows = ["<tr>" + "".join(f'<th class="{"l" if h in left else ""}">{h}</th>' for h in head)
            + "</tr>"]
    for v in report.streams:
        r = v.record
        cells = [
            (str(v.number), ""), (escape(str(r.get("time", ""))[:19].replace("T", " ")), "l"),
            (escape(str(r.get("profile", ""))), "l"),
            *[(escape(str(r.get(k, ""))), "l") for k in extra],
            (escape(str(r.get("protocol", ""))), "l"), (escape(str(r.get("outcome", ""))), "l"),
            (str(_get(r, "emitted", "tokens") or 0).removesuffix(".0"), ""),
            (_ms(_get(r, "target", "ttft_ms")), ""), (_ms(_get(r, "upstream", "ttft_ms")), ""),
            (_ms(_get(r, "emitted", "ttft_ms")), ""), (_rate(_get(r, "target", "tps")), ""),
            (_rate(_get(r, "upstream", "tps")), ""), (_rate(_get(r, "emitted", "tps")), ""),
            ("yes" if r.get("upstream_bound") else "no", ""),
        ]
        url = escape(str(r.get("url", "")))
        rows.append('<tr class="stream">' + "".join(f'<td class="{c}">{t}</td>' for t, c in cells)
                    + f'<td class="l url" title="{url}">{url}</td></tr>')
    return '<table class="streams">' + "".join(rows) + "</table>"


def _legend() -> str:
    from .svgplot import ROLE_COLORS

    items = [("target schedule", ROLE_COLORS["target"], "dashed"),
             ("upstream arrivals", ROLE_COLORS["upstream"], "solid"),
             ("client received", ROLE_COLORS["client"], "solid")]
    return '<p class="legend">' + "".join(
        f'<span><i style="border-top-color:{c};border-top-style:{s}"></i>{t}</span>'
        for t, c, s in items) + "</p>"


def render_html(report: Report, now: datetime | None = None) -> str:
    streams = report.streams
    times = sorted(str(v.record.get("time", "")) for v in streams if v.record.get("time"))
    span = f"{escape(times[0][:19])} to {escape(times[-1][:19])} UTC" if times else "no times"
    made = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    skipped = f", {report.bad_lines} unreadable lines skipped" if report.bad_lines else ""
    drawn = streams[:MAX_STREAM_CHARTS]
    more = len(streams) - len(drawn)
    parts = [
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>retimer report: {escape(report.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>retimer report: {escape(report.title)}</h1>",
        f'<p class="meta">{len(streams)} streams, {span}{skipped}; made {made}.</p>',
        f"<h2>By {escape(report.group_by)}</h2>", _group_table(report),
        "<h2>Distributions</h2>", '<div class="charts">',
        *[render(c, 440, 260 if c.series else 60 + 30 * len(c.bars), "dist")
          for c in report.distributions],
        "</div>", "<h2>Cumulative tokens per stream</h2>", _legend(), '<div class="grid">',
        *[render(stream_chart(v), 300, 170, "stream") for v in drawn], "</div>",
        f'<p class="meta">{more} more streams are in the table only.</p>' if more else "",
        "<h2>Streams</h2>", _stream_table(report), "</body></html>",
    ]
    return "\n".join(p for p in parts if p)
