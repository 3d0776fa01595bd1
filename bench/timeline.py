"""One row of the scaling benchmark, with client lateness by half-second since its first request:
`.venv/bin/python -m bench.timeline [--streams 200] [--workers 2] [--spread 1] [--repeat 2]`.

Why: a row's p99 says how late the worst tokens were, not when. Admission (new flows, while
the first streams already play), the steady part and the streams' ends load the proxy
differently; this shows which part a row's tail comes from. Same proxy, scenario and measures
as bench.scaling (`run_row`); prints, per run, the row's lateness and TTFT error, the proxy's
and the client's CPU, and a table of client lateness per half-second. Nothing here asserts
timing.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import scaling
from bench.harness import Client, FakeLLM, cpu_seconds

BUCKET_S = 0.5


def timeline(results: list[dict[str, Any]], analysed: list[dict[str, Any]]
             ) -> list[tuple[float, int, float, float, float, float]]:
    """(bucket start s, tokens, p50, p99, max ms, share over 5 ms) per half-second since the
    row's first request, of every token's client lateness."""
    t_first = min(r["t_sent"] for r in results)
    times = np.concatenate([np.array([t for t, _ in r["events"]]) - t_first for r in results])
    late = np.concatenate([np.asarray(a["late_ms"]) for a in analysed])
    rows = []
    for lo in np.arange(0.0, float(times.max()) + BUCKET_S, BUCKET_S):
        v = late[(times >= lo) & (times < lo + BUCKET_S)]
        if v.size:
            p50, p99 = np.percentile(v, [50, 99])
            rows.append((float(lo), int(v.size), float(p50), float(p99), float(v.max()),
                         float(np.mean(v > 5.0))))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--spread", type=float, default=scaling.SPREAD_S,
                    help="start the streams within this many seconds (0: the same instant)")
    ap.add_argument("--tokens", type=int, default=scaling.FULL.tokens, help="per stream")
    ap.add_argument("--repeat", type=int, default=1, help="runs of the row, one proxy")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    captured: dict[str, Any] = {}  # run_row's results and analysis, for the timeline
    with tempfile.TemporaryDirectory(prefix="retimer-timeline-") as td, \
            FakeLLM(bursts=3) as fake, Client() as client:
        fake.bursts, fake.burst_gap, fake.per_event_gap = 3, 0.0, None
        proxy = scaling.Proxy(client, fake, Path(td), args.workers, args.seed)
        try:
            for k in range(args.repeat):
                cpu0 = [sum(cpu_seconds(p) for p in proxy.pids["proxy"]), cpu_seconds(client.proc.pid)]
                row = scaling.run_row(client, fake, proxy, args.streams, args.spread, args.tokens,
                                      args.seed, random.Random(k), streams=captured)
                cpu = [sum(cpu_seconds(p) for p in proxy.pids["proxy"]) - cpu0[0],
                       cpu_seconds(client.proc.pid) - cpu0[1]]
                late, ttft = row["late_client_ms"], row["client_ttft_err_p"]
                print(f"run {k + 1}: {args.streams} streams within {args.spread:g} s, --workers "
                      f"{args.workers}: client lateness p50 {late['p50']:.2f} / p99 {late['p99']:.2f}"
                      f" / max {late['max']:.1f} ms; TTFT error p99 {ttft['p99']:.1f} ms (client), "
                      f"{row['proxy_ttft_err_p']['p99']:.1f} ms (records); CPU s: proxy "
                      f"{cpu[0]:.2f}, client {cpu[1]:.2f}, for {row['events']} events")
                print("| since first request | tokens | lateness p50 / p99 / max ms | over 5 ms |")
                print("|---|---|---|---|")
                for lo, n, p50, p99, mx, over in timeline(captured["results"], captured["analysed"]):
                    print(f"| {lo:.1f}-{lo + BUCKET_S:.1f} s | {n} | {p50:.2f} / {p99:.2f} / {mx:.1f} "
                          f"| {over * 100:.1f} % |")
                time.sleep(1.0)
        finally:
            proxy.stop()


if __name__ == "__main__":
    main()
