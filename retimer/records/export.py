"""Joining a records log with its ratings: one row per stream, for `retimer export`.

Pure (lines in, dicts out) so the join can be checked without files; reading the file and
writing CSV stay with the command (retimer.cli.records.export). The columns are what R (`read.csv`) and
pandas (`read_csv`) read as is: numbers in milliseconds and tokens/s, `true`/`false` for flags,
empty cells for missing values. Timing columns are what the client got (the records' `emitted`
figures); `profile` (the base name), `effective_profile` (the name plus overrides, e.g.
`openai-gpt-5 tps=10`: group by this one, so changed timing is never filed under the base) and
the `target_*` columns are the experimenter's view of the condition.
"""

from __future__ import annotations

from collections.abc import Iterator

from retimer.records.reader import Log
from retimer.records.schema import StreamRecord

__all__ = ["COLUMNS", "columns", "csv_cell", "exported", "rows", "scales"]

COLUMNS = (
    "time", "stream_id", "study", "participant", "condition", "unit", "task", "conversation", "level",
    "protocol", "profile", "effective_profile", "target_ttft_ms", "target_tps", "ttft_ms", "ttfat_ms", "tps",
    "tokens", "upstream_bound", "upstream_wait_ms", "outcome", "rating_speed", "rating_quality",
    "rating_slow",
)
BUILT_IN_SCALES = ("speed", "quality")


def exported(log: Log) -> list[StreamRecord]:
    """The streams that make rows: those with an id and the client's figures."""
    return [s for s in log.streams if s.id and s.emitted is not None]


def scales(log: Log) -> list[str]:
    """A study page's own scales (beyond speed and quality), in the order first rated."""
    found: list[str] = []
    for scores in log.scores().values():
        for scale in scores:
            if scale not in BUILT_IN_SCALES and scale != "slow" and scale not in found:
                found.append(scale)
    return found


def columns(log: Log) -> tuple[str, ...]:
    """COLUMNS, then a `rating_NAME` column per scale of the log's own (a study page's)."""
    return COLUMNS + tuple(f"rating_{s}" for s in scales(log))


def csv_cell(value: object) -> object:
    """A value as R and pandas read it: empty for missing, `true`/`false` for flags."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def rows(log: Log) -> Iterator[dict[str, object]]:
    """One dict per stream, keyed by columns(log), cells ready for csv."""
    own = scales(log)
    all_scores = log.scores()
    tasks = {r.stream: r.task for r in log.ratings if r.task is not None}  # a study page's task
    for s in exported(log):
        emitted = s.emitted
        assert emitted is not None  # exported() keeps only such streams
        scores = all_scores.get(s.id, {})
        study = s.study
        row = {
            "time": s.time or None, "stream_id": s.id, "study": study.study if study else None,
            "participant": s.participant, "condition": s.condition, "unit": s.unit,
            "task": tasks.get(s.id), "conversation": study.conversation if study else None,
            "level": study.level if study else None,
            "protocol": s.protocol, "profile": s.profile,
            # what ran: the name plus overrides (older logs: the base name)
            "effective_profile": s.effective_profile or s.profile,
            "target_ttft_ms": s.target.ttft_ms, "target_tps": s.target.tps,
            "ttft_ms": emitted.ttft_ms, "ttfat_ms": emitted.ttfat_ms,
            "tps": emitted.tps, "tokens": emitted.tokens,
            "upstream_bound": s.upstream_bound,
            "upstream_wait_ms": s.upstream_wait_ms, "outcome": s.outcome,
            "rating_speed": scores.get("speed"), "rating_quality": scores.get("quality"),
            "rating_slow": scores.get("slow"),
            **{f"rating_{scale}": scores.get(scale) for scale in own},
        }
        yield {k: csv_cell(v) for k, v in row.items()}
