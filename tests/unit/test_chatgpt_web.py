"""ChatGPT web adapter: v1 patches with inherited path/op, legacy cumulative frames, splitting."""

from __future__ import annotations

import copy
import json
import random
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.timing.pacer import StreamPacer
from retimer.wire.protocols.base import Channel, Event, RequestShape
from retimer.wire.protocols.chatgpt_web import ChatGPTWebAdapter
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
from tests.support.fixture_streams import STREAMS_DIR, load

A = ChatGPTWebAdapter
TEXT, REASONING, TOOL_ARGS = Channel.TEXT, Channel.REASONING, Channel.TOOL_ARGS
SSE = "text/event-stream"
FIXTURES = tuple(sorted(p.relative_to(STREAMS_DIR).as_posix() for p in STREAMS_DIR.glob("chatgpt-web/*.sse")))
LEGACY = "chatgpt-web/backend-api-conversation-legacy-cumulative-2024-10-gpt-4o-mini.sse"
PARTS = "/message/content/parts/0"


def shape(path: str, method: str = "POST") -> RequestShape:
    return RequestShape(method=method, host="chatgpt.com", path=path, headers={}, body=b"{}")


def delta(obj: Any, *, named: bool = True, pad: str = "", newline: str = "\n") -> bytes:
    head = f"event: delta{newline}" if named else ""
    return f"{head}data: {json.dumps(obj)}{pad}{newline}{newline}".encode()


def data_event(obj: Any) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


def message(mid: str, role: str = "assistant", text: str = "", **extra: Any) -> dict[str, Any]:
    content = extra.pop("content", {"content_type": "text", "parts": [text]})
    return {"id": mid, "author": {"role": role, "name": None, "metadata": {}}, "content": content,
            "status": extra.pop("status", "in_progress"), "recipient": extra.pop("recipient", "all"),
            "channel": extra.pop("channel", None), "metadata": {}, **extra}


def add(msg: dict[str, Any], c: int = 0) -> bytes:
    return delta({"p": "", "o": "add", "v": {"message": msg, "conversation_id": "c1", "error": None}, "c": c})


def frame(msg: dict[str, Any]) -> bytes:
    return data_event({"message": msg, "conversation_id": "c1", "error": None})


HEADER = b'event: delta_encoding\ndata: "v1"\n\n'


def events_of(data: bytes) -> list[Event]:
    return parse(A, [data])


def texts(data: bytes) -> list[tuple[tuple[Channel, str], ...]]:
    return [e.texts for e in events_of(data) if e.texts]


# -- an independent reference client ---------------------------------------------------------
def reference(data: bytes) -> list[dict[str, Any]]:
    """The messages a client ends with: v1 patches applied with inherited p/o, or the last
    legacy frame of each message. An excerpt is taken to start after a message `add`."""
    docs: list[dict[str, Any]] = []
    legacy: dict[Any, dict[str, Any]] = {}
    last = {"p": "", "o": "add"}
    for ev in sse_events(data):
        if not ev.complete or not ev.data or ev.data == "[DONE]":
            continue
        try:
            obj = json.loads(ev.data)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        if ev.event == "delta" or ("v" in obj and "type" not in obj):
            last.update({k: obj[k] for k in ("p", "o") if k in obj})
            _ref_apply(docs, last["p"], last["o"], obj.get("v"))
        elif "message" in obj:
            legacy[obj["message"]["id"]] = obj["message"]
    return [d["message"] for d in docs] + list(legacy.values())


def _ref_apply(docs: list[dict[str, Any]], path: str, op: str, value: Any) -> None:
    if op == "patch":
        for item in value:
            _ref_apply(docs, path + item["p"], item["o"], item.get("v"))
        return
    if path == "":
        docs.append(copy.deepcopy(value))
        return
    *parents, key = path.split("/")[1:]
    node: Any = docs[-1]
    for name in parents:
        node = node[int(name)] if isinstance(node, list) else node[name]
    k: Any = int(key) if isinstance(node, list) else key
    if op == "append":
        cur = node[k]
        if isinstance(cur, str):
            node[k] = cur + value
        elif isinstance(cur, list):
            cur.extend(copy.deepcopy(value) if isinstance(value, list) else [value])
        else:
            cur.update(copy.deepcopy(value))
    elif op in ("add", "replace"):
        node[k] = copy.deepcopy(value)
    elif op == "truncate":
        node[k] = node[k][:value]
    elif op == "remove":
        del node[k]


def answer(data: bytes) -> str:
    """The visible answer: every assistant message to "all" that is not reasoning."""
    return "".join(m["content"]["parts"][0] for m in reference(data)
                   if m["author"]["role"] == "assistant" and m["recipient"] == "all"
                   and m.get("channel") != "analysis" and m["content"]["content_type"] == "text")


# -- accepts ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "ctype", "expected"), [
    ("POST", "/backend-api/conversation", SSE, True),
    ("POST", "/backend-api/f/conversation", "text/event-stream; charset=utf-8", True),
    ("post", "/backend-api/f/conversation/?x=1", SSE, True),
    ("POST", "/backend-anon/f/conversation", SSE, True),
    ("POST", "/backend-api/conversation", "application/json", False),
    ("GET", "/backend-api/conversation", SSE, False),
    ("POST", "/backend-api/conversations", SSE, False),
    ("POST", "/backend-api/conversation/init", SSE, False),
    ("POST", "/backend-api/f/conversation/prepare", SSE, False),
    ("POST", "/backend-api/conversation/gen_title/abc", SSE, False),
    ("POST", "/v1/chat/completions?next=/backend-api/conversation", SSE, False),
])
def test_accepts(method: str, path: str, ctype: str, expected: bool) -> None:
    assert A.accepts(shape(path, method), ctype) is expected and A.name == "chatgpt-web"


# -- channels on recorded streams ------------------------------------------------------------
@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_channels_and_raw(name: str) -> None:
    data = load(name)
    events = events_of(data)
    assert b"".join(e.raw for e in events) == data
    assert channel_texts(events) == {TEXT: answer(data)} and answer(data)
    assert all(e.splittable == bool(e.texts) for e in events)  # every token event can be split
    for e in events:  # typed events, the header, [DONE], the empty event, message adds
        if b'data: {"type": ' in e.raw or b'"v": {"message": ' in e.raw or b"data: {" not in e.raw:
            assert not e.texts


def test_fixture_known_texts() -> None:
    free = channel_texts(events_of(load("chatgpt-web/f-conversation-v1-free-gpt-5-2-list.sse")))[TEXT]
    assert free.startswith("Here\u2019s a list of 10 famous people") and free.endswith("learning more about?")
    team = channel_texts(events_of(load(
        "chatgpt-web/f-conversation-v1-team-gpt-5-3-tail-excerpt-padded.sse")))
    assert team == {TEXT: "Hi. What do you need help with?"}
    legacy = events_of(load(LEGACY))
    assert channel_texts(legacy)[TEXT].endswith("Python环境信息。\n\n")
    assert [e.text for e in legacy if e.texts][:3] == ["明", "白", "了"]  # the new suffix of each frame
    old = channel_texts(events_of(load("chatgpt-web/backend-api-conversation-v1-2024-10-gpt-4o-padded.sse")))
    assert old[TEXT].startswith("好的，我明白你的要求。")


# -- properties on recorded streams ----------------------------------------------------------
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
@pytest.mark.parametrize("name", FIXTURES)
def test_property_rechunking(name: str, data: st.DataObject) -> None:
    raw = load(name)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=80), label="cuts")
    events = parse(A, rechunk(raw, cuts))
    assert [event_key(e) for e in events] == [event_key(e) for e in events_of(raw)]
    assert b"".join(e.raw for e in events) == raw


_BIG = [HealthCheck.too_slow, HealthCheck.large_base_example, HealthCheck.data_too_large]


@settings(max_examples=12, deadline=None, suppress_health_check=_BIG)
@given(seed=st.integers(0, 2**32), data=st.data())
@pytest.mark.parametrize("name", FIXTURES)
def test_property_split_integrity(name: str, seed: int, data: st.DataObject) -> None:
    rnd = random.Random(seed)
    raw = load(name)
    output, records = resplit(A, raw, lambda e: random_pieces(e.text, rnd) if rnd.random() < 0.8 else None)
    cuts = data.draw(st.lists(st.integers(0, len(output)), max_size=40), label="cuts")
    check_integrity(A, raw, records, output, cuts)
    assert reference(output) == reference(raw)  # the same messages, status and metadata
    for r, up in zip(records, sse_events(raw), strict=True):
        if r.pieces is None:
            assert r.out == [up.raw]
            continue
        orig = json.loads(up.data or "")
        for i, raw_piece in enumerate(r.out):
            [p] = sse_events(raw_piece)
            assert p.event == up.event and p.newline == up.newline
            obj = json.loads(p.data or "")
            if "message" in orig:  # legacy: the same object, a prefix of the text, the last verbatim
                assert raw_piece == up.raw if i == len(r.out) - 1 else raw_piece != up.raw
                assert {**obj, "message": None} == {**orig, "message": None}
                text = obj["message"]["content"]["parts"][0]
                assert orig["message"]["content"]["parts"][0].startswith(text)
            elif isinstance(orig["v"], list) or i == 0:  # patches and the first piece: same keys
                assert list(obj) == list(orig)
            else:
                assert list(obj) == ["v"]


@settings(max_examples=10, deadline=None, suppress_health_check=_BIG)
@given(chunk=st.integers(1, 4), data=st.data())
@pytest.mark.parametrize("name", FIXTURES)
def test_pacer_output_reads_the_same(name: str, chunk: int, data: st.DataObject) -> None:
    raw = load(name)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=30), label="cuts")
    timing = SimpleNamespace(ttft=0.0, gap=lambda: 0.001, chunk_size=lambda: chunk)
    pacer = StreamPacer(A(), timing, start=0.0)  # type: ignore[arg-type]
    for part in rechunk(raw, cuts):
        pacer.feed(part, now=0.0)
    pacer.finish(now=0.0)
    out = b"".join(e.data for e in pacer.pop_all())
    assert pacer.failure is None
    assert reference(out) == reference(raw)
    assert channel_texts(events_of(out)) == channel_texts(events_of(raw))
    assert len(texts(out)) > len(texts(raw))  # some events were split


# -- v1: inheritance across splits -------------------------------------------------------------
def _v1_stream() -> bytes:
    return b"".join([
        HEADER,
        add(message("sys", "system"), 0),
        delta({"v": {"message": message("u1", "user", "hi"), "conversation_id": "c1"}, "c": 1}),
        data_event({"type": "input_message", "input_message": message("u1", "user", "hi")}),
        delta({"v": {"message": message("a1"), "conversation_id": "c1"}, "c": 2}),
        delta({"p": PARTS, "o": "append", "v": "Hello"}),
        delta({"v": " world"}, pad="   "),
        data_event({"type": "title_generation", "title": "Hi", "conversation_id": "c1"}),
        delta({"v": ","}),
        delta({"p": "", "o": "patch", "v": [
            {"p": "/message/metadata/token_count", "o": "replace", "v": 3},
            {"p": PARTS, "o": "append", "v": " there"},
            {"p": "/message/status", "o": "replace", "v": "in_progress"}]}),
        delta({"v": [{"p": PARTS, "o": "append", "v": " again"},
                     {"p": "/message/metadata/token_count", "o": "replace", "v": 5}]}),
        delta({"o": "patch", "v": [{"p": PARTS, "o": "append", "v": " and"}]}),
        delta({"p": PARTS, "o": "append", "v": " more"}),
        delta({"v": "!"}),
        delta({"p": "", "o": "patch", "v": [
            {"p": PARTS, "o": "append", "v": " Bye."},
            {"p": "/message/status", "o": "replace", "v": "finished_successfully"},
            {"p": "/message/end_turn", "o": "replace", "v": True}]}),
        delta({"p": "/message/metadata", "o": "append", "v": {"is_complete": True}}),
        data_event({"type": "message_stream_complete", "conversation_id": "c1"}),
        b"data: [DONE]\n\n",
    ])


@pytest.mark.parametrize("how", ["halves", "characters", "random"])
def test_split_keeps_inherited_path_and_op(how: str) -> None:
    raw = _v1_stream()
    rnd = random.Random(7)
    choose = {"halves": lambda e: two_pieces(e.text), "characters": lambda e: list(e.text),
              "random": lambda e: random_pieces(e.text, rnd)}[how]
    output, records = resplit(A, raw, choose)
    check_integrity(A, raw, records, output)
    assert answer(raw) == "Hello world, there again and more! Bye."
    assert reference(output) == reference(raw)
    [final] = [m for m in reference(output) if m["id"] == "a1"]
    assert final["status"] == "finished_successfully" and final["metadata"] == {
        "token_count": 5, "is_complete": True}
    assert len(texts(output)) > len(texts(raw))


def test_split_pieces_of_a_plain_append_and_a_patch() -> None:
    adapter = A()
    events = adapter.feed(_v1_stream())
    [hello] = [e for e in events if e.text == "Hello"]
    out = adapter.split(hello, ["He", "ll", "o"])
    assert out == [b'event: delta\ndata: {"p":"/message/content/parts/0","o":"append","v":"He"}\n\n',
                   b'event: delta\ndata: {"v":"ll"}\n\n', b'event: delta\ndata: {"v":"o"}\n\n']
    [there] = [e for e in events if e.text == " there"]
    objs = [json.loads(sse_events(b)[0].data or "") for b in adapter.split(there, [" th", "er", "e"])]
    assert [[i["p"] for i in o["v"]] for o in objs] == [
        ["/message/metadata/token_count", PARTS], [PARTS], [PARTS, "/message/status"]]
    assert all(list(o) == ["p", "o", "v"] and o["o"] == "patch" for o in objs)
    [again] = [e for e in events if e.text == " again"]  # list form: no top-level o on any piece
    objs = [json.loads(sse_events(b)[0].data or "") for b in adapter.split(again, [" ag", "ain"])]
    assert [list(o) for o in objs] == [["v"], ["v"]] and len(objs[1]["v"]) == 2


# -- v1: channels --------------------------------------------------------------------------
def test_thoughts_analysis_tools_and_echoes() -> None:
    thoughts = message("t1", content={"content_type": "thoughts", "thoughts": []}, channel="analysis")
    raw = b"".join([
        HEADER,
        add(message("u1", "user", "question")),
        add(thoughts, 1),
        delta({"p": "/message/content/thoughts", "o": "append", "v": [{"summary": "Plan", "content": ""}]}),
        delta({"p": "/message/content/thoughts/0/content", "o": "append", "v": "I should"}),
        delta({"v": " answer."}),
        delta({"p": "/message/content/thoughts/0/summary", "o": "append", "v": "ning"}),
        add(message("r1", content={"content_type": "reasoning_recap", "content": "Thought for 3s"}), 2),
        add(message("x1", channel="analysis"), 3),
        delta({"p": PARTS, "o": "append", "v": "hidden"}),
        add(message("py", recipient="python"), 4),  # after appends a new message names its p/o
        delta({"p": PARTS, "o": "append", "v": "print(1)"}),
        add(message("tool", "tool", "1"), 5),
        delta({"p": PARTS, "o": "append", "v": "23"}),
        add(message("pre", text="Checking.", channel="commentary"), 6),
        delta({"v": {"message": message("f1", channel="final")}, "c": 7}),
        delta({"p": "", "o": "patch", "v": [{"p": "/message/channel", "o": "replace", "v": "analysis"}]}),
        delta({"p": PARTS, "o": "append", "v": "think"}),
        delta({"p": "/message/channel", "o": "replace", "v": "final"}),
        delta({"p": PARTS, "o": "append", "v": "Answer"}),
    ])
    assert texts(raw) == [
        ((REASONING, "Plan"),), ((REASONING, "I should"),), ((REASONING, " answer."),),
        ((REASONING, "ning"),), ((REASONING, "hidden"),), ((TOOL_ARGS, "print(1)"),),
        ((TEXT, "Checking."),), ((REASONING, "think"),), ((TEXT, "Answer"),)]
    events = events_of(raw)
    atomic = [e.text for e in events if e.texts and not e.splittable]
    assert atomic == ["Plan", "Checking."]  # whole thoughts, a message added with its text
    output, records = resplit(A, raw, lambda e: list(e.text))
    check_integrity(A, raw, records, output)
    assert reference(output) == reference(raw)
    assert reference(output)[1]["content"]["thoughts"] == [
        {"summary": "Planning", "content": "I should answer."}]


def test_patch_relative_paths_and_an_excerpt_start() -> None:
    raw = b"".join([
        delta({"v": {"message": message("a")}, "c": 9}),  # excerpt: no p/o seen yet
        delta({"p": "/message", "o": "patch", "v": [{"p": "/content/parts/0", "o": "append", "v": "hi"},
                                                 {"p": "/status", "o": "replace", "v": "done"}]}),
    ])
    assert texts(raw) == [((TEXT, "hi"),)]
    output, records = resplit(A, raw, lambda e: ["h", "i"])
    assert reference(output) == reference(raw) and reference(raw)[0]["status"] == "done"


@pytest.mark.parametrize(("obj", "splittable"), [
    ({"p": PARTS, "o": "append", "v": "ab", "x": 1}, False),  # an unknown key: sent whole
    ({"p": "", "o": "patch", "v": [{"p": PARTS, "o": "append", "v": "ab", "x": 1}]}, False),
    ({"p": "", "o": "patch", "v": [  # two strings
        {"p": PARTS, "o": "append", "v": "a"},
        {"p": "/message/content/thoughts/0/content", "o": "append", "v": "b"}]}, False),
    ({"p": PARTS, "o": "append", "v": "ab", "c": 3}, True),
])
def test_what_can_be_split(obj: dict[str, Any], splittable: bool) -> None:
    [_, event] = events_of(add(message("a")) + delta(obj))
    assert event.texts and event.splittable is splittable and event.atomic is not splittable


# -- legacy cumulative frames ----------------------------------------------------------------
def test_legacy_suffixes_first_events_and_other_messages() -> None:
    raw = b"".join([
        frame(message("s", "system", status="finished_successfully")),
        frame(message("u", "user", "question", status="finished_successfully")),
        frame(message("a", text="Hel")),  # first event of a message: all of it is new
        frame(message("a", text="Hello")),
        frame(message("u", "user", "question", status="finished_successfully")),
        frame(message("a", text="Hello")),  # nothing new
        frame(message("a", text="Help me")),  # not an extension: the differing tail, whole
        frame(message("a", text="Help me now", status="finished_successfully")),  # finished: whole
        b"data: [DONE]\n\n",
    ])
    events = [e for e in events_of(raw) if e.texts]
    assert [(e.text, e.splittable) for e in events] == [
        ("Hel", True), ("lo", True), ("p me", False), (" now", False)]
    output, records = resplit(A, raw, lambda e: list(e.text))
    check_integrity(A, raw, records, output)
    assert reference(output) == reference(raw)
    mids = [json.loads(e.data or "")["message"]["content"]["parts"][0] for e in sse_events(output)[2:6]]
    assert mids == ["H", "He", "Hel", "Hell"]


def test_legacy_split_keeps_preamble_crlf_and_id() -> None:
    body = json.dumps({"message": message("a", text="abc"), "error": None})
    raw = f": keep\r\ndata: {body}\r\nid: 5\r\n\r\n".encode()
    adapter = A()
    [event] = adapter.feed(raw)
    first, second, last = adapter.split(event, ["a", "b", "c"])
    assert first.startswith(b": keep\r\ndata: {") and first.endswith(b"\r\n\r\n") and b"id:" not in first
    assert last == raw[len(b": keep\r\n"):] and sse_events(last)[0].id == "5"
    assert json.loads(sse_events(second)[0].data or "")["message"]["content"]["parts"] == ["ab"]


def test_frames_in_a_v1_stream_pass_whole() -> None:
    raw = b"".join([HEADER, frame(message("a", text="whole text")), add(message("b")),
                    delta({"v": "x", "p": PARTS, "o": "append"})])
    assert texts(raw) == [((TEXT, "x"),)]


# -- splitting contract, malformed input -----------------------------------------------------------
def test_single_piece_returns_raw_and_bad_pieces_raise() -> None:
    raw = delta({"p": PARTS, "o": "append", "v": "abc"}, pad="    ")
    [event] = events_of(raw)
    adapter = A()
    assert adapter.split(event, ["abc"]) == [raw]
    with pytest.raises(ValueError):
        adapter.split(event, ["ab"])
    with pytest.raises(ValueError):
        adapter.split(events_of(HEADER)[0], ["x"])


def test_lone_surrogate_splits_into_valid_utf8() -> None:
    [event] = events_of(b'event: delta\ndata: {"p":"/message/content/parts/0","o":"append",'
                        b'"v":"a\\udc00b"}\n\n')
    out = A().split(event, ["a", "\udc00b"])
    for piece in out:
        piece.decode("utf-8")
    assert channel_texts(events_of(b"".join(out))) == {TEXT: "a\udc00b"}


@pytest.mark.parametrize("raw", [
    HEADER,
    b"data: [DONE]\n\n",
    b"data: \n\n",
    b": ping\n\n",
    delta({"p": PARTS, "o": "append", "v": ""}),
    delta({"p": PARTS, "o": "append", "v": 5}),
    delta({"p": PARTS, "o": "replace", "v": "rewritten"}),
    delta({"p": PARTS, "o": "truncate", "v": 2}),
    delta({"p": PARTS, "o": "remove"}),
    delta({"p": "/message/content/parts/0/x", "o": "append", "v": "x"}),
    delta({"p": "/message/metadata/title", "o": "append", "v": "x"}),
    delta({"p": 5, "o": "append", "v": "x"}),
    delta({"p": "", "o": "patch", "v": "x"}),
    delta({"p": "", "o": "patch", "v": [1, None, {"o": "append", "v": "x"}]}),
    delta({"o": "append"}),
    delta([PARTS, "append", "x"]),
    b"event: delta\ndata: {not json\n\n",
    b'event: delta\ndata: {"p":"/message/content/parts/0","o":"append","v":"\xff"}\n\n',
    data_event({"type": "title_generation", "title": "A title"}),
    data_event({"type": "message_marker", "v": "x", "p": PARTS}),
    data_event({"message": "not an object"}),
    data_event({"message": {"content": {"parts": [7]}}}),
    data_event({"error": "Something went wrong"}),
    delta({"p": PARTS, "o": "append", "v": "no blank line"})[:-1],
])
def test_non_token_and_malformed_pass_through(raw: bytes) -> None:
    for prefix in (b"", add(message("a"))):  # with or without a message to patch
        events = events_of(prefix + raw)
        assert b"".join(e.raw for e in events) == prefix + raw
        assert all(not e.texts for e in events)
