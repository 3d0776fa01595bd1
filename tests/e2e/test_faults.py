"""Faults injected against the running proxy, with real clients: what the client sees.

- the client goes away mid-stream: the upstream request is cancelled, per-stream state freed;
- the upstream resets or errors mid-stream: the client gets everything that arrived, then the
  same kind of ending (the error event; a truncated body or RST_STREAM), never a clean end;
- the upstream stalls past the client's idle timeout while tokens are held: SSE keep-alives;
- the upstream never ends: the client keeps receiving, memory stays bounded;
- the proxy is stopped (SIGTERM/SIGINT) with streams in flight: they end within the grace
  period and every one has a record.
"""

from __future__ import annotations

import gc
import itertools
import json
import signal
import ssl
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.inproc_proxy import InProcessProxy
from tests.support.proxy import RetimerProxy
from tests.support.sse_client import read_until_error, sse_text
from tests.support.stream_bodies import make_openai_stream, split_events
from tests.support.upstream import FakeLLM

WORDS = " ".join(f"w{i}" for i in range(600))
SLOW = ("--profile", "gpt-5", "--ttft", "50ms", "--tps", "40", "--jitter", "0")
TLS_PROXY = ("--intercept", r"^127\.0\.0\.1:", "--set", "connection_strategy=lazy")
pytestmark = pytest.mark.fake_llm(openai=WORDS, anthropic=WORDS, words_per_chunk=2, per_event_gap=0.02)
TLS_FAKE = pytest.mark.fake_llm(openai=WORDS, words_per_chunk=2, per_event_gap=0.02, tls=True)


class H2Only(ssl.SSLContext):
    """A client context that offers only h2 (httpx offers http/1.1 first through a proxy
    tunnel, and mitmproxy honours the client's order)."""

    def set_alpn_protocols(self, protocols: Any) -> None:
        super().set_alpn_protocols(["h2"])


def h2_client(proxy_url: str, ca: Path) -> httpx.Client:
    ctx = H2Only(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca)
    return httpx.Client(proxy=proxy_url, verify=ctx, http2=True)




class PacerWatch:
    """An addon keeping a weak reference to each stream's pacer (the stream-start hook's
    handle holds it; a leak check may look behind the handle)."""

    def __init__(self, pacers: list[weakref.ref[Any]]) -> None:
        self.pacers = pacers

    def retimer_stream_start(self, flow: Any, stream: Any) -> None:
        self.pacers.append(weakref.ref(stream._pacer))


# -- the client goes away ------------------------------------------------------------------
@pytest.mark.parametrize("client", ["httpx", "openai-sdk", "httpx-h2"])
def test_client_disconnect_cancels_upstream_and_frees_state(tmp_path: Path, client: str):
    h2 = client == "httpx-h2"
    with FakeLLM(make_openai_stream(WORDS, words_per_chunk=2), per_event_gap=0.02, tls=h2) as fake:
        extra = (*TLS_PROXY, "--set", f"ssl_verify_upstream_trusted_ca={fake.ca_path}") if h2 else ()
        with InProcessProxy(tmp_path, *SLOW, *extra) as proxy:
            pacers: list[weakref.ref[Any]] = []
            proxy.call(lambda: proxy.master.addons.add(PacerWatch(pacers)))
            ca = proxy.confdir / "mitmproxy-ca-cert.pem"
            http = h2_client(proxy.url, ca) if h2 else httpx.Client(proxy=proxy.url)
            if client == "openai-sdk":
                sdk = openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-x", http_client=http,
                                    max_retries=0)
                stream = sdk.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
                first = [c.choices[0].delta.content for c, _ in zip(stream, range(3)) if c.choices]
                assert "".join(x or "" for x in first).startswith("w0")
                closed_at = time.monotonic()
                stream.close()
            else:
                with http.stream("POST", fake.url + "/v1/chat/completions", json={}) as r:
                    assert r.http_version == ("HTTP/2" if h2 else "HTTP/1.1")
                    got = b""
                    for chunk in r.iter_raw():
                        got += chunk
                        if "w2" in sse_text(got):
                            break
                    closed_at = time.monotonic()
            http.close()
            (record,) = proxy.records(1, timeout=5)
            assert record["outcome"] == "client-gone"
            assert 0 < record["emitted"]["tokens"] < 100  # it ended early, at the client
            # the upstream saw its connection closed promptly: the request was cancelled
            deadline = time.monotonic() + 3
            while fake.requests[0].peer_closed is None and time.monotonic() < deadline:
                time.sleep(0.02)
            served = fake.requests[0]
            assert served.peer_closed is not None and not served.done
            assert served.peer_closed - closed_at < 1.0
            assert len(served.writes) < 300  # it stopped long before the end (~300 events)
            # per-stream state is gone at once, and the objects are freed soon after
            assert proxy.call(lambda: (proxy.addon.bridge.active, len(proxy.addon.active))) == (0, 0)
            assert proxy.call(lambda: proxy.addon.bridge.buffered) == 0
            assert len(pacers) == 1
            deadline = time.monotonic() + 3
            while pacers[0]() is not None and time.monotonic() < deadline:
                proxy.call(gc.collect)
                time.sleep(0.1)
            assert pacers[0]() is None, "the stream's pacer is still referenced"


# -- the upstream breaks off ---------------------------------------------------------------
@pytest.mark.parametrize("kind", ["rst", "fin"])
def test_upstream_reset_gives_what_arrived_then_a_truncated_body(
    tmp_path: Path, fake: FakeLLM, kind: str
):
    n = 40
    sent = split_events(fake.openai_body)[:n]
    with RetimerProxy(tmp_path, *SLOW) as proxy, httpx.Client(proxy=proxy.url) as c:
        headers = {"x-fake-abort-after": str(n), "x-fake-abort": kind}
        with c.stream("POST", fake.url + "/v1/chat/completions", json={}, headers=headers) as r:
            got, error = read_until_error(r)
        (record,) = proxy.records(1)
    assert fake.requests[0].aborted
    assert isinstance(error, httpx.RemoteProtocolError)  # never a silent clean end
    assert "incomplete chunked read" in str(error)
    assert sse_text(got) == sse_text(b"".join(sent)) != ""  # everything that arrived
    assert record["outcome"] == "upstream-error"
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"]


def test_upstream_reset_mid_event_sends_the_partial_event_then_truncates(
    tmp_path: Path, fake: FakeLLM
):
    events = split_events(fake.openai_body)
    tail = events[40][:30]  # 30 bytes into event 41, then the reset
    fake.openai_body = truncated = b"".join(events[:40]) + tail
    fake.per_event_gap = None  # two bursts, not one write per event
    headers = {"x-fake-abort-after": "2", "x-fake-bursts": "2", "x-fake-burst-gap": "0.3"}
    with RetimerProxy(tmp_path, *SLOW) as proxy, httpx.Client(proxy=proxy.url) as c:
        with c.stream("POST", fake.url + "/v1/chat/completions", json={}, headers=headers) as r:
            got, error = read_until_error(r)
    assert isinstance(error, httpx.RemoteProtocolError)
    # the last bytes the client got are the upstream's own, verbatim: the cut-off event
    assert got.endswith(b"\n\n" + tail)
    assert sse_text(got) == sse_text(truncated) != ""


@TLS_FAKE
def test_upstream_reset_over_h2_is_a_stream_reset(tmp_path: Path, fake: FakeLLM):
    n = 30
    sent = split_events(fake.openai_body)[:n]
    with RetimerProxy(tmp_path, *SLOW, *TLS_PROXY, upstream_ca=fake.ca_path) as proxy:
        with h2_client(proxy.url, proxy.ca_path) as c:
            headers = {"x-fake-abort-after": str(n)}
            with c.stream("POST", fake.url + "/v1/chat/completions", json={},
                          headers=headers) as r:
                assert r.http_version == "HTTP/2"
                got, error = read_until_error(r)
        (record,) = proxy.records(1)
    assert isinstance(error, httpx.RemoteProtocolError)
    assert "StreamReset" in repr(error) or "RST_STREAM" in str(error).upper()
    assert sse_text(got) == sse_text(b"".join(sent)) != ""
    assert record["outcome"] == "upstream-error"


@pytest.mark.parametrize("strategy", ["live", "replay"])
def test_an_upstream_close_mitmproxy_never_reports_still_ends_the_stream(
    tmp_path: Path, fake: FakeLLM, strategy: str
):
    """mitmproxy 12 can lose a server connection's close (its reader cancelled while waiting
    to deliver data): the stream then never hears of it. The state that race leaves (the
    server connection ended, no event) is made here by hand, mid-stream: with tokens held
    (replay: SSE keep-alives would keep the client waiting for ever) and with none held
    (live: the stream waits on the upstream). Either way the client gets a broken body soon."""
    fake.per_event_gap = None
    headers = {"x-fake-bursts": "2", "x-fake-burst-gap": "30"}  # the second burst never comes
    with InProcessProxy(tmp_path, *SLOW, "--tps", "2000", "--strategy", strategy,
                        "--set", "retimer_keepalive=400ms") as proxy:
        with httpx.Client(proxy=proxy.url, timeout=httpx.Timeout(20.0, read=10.0)) as c:
            with c.stream("POST", fake.url + "/v1/chat/completions", json={},
                          headers=headers) as r:
                chunks = r.iter_raw()
                got = next(chunks)  # the first bytes: the role event or a keep-alive

                def lose_the_close() -> None:
                    ((flow, _),) = proxy.addon.active.values()
                    flow.server_conn.timestamp_end = time.time()

                proxy.call(lose_the_close)
                lost_at = time.monotonic()
                rest, error = b"", None
                try:
                    for chunk in chunks:
                        rest += chunk
                except httpx.HTTPError as e:
                    error = e
            ended_s = time.monotonic() - lost_at
        (record,) = proxy.records(1, timeout=5)
        assert proxy.call(lambda: (proxy.addon.bridge.active, len(proxy.addon.active))) == (0, 0)
    assert isinstance(error, httpx.RemoteProtocolError)  # a broken body, never a clean end
    assert ended_s < 3
    assert WORDS.startswith(sse_text(got + rest)) and sse_text(got + rest) != ""
    assert record["outcome"] == "upstream-error"


def test_upstream_error_event_reaches_openai_sdk_after_the_text(tmp_path: Path, fake: FakeLLM):
    n = 30
    sent_text = sse_text(b"".join(split_events(fake.openai_body)[:n]))
    with RetimerProxy(tmp_path, *SLOW) as proxy:
        client = openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-x", max_retries=0,
                               http_client=httpx.Client(proxy=proxy.url))
        pieces: list[str] = []
        with pytest.raises(openai.APIError) as info:
            stream = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
                extra_headers={"x-fake-error-after": str(n)})
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    pieces.append(chunk.choices[0].delta.content)
        (record,) = proxy.records(1)
    assert "server had an error" in str(info.value)
    assert "".join(pieces) == sent_text != ""
    assert record["outcome"] == "complete"  # the upstream ended its message cleanly


def test_upstream_error_event_reaches_anthropic_sdk(tmp_path: Path, fake: FakeLLM):
    n = 12
    with RetimerProxy(tmp_path, *SLOW) as proxy:
        client = anthropic.Anthropic(base_url=fake.url, api_key="sk-ant-x", max_retries=0,
                                     http_client=anthropic.DefaultHttpxClient(proxy=proxy.url))
        pieces: list[str] = []
        with pytest.raises(anthropic.APIStatusError) as info:
            with client.messages.stream(
                model="claude-test", max_tokens=100, messages=[{"role": "user", "content": "hi"}],
                extra_headers={"x-fake-error-after": str(n)},
            ) as stream:
                for text in stream.text_stream:
                    pieces.append(text)
    assert "Overloaded" in str(info.value)
    events = split_events(fake.anthropic_body)[:n]
    expected = "".join(json.loads(e.split(b"data: ", 1)[1])["delta"]["text"]
                       for e in events if b"text_delta" in e)
    assert "".join(pieces) == expected != ""


# -- the upstream stalls while tokens are held ---------------------------------------------
@pytest.mark.parametrize("keepalive", ["400ms", "0"])
def test_stall_past_client_idle_timeout_is_kept_alive_with_sse_comments(
    tmp_path: Path, fake: FakeLLM, keepalive: str
):
    """replay holds every token until the upstream ends; the upstream stalls 2.5 s mid-way;
    the client's read timeout is 1 s. With keep-alives the client survives, without it fails."""
    headers = {"x-fake-bursts": "2", "x-fake-burst-gap": "2.5"}
    fake.per_event_gap = None
    args = (*SLOW, "--tps", "2000", "--strategy", "replay", "--set", f"retimer_keepalive={keepalive}")
    with RetimerProxy(tmp_path, *args) as proxy:
        timeout = httpx.Timeout(10.0, read=1.0)
        with httpx.Client(proxy=proxy.url, timeout=timeout) as c:
            with c.stream("POST", fake.url + "/v1/chat/completions", json={},
                          headers=headers) as r:
                got, error = read_until_error(r)
        if keepalive == "0":
            assert isinstance(error, httpx.ReadTimeout)
            return
        (record,) = proxy.records(1)
        # the SDK never sees the comments
        client = openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-x", max_retries=0,
                               http_client=httpx.Client(proxy=proxy.url, timeout=timeout))
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
            extra_headers=headers)
        sdk_text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert error is None
    assert got.count(b": keep-alive\n\n") >= 3
    assert sse_text(got) == WORDS == sdk_text
    assert got.replace(b": keep-alive\n\n", b"").count(b"data: ") >= fake.openai_body.count(b"data: ")
    assert record["keepalives"] >= 3 and record["outcome"] == "complete"


def test_a_body_with_a_bom_is_kept_alive_too(tmp_path: Path, fake: FakeLLM):
    """The BOM leaves at once and alone; the keep-alives follow it, never precede it."""
    fake.openai_body = b"\xef\xbb\xbf" + fake.openai_body
    fake.per_event_gap = None
    headers = {"x-fake-bursts": "2", "x-fake-burst-gap": "2.5"}
    args = (*SLOW, "--tps", "2000", "--strategy", "replay", "--set", "retimer_keepalive=400ms")
    with RetimerProxy(tmp_path, *args) as proxy:
        with httpx.Client(proxy=proxy.url, timeout=httpx.Timeout(10.0, read=1.0)) as c:
            with c.stream("POST", fake.url + "/v1/chat/completions", json={},
                          headers=headers) as r:
                got, error = read_until_error(r)
    assert error is None
    assert got.startswith(b"\xef\xbb\xbf: keep-alive\n\n")
    assert got.count(b"\xef\xbb\xbf") == 1 and sse_text(got[3:]) == WORDS


def test_ndjson_gets_no_comments_but_idle_release_keeps_it_alive(tmp_path: Path, fake: FakeLLM):
    """NDJSON has no ignorable line: no keep-alive bytes are ever added. With idle release the
    next held line goes early instead, so a client with a short read timeout survives a long
    TTFT; without it that client times out."""
    fixture = {"x-fake-fixture": "ollama/sk-phi3-api-chat-tail-excerpt.ndjson"}
    url = fake.url + "/api/chat"
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    base = ("--profile", "gpt-5", "--ttft", "3s", "--tps", "5", "--jitter", "0",
            "--set", "retimer_keepalive=400ms")
    timeout = httpx.Timeout(10.0, read=1.0)
    for release in (False, True):
        sets = ("--set", "retimer_idle_release=true") if release else ()
        with RetimerProxy(tmp_path / str(release), *base, *sets) as proxy:
            with httpx.Client(proxy=proxy.url, timeout=timeout) as c:
                with c.stream("POST", url, json=body, headers=fixture) as r:
                    got, error = read_until_error(r)
            if not release:
                assert isinstance(error, httpx.ReadTimeout)
                continue
            (record,) = proxy.records(1)
    assert error is None
    assert b"keep-alive" not in got and got == fake.requests[-1].response_body
    assert record["released_early"] >= 1 and record["keepalives"] == 0


# -- the upstream never ends ---------------------------------------------------------------
def _rss_kb(pid: int | None = None) -> int:
    status = Path(f"/proc/{pid or 'self'}/status").read_text()
    return int(next(x for x in status.splitlines() if x.startswith("VmRSS:")).split()[1])


def test_never_ending_upstream_keeps_flowing_with_bounded_memory(tmp_path: Path, fake: FakeLLM):
    headers = {"x-fake-forever": "1", "x-fake-event-gap": "0.004"}
    samples: list[tuple[int, int]] = []
    with InProcessProxy(tmp_path, "--profile", "groq", "--jitter", "0", "--tps", "3000") as proxy:
        with httpx.Client(proxy=proxy.url) as c:
            with c.stream("POST", fake.url + "/v1/chat/completions", json={},
                          headers=headers) as r:
                got = bytearray()
                start = time.monotonic()
                marks: list[int] = []
                for chunk in r.iter_raw():
                    got += chunk
                    elapsed = time.monotonic() - start
                    if len(marks) < int(elapsed):  # once a second: text so far, memory
                        marks.append(sse_text(bytes(got)).count("drip "))
                        samples.append((proxy.call(lambda: proxy.addon.bridge.buffered), _rss_kb()))
                    if elapsed > 6:
                        break
                closed_at = time.monotonic()
        # the client kept receiving, second after second
        assert len(marks) == 6 and all(b > a for a, b in itertools.pairwise(marks))
        assert marks[-1] > 400
        # what the proxy holds stays small; the process does not grow with the stream
        assert max(b for b, _ in samples) < 64 * 1024
        assert samples[-1][1] - samples[1][1] < 16 * 1024  # KB, loose: the test process
        (record,) = proxy.records(1)
        assert record["outcome"] == "client-gone"
        deadline = time.monotonic() + 3
        while fake.requests[0].peer_closed is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fake.requests[0].peer_closed is not None
        assert fake.requests[0].peer_closed - closed_at < 1.0
        bridge = proxy.addon.bridge
        assert proxy.call(lambda: (bridge.active, len(proxy.addon.active), bridge.buffered)) == (0, 0, 0)


# -- the proxy is stopped with streams in flight -------------------------------------------
# SIGTERM here, SIGINT in test_websocket.py's shutdown: retimer handles both with one handler
@pytest.mark.parametrize("sig", [signal.SIGTERM])
def test_shutdown_drains_held_streams_and_records_every_one(
    tmp_path: Path, fake: FakeLLM, sig: signal.Signals
):
    """A held stream (upstream done, profile slow) finishes at once; a never-ending one ends
    at the grace period, truncated; both have records; the process exits promptly."""
    fake.per_event_gap = None  # the held stream's upstream arrives at once
    results: dict[str, tuple[bytes, BaseException | None]] = {}
    proxy = RetimerProxy(tmp_path, *SLOW, "--tps", "10", "--set", "retimer_shutdown_grace=1500ms")
    with proxy:
        def run(name: str, headers: dict[str, str]) -> None:
            with httpx.Client(proxy=proxy.url, timeout=30) as c:
                with c.stream("POST", f"{fake.url}/{name}/chat/completions", json={},
                              headers=headers) as r:
                    results[name] = read_until_error(r)

        threads = [threading.Thread(target=run, args=("held", {})),
                   threading.Thread(target=run, args=("forever", {"x-fake-forever": "1",
                                                                  "x-fake-event-gap": "0.05"}))]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while len(fake.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        assert proxy.proc is not None
        stopped_at = time.monotonic()
        proxy.proc.send_signal(sig)
        proxy.proc.wait(15)
        exit_s = time.monotonic() - stopped_at
        for t in threads:
            t.join(10)
    records = {r["url"].split("/")[3]: r for r in proxy.records(2, timeout=1)}
    held, held_error = results["held"]
    assert held_error is None and sse_text(held) == WORDS  # finished, whole, long before 60 s
    assert records["held"]["outcome"] == "complete"
    forever, forever_error = results["forever"]
    assert isinstance(forever_error, httpx.RemoteProtocolError)  # truncated, not a clean end
    assert b"drip" in forever
    assert records["forever"]["outcome"] == "shutdown"
    assert 1.4 < exit_s < 6
    assert "Traceback" not in proxy.stderr()
