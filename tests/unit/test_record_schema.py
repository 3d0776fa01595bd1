"""The records log's contract: typed records, their JSON form, the one reader, and the docs.

docs/records.md's field tables are the schema a user reads; these tests hold them to
retimer.records.schema both ways (every field documented, no documented field missing).
Version 1 records (written before `schema`, kept in tests/fixtures/records/v1.jsonl as real
proxies wrote them) still read, and read back to the same JSON.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retimer.records.parse import NotARecord, parse_record, stream_record_of
from retimer.records.reader import Log, read_lines
from retimer.records.schema import (
    SCHEMA_VERSION,
    Demo,
    Model,
    ParticipantEvent,
    Rating,
    Side,
    StreamRecord,
    StudyTags,
    Target,
)
from tests.support.paths import ROOT

V1 = ROOT / "tests" / "fixtures" / "records" / "v1.jsonl"

FULL_SIDE = Side(ttft_ms=18.7, ttfat_ms=19.0, tokens=41, tps=7024.8, duration_ms=24.4,
                 channels={"text": 40, "reasoning": 1}, gap_ms={"p50": 0.0, "p90": 0.8, "p99": 4.5})
FULL_MODEL = Model(speed=1.0, thinking="off", drawn=True, ttft_draw_ms=812.4, prompt_tokens=1200,
                   cached_tokens=0, prefill_ms=10.0, hidden_reasoning_tokens=0,
                   hidden_reasoning_ms=0.0, stalls=1, stall_ms=250.0)
FULL = StreamRecord(
    id="f1", time="2026-11-30T02:19:43+00:00", url="https://api.openai.com/v1/chat/completions",
    protocol="openai-chat", profile="openai-gpt-5", effective_profile="openai-gpt-5 tps=10",
    seed=7, stream=3, status=200, outcome="complete", target=Target(812.4, 95.0),
    model=FULL_MODEL, upstream=FULL_SIDE, emitted=replace(FULL_SIDE, tps=95.3),
    lateness_ms={"p50": 0.4, "p99": 1.9, "max": 2.3}, token_counter="retimer-bpe-approx-v1",
    trace={"unit_ms": 0.01, "upstream": {"t": [1870], "n": [3]}}, upstream_bound=False,
    upstream_wait_ms=0.0, strategy="live", smooth_delay_ms=None, fallback=None, keepalives=0,
    released_early=0, cache="stored", cassette={"match": "replayed", "call": 1, "reason": "replayed"},
    study=StudyTags("s", "P1", "fast", 2, conversation="c", level=400, staircase="1-down/1-up; slow",
                    study_error="state unavailable: x", state_wait_ms=812.5, arrival=3),
    worker=2, demo=Demo(pane=1, run="r1"), connection="c9", turn=2,  # every optional field set
)
FULL_RATING = Rating(stream="f1", time="2026-11-30T02:20:00.000+00:00",
                     scores={"speed": 5, "quality": None}, slow=True, stream_index=3, study="s",
                     participant="P1", condition="fast", unit=2, task=1, conversation="c")
FULL_EVENT = ParticipantEvent("s", "P1", "finished", "2026-11-30T02:30:00.000+00:00")


def _tables() -> dict[str, list[str]]:
    """docs/records.md's field tables: heading -> the fields of its rows, in order."""
    text = (ROOT / "docs" / "records.md").read_text()
    reference = text.split("## Field reference", 1)[1].split("\n## ", 1)[0]
    out: dict[str, list[str]] = {}
    for part in reference.split("\n### ")[1:]:
        heading, _, body = part.partition("\n")
        out[heading.strip()] = re.findall(r"^\| `([a-z_]+)` \|", body, re.M)
    return out


def test_the_docs_tables_are_the_schema() -> None:
    tables = _tables()
    stream_keys = list(FULL.to_json()) + list(replace(FULL, demo=Demo(warmup=True)).to_json())
    assert set(tables["Stream records"]) == set(stream_keys)
    assert len(tables["Stream records"]) == len(set(tables["Stream records"]))
    assert tables["`upstream` and `emitted`"] == list(FULL_SIDE.to_json())
    assert tables["`target`"] == list(Target().to_json())
    assert tables["`model`"] == list(FULL_MODEL.to_json())
    assert tables['Ratings (`"type": "rating"`)'] == list(FULL_RATING.to_json())
    assert tables['Participant events (`"type": "participant"`)'] == list(FULL_EVENT.to_json())
    assert f"| `schema` | int | the record format's version: {SCHEMA_VERSION}" in \
        (ROOT / "docs" / "records.md").read_text()


@pytest.mark.parametrize("record", [FULL, replace(FULL, demo=Demo(warmup=True)), FULL_RATING,
                                    FULL_EVENT, StreamRecord(id="bare"), Rating(stream="x")],
                         ids=["full", "warmup", "rating", "event", "bare", "bare-rating"])
def test_a_record_reads_back_as_itself(record: StreamRecord | Rating | ParticipantEvent) -> None:
    line = json.dumps(record.to_json())
    assert parse_record(json.loads(line)) == record


def test_a_stream_of_a_passthrough_writes_no_draw() -> None:
    passthrough = Model(speed=1.0, thinking="off", prompt_tokens=900, cached_tokens=0)
    assert passthrough.to_json() == {"speed": 1.0, "thinking": "off", "prompt_tokens": 900,
                                     "cached_tokens": 0}
    assert Model(speed=1.0, thinking="off").to_json() == {"speed": 1.0, "thinking": "off"}
    drawn = Model(drawn=True).to_json()
    assert "prompt_tokens" in drawn and drawn["prompt_tokens"] is None  # a draw with no estimate
    # a study record names its participant and condition even when they are null (policy pass)
    assert StudyTags("s").to_json() == {"study": "s", "participant": None, "condition": None,
                                        "unit": None}


def test_version_1_records_read_and_write_back_the_same(tmp_path: Path) -> None:
    """Real records from before `schema` (tests/fixtures/records/v1.jsonl): every line reads,
    and each writes back as it was, `schema` apart."""
    lines = V1.read_text().splitlines()
    log = read_lines(lines, "v1")
    assert log.bad == [] and log.other_types == 0 and len(log.records) == len(lines)
    kinds = {type(r).__name__ for r in log.records}
    assert kinds == {"StreamRecord", "Rating", "ParticipantEvent"}
    for line, record in zip(lines, log.records, strict=True):
        written = record.to_json()
        if isinstance(record, StreamRecord):
            assert record.schema == 1 and written.pop("schema") == 1
        assert written == json.loads(line)
    protocols = {r.protocol for r in log.streams}
    assert {"openai-chat", "websocket", "non-streaming"} <= protocols
    assert any(r.study is not None for r in log.streams) and any(r.worker for r in log.streams)


def test_fields_of_the_wrong_type_read_as_missing() -> None:
    r = stream_record_of({
        "id": "x", "time": 5, "status": "200", "seed": True, "upstream_bound": "yes",
        "target": {"ttft_ms": "fast", "tps": float("nan")}, "model": [],
        "emitted": {"ttft_ms": float("inf"), "tokens": 2.5, "tps": True,
                    "channels": {"text": "3", "tool": 2}, "gap_ms": "wide"},
        "upstream": "none", "study": 3, "participant": "P1", "worker": "2",
    })
    assert (r.time, r.status, r.seed, r.upstream_bound, r.worker) == ("", None, None, None, None)
    assert r.target == Target() and r.model == Model() and r.upstream is None
    assert r.study is None and r.participant is None  # no study name: not a study record
    assert r.emitted == Side(channels={"tool": 2})
    assert r.when is None


def test_what_is_no_record_and_what_is_another_tools() -> None:
    for obj, why in (([1, 2], "not a JSON object"), ({"id": 3}, "id is not a string"),
                     ({"type": "rating", "speed": 5}, "names no stream"),
                     ({"type": "participant", "study": "s"}, "without its study")):
        with pytest.raises(NotARecord, match=why):
            parse_record(obj)
    assert parse_record({"type": "study-start"}) is None
    unknown = parse_record({"id": "n", "schema": 9, "colour": "red", "hint": {"a": 1}})
    assert isinstance(unknown, StreamRecord) and unknown.schema == 9
    assert unknown.extra == {"colour": "red", "hint": {"a": 1}}
    assert unknown.to_json()["colour"] == "red"  # kept as it was, written back


def test_the_reader_counts_what_it_skips_by_file_and_line() -> None:
    log = Log()
    read_lines(['{"id": "a", "emitted": {"tokens": 1}}', "", "not json", "[1]",
                '{"type": "new-kind"}', '{"id": "b", "participant": "P1", "study": "s"}'], "a.jsonl", log)
    read_lines(['{"type": "rating", "stream": "a", "speed": 3}', '{"id": 7}',
                '{"type": "rating", "stream": "a", "speed": 6, "slow": false}',
                '{"type": "rating", "stream": "b", "quality": 2}',
                '{"type": "rating", "stream": "gone", "speed": 1}',
                '{"type": "participant", "study": "s", "participant": "P1", "event": "finished"}',
                '{"id": "c", "half-writ'], "b.jsonl", log)
    assert [(b.source, b.line, b.why) for b in log.bad] == [
        ("a.jsonl", 3, "not JSON"), ("a.jsonl", 4, "not a JSON object"),
        ("b.jsonl", 2, "a stream record whose id is not a string"), ("b.jsonl", 7, "not JSON")]
    assert log.other_types == 1 and [s.id for s in log.streams] == ["a", "b"]
    assert log.sources == ["a.jsonl", "b.jsonl"] and len(log.bad_in("a.jsonl")) == 2
    # in file order, a later score on a scale replaces an earlier one; slow joins them
    assert log.scores() == {"a": {"speed": 6, "slow": False}, "b": {"quality": 2}}
    assert log.orphans() == 1 and [e.event for e in log.events] == ["finished"]


NUMBER = st.one_of(st.none(), st.integers(-10**6, 10**6),
                   st.floats(allow_nan=False, allow_infinity=False, width=32))
TEXT = st.one_of(st.none(), st.text(max_size=12))


@settings(max_examples=150, deadline=None)
@given(ttft=NUMBER, tokens=st.one_of(st.none(), st.integers(0, 10**6)), url=st.text(max_size=40),
       participant=TEXT, unit=st.one_of(st.none(), st.integers(0, 500)), level=NUMBER,
       bound=st.one_of(st.none(), st.booleans()), extra=st.dictionaries(
           st.text(min_size=1, max_size=8).map(lambda k: f"x_{k}"), st.integers(), max_size=3))
def test_any_record_round_trips_through_its_line(
    ttft: float | None, tokens: int | None, url: str, participant: str | None, unit: int | None,
    level: float | None, bound: bool | None, extra: dict[str, int],
) -> None:
    side = Side(ttft_ms=ttft, tokens=tokens)
    record = StreamRecord(id="h", url=url, target=Target(ttft, None), upstream=side, emitted=side,
                          upstream_bound=bound, study=StudyTags("s", participant, None, unit,
                                                                level=level), extra=extra)
    back = parse_record(json.loads(json.dumps(record.to_json())))
    assert back == record
    assert all(v is None or math.isfinite(v) for v in (back.target.ttft_ms,))
