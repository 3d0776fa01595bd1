"""`retimer --workers 2`: two real proxy processes on one port (SO_REUSEPORT), real mitmproxy,
real TLS, real SDK clients. Both workers serve, every stream is re-timed and whole, the one
log holds exactly one whole JSON line per stream, the banner appears once, Ctrl-C drains every
worker and exits 0 (a second one stops them at once), a worker that dies is one line, bad values
are one line. Studies with workers: tests/e2e/test_workers_study.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support.cli_main import refused
from tests.support.proxy import RetimerProxy, run_cli
from tests.support.stream_bodies import make_openai_stream
from tests.support.upstream import FakeLLM

TEXT = "Two workers share one port; the kernel hands each connection to one of them. " * 2
PACED = ("--ttft", "200ms", "--tps", "60", "--jitter", "0", "--profile", "gpt-5")
pytestmark = pytest.mark.fake_llm(openai=TEXT, bursts=3, tls=True)


def _proxy(tmp: Path, fake: FakeLLM, *args: str) -> RetimerProxy:
    """Started, and every worker listening (the parent prints its banner then)."""
    proxy = RetimerProxy(tmp, "--workers", "2", *PACED, "--intercept", r"^127\.0\.0\.1:", *args,
                         upstream_ca=fake.ca_path).start()
    deadline = time.monotonic() + 30
    while "retimer listening on" not in proxy.stdout() and time.monotonic() < deadline:
        time.sleep(0.05)
    return proxy


def _stream(proxy: RetimerProxy, fake: FakeLLM, i: int) -> str:
    client = openai.OpenAI(
        base_url=fake.url + "/v1", api_key="sk-test",
        http_client=openai.DefaultHttpxClient(proxy=proxy.url, verify=proxy.client_ssl_context()),
    )
    stream = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": f"hi {i}"}], stream=True)
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def _log_lines(proxy: RetimerProxy) -> list[dict]:
    raw = proxy.log_path.read_bytes()
    assert raw.endswith(b"\n")
    return [json.loads(line) for line in raw.decode().split("\n")[:-1]]  # each a whole record


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(x) for x in (task / "children").read_text().split()]
    return found


def test_two_workers_serve_every_stream_retimed_whole_and_drain_on_ctrl_c(
    tmp_path: Path, fake: FakeLLM
) -> None:
    proxy = _proxy(tmp_path, fake)
    try:
        assert len(_children(proxy.proc.pid)) == 2
        n = 40
        with ThreadPoolExecutor(20) as pool:
            texts = list(pool.map(lambda i: _stream(proxy, fake, i), range(n)))
        assert texts == [TEXT] * n
        records = proxy.records(n)
        assert len(records) == n
        assert {r["worker"] for r in records} == {1, 2}  # the kernel used both
        for r in records:
            assert r["outcome"] == "complete"
            assert r["emitted"]["tokens"] == r["upstream"]["tokens"] > 20
            assert r["emitted"]["ttft_ms"] >= r["target"]["ttft_ms"] - 2  # re-timed, never early
            assert r["target"] == {"ttft_ms": 200.0, "tps": 60.0}
        # Ctrl-C with streams in flight: each worker drains them (held text goes out at once)
        with ThreadPoolExecutor(6) as pool:
            slow = [pool.submit(_stream, proxy, fake, n + i) for i in range(6)]
            deadline = time.monotonic() + 20
            while len(fake.wait_done(0)) < n + 6 and time.monotonic() < deadline:
                time.sleep(0.02)  # the upstream sent them all; retimer still holds most tokens
            proxy.proc.send_signal(signal.SIGINT)
            assert [f.result(30) for f in slow] == [TEXT] * 6
        assert proxy.proc.wait(30) == 0
    finally:
        proxy.stop()
    lines = _log_lines(proxy)
    assert len(lines) == n + 6 and len({r["id"] for r in lines}) == n + 6  # one line per stream
    for r in lines[n:]:  # the drained six: all out before their schedule would have ended
        schedule_ms = r["target"]["ttft_ms"] + (r["emitted"]["tokens"] - 1) / 60 * 1000
        assert r["emitted"]["ttft_ms"] + r["emitted"]["duration_ms"] < schedule_ms
    assert proxy.stdout().count("retimer listening on") == 1
    assert "workers  2 processes" in proxy.stdout()
    assert "Traceback" not in proxy.stderr()


def test_a_worker_that_dies_is_one_line_and_the_other_serves_on(
    tmp_path: Path, fake: FakeLLM
) -> None:
    proxy = _proxy(tmp_path, fake)
    try:
        first, second = sorted(_children(proxy.proc.pid))
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while "killed by SIGKILL" not in proxy.stderr() and time.monotonic() < deadline:
            time.sleep(0.05)
        died = [x for x in proxy.stderr().splitlines() if "worker" in x]
        assert len(died) == 1 and f"(pid {first}) was killed by SIGKILL; 1 still serving" in died[0]
        assert [_stream(proxy, fake, i) for i in range(4)] == [TEXT] * 4
        assert {r["worker"] for r in proxy.records(4)} == {2}
        proxy.proc.send_signal(signal.SIGINT)
        assert proxy.proc.wait(30) == 1  # a worker was lost: not a clean run
    finally:
        proxy.stop()


def test_auto_is_one_worker_per_cpu() -> None:
    from retimer.cli.proxy.options import parse_workers

    assert parse_workers("auto") == parse_workers(" AUTO ") == (os.cpu_count() or 1)
    assert parse_workers("3") == 3


@pytest.mark.parametrize("value", ["0", "-3", "two", ""])
def test_a_bad_workers_value_is_one_line(value: str, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    code, err = refused(["--workers", value], capsys, monkeypatch)
    assert code == 2
    assert err.strip() == (f"retimer: error: --workers: expected a number of processes "
                           f">= 1 or auto, got {value!r}")


BALANCING_NOTE = ("--workers 2: this platform does not spread connections over processes (SO_REUSEPORT "
                  "load balancing is Linux only); running one process")


@pytest.mark.parametrize("platform, reuse_port, spread", [
    ("linux", True, True), ("linux", False, False), ("darwin", True, False), ("win32", False, False),
    ("freebsd14", True, False)])
def test_only_linux_spreads_connections_over_workers(platform: str, reuse_port: bool, spread: bool) -> None:
    """macOS and FreeBSD's SO_REUSEPORT hands every connection to one socket; Windows has none."""
    from retimer.cli.proxy.options import single_process_note

    assert single_process_note(2, platform, reuse_port) == (None if spread else BALANCING_NOTE)
    assert single_process_note(1, platform, reuse_port) is None


@pytest.mark.parametrize("platform, reuse_port", [("darwin", True), ("win32", False), ("linux", True)])
def test_workers_where_nothing_balances_run_one_process(
    platform: str, reuse_port: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`retimer --workers 2` with the platform faked: on macOS and Windows one line, then the
    single-process proxy, whose banner claims no workers; on Linux the workers."""
    import socket

    import retimer.proxy.addon  # noqa: F401 - imported before the platform is faked
    from retimer.cli import main as cli
    from retimer.cli.proxy import runner as proxy_runner
    from retimer.cli.proxy import workers
    from retimer.cli.proxy.banner import print_banner
    from retimer.proxy.certs import ensure_ca

    started: list[tuple[str, Any]] = []

    async def one_process(config: Any) -> None:
        started.append(("one process", config))

    async def run_workers(config: Any) -> int:
        started.append(("workers", config))
        return 0

    monkeypatch.setattr(proxy_runner, "run_proxy", one_process)
    monkeypatch.setattr(workers, "run_workers", run_workers)
    if not reuse_port:
        monkeypatch.delattr(socket, "SO_REUSEPORT")
    monkeypatch.setattr(sys, "platform", platform)
    with contextlib.suppress(SystemExit):  # the workers' path exits with their code
        cli.main(["--workers", "2", "--seed", "7", "--set", f"confdir={tmp_path}"])
    monkeypatch.undo()
    (kind, config), = started
    err = capsys.readouterr().err
    if platform == "linux":
        assert (kind, config.workers, err) == ("workers", 2, "")
        return
    assert (kind, config.workers) == ("one process", 1)
    assert err == f"retimer: {BALANCING_NOTE}\n"
    ensure_ca(tmp_path)
    print_banner(config, None, None)
    banner = capsys.readouterr().out
    assert "listening on" in banner and "SO_REUSEPORT" not in banner
    assert not [line for line in banner.splitlines() if line.split()[:1] == ["workers"]], banner


def test_retimer_run_with_two_workers_retimes_an_unmodified_sdk_program(tmp_path: Path) -> None:
    from tests.support.run_cmd import CLIENTS, Run
    from tests.support.run_cmd import TEXT as RUN_TEXT

    with FakeLLM(make_openai_stream(RUN_TEXT), bursts=3, tls=True) as llm, \
            FakeLLM(tls=True) as other:
        run = Run(tmp_path, llm)
        run.options += ["--workers", "2"]
        result = run(sys.executable, str(CLIENTS / "openai_client.py"), llm.url_for("llm.test"),
                     other.url_for("other.test"), "3")
        assert result.returncode == 3, result.stderr  # the command's exit code is retimer's
        assert "".join(json.loads(result.stdout)["pieces"]) == RUN_TEXT
    (record,) = run.records()
    assert record["worker"] in (1, 2) and record["outcome"] == "complete"
    assert record["emitted"]["ttft_ms"] >= 300.0 - 2  # paced
    assert "2 workers" in result.stderr and "Traceback" not in result.stderr


def test_report_and_export_take_the_logs_of_several_instances(tmp_path: Path, fake: FakeLLM) -> None:
    proxy = _proxy(tmp_path, fake)
    try:
        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(lambda i: _stream(proxy, fake, i), range(12))) == [TEXT] * 12
        records = proxy.records(12)
    finally:
        proxy.stop()
    by_worker = {w: [r for r in records if r["worker"] == w] for w in (1, 2)}
    logs = []
    for w, recs in by_worker.items():  # as if two instances wrote a log each
        (tmp_path / f"w{w}").mkdir()
        logs.append(tmp_path / f"w{w}" / "records.jsonl")
        logs[-1].write_text("".join(json.dumps(r) + "\n" for r in recs))
    rated = by_worker[1][0]["id"] if by_worker[1] else by_worker[2][0]["id"]
    with logs[1].open("a") as f:  # a rating in the other log than its stream's still joins
        f.write(json.dumps({"type": "rating", "stream": rated, "speed": 6, "quality": 4}) + "\n")
    html = tmp_path / "r.html"
    done = run_cli("report", *map(str, logs), "-o", str(html))
    assert done.returncode == 0, done.stderr
    assert "12 streams" in done.stderr
    assert str(logs[0]) in html.read_text() and str(logs[1]) in html.read_text()  # same names
    done = run_cli("export", *map(str, logs))
    assert done.returncode == 0, done.stderr
    rows = done.stdout.strip().split("\n")[1:]
    assert len(rows) == 12
    assert sorted(r.split(",")[1] for r in rows) == sorted(r["id"] for r in records)
    (rated_row,) = [r for r in rows if r.split(",")[1] == rated]
    assert rated_row.endswith(",6,4,")  # speed, quality, and no "felt slow" answer
    missing = run_cli("export", str(logs[0]), str(tmp_path / "absent.jsonl"))
    assert missing.returncode == 2 and missing.stderr.strip().endswith("absent.jsonl: no such file")


def test_the_response_cache_is_shared_by_the_workers(tmp_path: Path, fake: FakeLLM) -> None:
    """The cache is one for both workers; the PAC file comes from either; SIGTERM drains them."""
    import httpx

    proxy = _proxy(tmp_path, fake, "--cache", str(tmp_path / "cache"))
    try:
        assert _stream(proxy, fake, 0) == TEXT  # stored by whichever worker took it
        proxy.records(1)
        texts = [_stream(proxy, fake, 0) for _ in range(8)]  # a new connection each time
        records = proxy.records(9)
        for _ in range(8):  # a new connection each time: the kernel picks the worker
            pac = httpx.get(f"{proxy.url}/proxy.pac", timeout=10)
            assert pac.status_code == 200
            assert f"PROXY 127.0.0.1:{proxy.port}" in pac.text
    finally:
        proxy.stop()
    assert proxy.proc.returncode == 0  # SIGTERM drains too
    assert texts == [TEXT] * 8
    assert [r["cache"] for r in records] == ["stored"] + ["hit"] * 8  # whichever worker served
    assert len(fake.wait_done(1)) == 1  # the upstream was asked once


def test_without_so_reuseport_or_the_listener_workers_fail_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    from mitmproxy.proxy import mode_servers

    from retimer.proxy.patches import InternalsMissing, listen

    monkeypatch.delattr(socket, "SO_REUSEPORT")
    with pytest.raises(listen.NoReusePort, match=r"^--workers: this system has no SO_REUSEPORT"):
        listen.reserve_port("127.0.0.1", 0)
    monkeypatch.undo()
    monkeypatch.delattr(mode_servers.AsyncioServerInstance, "listen")
    with pytest.raises(InternalsMissing, match="lacks AsyncioServerInstance.listen"):
        listen.check_internals()


def test_reverse_mode_with_two_workers(tmp_path: Path) -> None:
    """`--upstream URL --workers 2`: the SDK's base URL is the shared port, both workers serve."""
    with FakeLLM(make_openai_stream(TEXT), bursts=3) as plain:
        proxy = RetimerProxy(tmp_path, "--workers", "2", "--upstream", plain.url, *PACED).start()
        try:
            def one(i: int) -> str:
                client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-reverse-secret")
                stream = client.chat.completions.create(
                    model="gpt-test", messages=[{"role": "user", "content": f"hi {i}"}], stream=True)
                return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

            with ThreadPoolExecutor(8) as pool:
                assert list(pool.map(one, range(16))) == [TEXT] * 16
            records = proxy.records(16)
        finally:
            proxy.stop()
    assert {r["worker"] for r in records} == {1, 2}
    assert all(r["emitted"]["ttft_ms"] >= 200 - 2 and r["outcome"] == "complete" for r in records)
    assert "sk-reverse-secret" not in proxy.log_path.read_text() + proxy.stdout() + proxy.stderr()


@pytest.mark.parametrize("sends, records, live", [
    ("records,live", True, True), ("records,", True, False), (",", False, False), (",live", False, True)])
def test_a_worker_sends_only_what_the_parent_shows(sends: str, records: bool, live: bool) -> None:
    """A snapshot makes a record of every stream in flight (its timing statistics): a worker
    takes them only for a live table, and records only when the parent prints them."""
    from retimer.cli.proxy.worker_main import Channel

    asked: list[int] = []
    channel = Channel(1, -1, None, lambda: asked.append(1) or [], sends)
    sent: list[dict] = []
    channel.send = sent.append  # type: ignore[method-assign]
    from retimer.records.schema import StreamRecord

    record = StreamRecord(id="x")
    channel.retimer_record(record)
    assert (channel.records, channel.live) == (records, live)
    assert sent == ([{"record": record.to_json()}] if records else [])


def test_quiet_workers_send_neither_records_nor_snapshots() -> None:
    from retimer.cli.proxy.options import ProxyConfig, proxy_parser
    from retimer.cli.proxy.workers import Workers

    config = ProxyConfig.from_args(proxy_parser().parse_args(["--workers", "2", "--quiet"]))
    assert Workers(config, None).sends == ","
    assert Workers(config, print, live=True).sends == "records,live"


def test_a_second_ctrl_c_stops_every_worker_at_once(tmp_path: Path) -> None:
    """The first Ctrl-C drains (streams still waiting on a slow upstream play on, for up to the
    grace period); the second stops every worker at once, each stream in flight recorded once
    as `shutdown`, exit 0, no traceback."""
    words = " ".join(f"w{i}" for i in range(60))
    with FakeLLM(make_openai_stream(words, words_per_chunk=1), per_event_gap=0.2, tls=True) as slow:
        proxy = _proxy(tmp_path, slow, "--set", "retimer_shutdown_grace=120s")
        try:
            with ThreadPoolExecutor(4) as pool:
                streams = [pool.submit(_stream, proxy, slow, i) for i in range(4)]
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:  # until every stream has its first bytes out
                    if sum(1 for r in slow.requests if len(r.writes) > 2) >= 4:
                        break
                    time.sleep(0.05)
                proxy.proc.send_signal(signal.SIGINT)
                time.sleep(1.5)
                assert proxy.proc.poll() is None  # draining: the upstream still streams
                assert not any(s.done() for s in streams)
                proxy.proc.send_signal(signal.SIGINT)
                stopped = time.monotonic()
                assert proxy.proc.wait(15) == 0
                assert time.monotonic() - stopped < 10  # not the 120 s grace, nor the 12 s streams
                for s in streams:
                    try:
                        s.result(15)
                    except Exception:  # noqa: S110 (a cut stream may fail in the SDK: that is the point)
                        pass
        finally:
            proxy.stop()
    lines = _log_lines(proxy)
    assert len(lines) == 4 and len({r["id"] for r in lines}) == 4  # one whole line per stream
    assert {r["outcome"] for r in lines} == {"shutdown"}
    assert "Traceback" not in proxy.stderr()


def test_workers_replay_a_cassette_each_call_matched_by_its_conversation(
    tmp_path: Path, fake: FakeLLM
) -> None:
    """`--replay DIR --workers 2`: each worker reads the cassette and matches the calls the
    kernel hands it by their conversation, so calls spread over both are each answered with
    their own recorded reply and nothing goes upstream. (`--record` stays one process.)"""
    cassette = tmp_path / "cassette"
    n = 12
    recorder = RetimerProxy(tmp_path / "rec", *PACED, "--intercept", r"^127\.0\.0\.1:",
                            "--record", str(cassette), upstream_ca=fake.ca_path).start()
    body = fake.openai_body
    texts = []
    try:
        for i in range(n):  # each conversation its own reply
            fake.openai_body = make_openai_stream(f"Reply number {i}, for hi {i} alone.")
            texts.append(_stream(recorder, fake, i))
        recorder.records(n)
    finally:
        fake.openai_body = body
        recorder.stop()
    asked = len(fake.requests)
    proxy = _proxy(tmp_path / "play", fake, "--replay", str(cassette))
    try:
        with ThreadPoolExecutor(6) as pool:
            again = list(pool.map(lambda i: _stream(proxy, fake, i), range(n)))
        records = proxy.records(n)
    finally:
        proxy.stop()
    assert again == texts == [f"Reply number {i}, for hi {i} alone." for i in range(n)]
    assert len(fake.requests) == asked  # the upstream was asked nothing
    assert {r["worker"] for r in records} == {1, 2}
    assert sorted(r["cassette"]["call"] for r in records) == list(range(1, n + 1))
    assert all(r["cassette"]["match"] == "replayed" for r in records)
