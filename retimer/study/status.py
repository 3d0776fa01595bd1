"""Where a running study stands, from its records: the experimenter's view. Pure: records in,
figures out.

Why from the records: they are what the analysis will read, every instance writes them, and
they hold what the state database does not (which streams the upstream, not the condition, set
the pace). `retimer study STUDY.yaml --status [LOG ...]` prints it; the study page's admin view
(`/study/admin`, behind its token) shows the same figures.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from retimer.records.schema import ParticipantEvent, Rating, Record, StreamRecord
from retimer.study.design import StudyDesign, williams_square
from retimer.study.staircase import StaircaseSettings, position_after

__all__ = ["IDLE_S", "ConditionStatus", "IdleParticipant", "StairProgress", "StudyStatus",
           "status_lines", "summarize"]
SHOWN = 30  # participants listed by name in a staircase's status (and idle ones)
IDLE_S = 600.0  # a participant with no new message for this long is listed as idle


@dataclass
class ConditionStatus:
    name: str
    units: int = 0  # distinct (participant, unit) pairs that ran this condition
    streams: int = 0  # every stream of the condition (units and their other calls)
    ratings: int = 0
    excluded: int = 0  # unit streams whose upstream set the pace (upstream_bound)
    expected: float = 0.0  # the units the design gives it, for the units run so far


@dataclass
class StairProgress:
    """One participant's staircase, as the records show it."""

    units: dict[int, float] = field(default_factory=dict)  # unit -> level given
    answers: dict[int, bool] = field(default_factory=dict)  # unit -> the first answer

    def state(self, stairs: StaircaseSettings) -> tuple[float, int, bool]:
        """(the next unit's level, reversals, done) from the answers in unit order."""
        walked = position_after(stairs, [(stairs.levels.index(self.units[u]), a)
                                         for u, a in sorted(self.answers.items())
                                         if self.units.get(u) in stairs.levels])
        return stairs.levels[walked.level], len(walked.reversals), walked.done


@dataclass(frozen=True)
class IdleParticipant:
    participant: str
    task: int
    waiting: str  # "a reply", "a rating", "a message"
    idle_s: float


@dataclass
class StudyStatus:
    study: str
    participants: int = 0  # started: a unit, a consent or a rating
    finished: int = 0  # the study page's completion
    units: int = 0
    ratings: int = 0
    untimed: int = 0  # streams that named no participant or found the state unavailable
    waited: int = 0  # unit streams whose request waited for the state database (state_wait_ms)
    waited_late: int = 0  # of those, the ones that came late (upstream-bound: left out)
    longest_wait_ms: float = 0.0
    conditions: list[ConditionStatus] = field(default_factory=list)
    other_studies: int = 0  # records of other studies in the logs, left out
    positions: dict[int, Counter[str]] = field(default_factory=dict)  # unit -> conditions
    stairs: dict[str, StairProgress] = field(default_factory=dict)  # a staircase's participants
    # the study page's idle participants (its state, not the records): who may be stuck, where
    idle: list[IdleParticipant] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        return {"study": self.study, "participants": self.participants, "finished": self.finished,
                "units": self.units, "ratings": self.ratings, "untimed": self.untimed,
                "state_waits": {"units": self.waited, "late": self.waited_late,
                                "longest_ms": self.longest_wait_ms},
                "other_studies": self.other_studies,
                "conditions": [vars(c) for c in self.conditions],
                "positions": {str(k): dict(v) for k, v in sorted(self.positions.items())},
                "staircase": {p: {"units": len(s.units), "answered": len(s.answers)}
                              for p, s in sorted(self.stairs.items())},
                "idle": [vars(i) for i in self.idle]}


def summarize(design: StudyDesign, records: Iterable[Record]) -> StudyStatus:
    """The figures of `design`'s study in `records` (a log's records, any order)."""
    status = StudyStatus(design.name)
    by_name = {c: ConditionStatus(c) for c in design.names}
    people: set[str] = set()
    finished: set[str] = set()
    units: dict[tuple[str, int], str] = {}
    streams: dict[str, tuple[str, int]] = {}  # a staircase's unit streams, for their answers
    answers: list[Rating] = []
    arrivals: dict[str, int] = {}  # participant_ids arrival: each one's place, as recorded
    for r in records:
        if (study := r.study_name) != design.name:
            if study is not None:
                status.other_studies += 1
            continue
        if isinstance(r, ParticipantEvent):
            people.add(r.participant)
            if r.event == "finished":
                finished.add(r.participant)
            continue
        if isinstance(r, Rating):
            status.ratings += 1
            if r.participant is not None:
                people.add(r.participant)
            if r.condition is not None and r.condition in by_name:
                by_name[r.condition].ratings += 1
            answers.append(r)
            continue
        tags = r.study
        assert isinstance(r, StreamRecord) and tags is not None  # its study is this one
        participant, condition = tags.participant, tags.condition
        if participant is None or condition is None or condition not in by_name:
            status.untimed += 1
            continue
        people.add(participant)
        entry = by_name[condition]
        entry.streams += 1
        unit = tags.unit
        if unit is not None:
            if (participant, unit) not in units:
                units[(participant, unit)] = condition
                entry.units += 1
                status.positions.setdefault(unit, Counter())[condition] += 1
            if r.upstream_bound is True:
                entry.excluded += 1
            if tags.state_wait_ms is not None:
                status.waited += 1
                status.waited_late += r.upstream_bound is True
                status.longest_wait_ms = max(status.longest_wait_ms, tags.state_wait_ms)
            if tags.arrival is not None:
                arrivals[participant] = tags.arrival
            level = tags.level
            if design.staircase is not None and level is not None:
                status.stairs.setdefault(participant, StairProgress()).units.setdefault(unit, float(level))
                streams[r.id] = (participant, unit)
    status.participants, status.finished, status.units = len(people), len(finished), len(units)
    if design.staircase is not None:
        for r in sorted(answers, key=lambda r: r.time):
            slow = design.staircase.answer.of(r)
            if (key := streams.get(r.stream)) is not None and slow is not None:
                status.stairs[key[0]].answers.setdefault(key[1], slow)
    else:
        for (participant, unit) in units:  # what the design gives the units run so far
            by_name[design.condition(participant, unit, arrival=arrivals.get(participant)).name
                    ].expected += 1
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
    if design.staircase is not None:
        return lines + _stair_lines(design.staircase, status)
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
    return lines + _left_out(status)


def _stair_lines(stairs: StaircaseSettings, status: StudyStatus) -> list[str]:
    unit = stairs.unit_label
    lines = [f"a staircase on {stairs.vary} ({stairs.rule}, answer: {stairs.answer}); per "
             "participant:", f"{'participant':<12}  {'units':>5}  {'answered':>8}  "
             f"{'slow':>5}  {'next level':>12}  {'reversals':>9}"]
    for person, progress in sorted(status.stairs.items())[:SHOWN]:
        level, reversals, done = progress.state(stairs)
        answered = len(progress.answers)
        share = f"{sum(progress.answers.values()) / answered:.0%}" if answered else "-"
        lines.append(f"{person[:12]:<12}  {len(progress.units):>5}  {answered:>8}  {share:>5}  "
                     f"{f'{level:g} {unit}':>12}  {reversals:>9}" + ("  done" if done else ""))
    if len(status.stairs) > SHOWN:
        lines.append(f"... and {len(status.stairs) - SHOWN} more participants")
    return lines + _left_out(status)


def _left_out(status: StudyStatus) -> list[str]:
    """What the figures above do not count, and who has been idle."""
    lines = []
    if status.idle:
        shown = "; ".join(f"{i.participant} (task {i.task + 1}, waiting for {i.waiting}, "
                          f"{i.idle_s / 60:.0f} min)" for i in status.idle[:SHOWN])
        more = f"; and {len(status.idle) - SHOWN} more" if len(status.idle) > SHOWN else ""
        lines.append(f"idle for {IDLE_S / 60:.0f}+ min, not finished: {shown}{more}")
    if status.untimed:
        lines.append(f"{status.untimed} streams untimed (no participant, or the state was "
                     "unavailable)")
    if status.waited:
        lines.append(f"{_n(status.waited, 'unit')} waited for the study's state database (the "
                     f"longest {status.longest_wait_ms / 1000:.1f} s); {status.waited_late} of them "
                     "late (upstream-bound, left out of the analysis)")
    if status.other_studies:
        lines.append(f"{status.other_studies} records of other studies left out")
    return lines
