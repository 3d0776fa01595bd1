"""Per-stream measurements with the public metric definitions, so numbers compare.

TTFT: request reached the proxy -> first token (any channel). TTFAT: -> first answer token.
Output rate: (N-1) / (t_last - t_first) over tokens (Artificial Analysis, AIPerf); tokens that
leave in one network event share its time. Tokens are counted with retimer's built-in splitter
(`retimer.wire.tokenizer`), which the records name.

Traces: every record keeps both sides' network events (`trace`), so a recording can be fitted
(`retimer fit`) and drawn (`retimer report`) later. Per side, `t` holds event times in units
of `unit_ms` (0.01 ms): the first from the request start, each further one as the delta from
the previous (deltas keep the numbers small); `n` holds the tokens each event carried; the
emitted side adds `due`, the times the profile scheduled (same encoding): the target schedule.
Size is bounded: a side with more than TRACE_MAX_EVENTS events keeps its first
TRACE_EXACT_EVENTS one per entry (`exact` says how many) and merges the rest into groups of
consecutive events (each at its last event's time, with their tokens summed), so a side holds
at most TRACE_MAX_EVENTS entries (some 30 KB of JSON at worst), and the first token, the last
token and the token total stay exact. `events` then gives the number of events before merging.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from retimer.wire.protocols.base import Channel

TOKEN_COUNTER = "retimer-bpe-approx-v1"
TRACE_UNIT_MS = 0.01  # 10 us: gaps of fast profiles (2000 tok/s: 0.5 ms) keep their shape
TRACE_MAX_EVENTS = 2000
TRACE_EXACT_EVENTS = 1000
# a stream that never ends must not grow without bound: past this many events per side, the
# events after the first TRACE_EXACT_EVENTS are merged pairwise (later time, summed tokens),
# halving the tail; figures that need every event (gap quantiles) then see merged gaps
SIDE_MAX_EVENTS = 100_000


@dataclass(slots=True)
class Side:
    """Token arrival (upstream) or departure (emitted) times for one stream."""

    first: float | None = None
    first_answer: float | None = None
    last: float | None = None
    tokens: int = 0
    by_channel: dict[str, int] = field(default_factory=dict)
    event_times: list[float] = field(default_factory=list)
    event_tokens: list[int] = field(default_factory=list)

    def add(self, t: float, n: int, channel: Channel | None) -> None:
        if self.first is None:
            self.first = t
        if channel is Channel.TEXT and self.first_answer is None:
            self.first_answer = t
        self.last = t
        self.tokens += n
        key = str(channel) if channel else "other"
        self.by_channel[key] = self.by_channel.get(key, 0) + n
        self.event_times.append(t)
        self.event_tokens.append(n)

    def compact(self) -> slice:
        """Merge the tail's events pairwise; returns the slice of kept (later) tail indices."""
        head = TRACE_EXACT_EVENTS
        tail_t, tail_n = self.event_times[head:], self.event_tokens[head:]
        if len(tail_t) % 2:  # an odd one out stays alone at the end
            tail_t, last_t = tail_t[:-1], tail_t[-1:]
            tail_n, last_n = tail_n[:-1], tail_n[-1:]
        else:
            last_t, last_n = [], []
        self.event_times[head:] = tail_t[1::2] + last_t
        self.event_tokens[head:] = [a + b for a, b in zip(tail_n[::2], tail_n[1::2])] + last_n
        return slice(1, None, 2)

    def summary(self, start: float, end: float | None) -> dict[str, Any]:
        def ms(t: float | None) -> float | None:
            return None if t is None else round((t - start) * 1000, 3)

        tps = None
        if self.first is not None and self.last is not None and self.last > self.first:
            tps = round((self.tokens - 1) / (self.last - self.first), 3)
        out: dict[str, Any] = {
            "ttft_ms": ms(self.first),
            "ttfat_ms": ms(self.first_answer),
            "tokens": self.tokens,
            "tps": tps,
            "duration_ms": ms(end),
            "channels": dict(self.by_channel),
        }
        times = self.event_times
        if len(times) > 2:
            gaps = sorted([(b - a) * 1000 for a, b in zip(times, times[1:])])
            p50, p90, p99 = (round3(percentile(gaps, q)) for q in (50, 90, 99))
            out["gap_ms"] = {"p50": p50, "p90": p90, "p99": p99}
        return out


@dataclass(slots=True)
class StreamStats:
    """Everything a record says about one stream's timing."""

    start: float
    target_ttft: float
    upstream: Side = field(default_factory=Side)
    emitted_side: Side = field(default_factory=Side)
    first_byte: float | None = None
    last_byte: float | None = None
    last_sent: float | None = None
    lateness: list[float] = field(default_factory=list)

    def upstream_bytes(self, now: float) -> None:
        if self.first_byte is None:
            self.first_byte = now
        self.last_byte = now

    def upstream_tokens(self, now: float, n: int, channel: Channel | None) -> None:
        self.upstream.add(now, n, channel)
        if len(self.upstream.event_times) > SIDE_MAX_EVENTS:
            self.upstream.compact()

    def emitted(self, now: float, n: int, channel: Channel | None, due: float) -> None:
        self.emitted_side.add(now, n, channel)
        self.lateness.append(now - due)
        self.last_sent = now
        if len(self.emitted_side.event_times) > SIDE_MAX_EVENTS:
            head = TRACE_EXACT_EVENTS
            tail = self.lateness[head:]
            odd = tail[-1:] if len(tail) % 2 else []
            self.emitted_side.compact()
            self.lateness[head:] = tail[: len(tail) - len(odd)][1::2] + odd

    def lateness_ms(self) -> dict[str, float] | None:
        if not self.lateness:
            return None
        ms = sorted([x * 1000 for x in self.lateness])
        return {"p50": round3(percentile(ms, 50)), "p99": round3(percentile(ms, 99)),
                "max": round(ms[-1], 3)}

    def record(self, end: float) -> dict[str, Any]:
        """The timing part of a log record; `end` is when the response finished to the client."""
        return {
            "upstream": self.upstream.summary(self.start, self.last_byte),
            "emitted": self.emitted_side.summary(self.start, end),
            "lateness_ms": self.lateness_ms(),
            "token_counter": TOKEN_COUNTER,
            "trace": self.trace(),
        }

    def trace(self) -> dict[str, Any]:
        """Both sides' events, compact and bounded (see the module docstring)."""
        up, em = self.upstream, self.emitted_side
        k = min(len(em.event_times), len(self.lateness))
        dues = np.asarray(em.event_times[:k]) - np.asarray(self.lateness[:k])
        return {
            "unit_ms": TRACE_UNIT_MS,
            "upstream": encode_side(up.event_times, up.event_tokens, self.start),
            "emitted": encode_side(em.event_times, em.event_tokens, self.start, dues),
        }


# A record is made as each stream ends, on the event loop: its quantiles are computed in plain
# Python, a fifth of np.percentile's cost for a stream's few hundred events, and agree with
# numpy's to the bit (tests/unit/test_metrics_numpy.py).
def percentile(ordered: Sequence[float], q: float) -> float:
    """numpy.percentile(values, q) (its default, linear method) of the sorted `ordered`."""
    virtual = (len(ordered) - 1) * (q / 100)
    below = math.floor(virtual)
    a = ordered[below]
    b = ordered[min(below + 1, len(ordered) - 1)]
    gamma = virtual - below
    if gamma >= 0.5:  # numpy's two-sided lerp: exact at both ends
        return b - (b - a) * (1 - gamma)
    return a + (b - a) * gamma


def round3(x: float) -> float:
    """numpy.round(x, 3), which the records used (Python's round(x, 3) differs at some halves)."""
    return round(x * 1000.0) / 1000.0


def _units(times: np.ndarray, start: float) -> np.ndarray:
    """Absolute times as whole trace units since `start`, then as deltas."""
    ticks = np.rint((times - start) * (1000.0 / TRACE_UNIT_MS)).astype(np.int64)
    return np.diff(ticks, prepend=0)


def encode_side(
    times: Sequence[float], tokens: Sequence[int], start: float,
    dues: Sequence[float] | np.ndarray | None = None,
    max_events: int = TRACE_MAX_EVENTS, exact: int = TRACE_EXACT_EVENTS,
) -> dict[str, Any]:
    """One side of a trace: event times (monotonic seconds) and tokens, merged past the bound."""
    k = min(len(times), len(tokens))
    t = np.asarray(times[:k], dtype=np.float64)
    d = np.asarray(dues[:k], dtype=np.float64) if dues is not None else None
    out: dict[str, Any] = {}
    counts: list[int] = list(tokens[:k])  # a plain copy: the live view rebuilds this 4x a second
    if k > max_events:
        n = np.asarray(counts, dtype=np.int64)
        exact = min(exact, max_events - 1)
        group = -(-(k - exact) // (max_events - exact))  # ceil: tail groups of this many events
        ends = np.r_[np.arange(exact), np.arange(exact + group - 1, k, group)]
        if ends[-1] != k - 1:
            ends = np.r_[ends, k - 1]
        sums = np.cumsum(n)[ends]
        counts = np.diff(sums, prepend=0).tolist()
        t = t[ends]
        d = d[ends] if d is not None else None
        out.update(exact=int(exact), events=int(k))
    out["t"] = _units(t, start).tolist()
    out["n"] = counts
    if d is not None:
        out["due"] = _units(d, start).tolist()
    return out


def decode_side(side: dict[str, Any] | None, unit_ms: float = TRACE_UNIT_MS,
                key: str = "t") -> tuple[np.ndarray, np.ndarray]:
    """(event times in ms from the request start, tokens per event) of one encoded side;
    key="due" gives the scheduled times instead. Empty arrays when absent or malformed."""
    if not isinstance(side, dict):
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    try:
        t = np.cumsum(np.asarray(side.get(key) or [], dtype=np.float64)) * float(unit_ms)
        n = np.asarray(side.get("n") or [], dtype=np.int64)
    except (TypeError, ValueError):
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    k = min(len(t), len(n))
    return t[:k], n[:k]
