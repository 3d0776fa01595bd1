"""The live view's table, laid out for the width it gets: columns drop by priority instead of
every cell being cut to "…", so a number on screen is always the whole number.

Pure layout (records in, a rich Table out); `liveview` decides when and where it is shown."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NotRequired, TypedDict

import numpy as np
from rich import box
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from retimer.timing.metrics import TRACE_UNIT_MS, decode_side

SPARK_WIDTH = 16
_BLOCKS = " ▁▂▃▄▅▆▇█"
GAP = 3  # what each column adds besides its cells: two spaces of padding and a separator
TITLE = "retimer: streams"


class SideFigures(TypedDict):
    """One side (upstream or emitted) of a record: retimer.timing.metrics.Side.summary."""

    ttft_ms: float | None
    tps: float | None
    tokens: int
    duration_ms: float | None


class TargetFigures(TypedDict):
    ttft_ms: float | None  # None: passthrough
    tps: float | None


class Trace(TypedDict):
    """Both sides' events, encoded (retimer.timing.metrics.StreamStats.trace)."""

    unit_ms: float
    upstream: dict[str, object]
    emitted: dict[str, object]


class LiveRecord(TypedDict):
    """The fields the live view reads of a record as the Retimer addon makes it
    (retimer.proxy.flows.stream_record; a worker of `--workers N` sends the same as JSON)."""

    outcome: str
    protocol: str | None
    profile: str
    effective_profile: NotRequired[str]
    url: str
    target: TargetFigures
    upstream: SideFigures
    emitted: SideFigures
    upstream_bound: bool
    trace: NotRequired[Trace]


def sparkline(r: LiveRecord, width: int = SPARK_WIDTH) -> str:
    """Tokens the client got per time slice, from the request to now (or the stream's end), as
    `width` unicode blocks: a blank start is the wait for the first token, steady blocks a
    steady rate, gaps the stalls. Scaled to the stream's busiest slice."""
    trace = r.get("trace")
    if not isinstance(trace, dict) or not isinstance(side := trace.get("emitted"), dict):
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


def fmt(value: float | None, digits: int = 0) -> str:
    """A number with thousands separators; "-" when there is none yet."""
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


@dataclass(frozen=True)
class Column:
    """One column of the table. Lower `priority` stays longest when the terminal narrows."""

    heading: str
    priority: int
    cell: Callable[[LiveRecord], str]
    numeric: bool = False  # right-aligned, never cut
    cut_to: int = 0  # > 0: a URL, which may be cut in the middle with "…" down to this width
    hide_empty: bool = False  # left out when no row has anything to show in it


# display order; priority says which survive a narrow terminal. Token count and TTFT first:
# they are what a finished stream is judged by.
TIMED_COLUMNS: tuple[Column, ...] = (
    Column("state", 2, lambda r: str(r["outcome"])),
    Column("format", 8, lambda r: str(r["protocol"])),
    Column("profile", 9, lambda r: str(r.get("effective_profile") or r["profile"])),
    Column("TTFT ms", 1, lambda r: fmt(r["emitted"]["ttft_ms"]), numeric=True),
    Column("target ms", 5, lambda r: fmt(r["target"]["ttft_ms"]), numeric=True),
    Column("tok/s", 4, lambda r: fmt(r["emitted"]["tps"], 1), numeric=True),
    Column("target tok/s", 6, lambda r: fmt(r["target"]["tps"], 1), numeric=True),
    Column("tokens", 0, lambda r: fmt(r["emitted"]["tokens"]), numeric=True),
    Column("note", 7, lambda r: "upstream-bound" if r.get("upstream_bound") else "",
           hide_empty=True),
    Column("flow", 10, sparkline),
    Column("url", 3, lambda r: str(r["url"]), cut_to=20),
)
# a study participant's view: nothing that would reveal the condition (profile, pace, timing)
BLIND_COLUMNS: tuple[Column, ...] = (
    Column("state", 1, lambda r: str(r["outcome"])),
    Column("format", 3, lambda r: str(r["protocol"])),
    Column("tokens", 0, lambda r: fmt(r["emitted"]["tokens"]), numeric=True),
    Column("url", 2, lambda r: str(r["url"]), cut_to=20),
)
ALWAYS = 2  # the columns of priority below this are shown however narrow the terminal


def choose_columns(
    columns: Sequence[Column], cells: Sequence[Sequence[str]], width: int
) -> list[tuple[int, int]]:
    """(column index, width) of the columns that fit in `width` cells, in display order.

    Columns are taken by priority while they fit at their full width (a cuttable one at its
    `cut_to` width); what is left then widens the cuttable ones up to their full width."""
    natural = [
        max([cell_len(col.heading), *(cell_len(row[i]) for row in cells)])
        for i, col in enumerate(columns)
    ]
    budget = width + GAP  # n columns take sum(widths) + GAP * (n - 1)
    chosen: dict[int, int] = {}
    for i in sorted(range(len(columns)), key=lambda i: columns[i].priority):
        col = columns[i]
        if col.hide_empty and not any(row[i] for row in cells):
            continue
        need = min(natural[i], col.cut_to) if col.cut_to else natural[i]
        if need + GAP <= budget or col.priority < ALWAYS:
            chosen[i] = need
            budget -= need + GAP
    for i in chosen:
        if columns[i].cut_to and budget > 0:
            extra = min(natural[i] - chosen[i], budget)
            chosen[i] += extra
            budget -= extra
    return sorted(chosen.items())


def shorten_url(url: str, width: int) -> str:
    """`url` in `width` characters: without "https://", then cut in the middle, so the host and
    the end of the path (what tells streams apart) stay."""
    if len(url) <= width:
        return url
    url = url.removeprefix("https://")
    if len(url) <= width or width < 3:
        return url[:width]
    slash = url.find("/", url.find("//") + 2 if "//" in url else 0)
    head = url[: slash + 1] if 0 <= slash < width * 2 // 3 else url[: (width - 1) // 2]
    return head + "…" + url[len(url) - (width - 1 - len(head)):]


def streams_table(
    records: Sequence[LiveRecord], width: int, *, blind: bool = False
) -> Table:
    """The table of `records` (newest first) for a terminal `width` cells wide."""
    columns = BLIND_COLUMNS if blind else TIMED_COLUMNS
    cells = [[col.cell(r) for col in columns] for r in records]
    layout = choose_columns(columns, cells, width)
    table = Table(
        title=TITLE, title_justify="left",
        box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=False,
    )
    for i, w in layout:
        col = columns[i]
        table.add_column(col.heading, justify="right" if col.numeric else "left", width=w,
                         no_wrap=True, overflow="ellipsis")
    for row in cells:
        table.add_row(*(Text(shorten_url(row[i], w) if columns[i].cut_to else row[i])
                        for i, w in layout))
    return table
