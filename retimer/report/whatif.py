"""`retimer whatif`: a recorded session's time waiting on the model, as recorded, as the upstream
alone delivered, and as other profiles would give it. Pure: records in, figures out.

Why this shape (docs/whatif.md): a session is calls (one record each) and the time between
them (tools, the human). Calls that overlap (an agent's parallel calls) form one busy period,
which ends with its last call; between-call time is the session's span minus its busy time,
and stays fixed under every profile (the tools and the human do not speed up with the model).
Under a profile each call keeps its offset inside its period and takes the profile's mean wait
for the same prompt, cached and output tokens (retimer.profile.expected), so a period lasts
max(offset + wait) and the session between-call time plus the periods. Calls the model cannot
time (an error, a cut stream, no tokens, a fallback) keep their recorded wait everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from retimer.profile.expected import Calls, expected_waits
from retimer.profile.model import Profile
from retimer.records.schema import StreamRecord
from retimer.report.fields import side_value
from retimer.timing.metrics import TRACE_UNIT_MS, decode_side

__all__ = ["BY_CHOICES", "Call", "Figures", "ProfileFigures", "SessionResult", "calls_of",
           "combined", "session_figures", "sessions_of", "start_text", "whatif"]

BY_CHOICES = ("auto", "file", "participant", "conversation", "all")


@dataclass(frozen=True, slots=True)
class Call:
    """One stream record as the session sees it (seconds; start since the epoch)."""

    start: float
    recorded_s: float  # request reached the proxy -> last byte to the client
    upstream_s: float  # request reached the proxy -> last byte from the upstream
    tokens: int
    prompt_tokens: int | None
    cached_tokens: int
    shows_reasoning: bool
    whole: bool  # a non-streaming response, held whole
    unmodelled: str = ""  # why the timing model cannot time it ("" = it can)


def _reasoning(rec: StreamRecord) -> bool:
    return any(side is not None and side.channels.get("reasoning", 0) > 0
               for side in (rec.emitted, rec.upstream))


def _why_unmodelled(rec: StreamRecord, tokens: int) -> str:
    outcome = rec.outcome
    if outcome not in (None, "complete"):
        return f"outcome {outcome}"
    if rec.fallback:
        return "fallback (unparsed or capped)"
    status = rec.status
    websocket_turn = status == 101 and rec.protocol == "websocket"  # a turn of an open socket
    if status is not None and not 200 <= status < 300 and not websocket_turn:
        return f"status {status:.0f}"
    if tokens <= 0:
        return "no tokens"
    return ""


def _old_turn_end_ms(rec: StreamRecord, recorded: float | None) -> float | None:
    """A WebSocket turn recorded before version 3 ran until the client's next message: it ends
    with its last event sent, as its trace says (its recorded duration without a trace)."""
    trace = rec.trace or {}
    times, _ = decode_side(trace.get("emitted"), float(trace.get("unit_ms") or TRACE_UNIT_MS))  # type: ignore[arg-type]
    if not len(times):
        return recorded
    last = float(times[-1])
    return last if recorded is None else min(recorded, last)


def calls_of(records: Iterable[StreamRecord]) -> tuple[list[Call], int]:
    """The records as calls, and how many were left out (no time or no duration at all)."""
    calls: list[Call] = []
    skipped = 0
    for rec in records:
        when = rec.when
        recorded = side_value(rec, "emitted", "duration_ms")
        if rec.protocol == "websocket" and rec.schema < 3:
            recorded = _old_turn_end_ms(rec, recorded)
        upstream = side_value(rec, "upstream", "duration_ms")
        if when is None or (recorded is None and upstream is None):
            skipped += 1
            continue
        recorded_s = (recorded if recorded is not None else upstream or 0.0) / 1000.0
        upstream_s = (upstream if upstream is not None else recorded or 0.0) / 1000.0
        tokens = side_value(rec, "emitted", "tokens") or side_value(rec, "upstream", "tokens")
        calls.append(Call(
            start=when.timestamp(), recorded_s=max(recorded_s, 0.0),
            upstream_s=max(upstream_s, 0.0), tokens=int(tokens or 0),
            prompt_tokens=rec.model.prompt_tokens, cached_tokens=rec.model.cached_tokens or 0,
            shows_reasoning=_reasoning(rec), whole=rec.protocol == "non-streaming",
            unmodelled=_why_unmodelled(rec, int(tokens or 0)),
        ))
    return calls, skipped


def sessions_of(logs: Sequence[tuple[str, list[StreamRecord]]], by: str = "auto"
                ) -> tuple[str, list[tuple[str, list[StreamRecord]]]]:
    """(the grouping used, [(session label, its records)]): a session is a log file, a study
    participant, a conversation, or everything; `auto` takes participants when records
    carry them, else files."""
    if by == "auto":
        by = "participant" if any(r.participant is not None
                                  for _, recs in logs for r in recs) else "file"
    if by == "file":
        return by, [(name, recs) for name, recs in logs if recs]
    if by == "all":
        return by, [("all", [r for _, recs in logs for r in recs])]
    groups: dict[str, list[StreamRecord]] = {}
    for _, recs in logs:
        for r in recs:
            key: object = r.participant if by == "participant" else r.conversation
            if by == "conversation" and r.participant is not None:
                key = f"{r.participant} / {key if key is not None else '-'}"
            groups.setdefault("-" if key is None else str(key), []).append(r)
    return by, sorted(groups.items())


@dataclass(slots=True)
class Figures:
    """A session's times in seconds: waiting on the model (the busy periods), the calls' own
    waits summed (parallel calls each count) and the whole span, between-call time included."""

    waiting_s: float
    calls_s: float
    total_s: float


@dataclass(slots=True)
class ProfileFigures(Figures):
    """A profile's figures, and what its calls' mean waits are made of (summed over calls)."""

    profile: str = ""
    first_token_s: float = 0.0  # prefill-adjusted TTFT
    hidden_s: float = 0.0  # hidden thinking
    decode_s: float = 0.0
    stall_s: float = 0.0


@dataclass(slots=True)
class SessionResult:
    """One session: its calls, what could not be timed, and the figures per column."""

    session: str
    calls: int
    start: float  # epoch seconds of the first call
    between_s: float
    recorded: Figures
    upstream: Figures
    profiles: list[ProfileFigures] = field(default_factory=list)
    timed: int = 0  # calls the timing model timed (the rest keep their recorded wait)
    unmodelled: dict[str, int] = field(default_factory=dict)  # reason -> calls
    prompt_unknown: int = 0  # timed calls without a prompt estimate (a reference prompt)
    waits: dict[str, list[float]] = field(default_factory=dict)  # per call, in start order


def session_figures(starts: np.ndarray, recorded: np.ndarray, waits: np.ndarray
                    ) -> tuple[float, Figures]:
    """(between-call time, the figures for `waits`), the periods taken from `recorded`.

    Calls are sorted by start; a call starting before an earlier call ended joins their
    period (one that starts as another ends does not: calls merge only when they overlap).
    Each call keeps its offset from its period's start; a period lasts until its last call
    ends under `waits`."""
    if len(starts) == 0:
        return 0.0, Figures(0.0, 0.0, 0.0)
    order = np.argsort(starts, kind="stable")
    s, r, w = starts[order], recorded[order], waits[order]
    ends_so_far = np.maximum.accumulate(s + r)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] >= ends_so_far[:-1]
    heads = np.flatnonzero(new)
    period_start = s[heads][np.cumsum(new) - 1]
    recorded_len = np.maximum.reduceat(s - period_start + r, heads)
    span = float(ends_so_far[-1] - s[0])
    between = max(span - float(recorded_len.sum()), 0.0)
    lengths = np.maximum.reduceat(s - period_start + w, heads)
    waiting = float(lengths.sum())
    return between, Figures(waiting, float(w.sum()), between + waiting)


def whatif(label: str, records: Sequence[StreamRecord], profiles: Sequence[Profile],
           keep_waits: bool = False) -> SessionResult | None:
    """A session's figures: recorded, upstream alone, and per profile (None: no usable call)."""
    calls, skipped = calls_of(records)
    if not calls:
        return None
    calls.sort(key=lambda c: c.start)
    starts = np.array([c.start - calls[0].start for c in calls])
    recorded = np.array([c.recorded_s for c in calls])
    upstream = np.array([c.upstream_s for c in calls])
    timed = np.array([not c.unmodelled for c in calls])
    between, rec_fig = session_figures(starts, recorded, recorded)
    _, up_fig = session_figures(starts, recorded, np.where(timed, upstream, recorded))
    result = SessionResult(label, len(calls), calls[0].start, between, rec_fig, up_fig)
    if skipped:
        result.unmodelled["no time or duration (left out)"] = skipped
    for c in calls:
        if c.unmodelled:
            result.unmodelled[c.unmodelled] = result.unmodelled.get(c.unmodelled, 0) + 1
    result.prompt_unknown = sum(1 for c in calls if not c.unmodelled and c.prompt_tokens is None)
    chosen = [c for c in calls if not c.unmodelled]
    result.timed = len(chosen)
    shapes = Calls.of([c.tokens for c in chosen], [c.prompt_tokens for c in chosen],
                      [c.cached_tokens for c in chosen], [c.shows_reasoning for c in chosen],
                      [c.whole for c in chosen])
    if keep_waits:
        result.waits = {"recorded": recorded.tolist(), "upstream": upstream.tolist()}
    for p in profiles:
        parts = expected_waits(p, shapes)
        waits = recorded.copy()
        waits[timed] = parts.total
        _, fig = session_figures(starts, recorded, waits)
        result.profiles.append(ProfileFigures(
            fig.waiting_s, fig.calls_s, fig.total_s, profile=p.effective_name,
            first_token_s=float(parts.first_token.sum()), hidden_s=float(parts.hidden.sum()),
            decode_s=float(parts.decode.sum()), stall_s=float(parts.stalls.sum())))
        if keep_waits:
            result.waits[p.effective_name] = waits.tolist()
    return result


def combined(results: Sequence[SessionResult]) -> SessionResult:
    """Every session added up (times summed; the start is the earliest)."""
    if len(results) == 1:
        return results[0]

    def add(figs: list[Figures]) -> Figures:
        return Figures(sum(f.waiting_s for f in figs), sum(f.calls_s for f in figs),
                       sum(f.total_s for f in figs))

    out = SessionResult(f"all {len(results)} sessions", sum(r.calls for r in results),
                        min(r.start for r in results), sum(r.between_s for r in results),
                        add([r.recorded for r in results]), add([r.upstream for r in results]))
    for i, first in enumerate(results[0].profiles):
        column = [r.profiles[i] for r in results]
        f = add(list(column))
        out.profiles.append(ProfileFigures(
            f.waiting_s, f.calls_s, f.total_s, profile=first.profile,
            first_token_s=sum(c.first_token_s for c in column),
            hidden_s=sum(c.hidden_s for c in column), decode_s=sum(c.decode_s for c in column),
            stall_s=sum(c.stall_s for c in column)))
    for r in results:
        for why, n in r.unmodelled.items():
            out.unmodelled[why] = out.unmodelled.get(why, 0) + n
    out.prompt_unknown = sum(r.prompt_unknown for r in results)
    out.timed = sum(r.timed for r in results)
    return out


def start_text(result: SessionResult) -> str:
    """The session's first call as an ISO time (UTC, seconds)."""
    return datetime.fromtimestamp(result.start, UTC).isoformat(timespec="seconds")
