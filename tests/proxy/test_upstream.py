"""The fake LLM upstream works on its own: plain httpx and the official SDKs, no proxy."""

from __future__ import annotations

import gzip
import json
import socket
import ssl
import threading
import time

import anthropic
import httpx
import openai
import pytest
from cryptography import x509

from tests.support.stream_bodies import FIXTURES, load_fixture, make_anthropic_stream, make_openai_stream, split_events
from tests.support.upstream import CERT_NAMES, FakeLLM

TEXT = "The quick brown fox jumps over the lazy dog.\nSecond line: ünïcödé — and  spaces. "
pytestmark = pytest.mark.fake_llm(openai=TEXT, anthropic=TEXT)
SCHEMES = pytest.mark.parametrize("fake", [{"tls": False}, {"tls": True}], ids=["http", "https"],
                                  indirect=True)


def _client(fake: FakeLLM) -> httpx.Client:
    return httpx.Client(verify=fake.client_ssl_context() if fake.tls else True)


def _sse_data(body: bytes) -> list[str]:
    return [line[6:] for line in body.decode().splitlines() if line.startswith("data: ")]




def test_start_fast_and_clean_stop() -> None:
    before = set(threading.enumerate())
    t0 = time.monotonic()
    fake = FakeLLM(tls=True).start()
    assert time.monotonic() - t0 < 2  # no per-start key generation (it took ~0.1 s idle)
    assert fake.url == f"https://127.0.0.1:{fake.port}" and fake.port > 0
    assert fake.ca_path and fake.ca_path.exists()
    with _client(fake) as c:  # leave a keep-alive connection open on purpose
        assert c.get(fake.url + "/").status_code == 200
        fake.stop()
    assert set(threading.enumerate()) == before
    assert not fake.ca_path.exists()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", fake.port), timeout=1).close()


@SCHEMES
def test_json_route_records_request(fake: FakeLLM) -> None:
    with _client(fake) as c:
        r = c.post(fake.url + "/other/thing?a=1", content=b"hello", headers={"x-test": "1"})
        r2 = c.get(fake.url + "/v1/models")
    assert r.status_code == 200
    assert r.json() == {"ok": True, "method": "POST", "path": "/other/thing?a=1"}
    assert r2.json()["path"] == "/v1/models"
    (a, b) = fake.wait_done(2)
    assert (a.method, a.path, a.target) == ("POST", "/other/thing", "/other/thing?a=1")
    assert (a.route, a.body, b.route) == ("json", b"hello", "json")
    assert a.headers["x-test"] == "1" and a.headers["host"].startswith("127.0.0.1:")
    assert a.conn == b.conn, "keep-alive connection should be reused"


def test_slow_route() -> None:
    with FakeLLM() as fake, httpx.Client() as c:
        t0 = time.monotonic()
        r = c.get(fake.url + "/slow?ms=150")
        assert time.monotonic() - t0 >= 0.14
        assert r.json()["ok"] is True and fake.requests[0].route == "slow"


@SCHEMES
def test_openai_sdk_streaming(fake: FakeLLM) -> None:
    # The SDKs ship their own httpx fork (httpx2); hand them their own client class.
    verify = fake.client_ssl_context() if fake.tls else True
    with openai.DefaultHttpxClient(verify=verify) as http:
        client = openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-test", http_client=http)
        stream = client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "hi"}], stream=True,
            stream_options={"include_usage": True})
        chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == TEXT
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage and chunks[-1].usage.completion_tokens == len(TEXT.split())
    (rec,) = fake.wait_done(1)
    assert rec.route == "openai" and rec.path == "/v1/chat/completions"
    assert json.loads(rec.body)["stream"] is True
    assert rec.headers["authorization"] == "Bearer sk-test"


@SCHEMES
def test_anthropic_sdk_streaming(fake: FakeLLM) -> None:
    verify = fake.client_ssl_context() if fake.tls else True
    with anthropic.DefaultHttpxClient(verify=verify) as http:
        client = anthropic.Anthropic(base_url=fake.url, api_key="sk-ant-test", http_client=http)
        with client.messages.stream(model="claude-test", max_tokens=100,
                                    messages=[{"role": "user", "content": "hi"}]) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
    assert text == TEXT
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == len(TEXT.split())
    (rec,) = fake.wait_done(1)
    assert rec.route == "anthropic" and "anthropic-version" in rec.headers
    # this SDK release sends the key as a Bearer token; older ones used x-api-key
    creds = rec.headers.get("x-api-key", "") + rec.headers.get("authorization", "")
    assert "sk-ant-test" in creds


def test_default_bodies_are_real_fixtures() -> None:
    with FakeLLM() as fake, httpx.Client() as c:
        o = c.post(fake.url + "/v1/chat/completions", json={}).content
        a = c.post(fake.url + "/v1/messages", json={}).content
    assert o.startswith(b"data: ") and o.endswith(b"data: [DONE]\n\n") and b"weather" in o
    assert a.startswith(b"event: message_start") and b"message_stop" in a


def test_bursts_recorded_and_split_mid_event() -> None:
    body = make_openai_stream("one two three four five six seven eight nine ten " * 5)
    with FakeLLM(body, bursts=4, burst_gap=0.02) as fake, httpx.Client() as c:
        with c.stream("POST", fake.url + "/v1/chat/completions", json={}) as r:
            assert r.headers["content-type"] == "text/event-stream"
            assert r.headers["transfer-encoding"] == "chunked"
            got = b"".join(r.iter_raw())
        (rec,) = fake.wait_done(1)
    assert got == body == rec.response_body
    assert len(rec.writes) == 4 and sum(w.size for w in rec.writes) == len(body)
    monos = [w.mono for w in rec.writes]
    assert monos == sorted(monos) and all(w.wall > 1e9 for w in rec.writes)
    ends, pos = [], 0
    for w in rec.writes[:-1]:
        pos += w.size
        ends.append(body[:pos].endswith(b"\n\n"))
    assert not all(ends), "bursts should cut through events"


def test_per_event_gap_one_write_per_event() -> None:
    body = make_anthropic_stream("alpha beta gamma delta epsilon zeta eta theta")
    with FakeLLM(anthropic_body=body, per_event_gap=0.005) as fake, httpx.Client() as c:
        assert c.post(fake.url + "/v1/messages", json={}).content == body
        (rec,) = fake.wait_done(1)
    assert len(rec.writes) == len(split_events(body)) == body.count(b"\n\n")


def test_per_request_overrides_and_fixture_header() -> None:
    rel = "openai-chat/gpt4o-refusal-deltas.sse"
    gemini = sorted(p.name for p in (FIXTURES / "gemini").glob("*.sse"))[0]
    with FakeLLM() as fake, httpx.Client() as c:
        r = c.post(fake.url + "/v1/chat/completions", json={},
                   headers={"x-fake-fixture": rel, "x-fake-bursts": "3"})
        assert r.content == load_fixture(rel)
        r = c.get(fake.url + "/v1beta/models/g:streamGenerateContent?alt=sse",
                  headers={"x-fake-fixture": "gemini/" + gemini})
        assert r.headers["content-type"] == "text/event-stream" and r.content
        r = c.post(fake.url + "/v1/messages", headers={"x-fake-fixture": "../../upstream.py"})
        assert r.status_code == 404 and r.json()["ok"] is False
        recs = fake.wait_done(3)
    assert [x.route for x in recs] == ["fixture", "fixture", "error"]
    assert len(recs[0].writes) == 3


@pytest.mark.parametrize("plan", [{"bursts": 3}, {"per_event_gap": 0.0}])
def test_gzip(plan: dict) -> None:
    body = make_openai_stream("gzip me please " * 20)
    with FakeLLM(body, gzip=True, **plan) as fake, httpx.Client() as c:
        with c.stream("POST", fake.url + "/v1/chat/completions", json={}) as r:
            raw = b"".join(r.iter_raw())
            assert r.headers["content-encoding"] == "gzip"
        assert gzip.decompress(raw) == body
        assert c.post(fake.url + "/v1/chat/completions", json={}).content == body  # httpx decodes


def test_close_delimited() -> None:
    body = make_openai_stream("closing time")
    with FakeLLM(body, close=True, bursts=2) as fake, httpx.Client() as c:
        r = c.post(fake.url + "/v1/chat/completions", json={})
        assert r.content == body and r.headers["connection"] == "close"
        assert "transfer-encoding" not in r.headers and "content-length" not in r.headers
        r2 = c.post(fake.url + "/v1/chat/completions", json={})
        assert r2.content == body
        a, b = fake.wait_done(2)
    assert a.conn != b.conn


def test_first_delay_and_empty_body() -> None:
    with FakeLLM(b"", first_delay=1.5) as fake, httpx.Client() as c:
        t0 = time.monotonic()
        with c.stream("POST", fake.url + "/v1/chat/completions", json={}) as r:
            assert time.monotonic() - t0 < 1.2, "the head goes out before the delay"
            assert r.read() == b""
        assert time.monotonic() - t0 >= 1.49
        (rec,) = fake.wait_done(1)
    assert rec.writes == [] and rec.done


def test_concurrent_requests() -> None:
    results: list[bytes] = []
    with FakeLLM(per_event_gap=0.002) as fake:
        def run() -> None:
            with httpx.Client() as c:
                results.append(c.post(fake.url + "/v1/messages", json={}).content)
        threads = [threading.Thread(target=run) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        recs = fake.wait_done(8)
    assert len(results) == 8 and set(results) == {fake.anthropic_body}
    assert len({r.conn for r in recs}) == 8


def test_cert_names_and_sni() -> None:
    with FakeLLM(tls=True) as fake:
        assert fake.cert_path
        cert = x509.load_pem_x509_certificate(fake.cert_path.read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = {str(n) for n in san.get_values_for_type(x509.DNSName)}
        names |= {str(n) for n in san.get_values_for_type(x509.IPAddress)}
        assert names == set(CERT_NAMES)
        ctx = fake.client_ssl_context()
        for host in CERT_NAMES:  # every name verifies when connecting by IP
            with socket.create_connection(("127.0.0.1", fake.port)) as s:
                with ctx.wrap_socket(s, server_hostname=host) as tls:
                    assert tls.selected_alpn_protocol() in (None, "http/1.1")
        with socket.create_connection(("127.0.0.1", fake.port)) as s:
            with pytest.raises(ssl.SSLCertVerificationError):
                ctx.wrap_socket(s, server_hostname="other.test")


def test_make_openai_stream_shape() -> None:
    datas = _sse_data(make_openai_stream(TEXT, model="m1"))
    assert datas[-1] == "[DONE]"
    objs = [json.loads(d) for d in datas[:-1]]
    assert objs[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    content = [o["choices"][0]["delta"]["content"] for o in objs[1:-2]]
    assert "".join(content) == TEXT and len(content) > 3
    assert all(len(c.split()) <= 3 for c in content)
    assert objs[-2]["choices"][0]["finish_reason"] == "stop"
    assert objs[-1]["choices"] == [] and objs[-1]["usage"]["completion_tokens"] == len(TEXT.split())
    assert {o["model"] for o in objs} == {"m1"}
    assert "".join(json.loads(d)["choices"][0]["delta"].get("content", "")
                   for d in _sse_data(make_openai_stream(""))[:-2]) == ""


def test_make_anthropic_stream_shape() -> None:
    body = make_anthropic_stream(TEXT)
    events = [line[7:] for line in body.decode().splitlines() if line.startswith("event: ")]
    n = len(events) - 6
    assert events == (["message_start", "content_block_start", "ping"]
                      + ["content_block_delta"] * n
                      + ["content_block_stop", "message_delta", "message_stop"]) and n > 3
    objs = [json.loads(d) for d in _sse_data(body)]
    assert "".join(o["delta"]["text"] for o in objs if o["type"] == "content_block_delta") == TEXT
    assert objs[-2]["usage"]["output_tokens"] == len(TEXT.split())
    assert body.endswith(b"\n\n")
