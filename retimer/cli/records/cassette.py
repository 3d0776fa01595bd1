"""`retimer cassette show DIR [--json]`: a cassette's calls, one line each (protocol, with a
WebSocket turn's socket and turn, model, messages, status, tokens, the upstream's TTFT and
duration, body size), in 80 columns; or the same as JSON. A damaged cassette is one line naming its file (exit 2)."""

from __future__ import annotations

import argparse
import json
import sys

from retimer.cassette.format import CassetteCall
from retimer.cassette.store import CassetteError, read_cassette
from retimer.cli.cmdline import OneLineParser, fail

__all__ = ["main", "parser", "show_lines"]


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="retimer cassette",
                      description="Look into a session cassette (retimer --record DIR).")
    sub = p.add_subparsers(dest="action", required=True, metavar="show")
    show = sub.add_parser("show", help="list the cassette's calls")
    show.add_argument("dir", metavar="DIR", help="the cassette's directory")
    show.add_argument("--json", action="store_true", help="the calls as JSON")
    return p


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.1f} s"


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KB" if n < 1024 * 1024 else f"{n / 1048576:.1f} MB"


def show_lines(directory: str, about: dict[str, str], calls: list[CassetteCall]) -> list[str]:
    """The cassette's calls as a table that fits 80 columns."""
    head = (f"cassette {directory}: {len(calls)} calls, recorded {about.get('created') or '?'} "
            f"by retimer {about.get('retimer') or '?'}")
    rows = [("#", "protocol", "model", "msgs", "status", "tokens", "TTFT", "duration", "body")]
    for i, c in enumerate(calls, start=1):
        protocol = c.entry.protocol or "-"
        if c.socket is not None:  # a WebSocket turn: its socket and turn
            protocol = f"{protocol} {c.socket}.{c.turn}"
        rows.append((str(i), protocol[:16], (c.shape.model or "-")[:16],
                     str(len(c.shape.messages)), str(c.entry.status),
                     "-" if c.upstream.tokens is None else str(c.upstream.tokens),
                     _ms(c.upstream.ttft_ms), _ms(c.upstream.duration_ms), _size(len(c.entry.body))))
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    left = {1, 2}  # text columns; numbers right-aligned
    lines = [head]
    for r in rows:
        cells = [v.ljust(w) if k in left else v.rjust(w) for k, (v, w) in enumerate(zip(r, widths, strict=True))]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def _json(calls: list[CassetteCall]) -> list[dict[str, object]]:
    return [{"call": i, "protocol": c.entry.protocol, "model": c.shape.model, "path": c.shape.path,
             "messages": len(c.shape.messages), "status": c.entry.status,
             "tokens": c.upstream.tokens, "ttft_ms": c.upstream.ttft_ms,
             "duration_ms": c.upstream.duration_ms, "body_bytes": len(c.entry.body),
             "socket": c.socket, "turn": c.turn}
            for i, c in enumerate(calls, start=1)]


def main(argv: list[str]) -> None:
    args = parser().parse_args(argv)
    try:
        about, calls = read_cassette(args.dir)
    except CassetteError as e:
        fail(str(e))
    if args.json:
        json.dump({**about, "calls": _json(calls)}, sys.stdout, indent=1)
        print()
        return
    print("\n".join(show_lines(args.dir, about, calls)))
