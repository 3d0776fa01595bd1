"""The scaling benchmark (issue 15, item 4): `.venv/bin/python -m bench.scaling [--quick]`.

`retimer --workers 1` and `--workers 2` side by side in one run, on the concurrency
scenario of bench.scenarios (50 tok/s, jitter 0, TTFT 400 ms, one token per network event,
both formats, fast upstream) and its measures (bench.analysis): for each count of streams
started within 1 s, and for streams sent in the same instant, client lateness, first-token
error, the proxy's CPU per event (parent and workers), and what the load generator, the
upstream and each core used meanwhile. The two proxies run for the whole benchmark and take
turns, row by row, the order alternating. The client is bench.rawclient (raw sockets, one
thread, on uvloop where installed), the cheapest generator bench has, since it shares the
proxy's cores.

Every row has a timeout (`--row-timeout`, default `row_timeout`): a row past it is stopped
(its proxy's workers and the load client killed, both started afresh), reported as timed out,
and the run goes on with the next row.

To compare commits, `--code DIR` runs the retimer of another checkout (a git worktree) under the
same harness, and `--workers 2 --streams 200` narrows the run to the rows that matter; run it for
each checkout in turn.

Writes bench/results/scaling-<time>[-quick].json and scaling-latest.{json,md} (or --results
DIR) and prints the tables (bench.scaling_report). Nothing here asserts timing.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from bench.analysis import cpu_while_streaming, summarize_fidelity
from bench.client import RAW_LOOP
from bench.harness import (
    Client,
    FakeLLM,
    ProcSampler,
    RetimerProxy,
    cpu_seconds,
    pct,
    progress,
    retimer_proxy,
    stream_spec,
)
from bench.run import RESULTS, machine, retimer_version
from bench.scaling_report import held, render
from bench.scenarios import FIDELITY_PROFILE, FORMATS, TTFT, analyse, set_text, warm_and_idle
from retimer.profile.settings import ProfileSettings
from retimer.profile.units import parse_duration

RATE = 50.0
SPREAD_S = 1.0  # "started within 1 s"
ROW_MARGIN_S = 60.0  # a row's set-up, analysis, and wait for the proxy's records (30 s at most)
ROW_STOP_S = 10.0  # for a timed-out row's thread to end once its processes are killed


@dataclass(frozen=True)
class ScalePlan:
    """How much to run: the full benchmark, or --quick (a smoke test: tiny counts)."""

    workers: tuple[int, ...]
    tokens: int  # per stream
    spread: tuple[int, ...]  # stream counts started within SPREAD_S (the search for the max)
    burst: int  # streams sent in the same instant
    refine: int = 0  # then, per worker count, one count between the most held and the least not
    # held, when they are further apart than this (0: no refining)


FULL = ScalePlan(workers=(1, 2), tokens=200, spread=(50, 100, 200, 300, 400), burst=200, refine=50)
QUICK = ScalePlan(workers=(1, 2), tokens=20, spread=(4, 8), burst=4)


def children(pid: int) -> list[int]:
    """The child processes of pid (a `--workers N` parent's workers)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(x) for x in (task / "children").read_text().split()]
    return found


def listening(port: int) -> int:
    """How many sockets listen on 127.0.0.1:port (one per worker, SO_REUSEPORT)."""
    hex_port = f":{port:04X}"
    n = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        n += fields[1].endswith(hex_port) and fields[3] == "0A"  # 0A: LISTEN
    return n


def core_busy_s() -> list[float]:
    """Busy seconds of each CPU since boot (/proc/stat: everything but idle and iowait)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = []
    for line in Path("/proc/stat").read_text().splitlines():
        name, *vals = line.split()
        if name.startswith("cpu") and name != "cpu":
            v = [int(x) for x in vals]
            out.append((sum(v[:8]) - v[3] - v[4]) / tick)
    return out


class Usage(ProcSampler):
    """CPU of several processes and busy time of each core, sampled on a thread every 50 ms,
    as `(time, 0, cpu seconds)` series that bench.analysis.cpu_while_streaming cuts to the
    streaming window."""

    def __init__(self, pids: dict[str, list[int]], period: float = 0.05) -> None:
        super().__init__(0, period)
        self.pids = pids
        self.series: dict[str, list[tuple[float, int, float]]] = {}

    def sample(self) -> None:
        now = time.monotonic()
        for name, pids in self.pids.items():
            try:
                used = sum(cpu_seconds(p) for p in pids)
            except (OSError, ValueError):
                continue  # a process is gone
            self.series.setdefault(name, []).append((now, 0, used))
        for i, busy in enumerate(core_busy_s()):
            self.series.setdefault(f"core{i}", []).append((now, 0, busy))

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        super().__exit__(t, e, tb)
        self.sample()  # the last one: the streaming window ends just before


class Proxy:
    """One `retimer --workers N` for the whole run (or until a row times out on it), and how
    many records it has written."""

    def __init__(self, client: Client, fake: FakeLLM, tmp: Path, workers: int, seed: int,
                 restart: int = 0, code: Path | None = None) -> None:
        """`restart` > 0: a fresh proxy after a timed-out row, with a record log of its own;
        `code`: run another checkout's retimer."""
        args = ("--profile", FIDELITY_PROFILE, "--tps", f"{RATE:g}", "--ttft", TTFT,
                "--jitter", "0", "--seed", str(seed), "--workers", str(workers))
        self.workers, self.restart, self.code = workers, restart, code
        name = f"scaling-w{workers}" + (f"-restart{restart}" if restart else "")
        self.proxy: RetimerProxy = retimer_proxy(tmp, name, *args, code=code).start()
        try:
            self.ready(client, fake, seed)
        except BaseException:
            self.proxy.stop()
            raise

    def ready(self, client: Client, fake: FakeLLM, seed: int) -> None:
        """Every worker listening, one warm-up stream per format played, the idle memory."""
        workers = self.workers
        assert self.proxy.proc
        deadline = time.monotonic() + 60
        while listening(self.proxy.port) < workers:  # the port answers once one worker listens
            if time.monotonic() > deadline:
                raise TimeoutError(f"--workers {workers}: not every worker listens; "
                                   f"{self.proxy.stderr()[-2000:]}")
            time.sleep(0.05)
        parent = self.proxy.proc.pid
        self.pids = ({"proxy": [parent, *children(parent)], "proxy parent": [parent]} if workers > 1
                     else {"proxy": [parent]})
        self.idle_kb = warm_and_idle(client, fake, self.proxy, f"w{workers}", seed)
        self.records = len(FORMATS)

    def stop(self) -> None:
        self.proxy.stop()

    def kill(self) -> None:
        """Stop at once, the workers first: on SIGTERM the parent would drain them, which a hung
        row's streams never do, and a parent killed alone may leave them serving."""
        proc = self.proxy.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(OSError):  # the parent may have exited meanwhile
            for pid in children(proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait()


def row_timeout(n: int, spread: float, tokens: int) -> float:
    """Seconds before a row counts as hung: three times its streams' expected span (started
    within `spread`, then the TTFT and `tokens` at RATE), 50 ms of set-up per stream, and
    ROW_MARGIN_S. An overloaded row is late by seconds, not minutes."""
    expected = spread + parse_duration(TTFT) + tokens / RATE
    return float(round(3 * expected + 0.05 * n + ROW_MARGIN_S))


def within(seconds: float, work: Callable[[], dict[str, Any]], stop: Callable[[], None]
           ) -> dict[str, Any] | None:
    """`work()` on a thread of its own for at most `seconds`; past that, `stop()` kills the
    processes it waits on (which ends it, on an error nobody needs) and the answer is None.
    Its own errors are raised here."""
    done: list[dict[str, Any]] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(work())
        except BaseException as e:  # handed to the caller's thread
            failed.append(e)

    thread = threading.Thread(target=run, name="scaling-row", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        stop()
        thread.join(ROW_STOP_S)
        if thread.is_alive():
            progress("scaling: the timed-out row is still running with its processes killed; "
                     "left behind")
        return None
    if failed:
        raise failed[0]
    return done[0]


def timed_out_row(workers: int, n: int, spread: float, seconds: float) -> dict[str, Any]:
    """A row that was stopped: what it was, and after how long (bench.scaling_report shows it)."""
    return {"workers": workers, "streams": n, "start_spread_s": spread, "target_tps": RATE,
            "events_per_s": n * RATE, "timed_out_s": seconds,
            "error": f"timed out after {seconds:.0f} s"}


def run_row(client: Client, fake: FakeLLM, proxy: Proxy, n: int, spread: float, tokens: int,
            seed: int, rng: random.Random, raw: bool = True, idle: list[int] | None = None,
            streams: dict[str, Any] | None = None) -> dict[str, Any]:
    """n streams through one proxy, started within `spread` s: lateness, TTFT error, CPU (also
    of the `idle` processes: the other proxy, waiting its turn). `streams`, if given, gets the
    client's results and each stream's analysis (bench.timeline)."""
    profile = ProfileSettings(FIDELITY_PROFILE, TTFT, f"{RATE:g}", "0").build()
    set_text(fake, tokens, seed + 3)
    tag = f"w{proxy.workers}-n{n}-s{spread:g}"
    fmts = itertools.islice(itertools.cycle(FORMATS), n)
    specs = [{**stream_spec(fake, fmt, f"{tag}-{i}"), "delay": rng.uniform(0, spread)}
             for i, fmt in enumerate(fmts)]
    pids = {**proxy.pids, "client": [client.proc.pid], "upstream": [os.getpid()],
            "idle proxy": idle or []}
    with Usage(pids) as usage:
        results = client.streams(proxy.proxy.url, specs, concurrent=True, raw=raw)
    analysed = analyse(specs, results, proxy.proxy, profile, seed, earlier=proxy.records)
    if streams is not None:
        streams.update(results=results, analysed=analysed)
    proxy.records += n
    records = proxy.proxy.records(proxy.records, timeout=30)
    fake.clear()
    cpu = {name: cpu_while_streaming(results, series) for name, series in usage.series.items()}
    events = sum(a["events"] for a in analysed)
    proxy_cpu = cpu["proxy"]
    client_ttft = pct([a["client_ttft_err_ms"] for a in analysed], 50, 99)
    proxy_ttft = pct([a["proxy_ttft_err_ms"] for a in analysed], 50, 99)
    served: dict[str, int] = {}
    for r in records:
        if r["url"].find(f"bench={tag}-") >= 0:
            key = str(r.get("worker", 1))
            served[key] = served.get(key, 0) + 1
    return {
        "workers": proxy.workers, "streams": n, "start_spread_s": spread, "target_tps": RATE,
        "events_per_s": n * RATE, "events": events,
        **summarize_fidelity(analysed),
        "client_ttft_err_p": {"p50": client_ttft[0], "p99": client_ttft[1],
                              "max": max(a["client_ttft_err_ms"] for a in analysed)},
        "proxy_ttft_err_p": {"p50": proxy_ttft[0], "p99": proxy_ttft[1],
                             "max": max(a["proxy_ttft_err_ms"] for a in analysed)},
        "cpu": cpu,
        "cpu_us_per_event": proxy_cpu["cpu_s"] / max(1, events) * 1e6 if proxy_cpu else None,
        "served_by_worker": served,
    }


def idle_pids(proxies: list[Proxy], busy: Proxy) -> list[int]:
    """The processes of every proxy but the one being measured."""
    return [pid for p in proxies if p is not busy for pid in p.pids["proxy"]]


def measure(plan: ScalePlan, seed: int, tmp: Path, raw: bool = True,
            row_timeout_s: float | None = None, code: Path | None = None) -> list[dict[str, Any]]:
    """Every row for every worker count, the proxies taking turns (alternating first). A row
    past its timeout (`row_timeout_s`, else `row_timeout`) is recorded as timed out, its proxy
    and the client replaced, and the run goes on."""
    rows: list[dict[str, Any]] = []
    rng = random.Random(seed)
    with FakeLLM(bursts=3) as fake, contextlib.ExitStack() as stack:
        fake.bursts, fake.burst_gap, fake.per_event_gap = 3, 0.0, None
        client = Client()
        proxies: list[Proxy] = []
        stack.callback(lambda: client.close())  # the client of the moment: a row may replace it

        @stack.callback
        def stop_proxies() -> None:
            for p in proxies:
                p.stop()

        def row(i: int, n: int, spread: float) -> None:
            """One row on proxies[i], within its timeout."""
            nonlocal client
            p = proxies[i]
            limit = row_timeout_s or row_timeout(n, spread, plan.tokens)
            work = functools.partial(run_row, client, fake, p, n, spread, plan.tokens, seed, rng, raw,
                                     idle_pids(proxies, p))
            def stop() -> None:
                client.kill()
                p.kill()

            got = within(limit, work, stop)
            if got is not None:
                rows.append(got)
                return
            rows.append(timed_out_row(p.workers, n, spread, limit))
            progress(f"scaling: --workers {p.workers}, {n} streams: timed out after {limit:.0f} s; "
                     "its proxy and the client stopped and started afresh")
            fake.clear()
            client = Client()
            proxies[i] = Proxy(client, fake, tmp, p.workers, seed, restart=p.restart + 1, code=code)

        for w in plan.workers:  # appended one by one: a failed start stops those started
            proxies.append(Proxy(client, fake, tmp, w, seed, code=code))
        cases = [(n, SPREAD_S) for n in plan.spread] + [(plan.burst, 0.0)]
        for k, (n, spread) in enumerate(cases):
            turns = range(len(proxies)) if k % 2 == 0 else reversed(range(len(proxies)))
            for i in turns:
                progress(f"scaling: --workers {proxies[i].workers}, {n} streams x {plan.tokens} "
                         f"tokens at {RATE:g} tok/s, started within {spread:g} s")
                row(i, n, spread)
                time.sleep(0.5)  # let the last records and connections settle
        for i, p in enumerate(proxies if plan.refine else ()):
            ok, bad = held(rows, p.workers)
            if ok is not None and bad is not None and bad - ok > plan.refine:
                n = (ok + bad) // 2
                progress(f"scaling: --workers {p.workers}, {n} streams (between {ok} held and "
                         f"{bad} not)")
                row(i, n, SPREAD_S)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny counts: a smoke test, not figures")
    ap.add_argument("--seed", type=int, default=7, help="seed for texts and the proxies' timing")
    ap.add_argument("--results", type=Path, default=RESULTS, help="where the results go")
    ap.add_argument("--httpx", action="store_true",
                    help="bench.client's httpx streams instead of raw sockets (to see the client's cost)")
    ap.add_argument("--row-timeout", type=float, metavar="S",
                    help="stop a row after S seconds (default: per row, 3 x its streams' expected "
                    f"span + 50 ms per stream + {ROW_MARGIN_S:g} s)")
    ap.add_argument("--code", type=Path, metavar="DIR",
                    help="run the retimer of the checkout in DIR (a git worktree), to compare commits")
    ap.add_argument("--workers", metavar="N,..", help="only these worker counts (default: the plan's)")
    ap.add_argument("--streams", metavar="N,..",
                    help="only these counts of streams started within 1 s, and N streams in one "
                    "instant for the first (default: the plan's; no refining)")
    args = ap.parse_args()
    plan = QUICK if args.quick else FULL
    if args.workers:
        plan = replace(plan, workers=tuple(int(w) for w in args.workers.split(",")))
    if args.streams:
        counts = tuple(int(n) for n in args.streams.split(","))
        plan = replace(plan, spread=counts, burst=counts[0], refine=0)
    started = datetime.now(UTC)
    t0 = time.monotonic()
    res: dict[str, Any] = {"started": started.strftime("%Y-%m-%d %H:%M UTC"), "quick": args.quick,
                           "seed": args.seed, "machine": machine(), "plan": asdict(plan),
                           "client": "httpx" if args.httpx else f"raw sockets, {RAW_LOOP}",
                           "row_timeout_s": args.row_timeout}
    with tempfile.TemporaryDirectory(prefix="retimer-scaling-") as td:
        res["rows"] = measure(plan, args.seed, Path(td), raw=not args.httpx,
                              row_timeout_s=args.row_timeout, code=args.code)
    res["code"] = str(args.code or Path(__file__).resolve().parent.parent)
    if args.code:
        res["machine"]["retimer"] = f"{retimer_version(args.code)} (from {args.code})"
    res["duration_s"] = time.monotonic() - t0
    res["machine"]["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    markdown = render(res)
    args.results.mkdir(parents=True, exist_ok=True)
    name = f"scaling-{started.strftime('%Y%m%dT%H%M%S')}{'-quick' if args.quick else ''}.json"
    for path in (args.results / name, args.results / "scaling-latest.json"):
        path.write_text(json.dumps(res, indent=1, default=float))
    (args.results / "scaling-latest.md").write_text(markdown)
    print(markdown)
    print(f"[bench] results: {args.results / name} ({res['duration_s']:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
