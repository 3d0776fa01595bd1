"""The bridge's direct timers (retimer.proxy.bridge.timers) and direct writes (bridge.sinks), in
the real proxy with real clients: after a stream's first wakeup names its connection handler, its
wakeups are loop timers, and their bytes are framed, encrypted and written by the bridge itself,
on HTTP/1 (plain, and TLS inside an HTTP proxy's CONNECT tunnel) and on h2 (inside a CONNECT
tunnel, where two HTTP layers would route them; past the flow-control window too); the bytes
arrive intact and in time order, and nothing is kept."""

from __future__ import annotations

import json
import ssl
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.inproc_proxy import InProcessProxy
from tests.support.stream_bodies import make_openai_stream
from tests.support.upstream import FakeLLM

WORDS = " ".join(f"w{i}" for i in range(120))
PACED = ("--profile", "human-reading", "--ttft", "50ms", "--tps", "400", "--jitter", "0")
TLS_PROXY = ("--intercept", r"^127\.0\.0\.1:", "--set", "connection_strategy=lazy")


class H2Only(ssl.SSLContext):
    def set_alpn_protocols(self, protocols: Any) -> None:
        super().set_alpn_protocols(["h2"])


def _client(proxy: InProcessProxy, *, tls: bool, h2: bool) -> httpx.Client:
    """An httpx client through `proxy`; with `tls`, trusting its CA (and h2 only with `h2`)."""
    if not tls:
        return httpx.Client(proxy=proxy.url)
    ctx = H2Only(ssl.PROTOCOL_TLS_CLIENT) if h2 else ssl.create_default_context()
    ctx.load_verify_locations(proxy.confdir / "mitmproxy-ca-cert.pem")
    return httpx.Client(proxy=proxy.url, verify=ctx, http2=h2)


def sse_text(raw: bytes) -> str:
    out = []
    for line in raw.decode().splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices") or []:
                out.append((choice.get("delta") or {}).get("content") or "")
    return "".join(out)


@pytest.mark.serial  # one wake per token at 400 tok/s: a loaded machine merges late wakes
@pytest.mark.parametrize("client", ["http1", "http1-in-connect", "h2-in-connect"])
def test_paced_wakeups_are_loop_timers_after_the_first(tmp_path: Path, client: str) -> None:
    h2 = client == "h2-in-connect"
    tls = client.endswith("-in-connect")
    body = make_openai_stream(WORDS, words_per_chunk=4)
    with FakeLLM(body, bursts=1, tls=tls) as fake:
        extra = (*TLS_PROXY, "--set", f"ssl_verify_upstream_trusted_ca={fake.ca_path}") if tls else ()
        with InProcessProxy(tmp_path, *PACED, *extra) as proxy:
            timers = proxy.addon.bridge.timers
            counters = lambda: (timers.direct, timers.via_mitmproxy, timers.written)  # noqa: E731
            before = proxy.call(counters)
            http = _client(proxy, tls=tls, h2=h2)
            with http, http.stream("POST", fake.url + "/v1/chat/completions", json={}) as r:
                assert r.http_version == ("HTTP/2" if h2 else "HTTP/1.1")
                assert h2 or r.headers["transfer-encoding"] == "chunked"
                got = b"".join(r.iter_raw())
            (record,) = proxy.records(1, timeout=5)
            direct, via, written = (b - a for a, b in zip(before, proxy.call(counters), strict=True))
    assert sse_text(got) == WORDS  # every token, in order, framed (and encrypted) right
    assert record["outcome"] == "complete"
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"] > 100
    # one token per network event: >100 wakeups, all but the first few from loop timers
    assert direct > 100
    assert via <= 2
    assert written >= direct - 2  # all but the last (the end goes through the layers)


def test_h2_direct_writes_keep_flow_control(tmp_path: Path) -> None:
    """A body several times h2's default 64 KiB window, written by the bridge faster than a
    slow client reads: what the window does not allow waits in the connection's own buffer
    and follows as the client opens it, every byte in order."""
    words = " ".join(f"word{i}" for i in range(2500))
    body = make_openai_stream(words, words_per_chunk=25)
    fast = ("--profile", "human-reading", "--ttft", "50ms", "--tps", "5000", "--jitter", "0")
    with FakeLLM(body, bursts=1, tls=True) as fake:
        extra = (*TLS_PROXY, "--set", f"ssl_verify_upstream_trusted_ca={fake.ca_path}")
        with InProcessProxy(tmp_path, *fast, *extra) as proxy:
            timers = proxy.addon.bridge.timers
            written_before = proxy.call(lambda: timers.written)
            ctx = H2Only(ssl.PROTOCOL_TLS_CLIENT)
            ctx.load_verify_locations(proxy.confdir / "mitmproxy-ca-cert.pem")
            with httpx.Client(proxy=proxy.url, verify=ctx, http2=True) as http, \
                    http.stream("POST", fake.url + "/v1/chat/completions", json={}) as r:
                assert r.http_version == "HTTP/2"
                parts = []
                for part in r.iter_raw():
                    parts.append(part)
                    time.sleep(0.002)  # a slow reader: the window fills
                got = b"".join(parts)
            (record,) = proxy.records(1, timeout=10)
            written = proxy.call(lambda: timers.written) - written_before
    assert len(got) > 4 * 65535
    assert sse_text(got) == words
    assert record["outcome"] == "complete"
    assert written > 100


class _BrokenWriter:
    """A direct writer with a bug: it raises before anything is taken from the stream."""

    @property
    def ready(self) -> bool:
        raise RuntimeError("a bug in the direct write")


def test_a_failing_direct_write_is_logged_and_the_stream_goes_on_through_mitmproxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from retimer.proxy.bridge import driver, passthrough

    for module in (driver, passthrough):
        monkeypatch.setattr(module, "client_writer", lambda stream, handler: _BrokenWriter())
    body = make_openai_stream(WORDS, words_per_chunk=4)
    with FakeLLM(body, bursts=1) as fake:
        with InProcessProxy(tmp_path, *PACED) as proxy:
            timers = proxy.addon.bridge.timers
            before = proxy.call(lambda: (timers.direct, timers.written))
            with httpx.Client(proxy=proxy.url) as http, \
                    http.stream("POST", fake.url + "/v1/chat/completions", json={}) as r:
                got = b"".join(r.iter_raw())
            (record,) = proxy.records(1, timeout=5)
            direct, written = (b - a for a, b in zip(before, proxy.call(lambda: (timers.direct, timers.written)), strict=True))
    assert sse_text(got) == WORDS
    assert record["outcome"] == "complete"
    # 120 tokens at 400 tok/s woke the stream from the bridge's timers many times (fewer on a
    # loaded machine, where a late wake sends several tokens), and every wake after the
    # failure went through mitmproxy
    assert direct >= 20 and written == 0
    failures = [r for r in caplog.records if "direct write failed" in r.getMessage()]
    assert len(failures) == 1


@pytest.mark.parametrize("client", ["http1", "http1-in-connect", "h2-in-connect"])
def test_passthrough_chunks_are_written_by_the_bridge(tmp_path: Path, client: str) -> None:
    """A passthrough stream's body chunks go to the client by the bridge's direct write, each
    as it arrives: the client gets the upstream's bytes unchanged, and the record counts them."""
    h2 = client == "h2-in-connect"
    tls = client.endswith("-in-connect")
    body = make_openai_stream(WORDS, words_per_chunk=4)
    with FakeLLM(body, bursts=1, per_event_gap=0.002, tls=tls) as fake:
        extra = (*TLS_PROXY, "--set", f"ssl_verify_upstream_trusted_ca={fake.ca_path}") if tls else ()
        with InProcessProxy(tmp_path, "--profile", "passthrough", *extra) as proxy:
            bridge = proxy.addon.bridge
            before = proxy.call(lambda: bridge.passed_directly)
            http = _client(proxy, tls=tls, h2=h2)
            with http, http.stream("POST", fake.url + "/v1/chat/completions", json={}) as r:
                assert r.http_version == ("HTTP/2" if h2 else "HTTP/1.1")
                got = b"".join(r.iter_raw())
            (record,) = proxy.records(1, timeout=5)
            passed = proxy.call(lambda: bridge.passed_directly) - before
    assert got == body  # the upstream's bytes, unchanged
    assert record["outcome"] == "complete"
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"] > 100
    events = body.count(b"\n\n")
    assert passed >= events - 2  # one write per upstream event (the first may come with the head)


def test_a_failing_passthrough_direct_write_is_logged_and_the_stream_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from retimer.proxy.bridge import driver, passthrough

    for module in (driver, passthrough):
        monkeypatch.setattr(module, "client_writer", lambda stream, handler: _BrokenWriter())
    body = make_openai_stream(WORDS, words_per_chunk=4)
    with FakeLLM(body, bursts=1, per_event_gap=0.002) as fake:
        with InProcessProxy(tmp_path, "--profile", "passthrough") as proxy:
            bridge = proxy.addon.bridge
            before = proxy.call(lambda: bridge.passed_directly)
            with httpx.Client(proxy=proxy.url) as http, \
                    http.stream("POST", fake.url + "/v1/chat/completions", json={}) as r:
                got = b"".join(r.iter_raw())
            (record,) = proxy.records(1, timeout=5)
            passed = proxy.call(lambda: bridge.passed_directly) - before
    assert got == body
    assert record["outcome"] == "complete"
    assert passed == 0
    failures = [r for r in caplog.records if "direct write failed" in r.getMessage()]
    assert len(failures) == 1
