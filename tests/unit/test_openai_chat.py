"""OpenAI Chat Completions adapter: channels, splitting, integrity on every compatible provider."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.wire.protocols import ADAPTERS, find_adapter
from retimer.wire.protocols.base import Channel, Event, RequestShape
from retimer.wire.protocols.openai_chat import OpenAIChatAdapter
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
from tests.support.fixture_streams import OPENAI_CHAT_FIXTURES, load
from tests.support.sdk_views import openai_view

TEXT, REASONING, TOOL_ARGS = Channel.TEXT, Channel.REASONING, Channel.TOOL_ARGS
SSE = "text/event-stream"


def shape(path: str, method: str = "POST") -> RequestShape:
    return RequestShape(method=method, host="api.example.com", path=path, headers={}, body=b"{}")


def chunk(delta: dict[str, Any] | None = None, *, choice: dict[str, Any] | None = None,
          newline: str = "\n", event: str | None = None, **top: Any) -> bytes:
    """One chat.completion.chunk event."""
    ch = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": None, **(choice or {})}
    obj = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
           "choices": [ch], **top}
    head = f"event: {event}{newline}" if event else ""
    return f"{head}data: {json.dumps(obj)}{newline}{newline}".encode()


def events_of(data: bytes) -> list[Event]:
    return parse(OpenAIChatAdapter, [data])


def only(data: bytes) -> Event:
    [event] = events_of(data)
    return event


def pieces_json(out: list[bytes]) -> list[dict[str, Any]]:
    objs = []
    for raw in out:
        [ev] = sse_events(raw)
        objs.append(json.loads(ev.data or ""))
    return objs


# -- accepts / registry ------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "ctype", "expected"), [
    ("POST", "/v1/chat/completions", SSE, True),
    ("post", "/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21", SSE, True),
    ("POST", "/api/v1/chat/completions", "text/event-stream; charset=utf-8", True),
    ("POST", "/v1/chat/completions/", "Text/Event-Stream;charset=UTF-8", True),
    ("POST", "/v1/chat/completions", "application/json", False),
    ("GET", "/v1/chat/completions", SSE, False),
    ("POST", "/v1/completions", SSE, False),
    ("POST", "/v1/responses", SSE, False),
    ("POST", "/v1/chat/completions/abc/messages", SSE, False),
    ("POST", "/v1/messages?x=/chat/completions", SSE, False),
])
def test_accepts(method: str, path: str, ctype: str, expected: bool) -> None:
    assert OpenAIChatAdapter.accepts(shape(path, method), ctype) is expected


def test_registry_finds_openai_chat() -> None:
    assert OpenAIChatAdapter in ADAPTERS and OpenAIChatAdapter.name == "openai-chat"
    assert find_adapter(shape("/v1/chat/completions"), "text/event-stream; charset=utf-8") is OpenAIChatAdapter
    assert find_adapter(shape("/v1/chat/completions"), "application/json") is None
    assert find_adapter(shape("/v1/embeddings"), SSE) is None


# -- channels on recorded streams ---------------------------------------------------------
def _delta_reference(data: bytes) -> dict[Channel, str]:
    """A plain reading of the wire: every string token field of every delta, mirrors once."""
    out: dict[Channel, str] = {}
    fields = {"content": TEXT, "refusal": TEXT, "reasoning_content": REASONING, "reasoning": REASONING}
    for ev in sse_events(data):
        if not ev.complete or not ev.data or ev.data == "[DONE]":
            continue
        for choice in json.loads(ev.data).get("choices") or []:
            delta = choice.get("delta") or {}
            seen: set[str] = set()
            for key, channel in fields.items():
                value = delta.get(key)
                if isinstance(value, str) and value and not (key == "reasoning" and value in seen):
                    out[channel] = out.get(channel, "") + value
                    seen.add(value)
                elif isinstance(value, list):
                    for part in value:
                        if part.get("type") == "text":
                            out[channel] = out.get(channel, "") + part["text"]
                        elif part.get("type") == "thinking":
                            out[REASONING] = out.get(REASONING, "") + "".join(t["text"] for t in part["thinking"])
            for call in delta.get("tool_calls") or []:
                args = (call.get("function") or {}).get("arguments")
                if args:
                    out[TOOL_ARGS] = out.get(TOOL_ARGS, "") + args
    return out


@pytest.mark.parametrize("name", OPENAI_CHAT_FIXTURES)
def test_fixture_channels_and_raw(name: str) -> None:
    data = load(name)
    events = events_of(data)
    assert b"".join(e.raw for e in events) == data
    texts = channel_texts(events)
    assert texts == _delta_reference(data)
    assert texts, "every chat fixture carries some tokens"
    for event in events:
        if event.texts and not event.splittable:
            assert event.atomic or len(event.texts) > 1


@pytest.mark.parametrize(("name", "expected"), [
    ("openai-chat/gpt-moderation-field-stream.sse", {TEXT: "Paris."}),
    ("openai-chat/gpt4o-refusal-deltas.sse", {TEXT: "I'm sorry, I can't assist with that request."}),
    ("misc/snowflake-cortex-chat.sse", {TEXT: "4"}),
    ("openrouter/openrouter-claude-reasoning-details.sse",
     {REASONING: "This is a simple arithmetic question. 2+2 equals 4.", TEXT: "2 + 2 = 4"}),
])
def test_fixture_known_texts(name: str, expected: dict[Channel, str]) -> None:
    assert channel_texts(events_of(load(name))) == expected


def test_fixture_channel_kinds() -> None:
    kinds = {name: set(channel_texts(events_of(load(name)))) for name in OPENAI_CHAT_FIXTURES}
    assert kinds["deepseek/deepseek-reasoner-reasoning-content.sse"] == {TEXT, REASONING}
    assert kinds["misc/zai-glm-thinking-reasoning-content.sse"] == {TEXT, REASONING}
    assert kinds["groq/groq-gpt-oss-midstream-event-error.sse"] == {REASONING}
    assert kinds["mistral/mistral-magistral-thinking-chunks.sse"] == {TEXT, REASONING}
    assert TOOL_ARGS in kinds["openai-chat/gpt4o-parallel-tool-calls-usage.sse"]
    assert TOOL_ARGS in kinds["azure-openai/azure-chat-tool-call-content-filter.sse"]


def test_fixture_special_events_pass_through() -> None:
    groq = events_of(load("groq/groq-gpt-oss-midstream-event-error.sse"))
    assert groq[-1].raw.startswith(b"event: error\n") and not groq[-1].texts
    orouter = events_of(load("openrouter/openrouter-midstream-error-chunk.sse"))
    assert orouter[0].raw.startswith(b": OPENROUTER PROCESSING") and not orouter[0].texts
    assert orouter[-1].raw == b"data: [DONE]\n\n" and not orouter[-1].texts
    mistral = events_of(load("mistral/sk-mistral-function-call.sse"))
    assert mistral[-1].raw == b"data: [DONE]" and not mistral[-1].texts  # no newline at EOF
    [call] = [e for e in mistral if e.texts]
    assert call.texts[0][0] == TOOL_ARGS and call.atomic and not call.splittable  # no tool index
    magistral = [e for e in events_of(load("mistral/mistral-magistral-thinking-chunks.sse")) if e.atomic]
    assert magistral and all(e.texts and not e.splittable for e in magistral)


# -- properties on recorded streams -------------------------------------------------------
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
@pytest.mark.parametrize("name", OPENAI_CHAT_FIXTURES)
def test_property_rechunking(name: str, data: st.DataObject) -> None:
    raw = load(name)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=80), label="cuts")
    events = parse(OpenAIChatAdapter, rechunk(raw, cuts))
    assert [event_key(e) for e in events] == [event_key(e) for e in events_of(raw)]
    assert b"".join(e.raw for e in events) == raw


def _check_piece_shapes(event: Event, out: list[bytes]) -> None:
    """Each piece is one valid chunk an OpenAI-style client can merge into the original."""
    [orig_sse] = sse_events(event.raw)
    orig = json.loads(orig_sse.data or "")
    target = event.payload
    choice, target_key = target.path[1], target.path[3]
    mirror_keys = [m[3] for m in target.mirrors if len(m) == 4]
    orig_choice = orig["choices"][choice]
    objs = pieces_json(out)
    for i, (raw, obj) in enumerate(zip(out, objs)):
        first, last = i == 0, i == len(objs) - 1
        [ev] = sse_events(raw[len(orig_sse.preamble):] if first else raw)
        assert ev.event == orig_sse.event and ev.newline == orig_sse.newline and ev.complete
        assert [k for k in obj] == [k for k in orig]  # key order kept
        for key in ("id", "object", "created", "model", "system_fingerprint", "obfuscation", "x_groq"):
            assert obj.get(key) == orig.get(key)
        if "usage" in orig:
            assert obj["usage"] == (orig["usage"] if last else None)
        choices = obj["choices"]
        if not last:
            assert len(choices) == 1
        mine = next(c for c in choices if c.get("index") == orig_choice.get("index"))
        assert mine["index"] == orig_choice["index"]
        if "finish_reason" in orig_choice:
            assert mine["finish_reason"] == (orig_choice["finish_reason"] if last else None)
        if "logprobs" in orig_choice:
            assert mine["logprobs"] == (orig_choice["logprobs"] if last else None)
        if last:
            assert {k: v for k, v in mine.items() if k != "delta"} == {
                k: v for k, v in orig_choice.items() if k != "delta"}
        delta, orig_delta = mine["delta"], orig_choice["delta"]
        if first:
            assert list(delta) == list(orig_delta)
        else:
            assert set(delta) <= {target_key, *mirror_keys, "reasoning_details"}
            assert "role" not in delta
        if target_key == "tool_calls":
            tool = target.path[4]
            orig_call = orig_delta["tool_calls"][tool]
            call = delta["tool_calls"][tool if first else 0]
            assert call["index"] == orig_call["index"]
            if first:
                assert {k: v for k, v in call.items() if k != "function"} == {
                    k: v for k, v in orig_call.items() if k != "function"}
                assert call["function"].get("name") == orig_call["function"].get("name")
            else:
                assert set(call) == {"index", "function"} and set(call["function"]) == {"arguments"}


def _validates(obj: dict[str, Any]) -> bool:
    from openai.types.chat import ChatCompletionChunk
    try:
        ChatCompletionChunk.model_validate(obj)
    except Exception:
        return False
    return True


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False), data=st.data())
@pytest.mark.parametrize("name", OPENAI_CHAT_FIXTURES)
def test_property_split_integrity(name: str, rnd: random.Random, data: st.DataObject) -> None:
    raw = load(name)
    output, records = resplit(OpenAIChatAdapter, raw,
                              lambda e: random_pieces(e.text, rnd) if rnd.random() < 0.8 else None)
    cuts = data.draw(st.lists(st.integers(0, len(output)), max_size=40), label="cuts")
    check_integrity(OpenAIChatAdapter, raw, records, output, cuts)
    for r in records:
        if r.pieces is None:
            continue
        assert len(r.out) == len(r.pieces)
        if len(r.pieces) == 1:
            assert r.out == [r.event.raw]
            continue
        _check_piece_shapes(r.event, r.out)
        [orig_sse] = sse_events(r.event.raw)
        if _validates(json.loads(orig_sse.data or "")):
            assert all(_validates(obj) for obj in pieces_json(r.out))


# -- what the official SDK builds from the stream ----------------------------------------
# The SDK itself cannot read these two originals (OpenRouter annotations carry no `index`;
# this Mistral tool call has none either), so there is nothing to compare.
_SDK_UNREADABLE = {"openrouter/openrouter-web-search-annotations.sse", "mistral/sk-mistral-function-call.sse"}


@pytest.mark.parametrize("how", ["halves", "characters"])
@pytest.mark.parametrize("name", [n for n in OPENAI_CHAT_FIXTURES if n not in _SDK_UNREADABLE])
def test_sdk_accumulates_same_completion(name: str, how: str) -> None:
    pytest.importorskip("openai")
    raw = load(name)
    output, records = resplit(OpenAIChatAdapter, raw, lambda e: two_pieces(e.text) if how == "halves" else list(e.text))
    assert all(len(r.pieces or ()) > 1 for r in records if r.event.splittable and len(r.event.text) > 1)
    assert openai_view(output) == openai_view(raw)


def test_sdk_unreadable_list_is_still_true() -> None:
    for name in _SDK_UNREADABLE:
        with pytest.raises(Exception):  # noqa: B017 - whatever the SDK raises on these
            openai_view(load(name))


# -- targeted placement -----------------------------------------------------------------
def test_role_and_extra_delta_fields_only_on_first() -> None:
    event = only(chunk({"role": "assistant", "content": "Hello world", "refusal": None}))
    a, b, c = pieces_json(OpenAIChatAdapter().split(event, ["Hel", "lo w", "orld"]))
    assert a["choices"][0]["delta"] == {"role": "assistant", "content": "Hel", "refusal": None}
    assert b["choices"][0]["delta"] == {"content": "lo w"}
    assert c["choices"][0]["delta"] == {"content": "orld"}


def test_finish_reason_usage_logprobs_on_last() -> None:
    logprobs = {"content": [{"token": "Hi", "logprob": -0.1}]}
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    raw = chunk({"content": "Hi there"}, choice={"finish_reason": "stop", "logprobs": logprobs,
                                                  "content_filter_results": {"hate": {"filtered": False}}},
                usage=usage)
    a, b = pieces_json(OpenAIChatAdapter().split(only(raw), ["Hi", " there"]))
    assert a["usage"] is None and b["usage"] == usage
    assert a["choices"][0]["finish_reason"] is None and b["choices"][0]["finish_reason"] == "stop"
    assert a["choices"][0]["logprobs"] is None and b["choices"][0]["logprobs"] == logprobs
    assert "content_filter_results" not in a["choices"][0]
    assert b["choices"][0]["content_filter_results"] == {"hate": {"filtered": False}}


def test_usage_key_absent_stays_absent() -> None:
    a, b = pieces_json(OpenAIChatAdapter().split(only(chunk({"content": "ab"})), ["a", "b"]))
    assert "usage" not in a and "usage" not in b


def test_tool_call_header_on_first_arguments_on_each() -> None:
    call = {"index": 1, "id": "call_9", "type": "function", "function": {"name": "get", "arguments": '{"a": 1}'}}
    event = only(chunk({"tool_calls": [call]}))
    assert event.texts == ((TOOL_ARGS, '{"a": 1}'),)
    a, b, c = pieces_json(OpenAIChatAdapter().split(event, ['{"a', '": ', "1}"]))
    assert a["choices"][0]["delta"]["tool_calls"] == [{**call, "function": {"name": "get", "arguments": '{"a'}}]
    assert b["choices"][0]["delta"] == {"tool_calls": [{"index": 1, "function": {"arguments": '": '}}]}
    assert c["choices"][0]["delta"] == {"tool_calls": [{"index": 1, "function": {"arguments": "1}"}}]}


def test_top_level_fields_copied_and_event_name_newline_kept() -> None:
    raw = chunk({"content": "xy"}, newline="\r\n", event="chunk", obfuscation="abc", x_groq={"id": "req_1"})
    out = OpenAIChatAdapter().split(only(raw), ["x", "y"])
    for piece in out:
        [ev] = sse_events(piece)
        assert ev.event == "chunk" and ev.newline == "\r\n" and piece.endswith(b"\r\n\r\n")
        obj = json.loads(ev.data or "")
        assert obj["obfuscation"] == "abc" and obj["x_groq"] == {"id": "req_1"}


def test_preamble_comments_on_first_piece_and_id_on_last() -> None:
    raw = b": keep-alive\n" + chunk({"content": "ab"}).replace(b"data:", b"id: 5\ndata:", 1)
    event = only(raw)
    first, last = OpenAIChatAdapter().split(event, ["a", "b"])
    assert first.startswith(b": keep-alive\n") and b"id:" not in first
    assert sse_events(last)[0].id == "5"


def test_single_piece_returns_raw_bytes() -> None:
    raw = chunk({"content": "abc"}).replace(b'":', b'" :')  # odd spacing must survive
    event = only(raw)
    assert OpenAIChatAdapter().split(event, ["abc"]) == [raw]


def test_split_preconditions() -> None:
    adapter = OpenAIChatAdapter()
    with pytest.raises(ValueError):
        adapter.split(only(chunk({"content": "abc"})), ["ab", "x"])
    with pytest.raises(ValueError):
        adapter.split(only(b"data: [DONE]\n\n"), ["x"])


def test_reasoning_details_mirror_counted_once_and_split_everywhere() -> None:
    delta = {"role": "assistant", "content": "", "reasoning": "Think hard",
             "reasoning_details": [{"type": "reasoning.text", "text": "Think hard", "format": "f", "index": 0}]}
    event = only(chunk(delta))
    assert event.texts == ((REASONING, "Think hard"),) and event.splittable
    a, b = pieces_json(OpenAIChatAdapter().split(event, ["Think", " hard"]))
    assert a["choices"][0]["delta"]["reasoning"] == "Think"
    assert a["choices"][0]["delta"]["reasoning_details"][0]["text"] == "Think"
    assert a["choices"][0]["delta"]["content"] == ""
    assert b["choices"][0]["delta"] == {"reasoning": " hard", "reasoning_details": [
        {"type": "reasoning.text", "text": " hard", "format": "f", "index": 0}]}


def test_reasoning_details_that_differ_are_counted_and_not_split() -> None:
    delta = {"reasoning": "A", "reasoning_details": [{"type": "reasoning.text", "text": "B", "index": 0}]}
    event = only(chunk(delta))
    assert event.texts == ((REASONING, "A"), (REASONING, "B")) and not event.splittable


def test_reasoning_and_reasoning_content_mirror() -> None:
    event = only(chunk({"reasoning_content": "hmm ok", "reasoning": "hmm ok"}))
    assert event.texts == ((REASONING, "hmm ok"),)
    a, b = pieces_json(OpenAIChatAdapter().split(event, ["hmm", " ok"]))
    assert b["choices"][0]["delta"] == {"reasoning_content": " ok", "reasoning": " ok"}


@pytest.mark.parametrize(("delta", "channel"), [
    ({"content": "a"}, TEXT), ({"refusal": "a"}, TEXT), ({"reasoning_content": "a"}, REASONING),
    ({"reasoning": "a", "channel": "analysis"}, REASONING),
    ({"content": None, "reasoning_content": "a"}, REASONING),
    ({"content": "", "refusal": "", "reasoning": "a"}, REASONING),
])
def test_channel_of_each_field(delta: dict[str, Any], channel: Channel) -> None:
    event = only(chunk(delta))
    assert event.texts == ((channel, "a"),) and event.splittable


def test_several_strings_make_an_event_unsplittable() -> None:
    both = only(chunk({"content": "a", "reasoning_content": "b"}))
    assert both.texts == ((TEXT, "a"), (REASONING, "b")) and not both.splittable
    obj = {"id": "x", "choices": [{"index": 0, "delta": {"content": "a"}}, {"index": 1, "delta": {"content": "b"}}]}
    n2 = only(f"data: {json.dumps(obj)}\n\n".encode())
    assert n2.texts == ((TEXT, "a"), (TEXT, "b")) and not n2.splittable


def test_other_choices_ride_on_the_last_piece() -> None:
    obj = {"id": "x", "choices": [
        {"index": 0, "delta": {"content": ""}, "finish_reason": "stop"},
        {"index": 1, "delta": {"content": "ab"}, "finish_reason": None}]}
    event = only(f"data: {json.dumps(obj)}\n\n".encode())
    assert event.splittable
    a, b = pieces_json(OpenAIChatAdapter().split(event, ["a", "b"]))
    assert a["choices"] == [{"index": 1, "delta": {"content": "a"}, "finish_reason": None}]
    assert b["choices"] == [obj["choices"][0], {"index": 1, "delta": {"content": "b"}, "finish_reason": None}]


def test_list_content_counted_not_splittable() -> None:
    content = [{"type": "thinking", "thinking": [{"type": "text", "text": "hm"}]}, {"type": "text", "text": "Hi"}]
    event = only(chunk({"content": content}))
    assert event.texts == ((REASONING, "hm"), (TEXT, "Hi"))
    single = only(chunk({"content": [{"type": "text", "text": "Hi"}]}))
    assert single.texts == ((TEXT, "Hi"),) and single.atomic and not single.splittable


def test_error_chunk_is_counted_but_not_split() -> None:
    event = only(chunk({"content": "partial"}, error={"code": 400, "message": "Token limit reached"}))
    assert event.texts == ((TEXT, "partial"),) and not event.splittable


@pytest.mark.parametrize("raw", [
    b"data: [DONE]\n\n",
    b"data: not json\n\n",
    b"data: {\"choices\": \n\n",
    b"data: [1, 2]\n\n",
    b"data: \"text\"\n\n",
    b"data: {\"choices\": {\"delta\": {\"content\": \"x\"}}}\n\n",
    b"data: {\"choices\": [{\"delta\": \"x\"}]}\n\n",
    b"data: {\"choices\": [\"x\"]}\n\n",
    b"data: {\"choices\": [{\"delta\": {\"content\": 5, \"tool_calls\": [1, {\"function\": 2}]}}]}\n\n",
    b"data: {\"choices\": [{\"delta\": {\"content\": \"\\xff\"}}]}\n\n".replace(b"\\xff", b"\xff"),
    b"data: " + b"[" * 100000 + b"\n\n",
    b"event: error\ndata: {\"error\": {\"message\": \"boom\"}}\n\n",
    b": just a comment\n\n",
    b"\n\n\n",
    b"data: {\"choices\": [{\"delta\": {\"content\": \"cut off\"}}]}",
])
def test_malformed_passes_through_unchanged(raw: bytes) -> None:
    events = events_of(raw)
    assert b"".join(e.raw for e in events) == raw
    assert all(not e.texts and not e.splittable for e in events)


def test_lone_surrogate_text_still_splits_into_valid_utf8() -> None:
    event = only(b'data: {"choices":[{"index":0,"delta":{"content":"a\\ud83db"}}]}\n\n')
    out = OpenAIChatAdapter().split(event, ["a", "\ud83db"])
    for piece in out:
        piece.decode("utf-8")
    assert channel_texts(events_of(b"".join(out))) == {TEXT: "a\ud83db"}


def test_split_lazily_gives_the_bytes_of_split_one_piece_at_a_time() -> None:
    text = "".join(f" w{i}" for i in range(1000))
    raw = chunk({"content": text}, choice={"finish_reason": "stop"}, newline="\r\n",
                usage={"prompt_tokens": 1, "completion_tokens": 1000, "total_tokens": 1001})
    pieces = [f" w{i}" for i in range(1000)]
    made: list[str] = []

    class Counting(OpenAIChatAdapter):
        template_pieces = False  # each piece through `piece`, to count them

        def piece(self, target: Any, piece: str, *, first: bool, last: bool) -> dict[str, Any]:
            made.append(piece)
            return super().piece(target, piece, first=first, last=last)

    adapter = Counting()
    lazy = adapter.split_lazily(only(raw), pieces)
    assert made == []  # nothing serialised before it is asked for
    first_two = [next(lazy), next(lazy)]
    assert made == pieces[:2]
    assert first_two + list(lazy) == OpenAIChatAdapter().split(only(raw), pieces)
