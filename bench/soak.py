"""Soak test: `.venv/bin/python -m bench.soak [--minutes 10 | --quick] [--update-doc]` (from the checkout).

Runs the real `retimer` CLI (tests/support/proxy.py's RetimerProxy, plus the read-only probe script
bench/soak_probe.py for the task and object counts), the tests' FakeLLM and FakeWSLLM
upstreams in this process, and bench.soak_client in a process of its own, which keeps
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
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.harness import FakeLLM, RetimerProxy, memory_kb
from bench.run import machine
from bench.soak_client import ws_reply_messages
from bench.soak_report import render
from retimer.records.reader import read_logs
from tests.support.wsfake import FakeWSLLM, WSReply

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
        self.slow: list[dict[str, Any]] = []  # streams the client found slow, with the proxy's view
        self.held_at_idle: list[dict[str, Any]] = []  # streams the proxy held with no load on
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
            if self.phase.startswith("idle"):  # nothing may be in flight: say what is
                held = self.active()
                s["held"] = len(held) if isinstance(held, list) else -1
                if held and len(self.held_at_idle) < 5:
                    self.held_at_idle.append({"phase": self.phase, "proxy": held})
        self.samples.append(s)

    def types(self) -> dict[str, int]:
        """The proxy's most common object types now (empty without the probe)."""
        if self._probe is None:
            return {}
        return self._probe.get("http://retimer-soak.probe/?types=1").json()["types"]

    def active(self) -> list[dict[str, Any]] | str:
        """The proxy's in-flight streams as the probe describes them."""
        if self._probe is None:
            return "no probe"
        try:
            return self._probe.get("http://retimer-soak.probe/?active=1").json()
        except (OSError, ValueError, httpx.HTTPError) as e:
            return f"probe failed: {e}"

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


MIN_FIT_SAMPLES = 3  # a line has two parameters: its standard error needs one sample more


def fit(samples: list[dict[str, Any]], key: str, t0: float, t1: float) -> dict[str, float]:
    """Least-squares line through `key` over [t0, t1]: slope per minute and growth over it.

    With fewer than MIN_FIT_SAMPLES samples (a run of seconds) there is no line: only `n` and
    the range, so no check can judge a made-up trend (see `fitted`)."""
    pts = [(s["t"], s[key]) for s in samples if t0 <= s["t"] <= t1 and key in s]
    if not pts:
        return {"n": 0}
    t = np.array([p[0] for p in pts]) - t0
    v = np.array([p[1] for p in pts], dtype=float)
    out = {"n": len(pts), "mean": float(v.mean()), "min": float(v.min()), "max": float(v.max())}
    if len(pts) < MIN_FIT_SAMPLES:
        return out
    x = t / 60.0
    slope, icept = np.polyfit(x, v, 1)
    resid = v - (slope * x + icept)
    se = float(np.sqrt(resid @ resid / (len(x) - 2) / ((x - x.mean()) @ (x - x.mean()))))
    minutes = (t1 - t0) / 60.0
    return {**out, "slope_per_min": float(slope), "growth": float(slope) * minutes,
            "growth_se": se * minutes}


def fitted(line: dict[str, float]) -> bool:
    """Whether `fit` had enough samples for a line."""
    return "growth" in line


def judged(idle_ok: bool, line: dict[str, float], trend_ok: Callable[[dict[str, float]], bool]
           ) -> bool | None:
    """A check of an idle level and a fitted trend: failed when the idle level fails, None (not
    judged) when there is no line to judge the trend by, else the trend's verdict."""
    if not idle_ok:
        return False
    return trend_ok(line) if fitted(line) else None


def analyse(res: dict[str, Any]) -> dict[str, Any]:
    """Fits over each half of the load, idle levels before, between and after, and verdicts."""
    samples = res["samples"]
    (s1, e1), (s2, e2) = res["halves"]
    keys = [k for k in ("rss_kb", "fds", "threads", "tasks", "objects") if k in samples[0]]

    def idle(phase: str, key: str) -> float:
        vals = [s[key] for s in samples if s["phase"] == phase and key in s]
        return float(np.median(vals)) if vals else float("nan")

    out: dict[str, Any] = {}
    for key in keys:
        out[key] = {"before": idle("idle-before", key), "mid": idle("idle-mid", key),
                    "after": idle("idle-after", key),
                    "first_half": fit(samples, key, s1, e1), "second_half": fit(samples, key, s2, e2)}
    streams_2nd = res["clients"][1].get("streams", 0)
    out["streams_second_half"] = streams_2nd
    failures = sum(n for k, n in res["counts"].items() if " FAIL" in k)
    rss, fds, obj = out["rss_kb"], out["fds"], out.get("objects")
    rss_slack = max(4096, 0.02 * rss["mid"])
    rss2, fds2 = rss["second_half"], fds["second_half"]
    threads = out["threads"]
    checks: dict[str, bool | None] = {  # None: not judged (see `judged`)
        "every stream and session checked out": failures == 0 and streams_2nd > 0,
        "memory: RSS fit over the second half rises < 4 MiB (2 %), idle RSS too": judged(
            rss["after"] - rss["mid"] < rss_slack, rss2, lambda line: line["growth"] < rss_slack),
        "descriptors: idle count back to its level, fit over the second half flat": judged(
            fds["after"] <= min(fds["mid"] + 1, fds["before"] + 2), fds2,
            lambda line: line["growth"] < max(2, 3 * line["growth_se"])),
        "threads: none added by the second half": threads["after"] <= threads["mid"] and (
            threads["second_half"]["max"] <= threads["first_half"]["max"]
            if threads["first_half"]["n"] and threads["second_half"]["n"] else None),
    }
    checks["proxy log: no traceback"] = res.get("proxy_log", {}).get("tracebacks", 0) == 0
    if any("held" in s for s in samples):
        checks["no stream held in flight once the load has stopped (idle samples)"] = all(
            s.get("held", 0) == 0 for s in samples if s["phase"] in ("idle-mid", "idle-after"))
    if "tasks" in out:
        tasks = out["tasks"]
        checks["tasks: idle count back to its level"] = (
            tasks["after"] <= min(tasks["mid"] + 1, tasks["before"] + 2))
    if obj is not None:
        checks["objects: idle count grows < 200 + 1 per 20 streams of the second half"] = (
            obj["after"] - obj["mid"] < 200 + streams_2nd / 20)
    out["checks"] = checks
    out["pass"] = all(ok is not False for ok in checks.values())
    return out


def records_summary(path: Path) -> dict[str, int]:
    """Proxy records by protocol and outcome ("openai-chat complete": n)."""
    counts: dict[str, int] = {}
    if path.exists():
        for r in read_logs([path]).streams:
            key = f"{r.protocol} {r.outcome}"
            counts[key] = counts.get(key, 0) + 1
    return counts


def log_summary(text: str) -> dict[str, Any]:
    """The proxy's stderr by kind of line (timestamps and numbers blanked), tracebacks counted."""
    kinds: dict[str, int] = {}
    for line in text.splitlines():
        if line.strip():
            kind = re.sub(r"\d+", "N", re.sub(r"^\[[\d:.]+\]\s*", "", line))[:160]
            kinds[kind] = kinds.get(kind, 0) + 1
    return {"lines": sum(kinds.values()), "tracebacks": text.count("Traceback"),
            "kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1])[:15])}


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
        res["types_before"] = sampler.types()
        cfg = {"proxy": proxy.url, "proxy_port": proxy.port, "upstream": fake.url,
               "ws_port": ws.port, "concurrency": args.concurrency, "seconds": seconds / 2,
               "ws_weight": 1.0, "p_disconnect": 0.04, "p_reset": 0.04, "p_error_event": 0.03,
               "p_status_404": 0.01}
        res["halves"], res["clients"] = [], []
        for half in (1, 2):
            sampler.phase = f"load-{half}"
            start = time.monotonic()
            summary = run_client({**cfg, "seed": args.seed + half}, sampler, start)
            # fit from when the load has ramped up to when the client stopped starting streams
            t0 = summary["t0"]
            res["halves"].append((t0 + min(30.0, seconds * 0.08), t0 + seconds / 2))
            res["clients"].append(summary)
            sampler.phase = "drain"
            time.sleep(IDLE_S)  # streams the proxy still holds end, connections close
            sampler.phase = "idle-mid" if half == 1 else "idle-after"
            time.sleep(IDLE_S)
        res["types_after"] = sampler.types()
        sampler.stop()
        res["samples"] = sampler.samples
        res["slow"] = sampler.slow
        res["held_at_idle"] = sampler.held_at_idle
        res["records"] = records_summary(proxy.log_path)
        res["proxy_log"] = log_summary(proxy.stderr())
    res["machine"]["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    res["counts"] = {}
    for c in res["clients"]:
        for k, n in c.get("counts", {}).items():
            res["counts"][k] = res["counts"].get(k, 0) + n
    res["analysis"] = analyse(res)
    return res


def run_client(cfg: dict[str, Any], sampler: Sampler, start: float) -> dict[str, Any]:
    """One half of the load: bench/soak_client.py until it reports its summary."""
    client = subprocess.Popen([sys.executable, "-m", "bench.soak_client"], cwd=HERE.parent, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert client.stdin and client.stdout
    client.stdin.write(json.dumps(cfg) + "\n")
    client.stdin.close()
    base = sampler.progress["done"]
    summary: dict[str, Any] = {}
    for line in client.stdout:
        msg = json.loads(line)
        if msg["type"] == "slow":  # what the proxy holds for it, while it still holds it
            print(f"\n[soak] slow {msg['kind']} stream {msg['plan']}", file=sys.stderr)
            sampler.slow.append({**msg, "proxy": sampler.active()})
            print(f"[soak] proxy: {json.dumps(sampler.slow[-1]['proxy'])[:2000]}", file=sys.stderr)
        elif msg["type"] == "progress":
            sampler.progress = {"done": base + msg["done"], "active": msg["active"]}
            print(f"[soak] {msg['t'] - start:6.0f} s  {base + msg['done']} streams, "
                  f"{msg['active']} active", file=sys.stderr, end="\r")
        else:
            summary = msg
    if client.wait() != 0 or not summary:
        raise RuntimeError("the soak client failed")
    sampler.progress = {"done": base + summary["streams"], "active": 0}
    return summary


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
        res["analysis"] = analyse(res)  # the current checks, on the stored samples
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
