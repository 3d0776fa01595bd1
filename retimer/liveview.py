"""What the person running retimer sees: a live table on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np
from rich.console import Console
from rich.live import Live
from rich.table import Table

from .metrics import TRACE_UNIT_MS, decode_side

MAX_ROWS = 12
SPARK_WIDTH = 16
_BLOCKS = " ▁▂▃▄▅▆▇█"


def sparkline(r: dict[str, Any], width: int = SPARK_WIDTH) -> str:
    """Tokens the client got per time slice, from the request to now (or the stream's end), as
    `width` unicode blocks: a blank start is the wait for the first token, steady blocks a
    steady rate, gaps the stalls. Scaled to the stream's busiest slice."""
    trace = r.get("trace")
    side = trace.get("emitted") if isinstance(trace, dict) else None
    if not isinstance(side, dict):
        return " " * width
    unit = trace.get("unit_ms") or TRACE_UNIT_MS
    t, n = decode_side(side, unit)
    if len(t) == 0:
        return " " * width
    span = max(float(t[-1]), float(r.get("emitted", {}).get("duration_ms") or 0.0), 1e-9)
    slices = np.minimum((t / span * width).astype(int), width - 1)
    counts = np.bincount(slices, weights=n, minlength=width)
    top = counts.max()
    if top <= 0:
        return " " * width
    levels = np.ceil(counts / top * (len(_BLOCKS) - 1)).astype(int)
    return "".join(_BLOCKS[i] for i in levels)


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def plain_line(r: dict[str, Any]) -> str:
    """One line per finished stream, for logs and pipes."""
    em, up, tg = r["emitted"], r["upstream"], r["target"]
    bound = " upstream-bound" if r.get("upstream_bound") else ""
    return (
        f"{r['outcome']:<8} {r['protocol']:<18} {r['profile']} "
        f"ttft {_fmt(em['ttft_ms'])}ms (target {_fmt(tg['ttft_ms'])}, upstream {_fmt(up['ttft_ms'])}) "
        f"rate {_fmt(em['tps'], 1)} tok/s (target {_fmt(tg['tps'], 1)}, upstream {_fmt(up['tps'], 1)}) "
        f"tokens {em['tokens']}{bound} {r['url']}"
    )


def blind_line(r: dict[str, Any]) -> str:
    """A finished stream as a study participant may see it: no profile, target or timing."""
    return f"{r['outcome']:<8} {r['protocol']:<18} tokens {r['emitted']['tokens']} {r['url']}"


class LiveView:
    """Receives records from the addon; shows active and recent streams.

    `blind` (a study runs): the profile, targets and timings are left out, since the person at
    the terminal may be a participant and they would reveal the condition."""

    def __init__(
        self,
        out: TextIO | None = None,
        interactive: bool | None = None,
        active: Callable[[], list[dict[str, Any]]] = list,
        blind: bool = False,
    ) -> None:
        self.out = out or sys.stdout
        self.blind = blind
        self.active = active  # records of the streams in flight, fetched at each refresh
        self.interactive = self.out.isatty() if interactive is None else interactive
        self.rows: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.console = Console(file=self.out)
        self.live: Live | None = None

    def start(self) -> None:
        if self.interactive:
            # refreshed from the proxy's event loop (see `refresh`), never from a thread:
            # the records it reads are mutated there
            self.live = Live(
                self.table(),
                console=self.console,
                auto_refresh=False,
                redirect_stderr=True,
                redirect_stdout=True,
            )
            self.live.start()

    def refresh(self) -> None:
        if self.live:
            self.live.update(self.table(), refresh=True)

    def stop(self) -> None:
        if self.live:
            self.live.stop()
            self.live = None

    def __call__(self, record: dict[str, Any]) -> None:
        self.rows[record["id"]] = record
        self.rows.move_to_end(record["id"])
        while len(self.rows) > MAX_ROWS:
            self.rows.popitem(last=False)
        if not self.interactive and record["outcome"] != "streaming":
            line = blind_line(record) if self.blind else plain_line(record)
            print(line, file=self.out, flush=True)

    def table(self) -> Table:
        table = Table(title="retimer: streams", expand=True, title_justify="left")
        if self.blind:
            return self._blind_table(table)
        for col in ("state", "format", "profile", "TTFT ms", "target", "tok/s", "target ",
                    "tokens", "flow", "url"):
            table.add_column(col, no_wrap=col != "url", overflow="ellipsis")
        rows = [*self.active(), *reversed(self.rows.values())]
        for r in rows[:MAX_ROWS]:
            em, tg = r["emitted"], r["target"]
            state = r["outcome"] + (" (upstream-bound)" if r.get("upstream_bound") else "")
            table.add_row(
                state, r["protocol"], r["profile"], _fmt(em["ttft_ms"]), _fmt(tg["ttft_ms"]),
                _fmt(em["tps"], 1), _fmt(tg["tps"], 1), str(em["tokens"]), sparkline(r), r["url"],
            )
        return table

    def _blind_table(self, table: Table) -> Table:
        for col in ("state", "format", "tokens", "url"):
            table.add_column(col, no_wrap=col != "url", overflow="ellipsis")
        rows = [*self.active(), *reversed(self.rows.values())]
        for r in rows[:MAX_ROWS]:
            table.add_row(r["outcome"], r["protocol"], str(r["emitted"]["tokens"]), r["url"])
        return table
