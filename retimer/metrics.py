"""Per-stream measurements with the public metric definitions, so numbers compare.

TTFT: request reached the proxy -> first token (any channel). TTFAT: -> first answer token.
Output rate: (N-1) / (t_last - t_first) over tokens (Artificial Analysis, AIPerf); tokens that
leave in one network event share its time. Tokens are counted with retimer's built-in splitter
(`retimer.tokenizer`), which the records name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.ma  # noqa: F401  np.percentile imports it lazily: ~60-90 ms on the event loop


from .protocols.base import Channel

TOKEN_COUNTER = "retimer-bpe-approx-v1"


@dataclass(slots=True)
class Side:
    """Token arrival (upstream) or departure (emitted) times for one stream."""

    first: float | None = None
    first_answer: float | None = None
    last: float | None = None
    tokens: int = 0
    by_channel: dict[str, int] = field(default_factory=dict)
    event_times: list[float] = field(default_factory=list)

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
        if len(self.event_times) > 2:
            gaps = np.diff(np.asarray(self.event_times)) * 1000
            p50, p90, p99 = np.percentile(gaps, [50, 90, 99])
            out["gap_ms"] = {"p50": round(p50, 3), "p90": round(p90, 3), "p99": round(p99, 3)}
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

    def emitted(self, now: float, n: int, channel: Channel | None, due: float) -> None:
        self.emitted_side.add(now, n, channel)
        self.lateness.append(now - due)
        self.last_sent = now

    def lateness_ms(self) -> dict[str, float] | None:
        if not self.lateness:
            return None
        arr = np.asarray(self.lateness) * 1000
        p50, p99 = np.percentile(arr, [50, 99])
        return {"p50": round(p50, 3), "p99": round(p99, 3), "max": round(float(arr.max()), 3)}

    def record(self, end: float) -> dict[str, Any]:
        """The timing part of a log record; `end` is when the response finished to the client."""
        return {
            "upstream": self.upstream.summary(self.start, self.last_byte),
            "emitted": self.emitted_side.summary(self.start, end),
            "lateness_ms": self.lateness_ms(),
            "token_counter": TOKEN_COUNTER,
        }
