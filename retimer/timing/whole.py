"""Whole (non-streaming) answers: when the body may leave, by the profile's clock.

A client that asked for a whole response sees nothing until its last token, so the body leaves
when the profile would have finished it: TTFT plus a gap per further token, drawn like a
stream's. Its tokens come from the pacer reading the answer as one line
(`retimer.wire.whole.timing_line`); a body without tokens is not held.
"""

from __future__ import annotations

from typing import NamedTuple

from retimer.timing.pacer import Emission, StreamPacer

__all__ = ["WholeAnswer", "plan_whole_answer"]


class WholeAnswer(NamedTuple):
    """The answer's emissions, all due at `due` (monotonic seconds): when the body leaves."""

    pacer: StreamPacer
    batch: list[Emission]
    due: float

    def left(self, now: float) -> None:
        """The body left at `now`: its tokens count as sent then."""
        self.pacer.sent(self.batch, now)


def plan_whole_answer(pacer: StreamPacer, line: bytes, start: float, now: float) -> WholeAnswer | None:
    """When a whole answer that arrived at `now` (its request began at `start`) may leave;
    None when it carries no tokens. Say when the body has left (`WholeAnswer.left`)."""
    pacer.feed(line, now)
    pacer.finish(now)
    batch = pacer.pop_all()
    if not any(e.tokens for e in batch):
        return None
    tokens = sum(e.tokens for e in batch)
    timing = pacer.timing
    due = max(now, start + timing.ttft + sum(timing.gap() for _ in range(tokens - 1)))
    for e in batch:
        e.due = due
    return WholeAnswer(pacer, batch, due)
