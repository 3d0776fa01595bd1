"""DeepSeek web and Z.ai web adapters: channels, sticky patch paths, splitting, integrity."""

from __future__ import annotations

import copy
import json
import random
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.timing.pacer import StreamPacer
from retimer.wire.protocols.base import Adapter, Channel, RequestShape
from retimer.wire.protocols.deepseek_web import DeepSeekWebAdapter as DS
from retimer.wire.protocols.openai_chat import OpenAIChatAdapter
from retimer.wire.protocols.zai_web import ZaiWebAdapter as ZAI
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
from tests.support.fixture_streams import load

TEXT, REASONING = Channel.TEXT, Channel.REASONING
SSE = "text/event-stream"
DS_FIXTURE = "deepseek/chat-deepseek-com-web-api-v0-completion.sse"
ZAI_FIXTURE = "misc/chat-z-ai-web-api-v2-completions.sse"


def shape(path: str, host: str = "chat.deepseek.com", method: str = "POST") -> RequestShape:
    return RequestShape(method=method, host=host, path=path, headers={}, body=b"{}")


def data_events(*objs: Any) -> bytes:
    return b"".join(f"data: {json.dumps(o, ensure_ascii=False)}\n\n".encode() for o in objs)


def named(name: str, obj: Any) -> bytes:
    return f"event: {name}\ndata: {json.dumps(obj)}\n\n".encode()


# Shapes seen in other DeepSeek captures: a BATCH creating the fragment and an explicit index
# path (late 2025), search rounds with fragments of other types, the legacy field paths.
DS_BATCH = named("ready", {"request_message_id": 1, "response_message_id": 2}) + data_events(
    {"v": {"response": {"message_id": 2, "status": "WIP", "fragments": []}}},
    {"v": [{"v": False, "p": "has_pending_fragment"},
           {"v": [{"id": 1, "type": "RESPONSE", "content": "你好", "references": []}],
            "p": "fragments", "o": "APPEND"}], "p": "response", "o": "BATCH"},
    {"v": "！", "p": "response/fragments/0/content", "o": "APPEND"},
    {"v": "😊 Hello"}, {"v": " there,"}, {"v": " friend."},
    {"v": [{"v": "FINISHED", "p": "status"}, {"v": 115, "p": "accumulated_token_usage"}],
     "p": "response", "o": "BATCH"},
) + named("finish", {}) + named("close", {"click_behavior": "none"})
DS_SEARCH = data_events(
    {"v": {"response": {"fragments": [{"id": 1, "type": "THINK", "content": "Let"}]}}},
    {"p": "response/fragments/-1/content", "o": "APPEND", "v": " me search"},
    {"v": " first."},
    {"p": "response/fragments", "o": "APPEND", "v": [{"id": 2, "type": "TOOL_SEARCH", "content": ""}]},
    {"p": "response/fragments/-1/content", "o": "APPEND", "v": "query words"},
    {"v": " more"},
    {"p": "response/fragments/-1/results", "o": "SET", "v": [{"url": "https://a.example/1"}]},
    {"p": "response", "o": "BATCH", "v": [{"p": "fragments", "o": "APPEND",
                                           "v": [{"id": 3, "type": "THINK", "content": "Found"}]}]},
    {"p": "response/fragments/-1/content", "o": "APPEND", "v": " it"},
    {"v": "."},
    {"p": "response/fragments/2/content", "v": " (and more)"},  # by index; op still APPEND
    {"p": "response/fragments", "o": "APPEND", "v": [{"id": 4, "type": "RESPONSE", "content": ""}]},
    {"p": "response/fragments/-1/content", "v": "The answer"},
    {"v": " is 42."},
    {"p": "response/status", "o": "SET", "v": "FINISHED"},
)
DS_LEGACY = data_events(
    {"v": {"response": {"message_id": 2, "thinking_content": None, "content": "", "status": "WIP"}}},
    {"v": "Hmm", "p": "response/thinking_content", "o": "APPEND"},
    {"v": ", fine"},
    {"p": "response/thinking_elapsed_secs", "o": "SET", "v": 3},
    {"v": "Hi", "p": "response/content", "o": "APPEND"},
    {"v": " there!"},
    {"p": "response/status", "o": "SET", "v": "FINISHED"},
)
DS_NO_OP = data_events(  # no "o" ever given: strings on the content paths append
    {"p": "response/thinking_content", "v": "Think"}, {"v": "ing"},
    {"p": "response/content", "v": "Done"}, {"v": " now."},
)
DS_STREAMS = {"fixture": load(DS_FIXTURE), "batch": DS_BATCH, "search": DS_SEARCH,
              "legacy": DS_LEGACY, "no-op": DS_NO_OP}


# -- a reference client: applies the patches to a full document ---------------------------
def _ref_apply(doc: Any, path: str, op: str | None, value: Any) -> Any:
    keys: list[Any] = [int(k) if re.fullmatch(r"-?\d+", k) else k for k in path.split("/")] if path else []
    if op is None:
        on_text = bool(keys) and keys[-1] in ("content", "thinking_content")
        op = "APPEND" if isinstance(value, str) and on_text else "SET"
    if op == "BATCH":
        for sub in value:
            doc = _ref_apply(doc, "/".join(x for x in (path, sub.get("p", "")) if x), sub.get("o"), sub["v"])
        return doc
    if not keys:
        return copy.deepcopy(value) if op == "SET" else doc
    parent = doc
    for k in keys[:-1]:
        parent = parent[k]
    last = keys[-1]
    if op == "SET":
        parent[last] = copy.deepcopy(value)
    elif op == "APPEND":
        current = parent[last] if isinstance(parent, list) else parent.get(last)
        if isinstance(value, str):
            parent[last] = (current or "") + value
        else:
            parent[last] = (current or []) + copy.deepcopy(value if isinstance(value, list) else [value])
    return doc


def ds_reference(data: bytes) -> Any:
    """The response document a client builds (unnamed data events are patches)."""
    doc: Any = {"response": {}}
    path: str | None = None
    op: str | None = None
    for ev in sse_events(data):
        if not ev.complete or ev.event not in (None, "message") or not ev.data:
            continue
        obj = json.loads(ev.data)
        if isinstance(obj, dict) and "v" in obj:
            path, op = obj.get("p", path), obj.get("o", op)
            doc = _ref_apply(doc, path or "", op, obj["v"])
    return doc


def ds_reference_texts(data: bytes) -> dict[Channel, str]:
    response = ds_reference(data)["response"]
    out: dict[Channel, str] = {}
    for frag in response.get("fragments") or []:
        channel = {"THINK": REASONING, "RESPONSE": TEXT}.get(frag.get("type"))
        if channel and frag.get("content"):
            out[channel] = out.get(channel, "") + frag["content"]
    for key, channel in (("thinking_content", REASONING), ("content", TEXT)):
        if response.get(key):
            out[channel] = out.get(channel, "") + response[key]
    return out


# -- DeepSeek: accepts ---------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "ctype", "expected"), [
    ("POST", "/api/v0/chat/completion", SSE, True),
    ("post", "/api/v0/chat/completion?x=1", "text/event-stream; charset=utf-8", True),
    ("POST", "/api/v0/chat/edit_message", SSE, True),
    ("POST", "/api/v0/chat/continue", SSE, False),  # its snapshot may repeat old text
    ("POST", "/api/v0/chat/completion", "application/json", False),
    ("GET", "/api/v0/chat/completion", SSE, False),
    ("POST", "/api/v0/chat/create_pow_challenge", SSE, False),
    ("POST", "/chat/completions", SSE, False),
    ("POST", "/api/v0/chat/completions", SSE, False),
])
def test_ds_accepts(method: str, path: str, ctype: str, expected: bool) -> None:
    assert DS.accepts(shape(path, method=method), ctype) is expected and DS.name == "deepseek-web"


# -- DeepSeek: channels --------------------------------------------------------------------
@pytest.mark.parametrize("name", DS_STREAMS)
def test_ds_channels_match_reference_client(name: str) -> None:
    data = DS_STREAMS[name]
    events = parse(DS, [data])
    assert b"".join(e.raw for e in events) == data
    assert channel_texts(events) == ds_reference_texts(data)
    assert all(e.splittable or e.atomic for e in events if e.texts)


def test_ds_fixture_texts_and_atomic_events() -> None:
    events = parse(DS, [load(DS_FIXTURE)])
    texts = channel_texts(events)
    assert texts[TEXT] == "你好！很高兴见到你，有什么我可以帮你的吗？"
    assert texts[REASONING].startswith("嗯，用户只发了") and texts[REASONING].endswith("语气。")
    # text inside the snapshot and inside the new RESPONSE fragment: counted, not split
    assert [e.texts for e in events if e.atomic] == [((REASONING, "嗯"),), ((TEXT, "你好"),)]
    patches = [json.loads(e.data or "") for e in sse_events(load(DS_FIXTURE)) if not e.event]
    string_appends = [o for o in patches if isinstance(o["v"], str) and o.get("o") != "SET"]
    assert sum(e.splittable for e in events) == len(string_appends) == 71
    assert all(not e.texts for e in events if e.raw.startswith(b"event:"))


def test_ds_search_stream_channels() -> None:
    texts = channel_texts(parse(DS, [DS_SEARCH]))
    assert texts == {REASONING: "Let me search first.Found it. (and more)", TEXT: "The answer is 42."}


# -- DeepSeek: properties ------------------------------------------------------------------
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
@pytest.mark.parametrize("name", DS_STREAMS)
def test_ds_property_rechunking(name: str, data: st.DataObject) -> None:
    raw = DS_STREAMS[name]
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=80), label="cuts")
    events = parse(DS, rechunk(raw, cuts))
    assert [event_key(e) for e in events] == [event_key(e) for e in parse(DS, [raw])]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False), data=st.data())
@pytest.mark.parametrize("name", DS_STREAMS)
def test_ds_property_split_integrity(name: str, rnd: random.Random, data: st.DataObject) -> None:
    raw = DS_STREAMS[name]
    output, records = resplit(DS, raw, lambda e: random_pieces(e.text, rnd) if rnd.random() < 0.8 else None)
    cuts = data.draw(st.lists(st.integers(0, len(output)), max_size=40), label="cuts")
    check_integrity(DS, raw, records, output, cuts)
    assert ds_reference(output) == ds_reference(raw)  # same document, so same paths throughout
    for r in records:
        if r.pieces is None or len(r.pieces) == 1:
            continue
        [orig] = sse_events(r.event.raw)
        obj = json.loads(orig.data or "")
        outs = [sse_events(b)[0] for b in r.out]
        assert json.loads(outs[0].data or "") == {**obj, "v": r.pieces[0]}
        assert [json.loads(o.data or "") for o in outs[1:]] == [{"v": p} for p in r.pieces[1:]]


@pytest.mark.parametrize("chunk", [1, 2, 3])
@pytest.mark.parametrize("name", DS_STREAMS)
def test_ds_pacer_output_builds_same_document(name: str, chunk: int) -> None:
    raw = DS_STREAMS[name]
    out = _pace(DS(), raw, chunk)
    if chunk == 1:
        assert len(sse_events(out)) > len(sse_events(raw))  # the pacer did split events
    assert ds_reference(out) == ds_reference(raw)
    assert channel_texts(parse(DS, [out])) == channel_texts(parse(DS, [raw]))


# -- DeepSeek: targeted --------------------------------------------------------------------
def test_ds_split_keeps_name_id_and_next_bare_event_applies_to_same_path() -> None:
    head = data_events({"v": {"response": {"fragments": [{"type": "THINK", "content": ""},
                                                          {"type": "RESPONSE", "content": ""}]}}})
    explicit = (b'event: message\r\nid: 7\r\n'
                b'data: {"p":"response/fragments/0/content","o":"APPEND","v":"abcdef"}\r\n\r\n')
    tail = data_events({"v": "gh"}, {"p": "response/fragments/-1/content", "v": "ANSWER"})
    adapter = DS()
    events = adapter.feed(head + explicit + tail)
    target = events[1]
    assert target.texts == ((REASONING, "abcdef"),) and target.splittable
    pieces = adapter.split(target, ["ab", "cd", "ef"])
    parsed = [sse_events(p)[0] for p in pieces]
    assert [p.event for p in parsed] == ["message"] * 3 and [p.newline for p in parsed] == ["\r\n"] * 3
    assert [p.id for p in parsed] == [None, None, "7"]
    out = head + b"".join(pieces) + tail
    again = parse(DS, [out])
    assert [e.texts for e in again if e.texts] == [((REASONING, p),) for p in ("ab", "cd", "ef", "gh")] + [
        ((TEXT, "ANSWER"),)]
    assert ds_reference(out)["response"]["fragments"][0]["content"] == "abcdefgh"


@pytest.mark.parametrize(("stream", "expected"), [
    # SET on a content path replaces text: not counted (it is not new tokens)
    (data_events({"v": {"response": {"fragments": [{"type": "RESPONSE", "content": "x"}]}}},
                 {"p": "response/fragments/-1/content", "o": "SET", "v": "replaced"}, {"v": "again"}),
     [((TEXT, "x"),)]),
    # sticky op is SET: a content path without "o" is a SET too
    (data_events({"v": {"response": {"fragments": [{"type": "RESPONSE", "content": ""}]}}},
                 {"p": "response/status", "o": "SET", "v": "WIP"},
                 {"p": "response/fragments/-1/content", "v": "set"}), []),
    # after a BATCH the sticky path is "response": a bare string is not text
    (data_events({"v": {"response": {"fragments": [{"type": "RESPONSE", "content": ""}]}}},
                 {"p": "response", "o": "BATCH", "v": [{"p": "status", "v": "WIP"}]}, {"v": "stray"}), []),
    # unknown op, named events with "v", a path to a fragment that does not exist
    (data_events({"v": {"response": {"fragments": [{"type": "RESPONSE", "content": ""}]}}},
                 {"p": "response/fragments/-1/content", "o": "REMOVE", "v": "x"},
                 {"p": "response/fragments/5/content", "o": "APPEND", "v": "x"})
     + named("update_session", {"p": "response/fragments/-1/content", "o": "APPEND", "v": "x"}), []),
    # no snapshot (a resumed stream): fragment types unknown, nothing counted
    (data_events({"p": "response/fragments/-1/content", "o": "APPEND", "v": "x"}, {"v": "y"}), []),
])
def test_ds_what_is_not_a_token(stream: bytes, expected: list[Any]) -> None:
    events = parse(DS, [stream])
    assert b"".join(e.raw for e in events) == stream
    assert [e.texts for e in events if e.texts] == expected


def test_ds_extra_fields_make_an_append_atomic() -> None:
    stream = data_events({"v": {"response": {"fragments": [{"type": "THINK", "content": ""}]}}},
                         {"p": "response/fragments/-1/content", "o": "APPEND", "v": "plan", "x": 1})
    [_, event] = parse(DS, [stream])
    assert event.texts == ((REASONING, "plan"),) and event.atomic and not event.splittable
    with pytest.raises(ValueError):
        DS().split(event, ["pl", "an"])


@pytest.mark.parametrize("raw", [
    b"data: not json\n\n",
    b"data: [1, 2]\n\n",
    b'data: {"v": "\xff"}\n\n',
    b'data: {"p": 5, "o": "APPEND", "v": "x"}\n\n',
    b'data: {"p": "response/fragments/-1/content", "o": ["APPEND"], "v": "x"}\n\n',
    b'data: {"p": "response", "o": "BATCH", "v": "not a list"}\n\n',
    b'data: {"p": "response", "o": "BATCH", "v": [1, {"p": 3, "v": 1}, {"q": 1}]}\n\n',
    b'data: {"code": 40003, "msg": "INVALID_TOKEN", "data": null}\n\n',
    b": keep-alive\n\n",
    b'data: {"p":"response/fragments/-1/content","o":"APPEND","v":"no blank line"}',
])
def test_ds_malformed_pass_through(raw: bytes) -> None:
    snapshot = data_events({"v": {"response": {"fragments": [{"type": "RESPONSE", "content": ""}]}}})
    events = parse(DS, [snapshot + raw])
    assert b"".join(e.raw for e in events[1:]) == raw and all(not e.texts for e in events[1:])


# -- Z.ai: accepts -------------------------------------------------------------------------
@pytest.mark.parametrize(("host", "path", "ctype", "expected"), [
    ("chat.z.ai", "/api/v2/chat/completions", SSE, True),
    ("CHAT.Z.AI", "/api/v2/chat/completions?signature=x", "text/event-stream; charset=utf-8", True),
    ("chat.z.ai:443", "/api/chat/completions", SSE, True),
    ("chat.z.ai", "/api/v2/chat/completions", "application/json", False),
    ("api.z.ai", "/api/paas/v4/chat/completions", SSE, False),
    ("api.openai.com", "/api/v2/chat/completions", SSE, False),
    ("chat.z.ai", "/api/v1/chats/new", SSE, False),
])
def test_zai_accepts(host: str, path: str, ctype: str, expected: bool) -> None:
    assert ZAI.accepts(shape(path, host=host), ctype) is expected and ZAI.name == "zai-web"
    assert not ZAI.accepts(shape(path, host=host, method="GET"), ctype)


def test_zai_shape_is_also_openai_shaped() -> None:
    """Why ZaiWebAdapter must precede OpenAIChatAdapter in the registry."""
    request = shape("/api/v2/chat/completions", host="chat.z.ai")
    assert ZAI.accepts(request, SSE) and OpenAIChatAdapter.accepts(request, SSE)


# -- Z.ai: channels and properties ---------------------------------------------------------
def zai_reference(data: bytes) -> dict[Channel, str]:
    out: dict[Channel, str] = {}
    for ev in sse_events(data):
        d = json.loads(ev.data or "")["data"]
        channel = {"thinking": REASONING, "answer": TEXT}.get(d.get("phase"))
        if channel and d.get("delta_content"):
            out[channel] = out.get(channel, "") + d["delta_content"]
    return out


def test_zai_fixture_channels() -> None:
    data = load(ZAI_FIXTURE)
    events = parse(ZAI, [data])
    assert b"".join(e.raw for e in events) == data
    assert channel_texts(events) == zai_reference(data)
    assert channel_texts(events)[TEXT].endswith("What would you like to discuss?")
    assert all(e.splittable == bool(e.texts) for e in events)
    no_delta = [e.raw for e in events if b'"delta_content"' not in e.raw]
    assert [e.raw for e in events if not e.texts] == no_delta
    assert len([e for e in events if not e.texts]) == 2  # usage (phase "other") and done


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_zai_property_rechunking(data: st.DataObject) -> None:
    raw = load(ZAI_FIXTURE)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=80), label="cuts")
    assert [event_key(e) for e in parse(ZAI, rechunk(raw, cuts))] == [event_key(e) for e in parse(ZAI, [raw])]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False), data=st.data())
def test_zai_property_split_integrity(rnd: random.Random, data: st.DataObject) -> None:
    raw = load(ZAI_FIXTURE)
    output, records = resplit(ZAI, raw, lambda e: random_pieces(e.text, rnd) if rnd.random() < 0.8 else None)
    cuts = data.draw(st.lists(st.integers(0, len(output)), max_size=40), label="cuts")
    check_integrity(ZAI, raw, records, output, cuts)
    assert zai_reference(output) == zai_reference(raw)
    for r in records:
        if r.pieces is None:
            continue
        obj = json.loads(sse_events(r.event.raw)[0].data or "")
        for piece, out in zip(r.pieces, r.out, strict=True):
            assert json.loads(sse_events(out)[0].data or "") == {
                **obj, "data": {**obj["data"], "delta_content": piece}}


def _zai(data: dict[str, Any], **top: Any) -> bytes:
    return data_events({"type": "chat:completion", "data": data, **top})


@pytest.mark.parametrize(("raw", "texts", "splittable"), [
    (_zai({"delta_content": "ab", "phase": "answer", "done": False}), ((TEXT, "ab"),), True),
    (_zai({"delta_content": "ab", "phase": "thinking"}), ((REASONING, "ab"),), True),
    (_zai({"delta_content": "ab", "phase": "answer", "done": True}), ((TEXT, "ab"),), False),
    (_zai({"delta_content": "ab", "phase": "answer", "usage": {"total_tokens": 3}}), ((TEXT, "ab"),), False),
    (_zai({"delta_content": "ab", "phase": "answer", "edit_index": 4, "edit_content": "x"}),
     ((TEXT, "ab"),), False),
    (_zai({"delta_content": "ab", "phase": "answer"}, id="1"), ((TEXT, "ab"),), False),
    (_zai({"edit_index": 12, "edit_content": "\n</details>\n", "phase": "answer"}), (), False),
    (_zai({"delta_content": "<glm_block>", "phase": "tool_call"}), (), False),
    (_zai({"delta_content": "ab"}), (), False),
    (_zai({"phase": "other", "usage": {"total_tokens": 3}}), (), False),
    (_zai({"phase": "done", "done": True}), (), False),
])
def test_zai_event_kinds(raw: bytes, texts: tuple[Any, ...], splittable: bool) -> None:
    [event] = parse(ZAI, [raw])
    assert event.raw == raw and event.texts == texts and event.splittable is splittable


@pytest.mark.parametrize("raw", [
    b"data: not json\n\n",
    b'data: {"type":"chat:completion","data":"x"}\n\n',
    b'data: {"type":"chat:completion","data":{"delta_content":5,"phase":"answer"}}\n\n',
    b'data: {"type":"chat:completion","data":{"delta_content":"","phase":"answer"}}\n\n',
    b'data: {"type":"chat:completion","data":{"delta_content":"a","phase":["answer"]}}\n\n',
    b'data: {"type":"other","data":{"delta_content":"a","phase":"answer"}}\n\n',
    b'data: {"type":"chat:completion","data":{"delta_content":"\xff","phase":"answer"}}\n\n',
    b"data: [DONE]\n\n",
    b'data: {"type":"chat:completion","data":{"delta_content":"no end","phase":"answer"}}',
])
def test_zai_malformed_pass_through(raw: bytes) -> None:
    events = parse(ZAI, [raw])
    assert b"".join(e.raw for e in events) == raw and all(not e.texts for e in events)


# -- helpers -------------------------------------------------------------------------------
class _Timing:
    ttft = 0.0

    def __init__(self, chunk: int) -> None:
        self.chunk = chunk

    def gap(self) -> float:
        return 0.001

    def chunk_size(self) -> int:
        return self.chunk


def _pace(adapter: Adapter, raw: bytes, chunk: int) -> bytes:
    pacer = StreamPacer(adapter, _Timing(chunk), start=0.0)  # type: ignore[arg-type]
    pacer.feed(raw, now=0.0)
    pacer.finish(now=0.0)
    assert pacer.failure is None
    return b"".join(e.data for e in pacer.pop_all())
