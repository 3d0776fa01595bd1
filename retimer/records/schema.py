"""The records log's lines as types: a stream, a rating, a participant's milestone.

Why typed: a record's fields are what every report, what-if, fit, export, study status and
analysis is computed from, so they are defined once, here, with their JSON form (`to_json`);
`retimer.records.parse` reads lines back into these types (older logs included) and
`retimer.records.reader` is the one reader of a log. docs/records.md documents every field
(tests/unit/test_record_schema.py holds the two to each other).

Version 1 logs (before `schema` was written) read the same: every field added since is
optional.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

__all__ = ["SCHEMA_VERSION", "Demo", "Model", "ParticipantEvent", "Rating", "Record", "Side",
           "StreamRecord", "StudyTags", "Target", "parse_time"]

SCHEMA_VERSION = 5
"""Written in every stream record as `schema`; a record without one is version 1. Version 3:
a WebSocket turn has an id of its own (`connection` names the socket, `turn` its place) and
its emitted duration ends with its last message (before: the socket's id, and until the
client's next message)."""

def parse_time(value: object) -> datetime | None:
    """A record's `time` (ISO 8601) as an aware datetime (UTC when it names no zone)."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a stream (the upstream's, or what the client got: `emitted`), as
    retimer.timing.metrics.Side.summary measures it (milliseconds from the request)."""

    ttft_ms: float | None = None
    ttfat_ms: float | None = None
    tokens: int | None = None
    tps: float | None = None
    duration_ms: float | None = None
    channels: Mapping[str, int] = field(default_factory=dict)
    gap_ms: Mapping[str, float] | None = None  # p50/p90/p99; absent with fewer than 3 events

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"ttft_ms": self.ttft_ms, "ttfat_ms": self.ttfat_ms,
                               "tokens": self.tokens, "tps": self.tps,
                               "duration_ms": self.duration_ms, "channels": dict(self.channels)}
        if self.gap_ms is not None:
            out["gap_ms"] = dict(self.gap_ms)
        return out


@dataclass(frozen=True, slots=True)
class Target:
    """What the profile aimed at: None for a passthrough stream."""

    ttft_ms: float | None = None
    tps: float | None = None

    def to_json(self) -> dict[str, object]:
        return {"ttft_ms": self.ttft_ms, "tps": self.tps}


@dataclass(frozen=True, slots=True)
class Model:
    """What shaped the stream's draw (retimer.timing.model); a passthrough stream has no draw
    (`drawn` False) but may know its prompt's size, for `retimer whatif`."""

    speed: float | None = None
    thinking: str | None = None
    drawn: bool = False
    ttft_draw_ms: float | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    prefill_ms: float | None = None
    hidden_reasoning_tokens: int | None = None
    hidden_reasoning_ms: float | None = None
    stalls: int | None = None
    stall_ms: float | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"speed": self.speed, "thinking": self.thinking}
        if self.drawn:
            out |= {"ttft_draw_ms": self.ttft_draw_ms, "prompt_tokens": self.prompt_tokens,
                    "cached_tokens": self.cached_tokens, "prefill_ms": self.prefill_ms,
                    "hidden_reasoning_tokens": self.hidden_reasoning_tokens,
                    "hidden_reasoning_ms": self.hidden_reasoning_ms, "stalls": self.stalls,
                    "stall_ms": self.stall_ms}
        elif self.prompt_tokens is not None:
            out |= {"prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens}
        return out


@dataclass(frozen=True, slots=True)
class StudyTags:
    """A study's fields on a stream (retimer.proxy.study.addon): participant and condition
    None when the request named nobody (policy `pass`), or (older logs) the study state was
    unavailable."""

    study: str
    participant: str | None = None
    condition: str | None = None
    unit: int | None = None  # the unit's position in the participant's sequence; None: not a unit
    conversation: str | None = None
    level: float | None = None  # a staircase unit's TTFT (ms) or rate (tok/s)
    staircase: str | None = None  # the rule and answer, "1-down/1-up; slow"
    study_error: str | None = None  # older logs: a unit passed untimed, its state unavailable
    state_wait_ms: float | None = None  # how long the request waited for the study's state
    arrival: int | None = None  # participant_ids arrival: the participant's place (from 0)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"study": self.study, "participant": self.participant,
                               "condition": self.condition, "unit": self.unit}
        for name in ("conversation", "level", "staircase", "study_error", "state_wait_ms", "arrival"):
            if (value := getattr(self, name)) is not None:
                out[name] = value
        return out


@dataclass(frozen=True, slots=True)
class Demo:
    """`retimer demo`'s fields: which pane and run a stream was, or a warm-up call."""

    pane: int | None = None  # the pane's index, left to right
    run: str | None = None  # the demo page's run id
    warmup: bool = False

    def to_json(self) -> dict[str, object]:
        if self.warmup:
            return {"demo_warmup": True}
        return {"demo_pane": self.pane, "demo_run": self.run}


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """One stream's record: what was asked of it, what the upstream did, what the client got.

    Holds the URL (redacted) and figures only: never headers, cookies, bodies or keys."""

    id: str  # unique: a WebSocket turn's is its connection's with `.N` (N: the turn)
    time: str = ""  # ISO 8601: when the request reached the proxy (a turn: its client message)
    url: str = ""
    protocol: str | None = None
    profile: str | None = None
    effective_profile: str | None = None  # the name plus overrides: what ran
    seed: int | None = None
    stream: int | None = None  # the proxy's (or the worker's) count of streams
    status: int | None = None
    outcome: str | None = None  # complete | upstream-error | client-gone | shutdown
    target: Target = Target()
    model: Model = Model()
    upstream: Side | None = None
    emitted: Side | None = None
    lateness_ms: Mapping[str, float] | None = None
    token_counter: str | None = None
    trace: Mapping[str, object] | None = None  # retimer.timing.metrics's compact event times
    upstream_bound: bool | None = None
    upstream_wait_ms: float | None = None
    strategy: str | None = None
    smooth_delay_ms: float | None = None
    fallback: str | None = None
    keepalives: int | None = None
    released_early: int | None = None
    cache: str | None = None  # stored | hit | miss | None (cache off)
    cassette: Mapping[str, object] | None = None  # a replayed call's match: match, call, reason
    study: StudyTags | None = None
    worker: int | None = None  # `retimer --workers N`: 1..N
    demo: Demo | None = None
    connection: str | None = None  # a WebSocket turn's socket (the id its turns share)
    turn: int | None = None  # a WebSocket turn's place: 0 before the client's first message
    schema: int = SCHEMA_VERSION
    extra: Mapping[str, object] = field(default_factory=dict)  # fields this version does not know (a newer writer's)

    @property
    def when(self) -> datetime | None:
        return parse_time(self.time)

    @property
    def profile_name(self) -> str:
        """The profile that ran: the effective one (with overrides), else the base, else "-"."""
        return self.effective_profile or self.profile or "-"

    @property
    def study_name(self) -> str | None:
        return self.study.study if self.study else None

    @property
    def participant(self) -> str | None:
        return self.study.participant if self.study else None

    @property
    def condition(self) -> str | None:
        return self.study.condition if self.study else None

    @property
    def unit(self) -> int | None:
        return self.study.unit if self.study else None

    @property
    def conversation(self) -> str | None:
        return self.study.conversation if self.study else None

    def to_json(self) -> dict[str, object]:
        """The record's line in the log (a JSON object), fields in their documented order."""
        out: dict[str, object] = {
            "schema": self.schema, "id": self.id, "time": self.time, "url": self.url,
            "protocol": self.protocol, "profile": self.profile,
            "effective_profile": self.effective_profile, "seed": self.seed,
            "stream": self.stream, "status": self.status, "outcome": self.outcome,
        }
        if self.connection is not None:
            out |= {"connection": self.connection, "turn": self.turn}
        out |= {"target": self.target.to_json(), "model": self.model.to_json()}
        for name in ("upstream", "emitted"):
            out[name] = None if (side := getattr(self, name)) is None else side.to_json()
        out |= {"lateness_ms": None if self.lateness_ms is None else dict(self.lateness_ms),
                "token_counter": self.token_counter, "trace": self.trace}
        out |= {"upstream_bound": self.upstream_bound, "upstream_wait_ms": self.upstream_wait_ms,
                "strategy": self.strategy, "smooth_delay_ms": self.smooth_delay_ms,
                "fallback": self.fallback, "keepalives": self.keepalives,
                "released_early": self.released_early}
        if self.study is not None:
            out |= self.study.to_json()
        if self.worker is not None:
            out["worker"] = self.worker
        if self.demo is not None:
            out |= self.demo.to_json()
        out["cache"] = self.cache
        if self.cassette is not None:
            out["cassette"] = dict(self.cassette)
        return {**out, **{k: v for k, v in self.extra.items() if k not in out}}


@dataclass(frozen=True, slots=True)
class Rating:
    """A participant's rating of one response (`"type": "rating"`): scores by scale (1-7;
    None for a scale shown and left unanswered) and the page's "did this feel slow?"."""

    stream: str  # the rated stream's id
    time: str = ""
    scores: Mapping[str, float | None] = field(default_factory=dict)
    slow: bool | None = None
    stream_index: int | None = None
    study: str | None = None
    participant: str | None = None
    condition: str | None = None
    unit: int | None = None
    task: int | None = None  # the study page's task
    conversation: str | None = None

    @property
    def when(self) -> datetime | None:
        return parse_time(self.time)

    @property
    def study_name(self) -> str | None:
        return self.study

    def answered(self) -> dict[str, float]:
        """The scales with a score."""
        return {k: v for k, v in self.scores.items() if v is not None}

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"type": "rating", "time": self.time, "stream": self.stream}
        if self.stream_index is not None:
            out["stream_index"] = self.stream_index
        for name in ("study", "participant", "condition", "unit", "task", "conversation"):
            if (value := getattr(self, name)) is not None:
                out[name] = value
        out |= self.scores
        if self.slow is not None:
            out["slow"] = self.slow
        return out


@dataclass(frozen=True, slots=True)
class ParticipantEvent:
    """A study page's milestone for one participant (`"type": "participant"`)."""

    study: str
    participant: str
    event: str  # consented | finished
    time: str = ""

    @property
    def study_name(self) -> str:
        return self.study

    def to_json(self) -> dict[str, object]:
        return {"type": "participant", "event": self.event, "study": self.study,
                "participant": self.participant, "time": self.time}


Record = StreamRecord | Rating | ParticipantEvent
