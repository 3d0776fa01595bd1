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
from retimer.records.export import columns, exported, rows
from retimer.records.reader import Log, LogError, read_logs

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


def main(argv: list[str]) -> None:
    args = parser().parse_args(argv)
    try:
        log = read_logs(args.logs)
    except LogError as e:
        _fail(str(e))
    for name in args.logs:
        if bad := log.bad_in(name):  # line numbers of its own file
            _warn(f"{name}: skipped {len(bad)} line(s) that are not records "
                  f"(first: line {bad[0].line})")
    label = args.logs[0] if len(args.logs) == 1 else f"{len(args.logs)} logs"
    if without := len(log.streams) - len(exported(log)):
        _warn(f"{label}: skipped {without} stream record(s) without an id or the client's figures")
    if orphans := log.orphans():
        _warn(f"{label}: {orphans} rating(s) of streams not in the log were left out")
    if not exported(log):
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
