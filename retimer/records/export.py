"""Joining a records log with its ratings: one row per stream, for `retimer export`.

Pure (lines in, dicts out) so the join can be checked without files; reading the file and
writing CSV stay with the command (retimer.cli.export). The columns are what R (`read.csv`) and
pandas (`read_csv`) read as is: numbers in milliseconds and tokens/s, `true`/`false` for flags,
empty cells for missing values. Timing columns are what the client got (the records' `emitted`
figures); `profile` (the base name), `effective_profile` (the name plus overrides, e.g.
`openai-gpt-5 tps=10`: group by this one, so changed timing is never filed under the base) and
the `target_*` columns are the experimenter's view of the condition.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import cast

__all__ = ["COLUMNS", "Log", "columns", "csv_cell", "read_log", "rows"]

COLUMNS = (
    "time", "stream_id", "study", "participant", "condition", "unit", "conversation", "level",
    "protocol", "profile", "effective_profile", "target_ttft_ms", "target_tps", "ttft_ms", "ttfat_ms", "tps",
    "tokens", "upstream_bound", "upstream_wait_ms", "outcome", "rating_speed", "rating_quality",
    "rating_slow",
)
BUILT_IN_SCALES = ("speed", "quality")
RATING_META = frozenset({"type", "time", "stream", "stream_index", "study", "participant",
                         "condition", "unit", "task", "conversation", "slow"})


class Log:
    """The stream records and ratings of a log, and what had to be skipped."""

    def __init__(self) -> None:
        self.streams: list[dict[str, object]] = []  # each has a str `id` and a dict `emitted`
        self.ratings: dict[str, dict[str, int | bool]] = {}  # stream id -> latest per scale
        self.scales: list[str] = []  # a study page's own scales, beyond speed and quality
        self.bad: list[int] = []  # line numbers that are not records
        self.orphans = 0  # ratings of streams not in the log


def read_log(lines: Iterable[str]) -> Log:
    """Streams (lines without `type`) and ratings (`"type": "rating"`); other types are left
    for other tools; anything unreadable is counted in `bad`."""
    log = Log()
    ratings: list[dict[str, object]] = []  # each has a str `stream`
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            log.bad.append(number)
            continue
        if not isinstance(obj, dict):
            log.bad.append(number)
        elif obj.get("type") == "rating":
            if isinstance(obj.get("stream"), str):
                ratings.append(obj)
            else:
                log.bad.append(number)
        elif "type" in obj and obj["type"] != "stream":
            continue
        elif isinstance(obj.get("id"), str) and isinstance(obj.get("emitted"), dict):
            log.streams.append(obj)
        else:
            log.bad.append(number)
    known = {s["id"] for s in log.streams}
    for r in ratings:  # in file order: a later rating of a scale replaces an earlier one
        stream = r["stream"]
        assert isinstance(stream, str)  # only such ratings were kept
        if stream not in known:
            log.orphans += 1
            continue
        scores = log.ratings.setdefault(stream, {})
        for scale, value in r.items():
            if scale in RATING_META or not isinstance(value, int) or isinstance(value, bool):
                continue
            scores[scale] = value
            if scale not in BUILT_IN_SCALES and scale not in log.scales:
                log.scales.append(scale)
        if isinstance(slow := r.get("slow"), bool):  # the page's "did this feel slow?"
            scores["slow"] = slow
    return log


def columns(log: Log) -> tuple[str, ...]:
    """COLUMNS, then a `rating_NAME` column per scale of the log's own (a study page's)."""
    return COLUMNS + tuple(f"rating_{s}" for s in log.scales)


def csv_cell(value: object) -> object:
    """A value as R and pandas read it: empty for missing, `true`/`false` for flags."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def rows(log: Log) -> Iterator[dict[str, object]]:
    """One dict per stream, keyed by COLUMNS, cells ready for csv."""
    for s in log.streams:
        # read_log kept streams whose `emitted` is a dict; `target` is taken to be one too
        emitted = cast("Mapping[str, object]", s.get("emitted") or {})
        target = cast("Mapping[str, object]", s.get("target") or {})
        stream_id = s["id"]
        assert isinstance(stream_id, str)  # read_log kept only such streams
        scores = log.ratings.get(stream_id, {})
        row = {
            "time": s.get("time"), "stream_id": stream_id, "study": s.get("study"),
            "participant": s.get("participant"), "condition": s.get("condition"),
            "unit": s.get("unit"), "conversation": s.get("conversation"), "level": s.get("level"),
            "protocol": s.get("protocol"), "profile": s.get("profile"),
            # what ran: the name plus overrides (older logs: the base name)
            "effective_profile": s.get("effective_profile") or s.get("profile"),
            "target_ttft_ms": target.get("ttft_ms"), "target_tps": target.get("tps"),
            "ttft_ms": emitted.get("ttft_ms"), "ttfat_ms": emitted.get("ttfat_ms"),
            "tps": emitted.get("tps"), "tokens": emitted.get("tokens"),
            "upstream_bound": s.get("upstream_bound"),
            "upstream_wait_ms": s.get("upstream_wait_ms"), "outcome": s.get("outcome"),
            "rating_speed": scores.get("speed"), "rating_quality": scores.get("quality"),
            "rating_slow": scores.get("slow"),
            **{f"rating_{scale}": scores.get(scale) for scale in log.scales},
        }
        yield {k: csv_cell(v) for k, v in row.items()}
