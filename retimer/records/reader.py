"""Reading records logs (`--log FILE`): the one reader every command and page uses.

Why lenient: a log is appended to while the proxy runs, so its last line may be half-written,
and a log may hold lines from older versions and other tools. Lines that are not records are
counted (with their file and line number) and skipped, never fatal; lines of types this
version does not know are counted apart; a missing or unreadable file is one error line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from retimer.records.parse import NotARecord, parse_record
from retimer.records.schema import ParticipantEvent, Rating, Record, StreamRecord

__all__ = ["BadLine", "Log", "LogError", "describe_filters", "parse_since", "read_lines",
           "read_logs", "select"]

_AGO = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d)\s*", re.I)
_AGO_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


class LogError(Exception):
    """A log that cannot be read, or a filter that cannot be parsed: one line for the user."""


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line that is no record: where it is, and why."""

    source: str
    line: int
    why: str


@dataclass(slots=True)
class Log:
    """The records of one or more logs, in file order, and what was not a record."""

    sources: list[str] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    bad: list[BadLine] = field(default_factory=list)
    other_types: int = 0  # lines of record types this version does not know

    @property
    def streams(self) -> list[StreamRecord]:
        return [r for r in self.records if isinstance(r, StreamRecord)]

    @property
    def ratings(self) -> list[Rating]:
        return [r for r in self.records if isinstance(r, Rating)]

    @property
    def events(self) -> list[ParticipantEvent]:
        return [r for r in self.records if isinstance(r, ParticipantEvent)]

    def bad_in(self, source: str) -> list[BadLine]:
        return [b for b in self.bad if b.source == source]

    def scores(self) -> dict[str, dict[str, float | bool]]:
        """Each rated stream's scores (stream id -> scale -> score, and `slow` when the page
        asked): in file order, a later score on a scale replaces an earlier one. Ratings of
        streams not in the log are left out (see `orphans`)."""
        known = {s.id for s in self.streams}
        out: dict[str, dict[str, float | bool]] = {}
        for r in self.ratings:
            if r.stream not in known:
                continue
            scores = out.setdefault(r.stream, {})
            scores.update(r.answered())
            if r.slow is not None:
                scores["slow"] = r.slow
        return {k: v for k, v in out.items() if v}

    def orphans(self) -> int:
        """Ratings of streams that are not in the log."""
        known = {s.id for s in self.streams}
        return sum(r.stream not in known for r in self.ratings)


def read_lines(lines: Iterable[str], source: str = "", into: Log | None = None) -> Log:
    """The records of a log's lines (`source` names them in BadLine)."""
    log = into if into is not None else Log()
    log.sources.append(source)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = parse_record(json.loads(line))
        except (ValueError, RecursionError) as e:
            why = str(e) if isinstance(e, NotARecord) else "not JSON"
            log.bad.append(BadLine(source, number, why))
            continue
        if record is None:
            log.other_types += 1
        else:
            log.records.append(record)
    return log


def read_logs(paths: Iterable[str | Path]) -> Log:
    """The records of the log files, read as one (in the order given)."""
    log = Log()
    for path in paths:
        p = Path(path).expanduser()
        try:
            text = p.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            raise LogError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise LogError(f"{path}: is a directory, not a records log") from None
        except OSError as e:
            raise LogError(f"{path}: cannot read it ({e.strerror})") from None
        read_lines(text.splitlines(), str(path), log)
    return log


def parse_since(value: str, now: datetime | None = None) -> datetime:
    """`--since`: an ISO date or date-time (local time unless it names a zone), or an age
    such as 30m, 2h, 1d (that long before now)."""
    now = now or datetime.now(UTC)
    if m := _AGO.fullmatch(value):
        return now - timedelta(seconds=float(m.group(1)) * _AGO_UNITS[m.group(2).lower()])
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise LogError(
            f"--since: expected a date like 2026-11-30, a time like 2026-11-30T14:00 or an age "
            f"like 2h, got {value!r}"
        ) from None
    return when.astimezone() if when.tzinfo is None else when


def select(
    records: Iterable[StreamRecord], protocol: str = "", host: str = "",
    since: datetime | None = None,
) -> list[StreamRecord]:
    """Records of these protocols (comma-separated names), whose URL contains `host`
    (any case), from `since` on."""
    protocols = {p.strip() for p in protocol.split(",") if p.strip()}
    needle = host.lower()
    out = []
    for rec in records:
        if protocols and rec.protocol not in protocols:
            continue
        if needle and needle not in rec.url.lower():
            continue
        if since is not None:
            when = rec.when
            if when is None or when < since:
                continue
        out.append(rec)
    return out


def describe_filters(protocol: str, host: str, since: str) -> str:
    parts = [f"protocol {protocol}" if protocol else "", f"url containing {host!r}" if host else "",
             f"since {since}" if since else ""]
    return ", ".join(p for p in parts if p)
