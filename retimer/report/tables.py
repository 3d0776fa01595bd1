"""The two tables of `retimer report`: one row per group, one row per stream.

Why two header rows: TTFT and rate each have a target, an upstream and a client column;
grouping them under one heading keeps the columns narrow (the page must read at 1400 px)
and says which "upstream" is which. Each table sits in its own scrolling box, so a long
URL or many study fields scroll the table, never the page. Every string is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import numpy as np

from retimer.records.schema import StreamRecord
from retimer.report.fields import num, side_value
from retimer.report.views import Report, StreamView


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _ratings(views: Sequence[StreamView]) -> str:
    """Mean of each rating scale over the streams rated on it."""
    sums: dict[str, list[float]] = {}
    for v in views:
        for k, score in v.scores.items():
            if (x := num(score)) is not None:
                sums.setdefault(k, []).append(x)
    return ", ".join(f"{k} {sum(v) / len(v):.2f} (n={len(v)})" for k, v in sorted(sums.items()))


def _head(columns: list[tuple[str, list[str]]], left: set[str]) -> str:
    """Two header rows: a plain column spans both, a (name, subcolumns) pair heads its
    subcolumns."""
    top, sub = [], []
    for name, subs in columns:
        cls = ' class="l"' if name in left else ""
        if subs:
            top.append(f'<th colspan="{len(subs)}" class="span">{escape(name)}</th>')
            sub += [f"<th>{escape(s)}</th>" for s in subs]
        else:
            top.append(f'<th rowspan="2"{cls}>{escape(name)}</th>')
    return f'<thead><tr>{"".join(top)}</tr><tr>{"".join(sub)}</tr></thead>'


def wrap(table: str) -> str:
    """A table in its own horizontally scrolling box."""
    return f'<div class="table-wrap">{table}</div>'


def group_table(report: Report) -> str:
    """Per group: counts, TTFT and rate percentiles against target and upstream, ratings."""
    columns = [(report.group_by, []), ("streams", []), ("complete", []),
               ("TTFT, ms", ["p50", "p90", "target p50", "upstream p50"]),
               ("rate, tok/s", ["p50", "target", "upstream p50"]),
               ("upstream-bound", []), ("ratings", [])]
    rows = []
    for g in sorted({v.group for v in report.streams}):
        group = [v for v in report.streams if v.group == g]
        recs = [v.record for v in group]

        def vals(side: str, key: str, recs: list[StreamRecord] = recs) -> list[float]:
            return [x for r in recs if (x := side_value(r, side, key)) is not None]
        bound = sum(bool(r.upstream_bound) for r in recs)
        targets = sorted({x for x in vals("target", "tps")})
        ttft = vals("emitted", "ttft_ms")
        cells = [str(len(recs)), str(sum(r.outcome == "complete" for r in recs)),
                 _ms(_pct(ttft, 50)), _ms(_pct(ttft, 90)),
                 _ms(_pct(vals("target", "ttft_ms"), 50)),
                 _ms(_pct(vals("upstream", "ttft_ms"), 50)),
                 _rate(_pct(vals("emitted", "tps"), 50)),
                 "/".join(_rate(t) for t in targets) or "-",
                 _rate(_pct(vals("upstream", "tps"), 50)), f"{bound / len(recs):.0%}",
                 escape(_ratings(group)) or "-"]
        rows.append(f'<tr class="group"><td class="l">{escape(g)}</td>'
                    + "".join(f"<td>{c}</td>" for c in cells[:-1])
                    + f'<td class="l wrap">{cells[-1]}</td></tr>')
    head = _head(columns, {report.group_by, "ratings"})
    return wrap(f'<table class="groups">{head}<tbody>{"".join(rows)}</tbody></table>')


def stream_table(report: Report) -> str:
    """One row per stream, in log order, with its URL cut to the column (whole in a tooltip)."""
    extra = [k for k in ("condition", "participant")
             if any(v.record.study is not None for v in report.streams)]
    sides = ["target", "upstream", "client"]
    times = [v.record.time[:19].replace("T", " ") for v in report.streams]
    one_day = len({t[:10] for t in times}) == 1  # the date is in the page's header line
    columns = [("#", []), ("time", []), ("profile", []), *[(k, []) for k in extra],
               ("protocol", []), ("outcome", []), ("tokens", []), ("TTFT, ms", sides),
               ("rate, tok/s", sides), ("upstream-bound", []), ("url", [])]
    left = {"time", "profile", *extra, "protocol", "outcome", "url"}
    rows = []
    for v, time in zip(report.streams, times, strict=True):
        r = v.record
        cells = [
            (str(v.number), ""), (escape(time[11:] if one_day else time), "l"),
            (escape(v.profile), "l"),
            *[(escape(str(getattr(r, k) or "")), "l") for k in extra],
            (escape(r.protocol or ""), "l"), (escape(r.outcome or ""), "l"),
            (str(side_value(r, "emitted", "tokens") or 0).removesuffix(".0"), ""),
            (_ms(side_value(r, "target", "ttft_ms")), ""),
            (_ms(side_value(r, "upstream", "ttft_ms")), ""),
            (_ms(side_value(r, "emitted", "ttft_ms")), ""),
            (_rate(side_value(r, "target", "tps")), ""),
            (_rate(side_value(r, "upstream", "tps")), ""),
            (_rate(side_value(r, "emitted", "tps")), ""),
            ("yes" if r.upstream_bound else "no", ""),
        ]
        url = escape(r.url)
        rows.append('<tr class="stream">' + "".join(f'<td class="{c}">{t}</td>' for t, c in cells)
                    + f'<td class="l url" title="{url}">{url}</td></tr>')
    head = _head(columns, left)
    return wrap(f'<table class="streams">{head}<tbody>{"".join(rows)}</tbody></table>')
