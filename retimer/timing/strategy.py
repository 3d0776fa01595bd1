"""What to do when the upstream is slower than the target: the three strategies, sans-io.

* `live` (default): each token leaves at its target time or when it arrives, whichever is later.
* `smooth`: hold the start back just enough that the rest can play at the profile's rate without
  stalling, predicted from the upstream's pace over the first tokens and the expected length
  (the request's max-tokens hint, capped, or a typical answer length). When the prediction
  fails (the upstream slows down further) tokens fall back to leaving when they arrive, as live.
* `replay`: wait for the whole response, then play it with exact profile timing.
"""

from __future__ import annotations

from enum import StrEnum

from retimer.timing.suggest import did_you_mean


class Strategy(StrEnum):
    LIVE = "live"
    SMOOTH = "smooth"
    REPLAY = "replay"


def parse_strategy(value: str) -> Strategy:
    """A strategy by name; ValueError with a one-line message otherwise."""
    try:
        return Strategy(value.strip().lower())
    except ValueError:
        names = [s.value for s in Strategy]
        hint = did_you_mean(value.strip().lower(), names)
        raise ValueError(f"--strategy: expected one of {', '.join(names)}, got {value!r}{hint}") from None


SAMPLE_TOKENS = 24  # tokens to observe before predicting the upstream's pace
SAMPLE_MIN_S = 0.25  # ... over at least this long (a first burst says nothing about pace)
TYPICAL_ANSWER_TOKENS = 600  # expected length when the request gives no max-tokens hint
MAX_EXPECTED_TOKENS = 4000  # a max-tokens hint is an upper bound: don't plan for more than this


class SmoothPlan:
    """Decides when a `smooth` stream may start, from the first tokens' arrival times."""

    __slots__ = ("target_tps", "expected", "_first", "_last", "_tokens", "delay_s")

    def __init__(self, target_tps: float, expected_tokens: int | None) -> None:
        self.target_tps = target_tps
        hint = expected_tokens if expected_tokens and expected_tokens > 0 else TYPICAL_ANSWER_TOKENS
        self.expected = min(hint, MAX_EXPECTED_TOKENS)
        self._first: float | None = None
        self._last = 0.0
        self._tokens = 0
        self.delay_s = 0.0  # how far the plan moved the first token back (for records)

    def observe(self, arrival: float, tokens: int) -> None:
        if tokens <= 0:
            return
        if self._first is None:
            self._first = arrival
        self._last = arrival
        self._tokens += tokens

    def ready(self, now: float) -> bool:
        """Enough has been seen to predict (or nothing more will come: call `start` anyway)."""
        return (
            self._first is not None
            and self._tokens >= SAMPLE_TOKENS
            and now - self._first >= SAMPLE_MIN_S
        )

    def start(self, now: float) -> float:
        """The earliest time the first token may leave so the rest need not wait (absolute)."""
        if self._first is None or self._tokens < 2 or self._last <= self._first:
            return 0.0
        upstream_tps = (self._tokens - 1) / (self._last - self._first)
        if upstream_tps >= self.target_tps:
            return 0.0
        remaining = max(0, self.expected - self._tokens)
        # the last token arrives at about last + remaining/upstream; it is due at
        # first_out + (expected - 1)/target: solve for the first token's time
        last_arrival = self._last + remaining / upstream_tps
        first_out = last_arrival - (self.expected - 1) / self.target_tps
        self.delay_s = max(0.0, first_out - self._first)
        return first_out
