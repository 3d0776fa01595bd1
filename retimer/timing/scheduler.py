"""When each token may leave the proxy: the `live` strategy on a token clock.

Pure arithmetic on monotonic seconds. A token is due at max(its arrival, the previous token's
due time + a gap drawn from the profile); the first at max(arrival, request start + TTFT).
Due times are nominal, so timer lateness never accumulates into the rate.
"""

from __future__ import annotations

from typing import Protocol


class TokenClock(Protocol):
    """What the scheduler paces by: the first token's wait, then a gap per token and a size
    per network event. `retimer.timing.model.StreamTiming` (a profile's draw for one stream,
    see `retimer.profile.model.Profile.stream_timing`) is one; `NoTiming` adds nothing."""

    ttft: float

    def gap(self) -> float: ...

    def chunk_size(self) -> int: ...


class NoTiming:
    """The timing of a passthrough stream: nothing is added."""

    ttft = 0.0

    def gap(self) -> float:
        return 0.0

    def chunk_size(self) -> int:
        return 1


class Scheduler:
    """Assigns due times to tokens in arrival order and accounts for upstream-bound waits."""

    __slots__ = ("_timing", "_start", "_last", "_in_first_chunk", "bound_s", "ttft_bound",
                 "not_before")

    def __init__(self, timing: TokenClock, start: float) -> None:
        self._timing = timing
        self._start = start
        self._last: float | None = None
        self._in_first_chunk = False
        self.bound_s = 0.0  # total time tokens waited for the upstream beyond their target
        self.ttft_bound = False  # the first token arrived after the target TTFT
        self.not_before = 0.0  # the first token never leaves earlier (the `smooth` strategy)

    @property
    def started(self) -> bool:
        return self._last is not None

    @property
    def last_due(self) -> float | None:
        return self._last

    def end_first_chunk(self) -> None:
        """Tokens after the first network event are spaced by gaps again."""
        self._in_first_chunk = False

    def token(self, arrival: float, n: int = 1) -> float:
        """Due time of the last of `n` tokens that arrived together."""
        last = self._last
        if last is None:
            target = max(self._start + self._timing.ttft, self.not_before)
            if arrival > target:
                self.ttft_bound = True
            last = max(arrival, target)
            self._in_first_chunk = True
            n -= 1
        for _ in range(n):
            target = last if self._in_first_chunk else last + self._timing.gap()
            if arrival > target:
                self.bound_s += arrival - target
                last = arrival
            else:
                last = target
        self._last = last
        return last


class PassthroughScheduler(Scheduler):
    """Every token is due when it arrives: records without re-timing."""

    def token(self, arrival: float, n: int = 1) -> float:
        self._last = arrival
        return arrival
