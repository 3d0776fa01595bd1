"""`retimer whatif LOG [LOG ...] [--profiles a,b,c] [--json]`: a recorded session at other speeds.

For each session (a log, a study participant, a conversation): the time spent waiting on the
model as recorded, as the upstream alone delivered, and as each profile would give the same
calls, plus the time between calls. One table (and a bar per row when the terminal has room);
`--json` prints the same figures for scripts. The figures come from retimer.report.whatif.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from typing import NoReturn

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from retimer.cli.cmdline import OneLineParser, fail
from retimer.cli.records.fit import add_filters, unknown_protocol
from retimer.profile.loader import builtin_profiles, load_profile_spec, profile_specs
from retimer.profile.model import Profile, ProfileError
from retimer.records.reader import LogError, describe_filters, parse_since, read_logs, select
from retimer.report.whatif import BY_CHOICES, SessionResult, combined, sessions_of, whatif
from retimer.report.whatif_view import change_text, duration_text, notes, rows, to_json

MAX_SESSION_TABLES = 4  # more sessions: one table of them all added up, then one line each


def _fail(message: str) -> NoReturn:
    fail(message, prog="retimer whatif")


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="retimer whatif",
                      description="How long a recorded session waited on the model, and how long "
                      "it would have with other profiles (docs/whatif.md).")
    p.add_argument("logs", nargs="+", metavar="LOG.jsonl", help="record logs written by --log")
    p.add_argument("--profiles", default="", metavar="LIST",
                   help="profiles to compare, comma-separated: names, aliases, YAML paths, with "
                   "overrides as gpt-5:tps=40,thinking=high (default: every built-in profile)")
    p.add_argument("--by", choices=BY_CHOICES, default="auto",
                   help="what a session is: a log file, a study participant, a conversation, or "
                   "all records together (default auto: participants when the records carry "
                   "them, else files)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--per-call", action="store_true",
                   help="with --json: every call's wait per column, in start order")
    add_filters(p)
    return p


def chosen_profiles(text: str, prog: str = "retimer whatif") -> list[Profile]:
    """--profiles as Profile objects (default: every built-in with timing); one error line."""
    if not text.strip():
        return [p for p in builtin_profiles() if not p.passthrough]
    out = []
    for spec in profile_specs(text):
        try:
            p = load_profile_spec(spec)
        except ProfileError as e:
            fail(f"--profiles: {e}", prog=prog)
        if p.passthrough:
            fail(f"--profiles: {spec} is passthrough: it adds no timing (the 'upstream alone' "
                  "row is what it gives)", prog=prog)
        out.append(p)
    return out


def results_for(args: argparse.Namespace, profiles: list[Profile]
                ) -> tuple[str, list[SessionResult]]:
    logs = []
    since = None
    try:
        since = parse_since(args.since) if args.since else None
        for path in args.logs:
            log = read_logs([path])
            if not log.streams:
                _fail(f"{path}: no stream records in it (is it a retimer --log file?"
                      f"{f' {len(log.bad)} lines are not records' if log.bad else ''})")
            if err := unknown_protocol(args, log.streams):
                _fail(err)
            logs.append((str(path), select(log.streams, args.protocol, args.host, since)))
    except LogError as e:
        _fail(str(e))
    if not any(recs for _, recs in logs):
        _fail(f"no records matching {describe_filters(args.protocol, args.host, args.since)}")
    by, sessions = sessions_of(logs, args.by)
    results = [r for label, recs in sessions
               if (r := whatif(label, recs, profiles, keep_waits=args.per_call)) is not None]
    if not results:
        _fail("no record has a time and a duration: nothing to add up")
    return by, results


def _bar(between: float, total: float, top: float, width: int) -> str:
    """The row's total as whole cells, its between-call part grey (rich markup)."""
    base = round(min(between, total) / top * width) if top > 0 else 0
    cells = max(round(total / top * width), base + (1 if total > between else 0)) if top > 0 else 0
    return f"[grey50]{'█' * base}[/grey50][cyan]{'█' * (cells - base)}[/cyan]"


def session_table(result: SessionResult, by: str, width: int) -> Table:
    """One session: a row per column of timing, and a bar of its total when there is room."""
    rec = result.recorded
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left",
                  title=f"{escape(result.session)} ({by}): {result.calls} call"
                  f"{'' if result.calls == 1 else 's'}, "
                  f"{duration_text(result.between_s)} between calls")
    table.add_column("timing", overflow="fold")
    for name in ("waiting", "vs rec.", "total", "vs rec."):
        table.add_column(name, justify="right", no_wrap=True)
    bar_width = min(40, width - 80)
    if bar_width >= 8:
        table.add_column("total (grey: between calls)", no_wrap=True)
    lines = rows(result)
    top = max(r.total_s for r in lines)
    for r in lines:
        label = f"[bold]{escape(r.label)}[/bold]" if r.kind != "profile" else escape(r.label)
        cells = [label, duration_text(r.waiting_s), change_text(r.waiting_s, rec.waiting_s),
                 duration_text(r.total_s), change_text(r.total_s, rec.total_s)]
        if bar_width >= 8:
            cells.append(_bar(r.between_s, r.total_s, top, bar_width))
        table.add_row(*cells)
    return table


def _overview(results: list[SessionResult], by: str) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left",
                  title=f"{len(results)} sessions (by {by})")
    table.add_column(by, overflow="fold")
    for name in ("calls", "between calls", "waiting, recorded", "fastest profile",
                 "slowest profile"):
        table.add_column(name, justify="right")
    for r in results:
        totals = sorted(r.profiles, key=lambda p: p.waiting_s)
        fastest = duration_text(totals[0].waiting_s) if totals else "-"
        slowest = duration_text(totals[-1].waiting_s) if totals else "-"
        table.add_row(escape(r.session), str(r.calls), duration_text(r.between_s),
                      duration_text(r.recorded.waiting_s), fastest, slowest)
    return table


def main(argv: list[str]) -> None:
    args = parser().parse_args(argv)
    if args.per_call and not args.json:
        _fail("--per-call needs --json")
    profiles = chosen_profiles(args.profiles)
    by, results = results_for(args, profiles)
    if args.json:
        json.dump(to_json(by, results), sys.stdout, ensure_ascii=False, indent=1)
        sys.stdout.write("\n")
        return
    width = shutil.get_terminal_size((100, 24)).columns  # COLUMNS, the terminal, or 100
    console = Console(file=sys.stdout, highlight=False, width=width)
    shown = results if len(results) <= MAX_SESSION_TABLES else [combined(results)]
    if len(results) > MAX_SESSION_TABLES:
        console.print(_overview(results, by))
    for r in shown:
        console.print(session_table(r, by, width))
        for line in notes(r):
            console.print(f"  {escape(line)}")
    console.print("waiting: the time at least one call was running (parallel calls count "
                  "once); profiles give each call their mean wait for its prompt, cached and "
                  "output tokens. docs/whatif.md says how.", style="grey50")
