"""The SSE framer: exact bytes, spec field parsing, any chunking."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.wire.sse import CR, CRLF, LF, SSEEvent, SSEParser, format_event, is_event_stream
from tests.support.adapter_checks import rechunk
from tests.support.fixture_streams import ALL_SSE_FIXTURES, load


def parse_chunks(chunks: list[bytes]) -> list[SSEEvent]:
    parser = SSEParser()
    out: list[SSEEvent] = []
    for chunk in chunks:
        out.extend(parser.feed(chunk))
    out.extend(parser.end())
    return out


def parse_all(data: bytes) -> list[SSEEvent]:
    return parse_chunks([data])


# -- an independent oracle: the spec applied to the whole input at once -------------------
_LINE = re.compile(rb"([^\r\n]*)(\r\n|\r|\n)|([^\r\n]+)\Z")
_BOM = b"\xef\xbb\xbf"


def _fields(block: list[tuple[bytes, str, int]]) -> dict[str, object]:
    """Spec field parsing of an event's non-blank lines."""
    out: dict[str, object] = {"event": None, "id": None, "retry": None, "body": None}
    data_lines: list[str] = []
    comments: list[str] = []
    for content, _, offset in block:
        text = content.decode("utf-8", "replace")
        if text.startswith(":"):
            comments.append(text[2:] if text.startswith(": ") else text[1:])
            continue
        if out["body"] is None:
            out["body"] = offset
        name, colon, value = text.partition(":")
        value = value[1:] if colon and value.startswith(" ") else value
        if name == "data":
            data_lines.append(value)
        elif name == "event":
            out["event"] = value
        elif name == "id" and "\0" not in value:
            out["id"] = value
        elif name == "retry" and value.isascii() and value.isdigit():
            out["retry"] = int(value)
    out["data"] = "\n".join(data_lines) if data_lines else None
    out["comments"] = tuple(comments)
    return out


def reference(data: bytes) -> list[SSEEvent]:
    """Whole-input SSE framing written from the spec, to compare with the incremental parser."""
    events: list[SSEEvent] = []
    start = 0
    block: list[tuple[bytes, str, int]] = []  # non-blank lines: content, ending, offset in event
    last_nl = LF

    def build(end: int, complete: bool) -> SSEEvent:
        f = _fields(block)
        raw = data[start:end]
        nl = block[0][1] if block and block[0][1] else last_nl
        body = f["body"]
        return SSEEvent(raw=raw, event=f["event"], data=f["data"], id=f["id"],  # type: ignore[arg-type]
                        retry=f["retry"], comments=f["comments"], newline=nl,  # type: ignore[arg-type]
                        body_start=len(raw) if body is None else body, complete=complete)  # type: ignore[arg-type]

    for i, m in enumerate(_LINE.finditer(data)):
        content = m.group(1) if m.group(2) is not None else m.group(3)
        ending = (m.group(2) or b"").decode()
        if i == 0 and content.startswith(_BOM):
            content = content[len(_BOM):]
        if not content:  # a blank line (or a lone BOM at EOF): dispatch if there is an event
            if ending and block:
                events.append(build(m.end(), True))
                start, block = m.end(), []
            continue
        block.append((content, ending, m.start() - start))
        if ending:
            last_nl = ending
    if start < len(data):
        events.append(build(len(data), False))
    return events


# -- unit tests ------------------------------------------------------------------------
def test_fields_and_exact_raw() -> None:
    data = b": hello\nevent: delta\ndata: {\"a\":1}\nid: 42\nretry: 1500\n\n"
    [ev] = parse_all(data)
    assert ev.raw == data
    assert (ev.event, ev.data, ev.id, ev.retry, ev.comments) == ("delta", '{"a":1}', "42", 1500, ("hello",))
    assert ev.newline == LF and ev.complete
    assert ev.preamble == b": hello\n"


def test_data_lines_join_and_space_rules() -> None:
    [ev] = parse_all(b"data:no-space\ndata:  two spaces\ndata\ndata: \n\n")
    assert ev.data == "no-space\n two spaces\n\n"


def test_line_endings_detected() -> None:
    crlf, cr, lf = parse_all(b"data: a\r\n\r\ndata: b\r\rdata: c\n\n")
    assert (crlf.newline, crlf.data, crlf.raw) == (CRLF, "a", b"data: a\r\n\r\n")
    assert (cr.newline, cr.data, cr.raw) == (CR, "b", b"data: b\r\r")
    assert (lf.newline, lf.data) == (LF, "c")


def test_comment_only_blocks_are_events_without_data() -> None:
    data = b": OPENROUTER PROCESSING\n\n: keep-alive\n\ndata: x\n\n"
    a, b, c = parse_all(data)
    assert (a.data, a.comments, a.raw) == (None, ("OPENROUTER PROCESSING",), b": OPENROUTER PROCESSING\n\n")
    assert (b.data, b.comments) == (None, ("keep-alive",))
    assert c.data == "x" and c.preamble == b""


def test_extra_blank_lines_belong_to_the_next_event() -> None:
    data = b"data: 1\n\n\n\ndata: 2\n\n"
    first, second = parse_all(data)
    assert first.raw == b"data: 1\n\n"
    assert second.raw == b"\n\ndata: 2\n\n" and second.data == "2"
    assert second.preamble == b"\n\n"


def test_end_returns_trailing_bytes_verbatim() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: 1\n\ndata: [DO") == [parse_all(b"data: 1\n\n")[0]]
    assert parser.feed(b"NE]") == []
    [tail] = parser.end()
    assert (tail.raw, tail.data, tail.complete) == (b"data: [DONE]", "[DONE]", False)
    assert parser.end() == []


def test_end_with_only_blank_lines_left() -> None:
    events = parse_all(b"data: 1\n\n\n")
    assert [e.raw for e in events] == [b"data: 1\n\n", b"\n"]
    assert events[1].data is None and not events[1].complete


def test_cr_at_chunk_end_waits_for_next_byte() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: x\r\n\r") == []  # the last CR may be half of a CRLF
    [ev] = parser.feed(b"\n")
    assert ev.raw == b"data: x\r\n\r\n" and ev.newline == CRLF
    parser = SSEParser()
    assert parser.feed(b"data: y\r\r") == []
    [ev] = parser.end()  # at EOF a held CR is a line ending on its own
    assert ev.raw == b"data: y\r\r" and ev.complete and ev.data == "y"


def test_bom_ignored_only_at_stream_start() -> None:
    [a, b] = parse_all(b"\xef\xbb\xbfdata: 1\n\n\xef\xbb\xbfdata: 2\n\n")
    assert a.data == "1" and a.raw.startswith(b"\xef\xbb\xbf")
    assert b.data is None  # a BOM later is part of a field name, so the line is ignored


def test_id_with_nul_and_bad_retry_are_ignored() -> None:
    [ev] = parse_all(b"id: a\x00b\nretry: 12x\ndata: d\n\n")
    assert ev.id is None and ev.retry is None


def test_invalid_utf8_never_raises() -> None:
    [ev] = parse_all(b"data: \xff\xfe ok\n\n")
    assert ev.data == "\ufffd\ufffd ok"


def test_multibyte_character_cut_across_chunks() -> None:
    data = "data: héllo 😀\n\n".encode()
    for cut in range(1, len(data)):
        [ev] = parse_chunks([data[:cut], data[cut:]])
        assert ev.data == "héllo 😀" and ev.raw == data


def test_feed_after_end_is_an_error() -> None:
    parser = SSEParser()
    parser.end()
    with pytest.raises(RuntimeError):
        parser.feed(b"data: x\n\n")


@pytest.mark.parametrize("newline", [LF, CRLF, CR])
def test_format_event_round_trips(newline: str) -> None:
    raw = format_event("content_block_delta", '{"a":"b"}\nsecond', newline, event_id="7", retry=10)
    [ev] = parse_all(raw)
    assert (ev.event, ev.data, ev.id, ev.retry, ev.newline, ev.raw) == (
        "content_block_delta", '{"a":"b"}\nsecond', "7", 10, newline, raw)
    assert raw.endswith((newline * 2).encode())


def test_format_event_without_name_and_bad_newline() -> None:
    assert format_event(None, "x", LF) == b"data: x\n\n"
    assert format_event(None, "", LF) == b"data: \n\n"
    with pytest.raises(ValueError):
        format_event(None, "x", "\n\r")


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [("text/event-stream", True), ("text/event-stream; charset=utf-8", True),
     ("Text/Event-Stream;charset=UTF-8", True), (" text/event-stream ", True),
     ("application/json", False), ("text/event-streamx", False), ("", False),
     ("application/x-ndjson", False)],
)
def test_is_event_stream(content_type: str, expected: bool) -> None:
    assert is_event_stream(content_type) is expected


def test_reference_oracle_agrees_on_a_known_case() -> None:
    data = b"\xef\xbb\xbf: c\r\nevent: e\r\ndata: 1\r\n\r\n\ndata: 2\rdata:3"
    assert reference(data) == parse_all(data)
    assert [e.raw for e in reference(data)] == [b"\xef\xbb\xbf: c\r\nevent: e\r\ndata: 1\r\n\r\n",
                                                b"\ndata: 2\rdata:3"]


# -- fixtures ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL_SSE_FIXTURES)
def test_fixture_raw_concatenation_and_oracle(name: str) -> None:
    data = load(name)
    events = parse_all(data)
    assert b"".join(e.raw for e in events) == data
    assert events == reference(data)


@pytest.mark.parametrize("name", ALL_SSE_FIXTURES)
def test_fixture_byte_by_byte(name: str) -> None:
    data = load(name)
    assert parse_chunks([data[i : i + 1] for i in range(len(data))]) == parse_all(data)


@pytest.mark.parametrize("name", ALL_SSE_FIXTURES)
def test_fixture_agrees_with_openai_sdk_decoder(name: str) -> None:
    sdk = pytest.importorskip("openai._streaming")
    data = load(name)
    try:
        theirs = [(e.event, e.data) for e in sdk.SSEDecoder().iter_bytes(iter([data]))]
    except UnicodeDecodeError:
        pytest.skip("the SDK decoder rejects invalid UTF-8")
    ours = [(e.event, e.data or "") for e in parse_all(data)
            if e.complete and (e.data is not None or e.event is not None or e.id is not None)]
    assert ours == theirs


# -- properties --------------------------------------------------------------------------
_FRAGMENTS = [
    b"data:", b"data: ", b"data", b"event: ", b"event:x", b"id: 7", b"id: a\x00b", b"retry: 150",
    b"retry: x1", b": ", b":", b"x", b" ", b'{"a": 1}', "é".encode(), "😀".encode(), "中".encode(),
    b"\xff", b"\xef\xbb\xbf", b"\r", b"\n", b"\r\n", b"\n\n", b"\r\n\r\n", b"\r\r",
]
streams = st.one_of(
    st.lists(st.sampled_from(_FRAGMENTS), max_size=60).map(b"".join),
    st.binary(max_size=200),
)


@settings(max_examples=400, deadline=None)
@given(data=streams, cuts=st.lists(st.integers(0, 400), max_size=30))
def test_property_any_chunking_same_events(data: bytes, cuts: list[int]) -> None:
    whole = parse_all(data)
    assert parse_chunks(rechunk(data, cuts)) == whole
    assert b"".join(e.raw for e in whole) == data
    assert whole == reference(data)


_payload = st.one_of(st.text(max_size=30).map(lambda t: t.encode()), st.binary(max_size=20))
# the parser's one-step path takes `[event: NAME LF] data: PAYLOAD LF LF` blocks: these streams
# are mostly such blocks (and near misses), so the oracle checks that path and its way out
plain_blocks = st.lists(
    st.one_of(
        st.tuples(st.one_of(st.none(), _payload), _payload).map(
            lambda b: (b"" if b[0] is None else b"event: " + b[0] + b"\n") + b"data: " + b[1] + b"\n\n"),
        st.sampled_from(_FRAGMENTS),
    ),
    max_size=20,
).map(b"".join)


@settings(max_examples=400, deadline=None)
@given(data=plain_blocks, cuts=st.lists(st.integers(0, 400), max_size=30))
def test_property_plain_blocks_match_the_spec(data: bytes, cuts: list[int]) -> None:
    whole = parse_all(data)
    assert whole == reference(data)
    assert parse_chunks(rechunk(data, cuts)) == whole
    assert b"".join(e.raw for e in whole) == data


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
@pytest.mark.parametrize("name", ALL_SSE_FIXTURES)
def test_property_fixture_rechunked(name: str, data: st.DataObject) -> None:
    raw = load(name)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=60), label="cuts")
    events = parse_chunks(rechunk(raw, cuts))
    assert events == parse_all(raw)
    assert b"".join(e.raw for e in events) == raw


@settings(max_examples=200, deadline=None)
@given(name=st.one_of(st.none(), st.text(alphabet=st.characters(blacklist_characters="\r\n"), max_size=10)),
       payload=st.text(max_size=40).filter(lambda s: "\r" not in s), newline=st.sampled_from([LF, CRLF, CR]))
def test_property_format_event_round_trip(name: str | None, payload: str, newline: str) -> None:
    try:
        raw = format_event(name, payload, newline)
    except UnicodeEncodeError:
        return  # lone surrogates cannot be UTF-8; adapters never pass them
    [ev] = parse_all(raw)
    assert ev.data == payload and ev.complete
    assert ev.event == name
