"""bench.scaling works (no timing asserted: figures live in BENCHMARKS.md): the quick run drives
`retimer --workers 1` and `--workers 2` with the raw-socket client and every stream arrives
whole; a row that hangs is stopped at its timeout, its processes killed, and the run goes on;
the raw client's offline HTTP parsing gives the body however the reads were cut; the report's
verdicts follow the bounds."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import h11
import pytest

from bench import rawclient, scaling
from bench.harness import ROOT, stream_spec
from bench.scaling_report import done_when, held, model, others_pct, render, table

BODY = b"data: {\"a\": 1}\n\ndata: {\"b\": 2}\n\ndata: [DONE]\n\n"


def _chunked(body: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    pieces = [body[:10], body[10:31], body[31:]]
    return head + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def _client_conn() -> h11.Connection:
    conn = h11.Connection(h11.CLIENT)
    rawclient.request_bytes(conn, "POST", "http://up.test:1/v1/x?bench=a", True, {}, b"{}")
    return conn


def test_raw_client_parses_a_chunked_response_however_the_reads_were_cut() -> None:
    wire = _chunked(BODY)
    for cut in range(1, len(wire)):
        reads = [(1.0, wire[:cut]), (2.0, wire[cut:])]
        status, t_head, body = rawclient.parse_response(_client_conn(), reads)
        assert status == 200
        assert b"".join(d for _, d in body) == BODY
        assert t_head == (1.0 if b"\r\n\r\n" in wire[:cut] else 2.0)
        times = [t for t, _ in body]
        assert times == sorted(times)  # a piece keeps the time of the read that completed it
        first = b"".join(d for t, d in body if t == 1.0)
        assert BODY.startswith(first) and len(first) < cut  # only what the first read held


def test_raw_client_ends_a_close_delimited_body_with_the_connection() -> None:
    wire = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + BODY
    status, _, body = rawclient.parse_response(_client_conn(), [(1.0, wire)])
    assert status == 200 and b"".join(d for _, d in body) == BODY


def test_raw_client_sends_absolute_form_through_a_proxy_and_origin_form_direct() -> None:
    proxied = rawclient.request_bytes(h11.Connection(h11.CLIENT), "GET", "http://up.test:1/w?q=1", True, {})
    direct = rawclient.request_bytes(h11.Connection(h11.CLIENT), "GET", "http://up.test:1/w?q=1", False, {})
    assert proxied.startswith(b"GET http://up.test:1/w?q=1 HTTP/1.1\r\n")
    assert direct.startswith(b"GET /w?q=1 HTTP/1.1\r\n")


def _row(workers: int, streams: int, spread: float, p99: float, ttft: float = 1.0,
         incomplete: int = 0) -> dict[str, Any]:
    cpu = {"pct": 50.0, "cpu_s": 1.0, "span_s": 2.0}
    return {"workers": workers, "streams": streams, "start_spread_s": spread, "target_tps": 50.0,
            "late_client_ms": {"p50": 1.0, "p99": p99, "max": p99 + 1},
            "client_ttft_err_p": {"p50": 1.0, "p99": ttft, "max": ttft},
            "proxy_ttft_err_p": {"p50": 1.0, "p99": ttft, "max": ttft},
            "cpu": {"proxy": cpu, "client": cpu, "upstream": cpu, "core0": cpu, "core1": cpu},
            "cpu_us_per_event": 100.0, "served_by_worker": {"1": streams}, "incomplete": incomplete}


def test_report_verdicts_follow_the_bounds() -> None:
    rows = [_row(2, 100, 1.0, 2.0), _row(2, 200, 1.0, 4.9), _row(2, 300, 1.0, 5.1),
            _row(2, 200, 0.0, 30.0, ttft=60.0), _row(1, 100, 1.0, 6.0), _row(1, 200, 1.0, 1.0, incomplete=1),
            _row(1, 300, 1.0, 1.0)]  # held above a count that was not: not "held"
    assert others_pct(rows[0]) == 0.0  # 2 cores at 50 %, less our three at 50 % each: nothing left
    assert held(rows, 2) == (200, 300)
    assert held(rows, 1) == (None, 100)
    text = done_when(rows)
    assert "p99 4.90 ms (bound 5 ms): **met**" in text
    assert "(bound 50 ms): **not met**" in text
    assert "this run has none" not in text
    # a run of `--workers 1` alone (issue 41's) is not called a quick run
    assert done_when([_row(1, 200, 1.0, 4.0)]).splitlines()[0] == (
        "- (issue 15's figures need `--workers 2` rows at 200 streams; this run has none)")
    m = model(rows, nproc=2)
    assert m is not None and m["streams"] == 200 and m["per_core"] == 200  # 1e6 / (100 us x 50)
    assert m["headroom"] == 200 * 100 * 50 / 1e6 / 1.0  # 2 cores - client and upstream's 1.0
    assert m["headroom_workers"] == 2
    fallback = model([_row(2, 100, 1.0, 9.0), _row(1, 100, 1.0, 1.0)], nproc=2)
    assert fallback is not None and fallback["headroom_workers"] == 1  # two workers held nothing
    assert fallback["headroom"] == 100 * 100 * 50 / 1e6 / 1.0


def test_quick_run_drives_one_and_two_workers_and_every_stream_arrives_whole(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "bench.scaling", "--quick", "--results", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    res = json.loads((tmp_path / "scaling-latest.json").read_text())
    rows = res["rows"]
    plan = res["plan"]
    cases = [(n, 1.0) for n in plan["spread"]] + [(plan["burst"], 0.0)]
    assert sorted((r["workers"], r["streams"], r["start_spread_s"]) for r in rows) == sorted(
        (w, n, s) for w in (1, 2) for n, s in cases)
    for r in rows:
        assert r["streams"] == sum(r["served_by_worker"].values())
        assert r["incomplete"] == 0 and r["token_count_mismatches"] == 0 and r["upstream_bound"] == 0
        assert r["tokens"] == plan["tokens"]
        assert set(r["cpu"]) >= {"proxy", "client", "upstream", "core0"}
        assert r["cpu_us_per_event"] > 0
    assert render(res) == (tmp_path / "scaling-latest.md").read_text()


def test_the_timeline_buckets_each_tokens_lateness_by_half_second_since_the_first_request() -> None:
    from bench.timeline import timeline

    results = [{"t_sent": 10.0, "events": [(10.1, 1), (10.6, 1), (10.7, 1)]},
               {"t_sent": 10.2, "events": [(10.3, 1), (11.2, 1)]}]
    analysed = [{"late_ms": [1.0, 7.0, 3.0]}, {"late_ms": [2.0, 9.0]}]
    rows = timeline(results, analysed)
    assert [(lo, n) for lo, n, *_ in rows] == [(0.0, 2), (0.5, 2), (1.0, 1)]
    assert rows[0][4] == 2.0 and rows[1][4] == 7.0 and rows[2][4] == 9.0  # the max of each
    assert [over for *_, over in rows] == [0.0, 0.5, 1.0]  # the share over 5 ms


def test_report_counts_a_timed_out_row_as_not_held_and_shows_it() -> None:
    stopped = scaling.timed_out_row(2, 200, 1.0, 96.0)
    rows = [_row(2, 100, 1.0, 2.0), stopped, _row(2, 300, 1.0, 1.0), _row(1, 200, 1.0, 1.0)]
    assert stopped["error"] == "timed out after 96 s"
    assert held(rows, 2) == (100, 200)
    assert "| 200 | within 1 s | 2 | **timed out after 96 s** |" + " - |" * 10 in table(rows)
    assert "200 started within 1 s, `--workers 2`: timed out after 96 s: **not met**" in done_when(rows)
    m = model(rows, nproc=2)
    assert m is not None and m["streams"] == 100  # from the row it held, not the stopped one


def test_a_row_timeout_follows_the_rows_size() -> None:
    full = scaling.row_timeout(400, 1.0, 200)  # 1 s spread, 0.4 s TTFT, 4 s of tokens
    assert full == round(3 * 5.4 + 0.05 * 400 + scaling.ROW_MARGIN_S)
    assert scaling.row_timeout(50, 1.0, 200) < full < scaling.row_timeout(400, 1.0, 2000)


def _running(pid: int) -> bool:
    """Whether a process exists and is not a zombie (a killed worker's parent may be gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_a_hung_row_is_stopped_reported_and_the_run_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The first row's stream goes to an upstream that takes the connection and never answers,
    so the client waits for ever; the row is stopped at its timeout, the proxy's parent and
    workers and the client are killed, and the next row runs on fresh ones."""
    real_row, real_timeout = scaling.run_row, scaling.row_timeout
    hung: dict[str, Any] = {}

    def first_row_hangs(client: Any, fake: Any, proxy: Any, n: int, *args: Any) -> dict[str, Any]:
        if hung:
            return real_row(client, fake, proxy, n, *args)
        parent = proxy.proxy.proc.pid
        hung.update(client=client.proc.pid, proxy=[parent, *scaling.children(parent)])
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen()
            url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1/chat/completions?bench=hung"
            client.streams(proxy.proxy.url, [{**stream_spec(fake, "openai", "hung"), "url": url}],
                           concurrent=True, raw=True)
        raise AssertionError("the hung stream ended")

    monkeypatch.setattr(scaling, "run_row", first_row_hangs)
    monkeypatch.setattr(scaling, "row_timeout", lambda n, spread, tokens: 3.0 if spread else real_timeout(n, spread, tokens))
    plan = scaling.ScalePlan(workers=(2,), tokens=10, spread=(2,), burst=2)
    rows = scaling.measure(plan, seed=3, tmp=tmp_path)

    assert len(hung["proxy"]) == 3  # the parent and its two workers
    assert not any(_running(pid) for pid in [hung["client"], *hung["proxy"]])
    assert rows[0] == scaling.timed_out_row(2, 2, 1.0, 3.0)
    assert "--workers 2, 2 streams: timed out after 3 s" in capsys.readouterr().out
    after = rows[1]  # the burst row, on a fresh proxy and client
    assert (after["workers"], after["streams"], after["start_spread_s"]) == (2, 2, 0.0)
    assert after["incomplete"] == 0 and after["tokens"] == plan.tokens
    assert sum(after["served_by_worker"].values()) == 2
