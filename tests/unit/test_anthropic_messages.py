"""Anthropic Messages adapter: channels, splitting, integrity on recorded streams."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.wire.protocols import ADAPTERS, find_adapter
from retimer.wire.protocols.anthropic_messages import AnthropicMessagesAdapter
from retimer.wire.protocols.base import Channel, Event, RequestShape
from tests.support.adapter_checks import (
    channel_texts,
    check_integrity,
    event_key,
    parse,
    random_pieces,
    rechunk,
    resplit,
    sse_events,
    two_pieces,
)
from tests.support.fixture_streams import ANTHROPIC_FIXTURES, load
from tests.support.sdk_views import anthropic_view

TEXT, REASONING, TOOL_ARGS = Channel.TEXT, Channel.REASONING, Channel.TOOL_ARGS
SSE = "text/event-stream"


def shape(path: str, method: str = "POST") -> RequestShape:
    return RequestShape(method=method, host="api.anthropic.com", path=path, headers={}, body=b"{}")


def delta_event(delta: dict[str, Any], *, index: int = 0, newline: str = "\n", pad: str = "") -> bytes:
    obj = {"type": "content_block_delta", "index": index, "delta": delta}
    body = json.dumps(obj)[:-1] + pad + "}"
    return f"event: content_block_delta{newline}data: {body}{newline}{newline}".encode()


def events_of(data: bytes) -> list[Event]:
    return parse(AnthropicMessagesAdapter, [data])


def only(data: bytes) -> Event:
    [event] = events_of(data)
    return event


# -- accepts / registry ------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "ctype", "expected"), [
    ("POST", "/v1/messages", SSE, True),
    ("POST", "/v1/messages?beta=true", "text/event-stream; charset=utf-8", True),
    ("post", "/anthropic/v1/messages/", SSE, True),
    ("POST", "/messages", SSE, True),
    ("POST", "/v1/messages", "application/json", False),
    ("GET", "/v1/messages", SSE, False),
    ("POST", "/v1/messages/count_tokens", SSE, False),
    ("POST", "/v1/messages/batches", SSE, False),
    ("POST", "/v1/complete", SSE, False),
    ("POST", "/v1/chat/completions?next=/v1/messages", SSE, False),
])
def test_accepts(method: str, path: str, ctype: str, expected: bool) -> None:
    assert AnthropicMessagesAdapter.accepts(shape(path, method), ctype) is expected


def test_registry_finds_anthropic() -> None:
    assert AnthropicMessagesAdapter in ADAPTERS and AnthropicMessagesAdapter.name == "anthropic-messages"
    assert find_adapter(shape("/v1/messages?beta=true"), "text/event-stream;charset=utf-8") is AnthropicMessagesAdapter
    assert find_adapter(shape("/v1/messages"), "application/json") is None


# -- channels on recorded streams ---------------------------------------------------------
def _reference(data: bytes) -> dict[Channel, str]:
    """A plain reading of the wire: the string of every content_block_delta."""
    fields = {"text_delta": ("text", TEXT), "thinking_delta": ("thinking", REASONING),
              "input_json_delta": ("partial_json", TOOL_ARGS)}
    out: dict[Channel, str] = {}
    for ev in sse_events(data):
        if not ev.complete or not ev.data:
            continue
        obj = json.loads(ev.data)
        if obj.get("type") == "content_block_delta" and obj["delta"]["type"] in fields:
            key, channel = fields[obj["delta"]["type"]]
            if obj["delta"][key]:
                out[channel] = out.get(channel, "") + obj["delta"][key]
    return out


@pytest.mark.parametrize("name", ANTHROPIC_FIXTURES)
def test_fixture_channels_and_raw(name: str) -> None:
    data = load(name)
    events = events_of(data)
    assert b"".join(e.raw for e in events) == data
    assert channel_texts(events) == _reference(data)
    for event in events:
        assert event.splittable == bool(event.texts)  # every token event here can be split


def test_fixture_known_texts_and_kinds() -> None:
    assert channel_texts(events_of(load("anthropic/pydantic-ai-single-delta.sse"))) == {TEXT: "2"}
    assert channel_texts(events_of(load("anthropic/sdk-py-tool-use-input-json-delta.sse"))) == {
        TEXT: "I'll check the current weather in Paris for you.", TOOL_ARGS: '{"location": "Paris"}'}
    thinking = channel_texts(events_of(load("anthropic/llm-anthropic-sonnet45-thinking-signature.sse")))
    assert set(thinking) == {TEXT, REASONING}
    # tool input delivered whole in content_block_start, deltas empty: no tokens to pace
    assert channel_texts(events_of(load("anthropic/llm-anthropic-tool-use-input-json-delta.sse"))) == {}


def test_fixture_non_token_events() -> None:
    events = events_of(load("anthropic/llm-anthropic-web-search-server-tool-citations.sse"))
    kinds = {json.loads(sse_events(e.raw)[0].data or "{}")["delta"]["type"] for e in events
             if not e.texts and b"content_block_delta" in e.raw}
    assert "citations_delta" in kinds
    sig = events_of(load("anthropic/llm-anthropic-haiku45-thinking.sse"))
    assert any(b"signature_delta" in e.raw and not e.texts for e in sig)
    err = events_of(load("anthropic/issue-litellm-4562-midstream-error-excerpt.sse"))
    assert err[-1].raw.startswith(b"event: error\n") and not err[-1].texts
    tail = events_of(load("anthropic/sdk-py-tool-use-input-json-delta.sse"))[-1]
    assert tail.raw == b'event: message_stop\ndata: {"type":"message_stop"}' and not tail.texts


# -- properties on recorded streams -------------------------------------------------------
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
@pytest.mark.parametrize("name", ANTHROPIC_FIXTURES)
def test_property_rechunking(name: str, data: st.DataObject) -> None:
    raw = load(name)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=80), label="cuts")
    events = parse(AnthropicMessagesAdapter, rechunk(raw, cuts))
    assert [event_key(e) for e in events] == [event_key(e) for e in events_of(raw)]
    assert b"".join(e.raw for e in events) == raw


def _validates(obj: dict[str, Any]) -> bool:
    from anthropic.types import RawContentBlockDeltaEvent
    try:
        RawContentBlockDeltaEvent.model_validate(obj)
    except Exception:
        return False
    return True


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False), data=st.data())
@pytest.mark.parametrize("name", ANTHROPIC_FIXTURES)
def test_property_split_integrity(name: str, rnd: random.Random, data: st.DataObject) -> None:
    raw = load(name)
    output, records = resplit(AnthropicMessagesAdapter, raw,
                              lambda e: random_pieces(e.text, rnd) if rnd.random() < 0.8 else None)
    cuts = data.draw(st.lists(st.integers(0, len(output)), max_size=40), label="cuts")
    check_integrity(AnthropicMessagesAdapter, raw, records, output, cuts)
    for r in records:
        if r.pieces is None:
            continue
        [orig_sse] = sse_events(r.event.raw)
        orig = json.loads(orig_sse.data or "")
        for piece, raw_piece in zip(r.pieces, r.out):
            [ev] = sse_events(raw_piece)
            assert ev.event == orig_sse.event == "content_block_delta" and ev.newline == orig_sse.newline
            obj = json.loads(ev.data or "")
            assert obj["type"] == orig["type"] and obj["index"] == orig["index"]
            assert obj["delta"]["type"] == orig["delta"]["type"]
            assert obj == {**orig, "delta": {**orig["delta"], r.event.payload.path[-1]: piece}}
            assert _validates(obj)


# -- what the official SDK builds from the stream ----------------------------------------
_SDK_READABLE = [n for n in ANTHROPIC_FIXTURES if "excerpt" not in n]  # excerpts lack message_start


@pytest.mark.parametrize("how", ["halves", "characters"])
@pytest.mark.parametrize("name", _SDK_READABLE)
def test_sdk_accumulates_same_message(name: str, how: str) -> None:
    pytest.importorskip("anthropic")
    raw = load(name)
    output, records = resplit(AnthropicMessagesAdapter, raw,
                              lambda e: two_pieces(e.text) if how == "halves" else list(e.text))
    assert all(len(r.pieces or ()) > 1 for r in records if r.event.splittable and len(r.event.text) > 1)
    assert anthropic_view(output) == anthropic_view(raw)


# -- targeted ----------------------------------------------------------------------------
@pytest.mark.parametrize(("delta", "channel", "field"), [
    ({"type": "text_delta", "text": "Hello there"}, TEXT, "text"),
    ({"type": "thinking_delta", "thinking": "Hello there"}, REASONING, "thinking"),
    ({"type": "input_json_delta", "partial_json": "Hello there"}, TOOL_ARGS, "partial_json"),
])
def test_split_every_piece_is_the_same_event(delta: dict[str, Any], channel: Channel, field: str) -> None:
    event = only(delta_event(delta, index=3, pad="      "))
    assert event.texts == ((channel, "Hello there"),) and event.splittable
    out = AnthropicMessagesAdapter().split(event, ["Hel", "lo", " there"])
    assert out[1] == ('event: content_block_delta\ndata: {"type":"content_block_delta","index":3,'
                      f'"delta":{{"type":"{delta["type"]}","{field}":"lo"}}}}\n\n').encode()
    assert [only(p).texts for p in out] == [((channel, p),) for p in ["Hel", "lo", " there"]]


def test_split_keeps_crlf_preamble_and_id() -> None:
    raw = b": ping\r\n" + delta_event({"type": "text_delta", "text": "ab"}, newline="\r\n").replace(
        b"data:", b"id: 9\r\ndata:", 1)
    first, last = AnthropicMessagesAdapter().split(only(raw), ["a", "b"])
    assert first.startswith(b": ping\r\nevent: content_block_delta\r\n") and first.endswith(b"\r\n\r\n")
    assert b"id:" not in first and sse_events(last)[0].id == "9"


def test_single_piece_returns_raw_and_bad_pieces_raise() -> None:
    raw = delta_event({"type": "text_delta", "text": "abc"}, pad="   ")
    event = only(raw)
    adapter = AnthropicMessagesAdapter()
    assert adapter.split(event, ["abc"]) == [raw]
    with pytest.raises(ValueError):
        adapter.split(event, ["ab"])
    with pytest.raises(ValueError):
        adapter.split(only(b"event: ping\ndata: {\"type\": \"ping\"}\n\n"), ["x"])


@pytest.mark.parametrize("raw", [
    b"event: ping\ndata: {\"type\": \"ping\"}\n\n",
    delta_event({"type": "signature_delta", "signature": "abc"}),
    delta_event({"type": "citations_delta", "citation": {"cited_text": "x"}}),
    delta_event({"type": "text_delta", "text": ""}),
    delta_event({"type": "text_delta", "text": 5}),
    delta_event({"type": "text_delta"}),
    delta_event({"type": "mystery_delta", "text": "x"}),
    b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":\"x\"}\n\n",
    b"event: content_block_delta\ndata: not json\n\n",
    b"event: content_block_delta\ndata: [\"content_block_delta\"]\n\n",
    b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"\xff\"}}\n\n",
    b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
    b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    b": comment only\n\n",
    delta_event({"type": "text_delta", "text": "no blank line"})[:-1],
])
def test_non_token_and_malformed_pass_through(raw: bytes) -> None:
    events = events_of(raw)
    assert b"".join(e.raw for e in events) == raw
    assert all(not e.texts for e in events)


def test_lone_surrogate_text_splits_into_valid_utf8() -> None:
    event = only(b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
                 b'"delta":{"type":"text_delta","text":"a\\udc00b"}}\n\n')
    out = AnthropicMessagesAdapter().split(event, ["a", "\udc00b"])
    for piece in out:
        piece.decode("utf-8")
    assert channel_texts(events_of(b"".join(out))) == {TEXT: "a\udc00b"}
