"""Formats beyond OpenAI Chat and Anthropic, through the real proxy: each gets its adapter, and
an LLM host's unknown streams are paced whole, byte for byte."""

from __future__ import annotations

import httpx
import pytest

from retimer.wire.protocols import find_adapter
from retimer.wire.protocols.base import RequestShape
from tests.support.fixture_streams import load
from tests.support.proxy import RetimerProxy
from tests.support.upstream import FakeLLM

PROFILE = ("--profile", "gpt-5", "--tps", "2000", "--ttft", "250ms")
pytestmark = [pytest.mark.fake_llm(bursts=3, scope="module"),
              pytest.mark.retimer_proxy(*PROFILE, scope="module")]


def _post(proxy: RetimerProxy, fake: FakeLLM, path: str, fixture: str, **headers: str) -> bytes:
    with httpx.Client(proxy=proxy.url, timeout=30) as c:
        h = {"x-fake-fixture": fixture, **headers}
        with c.stream("POST", fake.url + path, json={"stream": True}, headers=h) as r:
            assert r.status_code == 200
            return b"".join(r.iter_raw())


def _channels(path: str, content_type: str, data: bytes) -> dict[str, str]:
    adapter_cls = find_adapter(RequestShape("POST", "h", path, {}, b""), content_type)
    assert adapter_cls is not None
    adapter = adapter_cls()
    out: dict[str, str] = {}
    for event in [*adapter.feed(data), *adapter.end()]:
        for channel, text in event.texts:
            out[channel] = out.get(channel, "") + text
    return out


@pytest.mark.parametrize(
    ("path", "fixture"),
    [
        ("/api/chat", "ollama/sk-phi3-api-chat-tail-excerpt.ndjson"),
        ("/api/generate", "ollama/sk-phi3-api-generate-tail-excerpt.ndjson"),
    ],
)
def test_ollama_native_stream(proxy: RetimerProxy, fake: FakeLLM, path: str, fixture: str):
    before = len(proxy.records(0, timeout=0))
    out = _post(proxy, fake, path, fixture)
    ctype = "application/x-ndjson"
    assert _channels(path, ctype, out) == _channels(path, ctype, load(fixture))
    record = proxy.records(before + 1)[-1]
    assert record["protocol"] == "ollama"
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"] > 0
    assert record["emitted"]["ttft_ms"] >= record["target"]["ttft_ms"] - 2  # never early


@pytest.mark.parametrize(
    "fixture",
    ["chatgpt-web/backend-api-conversation-v1-2024-10-gpt-4o-padded.sse",
     "claude-web/claudeai-completion-hi-sonnet46-from-doc.sse"],
)
def test_unknown_stream_from_an_llm_host_is_paced_whole(
    proxy: RetimerProxy, fake: FakeLLM, fixture: str
) -> None:
    before = len(proxy.records(0, timeout=0))
    # a path no adapter knows, on a known LLM host: the generic fallback
    out = _post(proxy, fake, "/backend-api/other-stream", fixture, host="chatgpt.com")
    assert out == load(fixture)  # never altered
    record = proxy.records(before + 1)[-1]
    assert record["protocol"] == "generic"
    assert record["emitted"]["tokens"] > 0
    assert record["emitted"]["ttft_ms"] >= record["target"]["ttft_ms"] - 2  # never early


def test_unknown_stream_from_another_host_is_not_paced(proxy: RetimerProxy, fake: FakeLLM):
    before = len(proxy.records(0, timeout=0))
    fixture = "chatgpt-web/backend-api-conversation-v1-2024-10-gpt-4o-padded.sse"
    assert _post(proxy, fake, "/backend-api/other-stream", fixture) == load(fixture)
    assert len(proxy.records(before, timeout=0.3)) == before


@pytest.mark.parametrize(
    ("path", "fixture", "ctype"),
    [
        ("/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
         "gemini/sse-gemini-2.5-pro-thoughts.sse", "text/event-stream"),
        ("/v1beta/models/gemini-2.5-flash:streamGenerateContent",
         "gemini/llm-gemini-flash-thoughts-signature.json-stream", "application/json"),
    ],
)
def test_gemini_streams(proxy: RetimerProxy, fake: FakeLLM, path: str, fixture: str, ctype: str):
    import json

    before = len(proxy.records(0, timeout=0))
    out = _post(proxy, fake, path, fixture)
    assert _channels(path, ctype, out) == _channels(path, ctype, load(fixture))
    if ctype == "application/json":
        assert len(json.loads(out)) >= len(json.loads(load(fixture)))  # still one JSON array
    record = proxy.records(before + 1)[-1]
    assert record["protocol"] in ("gemini-sse", "gemini-json")
    assert record["emitted"]["tokens"] == record["upstream"]["tokens"] > 0


def test_openai_sdk_responses_stream(proxy: RetimerProxy, fake: FakeLLM) -> None:
    """The openai SDK's Responses streaming gets the same final response through the proxy."""
    import openai

    fixture = "openai-responses/reasoning-summary-text-delta-long.sse"
    finals = []
    for via in (None, proxy.url):
        client = openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-test",
                               http_client=openai.DefaultHttpxClient(proxy=via))
        with client.responses.stream(model="o4-mini", input="hi",
                                     extra_headers={"x-fake-fixture": fixture}) as stream:
            numbers = [e.sequence_number for e in stream]
            finals.append((stream.get_final_response(), numbers))
    (direct, n_direct), (proxied, n_proxied) = finals
    assert proxied.output_text == direct.output_text and direct.output_text
    assert n_proxied == list(range(n_proxied[0], n_proxied[0] + len(n_proxied)))
    assert len(n_proxied) > len(n_direct)  # deltas were split and renumbered
    record = proxy.records(1)[-1]
    assert record["protocol"] == "openai-responses"
    assert record["emitted"]["channels"].get("reasoning", 0) > 0
