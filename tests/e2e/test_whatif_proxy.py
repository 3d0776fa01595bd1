"""`retimer whatif` on a session recorded through the real proxy, as a user runs it.

The real `retimer` re-times a small agent-like session from a fake upstream, driven by the
official openai and anthropic SDKs: a first call, a pause (a tool), two calls in parallel (one
with a long prompt, one showing its reasoning), a pause, a follow-up whose prompt repeats the
long one (the prompt cache), a last call. Then `retimer whatif LOG --json` (a subprocess) must
add up the records exactly, and give every built-in profile figures within 10 % of the timing
model's expectation, taken here from real `StreamTiming` draws (tests/support/whatif_draws.py) and this
file's own session arithmetic. The report's section is checked in Chromium, the terminal table
in tmux at 80 and 200 columns.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import anthropic
import numpy as np
import openai
import pytest

from retimer.profile.loader import builtin_profiles
from retimer.report.whatif import whatif
from retimer.report.whatif_view import duration_text
from tests.support.proxy import RetimerProxy, run_cli
from tests.support.records import streams
from tests.support.upstream import FakeLLM
from tests.support.whatif_draws import draws_for, monte_carlo

CHROMIUM = "/usr/bin/chromium"
TIMED = [p for p in builtin_profiles() if not p.passthrough]
LONG = " ".join(f"line {i}: the function returns the parsed value or raises." for i in range(150))
THINKING = "anthropic/llm-anthropic-sonnet45-thinking-signature.sse"
TEXT = "openai-chat/gpt4o-text-include-usage.sse"
TOOLS = "openai-chat/gpt4o-parallel-tool-calls-usage.sse"


def _openai(client: openai.OpenAI, messages: list[dict], fixture: str,
            ready: threading.Barrier | None = None) -> None:
    """A streamed call read to the body's end. The SDK's own iteration stops at `[DONE]` and
    hangs up before the chunked body's end; when the proxy passes `[DONE]` as it comes (a
    passthrough or upstream-bound stream) a loaded machine can see the client leave first, and
    the record says `client-gone` (with every token it passed: tests/proxy/test_bridge_client_gone.py),
    which whatif leaves out."""
    if ready is not None:
        ready.wait(10)
    with client.chat.completions.with_streaming_response.create(
            model="gpt-test", messages=messages, stream=True,
            extra_headers={"x-fake-fixture": fixture}) as response:
        assert b"data: [DONE]" in response.read()


def _anthropic(client: anthropic.Anthropic, text: str, ready: threading.Barrier) -> None:
    ready.wait(10)
    with client.messages.stream(model="claude-test", max_tokens=2000,
                                messages=[{"role": "user", "content": text}],
                                extra_headers={"x-fake-fixture": THINKING}) as stream:
        assert stream.get_final_message().content


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("whatif-proxy")
    long_messages = [{"role": "system", "content": LONG}, {"role": "user", "content": "fix it"}]
    with FakeLLM(per_event_gap=0.002, first_delay=0.01) as fake, \
            RetimerProxy(tmp, "--profile", "cerebras") as proxy:
        oa = openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-test", max_retries=0,
                           http_client=openai.DefaultHttpxClient(proxy=proxy.url))
        an = anthropic.Anthropic(base_url=fake.url, api_key="sk-ant-test", max_retries=0,
                                 http_client=anthropic.DefaultHttpxClient(proxy=proxy.url))
        _openai(oa, [{"role": "user", "content": "list the files"}], TOOLS)
        time.sleep(0.4)  # a tool runs
        ready = threading.Barrier(2)
        parallel = [threading.Thread(target=_openai, args=(oa, long_messages, TEXT, ready)),
                    threading.Thread(target=_anthropic, args=(an, "think first", ready))]
        for t in parallel:
            t.start()
        for t in parallel:
            t.join(30)
        time.sleep(0.3)  # the human reads
        _openai(oa, [*long_messages, {"role": "assistant", "content": "done"},
                     {"role": "user", "content": "and the tests"}], TEXT)
        time.sleep(0.15)
        _openai(oa, [{"role": "user", "content": "thanks"}], TEXT)
        records = proxy.records(5)
    assert len(records) == 5 and all(r["outcome"] == "complete" for r in records)
    return proxy.log_path, records


def test_a_session_recorded_at_the_upstreams_own_speed(tmp_path: Path) -> None:
    """`--profile passthrough` records the prompt's size and what a usual prompt cache would
    hold, so whatif times its calls from their real prompts."""
    long_messages = [{"role": "system", "content": LONG}, {"role": "user", "content": "fix it"}]
    with FakeLLM(per_event_gap=0.002) as fake, \
            RetimerProxy(tmp_path, "--profile", "passthrough") as proxy:
        oa = openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-test", max_retries=0,
                           http_client=openai.DefaultHttpxClient(proxy=proxy.url))
        _openai(oa, long_messages, TEXT)
        _openai(oa, [*long_messages, {"role": "user", "content": "again"}], TEXT)
        recs = proxy.records(2)
    assert [r["profile"] for r in recs] == ["passthrough"] * 2
    prompts = [r["model"]["prompt_tokens"] for r in recs]
    assert prompts[0] > 1500 and prompts[1] > prompts[0]
    assert recs[0]["model"]["cached_tokens"] == 0 and recs[1]["model"]["cached_tokens"] > 1024
    doc = _whatif_json(proxy.log_path, "--profiles", "gpt-5")
    assert doc["sessions"][0]["prompt_unknown"] == 0 and doc["sessions"][0]["timed"] == 2, (
        json.dumps(doc["sessions"][0]), json.dumps(recs))


def _start(rec: dict[str, Any]) -> float:
    return datetime.fromisoformat(rec["time"]).timestamp()


def _union(intervals: list[tuple[float, float]]) -> float:
    """Length of a union of intervals, the plain way."""
    total, end = 0.0, -1e300
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def _session(starts: list[float], recorded: list[float], waits: list[float]) -> tuple[float, float]:
    """(waiting, total) under `waits`: periods from the recorded intervals, offsets kept."""
    calls = sorted(zip(starts, recorded, waits, strict=True))
    periods: list[list[tuple[float, float, float]]] = []
    for call in calls:
        if periods and call[0] <= max(s + r for s, r, _ in periods[-1]):
            periods[-1].append(call)
        else:
            periods.append([call])
    between = max(s + r for s, r, _ in calls) - calls[0][0] - sum(
        max(s + r for s, r, _ in p) - p[0][0] for p in periods)
    waiting = sum(max(s - p[0][0] + w for s, _, w in p) for p in periods)
    return waiting, between + waiting


def _whatif_json(log: Path, *args: str) -> dict[str, Any]:
    done = run_cli("whatif", str(log), "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_recorded_and_upstream_figures_add_up_the_records(session: tuple) -> None:
    log, recs = session
    doc = _whatif_json(log, "--per-call")
    (s,) = doc["sessions"]
    assert doc["by"] == "file" and s["calls"] == s["timed"] == 5 and s["prompt_unknown"] == 0
    assert doc["profiles"] == [p.name for p in TIMED]
    starts = [_start(r) for r in recs]
    for side, key in (("emitted", "recorded"), ("upstream", "upstream")):
        waits = [r[side]["duration_ms"] / 1000 for r in recs]
        intervals = [(a, a + w) for a, w in zip(starts, waits, strict=True)]
        assert s[key]["calls_s"] == pytest.approx(sum(waits), abs=0.002)
        if key == "recorded":
            assert s[key]["waiting_s"] == pytest.approx(_union(intervals), abs=0.002)
            span = max(b for _, b in intervals) - min(starts)
            assert s[key]["total_s"] == pytest.approx(span, abs=0.002)
            assert s["between_s"] == pytest.approx(span - _union(intervals), abs=0.002)
    # the session is what it was meant to be: two calls overlapped, pauses between the rest
    assert s["recorded"]["waiting_s"] < s["recorded"]["calls_s"] - 0.05
    assert s["between_s"] > 0.4 + 0.3
    assert any(r["model"]["cached_tokens"] > 0 for r in recs)  # the follow-up hit the cache
    assert any(r["emitted"]["channels"].get("reasoning") for r in recs)
    assert max(r["model"]["prompt_tokens"] for r in recs) > 1500


def test_every_builtin_profile_within_ten_percent_of_real_draws(session: tuple) -> None:
    log, recs = session
    doc = _whatif_json(log, "--per-call")
    (s,) = doc["sessions"]
    inproc = whatif(str(log), streams(recs), TIMED, keep_waits=True)
    assert inproc is not None
    recs = sorted(recs, key=_start)
    starts = [_start(r) for r in recs]
    recorded = [r["emitted"]["duration_ms"] / 1000 for r in recs]
    calls = [(r["emitted"]["tokens"], r["model"]["prompt_tokens"], r["model"]["cached_tokens"],
              bool(r["emitted"]["channels"].get("reasoning")), False) for r in recs]
    for i, (p, fig) in enumerate(zip(TIMED, s["profiles"], strict=True)):
        assert fig["profile"] == p.name
        drawn = monte_carlo(p, calls, draws_for(p), 100 + i)
        got = np.array(s["waits"][p.name])
        assert np.all(np.abs(got / drawn - 1) < 0.10), (p.name, got / drawn)
        waiting, total = _session(starts, recorded, drawn.tolist())
        assert fig["waiting_s"] == pytest.approx(waiting, rel=0.10), p.name
        assert fig["total_s"] == pytest.approx(total, rel=0.10), p.name
        assert fig["total_s"] == pytest.approx(s["between_s"] + fig["waiting_s"], abs=0.002)
        assert fig["waiting_s"] == pytest.approx(inproc.profiles[i].waiting_s, abs=0.001)


def test_profiles_with_overrides_and_the_default_spread(session: tuple) -> None:
    log, _ = session
    doc = _whatif_json(log, "--profiles", "cerebras,gpt-5:tps=40,thinking=high,o3")
    names = [p["profile"] for p in doc["sessions"][0]["profiles"]]
    assert names == ["cerebras-llama-3.3-70b", "openai-gpt-5 tps=40 thinking=high", "openai-o3"]
    figs = {p["profile"]: p for p in doc["sessions"][0]["profiles"]}
    slow = figs["openai-gpt-5 tps=40 thinking=high"]
    assert slow["hidden_s"] > 0 and figs["openai-o3"]["hidden_s"] == 0  # o3's thinking is off
    assert figs["cerebras-llama-3.3-70b"]["waiting_s"] < figs["openai-o3"]["waiting_s"] \
        < slow["waiting_s"]


def test_report_section_in_chromium(session: tuple, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    log, recs = session
    html = tmp_path / "r.html"
    done = run_cli("report", str(log), "-o", str(html))
    assert done.returncode == 0, done.stderr
    figures = whatif(log.name, streams(recs), TIMED)  # unrounded, as the page has them
    assert figures is not None
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=args, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(html.resolve().as_uri())
            seen = page.evaluate("""() => ({
                heading: document.querySelector('#whatif h2')?.textContent,
                rows: [...document.querySelectorAll('#whatif table.whatif tbody tr')]
                    .map(tr => [...tr.cells].map(td => td.textContent)),
                bars: document.querySelectorAll('#whatif svg.whatif rect.bar:not(.base)').length,
                base: document.querySelectorAll('#whatif svg.whatif rect.base').length,
                width: document.querySelector('#whatif svg.whatif').getBoundingClientRect().width,
            })""")
            shot = page.locator("#whatif").screenshot()
        finally:
            browser.close()
    assert seen["heading"] == "This session at other speeds"
    assert len(seen["rows"]) == 2 + len(TIMED) and seen["bars"] == 2 + len(TIMED)
    assert seen["base"] == 2 + len(TIMED) and 300 < seen["width"] <= 1200
    assert seen["rows"][0][:2] == ["as recorded", duration_text(figures.recorded.waiting_s)]
    assert [r[0] for r in seen["rows"][2:]] == [p.name for p in TIMED]
    assert [r[1] for r in seen["rows"][2:]] == [duration_text(p.waiting_s)
                                               for p in figures.profiles]
    (tmp_path / "whatif.png").write_bytes(shot)
    assert len(shot) > 20_000  # a drawn table and chart, not an empty box


@pytest.mark.parametrize("width", [80, 200])
def test_terminal_table_in_tmux(session: tuple, tmp_path: Path, width: int) -> None:
    log, _ = session
    tmux = shutil.which("tmux")
    assert tmux, "tmux is needed (.ci/run installs it)"
    base = [tmux, "-L", f"retimer-whatif-{os.getpid()}-{width}", "-f", "/dev/null"]
    command = shlex.join([sys.executable, "-m", "retimer", "whatif", str(log)])
    line = f"env -u COLUMNS -u LINES {command}; echo WHATIF-EXITED $?; sleep 600"
    subprocess.run([*base, "new-session", "-d", "-x", str(width), "-y", "60", line], check=True,
                   timeout=30)
    try:
        deadline = time.monotonic() + 60
        while True:
            out = subprocess.run([*base, "capture-pane", "-p", "-S", "-"], capture_output=True,
                                 text=True, check=True, timeout=30).stdout
            if "WHATIF-EXITED" in out or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        subprocess.run([*base, "kill-server"], capture_output=True, check=False)
    lines = out.rstrip("\n").split("\n")
    assert "WHATIF-EXITED 0" in out, out
    assert all(len(x) <= width for x in lines)
    table = [x for x in lines if x.split() and x.split()[0] in {p.name for p in TIMED}]
    assert [x.split()[0] for x in table] == [p.name for p in TIMED], out  # whole names, in order
    assert all(len(x.split()) >= 5 for x in table), out  # name, waiting, change, total, change
    assert any(x.strip().startswith("as recorded") for x in lines)
    assert ("between calls)" in out) is (width >= 120)  # the bar column only when it fits
