"""The scaling benchmark's tables, its done-when verdicts and the model of larger machines.

Pure: a results dict (bench.scaling) in, markdown out. The model is arithmetic on measured
figures, not a measurement: streams per core at 50 tok/s = 1 / (CPU per event x events per
second per stream), scaled by the share of the machine's free CPU the proxy could actually use
before lateness p99 passed 5 ms (the headroom measured here).
"""

from __future__ import annotations

from typing import Any

LATE_P99_MS = 5.0  # issue 15's bound on client lateness p99
TTFT_P99_MS = 50.0  # issue 15's bound on first-token error p99 (200 sent in the same instant)
DONE_STREAMS = 200
MODEL_CORES = (8, 16)


def timed_out(row: dict[str, Any]) -> bool:
    """A row bench.scaling stopped at its timeout: it has no figures."""
    return "timed_out_s" in row


def _f(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _pct(cpu: dict[str, Any], name: str) -> float | None:
    got = cpu.get(name)
    return got["pct"] if got else None


def _cores(row: dict[str, Any]) -> str:
    names = sorted(k for k in row["cpu"] if k.startswith("core"))
    return " / ".join(_f(_pct(row["cpu"], k), 0) for k in names)


def _parent(row: dict[str, Any]) -> str:
    """The `--workers` parent's share of the proxy's CPU (it reads the workers' pipes)."""
    got = _pct(row["cpu"], "proxy parent")
    return "" if got is None else f" (parent {got:.0f})"


def others_pct(row: dict[str, Any]) -> float | None:
    """What the rest of the machine used meanwhile (% of a core): every core's busy time minus
    the proxy's, the client's, the upstream's and the idle proxy's (this machine is shared)."""
    busy = [_pct(row["cpu"], k) for k in row["cpu"] if k.startswith("core")]
    ours = [_pct(row["cpu"], k) for k in ("proxy", "client", "upstream", "idle proxy") if k in row["cpu"]]
    if not busy or None in busy or None in ours:
        return None
    return max(0.0, sum(b for b in busy if b is not None) - sum(o for o in ours if o is not None))


def table(rows: list[dict[str, Any]]) -> str:
    """One line per (streams, start, workers), the worker counts side by side."""
    out = ["| streams | start | workers | lateness p50 / p99 / max ms | TTFT error p50 / p99 ms "
           "(client) | TTFT error p99 ms (record) | proxy CPU % of a core | proxy CPU us/event "
           "| client CPU % | upstream CPU % | cores busy % | other processes % | streams per worker "
           "| incomplete |",
           "|" + "---|" * 14]
    for r in sorted(rows, key=lambda r: (-r["start_spread_s"], r["streams"], r["workers"])):
        start = "same instant" if r["start_spread_s"] == 0 else f"within {r['start_spread_s']:g} s"
        if timed_out(r):
            out.append(f"| {r['streams']} | {start} | {r['workers']} | **timed out after "
                       f"{r['timed_out_s']:.0f} s** |" + " - |" * 10)
            continue
        late = r["late_client_ms"]
        served = " / ".join(str(v) for _, v in sorted(r["served_by_worker"].items()))
        out.append(
            f"| {r['streams']} | {start} | {r['workers']} | {_f(late['p50'], 2)} / "
            f"{_f(late['p99'], 2)} / {_f(late['max'], 1)} | {_f(r['client_ttft_err_p']['p50'])} / "
            f"{_f(r['client_ttft_err_p']['p99'])} | {_f(r['proxy_ttft_err_p']['p99'])} | "
            f"{_f(_pct(r['cpu'], 'proxy'), 0)}{_parent(r)} | {_f(r['cpu_us_per_event'], 0)} | "
            f"{_f(_pct(r['cpu'], 'client'), 0)} | {_f(_pct(r['cpu'], 'upstream'), 0)} | "
            f"{_cores(r)} | {_f(others_pct(r), 0)} | {served} | {r['incomplete']} |")
    return "\n".join(out) + "\n"


def held(rows: list[dict[str, Any]], workers: int) -> tuple[int | None, int | None]:
    """(largest count started within 1 s held at lateness p99 <= 5 ms below the smallest that
    was not, that smallest) for one worker count; None where there is none. A larger count
    that happened to hold above a failed one does not count."""
    spread = sorted((r for r in rows if r["workers"] == workers and r["start_spread_s"] > 0),
                    key=lambda r: r["streams"])
    bad = [r["streams"] for r in spread
           if timed_out(r) or r["late_client_ms"]["p99"] > LATE_P99_MS or r["incomplete"]]
    first_bad = min(bad) if bad else None
    ok = [r["streams"] for r in spread
          if r["streams"] not in bad and (first_bad is None or r["streams"] < first_bad)]
    return (max(ok) if ok else None), first_bad


def _row(rows: list[dict[str, Any]], workers: int, streams: int, burst: bool,
         stopped: bool = False) -> dict[str, Any] | None:
    """The measured row of these counts (`stopped`: the timed-out one), if the run has it."""
    for r in rows:
        if (r["workers"] == workers and r["streams"] == streams and (r["start_spread_s"] == 0) == burst
                and timed_out(r) == stopped):
            return r
    return None


def done_when(rows: list[dict[str, Any]]) -> str:
    """Issue 15's two scaling figures for --workers 2, met or not."""
    lines = []
    spread = _row(rows, 2, DONE_STREAMS, burst=False)
    if spread:
        p99 = spread["late_client_ms"]["p99"]
        one = _row(rows, 1, DONE_STREAMS, burst=False)
        lines.append(f"- {DONE_STREAMS} streams at 50 tok/s started within 1 s, `--workers 2`: client "
                     f"lateness p99 {p99:.2f} ms (bound {LATE_P99_MS:g} ms): "
                     f"**{'met' if p99 <= LATE_P99_MS else 'not met'}**"
                     + (f" (`--workers 1`: {one['late_client_ms']['p99']:.2f} ms)" if one else ""))
    burst = _row(rows, 2, DONE_STREAMS, burst=True)
    if burst:
        rec, cli = burst["proxy_ttft_err_p"]["p99"], burst["client_ttft_err_p"]["p99"]
        one = _row(rows, 1, DONE_STREAMS, burst=True)
        lines.append(f"- {DONE_STREAMS} sent in the same instant, `--workers 2`: first-token error p99 "
                     f"{rec:.1f} ms in the records (emitted TTFT minus the drawn target), {cli:.1f} ms "
                     f"at the client (bound {TTFT_P99_MS:g} ms): "
                     f"**{'met' if max(rec, cli) <= TTFT_P99_MS else 'not met'}**"
                     + (f" (`--workers 1`: {one['proxy_ttft_err_p']['p99']:.1f} / "
                        f"{one['client_ttft_err_p']['p99']:.1f} ms)" if one else ""))
    for instant, what in ((False, "started within 1 s"), (True, "sent in the same instant")):
        stopped = _row(rows, 2, DONE_STREAMS, instant, stopped=True)
        if stopped and not _row(rows, 2, DONE_STREAMS, instant):
            lines.append(f"- {DONE_STREAMS} {what}, `--workers 2`: timed out after "
                         f"{stopped['timed_out_s']:.0f} s: **not met**")
    if not lines:
        lines.append(f"- (issue 15's figures need `--workers 2` rows at {DONE_STREAMS} streams; "
                     "this run has none)")
    for w in sorted({r["workers"] for r in rows}):
        ok, bad = held(rows, w)
        lines.append(f"- `--workers {w}`: most streams started within 1 s held at lateness p99 <= "
                     f"{LATE_P99_MS:g} ms: {ok if ok is not None else 'none of the counts run'}"
                     + (f" (not held at {bad})" if bad is not None else " (every count run held)"))
    return "\n".join(lines) + "\n"


def _headroom(rows: list[dict[str, Any]], workers: int, nproc: int) -> float | None:
    """The share of the cores the client, the upstream and every other process left that the
    proxy used at the most streams `workers` held; None when it held none."""
    ok, _ = held(rows, workers)
    row = _row(rows, workers, ok, burst=False) if ok is not None else None
    if row is None or not row["cpu_us_per_event"]:
        return None
    taken = sum((_pct(row["cpu"], k) or 0.0) for k in ("client", "upstream", "idle proxy"))
    free = max(0.1, nproc - (taken + (others_pct(row) or 0.0)) / 100)
    return ok * row["cpu_us_per_event"] * row["target_tps"] / 1e6 / free


def model(rows: list[dict[str, Any]], nproc: int) -> dict[str, Any] | None:
    """Streams at 50 tok/s on 8 and 16 cores, from the per-event CPU of the most workers at
    the most streams they held (else at 200 streams, else at the most they ran), scaled by the
    measured headroom (`_headroom`) of the most workers that held any count."""
    counts = sorted({r["workers"] for r in rows})
    w = counts[-1]
    ok, _ = held(rows, w)
    spread = sorted((r for r in rows if r["workers"] == w and r["start_spread_s"] > 0 and not timed_out(r)),
                    key=lambda r: r["streams"])
    base = (_row(rows, w, ok, burst=False) if ok is not None
            else _row(rows, w, DONE_STREAMS, burst=False) or (spread[-1] if spread else None))
    if base is None or not base["cpu_us_per_event"]:
        return None
    us = base["cpu_us_per_event"]
    per_core = 1e6 / (us * base["target_tps"])
    by = [(c, h) for c in reversed(counts) if (h := _headroom(rows, c, nproc)) is not None]
    headroom_workers, headroom = by[0] if by else (None, None)
    return {"workers": w, "streams": base["streams"], "us_per_event": us, "per_core": per_core,
            "headroom": headroom, "headroom_workers": headroom_workers,
            "cores": {c: {"cpu_bound": c * per_core,
                          "with_headroom": c * per_core * headroom if headroom else None}
                      for c in MODEL_CORES}}


def model_text(m: dict[str, Any] | None) -> str:
    if m is None:
        return "- (no model: no row with a CPU figure)\n"
    h = m["headroom"]
    lines = [f"A model, not a measurement: `--workers {m['workers']}` spent {m['us_per_event']:.0f} us "
             f"of CPU per event at {m['streams']} streams, so one core carries at most "
             f"{m['per_core']:.0f} streams at 50 tok/s (1 / (CPU per event x 50 events/s)). "
             + (f"At the most streams `--workers {m['headroom_workers']}` held at p99 <= 5 ms, the "
                f"proxy used {h * 100:.0f} % of the CPU the client, the upstream and other processes "
                "left it: that headroom scales the CPU bound below." if h else
                "No count was held at p99 <= 5 ms, so there is no measured headroom: only the CPU "
                "bound is given."),
             "", "| cores (one worker each) | streams: CPU bound | streams: with the measured headroom |",
             "|---|---|---|"]
    for c, v in m["cores"].items():
        lines.append(f"| {c} | {v['cpu_bound']:.0f} | {_f(v['with_headroom'], 0)} |")
    return "\n".join(lines) + "\n"


def render(res: dict[str, Any]) -> str:
    """The whole scaling section's results as markdown."""
    mach = res["machine"]
    head = (f"Run of {res['started']}{' (--quick: tiny counts, not figures)' if res['quick'] else ''}, "
            f"{res['duration_s']:.0f} s, retimer {mach['retimer']}, {mach['nproc']} CPUs, load average "
            f"{mach['loadavg_start']} at the start, {mach.get('loadavg_end', '?')} at the end; "
            f"client: {res.get('client', 'raw sockets')}.\n")
    return "\n".join([head, table(res["rows"]), done_when(res["rows"]),
                      model_text(model(res["rows"], mach["nproc"]))])
