"""Every recorded stream goes through the adapter its request selects, and comes out intact.

The table of captured streams (which request each answers and what handles it) is
tests/support/fixture_table.py; a file without a row fails `test_table_covers_every_file`.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retimer.profile.loader import load_profile
from retimer.timing.model import StreamTiming
from retimer.timing.pacer import StreamPacer
from retimer.timing.scheduler import NoTiming
from retimer.wire.hosts import is_llm_host
from retimer.wire.protocols import fallback_adapter, find_adapter
from retimer.wire.protocols.base import Adapter, Channel, Event
from retimer.wire.protocols.generic import GenericStreamAdapter
from retimer.wire.tokenizer import split_tokens
from tests.support.adapter_checks import (
    SplitRecord,
    channel_texts,
    check_integrity,
    event_key,
    random_pieces,
    rechunk,
)
from tests.support.fixture_streams import STREAMS_DIR
from tests.support.fixture_table import (
    EVENTSTREAM,
    PACED,
    REASONING,
    TABLE,
    TEXT,
    TOOL_ARGS,
    factory,
    read,
    wire,
)
from tests.support.payload_streams import PAYLOAD_FIXTURES, payloads

DOCS = {"SOURCES.md", "nonstream/README.md"}  # notes, not responses
# generic rows whose host is not in hosts.LLM_HOSTS: the proxy passes them through unpaced
NOT_LLM_HOSTS: set[str] = set()


_SEQ = re.compile(rb'("sequence_number"\s*:\s*)\d+')


def _ending(data: bytes) -> bytes:
    """The line-ending bytes a stream or event ends with (b"" when it ends mid-line)."""
    return data[len(data.rstrip(b"\r\n")):]


def same_bytes(raw: bytes) -> bytes:
    """Event bytes as they must survive: a Responses split renumbers later events, by design."""
    return _SEQ.sub(rb"\1#", raw)


# -- the table ---------------------------------------------------------------------------
def test_table_covers_every_file() -> None:
    files = {p.relative_to(STREAMS_DIR).as_posix() for p in STREAMS_DIR.rglob("*") if p.is_file()}
    assert files - DOCS - set(TABLE) == set(), "fixtures without a row in TABLE"
    assert set(TABLE) - files == set(), "rows for missing fixtures"
    assert set(PAYLOAD_FIXTURES) <= set(TABLE)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_request_selects_expected_adapter(name: str) -> None:
    row = TABLE[name]
    found = find_adapter(row.shape(), row.ctype)
    if row.expect in ("generic", "passthrough"):
        assert found is None and row.why
        fallback = fallback_adapter(row.ctype)
        if row.expect == "generic":
            assert isinstance(fallback, GenericStreamAdapter)
            assert is_llm_host(row.host) is (name not in NOT_LLM_HOSTS)
        else:
            assert fallback is None
    else:
        assert found is not None and found.name == row.expect


# -- integrity under re-chunking and random splits --------------------------------------
def _stream(make: Callable[[], Adapter], data: bytes, cuts: list[int],
            choose: Callable[[Event], list[str] | None]) -> tuple[bytes, list[SplitRecord]]:
    """Feed chunk by chunk and split as events arrive, as the pacer does."""
    adapter = make()
    records: list[SplitRecord] = []
    for batch in [*(adapter.feed(c) for c in rechunk(data, cuts)), adapter.end()]:
        for event in batch:
            pieces = choose(event) if event.splittable else None
            out = adapter.split(event, pieces) if pieces else [event.raw]
            records.append(SplitRecord(event, pieces, out))
    return b"".join(b for r in records for b in r.out), records


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), seed=st.integers(0, 2**32))
@pytest.mark.parametrize("name", PACED)
def test_rechunked_and_split_stream_keeps_its_text_and_events(name: str, data: st.DataObject,
                                                              seed: int) -> None:
    make, raw, rnd = factory(name), wire(name), random.Random(seed)
    whole = read(make, raw)
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=60), label="cuts")
    assert [event_key(e) for e in read(make, raw, cuts)] == [event_key(e) for e in whole]
    output, records = _stream(make, raw, cuts,
                              lambda e: random_pieces(e.text, rnd) if rnd.random() < 0.7 else None)
    out_cuts = data.draw(st.lists(st.integers(0, len(output)), max_size=60), label="out_cuts")
    again = check_integrity(make, raw, records, output, out_cuts)  # type: ignore[arg-type]
    assert channel_texts(again) == channel_texts(whole)
    assert _non_token(again) == _non_token(whole)
    # the stream ends as it ended: an unterminated tail or a missing final newline survives
    if not whole[-1].texts:
        assert same_bytes(output).endswith(same_bytes(whole[-1].raw))
    elif TABLE[name].ctype != EVENTSTREAM:  # a split last event keeps its line ending
        assert _ending(again[-1].raw) == _ending(whole[-1].raw)
    assert _ending(output) == _ending(raw) or TABLE[name].ctype == EVENTSTREAM
    if not any(r.pieces and len(r.pieces) > 1 for r in records):
        assert output == raw


def _non_token(events: list[Event]) -> list[bytes]:
    return [same_bytes(e.raw) for e in events if not e.texts]


def _fast_timing() -> StreamTiming:
    profile = load_profile("cerebras").with_overrides(ttft="1ms", tps="5000", jitter=0)
    return profile.stream_timing(np.random.default_rng(7))


@pytest.mark.parametrize("timing", ["passthrough", "jitter-0"])
@pytest.mark.parametrize("name", PACED)
def test_pacer_output(name: str, timing: str) -> None:
    make, raw = factory(name), wire(name)
    adapter = make()
    splits: list[int] = []
    real_split = adapter.split

    def counting_split(event: Event, pieces: list[str]) -> list[bytes]:
        splits.append(len(pieces))
        return real_split(event, pieces)

    adapter.split = counting_split  # type: ignore[method-assign]
    passthrough = timing == "passthrough"
    timing_ = NoTiming() if passthrough else _fast_timing()
    pacer = StreamPacer(adapter, timing_, start=0.0, passthrough=passthrough)
    for i, part in enumerate(rechunk(raw, range(0, len(raw), 97))):
        pacer.feed(part, now=i * 0.001)
    pacer.finish(now=1.0)
    out = b"".join(e.data for e in pacer.pop_all())
    assert pacer.fallback is None
    if not splits:
        assert out == raw
    else:
        assert not passthrough
        assert channel_texts(read(make, out)) == channel_texts(read(make, raw))
        assert _non_token(read(make, out)) == _non_token(read(make, raw))
    if not passthrough and any(e.splittable and len(split_tokens(e.text)) > 1 for e in read(make, raw)):
        assert splits, "a metronome timing cuts multi-token events into tokens"


# -- payload-only files: each payload's text, read independently -------------------------
def _chat_texts(obj: dict) -> list[tuple[Channel, str]]:
    """OpenAI-compatible chunks: content/refusal, reasoning, tool arguments, legacy `text`."""
    out: list[tuple[Channel, str]] = []
    for choice in obj.get("choices") or []:
        if isinstance(choice.get("text"), str):
            out.append((TEXT, choice["text"]))
        delta = choice.get("delta") or {}
        for key, value in delta.items():
            if key in ("content", "refusal") and isinstance(value, str):
                out.append((TEXT, value))
            elif key == "content" and isinstance(value, list):  # Mistral typed chunks
                for item in value:
                    if item["type"] == "text":
                        out.append((TEXT, item["text"]))
                    elif item["type"] == "thinking":
                        out += [(REASONING, t["text"]) for t in item["thinking"] if t["type"] == "text"]
            elif key in ("reasoning_content", "reasoning") and isinstance(value, str):
                out.append((REASONING, value))
            elif key == "tool_calls":
                out += [(TOOL_ARGS, c["function"]["arguments"]) for c in value
                        if isinstance((c.get("function") or {}).get("arguments"), str)]
    return out


def _typed_texts(obj: dict) -> list[tuple[Channel, str]]:
    """Anthropic, Responses, Cohere v2 and Gemini Interactions events."""
    kind, delta = obj.get("type") or obj.get("event_type"), obj.get("delta")
    msg = delta.get("message", {}) if isinstance(delta, dict) else {}
    found: list[tuple[Channel, object]] = {
        "content_block_delta": lambda: [(TEXT, delta.get("text")), (REASONING, delta.get("thinking")),
                                        (TOOL_ARGS, delta.get("partial_json"))],
        "response.output_text.delta": lambda: [(TEXT, delta)],
        "content-delta": lambda: [(TEXT, msg["content"].get("text")),
                                  (REASONING, msg["content"].get("thinking"))],
        "tool-plan-delta": lambda: [(REASONING, msg["tool_plan"])],
        "tool-call-delta": lambda: [(TOOL_ARGS, msg["tool_calls"]["function"]["arguments"])],
        "step.delta": lambda: [(TEXT, delta.get("text")), (TOOL_ARGS, delta.get("arguments")),
                               (REASONING, (delta.get("content") or {}).get("text"))],
    }.get(kind, lambda: [])()
    return [(c, t) for c, t in found if isinstance(t, str)]


@pytest.mark.parametrize("name", PAYLOAD_FIXTURES)
def test_each_payload_text_is_found(name: str) -> None:
    events = [e for e in read(factory(name), wire(name)) if b"data: {" in e.raw]
    lines = payloads(name)
    assert [e.raw.split(b"data: ", 1)[1].rstrip(b"\n") for e in events] == lines
    for line, event in zip(lines, events, strict=True):
        obj = json.loads(line)
        expected = [(c, t) for c, t in (_chat_texts(obj) or _typed_texts(obj)) if t]
        assert list(event.texts) == expected, line[:200]
    assert any(e.texts for e in events) or "refusal" in name or "error" in name


@pytest.mark.parametrize("name", PACED)
def test_only_streams_with_the_apis_error_say_so(name: str) -> None:
    """`api_error` keeps transient failures out of the response cache: it is set by the error
    captures and by nothing else (ChatGPT's `"error": null` is no error)."""
    adapter = factory(name)()
    read(lambda: adapter, wire(name))
    assert adapter.api_error == ("error" in name.rsplit("/", 1)[-1])
    assert adapter.anomaly is None  # the real captures are well-formed
