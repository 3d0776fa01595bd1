"""Is each condition feasible with this upstream? The pilot's figures, from replies measured
before the first participant. Pure: token arrival times in, verdicts out.

Why: retimer can hold tokens back, never make them come sooner. A condition faster than the
upstream (a TTFT below the upstream's, or a rate above it) cannot be delivered: its units are
upstream-bound, the participant sees the upstream's pace, and the analysis leaves them out.
`retimer study STUDY.yaml --pilot N` sends N of the study page's own calls to the upstream and
asks of each reply, for each condition: would some token have reached the proxy after the
condition's schedule (its median TTFT, then one token every 1/rate seconds) wanted it sent?
The upstream's timing does not depend on the condition, so the same N replies answer for all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from retimer.profile.model import Profile

__all__ = ["FEASIBLE_AFTER", "SLACK_S", "ConditionVerdict", "PilotReply", "RunningFeasibility", "judge",
           "median"]

SLACK_S = 0.05  # a token this much later than its schedule is no wait a participant sees
FEASIBLE_AFTER = 3  # units of a condition before a running study may call it upstream-bound


@dataclass(frozen=True)
class PilotReply:
    """One measured reply: every token's arrival, in seconds from the request's send."""

    arrivals: tuple[float, ...]
    error: str | None = None  # why the call failed (an HTTP status, a dropped connection)

    @property
    def ttft_s(self) -> float | None:
        return self.arrivals[0] if self.arrivals else None

    @property
    def tps(self) -> float | None:
        """(N-1) / (last - first), as the records count a rate."""
        if len(self.arrivals) < 2 or self.arrivals[-1] <= self.arrivals[0]:
            return None
        return (len(self.arrivals) - 1) / (self.arrivals[-1] - self.arrivals[0])


@dataclass(frozen=True)
class ConditionVerdict:
    name: str
    ttft_s: float | None  # the condition's median TTFT (None: passthrough)
    tps: float | None  # its rate
    bound: int  # replies that would have been upstream-bound
    replies: int  # replies measured

    @property
    def feasible(self) -> bool:
        """At most one reply in ten upstream-bound: the condition is what participants get."""
        return self.replies > 0 and self.bound <= self.replies // 10


def upstream_bound(reply: PilotReply, ttft_s: float, tps: float, slack_s: float = SLACK_S) -> bool:
    """Some token came later than the schedule (`ttft_s`, then `1/tps` apart) wanted it sent."""
    return any(at > ttft_s + k / tps + slack_s for k, at in enumerate(reply.arrivals))


def judge(conditions: Sequence[tuple[str, Profile]], replies: Sequence[PilotReply]) -> list[ConditionVerdict]:
    """Each condition's verdict over the replies that came back whole."""
    good = [r for r in replies if r.error is None and r.arrivals]
    out = []
    for name, profile in conditions:
        if profile.passthrough or profile.ttft is None or not profile.tps:
            out.append(ConditionVerdict(name, None, None, 0, len(good)))  # the upstream's own pace
            continue
        ttft = profile.ttft.p50
        bound = sum(upstream_bound(r, ttft, profile.tps) for r in good)
        out.append(ConditionVerdict(name, ttft, profile.tps, bound, len(good)))
    return out


def median(values: Sequence[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


class RunningFeasibility:
    """While a study runs: which condition's units are mostly upstream-bound, once each. The
    pilot judges before the first participant; this, on the units themselves."""

    def __init__(self) -> None:
        self.units: dict[str, tuple[int, int]] = {}  # condition -> (units, upstream-bound)
        self.infeasible: set[str] = set()  # conditions called so far

    def add(self, condition: str, bound: bool) -> tuple[int, int] | None:
        """Count one unit of `condition`; (upstream-bound, units) when this unit makes the
        condition mostly upstream-bound for the first time (at FEASIBLE_AFTER units or more)."""
        units, late = self.units.get(condition, (0, 0))
        units, late = units + 1, late + bound
        self.units[condition] = (units, late)
        if units >= FEASIBLE_AFTER and late * 2 >= units and condition not in self.infeasible:
            self.infeasible.add(condition)
            return late, units
        return None
