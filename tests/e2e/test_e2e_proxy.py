"""Real SDK clients through the real `retimer` command to a local upstream, over HTTP and HTTPS.

These check behaviour (text, event splitting, records, pass-through), not precise timing: the
timing figures are measured in bench/ and reported in BENCHMARKS.md. The only time bound
asserted is the one the design guarantees: nothing leaves before its target.
"""

from __future__ import annotations

import json
import ssl
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.support.fixtures import intercept_tls_fake
from tests.support.proxy import RetimerProxy
from tests.support.stream_bodies import load_fixture
from tests.support.upstream import FakeLLM

TEXT = (
    "Retimer keeps the words and changes only the time between them. "
    "Naïve café owners in Zürich serve 12,345 crêpes — 東京 too! "
) * 3
PACED = ("--ttft", "300ms", "--tps", "200", "--jitter", "0", "--profile", "gpt-5")
pytestmark = [  # a fake and a proxy per test; the proxy intercepts the fake's TLS when it has it
    pytest.mark.fake_llm(openai=TEXT, anthropic=TEXT, bursts=3),
    pytest.mark.retimer_proxy(*PACED, intercept_tls_fake, trust_fake=True),
]
SCHEMES = pytest.mark.parametrize("fake", [{"tls": False}, {"tls": True}], ids=["http", "https"],
                                  indirect=True)
HTTP = pytest.mark.parametrize("fake", [{"tls": False}], ids=["http"], indirect=True)


def _verify(proxy: RetimerProxy) -> ssl.SSLContext | bool:
    return proxy.client_ssl_context() if proxy.ca_path.exists() else True


@pytest.mark.serial  # the fake must stay ahead of a 200 tok/s profile to be not upstream-bound
@SCHEMES
def test_openai_sdk_stream_is_retimed_with_identical_text(fake: FakeLLM, proxy: RetimerProxy):
    client = openai.OpenAI(
        base_url=fake.url + "/v1",
        api_key="sk-test-secret-key",
        http_client=openai.DefaultHttpxClient(proxy=proxy.url, verify=_verify(proxy)),
    )
    stream = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == TEXT
    (served,) = fake.wait_done(1)
    upstream_events = served.response_body.count(b"\n\ndata: ") + 1
    assert len(pieces) > upstream_events  # the upstream's multi-word events were split
    (record,) = proxy.records(1)
    assert record["protocol"] == "openai-chat"
    assert record["profile"] == "openai-gpt-5"
    assert record["effective_profile"] == "openai-gpt-5 ttft=300ms tps=200 jitter=0"  # what ran
    assert record["target"] == {"ttft_ms": 300.0, "tps": 200.0}
    assert record["outcome"] == "complete"
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"] > 40
    assert record["emitted"]["ttft_ms"] >= 300.0 - 2  # never before the target
    assert record["upstream"]["ttft_ms"] < record["emitted"]["ttft_ms"]
    assert record["upstream_bound"] is False
    assert record["url"].endswith("/v1/chat/completions")
    log_text = proxy.log_path.read_text() + proxy.stdout() + proxy.stderr()
    assert "sk-test-secret-key" not in log_text


@HTTP  # TLS with an SDK: the openai case above
def test_anthropic_sdk_stream_is_retimed_with_identical_text(fake: FakeLLM, proxy: RetimerProxy):
    client = anthropic.Anthropic(
        base_url=fake.url,
        api_key="sk-ant-test-secret",
        http_client=anthropic.DefaultHttpxClient(proxy=proxy.url, verify=_verify(proxy)),
    )
    with client.messages.stream(
        model="claude-test", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == TEXT
    assert final.content[0].text == TEXT
    assert final.stop_reason == "end_turn"
    (record,) = proxy.records(1)
    assert record["protocol"] == "anthropic-messages"
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"]
    assert record["emitted"]["ttft_ms"] >= 300.0 - 2
    assert "sk-ant-test-secret" not in proxy.log_path.read_text() + proxy.stderr()


@HTTP  # over intercepted TLS: test_pac_reverse.py's IDE hosts
def test_non_llm_request_passes_untouched(fake: FakeLLM, proxy: RetimerProxy):
    with httpx.Client(proxy=proxy.url, verify=_verify(proxy)) as c:
        r = c.get(fake.url + "/v1/models?x=1")
        r2 = c.post(fake.url + "/v1/embeddings", json={"input": "x"})
    assert r.json() == {"ok": True, "method": "GET", "path": "/v1/models?x=1"}
    assert r2.json()["path"] == "/v1/embeddings"
    time.sleep(0.2)
    assert proxy.records(0, timeout=0) == []


@HTTP
@pytest.mark.parametrize("fixture", ["anthropic/llm-anthropic-sonnet45-thinking-signature.sse",
                                     "openai-chat/gpt4o-two-tool-calls-obfuscation.sse"])
def test_passthrough_keeps_the_encoded_body_and_counts_what_pacing_counts(
    tmp_path: Path, fake: FakeLLM, fixture: str
):
    """A passthrough stream goes as it came, gzip and framing included (mitmproxy's own
    streaming sends it; the bridge only counts), and its record counts the tokens a re-timed
    run of the same stream counts, on every channel."""
    path = "/v1/messages" if fixture.startswith("anthropic") else "/v1/chat/completions"
    headers = {"x-fake-fixture": fixture, "x-fake-gzip": "1", "accept-encoding": "gzip"}

    def fetch(proxy_url: str | None) -> tuple[bytes, httpx.Headers]:
        with httpx.Client(proxy=proxy_url) as c:
            with c.stream("POST", fake.url + path, json={"stream": True}, headers=headers) as r:
                return b"".join(r.iter_raw()), r.headers

    direct, _ = fetch(None)
    records = []
    for args in (("--profile", "passthrough"), ("--profile", "groq", "--tps", "5000", "--jitter", "0")):
        with RetimerProxy(tmp_path / args[1], *args) as proxy:
            got, got_headers = fetch(proxy.url)
            (record,) = proxy.records(1)
            records.append(record)
        if args[1] == "passthrough":
            assert got == direct  # the compressed bytes, unchanged
            assert got_headers["content-encoding"] == "gzip"
    passed, paced = records
    assert passed["profile"] == "passthrough" and passed["upstream_bound"] is False
    assert passed["outcome"] == paced["outcome"] == "complete"
    assert passed["upstream"]["tokens"] == paced["upstream"]["tokens"] > 0
    assert passed["emitted"]["tokens"] == passed["upstream"]["tokens"]
    assert passed["emitted"]["channels"] == paced["emitted"]["channels"]
    # neither shows a token before it came (comparing the two runs' TTFTs is the machine's noise)
    for rec in records:
        assert rec["emitted"]["ttft_ms"] >= rec["upstream"]["ttft_ms"] - 1, rec


GZIP_FIXTURES = ["anthropic/llm-anthropic-sonnet45-thinking-signature.sse",
                 "anthropic/sdk-py-tool-use-input-json-delta.sse",
                 "openai-chat/gpt4o-two-tool-calls-obfuscation.sse",
                 "deepseek/deepseek-reasoner-reasoning-content.sse"]


@HTTP
def test_gzip_fixture_streams_keep_every_channel(tmp_path: Path, fake: FakeLLM):
    """Compressed upstream bodies are decoded, re-timed, and sent without Content-Encoding
    (one proxy for the four streams, one after the other)."""
    from retimer.wire.protocols import find_adapter
    from retimer.wire.protocols.base import RequestShape

    with RetimerProxy(tmp_path, "--profile", "groq", "--jitter", "0", "--tps", "2000") as proxy:
        for n, fixture in enumerate(GZIP_FIXTURES, 1):
            body = load_fixture(fixture)
            path = "/v1/messages" if fixture.startswith("anthropic") else "/v1/chat/completions"
            with httpx.Client(proxy=proxy.url) as c:
                headers = {"x-fake-fixture": fixture, "x-fake-gzip": "1", "accept-encoding": "gzip"}
                with c.stream("POST", fake.url + path, json={"stream": True}, headers=headers) as r:
                    got = b"".join(r.iter_raw())
                    assert "content-encoding" not in r.headers, fixture
            record = proxy.records(n)[-1]
            shape = RequestShape("POST", "x", path, {}, b"")
            adapter_cls = find_adapter(shape, "text/event-stream")
            assert adapter_cls is not None

            def channels(data: bytes, adapter_cls: type = adapter_cls) -> dict[str, str]:
                out: dict[str, str] = {}
                adapter = adapter_cls()
                for event in [*adapter.feed(data), *adapter.end()]:
                    for channel, text in event.texts:
                        out[channel] = out.get(channel, "") + text
                return out

            assert channels(got) == channels(body), fixture
            assert sum(record["emitted"]["channels"].values()) == record["upstream"]["tokens"], fixture


@HTTP
def test_records_are_json_lines(fake: FakeLLM, proxy: RetimerProxy):
    with httpx.Client(proxy=proxy.url, verify=_verify(proxy)) as c:
        for _ in range(2):
            with c.stream("POST", fake.url + "/v1/chat/completions", json={}) as r:
                r.read()
    records = proxy.records(2)
    assert len(records) == 2
    assert [r["stream"] for r in records] == [0, 1]
    for line in proxy.log_path.read_text().splitlines():
        json.loads(line)
    # stdout is not a terminal here: one plain line per finished stream
    lines = [x for x in proxy.stdout().splitlines() if x.startswith("complete ")]
    assert len(lines) == 2
    assert all("openai-chat" in x and "openai-gpt-5" in x and "tok/s" in x for x in lines)
