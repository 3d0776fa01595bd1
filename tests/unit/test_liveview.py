"""The live view's layout at every width: whole numbers, unique headings, the hidden count.

Rendered with rich's own Console at a fixed width, so what is checked is what a terminal of
that width would show. tests/e2e/test_liveview_tmux.py runs the real `retimer` in a terminal."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from rich.console import Console

from retimer.cli.proxy.livetable import BLIND_COLUMNS, TIMED_COLUMNS, choose_columns, fmt, streams_table
from retimer.cli.proxy.liveview import CHROME_LINES, LiveView

WIDTHS = (60, 80, 120, 200)


def _record(i: int, **over: Any) -> dict[str, Any]:
    """A finished stream with wide numbers: thousands separators, a long URL and profile."""
    rec = {
        "id": f"s{i}", "outcome": "complete", "protocol": "anthropic-messages",
        "profile": "openai-o3-high-reasoning", "upstream_bound": i % 3 == 0,
        "url": f"https://api.anthropic.com/v1/messages?beta=true&stream={i}",
        "target": {"ttft_ms": 12_000.0 + 7 * i, "tps": 1_234.5},
        "emitted": {"ttft_ms": 12_345.0 + 11 * i, "tps": 1_001.25 + i, "tokens": 123_400 + i},
        "upstream": {"ttft_ms": 50.0, "tps": 9_000.0, "tokens": 123_400 + i},
    }
    rec.update(over)
    return rec


def _render(view_or_table: Any, width: int, height: int = 25) -> list[str]:
    console = Console(width=width, height=height, record=True, file=io.StringIO(),
                      color_system=None)
    console.print(view_or_table)
    return console.export_text().splitlines()


def _headings(lines: list[str]) -> list[str]:
    """The heading line's names (headings are separated by 2+ spaces; one has a space)."""
    heading = next(line for line in lines if line.lstrip().startswith(("state", "TTFT", "tokens")))
    return re.split(r"\s{2,}", heading.strip())


@pytest.mark.parametrize("width", WIDTHS)
def test_numbers_are_whole_at_every_width(width: int) -> None:
    records = [_record(i) for i in range(6)]
    lines = _render(streams_table(records, width), width)
    assert all(len(line) <= width for line in lines)
    rows = [line for line in lines if "complete" in line]
    assert len(rows) == len(records)
    for rec, row in zip(records, rows, strict=True):
        numbers = row.split()
        assert fmt(rec["emitted"]["tokens"]) in numbers
        assert fmt(rec["emitted"]["ttft_ms"]) in numbers
    # "…" only ever ends the URL, never a number
    for row in rows:
        for cell in row.split():
            assert not ("…" in cell and cell[0].isdigit()), row
    headings = _headings(lines)
    assert len(headings) == len(set(headings)), headings
    assert {"tokens", "TTFT ms"} <= set(headings)
    if width >= 80:
        assert "url" in headings


def test_columns_drop_by_priority() -> None:
    """A wider terminal shows everything a narrower one did, and more; 200 shows all."""
    records = [_record(i) for i in range(4)]
    shown = [_headings(_render(streams_table(records, w), w)) for w in WIDTHS]
    for narrow, wide in zip(shown, shown[1:]):
        assert set(narrow) <= set(wide)
    assert len(shown[0]) < len(shown[-1])
    assert shown[-1] == [c.heading for c in TIMED_COLUMNS]
    kept = {c.heading: c.priority for c in TIMED_COLUMNS}
    for headings in shown:  # what was dropped at a width never outranks everything kept
        dropped = set(kept) - set(headings)
        if dropped:
            assert min(kept[h] for h in dropped) > min(kept[h] for h in headings)


@pytest.mark.parametrize("width", WIDTHS)
def test_choose_columns_fits_the_width(width: int) -> None:
    records = [_record(i) for i in range(3)]
    cells = [[c.cell(r) for c in TIMED_COLUMNS] for r in records]
    layout = choose_columns(TIMED_COLUMNS, cells, width)
    used = sum(w for _, w in layout) + 3 * (len(layout) - 1)
    assert used <= width
    for i, w in layout:  # every kept column but the URL has room for its widest cell
        if not TIMED_COLUMNS[i].cut_to:
            assert w >= max(len(row[i]) for row in cells)


def test_note_column_only_when_a_stream_was_upstream_bound() -> None:
    free = [_record(i, upstream_bound=False) for i in range(3)]
    assert "note" not in _headings(_render(streams_table(free, 200), 200))
    assert "upstream-bound" in "\n".join(_render(streams_table([_record(0)], 200), 200))


def test_blind_table_has_no_timing_at_any_width() -> None:
    for width in WIDTHS:
        lines = _render(streams_table([_record(1)], width, blind=True), width)
        text = "\n".join(lines)
        assert fmt(_record(1)["emitted"]["tokens"]) in text
        assert "TTFT" not in text and "openai-o3" not in text and "12,356" not in text
        assert set(_headings(lines)) <= {c.heading for c in BLIND_COLUMNS}


def test_hidden_streams_are_counted() -> None:
    active = [_record(99, outcome="streaming")]
    view = LiveView(out=io.StringIO(), interactive=True, active=lambda: active)
    for i in range(30):
        view(_record(i, outcome="error" if i == 4 else "complete"))
    text = "\n".join(_render(view.layout(80, max_rows=10), 80))
    assert "+21 earlier not shown" in text  # 30 finished + 1 streaming - 10 shown
    assert text.startswith("retimer: streams") and "31 streams" in text
    rows = text.splitlines()[3:-1]
    assert len(rows) == 10 and "streaming" in rows[0]  # the one in flight, then 9 finished
    assert "stream=29" in text and "stream=20" not in text  # newest first
    everything = "\n".join(_render(view.layout(200), 200))
    assert "earlier" not in everything and "29 complete" in everything and "1 error" in everything


def test_hidden_count_survives_a_narrow_terminal() -> None:
    view = LiveView(out=io.StringIO(), interactive=True)
    for i in range(5):
        view(_record(i))
    lines = _render(view.layout(30, max_rows=3), 30)
    assert lines[-1].strip() == "5 streams · +2 earlier"
    assert all(fmt(_record(i)["emitted"]["tokens"]) in "\n".join(lines) for i in (2, 3, 4))


@pytest.mark.parametrize(("width", "height"), [(80, 24), (200, 50), (60, 12)])
def test_screen_fits_the_terminal(width: int, height: int) -> None:
    """On a terminal the table is never taller than the screen (taller ones leave copies of
    their top behind as they redraw) and its last line leaves room for the echoed ^C."""
    view = LiveView(out=io.StringIO(), interactive=True)
    for i in range(3 * height):
        view(_record(i))
    lines = _render(view.table(fit_screen=True), width, height)
    assert len(lines) <= height - 1
    assert all(len(line) <= width for line in lines)
    assert len(lines[-1].rstrip()) <= width - 4
    rows = sum("complete" in line for line in lines[:-1])  # the last line is the caption
    assert rows == height - CHROME_LINES
    assert f"+{3 * height - rows} earlier" in lines[-1]


def test_plain_output_ends_with_one_summary() -> None:
    out = io.StringIO()
    view = LiveView(out=out, interactive=False)
    for i in range(3):
        view(_record(i, outcome="client-gone" if i == 2 else "complete"))
    view.stop()
    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    assert lines[-1] == "retimer: 3 streams · 2 complete, 1 client-gone"
    quiet = io.StringIO()
    LiveView(out=quiet, interactive=False).stop()  # nothing went through: nothing to sum up
    assert quiet.getvalue() == ""


def test_rows_name_the_effective_profile() -> None:
    """A run with overrides shows what ran (`openai-gpt-5 tps=10`), not only the base name."""
    from retimer.cli.proxy.liveview import plain_line

    record = _record(0, profile="openai-gpt-5", effective_profile="openai-gpt-5 tps=10")
    assert " openai-gpt-5 tps=10 " in plain_line(record)
    lines = _render(streams_table([record], width=200), 200)
    assert any("openai-gpt-5 tps=10" in line for line in lines)
