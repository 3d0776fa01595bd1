"""Generic fallback adapter: whole-event pacing, byte-identical output, token estimates."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.wire.protocols.base import Channel, RequestShape
from retimer.wire.protocols.generic import GenericStreamAdapter, estimate_text
from retimer.wire.tokenizer import split_tokens
from tests.support.adapter_checks import event_key, parse, rechunk
from tests.support.fixture_streams import STREAMS_DIR, load


def _glob(pattern: str) -> list[str]:
    return sorted(p.relative_to(STREAMS_DIR).as_posix() for p in STREAMS_DIR.glob(pattern))


SSE_FIXTURES = [
    "misc/chat-z-ai-web-api-v2-completions.sse",
    "misc/hf-tgi-generate-stream-tokens.sse",
    "misc/doubao-web-2024-11-protobuf-base64-sse.sse",
    *_glob("claude-web/*.sse"),
    *_glob("chatgpt-web/*.sse"),
    "deepseek/chat-deepseek-com-web-api-v0-completion.sse",
]
NDJSON_FIXTURES = _glob("vercel-ai-payloads/*.ndjson")
FIXTURES = SSE_FIXTURES + NDJSON_FIXTURES


def shape(host: str = "chat.z.ai") -> RequestShape:
    return RequestShape(method="POST", host=host, path="/api/x", headers={}, body=b"")


@pytest.mark.parametrize(("ctype", "expected"), [
    ("text/event-stream", True), ("text/event-stream; charset=utf-8", True),
    ("application/x-ndjson", True), ("application/jsonl", True),
    ("application/json", False), ("text/plain", False), ("", False),
])
def test_accepts(ctype: str, expected: bool) -> None:
    assert GenericStreamAdapter.accepts(shape(), ctype) is expected


def test_fixture_lists_are_complete() -> None:
    assert len(SSE_FIXTURES) == 11 and len(NDJSON_FIXTURES) == 16


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_events_are_atomic_and_bytes_identical(name: str) -> None:
    data = load(name)
    events = parse(GenericStreamAdapter, [data])
    assert b"".join(e.raw for e in events) == data
    assert all(not e.splittable for e in events)
    assert all(len(e.texts) <= 1 and all(c == Channel.TEXT and t for c, t in e.texts) for e in events)
    assert any(e.texts for e in events) or "refusal" in name or "error" in name
    with pytest.raises(ValueError):
        GenericStreamAdapter().split(events[0], [events[0].text])


@pytest.mark.parametrize("name", FIXTURES)
@given(st.data())
@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_property_rechunking(name: str, draw: st.DataObject) -> None:
    data = load(name)
    cuts = draw.draw(st.lists(st.integers(0, len(data)), max_size=30))
    events = parse(GenericStreamAdapter, rechunk(data, cuts))
    assert [event_key(e) for e in events] == [event_key(e) for e in parse(GenericStreamAdapter, [data])]
    assert b"".join(e.raw for e in events) == data


@pytest.mark.parametrize("name", SSE_FIXTURES)
def test_explicit_framing_matches_sniffing(name: str) -> None:
    data = load(name)
    adapter = GenericStreamAdapter.for_content_type("text/event-stream")
    fixed = adapter.feed(data) + adapter.end()
    assert [event_key(e) for e in fixed] == [event_key(e) for e in parse(GenericStreamAdapter, [data])]


def texts_of(name: str) -> str:
    return "".join(e.text for e in parse(GenericStreamAdapter, [load(name)]))


@pytest.mark.parametrize(("name", "start", "end"), [
    ("misc/chat-z-ai-web-api-v2-completions.sse", "Let me consider how to respond", None),
    ("misc/hf-tgi-generate-stream-tokens.sse", "\n\nData Science and AI Engineering", None),
    ("misc/doubao-web-2024-11-protobuf-base64-sse.sse", "好！很高兴再次见到你", None),
    ("claude-web/claudeai-completion-hi-sonnet46-from-doc.sse", " Hi! How can I help you today?", "?"),
    ("chatgpt-web/f-conversation-v1-team-gpt-5-3-tail-excerpt-padded.sse", "Hi. What do you need help with?", "?"),
    ("deepseek/chat-deepseek-com-web-api-v0-completion.sse", "嗯，用户只发了一个简单的", "有什么我可以帮你的吗？"),
    ("vercel-ai-payloads/cohere--cohere-text.payloads.ndjson", "The capital of France is Paris.", "."),
])
def test_fixture_estimates(name: str, start: str, end: str | None) -> None:
    text = texts_of(name)
    assert text.startswith(start)
    if end is not None:
        assert text.endswith(end)


def test_tgi_final_generated_text_is_not_counted_twice() -> None:
    text = texts_of("misc/hf-tgi-generate-stream-tokens.sse")
    assert text.count("Data Science and AI Engineering are two") == 1


def test_cumulative_chatgpt_legacy_counts_mostly_new_text() -> None:
    name = "chatgpt-web/backend-api-conversation-legacy-cumulative-2024-10-gpt-4o-mini.sse"
    text = texts_of(name)
    final = "我们可以从获取你的环境信息开始"
    assert text.count(final) == 1
    assert len(text) < 2 * 80  # the answer is ~75 characters, sent 40 times cumulatively


def test_no_tokens_for_metadata_ids_and_tokens() -> None:
    events = parse(GenericStreamAdapter, [load("chatgpt-web/f-conversation-v1-free-gpt-5-2-list.sse")])
    assert not any("eyJ" in e.text or "REDACTED" in e.text for e in events)
    deepseek = texts_of("deepseek/chat-deepseek-com-web-api-v0-completion.sse")
    assert "FINISHED" not in deepseek and "用户问候助手回应" not in deepseek  # status, title


@pytest.mark.parametrize("data", [
    '{"id":"chatcmpl-123","object":"chunk","created":1,"model":"x"}',
    '{"usage":{"prompt_tokens":3,"completion_tokens":5}}',
    '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
    '{"type":"ping"}',
    "[DONE]",
    "",
    '{"signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxjKxPHiy5MJQ5nI3AiMOcmbPKM8yGhAo1dF6SWsoPl"}',
    '{"url":"https://example.com/a/b?c=d"}',
    '{"content":"3f2504e0-4f89-11d3-9a0c-0305e82c3301"}',
    '{"role":"user","content":"what the user typed"}',
    "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0MjQyNDI0MjQyNDI0Mg==",
])
def test_zero_estimate(data: str) -> None:
    assert estimate_text(data) == ""


@pytest.mark.parametrize(("data", "expected"), [
    ('{"choices":[{"delta":{"content":"Hello"}}]}', "Hello"),
    ('{"type":"response.output_text.delta","delta":" world"}', " world"),
    ('{"token":{"id":5,"text":" tok","special":false}}', " tok"),
    ('{"candidates":[{"content":{"parts":[{"text":"Hi"}]}}]}', "Hi"),
    ('{"v":"你好"}', "你好"),
    ('{"p":"/message/content/parts/0","o":"append","v":"abc"}', "abc"),
    ('{"p":"/message/status","o":"replace","v":"finished_successfully"}', ""),
    ("plain text data", "plain text data"),
    (base64.b64encode(b'\x08\x01\x12{"text":"\xe5\xa5\xbd"}junk').decode(), "好"),
])
def test_estimates(data: str, expected: str) -> None:
    assert estimate_text(data) == expected


def test_non_token_events_and_sse_comments_pass_raw() -> None:
    data = b": keep-alive\n\nevent: ping\ndata: {}\n\ndata: {\"text\":\"Hello there\"}\n\ndata: [DONE]\n\n"
    events = parse(GenericStreamAdapter, [data])
    assert [bool(e.texts) for e in events] == [False, False, True, False]
    assert events[2].atomic and len(split_tokens(events[2].text)) >= 2
    assert b"".join(e.raw for e in events) == data


def test_ndjson_sniffing_and_unterminated_tail() -> None:
    data = b'\n{"response":"a b"}\r\n{"response":"c"}'
    events = parse(GenericStreamAdapter, [data])
    assert [e.text for e in events] == ["", "a b", "c"]
    assert b"".join(e.raw for e in events) == data
    assert parse(GenericStreamAdapter, [b"  \n"]) [0].raw == b"  \n"


@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=8),
       st.sampled_from(["sse", "ndjson"]), st.lists(st.integers(0, 2000), max_size=20))
def test_property_synthetic_roundtrip(texts: list[str], framing: str, cuts: list[int]) -> None:
    objs = [json.dumps({"delta": {"text": t}}, ensure_ascii=False) for t in texts]
    if framing == "sse":
        data = "".join(f"data: {o}\n\n" for o in objs).encode()
    else:
        data = "\n".join(objs).encode()
    events = parse(GenericStreamAdapter, rechunk(data, cuts))
    assert b"".join(e.raw for e in events) == data
    assert [event_key(e) for e in events] == [event_key(e) for e in parse(GenericStreamAdapter, [data])]
    assert all(not e.splittable for e in events)
