"""The scenarios: fidelity on a fast upstream, jitter shape, overhead vs mitmdump, concurrency
(with the proxy's memory per active stream).

Each takes the shared upstream and client and returns a JSON-ready dict. Proxies are started
per scenario (a new `--tps` needs a new process) and stopped before the next one.
"""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench.analysis import (
    added_latency,
    cpu_while_streaming,
    gap_shape,
    memory_per_stream,
    stream_fidelity,
    summarize_fidelity,
)
from bench.harness import (
    Client,
    FakeLLM,
    Mitmdump,
    ProcSampler,
    RetimerProxy,
    bench_id_of,
    cpu_seconds,
    make_anthropic_stream,
    make_openai_stream,
    memory_kb,
    pct,
    progress,
    prose,
    retimer_proxy,
    stream_spec,
)
from retimer.profile.loader import load_profile
from retimer.profile.model import Profile
from retimer.profile.settings import ProfileSettings

FORMATS = ("openai", "anthropic")
TTFT = "400ms"
FIDELITY_PROFILE = "human-reading"  # one token per network event: lateness is per token


@dataclass(frozen=True)
class Plan:
    """How much to run: `--quick` (CI, < 2 min) or the full run."""

    fidelity: tuple[tuple[float, int, int], ...]  # (tok/s, tokens per stream, streams per format)
    jitter: tuple[int, int]  # (tokens per stream, streams)
    overhead: tuple[int, int, int]  # (answer tokens, one word per event; streams; GETs) per route
    concurrency: tuple[tuple[int, int, float], ...]  # (streams, tokens each, start spread s)


# Issue 4's targets: 5, 50, 500, 2000 and 5000 tok/s; 1, 10, 50, 100 and 200 streams at 50 tok/s
# (each count started together and, from 10 up, also spread over 1 s). About 9 minutes.
FULL = Plan(
    fidelity=((5, 60, 5), (50, 200, 5), (500, 2000, 5), (2000, 4000, 5), (5000, 10000, 5)),
    jitter=(1000, 3),
    overhead=(500, 20, 400),
    concurrency=((1, 200, 0.0), (10, 200, 0.0), (10, 200, 1.0), (50, 200, 0.0), (50, 200, 1.0),
                 (100, 200, 0.0), (100, 200, 1.0), (200, 200, 0.0), (200, 200, 1.0)),
)
QUICK = Plan(
    fidelity=((5, 25, 1), (50, 100, 1), (500, 1000, 1), (2000, 2000, 1), (5000, 5000, 1)),
    jitter=(400, 1),
    overhead=(300, 5, 100),
    concurrency=((1, 100, 0.0), (10, 100, 1.0), (100, 100, 0.0)),
)


def formats(client: Client, fake: FakeLLM, tmp: Path, plan: Plan, seed: int) -> list[dict[str, Any]]:
    """Every wire format at 50 tok/s (see bench/format_scenarios.py)."""
    from bench.format_scenarios import formats as run_formats

    return run_formats(client, fake, tmp, plan, seed)


def set_text(fake: FakeLLM, n_tokens: int, seed: int, words_per_chunk: int = 3) -> None:
    """The upstream's next answers in both formats: `n_tokens` of prose."""
    text = prose(n_tokens, seed)
    fake.openai_body = make_openai_stream(text, words_per_chunk=words_per_chunk)
    fake.anthropic_body = make_anthropic_stream(text, words_per_chunk=words_per_chunk)


def analyse(specs: list[dict[str, Any]], results: list[dict[str, Any]], proxy: RetimerProxy,
            profile: Profile, seed: int, earlier: int = 0) -> list[dict[str, Any]]:
    """Each stream's analysis, next to its proxy record (matched by the bench id in its URL);
    `earlier` records (warm-up streams) are already in the log."""
    records = {bench_id_of(r): r for r in proxy.records(earlier + len(specs), timeout=30)}
    out = []
    for spec, res in zip(specs, results, strict=True):
        bench_id = spec["headers"]["x-bench-id"]
        if res["status"] != 200 or bench_id not in records:
            raise RuntimeError(f"{bench_id}: HTTP {res['status']}, record: {bench_id in records}; "
                               f"{proxy.stderr()[-2000:]}")
        out.append(stream_fidelity(res, records[bench_id], profile, seed))
    return out


def _paced_run(client: Client, fake: FakeLLM, proxy: RetimerProxy, profile: Profile, seed: int,
               formats: tuple[str, ...], streams: int) -> dict[str, list[dict[str, Any]]]:
    """Sequential streams through one proxy; per format, each stream's analysis."""
    order = [fmt for _ in range(streams) for fmt in formats]
    specs = [stream_spec(fake, fmt, f"{fmt}-{i}") for i, fmt in enumerate(order)]
    analysed = analyse(specs, client.streams(proxy.url, specs), proxy, profile, seed)
    fake.clear()
    out: dict[str, list[dict[str, Any]]] = {fmt: [] for fmt in formats}
    for fmt, a in zip(order, analysed, strict=True):
        out[fmt].append(a)
    return out


def fidelity(client: Client, fake: FakeLLM, tmp: Path, plan: Plan,
             seed: int) -> list[dict[str, Any]]:
    """Jitter 0, TTFT 400 ms, target rates from 5 to 5000 tok/s; the upstream sends everything
    at once in 3 bursts, so the proxy alone decides the timing."""
    fake.bursts, fake.burst_gap, fake.per_event_gap = 3, 0.0, None
    rows = []
    for rate, tokens, streams in plan.fidelity:
        progress(f"fidelity {rate:g} tok/s: {streams} stream(s) x {len(FORMATS)} formats "
             f"x {tokens} tokens")
        set_text(fake, tokens, seed)
        args = ("--profile", FIDELITY_PROFILE, "--tps", f"{rate:g}", "--ttft", TTFT,
                "--jitter", "0", "--seed", str(seed))
        profile = ProfileSettings(FIDELITY_PROFILE, TTFT, f"{rate:g}", "0").build()
        with retimer_proxy(tmp, f"fidelity-{rate:g}", *args) as proxy:
            per_fmt = _paced_run(client, fake, proxy, profile, seed, FORMATS, streams)
        for fmt, runs in per_fmt.items():
            rows.append({"target_tps": rate, "format": fmt, **summarize_fidelity(runs),
                         "gaps": gap_shape(runs, profile),
                         "per_stream": [_brief(s) for s in runs]})
    return rows


def _one_token_profile(name: str, directory: Path) -> tuple[Path, Profile]:
    """A copy of a built-in profile with one token per network event, so inter-event gaps are
    inter-token gaps (the timing keys are the built-in's own)."""
    p = load_profile(name)
    assert p.ttft is not None and p.tps is not None
    data = {
        "name": f"{p.name}-one-token", "source": f"bench copy of {p.name} with chunking {{1: 1.0}}",
        "ttft": {k: f"{getattr(p.ttft, k) * 1000:.6f}ms" for k in ("p50", "p90", "p99")},
        "decode": {"tps": p.tps, "gap": {"p90": p.gap[0], "p99": p.gap[1]}},
        "chunking": {1: 1.0}, "jitter": p.jitter,
    }
    path = directory / f"{p.name}-one-token.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, load_profile(str(path))


def jitter(client: Client, fake: FakeLLM, tmp: Path, plan: Plan, seed: int) -> dict[str, Any]:
    """The gpt-5 profile at its own rate with its default jitter (one token per event)."""
    tokens, streams = plan.jitter
    progress(f"jitter: gpt-5 profile, {streams} stream(s) x {tokens} tokens")
    fake.bursts, fake.burst_gap, fake.per_event_gap = 3, 0.0, None
    set_text(fake, tokens, seed + 1)
    d = tmp / "jitter"
    d.mkdir(parents=True, exist_ok=True)
    path, profile = _one_token_profile("gpt-5", d)
    with retimer_proxy(tmp, "jitter", "--profile", str(path), "--seed", str(seed)) as proxy:
        runs = _paced_run(client, fake, proxy, profile, seed, ("openai",), streams)["openai"]
    return {"profile": profile.name, "target_tps": profile.tps, **summarize_fidelity(runs),
            "gaps": gap_shape(runs, profile), "per_stream": [_brief(s) for s in runs]}


def _brief(s: dict[str, Any]) -> dict[str, Any]:
    """A stream's analysis without the per-token arrays (they stay out of the JSON)."""
    return {k: v for k, v in s.items() if k not in ("late_ms", "gaps_ms", "nominal_gaps_ms")}


def overhead(client: Client, fake: FakeLLM, tmp: Path, plan: Plan, seed: int) -> dict[str, Any]:
    """Passthrough retimer vs plain mitmdump (and no proxy), interleaved stream by stream."""
    tokens, streams, gets = plan.overhead
    progress(f"overhead: {streams} streams per route of a {tokens}-token answer, one word per event "
         f"2 ms apart; {gets} GETs")
    fake.per_event_gap = 0.002
    text = prose(tokens, seed + 2)
    fake.openai_body = make_openai_stream(text, words_per_chunk=1)
    d = tmp / "overhead"
    d.mkdir(parents=True, exist_ok=True)
    with Mitmdump(d) as md, retimer_proxy(tmp, "overhead", "--profile", "passthrough") as rt:
        assert md.proc and rt.proc
        routes: dict[str, tuple[str | None, int | None]] = {
            "direct": (None, None), "mitmdump": (md.url, md.proc.pid),
            "retimer": (rt.url, rt.proc.pid)}
        names = list(routes)
        for name in names:  # warm-up: connections, imports, first-flow costs
            proxy_url = routes[name][0]
            client.streams(proxy_url, [stream_spec(fake, "openai", f"warm-{name}")])
            client.gets(proxy_url, fake.url + "/v1/models", 5)
        fake.clear()
        idle = {n: _idle_cpu(pid) for n, (_, pid) in routes.items() if pid}
        lat: dict[str, list[np.ndarray]] = {n: [] for n in names}
        cpu: dict[str, list[float]] = {n: [] for n in names}
        for r in range(streams):
            for name in names[r % 3:] + names[: r % 3]:  # rotate the order each round
                proxy_url, pid = routes[name]
                bench_id = f"{name}-{r}"
                c0 = cpu_seconds(pid) if pid else 0.0
                (res,) = client.streams(proxy_url, [stream_spec(fake, "openai", bench_id,
                                                                warmup=False)])
                if pid:
                    cpu[name].append(cpu_seconds(pid) - c0)
                (served,) = [s for s in fake.requests if s.headers.get("x-bench-id") == bench_id]
                lat[name].append(added_latency(res, [(w.size, w.mono) for w in served.writes]))
                fake.clear()
        get_lat: dict[str, list[float]] = {n: [] for n in names}
        get_cpu: dict[str, list[float]] = {n: [] for n in names}
        block = 25
        for b in range(max(1, gets // block)):
            for name in names[b % 3:] + names[: b % 3]:
                proxy_url, pid = routes[name]
                c0 = cpu_seconds(pid) if pid else 0.0
                get_lat[name] += client.gets(proxy_url, fake.url + "/v1/models", block)
                if pid:
                    get_cpu[name].append((cpu_seconds(pid) - c0) / block)
        fake.clear()
    out: dict[str, Any] = {"answer_tokens": tokens, "streams_per_route": streams,
                           "upstream_gap_ms": 2.0, "idle_cpu_ms_per_s": idle, "routes": {}}
    for name in names:
        all_lat = np.concatenate(lat[name])
        p50, p90, p99 = pct(all_lat, 50, 90, 99)
        get_ms = np.asarray(get_lat[name]) * 1000
        g50, g99 = pct(get_ms, 50, 99)
        out["routes"][name] = {
            "events": int(all_lat.size),
            "added_ms": {"p50": p50, "p90": p90, "p99": p99, "max": float(all_lat.max()),
                         "mean": float(all_lat.mean())},
            "cpu_ms_per_stream": float(np.median(cpu[name]) * 1000) if cpu[name] else None,
            "cpu_ms_per_stream_all": [round(c * 1000, 3) for c in cpu[name]],
            "cpu_us_per_event": (float(np.sum(cpu[name]) / all_lat.size * 1e6)
                                 if cpu[name] else None),
            "get_ms": {"p50": g50, "p99": g99, "mean": float(get_ms.mean()),
                       "n": len(get_lat[name])},
            "cpu_us_per_get": float(np.median(get_cpu[name]) * 1e6) if get_cpu[name] else None,
        }
    rt_, md_ = out["routes"]["retimer"], out["routes"]["mitmdump"]
    out["retimer_minus_mitmdump_ms"] = {q: rt_["added_ms"][q] - md_["added_ms"][q]
                                        for q in ("p50", "p90", "p99", "mean")}
    out["retimer_over_mitmdump_latency"] = {q: rt_["added_ms"][q] / md_["added_ms"][q]
                                            for q in ("p50", "p90", "p99", "mean")}
    out["get_retimer_minus_mitmdump_ms"] = {q: rt_["get_ms"][q] - md_["get_ms"][q]
                                            for q in ("p50", "p99", "mean")}
    out["get_latency_ratio"] = {q: rt_["get_ms"][q] / md_["get_ms"][q]
                                for q in ("p50", "p99", "mean")}
    md_cpu = sum(cpu["mitmdump"])
    out["cpu_ratio"] = sum(cpu["retimer"]) / md_cpu if md_cpu else None
    out["get_cpu_ratio"] = (rt_["cpu_us_per_get"] / md_["cpu_us_per_get"]
                            if md_["cpu_us_per_get"] else None)
    return out


def _idle_cpu(pid: int | None, seconds: float = 1.0) -> float:
    """CPU ms per second of an idle proxy (background timers)."""
    assert pid
    c0 = cpu_seconds(pid)
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) * 1000 / seconds


def concurrency(client: Client, fake: FakeLLM, tmp: Path, plan: Plan,
                seed: int) -> list[dict[str, Any]]:
    """N simultaneous streams at 50 tok/s (jitter 0, both formats), fast upstream: lateness at
    the client and in the records, the proxy's CPU (connection set-up included) and its
    memory per active stream.

    Spread 0: every request is sent in the same millisecond (admission burst, and identical
    schedules put every stream's tokens due at the same instants). Spread S: start times are
    drawn uniformly over S seconds, so the streams overlap but their phases differ. Each proxy
    first plays one short stream per format, so one-time costs (imports, first-flow set-up)
    fall outside the measurement and the idle memory is that of a proxy that has worked.
    """
    fake.bursts, fake.burst_gap, fake.per_event_gap = 3, 0.0, None
    rate = "50"
    profile = ProfileSettings(FIDELITY_PROFILE, TTFT, rate, "0").build()
    rows = []
    rng = random.Random(seed)
    for n, tokens, spread in plan.concurrency:
        progress(f"concurrency: {n} streams x {tokens} tokens at {rate} tok/s, "
             f"started within {spread:g} s")
        args = ("--profile", FIDELITY_PROFILE, "--tps", rate, "--ttft", TTFT,
                "--jitter", "0", "--seed", str(seed))
        with retimer_proxy(tmp, f"concurrency-{n}-{spread:g}", *args) as proxy:
            assert proxy.proc
            pid = proxy.proc.pid
            idle_kb = warm_and_idle(client, fake, proxy, f"c{n}-{spread:g}", seed)
            set_text(fake, tokens, seed + 3)
            fmts = itertools.islice(itertools.cycle(FORMATS), n)
            specs = [{**stream_spec(fake, fmt, f"c{n}-{spread:g}-{i}"),
                      "delay": rng.uniform(0, spread)} for i, fmt in enumerate(fmts)]
            hwm0 = memory_kb(pid, "VmHWM")
            c0, w0 = cpu_seconds(pid), time.monotonic()
            with ProcSampler(pid) as sampler:
                results = client.streams(proxy.url, specs, concurrent=True)
            cpu, wall = cpu_seconds(pid) - c0, time.monotonic() - w0
            analysed = analyse(specs, results, proxy, profile, seed, earlier=len(FORMATS))
            mem = memory_per_stream(results, sampler.samples, idle_kb, hwm0,
                                    memory_kb(pid, "VmHWM"), memory_kb(pid))
            streaming = cpu_while_streaming(results, sampler.samples)
        fake.clear()
        events = sum(a["events"] for a in analysed)
        rows.append({"streams": n, "start_spread_s": spread, "target_tps": float(rate),
                     "events_per_s": n * float(rate),
                     **summarize_fidelity(analysed), "proxy_cpu_s": cpu, "wall_s": wall,
                     "proxy_cpu_pct_of_wall": cpu / wall * 100,
                     "proxy_cpu_pct": streaming["pct"] if streaming else cpu / wall * 100,
                     "cpu_while_streaming": streaming,
                     "cpu_us_per_event": cpu / max(1, events) * 1e6, "memory": mem})
    return rows


def warm_and_idle(client: Client, fake: FakeLLM, proxy: RetimerProxy, tag: str,
                   seed: int) -> float:
    """One short stream per format through the proxy, then its idle RSS (median kB of 5
    samples, after a pause for the last record to be written)."""
    assert proxy.proc
    set_text(fake, 5, seed + 4)
    client.streams(proxy.url, [stream_spec(fake, fmt, f"{tag}-warm-{fmt}") for fmt in FORMATS])
    proxy.records(len(FORMATS), timeout=30)
    fake.clear()
    time.sleep(0.3)
    samples = []
    for _ in range(5):
        samples.append(memory_kb(proxy.proc.pid))
        time.sleep(0.02)
    return float(np.median(samples))
