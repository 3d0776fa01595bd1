"""A study's records as the analysis reads them: one row per rated response, what was left out
and why, and the design the rows show. Pure: records in, rows out (no statistics library).

Why its own step: the classic mistakes of a latency study are made here, before any test: a
rating counted twice (a later click replaces an earlier one), a response the upstream paced
(`upstream_bound`: the participant saw the upstream's speed, not the condition's) counted for
its condition, a participant's repeated ratings taken as independent people. Every row left out
is counted with its reason, so the analysis says what it did not use.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from retimer.records.schema import Rating, Record, StreamRecord

__all__ = ["AnalysisError", "Rated", "StudyData", "collect", "study_of"]

LOW, HIGH = 1, 7
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class AnalysisError(ValueError):
    """Records that cannot be analysed; str() is one line saying why."""


@dataclass(frozen=True)
class Rated:
    """One rated response: its participant, condition and position, and its scores."""

    participant: str
    condition: str
    position: int  # the unit's position in the participant's sequence (0, 1, ...)
    scores: Mapping[str, float]  # scale -> 1..7
    slow: bool | None = None  # the study page's "did this feel slow?"
    stream: str = ""


@dataclass
class StudyData:
    study: str
    conditions: list[str]  # the reference first
    scales: list[str]
    rows: list[Rated]
    streams: list[StreamRecord]  # the study's unit streams (the manipulation check)
    excluded: Counter[str] = field(default_factory=Counter)  # reason -> count
    unrated: list[str] = field(default_factory=list)  # participants with streams, no ratings
    unrated_units: int = 0  # unit responses nobody rated (the participant moved on or left)
    reference_from: str = "the first condition in the log(s)"  # why conditions[0] is it

    @property
    def one_condition(self) -> list[str]:
        """In a within design, the participants whose rows hold one condition only: no
        difference of their own, so not in the paired tests (the mixed model keeps them)."""
        if self.design == "between":
            return []
        seen: dict[str, set[str]] = defaultdict(set)
        for r in self.rows:
            seen[r.participant].add(r.condition)
        return sorted(p for p, c in seen.items() if len(c) == 1)

    @property
    def participants(self) -> list[str]:
        return sorted({r.participant for r in self.rows})

    @property
    def design(self) -> str:
        """`between` when every participant rated one condition only, else `within`."""
        seen: dict[str, set[str]] = defaultdict(set)
        for r in self.rows:
            seen[r.participant].add(r.condition)
        return "between" if all(len(c) == 1 for c in seen.values()) else "within"

    @property
    def repeated(self) -> bool:
        """Whether a model of units is needed: a participant rated a condition more than once,
        or conditions came in different positions (a Latin square's order)."""
        counts = Counter((r.participant, r.condition) for r in self.rows)
        if any(n > 1 for n in counts.values()):
            return True
        positions: dict[str, set[int]] = defaultdict(set)
        for r in self.rows:
            positions[r.condition].add(r.position)
        return any(len(p) > 1 for p in positions.values())


def study_of(records: Sequence[Record], study: str | None) -> str:
    """The one study of the records, or `study` if they hold it; else one line why not."""
    names = Counter(name for r in records if (name := r.study_name) is not None)
    if not names:
        raise AnalysisError("no study records in the log(s): were they written by `retimer study`?")
    if study is not None:
        if study not in names:
            raise AnalysisError(f"--study-name: no records of study '{study}' "
                                f"(found: {', '.join(sorted(names))})")
        return study
    if len(names) > 1:
        raise AnalysisError(f"records of {len(names)} studies ({', '.join(sorted(names))}): "
                            "choose one with --study-name")
    return next(iter(names))


def collect(records: Iterable[Record], study: str | None = None,
            order: Sequence[str] = (), reference: str | None = None,
            malformed: int = 0) -> StudyData:
    """The rows of one study: every rated unit stream, its latest rating, with exclusions.

    `order` is the conditions' order (the study file's; else as the log first shows them),
    `reference` the one others are compared with (else the first); `malformed` the lines of
    the logs that were not records (counted among what was left out). A rating's latest click
    is the latest by its time, whatever the log it is in."""
    records = list(records)
    name = study_of(records, study)
    mine = [r for r in records if r.study_name == name]
    excluded: Counter[str] = Counter()
    if malformed:
        excluded["malformed lines in the log(s), not records"] = malformed
    streams: dict[str, StreamRecord] = {}
    for r in mine:
        if not isinstance(r, StreamRecord):
            continue
        if r.participant is None or r.condition is None:
            excluded["untimed streams (no participant, or the study state was unavailable)"] += 1
            continue
        if r.unit is None:
            continue  # a participant's other calls (titles, model lists): not units
        streams[r.id] = r
    latest: dict[str, tuple[dict[str, float], bool | None]] = {}
    ratings = [r for r in mine if isinstance(r, Rating)]
    # by time across logs (a stable sort: ratings with no time keep their order, first)
    ratings.sort(key=lambda r: (r.when is not None, r.when or _EPOCH))
    for r in ratings:
        if r.stream not in streams:
            excluded["ratings of responses not in the log(s)"] += 1
            continue
        scores, slow = latest.get(r.stream, ({}, None))
        # a later click on a scale replaces the earlier one
        latest[r.stream] = ({**scores, **r.answered()}, r.slow if r.slow is not None else slow)
    rows: list[Rated] = []
    scales: list[str] = []
    for stream_id, (scores, slow) in latest.items():
        s = streams[stream_id]
        if any(not LOW <= v <= HIGH for v in scores.values()):
            excluded[f"ratings out of range ({LOW}-{HIGH})"] += 1
            continue
        scales += [k for k in scores if k not in scales]
        if not scores:
            excluded["ratings with no score"] += 1
            continue
        if s.upstream_bound is True:
            waited = s.study is not None and s.study.state_wait_ms is not None
            excluded["responses late after waiting for the study's state database (upstream-bound)" if waited
                     else "responses the upstream paced (upstream-bound)"] += 1
            continue
        assert s.participant is not None and s.condition is not None and s.unit is not None
        rows.append(Rated(participant=s.participant, condition=s.condition, position=s.unit,
                          scores={k: float(v) for k, v in scores.items()}, slow=slow,
                          stream=stream_id))
    rated = {r.participant for r in rows}
    unrated = sorted({str(s.participant) for s in streams.values()} - rated)
    unrated_units = sum(1 for stream_id in streams if stream_id not in latest)
    seen = list(dict.fromkeys([*order, *(str(s.condition) for s in streams.values())]))
    conditions = [c for c in seen if any(r.condition == c for r in rows)]
    reference_from = "the study file's first condition" if order else \
        "the first condition in the log(s); --study STUDY.yaml takes the study file's first"
    if conditions and order and conditions[0] != order[0]:
        reference_from = f"the study file's first rated condition ({order[0]} has no ratings)"
    if reference is not None:
        reference_from = "--reference"
        if reference not in conditions:
            raise AnalysisError(f"--reference: no rated condition '{reference}' "
                                f"(rated: {', '.join(conditions) or 'none'})")
        conditions = [reference, *(c for c in conditions if c != reference)]
    ordered = [s for s in ("speed", "quality") if s in scales] + \
        [s for s in scales if s not in ("speed", "quality")]
    return StudyData(name, conditions, ordered, rows, list(streams.values()), excluded, unrated,
                     unrated_units, reference_from)
