"""Fuzzing every adapter and framer: bad input never raises, never hangs, never changes a byte.

Inputs are recorded streams mutated (see `fuzz_support.mutated_stream`), pure random bytes,
binary data labelled as a stream, enormous events and multi-byte characters cut at every
byte; the properties are in `fuzz_support.check_stream`. Each input runs under a CPU-time
guard, so a hang fails the example instead of the CI job.

CI runs `FUZZ_EXAMPLES` examples per adapter and test (the whole file well under a minute);
`RETIMER_FUZZ_EXAMPLES=5000 pytest tests/unit/test_fuzz.py` fuzzes longer. Anything a long run
finds goes into tests/fixtures/fuzz/<adapter>/ as a plain file (see its README), replayed
below by `test_corpus`; hypothesis's own example database stays out of the repository.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.wire.ndjson import NDJSONParser
from retimer.wire.protocols import ADAPTERS, GenericStreamAdapter
from retimer.wire.protocols.websocket import encode_message
from retimer.wire.sse import SSEParser, format_event
from tests.support.adapter_checks import rechunk
from tests.support.fixture_streams import load
from tests.support.fuzz_support import (
    MB,
    SPEC_BY_NAME,
    SPECIALS,
    SPECS,
    Spec,
    check_stream,
    cpu_limit,
    cuts_for,
    eventstream_pieces,
    mutated_stream,
    parse_chunks,
    run_pacer,
)
from tests.support.paths import FIXTURES

pytestmark = pytest.mark.slow  # the full run fuzzes; `scripts/test --fast` leaves it out

FUZZ_EXAMPLES = int(os.environ.get("RETIMER_FUZZ_EXAMPLES", "0") or 0)
CI_EXAMPLES = 40
CPU_LIMIT_S = 10.0  # per example; examples take milliseconds
CORPUS = FIXTURES / "fuzz"


def fuzz_settings(ci_examples: int = CI_EXAMPLES) -> settings:
    """`ci_examples` examples (or RETIMER_FUZZ_EXAMPLES), no deadline: the CPU guard bounds time."""
    return settings(
        max_examples=FUZZ_EXAMPLES or ci_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.large_base_example],
    )


ids = [s.name for s in SPECS]


def test_every_registered_adapter_is_fuzzed_with_its_own_seeds() -> None:
    """A new adapter is fuzzed at once with a broad sample; this asks for its own seeds
    (an entry in fuzz_support._DEDICATED) and its corpus directory."""
    fuzzed = {type(spec.make()) for spec in SPECS if spec.dedicated}
    assert set(ADAPTERS) <= fuzzed
    assert {"GenericStreamAdapter", "WebSocketMessageAdapter"} <= {c.__name__ for c in fuzzed}


# -- adapters --------------------------------------------------------------------------
@pytest.mark.parametrize("spec", SPECS, ids=ids)
@fuzz_settings()
@given(data=st.data())
def test_mutated_streams(spec: Spec, data: st.DataObject) -> None:
    stream = data.draw(mutated_stream(spec), label="stream")
    cuts = data.draw(cuts_for(stream), label="cuts")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    with cpu_limit(CPU_LIMIT_S):
        check_stream(spec, stream, cuts, seed)


_GARBAGE = (st.binary(max_size=3000)
            | st.lists(st.sampled_from(SPECIALS) | st.binary(max_size=8), max_size=60).map(b"".join))


@pytest.mark.parametrize("spec", SPECS, ids=ids)
@fuzz_settings()
@given(data=st.data())
def test_random_bytes(spec: Spec, data: st.DataObject) -> None:
    """Pure noise and noise made of framing tokens. Only the WebSocket adapter, whose input
    is retimer's own record encoding, may reject it, through the pacer's fail-open."""
    stream = data.draw(_GARBAGE, label="stream")
    cuts = data.draw(cuts_for(stream), label="cuts")
    with cpu_limit(CPU_LIMIT_S):
        check_stream(spec, stream, cuts, strict=not spec.internal_framing)


@fuzz_settings(CI_EXAMPLES * 2)
@given(messages=st.lists(st.tuples(st.binary(max_size=200)
                                   | st.text(max_size=60).map(str.encode)
                                   | st.builds(lambda t: json.dumps(
                                       {"type": "response.output_text.delta", "delta": t}).encode(),
                                       st.text(max_size=40)),
                                   st.booleans()), max_size=12),
       data=st.data())
def test_websocket_random_messages(messages: list[tuple[bytes, bool]], data: st.DataObject) -> None:
    """Any server messages (text or binary, UTF-8 or not, JSON or not) as the shell records them."""
    stream = b"".join(encode_message(p, is_text=t) for p, t in messages)
    cuts = data.draw(cuts_for(stream), label="cuts")
    with cpu_limit(CPU_LIMIT_S):
        check_stream(SPEC_BY_NAME["websocket"], stream, cuts)


_TYPE_STRING = re.compile(rb'"type"(\s*):(\s*)"([^"\\]*)"')


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_type_fields_of_the_wrong_kind(spec: Spec) -> None:
    """Every `"type": "..."` of a real stream made an object, then a list: valid JSON that
    names no known event (a lookup by it once raised `unhashable type`, found by the fuzzer in
    the Cohere adapter, and five others had the same line)."""
    seed = spec.seeds()[0]
    for wrong in (rb'"type"\1:\2{"\3": 1}', rb'"type"\1:\2["\3"]'):
        data = _TYPE_STRING.sub(wrong, seed)
        if data == seed:
            continue  # a format without `type` fields
        with cpu_limit(CPU_LIMIT_S):
            check_stream(spec, data, [len(data) // 3, len(data) // 2], strict=not spec.internal_framing)


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_binary_data_labelled_as_a_stream(spec: Spec) -> None:
    """A gzip body the upstream forgot to label, an image, a protobuf-ish blob."""
    rnd = random.Random(7)
    blobs = [gzip.compress(spec.seeds()[0]), b"\x89PNG\r\n\x1a\n" + rnd.randbytes(4000),
             bytes(range(256)) * 8]
    for blob in blobs:
        with cpu_limit(CPU_LIMIT_S):
            check_stream(spec, blob, [rnd.randrange(1, len(blob)) for _ in range(10)],
                         strict=not spec.internal_framing)


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_multibyte_characters_cut_at_every_byte(spec: Spec) -> None:
    """Every single cut through a small stream of 2-, 3- and 4-byte characters."""
    stream = spec.big("héllo wörld, 漢字 and 😀🤖 then 𝕏 e\u0301 done")
    assert re.search(rb"[\x80-\xff]", stream)
    for cut in range(1, len(stream)):
        check_stream(spec, stream, [cut], seed=cut)


TEXT_5MB = ("Lorem ipsum dolor sit amet, ünïcödé 漢字 😀 consectetur. " * (5 * MB // 60))


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_enormous_event(spec: Spec) -> None:
    """A 5 MB token event is parsed whole from 64 KB reads; a 1 MB one passes through the
    pacer byte for byte (the pacer's own cost is counting tokens: about 1 s per 5 MB here)."""
    for size, pace in ((5 * MB, False), (MB, True)):
        text = TEXT_5MB[:size]
        stream = spec.big(text)
        chunks = rechunk(stream, range(0, len(stream), 65536))
        with cpu_limit(10.0):
            events = parse_chunks(spec.make(), chunks)
            assert b"".join(e.raw for e in events) == stream
            if spec.dedicated:
                assert text in [e.text for e in events]
            if pace:
                out, pacer = run_pacer(spec.make(), chunks, passthrough=True)
                assert pacer.failure is None
                assert out == stream


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_large_event_paced(spec: Spec) -> None:
    """A 128 KB token event is split into thousands of pieces, in linear time, and the pieces
    carry its text exactly (1 MB takes about 1.2 s of CPU here)."""
    text = TEXT_5MB[: 128 * 1024]
    stream = spec.big(text)
    chunks = rechunk(stream, range(0, len(stream), 65536))
    with cpu_limit(10.0):
        out, pacer = run_pacer(spec.make(), chunks, passthrough=False, rnd=random.Random(3))
        assert pacer.failure is None
        again = [e.text for e in parse_chunks(spec.make(), [out]) if e.texts]
    events = parse_chunks(spec.make(), [stream])
    if any(e.splittable for e in events):
        assert len(again) > 1000  # it was split
    assert "".join(again) == "".join(e.text for e in events)


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_enormous_line_of_garbage(spec: Spec) -> None:
    """5 MB without a line ending or a valid frame: held as one partial event, then sent as it
    came; strict=False only for retimer's internal WebSocket records."""
    stream = b"data: " + b"x" * (5 * MB) + b"\xff"
    chunks = rechunk(stream, range(0, len(stream), 65536))
    with cpu_limit(20.0):
        out, pacer = run_pacer(spec.make(), chunks, passthrough=True)
        assert out == stream
        if not spec.internal_framing:
            assert pacer.failure is None
            assert b"".join(e.raw for e in parse_chunks(spec.make(), chunks)) == stream


# -- regressions found by fuzzing -------------------------------------------------------
def test_generic_sniffing_waits_for_a_whole_bom() -> None:
    """A BOM cut after its first byte once made an NDJSON stream sniff as SSE, and a first
    line starting with a BOM was counted whole as text (the corpus replay of
    generic-sniff/bom-then-stream, byte by byte, found both)."""
    line = b'{"message": {"role": "assistant", "content": "Hi there"}}\n'
    adapter = GenericStreamAdapter()
    events = [e for b in (b"\xef", b"\xbb", b"\xbf" + line) for e in adapter.feed(bytes(b))]
    assert [e.text for e in events + adapter.end()] == ["Hi there"]


def test_a_damaged_message_that_taught_a_string_leaves_the_later_messages_whole() -> None:
    """A Connect message whose inner length was damaged (47 for 15 bytes) read as a string at
    field 1, where the later messages hold a nested message: a split of those was then read
    back by that learnt type ("\\n\\n lazy dog." for " lazy dog."). Such a message is now
    counted and left whole (a hunt's fuzz run found it; connect/found-damaged-length-...)."""
    from retimer.wire.protobuf_text import find_texts

    damaged = b"\n\x11\n/The quick brown\x12\x08model-7b\x18\x00"
    later = b"\n\x10\n\x0e the lazy dog.\x12\x08model-7b\x18\x02"
    schema: dict[tuple[int, ...], bool] = {}
    assert [(t.text, t.ambiguous) for t in find_texts(damaged, schema)] == [("\n/The quick brown", False)]
    assert [(t.text, t.ambiguous) for t in find_texts(later, schema)] == [(" the lazy dog.", True)]
    assert [(t.text, t.ambiguous) for t in find_texts(later, {})] == [(" the lazy dog.", False)]


def _legacy_chatgpt(text: str) -> bytes:
    obj = {"message": {"id": "m1", "author": {"role": "assistant"}, "status": "in_progress",
                       "content": {"content_type": "text", "parts": [text]}}}
    return f"data: {json.dumps(obj)}\n\n".encode()


@pytest.mark.parametrize("name", ["gemini-web", "chatgpt-web"])
def test_cumulative_frame_too_big_to_split_goes_whole(name: str) -> None:
    """Each piece of a cumulative frame repeats the text so far, so a 64 KB jump once became
    ~130 MB of pieces (256 KB: gigabytes, minutes of CPU). Past 32 MiB of pieces the frame is
    sent whole, still counted; ordinary frames are still split."""
    spec = SPEC_BY_NAME[name]
    make = spec.big if name == "gemini-web" else _legacy_chatgpt
    small, big = make(TEXT_5MB[:400]), make(TEXT_5MB[: 64 * 1024])
    [small_event] = [e for e in parse_chunks(spec.make(), [small]) if e.texts]
    [big_event] = [e for e in parse_chunks(spec.make(), [big]) if e.texts]
    assert small_event.splittable
    assert not big_event.splittable and big_event.text == TEXT_5MB[: 64 * 1024]
    with cpu_limit(2.0):
        out, pacer = run_pacer(spec.make(), [big], passthrough=False, rnd=random.Random(1))
    assert pacer.failure is None and out == big


# -- framers ---------------------------------------------------------------------------
def _sse_reference(data: bytes) -> list[tuple[str | None, str | None]]:
    """(event, data) of each complete event, straight from the WHATWG rules, for comparison."""
    text = data.decode("utf-8", "replace")
    text = text.removeprefix("\ufeff")
    lines = re.split(r"\r\n|\r|\n", text)[:-1]  # the unterminated tail is no line
    out: list[tuple[str | None, str | None]] = []
    name: str | None = None
    buf: list[str] | None = None
    seen = False
    for line in lines:
        if not line:
            if seen:
                out.append((name, None if buf is None else "\n".join(buf)))
            name, buf, seen = None, None, False
            continue
        seen = True
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            buf = [*(buf or []), value]
        elif field == "event":
            name = value
    return out


_SSE_SEEDS = [load(f) for f in SPEC_BY_NAME["generic-sse"].fixtures[:12]]
_SSE_INPUT = st.sampled_from(_SSE_SEEDS).flatmap(
    lambda seed: st.lists(st.sampled_from(SPECIALS) | st.binary(max_size=6), max_size=20).map(
        lambda junk: seed[: len(seed) // 3] + b"".join(junk) + seed[len(seed) // 3 :])) | _GARBAGE


@fuzz_settings(CI_EXAMPLES * 4)
@given(stream=_SSE_INPUT, data=st.data())
def test_sse_parser(stream: bytes, data: st.DataObject) -> None:
    cuts = data.draw(cuts_for(stream), label="cuts")
    with cpu_limit(CPU_LIMIT_S):
        whole, chunked = SSEParser(), SSEParser()
        a = whole.feed(stream) + whole.end()
        b = [e for c in rechunk(stream, cuts) for e in chunked.feed(c)] + chunked.end()
    assert a == b  # every field, raw bytes included
    assert b"".join(e.raw for e in a) == stream
    assert [(e.event, e.data) for e in a if e.complete] == _sse_reference(stream)


@fuzz_settings(CI_EXAMPLES * 2)
@given(name=st.none() | st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"),
                                      max_size=10),
       text=st.text(max_size=80), newline=st.sampled_from(["\n", "\r\n", "\r"]))
def test_format_event_reparses(name: str | None, text: str, newline: str) -> None:
    """A split piece carries its data through any line ending, including ones inside it."""
    parser = SSEParser()
    [event] = parser.feed(format_event(name, text, newline)) + parser.end()  # a last CR waits
    assert event.complete and event.event == name and event.data == re.sub(r"\r\n|\r", "\n", text)


@fuzz_settings(CI_EXAMPLES * 4)
@given(stream=_GARBAGE | st.sampled_from([load(f) for f in SPEC_BY_NAME["generic-ndjson"].fixtures]),
       data=st.data())
def test_ndjson_parser(stream: bytes, data: st.DataObject) -> None:
    cuts = data.draw(cuts_for(stream), label="cuts")
    whole, chunked = NDJSONParser(), NDJSONParser()
    a = whole.feed(stream) + whole.end()
    b = [line for c in rechunk(stream, cuts) for line in chunked.feed(c)] + chunked.end()
    assert a == b
    assert b"".join(line.raw for line in a) == stream
    assert all(line.terminated for line in a[:-1])


@fuzz_settings(CI_EXAMPLES * 4)
@given(data=st.data())
def test_eventstream_framer(data: st.DataObject) -> None:
    """Frames or pass-through, the framer hands back every byte once, in order, whatever the
    chunking; the frames before a failure do not depend on the chunking either."""
    stream = data.draw(mutated_stream(SPEC_BY_NAME["bedrock-eventstream"]) | _GARBAGE, label="stream")
    cuts = data.draw(cuts_for(stream), label="cuts")
    with cpu_limit(CPU_LIMIT_S):
        out, frames, failure = eventstream_pieces(stream, rechunk(stream, cuts))
        whole_out, whole_frames, whole_failure = eventstream_pieces(stream, [stream])
    assert out == whole_out == stream
    assert frames == whole_frames
    assert (failure is None) == (whole_failure is None)


# -- the corpus ------------------------------------------------------------------------
def corpus_cases() -> list[Path]:
    return sorted(p for p in CORPUS.glob("*/*.bin"))


@pytest.mark.parametrize("case", corpus_cases(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_corpus(case: Path) -> None:
    """Saved inputs: with their recorded cuts (`NAME.cuts`), in one piece and byte by byte."""
    spec = SPEC_BY_NAME[case.parent.name]
    stream = case.read_bytes()
    cuts_file = case.with_suffix(".cuts")
    recorded = [int(x) for x in cuts_file.read_text().split()] if cuts_file.exists() else []
    strict = not spec.internal_framing or case.stem.startswith("valid-")
    with cpu_limit(CPU_LIMIT_S * 3):
        for cuts in (recorded, [], range(1, min(len(stream), 4000))):
            check_stream(spec, stream, list(cuts), seed=len(stream), strict=strict)


def test_corpus_is_not_empty() -> None:
    """Every fuzzed adapter has saved edge cases (see tests/fixtures/fuzz/README.md)."""
    assert {p.parent.name for p in corpus_cases()} >= {s.name for s in SPECS if s.dedicated}
