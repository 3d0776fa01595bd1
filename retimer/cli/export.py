"""`retimer export LOG.jsonl --csv FILE`: one CSV row per stream, joined with its ratings.

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
from retimer.records.export import COLUMNS, Log, read_log, rows

__all__ = ["main", "parser", "write_csv"]


def _fail(message: str) -> NoReturn:
    fail(message)


def _warn(message: str) -> None:
    print(f"retimer: warning: {message}", file=sys.stderr)


def write_csv(log: Log, out: TextIO) -> int:
    """The rows of `log` as CSV with a header; the number of rows written."""
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
