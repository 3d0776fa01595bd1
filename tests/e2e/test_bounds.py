"""Bounds: bytes held per stream and in total are capped; memory per stream is measured.

Sans-io first (the pacer's accounting, release, abort and keep-alive decisions on fake clocks),
then the running proxy with real clients and small caps.
"""

from __future__ import annotations

import os
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from retimer.timing.pacer import CAP_PREFIX, StreamPacer
from retimer.timing.strategy import Strategy
from retimer.wire.protocols import OllamaAdapter, OpenAIChatAdapter
from tests.support.proxy import RetimerProxy
from tests.support.sse_client import sse_text
from tests.support.stream_bodies import load_fixture, make_openai_stream, split_events
from tests.support.upstream import FakeLLM

BIG = " ".join(f"w{i}" for i in range(2000))


class FixedTiming:
    def __init__(self, ttft: float = 10.0, gap: float = 0.05) -> None:
        self.ttft, self._gap = ttft, gap

    def gap(self) -> float:
        return self._gap

    def chunk_size(self) -> int:
        return 1


def held_pacer(body: bytes, *, strategy: Strategy = Strategy.LIVE) -> StreamPacer:
    pacer = StreamPacer(OpenAIChatAdapter(), FixedTiming(), 0.0, strategy=strategy)
    pacer.feed(body, 0.1)
    return pacer


# -- sans-io: what the pacer holds, and what it gives up ----------------------------------
@pytest.mark.parametrize("strategy", [Strategy.LIVE, Strategy.REPLAY])
def test_buffered_counts_what_is_held_and_returns_to_zero(strategy: Strategy):
    body = make_openai_stream(BIG, words_per_chunk=3)
    partial = len(split_events(body)[-1]) - 7
    pacer = held_pacer(body[:-7], strategy=strategy)  # the last event cut short: unparsed
    held = pacer.buffered
    assert held >= len(body) - 7 and pacer.holding  # split pieces are larger than the event
    pacer.feed(body[-7:], 0.2)
    pacer.finish(0.3)
    out = pacer.pop_due(float("inf"))
    if strategy is Strategy.LIVE:  # the scheduled bytes plus the backlog (parsed as due, so
        # counted as it arrived, smaller than its split pieces) plus the partial event
        scheduled = sum(len(e.data) for e in out) - len(split_events(body)[-1]) + partial
        assert len(body) - 7 <= held <= scheduled
    assert sse_text(b"".join(e.data for e in out)) == BIG
    assert pacer.buffered == 0 and not pacer.holding and pacer.done


def test_release_sends_everything_held_now_then_passes_through():
    body = make_openai_stream(BIG, words_per_chunk=3)
    half = len(body) // 2
    pacer = held_pacer(body[:half])
    first = pacer.pop_due(0.5)  # the role event goes at once
    assert pacer.next_due() == pytest.approx(10.0)  # TTFT holds every token
    pacer.cap_reached("1000 bytes held > 999 per stream", 0.5)
    assert pacer.failure is not None and pacer.failure.startswith(CAP_PREFIX)
    first += pacer.pop_due(0.5)
    assert b"".join(e.data for e in first) and pacer.pop_due(0.5) == []
    assert pacer.buffered == 0
    pacer.feed(body[half:], 0.6)  # the rest passes through as it comes, byte for byte
    rest = pacer.pop_due(0.6)
    assert b"".join(e.data for e in rest) == body[half:]
    assert sse_text(b"".join(e.data for e in first + rest)) == BIG


def test_release_drops_the_cache_copy():
    pacer = held_pacer(b"")
    pacer.captured = bytearray()
    pacer.feed(make_openai_stream("a b c"), 0.2)
    assert pacer.buffered > len(pacer.captured) > 0
    pacer.cap_reached("cap", 0.3)
    assert pacer.captured is None


def test_abort_gives_every_byte_that_arrived_including_a_partial_event():
    body = make_openai_stream(BIG, words_per_chunk=3)
    events = split_events(body)
    arrived = b"".join(events[:30]) + events[30][:25]
    for strategy in Strategy:
        pacer = held_pacer(arrived, strategy=strategy)
        out = pacer.abort(0.2)
        data = b"".join(e.data for e in out)
        assert all(e.due <= 10.0 + 30 for e in out)
        assert data.endswith(b"\n\n" + events[30][:25])
        assert sse_text(data) == sse_text(arrived)
        assert pacer.done and pacer.buffered == 0 and pacer.abort(0.3) == []


def test_idle_sse_keepalive_is_a_comment_only_while_bytes_are_held():
    pacer = held_pacer(b"")
    assert pacer.idle(1.0) == []  # nothing held: an idle upstream stays visible as idle
    pacer.feed(make_openai_stream("one two three"), 1.0)
    assert [e.tokens for e in pacer.pop_due(1.0)] == [0]  # the role event; tokens wait
    (ka,) = pacer.idle(1.5)
    assert ka.data == b": keep-alive\n\n" and ka.tokens == 0 and pacer.keepalives == 1
    assert pacer.next_due() == pytest.approx(10.0)  # nothing was taken from the schedule


@pytest.mark.parametrize("cut", range(0, 5))
def test_a_bom_leaves_first_and_alone_then_keepalives_may_follow(cut: int):
    """A keep-alive before (or inside) a leading BOM would turn it into a stray character in
    the middle of the stream, where SSE parsers no longer drop it: the BOM goes out at once,
    by itself, and no keep-alive is given while the first bytes could still be one."""
    body = b"\xef\xbb\xbf" + make_openai_stream("one two")
    pacer = StreamPacer(OpenAIChatAdapter(), FixedTiming(), 0.0)
    pacer.feed(body[:cut], 0.1)
    if cut < 3:
        assert pacer.idle(1.0) == [] and pacer.pop_due(1.0) == []
        pacer.feed(body[cut:], 0.2)
    else:
        pacer.feed(body[cut:], 0.2)
    first = pacer.pop_due(0.2)
    assert first[0].data == b"\xef\xbb\xbf" and first[0].due <= 0.2
    (ka,) = pacer.idle(1.0)
    assert ka.data == b": keep-alive\n\n"
    pacer.finish(0.3)
    rest = b"".join(e.data for e in first[1:] + pacer.pop_all())
    assert not rest.startswith(b"\xef") and sse_text(rest) == "one two"


def test_a_body_shorter_than_a_bom_still_arrives():
    pacer = StreamPacer(OpenAIChatAdapter(), FixedTiming(), 0.0)
    pacer.feed(b"\xef\xbb", 0.1)
    pacer.finish(0.2)
    assert b"".join(e.data for e in pacer.pop_all()) == b"\xef\xbb"


def test_idle_keepalive_never_follows_a_parse_failure():
    pacer = held_pacer(make_openai_stream("one two"))
    pacer.cap_reached("cap", 0.2)
    pacer.feed(b"data: {", 0.3)
    pacer.pop_due(0.2)
    assert pacer.idle(1.0) == []


def test_idle_ndjson_has_no_keepalive_but_may_release_early():
    body = load_fixture("ollama/sk-phi3-api-chat-tail-excerpt.ndjson")
    pacer = StreamPacer(OllamaAdapter(), FixedTiming(), 0.0)
    pacer.feed(body, 0.1)
    assert pacer.idle(1.0) == []  # no keep-alive form, no release asked
    (early,) = pacer.idle(1.0, release_early=True)
    assert early.tokens and body.startswith(early.data) and pacer.released_early == 1
    pacer.finish(0.2)
    rest = pacer.pop_due(float("inf"))
    assert early.data + b"".join(e.data for e in rest) == body


# -- memory per stream ----------------------------------------------------------------------
def test_memory_per_held_stream_is_a_small_multiple_of_its_bytes():
    """50 streams, each holding a whole response: Python heap per stream against its bytes.
    (bench/ has the precise figure for the running proxy.)"""
    body = make_openai_stream(BIG, words_per_chunk=3)
    tracemalloc.start()
    try:
        base = tracemalloc.take_snapshot()
        pacers = [held_pacer(body) for _ in range(50)]
        grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(base, "filename"))
    finally:
        tracemalloc.stop()
    per_stream = grown / len(pacers)
    held = pacers[0].buffered
    assert held >= len(body)
    print(f"heap per held stream: {per_stream / 1024:.0f} KB for {len(body) / 1024:.0f} KB "
          f"upstream, {held / 1024:.0f} KB held after splitting")
    assert per_stream < 3 * held + 256 * 1024, f"{per_stream / 1024:.0f} KB per stream"


def _rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(x for x in status.splitlines() if x.startswith("VmRSS:")).split()[1])


def test_running_proxy_memory_per_held_stream(tmp_path: Path):
    """40 concurrent streams held by a long TTFT: the proxy's RSS per stream stays loose-bounded."""
    n = 40
    body = make_openai_stream(" ".join(f"w{i}" for i in range(300)))
    with FakeLLM(body) as fake, RetimerProxy(
        tmp_path, "--profile", "gpt-5", "--ttft", "8s", "--jitter", "0", "--tps", "5000"
    ) as proxy:
        assert proxy.proc is not None
        done: list[str] = []
        before = _rss_kb(proxy.proc.pid)

        def client() -> None:
            with httpx.Client(proxy=proxy.url, timeout=30) as c:
                done.append(sse_text(c.post(fake.url + "/v1/chat/completions", json={}).content))

        threads = [threading.Thread(target=client) for _ in range(n)]
        for t in threads:
            t.start()
        fake.wait_done(n, timeout=20)
        time.sleep(0.5)  # every response is in the proxy, held
        during = _rss_kb(proxy.proc.pid)
        for t in threads:
            t.join(30)
    assert len(done) == n and set(done) == {" ".join(f"w{i}" for i in range(300))}
    per_stream_kb = (during - before) / n
    print(f"proxy RSS per held stream: {per_stream_kb:.0f} KB")
    assert per_stream_kb < 1024, f"{per_stream_kb:.0f} KB per held stream"


# -- caps against the running proxy ---------------------------------------------------------
@pytest.fixture
def big_fake() -> Iterator[FakeLLM]:
    with FakeLLM(make_openai_stream(BIG, words_per_chunk=2)) as f:
        yield f


SLOW = ("--profile", "gpt-5", "--ttft", "100ms", "--tps", "20", "--jitter", "0")


def test_stream_past_its_cap_falls_back_to_passthrough_with_one_warning(
    tmp_path: Path, big_fake: FakeLLM
):
    cap = len(big_fake.openai_body) // 8
    with RetimerProxy(tmp_path, *SLOW, "--set", f"retimer_max_stream_buffer={cap}b") as proxy:
        started = time.monotonic()
        with httpx.Client(proxy=proxy.url, timeout=30) as c:
            got = c.post(big_fake.url + "/v1/chat/completions", json={}).content
        took = time.monotonic() - started
        (record,) = proxy.records(1)
        err = proxy.stderr()
    assert sse_text(got) == BIG  # nothing lost, nothing altered
    assert took < 10  # paced at 20 tok/s it would take minutes
    assert err.count("reached the buffer cap") == 1
    assert record["fallback"].startswith("buffer cap") and "per stream" in record["fallback"]
    assert record["outcome"] == "complete"


def test_under_its_cap_the_same_stream_stays_paced(tmp_path: Path, big_fake: FakeLLM):
    with RetimerProxy(tmp_path, *SLOW, "--set", "retimer_max_stream_buffer=16m") as proxy:
        with httpx.Client(proxy=proxy.url, timeout=30) as c:
            with c.stream("POST", big_fake.url + "/v1/chat/completions", json={}) as r:
                got = b""
                started = time.monotonic()
                for chunk in r.iter_raw():
                    got += chunk
                    if time.monotonic() - started > 1.5:
                        break
        assert "buffer cap" not in proxy.stderr()
    assert 0 < len(sse_text(got)) < len(BIG) // 10


def test_total_cap_turns_the_stream_that_crosses_it_to_passthrough(tmp_path: Path):
    text = " ".join(["tok"] * 400)  # one token per event: nothing is split, held == body
    body = make_openai_stream(text, words_per_chunk=1)
    total = int(len(body) * 1.5)
    args = ("--profile", "gpt-5", "--ttft", "100ms", "--tps", "200", "--jitter", "0",
            "--set", f"retimer_max_total_buffer={total}b")
    results: dict[str, tuple[str, float]] = {}
    with FakeLLM(body) as fake, RetimerProxy(tmp_path, *args) as proxy:
        def client(name: str) -> None:
            started = time.monotonic()
            with httpx.Client(proxy=proxy.url, timeout=30) as c:
                text = sse_text(c.post(f"{fake.url}/{name}/chat/completions", json={}).content)
            results[name] = text, time.monotonic() - started

        first = threading.Thread(target=client, args=("first",))
        first.start()
        fake.wait_done(1, timeout=20)  # the fake has written the first body: the proxy holds it
        time.sleep(0.2)  # (a fixed wait alone was too short on a loaded machine)
        client("second")
        first.join(30)
        records = {r["url"].split("/")[3]: r for r in proxy.records(2)}
        assert proxy.stderr().count("reached the buffer cap") == 1
    assert results["first"][0] == results["second"][0] == text
    assert records["first"]["fallback"] is None  # still paced
    assert "all streams" in records["second"]["fallback"]
    # 400 tokens at 200 tok/s: the paced stream takes 2 s at least, on any machine; the one
    # passed through is not held to the pace (a bound relative to the first, as a loaded
    # machine slows both)
    assert results["first"][1] >= 2.0 and results["second"][1] < results["first"][1] / 2


def test_bad_cap_values_are_one_line_errors(tmp_path: Path):
    from tests.support.proxy import run_cli

    for option, value in (("retimer_max_stream_buffer", "lots"),
                          ("retimer_max_total_buffer", "0"),
                          ("retimer_keepalive", "soon")):
        r = run_cli("--listen-port", "0", "--set", f"confdir={tmp_path / 'c'}",
                    "--set", f"{option}={value}")
        assert r.returncode != 0
        line = r.stderr.strip()
        assert option in line and "\n" not in line and "Traceback" not in line
    assert os.path.isdir(tmp_path / "c")
