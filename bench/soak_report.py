"""Markdown for a soak run (bench/soak.py): verdicts, streams by format and outcome, resource
figures and their second-half trend, a time series, and what the proxy recorded."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

_RESOURCES = (
    ("rss_kb", "resident memory (MiB)", 1 / 1024),
    ("objects", "live Python objects (thousands)", 1 / 1000),
    ("fds", "open file descriptors", 1.0),
    ("tasks", "asyncio tasks", 1.0),
    ("threads", "threads", 1.0),
)


TOO_FEW = "too few samples to fit"


def _f(x: float, nd: int = 1) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def _verdict(ok: bool | None) -> str:
    return "pass" if ok else "**FAIL**" if ok is False else f"not judged: {TOO_FEW}"


def _not_judged(a: dict[str, Any]) -> str:
    """Why a verdict leaves checks out: a run too short for a line through its second half."""
    n = sum(ok is None for ok in a["checks"].values())
    return (f" ({n} of {len(a['checks'])} checks not judged: the second half has {TOO_FEW} a "
            "trend; run longer)" if n else "")


def render(res: dict[str, Any]) -> str:
    a = res["analysis"]
    m = res["machine"]
    clients = res["clients"]
    streams = sum(c.get("streams", 0) for c in clients)
    minutes = res["seconds"] / 60
    (s1, e1), (s2, e2) = res["halves"]
    lines = [
        f"Run of {res['started']}: {_f(minutes, 1)} min of load in two halves, "
        f"{res['concurrency']} streams in flight, {streams} streams and WebSocket sessions"
        f"{' (`--quick`: a smoke run, too short for trend claims)' if res['quick'] else ''}.",
        f"retimer {m['retimer']}, profile `{res['profile']}`; {m['nproc']} CPUs ({m['cpu']}), "
        f"Python {m['python']}, mitmproxy {m['mitmproxy']}; load average "
        f"{m['loadavg_start']} at the start, {m.get('loadavg_end', '?')} at the end.",
        "",
        f"**Verdict: {'PASS' if a['pass'] else 'FAIL'}**" + _not_judged(a),
        "",
        "| check | result |",
        "|---|---|",
        *(f"| {name} | {_verdict(ok)} |" for name, ok in a["checks"].items()),
        "",
        "### Resources (sampled from outside the proxy)",
        "",
        f"Fits cover {_f((e1 - s1) / 60, 1)} min of each half (its ramp-up left out); the second "
        f"half ran {a['streams_second_half']} streams and sessions. Idle levels are medians; "
        "± is the fitted rise's standard error (load noise: streams start and end).",
        "",
        "| resource | idle before | 1st half (min-max) | idle between | 2nd half (min-max) "
        "| 2nd-half slope /min | 2nd-half fitted rise | idle after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, label, k in _RESOURCES:
        if key not in a:
            continue
        r = a[key]
        h1, h2 = r["first_half"], r["second_half"]
        nd = 1 if k != 1.0 else 0
        trend = (f"{_f(h2['slope_per_min'] * k, 2)} | {_f(h2['growth'] * k, 2)} "
                 f"± {_f(h2['growth_se'] * k, 2)}" if "growth" in h2 else
                 f"{TOO_FEW} ({h2['n']} samples) | {TOO_FEW}")
        lines.append(
            f"| {label} | {_f(r['before'] * k, nd)} | {_f(h1.get('min', math.nan) * k, nd)}-"
            f"{_f(h1.get('max', math.nan) * k, nd)} | {_f(r['mid'] * k, nd)} | "
            f"{_f(h2.get('min', math.nan) * k, nd)}-{_f(h2.get('max', math.nan) * k, nd)} | "
            f"{trend} | {_f(r['after'] * k, nd)} |")
    if "tasks" not in a:
        lines += ["", "Tasks and objects were not sampled (`--no-probe`)."]
    failures = [f for c in clients for f in c.get("failures", [])]
    p50 = max(c.get("duration_p50_s", 0) for c in clients)
    p99 = max(c.get("duration_p99_s", 0) for c in clients)
    lines += ["", "### Streams at the client", "", *_streams_table(res["counts"])]
    if failures:
        lines += ["", "First failures:", "", *(f"- `{f}`" for f in failures[:10])]
    for held in res.get("held_at_idle", [])[:3]:
        lines += ["", f"Held by the proxy in phase {held['phase']} (no load on):",
                  "", f"    {json.dumps(held['proxy'])[:1500]}"]
    for slow in res.get("slow", [])[:5]:  # what the proxy held for a stream the client found slow
        lines += ["", f"Slow {slow['kind']} stream {slow['plan']}: the proxy had",
                  "", f"    {json.dumps(slow['proxy'])[:1500]}"]
    lines += ["", f"Stream duration at the client (the slower half): p50 {_f(p50, 2)} s, "
              f"p99 {_f(p99, 2)} s.", "",
              "### Time series", "", *_series(res), "",
              "### What the proxy recorded (`--log`), by protocol and outcome", "",
              *_records(res.get("records", {})), ""]
    log = res.get("proxy_log", {})
    lines += ["### The proxy's log (stderr, `--quiet`)", "",
              f"{log.get('lines', 0)} lines, {log.get('tracebacks', 0)} tracebacks; the most "
              "frequent kinds (numbers shown as N):", "",
              *(f"- {n} x `{kind}`" for kind, n in log.get("kinds", {}).items()), ""]
    if res.get("types_after"):
        lines += ["### Object types that grew between idle before and idle after", "",
                  *_growers(res.get("types_before", {}), res["types_after"]), ""]
    return "\n".join(lines)


def _streams_table(counts: dict[str, int]) -> list[str]:
    by_kind: dict[str, dict[str, int]] = defaultdict(dict)
    outcomes: set[str] = set()
    for key, n in counts.items():
        kind, outcome = key.split(" ", 1)
        by_kind[kind][outcome] = n
        outcomes.add(outcome)
    cols = sorted(outcomes, key=lambda o: (o != "ok", o.startswith("FAIL"), o))
    out = ["| format | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for kind in sorted(by_kind):
        out.append(f"| {kind} | " + " | ".join(str(by_kind[kind].get(c, 0)) for c in cols) + " |")
    total = {c: sum(v.get(c, 0) for v in by_kind.values()) for c in cols}
    out.append("| **all** | " + " | ".join(f"**{total[c]}**" for c in cols) + " |")
    return out


def _series(res: dict[str, Any], rows: int = 12) -> list[str]:
    samples = res["samples"]
    t0 = res["clients"][0]["t0"]
    step = max(1, len(samples) // rows)
    picked = samples[::step] + ([samples[-1]] if (len(samples) - 1) % step else [])
    has_probe = "tasks" in samples[0]
    head = "| t (s) | phase | streams done | active | RSS (MiB) | fds | threads |"
    head += " tasks | objects (k) |" if has_probe else ""
    out = [head, "|" + "---:|" * 2 + "---:|" * (5 + 2 * has_probe)]
    for s in picked:
        row = (f"| {s['t'] - t0:.0f} | {s['phase']} | {s['streams_done']} | {s['active']} | "
               f"{s['rss_kb'] / 1024:.1f} | {s['fds']} | {s['threads']} |")
        if has_probe:
            row += f" {s.get('tasks', '')} | {s.get('objects', 0) / 1000:.0f} |"
        out.append(row)
    return out


def _records(records: dict[str, int]) -> list[str]:
    if not records:
        return ["(no records)"]
    return ["| protocol | outcome | records |", "|---|---|---:|",
            *(f"| {k.split(' ', 1)[0]} | {k.split(' ', 1)[1]} | {n} |"
              for k, n in sorted(records.items()))]


def _growers(before: dict[str, int], after: dict[str, int], top: int = 10) -> list[str]:
    """Types whose count rose most (from the probe's 60 most common types at each end)."""
    grown = sorted(((after[t] - before.get(t, 0), t) for t in after), reverse=True)[:top]
    grown = [(d, t) for d, t in grown if d > 0]
    if not grown:
        return ["(none)"]
    return ["| type | before | after | change |", "|---|---:|---:|---:|",
            *(f"| `{t}` | {before.get(t, 0)} | {after[t]} | +{d} |" for d, t in grown)]
