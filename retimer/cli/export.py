"""`retimer export LOG.jsonl [LOG.jsonl ...] --csv FILE`: one CSV row per stream, joined with
its ratings. Several logs (one per worker host or instance) are read as one: a rating joins its
stream whichever log holds it.

Why CSV: R (`read.csv`) and pandas (`read_csv`) read it as is, one header row; the columns and
the join are retimer.records.export's.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import NoReturn, TextIO

from retimer.cli.cmdline import OneLineParser, fail
from retimer.records.export import Log, columns, read_log, rows

__all__ = ["main", "parser", "write_csv"]


def _fail(message: str) -> NoReturn:
    fail(message)


def _warn(message: str) -> None:
    print(f"retimer: warning: {message}", file=sys.stderr)


def write_csv(log: Log, out: TextIO) -> int:
    """The rows of `log` as CSV with a header; the number of rows written."""
    writer = csv.DictWriter(out, fieldnames=columns(log), lineterminator="\n")
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
    p.add_argument("logs", nargs="+", metavar="LOG.jsonl",
                   help="records logs (retimer --log); several are joined as one")
    p.add_argument("--csv", metavar="FILE", default="-", help="where to write (default: stdout)")
    return p


def _lines(name: str) -> list[str]:
    """The lines of one log; a missing or unreadable file fails in one line."""
    path = Path(name).expanduser()
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            return f.readlines()
    except FileNotFoundError:
        _fail(f"{name}: no such file")
    except IsADirectoryError:
        _fail(f"{name}: is a directory, not a records log")
    except OSError as e:
        _fail(f"{name}: cannot read it ({e.strerror})")


def main(argv: list[str]) -> None:
    args = parser().parse_args(argv)
    texts = [_lines(name) for name in args.logs]
    for name, lines in zip(args.logs, texts, strict=True):
        if len(args.logs) > 1 and (bad := read_log(lines).bad):  # line numbers of its own file
            _warn(f"{name}: skipped {len(bad)} line(s) that are not records (first: line {bad[0]})")
    log = read_log(line for lines in texts for line in lines)
    label = args.logs[0] if len(args.logs) == 1 else f"{len(args.logs)} logs"
    if log.bad and len(args.logs) == 1:
        _warn(f"{label}: skipped {len(log.bad)} line(s) that are not records "
              f"(first: line {log.bad[0]})")
    if log.orphans:
        _warn(f"{label}: {log.orphans} rating(s) of streams not in the log were left out")
    if not log.streams:
        _warn(f"{label}: no stream records")
    if args.csv == "-":
        write_csv(log, sys.stdout)
        return
    try:
        with open(Path(args.csv).expanduser(), "w", encoding="utf-8", newline="") as out:
            n = write_csv(log, out)
    except OSError as e:
        _fail(f"--csv: cannot write {args.csv} ({e.strerror})")
    print(f"retimer: wrote {n} row(s) to {args.csv}", file=sys.stderr)
