"""Which recorded call answers a live one, when a session is replayed from a cassette. Pure:
the recorded calls' shapes in, one verdict per live call out.

The n-th live call is matched by its position and its conversation, in this order of
preference, among the recorded calls not used yet:
1. **replayed**: the same method, path, API, model and preamble, and every message equal
   once normalised (`retimer.cassette.shape.VOLATILE`): the recorded call at the session's
   position first, else the nearest such call (agents send some calls side by side, whose
   order varies);
2. **matched loosely**: the same, but tool outputs may differ (the `loose` digests);
3. **diverged**: none of them. The caller sends the call upstream when it has one, or answers
   it with an error in the API's own shape (`diverged_error`).
A conversation that grew (an agent's next turn) is a new call, never a match for an earlier
one: the messages are compared whole.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from retimer.cassette.shape import CallShape

__all__ = ["CassetteMatcher", "Match", "Verdict", "described", "diverged_error", "diverged_message"]


class Match(Enum):
    REPLAYED = "replayed"
    LOOSE = "matched loosely"
    DIVERGED = "diverged"


@dataclass(frozen=True)
class Verdict:
    """A live call's match: the recorded call's index (None when it diverged), and why."""

    match: Match
    index: int | None
    reason: str


def _same_call(a: CallShape, b: CallShape) -> bool:
    return (a.method, a.path, a.api, a.model, a.preamble) == (b.method, b.path, b.api, b.model,
                                                                b.preamble)


def _why_not(live: CallShape, recorded: CallShape) -> str:
    """Why the recorded call at the live call's position does not answer it, in words."""
    for name in ("method", "path", "api", "model"):
        if getattr(live, name) != getattr(recorded, name):
            return f"its {name} differs from the recorded call's"
    if live.preamble != recorded.preamble:
        return "its tools or system prompt differ from the recorded call's"
    if len(live.messages) != len(recorded.messages):
        return (f"it has {len(live.messages)} messages where the recorded call has "
                f"{len(recorded.messages)}")
    first = next(i for i, (a, b) in enumerate(zip(live.loose, recorded.loose, strict=True))
                 if a != b)
    return f"its message {first + 1} differs from the recorded call's"


class CassetteMatcher:
    """Matches a session's live calls, in the order they come, to a cassette's calls."""

    def __init__(self, recorded: Sequence[CallShape]) -> None:
        self.recorded = list(recorded)
        self.used: set[int] = set()
        self.position = 0  # where the next live call is expected in the recording

    def match(self, live: CallShape) -> Verdict:
        """The recorded call that answers `live`, marked used; or DIVERGED."""
        order = self._candidates()
        for kind, digests in ((Match.REPLAYED, "messages"), (Match.LOOSE, "loose")):
            for i in order:
                rec = self.recorded[i]
                if _same_call(live, rec) and getattr(live, digests) == getattr(rec, digests):
                    self.used.add(i)
                    self.position = i + 1
                    where = "" if i == order[0] else f" (recorded as call {i + 1})"
                    return Verdict(kind, i, f"{kind.value}{where}")
        if self.position < len(self.recorded):
            reason = _why_not(live, self.recorded[self.position])
        else:
            reason = f"the cassette's {len(self.recorded)} calls are used up"
        return Verdict(Match.DIVERGED, None, reason)

    def _candidates(self) -> list[int]:
        """Unused recorded calls, the expected position first, then by distance from it."""
        free = [i for i in range(len(self.recorded)) if i not in self.used]
        return sorted(free, key=lambda i: (abs(i - self.position), i < self.position))

    @property
    def unused(self) -> list[int]:
        """Recorded calls no live call took (a replay that ended early, or diverged)."""
        return [i for i in range(len(self.recorded)) if i not in self.used]


def described(verdict: Verdict) -> dict[str, Any]:
    """A verdict as the record's `cassette` field holds it."""
    return {"match": verdict.match.value,
            "call": None if verdict.index is None else verdict.index + 1,
            "reason": verdict.reason}


def diverged_message(verdict: Verdict, what: str) -> str:
    """Why a call (`what`) got no recorded answer, and what to do."""
    return (f"retimer cassette: {what} that matches no recorded call ({verdict.reason}); "
            "record the session again, or replay with --replay-diverged upstream")


def diverged_error(verdict: Verdict, what: str, *, event: bool = False) -> bytes:
    """The error a call that diverged gets, in the shape the APIs give theirs (an `error` with
    a `type` and a `message`, and the fields OpenAI, Anthropic and Gemini clients look for);
    on a WebSocket, the Responses API's error event (a `status`, a string `code`)."""
    message = diverged_message(verdict, what)
    if event:
        return json.dumps({"type": "error", "status": 400, "error": {
            "type": "invalid_request_error", "code": "retimer_cassette_diverged",
            "message": message}}).encode()
    return json.dumps({"type": "error", "error": {
        "type": "retimer_cassette_diverged", "code": 400, "status": "FAILED_PRECONDITION",
        "message": message}}).encode()
