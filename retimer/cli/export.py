"""`retimer export LOG.jsonl --csv FILE`: one CSV row per stream, joined with its ratings.

Why CSV with these columns: R (`read.csv`) and pandas (`read_csv`) read it as is: one header
row, numbers in milliseconds and tokens/s, `true`/`false` for flags, empty cells for missing
values. Timing columns are what the client got (the records' `emitted` figures); `profile`
(the base name), `effective_profile` (the name plus overrides, e.g. `openai-gpt-5 tps=10`:
group by this one, so changed timing is never filed under the base) and the `target_*`
columns are the experimenter's view of the condition.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn, TextIO

from retimer.cli.cmdline import OneLineParser, fail

__all__ = ["COLUMNS", "main", "read_log", "rows"]

COLUMNS = (
    "time", "stream_id", "study", "participant", "condition", "unit", "conversation",
    "protocol", "profile", "effective_profile", "target_ttft_ms", "target_tps", "ttft_ms", "ttfat_ms", "tps",
    "tokens", "upstream_bound", "upstream_wait_ms", "outcome", "rating_speed", "rating_quality",
)


def _fail(message: str) -> NoReturn:
    fail(message)


def _warn(message: str) -> None:
    print(f"retimer: warning: {message}", file=sys.stderr)


class Log:
    """The stream records and ratings of a log, and what had to be skipped."""

    def __init__(self) -> None:
        self.streams: list[dict[str, Any]] = []
        self.ratings: dict[str, dict[str, int]] = {}  # stream id -> latest score per scale
        self.bad: list[int] = []  # line numbers that are not records
        self.orphans = 0  # ratings of streams not in the log


def read_log(lines: Iterable[str]) -> Log:
    """Streams (lines without `type`) and ratings (`"type": "rating"`); other types are left
    for other tools; anything unreadable is counted in `bad`."""
    log = Log()
    ratings: list[dict[str, Any]] = []
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
        if r["stream"] not in known:
            log.orphans += 1
            continue
        scores = log.ratings.setdefault(r["stream"], {})
        for scale in ("speed", "quality"):
            if isinstance(r.get(scale), int) and not isinstance(r.get(scale), bool):
                scores[scale] = r[scale]
    return log


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def rows(log: Log) -> Iterator[dict[str, Any]]:
    """One dict per stream, keyed by COLUMNS, cells ready for csv."""
    for s in log.streams:
        emitted = s.get("emitted") or {}
        target = s.get("target") or {}
        scores = log.ratings.get(s["id"], {})
        row = {
            "time": s.get("time"), "stream_id": s["id"], "study": s.get("study"),
            "participant": s.get("participant"), "condition": s.get("condition"),
            "unit": s.get("unit"), "conversation": s.get("conversation"),
            "protocol": s.get("protocol"), "profile": s.get("profile"),
            # what ran: the name plus overrides (older logs: the base name)
            "effective_profile": s.get("effective_profile") or s.get("profile"),
            "target_ttft_ms": target.get("ttft_ms"), "target_tps": target.get("tps"),
            "ttft_ms": emitted.get("ttft_ms"), "ttfat_ms": emitted.get("ttfat_ms"),
            "tps": emitted.get("tps"), "tokens": emitted.get("tokens"),
            "upstream_bound": s.get("upstream_bound"),
            "upstream_wait_ms": s.get("upstream_wait_ms"), "outcome": s.get("outcome"),
            "rating_speed": scores.get("speed"), "rating_quality": scores.get("quality"),
        }
        yield {k: _cell(v) for k, v in row.items()}


def write_csv(log: Log, out: TextIO) -> int:
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    n = 0
    for row in rows(log):
        writer.writerow(row)
        n += 1
    return n


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="retimer export",
        description="One CSV row per stream of a records log, joined with its ratings.",
    )
    p.add_argument("log", metavar="LOG.jsonl", help="a records log (retimer --log)")
    p.add_argument("--csv", metavar="FILE", default="-", help="where to write (default: stdout)")
    return p


def main(argv: list[str]) -> None:
    args = parser().parse_args(argv)
    path = Path(args.log).expanduser()
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            log = read_log(f)
    except FileNotFoundError:
        _fail(f"{args.log}: no such file")
    except IsADirectoryError:
        _fail(f"{args.log}: is a directory, not a records log")
    except OSError as e:
        _fail(f"{args.log}: cannot read it ({e.strerror})")
    if log.bad:
        _warn(f"{args.log}: skipped {len(log.bad)} line(s) that are not records "
              f"(first: line {log.bad[0]})")
    if log.orphans:
        _warn(f"{args.log}: {log.orphans} rating(s) of streams not in the log were left out")
    if not log.streams:
        _warn(f"{args.log}: no stream records")
    if args.csv == "-":
        write_csv(log, sys.stdout)
        return
    try:
        with open(Path(args.csv).expanduser(), "w", encoding="utf-8", newline="") as out:
            n = write_csv(log, out)
    except OSError as e:
        _fail(f"--csv: cannot write {args.csv} ({e.strerror})")
    print(f"retimer: wrote {n} row(s) to {args.csv}", file=sys.stderr)
