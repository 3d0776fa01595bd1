"""`retimer fit LOG.jsonl [--name NAME] > profile.yaml`: a profile from recorded upstream traffic.

The YAML goes to stdout (or -o FILE) only after retimer's own profile loader accepted it, so
what `fit` prints, `retimer --profile` takes. A one-line summary goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

from retimer.cli.cmdline import OneLineParser, did_you_mean, fail
from retimer.profile.fit import SLUG, FitError, fit_streams, slug, to_yaml
from retimer.records.fit_input import streams_from
from retimer.records.reader import LogError, describe_filters, parse_since, read_logs, select
from retimer.records.schema import StreamRecord


def _fail(message: str) -> NoReturn:
    fail(message, prog="retimer fit")




def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="retimer fit",
                      description="Fit a speed profile to the upstream traffic recorded with --log.")
    p.add_argument("log", metavar="LOG.jsonl", help="a record log written by retimer --log")
    p.add_argument("--name", default="", help="the profile's name (default: from the log's name)")
    p.add_argument("--output", "-o", metavar="FILE", default="",
                   help="write the YAML here instead of stdout")
    add_filters(p)
    return p


def add_filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--protocol", default="", metavar="NAMES",
                   help="only these protocols, comma-separated (e.g. openai-chat)")
    p.add_argument("--host", default="", metavar="TEXT", help="only URLs containing TEXT")
    p.add_argument("--since", default="", metavar="WHEN",
                   help="only records from WHEN on: 2026-11-30, 2026-11-30T14:00, or an age: 2h")


def unknown_protocol(args: argparse.Namespace, records: Sequence[StreamRecord]) -> str | None:
    """A --protocol name that no retimer protocol has and no record carries (a typo that would
    otherwise be dropped silently when the other names match), with the likely one."""
    from retimer.wire.protocols import ADAPTERS

    known = {a.name for a in ADAPTERS} | {"non-streaming", "websocket", "generic"}
    known |= {r.protocol for r in records if r.protocol}
    for name in (p.strip() for p in args.protocol.split(",")):
        if name and name not in known:
            hint = did_you_mean(name, known) or f"; protocols: {', '.join(sorted(known))}"
            return f"--protocol: unknown protocol {name!r}{hint}"
    return None


def no_records(args: argparse.Namespace, records: Sequence[StreamRecord], logs: list[str]) -> str:
    """Why the filters left nothing in these logs, with the protocol that was likely meant
    (from their records)."""
    filters = describe_filters(args.protocol, args.host, args.since)
    what = f" matching {filters}" if filters else ""
    hint = ""
    present = sorted({r.protocol for r in records if r.protocol})
    missing = [p.strip() for p in args.protocol.split(",") if p.strip() and p.strip() not in present]
    if missing and present:
        hint = did_you_mean(missing[0], present) or f"; protocols in it: {', '.join(present)}"
    source, where = (logs[0], "the file") if len(logs) == 1 else (f"{len(logs)} logs", "them")
    return f"{source}: no records{what} ({len(records)} records in {where}{hint})"


def main(argv: list[str]) -> None:
    args = parser().parse_args(argv)
    name = args.name or f"fitted-{slug(Path(args.log).stem)}"
    if not SLUG.fullmatch(name):
        _fail(f"--name must be a lowercase name of a-z 0-9 . _ -, got {args.name!r}")
    try:
        since = parse_since(args.since) if args.since else None
        log = read_logs([args.log])
    except LogError as e:
        _fail(str(e))
    if err := unknown_protocol(args, log.streams):
        _fail(err)
    chosen = select(log.streams, args.protocol, args.host, since)
    filters = describe_filters(args.protocol, args.host, args.since)
    if not chosen:
        _fail(no_records(args, log.streams, [args.log]))
    streams, skipped = streams_from(chosen)
    try:
        fit = fit_streams(streams)
    except FitError as e:
        left = ", ".join(f"{r} {c}" for r, c in sorted(skipped.items()))
        _fail(f"{args.log}: {e}{' (left out: ' + left + ')' if left else ''}")
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    text = to_yaml(fit, name, Path(args.log).name, len(chosen), skipped, filters, when)
    _check(text)
    if args.output:
        try:
            Path(args.output).expanduser().write_text(text, encoding="utf-8")
        except OSError as e:
            _fail(f"--output: cannot write {args.output}: {e.strerror}")
    else:
        sys.stdout.write(text)
    print(f"retimer fit: {fit.streams} streams, {fit.tokens} tokens: TTFT p50 "
          f"{fit.ttft_ms[0]:.0f} ms, {fit.tps:.1f} tok/s, {fit.stalls} stalls"
          f"{' -> ' + args.output if args.output else ''}", file=sys.stderr)


def _check(text: str) -> None:
    """Load the YAML with retimer's profile loader: what fit prints, --profile takes."""
    from retimer.profile.loader import load_profile
    from retimer.profile.model import ProfileError

    with tempfile.TemporaryDirectory(prefix="retimer-fit-") as tmp:
        path = Path(tmp) / "fitted.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            load_profile(str(path))
        except ProfileError as e:
            _fail(f"the fitted profile does not load ({e}); please report this")
