"""Soak test: `.venv/bin/python bench/soak.py [--minutes 10 | --quick] [--update-doc]`.

Runs the real `retimer` CLI (tests/proxy.py's RetimerProxy, plus the read-only probe script
bench/soak_probe.py for the task and object counts), the tests' FakeLLM and FakeWSLLM
upstreams in this process, and bench/soak_client.py in a process of its own, which keeps
`--concurrency` streams of every format in flight for the whole time, with faults mixed in,
and checks every stream's text. Meanwhile this process samples the proxy from outside:
resident memory and threads (/proc/PID/status), open descriptors (/proc/PID/fd), and via the
probe its asyncio tasks and live objects. It fits a line to each over the second half of the
load (the first half is warm-up: caches, pools and allocator arenas fill up) and checks
that nothing grows and that descriptors and tasks return to their idle level afterwards.

Writes bench/results/soak-<time>[-quick].json and prints a markdown report; --update-doc puts
it in RELIABILITY.md between its result markers. Run the full soak on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import harness  # noqa: F401  (sets sys.path for tests/ and the repo)
import httpx
import numpy as np
from harness import FakeLLM, RetimerProxy, memory_kb
from run import machine
from soak_client import ws_reply_messages
from soak_report import render
from wsfake import FakeWSLLM, WSReply

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DOC = HERE.parent / "RELIABILITY.md"
PROFILE = ("--profile", "gpt-5", "--tps", "800", "--ttft", "60ms", "--seed", "11")
IDLE_S = 6.0  # idle sampling before and after the load


START, END = "<!-- soak:results:start -->", "<!-- soak:results:end -->"


def update_doc(markdown: str) -> None:
    """Replace the text between the result markers in RELIABILITY.md."""
    text = DOC.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{DOC} has no {START} ... {END} section")
    DOC.write_text(re.sub(re.escape(START) + r".*?" + re.escape(END),
                          lambda _: f"{START}\n{markdown}{END}", text, flags=re.S))


def proc_counts(pid: int) -> dict[str, int]:
    """What /proc shows of the proxy: RSS (kB), threads, open file descriptors."""
    threads = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            threads = int(line.split()[1])
    return {"rss_kb": memory_kb(pid), "threads": threads,
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


class Sampler:
    """Samples the proxy every `period` s on a thread; each sample is tagged with the phase."""

    def __init__(self, pid: int, proxy_url: str, period: float, probe: bool) -> None:
        self.pid, self.period = pid, period
        self.samples: list[dict[str, Any]] = []
        self.phase = "idle-before"
        self.progress: dict[str, Any] = {"done": 0, "active": 0}
        # one keep-alive connection for the probe: a constant one descriptor in the proxy
        self._probe = httpx.Client(proxy=proxy_url, timeout=10) if probe else None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def _sample(self) -> None:
        s: dict[str, Any] = {"t": time.monotonic(), "phase": self.phase, **proc_counts(self.pid),
                             "streams_done": self.progress["done"],
                             "active": self.progress["active"]}
        if self._probe is not None:
            s.update(self._probe.get("http://retimer-soak.probe/").json())
        self.samples.append(s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sample()
            except (OSError, ValueError, httpx.HTTPError) as e:
                print(f"[soak] sample failed: {e}", file=sys.stderr)
            self._stop.wait(self.period)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self._probe is not None:
            self._probe.close()


def fit(samples: list[dict[str, Any]], key: str, t0: float, t1: float) -> dict[str, float]:
    """Least-squares line through `key` over [t0, t1]: slope per minute and growth over it."""
    pts = [(s["t"], s[key]) for s in samples if t0 <= s["t"] <= t1 and key in s]
    if len(pts) < 3:
        return {"slope_per_min": float("nan"), "growth": float("nan"), "n": len(pts)}
    t = np.array([p[0] for p in pts]) - t0
    v = np.array([p[1] for p in pts], dtype=float)
    slope = float(np.polyfit(t / 60.0, v, 1)[0])
    return {"slope_per_min": slope, "growth": slope * (t1 - t0) / 60.0, "n": len(pts),
            "mean": float(v.mean()), "min": float(v.min()), "max": float(v.max())}


def analyse(res: dict[str, Any]) -> dict[str, Any]:
    """Second-half fits, idle levels before and after, and the verdicts."""
    samples = res["samples"]
    t_start, seconds = res["load_start"], res["seconds"]
    half, end = t_start + seconds / 2, t_start + seconds
    keys = [k for k in ("rss_kb", "fds", "threads", "tasks", "objects") if k in samples[0]]

    def idle(phase: str, key: str) -> float:
        vals = [s[key] for s in samples if s["phase"] == phase and key in s]
        return float(max(vals)) if vals else float("nan")

    out: dict[str, Any] = {}
    for key in keys:
        out[key] = {"before": idle("idle-before", key), "after": idle("idle-after", key),
                    "first_half": fit(samples, key, t_start, half),
                    "second_half": fit(samples, key, half, end)}
    done = [s["streams_done"] for s in samples if half <= s["t"] <= end]
    streams_2nd = (max(done) - min(done)) if done else 0
    out["streams_second_half"] = streams_2nd
    counts: dict[str, int] = res["client"].get("counts", {})
    failures = sum(n for k, n in counts.items() if " FAIL" in k)
    rss = out["rss_kb"]["second_half"]
    checks = {
        "every stream checked out": failures == 0 and res["client"].get("streams", 0) > 0,
        "memory: RSS grows < 4 MiB (or 2 %) over the second half":
            rss["growth"] < max(4096, 0.02 * rss.get("mean", 0)),
        "descriptors: no growth over the second half, back to idle after":
            out["fds"]["second_half"]["growth"] < 2 and out["fds"]["after"] <= out["fds"]["before"] + 2,
        "threads: none added in the second half":
            out["threads"]["second_half"]["max"] <= out["threads"]["first_half"]["max"],
    }
    if "tasks" in out:
        checks["tasks: back to idle after"] = out["tasks"]["after"] <= out["tasks"]["before"] + 2
    if "objects" in out:
        objs = out["objects"]["second_half"]
        checks["objects: grow < 2 % over the second half"] = objs["growth"] < 0.02 * objs.get("mean", 0)
    out["checks"] = checks
    out["pass"] = all(checks.values())
    return out


def records_summary(path: Path) -> dict[str, int]:
    """Proxy records by protocol and outcome ("openai-chat complete": n)."""
    counts: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                key = f"{r.get('protocol')} {r.get('outcome')}"
                counts[key] = counts.get(key, 0) + 1
    return counts


def soak(args: argparse.Namespace) -> dict[str, Any]:
    seconds = 60.0 if args.quick else args.minutes * 60.0
    res: dict[str, Any] = {"started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                           "quick": args.quick, "seconds": seconds, "concurrency": args.concurrency,
                           "profile": " ".join(PROFILE), "machine": machine()}
    probe = [] if args.no_probe else ["--set", f"scripts={HERE / 'soak_probe.py'}"]
    with tempfile.TemporaryDirectory(prefix="retimer-soak-") as td, FakeLLM(bursts=3) as fake, \
            FakeWSLLM([WSReply(ws_reply_messages())]) as ws, \
            RetimerProxy(Path(td), "--quiet", *PROFILE, *probe) as proxy:
        assert proxy.proc is not None
        sampler = Sampler(proxy.proc.pid, proxy.url, args.sample_every, not args.no_probe)
        sampler.start()
        time.sleep(IDLE_S)
        cfg = {"proxy": proxy.url, "proxy_port": proxy.port, "upstream": fake.url,
               "ws_port": ws.port, "concurrency": args.concurrency, "seconds": seconds,
               "seed": args.seed, "ws_weight": 1.0, "p_disconnect": 0.04, "p_reset": 0.04,
               "p_error": 0.03}
        client = subprocess.Popen([sys.executable, str(HERE / "soak_client.py")], text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert client.stdin and client.stdout
        sampler.phase = "load"
        res["load_start"] = time.monotonic()
        client.stdin.write(json.dumps(cfg) + "\n")
        client.stdin.close()
        summary: dict[str, Any] = {}
        for line in client.stdout:
            msg = json.loads(line)
            if msg["type"] == "progress":
                sampler.progress = msg
                print(f"[soak] {msg['t'] - res['load_start']:6.0f} s  {msg['done']} streams, "
                      f"{msg['active']} active", file=sys.stderr, end="\r")
            else:
                summary = msg
        client.wait()
        sampler.phase = "drain"
        res["load_end"] = time.monotonic()
        time.sleep(IDLE_S)  # streams still held by the proxy end, connections close
        sampler.phase = "idle-after"
        time.sleep(IDLE_S)
        sampler.stop()
        res["client"] = summary
        res["samples"] = sampler.samples
        res["records"] = records_summary(proxy.log_path)
        res["proxy_stderr_tail"] = proxy.stderr()[-3000:]
    res["machine"]["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    res["analysis"] = analyse(res)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="load duration (default 10)")
    ap.add_argument("--quick", action="store_true", help="1 minute, to see that it works")
    ap.add_argument("--concurrency", type=int, default=32, help="streams in flight (default 32)")
    ap.add_argument("--sample-every", type=float, default=2.0, help="seconds between samples")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--no-probe", action="store_true",
                    help="no probe script: RSS, threads and descriptors only")
    ap.add_argument("--update-doc", action="store_true", help="write the results into RELIABILITY.md")
    ap.add_argument("--from-json", type=Path, metavar="FILE", help="only render an earlier run")
    args = ap.parse_args()
    if args.from_json:
        res = json.loads(args.from_json.read_text())
    else:
        res = soak(args)
        RESULTS.mkdir(exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        path = RESULTS / f"soak-{stamp}{'-quick' if args.quick else ''}.json"
        path.write_text(json.dumps(res, indent=1, default=float))
        print(f"\n[soak] results: {path}", file=sys.stderr)
    markdown = render(res)
    print(markdown)
    if args.update_doc:
        update_doc(markdown)
        print(f"[soak] updated {DOC}", file=sys.stderr)
    if not res["analysis"]["pass"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
