"""Every recorded OpenAI-Chat-family and Anthropic stream, re-timed through the real proxy.

What the official SDKs build from the re-timed stream (text, reasoning, tool calls, finish
reasons, usage) must equal what they build from the recording itself.
"""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.support.fixture_streams import ANTHROPIC_FIXTURES, OPENAI_CHAT_FIXTURES, load
from tests.support.proxy import RetimerProxy
from tests.support.sdk_views import anthropic_view, openai_view
from tests.support.upstream import FakeLLM

# a fast profile with its jitter and multi-token chunking left on
PROFILE = ("--profile", "groq", "--tps", "3000", "--ttft", "20ms")
pytestmark = [pytest.mark.fake_llm(bursts=4, scope="module"),
              pytest.mark.retimer_proxy(*PROFILE, scope="module")]


def _outcome(view, data: bytes) -> object:
    """The SDK's view, or the kind of error it raises: a few recordings already break the SDK
    (OpenRouter annotations without `index`, Mistral's index-less tool call), and a re-timed
    stream must break it in the same way, no more and no less."""
    try:
        return view(data)
    except Exception as e:
        return ("raises", type(e).__name__)


def _through_proxy(proxy: RetimerProxy, fake: FakeLLM, fixture: str, path: str) -> bytes:
    with httpx.Client(proxy=proxy.url, timeout=30) as c:
        headers = {"x-fake-fixture": fixture}
        with c.stream("POST", fake.url + path, json={"stream": True}, headers=headers) as r:
            assert r.status_code == 200
            return b"".join(r.iter_raw())


@pytest.mark.parametrize("fixture", OPENAI_CHAT_FIXTURES)
def test_openai_chat_fixture_same_for_the_sdk(proxy: RetimerProxy, fake: FakeLLM, fixture: str):
    original = load(fixture)
    out = _through_proxy(proxy, fake, fixture, "/v1/chat/completions")
    assert _outcome(openai_view, out) == _outcome(openai_view, original)


@pytest.mark.parametrize("fixture", ANTHROPIC_FIXTURES)
def test_anthropic_fixture_same_for_the_sdk(proxy: RetimerProxy, fake: FakeLLM, fixture: str):
    original = load(fixture)
    out = _through_proxy(proxy, fake, fixture, "/v1/messages")
    assert _outcome(anthropic_view, out) == _outcome(anthropic_view, original)


def test_openai_sdk_tool_calls_from_a_recording(proxy: RetimerProxy, fake: FakeLLM) -> None:
    fixture = "openai-chat/gpt4o-parallel-tool-calls-usage.sse"
    fake.openai_body = load(fixture)
    results = []
    for via in (None, proxy.url):
        client = openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-test",
                               http_client=openai.DefaultHttpxClient(proxy=via))
        with client.chat.completions.stream(
            model="gpt-4o", messages=[{"role": "user", "content": "weather?"}],
            stream_options={"include_usage": True},
        ) as stream:
            events = list(stream)
            results.append((stream.get_final_completion(), len(events)))
    (direct, n_direct), (proxied, n_proxied) = results
    assert proxied.choices[0].message.tool_calls == direct.choices[0].message.tool_calls
    assert len(direct.choices[0].message.tool_calls or []) >= 2
    assert proxied.usage == direct.usage
    assert n_proxied > n_direct  # argument deltas were split into more events


def test_anthropic_sdk_thinking_from_a_recording(proxy: RetimerProxy, fake: FakeLLM) -> None:
    fake.anthropic_body = load("anthropic/llm-anthropic-sonnet45-thinking-signature.sse")
    finals = []
    for via in (None, proxy.url):
        client = anthropic.Anthropic(base_url=fake.url, api_key="sk-ant-test",
                                     http_client=anthropic.DefaultHttpxClient(proxy=via))
        with client.messages.stream(model="claude-test", max_tokens=2000,
                                    messages=[{"role": "user", "content": "think"}]) as stream:
            finals.append(stream.get_final_message())
    direct, proxied = finals
    assert proxied.content == direct.content
    assert any(block.type == "thinking" and block.thinking for block in proxied.content)
    assert proxied.usage == direct.usage


def test_every_recording_left_a_record(proxy: RetimerProxy) -> None:
    records = proxy.records(1)
    assert records and all(r["fallback"] is None for r in records)
    assert all(r["outcome"] == "complete" for r in records)
