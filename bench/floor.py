"""The floor at scale: `.venv/bin/python -m bench.floor [--streams N,..] [--tps T]`.

Issue 41's bound for bench.scaling's one-worker rows: N streams of 200 tokens at T tok/s
(one event a word, TTFT 400 ms) through bench.floor_proxy, the bare asyncio pacing proxy (one
loop timer and one write per event, no parsing, no mitmproxy), driven by the raw-socket client
as bench.scaling drives retimer, started within 1 s and in one instant. Prints a table of the
proxy's CPU per event and each event's lateness after its stream's first (how much later than
the first event plus i gaps it reached the client; `--json FILE` also writes it): what any
pacer in Python on asyncio spends and keeps before it does retimer's work. Nothing here
asserts timing.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.harness import ROOT, Client, FakeLLM, cpu_seconds, make_openai_stream, pct, progress, prose, stream_spec

TOKENS, TTFT_S = 200, 0.4


def lateness_after_first(events: list[tuple[float, int]], gap: float) -> list[float]:
    """Seconds each event reached the client after its stream's first event plus i gaps."""
    if not events:
        return []
    first = events[0][0]
    return [(t - first) - i * gap for i, (t, _) in enumerate(events)]


def measure(counts: list[int], tps: float, seed: int = 7) -> list[dict[str, Any]]:
    gap = 1 / tps
    proxy = subprocess.Popen(
        [sys.executable, "-m", "bench.floor_proxy", "--ttft", str(TTFT_S), "--gap", str(gap)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    rows: list[dict[str, Any]] = []
    try:
        assert proxy.stdout
        url = f"http://127.0.0.1:{proxy.stdout.readline().split()[1]}"
        rng = random.Random(seed)
        with FakeLLM() as fake, Client() as client:
            fake.per_event_gap = None
            fake.openai_body = make_openai_stream(prose(TOKENS, seed), words_per_chunk=1)
            for n in counts:
                for spread in (1.0, 0.0):
                    progress(f"floor: {n} streams at {tps:g} tok/s, started within {spread:g} s")
                    specs = [{**stream_spec(fake, "openai", f"{n}-{spread}-{i}", warmup=False),
                              "delay": rng.uniform(0, spread)} for i in range(n)]
                    c0 = cpu_seconds(proxy.pid)
                    results = client.streams(url, specs, concurrent=True, raw=True)
                    cpu = cpu_seconds(proxy.pid) - c0
                    events = sum(len(r["events"]) for r in results)
                    late = [x * 1000 for r in results for x in lateness_after_first(r["events"], gap)]
                    p50, p99 = pct(late, 50, 99)
                    rows.append({"streams": n, "within_s": spread, "events": events,
                                 "cpu_us_per_event": round(cpu / events * 1e6, 1),
                                 "lateness_after_first_ms": {"p50": round(p50, 2), "p99": round(p99, 2),
                                                             "max": round(max(late), 1)}})
                    fake.clear()
    finally:
        proxy.terminate()
        proxy.wait(10)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    lines = ["| streams | start | proxy CPU us/event | lateness after the first p50 / p99 / max ms |",
             "|---|---|---:|---|"]
    for r in rows:
        late = r["lateness_after_first_ms"]
        start = "same instant" if r["within_s"] == 0 else f"within {r['within_s']:g} s"
        lines.append(f"| {r['streams']} | {start} | {r['cpu_us_per_event']:.1f} | "
                     f"{late['p50']:.2f} / {late['p99']:.2f} / {late['max']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="200,400", help="comma-separated counts (default 200,400)")
    ap.add_argument("--tps", type=float, default=50.0)
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the rows here")
    args = ap.parse_args()
    try:
        counts = [int(n) for n in args.streams.split(",") if n]
    except ValueError:
        ap.error(f"--streams: whole numbers separated by commas, not {args.streams!r}")
    if args.tps <= 0:
        ap.error(f"--tps: a positive rate, not {args.tps:g}")
    rows = measure(counts, args.tps)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
