"""A log line's JSON object as a typed record (retimer.records.schema), leniently.

Why lenient: logs outlive versions and other tools write them too, so a field of the wrong
type (a string where a number belongs, NaN, a boolean for a count) reads as missing, never as
an error; only what makes a line no record at all (not an object, a rating naming no stream)
is refused. The figures a consumer reads are thereby checked once, here: a number is a finite
int or float and never a boolean.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from retimer.records.schema import (
    Demo,
    Model,
    ParticipantEvent,
    Rating,
    Record,
    Side,
    StreamRecord,
    StudyTags,
    Target,
)

__all__ = ["RATING_FIELDS", "NotARecord", "demo_tags", "number", "other_fields", "parse_record", "stream_record_of",
           "study_tags"]

RATING_FIELDS = frozenset({"type", "time", "stream", "stream_index", "study", "participant",
                           "condition", "unit", "task", "conversation", "slow"})
"""A rating line's fields that are not scales: every other numeric field is a score."""

_STREAM_FIELDS = frozenset({
    "schema", "type", "id", "time", "url", "protocol", "profile", "effective_profile", "seed",
    "stream", "status", "outcome", "target", "model", "upstream", "emitted", "lateness_ms",
    "token_counter", "trace", "upstream_bound", "upstream_wait_ms", "strategy",
    "smooth_delay_ms", "fallback", "keepalives", "released_early", "cache", "cassette", "study",
    "participant", "condition", "unit", "conversation", "level", "staircase", "study_error",
    "state_wait_ms", "arrival", "worker", "demo_pane", "demo_run", "demo_warmup", "connection", "turn",
})
_MODEL_DRAW = ("ttft_draw_ms", "prefill_ms", "hidden_reasoning_tokens", "hidden_reasoning_ms",
               "stalls", "stall_ms")


def number(value: object) -> float | None:
    """A finite number as a float, or None (booleans are not numbers)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: object) -> float | int | None:
    """A finite number as written (an int stays an int: counts and levels print as given)."""
    return value if number(value) is not None else None  # type: ignore[return-value]


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _bool(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _dict(value: object) -> Mapping[str, object]:
    return value if isinstance(value, dict) else {}


def _numbers(value: object) -> dict[str, float] | None:
    if not isinstance(value, dict):
        return None
    return {str(k): n for k, v in value.items() if (n := _num(v)) is not None}


def _side(value: object) -> Side | None:
    if not isinstance(value, dict):
        return None
    channels = _dict(value.get("channels"))
    return Side(
        ttft_ms=_num(value.get("ttft_ms")), ttfat_ms=_num(value.get("ttfat_ms")),
        tokens=_int(value.get("tokens")), tps=_num(value.get("tps")),
        duration_ms=_num(value.get("duration_ms")),
        channels={str(k): n for k, v in channels.items() if (n := _int(v)) is not None},
        gap_ms=_numbers(value.get("gap_ms")),
    )


def _model(value: object) -> Model:
    m = _dict(value)
    return Model(
        speed=_num(m.get("speed")), thinking=_str(m.get("thinking")),
        drawn=any(k in m for k in _MODEL_DRAW), ttft_draw_ms=_num(m.get("ttft_draw_ms")),
        prompt_tokens=_int(m.get("prompt_tokens")), cached_tokens=_int(m.get("cached_tokens")),
        prefill_ms=_num(m.get("prefill_ms")),
        hidden_reasoning_tokens=_int(m.get("hidden_reasoning_tokens")),
        hidden_reasoning_ms=_num(m.get("hidden_reasoning_ms")), stalls=_int(m.get("stalls")),
        stall_ms=_num(m.get("stall_ms")),
    )


def study_tags(obj: Mapping[str, object]) -> StudyTags | None:
    if not isinstance(study := obj.get("study"), str):
        return None
    return StudyTags(
        study=study, participant=_str(obj.get("participant")),
        condition=_str(obj.get("condition")), unit=_int(obj.get("unit")),
        conversation=_str(obj.get("conversation")), level=_num(obj.get("level")),
        staircase=_str(obj.get("staircase")), study_error=_str(obj.get("study_error")),
        state_wait_ms=_num(obj.get("state_wait_ms")), arrival=_int(obj.get("arrival")),
    )


def demo_tags(obj: Mapping[str, object]) -> Demo | None:
    if obj.get("demo_warmup") is True:
        return Demo(warmup=True)
    if "demo_pane" not in obj and "demo_run" not in obj:
        return None
    return Demo(pane=_int(obj.get("demo_pane")), run=_str(obj.get("demo_run")))


def other_fields(obj: Mapping[str, object]) -> dict[str, object]:
    """The fields of a stream's object that no typed field holds (an addon's own, a newer
    version's): kept as they are."""
    return {k: v for k, v in obj.items() if k not in _STREAM_FIELDS}


def stream_record_of(obj: Mapping[str, object]) -> StreamRecord:
    """A stream's JSON object (a log line, or the fields the proxy gathered) as its record."""
    target = _dict(obj.get("target"))
    return StreamRecord(
        id=_str(obj.get("id")) or "", time=_str(obj.get("time")) or "",
        url=_str(obj.get("url")) or "", protocol=_str(obj.get("protocol")),
        profile=_str(obj.get("profile")), effective_profile=_str(obj.get("effective_profile")),
        seed=_int(obj.get("seed")), stream=_int(obj.get("stream")),
        status=_int(obj.get("status")), outcome=_str(obj.get("outcome")),
        target=Target(_num(target.get("ttft_ms")), _num(target.get("tps"))),
        model=_model(obj.get("model")), upstream=_side(obj.get("upstream")),
        emitted=_side(obj.get("emitted")), lateness_ms=_numbers(obj.get("lateness_ms")),
        token_counter=_str(obj.get("token_counter")),
        trace=trace if isinstance(trace := obj.get("trace"), dict) else None,
        upstream_bound=_bool(obj.get("upstream_bound")),
        upstream_wait_ms=_num(obj.get("upstream_wait_ms")), strategy=_str(obj.get("strategy")),
        smooth_delay_ms=_num(obj.get("smooth_delay_ms")), fallback=_str(obj.get("fallback")),
        keepalives=_int(obj.get("keepalives")), released_early=_int(obj.get("released_early")),
        cache=_str(obj.get("cache")),
        cassette=cassette if isinstance(cassette := obj.get("cassette"), dict) else None,
        study=study_tags(obj), worker=_int(obj.get("worker")),
        demo=demo_tags(obj), connection=_str(obj.get("connection")), turn=_int(obj.get("turn")),
        schema=_int(obj.get("schema")) or 1,
        extra=other_fields(obj),
    )


def _rating(obj: Mapping[str, object]) -> Rating | None:
    if not isinstance(stream := obj.get("stream"), str):
        return None
    scores = {str(k): _num(v) for k, v in obj.items()
              if k not in RATING_FIELDS and (v is None or _num(v) is not None)}
    return Rating(
        stream=stream, time=_str(obj.get("time")) or "", scores=scores, slow=_bool(obj.get("slow")),
        stream_index=_int(obj.get("stream_index")), study=_str(obj.get("study")),
        participant=_str(obj.get("participant")), condition=_str(obj.get("condition")),
        unit=_int(obj.get("unit")), task=_int(obj.get("task")),
        conversation=_str(obj.get("conversation")),
    )


def _participant(obj: Mapping[str, object]) -> ParticipantEvent | None:
    study, who, event = (_str(obj.get(k)) for k in ("study", "participant", "event"))
    if study is None or who is None or event is None:
        return None
    return ParticipantEvent(study, who, event, _str(obj.get("time")) or "")


class NotARecord(ValueError):
    """A JSON object that claims a record type but lacks what that type needs."""


def parse_record(obj: object) -> Record | None:
    """The typed record of a log line's JSON value; None for a line of another type (left to
    other tools); NotARecord when it is no record at all."""
    if not isinstance(obj, dict):
        raise NotARecord("not a JSON object")
    kind = obj.get("type", "stream")
    if kind == "stream":
        if not isinstance(obj.get("id", ""), str):
            raise NotARecord("a stream record whose id is not a string")
        return stream_record_of(obj)
    if kind == "rating":
        if (rating := _rating(obj)) is None:
            raise NotARecord("a rating that names no stream")
        return rating
    if kind == "participant":
        if (event := _participant(obj)) is None:
            raise NotARecord("a participant event without its study, participant or event")
        return event
    return None
