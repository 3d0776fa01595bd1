"""Gemini web app adapter (StreamGenerate rt=c): framing, cumulative text, splitting, integrity."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.wire.protocols.base import Channel, Event, RequestShape
from retimer.wire.protocols.gemini_web import GeminiWebAdapter
from tests.support.adapter_checks import (
    channel_texts,
    check_integrity,
    event_key,
    parse,
    random_pieces,
    rechunk,
    resplit,
)
from tests.support.fixture_streams import STREAMS_DIR, load

TEXT, REASONING = Channel.TEXT, Channel.REASONING
FIXTURES = sorted(p.relative_to(STREAMS_DIR).as_posix() for p in STREAMS_DIR.glob("gemini-web/*.txt"))
PATH = ("/_/BardChatUi/data/assistant.lamda.BardFrontendService/StreamGenerate"
        "?bl=boq_assistant-bard-web-server_20260317.00_p6&f.sid=-1&hl=zh&_reqid=1&rt=c")
GUARD = b")]}'\n\n"


def shape(path: str, method: str = "POST") -> RequestShape:
    return RequestShape(method=method, host="gemini.google.com", path=path, headers={}, body=b"f.req=x")


# -- an independent client and encoder ---------------------------------------------------
def units(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def strict_frames(data: bytes) -> list[Any]:
    """Read a stream as a strict client: guard, then frames whose length prefix counts the
    UTF-16 units of exactly "\\n" + one JSON line + "\\n"; every prefix is checked."""
    text = data.decode("utf-8")
    guard = re.match(r"\)\n?\]\n?\}'", text)
    assert guard or not text.startswith(")"), "broken XSSI guard"  # excerpts may start mid-stream
    pos = guard.end() if guard else 0
    frames = []
    while True:
        while pos < len(text) and text[pos] in "\r\n":
            pos += 1
        if pos == len(text):
            return frames
        digits = re.compile(r"\d+").match(text, pos)
        assert digits, f"no length prefix at {pos}"
        want, pos = int(digits.group()), digits.end()
        start, got = pos, 0
        while got < want:
            got += 2 if ord(text[pos]) > 0xFFFF else 1
            pos += 1
        assert got == want
        body = text[start:pos]
        assert body[0] == "\n" and body[-1] == "\n" and "\n" not in body[1:-1], "length prefix is off"
        frames.append(json.loads(body))


def candidate_texts(frame: Any) -> dict[Channel, str]:
    """Candidate 0's cumulative answer text and thoughts in one decoded frame."""
    out: dict[Channel, str] = {}
    for entry in frame:
        if entry[0] != "wrb.fr" or not isinstance(entry[2], str):
            continue
        inner = json.loads(entry[2])
        if len(inner) > 4 and inner[4]:
            cand = inner[4][0]
            if isinstance(cand[1], list) and isinstance(cand[1][0], str):
                out[TEXT] = cand[1][0]
            if len(cand) > 37 and cand[37] and isinstance(cand[37][0][0], str):
                out[REASONING] = cand[37][0][0]
    return out


def final_texts(data: bytes) -> dict[Channel, str]:
    """What the app shows at the end: the last cumulative text per channel."""
    out: dict[Channel, str] = {}
    for frame in strict_frames(data):
        out.update(candidate_texts(frame))
    return out


def google_inner(obj: Any) -> str:
    """Compact JSON with raw non-ASCII and `<>&=` as \\u escapes, as the captures show."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    for ch in "<>&=":
        text = text.replace(ch, f"\\u{ord(ch):04x}")
    return text


def google_line(frame: Any) -> str:
    outer = [[*e[:2], google_inner(json.loads(e[2])), *e[3:]] if e[0] == "wrb.fr" and isinstance(e[2], str)
             else e for e in frame]
    return json.dumps(outer, ensure_ascii=False, separators=(",", ":"))


def framed(line: str) -> bytes:
    body = "\n" + line + "\n"
    return (str(units(body)) + body).encode("utf-8")


def inner_answer(text: str | None, thoughts: str | None = None, rcid: str = "rc_1") -> list[Any]:
    cand: list[Any] = [rcid, None if text is None else [text]] + [None] * 36
    if thoughts is not None:
        cand[37] = [[thoughts]]
    return [None, ["c_1", "r_1"], None, None, [cand], {"k": "a=b<c>"}]


def answer(text: str | None, thoughts: str | None = None, rcid: str = "rc_1",
           encode: Any = google_inner, outer_ascii: bool = False) -> bytes:
    inner = encode(inner_answer(text, thoughts, rcid))
    return framed(json.dumps([["wrb.fr", None, inner]], ensure_ascii=outer_ascii, separators=(",", ":")))


TRAILER = framed('[["di",37],["af.httprm",37,"-123",1]]') + framed('[["e",4,null,null,99]]')


def stream(*frames: bytes, guard: bytes = GUARD) -> bytes:
    return guard + b"".join(frames)


def events_of(data: bytes) -> list[Event]:
    return parse(GeminiWebAdapter, [data])


# -- accepts -----------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "ctype", "expected"), [
    ("POST", PATH, "application/json+protobuf; charset=UTF-8", True),
    ("POST", PATH, "text/plain; charset=utf-8", True),
    ("POST", PATH, "application/json", True),
    ("post", "/u/1/_/BardChatUi/data/assistant.lamda.BardFrontendService/StreamGenerate?rt=c", "", True),
    ("POST", PATH, "text/event-stream", False),
    ("POST", PATH, "text/html; charset=utf-8", False),
    ("GET", PATH, "application/json+protobuf", False),
    ("POST", PATH.replace("rt=c", "rt=b"), "application/json+protobuf", False),
    ("POST", PATH.split("?")[0], "application/json+protobuf", False),
    ("POST", "/_/BardChatUi/data/batchexecute?rpcids=MaZiqc&rt=c", "application/json+protobuf", False),
    ("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?rt=c", "application/json", False),
])
def test_accepts(method: str, path: str, ctype: str, expected: bool) -> None:
    assert GeminiWebAdapter.accepts(shape(path, method), ctype) is expected


# -- recorded streams --------------------------------------------------------------------
def test_fixtures_present_and_strictly_framed() -> None:
    assert len(FIXTURES) == 2
    assert load("gemini-web/streamgenerate-rt-c-head-excerpt.txt").startswith(b")\n]\n}'\n")
    head = strict_frames(load("gemini-web/streamgenerate-rt-c-head-excerpt.txt"))
    tail = strict_frames(load("gemini-web/streamgenerate-rt-c-tail-excerpt.txt"))
    assert [f[0][0] for f in head] == ["wrb.fr", "wrb.fr"]
    assert [f[0][0] for f in tail] == ["wrb.fr", "wrb.fr", "wrb.fr", "di", "e"]


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_texts_and_raw(name: str) -> None:
    data = load(name)
    events = events_of(data)
    assert b"".join(e.raw for e in events) == data
    assert channel_texts(events) == final_texts(data)  # frames only extend: suffixes add up
    token = [e for e in events if e.texts]
    assert token and all(e.splittable for e in token)
    guarded = data.startswith(b")")
    if guarded:
        assert events[0].raw == data[: data.index(b"'") + 1] and not events[0].texts  # the guard, alone
    for e in events[guarded:]:  # one frame per event; metadata and trailer frames carry nothing
        [frame] = strict_frames(GUARD + e.raw)
        assert bool(e.texts) == bool(candidate_texts(frame))


def test_fixture_known_texts() -> None:
    head = channel_texts(events_of(load("gemini-web/streamgenerate-rt-c-head-excerpt.txt")))
    assert head == {TEXT: "看样子你现在"}
    tail = channel_texts(events_of(load("gemini-web/streamgenerate-rt-c-tail-excerpt.txt")))[TEXT]
    assert tail.startswith("看来我们陷入了一个“问号与斜杠”的迷阵！😄\n\n") and tail.endswith("换个话题聊聊？**")


@pytest.mark.parametrize("name", FIXTURES)
def test_independent_reencode_reproduces_fixture_frames(name: str) -> None:
    """The encoder used below to check split frames writes the captured frames byte for byte."""
    lines = [ln for ln in load(name).decode().split("\n") if ln.startswith("[[")]
    assert lines and all(google_line(json.loads(ln)) == ln for ln in lines)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
@pytest.mark.parametrize("name", FIXTURES)
def test_property_rechunking(name: str, data: st.DataObject) -> None:
    raw = load(name)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=80), label="cuts")
    events = parse(GeminiWebAdapter, rechunk(raw, cuts))
    assert [event_key(e) for e in events] == [event_key(e) for e in events_of(raw)]
    assert b"".join(e.raw for e in events) == raw


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 10_000), max_size=60))
def test_property_rechunking_synthetic(cuts: list[int]) -> None:
    """Astral characters, CRLF between frames, the three-line guard, thoughts, a trailer."""
    raw = stream(answer(None, thoughts="🤔 hmm"), b"\r\n" + answer("😄", thoughts="🤔 hmm"),
                 answer("😄 \"a=b\"\n\U0001F600", thoughts="🤔 hmm"), TRAILER, b"\n",
                 guard=b")\n]\n}'\n\n")
    events = parse(GeminiWebAdapter, rechunk(raw, cuts))
    assert [event_key(e) for e in events] == [event_key(e) for e in events_of(raw)]
    assert b"".join(e.raw for e in events) == raw
    assert channel_texts(events) == final_texts(raw) == {TEXT: "😄 \"a=b\"\n\U0001F600", REASONING: "🤔 hmm"}


def truncated(frame: Any, channel: Channel, text: str) -> Any:
    """`frame` with candidate 0's text of `channel` replaced (decoded form)."""
    inner = json.loads(frame[0][2])
    if channel is TEXT:
        inner[4][0][1][0] = text
    else:
        inner[4][0][37][0][0] = text
    return [[*frame[0][:2], google_inner(inner), *frame[0][3:]], *frame[1:]]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False), data=st.data())
@pytest.mark.parametrize("name", FIXTURES)
def test_property_split_integrity(name: str, rnd: random.Random, data: st.DataObject) -> None:
    raw = load(name)
    output, records = resplit(GeminiWebAdapter, raw,
                              lambda e: random_pieces(e.text, rnd, 12) if rnd.random() < 0.9 else None)
    cuts = data.draw(st.lists(st.integers(0, len(output)), max_size=40), label="cuts")
    check_integrity(GeminiWebAdapter, raw, records, output, cuts)
    assert final_texts(output) == final_texts(raw)
    for r in records:
        if r.pieces is None:
            continue
        [orig] = strict_frames(GUARD + r.event.raw.lstrip())
        before = candidate_texts(orig)[TEXT][: -len(r.event.text)]
        so_far = before
        for i, (piece, out) in enumerate(zip(r.pieces, r.out)):
            [frame] = strict_frames(GUARD + out.lstrip())
            so_far += piece
            assert candidate_texts(frame) == {TEXT: so_far}
            # the cut frame is what re-serialising the truncated frame gives, byte for byte
            expected = framed(google_line(truncated(orig, TEXT, so_far)))
            assert out.lstrip(b"\n") == expected
            if i == len(r.pieces) - 1:
                assert out == r.event.raw.lstrip(b"\n")


# -- targeted: framing and escapes -------------------------------------------------------
TRICKY = 'Say "hi" \\ a=b <tag> & \'q\'\n\ttab 😄 é\u2028 end \U0001F600'


@pytest.mark.parametrize("guard", [GUARD, b")\n]\n}'\n\n", b")]}'\n", b""])
def test_guard_forms_and_frames(guard: bytes) -> None:
    data = stream(answer("Hel"), answer("Hello"), TRAILER, guard=guard)
    events = events_of(data)
    assert b"".join(e.raw for e in events) == data
    assert [e.texts for e in events if e.texts] == [((TEXT, "Hel"),), ((TEXT, "lo"),)]
    assert all(e.splittable for e in events if e.texts)


@pytest.mark.parametrize(("encode", "outer_ascii"), [
    (google_inner, False),
    (google_inner, True),  # outer literal with \\u escapes for every non-ASCII character
    (lambda o: json.dumps(o, separators=(",", ":")), False),  # inner ASCII-escaped: \\ud83d\\ude04 pairs
    (lambda o: json.dumps(o, indent=1, ensure_ascii=False), True),
])
def test_split_at_every_boundary_matches_reserialising(encode: Any, outer_ascii: bool) -> None:
    prefix = "Start "
    data = stream(answer(prefix, encode=encode, outer_ascii=outer_ascii),
                  answer(prefix + TRICKY, encode=encode, outer_ascii=outer_ascii))
    event = events_of(data)[-1]
    assert event.texts == ((TEXT, TRICKY),) and event.splittable
    for cut in range(1, len(TRICKY)):
        pieces = [TRICKY[:cut], TRICKY[cut:]]
        first, last = GeminiWebAdapter().split(event, pieces)
        assert last == event.raw
        assert first == answer(prefix + pieces[0], encode=encode, outer_ascii=outer_ascii)
        assert final_texts(GUARD + first) == {TEXT: prefix + pieces[0]}


def test_split_every_character_and_lead_whitespace() -> None:
    data = stream(answer("a"), b"\r\n" + answer("a" + TRICKY))
    event = events_of(data)[-1]
    assert event.raw.startswith(b"\r\n")
    out = GeminiWebAdapter().split(event, list(TRICKY))
    assert out[0].startswith(b"\r\n") and not any(o.startswith(b"\r\n") for o in out[1:])
    again = events_of(stream(answer("a"), *out))
    assert [e.text for e in again[2:]] == list(TRICKY)
    assert final_texts(stream(answer("a"), *out)) == {TEXT: "a" + TRICKY}


def test_thoughts_channel_and_both_growing() -> None:
    data = stream(answer(None, thoughts="Think"), answer(None, thoughts="Thinking hard"),
                  answer("A", thoughts="Thinking hard"), answer("Ab", thoughts="Thinking harder"))
    events = [e for e in events_of(data) if e.texts]
    assert [e.texts for e in events] == [((REASONING, "Think"),), ((REASONING, "ing hard"),),
                                         ((TEXT, "A"),), ((TEXT, "b"), (REASONING, "er"))]
    assert [e.splittable for e in events] == [True, True, True, False]
    out = GeminiWebAdapter().split(events[1], ["ing", " hard"])
    assert final_texts(GUARD + out[0]) == {REASONING: "Thinking"}


def test_rewrite_is_atomic_and_new_candidate_restarts() -> None:
    data = stream(answer("Hello world"), answer("Hello there"), answer("Hi", rcid="rc_2"),
                  answer("Hi you", rcid="rc_2"), answer("Hi"), TRAILER)
    events = [e for e in events_of(data) if e.texts]
    assert [(e.texts, e.atomic, e.splittable) for e in events] == [
        (((TEXT, "Hello world"),), False, True),
        (((TEXT, "there"),), True, False),
        (((TEXT, "Hi"),), False, True),
        (((TEXT, " you"),), False, True),
        (((TEXT, "Hi"),), False, True),  # rcid changed back: a fresh candidate
    ]
    shrink = [e for e in events_of(stream(answer("Hello"), answer("Hel"))) if e.texts]
    assert len(shrink) == 1  # a shorter text adds no tokens


def test_single_piece_returns_raw_and_bad_pieces_raise() -> None:
    event = events_of(stream(answer("abc")))[-1]
    adapter = GeminiWebAdapter()
    assert adapter.split(event, ["abc"]) == [event.raw]
    with pytest.raises(ValueError):
        adapter.split(event, ["ab"])
    with pytest.raises(ValueError):
        adapter.split(events_of(stream(TRAILER))[-1], ["x"])


def test_frame_waits_for_its_last_unit() -> None:
    data = stream(answer("x😄"))
    adapter = GeminiWebAdapter()
    assert [e.raw for e in adapter.feed(data[:-1])] == [GUARD[:4]]
    [event] = adapter.feed(data[-1:])
    assert event.text == "x😄" and adapter.end() == []


# -- malformed input passes through byte-identical ----------------------------------------
GOOD = answer("ok")


def relen(frame: bytes, length: int) -> bytes:
    """`frame` with its length prefix replaced."""
    return str(length).encode() + frame[frame.index(b"\n"):]


@pytest.mark.parametrize("data", [
    b"",
    b")]}'",
    b")]",
    b"<!DOCTYPE html><html>error</html>",
    b")]}'\n\n[[\"wrb.fr\",null,\"[]\"]]\n",  # no length prefixes (rt missing)
    GUARD + relen(GOOD, 12),  # length too short: JSON cut, then no prefix where one should be
    GUARD + relen(GOOD, len(GOOD) + 50),  # too long: waits for bytes that never come
    GUARD + GOOD[:-5],
    GUARD + b"1234567890123\n[]\n",
    GUARD + b"5\n\xff\xfe[]\n",
    GUARD + framed('[["wrb.fr",null,"not json"]]'),
    GUARD + framed('[["wrb.fr",null,"[null,null,null,null,[]]"]]'),
    GUARD + framed('[["wrb.fr",null,"[null,null,null,null,[[\\"rc\\",[5]]]]"]]'),
    GUARD + framed('{"wrb.fr":1}'),
    GUARD + framed("[1, 2"),
    GUARD + b"2\n\xf0\x9f\x98\x84\n",  # the length ends inside a surrogate pair
    GUARD + TRAILER,
])
def test_malformed_passes_through(data: bytes) -> None:
    for chunks in ([data], [data[i:i + 1] for i in range(len(data))]):
        events = parse(GeminiWebAdapter, chunks)
        assert b"".join(e.raw for e in events) == data
        assert all(not e.texts for e in events)


def test_garbage_after_good_frames_passes_through() -> None:
    data = stream(answer("Hi"), b"oops\n" + answer("Hi there"))
    for chunks in ([data], [data[i:i + 7] for i in range(0, len(data), 7)]):
        events = parse(GeminiWebAdapter, chunks)
        assert b"".join(e.raw for e in events) == data
        assert channel_texts(events) == {TEXT: "Hi"}
