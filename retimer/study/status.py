"""Where a running study stands, from its records: the experimenter's view. Pure: records in,
figures out.

Why from the records: they are what the analysis will read, every instance writes them, and
they hold what the state database does not (which streams the upstream, not the condition, set
the pace). `retimer study STUDY.yaml --status [LOG ...]` prints it; the study page's admin view
(`/study/admin`, behind its token) shows the same figures.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from retimer.study.design import StudyDesign, williams_square

__all__ = ["ConditionStatus", "StudyStatus", "status_lines", "summarize"]


@dataclass
class ConditionStatus:
    name: str
    units: int = 0  # distinct (participant, unit) pairs that ran this condition
    streams: int = 0  # every stream of the condition (units and their other calls)
    ratings: int = 0
    excluded: int = 0  # unit streams whose upstream set the pace (upstream_bound)
    expected: float = 0.0  # the units the design gives it, for the units run so far


@dataclass
class StudyStatus:
    study: str
    participants: int = 0  # started: a unit, a consent or a rating
    finished: int = 0  # the study page's completion
    units: int = 0
    ratings: int = 0
    untimed: int = 0  # streams that named no participant or found the state unavailable
    conditions: list[ConditionStatus] = field(default_factory=list)
    other_studies: int = 0  # records of other studies in the logs, left out
    positions: dict[int, Counter[str]] = field(default_factory=dict)  # unit -> conditions

    def as_json(self) -> dict[str, object]:
        return {"study": self.study, "participants": self.participants, "finished": self.finished,
                "units": self.units, "ratings": self.ratings, "untimed": self.untimed,
                "other_studies": self.other_studies,
                "conditions": [vars(c) for c in self.conditions],
                "positions": {str(k): dict(v) for k, v in sorted(self.positions.items())}}


def summarize(design: StudyDesign, records: Iterable[Mapping[str, object]]) -> StudyStatus:
    """The figures of `design`'s study in `records` (a log's parsed lines, any order)."""
    status = StudyStatus(design.name)
    by_name = {c: ConditionStatus(c) for c in design.names}
    people: set[str] = set()
    finished: set[str] = set()
    units: dict[tuple[str, int], str] = {}
    for r in records:
        if r.get("study") != design.name:
            if r.get("study") is not None:
                status.other_studies += 1
            continue
        kind = r.get("type", "stream")
        participant = r.get("participant")
        condition = r.get("condition")
        if kind == "participant":
            if isinstance(participant, str):
                people.add(participant)
                if r.get("event") == "finished":
                    finished.add(participant)
            continue
        if kind == "rating":
            status.ratings += 1
            if isinstance(participant, str):
                people.add(participant)
            if isinstance(condition, str) and condition in by_name:
                by_name[condition].ratings += 1
            continue
        if kind != "stream":
            continue
        if not isinstance(participant, str) or not isinstance(condition, str) \
                or condition not in by_name:
            status.untimed += 1
            continue
        people.add(participant)
        entry = by_name[condition]
        entry.streams += 1
        unit = r.get("unit")
        if isinstance(unit, int) and not isinstance(unit, bool):
            if (participant, unit) not in units:
                units[(participant, unit)] = condition
                entry.units += 1
                status.positions.setdefault(unit, Counter())[condition] += 1
            if r.get("upstream_bound") is True:
                entry.excluded += 1
    status.participants, status.finished, status.units = len(people), len(finished), len(units)
    for (participant, unit) in units:  # what the design gives the units run so far
        by_name[design.condition(participant, unit).name].expected += 1
    status.conditions = list(by_name.values())
    return status


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _rows(design: StudyDesign) -> int:
    n = len(design.conditions)
    return len(williams_square(n)) if design.counterbalancing == "latin-square" else n


def status_lines(design: StudyDesign, status: StudyStatus) -> list[str]:
    """The view as plain lines (the terminal and the admin page share them)."""
    lines = [f"study {status.study}: {_n(status.participants, 'participant')} started, "
             f"{status.finished} finished; {_n(status.units, 'unit')}, "
             f"{_n(status.ratings, 'rating')}"]
    width = max(9, *(len(c.name) for c in status.conditions))
    lines.append(f"{'condition':<{width}}  {'units':>5}  {'design':>6}  {'streams':>7}  "
                 f"{'ratings':>7}  {'upstream-bound':>14}")
    for c in status.conditions:
        lines.append(f"{c.name:<{width}}  {c.units:>5}  {c.expected:>6.0f}  {c.streams:>7}  "
                     f"{c.ratings:>7}  {c.excluded:>14}")
    off = [c.name for c in status.conditions if c.units != c.expected]
    if status.units:
        lines.append("balance: every unit has the condition the design gives it" if not off else
                     f"balance: {', '.join(off)} differ from the design (units outside it?)")
    if status.positions and design.unit != "participant":
        shown = sorted(status.positions)[:8]
        cells = "; ".join(f"{u}: " + " ".join(f"{name} {status.positions[u][name]}"
                                              for name in design.names) for u in shown)
        lines.append(f"by position ({design.unit}s): {cells}")
    if design.counterbalancing == "latin-square" and status.participants % _rows(design):
        lines.append(f"recruit in multiples of {_rows(design)} (the square's rows): "
                     f"{status.participants} started")
    if status.untimed:
        lines.append(f"{status.untimed} streams untimed (no participant, or the state was "
                     "unavailable)")
    if status.other_studies:
        lines.append(f"{status.other_studies} records of other studies left out")
    return lines
