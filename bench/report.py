"""Markdown tables and the goal check from a results dict (bench/results/*.json)."""

from __future__ import annotations

import math
from typing import Any


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
    return "\n".join(lines)


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
    per_stream = o["routes"]["retimer"]["events"] / o["streams_per_route"]
    lines = [
        f"{o['streams_per_route']} streams x {per_stream:.0f} SSE events per route (one word "
        f"each), upstream event every {o['upstream_gap_ms']:g} ms (asyncio.sleep, so about "
        f"2.1 ms), routes interleaved stream by stream.",
        "",
        "| route | events | added latency ms (p50 / p90 / p99 / max) | proxy CPU ms per stream "
        "| CPU us per event | GET round trip ms (p50 / p99) | CPU us per GET |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in o["routes"].items():
        a = r["added_ms"]
        lines.append(
            f"| {name} | {r['events']} | {_f(a['p50'], 3)} / {_f(a['p90'], 3)} / {_f(a['p99'], 3)}"
            f" / {_f(a['max'], 3)} | {_f(r['cpu_ms_per_stream'], 1)} "
            f"| {_f(r['cpu_us_per_event'], 1)} | {_f(r['get_ms']['p50'], 3)} / "
            f"{_f(r['get_ms']['p99'], 3)} | {_f(r['cpu_us_per_get'], 0)} |"
        )
    d = o["retimer_minus_mitmdump_ms"]
    lines += [
        "",
        f"retimer minus mitmdump, added latency per event: p50 {_f(d['p50'], 3, True)} ms, "
        f"p99 {_f(d['p99'], 3, True)} ms, mean {_f(d['mean'], 3, True)} ms. "
        f"CPU ratio retimer/mitmdump: streams {_f(o['cpu_ratio'], 2)}x, "
        f"GETs {_f(o['get_cpu_ratio'], 2)}x.",
    ]
    return "\n".join(lines)


def concurrency_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| streams | started within s | events/s "
        "| lateness client vs schedule ms (p50 / p99 / max) "
        "| lateness proxy record ms (median p50 / median p99 / worst p99 / max) "
        "| TTFT err client ms (median / max) | of which request -> proxy ms "
        "| TTFT err proxy ms (median / max) | rate err % client (median / worst) "
        "| proxy CPU % of a core | CPU us per event |",
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


def _worst_abs(rows: list[dict[str, Any]], key: str) -> float:
    return max(max(abs(r[key]["max"]), abs(r[key]["min"])) for r in rows)


def _fidelity_goals(fid: list[dict[str, Any]]) -> list[tuple[str, str, bool | None]]:
    out: list[tuple[str, str, bool | None]] = []
    bands = ((0, 10), (10, 2000), (2000, float("inf")))  # slow (reading pace), typical, extreme
    for lo, hi in bands:
        rows = [r for r in fid if lo < r["target_tps"] <= hi]
        if not rows:
            continue
        rates = sorted({r["target_tps"] for r in rows})
        label = (f"{rates[0]:g}" if len(rates) == 1 else f"{rates[0]:g}-{rates[-1]:g}") + " tok/s"
        for side, key, where in (("client", "client_ttft_err_ms", "at the client"),
                                 ("proxy", "proxy_ttft_err_ms", "in the proxy record (reference)")):
            med = max(abs(r[key]["median"]) for r in rows)
            worst = _worst_abs(rows, key)
            out.append((f"TTFT error {where}, {label}: median <= 1 ms, worst stream <= 3 ms",
                        f"worst row median {med:.2f} ms, worst stream {worst:.2f} ms",
                        med <= 1 and worst <= 3))
        for key, where in (("late_client_ms", "at the client vs schedule"),
                           ("late_proxy_ms", "in the proxy record (reference)")):
            p50 = max(r[key]["p50"] for r in rows if r[key])
            p99 = max(r[key]["p99"] for r in rows if r[key])
            out.append((f"per-token lateness {where}, {label}: p50 <= 1 ms, p99 <= 3 ms",
                        f"worst row p50 {p50:+.2f} ms, p99 {p99:+.2f} ms", p50 <= 1 and p99 <= 3))
        worst_rate = max((r["client_rate_err_pct"]["worst"] for r in rows), key=abs)
        out.append((f"achieved rate at the client within 0.5 % (issue 4), {label}",
                    f"worst stream {worst_rate:+.3f} %", abs(worst_rate) <= 0.5))
    near40 = [r for r in fid if r["target_tps"] == 40] or [r for r in fid if r["target_tps"] == 50]
    if near40:
        rate = max((r["client_rate_err_pct"]["worst"] for r in near40), key=abs)
        ttft = _worst_abs(near40, "client_ttft_err_ms")
        at = near40[0]["target_tps"]
        out.append((f"issue 2: rate +-3 % at 40 tok/s and TTFT 400 +- 15 ms (client, at {at:g})",
                    f"rate worst {rate:+.3f} %, TTFT worst abs. error {ttft:.2f} ms",
                    abs(rate) <= 3 and ttft <= 15))
    return out


def goals(res: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    """(goal, measured, met) for every goal the results can speak to."""
    out = _fidelity_goals(res.get("fidelity") or [])
    o = res.get("overhead")
    if o:
        ratio = o["cpu_ratio"]
        out.append(("passthrough CPU <= 1.1x mitmdump (streams)", f"{ratio:.2f}x",
                    ratio is not None and ratio <= 1.1))
        d = o["retimer_minus_mitmdump_ms"]
        out.append(("passthrough adds <= 0.2 ms per event over mitmdump (p50 and p99)",
                    f"p50 {d['p50']:+.3f} ms, p99 {d['p99']:+.3f} ms",
                    d["p50"] <= 0.2 and d["p99"] <= 0.2))
    return out


def goals_table(res: dict[str, Any]) -> str:
    lines = ["| goal | measured | met |", "|---|---|---|"]
    for goal, measured, met in goals(res):
        lines.append(f"| {goal} | {measured} | {'met' if met else 'NOT met'} |")
    return "\n".join(lines)


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
        f"mitmproxy {m['mitmproxy']}, load average {m['loadavg_start']} at start.",
    ]
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
    return "\n".join(parts) + "\n"
