"""The response cache: request keys, the disk store, and hits through the real proxy.

End-to-end checks are behaviour, not precise timing: a hit must come from the cache (the
upstream saw one request, or is not even listening), carry the same text, and be paced from
the request's arrival with the profile's timing rather than the upstream's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from retimer.cache.entry import (
    CacheEntry,
    CorruptEntry,
    cache_key,
    decode_entry,
    encode_entry,
    is_secret_param,
    new_entry,
    storable_headers,
)
from retimer.cache.store import CacheStore
from retimer.wire.protocols import OpenAIChatAdapter
from tests.support.proxy import RetimerProxy
from tests.support.stream_bodies import make_anthropic_stream, make_openai_stream
from tests.support.upstream import FakeLLM

JSON = {"content-type": "application/json"}
URL = ("POST", "https", "api.openai.com", 443, "/v1/chat/completions")
BODY = {"model": "gpt-test", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def key(body: Any = BODY, *, url: tuple = URL, headers: dict[str, str] = JSON) -> str:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return cache_key(*url, headers, data)


# -- keys ---------------------------------------------------------------------------------
def test_same_request_same_key_whatever_json_layout():
    assert key() == key()
    assert len(key()) == 64
    relaid = b'{ "messages":[{"content":"hi","role":"user"}], "stream":true, "model":"gpt-test"}'
    assert key(relaid) == key()


@pytest.mark.parametrize(
    "extra",
    [
        {"user": "alice"},
        {"safety_identifier": "u-123"},
        {"prompt_cache_key": "session-9"},
        {"metadata": {"user_id": "user_abc_session_42"}},
        {"keep_alive": "5m"},
    ],
)
def test_volatile_fields_are_ignored(extra: dict[str, Any]):
    assert key({**BODY, **extra}) == key()


@pytest.mark.parametrize(
    "change",
    [
        {"seed": 7},
        {"temperature": 0.2},
        {"stream_options": {"include_usage": True}},
        {"service_tier": "flex"},
        {"messages": [{"role": "user", "content": "hi!"}]},
        {"model": "gpt-other"},
    ],
)
def test_content_fields_change_the_key(change: dict[str, Any]):
    assert key({**BODY, **change}) != key()


def test_method_url_and_headers_count():
    base = key()
    assert key(url=("PUT", *URL[1:])) != base
    assert key(url=("POST", "http", *URL[2:])) != base
    assert key(url=("POST", "https", "api.groq.com", 443, URL[4])) != base
    assert key(url=("POST", "https", "api.openai.com", 8443, URL[4])) != base
    assert key(url=(*URL[:4], "/v1/responses")) != base
    assert key(url=(*URL[:4], URL[4] + "?api-version=1")) != base
    assert key(headers={**JSON, "anthropic-beta": "interleaved-thinking-2025-05-14"}) != base
    # secrets and per-client headers never count
    assert key(headers={**JSON, "authorization": "Bearer sk-1", "cookie": "a=b",
                        "user-agent": "x/1"}) == base
    assert key(headers={"content-type": "Application/JSON"}) == base


def test_secret_query_params_do_not_count():
    path = "/v1beta/models/g:streamGenerateContent?alt=sse&key="
    a = key(url=("POST", "https", "generativelanguage.googleapis.com", 443, path + "AIzaSyA"))
    b = key(url=("POST", "https", "generativelanguage.googleapis.com", 443, path + "AIzaSyB"))
    c = key(url=("POST", "https", "generativelanguage.googleapis.com", 443,
                 "/v1beta/models/g:streamGenerateContent?alt=json&key=AIzaSyA"))
    assert a == b != c
    assert is_secret_param("key") and is_secret_param("X-Amz-Signature")
    assert is_secret_param("access_token") and is_secret_param("api-key")
    assert not is_secret_param("max_tokens") and not is_secret_param("alt")


def test_non_json_bodies_count_byte_for_byte():
    assert key(b"f.req=%5B1%5D&at=A") != key(b"f.req=%5B1%5D&at=B")
    assert key(b"{not json") == key(b"{not json")
    assert key(b"{not json") != key(b"{not json ")


def test_chatgpt_web_first_turn_ids_are_ignored_but_conversation_counts():
    def turn(msg_id: str, parent: str, conversation: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "action": "next", "model": "auto", "parent_message_id": parent,
            "messages": [{"id": msg_id, "author": {"role": "user"}, "create_time": time.time(),
                          "content": {"content_type": "text", "parts": ["hello"]}}],
            "websocket_request_id": msg_id, "client_contextual_info": {"time_since_loaded": 9},
        }
        if conversation:
            body["conversation_id"] = conversation
        return body

    url = ("POST", "https", "chatgpt.com", 443, "/backend-api/f/conversation")
    assert key(turn("m1", "p1"), url=url) == key(turn("m2", "p2"), url=url)
    assert key(turn("m1", "p1", "c1"), url=url) != key(turn("m1", "p1", "c2"), url=url)
    assert key(turn("m1", "p1", "c1"), url=url) != key(turn("m1", "p2", "c1"), url=url)
    # elsewhere those fields are content
    api = ("POST", "https", "api.example.com", 443, "/v1/conversation")
    assert key(turn("m1", "p1"), url=api) != key(turn("m2", "p2"), url=api)


# -- entries and the store ------------------------------------------------------------------
def _entry(body: bytes = b"data: x\n\n") -> CacheEntry:
    return new_entry(
        200, "OK",
        [("Content-Type", "text/event-stream"), ("Set-Cookie", "sid=secret"),
         ("openai-organization", "org-secret"), ("Transfer-Encoding", "chunked"),
         ("Content-Length", "9"), ("x-request-id", "req_1")],
        body, url="https://u:pw@generativelanguage.googleapis.com/v1/m?alt=sse&key=AIzaSecret",
        method="POST", protocol="gemini-sse", created="2026-01-01T00:00:00+00:00",
    )


def test_entries_keep_no_secrets_or_framing():
    entry = _entry()
    assert entry.headers == [("Content-Type", "text/event-stream"), ("x-request-id", "req_1")]
    assert "AIzaSecret" not in entry.url and "pw" not in entry.url
    assert entry.url.startswith("https://generativelanguage.googleapis.com/v1/m?alt=sse&key=")
    hop_and_account = [("Connection", "keep-alive"), ("anthropic-organization-id", "o")]
    assert storable_headers(hop_and_account) == []


def test_store_round_trip(tmp_path: Path):
    store = CacheStore(tmp_path / "c")
    k = key()
    assert store.get(k) is None
    body = "data: ünïcode 東京\n\n".encode() + bytes(range(256))
    store.put(k, _entry(body))
    meta_path, body_path = store.paths(k)
    assert meta_path == tmp_path / "c" / k[:2] / f"{k}.json"
    assert body_path.read_bytes() == body
    got = store.get(k)
    assert got is not None
    assert got.body == body and got.status == 200 and got.protocol == "gemini-sse"
    assert got.headers == _entry().headers
    assert got.reason_phrase == "OK"
    text = meta_path.read_text()
    assert "AIzaSecret" not in text and "org-secret" not in text and "sid=secret" not in text
    assert not [p for p in meta_path.parent.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(
    "damage",
    ["truncate-body", "bad-json", "other-format", "no-body", "bad-status"],
)
def test_corrupt_entries_are_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
):
    store = CacheStore(tmp_path)
    k = key()
    store.put(k, _entry())
    meta_path, body_path = store.paths(k)
    meta = json.loads(meta_path.read_text())
    if damage == "truncate-body":
        body_path.write_bytes(body_path.read_bytes()[:-1])
    elif damage == "bad-json":
        meta_path.write_text(meta_path.read_text()[:20])
    elif damage == "other-format":
        meta_path.write_text(json.dumps({**meta, "format": 999}))
    elif damage == "no-body":
        body_path.unlink()
    else:
        meta_path.write_text(json.dumps({**meta, "status": "200"}))
    with caplog.at_level(logging.WARNING, logger="retimer"):
        assert store.get(k) is None
    assert any("cache entry" in r.getMessage() for r in caplog.records)
    store.put(k, _entry())  # the next store replaces it
    assert store.get(k) is not None


def test_decode_checks_body_hash():
    meta, body = encode_entry(_entry())
    assert decode_entry(meta, body).body == body
    with pytest.raises(CorruptEntry, match="hash"):
        decode_entry(meta, body[:-1] + b"?")
    with pytest.raises(CorruptEntry, match="nested too deeply"):  # not a RecursionError
        decode_entry(b"[" * 200_000 + b"]" * 200_000, body)


def test_size_cap_evicts_least_recently_used(tmp_path: Path):
    size = sum(len(x) for x in encode_entry(_entry(b"x" * 700)))
    cap = int(size * 3.5)
    store = CacheStore(tmp_path, max_bytes=cap)
    keys = [key({**BODY, "n": i}) for i in range(4)]
    for i, k in enumerate(keys[:3]):
        store.put(k, _entry(b"x" * 700))
        os.utime(store.paths(k)[0], (1000 + i, 1000 + i))
    assert store.get(keys[0]) is not None  # used: now the most recent
    store.put(keys[3], _entry(b"y" * 700))
    present = [k for k in keys if store.paths(k)[0].exists()]
    assert keys[1] not in present  # the least recently used went
    assert keys[0] in present and keys[3] in present
    assert len(present) == 3 and store.total_bytes() <= cap


def test_bad_key_is_refused(tmp_path: Path):
    with pytest.raises(ValueError):
        CacheStore(tmp_path).paths("../../etc/passwd")


def test_replay_server_answers_only_expected_tokens():
    """The loopback replay server serves a hit once, to its token; anything else gets 404."""
    from mitmproxy.test import tflow

    from retimer.proxy.cache_addon import ReplayServer
    from retimer.proxy.hooks import CACHE_TOKEN_KEY
    from retimer.proxy.loopback import REPLAY_HEADER

    async def main() -> list[bytes]:
        server = ReplayServer()
        await server.start()
        flow = tflow.tflow()
        original = (flow.request.data.scheme, flow.request.data.host, flow.request.data.port)
        server.serve(flow, _entry(b"data: cached\n\n"))
        assert (flow.request.data.host, flow.request.data.port) == ("127.0.0.1", server.port)
        token = flow.request.headers[REPLAY_HEADER]
        assert flow.metadata[CACHE_TOKEN_KEY] == token
        answers = []
        for sent in (token, token, "forged"):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(f"POST /v1/x HTTP/1.1\r\nHost: a\r\n{REPLAY_HEADER}: {sent}\r\n"
                         "Content-Length: 2\r\n\r\n{}".encode())
            await writer.drain()
            answers.append(await reader.read(65536))
            writer.close()
        assert (flow.request.data.scheme, flow.request.data.host, flow.request.data.port) == original
        assert REPLAY_HEADER not in flow.request.headers and CACHE_TOKEN_KEY not in flow.metadata
        server.stop()
        return answers

    first, again, forged = asyncio.run(main())
    assert first.startswith(b"HTTP/1.1 200 OK\r\n") and first.endswith(b"\r\n\r\ndata: cached\n\n")
    assert b"Set-Cookie" not in first and b"content-length: 14" in first.lower()
    assert again.startswith(b"HTTP/1.1 404") and forged.startswith(b"HTTP/1.1 404")


# -- through the real proxy -----------------------------------------------------------------
TEXT = ("The cache replays real words at the profile's speed, whatever the upstream did. " * 3)
PACED = ("--profile", "cerebras", "--ttft", "300ms", "--tps", "200", "--jitter", "0")


def _text(raw: bytes) -> str:
    adapter = OpenAIChatAdapter()
    return "".join(e.text for e in [*adapter.feed(raw), *adapter.end()])


def _post(client: httpx.Client, url: str, body: dict[str, Any]) -> bytes:
    with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        return b"".join(r.iter_raw())


@pytest.fixture
def slow_fake() -> Iterator[FakeLLM]:
    """A slow model: 0.8 s before its first byte, then bursts 0.1 s apart."""
    with FakeLLM(make_openai_stream(TEXT), first_delay=0.8, bursts=4, burst_gap=0.1) as f:
        yield f


def test_hit_is_served_from_cache_at_profile_speed(tmp_path: Path, slow_fake: FakeLLM):
    cache_dir = tmp_path / "cache"
    proxy = RetimerProxy(tmp_path / "p", *PACED, "--set", f"retimer_cache={cache_dir}")
    with proxy, httpx.Client(proxy=proxy.url, timeout=20) as client:
        first = _post(client, slow_fake.url, {**BODY, "user": "alice"})
        (miss,) = proxy.records(1)
        hit_raw = _post(client, slow_fake.url, {**BODY, "user": "bob"})
        records = proxy.records(2)
        other = _post(client, slow_fake.url, {**BODY, "seed": 1})
        records = proxy.records(3)
    assert _text(first) == _text(hit_raw) == _text(other) == TEXT
    served = slow_fake.requests
    assert len(served) == 2  # the hit never reached the upstream
    assert json.loads(served[1].body)["seed"] == 1
    assert [r["cache"] for r in records] == ["stored", "hit", "stored"]
    assert len(list(cache_dir.glob("??/*.json"))) == 2
    # the miss waited for the slow upstream; the hit plays at the profile's speed
    target = miss["target"]["ttft_ms"]
    assert target < 600  # the profile is faster than this upstream
    assert miss["upstream_bound"] is True and miss["emitted"]["ttft_ms"] >= 800
    hit = records[1]
    hit_target = hit["target"]["ttft_ms"]  # a prompt-cache model may shorten it: its own
    assert hit["url"] == miss["url"] and hit["url"].startswith(slow_fake.url)
    assert hit["protocol"] == "openai-chat" and hit["outcome"] == "complete"
    assert hit["upstream_bound"] is False
    # the whole body came at once from the cache (172 ms seen under a CPU hog), not at the
    # slow upstream's pace
    assert hit["upstream"]["ttft_ms"] < min(400, miss["upstream"]["ttft_ms"] / 2)
    assert hit_target - 2 <= hit["emitted"]["ttft_ms"] < hit_target + 150
    assert hit["emitted"]["tokens"] == miss["emitted"]["tokens"] > 40
    assert 100 < hit["emitted"]["tps"] < 400  # the profile's 200 tok/s, loosely


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/messages"])
def test_a_stream_that_carried_the_apis_error_is_not_stored(tmp_path: Path, route: str):
    """An overload mid-stream is transient: the next identical request must reach the upstream."""
    cache_dir = tmp_path / "cache"
    with FakeLLM(make_openai_stream(TEXT), make_anthropic_stream(TEXT), bursts=4) as fake:
        proxy = RetimerProxy(tmp_path / "p", *PACED, "--set", f"retimer_cache={cache_dir}")
        with proxy, httpx.Client(proxy=proxy.url, timeout=20) as client:
            for _ in range(2):
                with client.stream("POST", fake.url + route, json=BODY,
                                   headers={"x-fake-error-after": "2"}) as r:
                    body = b"".join(r.iter_raw())
                assert b"error" in body[-300:]
            records = proxy.records(2)
        assert len(fake.requests) == 2  # both reached the upstream
    assert [r.get("cache") for r in records] == ["miss", "miss"]
    assert list(cache_dir.glob("??/*.json")) == []


def test_hit_is_byte_identical_with_passthrough(tmp_path: Path):
    with FakeLLM(make_openai_stream(TEXT), bursts=3) as fake:
        upstream_body = fake.openai_body
        cache_dir = tmp_path / "cache"
        args = ("--profile", "passthrough", "--set", f"retimer_cache={cache_dir}")
        with RetimerProxy(tmp_path / "p", *args) as proxy:
            with httpx.Client(proxy=proxy.url, timeout=20) as client:
                got = [_post(client, fake.url, BODY) for _ in range(2)]
            records = proxy.records(2)
        assert len(fake.requests) == 1
    assert got[0] == got[1] == upstream_body
    assert [r["cache"] for r in records] == ["stored", "hit"]
    (body_file,) = cache_dir.glob("??/*.body")
    assert body_file.read_bytes() == upstream_body


def test_reverse_mode_hit_keeps_the_upstream_url(tmp_path: Path):
    """In reverse mode the Retimer addon reads the destination from the request itself."""
    with FakeLLM(make_openai_stream(TEXT), bursts=3) as fake:
        args = (*PACED, "--upstream", fake.url, "--set", f"retimer_cache={tmp_path / 'cache'}")
        with RetimerProxy(tmp_path / "p", *args) as proxy:
            with httpx.Client(timeout=20) as client:  # no proxy: the base URL is retimer
                got = [_text(_post(client, proxy.url, BODY)) for _ in range(2)]
            records = proxy.records(2)
        assert len(fake.requests) == 1
    assert got == [TEXT, TEXT]
    assert [r["cache"] for r in records] == ["stored", "hit"]
    assert records[1]["url"] == records[0]["url"] == fake.url + "/v1/chat/completions"
    assert records[1]["protocol"] == "openai-chat"


def test_without_cache_option_records_say_nothing(tmp_path: Path):
    with FakeLLM(make_openai_stream(TEXT)) as fake, RetimerProxy(tmp_path, *PACED) as proxy:
        with httpx.Client(proxy=proxy.url, timeout=20) as client:
            for _ in range(2):
                _post(client, fake.url, BODY)
        records = proxy.records(2)
        assert len(fake.requests) == 2
    assert [r["cache"] for r in records] == [None, None]


def test_http2_client_over_https_hits(tmp_path: Path):
    """curl over HTTP/2, as browsers talk: the hit crosses mitmproxy's h2 -> HTTP/1.1 replay."""
    curl = shutil.which("curl")
    assert curl, "curl is needed for the HTTP/2 check"
    with FakeLLM(make_openai_stream(TEXT), bursts=3, tls=True) as fake:
        args = (*PACED, "--intercept", r"^127\.0\.0\.1:", "--set", f"retimer_cache={tmp_path}/c")
        with RetimerProxy(tmp_path / "p", *args, upstream_ca=fake.ca_path) as proxy:
            versions, texts = [], []
            for i in range(2):
                out = tmp_path / f"body{i}"
                done = subprocess.run(
                    [curl, "-sS", "--http2", "--proxy", proxy.url, "--cacert", str(proxy.ca_path),
                     "-H", "content-type: application/json", "--data-binary", json.dumps(BODY),
                     "-o", str(out), "-w", "%{http_version}", fake.url + "/v1/chat/completions"],
                    check=False, capture_output=True, text=True, timeout=30,
                )
                assert done.returncode == 0, done.stderr
                versions.append(done.stdout)
                texts.append(_text(out.read_bytes()))
            records = proxy.records(2)
        assert len(fake.requests) == 1
    assert versions == ["2", "2"]
    assert texts == [TEXT, TEXT]
    assert [r["cache"] for r in records] == ["stored", "hit"]
    assert records[1]["url"] == fake.url + "/v1/chat/completions"


def test_openai_sdk_over_https_hit_needs_no_upstream_connection(tmp_path: Path):
    cache_dir = tmp_path / "cache"
    fake = FakeLLM(make_openai_stream(TEXT), bursts=3, tls=True).start()
    try:
        proxy = RetimerProxy(
            tmp_path / "p", *PACED, "--intercept", r"^127\.0\.0\.1:",
            "--set", f"retimer_cache={cache_dir}", upstream_ca=fake.ca_path,
        )
        with proxy:

            def ask() -> str:
                http_client = openai.DefaultHttpxClient(
                    proxy=proxy.url, verify=proxy.client_ssl_context(), timeout=20
                )
                client = openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-test-secret",
                                       http_client=http_client, max_retries=0)
                with http_client:
                    stream = client.chat.completions.create(
                        model="gpt-test", messages=[{"role": "user", "content": "hi"}],
                        stream=True,
                    )
                    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

            assert ask() == TEXT
            proxy.records(1)
            assert len(fake.requests) == 1
            port = fake.port
            fake.stop()
            # listen where the upstream was: any connection attempt would be seen here
            with socket.socket() as watch:
                watch.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                watch.bind(("127.0.0.1", port))
                watch.listen(8)
                watch.setblocking(False)
                assert ask() == TEXT  # a new client: CONNECT + TLS, then the request
                with pytest.raises(BlockingIOError):
                    watch.accept()
            records = proxy.records(2)
    finally:
        fake.stop()
    assert [r["cache"] for r in records] == ["stored", "hit"]
    assert records[1]["url"] == records[0]["url"] == fake.url + "/v1/chat/completions"
    assert records[1]["emitted"]["ttft_ms"] >= records[1]["target"]["ttft_ms"] - 2
    assert "sk-test-secret" not in "".join(p.read_text() for p in cache_dir.glob("??/*.json"))
