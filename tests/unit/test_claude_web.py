"""claude.ai web app adapter: the Messages stream with web-app extras."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.wire.protocols.anthropic_messages import AnthropicMessagesAdapter
from retimer.wire.protocols.base import Channel, Event, RequestShape
from retimer.wire.protocols.claude_web import ClaudeWebAdapter
from tests.support.adapter_checks import (
    channel_texts,
    check_integrity,
    event_key,
    parse,
    random_pieces,
    rechunk,
    resplit,
    sse_events,
)
from tests.support.fixture_streams import STREAMS_DIR, load

TEXT, REASONING, TOOL_ARGS = Channel.TEXT, Channel.REASONING, Channel.TOOL_ARGS
SSE = "text/event-stream; charset=utf-8"
FIXTURES = sorted(p.relative_to(STREAMS_DIR).as_posix() for p in STREAMS_DIR.glob("claude-web/*.sse"))
CONV = "/api/organizations/4f1c2d3e-0000-4000-8000-000000000001/chat_conversations/9a8b7c6d-1111-4222-8333-444455556666"
HEAD = "claude-web/claudeai-completion-head-excerpt-tool-use.sse"
HI = "claude-web/claudeai-completion-hi-sonnet46-from-doc.sse"
TAIL = "claude-web/claudeai-completion-tail-excerpt-citations-ping-comment.sse"


def shape(path: str, method: str = "POST") -> RequestShape:
    return RequestShape(method=method, host="claude.ai", path=path, headers={}, body=b"{}")


def sse(obj: dict[str, Any], name: str | None = None) -> bytes:
    return f"event: {name or obj['type']}\ndata: {json.dumps(obj)}\n\n".encode()


def block_start(index: int, kind: str) -> bytes:
    return sse({"type": "content_block_start", "index": index,
                "content_block": {"start_timestamp": "2026-04-30T13:58:01Z", "type": kind}})


def delta(index: int, kind: str, field: str, value: Any) -> bytes:
    return sse({"type": "content_block_delta", "index": index, "delta": {"type": kind, field: value}})


def events_of(data: bytes) -> list[Event]:
    return parse(ClaudeWebAdapter, [data])


# -- accepts -----------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "ctype", "expected"), [
    ("POST", CONV + "/completion", SSE, True),
    ("POST", CONV + "/retry_completion", "text/event-stream", True),
    ("post", CONV + "/completion/?rendering_mode=messages", SSE, True),
    ("POST", "/api/organizations/o/chat_conversations/c/completion", SSE, True),
    ("GET", CONV + "/completion", SSE, False),
    ("POST", CONV + "/completion", "application/json", False),
    ("POST", CONV + "/title", SSE, False),
    ("POST", CONV, SSE, False),
    ("POST", "/api/organizations//chat_conversations/c/completion", SSE, False),
    ("POST", "/api/organizations/o/chat_conversations//completion", SSE, False),
    ("POST", "/api/organizations/o/projects/c/completion", SSE, False),
    ("POST", "/api/append_message?next=/chat_conversations/c/completion", SSE, False),
    ("POST", "/v1/messages", SSE, False),
    ("POST", "/v1/complete", SSE, False),
])
def test_accepts(method: str, path: str, ctype: str, expected: bool) -> None:
    assert ClaudeWebAdapter.accepts(shape(path, method), ctype) is expected


@pytest.mark.parametrize("endpoint", ["/completion", "/retry_completion"])
def test_messages_adapter_does_not_take_web_paths(endpoint: str) -> None:
    """Why a subclass is needed at all: the Messages adapter wants paths ending in /messages."""
    assert not AnthropicMessagesAdapter.accepts(shape(CONV + endpoint), SSE)
    assert ClaudeWebAdapter.name == "claude-web" and issubclass(ClaudeWebAdapter, AnthropicMessagesAdapter)


# -- recorded streams --------------------------------------------------------------------
def reference(data: bytes) -> dict[Channel, str]:
    """A plain reading: strings of text/thinking/input_json deltas, except in tool_result blocks."""
    fields = {"text_delta": ("text", TEXT), "thinking_delta": ("thinking", REASONING),
              "input_json_delta": ("partial_json", TOOL_ARGS)}
    kinds: dict[int, str] = {}
    out: dict[Channel, str] = {}
    for ev in sse_events(data):
        if not ev.complete or not ev.data:
            continue
        obj = json.loads(ev.data)
        if obj["type"] == "content_block_start":
            kinds[obj["index"]] = obj["content_block"]["type"]
        if obj["type"] == "content_block_delta" and obj["delta"]["type"] in fields:
            if kinds.get(obj["index"]) == "tool_result":
                continue
            key, channel = fields[obj["delta"]["type"]]
            if obj["delta"][key]:
                out[channel] = out.get(channel, "") + obj["delta"][key]
    return out


def test_fixtures_present() -> None:
    assert FIXTURES == sorted([HEAD, HI, TAIL])


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_channels_and_raw(name: str) -> None:
    data = load(name)
    events = events_of(data)
    assert b"".join(e.raw for e in events) == data
    assert channel_texts(events) == reference(data)
    assert all(e.splittable for e in events if e.texts)


def test_fixture_known_texts() -> None:
    assert channel_texts(events_of(load(HI))) == {TEXT: " Hi! How can I help you today?"}
    head = channel_texts(events_of(load(HEAD)))
    assert head == {TOOL_ARGS: '{"latitude":30.5728,"longitude":104.0668,"location_name":"\\u6210\\u90fd"}'}
    assert json.loads(head[TOOL_ARGS])["location_name"] == "成都"
    tail = channel_texts(events_of(load(TAIL)))
    assert set(tail) == {TEXT} and tail[TEXT].startswith("**🌦️ 成都明天") and tail[TEXT].endswith("建议尽早预订！")


def _kind(event: Event) -> str:
    [ev] = sse_events(event.raw)
    if ev.data is None:
        return "comment" if ev.comments else "empty"
    obj = json.loads(ev.data)
    return obj["delta"]["type"] if obj["type"] == "content_block_delta" else obj["type"]


def test_web_extras_pass_unchanged() -> None:
    passed = {_kind(e): e for name in FIXTURES for e in events_of(load(name)) if not e.texts}
    assert {"message_limit", "citation_start_delta", "citation_end_delta", "message_delta", "comment",
            "content_block_start", "content_block_stop", "message_start", "message_stop"} <= set(passed)
    # the tool_result's content streamed as input_json_delta: tool output, passed as it came
    tool_result = [e for e in events_of(load(HEAD)) if b'"index":1,"delta":{"type":"input_json_delta"' in e.raw]
    assert len(tool_result) == 1 and not tool_result[0].texts and b"Error fetching weather" in tool_result[0].raw
    # the keep-alive comment is an event of its own between two text deltas
    events = events_of(load(TAIL))
    [at] = [i for i, e in enumerate(events) if b": ping" in e.raw]
    assert events[at].raw == b": ping - 2026-04-30 13:58:28.853253\n\n" and not events[at].texts
    assert events[at - 1].splittable and events[at + 1].splittable


def test_split_keeps_comment_preamble_first() -> None:
    raw = b": ping - 2026-04-30 13:58:28.853253\n" + delta(12, "text_delta", "text", "雨，冷空气影响时伴有")
    [event] = events_of(raw)
    assert event.splittable
    out = ClaudeWebAdapter().split(event, ["雨，冷空气", "影响时伴有"])
    assert out[0].startswith(b": ping - 2026-04-30 13:58:28.853253\nevent: content_block_delta\n")
    assert b"ping" not in out[1]
    assert [e.texts for e in events_of(b"".join(out))] == [((TEXT, "雨，冷空气"),), ((TEXT, "影响时伴有"),)]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
@pytest.mark.parametrize("name", FIXTURES)
def test_property_rechunking(name: str, data: st.DataObject) -> None:
    raw = load(name)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=80), label="cuts")
    events = parse(ClaudeWebAdapter, rechunk(raw, cuts))
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
@pytest.mark.parametrize("name", FIXTURES)
def test_property_split_integrity(name: str, rnd: random.Random, data: st.DataObject) -> None:
    raw = load(name)
    output, records = resplit(ClaudeWebAdapter, raw,
                              lambda e: random_pieces(e.text, rnd) if rnd.random() < 0.8 else None)
    cuts = data.draw(st.lists(st.integers(0, len(output)), max_size=40), label="cuts")
    check_integrity(ClaudeWebAdapter, raw, records, output, cuts)
    assert reference(output) == reference(raw)
    for r in records:
        if r.pieces is None:
            continue
        [orig_sse] = sse_events(r.event.raw)
        orig = json.loads(orig_sse.data or "")
        for piece, raw_piece in zip(r.pieces, r.out):
            [ev] = sse_events(raw_piece)
            assert ev.event == "content_block_delta" and ev.newline == orig_sse.newline
            obj = json.loads(ev.data or "")
            assert obj == {**orig, "delta": {**orig["delta"], r.event.payload.path[-1]: piece}}
            assert _validates(obj)


# -- targeted ----------------------------------------------------------------------------
def test_block_types_decide_tool_result_and_reset_per_message() -> None:
    result = delta(1, "input_json_delta", "partial_json", '[{"type":"text","text":"42"}]')
    tool_args = delta(0, "input_json_delta", "partial_json", '{"q":"x"}')
    data = (sse({"type": "message_start", "message": {}}) + block_start(0, "tool_use") + tool_args
            + block_start(1, "tool_result") + result + block_start(2, "text")
            + delta(2, "text_delta", "text", "Done.") + sse({"type": "message_start", "message": {}}) + result)
    events = events_of(data)
    assert [e.texts for e in events if e.texts] == [((TOOL_ARGS, '{"q":"x"}'),), ((TEXT, "Done."),),
                                                    ((TOOL_ARGS, '[{"type":"text","text":"42"}]'),)]
    assert [e.raw for e in events if b"42" in e.raw and not e.texts] == [result]
    # without a block start (an excerpt) a delta is read as the Messages adapter reads it
    assert events_of(result)[0].texts == ((TOOL_ARGS, '[{"type":"text","text":"42"}]'),)


def test_thinking_and_text_split_like_messages() -> None:
    for kind, field, channel in [("thinking_delta", "thinking", REASONING), ("text_delta", "text", TEXT)]:
        raw = block_start(0, kind.split("_")[0]) + delta(0, kind, field, "Hello there")
        event = events_of(raw)[-1]
        assert event.texts == ((channel, "Hello there"),)
        out = ClaudeWebAdapter().split(event, ["Hel", "lo there"])
        assert [e.texts for e in events_of(b"".join(out))] == [((channel, "Hel"),), ((channel, "lo there"),)]


@pytest.mark.parametrize("raw", [
    b": ping - 2026-04-30 13:58:28.853253\n\n",
    sse({"type": "message_limit", "message_limit": {"type": "within_limit", "windows": {}}}),
    delta(12, "citation_start_delta", "citation", {"uuid": "u", "title": "t"}),
    delta(12, "citation_end_delta", "citation_uuid", "u"),
    block_start(3, "tool_result") + delta(3, "input_json_delta", "partial_json", "[]"),
    delta(0, "text_delta", "text", ""),
    delta(0, "text_delta", "text", 7),
    b"event: content_block_delta\ndata: {not json\n\n",
    b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
    b"\"delta\":{\"type\":\"text_delta\",\"text\":\"\xff\"}}\n\n",
    b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n",
    delta(0, "text_delta", "text", "no blank line")[:-1],
    block_start(0, "text")[:-2],
])
def test_non_token_and_malformed_pass_through(raw: bytes) -> None:
    events = events_of(raw)
    assert b"".join(e.raw for e in events) == raw
    assert all(not e.texts for e in events)
