"""Shared pieces of the benchmarks: processes (proxies, the measuring client), CPU, text, stats.

The upstream is the tests' `FakeLLM` (a thread in the orchestrating process), `retimer` runs as
the tests' `RetimerProxy` (the real CLI in a subprocess) and plain mitmproxy as `Mitmdump`
below; the client is `bench/client.py` (`python -m bench.client`) in a third process. All of them timestamp with
`time.monotonic()`, which on Linux is one clock for every process.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import numpy as np

from retimer.wire.tokenizer import count_tokens
from tests.support.proxy import RetimerProxy, free_port, wait_listening
from tests.support.stream_bodies import make_anthropic_stream, make_openai_stream
from tests.support.upstream import FakeLLM

ROOT = Path(__file__).resolve().parent.parent  # the checkout: bench's processes start here

__all__ = ["Client", "FakeLLM", "Mitmdump", "ProcSampler", "RetimerProxy", "bench_id_of",
           "cpu_seconds", "make_anthropic_stream", "make_openai_stream", "memory_kb", "pct",
           "progress", "prose", "retimer_proxy", "stream_spec"]

MITMDUMP = Path(sys.executable).with_name("mitmdump")

_WORDS = (
    "the a of to and in that it is was for on are as with his they at be this from have or by "
    "one had not but what all were when we there can an your which their said if do will each "
    "about how up out them then she many some so these would other into has more her two like "
    "him see time could no make than first been its who now people my made over did down only "
    "way find use may water long little very after words called just where most know model "
    "token stream proxy speed answer question server client network latency profile request"
).split()


def progress(msg: str) -> None:
    """One line of progress on stdout while a long run goes on."""
    print(f"[bench] {msg}", flush=True)


def retimer_proxy(tmp: Path, name: str, *args: str, code: Path | None = None) -> RetimerProxy:
    """A quiet `retimer` with `args`, its files in tmp/name (one directory per scenario);
    `code`: another checkout's retimer (a git worktree, to compare commits), first on the path."""
    d = tmp / name
    d.mkdir(parents=True, exist_ok=True)
    if code is None:
        return RetimerProxy(d, "--quiet", *args)
    # an older checkout's banner may not name a chosen port: give it one
    return RetimerProxy(d, "--quiet", *args, cwd=code, env={**os.environ, "PYTHONPATH": str(code)},
                        port=free_port())


def prose(n_tokens: int, seed: int = 0) -> str:
    """Deterministic English-like text of exactly `n_tokens` by retimer's splitter (sentences,
    commas, paragraphs)."""
    rng = random.Random(seed)
    words: list[str] = []
    count = 0
    while count < n_tokens:
        w = rng.choice(_WORDS)
        r = rng.random()
        if not words or words[-1].endswith((".", "\n")):
            w = w.capitalize()
        if r < 0.08:
            w += "."
        elif r < 0.12:
            w += ","
        elif r < 0.13:
            w += ".\n\n"
        words.append(w)
        count += 1 + (w[-1] in ".,\n")
    text = " ".join(words).replace("\n ", "\n")
    while count_tokens(text) > n_tokens:  # trim from the end, a character at a time
        text = text[:-1]
    return text


def stream_spec(fake: FakeLLM, fmt: str, bench_id: str, *, warmup: bool = True,
                headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A client job item: one streaming request of format "openai" or "anthropic".

    `bench_id` goes into the query (`?bench=ID`, which the upstream ignores and the proxy's
    record keeps in its URL) and into an `x-bench-id` header (which the upstream records).
    """
    if fmt == "openai":
        url = fake.url + "/v1/chat/completions"
        body = {"model": "gpt-test", "stream": True,
                "messages": [{"role": "user", "content": "hi"}]}
    else:
        url = fake.url + "/v1/messages"
        body = {"model": "claude-test", "stream": True, "max_tokens": 4096,
                "messages": [{"role": "user", "content": "hi"}]}
    hdrs = {"content-type": "application/json", "x-bench-id": bench_id, **(headers or {})}
    return {"url": f"{url}?bench={bench_id}", "body": json.dumps(body), "headers": hdrs,
            "warmup": fake.url + "/warmup" if warmup else None}


def bench_id_of(record: dict[str, Any]) -> str:
    """The bench id a proxy record belongs to (from its URL's query)."""
    return record["url"].rsplit("bench=", 1)[-1].split("&", 1)[0]


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of a process so far, from /proc.

    Sums the per-thread `schedstat` run times (nanoseconds) when the kernel has them, else
    reads utime + stime from /proc/PID/stat (clock ticks, usually 10 ms).
    """
    task_dir = Path(f"/proc/{pid}/task")
    try:
        return sum(int((t / "schedstat").read_text().split()[0]) for t in task_dir.iterdir()) / 1e9
    except (OSError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_kb(pid: int, key: str = "VmRSS") -> int:
    """A memory figure of a process in kB from /proc/PID/status: `VmRSS` (resident now) or
    `VmHWM` (the resident peak since the process started)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise ValueError(f"/proc/{pid}/status has no {key}")


class ProcSampler:
    """Samples a process's VmRSS and CPU time on a background thread while a blocking call runs.

    `samples` holds (monotonic time, RSS kB, CPU s) triples, so they can be cut to the window
    in which the client saw the streams active. Reading /proc costs tens of microseconds, so
    a 20 ms period takes well under 1 % of a core from the processes being measured.
    """

    def __init__(self, pid: int, period: float = 0.02) -> None:
        self.pid = pid
        self.period = period
        self.samples: list[tuple[float, int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except (OSError, ValueError):
                return  # the process is gone
            self._stop.wait(self.period)

    def sample(self) -> None:
        """One sample, on the sampler's thread (bench.scaling's sampler takes other ones)."""
        self.samples.append((time.monotonic(), memory_kb(self.pid), cpu_seconds(self.pid)))

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()


def pct(values: Iterable[float], *qs: float) -> list[float]:
    """Percentiles (numpy's default linear interpolation); NaN for no values."""
    arr = np.asarray(list(values), dtype=float)
    if arr.size == 0:
        return [float("nan")] * len(qs)
    return [float(v) for v in np.percentile(arr, qs)]


class Mitmdump:
    """Plain `mitmdump` (no addons) on a free port, streaming bodies like retimer does.

    `stream_large_bodies=1` streams every body of unknown length from its first chunk (without
    it mitmdump buffers the whole SSE response); `-q` and lazy connections match retimer's
    `--quiet` and its `connection_strategy`.
    """

    def __init__(self, tmp: Path, *args: str) -> None:
        self.port = free_port()
        self.confdir = tmp / "mitmdump-confdir"
        self.err_path = tmp / "mitmdump.err"
        self.args = ["-q", "--listen-host", "127.0.0.1", "--listen-port", str(self.port),
                     "--set", f"confdir={self.confdir}", "--set", "stream_large_bodies=1",
                     "--set", "connection_strategy=lazy", *args]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> Mitmdump:
        with self.err_path.open("wb") as err:
            self.proc = subprocess.Popen([str(MITMDUMP), *self.args], stdout=subprocess.DEVNULL,
                                         stderr=err, stdin=subprocess.DEVNULL)
        proc = self.proc
        if wait_listening(self.port, timeout, lambda: proc.poll() is None):
            return self
        if proc.poll() is not None:
            raise RuntimeError(f"mitmdump exited: {self.err_path.read_text()}")
        self.stop()
        raise TimeoutError("mitmdump did not listen")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> Mitmdump:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class Client:
    """The measuring client process (bench/client.py), driven by one JSON line per job."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.client"], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )

    def _call(self, job: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the bench client exited")
        result = json.loads(line)
        if "error" in result:
            raise RuntimeError(f"bench client: {result['error']}")
        return result

    def streams(self, proxy: str | None, specs: Sequence[dict[str, Any]],
                concurrent: bool = False, raw: bool = False) -> list[dict[str, Any]]:
        """Run streams through `proxy` (None: direct); one result per spec, in order. `raw`
        (with `concurrent`): on raw sockets, the cheapest client (bench.rawclient)."""
        job = {"op": "streams", "proxy": proxy, "streams": list(specs), "concurrent": concurrent,
               "raw": raw}
        return self._call(job)["streams"]

    def gets(self, proxy: str | None, url: str, n: int) -> list[float]:
        """Round-trip seconds of n GETs on one keep-alive connection."""
        return self._call({"op": "gets", "proxy": proxy, "url": url, "n": n})["latency_s"]

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()

    def kill(self) -> None:
        """Stop the process at once: a hung job would keep it from reading "quit"."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
