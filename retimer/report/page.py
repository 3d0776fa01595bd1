"""`retimer report`: one self-contained HTML page from a record log. Sans-io: records in, text out.

Why one file with inline SVG: a report is mailed, attached and opened offline; nothing in it
is fetched. People read a timeline faster than a table of milliseconds, so each stream gets
its cumulative tokens over time: the target schedule (the profile's due times), the upstream's
arrivals and what the client got. Distributions are grouped by study condition when the
records carry one, else by profile (`report_fields.profile_of`). Every multi-line chart
carries its own legend; the page opens with a five-line summary (report_summary), then
the tables (report_tables). Every string from the log is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape

import numpy as np

from retimer.records.schema import StreamRecord
from retimer.report.fields import group_of, num, profile_of, side_value
from retimer.report.summary import summary, summary_html
from retimer.report.svgplot import ROLE_COLORS, Chart, Series, render
from retimer.report.tables import group_table, stream_table
from retimer.report.views import Report, StreamView
from retimer.report.whatif import SessionResult
from retimer.report.whatif_view import section_html
from retimer.timing.metrics import TRACE_UNIT_MS, decode_side

DIST_WIDTH = 430  # three side by side fit a 1400 px window, scroll bar and margins included
MAX_STREAM_CHARTS = 500  # a page of more small charts is slow to open; the table lists all


def _staircase(t: np.ndarray, n: np.ndarray) -> tuple[list[float], list[float]] | None:
    if len(t) == 0:
        return None
    return [0.0, *t.tolist()], [0.0, *np.cumsum(n).astype(float).tolist()]


def stream_view(number: int, rec: StreamRecord, group_by: str,
                scores: Mapping[str, float | bool] | None = None) -> StreamView:
    view = StreamView(number, rec, group_of(rec, group_by), profile_of(rec), dict(scores or {}))
    trace = rec.trace
    if not isinstance(trace, dict):
        return view
    unit = num(trace.get("unit_ms")) or TRACE_UNIT_MS
    view.upstream = _staircase(*decode_side(trace.get("upstream"), unit))
    view.client = _staircase(*decode_side(trace.get("emitted"), unit))
    if side_value(rec, "target", "ttft_ms") is not None:  # passthrough streams have no schedule
        view.target = _staircase(*decode_side(trace.get("emitted"), unit, key="due"))
    return view


def stream_chart(v: StreamView) -> Chart:
    rec = v.record
    # the schedule last, dashed: on time, it lies on the client's line and must still show
    series = [Series(label, *data, role=role, dashed=role == "target", key=role)
              for label, data, role in (("upstream arrivals", v.upstream, "upstream"),
                                        ("client received", v.client, "client"),
                                        ("target schedule", v.target, "target"))
              if data is not None]
    title = f"#{v.number} {v.group} · {rec.protocol or '?'}"
    return Chart(title, "ms since request", "tokens", series,
                 note="no trace in this record" if not series else "")


def _ecdf(values: list[float], label: str, color: int, dashed: bool = False) -> Series:
    xs = sorted(values)
    ys = [(i + 1) / len(xs) for i in range(len(xs))]
    return Series(label, [xs[0], *xs], [0.0, *ys], color_index=color, dashed=dashed,
                  role="reference" if dashed else "")


def _distribution(records: Sequence[StreamRecord], groups: list[str], key: str, side_key: str,
                  title: str, unit: str, group_by: str) -> Chart:
    series = []
    for i, g in enumerate(groups):
        vals = [v for r in records if group_of(r, group_by) == g
                and (v := side_value(r, "emitted", side_key)) is not None and v > 0]
        if vals:
            series.append(_ecdf(vals, f"{g} (client, {len(vals)} streams)", i))
    up = [v for r in records if (v := side_value(r, "upstream", side_key)) is not None
          and v > 0]
    if up:
        series.append(_ecdf(up, f"upstream, all streams ({len(up)})", 0, dashed=True))
    xs = [x for s in series for x in s.x]
    log_x = bool(xs) and min(xs) > 0 and max(xs) / min(xs) > 30
    return Chart(title, unit + (" (log scale)" if log_x else ""), "share of streams", series,
                 log_x=log_x, note=f"no {key} in the records")


def build(records: Sequence[StreamRecord], title: str, bad_lines: int = 0,
          whatif: tuple[str, list[SessionResult]] | None = None,
          scores: Mapping[str, Mapping[str, float | bool]] | None = None) -> Report:
    """The report's data; `whatif` is (what a session is, the sessions at other speeds),
    `scores` each rated stream's latest ratings (retimer.records.reader.Log.scores)."""
    group_by = "condition" if any(r.condition is not None for r in records) else "profile"
    scores = scores or {}
    views = [stream_view(i + 1, r, group_by, scores.get(r.id)) for i, r in enumerate(records)]
    groups = sorted({v.group for v in views})
    dists = [
        _distribution(records, groups, "TTFT", "ttft_ms", f"TTFT by {group_by}", "ms",
                      group_by),
        _distribution(records, groups, "rate", "tps", f"Output rate by {group_by}",
                      "tokens/s", group_by),
    ]
    bars = []
    for g in groups:
        flags = [bool(v.record.upstream_bound) for v in views if v.group == g]
        share = sum(flags) / len(flags)
        bars.append((g, share, f"{share:.0%} ({sum(flags)}/{len(flags)})"))
    dists.append(Chart(f"Upstream-bound share by {group_by}", series=[], bars=bars, x_max=1.0))
    by, sessions = whatif if whatif is not None else ("", [])
    return Report(title, group_by, views, dists, bad_lines, by, sessions)


# ---------------------------------------------------------------- HTML

CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.meta{color:#555;margin:0 0 12px}
ul.summary{list-style:none;margin:0 0 8px;padding:10px 14px;background:#f6f8fb;
border:1px solid #dde3ec;border-radius:6px}
ul.summary li{margin:2px 0;display:grid;grid-template-columns:140px 1fr}
.table-wrap{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;font-size:12.5px}td,th{border-bottom:1px solid #ddd;
padding:3px 7px;text-align:right;white-space:nowrap}th{background:#f4f4f4}
th{white-space:normal;vertical-align:bottom}th.span{text-align:center;border-bottom:1px solid #ccc}
td.l,th.l{text-align:left}td.wrap{white-space:normal;min-width:150px}
td.url{max-width:220px;overflow:hidden;text-overflow:ellipsis}
.charts,.grid{display:flex;flex-wrap:wrap;gap:10px}
svg{background:#fff;border:1px solid #e3e3e3;border-radius:4px}
svg .title{font-size:11.5px;font-weight:600;fill:#333}svg .tick{font-size:10px;fill:#555}
svg .axis{font-size:10px;fill:#555}svg .note{font-size:11px;fill:#888}
svg .key{font-size:10px;fill:#333}
svg .plot{fill:#fcfcfc;stroke:#ccc}svg .grid{stroke:#eee}svg .axisline{stroke:#999}
svg path.series{fill:none;stroke-width:1.6}svg path.s-target{stroke-width:1.3}
tr.recorded td,tr.upstream td{font-weight:600}svg.whatif{max-width:100%;height:auto;margin-top:12px}
section.analysis figure{display:inline-block;margin:6px 16px 6px 0;vertical-align:top}
section.analysis figcaption{font-size:12px;color:#555;max-width:520px}
section.analysis pre{background:#f6f8fa;padding:10px;overflow-x:auto;font-size:12px}
section.analysis ul.summary li{display:list-item;list-style:disc;margin:2px 0 2px 16px}
.legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:18px;
height:0;border-top:2px solid;vertical-align:middle;margin-right:5px}
"""


def _legend() -> str:
    """What the three lines of every stream chart mean (each chart keys them too)."""
    items = [("target schedule", ROLE_COLORS["target"], "dashed"),
             ("upstream arrivals", ROLE_COLORS["upstream"], "solid"),
             ("client received", ROLE_COLORS["client"], "solid")]
    return '<p class="legend">' + "".join(
        f'<span><i style="border-top-color:{c};border-top-style:{s}"></i>{t}</span>'
        for t, c, s in items) + "</p>"


def render_html(report: Report, now: datetime | None = None, sections: Sequence[str] = ()) -> str:
    """The page; `sections` are HTML sections made elsewhere (a study's analysis) that follow
    the table by group."""
    streams = report.streams
    times = sorted(v.record.time for v in streams if v.record.time)
    span = (f"{escape(times[0][:19].replace('T', ' '))} to "
            f"{escape(times[-1][:19].replace('T', ' '))} UTC") if times else "no times"
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
        summary_html(summary([v.record for v in streams])),
        f"<h2>By {escape(report.group_by)}</h2>", group_table(report), *sections,
        "<h2>Distributions</h2>", '<div class="charts">',
        *[render(c, DIST_WIDTH, 260 if c.series else 60 + 30 * len(c.bars), "dist")
          for c in report.distributions],
        "</div>", section_html(report.whatif_by, report.whatif),
        "<h2>Cumulative tokens per stream</h2>", _legend(), '<div class="grid">',
        *[render(stream_chart(v), 300, 170, "stream") for v in drawn], "</div>",
        f'<p class="meta">{more} more streams are in the table only.</p>' if more else "",
        "<h2>Streams</h2>", stream_table(report), "</body></html>",
    ]
    return "\n".join(p for p in parts if p)
