"""CPU per event, side by side in one run: `.venv/bin/python -m bench.cpu [--rounds N] [--routes R,..]`
(or, with `--per-request N`, CPU per request).

Issue 15's measure for a cheaper proxy. Three routes through the same fake upstream, measured
round by round in rotating order so the machine's load falls on all of them alike:
- `mitmdump`: plain mitmdump streaming the body through (the floor);
- `passthrough`: retimer with `--profile passthrough` on the same streams (target: <= 1.1x);
- `paced`: retimer re-timing concurrent streams, one token per network event;
- `floor`: the same concurrent streams paced by a bare asyncio proxy (bench.floor_proxy: one
  loop timer and one write per event, no parsing, no mitmproxy), as many events each: what a
  paced event costs any pacer in Python before it does retimer's work (issue 41's floor).
CPU is the proxy process's (user + system, /proc schedstat) from the first request to the last
byte, divided by the SSE events the client received. Also, in this process: the CPU from a
10,000-token burst arriving in one chunk to its first emission (the pacer alone). To compare
commits side by side in one run, `--baseline DIR` adds the two retimer routes of another checkout
(a git worktree: `passthrough@base`, `paced@base`), measured in the same rotation.
`--cprofile DIR` runs both retimer routes under cProfile and writes DIR/<route>.prof (the
figures then include the profiler's cost: use them for where the time goes, not for how much).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import (
    Client,
    FakeLLM,
    Mitmdump,
    RetimerProxy,
    cpu_seconds,
    make_openai_stream,
    progress,
    prose,
    stream_spec,
)
from tests.support.proxy import free_port, wait_listening

PASS_TOKENS, PASS_STREAMS = 300, 4  # per round: sequential streams, one word per event 2 ms apart
PACED_TOKENS, PACED_STREAMS, PACED_TPS = 200, 20, "100"  # per round: concurrent, fast upstream
BURST_TOKENS = 10_000


class ProfiledRetimer(RetimerProxy):
    """`retimer` under cProfile (the stats are written when it exits on SIGTERM)."""

    def __init__(self, tmp: Path, out: Path, *args: str) -> None:
        super().__init__(tmp, *args)
        self.profile_out = out

    def start(self, timeout: float = 30.0) -> RetimerProxy:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.out_path.open("wb") as out, self.err_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cProfile", "-o", str(self.profile_out), "-m", "retimer",
                 *self.args], stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env)
        proc = self.proc
        port = self.banner_port(timeout, lambda: proc.poll() is None)
        if port is not None and wait_listening(port, timeout):
            self.port = port
            return self
        self.stop()
        raise TimeoutError(f"retimer did not listen: {self.stderr()}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)


def burst_first_emission_ms(repeat: int = 5) -> dict[str, float]:
    """CPU ms (best of `repeat`) from a 10k-token OpenAI burst arriving in one chunk to the
    pacer's first emission: as 10k one-token events, and as one event carrying 10k tokens."""
    from retimer.profile.settings import ProfileSettings
    from retimer.timing.pacer import StreamPacer
    from retimer.wire.protocols.openai_chat import OpenAIChatAdapter

    text = prose(BURST_TOKENS, 5)
    bodies = {"events": make_openai_stream(text, words_per_chunk=1),
              "one_event": make_openai_stream(text, words_per_chunk=10**9)}
    profile = ProfileSettings("human-reading", "400ms", "5000", "0").build()
    out = {}
    for name, body in bodies.items():
        best = float("inf")
        for i in range(repeat):
            pacer = StreamPacer(OpenAIChatAdapter(), profile.stream_timing(np.random.default_rng(i)), 0.0)
            c0 = time.process_time()
            pacer.feed(body, 0.0)
            pacer.finish(0.0)
            first = pacer.next_due()
            pacer.pop_due(first if first is not None else 0.0)
            best = min(best, time.process_time() - c0)
        out[name] = best * 1000
    return out


def _events(results: list[dict[str, Any]]) -> int:
    return sum(len(r["events"]) for r in results)


ROUTES = ("mitmdump", "passthrough", "paced", "floor")


class FloorProxy:
    """bench.floor_proxy in a process of its own, paced as the paced route's profile."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.floor_proxy", "--ttft", "0.1", "--gap", str(1 / float(PACED_TPS))],
            cwd=Path(__file__).resolve().parent.parent, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout
        line = self.proc.stdout.readline().split()
        if line[:1] != ["listening"]:
            self.stop()
            raise RuntimeError("bench.floor_proxy did not start")
        self.url = f"http://127.0.0.1:{line[1]}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)

    def __enter__(self) -> FloorProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def measure(rounds: int, cprofile: Path | None, tmp: Path, only: tuple[str, ...] = ROUTES,
            baseline: Path | None = None) -> dict[str, Any]:
    """CPU per event of each route in `only`, summed over `rounds` rounds in rotating order;
    with `baseline`, that checkout's retimer routes too (`<route>@base`)."""
    if baseline is not None:
        only = (*only, *(f"{r}@base" for r in only if r not in ("mitmdump", "floor")))
    cpu: dict[str, float] = dict.fromkeys(only, 0.0)
    events: dict[str, int] = dict.fromkeys(cpu, 0)
    paced_args = ("--profile", "human-reading", "--tps", PACED_TPS, "--ttft", "100ms",
                  "--jitter", "0", "--seed", "7", "--quiet")

    (tmp / "mitmdump").mkdir(parents=True, exist_ok=True)

    def retimer(name: str, *args: str, code: Path | None = None) -> RetimerProxy:
        d = tmp / name
        if code is not None:  # another checkout's retimer, first on the path
            env = {**os.environ, "PYTHONPATH": str(code)}
            return RetimerProxy(d, *args, cwd=code, env=env, port=free_port())  # an older banner may say port 0
        if cprofile is None:
            return RetimerProxy(d, *args)
        return ProfiledRetimer(d, cprofile / f"{name}.prof", *args)

    route_args = {"passthrough": ("--profile", "passthrough", "--quiet"), "paced": paced_args}
    with contextlib.ExitStack() as stack, FakeLLM(bursts=3) as fake, Client() as client, \
            Mitmdump(tmp / "mitmdump") as md:
        assert md.proc
        routes = {"mitmdump": (md.url, md.proc.pid)}
        if "floor" in only:
            floor = stack.enter_context(FloorProxy())
            routes["floor"] = (floor.url, floor.proc.pid)
        for name in only:
            if name in ("mitmdump", "floor"):
                continue
            route, _, base = name.partition("@")
            rt = stack.enter_context(retimer(name, *route_args[route], code=baseline if base else None))
            assert rt.proc
            routes[name] = (rt.url, rt.proc.pid)
        pass_body = make_openai_stream(prose(PASS_TOKENS, 9), words_per_chunk=1)
        paced_body = make_openai_stream(prose(PACED_TOKENS, 11), words_per_chunk=3)
        floor_body = make_openai_stream(prose(PACED_TOKENS, 11), words_per_chunk=1)  # an event a word

        def play(name: str, tag: str) -> None:
            url, pid = routes[name]
            if name.startswith(("paced", "floor")):
                fake.per_event_gap = None
                fake.openai_body = floor_body if name == "floor" else paced_body
                specs = [stream_spec(fake, "openai", f"{tag}-{i}", warmup=False)
                         for i in range(PACED_STREAMS)]
                concurrent = True
            else:
                fake.per_event_gap, fake.openai_body = 0.002, pass_body
                specs = [stream_spec(fake, "openai", f"{tag}-{i}", warmup=False)
                         for i in range(PASS_STREAMS)]
                concurrent = False
            c0 = cpu_seconds(pid)
            results = client.streams(url, specs, concurrent=concurrent)
            if not tag.startswith("warm"):
                cpu[name] += cpu_seconds(pid) - c0
                events[name] += _events(results)
            fake.clear()

        names = [n for n in routes if n in only]
        for name in names:
            play(name, f"warm-{name}")
        for r in range(rounds):
            progress(f"cpu: round {r + 1} of {rounds}")
            for name in names[r % len(names):] + names[: r % len(names)]:
                play(name, f"{name}-{r}")
    us = {n: cpu[n] / events[n] * 1e6 for n in only}
    res: dict[str, Any] = {"rounds": rounds, "events": events, "cpu_s": cpu, "cpu_us_per_event": us}
    if "mitmdump" in us:
        for n in us:
            if n != "mitmdump":
                res[f"{n}_over_mitmdump"] = us[n] / us["mitmdump"]
    for n in us:
        if n.endswith("@base"):
            res[f"{n.removesuffix('@base')}_over_base"] = us[n.removesuffix("@base")] / us[n]
    return res


def per_request(n: int, tmp: Path) -> dict[str, list[float]]:
    """CPU per request, in us: `n` two-token OpenAI streams, 20 at a time on new connections,
    through plain mitmdump and through retimer (paced at 1000 tok/s), twice each in turns.
    What a burst of new streams waits on is this admission work, not the pacing."""
    args = ("--profile", "human-reading", "--tps", "1000", "--ttft", "1ms", "--jitter", "0",
            "--seed", "7", "--quiet")
    (tmp / "mitmdump").mkdir(parents=True, exist_ok=True)
    out: dict[str, list[float]] = {"mitmdump": [], "retimer": []}
    with FakeLLM(bursts=1) as fake, Client() as client, Mitmdump(tmp / "mitmdump") as md, \
            RetimerProxy(tmp / "retimer", *args) as rt:
        assert md.proc and rt.proc
        fake.per_event_gap, fake.openai_body = None, make_openai_stream(prose(2, 3), words_per_chunk=1)
        for name, url, pid in (("mitmdump", md.url, md.proc.pid), ("retimer", rt.url, rt.proc.pid)) * 2:
            progress(f"cpu: {n} requests through {name}")
            specs = [stream_spec(fake, "openai", f"{name}-{i}", warmup=False) for i in range(n)]
            c0 = cpu_seconds(pid)
            for k in range(0, n, 20):
                client.streams(url, specs[k:k + 20], concurrent=True)
            out[name].append((cpu_seconds(pid) - c0) / n * 1e6)
            fake.clear()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cprofile", type=Path, metavar="DIR",
                    help="run the retimer routes under cProfile, stats into DIR")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the figures here")
    ap.add_argument("--routes", default=",".join(ROUTES),
                    help=f"comma-separated routes to measure (default: {','.join(ROUTES)})")
    ap.add_argument("--per-request", type=int, metavar="N", default=0,
                    help="instead: CPU per request over N short streams, mitmdump and retimer")
    ap.add_argument("--baseline", type=Path, metavar="DIR",
                    help="also measure the retimer routes of the checkout in DIR (a git worktree)")
    args = ap.parse_args()
    if args.per_request:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="retimer-cpu-") as td:
            print(json.dumps({"cpu_us_per_request": per_request(args.per_request, Path(td))}, indent=1))
        return
    only = tuple(r for r in args.routes.split(",") if r)
    if not only or set(only) - set(ROUTES):
        ap.error(f"--routes: choose from {', '.join(ROUTES)}")
    if args.cprofile:
        args.cprofile.mkdir(parents=True, exist_ok=True)
    import tempfile

    res: dict[str, Any] = {"burst_first_emission_cpu_ms": burst_first_emission_ms()}
    with tempfile.TemporaryDirectory(prefix="retimer-cpu-") as td:
        res.update(measure(args.rounds, args.cprofile, Path(td), only, args.baseline))
    print(json.dumps(res, indent=1))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
