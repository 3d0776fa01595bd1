"""The real `retimer` in a real terminal (tmux), as a user at 80x24 or 200 columns sees it.

Streams go through it from a fake upstream; the screen (tmux capture-pane) must show every
finished stream's token count and TTFT whole, unique headings, a count of the streams that no
longer fit, and after Ctrl-C one copy of the table and its summary, nothing doubled."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.proxy import free_port
from tests.support.tmux import EXITED, TITLE, Tmux, _records, _send, _table, _wait_listening
from tests.support.upstream import FakeLLM

pytestmark = pytest.mark.fake_llm(bursts=3, burst_gap=0.05)


@pytest.mark.parametrize(("width", "height", "streams"), [(80, 24, 25), (200, 40, 6)])
def test_live_view_in_a_terminal(tmp_path: Path, fake: FakeLLM, width: int, height: int,
                                 streams: int) -> None:
    port, log = free_port(), tmp_path / "records.jsonl"
    command = [sys.executable, "-m", "retimer", "--listen-port", str(port),
               "--set", f"confdir={tmp_path / 'confdir'}", "--log", str(log),
               "--profile", "groq", "--ttft", "1200ms"]  # TTFTs with a thousands separator
    tmux = Tmux(tmp_path, width, height)
    try:
        tmux.start(command)
        _wait_listening(port, tmux)
        _send(f"http://127.0.0.1:{port}", fake.url, streams)
        records = _records(log, streams)
        assert len(records) == streams
        total, done = f"{streams} streams", f"{streams} complete"
        lines = tmux.wait_for(lambda s: any(x.startswith(total) and done in x for x in s), done)
        assert all(len(x) <= width for x in lines)
        headings, rows, summary = _table(lines)
        assert len(headings) == len(set(headings)), headings
        assert {"tokens", "TTFT ms", "url"} <= set(headings)
        assert summary.startswith(f"{total} · ")
        newest_first = records[::-1]
        hidden = streams - len(rows)
        if len(rows) < streams:  # more streams than rows: the rest are counted
            assert rows and f"+{hidden} earlier not shown" in summary
            assert len(rows) == height - 5  # the screen is used, but not overflowed
        else:
            assert "earlier" not in summary
        for row, rec in zip(rows, newest_first, strict=False):
            cells = row.split()
            assert f"{rec['emitted']['tokens']:,}" in cells, (row, rec["emitted"])
            assert f"{rec['emitted']['ttft_ms']:,.0f}" in cells, (row, rec["emitted"])
            assert row.rstrip().endswith(f"stream={rec['url'].rsplit('=', 1)[1]}"), row
            assert not any("…" in c and c[0].isdigit() for c in cells), row
        if width >= 200:  # room for everything: every column, whole URLs
            assert {"format", "profile", "target ms", "tok/s", "target tok/s", "flow"} <= set(headings)
            assert all(rec["url"] in "\n".join(rows) for rec in records)

        tmux.keys("C-c")
        final = tmux.wait_for(lambda s: any(x.startswith(EXITED) for x in s), "exit", 30)
        assert f"{EXITED} 0" in final
        history = tmux.screen(history=True)
        assert sum(x.startswith(TITLE) for x in history) == 1, "\n".join(history)
        assert sum(x.startswith(total) for x in history) == 1, "\n".join(history)
        assert "Traceback" not in "\n".join(history)
        after, rows_after, summary_after = _table(history)  # its title has scrolled off
        assert (after, rows_after) == (headings, rows) and summary_after == summary
    finally:
        tmux.close()
