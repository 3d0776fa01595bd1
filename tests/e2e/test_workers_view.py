"""The live view of `retimer --workers 2` in a real terminal (tmux, 80 columns): one table and
one summary that count the streams of both workers, and one copy of it after Ctrl-C."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from tests.support.proxy import free_port
from tests.support.tmux import EXITED, TITLE, Tmux, _records, _send, _table, _wait_listening
from tests.support.upstream import FakeLLM

pytestmark = pytest.mark.fake_llm(bursts=3, burst_gap=0.05)


def test_the_live_view_counts_the_streams_of_every_worker(tmp_path: Path, fake: FakeLLM) -> None:
    port, log, streams = free_port(), tmp_path / "records.jsonl", 16
    command = [sys.executable, "-m", "retimer", "--workers", "2", "--listen-port", str(port),
               "--set", f"confdir={tmp_path / 'confdir'}", "--log", str(log),
               "--profile", "groq", "--ttft", "300ms", "--tps", "60"]
    tmux = Tmux(tmp_path, 80, 40)
    try:
        tmux.start(command)
        _wait_listening(port, tmux)
        tmux.wait_for(lambda s: any(x.startswith(TITLE) for x in s), "the table")
        sender = threading.Thread(target=_send, args=(f"http://127.0.0.1:{port}", fake.url, streams))
        sender.start()  # while they play, the workers' streams in flight are on the screen too
        tmux.wait_for(lambda s: any(x.startswith(TITLE) for x in s)
                      and any(" streaming" in x and "streams" in x for x in s), "streaming")
        sender.join()
        records = _records(log, streams)
        assert len(records) == streams and {r["worker"] for r in records} == {1, 2}
        total, done = f"{streams} streams", f"{streams} complete"
        lines = tmux.wait_for(lambda s: any(x.startswith(total) and done in x for x in s), done)
        assert all(len(x) <= 80 for x in lines)
        _, rows, summary = _table(lines)
        assert len(rows) == streams and summary.startswith(f"{total} · ")
        for rec in records:  # every worker's stream has its row, with its whole token count
            assert any(row.rstrip().endswith(f"stream={rec['url'].rsplit('=', 1)[1]}")
                       and f"{rec['emitted']['tokens']:,}" in row.split() for row in rows)
        tmux.keys("C-c")
        final = tmux.wait_for(lambda s: any(x.startswith(EXITED) for x in s), "exit", 30)
        assert f"{EXITED} 0" in final
        history = "\n".join(tmux.screen(history=True))
        assert history.count("retimer listening on") == 1
        assert history.count(TITLE) == 1 and history.count(f"{total} · ") == 1, history
        assert "Traceback" not in history
    finally:
        tmux.close()


def test_retimer_browser_with_two_workers(tmp_path: Path) -> None:
    """Headless Chromium through `retimer browser --workers 2`: the page's stream is re-timed
    and whole, Ctrl-C stops the workers and the browser, and nothing is left behind."""
    import json
    import signal

    from tests.support.browser_run import INTERCEPT, PAGE, TEXT, run_retimer_browser, token_curve
    from tests.support.stream_bodies import make_openai_stream

    log = tmp_path / "records.jsonl"
    with FakeLLM(make_openai_stream(TEXT), tls=True) as site:
        site.pages["/"] = PAGE
        done, report = run_retimer_browser(
            tmp_path, site, "chromium", "--workers", "2", "--listen-port", "0",
            "--set", f"confdir={tmp_path / 'confdir'}", "--log", str(log),
            "--ttft", "200ms", "--tps", "200", "--jitter", "0", *INTERCEPT,
            "--set", f"ssl_verify_upstream_trusted_ca={site.ca_path}", stop=signal.SIGINT)
    assert done.returncode == 0, done.stderr
    assert report["text"] == TEXT
    (record,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert record["worker"] in (1, 2)
    assert record["emitted"]["tokens"] == sum(r["tokens"] for r in report["reads"])
    assert token_curve(report)[0] >= 200 - 1  # the first token waited for the target
    assert "2 workers; opening Chromium through http://127.0.0.1:" in done.stdout
