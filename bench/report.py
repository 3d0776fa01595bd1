"""Markdown tables from a results dict (bench/results/*.json); the goal check is goals.py."""

from __future__ import annotations

import math
from typing import Any

from bench.goals import goals_table


def _f(v: float | None, digits: int = 2, signed: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


def _trio(d: dict[str, float] | None, keys: tuple[str, ...] = ("p50", "p99", "max"),
          digits: int = 2) -> str:
    if not d:
        return "-"
    return " / ".join(_f(d[k], digits, signed=True) for k in keys)


def _mw(d: dict[str, float], worst: str = "max", digits: int = 2) -> str:
    return f"{_f(d['median'], digits, True)} / {_f(d[worst], digits, True)}"


def fidelity_table(rows: list[dict[str, Any]]) -> str:
    """Two tables: TTFT and rate; then lateness (client vs schedule, vs own first token, proxy)."""
    lines = [
        "| target tok/s | format | streams x tokens | TTFT err client ms (median / max) "
        "| of which request -> proxy ms | TTFT err proxy ms (median / max) "
        "| first token proxy -> client ms | rate err % client (median / worst) "
        "| rate err % proxy (median / worst) |",
        "|" + "---|" * 9,
    ]
    for r in rows:
        pr = r["proxy_rate_err_pct"]
        lines.append(
            f"| {r['target_tps']:g} | {r['format']} | {r['streams']} x {r['tokens']} "
            f"| {_mw(r['client_ttft_err_ms'])} | {_f(r['request_to_proxy_ms'])} "
            f"| {_mw(r['proxy_ttft_err_ms'])} | {_f(r['proxy_to_client_ms'])} "
            f"| {_mw(r['client_rate_err_pct'], 'worst', 3)} "
            f"| {_mw(pr, 'worst', 3) if pr else '-'} |"
        )
    lines += [
        "",
        "| target tok/s | format | lateness client vs schedule ms (p50 / p99 / max) "
        "| lateness client vs its first token ms (p50 / p99 / max) "
        "| lateness proxy record ms (median p50 / median p99 / max) |",
        "|" + "---|" * 5,
    ]
    for r in rows:
        lines.append(
            f"| {r['target_tps']:g} | {r['format']} | {_trio(r['late_client_ms'])} "
            f"| {_trio(r['late_client_rel_ms'])} | {_trio(r['late_proxy_ms'])} |"
        )
    if all(r.get("gaps") for r in rows):
        lines += [
            "",
            "| target tok/s | format | inter-token gaps | profile gap ms (p50 / p90 / p99) "
            "| achieved at the client ms (p50 / p90 / p99) | error % (p50 / p90 / p99) |",
            "|" + "---|" * 6,
        ]
        for r in rows:
            g = r["gaps"]
            lines.append(
                f"| {r['target_tps']:g} | {r['format']} | {g['n_gaps']} "
                f"| {_q3(g['profile_ms'], 3)} | {_q3(g['client_ms'], 3)} "
                f"| {_q3(g['client_vs_profile_pct'], 1, True)} |"
            )
    return "\n".join(lines)


def _q3(d: dict[str, float], digits: int, signed: bool = False) -> str:
    return " / ".join(_f(d[k], digits, signed) for k in ("p50", "p90", "p99"))


def jitter_table(j: dict[str, Any]) -> str:
    g = j["gaps"]
    lines = [
        f"Profile `{j['profile']}` ({j['target_tps']:g} tok/s, default jitter, one token per "
        f"event), {j['streams']} stream(s) x {j['tokens']} tokens, {g['n_gaps']} gaps.",
        "",
        "| inter-token gap ms | p50 | p90 | p99 | mean |",
        "|---|---|---|---|---|",
    ]
    for label, key in (("profile (shape)", "profile_ms"), ("drawn by the proxy", "drawn_ms"),
                       ("achieved at the client", "client_ms")):
        d = g[key]
        lines.append(f"| {label} | {_f(d['p50'])} | {_f(d['p90'])} | {_f(d['p99'])} "
                     f"| {_f(d['mean'], 3)} |")
    for label, key in (("drawn vs profile, error %", "drawn_vs_profile_pct"),
                       ("achieved vs profile, error %", "client_vs_profile_pct")):
        if d := g.get(key):
            lines.append(f"| {label} | {_f(d['p50'], 1, True)} | {_f(d['p90'], 1, True)} "
                         f"| {_f(d['p99'], 1, True)} | {_f(d['mean'], 2, True)} |")
    lines += [
        "",
        f"TTFT err client {_f(j['client_ttft_err_ms']['median'], 2, True)} ms median "
        f"(max {_f(j['client_ttft_err_ms']['max'], 2, True)}) against each stream's drawn TTFT; "
        f"rate err {_f(j['client_rate_err_pct']['median'], 3, True)} % median "
        f"(worst {_f(j['client_rate_err_pct']['worst'], 3, True)}); lateness against the drawn "
        f"schedule, client p50 / p99 / max {_trio(j['late_client_ms'])} ms, proxy record "
        f"{_trio(j['late_proxy_ms'])} ms.",
    ]
    return "\n".join(lines)


def overhead_table(o: dict[str, Any]) -> str:
    """SSE streams (added latency per event, CPU), then non-LLM requests (round trip, CPU)."""
    per_stream = o["routes"]["retimer"]["events"] / o["streams_per_route"]
    lines = [
        f"{o['streams_per_route']} streams x {per_stream:.0f} SSE events per route (one word "
        f"each), upstream event every {o['upstream_gap_ms']:g} ms (asyncio.sleep, so about "
        f"2.1 ms), routes interleaved stream by stream; `retimer` runs `--profile passthrough`.",
        "",
        "| route | events | added latency ms (p50 / p90 / p99 / max) | proxy CPU ms per stream "
        "| CPU us per event |",
        "|---|---|---|---|---|",
    ]
    for name, r in o["routes"].items():
        a = r["added_ms"]
        lines.append(
            f"| {name} | {r['events']} | {_f(a['p50'], 3)} / {_f(a['p90'], 3)} / {_f(a['p99'], 3)}"
            f" / {_f(a['max'], 3)} | {_f(r['cpu_ms_per_stream'], 1)} "
            f"| {_f(r['cpu_us_per_event'], 1)} |"
        )
    d = o["retimer_minus_mitmdump_ms"]
    ratio = o.get("retimer_over_mitmdump_latency")
    lines += [
        "",
        f"retimer minus mitmdump, added latency per event: p50 {_f(d['p50'], 3, True)} ms, "
        f"p99 {_f(d['p99'], 3, True)} ms, mean {_f(d['mean'], 3, True)} ms"
        + (f"; ratio retimer/mitmdump p50 {_f(ratio['p50'])}x, p99 {_f(ratio['p99'])}x, "
           f"mean {_f(ratio['mean'])}x" if ratio else "")
        + f". CPU ratio retimer/mitmdump: {_f(o['cpu_ratio'])}x.",
        "",
        "Non-LLM requests: GETs of the upstream's JSON route (`/v1/models`, about 100 bytes) "
        "on one keep-alive connection per route, in interleaved blocks of 25.",
        "",
        "| route | requests | round trip ms (p50 / p99 / mean) | proxy CPU us per request |",
        "|---|---|---|---|",
    ]
    for name, r in o["routes"].items():
        g = r["get_ms"]
        lines.append(f"| {name} | {g.get('n', '-')} | {_f(g['p50'], 3)} / {_f(g['p99'], 3)} / "
                     f"{_f(g.get('mean'), 3)} | {_f(r['cpu_us_per_get'], 0)} |")
    gd, gr = o.get("get_retimer_minus_mitmdump_ms"), o.get("get_latency_ratio")
    lines += [""]
    if gd and gr:
        lines.append(f"retimer minus mitmdump per request: p50 {_f(gd['p50'], 3, True)} ms, p99 "
                     f"{_f(gd['p99'], 3, True)} ms, mean {_f(gd['mean'], 3, True)} ms (ratio "
                     f"p50 {_f(gr['p50'])}x, mean {_f(gr['mean'])}x); CPU ratio "
                     f"{_f(o['get_cpu_ratio'])}x.")
    else:
        lines.append(f"CPU ratio retimer/mitmdump: {_f(o['get_cpu_ratio'])}x.")
    return "\n".join(lines)


def concurrency_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| streams | started within s | events/s "
        "| lateness client vs schedule ms (p50 / p99 / max) "
        "| lateness proxy record ms (median p50 / median p99 / worst p99 / max) "
        "| TTFT err client ms (median / max) | of which request -> proxy ms "
        "| TTFT err proxy ms (median / max) | rate err % client (median / worst) "
        "| proxy CPU % of a core, first send to last byte | CPU us per event, set-up incl. |",
        "|" + "---|" * 11,
    ]
    for r in rows:
        lp = r["late_proxy_ms"]
        lines.append(
            f"| {r['streams']} | {r['start_spread_s']:g} | {r['events_per_s']:g} "
            f"| {_trio(r['late_client_ms'])} "
            f"| {_trio(lp, ('p50', 'p99', 'p99_worst', 'max'))} "
            f"| {_mw(r['client_ttft_err_ms'])} | {_f(r['request_to_proxy_ms'])} "
            f"| {_mw(r['proxy_ttft_err_ms'])} | {_mw(r['client_rate_err_pct'], 'worst', 3)} "
            f"| {_f(r['proxy_cpu_pct'], 1)} | {_f(r['cpu_us_per_event'], 0)} |"
        )
    return "\n".join(lines)


def memory_table(rows: list[dict[str, Any]]) -> str:
    """Proxy RSS per active stream, from the concurrency runs."""
    lines = [
        "| streams | started within s | idle RSS MB | RSS all active MB (median; window s) "
        "| peak RSS MB | RSS after MB | per active stream kB | peak per stream kB |",
        "|" + "---|" * 8,
    ]
    for r in rows:
        m = r.get("memory")
        if not m:
            continue
        act = (f"{_mb(m['active_kb'])} ({m['active_samples']} samples; "
               f"{m['all_active_s']:.1f} s)" if m["active_kb"] is not None else "- (no overlap)")
        lines.append(
            f"| {r['streams']} | {r['start_spread_s']:g} | {_mb(m['idle_kb'])} | {act} "
            f"| {_mb(m['peak_kb'])}{' (VmHWM)' if m['peak_from_hwm'] else ''} "
            f"| {_mb(m['after_kb'])} | {_f(m['per_stream_kb'], 1)} "
            f"| {_f(m['peak_per_stream_kb'], 1)} |"
        )
    return "\n".join(lines)


def _mb(kb: float | None) -> str:
    return "-" if kb is None else f"{kb / 1024:.1f}"


def checks(res: dict[str, Any]) -> str:
    """Sanity of the paced streams: token counts, completion, upstream-bound flags."""
    rows = [*(res.get("fidelity") or []), *([res["jitter"]] if res.get("jitter") else []),
            *(res.get("concurrency") or [])]
    if not rows:
        return ""
    n = sum(r["streams"] for r in rows)
    bad = sum(r["token_count_mismatches"] for r in rows)
    inc = sum(r["incomplete"] for r in rows)
    bound = sum(r["upstream_bound"] for r in rows)
    return (f"Paced streams: {n}; client token count differs from the record in {bad}; "
            f"incomplete {inc}; flagged upstream-bound {bound}.")


def render(res: dict[str, Any]) -> str:
    """The whole results section as markdown."""
    m = res["machine"]
    parts = [
        f"Run {res['started']} ({'quick' if res['quick'] else 'full'}, seed {res['seed']}, "
        f"{res['duration_s']:.0f} s) of retimer {m.get('retimer', '?')}: "
        f"{m['nproc']} x {m['cpu']}, Python {m['python']}, "
        f"mitmproxy {m['mitmproxy']}, load average {m['loadavg_start']} at start"
        + (f", {m['loadavg_end']} at the end" if m.get("loadavg_end") else "") + ".",
    ]
    if res.get("section_s"):
        parts[0] += " Sections: " + ", ".join(f"{k} {v:.0f} s"
                                              for k, v in res["section_s"].items()) + "."
    if check := checks(res):
        parts += ["", check]
    parts += ["", "### Goals", "", goals_table(res)]
    if res.get("fidelity"):
        parts += ["", "### Fidelity: fast upstream, jitter 0, TTFT 400 ms", "",
                  fidelity_table(res["fidelity"])]
    if res.get("jitter"):
        parts += ["", "### Jitter shape", "", jitter_table(res["jitter"])]
    if res.get("overhead"):
        parts += ["", "### Overhead: passthrough vs plain mitmdump", "",
                  overhead_table(res["overhead"])]
    if res.get("concurrency"):
        parts += ["", "### Concurrency: simultaneous streams at 50 tok/s", "",
                  concurrency_table(res["concurrency"])]
        if any(r.get("memory") for r in res["concurrency"]):
            parts += ["", "### Memory per active stream", "",
                      "Proxy RSS (`VmRSS`) while all streams of a concurrency run were active "
                      "at the client, minus its idle RSS before the run, divided by the "
                      "streams; each answer is buffered whole in the proxy (fast upstream).",
                      "", memory_table(res["concurrency"])]
    if res.get("formats"):
        from bench.format_scenarios import TPS, formats_table

        parts += ["", f"### Every wire format: bursty upstream, {TPS:g} tok/s, jitter 0", "",
                  "The upstream sends each capture in 3 bursts 50 ms apart; the client parses "
                  "what it receives with the format's adapter. Rate error is tokens after the "
                  "first event over the time to the last one, against the target.", "",
                  formats_table(res["formats"])]
    return "\n".join(parts) + "\n"
