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

__all__ = ["AnalysisError", "Rated", "StudyData", "collect", "study_of"]

META = frozenset({"type", "time", "stream", "stream_index", "study", "participant", "condition",
                  "unit", "task", "conversation", "slow"})
LOW, HIGH = 1, 7


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
    streams: list[Mapping[str, object]]  # the study's unit streams (the manipulation check)
    excluded: Counter[str] = field(default_factory=Counter)  # reason -> count
    unrated: list[str] = field(default_factory=list)  # participants with streams, no ratings

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


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def study_of(records: Sequence[Mapping[str, object]], study: str | None) -> str:
    """The one study of the records, or `study` if they hold it; else one line why not."""
    names = Counter(str(r["study"]) for r in records if isinstance(r.get("study"), str))
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


def collect(records: Iterable[Mapping[str, object]], study: str | None = None,
            order: Sequence[str] = (), reference: str | None = None) -> StudyData:
    """The rows of one study: every rated unit stream, its latest rating, with exclusions.

    `order` is the conditions' order (the study file's; else as the log first shows them),
    `reference` the one others are compared with (else the first)."""
    records = list(records)
    name = study_of(records, study)
    mine = [r for r in records if r.get("study") == name]
    excluded: Counter[str] = Counter()
    streams: dict[str, Mapping[str, object]] = {}
    for r in mine:
        if r.get("type", "stream") != "stream" or not isinstance(r.get("id"), str):
            continue
        if not isinstance(r.get("participant"), str) or not isinstance(r.get("condition"), str):
            excluded["untimed streams (no participant, or the study state was unavailable)"] += 1
            continue
        if not _number(r.get("unit")):
            continue  # a participant's other calls (titles, model lists): not units
        streams[str(r["id"])] = r
    latest: dict[str, Mapping[str, object]] = {}
    for r in mine:
        if r.get("type") != "rating":
            continue
        stream = r.get("stream")
        if not isinstance(stream, str) or stream not in streams:
            excluded["ratings of responses not in the log(s)"] += 1
            continue
        if stream in latest:
            merged = {**latest[stream], **{k: v for k, v in r.items() if v is not None}}
            latest[stream] = merged  # a later click on a scale replaces the earlier one
        else:
            latest[stream] = r
    rows: list[Rated] = []
    scales: list[str] = []
    for stream_id, rating in latest.items():
        s = streams[stream_id]
        scores: dict[str, float] = {}
        bad = False
        for key, value in rating.items():
            if key in META or value is None or not _number(value):
                continue
            if not LOW <= float(str(value)) <= HIGH:
                bad = True
                break
            scores[key] = float(str(value))
            if key not in scales:
                scales.append(key)
        if bad:
            excluded[f"ratings out of range ({LOW}-{HIGH})"] += 1
            continue
        if not scores:
            excluded["ratings with no score"] += 1
            continue
        if s.get("upstream_bound") is True:
            excluded["responses the upstream paced (upstream-bound)"] += 1
            continue
        slow = rating.get("slow")
        rows.append(Rated(participant=str(s["participant"]), condition=str(s["condition"]),
                          position=int(str(s["unit"])), scores=scores,
                          slow=slow if isinstance(slow, bool) else None, stream=stream_id))
    rated = {r.participant for r in rows}
    unrated = sorted({str(s["participant"]) for s in streams.values()} - rated)
    seen = list(dict.fromkeys([*order, *(str(s["condition"]) for s in streams.values())]))
    conditions = [c for c in seen if any(r.condition == c for r in rows)]
    if reference is not None:
        if reference not in conditions:
            raise AnalysisError(f"--reference: no rated condition '{reference}' "
                                f"(rated: {', '.join(conditions) or 'none'})")
        conditions = [reference, *(c for c in conditions if c != reference)]
    ordered = [s for s in ("speed", "quality") if s in scales] + \
        [s for s in scales if s not in ("speed", "quality")]
    return StudyData(name, conditions, ordered, rows, list(streams.values()), excluded, unrated)
