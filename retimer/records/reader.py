"""Reading a record log (`--log FILE`) for `retimer fit` and `retimer report`, with filters.

Why lenient: a log is appended to while the proxy runs, so its last line may be half-written,
and a log may hold lines from older versions. Lines that are not JSON objects are counted and
skipped, never fatal; a missing or unreadable file is one error line.

Besides stream records (no `type`, or `"type": "stream"`), a study's log holds ratings
(`"type": "rating"`, retimer.study.ratings): each stream gets its latest score per scale as
`rating` ({"speed": 5, ...}); lines of other types are left alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

_AGO = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d)\s*", re.I)
_AGO_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
RATING_SCALES = ("speed", "quality")  # as retimer.study.ratings.SCALES


class LogError(Exception):
    """A log that cannot be read, or a filter that cannot be parsed: one line for the user."""


@dataclass(slots=True)
class Log:
    """The records of one log file, and how many lines were not records."""

    path: Path
    records: list[dict[str, object]] = field(default_factory=list)  # JSON objects, unchecked
    bad_lines: int = 0
    ratings: int = 0  # rating lines joined to their stream
    rating_lines: list[dict[str, object]] = field(default_factory=list)  # as written (analysis)


def read_log(path: str | Path) -> Log:
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise LogError(f"{path}: no such file") from None
    except OSError as e:
        raise LogError(f"{path}: cannot read it ({e.strerror})") from None
    log = Log(p)
    ratings: list[dict[str, object]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            log.bad_lines += 1
            continue
        if not isinstance(rec, dict):
            log.bad_lines += 1
        elif rec.get("type") == "rating":
            ratings.append(rec)
        elif rec.get("type", "stream") == "stream":
            log.records.append(rec)
    by_id = {r.get("id"): r for r in log.records if isinstance(r.get("id"), str)}
    for rating in ratings:  # in file order: a later score on a scale replaces an earlier one
        stream = by_id.get(rating.get("stream"))
        scores = {k: v for k in RATING_SCALES
                  if isinstance(v := rating.get(k), int) and not isinstance(v, bool)}
        if stream is not None and scores:
            current = stream.get("rating")
            stream["rating"] = {**(current if isinstance(current, dict) else {}), **scores}
            log.ratings += 1
    log.rating_lines = ratings
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


def record_time(rec: Mapping[str, object]) -> datetime | None:
    try:
        when = datetime.fromisoformat(str(rec.get("time")))
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def select(
    records: Iterable[dict[str, object]], protocol: str = "", host: str = "",
    since: datetime | None = None,
) -> list[dict[str, object]]:
    """Records of these protocols (comma-separated names), whose URL contains `host`
    (any case), from `since` on."""
    protocols = {p.strip() for p in protocol.split(",") if p.strip()}
    needle = host.lower()
    out = []
    for rec in records:
        if protocols and rec.get("protocol") not in protocols:
            continue
        if needle and needle not in str(rec.get("url", "")).lower():
            continue
        if since is not None:
            when = record_time(rec)
            if when is None or when < since:
                continue
        out.append(rec)
    return out


def describe_filters(protocol: str, host: str, since: str) -> str:
    parts = [f"protocol {protocol}" if protocol else "", f"url containing {host!r}" if host else "",
             f"since {since}" if since else ""]
    return ", ".join(p for p in parts if p)
