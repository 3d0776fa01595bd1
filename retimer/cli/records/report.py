"""`retimer report LOG.jsonl [LOG.jsonl ...] [-o FILE] [--png DIR]`: record logs as pictures
(several logs, e.g. one per machine behind a load balancer, make one report).

Without -o the page is report.html in the current directory; either way the path written is
printed, so a default never leaves the user guessing where it went."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from retimer.cli.cmdline import OneLineParser, fail
from retimer.cli.records.fit import add_filters, no_records, unknown_protocol
from retimer.records.reader import Log, LogError, parse_since, read_logs, select
from retimer.report.page import build, render_html
from retimer.report.whatif import BY_CHOICES, sessions_of, whatif


def _fail(message: str) -> NoReturn:
    fail(message, prog="retimer report")


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="retimer report",
                      description="One self-contained HTML page (no network needed) with plots of "
                      "the streams recorded with --log. Prints the path it wrote.")
    p.add_argument("logs", nargs="+", metavar="LOG.jsonl",
                   help="record logs written by retimer --log (several make one report)")
    p.add_argument("--output", "-o", metavar="FILE", default="report.html",
                   help="the HTML file to write (default: report.html in the current directory)")
    p.add_argument("--png", metavar="DIR", default="",
                   help="also write the charts as PNG files into DIR (needs matplotlib)")
    p.add_argument("--title", default="", help="the page's title (default: the logs' names)")
    p.add_argument("--profiles", default="", metavar="LIST",
                   help="profiles for the 'at other speeds' section, as in retimer whatif "
                   "(default: every built-in profile)")
    p.add_argument("--by", choices=BY_CHOICES, default="auto",
                   help="what a session is in that section, as in retimer whatif")
    add_filters(p)
    return p


def main(argv: list[str]) -> None:
    args = parser().parse_args(argv)
    try:
        since = parse_since(args.since) if args.since else None
        logs = [read_logs([path]) for path in args.logs]
    except LogError as e:
        _fail(str(e))
    every = [r for log in logs for r in log.streams]
    if err := unknown_protocol(args, every):
        _fail(err)
    chosen_by_log = [select(log.streams, args.protocol, args.host, since) for log in logs]
    chosen = sorted((r for c in chosen_by_log for r in c), key=lambda r: r.time)
    if len(logs) == 1:
        chosen = chosen_by_log[0]  # one log: its own order, as before
    if not chosen:
        _fail(no_records(args, every, args.logs))
    if args.png:  # before writing anything: a missing matplotlib is one line, nothing half-done
        from retimer.report.png import PngUnavailable, available

        try:
            available()
        except PngUnavailable as e:
            _fail(str(e))
    from retimer.cli.records.whatif import chosen_profiles

    profiles = chosen_profiles(args.profiles, prog="retimer report")
    names = [Path(path).name for path in args.logs]
    if len(set(names)) < len(names):  # records.jsonl from two machines: tell them apart
        names = list(args.logs)
    by, sessions = sessions_of(list(zip(names, chosen_by_log, strict=True)), args.by)
    results = [r for label, recs in sessions if (r := whatif(label, recs, profiles)) is not None]
    bad = sum(len(log.bad) for log in logs)
    ratings = [r for log in logs for r in log.ratings]
    scores = Log(records=[*every, *ratings]).scores()  # a rating joins its stream in any log
    report = build(chosen, args.title or ", ".join(names), bad, (by, results), scores)
    from retimer.cli.study.analyze import report_sections

    sections, note = report_sections([*chosen, *ratings])
    if note:
        print(f"retimer report: {note}", file=sys.stderr)
    out = Path(args.output).expanduser()
    try:
        out.write_text(render_html(report, sections=sections), encoding="utf-8")
    except OSError as e:
        _fail(f"--output: cannot write {args.output}: {e.strerror}")
    print(f"retimer report: {len(chosen)} streams -> {out.resolve()}", file=sys.stderr)
    if args.png:
        from retimer.report.png import write_pngs

        try:
            pngs = write_pngs(report, Path(args.png).expanduser())
        except OSError as e:
            _fail(f"--png: cannot write into {args.png}: {e.strerror}")
        where = Path(args.png).expanduser().resolve()
        print(f"retimer report: {len(pngs)} PNG files in {where}", file=sys.stderr)
