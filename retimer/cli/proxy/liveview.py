"""What the person running retimer sees: a live table on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from typing import TextIO, cast

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.live import Live
from rich.text import Text

from retimer.cli.proxy.livetable import SPARK_WIDTH, LiveRecord, fmt, sparkline, streams_table

__all__ = ["SPARK_WIDTH", "LiveView", "blind_line", "plain_line", "sparkline"]

KEPT_ROWS = 500  # finished streams kept for the table: more than any terminal has rows
CHROME_LINES = 5  # title, heading, rule, the summary, and one spare
ECHO_ROOM = 4  # cells left free after the summary line, where the cursor rests: the terminal
# echoes "^C" there, and a line that then wraps puts the redraw one line off (a doubled title)


def plain_line(r: LiveRecord) -> str:
    """One line per finished stream, for logs and pipes."""
    em, up, tg = r["emitted"], r["upstream"], r["target"]
    bound = " upstream-bound" if r.get("upstream_bound") else ""
    return (
        f"{r['outcome']:<8} {r['protocol']:<18} {r.get('effective_profile') or r['profile']} "
        f"ttft {fmt(em['ttft_ms'])}ms (target {fmt(tg['ttft_ms'])}, upstream {fmt(up['ttft_ms'])}) "
        f"rate {fmt(em['tps'], 1)} tok/s (target {fmt(tg['tps'], 1)}, upstream {fmt(up['tps'], 1)}) "
        f"tokens {em['tokens']}{bound} {r['url']}"
    )


def blind_line(r: LiveRecord) -> str:
    """A finished stream as a study participant may see it: no profile, target or timing."""
    return f"{r['outcome']:<8} {r['protocol']:<18} tokens {r['emitted']['tokens']} {r['url']}"


def summary(outcomes: Counter[str], active: int, hidden: int = 0, short: bool = False) -> list[str]:
    """The parts of the one-line total, most important first: the count, what is not shown,
    how they ended, what is still running. `short`: the fewest words, for narrow terminals."""
    total = sum(outcomes.values()) + active
    parts = [f"{total:,} stream{'s' if total != 1 else ''}"]
    if hidden:
        parts.append(f"+{hidden:,} earlier" + ("" if short else " not shown"))
    if outcomes:
        parts.append(", ".join(f"{n:,} {o}" for o, n in outcomes.most_common()))
    if active:
        parts.append(f"{active:,} streaming")
    return parts


def fit_line(parts: list[str], width: int, keep: int = 1) -> str:
    """`parts` joined with " · ", dropping from the end (all but `keep`) until it fits `width`."""
    while len(parts) > keep and len(" · ".join(parts)) > width:
        parts = parts[:-1]
    return " · ".join(parts)


class LiveView:
    """Receives records from the addon; shows active and recent streams.

    `blind` (a study runs): the profile, targets and timings are left out, since the person at
    the terminal may be a participant and they would reveal the condition."""

    def __init__(
        self,
        out: TextIO | None = None,
        interactive: bool | None = None,
        active: Callable[[], Sequence[Mapping[str, object]]] = list,
        blind: bool = False,
    ) -> None:
        self.out = out or sys.stdout
        self.blind = blind
        self.active = active  # records of the streams in flight, fetched at each refresh
        self.interactive = self.out.isatty() if interactive is None else interactive
        self.rows: deque[LiveRecord] = deque(maxlen=KEPT_ROWS)  # finished, oldest first
        self.outcomes: Counter[str] = Counter()
        self.console = Console(file=self.out)
        self.live: Live | None = None

    def start(self) -> None:
        if self.interactive:
            # refreshed from the proxy's event loop (see `refresh`), never from a thread:
            # the records it reads are mutated there
            self.live = Live(
                self.table(fit_screen=True),
                console=self.console,
                auto_refresh=False,
                redirect_stderr=True,
                redirect_stdout=True,
            )
            self.live.start()

    def refresh(self) -> None:
        if self.live:
            self.live.refresh()

    def stop(self) -> None:
        """The table stays as the summary on a terminal; otherwise one summary line."""
        if self.live:
            self.live.stop()  # its last frame, which fits the screen, is the one summary
            self.live = None
        elif not self.interactive and self.outcomes:
            print(f"retimer: {fit_line(summary(self.outcomes, 0), 10_000)}", file=self.out,
                  flush=True)

    def __call__(self, record: Mapping[str, object]) -> None:
        rec = cast(LiveRecord, record)  # made by the Retimer addon (see LiveRecord)
        if rec["outcome"] == "streaming":  # only finished streams are kept
            return
        self.rows.append(rec)
        self.outcomes[rec["outcome"]] += 1
        if not self.interactive:
            line = blind_line(rec) if self.blind else plain_line(rec)
            print(line, file=self.out, flush=True)

    def table(self, fit_screen: bool = False) -> _Screen:
        """The streams in flight then the finished ones, newest first, laid out when rendered
        for the width it gets; `fit_screen`: no more rows than the screen has."""
        return _Screen(self, fit_screen)

    def layout(self, width: int, max_rows: int | None = None) -> Group:
        """The table for `width` cells and at most `max_rows` rows (at least one), then the
        summary line (unpadded, and short of the edge: see ECHO_ROOM)."""
        active = cast("Sequence[LiveRecord]", self.active())  # the Retimer addon's (LiveRecord)
        rows = [*active, *reversed(self.rows)]
        shown = rows if max_rows is None else rows[: max(1, max_rows)]
        hidden = sum(self.outcomes.values()) + len(active) - len(shown)
        caption = fit_line(summary(self.outcomes, len(active), hidden), width - ECHO_ROOM)
        if hidden and "earlier" not in caption:  # the hidden count goes last of all
            short = summary(self.outcomes, len(active), hidden, short=True)
            caption = fit_line(short, width - ECHO_ROOM, keep=2)
        table = streams_table(shown, width, blind=self.blind)
        return Group(table, Text(caption, style="dim italic", justify="default", no_wrap=True))


class _Screen:
    """The view as a rich renderable, laid out at each render for the size it is given. On the
    screen it is no taller than the terminal: a taller one leaves copies of its top behind as
    the Live redraws it (the doubled title seen on exit)."""

    def __init__(self, view: LiveView, fit_screen: bool) -> None:
        self.view, self.fit_screen = view, fit_screen

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        rows = options.size.height - CHROME_LINES if self.fit_screen else None
        yield self.view.layout(options.max_width, rows)
